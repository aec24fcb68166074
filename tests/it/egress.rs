//! Egress source addresses (`[backend.*] source`), through the real relay
//! on loopback: TCP connections spread round robin over 127.0.0.2 and
//! 127.0.0.3, an address entry's own `source` over the backend's, an IPv6
//! source taken for an IPv6 backend address (the IPv4 one left out), a
//! QUIC flow's backend socket bound the same way; a source address that
//! has no free port toward the backend (its `ports` all taken by another
//! process's connections) skipped at once for the other, counted, warned
//! about, and not blamed on the backend address; QUIC flows the same way
//! (two sources of one port each: two flows, then `connect_failed`); a
//! source address this host lacks refused at start (and at a reload),
//! naming the key.
//!
//! The backends record the peer address of each connection (or datagram)
//! and hold the connection open. The transparent source (`"client"`) is
//! tests/it/transparent.rs.

use crate::common;

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use common::udp::next_seen;
use common::{
    Relay, WAIT, http_get, metric, one_route_config, run_snirelay, run_to_exit, scratch_dir,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

include!("common/quic_capture.rs");

/// Peers seen by a recording backend, in accept order.
type Peers = Arc<Mutex<Vec<SocketAddr>>>;

/// A TCP backend on `bind` that records each connection's peer, answers
/// one byte and holds the connection until the client goes.
async fn recording_backend(bind: &str) -> (SocketAddr, Peers) {
    let listener = TcpListener::bind(bind).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let peers: Peers = Arc::default();
    let seen = peers.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, peer)) = listener.accept().await {
            seen.lock().unwrap().push(peer);
            tokio::spawn(async move {
                let _ = stream.write_all(b"K").await;
                let mut sink = [0u8; 4096];
                while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
            });
        }
    });
    (addr, peers)
}

/// Sends a hello through `relay` and reads one byte (bounded): the open
/// client connection and what the read gave (1: the backend's byte).
async fn hello_through(relay: SocketAddr) -> (TcpStream, std::io::Result<usize>) {
    let mut client = TcpStream::connect(relay).await.unwrap();
    client
        .write_all(&common::capture("openssl_sni.bin"))
        .await
        .unwrap();
    let mut byte = [0u8; 1];
    let got = tokio::time::timeout(WAIT, client.read(&mut byte))
        .await
        .expect("the relay neither relayed nor closed");
    (client, got)
}

/// Sends a hello through `relay` and waits for the backend's byte;
/// returns the open client connection.
async fn relayed(relay: SocketAddr) -> TcpStream {
    let (client, got) = hello_through(relay).await;
    assert_eq!(
        got.unwrap(),
        1,
        "the relay closed without reaching the backend"
    );
    client
}

fn config(backend_body: &str) -> String {
    format!(
        "[admin]\nlisten = \"127.0.0.1:0\"\n{}",
        one_route_config(&["www.example.com"], "", backend_body)
    )
}

fn count_from(peers: &Peers, ip: &str) -> usize {
    let ip: IpAddr = ip.parse().unwrap();
    peers
        .lock()
        .unwrap()
        .iter()
        .filter(|p| p.ip() == ip)
        .count()
}

#[tokio::test]
async fn tcp_connections_are_spread_evenly_over_the_source_addresses() {
    let (backend, peers) = recording_backend("127.0.0.1:0").await;
    let relay = Relay::start(&config(&format!(
        "addresses = [\"{backend}\"]\nsource = {{ addresses = [\"127.0.0.2\", \"127.0.0.3\"] }}"
    )))
    .await;
    let mut held = Vec::new();
    for _ in 0..20 {
        held.push(relayed(relay.addr()).await);
    }
    let (two, three) = (
        count_from(&peers, "127.0.0.2"),
        count_from(&peers, "127.0.0.3"),
    );
    assert_eq!(two + three, 20, "{:?}", peers.lock().unwrap());
    assert!(
        two.abs_diff(three) <= 1,
        "127.0.0.2: {two}, 127.0.0.3: {three}"
    );
}

