//! Pangolin's HA reference deployment with snirelay in place of Gerbil's
//! SNI proxy, run as docs/pangolin.md gives it: the configuration is the
//! doc's one `toml` block with the reference's placeholders, read from the
//! doc and filled in here, in the topology of `common::compose` (two nodes,
//! each a host with a bridge holding the `pangolin` container, the `gerbil`
//! container whose namespace snirelay and Traefik share, Docker's published
//! ports; a client outside), the names `pangolin` and `gerbil` resolved
//! from a hosts file as Docker's DNS would answer them.
//!
//! In that layout: a site held by node 2 and reached through node 1 makes
//! one hop (PROXY v2) and arrives at node 2's Traefik with the real client
//! address; a site held by node 1 (pushed by its Pangolin over the bridge,
//! without a token) is served locally; a lookup that answers node 1's own
//! external address is node 1 (`this_node`), never dialled; a push from
//! outside the bridge is refused; Gerbil's other endpoints, at the address
//! Pangolin's `reachableAt` names, reach Gerbil's API (a double that
//! records them) while `/healthz` there is snirelay's; and with
//! `hop_proxy_protocol = "v1"`, a node still running Gerbil (a double that
//! reads PROXY v1 only) gets the real client. All of it again with node 1
//! behind a 1:1 NAT. `examples/pangolin-node.toml` is the doc's block
//! filled in and passes `snirelay check`.

use crate::common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::compose::{CLIENT, GERBIL, Layout, Node, PANGOLIN};
use common::hosts::Hosts;
use common::netns::in_ns;
use common::pangolin::{Pangolin, Reply};
use common::*;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use snirelay::wire::proxy::{self, Announced, Parse};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The names Docker's DNS answers on the compose network.
const HOSTS: &str = "127.0.0.1 localhost\n172.30.0.2 pangolin\n172.30.0.3 gerbil\n";
/// A WireGuard public key, as `wg pubkey` writes it.
const KEY: &str = "kLw0Hn5WJ2LzDq7cA0bWv3ps7oFfTnqJx0W6Bq3ZkQ8=";
const SITE1: &str = "site1.example.com";
const SITE2: &str = "site2.example.com";
const SELF: &str = "self.example.com";

/// The configuration docs/pangolin.md gives for the reference: its one
/// `toml` block written with the reference's placeholders.
fn doc_block() -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/pangolin.md")).unwrap();
    let blocks: Vec<&str> = doc
        .split("```toml\n")
        .skip(1)
        .filter_map(|rest| rest.split_once("```").map(|(block, _)| block))
        .filter(|block| block.contains("<NODE1_EXTERNAL_IP>"))
        .collect();
    assert_eq!(blocks.len(), 1, "one block with the placeholders");
    blocks[0].to_owned()
}

/// The block with the placeholders filled in for node `this`.
fn fill(this: Ipv4Addr, n1: Ipv4Addr, n2: Ipv4Addr, n1_internal: Ipv4Addr) -> String {
    let text = doc_block()
        .replace("<THIS_NODE_EXTERNAL_IP>", &this.to_string())
        .replace("<NODE1_EXTERNAL_IP>", &n1.to_string())
        .replace("<NODE2_EXTERNAL_IP>", &n2.to_string())
        .replace("<NODE1_INTERNAL_IP>", &n1_internal.to_string());
    assert!(!text.contains("_IP>"), "a placeholder left: {text}");
    text
}

/// A listener bound in namespace `ns`.
fn listen_in(ns: &str, addr: &str) -> TcpListener {
    let addr: SocketAddr = addr.parse().unwrap();
    let listener = in_ns(ns, move || std::net::TcpListener::bind(addr).unwrap());
    listener.set_nonblocking(true).unwrap();
    TcpListener::from_std(listener).unwrap()
}

/// A connection to `to` from namespace `ns`.
fn dial_from(ns: &str, to: SocketAddr) -> TcpStream {
    let stream = in_ns(ns, move || {
        std::net::TcpStream::connect_timeout(&to, WAIT)
            .unwrap_or_else(|e| panic!("connect to {to}: {e}"))
    });
    stream.set_nonblocking(true).unwrap();
    TcpStream::from_std(stream).unwrap()
}

/// Reads a PROXY header one byte at a time (so nothing after it is
/// consumed); `None` when what comes is not one.
async fn read_header(stream: &mut TcpStream) -> Option<proxy::Header> {
    let mut buf = Vec::new();
    while buf.len() < 232 {
        let mut byte = [0u8; 1];
        stream.read_exact(&mut byte).await.ok()?;
        buf.push(byte[0]);
        match proxy::parse(&buf) {
            Parse::Header(header) => return Some(header),
            Parse::Incomplete => continue,
            _ => return None,
        }
    }
    None
}

