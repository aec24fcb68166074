//! QUIC flows reach the same backends as TCP connections, through the real
//! binary on loopback: a DNS backend (the test DNS server answering
//! 127.0.0.1, or never answering: `no_address` after `connect_timeout`), a
//! cluster backend (the test control plane answering another node, this
//! node's `local_backend`, or a target outside `allowed_targets`; a
//! `local_overrides` name going to `local_backend` unasked; a pushed local
//! name's flow closing `moved` when a push drops the name), the
//! per-address cap reached by open flows (`backend_full`), an address in
//! `maint` skipped by new flows and ending its open one (`address_maint`),
//! `least_connections` counting flows and TCP connections alike,
//! `source_hash` choosing the address TCP's ranking gives the client, and
//! passive health (a backend port that answers ICMP port unreachable is
//! marked down, and the next flow goes elsewhere).
//!
//! The backends are UDP echo sockets (tests/it/common/udp.rs) and the clients
//! replay captured first flights (tests/data/quic): choosing the address
//! needs no QUIC server. ngtcp2 through the relay is tests/it/quic_listener.rs.

use crate::common;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;

use common::control_plane::{ControlPlane, Reply};
use common::dns::{DnsServer, Mode};
use common::udp::{
    echoed_flow, next_seen, send_flow, udp_and_tcp_port, udp_echo_backends, udp_echo_on,
};
use common::{NO_SOURCE_LIMIT, Relay, WAIT, http_request_text, http_tcp, token_file};
use serde_json::Value;
use snirelay::backend::balance::{affinity_hash, affinity_rank};
use tokio::net::UdpSocket;

include!("common/quic_capture.rs");

/// The names of the one-datagram captures used here.
const NGTCP2: &str = "localhost";
const AIOQUIC: &str = "aioquic.example.com";
const RFC9001: &str = "example.com";
/// Chromium's two-datagram hello.
const CHROMIUM: &str = "chrome.example.com";

/// A relay with one quic listener `quic` (and `extra_listeners` after it)
/// routing the captures' names to backend `b`, whose body is `backend`;
/// `top` goes first, `after` last.
fn quic_relay(top: &str, backend: &str, after: &str) -> String {
    format!(
        r#"
{top}

[[listener]]
name = "quic"
protocol = "quic"
listen = ["127.0.0.1:0"]
idle_timeout = "1s"
{NO_SOURCE_LIMIT}

[[route]]
listener = "quic"
sni = ["{NGTCP2}", "{AIOQUIC}", "{RFC9001}", "{CHROMIUM}"]
backend = "b"

[backend.b]
{backend}

{after}
"#
    )
}

fn addresses(addrs: &[SocketAddr]) -> String {
    let list: Vec<String> = addrs.iter().map(|a| format!("\"{a}\"")).collect();
    format!("addresses = [{}]", list.join(", "))
}

fn is_quic_close(line: &Value) -> bool {
    line["message"] == "connection closed" && line["protocol"] == "quic"
}

/// The close line of the flow from `client`.
async fn closed(relay: &Relay, client: &UdpSocket) -> Value {
    let line = relay.closed_line(client.local_addr().unwrap()).await;
    assert_eq!(line["protocol"], "quic", "{line}");
    line
}

/// Nothing reported on `seen` (every datagram so far was taken).
fn nothing_seen(seen: &mut tokio::sync::mpsc::UnboundedReceiver<SocketAddr>) {
    assert!(seen.try_recv().is_err(), "a backend received a datagram");
}

// ------------------------------------------------------------------- DNS

#[tokio::test]
async fn a_flow_reaches_a_dns_backend_at_the_resolved_address() {
    let (echo, mut seen) = udp_echo_backends(1).await;
    let dns = DnsServer::start().await;
    dns.set("udp.example.net", vec!["127.0.0.1".parse().unwrap()], 60);
    let backend = format!(
        "resolve = \"udp.example.net:{}\"\nresolver = \"{}\"\nconnect_timeout = \"2s\"",
        echo[0].port(),
        dns.addr
    );
    let relay = Relay::start(&quic_relay("", &backend, "")).await;
    let client = echoed_flow(relay.addr_of("quic"), "127.0.0.1", &capture("ngtcp2")).await;
    assert_eq!(next_seen(&mut seen).await, echo[0]);
    let line = closed(&relay, &client).await;
    assert_eq!(line["close"], "idle_timeout", "{line}");
    assert_eq!(line["backend"], "b");
    assert_eq!(line["backend.addr"], echo[0].to_string().as_str());
    assert_eq!(line["datagrams.down"], 1, "{line}");
}