#[tokio::test]
async fn health_checks_leave_from_the_source_addresses() {
    let (backend, peers) = recording_backend("127.0.0.1:0").await;
    // The address entry's own source for the second address.
    let (own, own_peers) = recording_backend("127.0.0.1:0").await;
    let _relay = Relay::start(&config(&format!(
        "addresses = [\"{backend}\", {{ address = \"{own}\", source = {{ addresses = [\"127.0.0.4\"] }} }}]\n\
         source = {{ addresses = [\"127.0.0.2\", \"127.0.0.3\"] }}\n\n\
         [backend.b.health]\ninterval = \"50ms\"\ntimeout = \"500ms\""
    )))
    .await;
    // No client at all: every connection the backends see is a check.
    let checked = |peers: &Peers, want: usize| peers.lock().unwrap().len() >= want;
    tokio::time::timeout(WAIT, async {
        while !(checked(&peers, 4) && checked(&own_peers, 2)) {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("no health checks arrived");
    let seen = peers.lock().unwrap().clone();
    assert!(
        seen.iter()
            .all(|p| ["127.0.0.2", "127.0.0.3"].contains(&p.ip().to_string().as_str())),
        "{seen:?}"
    );
    assert!(count_from(&peers, "127.0.0.2") >= 1 && count_from(&peers, "127.0.0.3") >= 1);
    let own_seen = own_peers.lock().unwrap().clone();
    assert!(
        own_seen.iter().all(|p| p.ip().to_string() == "127.0.0.4"),
        "{own_seen:?}"
    );
}

#[tokio::test]
async fn an_address_entry_s_own_source_wins_over_the_backend_s() {
    let (own, own_peers) = recording_backend("127.0.0.1:0").await;
    let relay = Relay::start(&config(&format!(
        "addresses = [{{ address = \"{own}\", source = {{ addresses = [\"127.0.0.4\"] }} }}]\n\
         source = {{ addresses = [\"127.0.0.2\"] }}"
    )))
    .await;
    let _held = [relayed(relay.addr()).await, relayed(relay.addr()).await];
    assert_eq!(
        count_from(&own_peers, "127.0.0.4"),
        2,
        "{:?}",
        own_peers.lock().unwrap()
    );
}

#[tokio::test]
async fn an_ipv6_backend_address_is_reached_from_the_ipv6_source_only() {
    let (backend, peers) = recording_backend("[::1]:0").await;
    let relay = Relay::start(&config(&format!(
        "addresses = [\"{backend}\"]\nsource = {{ addresses = [\"127.0.0.2\", \"::1\"] }}"
    )))
    .await;
    let _held = [relayed(relay.addr()).await, relayed(relay.addr()).await];
    assert_eq!(count_from(&peers, "::1"), 2, "{:?}", peers.lock().unwrap());
}

#[tokio::test]
async fn a_quic_flow_s_backend_socket_is_bound_to_the_source_address() {
    let backend = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let backend_addr = backend.local_addr().unwrap();
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        while let Ok((len, from)) = backend.recv_from(&mut buf).await {
            let _ = seen_tx.send(from);
            let _ = backend.send_to(&buf[..len], from).await;
        }
    });
    let relay = Relay::start(&format!(
        r#"
[[listener]]
name = "quic"
protocol = "quic"
listen = ["127.0.0.1:0"]

[[route]]
listener = "quic"
sni = ["localhost"]
backend = "b"

[backend.b]
addresses = ["{backend_addr}"]
source = {{ addresses = ["127.0.0.3"] }}
"#
    ))
    .await;
    let _client =
        common::udp::echoed_flow(relay.addr_of("quic"), "127.0.0.1", &capture("ngtcp2")).await;
    let from = next_seen(&mut seen).await;
    assert_eq!(from.ip(), "127.0.0.3".parse::<IpAddr>().unwrap());
}

#[tokio::test]
async fn quic_flows_skip_a_source_with_no_free_port_and_close_connect_failed_when_none_has() {
    let backend = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let backend_addr = backend.local_addr().unwrap();
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        while let Ok((len, from)) = backend.recv_from(&mut buf).await {
            let _ = seen_tx.send(from);
            let _ = backend.send_to(&buf[..len], from).await;
        }
    });
    // One port per source address: two flows fill both.
    let (_, high) = system_port_range();
    let port = high - 30;
    let relay = Relay::start(&format!(
        r#"
[admin]
listen = "127.0.0.1:0"

[[listener]]
name = "quic"
protocol = "quic"
listen = ["127.0.0.1:0"]

[[route]]
listener = "quic"
sni = ["localhost"]
backend = "b"

[backend.b]
addresses = ["{backend_addr}"]
max_fails = 1
source = {{ addresses = ["127.0.0.2", "127.0.0.3"], ports = "{port}-{port}" }}
"#
    ))
    .await;
    let quic = relay.addr_of("quic");
    let _first = common::udp::echoed_flow(quic, "127.0.0.1", &capture("ngtcp2")).await;
    let _second = common::udp::echoed_flow(quic, "127.0.0.1", &capture("ngtcp2")).await;
    let mut froms = [next_seen(&mut seen).await, next_seen(&mut seen).await];
    froms.sort();
    assert_eq!(
        froms,
        [
            SocketAddr::from(([127, 0, 0, 2], port)),
            SocketAddr::from(([127, 0, 0, 3], port))
        ]
    );
    // A third flow finds no port on either source.
    let third = common::udp::send_flow(quic, &capture("ngtcp2")).await;
    let line = relay.closed_line(third.local_addr().unwrap()).await;
    assert_eq!(line["close"], "connect_failed", "{line}");
    let (_, text) = http_get(relay.admin_addr().await, "/metrics").await;
    let exhausted: f64 = ["127.0.0.2", "127.0.0.3"]
        .iter()
        .map(|ip| {
            metric(
                &text,
                &format!(
                    "snirelay_source_address_exhausted_total{{backend=\"b\",source=\"{ip}\"}}"
                ),
            )
        })
        .sum();
    assert_eq!(exhausted, 2.0, "{text}");
    assert_not_marked_down(&relay);
}

