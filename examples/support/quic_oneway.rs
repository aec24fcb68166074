//! quicbench's `header` phase: what a PROXY v2 header on every datagram
//! costs the relay. A backend that answers through the relay ends its
//! flow's headers (snirelay sends them only until the backend's first
//! answer), so here the backend never answers through it: it reads each
//! datagram, strips the header with the `ppp` crate's parser (an
//! implementation that is not the relay's, which checks every header it
//! is sent), and sends the echo straight to the client, whose port the
//! bench writes into every datagram. The relay then carries one direction
//! only, with or without a header on each datagram, and its CPU per GB of
//! that direction is the figure.
//!
//! Not here: the flows' pacing and counting (quicbench's `drive`, shared
//! with the `rate` phase), the relay's configuration (`start_relay`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::net::UdpSocket;

/// Where the client writes its own port in each short-header datagram.
pub(crate) const PORT_AT: std::ops::Range<usize> = 17..19;

/// What the direct-return backend saw: datagrams with a header `ppp`
/// read, datagrams whose header named another client port than the one
/// the datagram carries (must stay 0), and the last header's length.
#[derive(Default)]
pub(crate) struct HeaderCounts {
    pub(crate) with_header: AtomicU64,
    pub(crate) mismatched: AtomicU64,
    /// The length of the last header read.
    pub(crate) header_bytes: AtomicU64,
}

/// The PROXY v2 signature (HAProxy's proxy-protocol.txt §2.2).
const SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";

/// A backend that strips a PROXY v2 header when there is one, drops long
/// headers (the flow's Initial) and sends every short-header datagram
/// back to 127.0.0.1 at the port written in it, bypassing the relay.
pub(crate) async fn direct_return_backend(counts: Arc<HeaderCounts>) -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        while let Ok((len, _from)) = socket.recv_from(&mut buf).await {
            let datagram = &buf[..len];
            let (claimed_port, payload) = if datagram.starts_with(SIGNATURE) {
                let Ok(header) = ppp::v2::Header::try_from(datagram) else {
                    panic!("a header ppp cannot read");
                };
                counts.with_header.fetch_add(1, Ordering::Relaxed);
                counts
                    .header_bytes
                    .store(header.len() as u64, Ordering::Relaxed);
                let port = match header.addresses {
                    ppp::v2::Addresses::IPv4(a) => Some(a.source_port),
                    ppp::v2::Addresses::IPv6(a) => Some(a.source_port),
                    _ => None,
                };
                (port, &datagram[header.len()..])
            } else {
                (None, datagram)
            };
            if payload.is_empty() || payload[0] & 0x80 != 0 || payload.len() < PORT_AT.end {
                continue;
            }
            let port = u16::from_be_bytes([payload[PORT_AT.start], payload[PORT_AT.start + 1]]);
            if claimed_port.is_some_and(|claimed| claimed != port) {
                counts.mismatched.fetch_add(1, Ordering::Relaxed);
            }
            let _ = socket
                .send_to(payload, SocketAddr::from(([127, 0, 0, 1], port)))
                .await;
        }
    });
    addr
}

/// A flow's client socket, not connected (the echoes come from the
/// backend, not the relay): its hello and a first short-header datagram
/// sent to `relay` until that datagram's echo comes back (every
/// [`LOSS_WAIT`](super::LOSS_WAIT), at most 25 times).
pub(crate) async fn open_oneway_flow(relay: SocketAddr, hello: &[Vec<u8>], flow: u64) -> UdpSocket {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let port = socket.local_addr().unwrap().port();
    let mut probe = Vec::new();
    super::short_headers(&mut probe, 1200, flow, 0, 1, port);
    let mut buf = vec![0u8; 65536];
    for _ in 0..25 {
        for datagram in hello {
            socket.send_to(datagram, relay).await.unwrap();
        }
        socket.send_to(&probe, relay).await.unwrap();
        let echoed = tokio::time::timeout(super::LOSS_WAIT, async {
            loop {
                let len = socket.recv(&mut buf).await.unwrap();
                if buf[..len] == probe[..] {
                    return;
                }
            }
        })
        .await;
        if echoed.is_ok() {
            return socket;
        }
    }
    panic!("the probe was not echoed through {relay}");
}
