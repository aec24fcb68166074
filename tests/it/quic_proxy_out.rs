//! PROXY v2 over UDP toward a `protocol = "quic"` listener's backend, read
//! by an independent parser (the `ppp` crate's): every client datagram
//! carries the header (DGRAM, the client's address and port, the address
//! it dialled, the SNI and the flow's id) until the backend's first
//! answer, none after; a datagram the full header would push past the
//! backend's `max_datagram_size` carries the addresses-only header, and
//! one that not even that fits is dropped and counted, the flow going on.

use crate::common;

use std::net::SocketAddr;

use common::udp::receive;
use common::{Relay, WAIT, metric_now};
use ppp::v2;
use tokio::net::UdpSocket;

include!("common/quic_capture.rs");

const TLV_AUTHORITY: u8 = 0x02;
const TLV_UNIQUE_ID: u8 = 0x05;

/// A quic listener routing every name to a `proxy_protocol = "v2"`
/// backend at `backend`, with `backend_extra`; and an admin listener.
fn config(backend: SocketAddr, backend_extra: &str) -> String {
    config_on("127.0.0.1:0", backend, backend_extra)
}

/// [`config`] with the listener on `listen`.
fn config_on(listen: &str, backend: SocketAddr, backend_extra: &str) -> String {
    format!(
        r#"
[[listener]]
name = "quic"
protocol = "quic"
listen = ["{listen}"]

[[route]]
sni = ["*"]
backend = "b"

[backend.b]
addresses = ["{backend}"]
proxy_protocol = "v2"
{backend_extra}

[admin]
listen = "127.0.0.1:0"
"#
    )
}

/// The v2 header at the start of `datagram` as `ppp` reads it, and the
/// bytes after it.
fn split(datagram: &[u8]) -> (v2::Header<'_>, &[u8]) {
    let header = v2::Header::try_from(datagram)
        .unwrap_or_else(|e| panic!("no PROXY v2 header that ppp reads: {e:?}"));
    let len = header.len();
    (header, &datagram[len..])
}

/// `header` is a DGRAM PROXY over IPv4 from `client` to `dialled`.
fn assert_addresses(header: &v2::Header<'_>, client: SocketAddr, dialled: SocketAddr) {
    assert_eq!(header.command, v2::Command::Proxy);
    assert_eq!(header.protocol, v2::Protocol::Datagram);
    match header.addresses {
        v2::Addresses::IPv4(a) => {
            assert_eq!(SocketAddr::from((a.source_address, a.source_port)), client);
            assert_eq!(
                SocketAddr::from((a.destination_address, a.destination_port)),
                dialled
            );
        }
        other => panic!("not an IPv4 address block: {other:?}"),
    }
}

fn tlv(header: &v2::Header<'_>, kind: u8) -> Option<Vec<u8>> {
    header
        .tlvs()
        .map(|t| t.unwrap())
        .find(|t| t.kind == kind)
        .map(|t| t.value.to_vec())
}

#[tokio::test]
async fn every_datagram_carries_the_header_until_the_backend_answers() {
    let backend = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let relay = Relay::start(&config(backend.local_addr().unwrap(), "")).await;
    let quic = relay.addr_of("quic");
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let me = client.local_addr().unwrap();
    let hello = &capture("aioquic_v1")[0];

    client.send_to(hello, quic).await.unwrap();
    let (first, relay_end) = receive(&backend).await;
    let (header, payload) = split(&first);
    assert_addresses(&header, me, quic);
    assert_eq!(
        payload,
        &hello[..],
        "the hello follows the header unchanged"
    );
    assert_eq!(
        tlv(&header, TLV_AUTHORITY).as_deref(),
        Some(&b"aioquic.example.com"[..])
    );
    let id = tlv(&header, TLV_UNIQUE_ID).expect("a UNIQUE_ID TLV");

    // Not answered yet: the next datagram carries the same header.
    client.send_to(b"second", quic).await.unwrap();
    let (second, _) = receive(&backend).await;
    let (again, payload) = split(&second);
    assert_eq!(payload, b"second");
    assert_eq!(second.len() - payload.len(), first.len() - hello.len());
    assert_eq!(tlv(&again, TLV_UNIQUE_ID), Some(id.clone()));

    // The backend answers; the client gets it, and sends plain from then on.
    backend.send_to(b"answer", relay_end).await.unwrap();
    let mut buf = [0u8; 64];
    let (len, _) = tokio::time::timeout(WAIT, client.recv_from(&mut buf))
        .await
        .expect("the answer reached the client")
        .unwrap();
    assert_eq!(&buf[..len], b"answer");
    client.send_to(b"third", quic).await.unwrap();
    let (third, _) = receive(&backend).await;
    assert_eq!(third, b"third", "no header after the backend answered");
}

