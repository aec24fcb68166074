//! The client's address two relays away, over QUIC: a client — relay A
//! (an edge) — relay B (a node) — origin chain in four network namespaces,
//! A sending PROXY v2 over UDP to B, B trusting A (`[listener.proxy_protocol]
//! trusted` on its quic listener).
//!
//! - Caddy (Debian `caddy`) serves HTTP/3 behind B, B's backend set to
//!   `source = "client"`, the origin's network routing replies through B
//!   with the policy routing and nftables rule of docs/operations.md
//!   ("Transparent source"). Headless chromium (Debian `chromium`), in the
//!   client's namespace and forced onto QUIC, fetches a page through A.
//!   Caddy's access log shows the client's own address and port, the ones
//!   A measured (`client.peer` of A's access line), an address neither
//!   relay has; B's line claims that address and measures A's backend
//!   socket.
//! - B sends PROXY v2 over UDP itself to a reader that is not ours (the
//!   `ppp` crate's parser) in the origin's namespace: its header names the
//!   same client, address and port, for a captured aioquic first flight
//!   sent from the client's namespace.
//!
//! Needs root, `ip`, `nft`, caddy and chromium; a missing one fails the
//! test, never skips it.

use crate::common;

use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;

use common::browser::{caddy_config, chromium_run_in};
use common::netns::{Triangle, address, in_ns, run, veth, wrap_in};
use common::{Pki, Relay, Tool, WAIT, scratch_dir};
use ppp::v2;
use serde_json::Value;
use tokio::net::UdpSocket;

include!("common/quic_capture.rs");

/// The name routed to Caddy.
const NAME: &str = "h3.snirelay.test";
/// The name in the captured aioquic first flight, routed to the reader.
const CAPTURED: &str = "aioquic.example.com";
/// Caddy's port, in the origin's namespace (nothing else binds there).
const CADDY_PORT: u16 = 443;
/// The page Caddy serves.
const PAGE: &str = "<!doctype html><html><body><pre id=\"out\">two relays</pre></body></html>";

/// A fourth namespace in front of a [`Triangle`]: the client's, linked to
/// the Triangle's `client` namespace, where relay A runs. The Triangle's
/// `relay` namespace holds relay B and its `backend` namespace the origin.
struct Chain {
    net: Triangle,
    /// The client's namespace.
    user: String,
    /// The client's address, and A's on the client's link.
    user_ip: Ipv4Addr,
    edge_ip: Ipv4Addr,
}

impl Chain {
    fn new() -> Chain {
        let net = Triangle::new();
        let n = net.client_ip.octets()[2];
        let user = format!("{}u", net.client);
        run(&["ip", "netns", "add", &user]);
        run(&["ip", "-n", &user, "link", "set", "lo", "up"]);
        veth(&user, "u0", &net.client, "c1");
        let (user_ip, edge_ip) = (Ipv4Addr::new(10, 213, n, 2), Ipv4Addr::new(10, 213, n, 1));
        address(&user, user_ip, 24, "u0");
        address(&net.client, edge_ip, 24, "c1");
        run(&["ip", "-n", &user, "link", "set", "u0", "up"]);
        run(&["ip", "-n", &net.client, "link", "set", "c1", "up"]);
        Chain {
            net,
            user,
            user_ip,
            edge_ip,
        }
    }
}

impl Drop for Chain {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.user])
            .output();
    }
}

/// Fails loudly when `program` is not installed.
fn require(program: &str, package: &str) {
    let found = ["/usr/sbin", "/usr/bin", "/usr/local/bin"]
        .iter()
        .any(|d| std::path::Path::new(d).join(program).exists());
    assert!(
        found,
        "{program} is not installed: this test needs it (apt-get install {package})"
    );
}

