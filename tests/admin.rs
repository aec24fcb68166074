//! The admin listener against a real relay process: /metrics moves with
//! traffic, /healthz, /config, and /readyz turning 503 during a drain.

mod common;

use std::net::SocketAddr;

use common::*;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const NAME: &str = "app.localhost";

/// A relay with an admin listener on a free loopback port; returns it and
/// the admin address it logged.
async fn relay_with_admin(backend: SocketAddr) -> (Relay, SocketAddr) {
    let config = format!(
        "[admin]\nlisten = \"127.0.0.1:0\"\n{}",
        simple_config(&[NAME], backend, "")
    );
    let relay = Relay::start(&config).await;
    let line = relay.wait_log(|l| l["message"] == "admin listening").await;
    let admin = line["addr"].as_str().unwrap().parse().unwrap();
    (relay, admin)
}

/// One TLS session through the relay that echoes `message`; returns the
/// client's local address.
async fn roundtrip(pki: &Pki, relay: SocketAddr, message: &[u8]) -> SocketAddr {
    let tcp = TcpStream::connect(relay).await.unwrap();
    let local = tcp.local_addr().unwrap();
    let mut tls = tls_connect(pki.client_config(), NAME, tcp).await.unwrap();
    tls.write_all(message).await.unwrap();
    let mut back = vec![0u8; message.len()];
    tls.read_exact(&mut back).await.unwrap();
    assert_eq!(back, message);
    tls.shutdown().await.unwrap();
    let mut rest = Vec::new();
    let _ = tls.read_to_end(&mut rest).await;
    local
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_move_with_traffic() {
    let pki = Pki::new(&[NAME]);
    let backend = tls_echo_backend(&pki).await;
    let (relay, admin) = relay_with_admin(backend).await;

    let (status, before) = http_get(admin, "/metrics").await;
    assert_eq!(status, 200);
    let accepted = "snirelay_connections_accepted_total{listener=\"tls\"}";
    // Series exist from start-up, at zero.
    assert!(before.contains(&format!("{accepted} 0\n")), "{before}");
    assert!(
        before.contains("snirelay_build_info{version=\""),
        "{before}"
    );
    assert!(metric(&before, "snirelay_process_open_fds") > 0.0);
    assert!(metric(&before, "snirelay_process_resident_memory_bytes") > 1e6);

    // One relayed session, one unknown name, one non-TLS client.
    let message = vec![7u8; 10_000];
    let peer = roundtrip(&pki, relay.addr(), &message).await;
    let done = relay.closed_line(peer).await;
    assert_eq!(done["close"], "done");

    let tcp = TcpStream::connect(relay.addr()).await.unwrap();
    let unmatched_peer = tcp.local_addr().unwrap();
    assert!(
        tls_connect(pki.client_config(), "other.example", tcp)
            .await
            .is_err()
    );
    relay.closed_line(unmatched_peer).await;

    let mut plain = TcpStream::connect(relay.addr()).await.unwrap();
    let plain_peer = plain.local_addr().unwrap();
    plain.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
    let _ = plain.read_to_end(&mut Vec::new()).await;
    assert_eq!(relay.closed_line(plain_peer).await["close"], "not_tls");

    let (_, after) = http_get(admin, "/metrics").await;
    let m = |series: &str| metric(&after, series);
    assert_eq!(m(accepted), 3.0, "{after}");
    assert_eq!(m("snirelay_connections_active{listener=\"tls\"}"), 0.0);
    for (reason, count) in [("done", 1.0), ("unmatched", 1.0), ("not_tls", 1.0)] {
        let series =
            format!("snirelay_connections_closed_total{{listener=\"tls\",reason=\"{reason}\"}}");
        assert_eq!(m(&series), count, "{series}\n{after}");
    }
    assert_eq!(
        m("snirelay_client_hellos_total{listener=\"tls\",outcome=\"sni\"}"),
        2.0
    );
    assert_eq!(
        m("snirelay_client_hellos_total{listener=\"tls\",outcome=\"not_tls\"}"),
        1.0
    );
    let traffic = format!("{{listener=\"tls\",route=\"{NAME}\",backend=\"b\"}}");
    let up = m(&format!("snirelay_bytes_up_total{traffic}"));
    let down = m(&format!("snirelay_bytes_down_total{traffic}"));
    assert_eq!(up, done["bytes.up"].as_f64().unwrap(), "{after}");
    assert_eq!(down, done["bytes.down"].as_f64().unwrap(), "{after}");
    assert!(up > message.len() as f64 && down > message.len() as f64);
    assert_eq!(
        m("snirelay_backend_connect_attempts_total{backend=\"b\"}"),
        1.0
    );
    assert_eq!(
        m("snirelay_backend_connect_failures_total{backend=\"b\"}"),
        0.0
    );
    assert_eq!(
        m("snirelay_backend_connect_duration_seconds_count{backend=\"b\"}"),
        1.0
    );
    // Never a client address or a server name in a label.
    assert!(!after.contains("127.0.0.1"), "{after}");
    assert!(!after.contains("other.example"), "{after}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_backend_connects_are_counted() {
    let (relay, admin) = relay_with_admin(closed_port()).await;
    let pki = Pki::new(&[NAME]);
    let tcp = TcpStream::connect(relay.addr()).await.unwrap();
    let peer = tcp.local_addr().unwrap();
    assert!(tls_connect(pki.client_config(), NAME, tcp).await.is_err());
    assert_eq!(relay.closed_line(peer).await["close"], "connect_failed");
    let (_, text) = http_get(admin, "/metrics").await;
    let m = |series: &str| metric(&text, series);
    assert_eq!(
        m("snirelay_backend_connect_attempts_total{backend=\"b\"}"),
        1.0
    );
    assert_eq!(
        m("snirelay_backend_connect_failures_total{backend=\"b\"}"),
        1.0
    );
    assert_eq!(
        m("snirelay_connections_closed_total{listener=\"tls\",reason=\"connect_failed\"}"),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_config_and_unknown_paths() {
    let backend = closed_port();
    let (relay, admin) = relay_with_admin(backend).await;
    assert_eq!(http_get(admin, "/healthz").await, (200, "ok\n".into()));
    assert_eq!(http_get(admin, "/readyz").await, (200, "ready\n".into()));
    assert_eq!(http_get(admin, "/nope").await.0, 404);

    let (status, body) = http_get(admin, "/config").await;
    assert_eq!(status, 200);
    let config: Value = serde_json::from_str(&body).unwrap();
    let listener = &config["listener"][0];
    assert_eq!(listener["name"], "tls");
    assert_eq!(listener["listen"][0], "127.0.0.1:0");
    // Defaults are filled in.
    assert_eq!(listener["client_hello_timeout"], "5s");
    assert_eq!(listener["no_sni"], "reject");
    assert_eq!(listener["routes"][0]["sni"][0], NAME);
    assert_eq!(listener["routes"][0]["backend"], "b");
    assert_eq!(config["backend"]["b"]["addresses"][0], backend.to_string());
    assert_eq!(config["backend"]["b"]["connect_timeout"], "2s");
    assert_eq!(config["admin"]["listen"], "127.0.0.1:0");
    drop(relay);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_turns_503_while_draining() {
    let pki = Pki::new(&[NAME]);
    let backend = tls_echo_backend(&pki).await;
    let (relay, admin) = relay_with_admin(backend).await;
    assert_eq!(http_get(admin, "/readyz").await.0, 200);

    // A live session keeps the drain going.
    let tcp = TcpStream::connect(relay.addr()).await.unwrap();
    let mut tls = tls_connect(pki.client_config(), NAME, tcp).await.unwrap();
    tls.write_all(b"ping").await.unwrap();
    let mut back = [0u8; 4];
    tls.read_exact(&mut back).await.unwrap();

    relay.signal("TERM");
    relay.wait_log(|l| l["message"] == "draining").await;
    assert_eq!(
        http_get(admin, "/readyz").await,
        (503, "not ready\n".into())
    );
    // Alive all the same, and the session still works.
    assert_eq!(http_get(admin, "/healthz").await.0, 200);
    tls.write_all(b"pong").await.unwrap();
    tls.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"pong");
    let (_, text) = http_get(admin, "/metrics").await;
    assert_eq!(
        metric(&text, "snirelay_connections_active{listener=\"tls\"}"),
        1.0
    );
}
