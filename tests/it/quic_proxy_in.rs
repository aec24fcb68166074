//! PROXY v2 over UDP read by a `protocol = "quic"` listener with
//! `[listener.proxy_protocol]`, through the real binary on loopback: a
//! trusted peer's header is stripped from every datagram (the backend
//! receives the client's datagrams exactly), the claimed client and the
//! measured peer are logged apart, and answers go to the peer; an
//! untrusted source's header, a trusted peer's malformed or truncated
//! header and its missing one close the flow with the TCP preface's
//! reasons (a truncated one is `proxy_missing`, a header started and never
//! finished); per-source limits count the claimed clients behind one peer
//! apart. And a cluster's hop header over UDP: two nodes whose lookups
//! each name the other end a QUIC flow at `max_hops`, `hop_limit`, with a
//! bounded count of datagrams.
//!
//! The peer relay here is a test socket writing headers with the `ppp`
//! crate (an independent writer); the clients replay captured first
//! flights (tests/data/quic).

use crate::common;

use std::net::SocketAddr;

use common::Relay;
use common::control_plane::{ControlPlane, Reply};
use common::udp::receive;
use ppp::v2;
use serde_json::Value;
use snirelay::wire::proxy::{TLV_HOPS, hops_value};
use tokio::net::UdpSocket;

include!("common/quic_capture.rs");

/// The claimed clients.
const CLIENT: &str = "203.0.113.7:5555";
const OTHER_CLIENT: &str = "203.0.113.8:6666";

/// A quic listener reading PROXY headers (`proxy_protocol` is the body of
/// its `[listener.proxy_protocol]`) with `limits`, routing the aioquic
/// capture's name to a backend at `backend`.
fn config(proxy_protocol: &str, limits: &str, backend: SocketAddr) -> String {
    format!(
        r#"
[[listener]]
name = "quic"
protocol = "quic"
listen = ["127.0.0.1:0"]
idle_timeout = "1s"

[listener.proxy_protocol]
{proxy_protocol}

[listener.limits]
{limits}

[[route]]
sni = ["aioquic.example.com"]
backend = "b"

[backend.b]
addresses = ["{backend}"]
"#
    )
}

/// A v2 DGRAM header claiming `client` → `dialled`, with our hop count
/// when `hops` is set, as `ppp` writes it.
fn dgram_header(client: &str, dialled: SocketAddr, hops: Option<u8>) -> Vec<u8> {
    let client: SocketAddr = client.parse().unwrap();
    let mut builder = v2::Builder::with_addresses(
        v2::Version::Two | v2::Command::Proxy,
        v2::Protocol::Datagram,
        (client, dialled),
    );
    if let Some(hops) = hops {
        builder = builder.write_tlv(TLV_HOPS, &hops_value(hops)).unwrap();
    }
    builder.build().unwrap()
}

/// `header` then `payload`, as one datagram.
fn framed(header: &[u8], payload: &[u8]) -> Vec<u8> {
    [header, payload].concat()
}

/// The close line of the flow from `peer`.
async fn closed(relay: &Relay, peer: &UdpSocket) -> Value {
    let line = relay.closed_line(peer.local_addr().unwrap()).await;
    assert_eq!(line["protocol"], "quic", "{line}");
    line
}

async fn socket() -> UdpSocket {
    UdpSocket::bind("127.0.0.1:0").await.unwrap()
}

#[tokio::test]
async fn a_trusted_peers_header_is_stripped_and_the_claim_logged_apart_from_the_peer() {
    let backend = socket().await;
    let relay = Relay::start(&config(
        "trusted = [\"127.0.0.0/8\"]",
        "connections_per_source = false",
        backend.local_addr().unwrap(),
    ))
    .await;
    let quic = relay.addr_of("quic");
    let peer = socket().await;
    let header = dgram_header(CLIENT, quic, None);
    let hello = &capture("aioquic_v1")[0];

    // Every datagram carries the header until the backend answers: each
    // reaches the backend without it.
    peer.send_to(&framed(&header, hello), quic).await.unwrap();
    let (first, relay_end) = receive(&backend).await;
    assert_eq!(first, *hello, "the backend receives the client's datagram");
    peer.send_to(&framed(&header, b"second"), quic)
        .await
        .unwrap();
    assert_eq!(receive(&backend).await.0, b"second");

    // The answer goes to the peer relay (the measured address), and the
    // peer's datagrams after it are plain.
    backend.send_to(b"answer", relay_end).await.unwrap();
    let (answer, _) = receive(&peer).await;
    assert_eq!(answer, b"answer");
    peer.send_to(b"third", quic).await.unwrap();
    assert_eq!(receive(&backend).await.0, b"third");

    let line = closed(&relay, &peer).await;
    assert_eq!(line["close"], "idle_timeout", "{line}");
    assert_eq!(line["client.claimed"], CLIENT, "{line}");
    assert_eq!(
        line["client.peer"],
        peer.local_addr().unwrap().to_string().as_str(),
        "{line}"
    );
    assert_eq!(line["datagrams.up"], 3, "{line}");
    // The client's bytes, not the headers.
    let client_bytes = hello.len() + b"second".len() + b"third".len();
    assert_eq!(line["bytes.up"], client_bytes, "{line}");
}

