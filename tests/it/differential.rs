//! Differential tests: the same scripted traffic through real HAProxy
//! (Debian 12's 2.6 and Debian 13's 3.0, one after the other, each checked
//! to be that version; `.ci/install-deps` installs both, and a missing
//! binary fails the test naming it) on an HAProxy configuration and through snirelay on `snirelay
//! import-haproxy` of it, every connection's outcome compared: relayed (to
//! which server, with which PROXY header fields), refused (TLS alert,
//! reset or close, and when), or timed out. The harness is
//! `common/differential.rs` (processes, recorders, the client) and
//! `common/differential_check.rs` (what counts as the same, the listed
//! differences); this module holds the SNI scripts and the check that the
//! listed differences, docs/migrating-from-haproxy.md's section "Where
//! snirelay decides differently, and why", and the scripts agree. The
//! limits, timers, servers and name-spelling (case, `_`, trailing dot)
//! scripts are `differential_limits`, `differential_timeouts`,
//! `differential_servers` and `differential_case`.
//!
//! Tolerances are per script ([`Timing`]): two moments are the same
//! within a tolerance strictly below half the shortest timer the script
//! exercises (200 ms for the 1 s inspect delays here), so a timer fired at
//! once or twice as late fails; a client watches 3 s unless its script
//! says (every timer in the configurations is 1 s or less, so a proxy that
//! has not ended a connection by then has timed it out). The
//! configurations' timers are short (0.2–1 s) so the area runs in about
//! two minutes per HAProxy version on a loaded two-core machine; no test
//! sleeps to wait for readiness (HAProxy: its listening socket; snirelay:
//! its `ready` line).
//!
//! Run it with `cargo test --test it differential` (`-- --nocapture`
//! prints each run's HAProxy version, tolerance, widest gap and table). To
//! add a script, write a test that builds a list of [`Conn`]s (a label, a
//! source 127.0.0.x, when, what it sends, how long it watches) and calls
//! [`compare`] on a fixture with its [`Timing`]; a connection where
//! snirelay decides differently on purpose carries `.differs("id",
//! decision)` with snirelay's exact decision, and `id` must be listed in
//! [`DIFFERENCES`] and in the doc's section. To add a configuration, put
//! it in tests/data/haproxy/ with a header comment saying where its shape
//! comes from and a row in its README; it must pass `haproxy -c -f` of
//! both versions, import with exit 0 and be run by a script (a test
//! checks all three).

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;

use common::differential::*;
use common::differential_check::Decision::{Alert, Closed, To};
use common::differential_check::{DIFFERENCES, SECTION, Timing, check};

/// The SNI scripts' timing: their shortest timer is the 1 s inspect delay
/// (a truncated hello, HTTP bytes and silence wait it out).
const SNI: Timing = Timing::new(1000, 200);

/// `unrecognized_name`: snirelay's refusal of a name no route takes.
const UNRECOGNIZED_NAME: u8 = 112;