#[tokio::test]
async fn a_flow_waits_for_the_first_answer_up_to_connect_timeout_then_closes_no_address() {
    let (echo, mut seen) = udp_echo_backends(1).await;
    let dns = DnsServer::start().await;
    dns.set_mode(Mode::Silent);
    let backend = format!(
        "resolve = \"udp.example.net:{}\"\nresolver = \"{}\"\nconnect_timeout = \"1s\"",
        echo[0].port(),
        dns.addr
    );
    let relay = Relay::start(&quic_relay("", &backend, "")).await;
    let started = std::time::Instant::now();
    let client = send_flow(relay.addr_of("quic"), &capture("ngtcp2")).await;
    // Held while it waits: a retransmission joins it, nothing is forwarded.
    client
        .send_to(&capture("ngtcp2")[0], relay.addr_of("quic"))
        .await
        .unwrap();
    let line = closed(&relay, &client).await;
    assert!(started.elapsed() >= std::time::Duration::from_millis(900));
    assert_eq!(line["close"], "no_address", "{line}");
    assert_eq!(line["datagrams.up"], 2, "{line}");
    assert_eq!(line["datagrams.down"], 0, "{line}");
    assert!(line["backend.addr"].is_null(), "{line}");
    nothing_seen(&mut seen);
}

// --------------------------------------------------------------- cluster

#[tokio::test]
async fn a_cluster_backend_sends_flows_to_the_answered_node_or_the_local_backend() {
    let (echo, mut seen) = udp_echo_backends(2).await;
    let (remote, home) = (echo[0], echo[1]);
    let plane = ControlPlane::start().await;
    plane.set(NGTCP2, Reply::endpoints(&[remote]));
    plane.set(AIOQUIC, Reply::Endpoints(vec![]));
    plane.set(RFC9001, Reply::endpoints(&["192.0.2.1:443"]));
    // A v1 hop header has no UDP form: the other node gets the datagrams
    // as they came, and echoes them (a v2 hop header over UDP:
    // tests/it/quic_proxy_in.rs).
    let backend = format!(
        "connect_timeout = \"2s\"\n\n[backend.b.cluster]\nlookup_url = \"{}\"\n\
         allowed_targets = [\"127.0.0.0/8\"]\nlocal_backend = \"home\"\n\
         local_overrides = [\"{CHROMIUM}\"]\nhop_proxy_protocol = \"v1\"",
        plane.url()
    );
    let relay = Relay::start(&quic_relay(
        "",
        &backend,
        &format!("[backend.home]\naddresses = [\"{home}\"]"),
    ))
    .await;
    let relay_addr = relay.addr_of("quic");

    // Another node: its address.
    let to_remote = echoed_flow(relay_addr, "127.0.0.1", &capture("ngtcp2")).await;
    assert_eq!(next_seen(&mut seen).await, remote);
    // This node: the local backend.
    let to_home = echoed_flow(relay_addr, "127.0.0.1", &capture("aioquic_v1")).await;
    assert_eq!(next_seen(&mut seen).await, home);
    // A local override: the local backend, without a lookup (both held
    // datagrams forwarded).
    let _overridden = echoed_flow(relay_addr, "127.0.0.1", &capture("chromium")).await;
    assert_eq!(next_seen(&mut seen).await, home);
    assert_eq!(next_seen(&mut seen).await, home);
    assert_eq!(plane.requests(CHROMIUM), 0);
    // Outside allowed_targets: refused, nothing forwarded.
    let refused = send_flow(relay_addr, &capture("rfc9001_a2")).await;
    let line = closed(&relay, &refused).await;
    assert_eq!(line["close"], "target_not_allowed", "{line}");
    assert_eq!(line["datagrams.down"], 0, "{line}");
    nothing_seen(&mut seen);

    let line = closed(&relay, &to_remote).await;
    assert_eq!(line["backend.addr"], remote.to_string().as_str(), "{line}");
    assert_eq!(line["sni"], NGTCP2);
    let line = closed(&relay, &to_home).await;
    assert_eq!(line["backend.addr"], home.to_string().as_str(), "{line}");
    assert_eq!(line["close"], "idle_timeout", "{line}");
    assert_eq!(plane.requests(NGTCP2), 1);
    assert_eq!(plane.requests(AIOQUIC), 1);
}