#[tokio::test]
async fn a_refusal_goes_to_the_peer_relay_not_the_claimed_client() {
    let backend = socket().await;
    let relay = Relay::start(&config(
        "trusted = [\"127.0.0.0/8\"]",
        "connections_per_source = false",
        backend.local_addr().unwrap(),
    ))
    .await;
    let quic = relay.addr_of("quic");
    let peer = socket().await;
    // ngtcp2's capture names "localhost": no route, so a CONNECTION_CLOSE.
    let hello = &capture("ngtcp2")[0];
    peer.send_to(&framed(&dgram_header(CLIENT, quic, None), hello), quic)
        .await
        .unwrap();
    let (refusal, from) = receive(&peer).await;
    assert_eq!(from, quic);
    assert_eq!(
        refusal[0] & 0xc0,
        0xc0,
        "a long-header packet: {refusal:02x?}"
    );
    let line = closed(&relay, &peer).await;
    assert_eq!(line["close"], "unmatched", "{line}");
    assert_eq!(line["client.claimed"], CLIENT, "{line}");
}

#[tokio::test]
async fn headers_the_tcp_preface_refuses_close_the_flow_with_its_reasons() {
    let backend = socket().await;
    // The relay trusts 127.0.0.1 only: 127.0.0.2 is an untrusted source.
    let relay = Relay::start(&config(
        "trusted = [\"127.0.0.1\"]",
        "connections_per_source = false",
        backend.local_addr().unwrap(),
    ))
    .await;
    let quic = relay.addr_of("quic");
    let hello = &capture("aioquic_v1")[0];
    let header = dgram_header(CLIENT, quic, None);

    let untrusted = UdpSocket::bind("127.0.0.2:0").await.unwrap();
    untrusted
        .send_to(&framed(&header, hello), quic)
        .await
        .unwrap();
    let mut bad_version = framed(&header, hello);
    bad_version[12] = 0x31;
    let v1 = framed(b"PROXY TCP4 203.0.113.7 127.0.0.1 5555 443\r\n", hello);
    let cases: [(&[u8], &str); 4] = [
        // Cut inside its address block: a header never spans datagrams,
        // so it was started and never finished, as TCP says it.
        (&header[..20], "proxy_missing"),
        (&bad_version, "proxy_invalid"),
        (&v1, "proxy_invalid"),
        // mode = "require": a trusted peer's flow must start with a header.
        (hello, "proxy_missing"),
    ];
    let mut peers = Vec::new();
    for (datagram, _) in &cases {
        let peer = socket().await;
        peer.send_to(datagram, quic).await.unwrap();
        peers.push(peer);
    }
    let line = closed(&relay, &untrusted).await;
    assert_eq!(line["close"], "proxy_untrusted", "{line}");
    assert!(line["client.claimed"].is_null(), "{line}");
    for (peer, (_, reason)) in peers.iter().zip(cases) {
        let line = closed(&relay, peer).await;
        assert_eq!(line["close"], reason, "{line}");
        assert_eq!(line["datagrams.down"], 0, "{line}");
    }
    // Nothing reached the backend, and no answer went back.
    let mut buf = [0u8; 16];
    assert!(backend.try_recv_from(&mut buf).is_err());
    for peer in &peers {
        assert!(peer.try_recv_from(&mut buf).is_err());
    }
}

