//! The decision after the hello without sockets: every refusal it makes,
//! with its reason and alert, and both dry-run paths (the listener's
//! `limit_key` with the JA4, a route's limits).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use crate::addr::PeerAddr;
use crate::backend::Backends;
use crate::close_reason::CloseReason;
use crate::config::Config;
use crate::flow::decision::*;
use crate::wire::alert;
use crate::wire::client_hello::{ClientHello, Ech};

const JA4: &str = "t13d1516h2_8daaf6152771_e5627efa2ab1";

/// One listener with `listener_extra` in its table, routes to `web`
/// (`example.com`, whose route has `route_extra`) and `*.other.test`, and
/// `tail` after them (more tables).
fn config(listener_extra: &str, route_extra: &str, tail: &str) -> Config {
    let text = format!(
        r#"
[[listener]]
name = "edge"
listen = "127.0.0.1:0"
ech_config_ids = [7]
{listener_extra}

[[route]]
name = "site"
sni = ["example.com"]
backend = "web"
{route_extra}

[[route]]
name = "private"
sni = ["private.example.com"]
ech = "reject"
backend = "web"

{tail}

[backend.web]
addresses = ["127.0.0.1:9"]
"#
    );
    Config::from_toml(&text, Path::new("test.toml")).unwrap()
}

fn generation(config: &Config) -> Generation {
    let backends = Arc::new(Backends::start(&config.backends, None));
    Generation::first(config.listeners[0].clone(), &backends, &None)
}

fn hello(name: Option<&str>) -> ClientHello {
    ClientHello {
        server_name: name.map(|n| n.as_bytes().to_vec()),
        alpn: Vec::new(),
        ech: None,
        version: Some(0x0304),
        len: 0,
    }
}

fn from(peer: &str) -> Arrived {
    Arrived {
        peer: PeerAddr(peer.parse::<SocketAddr>().unwrap()),
        claimed: None,
    }
}

/// The decision for a hello to `example.com` from `peer`.
fn site<'g>(g: &'g Generation, peer: &str, ja4: Option<&str>) -> AfterHello<'g> {
    decide(g, from(peer), &hello(Some("example.com")), ja4)
}

/// The refusal's reason and alert, and whether routing ran.
fn refused(decision: &AfterHello<'_>) -> (CloseReason, Option<u8>, bool) {
    let refused = decision.outcome.as_ref().expect_err("refused");
    (refused.reason, refused.alert, decision.heard.is_some())
}

#[test]
fn a_routed_hello_holds_its_route_backend_and_drain_guard() {
    let config = config("", "", "");
    let g = generation(&config);
    let decision = decide(
        &g,
        from("192.0.2.1:5000"),
        &hello(Some("Example.COM")),
        None,
    );
    let heard = decision.heard.as_ref().unwrap();
    assert_eq!(heard.sni.as_deref(), Some("example.com"));
    let routed = decision.outcome.as_ref().unwrap();
    assert_eq!(&*routed.entry.route, "site");
    assert_eq!(routed.runtime.config.name, "web");
    assert!(routed.admitted.is_none() && routed.route_slot.is_none());
    assert_eq!(decision.dry_runs, [None, None]);
    assert_eq!(routed.entry.drain.signal().live(), 1);
    drop(decision);
    assert_eq!(
        g.routes
            .decide(&hello(Some("example.com")))
            .target
            .unwrap()
            .drain
            .signal()
            .live(),
        0
    );
}

#[test]
fn every_route_refusal_carries_its_alert() {
    let config = config("", "", "");
    let g = generation(&config);
    let peer = from("192.0.2.1:5000");
    let no_sni = decide(&g, peer, &hello(None), None);
    assert_eq!(
        refused(&no_sni),
        (CloseReason::NoSni, Some(alert::UNRECOGNIZED_NAME), true)
    );
    let unmatched = decide(&g, peer, &hello(Some("nowhere.test")), None);
    assert_eq!(
        refused(&unmatched),
        (CloseReason::Unmatched, Some(alert::UNRECOGNIZED_NAME), true)
    );
    assert_eq!(
        unmatched.heard.as_ref().unwrap().sni.as_deref(),
        Some("nowhere.test")
    );
    let mut ech = hello(Some("private.example.com"));
    ech.ech = Some(Ech::Outer { config_id: 7 });
    assert_eq!(
        refused(&decide(&g, peer, &ech, None)),
        (
            CloseReason::EchRejected,
            Some(alert::HANDSHAKE_FAILURE),
            true
        )
    );
    // A route refusal is no limit: nothing counted as one.
    let metrics = crate::metrics::metrics().listener("decision-tests-route", "tcp");
    unmatched.outcome.as_ref().unwrap_err().count(&metrics);
    assert_eq!(metrics.limit_refusals(CloseReason::Unmatched), 0);

    let config = self::config(
        "min_tls_version = \"1.3\"\n[listener.match]\nja4_deny = [\"t13d*\"]",
        "",
        "",
    );
    let g = generation(&config);
    let mut old = hello(Some("example.com"));
    old.version = Some(0x0303);
    assert_eq!(
        refused(&decide(&g, peer, &old, None)),
        (CloseReason::TlsVersion, Some(alert::PROTOCOL_VERSION), true)
    );
    assert_eq!(
        refused(&decide(&g, peer, &hello(Some("example.com")), Some(JA4))),
        (
            CloseReason::Ja4Refused,
            Some(alert::HANDSHAKE_FAILURE),
            true
        )
    );
}

