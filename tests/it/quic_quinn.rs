//! The `protocol = "quic"` listener through the real binary on loopback,
//! driven by quinn client and server endpoints where a test must control
//! the client: a NAT that gives the client a new source port in the middle
//! of a connection (the flow follows it by connection ID), a client that
//! migrates on purpose (`Endpoint::rebind`: it moves to a connection ID the
//! relay cannot see, and the relay's documented answer is a new flow),
//! a post-quantum hello that spans two Initial packets, and a flood of
//! Initials from 199 source addresses held to the per-source and global
//! bounds while an established connection keeps exchanging data.
//!
//! The quinn peers (endpoints, the NAT socket) are only used here, so they
//! live in this file rather than in tests/it/common.

use crate::common;

use std::fmt;
use std::io::IoSliceMut;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use common::udp::is_eviction_summary;
use common::{Pki, Relay, WAIT, http_get, metric};
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, Endpoint, Runtime, TokioRuntime, UdpPoller};
use serde_json::Value;
use snirelay::config::DEFAULT_MAX_CLIENT_HELLO_BYTES;
use snirelay::quic::initial::{HelloLimits, Parser, Verdict};

include!("common/quic_capture.rs");

const NAME: &str = "localhost";

/// A quic listener named `quic` routing `localhost` to `backend`, with an
/// admin listener for the metrics.
fn quic_config(backend: SocketAddr, global: &str, listener_extra: &str) -> String {
    format!(
        r#"
[global]
{global}

[admin]
listen = "127.0.0.1:0"

[[listener]]
name = "quic"
protocol = "quic"
listen = ["127.0.0.1:0"]
{listener_extra}

[[route]]
sni = ["{NAME}"]
backend = "b"

[backend.b]
addresses = ["{backend}"]
"#
    )
}

fn is_quic_close(line: &Value) -> bool {
    line["message"] == "connection closed" && line["protocol"] == "quic"
}

// ------------------------------------------------------------ quinn peers

/// A quinn server on 127.0.0.1:0 (the Pki's server certificate, client
/// certificates required) that echoes every bidirectional stream.
fn echo_server(pki: &Pki) -> (Endpoint, SocketAddr) {
    echo_server_with_alpn(pki, &[])
}

/// [`echo_server`] choosing among `alpn` (QUIC needs a protocol agreed
/// when the client offers some).
fn echo_server_with_alpn(pki: &Pki, alpn: &[&[u8]]) -> (Endpoint, SocketAddr) {
    let mut tls = pki.server_config();
    Arc::make_mut(&mut tls).alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let crypto = QuicServerConfig::try_from(tls).unwrap();
    let config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let endpoint = Endpoint::server(config, "127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = endpoint.local_addr().unwrap();
    let accepting = endpoint.clone();
    tokio::spawn(async move {
        while let Some(incoming) = accepting.accept().await {
            tokio::spawn(async move {
                let Ok(connection) = incoming.await else {
                    return;
                };
                while let Ok((mut send, mut recv)) = connection.accept_bi().await {
                    tokio::spawn(async move {
                        let mut buf = vec![0u8; 16 * 1024];
                        while let Ok(Some(n)) = recv.read(&mut buf).await {
                            if send.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                        let _ = send.finish();
                    });
                }
            });
        }
    });
    (endpoint, addr)
}

/// A quinn client whose datagrams leave through `socket`, trusting the
/// Pki's CA and presenting its client certificate; `kx` restricts the key
/// exchange groups (`None`: the aws-lc-rs provider's defaults).
fn client(
    pki: &Pki,
    socket: Arc<dyn AsyncUdpSocket>,
    kx: Option<Vec<&'static dyn rustls::crypto::SupportedKxGroup>>,
    idle: Duration,
) -> Endpoint {
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    if let Some(kx) = kx {
        provider.kx_groups = kx;
    }
    let tls = pki.client_config_with_provider(Arc::new(provider));
    client_with_tls(tls, socket, idle)
}

/// A quinn client on `socket` with the TLS configuration `tls`.
fn client_with_tls(
    tls: rustls::ClientConfig,
    socket: Arc<dyn AsyncUdpSocket>,
    idle: Duration,
) -> Endpoint {
    let mut config = quinn::ClientConfig::new(Arc::new(QuicClientConfig::try_from(tls).unwrap()));
    let mut transport = quinn::TransportConfig::default();
    transport.max_idle_timeout(Some(idle.try_into().unwrap()));
    config.transport_config(Arc::new(transport));
    let mut endpoint = Endpoint::new_with_abstract_socket(
        quinn::EndpointConfig::default(),
        None,
        socket,
        Arc::new(TokioRuntime),
    )
    .unwrap();
    endpoint.set_default_client_config(config);
    endpoint
}

/// A client's UDP socket behind a NAT: [`NatSocket::remap`] gives it a new
/// source port without telling quinn (as a NAT whose mapping timed out
/// does), so the client keeps its connection IDs. It also keeps the first
/// datagrams it sent, for the tests that read them.
struct NatSocket {
    inner: Mutex<Arc<dyn AsyncUdpSocket>>,
    /// The endpoint driver's waker, woken on a remap so it reads the new
    /// socket.
    reader: Mutex<Option<Waker>>,
    sent: Mutex<Vec<Vec<u8>>>,
}

/// Datagrams a [`NatSocket`] keeps.
const KEPT: usize = 8;

impl fmt::Debug for NatSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NatSocket").finish_non_exhaustive()
    }
}

