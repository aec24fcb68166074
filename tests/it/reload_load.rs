//! Live reload under continuous load: twenty reloads while a client opens
//! 250 mutual-TLS connections a second (fewer where the machine is busy:
//! the count is not asserted), with zero failed connections, connections
//! completed between every two reloads, and long-lived sessions kept.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_reloads_under_load_refuse_nothing_and_keep_long_lived_sessions() {
    let pki = Pki::new(NAMES);
    let r = tls_echo_backend(&pki).await;
    let s1 = tls_echo_backend(&pki).await;
    let s2 = tls_echo_backend(&pki).await;
    // Config A; config B also changes route s's backend, adds a listener
    // with its own route and changes a listener timeout: all of it beside
    // the route under load, which both keep.
    let a = two_routes(r, s1, "");
    let b = two_routes(
        r,
        s2,
        r#"
[[listener]]
name = "extra"
listen = ["127.0.0.1:0"]

[[route]]
listener = "extra"
sni = ["app.example.com"]
backend = "r"
"#,
    )
    .replacen(
        "listen = [\"127.0.0.1:0\"]\n",
        "listen = [\"127.0.0.1:0\"]\nidle_timeout = \"10m\"\n",
        1,
    );
    let relay = Relay::start(&a).await;

    let mut long_lived = Vec::new();
    for _ in 0..20 {
        long_lived.push(
            echo_session(&pki, relay.addr(), "app.example.com")
                .await
                .unwrap(),
        );
    }
    let peers: Vec<String> = long_lived
        .iter()
        .map(|s| s.get_ref().0.local_addr().unwrap().to_string())
        .collect();

    let stop = CancellationToken::new();
    let rate = 250;
    let load = load(
        &pki,
        Arc::new(Mutex::new(relay.addr())),
        "app.example.com",
        rate,
        stop.clone(),
    );
    let relayed = || {
        relay
            .closed_lines()
            .iter()
            .filter(|l| l["route"] == "r")
            .count()
    };
    let mut before = relayed();
    for n in 1..=20 {
        // Pacing only: spreads the reloads over the 20 s of load.
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let line = relay.reload(if n % 2 == 1 { &b } else { &a }, n).await;
        assert_eq!(line["message"], "reload applied", "{line}");
        // The load ran across this reload: connections were relayed and
        // closed since the one before.
        let now = relayed();
        assert!(now > before, "no connection relayed before reload {n}");
        before = now;
    }
    stop.cancel();
    let report = load.await.unwrap();
    eprintln!(
        "load: {} attempted, {} ok in {:?} ({:.0}/s)",
        report.attempted,
        report.succeeded,
        report.elapsed,
        report.attempted as f64 / report.elapsed.as_secs_f64()
    );
    assert!(report.failures.is_empty(), "failed: {:?}", report.failures);
    assert_eq!(report.succeeded, report.attempted);

    for session in &mut long_lived {
        echo_once(session, b"still here").await.unwrap();
    }
    let closed: Vec<_> = relay
        .closed_lines()
        .into_iter()
        .filter(|l| peers.iter().any(|p| l["client.peer"] == p.as_str()))
        .collect();
    assert!(closed.is_empty(), "long-lived sessions closed: {closed:?}");
    // Every even reload removed the extra listener and changed route s, so
    // something was diffed each time, yet nothing on route r was marked.
    let applied: Vec<_> = relay
        .log_lines()
        .into_iter()
        .filter(|l| l["message"] == "reload applied")
        .collect();
    assert_eq!(applied.len(), 20);
    assert_eq!(applied[0]["listeners.added"], "extra");
    assert_eq!(applied[1]["listeners.removed"], "extra");
    assert_eq!(applied[0]["backends.changed"], "s");
    assert!(applied.iter().all(|l| l["connections.drained"] == 0));
}
