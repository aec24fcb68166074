//! Route rules through the real relay binary on loopback: the default route
//! (`sni = ["*"]`), routes on ALPN, `min_tls_version` and the ECH policy.
//! Every exchange asserts the close reason in the relay's log line and what
//! each recording backend received: the whole hello, or nothing at all.

use crate::common;

use std::collections::BTreeMap;
use std::net::SocketAddr;

use common::*;
use serde_json::Value;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::mpsc::error::TryRecvError;

/// Recording backends by name, and the `[backend.NAME]` tables naming them.
struct Recorders {
    seen: BTreeMap<&'static str, UnboundedReceiver<Recorded>>,
    tables: String,
}

impl Recorders {
    async fn new(names: &[&'static str]) -> Recorders {
        let mut seen = BTreeMap::new();
        let mut tables = String::new();
        for name in names {
            let (addr, rx) = recording_backend().await;
            tables.push_str(&format!("[backend.{name}]\naddresses = [\"{addr}\"]\n"));
            seen.insert(*name, rx);
        }
        Recorders { seen, tables }
    }

    /// Asserts that `backend` (if any) received exactly `hello` on one
    /// connection, and no other backend received a connection.
    fn assert_only(&mut self, backend: Option<&str>, hello: &[u8]) {
        for (name, rx) in &mut self.seen {
            match rx.try_recv() {
                Ok(got) if Some(*name) == backend => {
                    assert_eq!(got.all, hello, "backend {name} got other bytes")
                }
                Ok(got) => panic!("backend {name} got {} bytes", got.all.len()),
                Err(TryRecvError::Empty) if Some(*name) == backend => {
                    panic!("backend {name} got nothing")
                }
                Err(_) => {}
            }
        }
    }
}

/// Sends `hello` through `addr`, half-closes, and returns what came back
/// and the connection's log line.
async fn exchange(relay: &Relay, addr: SocketAddr, hello: &[u8]) -> (Vec<u8>, Value) {
    let (local, back) = send_and_finish(addr, hello).await;
    (back, relay.closed_line(local).await)
}

/// A fatal alert record as the relay sends it.
fn alert(description: u8) -> Vec<u8> {
    vec![0x15, 0x03, 0x03, 0x00, 0x02, 0x02, description]
}

/// A captured hello with its SNI bytes replaced by `name` (same length).
fn renamed(file: &str, from: &str, to: &str) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let mut bytes = capture(file);
    let at = bytes
        .windows(from.len())
        .position(|w| w == from.as_bytes())
        .unwrap();
    bytes[at..at + to.len()].copy_from_slice(to.as_bytes());
    bytes
}

// ------------------------------------------------------------ default route

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_route_takes_the_names_no_other_route_matches() {
    let mut backends = Recorders::new(&["exact", "wild", "fallback"]).await;
    let config = format!(
        r#"
[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]

[[route]]
sni = ["a.example.com"]
backend = "exact"

[[route]]
sni = ["*.example.com"]
backend = "wild"

[[route]]
name = "default"
sni = ["*"]
backend = "fallback"

{}"#,
        backends.tables
    );
    let relay = Relay::start(&config).await;

    for (name, route, backend) in [
        ("a.example.com", "a.example.com", "exact"),
        ("b.a.example.com", "*.example.com", "wild"),
        ("other.test", "default", "fallback"),
        ("example.com", "default", "fallback"),
    ] {
        let hello = client_hello(name, &[]);
        let (back, line) = exchange(&relay, relay.addr(), &hello).await;
        assert_eq!(back, b"", "{name}");
        assert_eq!(line["close"], "done", "{name}");
        assert_eq!(line["sni"], name);
        assert_eq!(line["route"], route, "{name}");
        assert_eq!(line["backend"], backend, "{name}");
        assert_eq!(line["bytes.up"], hello.len() as u64);
        backends.assert_only(Some(backend), &hello);
    }

    // A name that is no host name is refused, default route or not.
    let garbage = renamed("openssl_sni.bin", "www.example.com", "www.exa!ple.com");
    let (back, line) = exchange(&relay, relay.addr(), &garbage).await;
    assert_eq!(back, alert(112));
    assert_eq!(
        (&line["close"], &line["sni"]),
        (&"unmatched".into(), &"www.exa!ple.com".into())
    );
    backends.assert_only(None, &[]);

    // A hello without SNI follows `no_sni` (reject), not the default route.
    let (back, line) = exchange(&relay, relay.addr(), &capture("openssl_no_sni.bin")).await;
    assert_eq!(back, alert(112));
    assert_eq!(line["close"], "no_sni");
    assert_eq!(line["route"], Value::Null);
    backends.assert_only(None, &[]);

    // `check` says that unlisted names are relayed.
    let (code, stdout, _) = run_snirelay(vec![
        "check".into(),
        "--config".into(),
        relay.config_path.to_string_lossy().into_owned(),
    ])
    .await;
    assert_eq!(code, Some(0));
    assert_eq!(
        stdout,
        "ok\nlistener tls: default route default -> backend fallback \
         (names matching no other route are relayed)\n"
    );
}

