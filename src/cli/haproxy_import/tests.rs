use super::acl::{Atom, NamePattern, Spelling, label_suffix_regex, sni_atom};
use super::parse::{millis, words};
use super::toml::duration;
use super::{ImportError, Translation};

/// The translation, with the pattern files `files` names.
fn translate_with(text: &str, files: &[(&str, &str)]) -> Result<Translation, ImportError> {
    super::translate(text, "t.cfg", &|name| {
        files
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, text)| text.to_string())
            .ok_or_else(|| "No such file or directory".to_owned())
    })
}

pub(super) fn translate(text: &str, _source: &str) -> Result<Translation, ImportError> {
    translate_with(text, &[])
}
use crate::config::Config;

pub(super) fn load(toml: &str) -> Config {
    Config::from_toml(toml, std::path::Path::new("imported.toml"))
        .unwrap_or_else(|e| panic!("the translation does not load:\n{e}\n{toml}"))
}

pub(super) fn not_lines(t: &Translation) -> Vec<usize> {
    t.not_translated.iter().map(|n| n.0).collect()
}

pub(super) const EDGE: &str = "defaults\n    mode tcp\n    timeout connect 5s\n    timeout client 1m\n    timeout server 1m\n    timeout client-fin 10s\n    timeout server-fin 10s\nfrontend fe\n    bind 127.0.0.1:8443\n    tcp-request inspect-delay 5s\n";
const BACKEND: &str = "backend be\n    server s 192.0.2.1:443\n";

pub(super) fn edge(frontend: &str) -> Translation {
    translate(&format!("{EDGE}{frontend}{BACKEND}"), "t.cfg").unwrap()
}