#[tokio::test]
async fn a_flow_to_a_pushed_local_name_closes_moved_when_a_push_drops_the_name() {
    const TOKEN: &str = "quic-pusher";
    let (echo, mut seen) = udp_echo_backends(2).await;
    let (remote, home) = (echo[0], echo[1]);
    let plane = ControlPlane::start().await;
    plane.set(NGTCP2, Reply::endpoints(&[remote]));
    plane.set(AIOQUIC, Reply::endpoints(&[remote]));
    let tokens = token_file(TOKEN);
    let top = format!(
        "[admin]\nlisten = \"127.0.0.1:0\"\ntoken_file = \"{}\"\nmoved_close_window = \"200ms\"",
        tokens.display()
    );
    let backend = format!(
        "connect_timeout = \"2s\"\n\n[backend.b.cluster]\nlookup_url = \"{}\"\n\
         allowed_targets = [\"127.0.0.0/8\"]\nlocal_backend = \"home\"",
        plane.url()
    );
    // A long idle timeout: only the push ends the flow.
    let config = quic_relay(
        &top,
        &backend,
        &format!("[backend.home]\naddresses = [\"{home}\"]"),
    )
    .replace("idle_timeout = \"1s\"", "idle_timeout = \"1m\"");
    let relay = Relay::start(&config).await;
    let relay_addr = relay.addr_of("quic");
    let push = |names: &[&str]| {
        let body = serde_json::json!({ "fullDomains": names }).to_string();
        http_request_text(
            "POST",
            "/update-local-snis",
            &[&format!("Authorization: Bearer {TOKEN}")],
            &body,
        )
    };
    let answer = http_tcp(relay.admin_addr().await, &push(&[NGTCP2, AIOQUIC])).await;
    assert_eq!(answer.status, 200, "{answer:?}");

    // Both pushed names go to the local backend without a lookup.
    let moving = echoed_flow(relay_addr, "127.0.0.1", &capture("ngtcp2")).await;
    assert_eq!(next_seen(&mut seen).await, home);
    let staying = echoed_flow(relay_addr, "127.0.0.1", &capture("aioquic_v1")).await;
    assert_eq!(next_seen(&mut seen).await, home);
    assert_eq!(plane.requests(NGTCP2), 0);

    // NGTCP2's name leaves the local set: its open flow closes `moved`,
    // the other name's flow stays open.
    let answer = http_tcp(relay.admin_addr().await, &push(&[AIOQUIC])).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.json()["closing"], 1, "{answer:?}");
    let line = closed(&relay, &moving).await;
    assert_eq!(line["close"], "moved", "{line}");
    assert_eq!(line["sni"], NGTCP2, "{line}");
    assert_eq!(line["backend.addr"], home.to_string().as_str(), "{line}");
    staying.send_to(b"still here", relay_addr).await.unwrap();
    let mut buf = [0u8; 64];
    let (len, _) = tokio::time::timeout(WAIT, staying.recv_from(&mut buf))
        .await
        .expect("the other name's flow still echoes")
        .unwrap();
    assert_eq!(&buf[..len], b"still here");
    assert!(
        !relay
            .log_lines()
            .iter()
            .any(|l| is_quic_close(l) && l["sni"] == AIOQUIC),
        "the other name's flow must stay open"
    );
    let _ = std::fs::remove_dir_all(tokens.parent().unwrap());
}