impl NatSocket {
    fn new() -> Arc<NatSocket> {
        Arc::new(NatSocket {
            inner: Mutex::new(udp_socket()),
            reader: Mutex::new(None),
            sent: Mutex::new(Vec::new()),
        })
    }

    fn addr(&self) -> SocketAddr {
        self.current().local_addr().unwrap()
    }

    fn current(&self) -> Arc<dyn AsyncUdpSocket> {
        self.inner.lock().unwrap().clone()
    }

    /// Moves to a fresh socket (new source port) and returns its address.
    /// The old socket stays open, unread, as a NAT's old mapping would
    /// swallow late datagrams.
    fn remap(&self) -> SocketAddr {
        let socket = udp_socket();
        let addr = socket.local_addr().unwrap();
        *self.inner.lock().unwrap() = socket;
        if let Some(waker) = self.reader.lock().unwrap().take() {
            waker.wake();
        }
        addr
    }

    fn sent(&self) -> Vec<Vec<u8>> {
        self.sent.lock().unwrap().clone()
    }
}

/// A tokio-backed quinn socket on 127.0.0.1:0.
fn udp_socket() -> Arc<dyn AsyncUdpSocket> {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    TokioRuntime.wrap_udp_socket(socket).unwrap()
}

impl AsyncUdpSocket for NatSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        self.current().create_io_poller()
    }

    fn try_send(&self, transmit: &Transmit) -> std::io::Result<()> {
        {
            let mut sent = self.sent.lock().unwrap();
            if sent.len() < KEPT {
                sent.push(transmit.contents.to_vec());
            }
        }
        self.current().try_send(transmit)
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<std::io::Result<usize>> {
        *self.reader.lock().unwrap() = Some(cx.waker().clone());
        self.current().poll_recv(cx, bufs, meta)
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.current().local_addr()
    }
}

/// Connects `endpoint` to `relay` (the handshake bounded by WAIT), opens a
/// bidirectional stream and echoes `message` on it.
async fn connect_and_echo(
    endpoint: &Endpoint,
    relay: SocketAddr,
    message: &[u8],
) -> (quinn::Connection, quinn::SendStream, quinn::RecvStream) {
    connect_to(endpoint, relay, NAME, message).await
}