#[tokio::test]
async fn a_datagram_too_large_for_the_full_header_gets_the_minimal_one_or_is_dropped() {
    let backend = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let hello = &capture("aioquic_v1")[0];
    // The minimal IPv4 header is 28 bytes: the 1,200-byte hello fits with
    // it, not with the full one (its SNI and id TLVs).
    let max = hello.len() + 28;
    let relay = Relay::start(&config(
        backend.local_addr().unwrap(),
        &format!("max_datagram_size = {max}"),
    ))
    .await;
    let quic = relay.addr_of("quic");
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let me = client.local_addr().unwrap();

    client.send_to(hello, quic).await.unwrap();
    let (first, _) = receive(&backend).await;
    assert_eq!(first.len(), max);
    let (header, payload) = split(&first);
    assert_addresses(&header, me, quic);
    assert_eq!(payload, &hello[..]);
    assert_eq!(header.tlvs().count(), 0, "the minimal header has no TLVs");

    // One byte more than even the minimal header allows: dropped, counted.
    client
        .send_to(&vec![7u8; hello.len() + 1], quic)
        .await
        .unwrap();
    // A small one after it gets the full header and is the next to arrive.
    client.send_to(b"small", quic).await.unwrap();
    let (next, _) = receive(&backend).await;
    let (full, payload) = split(&next);
    assert_eq!(payload, b"small", "the oversized datagram was not sent");
    assert_eq!(
        tlv(&full, TLV_AUTHORITY).as_deref(),
        Some(&b"aioquic.example.com"[..])
    );
    let admin = relay.admin_addr().await;
    assert_eq!(
        metric_now(admin, "snirelay_proxy_datagrams_too_large_total").await,
        1.0
    );
}

#[tokio::test]
async fn on_a_wildcard_socket_the_destination_is_the_address_the_client_dialled() {
    let backend = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let relay = Relay::start(&config_on("0.0.0.0:0", backend.local_addr().unwrap(), "")).await;
    let port = relay.addr_of("quic").port();
    // 127.0.0.2 is loopback too: the socket's own address says 0.0.0.0,
    // only the datagram's (IP_PKTINFO) says which one was dialled.
    let dialled = SocketAddr::from(([127, 0, 0, 2], port));
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    client
        .send_to(&capture("aioquic_v1")[0], dialled)
        .await
        .unwrap();
    let (first, _) = receive(&backend).await;
    let (header, _) = split(&first);
    assert_addresses(&header, client.local_addr().unwrap(), dialled);
}

#[tokio::test]
async fn a_burst_sent_in_one_gso_send_reaches_the_backend_datagram_by_datagram_each_behind_the_header()
 {
    let backend = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let relay = Relay::start(&config(backend.local_addr().unwrap(), "")).await;
    let quic = relay.addr_of("quic");
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let me = client.local_addr().unwrap();
    client
        .send_to(&capture("aioquic_v1")[0], quic)
        .await
        .unwrap();
    let (first, _) = receive(&backend).await;
    let (header, _) = split(&first);
    let header_len = header.len();

    // Nine short-header datagrams in one GSO send (eight of 1,000 bytes
    // and a last of 500): the relay reads them as one GRO run where the
    // kernel coalesces, and frames them behind the header in one send.
    let burst: Vec<Vec<u8>> = (0..9u8)
        .map(|i| {
            let len = if i == 8 { 500 } else { 1000 };
            let mut datagram = vec![i; len];
            datagram[0] = 0x40;
            datagram
        })
        .collect();
    let contents = burst.concat();
    let state = quinn_udp::UdpSocketState::new((&client).into()).unwrap();
    let transmit = quinn_udp::Transmit {
        destination: quic,
        ecn: None,
        contents: &contents,
        segment_size: Some(1000),
        src_ip: None,
    };
    client.writable().await.unwrap();
    client
        .try_io(tokio::io::Interest::WRITABLE, || {
            state.try_send((&client).into(), &transmit)
        })
        .unwrap();

    for (i, sent) in burst.iter().enumerate() {
        let (datagram, _) = receive(&backend).await;
        let (header, payload) = split(&datagram);
        assert_addresses(&header, me, quic);
        assert_eq!(header.len(), header_len, "datagram {i}: the full header");
        assert_eq!(payload, &sent[..], "datagram {i} follows its header whole");
    }
}
