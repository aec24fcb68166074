//! A cluster node as a Pangolin control plane drives it, through the real
//! relay binary on loopback: names pushed to `POST /update-local-snis` go to
//! the local backend ("Traefik") without a lookup, a name that leaves the
//! set has its open connection closed as `moved` (another name's stays) and
//! its cached answer dropped, the pushed set survives a restart, pushes
//! arrive as Pangolin sends them (no token, from an address the node's
//! `push_unauthenticated_from` lists) and, without that list, need the
//! admin token; every push needs a valid body, the default route (`sni = ["*"]`)
//! sends every name to the cluster backend, `local_overrides` are local
//! without a push, and a two-node chain with `hop_proxy_protocol = "v1"`
//! delivers the original client to a node that reads PROXY v1 as Gerbil
//! does (`examples/pangolin-node.toml` is checked in `pangolin_ha_reference`).

use crate::common;

use std::net::SocketAddr;
use std::path::Path;

use common::control_plane::{ControlPlane, Reply};
use common::pangolin::Pangolin;
use common::*;
use snirelay::wire::proxy::{self, Parse};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const TOKEN: &str = "pangolin-push-token";

/// A "site" backend: reads the hello (one TLS record, after a PROXY
/// header if one comes), answers with its
/// name, then echoes whatever comes until the relay closes.
async fn site(name: &'static str) -> SocketAddr {
    raw_backend(move |mut stream| async move {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = stream.read(&mut chunk).await.unwrap_or(0);
            if n == 0 {
                return;
            }
            buf.extend_from_slice(&chunk[..n]);
            // A node behind a cluster hop gets a PROXY header first.
            let skip = match proxy::parse(&buf) {
                Parse::Header(h) => h.len,
                Parse::Incomplete => continue,
                _ => 0,
            };
            let rest = &buf[skip..];
            if rest.len() >= 5
                && rest.len() >= 5 + usize::from(u16::from_be_bytes([rest[3], rest[4]]))
            {
                break;
            }
        }
        if stream.write_all(name.as_bytes()).await.is_err() {
            return;
        }
        loop {
            let n = stream.read(&mut chunk).await.unwrap_or(0);
            if n == 0 || stream.write_all(&chunk[..n]).await.is_err() {
                return;
            }
        }
    })
    .await
}

/// A connection through the relay for `name`, past its backend's greeting.
struct Open {
    stream: TcpStream,
    client: SocketAddr,
    /// The backend's name.
    at: String,
}

async fn open(relay: &Relay, name: &str) -> Open {
    let mut stream = TcpStream::connect(relay.addr()).await.unwrap();
    let client = stream.local_addr().unwrap();
    stream.write_all(&hello_for(name)).await.unwrap();
    let mut greeting = [0u8; 6];
    tokio::time::timeout(WAIT, stream.read_exact(&mut greeting))
        .await
        .expect("no greeting in time")
        .expect("closed before the greeting");
    Open {
        stream,
        client,
        at: String::from_utf8_lossy(&greeting).into_owned(),
    }
}

impl Open {
    /// Whether the connection still carries bytes both ways.
    async fn echoes(&mut self) -> bool {
        if self.stream.write_all(b"ping").await.is_err() {
            return false;
        }
        let mut back = [0u8; 4];
        matches!(
            tokio::time::timeout(WAIT, self.stream.read_exact(&mut back)).await,
            Ok(Ok(_)) if &back == b"ping"
        )
    }

    /// Waits until the relay closes the connection.
    async fn closed(mut self) {
        let mut rest = Vec::new();
        tokio::time::timeout(WAIT, self.stream.read_to_end(&mut rest))
            .await
            .expect("the relay did not close the connection")
            .ok();
    }
}

/// Listener `tls` whose default route sends every name to the cluster
/// backend `pangolin`, with `traefik` as its local backend.
fn node_config(cp: &ControlPlane, traefik: SocketAddr, tokens: &Path, state: &Path) -> String {
    format!(
        r#"
[admin]
listen = "127.0.0.1:0"
token_file = "{tokens}"
push_unauthenticated_from = ["127.0.0.1/32"]
local_names_file = "{state}"
moved_close_window = "300ms"

[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]

[[route]]
name = "everything"
sni = ["*"]
backend = "pangolin"

[backend.pangolin]
connect_timeout = "2s"

[backend.pangolin.cluster]
lookup_url = "{url}"
allowed_targets = ["127.0.0.0/8"]
local_backend = "traefik"
local_overrides = ["dashboard.example.net", "*.internal.example.net"]

[backend.traefik]
addresses = ["{traefik}"]
connect_timeout = "2s"
"#,
        tokens = tokens.display(),
        state = state.display(),
        url = cp.url(),
    )
}