/// Traefik's `websecure` entry point (`:443`, `proxyProtocol.trustedIPs:
/// [0.0.0.0/0]`): reads the PROXY header, completes the TLS handshake and
/// answers `"{node} {client}"`, the client as the header names it.
fn traefik(listener: TcpListener, pki: &Pki, node: &'static str) {
    let acceptor = tokio_rustls::TlsAcceptor::from(pki.server_config());
    raw_backend_on(listener, move |mut tcp| {
        let acceptor = acceptor.clone();
        async move {
            let client = match read_header(&mut tcp).await.map(|h| h.addresses) {
                Some(Announced::Proxy { source, .. }) => source.ip().to_string(),
                _ => return,
            };
            if let Ok(mut tls) = acceptor.accept(tcp).await {
                let _ = tls.write_all(format!("{node} {client}").as_bytes()).await;
                let _ = tls.shutdown().await;
            }
        }
    });
}

/// A node still running Gerbil's SNI proxy, as far as a hop sees it: a
/// PROXY v1 line (all Gerbil reads) before the hello, or nothing is
/// answered; then the site's TLS, answering `"gerbil {client}"`.
fn gerbil_sni_proxy(listener: TcpListener, pki: &Pki) {
    let acceptor = tokio_rustls::TlsAcceptor::from(pki.server_config());
    raw_backend_on(listener, move |mut tcp| {
        let acceptor = acceptor.clone();
        async move {
            let mut line = Vec::new();
            while !line.ends_with(b"\r\n") && line.len() < 108 {
                let mut byte = [0u8; 1];
                if tcp.read_exact(&mut byte).await.is_err() {
                    return;
                }
                line.push(byte[0]);
            }
            let line = String::from_utf8_lossy(&line).into_owned();
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() != 6 || fields[..2] != ["PROXY", "TCP4"] {
                return;
            }
            let client = fields[2].to_owned();
            if let Ok(mut tls) = acceptor.accept(tcp).await {
                let _ = tls.write_all(format!("gerbil {client}").as_bytes()).await;
                let _ = tls.shutdown().await;
            }
        }
    });
}

/// Gerbil's HTTP API, moved to `127.0.0.1:3005`: answers every request
/// 200 and records `"METHOD path-and-query body"`.
fn gerbil_api(listener: TcpListener) -> Arc<Mutex<Vec<String>>> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let record = log.clone();
    raw_backend_on(listener, move |tcp| {
        let record = record.clone();
        async move {
            let service =
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let record = record.clone();
                    async move {
                        let what = format!("{} {}", req.method(), req.uri());
                        let body = req.into_body().collect().await?.to_bytes();
                        record
                            .lock()
                            .unwrap()
                            .push(format!("{what} {}", String::from_utf8_lossy(&body)));
                        Ok::<_, hyper::Error>(hyper::Response::new(Full::new(Bytes::from_static(
                            b"{\"status\":\"Peer added successfully\"}",
                        ))))
                    }
                });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tcp), service)
                .await;
        }
    });
    log
}

