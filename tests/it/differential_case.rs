//! Differential scripts for how a name is spelled: capitals sent to ACLs
//! with and without `-i` (HAProxy compares case-sensitively without it;
//! the import writes `case_sensitive_names` for such routes), `_` in a
//! label against the seed template's `[a-z0-9-]` regex (`ldh_names`), and
//! a trailing dot (RFC 6066 §3: a HostName has none; snirelay refuses
//! it). The harness and its tolerances: [`crate::differential`].

use crate::differential::compare;

use crate::common::differential::*;
use crate::common::differential_check::Decision::{Alert, To};
use crate::common::differential_check::Timing;

/// The configurations' shortest timer: their 1 s inspect delay.
const NAMES: Timing = Timing::new(1000, 200);
/// TLS alert `unrecognized_name`.
const UNRECOGNIZED_NAME: u8 = 112;

fn answer(servers: &[&'static str]) -> Vec<(&'static str, Mode)> {
    servers.iter().map(|s| (*s, Mode::Answer)).collect()
}

/// `-m str` and `-m end` without `-i`, `-i` beside them, a default
/// backend: capitals in the labels a case-sensitive test names send the
/// name on to the next rule in both, capitals elsewhere do not, and the
/// `-i` test takes any case.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capitals_reach_the_backend_haproxys_case_sensitive_acls_pick() {
    let (exact, folded, sub, def) = (
        "192.0.2.141:443",
        "192.0.2.142:443",
        "192.0.2.143:443",
        "192.0.2.144:443",
    );
    let script = vec![
        Conn::hello("www.example.com"),
        Conn::hello("WWW.example.com"),
        Conn::hello("www.EXAMPLE.com"),
        Conn::hello("api.example.com"),
        Conn::hello("API.EXAMPLE.COM"),
        Conn::hello("a.example.com"),
        Conn::hello("A.example.com"),
        Conn::hello("A.EXAMPLE.COM"),
        Conn::hello("a.Example.com"),
        Conn::hello("a_b.example.com"),
        Conn::hello("other.test"),
        Conn::hello("www.example.com.").differs("invalid-name-refused", Alert(UNRECOGNIZED_NAME)),
    ];
    for (version, results) in compare(
        "sni-case.cfg",
        |t| t,
        &answer(&[exact, folded, sub, def]),
        NAMES,
        &script,
    )
    .await
    {
        let s = |a: &str| Some(a.to_owned());
        let servers: Vec<Option<String>> = results
            .iter()
            .map(|(h, _)| h.relayed.as_ref().map(|r| r.0.clone()))
            .collect();
        assert_eq!(
            servers,
            [
                s(exact),
                s(sub),
                s(def),
                s(folded),
                s(folded),
                s(sub),
                s(sub),
                s(def),
                s(def),
                s(sub),
                s(def),
                s(def)
            ],
            "HAProxy {version}"
        );
        assert_eq!(
            results[11].1.end,
            End::Alert(UNRECOGNIZED_NAME),
            "HAProxy {version}"
        );
    }
}

/// The seed template (`-m reg -i ^([a-z0-9-]+\.)*example\.com$`, the
/// rest refused): `_` in a label is refused by both (`ldh_names`), a
/// trailing dot by both, capitals pass in both (`-i`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_templates_regex_refuses_what_haproxy_refuses() {
    let home = "203.0.113.10:443";
    let script = vec![
        Conn::hello("www.example.com"),
        Conn::hello("WWW.Example.COM"),
        Conn::hello("a_b.example.com").differs("alert-on-unmatched", Alert(UNRECOGNIZED_NAME)),
        Conn::hello("a_b.EXAMPLE.com").differs("alert-on-unmatched", Alert(UNRECOGNIZED_NAME)),
        Conn::hello("www.example.com.").differs("alert-on-unmatched", Alert(UNRECOGNIZED_NAME)),
        Conn::hello("example.com.").differs("alert-on-unmatched", Alert(UNRECOGNIZED_NAME)),
    ];
    for (version, results) in compare(
        "tls-edge-failover.cfg",
        |t| t.replace("inspect-delay 5s", "inspect-delay 1s"),
        &answer(&[home]),
        NAMES,
        &script,
    )
    .await
    {
        let relayed: Vec<bool> = results.iter().map(|(h, _)| h.relayed.is_some()).collect();
        assert_eq!(
            relayed,
            [true, true, false, false, false, false],
            "HAProxy {version}"
        );
        for (_, s) in &results[2..] {
            assert_eq!(
                s.end,
                End::Alert(UNRECOGNIZED_NAME),
                "HAProxy {version}: {s}"
            );
        }
    }
}

/// The manual's SNI routing: `-i www.example.com` to `bk_www`, `-m end
/// .example.com` without `-i` to `bk_sub` (two servers, round robin), the
/// rest to `bk_default`: names below the domain reach `bk_sub` when the
/// domain is written in lower case (whatever the first label), and
/// `bk_default` when it is not, in both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manuals_case_sensitive_suffix_routes_capitals_as_haproxy_does() {
    let (www, sub1, sub2, default) = (
        "192.0.2.10:443",
        "192.0.2.20:443",
        "192.0.2.21:443",
        "192.0.2.30:443",
    );
    let script = vec![
        Conn::hello("a.example.com").in_burst(1),
        Conn::hello("A.example.com").in_burst(1),
        Conn::hello("WWW.EXAMPLE.COM"),
        Conn::hello("A.EXAMPLE.COM").differs("proxy-v2-tlvs", To(default)),
        Conn::hello("a.Example.com").differs("proxy-v2-tlvs", To(default)),
    ];
    for (version, results) in compare(
        "documentation-sni-routing.cfg",
        |t| t.replace("inspect-delay 5s", "inspect-delay 1s"),
        &answer(&[www, sub1, sub2, default]),
        NAMES,
        &script,
    )
    .await
    {
        let mut subs: Vec<String> = results[..2]
            .iter()
            .map(|(h, _)| h.relayed.as_ref().unwrap().0.clone())
            .collect();
        subs.sort();
        assert_eq!(subs, [sub1, sub2], "HAProxy {version}");
        let server = |i: usize| results[i].0.relayed.as_ref().unwrap().0.clone();
        assert_eq!(server(2), www, "HAProxy {version}");
        assert_eq!(server(3), default, "HAProxy {version}");
        assert_eq!(server(4), default, "HAProxy {version}");
        for (_, s) in &results[3..] {
            assert_eq!(
                s.relayed.as_ref().unwrap().0,
                default,
                "HAProxy {version}: {s}"
            );
        }
    }
}