fn push_request(body: &str, token: Option<&str>) -> String {
    let auth = token.map(|t| format!("Authorization: Bearer {t}"));
    let headers: Vec<&str> = auth.iter().map(String::as_str).collect();
    http_request_text("POST", "/update-local-snis", &headers, body)
}

/// Pushes `names` as Pangolin does: no token, only `Content-Type`, from
/// 127.0.0.1, which the node's `push_unauthenticated_from` lists.
async fn push(relay: &Relay, names: &[&str]) -> serde_json::Value {
    let answer = Pangolin::push_local_snis(relay.admin_addr().await, None, names).await;
    assert_eq!(answer.status, 200, "{} {}", answer.head, answer.body);
    answer.json()
}

/// Pushes `names` with the node's bearer token, as an operator's script does.
async fn push_with_token(relay: &Relay, names: &[&str]) -> serde_json::Value {
    let body = serde_json::json!({ "fullDomains": names }).to_string();
    let answer = http_tcp(relay.admin_addr().await, &push_request(&body, Some(TOKEN))).await;
    assert_eq!(answer.status, 200, "{} {}", answer.head, answer.body);
    answer.json()
}

async fn metrics_text(relay: &Relay) -> String {
    http_get(relay.admin_addr().await, "/metrics").await.1
}

struct Node {
    cp: ControlPlane,
    traefik: SocketAddr,
    remote: SocketAddr,
    tokens: std::path::PathBuf,
    state_dir: std::path::PathBuf,
}

impl Node {
    async fn new() -> Node {
        Node {
            cp: ControlPlane::start().await,
            traefik: site("local0").await,
            remote: site("remote").await,
            tokens: token_file(&format!("pangolin:{TOKEN}\n")),
            state_dir: scratch_dir("pangolin-state"),
        }
    }

    fn state(&self) -> std::path::PathBuf {
        self.state_dir.join("local-names.json")
    }

    fn config(&self) -> String {
        node_config(&self.cp, self.traefik, &self.tokens, &self.state())
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.state_dir);
        if let Some(dir) = self.tokens.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

// ------------------------------------------------------------------- tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pushed_name_goes_local_and_when_it_moves_its_connection_closes_as_moved() {
    let node = Node::new().await;
    for name in ["a.example.com", "b.example.com", "c.example.org"] {
        node.cp.set(name, Reply::endpoints(&[node.remote]));
    }
    let relay = Relay::start(&node.config()).await;

    // Before any push, the default route looks every name up.
    let mut first = open(&relay, "a.example.com").await;
    assert_eq!(first.at, "remote");
    assert_eq!(open(&relay, "c.example.org").await.at, "remote");
    assert_eq!(node.cp.requests("a.example.com"), 1);
    assert!(first.echoes().await);
    drop(first);

    // local_overrides: local with no push and no lookup.
    assert_eq!(open(&relay, "dashboard.example.net").await.at, "local0");
    assert_eq!(open(&relay, "x.internal.example.net").await.at, "local0");
    assert_eq!(node.cp.requests("dashboard.example.net"), 0);
    assert_eq!(node.cp.requests("x.internal.example.net"), 0);

    let answer = push(
        &relay,
        &["A.example.com.", "b.example.com", "y.internal.example.net"],
    )
    .await;
    assert_eq!(answer["status"], "Local SNIs updated successfully");
    assert_eq!(answer["local_names"], 3);
    assert_eq!(answer["added"], 3);
    // Pushed and in local_overrides: it stays local when the push drops it.
    let mut overridden = open(&relay, "y.internal.example.net").await;
    assert_eq!(overridden.at, "local0");
    assert_eq!(answer["closing"], 0);

    // Pushed names go to Traefik without a lookup.
    let mut a = open(&relay, "a.example.com").await;
    let mut b = open(&relay, "b.example.com").await;
    assert_eq!((a.at.as_str(), b.at.as_str()), ("local0", "local0"));
    assert_eq!(node.cp.requests("b.example.com"), 0);
    assert!(a.echoes().await && b.echoes().await);

    // a.example.com moves to another node.
    let answer = push(&relay, &["b.example.com"]).await;
    assert_eq!(answer["removed"], 2);
    assert_eq!(answer["closing"], 1, "{answer}");
    let a_client = a.client;
    a.closed().await;
    let line = relay.closed_line(a_client).await;
    assert_eq!(line["close"], "moved", "{line}");
    assert_eq!(line["sni"], "a.example.com");
    // The other name's connection stays open and carries bytes.
    assert!(b.echoes().await, "b.example.com must stay open");
    assert!(overridden.echoes().await, "an override name stays open");
    assert!(
        relay
            .closed_lines()
            .iter()
            .all(|l| l["client.peer"] != b.client.to_string()),
        "b.example.com has no close line"
    );