#[tokio::test]
async fn per_source_limits_count_the_claimed_clients_behind_one_peer_apart() {
    let backend = socket().await;
    let relay = Relay::start(&config(
        "trusted = [\"127.0.0.0/8\"]",
        "connections_per_source = 1",
        backend.local_addr().unwrap(),
    ))
    .await;
    let quic = relay.addr_of("quic");
    let hello = &capture("aioquic_v1")[0];
    // One flow per peer socket, as a relay sends them: two clients behind
    // the same peer address are admitted, one flow each.
    let (first, second, third) = (socket().await, socket().await, socket().await);
    for (peer, client) in [(&first, CLIENT), (&second, OTHER_CLIENT)] {
        peer.send_to(&framed(&dgram_header(client, quic, None), hello), quic)
            .await
            .unwrap();
        assert_eq!(receive(&backend).await.0, *hello);
    }
    // A second flow of the first client is over its limit of one.
    third
        .send_to(&framed(&dgram_header(CLIENT, quic, None), hello), quic)
        .await
        .unwrap();
    let line = closed(&relay, &third).await;
    assert_eq!(line["close"], "limit_concurrent", "{line}");
    assert_eq!(line["client.claimed"], CLIENT, "{line}");
    for (peer, client) in [(&first, CLIENT), (&second, OTHER_CLIENT)] {
        let line = closed(&relay, peer).await;
        assert_eq!(line["close"], "idle_timeout", "{line}");
        assert_eq!(line["client.claimed"], client, "{line}");
    }
}

// ------------------------------------------------------------------ hops

/// A node: a quic listener on `listen` that trusts its peer node (and
/// takes direct clients: `optional`), routing every name to a cluster
/// backend that asks `plane`.
fn node(listen: &str, plane: &ControlPlane) -> String {
    format!(
        r#"
[[listener]]
name = "quic"
protocol = "quic"
listen = ["{listen}"]
idle_timeout = "1s"

[listener.proxy_protocol]
trusted = ["127.0.0.0/8"]
mode = "optional"

[listener.limits]
connections_per_source = false

[[route]]
sni = ["*"]
backend = "nodes"

[backend.nodes]
connect_timeout = "2s"

[backend.nodes.cluster]
lookup_url = "{}"
allowed_targets = ["127.0.0.0/8"]
"#,
        plane.url()
    )
}

#[tokio::test]
async fn a_quic_flow_between_two_nodes_whose_lookups_name_each_other_ends_at_max_hops() {
    let (plane_a, plane_b) = (ControlPlane::start().await, ControlPlane::start().await);
    let a = Relay::start(&node("127.0.0.1:0", &plane_a)).await;
    let b = Relay::start(&node("127.0.0.2:0", &plane_b)).await;
    let (to_a, to_b) = (a.addr_of("quic"), b.addr_of("quic"));
    // Each node's lookup says the site is on the other node.
    plane_a.set("aioquic.example.com", Reply::endpoints(&[to_b]));
    plane_b.set("aioquic.example.com", Reply::endpoints(&[to_a]));

    let client = socket().await;
    let me = client.local_addr().unwrap();
    let hello = &capture("aioquic_v1")[0];
    client.send_to(hello, to_a).await.unwrap();

    // client → A (no header) → B (1 hop) → A (2) → B (3) → A (4 > 3).
    let cut = a.wait_log(|l| l["close"] == "hop_limit").await;
    assert_eq!(cut["client.claimed"], me.to_string().as_str(), "{cut}");
    assert_eq!(cut["protocol"], "quic", "{cut}");
    assert_eq!(cut["datagrams.up"], 1, "{cut}");
    // Every flow of the chain ends (its idle timeout), each having carried
    // the client's one datagram: nothing looped.
    a.wait_count(3, |l| l["message"] == "connection closed")
        .await;
    b.wait_count(2, |l| l["message"] == "connection closed")
        .await;
    let (a_lines, b_lines) = (a.closed_lines(), b.closed_lines());
    assert_eq!(a_lines.len(), 3, "{a_lines:#?}");
    assert_eq!(b_lines.len(), 2, "{b_lines:#?}");
    let all: Vec<&Value> = a_lines.iter().chain(&b_lines).collect();
    assert!(all.iter().all(|l| l["datagrams.up"] == 1), "{all:#?}");
    assert_eq!(all.iter().filter(|l| l["close"] == "hop_limit").count(), 1);
    let first = a_lines
        .iter()
        .find(|l| l["client.peer"] == me.to_string().as_str())
        .expect("the client's own flow on A");
    assert!(first["client.claimed"].is_null(), "{first}");
    assert_eq!(first["backend.addr"], to_b.to_string().as_str(), "{first}");
    // Relayed flows claim the client on both nodes.
    for line in all
        .iter()
        .filter(|l| l["client.peer"] != me.to_string().as_str())
    {
        assert_eq!(line["client.claimed"], me.to_string().as_str(), "{line}");
    }
    // No answer ever came back to the client.
    let mut buf = [0u8; 16];
    assert!(client.try_recv_from(&mut buf).is_err());
}
