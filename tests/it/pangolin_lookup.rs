//! Cluster lookups in Pangolin's protocol (`protocol = "pangolin"`) through
//! the real relay binary, against a control-plane double written from
//! Pangolin's published route (tests/it/common/pangolin.rs).
//!
//! Covered: the request (route under the `lookup_url` base, `hostname` and
//! `publicKey`, the configured headers, one read from a file), endpoints
//! without a port relayed to `default_port`, 404 negative-cached, 500
//! served stale, a missing public key refused by the configuration, the
//! header secret kept out of `/config`, `https://` lookups with a test CA
//! and a client certificate the double requires, a wrong CA failing with
//! the TLS error logged, and `node_choice = "gerbil_fnv"` picking the node
//! Gerbil picks.
//!
//! As Pangolin does, the double answers its exit nodes' host names (the
//! relay resolves them at the double's DNS server, its `resolver`); one
//! test keeps an IP-literal answer. Host names: an answer mixing
//! addresses, `ip:port`, names and `name:port`; a name that does not
//! resolve skipped; a name with a forbidden address refused for that
//! address only; a name naming this node sent to `local_backend` (through
//! /etc/hosts, the system resolver); Gerbil's order with names; redirects
//! followed on the same origin (at most 5) and refused to another.

use crate::common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use common::pangolin::{Pangolin, Reply, validate};
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const KEY: &str = "kLw0Hq3mB8yX2pRzT5vN9cD1fG4hJ6sA7uE0iO3wQ2Y=";

/// A relay routing `*.example.com` to a pangolin cluster backend asking
/// `url`; `extra` goes into `[backend.cluster.cluster]`, `after` after it.
fn config_at(url: &str, extra: &str, after: &str) -> String {
    let extra = format!("protocol = \"pangolin\"\n{extra}");
    common::control_plane::cluster_relay_config(url, "", &extra, after)
}

/// [`config_at`] asking `cp`, whose DNS server resolves the exit nodes'
/// names (`resolver`).
fn config(cp: &Pangolin, extra: &str, after: &str) -> String {
    let extra = format!("resolver = \"{}\"\n{extra}", cp.resolver());
    config_at(&cp.base_url(), &extra, after)
}

fn loopback(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
}

/// A node answering `tag` on `127.0.0.{last}` (any port). The relay
/// listens on 127.0.0.1, so a node elsewhere is another node.
async fn node_at(last: u8, tag: &'static str) -> SocketAddr {
    nodes_on_one_port(&[(last, tag)]).await[0]
}