/// The kernel's ephemeral range: a per-socket `ports` range narrows it
/// and cannot leave it.
fn system_port_range() -> (u16, u16) {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap();
    let mut parts = text.split_whitespace().map(|p| p.parse::<u16>().unwrap());
    (parts.next().unwrap(), parts.next().unwrap())
}

/// One port of the kernel's range that only connect(2) picks: near its
/// top, an even distance from its bottom. bind(2) to port 0 (every test's
/// listener) draws an odd distance, and a port some socket is bound to is
/// one connect(2) skips toward any destination, so a port of the other
/// parity could be taken from under the test by a listener elsewhere in
/// the suite; connect(2) itself picks the even ones but shares them
/// between distinct 4-tuples.
fn connect_only_port() -> u16 {
    let (low, high) = system_port_range();
    high - (high - low) % 2
}

#[tokio::test]
async fn an_exhausted_source_is_skipped_counted_and_not_blamed_on_the_backend() {
    let (backend, peers) = recording_backend("127.0.0.1:0").await;
    // One port per source address toward this backend.
    let port = connect_only_port();
    let ports = format!("{port}-{port}");
    // Another relay takes the port of 127.0.0.2 toward the backend.
    let hog = Relay::start(&config(&format!(
        "addresses = [\"{backend}\"]\nsource = {{ addresses = [\"127.0.0.2\"], ports = \"{ports}\" }}"
    )))
    .await;
    let _hogged = relayed(hog.addr()).await;
    assert_eq!(count_from(&peers, "127.0.0.2"), 1);
    let relay = Relay::start(&config(&format!(
        "addresses = [\"{backend}\"]\nmax_fails = 1\n\
         source = {{ addresses = [\"127.0.0.2\", \"127.0.0.3\"], ports = \"{ports}\" }}"
    )))
    .await;
    // Whichever source the rotation starts at, the connection goes out
    // from 127.0.0.3: 127.0.0.2, if tried first, has no port and is
    // skipped within the same attempt.
    let _held = relayed(relay.addr()).await;
    assert_eq!(
        count_from(&peers, "127.0.0.3"),
        1,
        "{:?}",
        peers.lock().unwrap()
    );
    // Tried from one source and then the other within the attempt: not a
    // failure of the backend's.
    let admin = relay.admin_addr().await;
    let failures = "snirelay_backend_connect_failures_total{backend=\"b\"}";
    let (_, text) = http_get(admin, "/metrics").await;
    assert_eq!(metric(&text, failures), 0.0, "{text}");
    // Both sources full now: the next connection closes connect_failed
    // (127.0.0.2 tried now if it was not before), and the backend address
    // is not blamed.
    let (client, got) = hello_through(relay.addr()).await;
    assert!(!matches!(got, Ok(1)), "a second connection got through");
    let line = relay.closed_line(client.local_addr().unwrap()).await;
    assert_eq!(line["close"], "connect_failed", "{line}");
    let (_, text) = http_get(admin, "/metrics").await;
    let exhausted = metric(
        &text,
        "snirelay_source_address_exhausted_total{backend=\"b\",source=\"127.0.0.2\"}",
    );
    assert!(exhausted >= 1.0, "{text}");
    // With max_fails = 1 one blamed failure would have marked it down.
    assert_not_marked_down(&relay);
    let warn = relay
        .wait_log(|l| {
            l["level"] == "WARN"
                && l["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("a source address ran out of local ports"))
        })
        .await;
    assert_eq!(warn["source"], "127.0.0.2", "{warn}");
    assert_eq!(count_from(&peers, "127.0.0.3"), 1, "nothing more got out");
}

/// No line says the backend address was marked down.
fn assert_not_marked_down(relay: &Relay) {
    let down: Vec<_> = relay
        .log_lines()
        .into_iter()
        .filter(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("backend address marked down"))
        })
        .collect();
    assert!(down.is_empty(), "{down:?}");
}

