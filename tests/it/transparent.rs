//! The transparent source (`[backend.*] source = "client"`) in three
//! network namespaces (`common::netns::Triangle`): client — relay —
//! backend, the backend routing the client's network through the relay,
//! and on the relay the policy routing and nftables rule of
//! docs/operations.md. The backend sees the client's own address and port,
//! for a TCP connection and for a QUIC flow's datagrams (and, behind a
//! trusted PROXY peer, the claimed address and port), over IPv4 and IPv6
//! (the `ip -6` rules), and its replies come back through the relay to the
//! client. Without CAP_NET_ADMIN and
//! CAP_NET_RAW (dropped with util-linux's `setpriv`) the relay refuses to
//! start, naming the key and the capability.

use crate::common;

use std::net::SocketAddr;
use std::process::Command;

use common::netns::Triangle;
use common::{Relay, WAIT, run_to_exit, scratch_dir};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::mpsc;

include!("common/quic_capture.rs");

/// Listener `tls` (TCP) and `quic` on the relay's client-side address,
/// both routing to backend `b` at `tcp` / `udp` with `source = "client"`.
fn config(relay_ip: std::net::Ipv4Addr, tcp: SocketAddr, udp: SocketAddr) -> String {
    format!(
        r#"
[[listener]]
name = "tls"
listen = ["{relay_ip}:0"]

[[route]]
listener = "tls"
sni = ["www.example.com"]
backend = "b"

[[listener]]
name = "peers"
listen = ["{relay_ip}:0"]
[listener.proxy_protocol]
trusted = ["10.211.0.0/16"]

[[route]]
listener = "peers"
sni = ["www.example.com"]
backend = "b"

[[listener]]
name = "quic"
protocol = "quic"
listen = ["{relay_ip}:0"]

[[route]]
listener = "quic"
sni = ["localhost"]
backend = "q"

[backend.b]
addresses = ["{tcp}"]
source = "client"

[backend.q]
addresses = ["{udp}"]
source = "client"
"#
    )
}

#[tokio::test]
async fn the_backend_sees_the_client_s_address_and_port_for_tcp_and_quic() {
    let net = Triangle::new();
    let backend_ip = net.backend_ip;
    // The backends, in their namespace: a TCP server that sends each
    // peer's address back, and a UDP echo that reports each sender.
    let tcp = net.in_ns(&net.backend, move || {
        let l = std::net::TcpListener::bind((backend_ip, 0)).unwrap();
        l.set_nonblocking(true).unwrap();
        l
    });
    let tcp = TcpListener::from_std(tcp).unwrap();
    let tcp_addr = tcp.local_addr().unwrap();
    let (peer_tx, mut peers) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut stream, peer)) = tcp.accept().await {
            let _ = peer_tx.send(peer);
            tokio::spawn(async move {
                let _ = stream.write_all(peer.to_string().as_bytes()).await;
                let _ = stream.shutdown().await;
                let mut sink = [0u8; 4096];
                while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
            });
        }
    });
    let udp = net.in_ns(&net.backend, move || {
        let s = std::net::UdpSocket::bind((backend_ip, 0)).unwrap();
        s.set_nonblocking(true).unwrap();
        s
    });
    let udp = UdpSocket::from_std(udp).unwrap();
    let udp_addr = udp.local_addr().unwrap();
    let (from_tx, mut froms) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        while let Ok((len, from)) = udp.recv_from(&mut buf).await {
            let _ = from_tx.send(from);
            let _ = udp.send_to(&buf[..len], from).await;
        }
    });

    let relay = Relay::launch(&config(net.relay_ip, tcp_addr, udp_addr), |path| {
        net.wrap(&Relay::command(path))
    })
    .await;

    // TCP: the client, in its namespace, sends a hello.
    backend_sees_the_client(&net, relay.addr_of("tls"), net.client_ip.into(), &mut peers).await;

    // Behind a trusted PROXY peer the claimed address is the source (as
    // HAProxy's `usesrc clientip` behind `accept-proxy`): one on the
    // client's network, so the backend's route sends the reply back
    // through the relay.
    let relay_peers = relay.addr_of("peers");
    let peer = net.in_ns(&net.client, move || {
        let s = std::net::TcpStream::connect_timeout(&relay_peers, WAIT).unwrap();
        s.set_nonblocking(true).unwrap();
        s
    });
    let mut peer = TcpStream::from_std(peer).unwrap();
    let claimed = SocketAddr::from((
        std::net::Ipv4Addr::from(u32::from(net.client_ip) + 48),
        40123,
    ));
    let header = format!(
        "PROXY TCP4 {} {} {} {}\r\n",
        claimed.ip(),
        relay_peers.ip(),
        claimed.port(),
        relay_peers.port()
    );
    peer.write_all(header.as_bytes()).await.unwrap();
    peer.write_all(&common::capture("openssl_sni.bin"))
        .await
        .unwrap();
    let seen = tokio::time::timeout(WAIT, peers.recv())
        .await
        .expect("the backend was not reached through the PROXY peer")
        .unwrap();
    assert_eq!(
        seen, claimed,
        "the backend saw {seen}, not the claimed client"
    );
    let mut answer = String::new();
    tokio::time::timeout(WAIT, peer.read_to_string(&mut answer))
        .await
        .expect("the backend's reply did not come back")
        .unwrap();
    assert_eq!(answer, claimed.to_string());

    // QUIC: a flow's first flight, from the client's namespace.
    let client_ip = net.client_ip;
    let quic_client = net.in_ns(&net.client, move || {
        let s = std::net::UdpSocket::bind((client_ip, 0)).unwrap();
        s.set_nonblocking(true).unwrap();
        s
    });
    let quic_client = UdpSocket::from_std(quic_client).unwrap();
    let quic_addr = quic_client.local_addr().unwrap();
    let flight = capture("ngtcp2");
    for datagram in &flight {
        quic_client
            .send_to(datagram, relay.addr_of("quic"))
            .await
            .unwrap();
    }
    let from = tokio::time::timeout(WAIT, froms.recv())
        .await
        .expect("the UDP backend was not reached")
        .unwrap();
    assert_eq!(
        from, quic_addr,
        "the UDP backend saw {from}, not the client"
    );
    // The echo returns to the client through the relay.
    let mut buf = vec![0u8; 65536];
    let (len, _) = tokio::time::timeout(WAIT, quic_client.recv_from(&mut buf))
        .await
        .expect("the echo did not come back")
        .unwrap();
    assert_eq!(&buf[..len], &flight.last().unwrap()[..]);
}

