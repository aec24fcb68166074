//! QUIC address validation (issue 49) through the real binary on
//! loopback: a flood of forged Initials (one real Initial, captured from a
//! quinn client, replayed from thousands of 127.x.y.z addresses, each a
//! new flow) against a relay with a small `[global] max_connections`
//! holds no connection permit, while a real QUIC client (a quinn
//! handshake and an echoed request) and a TCP client are each served
//! within a second throughout; every forged flow ends `evicted` (at the
//! socket's bound of unvalidated flows) or `unvalidated` (at its 5 s), as
//! the metrics and the access log count them.
//!
//! The forged Initials name a route of their own, to a UDP echo backend
//! (it answers each flow, so the relay learns an ID and relays back, as
//! from a real server), so that the flood costs the real QUIC server
//! nothing: what is measured is the relay. On today's main each forged
//! flow held a permit for `idle_timeout` (30 s), and both clients were
//! refused once `max_connections` of them had come.

use crate::common;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::udp::receive;
use common::{Pki, Relay, WAIT, echo_session, metric, metric_now, udp_echo_backend, wait_metric};
use quinn::Endpoint;
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use serde_json::Value;

/// The name real clients ask for (the quinn server's and the TLS echo
/// backend's certificate).
const NAME: &str = "localhost";
/// The name of the forged Initials.
const FORGED: &str = "forged.localhost";
/// `[global] max_connections`: small, so that forged flows holding permits
/// would lock everyone out at once.
const MAX_CONNECTIONS: usize = 16;
/// The routes' `idle_timeout` (the default), in seconds.
const IDLE_TIMEOUT_S: usize = 30;
/// Rounds of one real QUIC client and one TCP client during the flood;
/// each QUIC flow keeps its permit until it idles out, so fewer than
/// `MAX_CONNECTIONS`.
const ROUNDS: usize = 5;
/// The most forged Initials sent (the loop's bound).
const MAX_FORGED: usize = 60_000;
/// Forged Initials sent at once, then waited for until the relay has seen
/// them: its receive buffer holds that many beside the real clients'
/// datagrams, so the kernel drops none (it would drop the rest, as a
/// network would, and then the clients' too).
const BURST: usize = 48;
/// The socket's bound of open unvalidated flows
/// (`quic::flows::validation::MAX_UNVALIDATED_FLOWS`).
const UNVALIDATED_BOUND: usize = 256;

fn config(quic: SocketAddr, echo: SocketAddr, tls: SocketAddr) -> String {
    format!(
        r#"
[global]
max_connections = {MAX_CONNECTIONS}

[admin]
listen = "127.0.0.1:0"

[[listener]]
name = "quic"
protocol = "quic"
listen = ["127.0.0.1:0"]
[listener.limits]
connections_per_source = false

[[listener]]
name = "tcp"
listen = ["127.0.0.1:0"]

[[route]]
name = "real"
listener = "quic"
sni = ["{NAME}"]
backend = "quinn"
idle_timeout = "{IDLE_TIMEOUT_S}s"

[[route]]
name = "forged"
listener = "quic"
sni = ["{FORGED}"]
backend = "echo"
idle_timeout = "{IDLE_TIMEOUT_S}s"

[[route]]
name = "tcp"
listener = "tcp"
sni = ["{NAME}"]
backend = "tls"

[backend.quinn]
addresses = ["{quic}"]

[backend.echo]
addresses = ["{echo}"]

[backend.tls]
addresses = ["{tls}"]
"#
    )
}

