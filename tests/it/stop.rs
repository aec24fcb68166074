//! Graceful stop through real signals: SIGTERM stops accepting and drains
//! for up to `drain_timeout`; a second SIGTERM, or SIGINT, stops at once.
//! Exit code 0 in every case.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn config(backend: std::net::SocketAddr, drain_timeout: &str) -> String {
    format!("[global]\ndrain_timeout = \"{drain_timeout}\"\n")
        + &simple_config(&["app.example.com"], backend, "")
}

async fn wait_draining(relay: &Relay) {
    relay.wait_log(|l| l["message"] == "draining").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_refuses_new_connections_and_exits_when_the_last_one_ends() {
    let pki = Pki::new(&["app.example.com"]);
    let backend = tls_echo_backend(&pki).await;
    let mut relay = Relay::start(&config(backend, "30s")).await;
    let addr = relay.addr();
    let mut session = echo_session(&pki, addr, "app.example.com").await.unwrap();
    let peer = session.get_ref().0.local_addr().unwrap();

    relay.signal("TERM");
    wait_draining(&relay).await;
    let refused = TcpStream::connect(addr).await;
    assert_eq!(
        refused.err().map(|e| e.kind()),
        Some(std::io::ErrorKind::ConnectionRefused),
        "a new connection was accepted while draining"
    );
    assert!(!relay.exited());
    echo_once(&mut session, b"still served while draining")
        .await
        .unwrap();

    let ended = Instant::now();
    session.shutdown().await.unwrap();
    let mut rest = Vec::new();
    let _ = session.read_to_end(&mut rest).await;
    drop(session);
    assert_eq!(relay.wait_exit().await, Some(0));
    // Well before the 30 s drain budget: it was the connection ending.
    assert!(
        ended.elapsed() < Duration::from_secs(5),
        "{:?}",
        ended.elapsed()
    );
    assert_eq!(relay.closed_line(peer).await["close"], "done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_closes_what_is_left_at_drain_timeout() {
    let pki = Pki::new(&["app.example.com"]);
    let backend = tls_echo_backend(&pki).await;
    let mut relay = Relay::start(&config(backend, "1s")).await;
    let mut session = echo_session(&pki, relay.addr(), "app.example.com")
        .await
        .unwrap();
    let peer = session.get_ref().0.local_addr().unwrap();

    let started = Instant::now();
    relay.signal("TERM");
    let mut rest = Vec::new();
    let _ = session.read_to_end(&mut rest).await;
    let closed = started.elapsed();
    assert_eq!(relay.wait_exit().await, Some(0));
    let exited = started.elapsed();
    assert!(closed >= Duration::from_secs(1), "closed after {closed:?}");
    assert!(exited < Duration::from_secs(4), "exited after {exited:?}");
    assert_eq!(relay.closed_line(peer).await["close"], "shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_or_a_sigint_stops_at_once() {
    let pki = Pki::new(&["app.example.com"]);
    let backend = tls_echo_backend(&pki).await;

    let mut relay = Relay::start(&config(backend, "10m")).await;
    let _session = echo_session(&pki, relay.addr(), "app.example.com")
        .await
        .unwrap();
    relay.signal("TERM");
    wait_draining(&relay).await;
    // A reload while draining changes nothing.
    relay.signal("HUP");
    relay
        .wait_log(|l| l["message"] == "reload ignored while draining")
        .await;
    assert!(!relay.exited());
    relay.signal("TERM");
    assert_eq!(relay.wait_exit().await, Some(0));

    let mut relay = Relay::start(&config(backend, "10m")).await;
    let _session = echo_session(&pki, relay.addr(), "app.example.com")
        .await
        .unwrap();
    relay.signal("INT");
    assert_eq!(relay.wait_exit().await, Some(0));
    relay.wait_log(|l| l["message"] == "stopping now").await;
}
