//! TCP keepalive (`tcp_keepalive`, per listener and per backend): a peer
//! that vanishes without FIN or reset is closed by keepalive well before
//! `idle_timeout`, with its own close reason, and the other side is closed
//! too; the settings reach the relay's sockets, on both sides (a backend
//! socket's once its connection has lasted `KEEPALIVE_ARM_DELAY`, never
//! before), and a reload changes them for new connections.
//!
//! The relay runs in a network namespace (`common::netns`) on one end of a
//! veth pair; the client and the backend are this process, on the other
//! end. A peer vanishes when the namespace starts dropping its packets:
//! the relay's probes then go unanswered, as if the peer's network had
//! gone. Needs root, `ip` and `nft`, like the other interop tests; it fails
//! loudly without them.

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use common::netns::NetNs;
use common::{Pki, Relay, WAIT, echo_once, tls_backend_on, tls_connect};

/// Probing fast enough for a test: a silent peer is given up on about
/// 1 + 2 × 1 = 3 s after it last answered, against a 5-minute idle timeout.
const FAST_PROBES: &str = r#"tcp_keepalive = { idle = "1s", interval = "1s", count = 2 }"#;

/// How a connection ended, as its surviving end saw it.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// The relay closed it with a FIN (TLS: EOF without close_notify).
    Closed,
    Failed(std::io::ErrorKind),
}

/// How a read that ended the connection ended.
fn ended(error: std::io::Error) -> Ended {
    match error.kind() {
        std::io::ErrorKind::UnexpectedEof => Ended::Closed,
        kind => Ended::Failed(kind),
    }
}

/// What the backend received on one connection, and how it ended.
type BackendReport = (Vec<u8>, Ended);

/// A relay in a namespace, a mutual-TLS echo backend outside it that
/// reports each connection's end, and the PKI both trust.
struct Edge {
    relay: Relay,
    backend: SocketAddr,
    reports: mpsc::UnboundedReceiver<BackendReport>,
    pki: Pki,
    // Dropped last: the relay (killed on drop) is inside it.
    ns: NetNs,
}

fn config(ns: &NetNs, backend: SocketAddr, listener_extra: &str, backend_extra: &str) -> String {
    format!(
        r#"
[[listener]]
name = "tls"
listen = ["{inner}:0"]
idle_timeout = "5m"
{listener_extra}

[[route]]
sni = ["a.example"]
backend = "b"

[backend.b]
addresses = ["{backend}"]
connect_timeout = "2s"
{backend_extra}
"#,
        inner = ns.inner
    )
}

impl Edge {
    async fn start(listener_extra: &str, backend_extra: &str) -> Edge {
        let ns = NetNs::new();
        let pki = Pki::new(&["a.example"]);
        let (tx, reports) = mpsc::unbounded_channel();
        let listener = TcpListener::bind((ns.outer, 0)).await.unwrap();
        let backend = tls_backend_on(listener, &pki, move |mut tls| {
            let tx = tx.clone();
            async move {
                use tokio::io::AsyncWriteExt;
                let mut received = Vec::new();
                let mut buf = [0u8; 4096];
                let end = loop {
                    match tls.read(&mut buf).await {
                        Ok(0) => break Ended::Closed,
                        Ok(n) => {
                            received.extend_from_slice(&buf[..n]);
                            if let Err(e) = tls.write_all(&buf[..n]).await {
                                break Ended::Failed(e.kind());
                            }
                        }
                        Err(e) => break ended(e),
                    }
                };
                let _ = tx.send((received, end));
            }
        });
        let config = config(&ns, backend, listener_extra, backend_extra);
        let relay = Relay::launch(&config, |path| ns.wrap(&Relay::command(path))).await;
        Edge {
            relay,
            backend,
            reports,
            pki,
            ns,
        }
    }

    /// A relayed TLS session, proven by one echo of `hello`.
    async fn session(&self) -> tokio_rustls::client::TlsStream<TcpStream> {
        let tcp = TcpStream::connect(self.relay.addr()).await.unwrap();
        let mut tls = tls_connect(self.pki.client_config(), "a.example", tcp)
            .await
            .unwrap();
        echo_once(&mut tls, b"hello").await.unwrap();
        tls
    }

    /// The next backend connection's report.
    async fn backend_report(&mut self) -> BackendReport {
        tokio::time::timeout(WAIT, self.reports.recv())
            .await
            .unwrap_or_else(|_| panic!("the backend connection did not end within {WAIT:?}"))
            .expect("the backend stopped")
    }
}