// ---------------------------------------------------- caps and operator

#[tokio::test]
async fn open_flows_fill_the_per_address_cap_and_the_next_closes_backend_full() {
    let (echo, mut seen) = udp_echo_backends(1).await;
    let backend = format!("{}\nmax_connections_per_address = 2", addresses(&echo));
    let relay = Relay::start(&quic_relay("", &backend, "")).await;
    let relay_addr = relay.addr_of("quic");
    let hello = capture("ngtcp2");
    let _first = echoed_flow(relay_addr, "127.0.0.1", &hello).await;
    let _second = echoed_flow(relay_addr, "127.0.0.1", &hello).await;
    assert_eq!(next_seen(&mut seen).await, echo[0]);
    assert_eq!(next_seen(&mut seen).await, echo[0]);
    let third = send_flow(relay_addr, &hello).await;
    let line = closed(&relay, &third).await;
    assert_eq!(line["close"], "backend_full", "{line}");
    assert!(line["backend.addr"].is_null(), "{line}");
    assert_eq!(line["datagrams.down"], 0, "{line}");
    nothing_seen(&mut seen);
    // Once the open flows idled out, their slots are free again.
    relay
        .wait_count(2, |l| is_quic_close(l) && l["close"] == "idle_timeout")
        .await;
    let _fourth = echoed_flow(relay_addr, "127.0.0.1", &hello).await;
    assert_eq!(next_seen(&mut seen).await, echo[0]);
}

#[tokio::test]
async fn maint_ends_the_flows_on_an_address_and_new_flows_skip_it() {
    const TOKEN: &str = "quic-operator";
    let (echo, mut seen) = udp_echo_backends(2).await;
    let (a, b) = (echo[0], echo[1]);
    let tokens = token_file(TOKEN);
    let top = format!(
        "[global]\ndrain_timeout = \"1s\"\n\n[admin]\nlisten = \"127.0.0.1:0\"\ntoken_file = \"{}\"",
        tokens.display()
    );
    // A long idle timeout: only maint ends the open flow.
    let backend = format!("{}\npolicy = \"ordered\"", addresses(&echo));
    let config =
        quic_relay(&top, &backend, "").replace("idle_timeout = \"1s\"", "idle_timeout = \"1m\"");
    let relay = Relay::start(&config).await;
    let relay_addr = relay.addr_of("quic");
    let hello = capture("ngtcp2");
    let on_a = echoed_flow(relay_addr, "127.0.0.1", &hello).await;
    assert_eq!(next_seen(&mut seen).await, a);

    let request = http_request_text(
        "POST",
        &format!("/backends/b/addresses/{a}/state"),
        &[&format!("Authorization: Bearer {TOKEN}")],
        r#"{"state": "maint"}"#,
    );
    let answer = http_tcp(relay.admin_addr().await, &request).await;
    assert_eq!(answer.status, 200, "{answer:?}");

    let line = closed(&relay, &on_a).await;
    assert_eq!(line["close"], "address_maint", "{line}");
    assert_eq!(line["backend.addr"], a.to_string().as_str(), "{line}");
    // `ordered` would choose a: it is skipped.
    let next = echoed_flow(relay_addr, "127.0.0.1", &hello).await;
    assert_eq!(next_seen(&mut seen).await, b);
    drop(next);
    let _ = std::fs::remove_dir_all(tokens.parent().unwrap());
}

// -------------------------------------------------------------- policies