#[tokio::test]
async fn an_ipv6_client_is_seen_by_an_ipv6_backend_at_its_address_and_port() {
    let net = Triangle::new();
    let backend_ip6 = net.backend_ip6;
    let tcp = net.in_ns(&net.backend, move || {
        let l = std::net::TcpListener::bind((backend_ip6, 0)).unwrap();
        l.set_nonblocking(true).unwrap();
        l
    });
    let tcp = TcpListener::from_std(tcp).unwrap();
    let tcp_addr = tcp.local_addr().unwrap();
    let (peer_tx, mut peers) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut stream, peer)) = tcp.accept().await {
            let _ = peer_tx.send(peer);
            tokio::spawn(async move {
                let _ = stream.write_all(peer.to_string().as_bytes()).await;
                let _ = stream.shutdown().await;
                let mut sink = [0u8; 4096];
                while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
            });
        }
    });
    let relay = Relay::launch(
        &format!(
            r#"
[[listener]]
name = "tls"
listen = ["[{}]:0"]

[[route]]
sni = ["www.example.com"]
backend = "b"

[backend.b]
addresses = ["{tcp_addr}"]
source = "client"
"#,
            net.relay_ip6
        ),
        |path| net.wrap(&Relay::command(path)),
    )
    .await;
    backend_sees_the_client(
        &net,
        relay.addr_of("tls"),
        net.client_ip6.into(),
        &mut peers,
    )
    .await;
}

/// The client, in its namespace, connects to `relay_tcp` from `client_ip`
/// and sends a hello: the backend reports the client's own address and
/// port on `peers`, and its answer (that address) comes back through the
/// relay.
async fn backend_sees_the_client(
    net: &Triangle,
    relay_tcp: SocketAddr,
    client_ip: std::net::IpAddr,
    peers: &mut mpsc::UnboundedReceiver<SocketAddr>,
) {
    let client = net.in_ns(&net.client, move || {
        let s = std::net::TcpStream::connect_timeout(&relay_tcp, WAIT).unwrap();
        s.set_nonblocking(true).unwrap();
        s
    });
    let mut client = TcpStream::from_std(client).unwrap();
    let client_addr = client.local_addr().unwrap();
    assert_eq!(client_addr.ip(), client_ip);
    client
        .write_all(&common::capture("openssl_sni.bin"))
        .await
        .unwrap();
    let seen = tokio::time::timeout(WAIT, peers.recv())
        .await
        .expect("the backend was not reached")
        .unwrap();
    assert_eq!(seen, client_addr, "the backend saw {seen}, not the client");
    let mut answer = String::new();
    tokio::time::timeout(WAIT, client.read_to_string(&mut answer))
        .await
        .expect("the backend's reply did not come back")
        .unwrap();
    assert_eq!(answer, client_addr.to_string());
}

#[tokio::test]
async fn without_the_capability_the_relay_refuses_to_start_naming_the_key() {
    let dir = scratch_dir("transparent");
    let path = dir.join("snirelay.toml");
    std::fs::write(
        &path,
        common::one_route_config(
            &["www.example.com"],
            "",
            "addresses = [\"127.0.0.1:9\"]\nsource = \"client\"",
        ),
    )
    .unwrap();
    let mut setpriv = Command::new("setpriv");
    setpriv
        .args([
            "--inh-caps=-all",
            "--ambient-caps=-all",
            "--bounding-set=-net_admin,-net_raw",
            env!("CARGO_BIN_EXE_snirelay"),
            "run",
            "--config",
        ])
        .arg(&path);
    let (code, stderr) = run_to_exit(setpriv).await;
    assert!(code.is_some_and(|c| c != 0), "{code:?}: {stderr}");
    assert!(
        stderr.contains("backend.b.source = \"client\" needs the CAP_NET_ADMIN capability"),
        "{stderr}"
    );
    // `check` runs unprivileged: it accepts the file and notes the need.
    let (code, stdout, stderr) = common::run_snirelay(vec![
        "check".into(),
        "--config".into(),
        path.display().to_string(),
    ])
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("needs CAP_NET_ADMIN"), "{stdout}");
    let _ = std::fs::remove_dir_all(dir);
}