/// A node's containers: Pangolin's double, Traefik's, Gerbil's API and
/// snirelay where Gerbil's SNI proxy was.
struct Running {
    relay: Option<Relay>,
    pangolin: Pangolin,
    gerbil: Arc<Mutex<Vec<String>>>,
    config: String,
    dir: std::path::PathBuf,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn start_node(
    layout: &Layout,
    n: usize,
    tag: &'static str,
    pki: &Pki,
    hosts: &Hosts,
) -> Running {
    let node: &Node = layout.node(n);
    let (n1, n2) = (layout.node(1), layout.node(2));
    let pangolin = Pangolin::start_on(listen_in(&node.pangolin, "0.0.0.0:3001")).await;
    traefik(listen_in(&node.gerbil, "0.0.0.0:443"), pki, tag);
    let gerbil = gerbil_api(listen_in(&node.gerbil, "127.0.0.1:3005"));
    let dir = scratch_dir("ha-node");
    let key = dir.join("key.pub");
    std::fs::write(&key, format!("{KEY}\n")).unwrap();
    let config = fill(node.external, n1.external, n2.external, n1.internal)
        .replace("/var/config/key.pub", &key.display().to_string())
        .replace(
            "/var/lib/snirelay/local-names.json",
            &dir.join("local-names.json").display().to_string(),
        );
    let relay = Relay::launch(&config, |path| {
        node.in_gerbil(&hosts.wrap(&Relay::command(path)))
    })
    .await;
    Running {
        relay: Some(relay),
        pangolin,
        gerbil,
        config,
        dir,
    }
}

impl Running {
    fn relay(&self) -> &Relay {
        self.relay.as_ref().unwrap()
    }
}

/// A TLS connection for `sni` from the client to `node`'s external port
/// 443; what the site answered.
async fn visit(layout: &Layout, node: usize, sni: &str, pki: &Pki) -> String {
    let to = SocketAddr::new(IpAddr::V4(layout.node(node).external), 443);
    let tcp = dial_from(&layout.client, to);
    let connector = tokio_rustls::TlsConnector::from(Arc::new(pki.client_config()));
    let name = rustls::pki_types::ServerName::try_from(sni.to_owned()).unwrap();
    let mut tls = tokio::time::timeout(WAIT, connector.connect(name, tcp))
        .await
        .unwrap_or_else(|_| panic!("{sni} via node {node}: no handshake in time"))
        .unwrap_or_else(|e| panic!("{sni} via node {node}: {e}"));
    let mut text = String::new();
    tokio::time::timeout(WAIT, tls.read_to_string(&mut text))
        .await
        .unwrap_or_else(|_| panic!("{sni} via node {node}: no answer in time"))
        .unwrap_or_else(|e| panic!("{sni} via node {node}: {e}"));
    text
}

/// `method path` with a JSON body from namespace `ns` to `to`, as
/// Pangolin's `sendToExitNode` sends it (no token).
async fn call(ns: &str, to: SocketAddr, method: &str, path: &str, body: &str) -> Answer {
    let request = http_request_text(method, path, &["Content-Type: application/json"], body);
    http_exchange(dial_from(ns, to), &request).await
}

fn push_body(names: &[&str]) -> String {
    serde_json::json!({ "fullDomains": names }).to_string()
}

async fn the_reference_deployment(layout: Layout) {
    let pki = Pki::new(&[SITE1, SITE2, SELF]);
    let hosts = Hosts::new(HOSTS);
    let client = CLIENT.to_string();
    let node1 = start_node(&layout, 1, "node1", &pki, &hosts).await;
    let mut node2 = start_node(&layout, 2, "node2", &pki, &hosts).await;
    let (n1, n2) = (layout.node(1), layout.node(2));
    // Pangolin answers the other node's `base_endpoint` for a site held
    // there, and (a key that does not match, say) node 1's own.
    node1.pangolin.set(SITE2, Reply::endpoints(&[n2.external]));
    node1.pangolin.set(SELF, Reply::endpoints(&[n1.external]));

    // Each Pangolin pushes its node's names to http://gerbil:3004 over the
    // bridge, with no token: taken from the pangolin container.
    let gerbil_api_at = SocketAddr::from((GERBIL, 3004));
    for (node, ns, name) in [(&node1, &n1.pangolin, SITE1), (&node2, &n2.pangolin, SITE2)] {
        let answer = call(
            ns,
            gerbil_api_at,
            "POST",
            "/update-local-snis",
            &push_body(&[name]),
        )
        .await;
        assert_eq!(answer.status, 200, "{answer:?}");
        let line = node
            .relay()
            .wait_log(|l| l["message"] == "local names pushed")
            .await;
        assert_eq!(line["authenticated"], "allowlisted", "{line}");
        assert!(
            line["admin.peer"]
                .as_str()
                .unwrap()
                .starts_with(&format!("{PANGOLIN}:")),
            "{line}"
        );
    }

    // Node 2's site through node 1: one hop, the client's address at node
    // 2's Traefik.
    assert_eq!(
        visit(&layout, 1, SITE2, &pki).await,
        format!("node2 {client}")
    );
    let hop = node2
        .relay()
        .wait_log(|l| l["message"] == "connection closed" && l["sni"] == SITE2)
        .await;
    assert_eq!(
        hop["client.claimed"].as_str().unwrap().split(':').next(),
        Some(client.as_str()),
        "{hop}"
    );
    // It came from node 1's external address (masqueraded, or behind the
    // NAT translated), trusted, and went to the local Traefik.
    assert_eq!(
        hop["client.peer"].as_str().unwrap().split(':').next(),
        Some(n1.external.to_string().as_str()),
        "{hop}"
    );
    assert_eq!(hop["backend.addr"], "127.0.0.1:443", "{hop}");
    // Node 1's own site, and node 2's reached directly: local, no lookup.
    assert_eq!(
        visit(&layout, 1, SITE1, &pki).await,
        format!("node1 {client}")
    );
    assert_eq!(
        visit(&layout, 2, SITE2, &pki).await,
        format!("node2 {client}")
    );
    assert_eq!(node1.pangolin.requests(SITE1), 0);
    assert_eq!(node2.pangolin.requests(SITE2), 0);
    // An answer naming node 1's external address is node 1: served by its
    // Traefik, not dialled (from inside the bridge the published port
    // would not even answer).
    assert_eq!(
        visit(&layout, 1, SELF, &pki).await,
        format!("node1 {client}")
    );
    assert_eq!(node1.pangolin.requests(SELF), 1);
    let own = node1
        .relay()
        .wait_log(|l| l["message"] == "connection closed" && l["sni"] == SELF)
        .await;
    assert_eq!(own["backend.addr"], "127.0.0.1:443", "{own}");

    // Pangolin's reachableAt, http://<NODE1_INTERNAL_IP>:3004, called by
    // the other node's Pangolin: Gerbil's endpoints reach Gerbil's API as
    // sent, `/healthz` there is snirelay's, and a push from outside the
    // bridge without a token changes nothing.
    let reachable_at = SocketAddr::new(IpAddr::V4(n1.internal), 3004);
    let peer = r#"{"publicKey":"peer-key","allowedIps":["100.89.128.4/32"]}"#;
    let answer = call(&n2.pangolin, reachable_at, "POST", "/peer", peer).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.body, "{\"status\":\"Peer added successfully\"}");
    let answer = call(
        &n2.pangolin,
        reachable_at,
        "DELETE",
        "/peer?public_key=peer-key",
        "",
    )
    .await;
    assert_eq!(answer.status, 200, "{answer:?}");
    let answer = call(&n2.pangolin, reachable_at, "GET", "/healthz", "").await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(
        *node1.gerbil.lock().unwrap(),
        vec![
            format!("POST /peer {peer}"),
            "DELETE /peer?public_key=peer-key ".to_owned(),
        ]
    );
    let answer = call(
        &n2.pangolin,
        reachable_at,
        "POST",
        "/update-local-snis",
        &push_body(&[SELF]),
    )
    .await;
    // The block has no token_file: a push can only come from the bridge.
    assert_eq!(answer.status, 403, "{answer:?}");
    assert_eq!(
        answer.body,
        "control needs [admin] token_file or a unix socket\n"
    );
    node1
        .relay()
        .wait_log(|l| l["message"] == "local names push refused")
        .await;
    assert_eq!(
        visit(&layout, 1, SITE1, &pki).await,
        format!("node1 {client}")
    );