/// A UDP echo socket and a TCP listener on the same 127.0.0.1 port (a
/// port whose TCP side is taken is given up for another, a bounded number
/// of times).
#[tokio::test]
async fn least_connections_counts_flows_and_tcp_connections_alike() {
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let mut echo = Vec::new();
    let mut tcp_counts = Vec::new();
    for tag in ["a", "b"] {
        let (udp, tcp) = udp_and_tcp_port().await;
        echo.push(udp_echo_on(udp, seen_tx.clone()));
        tcp_counts.push(common::tagged_backend_on(tcp, tag).1);
    }
    let backend = format!("{}\npolicy = \"least_connections\"", addresses(&echo));
    let after = format!(
        "[[listener]]\nname = \"tls\"\nlisten = [\"127.0.0.1:0\"]\n\n\
         [[route]]\nlistener = \"tls\"\nsni = [\"{NGTCP2}\"]\nbackend = \"b\""
    );
    let config =
        quic_relay("", &backend, &after).replace("idle_timeout = \"1s\"", "idle_timeout = \"1m\"");
    let relay = Relay::start(&config).await;
    let hello = capture("ngtcp2");

    // A flow on one address...
    let _flow = echoed_flow(relay.addr_of("quic"), "127.0.0.1", &hello).await;
    let flow_on = next_seen(&mut seen).await;
    let other = if flow_on == echo[0] { 1 } else { 0 };
    // ...sends the next TCP connection to the other.
    let mut tcp = tokio::net::TcpStream::connect(relay.addr_of("tls"))
        .await
        .unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    tcp.write_all(&common::hello_for(NGTCP2)).await.unwrap();
    let mut tag = [0u8; 1];
    tokio::time::timeout(WAIT, tcp.read_exact(&mut tag))
        .await
        .expect("the TCP backend's tag within the wait")
        .unwrap();
    assert_eq!(tcp_counts[other].load(Ordering::SeqCst), 1);
    assert_eq!(tcp_counts[1 - other].load(Ordering::SeqCst), 0);
    // One each: the next flow takes either; the one after, the other one.
    let _second = echoed_flow(relay.addr_of("quic"), "127.0.0.1", &hello).await;
    let second_on = next_seen(&mut seen).await;
    let _third = echoed_flow(relay.addr_of("quic"), "127.0.0.1", &hello).await;
    assert_ne!(next_seen(&mut seen).await, second_on);
}

#[tokio::test]
async fn source_hash_gives_a_flow_the_address_tcp_would_rank_first() {
    let (echo, mut seen) = udp_echo_backends(4).await;
    let backend = format!("{}\npolicy = \"source_hash\"", addresses(&echo));
    let relay = Relay::start(&quic_relay("", &backend, "")).await;
    let hello = capture("ngtcp2");
    for client in ["127.0.0.1", "127.0.0.2", "127.0.0.3"] {
        let ip: IpAddr = client.parse().unwrap();
        let expected = *echo
            .iter()
            .min_by_key(|&&addr| affinity_rank(affinity_hash(ip, addr), 1))
            .unwrap();
        // Twice from the client's address (two ports, two flows): the same.
        for _ in 0..2 {
            let _flow = echoed_flow(relay.addr_of("quic"), client, &hello).await;
            assert_eq!(next_seen(&mut seen).await, expected, "from {client}");
        }
    }
}

// ---------------------------------------------------------------- health

#[tokio::test]
async fn a_refused_backend_port_is_marked_down_and_the_next_flow_goes_elsewhere() {
    let (echo, mut seen) = udp_echo_backends(1).await;
    // A port nobody listens on: the kernel answers port unreachable.
    let closed_port = UdpSocket::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let backend = format!(
        "{}\npolicy = \"ordered\"\nmax_fails = 1\nfail_backoff = \"1m\"",
        addresses(&[closed_port, echo[0]])
    );
    let relay = Relay::start(&quic_relay("", &backend, "")).await;
    let relay_addr = relay.addr_of("quic");
    let hello = capture("ngtcp2");
    let first = send_flow(relay_addr, &hello).await;
    relay
        .wait_log(|l| {
            l["message"] == "backend address marked down (consecutive connect failures)"
                && l["addr"] == closed_port.to_string().as_str()
        })
        .await;
    let second = echoed_flow(relay_addr, "127.0.0.1", &hello).await;
    assert_eq!(next_seen(&mut seen).await, echo[0]);
    let line = closed(&relay, &first).await;
    assert_eq!(
        line["backend.addr"],
        closed_port.to_string().as_str(),
        "{line}"
    );
    assert_eq!(line["datagrams.down"], 0, "{line}");
    let line = closed(&relay, &second).await;
    assert_eq!(line["backend.addr"], echo[0].to_string().as_str(), "{line}");
}
