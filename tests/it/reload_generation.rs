//! Reloads back to back under load, alone in their own test binary: every
//! accept reads one whole generation (routes, backends, admission, pacing),
//! so a connection accepted while a reload is being published never pairs a
//! new route table with the old backends or the reverse.

use crate::common;

use std::sync::{Arc, Mutex};

use common::*;
use tokio_util::sync::CancellationToken;

/// Route `app.example.com` to backend `name` at `addr`, the only backend.
fn routed_to(name: &str, addr: std::net::SocketAddr) -> String {
    format!(
        r#"
[global]
drain_timeout = "30s"

[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]
{NO_SOURCE_LIMIT}
[[route]]
name = "app"
sni = ["app.example.com"]
backend = "{name}"

[backend.{name}]
addresses = ["{addr}"]
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloads_in_a_tight_loop_under_load_never_pair_routes_with_missing_backends() {
    const RELOADS: usize = 300;
    let pki = Pki::new(NAMES);
    let x = tls_echo_backend(&pki).await;
    let y = tls_echo_backend(&pki).await;
    // Each reload removes the route's backend and adds another under a new
    // name: a route table of one file seen with the backends of the other
    // finds no backend and closes `no_address`.
    let via_x = routed_to("x", x);
    let via_y = routed_to("y", y);
    let relay = Relay::start(&via_x).await;

    let stop = CancellationToken::new();
    let load = load(
        &pki,
        Arc::new(Mutex::new(relay.addr())),
        "app.example.com",
        300,
        stop.clone(),
    );
    for n in 1..=RELOADS {
        let line = relay
            .reload(if n % 2 == 1 { &via_y } else { &via_x }, n)
            .await;
        assert_eq!(line["message"], "reload applied", "{line}");
    }
    stop.cancel();
    let report = load.await.unwrap();
    eprintln!(
        "load: {} attempted, {} ok in {:?} over {RELOADS} reloads",
        report.attempted, report.succeeded, report.elapsed
    );
    // Each reload changes the route, so connections in flight are drained
    // (closed at a random moment within drain_timeout): a load failure is
    // allowed only as a `drained` close. Any other reason, `no_address`
    // above all, is a connection that met a half-published reload.
    relay
        .wait_count(report.attempted as usize, |l| {
            l["message"] == "connection closed"
        })
        .await;
    let closes = relay.closed_lines();
    let unexpected: Vec<_> = closes
        .iter()
        // The load client closes right after its echo, so a late close_notify
        // from the backend can meet a socket it already dropped (a reset).
        .filter(|l| {
            !["done", "drained", "client_closed", "client_reset"]
                .contains(&l["close"].as_str().unwrap())
        })
        .collect();
    assert!(unexpected.is_empty(), "{unexpected:#?}");
    let drained = closes.iter().filter(|l| l["close"] == "drained").count();
    assert!(
        report.failures.len() <= drained,
        "{} failed, {drained} drained: {:?}",
        report.failures.len(),
        report.failures
    );
    assert!(report.succeeded > 0);
}