/// [`connect_and_echo`] with the server name `name`.
async fn connect_to(
    endpoint: &Endpoint,
    relay: SocketAddr,
    name: &str,
    message: &[u8],
) -> (quinn::Connection, quinn::SendStream, quinn::RecvStream) {
    let connection = tokio::time::timeout(WAIT, endpoint.connect(relay, name).unwrap())
        .await
        .expect("the handshake within the wait")
        .unwrap();
    let (mut send, mut recv) = connection.open_bi().await.unwrap();
    echo(&mut send, &mut recv, message).await;
    (connection, send, recv)
}

/// Sends `message` on the stream and reads its echo (bounded by WAIT).
async fn echo(send: &mut quinn::SendStream, recv: &mut quinn::RecvStream, message: &[u8]) {
    let exchange = async {
        send.write_all(message).await.unwrap();
        let mut back = vec![0u8; message.len()];
        recv.read_exact(&mut back).await.unwrap();
        back
    };
    let back = tokio::time::timeout(WAIT, exchange)
        .await
        .expect("the echo within the wait");
    assert_eq!(back, message);
}

// ------------------------------------------------------------------ tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_behind_a_nat_that_changes_its_port_keeps_its_flow() {
    let pki = Pki::new(&[NAME]);
    let (_server, backend) = echo_server(&pki);
    let relay = Relay::start(&quic_config(backend, "", "idle_timeout = \"1s\"")).await;
    let nat = NatSocket::new();
    let first = nat.addr();
    let endpoint = client(&pki, nat.clone(), None, Duration::from_secs(10));
    let (connection, mut send, mut recv) =
        connect_and_echo(&endpoint, relay.addr_of("quic"), b"before the NAT moved").await;

    let second = nat.remap();
    assert_ne!(first, second);
    for round in 0..5 {
        let message = format!("after the NAT moved, round {round}").repeat(100);
        echo(&mut send, &mut recv, message.as_bytes()).await;
    }
    connection.close(0u32.into(), b"done");

    // ONE flow, moved once, with bytes both ways after the move; it ends
    // at idle_timeout (the relay does not read the CONNECTION_CLOSE).
    let line = relay.wait_log(is_quic_close).await;
    assert_eq!(line["client.peer"], first.to_string(), "{line}");
    assert_eq!(line["client.last_peer"], second.to_string(), "{line}");
    assert_eq!(line["client.rebinds"], 1, "{line}");
    assert_eq!(line["close"], "idle_timeout", "{line}");
    assert_eq!(line["sni"], NAME);
    assert!(line["bytes.up"].as_u64().unwrap() > 5 * 2500, "{line}");
    assert!(line["bytes.down"].as_u64().unwrap() > 5 * 2500, "{line}");
    let flows = relay.log_lines().into_iter().filter(is_quic_close).count();
    assert_eq!(flows, 1, "{:#?}", relay.log_lines());
    let moved = relay
        .wait_log(|l| l["message"] == "QUIC flow followed to a new client address")
        .await;
    assert_eq!(moved["client.last_peer"], second.to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_migrates_to_a_new_connection_id_is_not_followed() {
    // quinn's `Endpoint::rebind` is active migration: the client moves to
    // a connection ID the server issued in an encrypted NEW_CONNECTION_ID
    // frame (RFC 9000 §9.5 forbids reusing one on a new path). The relay
    // cannot know it: the new path is a new flow of short headers, which
    // ends as `not_quic` with nothing forwarded, and the client's
    // connection times out (docs/quic.md, "## QUIC listener").
    let pki = Pki::new(&[NAME]);
    let (_server, backend) = echo_server(&pki);
    let relay = Relay::start(&quic_config(backend, "", "idle_timeout = \"1s\"")).await;
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let first = socket.local_addr().unwrap();
    let endpoint = client(
        &pki,
        TokioRuntime.wrap_udp_socket(socket).unwrap(),
        None,
        Duration::from_secs(2),
    );
    let (connection, mut send, _recv) =
        connect_and_echo(&endpoint, relay.addr_of("quic"), b"before the migration").await;

    let moved = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let second = moved.local_addr().unwrap();
    endpoint.rebind(moved).unwrap();
    let _ = send.write_all(b"after the migration").await;
    let error = tokio::time::timeout(WAIT, connection.closed())
        .await
        .expect("the connection ends within the wait");
    assert_eq!(error, quinn::ConnectionError::TimedOut);

    let line = relay.closed_line(second).await;
    assert_eq!(line["close"], "not_quic", "{line}");
    assert!(line["backend"].is_null(), "{line}");
    let original = relay.closed_line(first).await;
    assert_eq!(original["client.rebinds"], 0, "{original}");
    assert_eq!(
        original["client.last_peer"],
        first.to_string(),
        "{original}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_quantum_hello_in_two_initial_packets_is_routed() {
    // The aws-lc-rs provider offers X25519MLKEM768 first by default; the
    // client here offers nothing else, so a completed handshake proves the
    // post-quantum key exchange went through the relay.
    let pq = rustls::crypto::aws_lc_rs::kx_group::X25519MLKEM768;
    assert_eq!(
        rustls::crypto::aws_lc_rs::default_provider().kx_groups[0].name(),
        pq.name()
    );
    let pki = Pki::new(&[NAME]);
    let (_server, backend) = echo_server(&pki);
    let relay = Relay::start(&quic_config(backend, "", "idle_timeout = \"1s\"")).await;
    let nat = NatSocket::new();
    let endpoint = client(&pki, nat.clone(), Some(vec![pq]), Duration::from_secs(10));
    let (connection, _send, _recv) = connect_and_echo(
        &endpoint,
        relay.addr_of("quic"),
        b"post-quantum through the relay",
    )
    .await;

    // The first datagram alone is an incomplete hello; with the second, it
    // is the hello the relay routed.
    let sent = nat.sent();
    let limits = HelloLimits::for_hello_bytes(DEFAULT_MAX_CLIENT_HELLO_BYTES);
    let mut parser = Parser::new(limits);
    assert_eq!(parser.feed(&sent[0]), Err(Verdict::Incomplete));
    let hello = parser.feed(&sent[1]).expect("the hello in two datagrams");
    assert_eq!(hello.hello.server_name.as_deref(), Some(NAME.as_bytes()));
    assert_eq!(hello.datagrams, 2);

    connection.close(0u32.into(), b"done");
    let line = relay.closed_line(nat.addr()).await;
    assert_eq!(line["sni"], NAME, "{line}");
    assert_eq!(line["close"], "idle_timeout", "{line}");
    assert!(line["datagrams.up"].as_u64().unwrap() >= 2, "{line}");
    assert!(line["bytes.down"].as_u64().unwrap() > 0, "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_initial_flood_from_many_addresses_is_bounded_and_a_connection_goes_on() {
    let _heavy = common::HEAVY.lock().await;
    const MAX_CONNECTIONS: usize = 40;
    const PER_SOURCE: usize = 2;
    const PORTS_PER_SOURCE: usize = 5;
    let pki = Pki::new(&[NAME]);
    let (_server, backend) = echo_server(&pki);
    let relay = Relay::start(&quic_config(
        backend,
        &format!("max_connections = {MAX_CONNECTIONS}"),
        &format!(
            "idle_timeout = \"5s\"\nclient_hello_timeout = \"3s\"\n\n\
             [listener.limits]\nconnections_per_source = {PER_SOURCE}\n\
             connection_rate_per_source = 1000\nconnection_burst_per_source = 1000\n"
        ),
    ))
    .await;
    let relay_addr = relay.addr_of("quic");
    let admin = relay.admin_addr().await;

    // The established connection, from 127.0.0.1.
    let nat = NatSocket::new();
    let endpoint = client(&pki, nat.clone(), None, Duration::from_secs(10));
    let (connection, mut send, mut recv) =
        connect_and_echo(&endpoint, relay_addr, b"before the flood").await;

    // The flood: the first datagram of Chromium's two-datagram hello (so
    // every admitted flow stays pending) from 127.0.0.2 ... 127.0.0.200,
    // several ports each, while the connection keeps exchanging.
    let first = capture("chromium").remove(0);
    let flood = tokio::task::spawn_blocking(move || {
        for host in 2..=200u8 {
            for _ in 0..PORTS_PER_SOURCE {
                let socket =
                    std::net::UdpSocket::bind((std::net::Ipv4Addr::new(127, 0, 0, host), 0))
                        .unwrap();
                let _ = socket.send_to(&first, relay_addr);
            }
        }
    });
    let mut during = 0;
    loop {
        let message = format!("during the flood {during}");
        echo(&mut send, &mut recv, message.as_bytes()).await;
        during += 1;
        if flood.is_finished() || during == 1000 {
            break;
        }
    }
    flood.await.unwrap();
    echo(&mut send, &mut recv, b"after the flood").await;

    // Every pending flow ends at client_hello_timeout; then only the
    // connection's flow is active, and it still works.
    relay
        .wait_lines(|lines| {
            lines
                .iter()
                .any(|l| is_quic_close(l) && l["close"] == "hello_timeout")
                .then_some(())
        })
        .await;
    let active = tokio::time::timeout(WAIT, async {
        loop {
            let (_, text) = http_get(admin, "/metrics").await;
            if metric(
                &text,
                "snirelay_connections_active{listener=\"quic\",protocol=\"quic\"}",
            ) == 1.0
            {
                return text;
            }
            // Keep the connection's flow busy while the sweep runs.
            echo(&mut send, &mut recv, b"waiting for the sweep").await;
        }
    })
    .await
    .expect("the pending flows end within the wait");
    echo(&mut send, &mut recv, b"after the sweep").await;

    let lines = relay.log_lines();
    let closed: Vec<&Value> = lines.iter().filter(|l| is_quic_close(l)).collect();
    let pending: Vec<&Value> = closed
        .iter()
        .copied()
        .filter(|l| l["close"] == "hello_timeout")
        .collect();
    let refused: Vec<&Value> = closed
        .iter()
        .copied()
        .filter(|l| l["close"] == "limit_concurrent")
        .collect();
    let evicted = closed.iter().filter(|l| l["close"] == "evicted").count();
    // The global bound: one permit is the connection's, and a pending flow
    // (which holds none) starts only while fewer are pending than permits
    // are free, so 39 (the flood is over long before
    // client_hello_timeout); each admitted flow beyond them took the place
    // of the oldest pending one, summarised.
    let bound = MAX_CONNECTIONS - 1;
    assert_eq!(pending.len(), bound, "{pending:#?}");
    assert!(evicted > 0);
    let summary = relay.wait_log(is_eviction_summary).await;
    assert!(
        (summary["pending"].as_u64().unwrap() as usize) < MAX_CONNECTIONS,
        "{summary}"
    );
    // The per-source bound: no address had more than PER_SOURCE pending,
    // and the gate, which comes before any eviction, refused each
    // address's datagrams beyond PER_SOURCE (at most PORTS_PER_SOURCE -
    // PER_SOURCE: evicted flows were other addresses' older ones). The
    // kernel may drop part of the flood (the relay's receive buffer), so
    // the count is bounded, not exact, past the first sources.
    let mut per_source = std::collections::HashMap::<String, usize>::new();
    for line in &pending {
        let peer: SocketAddr = line["client.peer"].as_str().unwrap().parse().unwrap();
        *per_source.entry(peer.ip().to_string()).or_default() += 1;
    }
    assert!(
        per_source.values().all(|&n| n <= PER_SOURCE),
        "{per_source:?}"
    );
    let mut refused_per_source = std::collections::HashMap::<String, usize>::new();
    for line in &refused {
        let peer: SocketAddr = line["client.peer"].as_str().unwrap().parse().unwrap();
        *refused_per_source.entry(peer.ip().to_string()).or_default() += 1;
    }
    assert!(
        refused_per_source
            .values()
            .all(|&n| n <= PORTS_PER_SOURCE - PER_SOURCE),
        "{refused_per_source:?}"
    );
    assert!(!refused.is_empty());
    // Counted once in the log and once in metrics.
    assert_eq!(
        metric(
            &active,
            "snirelay_limit_refusals_total{listener=\"quic\",protocol=\"quic\",kind=\"limit_concurrent\"}"
        ),
        refused.len() as f64
    );
    // No flood flow reached the backend: the only routed flow is the
    // connection's, still open.
    assert!(closed.iter().all(|l| l["backend"].is_null()), "{closed:#?}");
    connection.close(0u32.into(), b"done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_flow_is_closed_at_its_lifetime_and_a_route_may_turn_it_off() {
    // As `tests/it/timeouts.rs` does for TCP: the listener's lifetime ends a
    // flow that is never idle, within its jitter window and as
    // `max_lifetime`; a route that sets `false` keeps its flow past it.
    const FREE: &str = "free.localhost";
    let pki = Pki::new(&[NAME, FREE]);
    let (_server, backend) = echo_server(&pki);
    let config = format!(
        r#"
[[listener]]
name = "quic"
protocol = "quic"
listen = ["127.0.0.1:0"]
idle_timeout = "20s"
max_connection_lifetime = "1s"

[[route]]
name = "limited"
sni = ["{NAME}"]
backend = "b"

[[route]]
name = "unlimited"
sni = ["{FREE}"]
backend = "b"
max_connection_lifetime = false

[backend.b]
addresses = ["{backend}"]
"#
    );
    let relay = Relay::start(&config).await;
    let at = relay.addr_of("quic");
    let (free_socket, busy_socket) = (NatSocket::new(), NatSocket::new());
    let free = client(&pki, free_socket.clone(), None, Duration::from_secs(10));
    let (_free, mut free_send, mut free_recv) = connect_to(&free, at, FREE, b"free").await;
    // A short client idle timeout: once the relay forgets the flow, the
    // client's connection times out instead of waiting for the test.
    let busy = client(&pki, busy_socket.clone(), None, Duration::from_secs(2));
    let (busy_connection, mut send, mut recv) = connect_and_echo(&busy, at, b"busy").await;

    // Never idle: an echo every 50 ms, until one is not answered.
    let mut echoes = 0;
    for round in 0..(WAIT.as_millis() / 50) {
        let message = format!("round {round}");
        let exchange = async {
            send.write_all(message.as_bytes()).await.ok()?;
            let mut back = vec![0u8; message.len()];
            recv.read_exact(&mut back).await.ok()?;
            Some(back)
        };
        match tokio::time::timeout(Duration::from_secs(1), exchange).await {
            Ok(Some(back)) => assert_eq!(back, message.as_bytes()),
            _ => break,
        }
        echoes += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Answered up to the lifetime, not after.
    assert!(echoes >= 3, "{echoes} echoes");
    let line = relay.closed_line(busy_socket.addr()).await;
    assert_eq!(line["close"], "max_lifetime", "{line}");
    assert_eq!(line["level"], "INFO", "{line}");
    assert_eq!(line["route"], "limited", "{line}");
    let duration = line["duration_ms"].as_u64().unwrap();
    assert!((900..2000).contains(&duration), "{line}");
    // The client's later datagrams are a new flow the relay does not route
    // (short headers: `not_quic`); its connection times out.
    let closed = tokio::time::timeout(WAIT, busy_connection.closed())
        .await
        .expect("the client gives up within the wait");
    assert!(
        matches!(closed, quinn::ConnectionError::TimedOut),
        "{closed:?}"
    );

    // The route that turns the lifetime off keeps its flow past it.
    echo(&mut free_send, &mut free_recv, b"after the lifetime").await;
    assert!(
        !relay
            .closed_lines()
            .iter()
            .any(|l| l["client.peer"] == free_socket.addr().to_string()),
        "{:#?}",
        relay.closed_lines()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grease_ech_hello_over_quic_is_logged_and_counted_as_tcp_does() {
    use rustls::crypto::hpke::Hpke;
    // rustls's GREASE ECH (what a browser without an ECH configuration
    // sends): an outer ECH extension with a random config id, to a key
    // nobody holds. The handshake completes with the outer hello.
    let suite = rustls::crypto::aws_lc_rs::hpke::DH_KEM_X25519_HKDF_SHA256_AES_128;
    let (placeholder, _) = suite.generate_key_pair().unwrap();
    let grease =
        rustls::client::EchMode::Grease(rustls::client::EchGreaseConfig::new(suite, placeholder));
    let pki = Pki::new(&[NAME]);
    let mut tls = pki.client_config_with_ech(
        Arc::new(rustls::crypto::aws_lc_rs::default_provider()),
        grease,
    );
    tls.alpn_protocols = vec![b"h3".to_vec(), b"hq-interop".to_vec()];
    let (_server, backend) = echo_server_with_alpn(&pki, &[b"h3"]);
    const LISTED: u8 = 7;
    let relay = Relay::start(&quic_config(
        backend,
        "",
        &format!("idle_timeout = \"1s\"\nech_config_ids = [{LISTED}]"),
    ))
    .await;
    let nat = NatSocket::new();
    let endpoint = client_with_tls(tls, nat.clone(), Duration::from_secs(10));
    let (connection, _send, _recv) = connect_and_echo(
        &endpoint,
        relay.addr_of("quic"),
        b"grease through the relay",
    )
    .await;
    connection.close(0u32.into(), b"done");

    // The config id the client drew, read from its own Initials: GREASE
    // lands on a listed id one time in 256, and is then taken for real.
    let sent = nat.sent();
    let mut parser = Parser::new(HelloLimits::for_hello_bytes(DEFAULT_MAX_CLIENT_HELLO_BYTES));
    let hello = sent
        .iter()
        .find_map(|datagram| parser.feed(datagram).ok())
        .expect("the client's hello");
    let Some(snirelay::wire::client_hello::Ech::Outer { config_id }) = hello.hello.ech else {
        panic!("no outer ECH in the hello: {:?}", hello.hello.ech);
    };
    let kind = if config_id == LISTED {
        "real"
    } else {
        "grease"
    };

    let line = relay.closed_line(nat.addr()).await;
    assert_eq!(line["protocol"], "quic", "{line}");
    assert_eq!(line["close"], "idle_timeout", "{line}");
    assert_eq!(line["sni"], NAME, "{line}");
    assert_eq!(line["alpn"], "h3,hq-interop", "{line}");
    assert_eq!(line["ech"], true, "{line}");
    assert_eq!(line["ech_kind"], kind, "{line}");
    let admin = relay.admin_addr().await;
    assert_eq!(quic_ech_hellos(admin).await, 1.0);

    // A hello without ECH: `ech = false`, no `ech_kind`, no count.
    let mut tls =
        pki.client_config_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()));
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let plain = client_with_tls(tls, udp_socket(), Duration::from_secs(10));
    let plain_socket = plain.local_addr().unwrap();
    let (connection, _send, _recv) =
        connect_and_echo(&plain, relay.addr_of("quic"), b"no ECH").await;
    connection.close(0u32.into(), b"done");
    let line = relay.closed_line(plain_socket).await;
    assert_eq!(line["ech"], false, "{line}");
    assert_eq!(line["ech_kind"], Value::Null, "{line}");
    assert_eq!(line["alpn"], "h3", "{line}");
    assert_eq!(quic_ech_hellos(admin).await, 1.0);
}

/// `snirelay_client_hellos_ech_total` of the listener `quic`.
async fn quic_ech_hellos(admin: SocketAddr) -> f64 {
    let (_, text) = http_get(admin, "/metrics").await;
    metric(
        &text,
        "snirelay_client_hellos_ech_total{listener=\"quic\",protocol=\"quic\"}",
    )
}