/// Nodes answering their tags on `127.0.0.{last}:P`, one port P for all
/// (an answer's default port), all bound before any is used: the first on
/// port 0, the others on its port. A port is reserved per address, so
/// another test's listener may hold P on one of the others (a port found
/// free and released, or one bound on another address, was taken so
/// twice): then every socket is let go and another port tried (bounded).
async fn nodes_on_one_port(nodes: &[(u8, &'static str)]) -> Vec<SocketAddr> {
    for _ in 0..50 {
        let first = tokio::net::TcpListener::bind((loopback(nodes[0].0), 0))
            .await
            .unwrap();
        let port = first.local_addr().unwrap().port();
        let mut listeners = vec![first];
        for &(last, _) in &nodes[1..] {
            match tokio::net::TcpListener::bind((loopback(last), port)).await {
                Ok(listener) => listeners.push(listener),
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => break,
                Err(e) => panic!("cannot bind 127.0.0.{last}:{port}: {e}"),
            }
        }
        if listeners.len() == nodes.len() {
            return listeners
                .into_iter()
                .zip(nodes)
                .map(|(listener, &(_, tag))| tagged_backend_on(listener, tag).0)
                .collect();
        }
    }
    panic!("no port free on every address of {nodes:?} in 50 tries");
}

/// Asks for `name` four times, from four client ports: each connection
/// reaches `node`, which answers `tag`, whichever client it came from.
async fn served_by(relay: &Relay, name: &str, tag: &str, node: SocketAddr) {
    for _ in 0..4 {
        let (client, answer) = ask(relay, name).await;
        assert_eq!(answer, tag);
        assert_eq!(
            relay.closed_line(client).await["backend.addr"],
            node.to_string()
        );
    }
}

/// Sends a hello for `name` through the relay and reads until it closes:
/// the client's address and what the backend said ("" when nothing was
/// relayed).
async fn ask(relay: &Relay, name: &str) -> (SocketAddr, String) {
    let mut client = TcpStream::connect(relay.addr()).await.unwrap();
    let local = client.local_addr().unwrap();
    client.write_all(&hello_for(name)).await.unwrap();
    let mut back = Vec::new();
    let read = tokio::time::timeout(WAIT, async {
        let mut chunk = [0u8; 64];
        // The tagged backend writes its tag and waits for our close.
        let n = client.read(&mut chunk).await.unwrap_or(0);
        back.extend_from_slice(&chunk[..n]);
    });
    read.await.expect("the relay neither relayed nor closed");
    drop(client);
    (local, String::from_utf8(back).unwrap())
}

/// Asks and returns the close reason the relay logged for a connection
/// that must not have been relayed.
async fn close_reason(relay: &Relay, name: &str) -> String {
    let (client, answer) = ask(relay, name).await;
    let line = relay.closed_line(client).await;
    assert_eq!(answer, "", "nothing may be relayed: {line}");
    assert!(line["backend.addr"].is_null(), "nothing connected: {line}");
    line["close"].as_str().unwrap().to_owned()
}

fn body(logged: &common::pangolin::Logged) -> serde_json::Value {
    serde_json::from_str(&logged.body).unwrap()
}

#[test]
fn the_double_checks_requests_as_pangolins_route_does() {
    let ok = br#"{"hostname": "a.example.com", "publicKey": "k", "extra": 1}"#;
    assert_eq!(
        validate(Some("application/json"), ok).unwrap(),
        "a.example.com"
    );
    assert!(validate(Some("application/json; charset=utf-8"), ok).is_ok());
    assert!(validate(Some("text/plain"), ok).is_err(), "body not parsed");
    assert!(validate(None, ok).is_err());
    let no_key = br#"{"hostname": "a.example.com"}"#;
    assert!(validate(Some("application/json"), no_key).is_err());
    let number = br#"{"hostname": "a.example.com", "publicKey": 7}"#;
    assert!(validate(Some("application/json"), number).is_err());
    assert!(validate(Some("application/json"), b"\"text\"").is_err());
    assert!(validate(Some("application/json"), b"{").is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pangolin_answer_is_relayed_to_the_endpoint_on_default_port() {
    let cp = Pangolin::start().await;
    let node = node_at(2, "node-b").await;
    // Pangolin answers its exit nodes' names (`gerbil.base_endpoint`),
    // without a port.
    let name = cp.exit_node("node-b.pangolin.test", &[node.ip()]);
    cp.set("www.example.com", Reply::endpoints(&[name]));
    cp.set("gone.example.com", Reply::Status(404));
    cp.require_header("x-pangolin-node", "edge-1");
    cp.require_header("authorization", "Bearer s3cret-from-file");

    let dir = scratch_dir("pangolin");
    let secret = dir.join("lookup.token");
    std::fs::write(&secret, "Bearer s3cret-from-file\n").unwrap();
    let key_file = dir.join("wg.pub");
    std::fs::write(&key_file, format!("{KEY}\n")).unwrap();
    let extra = format!(
        "public_key_file = \"{}\"\ndefault_port = {}\nnegative_ttl = \"30s\"\n\
         [backend.cluster.cluster.headers]\nX-Pangolin-Node = \"edge-1\"\n\
         Authorization = {{ file = \"{}\" }}",
        key_file.display(),
        node.port(),
        secret.display()
    );
    let admin = "[admin]\nlisten = \"127.0.0.1:0\"\nexpose_config = true\n";
    let text = config(&cp, &extra, admin);
    let relay = Relay::start(&text).await;

    let (client, answer) = ask(&relay, "www.example.com").await;
    assert_eq!(answer, "node-b");
    let line = relay.closed_line(client).await;
    assert_eq!(line["backend.addr"], node.to_string());

    // The request: Pangolin's route under the base, both fields, the
    // headers (one read from its file, newline trimmed).
    let log = cp.log();
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0].status, 200);
    assert_eq!(log[0].path, "/api/v1/gerbil/get-resolved-hostname");
    assert_eq!(
        body(&log[0]),
        serde_json::json!({"hostname": "www.example.com", "publicKey": KEY})
    );
    assert_eq!(log[0].headers["authorization"], "Bearer s3cret-from-file");
    assert_eq!(log[0].headers["x-pangolin-node"], "edge-1");
    assert_eq!(cp.malformed(), 0);

    // 404: negative, cached for negative_ttl.
    assert_eq!(close_reason(&relay, "gone.example.com").await, "no_address");
    assert_eq!(close_reason(&relay, "gone.example.com").await, "no_address");
    assert_eq!(cp.requests("gone.example.com"), 1);

    // /config shows where the secret is, never the secret.
    let (status, shown) = http_get(relay.admin_addr().await, "/config").await;
    assert_eq!(status, 200);
    assert!(!shown.contains("s3cret"), "{shown}");
    let shown: serde_json::Value = serde_json::from_str(&shown).unwrap();
    let cluster = &shown["backend"]["cluster"]["cluster"];
    assert_eq!(cluster["protocol"], "pangolin");
    assert_eq!(
        cluster["headers"]["Authorization"]["file"],
        secret.display().to_string()
    );
    assert_eq!(cluster["headers"]["X-Pangolin-Node"], "edge-1");
    assert_eq!(cluster["public_key_file"], key_file.display().to_string());
    assert_eq!(cluster["default_port"], node.port());
    assert_eq!(cluster["resolver"], cp.resolver().to_string());
    // Nor does the log.
    let logged = serde_json::to_string(&relay.log_lines()).unwrap();
    assert!(!logged.contains("s3cret"));

    // A reload reads the file again: the next lookup carries the new value.
    std::fs::write(&secret, "Bearer rotated\n").unwrap();
    cp.require_header("authorization", "Bearer rotated");
    assert_eq!(relay.reload(&text, 1).await["message"], "reload applied");
    assert_eq!(ask(&relay, "www.example.com").await.1, "node-b");
    let log = cp.log();
    let last = log.last().unwrap();
    assert_eq!(last.status, 200);
    assert_eq!(last.headers["authorization"], "Bearer rotated");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_answer_is_this_node_and_a_500_is_answered_from_the_stale_entry() {
    let cp = Pangolin::start().await;
    let (node, _) = tagged_backend("node-b").await;
    let (local, _) = tagged_backend("local-traefik").await;
    // The IP-literal case (a `gerbil.base_endpoint` that is an address):
    // taken as it is, even on this node's own address (a node may serve on
    // another port of it).
    cp.set("www.example.com", Reply::endpoints(&["127.0.0.1"]));
    // A name no exit node serves: Pangolin answers 200 with no endpoints,
    // which Gerbil (and snirelay) take as this node.
    let extra = format!(
        "public_key = \"{KEY}\"\ndefault_port = {}\nlocal_backend = \"local\"\n\
         positive_ttl = \"300ms\"\nnegative_ttl = \"30s\"",
        node.port()
    );
    let after = format!("[backend.local]\naddresses = [\"{local}\"]\nconnect_timeout = \"2s\"");
    let relay = Relay::start(&config(&cp, &extra, &after)).await;

    assert_eq!(ask(&relay, "www.example.com").await.1, "node-b");
    assert_eq!(ask(&relay, "mine.example.com").await.1, "local-traefik");

    // HTTP 500 once the answer expired: the old node keeps serving.
    cp.fail(Some(Reply::Status(500)));
    tokio::time::sleep(Duration::from_millis(400)).await; // the TTL, not readiness
    let (client, answer) = ask(&relay, "www.example.com").await;
    assert_eq!(answer, "node-b");
    assert_eq!(relay.closed_line(client).await["close"], "done");
    assert_eq!(cp.requests("www.example.com"), 2);
    let warn = relay
        .wait_log(|l| {
            l["message"] == "cluster lookup failed; serving the last answer"
                && l["sni"] == "www.example.com"
        })
        .await;
    assert!(
        warn["error"].as_str().unwrap().contains("HTTP 500"),
        "{warn}"
    );
    // A 500 with nothing to serve: no_address.
    assert_eq!(close_reason(&relay, "new.example.com").await, "no_address");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pangolin_cluster_without_a_public_key_is_a_configuration_error() {
    let dir = scratch_dir("pangolin-check");
    let path = dir.join("snirelay.toml");
    std::fs::write(&path, config_at("http://127.0.0.1:9/api/v1", "", "")).unwrap();
    let (code, stdout, stderr) = run_snirelay(vec![
        "check".into(),
        "--config".into(),
        path.display().to_string(),
    ])
    .await;
    assert_ne!(code, Some(0), "{stdout}");
    assert!(
        stderr.contains("backend.cluster.cluster.public_key")
            && stderr.contains("needs exactly one of `public_key` and `public_key_file`"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An https relay config: the double's CA (or `ca`) and the client
/// certificate from `pki`, in `dir`.
fn https_config(cp: &Pangolin, node: SocketAddr, ca: &Path, pem: &PemFiles) -> String {
    let extra = format!(
        "public_key = \"{KEY}\"\ndefault_port = {}\nca_file = \"{}\"\n\
         client_cert_file = \"{}\"\nclient_key_file = \"{}\"",
        node.port(),
        ca.display(),
        pem.client_cert.display(),
        pem.client_key.display()
    );
    config(cp, &extra, "")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_lookups_use_the_configured_ca_and_client_certificate() {
    // The double's server certificate names 127.0.0.1 (the URL's host).
    let pki = Pki::new(&["127.0.0.1"]);
    let cp = Pangolin::start_tls(&pki).await;
    let node = node_at(2, "node-b").await;
    let name = cp.exit_node("node-b.pangolin.test", &[node.ip()]);
    cp.set("www.example.com", Reply::endpoints(&[name]));
    let dir = scratch_dir("pangolin-tls");
    let pem = pki.write_pem(&dir);
    assert!(cp.base_url().starts_with("https://"));
    let relay = Relay::start(&https_config(&cp, node, &pem.ca, &pem)).await;

    assert_eq!(ask(&relay, "www.example.com").await.1, "node-b");
    assert_eq!(cp.requests("www.example.com"), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_lookup_with_the_wrong_ca_fails_and_logs_the_tls_error() {
    let pki = Pki::new(&["127.0.0.1"]);
    let other = Pki::new(&["127.0.0.1"]);
    let cp = Pangolin::start_tls(&pki).await;
    let listener = tokio::net::TcpListener::bind((loopback(2), 0))
        .await
        .unwrap();
    let (node, accepted) = tagged_backend_on(listener, "node-b");
    let name = cp.exit_node("node-b.pangolin.test", &[node.ip()]);
    cp.set("www.example.com", Reply::endpoints(&[name]));
    let dir = scratch_dir("pangolin-badca");
    let pem = pki.write_pem(&dir);
    let wrong = other.write_pem(&scratch_dir("pangolin-otherca"));
    let relay = Relay::start(&https_config(&cp, node, &wrong.ca, &pem)).await;

    assert_eq!(close_reason(&relay, "www.example.com").await, "no_address");
    let warn = relay
        .wait_log(|l| {
            l["message"]
                == "cluster lookup failed and there is no earlier answer; closing as no_address"
        })
        .await;
    let error = warn["error"].as_str().unwrap();
    assert!(
        error.contains("TLS handshake with the lookup service failed")
            // Both test CAs have one name: the other CA's signature fails.
            && error.contains("invalid peer certificate: BadSignature"),
        "{warn}"
    );
    assert_eq!(cp.requests("www.example.com"), 0, "no request got through");
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A relay asking `cp` with `extra` in the cluster section, the nodes'
/// names resolved at `cp`'s DNS server.
async fn relay_for(cp: &Pangolin, extra: &str, after: &str) -> Relay {
    let extra = format!("public_key = \"{KEY}\"\n{extra}");
    Relay::start(&config(cp, &extra, after)).await
}

/// The first log line with `message` whose `field` is `value`.
async fn logged(relay: &Relay, message: &str, field: &str, value: &str) -> serde_json::Value {
    relay
        .wait_log(|l| l["message"] == message && l[field] == value)
        .await
}

const UNRESOLVED: &str =
    "cluster answer names a host that does not resolve; skipped, the other endpoints are used";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_mixing_addresses_and_names_routes_each_and_orders_as_gerbil() {
    // One node per kind of endpoint: a bare address (default port), an
    // `ip:port`, a name (default port) and a `name:port`.
    let [lit, named] = nodes_on_one_port(&[(2, "node-lit"), (4, "node-name")]).await[..] else {
        unreachable!()
    };
    let port = lit.port();
    let lit_port = node_at(3, "node-lit-port").await;
    let named_port = node_at(5, "node-name-port").await;
    let cp = Pangolin::start().await;
    let name = cp.exit_node("node-4.pangolin.test", &[named.ip()]);
    let name_port = format!(
        "{}:{}",
        cp.exit_node("node-5.pangolin.test", &[named_port.ip()]),
        named_port.port()
    );
    let endpoints = [
        lit.ip().to_string(),
        lit_port.to_string(),
        name.clone(),
        name_port.clone(),
        // Not in the DNS: NXDOMAIN.
        "gone.pangolin.test".to_owned(),
    ];
    cp.set("lit.example.com", Reply::endpoints(&endpoints[0..1]));
    cp.set("litport.example.com", Reply::endpoints(&endpoints[1..2]));
    cp.set("name.example.com", Reply::endpoints(&endpoints[2..3]));
    cp.set("nameport.example.com", Reply::endpoints(&endpoints[3..4]));
    cp.set("mixed.example.com", Reply::endpoints(&endpoints));
    let extra = format!("default_port = {port}\nnode_choice = \"gerbil_fnv\"");
    let relay = relay_for(&cp, &extra, "").await;

    let nodes = [lit, lit_port, named, named_port];
    let tags = ["node-lit", "node-lit-port", "node-name", "node-name-port"];
    for (sni, i) in [
        ("lit.example.com", 0),
        ("litport.example.com", 1),
        ("name.example.com", 2),
        ("nameport.example.com", 3),
    ] {
        let (client, answer) = ask(&relay, sni).await;
        assert_eq!(answer, tags[i], "{sni}");
        let line = relay.closed_line(client).await;
        assert_eq!(line["backend.addr"], nodes[i].to_string(), "{line}");
    }

    // The mixed answer: Gerbil picks endpoint FNV-1a("ip:port") % 5 of the
    // answer as it came (a name is one endpoint, however many addresses it
    // has, resolved or not). Gerbil would fail on the unresolvable fifth;
    // snirelay goes on to the next endpoint, wrapping round to the first.
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..12 {
        let (client, answer) = ask(&relay, "mixed.example.com").await;
        let picked = gerbil_fnv_index(&client.to_string(), 5);
        let expected = if picked == 4 { 0 } else { picked };
        assert_eq!(answer, tags[expected], "client {client}, endpoint {picked}");
        let line = relay.closed_line(client).await;
        assert_eq!(line["backend.addr"], nodes[expected].to_string(), "{line}");
        seen.insert(picked);
    }
    assert_eq!(cp.requests("mixed.example.com"), 1, "one lookup, cached");
    let warn = logged(&relay, UNRESOLVED, "sni", "mixed.example.com").await;
    assert_eq!(warn["endpoint"], "gone.pangolin.test", "{warn}");
    assert!(
        warn["error"]
            .as_str()
            .unwrap()
            .contains("negative DNS answer")
            || warn["error"].as_str().unwrap().contains("no address"),
        "{warn}"
    );
    assert!(seen.len() >= 2, "12 clients all hashed to {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_that_does_not_resolve_is_skipped_and_the_others_are_used() {
    // One node; its port is the answer's default port.
    let node = node_at(2, "node-2").await;
    let port = node.port();
    let cp = Pangolin::start().await;
    let name = cp.exit_node("node-2.pangolin.test", &[node.ip()]);
    cp.set(
        "www.example.com",
        Reply::endpoints(&["gone.pangolin.test".to_owned(), name]),
    );
    cp.set(
        "dead.example.com",
        Reply::endpoints(&["gone.pangolin.test", "gone-too.pangolin.test"]),
    );
    let relay = relay_for(&cp, &format!("default_port = {port}"), "").await;

    served_by(&relay, "www.example.com", "node-2", node).await;
    let warn = logged(&relay, UNRESOLVED, "sni", "www.example.com").await;
    assert_eq!(warn["endpoint"], "gone.pangolin.test", "{warn}");

    // No endpoint resolves: a failed lookup (nothing stale to serve).
    assert_eq!(close_reason(&relay, "dead.example.com").await, "no_address");
    let warn = logged(
        &relay,
        "cluster lookup failed and there is no earlier answer; closing as no_address",
        "sni",
        "dead.example.com",
    )
    .await;
    assert_eq!(
        warn["error"],
        "no endpoint of the answer resolved to an address (gone.pangolin.test, gone-too.pangolin.test)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_resolving_to_a_forbidden_address_is_refused_for_that_address_only() {
    // Something listens on the forbidden address too, on the same port: a
    // relay that ignored allowed_targets would reach it.
    let [node, forbidden] = nodes_on_one_port(&[(2, "node-2"), (9, "forbidden")]).await[..] else {
        unreachable!()
    };
    let port = node.port();
    let cp = Pangolin::start().await;
    let split = cp.exit_node("split.pangolin.test", &[forbidden.ip(), node.ip()]);
    let far = cp.exit_node("far.pangolin.test", &[forbidden.ip()]);
    cp.set("www.example.com", Reply::endpoints(&[split]));
    cp.set("far.example.com", Reply::endpoints(&[far]));
    let text = config(
        &cp,
        &format!("public_key = \"{KEY}\"\ndefault_port = {port}"),
        "",
    )
    .replace(
        "allowed_targets = [\"127.0.0.0/8\"]",
        "allowed_targets = [\"127.0.0.2/32\", \"127.0.0.3/32\"]",
    );
    let relay = Relay::start(&text).await;

    served_by(&relay, "www.example.com", "node-2", node).await;
    let refused =
        "cluster answer names a host that resolves outside allowed_targets; this address dropped";
    let warn = logged(&relay, refused, "sni", "www.example.com").await;
    assert_eq!(warn["endpoint"], "split.pangolin.test", "{warn}");
    assert_eq!(warn["addr"], forbidden.to_string(), "{warn}");
    let dropped = relay
        .log_lines()
        .into_iter()
        .filter(|l| l["message"] == refused && l["sni"] == "www.example.com")
        .count();
    assert_eq!(dropped, 1, "only the forbidden address is refused");

    // A name whose every address is forbidden: the answer is refused.
    assert_eq!(
        close_reason(&relay, "far.example.com").await,
        "target_not_allowed"
    );
    let warn = logged(&relay, refused, "sni", "far.example.com").await;
    assert_eq!(warn["endpoint"], "far.pangolin.test", "{warn}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_resolving_to_this_node_goes_to_local_backend() {
    // The relay is dialled on 127.0.0.1. `localhost` is 127.0.0.1 in
    // /etc/hosts: through the system resolver (no `resolver`), a
    // `resolve` backend's way.
    let (local, _) = tagged_backend("local-traefik").await;
    // A node on this node's own address: an IP literal would reach it;
    // another node on the same port, for the resolver's part below.
    let [own, other] = nodes_on_one_port(&[(1, "own-address"), (2, "node-2")]).await[..] else {
        unreachable!()
    };
    let port = own.port();
    let cp = Pangolin::start().await;
    cp.set("hosts.example.com", Reply::endpoints(&["localhost"]));
    cp.set("literal.example.com", Reply::endpoints(&["127.0.0.1"]));
    let after = format!("[backend.local]\naddresses = [\"{local}\"]\nconnect_timeout = \"2s\"");
    let extra = format!("public_key = \"{KEY}\"\ndefault_port = {port}\nlocal_backend = \"local\"");
    let relay = Relay::start(&config_at(&cp.base_url(), &extra, &after)).await;
    let (client, answer) = ask(&relay, "hosts.example.com").await;
    assert_eq!(answer, "local-traefik");
    assert_eq!(
        relay.closed_line(client).await["backend.addr"],
        local.to_string()
    );
    let (client, answer) = ask(&relay, "literal.example.com").await;
    assert_eq!(answer, "own-address", "a literal is taken as it is");
    assert_eq!(
        relay.closed_line(client).await["backend.addr"],
        own.to_string()
    );
    drop(relay);

    // The same through a `resolver`: the node's own name, with another
    // node's, is this node.
    let mine = cp.exit_node("node-1.pangolin.test", &[loopback(1)]);
    let theirs = cp.exit_node("node-2.pangolin.test", &[other.ip()]);
    cp.set("dns.example.com", Reply::endpoints(&[theirs, mine]));
    let relay = relay_for(
        &cp,
        &format!("default_port = {port}\nlocal_backend = \"local\""),
        &after,
    )
    .await;
    let (client, answer) = ask(&relay, "dns.example.com").await;
    assert_eq!(answer, "local-traefik");
    let line = relay.closed_line(client).await;
    assert_eq!(line["backend.addr"], local.to_string(), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_follow_same_origin_redirects_up_to_five_and_refuse_others() {
    // One node; its port is the answer's default port.
    let node = node_at(2, "node-2").await;
    let port = node.port();
    let cp = Pangolin::start().await;
    let name = cp.exit_node("node-2.pangolin.test", &[node.ip()]);
    for sni in ["www.example.com", "loop.example.com", "cross.example.com"] {
        cp.set(sni, Reply::endpoints(std::slice::from_ref(&name)));
    }
    let entry = "/entry/gerbil/get-resolved-hostname";
    let route = "/api/v1/gerbil/get-resolved-hostname";
    // An absolute URL on the same origin (301), a relative reference
    // (302), an absolute path (307): followed, the POST repeated.
    cp.redirect(entry, 301, &format!("http://{}/mid/x", cp.addr));
    cp.redirect("/mid/x", 302, "y");
    cp.redirect("/mid/y", 307, route);
    let extra = format!(
        "resolver = \"{}\"\npublic_key = \"{KEY}\"\ndefault_port = {port}",
        cp.resolver()
    );
    let url = format!("http://{}/entry", cp.addr);
    let relay = Relay::start(&config_at(&url, &extra, "")).await;

    assert_eq!(ask(&relay, "www.example.com").await.1, "node-2");
    let of = |sni: &str| -> Vec<common::pangolin::Logged> {
        cp.log()
            .into_iter()
            .filter(|l| body(l)["hostname"] == sni)
            .collect()
    };
    let hops = of("www.example.com");
    let paths: Vec<&str> = hops.iter().map(|l| l.path.as_str()).collect();
    assert_eq!(paths, [entry, "/mid/x", "/mid/y", route]);
    for hop in &hops {
        assert_eq!(hop.method, "POST");
        assert_eq!(
            body(hop),
            serde_json::json!({"hostname": "www.example.com", "publicKey": KEY})
        );
    }
    assert_eq!(
        hops.iter().map(|l| l.status).collect::<Vec<_>>(),
        [301, 302, 307, 200]
    );

    // A redirect loop: the first request and five redirects, then the
    // lookup fails.
    cp.redirect(entry, 307, entry);
    assert_eq!(close_reason(&relay, "loop.example.com").await, "no_address");
    assert_eq!(of("loop.example.com").len(), 6);
    let warn = logged(
        &relay,
        "cluster lookup failed and there is no earlier answer; closing as no_address",
        "sni",
        "loop.example.com",
    )
    .await;
    assert_eq!(
        warn["error"],
        "the lookup service redirected more than 5 times"
    );

    // Another origin (another host, same port): not followed.
    let elsewhere = format!("http://127.0.0.2:{}{route}", cp.addr.port());
    cp.redirect(entry, 308, &elsewhere);
    assert_eq!(
        close_reason(&relay, "cross.example.com").await,
        "no_address"
    );
    assert_eq!(of("cross.example.com").len(), 1, "nothing sent elsewhere");
    let warn = logged(
        &relay,
        "cluster lookup failed and there is no earlier answer; closing as no_address",
        "sni",
        "cross.example.com",
    )
    .await;
    assert_eq!(
        warn["error"],
        format!(
            "the lookup service redirected (HTTP 308 Permanent Redirect) to {elsewhere:?}, \
             another origin (http://127.0.0.2:{p}) than the lookup_url's (http://127.0.0.1:{p}); \
             not followed",
            p = cp.addr.port()
        )
    );
}

/// Gerbil's `selectStickyEndpoint`, transcribed here independently of the
/// relay: FNV-1a 32 of the address text, modulo the endpoint count.
fn gerbil_fnv_index(client: &str, n: u32) -> usize {
    let mut hash: u32 = 2_166_136_261;
    for b in client.bytes() {
        hash = (hash ^ u32::from(b)).wrapping_mul(16_777_619);
    }
    (hash % n) as usize
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lookup_exactly_as_a_docker_compose_node_makes_it() {
    // As Pangolin's docker-compose installs a node: Gerbil's remoteConfig
    // is `http://pangolin:3001/api/v1/` (a service name, a trailing slash),
    // names come from the system resolver (the container's /etc/hosts and
    // DNS), no extra request headers, and the answer is the exit node's
    // `gerbil.base_endpoint`, a bare name given the default port. Here the
    // relay's /etc/hosts is a test file in its own mount namespace.
    let cp = Pangolin::start().await;
    let node = node_at(2, "node-b").await;
    cp.set("app.example.com", Reply::endpoints(&["node-b.example.net"]));
    let hosts = common::hosts::Hosts::new(&format!(
        "127.0.0.1 localhost\n127.0.0.1 pangolin\n{} node-b.example.net\n",
        node.ip()
    ));
    let url = format!("http://pangolin:{}/api/v1/", cp.addr.port());
    let extra = format!("public_key = \"{KEY}\"\ndefault_port = {}", node.port());
    let text = config_at(&url, &extra, "");
    assert!(
        !text.contains("resolver"),
        "the system resolver, as deployed"
    );
    let relay = Relay::launch(&text, |path| hosts.wrap(&Relay::command(path))).await;

    let (client, answer) = ask(&relay, "app.example.com").await;
    assert_eq!(answer, "node-b");
    let line = relay.closed_line(client).await;
    assert_eq!(line["backend.addr"], node.to_string(), "{line}");
    let log = cp.log();
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0].path, "/api/v1/gerbil/get-resolved-hostname");
    assert_eq!(
        body(&log[0]),
        serde_json::json!({"hostname": "app.example.com", "publicKey": KEY})
    );
    assert_eq!(cp.malformed(), 0);
}
