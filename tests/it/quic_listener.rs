//! The `protocol = "quic"` listener through the real binary on loopback:
//! ngtcp2's example client (Debian `ngtcp2-client`, `/usr/bin/gtlsclient`)
//! fetches a file from ngtcp2's example server (`ngtcp2-server`,
//! `/usr/sbin/gtlsserver`) through the relay, is refused with the QUIC
//! refusal for a name no route serves, a datagram that is not QUIC ends its
//! flow as `not_quic` with nothing forwarded, `[global] max_connection_rate`
//! dropping new flows above the rate, an IPv6 listener and backend, and a
//! flood of Initials from
//! thousands of source ports is held to the pending-flow bound while an
//! established flow keeps working; a stop ends open flows within the drain
//! timeout, and a reload's routes apply to new flows on the kept socket.
//! The relay does no Retry itself: the server's Retry (`--validate-addr`)
//! reaches the client, and the connection completes in one flow.
//!
//! The client sends its host argument as SNI, and `localhost` for a
//! numeric one (tests/data/quic/README.md), so the routed name here is
//! `localhost`.

use crate::common;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use common::udp::{is_eviction_summary, is_new_flow_drop_summary};
use common::{
    NO_SOURCE_LIMIT, Pki, Relay, Tool, WAIT, free_udp_port, http_get, metric, metric_now,
    open_quic_flow, scratch_dir, udp_echo_backend, udp_round_trip, wait_metric, wait_udp_bound,
    wait_until,
};
use serde_json::Value;
use tokio::net::UdpSocket;

const NGTCP2_CLIENT: &str = "/usr/bin/gtlsclient";