// ---------------------------------------------------------------- ALPN

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alpn_route_takes_the_acme_challenge_and_leaves_the_rest() {
    let mut backends = Recorders::new(&["web", "certs"]).await;
    let config = format!(
        r#"
[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]

[[route]]
name = "site"
sni = ["example.com", "*.example.com"]
backend = "web"

[[route]]
name = "acme"
sni = ["example.com", "*.example.com"]
alpn = ["acme-tls/1"]
backend = "certs"

[[route]]
name = "acme_only"
sni = ["*.certs.example.com"]
alpn = ["acme-tls/1"]
backend = "certs"

{}"#,
        backends.tables
    );
    let relay = Relay::start(&config).await;

    for (name, alpn, route, backend) in [
        ("example.com", &["acme-tls/1"][..], "acme", "certs"),
        ("www.example.com", &["acme-tls/1"][..], "acme", "certs"),
        ("example.com", &["h2", "http/1.1"][..], "site", "web"),
        ("www.example.com", &[][..], "site", "web"),
        // Only an alpn route for the pattern: other traffic falls through
        // to the next matching pattern.
        (
            "a.certs.example.com",
            &["acme-tls/1"][..],
            "acme_only",
            "certs",
        ),
        ("a.certs.example.com", &["h2"][..], "site", "web"),
    ] {
        let hello = client_hello(name, alpn);
        let (back, line) = exchange(&relay, relay.addr(), &hello).await;
        assert_eq!(back, b"", "{name} {alpn:?}");
        assert_eq!(line["close"], "done", "{name} {alpn:?}");
        assert_eq!(line["route"], route, "{name} {alpn:?}");
        assert_eq!(line["backend"], backend, "{name} {alpn:?}");
        backends.assert_only(Some(backend), &hello);
    }
}

// ------------------------------------------------------- minimum TLS version

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_tls_version_refuses_older_hellos_with_protocol_version() {
    let mut backends = Recorders::new(&["web"]).await;
    let config = format!(
        r#"
[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]
min_tls_version = "1.3"

[[route]]
sni = ["example.com"]
backend = "web"

{}"#,
        backends.tables
    );
    let relay = Relay::start(&config).await;

    // rustls offers 1.3 and 1.2 (supported_versions): relayed.
    let modern = client_hello("example.com", &[]);
    let (_, line) = exchange(&relay, relay.addr(), &modern).await;
    assert_eq!(line["close"], "done");
    backends.assert_only(Some("web"), &modern);

    // A client that offers 1.2 at most gets the alert and nothing moves.
    let tls12 = || {
        rustls::ClientConfig::builder_with_protocol_versions(&[&rustls::version::TLS12])
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth()
    };
    let old = hello_bytes(tls12(), "example.com");
    let (back, line) = exchange(&relay, relay.addr(), &old).await;
    assert_eq!(back, alert(70));
    assert_eq!(line["close"], "tls_version");
    assert_eq!(line["sni"], "example.com");
    assert_eq!(line["route"], Value::Null);
    backends.assert_only(None, &[]);

    // A real TLS 1.2 client reads it as the protocol_version alert.
    let tcp = tokio::net::TcpStream::connect(relay.addr()).await.unwrap();
    let local = tcp.local_addr().unwrap();
    let error = tls_connect(tls12(), "example.com", tcp).await.unwrap_err();
    assert!(
        error.to_string().contains("ProtocolVersion"),
        "client error: {error}"
    );
    assert_eq!(relay.closed_line(local).await["close"], "tls_version");
    backends.assert_only(None, &[]);
}