/// Caddy in namespace `ns` on `addr` (HTTP/3 and TCP), serving [`PAGE`]
/// for [`NAME`] with `pki`'s certificate, its access log as JSON on
/// stderr; returns once its UDP socket is bound (read from the process's
/// own view of its namespace, /proc/PID/net/udp).
async fn start_caddy(ns: &str, addr: SocketAddr, pki: &Pki) -> Tool {
    require("caddy", "caddy");
    let dir = scratch_dir("caddy");
    let site = dir.join("site");
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(site.join("index.html"), PAGE).unwrap();
    let path = caddy_config(&dir, addr, NAME, &site, pki);
    let mut caddy = Tool::spawn(
        "ip",
        &[
            "netns",
            "exec",
            ns,
            "caddy",
            "run",
            "--config",
            path.to_str().unwrap(),
        ],
        dir,
        "iproute2",
    );
    let needle = format!(":{:04X} ", addr.port());
    let table = format!("/proc/{}/net/udp", caddy.pid());
    // Bounded by wait_line's WAIT: each of Caddy's log lines is a chance
    // to look again, and it logs as it starts its servers.
    let bound = || {
        std::fs::read_to_string(&table)
            .unwrap_or_default()
            .lines()
            .any(|l| {
                l.split_whitespace()
                    .nth(1)
                    .is_some_and(|a| a.ends_with(needle.trim()))
            })
    };
    if !bound() {
        caddy.wait_line(|_| bound()).await;
    }
    caddy
}

/// Relay B, in the Triangle's `relay` namespace: a quic listener trusting
/// A's PROXY headers; [`NAME`] to Caddy with the client's address as the
/// source, [`CAPTURED`] to `reader` with a PROXY v2 header of its own.
fn node_config(chain: &Chain, caddy: SocketAddr, reader: SocketAddr) -> String {
    let (relay_ip, edge) = (chain.net.relay_ip, chain.net.client_ip);
    format!(
        r#"
[[listener]]
name = "nodes"
protocol = "quic"
listen = ["{relay_ip}:0"]
idle_timeout = "2s"
[listener.proxy_protocol]
trusted = ["{edge}/32"]

[[route]]
sni = ["{NAME}"]
backend = "caddy"

[[route]]
sni = ["{CAPTURED}"]
backend = "reader"

[backend.caddy]
addresses = ["{caddy}"]
source = "client"

[backend.reader]
addresses = ["{reader}"]
proxy_protocol = "v2"
"#
    )
}

/// Relay A, in the Triangle's `client` namespace: a quic listener on the
/// client's link, both names to B with PROXY v2 over UDP.
fn edge_config(chain: &Chain, node: SocketAddr) -> String {
    let edge_ip = chain.edge_ip;
    format!(
        r#"
[[listener]]
name = "edge"
protocol = "quic"
listen = ["{edge_ip}:0"]
idle_timeout = "2s"

[[route]]
sni = ["{NAME}", "{CAPTURED}"]
backend = "node"

[backend.node]
addresses = ["{node}"]
proxy_protocol = "v2"
"#
    )
}