    // Mid-migration: node 2 runs Gerbil's SNI proxy again, node 1 hops with
    // PROXY v1 (the block's one-line change), and the client's address
    // reaches it.
    drop(node2.relay.take());
    gerbil_sni_proxy(listen_in(&n2.gerbil, "0.0.0.0:8443"), &pki);
    let v1 = node1
        .config
        .replace("hop_proxy_protocol = \"v2\"", "hop_proxy_protocol = \"v1\"");
    assert_ne!(v1, node1.config);
    let reloaded = node1.relay().reload(&v1, 1).await;
    assert_eq!(reloaded["message"], "reload applied", "{reloaded}");
    assert_eq!(
        visit(&layout, 1, SITE2, &pki).await,
        format!("gerbil {client}")
    );
}

#[tokio::test]
async fn the_reference_deployment_with_public_addresses_on_the_hosts() {
    the_reference_deployment(Layout::direct()).await;
}

#[tokio::test]
async fn the_reference_deployment_with_node_1_behind_a_1_to_1_nat() {
    the_reference_deployment(Layout::nat()).await;
}

#[tokio::test]
async fn the_pangolin_node_example_is_the_doc_block_filled_in_and_passes_check() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("examples/pangolin-node.toml")).unwrap();
    let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
    let filled = fill(
        ip("203.0.113.10"),
        ip("203.0.113.10"),
        ip("198.51.100.20"),
        ip("192.0.2.10"),
    );
    assert!(
        text.ends_with(&filled),
        "examples/pangolin-node.toml is docs/pangolin.md's block with the placeholders filled in"
    );
    // `check` reads the key file where it lives on a node, so the test
    // points it at its own; names resolve from the test's hosts file.
    let dir = scratch_dir("ha-example");
    let key = dir.join("key.pub");
    std::fs::write(&key, format!("{KEY}\n")).unwrap();
    let path = dir.join("pangolin-node.toml");
    std::fs::write(
        &path,
        text.replace("/var/config/key.pub", &key.display().to_string()),
    )
    .unwrap();
    let hosts = Hosts::new(HOSTS);
    let (code, stdout, stderr) = hosts.check(&path);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains("default route everything -> backend pangolin"),
        "{stdout}"
    );
}