/// Asserts the log line says the relay gave up on a silent peer, and well
/// before `idle_timeout` (5 minutes): within the usual wait of 10 s.
fn assert_keepalive_close(line: &serde_json::Value, reason: &str, level: &str) {
    assert_eq!(line["close"], reason, "{line:#}");
    assert_eq!(line["level"], level, "{line:#}");
    let lived = line["duration_ms"].as_u64().unwrap();
    assert!(lived < 15_000, "closed only after {lived} ms: {line:#}");
    // The hello and one echo each way moved before the peer vanished.
    assert!(line["bytes.up"].as_u64().unwrap() > 0, "{line:#}");
    assert!(line["bytes.down"].as_u64().unwrap() > 0, "{line:#}");
}

#[tokio::test]
async fn a_vanished_client_is_closed_by_keepalive_and_the_backend_is_closed() {
    let mut edge = Edge::start(FAST_PROBES, "").await;
    let tls = edge.session().await;
    let client = tls.get_ref().0.local_addr().unwrap();
    // Nothing in flight: the relay is probing the client, not retransmitting.
    let (client_side, _) = settled_sockets(&edge, client).await;
    assert!(keepalive_timer(&client_side), "{client_side:?}");

    edge.ns.drop_from(client.port());

    let line = edge.relay.closed_line(client).await;
    assert_keepalive_close(&line, "client_keepalive", "INFO");
    let (received, end) = edge.backend_report().await;
    assert_eq!(
        received, b"hello",
        "only the client's message reached the backend"
    );
    assert_eq!(
        end,
        Ended::Closed,
        "the relay closes the backend side with a FIN"
    );
    drop(tls);
}

#[tokio::test]
async fn a_vanished_backend_is_closed_by_keepalive_and_the_client_is_closed() {
    let edge = Edge::start("", FAST_PROBES).await;
    let mut tls = edge.session().await;
    let client = tls.get_ref().0.local_addr().unwrap();
    let backend_side = armed_backend_socket(&edge, client).await;
    assert!(keepalive_timer(&backend_side), "{backend_side:?}");

    edge.ns.drop_from(edge.backend.port());

    let line = edge.relay.closed_line(client).await;
    assert_keepalive_close(&line, "backend_keepalive", "WARN");
    assert_client_closed(&mut tls).await;
}

/// Keepalive probes only an idle socket; data the vanished backend never
/// acknowledges is caught by the user timeout, at the same horizon and
/// with the same reason.
#[tokio::test]
async fn a_backend_that_vanishes_with_data_in_flight_is_closed_at_the_same_horizon() {
    let edge = Edge::start("", FAST_PROBES).await;
    let mut tls = edge.session().await;
    let client = tls.get_ref().0.local_addr().unwrap();
    armed_backend_socket(&edge, client).await;

    edge.ns.drop_from(edge.backend.port());
    {
        use tokio::io::AsyncWriteExt;
        tls.write_all(b"are you there?").await.unwrap();
        tls.flush().await.unwrap();
    }
    // The relay retransmits what it forwarded: no keepalive probing now.
    let deadline = tokio::time::Instant::now() + WAIT;
    while !relay_sockets(&edge.ns).iter().any(|s| {
        s.peer == edge.backend
            && s.timer
                .as_deref()
                .is_some_and(|t| t.starts_with("timer:(on,"))
    }) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the relay never retransmitted to the backend: {:#?}",
            relay_sockets(&edge.ns)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let line = edge.relay.closed_line(client).await;
    assert_keepalive_close(&line, "backend_keepalive", "WARN");
    assert_client_closed(&mut tls).await;
}

/// The relay closed the client's connection with a FIN (a TLS EOF without
/// close_notify), and sent nothing more.
async fn assert_client_closed(tls: &mut tokio_rustls::client::TlsStream<TcpStream>) {
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(WAIT, tls.read(&mut buf))
        .await
        .expect("the client side was not closed");
    let end = match read {
        Ok(0) => Ended::Closed,
        Ok(n) => panic!("{n} unexpected bytes reached the client"),
        Err(e) => ended(e),
    };
    assert_eq!(
        end,
        Ended::Closed,
        "the relay closes the client side with a FIN"
    );
}

/// One of the relay's sockets, from `ss` in its namespace.
#[derive(Debug)]
struct RelaySocket {
    local: SocketAddr,
    peer: SocketAddr,
    /// `timer:(…)`, if a timer is pending.
    timer: Option<String>,
}

fn relay_sockets(ns: &NetNs) -> Vec<RelaySocket> {
    ns.exec(&["ss", "-tnoH", "state", "established"])
        .lines()
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            Some(RelaySocket {
                local: cols.get(2)?.parse().ok()?,
                peer: cols.get(3)?.parse().ok()?,
                timer: cols
                    .iter()
                    .find(|c| c.starts_with("timer:"))
                    .map(|c| c.to_string()),
            })
        })
        .collect()
}