#[test]
fn admission_refusals_send_no_alert_and_count_as_limits() {
    // After the hello: a `limit_key` with the JA4 counts per fingerprint.
    let config = config(
        "[listener.limits]\nlimit_key = \"ja4\"\nconnections_per_source = 1",
        "",
        "",
    );
    let g = generation(&config);
    let first = site(&g, "192.0.2.1:5000", Some(JA4));
    assert!(first.outcome.as_ref().unwrap().admitted.is_some());
    // Another address, the same stack: refused before routing.
    let second = site(&g, "198.51.100.1:5000", Some(JA4));
    assert_eq!(
        refused(&second),
        (CloseReason::LimitConcurrent, None, false)
    );
    let metrics = crate::metrics::metrics().listener("decision-tests-hello", "tcp");
    second.outcome.as_ref().unwrap_err().count(&metrics);
    assert_eq!(metrics.limit_refusals(CloseReason::LimitConcurrent), 1);
    drop(first);
    assert!(site(&g, "198.51.100.1:5000", Some(JA4)).outcome.is_ok());

    // On the route: its deny list, then its max_connections.
    let config = self::config(
        "",
        "max_connections = 1\n[route.limits]\ndeny = [\"203.0.113.0/24\"]",
        "",
    );
    let g = generation(&config);
    let denied = site(&g, "203.0.113.5:5000", None);
    assert_eq!(refused(&denied), (CloseReason::RouteDenied, None, true));
    let on = denied.outcome.as_ref().unwrap_err().route.unwrap();
    assert_eq!((&*on.route, on.backend.name.as_str()), ("site", "web"));
    let held = site(&g, "192.0.2.1:5000", None);
    assert!(held.outcome.as_ref().unwrap().route_slot.is_some());
    let full = site(&g, "192.0.2.2:5000", None);
    assert_eq!(refused(&full), (CloseReason::RouteFull, None, true));
    // Another route of the listener is not limited.
    assert!(
        decide(
            &g,
            from("192.0.2.2:5000"),
            &hello(Some("private.example.com")),
            None
        )
        .outcome
        .is_ok()
    );
}

#[test]
fn a_routed_hello_whose_backend_has_no_runtime_closes_no_address() {
    let config = config("", "", "");
    let backends = Arc::new(Backends::start(&BTreeMap::new(), None));
    let g = Generation::first(config.listeners[0].clone(), &backends, &None);
    let decision = site(&g, "192.0.2.1:5000", None);
    assert_eq!(refused(&decision), (CloseReason::NoAddress, None, true));
    assert!(decision.outcome.as_ref().unwrap_err().route.is_some());
}

#[test]
fn dry_runs_note_what_they_would_refuse_and_refuse_nothing() {
    // The listener's, counted after the hello by the JA4.
    let config = config(
        "[listener.limits]\nlimit_key = \"ja4\"\nconnections_per_source = 1\ndry_run = true",
        "",
        "",
    );
    let g = generation(&config);
    let first = site(&g, "192.0.2.1:5000", Some(JA4));
    assert_eq!(first.dry_runs, [None, None]);
    let second = site(&g, "192.0.2.2:5000", Some(JA4));
    assert!(second.outcome.is_ok());
    let [Some(dry), None] = second.dry_runs else {
        panic!("{:?}", second.dry_runs);
    };
    assert_eq!(
        (dry.route, dry.would_refuse),
        (None, CloseReason::LimitConcurrent)
    );

    // A route's.
    let config = self::config(
        "",
        "[route.limits]\nconnections_per_source = 1\ndry_run = true",
        "",
    );
    let g = generation(&config);
    let first = site(&g, "192.0.2.1:5000", None);
    assert_eq!(first.dry_runs, [None, None]);
    let second = site(&g, "192.0.2.1:5001", None);
    assert!(second.outcome.is_ok());
    let [None, Some(dry)] = second.dry_runs else {
        panic!("{:?}", second.dry_runs);
    };
    assert_eq!(
        (dry.route, dry.would_refuse),
        (Some("site"), CloseReason::RouteLimitConcurrent)
    );
}