#[tokio::test]
async fn a_source_address_this_host_lacks_is_a_start_error_naming_the_key() {
    let dir = scratch_dir("egress");
    let path = dir.join("snirelay.toml");
    std::fs::write(
        &path,
        one_route_config(
            &["www.example.com"],
            "",
            "addresses = [\"127.0.0.1:9\"]\nsource = { addresses = [\"192.0.2.77\"] }",
        ),
    )
    .unwrap();
    let mut run = std::process::Command::new(env!("CARGO_BIN_EXE_snirelay"));
    run.arg("run").arg("--config").arg(&path);
    let (code, stderr) = run_to_exit(run).await;
    assert!(code.is_some_and(|c| c != 0), "{code:?}: {stderr}");
    assert!(
        stderr.contains("backend.b.source.addresses: cannot bind 192.0.2.77 on this host"),
        "{stderr}"
    );
    // `check` cannot know: the file is valid.
    let (code, stdout, stderr) = run_snirelay(vec![
        "check".into(),
        "--config".into(),
        path.display().to_string(),
    ])
    .await;
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_reload_changes_the_source_and_refuses_an_address_this_host_lacks() {
    let (backend, peers) = recording_backend("127.0.0.1:0").await;
    let body = |source: &str| {
        config(&format!(
            "addresses = [\"{backend}\"]\nsource = {{ addresses = [\"{source}\"] }}"
        ))
    };
    let relay = Relay::start(&body("127.0.0.2")).await;
    let _first = relayed(relay.addr()).await;
    assert_eq!(count_from(&peers, "127.0.0.2"), 1);
    let applied = relay.reload(&body("127.0.0.3"), 1).await;
    assert_eq!(applied["message"], "reload applied", "{applied}");
    let _second = relayed(relay.addr()).await;
    assert_eq!(
        count_from(&peers, "127.0.0.3"),
        1,
        "{:?}",
        peers.lock().unwrap()
    );
    let rejected = relay.reload(&body("192.0.2.77"), 2).await;
    let message = rejected.to_string();
    assert!(
        message.contains("backend.b.source.addresses: cannot bind 192.0.2.77"),
        "{message}"
    );
    // Still the previous configuration.
    let _third = relayed(relay.addr()).await;
    assert_eq!(
        count_from(&peers, "127.0.0.3"),
        2,
        "{:?}",
        peers.lock().unwrap()
    );
}