#[test]
fn words_keep_regex_escapes_and_drop_comments() {
    assert_eq!(
        words(r"acl a req.ssl_sni -m reg -i ^([a-z0-9-]+\.)*example\.com$ # the domain"),
        [
            "acl",
            "a",
            "req.ssl_sni",
            "-m",
            "reg",
            "-i",
            r"^([a-z0-9-]+\.)*example\.com$"
        ]
    );
    assert_eq!(
        words(r#"log-format "a b" c\ d"#),
        ["log-format", "a b", "c d"]
    );
    assert!(words("   # only a comment").is_empty());
}

#[test]
fn times_convert_to_the_largest_exact_unit() {
    assert_eq!(millis("5s"), Some(5000));
    assert_eq!(millis("1500"), Some(1500));
    assert_eq!(millis("10m"), Some(600_000));
    assert_eq!(millis("5x"), None);
    assert_eq!(duration(600_000), "10m");
    assert_eq!(duration(1500), "1500ms");
    assert_eq!(duration(86_400_000), "24h");
}

#[test]
fn label_suffix_regexes_become_a_name_and_its_wildcard() {
    let apex_and_below = vec![
        NamePattern::Exact("example.com".into()),
        NamePattern::Below("example.com".into()),
    ];
    assert_eq!(
        label_suffix_regex(r"^([a-z0-9-]+\.)*example\.com$"),
        Some(apex_and_below.clone())
    );
    assert_eq!(
        label_suffix_regex(r"^(?:[-a-z0-9]+\.)*example\.com$"),
        Some(apex_and_below.clone())
    );
    assert_eq!(
        label_suffix_regex(r"^(?:[a-zA-Z0-9-]+\.)*example\.com$"),
        Some(apex_and_below)
    );
    assert_eq!(
        label_suffix_regex(r"^([a-z0-9-]+\.)+example\.com$"),
        Some(vec![NamePattern::Below("example.com".into())])
    );
    assert_eq!(
        label_suffix_regex(r"^example\.com$"),
        Some(vec![NamePattern::Exact("example.com".into())])
    );
    // Unescaped dots match any character: not a name.
    assert_eq!(label_suffix_regex(r"^([a-z0-9-]+\.)*example.com$"), None);
    assert_eq!(label_suffix_regex(r"^(.+\.)?example\.com$"), None);
    assert_eq!(
        label_suffix_regex(r"([a-z0-9-]+\.)*example\.com$"),
        None,
        "unanchored"
    );
}

#[test]
fn only_suffix_matches_on_label_boundaries_are_translated() {
    let w = |s: &str| words(s);
    assert_eq!(
        sni_atom(&w("req.ssl_sni -i -m end .example.com")),
        Ok(Atom::Sni(
            vec![NamePattern::Below("example.com".into())],
            Spelling::default()
        ))
    );
    assert_eq!(
        sni_atom(&w("req.ssl_sni -m end .example.com")),
        Ok(Atom::Sni(
            vec![NamePattern::Below("example.com".into())],
            Spelling {
                cased: true,
                ldh: false
            }
        ))
    );
    assert_eq!(
        sni_atom(&w("req_ssl_sni -i www.example.com api.example.com")),
        Ok(Atom::Sni(
            vec![
                NamePattern::Exact("www.example.com".into()),
                NamePattern::Exact("api.example.com".into())
            ],
            Spelling::default()
        ))
    );
    assert_eq!(
        sni_atom(&w("req.ssl_sni -m dom .example.com")),
        Ok(Atom::Sni(
            vec![
                NamePattern::Exact("example.com".into()),
                NamePattern::Below("example.com".into())
            ],
            Spelling {
                cased: true,
                ldh: false
            }
        ))
    );
    assert!(sni_atom(&w("req.ssl_sni -m dom Example.com")).is_err());
    assert!(sni_atom(&w("req.ssl_sni -m dom exa*mple.com")).is_err());
    let end = sni_atom(&w("req.ssl_sni -m end example.com")).unwrap_err();
    assert!(end.contains("badexample.com"), "{end}");
    assert!(sni_atom(&w("req.ssl_sni -m beg www.")).is_err());
    assert!(sni_atom(&w("req.ssl_sni -f /etc/haproxy/sites.lst")).is_err());
    assert!(
        sni_atom(&w("req.ssl_sni WWW.example.com")).is_err(),
        "case-sensitive without -i"
    );
}

#[test]
fn the_seed_template_translates_completely() {
    let text = include_str!("../../../tests/data/haproxy/tls-edge-failover.cfg");
    let t = translate(text, "tls-edge-failover.cfg").unwrap();
    assert_eq!(t.not_translated, Vec::new(), "{}", t.toml);
    let config = load(&t.toml);
    assert_eq!(config.global.max_connections, 2048);
    let l = config.listener("home_https").unwrap();
    assert_eq!(l.limits.connections_per_source.map(|n| n.get()), Some(100));
    let attempts = l.limits.attempts_per_source.unwrap();
    assert_eq!(
        (attempts.count.get(), attempts.period),
        (30, std::time::Duration::from_secs(1))
    );
    assert_eq!(l.limits.rate_per_source, None);
    assert_eq!(l.half_close_timeout, std::time::Duration::from_secs(15));
    // Every line of the template is accounted for in a comment.
    for (no, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || ["global", "defaults"].contains(&line) {
            continue;
        }
        // Named by what they are: the rules by the route they became.
        if line.starts_with("tcp-request connection track-sc0") {
            assert!(t.toml.contains("track-sc0 src;"));
            continue;
        }
        if line.starts_with("tcp-request content") || line.starts_with("acl allowed_sni") {
            assert!(
                t.toml
                    .contains("sni = [\"example.com\", \"*.example.com\"]")
            );
            continue;
        }
        assert!(
            t.toml.contains(line) || t.toml.contains(&format!("line {}:", no + 1)),
            "line {} `{line}` is not named in:\n{}",
            no + 1,
            t.toml
        );
    }
}

#[test]
fn a_stick_table_s_size_becomes_max_sources_and_a_short_expire_is_named() {
    for (size, expected) in [("100k", 102_400), ("1m", 1_048_576), ("5000", 5_000)] {
        let t = edge(&format!(
            "    stick-table type ip size {size} expire 1h store conn_rate(10s)\n    tcp-request connection track-sc0 src\n    tcp-request connection reject if {{ sc0_conn_rate gt 25 }}\n    default_backend be\n"
        ));
        assert_eq!(not_lines(&t), Vec::<usize>::new(), "{}", t.toml);
        let config = load(&t.toml);
        let limits = &config.listener("fe").unwrap().limits;
        assert_eq!(limits.max_sources.get(), expected, "{size}");
        assert!(!t.toml.contains("stricter"), "{}", t.toml);
    }
    // An expire shorter than two periods forgets counts HAProxy would
    // read: snirelay keeps them, and says that it is stricter.
    let t = edge(
        "    stick-table type ip size 100k expire 5s store conn_rate(10s)\n    tcp-request connection track-sc0 src\n    tcp-request connection reject if { sc0_conn_rate gt 25 }\n    default_backend be\n",
    );
    assert_eq!(not_lines(&t), Vec::<usize>::new(), "{}", t.toml);
    assert!(
        t.toml.contains(
            "expire 5s: snirelay keeps a source's conn_rate count until it reads 0 (20s)"
        ),
        "{}",
        t.toml
    );
    // A size snirelay cannot keep is not translated.
    let t = edge(
        "    stick-table type ip size 20m expire 1h store conn_rate(10s)\n    tcp-request connection track-sc0 src\n    tcp-request connection reject if { sc0_conn_rate gt 25 }\n    default_backend be\n",
    );
    assert_eq!(not_lines(&t), vec![11], "{}", t.toml);
}

#[test]
fn conn_rate_becomes_the_attempts_in_its_period() {
    let t = edge(
        "    stick-table type ip size 1m expire 1m store conn_cur,conn_rate(10s)\n    tcp-request connection track-sc0 src\n    tcp-request connection reject if { sc0_conn_rate gt 25 }\n    tcp-request connection reject if { sc0_conn_cur ge 21 }\n    default_backend be\n",
    );
    assert_eq!(not_lines(&t), Vec::<usize>::new(), "{}", t.toml);
    let config = load(&t.toml);
    let limits = &config.listener("fe").unwrap().limits;
    let attempts = limits.attempts_per_source.unwrap();
    assert_eq!(
        (attempts.count.get(), attempts.period),
        (25, std::time::Duration::from_secs(10))
    );
    assert_eq!(
        limits.connections_per_source.map(|n| n.get()),
        Some(20),
        "ge 21: 20 allowed"
    );
    assert!(
        t.toml.contains(
            "refused past 25 attempts from one source, refused ones included, counted over 10s"
        ),
        "{}",
        t.toml
    );
    // sc1 tracked the same way, src_conn_rate, and ge.
    for (track, fetch) in [
        ("track-sc1", "sc1_conn_rate"),
        ("track-sc0", "src_conn_rate"),
    ] {
        let t = edge(&format!(
            "    stick-table type ip size 1m expire 1m store conn_rate(3s)\n    tcp-request connection {track} src\n    tcp-request connection reject if {{ {fetch} ge 10 }}\n    default_backend be\n"
        ));
        assert_eq!(not_lines(&t), Vec::<usize>::new(), "{}", t.toml);
        let a = load(&t.toml)
            .listener("fe")
            .unwrap()
            .limits
            .attempts_per_source
            .unwrap();
        assert_eq!(
            (a.count.get(), a.period),
            (9, std::time::Duration::from_secs(3))
        );
    }
    // A limit before the tracking never matches in HAProxy: reported.
    let t = edge(
        "    stick-table type ip size 1m expire 1m store conn_rate(1s)\n    tcp-request connection reject if { sc0_conn_rate gt 5 }\n    tcp-request connection track-sc0 src\n    default_backend be\n",
    );
    assert_eq!(not_lines(&t), vec![12], "{}", t.toml);
}

#[test]
fn without_a_per_source_limit_the_default_limit_is_turned_off() {
    let t = edge("    default_backend be\n");
    let config = load(&t.toml);
    assert_eq!(
        config.listener("fe").unwrap().limits.connections_per_source,
        None
    );
}

#[test]
fn a_refused_name_below_an_accepted_suffix_is_reported_not_approximated() {
    let t = edge(
        "    tcp-request content reject if { req.ssl_sni -i admin.example.com }\n    tcp-request content accept if { req.ssl_sni -m end .example.com }\n    tcp-request content reject\n    default_backend be\n",
    );
    let not = not_lines(&t);
    for line in 11..=14 {
        assert!(
            not.contains(&line),
            "line {line} should be reported: {}",
            t.toml
        );
    }
    let why = &t.not_translated.iter().find(|n| n.0 == 11).unwrap().2;
    assert!(
        why.contains("`admin.example.com` goes to no backend (refused) in HAProxy"),
        "{why}"
    );
}

#[test]
fn use_backend_rules_become_routes_with_the_default_as_star() {
    let t = translate(
        &format!("{EDGE}    tcp-request content accept if {{ req.ssl_hello_type 1 }}\n    use_backend api if {{ req.ssl_sni -i api.example.com }}\n    default_backend be\nbackend api\n    server a 192.0.2.2:443 send-proxy\n{BACKEND}"),
        "t.cfg",
    )
    .unwrap();
    assert_eq!(not_lines(&t), Vec::<usize>::new(), "{}", t.toml);
    let config = load(&t.toml);
    let l = config.listener("fe").unwrap();
    let sni = |s: &str| crate::wire::sni::Sni::parse(s.as_bytes()).unwrap();
    let backend_of = |s: &str| {
        l.routes[l.matcher().find(&sni(s)).unwrap()[0]]
            .backend
            .name
            .clone()
    };
    assert_eq!(backend_of("api.example.com"), "api");
    assert_eq!(backend_of("www.example.com"), "be");
    assert!(t.toml.contains("no_sni = \"be\""), "{}", t.toml);
    assert!(t.toml.contains("proxy_protocol = \"v1\""), "{}", t.toml);
}

#[test]
fn source_on_a_backend_and_a_server_becomes_source_and_usesrc_client() {
    let t = translate(
        &format!(
            "{EDGE}    tcp-request content accept if {{ req.ssl_hello_type 1 }}\n    \
             use_backend legacy if {{ req.ssl_sni -i legacy.example.com }}\n    \
             use_backend plain if {{ req.ssl_sni -i plain.example.com }}\n    \
             default_backend be\nbackend be\n    source 192.0.2.10\n    \
             server s 192.0.2.1:443\n    server t 192.0.2.2:443 source 192.0.2.11:1024-65535\n    \
             server u [2001:db8::1]:443 source ipv6@2001:db8::9:0\n\
             backend legacy\n    source 0.0.0.0 usesrc clientip\n    server l 192.0.2.3:443\n\
             backend plain\n    source 0.0.0.0\n    server p 192.0.2.4:443\n"
        ),
        "t.cfg",
    )
    .unwrap();
    assert_eq!(not_lines(&t), Vec::<usize>::new(), "{}", t.toml);
    let config = load(&t.toml);
    let source = |b: &str| format!("{:?}", config.backends[b].egress);
    assert!(
        t.toml.contains("source = { addresses = [\"192.0.2.10\"] }"),
        "{}",
        t.toml
    );
    assert!(
        t.toml.contains(
            "{ address = \"192.0.2.2:443\", source = { addresses = [\"192.0.2.11\"], ports = \"1024-65535\" } }"
        ),
        "{}",
        t.toml
    );
    assert!(
        t.toml
            .contains("source = { addresses = [\"2001:db8::9\"] }"),
        "{}",
        t.toml
    );
    assert!(source("legacy").contains("Client"), "{}", source("legacy"));
    assert!(source("plain").contains("Host"), "{}", source("plain"));
    // What has no equivalent is reported, not approximated.
    for (line, why) in [
        ("source 192.0.2.10:1024", "one fixed source port"),
        ("source 192.0.2.10 usesrc 192.0.2.99", "usesrc 192.0.2.99"),
        ("source 192.0.2.10 interface eth0", "interface"),
    ] {
        let t = translate(
            &format!(
                "{EDGE}    default_backend be\nbackend be\n    {line}\n    server s 192.0.2.1:443\n"
            ),
            "t.cfg",
        )
        .unwrap();
        let reported = t.not_translated.iter().find(|n| n.1.contains(line));
        assert!(
            reported.is_some_and(|n| n.2.contains(why)),
            "{line}: {:?}",
            t.not_translated
        );
    }
}

#[test]
fn http_mode_and_empty_files_have_nothing_to_translate() {
    assert_eq!(
        translate("defaults\n    mode http\nfrontend f\n    bind :80\n", "x").unwrap_err(),
        ImportError::NoTcpFrontend
    );
    assert_eq!(translate("", "x").unwrap_err(), ImportError::NoTcpFrontend);
}

#[test]
fn differing_client_and_server_timeouts_are_reported() {
    let t = translate(
        "defaults\n    mode tcp\n    timeout client 30s\n    timeout server 60s\nfrontend fe\n    bind 127.0.0.1:1\n    tcp-request inspect-delay 5s\n    default_backend be\nbackend be\n    server s 192.0.2.1:443\n",
        "t.cfg",
    )
    .unwrap();
    assert_eq!(not_lines(&t), vec![3, 4], "{}", t.toml);
    // With timeout tunnel, HAProxy uses it while relaying: translated.
    let t = translate(
        "defaults\n    mode tcp\n    timeout connect 5s\n    timeout client 30s\n    timeout server 60s\n    timeout tunnel 1h\nfrontend fe\n    bind 127.0.0.1:1\n    tcp-request inspect-delay 5s\n    default_backend be\nbackend be\n    server s 192.0.2.1:443\n",
        "t.cfg",
    )
    .unwrap();
    assert_eq!(not_lines(&t), Vec::<usize>::new(), "{}", t.toml);
    assert_eq!(
        load(&t.toml).listener("fe").unwrap().idle_timeout,
        std::time::Duration::from_secs(3600)
    );
}

#[test]
fn a_listen_section_is_a_listener_and_its_backend() {
    let t = translate(
        "global\n    nbthread 2\ndefaults\n    mode tcp\n    timeout connect 2s\n    timeout client 30s\n    timeout server 30s\nlisten tls\n    bind :::443\n    tcp-request inspect-delay 2s\n    tcp-request content reject unless { req.ssl_sni -i -m end .example.net }\n    balance leastconn\n    default-server check inter 3s\n    server a 192.0.2.1:443 weight 3\n    server b [2001:db8::1]:443\n",
        "t.cfg",
    )
    .unwrap();
    assert_eq!(not_lines(&t), Vec::<usize>::new(), "{}", t.toml);
    let config = load(&t.toml);
    assert_eq!(config.global.threads, 2);
    let l = config.listener("tls").unwrap();
    assert_eq!(l.listen.len(), 2, "IPv4 and IPv6: {:?}", l.listen);
    let backend = &l.routes[0].backend;
    assert_eq!(backend.name, "tls");
    assert_eq!(backend.policy.as_str(), "least_connections");
    assert_eq!(backend.members[0].weight, 3);
    assert_eq!(
        backend.health.as_ref().unwrap().interval,
        std::time::Duration::from_secs(3)
    );
    assert!(t.toml.contains("sni = [\"*.example.net\"]"), "{}", t.toml);
}

/// Every line of the fixtures, cut after each of its words, in the
/// seed's frontend and backend: the translator answers, never panics.
#[test]
fn truncated_lines_never_panic() {
    let seed = include_str!("../../../tests/data/haproxy/tls-edge-failover.cfg");
    let all = [
        seed,
        include_str!("../../../tests/data/haproxy/documentation-sni-routing.cfg"),
        include_str!("../../../tests/data/haproxy/unsupported.cfg"),
    ]
    .concat();
    let mut tried = 0;
    for line in all.lines() {
        let w = words(line);
        for n in 1..=w.len() {
            let cut = w[..n].join(" ");
            for at in ["default_backend home_npm", "server home 203.0.113.10:443"] {
                let text = seed.replace(at, &format!("{at}\n    {cut}"));
                let _ = translate(&text, "cut.cfg");
                tried += 1;
            }
        }
    }
    assert!(tried > 500, "{tried}");
}

#[test]
fn source_rules_are_evaluated_in_haproxys_order() {
    // A reject after an accept of an overlapping network: HAProxy admits
    // 10.1.0.0/16 (the accept comes first), snirelay's deny would refuse it.
    let t = edge(
        "    tcp-request connection accept if { src 10.0.0.0/8 }\n    tcp-request connection reject if { src 10.1.0.0/16 }\n    tcp-request connection reject\n    default_backend be\n",
    );
    assert_eq!(not_lines(&t), vec![11, 12, 13], "{}", t.toml);
    assert!(
        t.not_translated[0]
            .2
            .contains("a connection from 10.1.0.0 is admitted by HAProxy's rules"),
        "{:?}",
        t.not_translated
    );
    // The same networks disjoint: deny and allow, exactly.
    let t = edge(
        "    tcp-request connection reject if { src 192.0.2.0/24 }\n    tcp-request connection accept if { src 10.0.0.0/8 2001:db8::/32 }\n    tcp-request connection reject\n    default_backend be\n",
    );
    assert_eq!(not_lines(&t), Vec::<usize>::new(), "{}", t.toml);
    let limits = load(&t.toml).listener("fe").unwrap().limits.clone();
    let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
    assert!(limits.deny.contains(ip("192.0.2.7")));
    assert!(limits.allow.contains(ip("2001:db8::1")));
    assert!(!limits.allow.contains(ip("192.0.2.7")));
    // A pattern file, and one that cannot be read.
    let text = format!(
        "{EDGE}    tcp-request connection reject if {{ src -f bad.lst }}\n    default_backend be\n{BACKEND}"
    );
    let t = translate_with(&text, &[("bad.lst", "198.51.100.0/24\n# x\n")]).unwrap();
    assert!(
        t.toml.contains("deny = [\"198.51.100.0/24\"]"),
        "{}",
        t.toml
    );
    let t = translate_with(&text, &[]).unwrap();
    assert_eq!(not_lines(&t), vec![11], "{}", t.toml);
    assert!(
        t.not_translated[0].2.contains("No such file"),
        "{:?}",
        t.not_translated
    );
    // The source in a content rule is not evaluated there: reported.
    let t =
        edge("    tcp-request content reject if { src 192.0.2.0/24 }\n    default_backend be\n");
    assert_eq!(not_lines(&t), vec![11], "{}", t.toml);
}

#[test]
fn expect_proxy_names_the_trusted_peers() {
    let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
    // Networks, inline and from a file: the trusted peers; a limit beside
    // them gets the note on whose address it counts.
    let text = format!(
        "{EDGE}    stick-table type ip size 1m expire 10s store conn_cur\n    tcp-request connection track-sc0 src\n    tcp-request connection reject if {{ sc0_conn_cur gt 10 }}\n    tcp-request connection expect-proxy layer4 if {{ src 10.0.0.0/8 }} || {{ src -f lbs.lst }}\n    default_backend be\n{BACKEND}"
    );
    let t = translate_with(&text, &[("lbs.lst", "192.0.2.7\n")]).unwrap();
    assert_eq!(not_lines(&t), Vec::<usize>::new(), "{}", t.toml);
    let config = load(&t.toml);
    let trusted = &config
        .listener("fe")
        .unwrap()
        .proxy_protocol
        .as_ref()
        .unwrap()
        .trusted;
    assert_eq!(trusted.len(), 2, "{}", t.toml);
    assert!(trusted.iter().any(|c| c.contains(ip("10.9.9.9"))));
    assert!(trusted.iter().any(|c| c.contains(ip("192.0.2.7"))));
    assert!(!trusted.iter().any(|c| c.contains(ip("192.0.2.8"))));
    assert!(
        t.toml
            .contains("per-source limits count the load balancer's address"),
        "{}",
        t.toml
    );
    // No condition: every peer.
    let t = edge("    tcp-request connection expect-proxy layer4\n    default_backend be\n");
    assert!(
        t.toml.contains(r#"trusted = ["0.0.0.0/0", "::/0"]"#),
        "{}",
        t.toml
    );
    // What cannot be a list of trusted networks is reported: `unless`, a
    // negation, another test, an accept before it (its sources then send
    // no header), layer4 missing.
    for rule in [
        "expect-proxy layer4 unless { src 10.0.0.0/8 }",
        "expect-proxy layer4 if !{ src 10.0.0.0/8 }",
        "expect-proxy layer4 if { src 10.0.0.0/8 } { sc0_conn_cur gt 1 }",
        "expect-proxy if { src 10.0.0.0/8 }",
    ] {
        let t = edge(&format!(
            "    tcp-request connection {rule}\n    default_backend be\n"
        ));
        assert_eq!(not_lines(&t), vec![11], "{rule}\n{}", t.toml);
        assert!(!t.toml.contains("proxy_protocol ="), "{}", t.toml);
    }
    let t = edge(
        "    tcp-request connection accept if { src 10.1.0.0/16 }\n    tcp-request connection expect-proxy layer4 if { src 10.0.0.0/8 }\n    default_backend be\n",
    );
    assert!(not_lines(&t).contains(&12), "{}", t.toml);
    assert!(
        t.not_translated
            .iter()
            .any(|n| n.2.contains("an `accept` rule before it")),
        "{:?}",
        t.not_translated
    );
}

#[test]
fn network_boundaries_give_the_next_stretch() {
    let c = super::acl::network("10.0.0.0/255.0.0.0").unwrap();
    assert_eq!(c.to_string(), "10.0.0.0/8");
    assert_eq!(c.after_last(), Some("11.0.0.0".parse().unwrap()));
    let all = super::acl::network("0.0.0.0/0").unwrap();
    assert_eq!(all.after_last(), None);
    assert_eq!(
        super::acl::network("10.1.2.3/8").unwrap().to_string(),
        "10.0.0.0/8",
        "host bits cleared, as HAProxy does"
    );
    assert!(super::acl::network("10.0.0.0/255.0.255.0").is_err());
}

/// The backend snirelay's translation picks for `name` (None: refused).
fn backend_for(config: &Config, name: &str) -> Option<String> {
    let l = config.listener("fe").unwrap();
    let sni = crate::wire::sni::Sni::parse(name.as_bytes()).unwrap();
    l.matcher()
        .find(&sni)
        .map(|r| l.routes[r[0]].backend.name.clone())
}

const MAP: &str = "# SNI to backend\napp.example.com be_app\n\napi.example.com   be_api\nold.example.com be_gone\nCaps.example.com be_app\n";
const MAP_BACKENDS: &str =
    "backend be_app\n    server a 192.0.2.2:443\nbackend be_api\n    server a 192.0.2.3:443\n";

#[test]
fn a_map_rule_becomes_one_route_per_backend_and_misses_take_the_default() {
    let t = translate_with(
        &format!("{EDGE}    use_backend %[req.ssl_sni,lower,map(sni.map)]\n    use_backend be_api if {{ req.ssl_sni -i late.example.com }}\n    default_backend be\n{MAP_BACKENDS}{BACKEND}"),
        &[("sni.map", MAP)],
    )
    .unwrap();
    assert_eq!(not_lines(&t), Vec::<usize>::new(), "{}", t.toml);
    let config = load(&t.toml);
    let of = |n| backend_for(&config, n);
    assert_eq!(of("app.example.com").as_deref(), Some("be_app"));
    assert_eq!(of("api.example.com").as_deref(), Some("be_api"));
    // A value naming no backend, a key with capitals (never equal to a
    // lowercased name), and a name the map lacks: the rules end there, so
    // even the later rule's name takes the default backend.
    assert_eq!(of("old.example.com").as_deref(), Some("be"));
    assert_eq!(of("caps.example.com").as_deref(), Some("be"));
    assert_eq!(of("late.example.com").as_deref(), Some("be"));
    assert_eq!(of("other.example.org").as_deref(), Some("be"));
    assert!(t.toml.contains("no_sni = \"be\""), "{}", t.toml);
    assert!(
        t.toml.contains("old.example.com to no defined backend"),
        "{}",
        t.toml
    );
}

#[test]
fn a_map_default_and_no_default_backend() {
    let text = |conv: &str| format!("{EDGE}    use_backend %[req.ssl_sni,{conv}]\n{MAP_BACKENDS}");
    // map_str with a default value: misses go to it.
    let map = MAP.replace("old.example.com be_gone\n", "");
    let t = translate_with(&text("lower,map_str(sni.map,be_api)"), &[("sni.map", &map)]).unwrap();
    assert_eq!(not_lines(&t), Vec::<usize>::new(), "{}", t.toml);
    let config = load(&t.toml);
    assert_eq!(
        backend_for(&config, "app.example.com").as_deref(),
        Some("be_app")
    );
    assert_eq!(
        backend_for(&config, "x.example.net").as_deref(),
        Some("be_api")
    );
    // A name mapped to no backend, with a default value and no
    // default_backend: HAProxy refuses it, which snirelay cannot do below
    // its `*` route; reported.
    let t = translate_with(&text("lower,map_str(sni.map,be_api)"), &[("sni.map", MAP)]).unwrap();
    assert!(
        t.not_translated
            .iter()
            .any(|n| n.2.contains("`old.example.com` goes to no backend")),
        "{:?}",
        t.not_translated
    );
    // No default anywhere: a miss is refused.
    let t = translate_with(&text("lower,map(sni.map)"), &[("sni.map", MAP)]).unwrap();
    let config = load(&t.toml);
    assert_eq!(backend_for(&config, "x.example.net"), None);
    assert_eq!(backend_for(&config, "old.example.com"), None);
    // Without `lower`: translated, with a note on case.
    let t = translate_with(&text("map(sni.map)"), &[("sni.map", MAP)]).unwrap();
    assert!(t.toml.contains("without `lower`"), "{}", t.toml);
}

#[test]
fn partial_maps_missing_files_and_bad_keys_are_reported() {
    for (conv, files, why) in [
        (
            "lower,map_dom(sni.map)",
            &[("sni.map", MAP)][..],
            "only exact maps",
        ),
        (
            "lower,map_end(sni.map)",
            &[("sni.map", MAP)][..],
            "only exact maps",
        ),
        ("lower,map(none.map)", &[][..], "the map file `none.map`"),
        (
            "lower,map(bad.map)",
            &[("bad.map", "*.example.com be_app\n")][..],
            "not a host name",
        ),
        (
            "lower,map(two.map)",
            &[("two.map", "a.example.com be_app\na.example.com be_api\n")][..],
            "mapped twice",
        ),
        (
            "lower,base64,map(sni.map)",
            &[("sni.map", MAP)][..],
            "converters",
        ),
    ] {
        let t = translate_with(
            &format!("{EDGE}    use_backend %[req.ssl_sni,{conv}]\n    default_backend be\n{MAP_BACKENDS}{BACKEND}"),
            files,
        )
        .unwrap();
        let line = EDGE.lines().count() + 1;
        let found = t.not_translated.iter().find(|n| n.0 == line);
        assert!(
            found.is_some_and(|n| n.2.contains(why)),
            "{conv}: {:?}",
            t.not_translated
        );
    }
    let t = translate(
        &format!("{EDGE}    use_backend %[src,map(sni.map)]\n    default_backend be\n{BACKEND}"),
        "t.cfg",
    )
    .unwrap();
    assert!(
        t.not_translated[0].2.contains("`src`"),
        "{:?}",
        t.not_translated
    );
}

#[test]
fn sni_pattern_files_become_the_names_they_list() {
    let names = "# hosted here\napp.example.com\n\n  api.example.com  \n";
    let files = [("hosted.lst", names), ("below.lst", ".example.net\n")];
    let t = translate_with(
        &format!("{EDGE}    acl hosted req.ssl_sni -i -f hosted.lst\n    acl below req.ssl_sni -m end -f below.lst\n    use_backend be_app if hosted\n    use_backend be_api if below\n{MAP_BACKENDS}"),
        &files,
    )
    .unwrap();
    assert_eq!(not_lines(&t), Vec::<usize>::new(), "{}", t.toml);
    // The file of exact names is read at run time; `.example.net` under
    // `-m end` means `*.example.net`, which the file does not say: inline.
    assert!(t.toml.contains("sni_file = \"hosted.lst\""), "{}", t.toml);
    assert!(!t.toml.contains("app.example.com"), "{}", t.toml);
    assert!(t.toml.contains("sni = [\"*.example.net\"]"), "{}", t.toml);
    let dir = std::env::temp_dir().join(format!("snirelay-import-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let config = Config::from_toml(&t.toml, &dir.join("imported.toml"))
        .unwrap_or_else(|e| panic!("the translation does not load:\n{e}\n{}", t.toml));
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        backend_for(&config, "api.example.com").as_deref(),
        Some("be_app")
    );
    assert_eq!(
        backend_for(&config, "a.b.example.net").as_deref(),
        Some("be_api")
    );
    assert_eq!(backend_for(&config, "www.example.com"), None);
    // A file that cannot be read, and capitals without -i, are reported.
    for (acl, files, why) in [
        ("-f none.lst", &[][..], "none.lst"),
        (
            "-f caps.lst",
            &[("caps.lst", "App.example.com\n")][..],
            "capitals",
        ),
    ] {
        let t = translate_with(
            &format!("{EDGE}    acl hosted req.ssl_sni {acl}\n    use_backend be_app if hosted\n{MAP_BACKENDS}"),
            files,
        )
        .unwrap();
        assert!(
            t.not_translated.iter().any(|n| n.2.contains(why)),
            "{acl}: {:?}",
            t.not_translated
        );
    }
}
