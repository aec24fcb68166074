//! What costs an attacker nothing costs the edge nothing, against the real
//! relay: a datagram from each of 20,000 forged loopback sources leaves a
//! quic listener's source table at its `max_sources` (the rest evicted,
//! least recently used first, and counted) while a real TLS client is
//! relayed throughout; and 1,000 hellos with 1,000 distinct cipher lists
//! (so 1,000 JA4s) from one address get no more than the source's share
//! under a `"source+ja4"` key.

use crate::common;

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const NAME: &str = "app.localhost";
const FORGED_SOURCES: u32 = 20_000;
const MAX_SOURCES: u32 = 1_000;

/// A 1,200-byte datagram with a QUIC long header (an Initial's size and
/// first bytes, nothing decryptable after them): what a forger sends for
/// free from any address.
fn forged_initial() -> Vec<u8> {
    let mut datagram = vec![0u8; 1200];
    datagram[0] = 0xc3;
    datagram[1..5].copy_from_slice(&1u32.to_be_bytes());
    datagram[5] = 8;
    datagram
}

/// Sends `datagram` to `to` once from each of `count` distinct loopback
/// addresses (127.10.0.1 on), at most about 50,000 a second (faster, the
/// relay's socket buffer drops most of them); returns how many were sent.
fn from_forged_sources(to: SocketAddr, datagram: &[u8], count: u32) -> u32 {
    let first = u32::from(Ipv4Addr::new(127, 10, 0, 1));
    let mut sent = 0;
    for i in 0..count {
        if i % 50 == 0 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let source = Ipv4Addr::from(first + i);
        let socket = UdpSocket::bind((source, 0)).expect("bind a loopback source address");
        if socket.send_to(datagram, to).is_ok() {
            sent += 1;
        }
    }
    sent
}

async fn roundtrip(pki: &Pki, relay: SocketAddr) {
    let tcp = TcpStream::connect(relay).await.unwrap();
    let mut tls = tls_connect(pki.client_config(), NAME, tcp).await.unwrap();
    tls.write_all(b"ping").await.unwrap();
    let mut back = [0u8; 4];
    tls.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"ping");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_sources_stay_within_max_sources_while_a_real_client_is_served() {
    let pki = Pki::new(&[NAME]);
    let backend = tls_echo_backend(&pki).await;
    let limits = format!(
        r#"connections_per_source = 50
attempts_per_source = 30
attempts_period = "1h"
max_sources = {MAX_SOURCES}"#
    );
    let config = format!(
        r#"
[admin]
listen = "127.0.0.1:0"

[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]

[listener.limits]
connections_per_source = 50
max_sources = {MAX_SOURCES}

[[listener]]
name = "quic"
protocol = "quic"
listen = ["127.0.0.1:0"]
client_hello_timeout = "1s"

[listener.limits]
{limits}

[[route]]
listener = "tls"
sni = ["{NAME}"]
backend = "b"

[[route]]
listener = "quic"
sni = ["{NAME}"]
backend = "q"

[backend.b]
addresses = ["{backend}"]

[backend.q]
addresses = ["127.0.0.1:9"]
"#
    );
    let relay = Relay::start(&config).await;
    let admin = relay.admin_addr().await;
    let quic = relay.addr_of("quic");
    let flood = tokio::task::spawn_blocking(move || {
        from_forged_sources(quic, &forged_initial(), FORGED_SOURCES)
    });
    // A real client is relayed while the flood runs, and after it.
    let mut served = 0;
    while !flood.is_finished() {
        roundtrip(&pki, relay.addr_of("tls")).await;
        served += 1;
    }
    assert_eq!(flood.await.unwrap(), FORGED_SOURCES);
    roundtrip(&pki, relay.addr_of("tls")).await;
    assert!(served > 0, "the flood ended before a client was relayed");

    // The sweep reports the table: every forged source was tracked, all
    // but `max_sources` of them evicted (plus those still in a pending
    // flow, which are never evicted: at most one per pending flow).
    let series = |name: &str| format!("{name}{{listener=\"quic\"}}");
    let text = get_metrics_until(admin, |text| {
        metric(text, &series("snirelay_admission_sources_evicted_total")) > 0.0
    })
    .await;
    let sources = metric(&text, &series("snirelay_admission_sources"));
    let evicted = metric(&text, &series("snirelay_admission_sources_evicted_total"));
    // Each flow the socket read came from a new source (datagrams the
    // kernel dropped at a full socket buffer never reached the relay).
    let flows = metric(
        &text,
        "snirelay_connections_accepted_total{listener=\"quic\",protocol=\"quic\"}",
    );
    assert!(flows > f64::from(2 * MAX_SOURCES), "{flows} flows\n{text}");
    assert!(
        sources <= f64::from(MAX_SOURCES) + 1024.0,
        "{sources} sources\n{text}"
    );
    assert_eq!(sources + evicted, flows, "{text}");
    eprintln!(
        "{FORGED_SOURCES} forged sources sent, {flows} read: {sources} tracked, {evicted} evicted; {served} real clients relayed during the flood"
    );
}

/// `/metrics` once `done` holds (the sweep runs every 10 s).
async fn get_metrics_until(admin: SocketAddr, done: impl Fn(&str) -> bool) -> String {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (_, text) = http_get(admin, "/metrics").await;
        if done(&text) {
            return text;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no sweep reported: {text}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// `hello` with its first cipher suite replaced by `suite`: the same
/// framing, another cipher list, so another JA4.
fn with_first_suite(hello: &[u8], suite: u16) -> Vec<u8> {
    let mut hello = hello.to_vec();
    // Record header (5), handshake header (4), version (2), random (32).
    let session_id = usize::from(hello[43]);
    let suites = 44 + session_id + 2;
    hello[suites..suites + 2].copy_from_slice(&suite.to_be_bytes());
    hello
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_ja4s_from_one_address_get_the_source_s_share_only() {
    let (backend, mut relayed) = crate::fingerprint::holding_backend().await;
    let config = format!(
        r#"
[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]

[listener.limits]
connections_per_source = 10
limit_key = "source+ja4"

[[route]]
sni = ["*.example.com"]
backend = "b"

[backend.b]
addresses = ["{backend}"]
"#
    );
    let relay = Relay::start(&config).await;
    let curl = capture("curl.bin");
    let mut held = Vec::new();
    let mut refused = 0;
    for i in 0..1000u16 {
        // Unassigned suite values, none of them GREASE: 1,000 JA4s.
        let hello = with_first_suite(&curl, 0x1000 + i);
        let mut client = TcpStream::connect(relay.addr()).await.unwrap();
        // A refusal at accept may close before the hello is written.
        let _ = client.write_all(&hello).await;
        let mut byte = [0u8; 1];
        tokio::select! {
            first = relayed.recv() => {
                assert_eq!(first.unwrap(), hello);
                held.push(client);
            }
            read = client.read(&mut byte) => {
                assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
                refused += 1;
            }
        }
    }
    // `ja4_source_multiple` (4) times `connections_per_source` (10).
    assert_eq!((held.len(), refused), (40, 960));
    let lines = relay
        .wait_lines(|lines| {
            let refused: Vec<_> = lines
                .iter()
                .filter(|l| l["close"] == "limit_concurrent")
                .collect();
            (refused.len() == 960).then_some(refused.len())
        })
        .await;
    assert_eq!(lines, 960);
}
