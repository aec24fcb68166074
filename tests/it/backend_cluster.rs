//! Cluster-resolved backends through the real relay binary: a test control
//! plane (tests/it/common/control_plane.rs) says which node holds a site, and
//! recording "nodes" on loopback tell the client who they are.
//!
//! Covered: positive caching and expiry, negative caching, serve-stale on
//! lookup failures, single flight, `allowed_targets`, the local backend for
//! an empty answer, PROXY v2 towards another node, `source_hash` among
//! several endpoints, and `host:port` endpoints resolved at the cluster's
//! `resolver`, whose record TTL bounds the cached answer.

use crate::common;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use common::control_plane::{ControlPlane, Reply};
use common::dns::{DnsServer, Mode};
use common::*;
use snirelay::wire::proxy::{self, Announced, Parse};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

// ---------------------------------------------------------------- fixtures

/// What a node saw on one connection.
#[derive(Debug)]
struct Seen {
    header: Option<proxy::Header>,
    hello: Vec<u8>,
}

/// A plain TCP "node": reads an optional PROXY header and one TLS record,
/// reports them, answers with its name and closes.
struct Node {
    addr: SocketAddr,
    seen: mpsc::UnboundedReceiver<Seen>,
}

impl Node {
    async fn start(name: &'static str) -> Node {
        Node::at("127.0.0.1:0".parse().unwrap(), name).await
    }

    async fn at(bind: SocketAddr, name: &'static str) -> Node {
        let listener = TcpListener::bind(bind).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, seen) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve_node(stream, name, tx.clone()));
            }
        });
        Node { addr, seen }
    }

    async fn next(&mut self) -> Seen {
        tokio::time::timeout(WAIT, self.seen.recv())
            .await
            .expect("the node saw no connection in time")
            .unwrap()
    }

    /// Connections seen so far (without waiting).
    fn drain(&mut self) -> usize {
        let mut n = 0;
        while self.seen.try_recv().is_ok() {
            n += 1;
        }
        n
    }
}

async fn serve_node(mut stream: TcpStream, name: &str, tx: mpsc::UnboundedSender<Seen>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        let header = match proxy::parse(&buf) {
            Parse::Header(h) => Some(h),
            Parse::Incomplete => continue,
            _ => None,
        };
        let rest = &buf[header.as_ref().map_or(0, |h| h.len)..];
        if rest.len() >= 5 && rest.len() >= 5 + usize::from(u16::from_be_bytes([rest[3], rest[4]]))
        {
            let hello = rest.to_vec();
            let _ = tx.send(Seen { header, hello });
            let _ = stream.write_all(name.as_bytes()).await;
            let _ = stream.shutdown().await;
            let _ = stream.read_to_end(&mut Vec::new()).await;
            return;
        }
    }
}

/// Sends a hello for `name` through the relay from `from` and reads until
/// the relay closes: the client's address and the node's answer ("" when
/// the relay closed without relaying).
async fn ask_from(from: IpAddr, relay: &Relay, name: &str) -> (SocketAddr, String) {
    let mut client = connect_from(from, relay.addr()).await.unwrap();
    let local = client.local_addr().unwrap();
    client.write_all(&hello_for(name)).await.unwrap();
    let mut back = Vec::new();
    tokio::time::timeout(WAIT, client.read_to_end(&mut back))
        .await
        .expect("the relay did not close in time")
        .unwrap();
    (local, String::from_utf8(back).unwrap())
}

async fn ask(relay: &Relay, name: &str) -> (SocketAddr, String) {
    ask_from([127, 0, 0, 1].into(), relay, name).await
}

/// Asks and returns the close reason the relay logged.
async fn close_reason(relay: &Relay, name: &str) -> String {
    let (client, answer) = ask(relay, name).await;
    let line = relay.closed_line(client).await;
    assert_eq!(answer, "", "nothing may be relayed: {line}");
    assert!(line["backend.addr"].is_null(), "nothing connected: {line}");
    line["close"].as_str().unwrap().to_owned()
}