/// One HAProxy version's run of a script: the version and each
/// connection's outcome on HAProxy and on snirelay.
pub(crate) type Run = (&'static str, Vec<(Outcome, Outcome)>);

/// Runs `script` on each HAProxy version with the fixture (edited by
/// `edit`) and on snirelay with its translation, and checks every
/// connection within `timing`; the runs, 2.6 first.
pub(crate) async fn compare(
    fixture_name: &str,
    edit: impl Fn(String) -> String,
    servers: &[(&str, Mode)],
    timing: Timing,
    script: &[Conn],
) -> Vec<Run> {
    let text = edit(std::fs::read_to_string(fixture(fixture_name)).unwrap());
    let mut runs = Vec::new();
    for haproxy in haproxies() {
        let both = both_ways(&haproxy, &text, servers).await;
        let results = run(&both, script).await;
        check(
            &format!("{fixture_name} on {}\n{}", haproxy.line, both.toml),
            haproxy.version,
            &timing,
            script,
            &results,
        );
        runs.push((haproxy.version, results));
    }
    runs
}

fn answer(servers: &[&'static str]) -> Vec<(&'static str, Mode)> {
    servers.iter().map(|s| (*s, Mode::Answer)).collect()
}

/// The relayed server of each connection on HAProxy's side (the same on
/// snirelay's where [`check`] found no listed difference).
fn servers_of(results: &[(Outcome, Outcome)]) -> Vec<Option<String>> {
    results
        .iter()
        .map(|(h, _)| h.relayed.as_ref().map(|r| r.0.clone()))
        .collect()
}

// ------------------------------------------------------- the list's upkeep

/// The identifiers in the doc's section, in bold at the start of a list
/// item (`- **id**: …`).
fn documented() -> BTreeSet<String> {
    let doc = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/migrating-from-haproxy.md"),
    )
    .unwrap();
    let section = doc
        .split_once(&format!("\n{SECTION}\n"))
        .unwrap_or_else(|| panic!("docs/migrating-from-haproxy.md has no {SECTION:?}"))
        .1;
    let section = section.split("\n## ").next().unwrap();
    section
        .lines()
        .filter_map(|l| l.strip_prefix("- **"))
        .filter_map(|l| l.split_once("**"))
        .map(|(id, _)| id.to_owned())
        .collect()
}

/// The identifiers the scripts name with `.differs("…")`.
fn scripted() -> BTreeSet<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it");
    let mut ids = BTreeSet::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        if !(name.starts_with("differential") && name.ends_with(".rs")) {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let code = text.lines().filter(|l| !l.trim_start().starts_with("//"));
        for line in code {
            for piece in line.split(".differs(\"").skip(1) {
                ids.insert(piece.split_once('"').unwrap().0.to_owned());
            }
        }
    }
    ids
}

/// The harness's list, the doc's and the scripts' are the same: a
/// difference the doc lists is one a script produces (and a scripted one
/// that stops happening fails its script), and no script may lean on one
/// the doc does not explain.
#[test]
fn the_listed_differences_are_the_documented_and_the_scripted_ones() {
    let listed: BTreeSet<String> = DIFFERENCES.iter().map(|d| d.id.to_owned()).collect();
    assert_eq!(listed.len(), DIFFERENCES.len(), "an identifier twice");
    assert_eq!(documented(), listed, "the doc's list against DIFFERENCES");
    assert_eq!(
        scripted(),
        listed,
        "the scripts' .differs() against DIFFERENCES"
    );
}

/// The configurations in tests/data/haproxy (all but `unsupported.cfg`,
/// which names a host that need not resolve and is the importer's test).
fn configurations() -> BTreeSet<String> {
    std::fs::read_dir(fixture(""))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".cfg") && name != "unsupported.cfg")
        .collect()
}

/// The configurations a differential script runs: each `"NAME.cfg"` in
/// the scripts' code.
fn run_by_scripts() -> BTreeSet<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it");
    let mut names = BTreeSet::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_str().unwrap();
        if !(file.starts_with("differential") && file.ends_with(".rs")) {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
            let fixture_name = |p: &&str| {
                p.strip_suffix(".cfg").is_some_and(|stem| {
                    !stem.is_empty()
                        && stem
                            .bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                })
            };
            for piece in line.split('"').filter(fixture_name) {
                names.insert(piece.to_owned());
            }
        }
    }
    names.remove("unsupported.cfg");
    names
}

/// Configurations no differential script runs, each with why: the
/// import tests read them (tests/it/import_haproxy.rs).
const NOT_RUN: &[(&str, &str)] = &[(
    "edge-resolvers.cfg",
    "its origin is a host name asked of a `resolvers` section: both proxies would need one DNS server of the test's",
)];