/// One quic listener named `quic` routing `patterns` to `backend`.
fn quic_config(
    patterns: &[&str],
    backend: SocketAddr,
    global: &str,
    listener_extra: &str,
) -> String {
    let sni = patterns
        .iter()
        .map(|p| format!("{p:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        r#"
[global]
{global}

[[listener]]
name = "quic"
protocol = "quic"
listen = ["127.0.0.1:0"]
{listener_extra}

[[route]]
sni = [{sni}]
backend = "b"

[backend.b]
addresses = ["{backend}"]
"#
    )
}

include!("common/quic_capture.rs");

/// A backend socket that only receives, read without waiting.
fn silent_backend() -> std::net::UdpSocket {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.set_nonblocking(true).unwrap();
    socket
}

/// Nothing is queued on `backend` (checked by a non-blocking read).
fn assert_nothing_received(backend: &std::net::UdpSocket) {
    let mut buf = [0u8; 2048];
    match backend.recv_from(&mut buf) {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the backend received something: {other:?}"),
    }
}

fn is_quic_close(line: &Value) -> bool {
    line["message"] == "connection closed" && line["protocol"] == "quic"
}

/// Runs gtlsclient against the relay at `relay` (exits on its own), and
/// returns its exit status, output and how long it ran.
fn run_client(
    relay: SocketAddr,
    path: &str,
    download: &std::path::Path,
) -> (bool, String, std::time::Duration) {
    assert!(
        std::path::Path::new(NGTCP2_CLIENT).exists(),
        "{NGTCP2_CLIENT} is missing: install Debian's ngtcp2-client (.ci/install-deps)"
    );
    let port = relay.port().to_string();
    let started = Instant::now();
    let mut child = Command::new(NGTCP2_CLIENT)
        .args([
            "--timeout=60s",
            "--exit-on-all-streams-close",
            "--no-quic-dump",
            "--no-http-dump",
        ])
        .arg(format!("--download={}", download.display()))
        .args(["127.0.0.1", &port])
        .arg(format!("https://localhost:{port}{path}"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{NGTCP2_CLIENT}: {e}"));
    // Bounded: the client is killed if it is still running after WAIT.
    let deadline = Instant::now() + WAIT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let output = child.wait_with_output().unwrap();
            panic!(
                "gtlsclient still runs after {WAIT:?}: {}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let output = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (status.success(), text, started.elapsed())
}

/// Starts ngtcp2's example server (with the options `extra`) on a free
/// loopback port, serving `body` as `/hello.txt` from `dir` with a
/// certificate for `localhost`; returns once its port is bound.
async fn start_gtlsserver(dir: &std::path::Path, body: &str, extra: &[&str]) -> (Tool, SocketAddr) {
    let htdocs = dir.join("htdocs");
    std::fs::create_dir_all(&htdocs).unwrap();
    std::fs::write(htdocs.join("hello.txt"), body).unwrap();
    let (cert, key) = Pki::new(&["localhost"]).write_server_pem(dir);
    let port = free_udp_port();
    std::fs::create_dir_all(dir.join("server")).unwrap();
    let htdocs_arg = format!("--htdocs={}", htdocs.display());
    let port_arg = port.to_string();
    let mut args = extra.to_vec();
    args.extend([
        htdocs_arg.as_str(),
        "127.0.0.1",
        &port_arg,
        key.to_str().unwrap(),
        cert.to_str().unwrap(),
    ]);
    let mut server = Tool::spawn("gtlsserver", &args, dir.join("server"), "ngtcp2-server");
    wait_udp_bound(port, &mut server).await;
    (server, format!("127.0.0.1:{port}").parse().unwrap())
}

/// gtlsclient fetches `/hello.txt` through the relay's quic listener at
/// `relay` into `dir/download`; fails the test unless it exits well with
/// `body`.
async fn fetch_hello(relay: SocketAddr, dir: &std::path::Path, body: &str) {
    let download = dir.join("download");
    std::fs::create_dir_all(&download).unwrap();
    let (ok, output, _) = tokio::task::spawn_blocking({
        let download = download.clone();
        move || run_client(relay, "/hello.txt", &download)
    })
    .await
    .unwrap();
    assert!(ok, "gtlsclient failed: {output}");
    let fetched = std::fs::read_to_string(download.join("hello.txt")).unwrap_or_default();
    assert_eq!(fetched, body, "{output}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ngtcp2_client_fetches_through_the_relay_from_ngtcp2_server() {
    let dir = scratch_dir("quic-e2e");
    let body = "hello through the relay\n".repeat(200);
    let (_server, backend) = start_gtlsserver(&dir, &body, &["--quiet"]).await;
    let relay = Relay::start(&quic_config(
        &["localhost"],
        backend,
        "",
        "idle_timeout = \"2s\"",
    ))
    .await;

    fetch_hello(relay.addr_of("quic"), &dir, &body).await;

    // The flow ends at idle_timeout (the client leaves without a word the
    // relay can read); a short one keeps the test quick.
    let line = relay.wait_log(is_quic_close).await;
    assert_eq!(line["close"], "idle_timeout", "{line}");
    assert_eq!(line["sni"], "localhost");
    assert_eq!(line["route"], "localhost");
    assert_eq!(line["backend"], "b");
    assert_eq!(line["backend.addr"], backend.to_string());
    assert_eq!(line["quic_version"], "v1");
    assert!(line["bytes.up"].as_u64().unwrap() >= 1200, "{line}");
    assert!(
        line["bytes.down"].as_u64().unwrap() > body.len() as u64,
        "{line}"
    );
    assert!(line["datagrams.up"].as_u64().unwrap() >= 2, "{line}");
    assert!(line["datagrams.down"].as_u64().unwrap() >= 2, "{line}");
    assert_eq!(
        relay
            .log_lines()
            .iter()
            .filter(|l| is_quic_close(l))
            .count(),
        1
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_unlisted_name_gets_the_quic_refusal() {
    let backend = silent_backend();
    let relay = Relay::start(&quic_config(
        &["app.example.com"],
        backend.local_addr().unwrap(),
        "",
        "",
    ))
    .await;
    let dir = scratch_dir("quic-refused");
    let (_, output, took) = tokio::task::spawn_blocking({
        let relay = relay.addr_of("quic");
        let dir = dir.clone();
        move || run_client(relay, "/", &dir)
    })
    .await
    .unwrap();
    assert!(
        output.contains("CRYPTO_ERROR(0x170)") || output.contains("0x170"),
        "{output}"
    );
    assert!(took < WAIT, "{took:?}");
    let line = relay.wait_log(is_quic_close).await;
    assert_eq!(line["close"], "unmatched", "{line}");
    assert_eq!(line["sni"], "localhost");
    assert_eq!(line["datagrams.down"], 1, "{line}");
    // Nothing reached the backend.
    assert_nothing_received(&backend);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_datagram_that_is_not_quic_ends_its_flow_as_not_quic() {
    let backend = silent_backend();
    let config = quic_config(&["*"], backend.local_addr().unwrap(), "", "");
    let relay = Relay::start(&format!("{config}\n[admin]\nlisten = \"127.0.0.1:0\"\n")).await;
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    client
        .send_to(b"GET / HTTP/1.0\r\n\r\n", relay.addr_of("quic"))
        .await
        .unwrap();
    let line = relay.closed_line(client.local_addr().unwrap()).await;
    assert_eq!(line["close"], "not_quic", "{line}");
    assert_eq!(line["protocol"], "quic");
    assert_eq!(line["bytes.up"], 18);
    assert_eq!(line["bytes.down"], 0);
    assert!(line["backend"].is_null(), "{line}");
    // The line is written after anything would have been forwarded.
    assert_nothing_received(&backend);
    // Counted, with the quic listener's protocol label.
    let (_, text) = http_get(relay.admin_addr().await, "/metrics").await;
    for series in [
        "snirelay_connections_closed_total{listener=\"quic\",protocol=\"quic\",reason=\"not_quic\"}",
        "snirelay_client_hellos_total{listener=\"quic\",protocol=\"quic\",outcome=\"not_quic\"}",
    ] {
        assert_eq!(metric(&text, series), 1.0, "{series} in {text}");
    }
}

#[tokio::test]
async fn an_ipv6_flow_is_routed_to_an_ipv6_backend_and_echoed() {
    // A quic listener on ::1 and a backend on ::1: the flow's hello and
    // what follows go through, and the line names both v6 addresses.
    let backend = UdpSocket::bind("[::1]:0").await.unwrap();
    let backend_addr = backend.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        while let Ok((len, from)) = backend.recv_from(&mut buf).await {
            let _ = backend.send_to(&buf[..len], from).await;
        }
    });
    let config = quic_config(&["localhost"], backend_addr, "", "idle_timeout = \"300ms\"")
        .replace("listen = [\"127.0.0.1:0\"]", "listen = [\"[::1]:0\"]");
    let relay = Relay::start(&config).await;
    let relay_addr = relay.addr_of("quic");
    assert!(relay_addr.is_ipv6(), "{relay_addr}");
    let client = UdpSocket::bind("[::1]:0").await.unwrap();
    udp_round_trip(&client, relay_addr, &capture("ngtcp2").remove(0)).await;
    udp_round_trip(&client, relay_addr, b"after the hello").await;
    let line = relay.closed_line(client.local_addr().unwrap()).await;
    assert_eq!(line["route"], "localhost", "{line}");
    assert_eq!(
        line["backend.addr"],
        backend_addr.to_string().as_str(),
        "{line}"
    );
    assert_eq!(line["close"], "idle_timeout", "{line}");
    assert!(line["datagrams.down"].as_u64().unwrap() >= 2, "{line}");
}

#[tokio::test]
async fn max_connection_rate_paces_new_flows_and_drops_the_rest() {
    // One new flow per second for the process, burst 1: of ten flows
    // started together, the first is admitted and the others' Initials are
    // dropped (a UDP socket has no backlog to wait in; a client
    // retransmits). Ten datagrams are read far within the second.
    const FLOWS: usize = 10;
    let backend = silent_backend();
    let relay = Relay::start(&quic_config(
        &["*"],
        backend.local_addr().unwrap(),
        "max_connection_rate = 1",
        &format!("idle_timeout = \"300ms\"\n{NO_SOURCE_LIMIT}"),
    ))
    .await;
    let relay_addr = relay.addr_of("quic");
    let hello = capture("ngtcp2").remove(0);
    let mut clients = Vec::new();
    for _ in 0..FLOWS {
        let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        client.send_to(&hello, relay_addr).await.unwrap();
        clients.push(client);
    }
    let summary = relay.wait_log(is_new_flow_drop_summary).await;
    assert_eq!(summary["level"], "WARN", "{summary}");
    let first = relay.closed_line(clients[0].local_addr().unwrap()).await;
    assert_eq!(first["close"], "idle_timeout", "{first}");
    // The one admitted flow reached the backend with its hello.
    let mut buf = vec![0u8; 65536];
    backend.set_nonblocking(false).unwrap();
    backend.set_read_timeout(Some(WAIT)).unwrap();
    let (len, _) = backend.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..len], &hello[..]);
    backend.set_nonblocking(true).unwrap();
    assert_nothing_received(&backend);
    // Its line came after the others were read: none of them has a line.
    let flows = relay
        .log_lines()
        .iter()
        .filter(|l| l["message"] == "connection closed" && l["protocol"] == "quic")
        .count();
    assert_eq!(flows, 1, "only the paced-in flow ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_initial_flood_is_held_to_the_pending_bound_and_open_flows_go_on() {
    const MAX_CONNECTIONS: usize = 40;
    const FLOOD: usize = 5000;
    let backend_addr = udp_echo_backend().await;
    let relay = Relay::start(&quic_config(
        &["*"],
        backend_addr,
        &format!("max_connections = {MAX_CONNECTIONS}"),
        &format!("client_hello_timeout = \"1s\"\n{NO_SOURCE_LIMIT}"),
    ))
    .await;
    let relay_addr = relay.addr_of("quic");

    // An established flow: ngtcp2's one-datagram hello, echoed back.
    let hello = capture("ngtcp2").remove(0);
    let open = open_quic_flow(relay_addr, &hello).await;

    // The flood: the first datagram of Chromium's two-datagram hello (so
    // every flow stays pending), each from a port of its own.
    let first = capture("chromium").remove(0);
    for _ in 0..FLOOD {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let _ = socket.send_to(&first, relay_addr);
    }

    // The established flow still works after the flood. The relay's
    // receive queue may still be full of the flood, which drops datagrams
    // as a network would: the helper sends again every 200 ms, as a QUIC
    // endpoint retransmits, until its echo comes (bounded by WAIT).
    udp_round_trip(&open, relay_addr, b"still here").await;

    // New flows took the places of the oldest pending ones, within the
    // bound, which never let more flows be pending than permits are free
    // (pending flows hold none).
    let evicted = relay.wait_log(is_eviction_summary).await;
    assert!(
        (evicted["pending"].as_u64().unwrap() as usize) < MAX_CONNECTIONS,
        "{evicted}"
    );
    // Pending flows end at client_hello_timeout.
    let timed_out = relay
        .wait_log(|l| is_quic_close(l) && l["close"] == "hello_timeout")
        .await;
    // The kernel may give a released port to a later flood socket, whose
    // datagram then joins the same pending flow.
    let up = timed_out["bytes.up"].as_u64().unwrap();
    assert!(up > 0 && up % first.len() as u64 == 0, "{timed_out}");
    let pending_lines = relay
        .log_lines()
        .iter()
        .filter(|l| is_quic_close(l) && l["close"] == "hello_timeout")
        .count();
    assert!(
        pending_lines < FLOOD / 2,
        "{pending_lines} of {FLOOD} flows were pending"
    );
}

/// The datagrams a backend received, each with the address it came from.
type Received = Arc<Mutex<Vec<(SocketAddr, Vec<u8>)>>>;

/// A backend that records every datagram it receives with the address it
/// came from (the relay's socket of one flow), and answers nothing.
fn recording_backend() -> (SocketAddr, Received) {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    // Ends with the test process (a blocking read on a socket of its own).
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        while let Ok((len, from)) = socket.recv_from(&mut buf) {
            record.lock().unwrap().push((from, buf[..len].to_vec()));
        }
    });
    (addr, seen)
}

/// The relay's resident memory (VmRSS in /proc/PID/status), in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_hello_flood_does_not_hold_back_a_new_clients_first_datagram() {
    // 3,000 flows that send only the first of Chromium's two hello
    // datagrams, from 200 loopback addresses (15 ports each): more than
    // the socket's 1,024 pending flows. Then new clients, each sending its
    // complete hello once and never again: the backend receives every
    // datagram of each, so each client's first datagram got in at once.
    const FLOOD: usize = 3000;
    const PENDING_BOUND: usize = 1024;
    const CLIENTS: usize = 20;
    const BURST: usize = 32;
    let _heavy = common::HEAVY.lock().await;
    snirelay::sockopt::raise_nofile_limit().expect("RLIMIT_NOFILE");
    let (backend_addr, received) = recording_backend();
    let config = quic_config(
        &["*"],
        backend_addr,
        "max_connections = 8000",
        &format!("client_hello_timeout = \"5m\"\n{NO_SOURCE_LIMIT}"),
    );
    let relay = Relay::start(&format!("{config}\n[admin]\nlisten = \"127.0.0.1:0\"\n")).await;
    let relay_addr = relay.addr_of("quic");
    let admin = relay.admin_addr().await;
    let accepted = "snirelay_connections_accepted_total{listener=\"quic\",protocol=\"quic\"}";
    let evicted =
        "snirelay_connections_closed_total{listener=\"quic\",protocol=\"quic\",reason=\"evicted\"}";
    let rss_before = rss_kib(relay.pid());

    // The flood, in bursts the relay's receive buffer holds (it would drop
    // the rest, as a network would): each burst is seen by the relay (one
    // accepted flow per socket, each kept open so its address stays its
    // own) before the next is sent.
    let first = capture("chromium").remove(0);
    let mut flood = Vec::with_capacity(FLOOD);
    for i in 0..FLOOD {
        let source = format!("127.0.{}.{}", i % 200 / 100, 1 + i % 100);
        let socket = std::net::UdpSocket::bind((source.as_str(), 0)).unwrap();
        socket.send_to(&first, relay_addr).unwrap();
        flood.push(socket);
        if flood.len() % BURST == 0 || flood.len() == FLOOD {
            wait_metric(admin, accepted, flood.len() as f64).await;
        }
    }
    // Every flow past the bound took the place of the oldest pending one.
    let evictions = wait_metric(admin, evicted, (FLOOD - PENDING_BOUND) as f64).await;
    assert_eq!(evictions, (FLOOD - PENDING_BOUND) as f64);
    let rss_after = rss_kib(relay.pid());
    eprintln!(
        "relay RSS {rss_before} KiB before the flood, {rss_after} KiB after: +{} KiB",
        rss_after.saturating_sub(rss_before)
    );
    // No pending flow forwarded anything.
    assert!(received.lock().unwrap().is_empty());

    // The new clients, one after the other: one-datagram hellos (ngtcp2's)
    // and two-datagram ones (Chromium's), each flight sent once.
    let flights = [capture("ngtcp2"), capture("chromium")];
    let mut expected = 0;
    for client in 0..CLIENTS {
        let flight = &flights[client % 2];
        let socket = UdpSocket::bind(("127.0.2.1", 0)).await.unwrap();
        for datagram in flight {
            socket.send_to(datagram, relay_addr).await.unwrap();
        }
        expected += flight.len();
        wait_until(&format!("client {client}'s flight at the backend"), || {
            received.lock().unwrap().len() >= expected
        })
        .await;
        // Exactly its flight, in order, from one flow's socket.
        let seen = received.lock().unwrap();
        let got = &seen[expected - flight.len()..];
        assert_eq!(got.len(), flight.len());
        for ((from, datagram), sent) in got.iter().zip(flight) {
            assert_eq!(from, &got[0].0);
            assert_eq!(datagram, sent, "client {client}");
        }
    }
    // Not a datagram more (none was sent twice), and each new flow made
    // room by evicting at most one pending flow: the bound held.
    assert_eq!(received.lock().unwrap().len(), expected);
    let evictions = metric_now(admin, evicted).await;
    assert!(
        evictions <= (FLOOD - PENDING_BOUND + CLIENTS) as f64,
        "{evictions} evictions"
    );
    drop(flood);
}

#[tokio::test]
async fn a_stop_ends_open_flows_within_the_drain_timeout() {
    let backend = silent_backend();
    let relay_config = quic_config(
        &["*"],
        backend.local_addr().unwrap(),
        "drain_timeout = \"1s\"",
        "",
    );
    let mut relay = Relay::start(&relay_config).await;
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let hello = capture("ngtcp2").remove(0);
    client.send_to(&hello, relay.addr_of("quic")).await.unwrap();
    // Opened: the relay reports the route it chose only on close, so the
    // backend receiving the hello is the sign.
    let backend_async = UdpSocket::from_std(backend).unwrap();
    let mut buf = vec![0u8; 65536];
    let (len, _) = tokio::time::timeout(WAIT, backend_async.recv_from(&mut buf))
        .await
        .expect("the hello forwarded within the wait")
        .unwrap();
    assert_eq!(&buf[..len], &hello[..]);
    relay.signal("TERM");
    let line = relay.closed_line(client.local_addr().unwrap()).await;
    assert_eq!(line["close"], "shutdown", "{line}");
    assert_eq!(line["protocol"], "quic");
    assert_eq!(relay.wait_exit().await, Some(0));
}

#[tokio::test]
async fn a_reload_gives_new_flows_the_new_routes() {
    let backend = silent_backend();
    let backend_addr = backend.local_addr().unwrap();
    let relay = Relay::start(&quic_config(&["app.example.com"], backend_addr, "", "")).await;
    let relay_addr = relay.addr_of("quic");
    let hello = capture("ngtcp2").remove(0);

    let before = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    before.send_to(&hello, relay_addr).await.unwrap();
    let line = relay.closed_line(before.local_addr().unwrap()).await;
    assert_eq!(line["close"], "unmatched", "{line}");
    assert_nothing_received(&backend);

    let applied = relay
        .reload(&quic_config(&["localhost"], backend_addr, "", ""), 1)
        .await;
    assert_eq!(applied["message"], "reload applied", "{applied}");
    // The same socket (the listener kept it) routes the name now.
    assert_eq!(
        relay
            .log_lines()
            .iter()
            .filter(|l| l["message"] == "listening")
            .count(),
        1
    );
    let after = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    after.send_to(&hello, relay_addr).await.unwrap();
    let backend = UdpSocket::from_std(backend).unwrap();
    let mut buf = vec![0u8; 65536];
    let (len, _) = tokio::time::timeout(WAIT, backend.recv_from(&mut buf))
        .await
        .expect("the hello forwarded within the wait")
        .unwrap();
    assert_eq!(&buf[..len], &hello[..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backends_retry_passes_through_the_relay() {
    // The relay does no Retry of its own (docs/quic.md, QUIC listener): address
    // validation is the backend's, and its Retry must reach the client
    // unchanged and the client's second Initial (new connection ID, the
    // token) continue the same flow.
    let dir = scratch_dir("quic-retry");
    let body = "validated through the relay\n".repeat(50);
    let (server, backend) = start_gtlsserver(&dir, &body, &["--validate-addr"]).await;
    let relay = Relay::start(&quic_config(
        &["localhost"],
        backend,
        "",
        "idle_timeout = \"1s\"",
    ))
    .await;
    fetch_hello(relay.addr_of("quic"), &dir, &body).await;

    // The server sent a Retry and then validated its token, both to the
    // flow's one backend socket (the line's `backend.local`).
    let lines = server.lines();
    let peer_of = |prefix: &str| {
        let line = lines
            .iter()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} line: {lines:#?}"));
        line[prefix.len()..].to_owned()
    };
    let retried = peer_of("Sending Retry packet to ");
    assert_eq!(retried, peer_of("Verifying Retry token from "));
    // One flow for the whole connection, routed, both ways.
    let line = relay.wait_log(is_quic_close).await;
    let local: SocketAddr = line["backend.local"].as_str().unwrap().parse().unwrap();
    assert_eq!(retried, format!("[{}]:{}", local.ip(), local.port()));
    assert_eq!(line["route"], "localhost", "{line}");
    assert_eq!(line["close"], "idle_timeout", "{line}");
    assert!(line["datagrams.up"].as_u64().unwrap() >= 2, "{line}");
    assert!(
        line["bytes.down"].as_u64().unwrap() > body.len() as u64,
        "{line}"
    );
    assert_eq!(
        relay
            .log_lines()
            .iter()
            .filter(|l| is_quic_close(l))
            .count(),
        1
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Datagram `seq` of a burst: its number, then filler; every 16th is
/// shorter, which ends a GSO send early (only a send's last datagram may
/// be shorter).
fn burst_datagram(seq: usize) -> Vec<u8> {
    let len = if seq % 16 == 15 { 600 } else { 1200 };
    let mut datagram = vec![(seq % 251) as u8; len];
    datagram[..4].copy_from_slice(&(seq as u32).to_be_bytes());
    datagram
}

/// Receives `count` datagrams on `socket` and checks they are bursts'
/// datagrams `first..first + count`, in order.
async fn expect_burst(socket: &UdpSocket, first: usize, count: usize, what: &str) {
    let mut buf = vec![0u8; 65536];
    for seq in first..first + count {
        let Ok(received) = tokio::time::timeout(WAIT, socket.recv_from(&mut buf)).await else {
            panic!("{what}: datagram {seq} did not arrive");
        };
        let (len, _) = received.unwrap();
        assert!(
            buf[..len] == burst_datagram(seq)[..],
            "{what}: datagram {seq} expected, got {len} bytes starting {:?}",
            &buf[..len.min(4)]
        );
    }
}

#[tokio::test]
async fn a_burst_each_way_through_one_flow_arrives_complete_and_in_order() {
    // Bursts of 64 datagrams of at most 1,200 bytes (about 150 KB of
    // socket buffer) fit the kernel's default receive buffers even if the
    // reader is late, so nothing is dropped on loopback; each burst is
    // read in full before the next is sent.
    const BURSTS: usize = 4;
    const BURST: usize = 64;
    let backend = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let relay = Relay::start(&quic_config(
        &["*"],
        backend.local_addr().unwrap(),
        "",
        "idle_timeout = \"1s\"",
    ))
    .await;
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    client.connect(relay.addr_of("quic")).await.unwrap();
    let hello = capture("ngtcp2").remove(0);
    client.send(&hello).await.unwrap();
    let mut buf = vec![0u8; 65536];
    let (len, flow) = tokio::time::timeout(WAIT, backend.recv_from(&mut buf))
        .await
        .expect("the hello forwarded within the wait")
        .unwrap();
    assert_eq!(&buf[..len], &hello[..]);

    let mut bytes = 0;
    for burst in 0..BURSTS {
        let first = burst * BURST;
        for seq in first..first + BURST {
            bytes += client.send(&burst_datagram(seq)).await.unwrap();
        }
        expect_burst(&backend, first, BURST, "client to backend").await;
    }
    for burst in 0..BURSTS {
        let first = burst * BURST;
        for seq in first..first + BURST {
            backend.send_to(&burst_datagram(seq), flow).await.unwrap();
        }
        expect_burst(&client, first, BURST, "backend to client").await;
    }

    // The flow's line counts datagrams, not batches.
    let line = relay.closed_line(client.local_addr().unwrap()).await;
    assert_eq!(line["close"], "idle_timeout", "{line}");
    assert_eq!(line["datagrams.up"], 1 + BURSTS * BURST, "{line}");
    assert_eq!(line["datagrams.down"], BURSTS * BURST, "{line}");
    assert_eq!(line["bytes.up"], hello.len() + bytes, "{line}");
    assert_eq!(line["bytes.down"], bytes, "{line}");
}

#[tokio::test]
async fn chromiums_grease_ech_is_logged_as_tcp_logs_it_and_reject_concerns_unknown_ech() {
    // Chromium's captured first flight: ALPN h3 and GREASE ECH (a random
    // config id, fixed in the capture). With `ech_config_ids` the relay
    // knows it for GREASE and `ech = "reject"` lets it through; without
    // them it cannot tell, and the reject refuses it as it refuses the
    // same hello over TCP (tests/it/route_rules.rs).
    let backend = udp_echo_backend().await;
    let config = format!(
        r#"
[[listener]]
name = "known"
protocol = "quic"
listen = ["127.0.0.1:0"]
idle_timeout = "300ms"
ech = "reject"
ech_config_ids = [7]

[[listener]]
name = "unknown"
protocol = "quic"
listen = ["127.0.0.1:0"]
ech = "reject"

[[route]]
listener = "known"
sni = ["chrome.example.com"]
backend = "b"

[[route]]
listener = "unknown"
sni = ["chrome.example.com"]
backend = "b"

[backend.b]
addresses = ["{backend}"]
"#
    );
    let relay = Relay::start(&config).await;
    let flight = capture("chromium");
    let client = common::udp::echoed_flow(relay.addr_of("known"), "127.0.0.1", &flight).await;
    let line = relay.closed_line(client.local_addr().unwrap()).await;
    assert_eq!(line["close"], "idle_timeout", "{line}");
    assert_eq!(line["sni"], "chrome.example.com", "{line}");
    assert_eq!(line["alpn"], "h3", "{line}");
    assert_eq!(line["ech"], true, "{line}");
    assert_eq!(line["ech_kind"], "grease", "{line}");

    let client = common::udp::send_flow(relay.addr_of("unknown"), &flight).await;
    let line = relay.closed_line(client.local_addr().unwrap()).await;
    assert_eq!(line["close"], "ech_rejected", "{line}");
    assert_eq!(line["alpn"], "h3", "{line}");
    assert_eq!(line["ech"], true, "{line}");
    assert_eq!(line["ech_kind"], "unknown", "{line}");
    assert_eq!(line["datagrams.down"], 1, "{line}");
}

#[tokio::test]
async fn a_route_dry_run_logs_what_it_would_refuse_and_the_flow_goes_on() {
    // As tests/it/route_limits.rs does for TCP: the route's per-source cap
    // of 1 under dry_run refuses nothing, and says what it would refuse.
    let backend = udp_echo_backend().await;
    let relay = Relay::start(
        &quic_config(&["localhost"], backend, "", "idle_timeout = \"2s\"").replace(
            "backend = \"b\"\n",
            "backend = \"b\"\nname = \"site\"\n\n[route.limits]\nconnections_per_source = 1\ndry_run = true\n",
        ),
    )
    .await;
    let flight = capture("ngtcp2");
    let at = relay.addr_of("quic");
    let _one = common::udp::echoed_flow(at, "127.0.0.1", &flight).await;
    let _two = common::udp::echoed_flow(at, "127.0.0.1", &flight).await;
    let line = relay
        .wait_log(|l| l["message"] == "dry run: admission would refuse this connection")
        .await;
    assert_eq!(line["would_refuse"], "route_limit_concurrent", "{line}");
    assert_eq!(line["route"], "site", "{line}");
    assert_eq!(line["listener"], "quic", "{line}");
}

/// A backend that never lets its flow's socket go quiet (GSO runs of 48
/// datagrams, as fast as its socket takes them) does not keep the flow past
/// its lifetime: the flow's task relays batch after batch, its backend
/// polled first, and still looks at its bounds (after `STREAK` batches in
/// a row at the latest).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_never_goes_quiet_does_not_keep_its_flow_past_its_lifetime() {
    const FLOOD_FOR: std::time::Duration = std::time::Duration::from_secs(15);
    let backend = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let relay_config = quic_config(
        &["*"],
        backend.local_addr().unwrap(),
        "",
        "max_connection_lifetime = \"1s\"",
    );
    let relay = Relay::start(&relay_config).await;
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let hello = capture("ngtcp2").remove(0);
    client.send_to(&hello, relay.addr_of("quic")).await.unwrap();
    backend.set_read_timeout(Some(WAIT)).unwrap();
    let mut buf = vec![0u8; 65536];
    let (len, flow) = backend.recv_from(&mut buf).expect("the hello forwarded");
    assert_eq!(&buf[..len], &hello[..]);
    // The client shows it receives (a datagram to the connection ID the
    // backend's long header chose): a validated flow is not held to 3x
    // what its client sent.
    let scid = [0x5c; 8];
    let mut answer = vec![0xc0, 0, 0, 0, 1, 8];
    answer.extend_from_slice(&[0xc1; 8]);
    answer.push(8);
    answer.extend_from_slice(&scid);
    answer.resize(1200, 0);
    backend.send_to(&answer, flow).unwrap();
    let mut back = vec![0u8; 2048];
    let (len, _) = tokio::time::timeout(WAIT, client.recv_from(&mut back))
        .await
        .expect("the answer relayed")
        .unwrap();
    assert_eq!(&back[..len], &answer[..]);
    let mut validating = vec![0x40];
    validating.extend_from_slice(&scid);
    validating.resize(100, 0);
    client
        .send_to(&validating, relay.addr_of("quic"))
        .await
        .unwrap();
    let (len, _) = backend
        .recv_from(&mut buf)
        .expect("the validating datagram");
    assert_eq!(&buf[..len], &validating[..]);
    // The flood, from a thread of its own: until the flow's line is in, or
    // FLOOD_FOR at most.
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flood = {
        let done = done.clone();
        std::thread::spawn(move || {
            let state = quinn_udp::UdpSocketState::new((&backend).into()).unwrap();
            // Short-header-looking datagrams of 1,200 bytes.
            let segment = 1200;
            let run: Vec<u8> = (0..48)
                .flat_map(|_| {
                    let mut datagram = vec![0x5a; segment];
                    datagram[0] = 0x40;
                    datagram
                })
                .collect();
            let transmit = quinn_udp::Transmit {
                destination: flow,
                ecn: None,
                contents: &run,
                segment_size: (state.max_gso_segments() > 1).then_some(segment),
                src_ip: None,
            };
            let until = Instant::now() + FLOOD_FOR;
            let mut sent = 0u64;
            while !done.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < until {
                if state.try_send((&backend).into(), &transmit).is_ok() {
                    sent += 1;
                }
            }
            sent
        })
    };
    let line = relay.closed_line(client.local_addr().unwrap()).await;
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let runs = flood.join().unwrap();
    assert_eq!(line["close"], "max_lifetime", "{line}");
    let duration = line["duration_ms"].as_u64().unwrap();
    assert!((900..2000).contains(&duration), "{line}");
    // The flood reached the flow: thousands of datagrams relayed.
    assert!(runs > 100, "{runs} runs sent");
    assert!(line["datagrams.down"].as_u64().unwrap() > 10_000, "{line}");
}