    // Its cached answer (fresh for 30 s) was dropped: the next connection
    // asks the control plane again.
    assert_eq!(open(&relay, "a.example.com").await.at, "remote");
    assert_eq!(node.cp.requests("a.example.com"), 2);
    assert_eq!(node.cp.malformed(), 0);

    let text = metrics_text(&relay).await;
    assert_eq!(
        metric(&text, "snirelay_local_name_pushes_total{outcome=\"ok\"}"),
        2.0
    );
    assert_eq!(metric(&text, "snirelay_local_names"), 1.0);
    assert_eq!(
        metric(
            &text,
            "snirelay_connections_closed_total{listener=\"tls\",protocol=\"tcp\",reason=\"moved\"}"
        ),
        1.0
    );
    assert!(b.echoes().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_serves_the_last_pushed_set_without_a_push() {
    let node = Node::new().await;
    node.cp
        .set("kept.example.com", Reply::endpoints(&[node.remote]));
    {
        let relay = Relay::start(&node.config()).await;
        assert_eq!(open(&relay, "kept.example.com").await.at, "remote");
        push(&relay, &["kept.example.com"]).await;
        assert_eq!(open(&relay, "kept.example.com").await.at, "local0");
    }
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(node.state()).unwrap()).unwrap();
    assert_eq!(
        saved["fullDomains"],
        serde_json::json!(["kept.example.com"])
    );
    let leftovers: Vec<_> = std::fs::read_dir(&node.state_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers.len(), 1, "no temporary file left: {leftovers:?}");

    // Stopped and started again on the same file: no push needed.
    let relay = Relay::start(&node.config()).await;
    let loaded = relay
        .wait_log(|l| l["message"] == "pushed local names loaded")
        .await;
    assert_eq!(loaded["local_names"], 1);
    assert_eq!(open(&relay, "kept.example.com").await.at, "local0");
    assert_eq!(node.cp.requests("kept.example.com"), 1, "no new lookup");
    let text = metrics_text(&relay).await;
    assert_eq!(metric(&text, "snirelay_local_names"), 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_needs_the_token_and_a_valid_body_and_a_refused_one_changes_nothing() {
    let node = Node::new().await;
    node.cp
        .set("a.example.com", Reply::endpoints(&[node.remote]));
    // Without `push_unauthenticated_from`, every push needs the token.
    let config = node
        .config()
        .replace("push_unauthenticated_from = [\"127.0.0.1/32\"]\n", "");
    assert_ne!(config, node.config());
    let relay = Relay::start(&config).await;
    let admin = relay.admin_addr().await;
    push_with_token(&relay, &["a.example.com"]).await;
    let saved = std::fs::read(node.state()).unwrap();

    let body = r#"{"fullDomains": []}"#;
    for token in [None, Some("wrong")] {
        let answer = http_tcp(admin, &push_request(body, token)).await;
        assert_eq!(answer.status, 401, "{token:?}: {}", answer.body);
        assert!(answer.head.contains("www-authenticate: Bearer"));
    }
    for bad in [
        "{",
        "{}",
        r#"{"fullDomains": "a.example.com"}"#,
        r#"{"fullDomains": [1]}"#,
        r#"{"fullDomains": [], "extra": true}"#,
        "[]",
    ] {
        let answer = http_tcp(admin, &push_request(bad, Some(TOKEN))).await;
        assert_eq!(answer.status, 400, "{bad}: {}", answer.body);
        assert!(
            answer.json()["error"]
                .as_str()
                .unwrap()
                .contains("fullDomains")
        );
    }
    // Past the 1 MiB bound: refused on the declared length (413).
    let head = format!(
        "POST /update-local-snis HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\
         Authorization: Bearer {TOKEN}\r\nContent-Length: {}\r\n\r\n",
        1024 * 1024 + 1
    );
    let answer = http_tcp(admin, &head).await;
    assert_eq!(answer.status, 413, "{}", answer.body);
    let answer = http_tcp(
        admin,
        &http_request_text("GET", "/update-local-snis", &[], ""),
    )
    .await;
    assert_eq!(answer.status, 401, "authorization comes before the method");
    let answer = http_tcp(
        admin,
        &http_request_text(
            "GET",
            "/update-local-snis",
            &[&format!("Authorization: Bearer {TOKEN}")],
            "",
        ),
    )
    .await;
    assert_eq!(answer.status, 405);

    // Nothing changed: the name is still local, the file as it was.
    assert_eq!(open(&relay, "a.example.com").await.at, "local0");
    assert_eq!(node.cp.requests("a.example.com"), 0);
    assert_eq!(std::fs::read(node.state()).unwrap(), saved);
    let text = metrics_text(&relay).await;
    assert_eq!(metric(&text, "snirelay_local_names"), 1.0);
    assert_eq!(
        metric(&text, "snirelay_local_name_pushes_total{outcome=\"ok\"}"),
        1.0
    );
    assert_eq!(
        metric(
            &text,
            "snirelay_local_name_pushes_total{outcome=\"bad_request\"}"
        ),
        6.0
    );
    assert_eq!(
        metric(
            &text,
            "snirelay_local_name_pushes_total{outcome=\"too_large\"}"
        ),
        1.0
    );

    // Thousands of names fit (the body limit is raised for this endpoint);
    // a name that is not a host name is ignored and listed.
    let mut names: Vec<String> = (0..20_000)
        .map(|i| format!("site-{i}.tenant.example.com"))
        .collect();
    names.push("not a name".to_owned());
    let body = serde_json::json!({ "fullDomains": names }).to_string();
    assert!(body.len() > 512 * 1024, "{} bytes", body.len());
    let answer = http_tcp(admin, &push_request(&body, Some(TOKEN))).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let answer = answer.json();
    assert_eq!(answer["local_names"], 20_000);
    assert_eq!(answer["ignored"], serde_json::json!(["not a name"]));
    assert_eq!(
        open(&relay, "site-19999.tenant.example.com").await.at,
        "local0"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1_hop_reaches_a_node_that_reads_proxy_v1_with_the_original_client() {
    // Node B, configured like Gerbil: PROXY v1 accepted from its trusted
    // peer (sniffed: a peer may also send v2, or nothing).
    let origin = site("origin").await;
    let b = Relay::start(&format!(
        r#"
[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]

[listener.proxy_protocol]
trusted = ["127.0.0.1/32"]
mode = "optional"

[[route]]
sni = ["*"]
backend = "origin"

[backend.origin]
addresses = ["{origin}"]
connect_timeout = "2s"
"#
    ))
    .await;
    // Node A: a cluster backend whose hops are PROXY v1.
    let cp = ControlPlane::start().await;
    cp.set("site.example.com", Reply::endpoints(&[b.addr()]));
    let a = Relay::start(&format!(
        r#"
[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]

[[route]]
sni = ["*"]
backend = "pangolin"

[backend.pangolin]
connect_timeout = "2s"

[backend.pangolin.cluster]
lookup_url = "{url}"
allowed_targets = ["127.0.0.0/8"]
hop_proxy_protocol = "v1"
"#,
        url = cp.url()
    ))
    .await;

    // The client comes from 127.0.0.2: B's only peer is A at 127.0.0.1.
    let mut client = connect_from([127, 0, 0, 2].into(), a.addr()).await.unwrap();
    let client_addr = client.local_addr().unwrap();
    client
        .write_all(&hello_for("site.example.com"))
        .await
        .unwrap();
    let mut greeting = [0u8; 6];
    tokio::time::timeout(WAIT, client.read_exact(&mut greeting))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&greeting, b"origin");
    drop(client);

    let a_line = a.closed_line(client_addr).await;
    assert_eq!(a_line["backend.addr"], b.addr().to_string());
    let b_line = b
        .wait_log(|l| l["client.claimed"] == client_addr.to_string())
        .await;
    assert_eq!(b_line["backend"], "origin", "{b_line}");
    assert_eq!(b_line["sni"], "site.example.com");
    assert_ne!(b_line["client.peer"], client_addr.to_string());

    // On the wire, the hop is a PROXY v1 line naming the client.
    let (recorder, mut seen) = recording_backend().await;
    cp.set("raw.example.com", Reply::endpoints(&[recorder]));
    let mut client = connect_from([127, 0, 0, 2].into(), a.addr()).await.unwrap();
    let client_addr = client.local_addr().unwrap();
    client
        .write_all(&hello_for("raw.example.com"))
        .await
        .unwrap();
    client.shutdown().await.unwrap();
    let recorded = tokio::time::timeout(WAIT, seen.recv())
        .await
        .unwrap()
        .unwrap();
    let expected = format!(
        "PROXY TCP4 127.0.0.2 127.0.0.1 {} {}\r\n",
        client_addr.port(),
        a.addr().port()
    );
    assert!(
        recorded.all.starts_with(expected.as_bytes()),
        "{:?}",
        String::from_utf8_lossy(&recorded.all[..60.min(recorded.all.len())])
    );
}