/// Every configuration is one both HAProxy versions accept, one a script
/// runs and one the directory's README describes: a new file cannot sit
/// there unchecked.
#[test]
fn every_configuration_passes_both_haproxys_check_and_is_run() {
    let configurations = configurations();
    let readme = std::fs::read_to_string(fixture("README.md")).unwrap();
    let described: BTreeSet<String> = readme
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`'))
        .map(|(name, _)| name.to_owned())
        .filter(|name| name.ends_with(".cfg") && name != "unsupported.cfg")
        .collect();
    assert_eq!(described, configurations, "README.md's table");
    let mut run = run_by_scripts();
    run.extend(NOT_RUN.iter().map(|(name, _)| name.to_string()));
    assert_eq!(run, configurations, "the scripts' fixtures");
    for haproxy in haproxies() {
        let mut checked = 0;
        for name in &configurations {
            let out = std::process::Command::new(&haproxy.binary)
                .args(["-c", "-f"])
                .arg(fixture(name))
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{name} on {}: {}",
                haproxy.line,
                String::from_utf8_lossy(&out.stderr)
            );
            checked += 1;
        }
        println!("{checked} configurations pass {}'s check", haproxy.line);
        assert_eq!(checked, configurations.len());
    }
    assert_eq!(
        configurations.len(),
        21,
        "configurations in tests/data/haproxy"
    );
}

// ------------------------------------------------------------- SNI scripts

/// The names an SNI edge for `domain` sees: the apex, a deep name, case,
/// a trailing dot (refused by snirelay, RFC 6066 §3), lookalikes, another domain, no SNI, no TLS, a
/// truncated hello and one split over three segments.
fn sni_script(domain: &str) -> Vec<Conn> {
    vec![
        Conn::hello(domain),
        Conn::hello(&format!("a.b.c.{domain}")),
        Conn::hello(&domain.to_uppercase()),
        Conn::hello(&format!("Www.{domain}")),
        Conn::hello(&format!("{domain}.")),
        Conn::hello(&format!("evil-{domain}")),
        Conn::hello(&format!("{domain}.evil.net")),
        Conn::hello("example.invalid"),
        Conn::no_sni(),
        Conn::http(),
        Conn::truncated(domain, 40),
        Conn::hello(&format!("www.{domain}"))
            .split(3, 100)
            .labelled("www (in 3 segments)"),
    ]
}

/// `sni_script` on an edge that takes `domain` and the names below it and
/// refuses the rest (a trailing dot among them, RFC 6066 §3): the listed
/// differences.
fn one_domain_script(domain: &str) -> Vec<Conn> {
    let mut script = sni_script(domain);
    for i in [4, 5, 6, 7, 8] {
        script[i] = script[i]
            .clone()
            .differs("alert-on-unmatched", Alert(UNRECOGNIZED_NAME));
    }
    script[9] = script[9].clone().differs("not-tls-refused-at-once", Closed);
    script
}

/// The seed template (its inspect-delay scaled from 5 s to 1 s so the
/// script is short): the allowed names reach the origin, the rest are
/// refused, as HAProxy does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_template_routes_and_refuses_as_haproxy_does() {
    let home = "203.0.113.10:443";
    let mut script = one_domain_script("example.com");
    script.push(
        Conn::hello("a_b.example.com").differs("alert-on-unmatched", Alert(UNRECOGNIZED_NAME)),
    );
    for (version, results) in compare(
        "tls-edge-failover.cfg",
        |t| t.replace("inspect-delay 5s", "inspect-delay 1s"),
        &answer(&[home]),
        SNI,
        &script,
    )
    .await
    {
        let home = Some(home.to_owned());
        let mut expected = vec![home.clone(); 4];
        expected.extend([None, None, None, None, None, None, None, home, None]);
        assert_eq!(servers_of(&results), expected, "HAProxy {version}");
        // snirelay's refusals of the trailing dot and the `_` label: an alert.
        assert_eq!(results[4].1.end, End::Alert(112), "HAProxy {version}");
        assert_eq!(results[12].1.end, End::Alert(112), "HAProxy {version}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manuals_sni_routing_routes_as_haproxy_does() {
    let www = "192.0.2.10:443";
    let default = "192.0.2.30:443";
    let script = vec![
        Conn::hello("www.example.com"),
        Conn::hello("WWW.EXAMPLE.COM"),
        Conn::hello("example.com").differs("proxy-v2-tlvs", To(default)),
        Conn::hello("evil-example.com").differs("proxy-v2-tlvs", To(default)),
        Conn::hello("other.test").differs("proxy-v2-tlvs", To(default)),
        Conn::no_sni().differs("proxy-v2-tlvs", To(default)),
        Conn::http().differs("unparsed-to-default", Closed),
        Conn::truncated("www.example.com", 40).differs("unparsed-to-default", Closed),
    ];
    for (version, results) in compare(
        "documentation-sni-routing.cfg",
        |t| t.replace("inspect-delay 5s", "inspect-delay 1s"),
        &answer(&[www, "192.0.2.20:443", "192.0.2.21:443", default]),
        SNI,
        &script,
    )
    .await
    {
        let s = |a: &str| Some(a.to_owned());
        assert_eq!(
            servers_of(&results),
            [
                s(www),
                s(www),
                s(default),
                s(default),
                s(default),
                s(default),
                s(default),
                s(default)
            ],
            "HAProxy {version}"
        );
        // The PROXY v2 header the default backend gets carries the same fields.
        assert!(results[2].0.relayed.as_ref().unwrap().1.is_some());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_names_with_a_default_backend_route_as_haproxy_does() {
    let (app1, app2, default) = ("192.0.2.11:443", "192.0.2.12:443", "192.0.2.13:443");
    let script = vec![
        Conn::hello("app1.example.net"),
        Conn::hello("APP2.Example.NET"),
        Conn::hello("app1.example.net.").differs("invalid-name-refused", Alert(UNRECOGNIZED_NAME)),
        Conn::hello("x.app1.example.net"),
        Conn::hello("app3.example.net"),
        Conn::no_sni(),
        Conn::http().differs("unparsed-to-default", Closed),
        Conn::nothing().differs("unparsed-to-default", Closed),
        Conn::hello("app2.example.net").split(4, 80),
        Conn::hello("app1 example.net").differs("invalid-name-refused", Alert(UNRECOGNIZED_NAME)),
        Conn::hello_names(&["app1.example.net", "app2.example.net"])
            .differs("strict-hello", Closed),
    ];
    for (version, results) in compare(
        "sni-exact-names.cfg",
        |t| t,
        &answer(&[app1, app2, default]),
        SNI,
        &script,
    )
    .await
    {
        let s = |a: &str| Some(a.to_owned());
        assert_eq!(
            servers_of(&results),
            [
                s(app1),
                s(app2),
                s(default),
                s(default),
                s(default),
                s(default),
                s(default),
                s(default),
                s(app2),
                s(default),
                s(app1)
            ],
            "HAProxy {version}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_suffix_regexes_route_as_haproxy_does() {
    let (app, api, www) = ("192.0.2.21:443", "192.0.2.22:443", "192.0.2.23:443");
    let unmatched = || Alert(UNRECOGNIZED_NAME);
    let script = vec![
        Conn::hello("app.example.com"),
        Conn::hello("x.y.APP.example.com"),
        Conn::hello("api.example.com").differs("alert-on-unmatched", unmatched()),
        Conn::hello("v1.api.example.com"),
        Conn::hello("www.example.org"),
        Conn::hello("a.www.example.org").differs("alert-on-unmatched", unmatched()),
        Conn::hello("evilapp.example.com").differs("alert-on-unmatched", unmatched()),
        Conn::no_sni().differs("alert-on-unmatched", unmatched()),
        Conn::http().differs("not-tls-refused-at-once", Closed),
        Conn::truncated("app.example.com", 60),
    ];
    for (version, results) in compare(
        "sni-regex-routes.cfg",
        |t| t,
        &answer(&[app, api, www]),
        SNI,
        &script,
    )
    .await
    {
        let s = |a: &str| Some(a.to_owned());
        assert_eq!(
            servers_of(&results),
            [
                s(app),
                s(app),
                None,
                s(api),
                s(www),
                None,
                None,
                None,
                None,
                None
            ],
            "HAProxy {version}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_suffix_and_its_apex_route_as_haproxy_does() {
    let ingress = "192.0.2.31:443";
    let mut script = one_domain_script("example.com");
    script.push(Conn::hello("a_b.example.com"));
    for (version, results) in compare(
        "sni-suffix-end.cfg",
        |t| t,
        &answer(&[ingress]),
        SNI,
        &script,
    )
    .await
    {
        let s = Some(ingress.to_owned());
        let mut expected = vec![s.clone(); 4];
        expected.extend(vec![None; 7]);
        expected.extend([s.clone(), s]);
        assert_eq!(servers_of(&results), expected, "HAProxy {version}");
    }
}

/// Real clients' first flights (OpenSSL, curl, Chromium with a
/// post-quantum key share and GREASE ECH, Go, Node, GnuTLS without SNI,
/// and OpenSSL's hello split over two TLS records, which both reassemble)
/// on the wildcard edge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_clients_hellos_route_as_haproxy_routes_them() {
    let ingress = "192.0.2.31:443";
    let script: Vec<Conn> = [
        "openssl_sni.bin",
        "openssl_two_records.bin",
        "curl.bin",
        "chromium_pq.bin",
        "go_crypto_tls.bin",
        "node_https.bin",
        "wget_gnutls.bin",
    ]
    .iter()
    .map(|f| Conn::capture(f))
    .collect();
    let mut script = script;
    script[6] = script[6]
        .clone()
        .differs("alert-on-unmatched", Alert(UNRECOGNIZED_NAME));
    for (version, results) in compare(
        "sni-suffix-end.cfg",
        |t| t,
        &answer(&[ingress]),
        SNI,
        &script,
    )
    .await
    {
        let s = Some(ingress.to_owned());
        let mut expected = vec![s; 6];
        expected.push(None);
        assert_eq!(servers_of(&results), expected, "HAProxy {version}");
    }
}

/// `-m dom`: each tenant's domain and the names below it reach its
/// backend in both, a name that only contains the domain's text
/// (`eviltenant-a.example`) and other names the shared one; a name
/// holding the domain as inner labels reaches the tenant in HAProxy and
/// the shared backend in snirelay (listed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn domains_by_dom_route_as_haproxy_does() {
    let (a, b, shared) = ("192.0.2.41:443", "192.0.2.42:443", "192.0.2.43:443");
    let script = vec![
        Conn::hello("tenant-a.example"),
        Conn::hello("www.tenant-a.example"),
        Conn::hello("x.y.tenant-a.example"),
        Conn::hello("TENANT-B.example"),
        Conn::hello("app.Tenant-B.example"),
        Conn::hello("eviltenant-a.example"),
        Conn::hello("tenant-a.example.evil.net").differs("dom-inner-labels", To(shared)),
        Conn::hello("x.tenant-b.example.evil.net").differs("dom-inner-labels", To(shared)),
        Conn::hello("other.example"),
        Conn::no_sni(),
    ];
    for (version, results) in compare(
        "sni-domain-dom.cfg",
        |t| t,
        &answer(&[a, b, shared]),
        SNI,
        &script,
    )
    .await
    {
        let s = |x: &str| Some(x.to_owned());
        assert_eq!(
            servers_of(&results),
            [
                s(a),
                s(a),
                s(a),
                s(b),
                s(b),
                s(shared),
                s(a),
                s(b),
                s(shared),
                s(shared)
            ],
            "HAProxy {version}"
        );
        for i in [6, 7] {
            assert_eq!(
                results[i].1.relayed.as_ref().map(|r| r.0.as_str()),
                Some(shared),
                "HAProxy {version}"
            );
        }
    }
}