// ---------------------------------------------------------------------- ECH

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ech_policy_tells_real_ech_from_grease_and_rejects_or_diverts_it() {
    let mut backends = Recorders::new(&["web", "frontend"]).await;
    let config = format!(
        r#"
[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]
ech_config_ids = [7]

[[listener]]
name = "open"
listen = ["127.0.0.1:0"]
ech = "reject"

[[route]]
listener = "tls"
name = "private"
sni = ["private.example.com", "chrome.example.com"]
ech = "reject"
backend = "web"

[[route]]
listener = "tls"
name = "split"
sni = ["ech.example.com"]
ech = "frontend"
backend = "web"

[[route]]
listener = "open"
sni = ["chrome.example.com", "plain.example.com"]
backend = "web"

{}"#,
        backends.tables
    );
    let relay = Relay::start(&config).await;
    let tls = relay.addr_of("tls");

    // Real ECH (config id 7) whose outer name has `ech = "reject"`.
    let real = ech_hello(7, "private.example.com", "secret.example.org");
    let (back, line) = exchange(&relay, tls, &real).await;
    assert_eq!(back, alert(40));
    assert_eq!(line["close"], "ech_rejected");
    // The outer name is all the relay sees.
    assert_eq!(line["sni"], "private.example.com");
    assert_eq!(
        (&line["ech"], &line["ech_kind"]),
        (&true.into(), &"real".into())
    );
    backends.assert_only(None, &[]);

    // Chromium's GREASE ECH (config id 179) on the same route passes.
    let grease = capture("chromium_pq.bin");
    let (_, line) = exchange(&relay, tls, &grease).await;
    assert_eq!(line["close"], "done");
    assert_eq!(line["ech_kind"], "grease");
    assert_eq!(line["backend"], "web");
    backends.assert_only(Some("web"), &grease);

    // Real ECH on a route with `ech = "frontend"` goes to that backend...
    let real = ech_hello(7, "ech.example.com", "secret.example.org");
    let (_, line) = exchange(&relay, tls, &real).await;
    assert_eq!(line["close"], "done");
    assert_eq!(
        (&line["route"], &line["backend"]),
        (&"split".into(), &"frontend".into())
    );
    assert_eq!(line["ech_kind"], "real");
    backends.assert_only(Some("frontend"), &real);

    // ...and the route's hellos without ECH to its own.
    let plain = client_hello("ech.example.com", &[]);
    let (_, line) = exchange(&relay, tls, &plain).await;
    assert_eq!(
        (&line["close"], &line["backend"]),
        (&"done".into(), &"web".into())
    );
    assert_eq!(
        (&line["ech"], &line["ech_kind"]),
        (&false.into(), &Value::Null)
    );
    backends.assert_only(Some("web"), &plain);

    // Without `ech_config_ids`, GREASE cannot be told from real ECH: the
    // listener's `reject` refuses Chromium's hello too.
    let open = relay.addr_of("open");
    let (back, line) = exchange(&relay, open, &grease).await;
    assert_eq!(back, alert(40));
    assert_eq!(line["close"], "ech_rejected");
    assert_eq!(line["ech_kind"], "unknown");
    backends.assert_only(None, &[]);
    let plain = client_hello("plain.example.com", &[]);
    let (_, line) = exchange(&relay, open, &plain).await;
    assert_eq!(line["close"], "done");
    backends.assert_only(Some("web"), &plain);
}
