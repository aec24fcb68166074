//! Cluster lookups in Pangolin's protocol (`protocol = "pangolin"`) through
//! the real relay binary, against a control-plane double written from
//! Pangolin's published route (tests/common/pangolin.rs).
//!
//! Covered: the request (route under the `lookup_url` base, `hostname` and
//! `publicKey`, the configured headers, one read from a file), endpoints
//! without a port relayed to `default_port`, 404 negative-cached, 500
//! served stale, a missing public key refused by the configuration, the
//! header secret kept out of `/config`, `https://` lookups with a test CA
//! and a client certificate the double requires, a wrong CA failing with
//! the TLS error logged, and `node_choice = "gerbil_fnv"` picking the node
//! Gerbil picks.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use common::pangolin::{Pangolin, Reply, validate};
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const KEY: &str = "kLw0Hq3mB8yX2pRzT5vN9cD1fG4hJ6sA7uE0iO3wQ2Y=";

/// A relay routing `*.example.com` to a pangolin cluster backend asking
/// `url`; `extra` goes into `[backend.cluster.cluster]`, `after` after it.
fn config(url: &str, extra: &str, after: &str) -> String {
    let extra = format!("protocol = \"pangolin\"\n{extra}");
    common::control_plane::cluster_relay_config(url, "", &extra, after)
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
    let (node, _) = tagged_backend("node-b").await;
    // Pangolin answers host addresses without a port.
    cp.set("www.example.com", Reply::endpoints(&["127.0.0.1"]));
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
    let text = config(&cp.base_url(), &extra, admin);
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
    cp.set("www.example.com", Reply::endpoints(&["127.0.0.1"]));
    // A name no exit node serves: Pangolin answers 200 with no endpoints,
    // which Gerbil (and snirelay) take as this node.
    let extra = format!(
        "public_key = \"{KEY}\"\ndefault_port = {}\nlocal_backend = \"local\"\n\
         positive_ttl = \"300ms\"\nnegative_ttl = \"30s\"",
        node.port()
    );
    let after = format!("[backend.local]\naddresses = [\"{local}\"]\nconnect_timeout = \"2s\"");
    let relay = Relay::start(&config(&cp.base_url(), &extra, &after)).await;

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
    std::fs::write(&path, config("http://127.0.0.1:9/api/v1", "", "")).unwrap();
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
    config(&cp.base_url(), &extra, "")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_lookups_use_the_configured_ca_and_client_certificate() {
    // The double's server certificate names 127.0.0.1 (the URL's host).
    let pki = Pki::new(&["127.0.0.1"]);
    let cp = Pangolin::start_tls(&pki).await;
    let (node, _) = tagged_backend("node-b").await;
    cp.set("www.example.com", Reply::endpoints(&["127.0.0.1"]));
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
    let (node, accepted) = tagged_backend("node-b").await;
    cp.set("www.example.com", Reply::endpoints(&["127.0.0.1"]));
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gerbil_fnv_sends_a_client_to_the_node_gerbil_would() {
    // Three nodes on 127.0.0.1-3, one port: Pangolin answers bare hosts.
    let mut nodes = Vec::new();
    let port = free_port();
    for (i, tag) in ["node-1", "node-2", "node-3"].into_iter().enumerate() {
        let ip = std::net::Ipv4Addr::new(127, 0, 0, 1 + i as u8);
        let listener = tokio::net::TcpListener::bind((ip, port)).await.unwrap();
        nodes.push(tagged_backend_on(listener, tag).0.to_string());
    }
    let cp = Pangolin::start().await;
    cp.set(
        "www.example.com",
        Reply::endpoints(&["127.0.0.1", "127.0.0.2", "127.0.0.3"]),
    );
    let extra =
        format!("public_key = \"{KEY}\"\ndefault_port = {port}\nnode_choice = \"gerbil_fnv\"");
    let relay = Relay::start(&config(&cp.base_url(), &extra, "")).await;

    // Each connection goes where Gerbil's FNV-1a of "ip:port" points.
    for _ in 0..6 {
        let (client, answer) = ask(&relay, "www.example.com").await;
        let index = gerbil_fnv_index(&client.to_string(), 3);
        assert_eq!(answer, format!("node-{}", index + 1), "client {client}");
        let line = relay.closed_line(client).await;
        assert_eq!(line["backend.addr"], nodes[index], "{line}");
    }
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
