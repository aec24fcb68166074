//! UDP peers for the QUIC listener's backend tests: echo backends that
//! report which of them received each datagram, and a client that sends a
//! captured first flight from a port of its own and waits for its echo,
//! and the listener's summary lines of dropped new flows and of pending
//! flows evicted for new ones.
//!
//! Not here: QUIC itself (the captures in tests/data/quic are replayed as
//! they were recorded; a backend that must speak QUIC is ngtcp2's, see
//! tests/it/quic_listener.rs).

use std::net::SocketAddr;

use tokio::net::UdpSocket;
use tokio::sync::mpsc;

use super::WAIT;

/// The next datagram `socket` receives, with its sender, within [`WAIT`]
/// (fails the test otherwise).
pub(crate) async fn receive(socket: &UdpSocket) -> (Vec<u8>, SocketAddr) {
    let mut buf = vec![0u8; 65536];
    let (len, from) = tokio::time::timeout(WAIT, socket.recv_from(&mut buf))
        .await
        .expect("nothing received within WAIT")
        .unwrap();
    buf.truncate(len);
    (buf, from)
}

/// Echoes every datagram on `socket` back to its sender and reports the
/// socket's own address on `seen` for each one.
pub(crate) fn udp_echo_on(
    socket: UdpSocket,
    seen: mpsc::UnboundedSender<SocketAddr>,
) -> SocketAddr {
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        while let Ok((len, from)) = socket.recv_from(&mut buf).await {
            let _ = seen.send(addr);
            let _ = socket.send_to(&buf[..len], from).await;
        }
    });
    addr
}

/// `n` echo backends on 127.0.0.1, and the channel on which each reports
/// a datagram it received (by its address).
pub(crate) async fn udp_echo_backends(
    n: usize,
) -> (Vec<SocketAddr>, mpsc::UnboundedReceiver<SocketAddr>) {
    let (seen, rx) = mpsc::unbounded_channel();
    let mut addrs = Vec::with_capacity(n);
    for _ in 0..n {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        addrs.push(udp_echo_on(socket, seen.clone()));
    }
    (addrs, rx)
}

/// A UDP socket and a TCP listener on the same loopback port: one
/// backend address a quic and a tcp listener both reach.
pub(crate) async fn udp_and_tcp_port() -> (UdpSocket, tokio::net::TcpListener) {
    for _ in 0..50 {
        let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        if let Ok(tcp) = tokio::net::TcpListener::bind(udp.local_addr().unwrap()).await {
            return (udp, tcp);
        }
    }
    panic!("no port free for both UDP and TCP in 50 tries");
}

/// The backend that reports next (bounded by WAIT).
pub(crate) async fn next_seen(seen: &mut mpsc::UnboundedReceiver<SocketAddr>) -> SocketAddr {
    tokio::time::timeout(WAIT, seen.recv())
        .await
        .expect("no backend received a datagram within the wait")
        .unwrap()
}

/// Sends `flight` to `relay` from a new socket on `from` (an IP of the
/// loopback network, port 0) and waits for the echo of its last
/// datagram; returns the socket (whose address is the flow's).
pub(crate) async fn echoed_flow(relay: SocketAddr, from: &str, flight: &[Vec<u8>]) -> UdpSocket {
    let client = UdpSocket::bind((from, 0)).await.unwrap();
    for datagram in flight {
        client.send_to(datagram, relay).await.unwrap();
    }
    let last = flight.last().expect("a flight has a datagram");
    let mut buf = vec![0u8; 65536];
    let echoed = tokio::time::timeout(WAIT, async {
        loop {
            let (len, _) = client.recv_from(&mut buf).await.unwrap();
            if buf[..len] == last[..] {
                return;
            }
        }
    })
    .await;
    assert!(
        echoed.is_ok(),
        "the flight from {from} was not echoed within {WAIT:?}"
    );
    client
}

/// Sends `flight` to `relay` from a new socket on 127.0.0.1, without
/// waiting for anything; returns the socket.
pub(crate) async fn send_flow(relay: SocketAddr, flight: &[Vec<u8>]) -> UdpSocket {
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    for datagram in flight {
        client.send_to(datagram, relay).await.unwrap();
    }
    client
}

/// The QUIC listener's summary of new flows' datagrams dropped at a bound
/// (a WARN at most once a second).
pub(crate) fn is_new_flow_drop_summary(line: &serde_json::Value) -> bool {
    line["message"]
        .as_str()
        .is_some_and(|m| m.starts_with("QUIC datagrams of new flows dropped"))
}

/// The listener's summary line of pending flows evicted for new ones.
pub(crate) fn is_eviction_summary(line: &serde_json::Value) -> bool {
    line["message"]
        .as_str()
        .is_some_and(|m| m.starts_with("QUIC pending flows evicted"))
}