/// A relay's access line for the QUIC flow with SNI `name`, once written
/// (at the flow's end: its idle timeout).
async fn flow_line(relay: &Relay, name: &str) -> Value {
    relay
        .wait_log(|l| {
            l["message"] == "connection closed" && l["protocol"] == "quic" && l["sni"] == name
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_origin_sees_the_client_two_quic_relays_away() {
    let _heavy = common::HEAVY.lock().await;
    require("chromium", "chromium");
    let chain = Chain::new();
    let net = &chain.net;
    let pki = Pki::new(&[NAME]);
    let caddy_addr = SocketAddr::from((net.backend_ip, CADDY_PORT));
    let mut caddy = start_caddy(&net.backend, caddy_addr, &pki).await;

    // The reader that is not ours: a UDP socket in the origin's namespace.
    let backend_ip = net.backend_ip;
    let reader = in_ns(&net.backend, move || {
        let s = std::net::UdpSocket::bind((backend_ip, 0)).unwrap();
        s.set_nonblocking(true).unwrap();
        s
    });
    let reader = UdpSocket::from_std(reader).unwrap();
    let reader_addr = reader.local_addr().unwrap();

    let node = Relay::launch(&node_config(&chain, caddy_addr, reader_addr), |path| {
        net.wrap(&Relay::command(path))
    })
    .await;
    let edge = Relay::launch(&edge_config(&chain, node.addr_of("nodes")), |path| {
        wrap_in(&net.client, &Relay::command(path))
    })
    .await;
    let edge_addr = edge.addr_of("edge");

    // HTTP/3 from chromium in the client's namespace, through A and B.
    let run = chromium_run_in(
        Some(&chain.user),
        &[
            format!("--origin-to-force-quic-on={NAME}:{}", edge_addr.port()),
            format!("--host-resolver-rules=MAP {NAME} {}", edge_addr.ip()),
            format!(
                "--ignore-certificate-errors-spki-list={}",
                pki.server_spki_pin()
            ),
            "--dump-dom".to_owned(),
            format!("https://{NAME}:{}/", edge_addr.port()),
        ],
    )
    .await;
    assert!(
        run.stdout.contains("two relays"),
        "the page did not load through both relays: {}",
        run.stderr
    );
    let access = caddy
        .wait_line(|l| {
            serde_json::from_str::<Value>(l)
                .is_ok_and(|l| l["logger"] == "http.log.access" && l["request"]["uri"] == "/")
        })
        .await;
    let access: Value = serde_json::from_str(&access).unwrap();
    assert_eq!(access["request"]["proto"], "HTTP/3.0", "{access}");
    let origin_saw = SocketAddr::new(
        access["request"]["remote_ip"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap(),
        access["request"]["remote_port"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap(),
    );
    assert_eq!(
        origin_saw.ip(),
        std::net::IpAddr::from(chain.user_ip),
        "Caddy saw {origin_saw}, not the client's address"
    );
    // The port too: A measured the client's socket, B was told it.
    let at_edge = flow_line(&edge, NAME).await;
    assert_eq!(at_edge["client.peer"], origin_saw.to_string(), "{at_edge}");
    let at_node = flow_line(&node, NAME).await;
    assert_eq!(
        at_node["client.claimed"],
        origin_saw.to_string(),
        "{at_node}"
    );
    assert_eq!(
        at_node["client.peer"], at_edge["backend.local"],
        "B measured A's backend socket: {at_node} {at_edge}"
    );

    // PROXY v2 over UDP from B, read by ppp: the client of a captured first
    // flight sent from the client's namespace.
    let user_ip = chain.user_ip;
    let client = in_ns(&chain.user, move || {
        let s = std::net::UdpSocket::bind((user_ip, 0)).unwrap();
        s.set_nonblocking(true).unwrap();
        s
    });
    let client = UdpSocket::from_std(client).unwrap();
    let me = client.local_addr().unwrap();
    let flight = capture("aioquic_v1");
    for datagram in &flight {
        client.send_to(datagram, edge_addr).await.unwrap();
    }
    let mut buf = vec![0u8; 65536];
    let (len, _) = tokio::time::timeout(WAIT, reader.recv_from(&mut buf))
        .await
        .expect("the reader behind B received nothing")
        .unwrap();
    let header = v2::Header::try_from(&buf[..len])
        .unwrap_or_else(|e| panic!("no PROXY v2 header that ppp reads: {e:?}"));
    assert_eq!(header.protocol, v2::Protocol::Datagram);
    match header.addresses {
        v2::Addresses::IPv4(a) => assert_eq!(
            SocketAddr::from((a.source_address, a.source_port)),
            me,
            "B's header names the client two relays back"
        ),
        other => panic!("not an IPv4 address block: {other:?}"),
    }
    assert_eq!(
        &buf[header.len()..len],
        &flight[0][..],
        "the first flight follows B's header unchanged"
    );
}
