//! `backup` addresses (HAProxy's `backup` servers) against the real binary:
//! a backend with a primary and a backup, both TLS echo backends, under
//! `round_robin`. While the primary is up every connection goes to it (the
//! rotation never turns to the backup); once its health check marks it
//! down new connections go to the backup, without trying the primary; once
//! it rises they go back to it. A QUIC flow's address is planned the same
//! way: flows go to the primary only, until the operator drains it.

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;

use common::udp::{echoed_flow, next_seen, udp_echo_backends};
use common::*;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

include!("common/quic_capture.rs");

const NAME: &str = "app.example.com";
const DOWN: &str = "backend address marked down (health check)";
const UP: &str = "backend address marked up (health check)";

async fn echo_on(pki: &Pki, addr: SocketAddr) -> (JoinHandle<()>, SocketAddr) {
    let listener = TcpListener::bind(addr).await.unwrap();
    let bound = listener.local_addr().unwrap();
    (serve_tls_echo(pki, Arc::new(listener)), bound)
}

fn is(line: &Value, message: &str, addr: SocketAddr) -> bool {
    line["message"] == message && line["addr"] == addr.to_string().as_str()
}

/// Where the next `n` clients were relayed.
async fn relayed_to(relay: &Relay, pki: &Pki, n: usize) -> Vec<String> {
    let mut to = Vec::new();
    for _ in 0..n {
        to.push(relayed_backend_addr(relay, pki, NAME).await);
    }
    to
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_takes_over_while_the_primary_is_down_and_hands_back_when_it_rises() {
    let pki = Pki::new(&[NAME]);
    let (primary_task, primary) = echo_on(&pki, "127.0.0.1:0".parse().unwrap()).await;
    let backup = tls_echo_backend(&pki).await;
    // Passive health off: only the checker marks the primary down.
    let relay = Relay::start(&format!(
        r#"
[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]

[[route]]
sni = ["{NAME}"]
backend = "b"

[backend.b]
addresses = ["{primary}", {{ address = "{backup}", backup = true }}]
policy = "round_robin"
max_fails = 0
connect_timeout = "1s"

[backend.b.health]
interval = "100ms"
timeout = "500ms"
rise = 2
fall = 2
"#
    ))
    .await;
    let primary_text = primary.to_string();
    let backup_text = backup.to_string();
    assert_eq!(
        relayed_to(&relay, &pki, 4).await,
        [primary_text.as_str(); 4],
        "round_robin does not turn to a backup while the primary is up"
    );

    // The primary stops: once its check marks it down, the backup serves,
    // and the primary is not even tried.
    primary_task.abort();
    let _ = primary_task.await;
    relay.wait_log(|l| is(l, DOWN, primary)).await;
    let seen = relay.log_lines().len();
    assert_eq!(relayed_to(&relay, &pki, 3).await, [backup_text.as_str(); 3]);
    let tried_primary = relay.log_lines()[seen..].iter().any(|l| {
        l["message"] == "backend connect attempt failed" && l["addr"] == primary_text.as_str()
    });
    assert!(
        !tried_primary,
        "the down primary was tried before the backup"
    );

    // The primary listens again on its port: it rises, and takes over.
    let (primary_task, _) = echo_on(&pki, primary).await;
    relay.wait_log(|l| is(l, UP, primary)).await;
    assert_eq!(
        relayed_to(&relay, &pki, 3).await,
        [primary_text.as_str(); 3]
    );
    assert!(
        !relay.log_lines().iter().any(|l| is(l, DOWN, backup)),
        "the backup is health-checked too, and stayed up"
    );
    primary_task.abort();
}

#[tokio::test]
async fn a_quic_flow_goes_to_the_backup_only_once_the_primary_is_out() {
    const TOKEN: &str = "backup-operator";
    let (echo, mut seen) = udp_echo_backends(2).await;
    let (primary, backup) = (echo[0], echo[1]);
    let tokens = token_file(TOKEN);
    let relay = Relay::start(&format!(
        r#"
[admin]
listen = "127.0.0.1:0"
token_file = "{}"

[[listener]]
name = "quic"
protocol = "quic"
listen = ["127.0.0.1:0"]
idle_timeout = "1s"
{NO_SOURCE_LIMIT}

[[route]]
sni = ["localhost"]
backend = "b"

[backend.b]
addresses = ["{primary}", {{ address = "{backup}", backup = true }}]
policy = "round_robin"
"#,
        tokens.display()
    ))
    .await;
    let relay_addr = relay.addr_of("quic");
    let hello = capture("ngtcp2");
    // While the primary is up the rotation never turns to the backup.
    for _ in 0..3 {
        let _flow = echoed_flow(relay_addr, "127.0.0.1", &hello).await;
        assert_eq!(next_seen(&mut seen).await, primary);
    }
    // The operator drains the primary: it counts as down, the backup
    // takes the next flows.
    let request = address_state_request("b", primary, "drain", TOKEN);
    let answer = http_tcp(relay.admin_addr().await, &request).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    for _ in 0..2 {
        let _flow = echoed_flow(relay_addr, "127.0.0.1", &hello).await;
        assert_eq!(next_seen(&mut seen).await, backup);
    }
    let _ = std::fs::remove_dir_all(tokens.parent().unwrap());
}