/// The relay's two sockets of the session from `client` (client side,
/// backend side), once neither waits for an acknowledgement (a pending
/// retransmission timer would hide the keepalive timer).
async fn settled_sockets(edge: &Edge, client: SocketAddr) -> (RelaySocket, RelaySocket) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let sockets = relay_sockets(&edge.ns);
        let mut client_side = None;
        let mut backend_side = None;
        for socket in sockets {
            if socket.peer == client && socket.local == edge.relay.addr() {
                client_side = Some(socket);
            } else if socket.peer == edge.backend {
                backend_side = Some(socket);
            }
        }
        if let (Some(c), Some(b)) = (client_side, backend_side) {
            let retransmitting = |s: &RelaySocket| {
                s.timer
                    .as_deref()
                    .is_some_and(|t| t.starts_with("timer:(on,"))
            };
            if !retransmitting(&c) && !retransmitting(&b) {
                return (c, b);
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the relay's sockets for {client} did not settle: {:#?}",
            relay_sockets(&edge.ns)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The relay's backend-side socket of the session from `client`, once its
/// keepalive is armed: the relay sets a backend socket's keepalive only
/// after the connection has lasted `KEEPALIVE_ARM_DELAY` (bounded wait).
async fn armed_backend_socket(edge: &Edge, client: SocketAddr) -> RelaySocket {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (_, backend_side) = settled_sockets(edge, client).await;
        if keepalive_timer(&backend_side) {
            return backend_side;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the backend socket's keepalive was never armed: {backend_side:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether the timer pending on `socket` is the keepalive timer.
fn keepalive_timer(socket: &RelaySocket) -> bool {
    socket
        .timer
        .as_deref()
        .is_some_and(|t| t.starts_with("timer:(keepalive,"))
}

/// The minutes of the keepalive timer pending on `socket`, if any (ss
/// shows the time left, which starts just under the idle time).
fn keepalive_minutes(socket: &RelaySocket) -> Option<u64> {
    let rest = socket.timer.as_deref()?.strip_prefix("timer:(keepalive,")?;
    let (minutes, _) = rest.split_once("min")?;
    minutes.parse().ok()
}

#[tokio::test]
async fn the_settings_reach_both_sides_and_a_reload_changes_them_for_new_connections() {
    // Client side off; backend side on, with an idle time ss shows as 33 min
    // (2000 s), so it cannot be the kernel's default of 120 min.
    let mut edge = Edge::start(
        "tcp_keepalive = false",
        r#"tcp_keepalive = { idle = "2000s" }"#,
    )
    .await;
    let tls = edge.session().await;
    let client = tls.get_ref().0.local_addr().unwrap();
    let (client_side, _) = settled_sockets(&edge, client).await;
    assert_eq!(client_side.timer, None, "{client_side:?}");
    let backend_side = armed_backend_socket(&edge, client).await;
    assert_eq!(
        keepalive_minutes(&backend_side),
        Some(33),
        "{backend_side:?}"
    );
    drop(tls);
    edge.relay.closed_line(client).await;
    edge.backend_report().await;

    // The reload swaps them: the kept listening socket now hands out
    // sockets with keepalive, the backend's are made without.
    let config = config(
        &edge.ns,
        edge.backend,
        r#"tcp_keepalive = { idle = "1000s", interval = "5s", count = 3 }"#,
        "tcp_keepalive = false",
    );
    let outcome = edge.relay.reload(&config, 1).await;
    assert_eq!(outcome["message"], "reload applied", "{outcome:#}");
    let tls = edge.session().await;
    let client = tls.get_ref().0.local_addr().unwrap();
    let (client_side, _) = settled_sockets(&edge, client).await;
    assert_eq!(keepalive_minutes(&client_side), Some(16), "{client_side:?}");
    // The backend's would be armed by now if it were on: past the delay
    // (a bound, not a readiness wait), its socket still has no timer.
    tokio::time::sleep(snirelay::sockopt::KEEPALIVE_ARM_DELAY + Duration::from_millis(500)).await;
    let (_, backend_side) = settled_sockets(&edge, client).await;
    assert_eq!(backend_side.timer, None, "{backend_side:?}");
    drop(tls);
}