/// A quinn server on 127.0.0.1:0 that echoes every bidirectional stream.
fn quinn_echo_server(pki: &Pki) -> (Endpoint, SocketAddr) {
    let crypto = QuicServerConfig::try_from(pki.server_config()).unwrap();
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
                        let mut buf = vec![0u8; 4096];
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

/// A quinn client on a port of its own on 127.0.0.1. Its first round-trip
/// estimate is a loopback one, so a lost Initial is sent again after tens
/// of milliseconds (RFC 9002's default, 333 ms, is an Internet path's).
/// `x25519_only`: no post-quantum key share, so its hello fits one
/// Initial (a complete, routable one).
fn quinn_client(pki: &Pki, x25519_only: bool) -> Endpoint {
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    if x25519_only {
        provider.kx_groups = vec![rustls::crypto::aws_lc_rs::kx_group::X25519];
    }
    let tls = pki.client_config_with_provider(Arc::new(provider));
    let mut config = quinn::ClientConfig::new(Arc::new(QuicClientConfig::try_from(tls).unwrap()));
    let mut transport = quinn::TransportConfig::default();
    transport.initial_rtt(Duration::from_millis(10));
    config.transport_config(Arc::new(transport));
    let mut endpoint = Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    endpoint.set_default_client_config(config);
    endpoint
}

/// The first datagram a quinn client sends for `name`: its Initial,
/// complete and routable, as a forger replays it.
async fn captured_initial(pki: &Pki, name: &str) -> Vec<u8> {
    let sink = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let endpoint = quinn_client(pki, true);
    let connecting = endpoint.connect(sink.local_addr().unwrap(), name).unwrap();
    let (initial, _) = receive(&sink).await;
    drop(connecting);
    endpoint.close(0u32.into(), b"captured");
    assert_eq!(initial[0] & 0xf0, 0xc0, "a v1 Initial");
    initial
}

/// A real QUIC client's handshake and echoed request through `relay`;
/// how long it took (bounded by WAIT).
async fn quic_request(pki: &Pki, relay: SocketAddr, round: usize) -> Duration {
    let started = Instant::now();
    let endpoint = quinn_client(pki, false);
    let request = format!("request {round}");
    let exchange = async {
        let connection = endpoint.connect(relay, NAME).unwrap().await.unwrap();
        let (mut send, mut recv) = connection.open_bi().await.unwrap();
        send.write_all(request.as_bytes()).await.unwrap();
        let mut back = vec![0u8; request.len()];
        recv.read_exact(&mut back).await.unwrap();
        connection.close(0u32.into(), b"done");
        back
    };
    let back = tokio::time::timeout(WAIT, exchange)
        .await
        .expect("the QUIC request within the wait");
    assert_eq!(back, request.as_bytes());
    started.elapsed()
}

/// A TCP client's TLS session and echo through `relay`; how long it took.
async fn tcp_request(pki: &Pki, relay: SocketAddr) -> Duration {
    let started = Instant::now();
    let session = tokio::time::timeout(WAIT, echo_session(pki, relay, NAME))
        .await
        .expect("the TCP session within the wait")
        .expect("a relayed echo session");
    drop(session);
    started.elapsed()
}

/// The forged source of flow `n`: 127.1.0.0 and up, one address each.
fn forged_source(n: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 1 + (n >> 16) as u8, (n >> 8) as u8, n as u8)
}