/// A relay routing `*.example.com` to backend `cluster`, asking `cp`;
/// `local` is the `local_backend`. `cluster_extra` goes into the
/// `[backend.cluster.cluster]` section, `top` before the listener.
fn config(cp: &ControlPlane, cluster_extra: &str, local: Option<SocketAddr>, top: &str) -> String {
    let local_key = if local.is_some() {
        "local_backend = \"local\""
    } else {
        ""
    };
    let local_section = local
        .map(|a| format!("[backend.local]\naddresses = [\"{a}\"]\nconnect_timeout = \"2s\"\n"))
        .unwrap_or_default();
    let cluster_extra = format!("{local_key}\n{cluster_extra}");
    common::control_plane::cluster_relay_config(&cp.url(), top, &cluster_extra, &local_section)
}

fn message(line: &serde_json::Value, text: &str) -> bool {
    line["message"] == text
}

// ------------------------------------------------------------------- tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_positive_answer_is_cached_for_positive_ttl() {
    let cp = ControlPlane::start().await;
    let mut a = Node::start("node-a").await;
    let b = Node::start("node-b").await;
    cp.set("www.example.com", Reply::endpoints(&[a.addr]));
    let relay = Relay::start(&config(&cp, "", None, "")).await;

    let (client, answer) = ask(&relay, "www.example.com").await;
    assert_eq!(answer, "node-a");
    let line = relay.closed_line(client).await;
    assert_eq!(line["close"], "done");
    assert_eq!(line["backend"], "cluster");
    assert_eq!(line["backend.addr"], a.addr.to_string());
    a.next().await;

    // The control plane moves the site; within the 30 s default TTL the
    // relay does not ask again.
    cp.set("www.example.com", Reply::endpoints(&[b.addr]));
    for _ in 0..3 {
        assert_eq!(ask(&relay, "www.example.com").await.1, "node-a");
    }
    assert_eq!(cp.requests("www.example.com"), 1);
    assert_eq!(cp.malformed(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_positive_ttl_the_name_is_looked_up_again() {
    let cp = ControlPlane::start().await;
    let a = Node::start("node-a").await;
    let b = Node::start("node-b").await;
    cp.set("www.example.com", Reply::endpoints(&[a.addr]));
    let relay = Relay::start(&config(&cp, "positive_ttl = \"300ms\"", None, "")).await;

    assert_eq!(ask(&relay, "www.example.com").await.1, "node-a");
    assert_eq!(cp.requests("www.example.com"), 1);
    cp.set("www.example.com", Reply::endpoints(&[b.addr]));
    // Waiting out the TTL (an expiry, not readiness).
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(ask(&relay, "www.example.com").await.1, "node-b");
    assert_eq!(cp.requests("www.example.com"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_answers_are_cached_for_negative_ttl() {
    let cp = ControlPlane::start().await;
    // No local backend: an empty list is as negative as "no node" (404).
    cp.set("empty.example.com", Reply::Endpoints(vec![]));
    let relay = Relay::start(&config(&cp, "negative_ttl = \"30s\"", None, "")).await;

    for name in ["nowhere.example.com", "empty.example.com"] {
        assert_eq!(close_reason(&relay, name).await, "no_address", "{name}");
        assert_eq!(close_reason(&relay, name).await, "no_address", "{name}");
        assert_eq!(
            cp.requests(name),
            1,
            "{name}: one lookup within negative_ttl"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_control_plane_is_answered_from_the_stale_entry() {
    let cp = ControlPlane::start().await;
    let a = Node::start("node-a").await;
    cp.set("www.example.com", Reply::endpoints(&[a.addr]));
    cp.set("hang.example.com", Reply::endpoints(&[a.addr]));
    let relay = Relay::start(&config(
        &cp,
        "positive_ttl = \"300ms\"\nnegative_ttl = \"30s\"\nlookup_timeout = \"500ms\"",
        None,
        "",
    ))
    .await;
    assert_eq!(ask(&relay, "www.example.com").await.1, "node-a");
    assert_eq!(ask(&relay, "hang.example.com").await.1, "node-a");

    // HTTP 500 after the answer expired: the old node still serves.
    cp.fail(Some(Reply::Status(500)));
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (client, answer) = ask(&relay, "www.example.com").await;
    assert_eq!(answer, "node-a");
    assert_eq!(relay.closed_line(client).await["close"], "done");
    assert_eq!(cp.requests("www.example.com"), 2);
    let warn = relay
        .wait_log(|l| {
            message(l, "cluster lookup failed; serving the last answer")
                && l["sni"] == "www.example.com"
        })
        .await;
    assert_eq!(warn["level"], "WARN");
    assert_eq!(warn["backend"], "cluster");
    assert!(warn["error"].as_str().unwrap().contains("500"), "{warn}");
    // The failed lookup is retried after negative_ttl, not per connection,
    // and the warning is not repeated within the streak.
    assert_eq!(ask(&relay, "www.example.com").await.1, "node-a");
    assert_eq!(cp.requests("www.example.com"), 2);

    // A control plane that hangs: bounded by lookup_timeout, then stale.
    cp.fail(Some(Reply::Hang));
    let (client, answer) = ask(&relay, "hang.example.com").await;
    assert_eq!(answer, "node-a");
    let line = relay.closed_line(client).await;
    assert_eq!(line["close"], "done");
    let warn = relay
        .wait_log(|l| {
            message(l, "cluster lookup failed; serving the last answer")
                && l["sni"] == "hang.example.com"
        })
        .await;
    assert!(
        warn["error"].as_str().unwrap().contains("lookup_timeout"),
        "{warn}"
    );

    // Nothing to serve stale: a bad reply closes `no_address`.
    cp.fail(Some(Reply::Body(
        "{\"endpoints\": [\"not-an-address\"]}".into(),
    )));
    assert_eq!(close_reason(&relay, "new.example.com").await, "no_address");
    let warn = relay
        .wait_log(|l| {
            l["sni"] == "new.example.com" && l["level"] == "WARN" && l["error"].is_string()
        })
        .await;
    assert!(
        warn["error"].as_str().unwrap().contains("not-an-address"),
        "{warn}"
    );

    let stale_warnings = relay
        .log_lines()
        .iter()
        .filter(|l| {
            l["sni"] == "www.example.com"
                && l["message"]
                    .as_str()
                    .unwrap()
                    .starts_with("cluster lookup failed")
        })
        .filter(|l| l["level"] == "WARN")
        .count();
    assert_eq!(stale_warnings, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_hundred_connections_for_a_new_name_cause_one_lookup() {
    const CLIENTS: usize = 100;
    let cp = ControlPlane::start().await;
    let mut a = Node::start("node-a").await;
    cp.set("www.example.com", Reply::endpoints(&[a.addr]));
    // The answer is held by the test, not timed out by the relay.
    let relay = Relay::start(&config(
        &cp,
        "lookup_timeout = \"20s\"",
        None,
        "[admin]\nlisten = \"127.0.0.1:0\"\n",
    ))
    .await;
    let admin: SocketAddr = relay.wait_log(|l| message(l, "admin listening")).await["addr"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();

    cp.hold(true);
    let relay = Arc::new(relay);
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..CLIENTS {
        let relay = relay.clone();
        clients.spawn(async move { ask(&relay, "www.example.com").await });
    }
    // Release the answer only once every other connection waits for it.
    cp.wait_requests("www.example.com", 1).await;
    relay
        .wait_count(CLIENTS - 1, |l| {
            message(l, "waiting for the cluster lookup in flight") && l["sni"] == "www.example.com"
        })
        .await;
    assert_eq!(cp.requests("www.example.com"), 1);
    cp.hold(false);

    while let Some(done) = clients.join_next().await {
        let (client, answer) = done.unwrap();
        if answer != "node-a" {
            panic!("{client}: {answer:?}; {}", relay.closed_line(client).await);
        }
    }
    assert_eq!(cp.requests("www.example.com"), 1, "single flight");
    relay
        .wait_count(CLIENTS, |l| {
            message(l, "connection closed") && l["close"] == "done"
        })
        .await;
    assert_eq!(a.drain(), CLIENTS);
    let (_, text) = http_get(admin, "/metrics").await;
    let series = |outcome: &str| {
        metric(
            &text,
            &format!("snirelay_lookups_total{{kind=\"cluster\",outcome=\"{outcome}\"}}"),
        )
    };
    assert_eq!(series("ok"), 1.0);
    assert_eq!(series("cache_hit"), (CLIENTS - 1) as f64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_outside_allowed_targets_are_refused() {
    let cp = ControlPlane::start().await;
    let a = Node::start("node-a").await;
    cp.set("far.example.com", Reply::endpoints(&["10.9.9.9:443"]));
    cp.set(
        "mixed.example.com",
        Reply::endpoints(&["10.9.9.9:443".to_owned(), a.addr.to_string()]),
    );
    let relay = Relay::start(&config(&cp, "", None, "")).await;

    assert_eq!(
        close_reason(&relay, "far.example.com").await,
        "target_not_allowed"
    );
    let warn = relay
        .wait_log(|l| message(l, "cluster answer outside allowed_targets; dropped"))
        .await;
    assert_eq!(warn["level"], "WARN");
    assert_eq!(warn["addr"], "10.9.9.9:443");
    assert_eq!(warn["sni"], "far.example.com");
    let attempts = relay
        .log_lines()
        .iter()
        .filter(|l| message(l, "backend connect attempt failed"))
        .count();
    assert_eq!(attempts, 0, "no connect was tried");

    // The allowed part of an answer is used.
    let (client, answer) = ask(&relay, "mixed.example.com").await;
    assert_eq!(answer, "node-a");
    assert_eq!(
        relay.closed_line(client).await["backend.addr"],
        a.addr.to_string()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_answer_relays_to_the_local_backend() {
    let pki = Pki::new(&["site.example.com"]);
    let local = tls_echo_backend(&pki).await;
    let cp = ControlPlane::start().await;
    cp.set("site.example.com", Reply::Endpoints(vec![]));
    let relay = Relay::start(&config(&cp, "", Some(local), "")).await;

    let tcp = TcpStream::connect(relay.addr()).await.unwrap();
    let client = tcp.local_addr().unwrap();
    let mut tls = tls_connect(pki.client_config(), "site.example.com", tcp)
        .await
        .unwrap();
    echo_once(&mut tls, b"held here").await.unwrap();
    drop(tls);
    let line = relay.closed_line(client).await;
    assert_eq!(line["backend"], "cluster");
    assert_eq!(line["backend.addr"], local.to_string());
    assert_eq!(cp.requests("site.example.com"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_to_another_node_sends_proxy_v2_with_client_and_sni() {
    let cp = ControlPlane::start().await;
    let mut a = Node::start("node-a").await;
    cp.set("www.example.com", Reply::endpoints(&[a.addr]));
    let relay = Relay::start(&config(&cp, "", None, "")).await;

    let sent = hello_for("www.example.com");
    let mut tcp = TcpStream::connect(relay.addr()).await.unwrap();
    let client = tcp.local_addr().unwrap();
    tcp.write_all(&sent).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(WAIT, tcp.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(answer, b"node-a");
    drop(tcp);
    let seen = a.next().await;
    let header = seen.header.expect("no PROXY header towards the node");
    assert_eq!(header.version, proxy::ProxyVersion::V2);
    assert_eq!(
        header.addresses,
        Announced::Proxy {
            source: client,
            destination: relay.addr()
        }
    );
    assert_eq!(header.authority.as_deref(), Some(&b"www.example.com"[..]));
    assert_eq!(header.hops, 1, "a direct client carries no hop TLV");
    assert_eq!(seen.hello, sent, "the hello follows unchanged");
    assert_eq!(relay.closed_line(client).await["close"], "done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_endpoints_keep_a_client_on_one_node() {
    let cp = ControlPlane::start().await;
    let nodes = [
        Node::start("node-a").await,
        Node::start("node-b").await,
        Node::start("node-c").await,
    ];
    let addrs: Vec<SocketAddr> = nodes.iter().map(|n| n.addr).collect();
    cp.set("www.example.com", Reply::endpoints(&addrs));
    let relay = Relay::start(&config(&cp, "", None, "")).await;

    let mut used = std::collections::HashSet::new();
    for host in 10..26u8 {
        let from = IpAddr::from([127, 0, 0, host]);
        let (_, first) = ask_from(from, &relay, "www.example.com").await;
        assert!(first.starts_with("node-"), "{from}: {first:?}");
        for _ in 0..2 {
            let (_, again) = ask_from(from, &relay, "www.example.com").await;
            assert_eq!(again, first, "{from} moved");
        }
        used.insert(first);
    }
    assert!(used.len() >= 2, "16 clients all on {used:?}: not hashed");
    assert_eq!(cp.requests("www.example.com"), 1);
}

// ----------------------------------------------------------- DNS lookups

/// Nodes on 127.0.0.2, 127.0.0.3, ... all on one port (a DNS answer
/// names hosts; the port comes from the config).
async fn nodes_on_one_port(names: &[&'static str]) -> (u16, Vec<Node>) {
    'retry: for _ in 0..20 {
        let first = Node::at("127.0.0.2:0".parse().unwrap(), names[0]).await;
        let port = first.addr.port();
        let mut nodes = vec![first];
        for (i, &name) in names.iter().enumerate().skip(1) {
            let bind = SocketAddr::from(([127, 0, 0, 2 + i as u8], port));
            if std::net::TcpListener::bind(bind).is_err() {
                continue 'retry;
            }
            nodes.push(Node::at(bind, name).await);
        }
        return (port, nodes);
    }
    panic!("no port free on every node address");
}

/// Like [`config`], but asking the test DNS server.
fn dns_config(dns: &DnsServer, port: u16, extra: &str, local: Option<SocketAddr>) -> String {
    let cluster = format!(
        "dns_server = \"{}\"\nport = {port}\nallowed_targets = [\"127.0.0.0/8\"]\n{extra}",
        dns.addr
    );
    let local_key = if local.is_some() {
        "local_backend = \"local\""
    } else {
        ""
    };
    let local_section = local
        .map(|a| format!("[backend.local]\naddresses = [\"{a}\"]\n"))
        .unwrap_or_default();
    format!(
        r#"
[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]

[[route]]
sni = ["*.example.com"]
backend = "cluster"

[backend.cluster.cluster]
{cluster}
{local_key}

{local_section}
"#
    )
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_answers_follow_the_record_on_the_configured_port_within_its_ttl() {
    let dns = DnsServer::start().await;
    let (port, nodes) = nodes_on_one_port(&["node-a", "node-b"]).await;
    dns.set("www.example.com", vec![ip("127.0.0.2")], 1);
    // The record's TTL is longer than positive_ttl here: positive_ttl wins.
    dns.set("short.example.com", vec![ip("127.0.0.2")], 3600);
    let relay = Relay::start(&dns_config(&dns, port, "positive_ttl = \"300ms\"", None)).await;
    let relay_30s = Relay::start(&dns_config(&dns, port, "", None)).await;

    // www: record TTL 1 s < positive_ttl 30 s.
    let (client, answer) = ask(&relay_30s, "www.example.com").await;
    assert_eq!(answer, "node-a");
    let line = relay_30s.closed_line(client).await;
    assert_eq!(line["backend.addr"], nodes[0].addr.to_string());
    assert_eq!(dns.lookups("www.example.com"), 1);
    dns.set("www.example.com", vec![ip("127.0.0.3")], 1);
    assert_eq!(
        ask(&relay_30s, "www.example.com").await.1,
        "node-a",
        "cached"
    );
    assert_eq!(dns.lookups("www.example.com"), 1);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(ask(&relay_30s, "www.example.com").await.1, "node-b");
    assert_eq!(dns.lookups("www.example.com"), 2);

    // short: record TTL 1 h > positive_ttl 300 ms.
    assert_eq!(ask(&relay, "short.example.com").await.1, "node-a");
    dns.set("short.example.com", vec![ip("127.0.0.3")], 3600);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(ask(&relay, "short.example.com").await.1, "node-b");
    assert_eq!(dns.lookups("short.example.com"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dns_answer_naming_this_node_relays_to_the_local_backend() {
    let dns = DnsServer::start().await;
    let (port, _nodes) = nodes_on_one_port(&["node-a"]).await;
    let mut here = Node::start("here").await;
    // The relay listens on 127.0.0.1: an answer of 127.0.0.1 is this node.
    dns.set("mine.example.com", vec![ip("127.0.0.1")], 60);
    let relay = Relay::start(&dns_config(&dns, port, "", Some(here.addr))).await;

    let (client, answer) = ask(&relay, "mine.example.com").await;
    assert_eq!(answer, "here");
    assert_eq!(
        relay.closed_line(client).await["backend.addr"],
        here.addr.to_string()
    );
    assert!(
        here.next().await.header.is_none(),
        "the local backend speaks no PROXY"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_negative_answers_are_cached_and_a_silent_server_is_served_stale() {
    let dns = DnsServer::start().await;
    let (port, _nodes) = nodes_on_one_port(&["node-a"]).await;
    dns.set("www.example.com", vec![ip("127.0.0.2")], 3600);
    let relay = Relay::start(&dns_config(
        &dns,
        port,
        "positive_ttl = \"300ms\"\nnegative_ttl = \"30s\"\nlookup_timeout = \"300ms\"",
        None,
    ))
    .await;

    // NXDOMAIN: no_address, and asked once within negative_ttl.
    assert_eq!(close_reason(&relay, "gone.example.com").await, "no_address");
    assert_eq!(close_reason(&relay, "gone.example.com").await, "no_address");
    assert_eq!(dns.lookups("gone.example.com"), 1);

    // The server goes silent after a good answer expired: still relayed.
    assert_eq!(ask(&relay, "www.example.com").await.1, "node-a");
    dns.set_mode(Mode::Silent);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (client, answer) = ask(&relay, "www.example.com").await;
    assert_eq!(answer, "node-a");
    assert_eq!(relay.closed_line(client).await["close"], "done");
    assert_eq!(dns.lookups("www.example.com"), 2);
    let warn = relay
        .wait_log(|l| {
            message(l, "cluster lookup failed; serving the last answer")
                && l["sni"] == "www.example.com"
        })
        .await;
    assert!(
        warn["error"].as_str().unwrap().contains("no answer"),
        "{warn}"
    );
}

// ------------------------------------------------- host names in answers

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_name_endpoints_resolve_at_the_resolver_whose_ttl_bounds_the_answer() {
    // snirelay's own protocol takes `host:port` endpoints too.
    let dns = DnsServer::start().await;
    let (port, mut nodes) = nodes_on_one_port(&["node-a", "node-b"]).await;
    dns.set("node.cluster.test", vec![ip("127.0.0.2")], 1);
    let cp = ControlPlane::start().await;
    cp.set(
        "www.example.com",
        Reply::endpoints(&[format!("node.cluster.test:{port}")]),
    );
    let extra = format!("resolver = \"{}\"\npositive_ttl = \"30s\"", dns.addr);
    let relay = Relay::start(&config(&cp, &extra, None, "")).await;

    assert_eq!(ask(&relay, "www.example.com").await.1, "node-a");
    assert_eq!(ask(&relay, "www.example.com").await.1, "node-a");
    assert_eq!(cp.requests("www.example.com"), 1, "cached");
    assert_eq!(dns.lookups("node.cluster.test"), 1);
    nodes[0].next().await;

    // The name's record lives 1 s, under positive_ttl (30 s): the answer
    // expires with it, and the next lookup follows the name's new address.
    dns.set("node.cluster.test", vec![ip("127.0.0.3")], 1);
    tokio::time::sleep(Duration::from_millis(1100)).await; // the TTL, not readiness
    assert_eq!(ask(&relay, "www.example.com").await.1, "node-b");
    assert_eq!(cp.requests("www.example.com"), 2);
    assert_eq!(dns.lookups("node.cluster.test"), 2);
    nodes[1].next().await;
}