fn series(name: &str, labels: &str) -> String {
    format!("{name}{{{labels}}}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_initials_hold_no_permit_and_real_clients_are_served_throughout() {
    let _heavy = common::HEAVY.lock().await;
    snirelay::sockopt::raise_nofile_limit().expect("RLIMIT_NOFILE");
    let pki = Pki::new(&[NAME]);
    let (_server, quic_backend) = quinn_echo_server(&pki);
    let echo = udp_echo_backend().await;
    let tls = common::tls_echo_backend(&pki).await;
    let relay = Relay::start(&config(quic_backend, echo, tls)).await;
    let (quic, tcp) = (relay.addr_of("quic"), relay.addr_of("tcp"));
    let admin = relay.admin_addr().await;
    let accepted = series(
        "snirelay_connections_accepted_total",
        "listener=\"quic\",protocol=\"quic\"",
    );
    let initial = captured_initial(&pki, FORGED).await;

    // The flood, from a task of its own: each Initial from a new address,
    // in bursts the relay's receive buffer holds, as fast as the relay
    // takes them, until the clients are done (or MAX_FORGED).
    let stop = Arc::new(AtomicBool::new(false));
    let flood = {
        let (stop, accepted, initial) = (stop.clone(), accepted.clone(), initial.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let mut sent = 0;
            while sent < MAX_FORGED && !stop.load(Ordering::Relaxed) {
                for _ in 0..BURST {
                    let socket = std::net::UdpSocket::bind((forged_source(sent), 0)).unwrap();
                    socket.send_to(&initial, quic).unwrap();
                    sent += 1;
                }
                wait_metric(admin, &accepted, sent as f64).await;
            }
            (sent, started.elapsed())
        })
    };
    // The clients, once the forged flows fill the budget twice over (every
    // new one evicts the oldest), one QUIC and one TCP request a round.
    wait_metric(admin, &accepted, (2 * UNVALIDATED_BOUND) as f64).await;
    let mut slowest = (Duration::ZERO, Duration::ZERO);
    for round in 0..ROUNDS {
        let (q, t) = (
            quic_request(&pki, quic, round).await,
            tcp_request(&pki, tcp).await,
        );
        assert!(q < Duration::from_secs(1), "round {round}: QUIC in {q:?}");
        assert!(t < Duration::from_secs(1), "round {round}: TCP in {t:?}");
        slowest = (slowest.0.max(q), slowest.1.max(t));
    }
    stop.store(true, Ordering::Relaxed);
    let (forged, took) = flood.await.unwrap();
    let rate = forged as f64 / took.as_secs_f64();
    eprintln!(
        "{forged} forged Initials in {took:?} ({rate:.0}/s); slowest QUIC request {:?}, TCP {:?}",
        slowest.0, slowest.1
    );
    // At least 10x the rate at which forged flows holding permits for
    // idle_timeout would take them all.
    assert!(
        rate >= (10 * MAX_CONNECTIONS) as f64 / IDLE_TIMEOUT_S as f64,
        "{rate}/s"
    );
    assert!(forged < MAX_FORGED, "the flood outlasted the clients");

    // Every forged flow ends, unvalidated: evicted by a newer one, or at
    // its 5 s (bounded by WAIT).
    let unvalidated = "snirelay_quic_unvalidated_flows";
    let deadline = tokio::time::Instant::now() + WAIT;
    let text = loop {
        let (_, text) = common::http_get(admin, "/metrics").await;
        if metric(&text, unvalidated) == 0.0 {
            break text;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} unvalidated flows left",
            metric(&text, unvalidated)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let closed_before = |reason: &str| {
        metric(
            &text,
            &series(
                "snirelay_quic_unvalidated_closed_total",
                &format!("reason=\"{reason}\""),
            ),
        )
    };
    let (evicted, expired) = (closed_before("evicted"), closed_before("unvalidated"));
    assert_eq!(closed_before("max_connections"), 0.0);
    // Each flow the relay accepted is a forged one or a real client's:
    // the forged ones all ended unvalidated, each counted once.
    let flows = metric(&text, &accepted);
    assert_eq!(
        evicted + expired,
        flows - ROUNDS as f64,
        "{evicted} + {expired}: {:#?} {:#?}",
        text.lines()
            .filter(|l| l.contains("quic") && !l.starts_with('#'))
            .collect::<Vec<_>>(),
        relay.log_lines().iter().rev().take(3).collect::<Vec<_>>()
    );
    // At most a budget's worth were left to expire; the rest made room.
    assert!(evicted >= flows - ROUNDS as f64 - UNVALIDATED_BOUND as f64);
    // The echo answers no more than it was sent: nothing held back.
    assert_eq!(
        metric(&text, "snirelay_quic_amplification_dropped_total"),
        0.0
    );
    // The access log says the same, flow by flow (its DEBUG lines of the
    // admission-fault closes included), and no real client's flow is
    // among them.
    let closed = |reason: &'static str| {
        move |lines: &[Value]| {
            let n = lines
                .iter()
                .filter(|l| {
                    l["message"] == "connection closed"
                        && l["protocol"] == "quic"
                        && l["close"] == reason
                })
                .count();
            Some(n)
        }
    };
    let logged_evicted = relay
        .wait_lines(|lines| closed("evicted")(lines).filter(|&n| n as f64 == evicted))
        .await;
    let logged_expired = relay
        .wait_lines(|lines| closed("unvalidated")(lines).filter(|&n| n as f64 == expired))
        .await;
    let forged_lines = relay
        .log_lines()
        .into_iter()
        .filter(|l| {
            l["message"] == "connection closed"
                && (l["close"] == "evicted" || l["close"] == "unvalidated")
        })
        .collect::<Vec<_>>();
    assert_eq!(forged_lines.len(), logged_evicted + logged_expired);
    assert!(
        forged_lines.iter().all(|l| l["route"] == "forged"
            && l["client.peer"].as_str().unwrap().starts_with("127.")
            && !l["client.peer"].as_str().unwrap().starts_with("127.0.0.1:")),
        "a real client's flow was ended unvalidated"
    );
    // The real clients' flows hold their permits still; the forged ones
    // held none (the TCP side took its permits throughout).
    assert_eq!(
        metric_now(
            admin,
            &series(
                "snirelay_connections_active",
                "listener=\"quic\",protocol=\"quic\""
            )
        )
        .await,
        ROUNDS as f64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unvalidated_client_is_sent_at_most_three_times_what_it_sent() {
    // A backend that answers a client's one Initial (1,200 bytes) with ten
    // datagrams of 1,200: the relay passes three (3,600 bytes, RFC 9000
    // §8), drops and counts the other seven, and the flow, never
    // validated, closes `unvalidated` after its 5 s.
    const ANSWERS: usize = 10;
    let pki = Pki::new(&[NAME]);
    let backend = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let backend_addr = backend.local_addr().unwrap();
    let relay = Relay::start(&config(backend_addr, backend_addr, backend_addr)).await;
    let admin = relay.admin_addr().await;
    let initial = captured_initial(&pki, NAME).await;
    let client = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    client
        .send_to(&initial, relay.addr_of("quic"))
        .await
        .unwrap();
    let (forwarded, flow) = receive(&backend).await;
    assert_eq!(forwarded, initial);
    for n in 0..ANSWERS {
        let mut answer = vec![0x40; 1200];
        answer[1] = n as u8;
        backend.send_to(&answer, flow).await.unwrap();
    }
    let dropped = "snirelay_quic_amplification_dropped_total";
    assert_eq!(wait_metric(admin, dropped, 7.0).await, 7.0);
    for n in 0..3u8 {
        let (answer, _) = receive(&client).await;
        assert_eq!((answer.len(), answer[1]), (1200, n));
    }
    let line = relay.closed_line(client.local_addr().unwrap()).await;
    assert_eq!(line["close"], "unvalidated", "{line}");
    assert_eq!(
        (line["bytes.up"].as_u64(), line["bytes.down"].as_u64()),
        (Some(1200), Some(3600)),
        "{line}"
    );
    assert_eq!(
        metric_now(
            admin,
            "snirelay_quic_unvalidated_closed_total{reason=\"unvalidated\"}"
        )
        .await,
        1.0
    );
    assert_eq!(metric_now(admin, dropped).await, 7.0);
}
