//! Client fingerprints (JA4, JA3): snirelay's answers on real clients'
//! hellos captured here (tests/data and tests/data/quic, see their READMEs)
//! against an independent implementation written from the specifications
//! in Python (tests/data/fingerprint/ja4.py, no code shared), and through
//! the real binary: `[route.match] ja4` lets one client in and refuses
//! another with `ja4_refused`, and the access line carries `tls.ja4`,
//! `tls.ja3` and `tls.ja3_string`, over TCP and over QUIC.

use crate::common;

use std::process::Command;

use common::*;
use serde_json::Value;
use snirelay::config::DEFAULT_MAX_CLIENT_HELLO_BYTES as LIMIT;
use snirelay::quic::initial::{self, HelloLimits};
use snirelay::wire::client_hello::{Reassembler, decode_handshake_with_layout};
use snirelay::wire::fingerprint::{Fingerprints, Transport, ja4_raw};

/// TCP captures: one per client and case (tests/data/README.md).
const TCP_CAPTURES: &[&str] = &[
    "openssl_sni.bin",
    "openssl_no_sni.bin",
    "openssl_two_records.bin",
    "curl.bin",
    "chromium_pq.bin",
    "wget_gnutls.bin",
    "go_crypto_tls.bin",
    "node_https.bin",
];

/// QUIC first flights (tests/data/quic/README.md): Chromium, ngtcp2 and
/// aioquic (v1 and v2).
const QUIC_CAPTURES: &[&str] = &["chromium", "ngtcp2", "aioquic_v1", "aioquic_v2"];

/// What the Python reference answers for each argument, in order.
pub(crate) fn reference(args: &[String]) -> Vec<Value> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/fingerprint/ja4.py");
    let out = Command::new("python3")
        .arg(script)
        .args(args)
        .output()
        .expect("python3 runs the reference implementation (it is required)");
    assert!(
        out.status.success(),
        "ja4.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answers: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(answers.len(), args.len());
    answers
}

fn assert_same(name: &str, ours: &Fingerprints, raw: &str, theirs: &Value) {
    assert_eq!(ours.ja4(), theirs["ja4"], "{name}: ja4");
    assert_eq!(raw, theirs["ja4_r"], "{name}: ja4_r");
    assert_eq!(ours.ja3(), theirs["ja3"], "{name}: ja3 string");
    assert_eq!(ours.ja3_hash(), theirs["ja3_hash"], "{name}: ja3 hash");
}

#[test]
fn tcp_captures_match_the_reference_implementation() {
    let paths: Vec<String> = TCP_CAPTURES
        .iter()
        .map(|f| format!("{}/tests/data/{f}", env!("CARGO_MANIFEST_DIR")))
        .collect();
    let answers = reference(&paths);
    let mut distinct = std::collections::BTreeSet::new();
    for (file, theirs) in TCP_CAPTURES.iter().zip(&answers) {
        let bytes = capture(file);
        let mut reader = Reassembler::new(LIMIT);
        reader
            .feed(&bytes)
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        let (message, layout) = reader.hello_message(&bytes).unwrap();
        let ours = Fingerprints::compute(message, &layout, Transport::Tcp);
        let raw = ja4_raw(message, &layout, Transport::Tcp);
        assert_same(file, &ours, &raw, theirs);
        assert!(ours.ja4().starts_with('t'), "{file}");
        distinct.insert(ours.ja4().to_owned());
    }
    // Six clients (OpenSSL, curl, Chromium, GnuTLS, Go, Node), at least
    // five fingerprints: curl and openssl's two cases may share one.
    assert!(distinct.len() >= 5, "{distinct:?}");
    // The two-record hello is reassembled before it is fingerprinted: it
    // prints as the one-record hello of the same client does, bar its SNI
    // and ALPN list (same counts here), so their cipher hashes agree.
    let cipher_hash = |v: &Value| v["ja4"].as_str().unwrap()[11..23].to_owned();
    assert_eq!(cipher_hash(&answers[0]), cipher_hash(&answers[2]));
}

#[test]
fn quic_captures_match_the_reference_implementation() {
    let limits = || HelloLimits::for_hello_bytes(LIMIT);
    let mut args = Vec::new();
    let mut ours = Vec::new();
    for name in QUIC_CAPTURES {
        let flight = quic_capture::capture(name);
        let datagrams = || flight.iter().map(Vec::as_slice);
        let message = initial::hello_message(datagrams(), limits()).unwrap();
        let (_, layout) = decode_handshake_with_layout(&message).unwrap();
        let computed = Fingerprints::compute(&message, &layout, Transport::Quic);
        // The listener's path: the parser computes them itself, and only
        // when asked.
        let mut parser = initial::Parser::new(limits()).fingerprinting(true);
        let mut listener_prints = None;
        for datagram in datagrams() {
            if let Ok(hello) = parser.feed(datagram) {
                listener_prints = hello.fingerprints;
            }
        }
        assert_eq!(listener_prints.as_deref(), Some(&computed), "{name}");
        let quiet = initial::parse(datagrams(), limits()).unwrap();
        assert_eq!(quiet.fingerprints, None, "{name}: computed unasked");
        args.push(format!("quic:{}", hex(&message)));
        ours.push((computed, ja4_raw(&message, &layout, Transport::Quic)));
    }
    for ((name, (prints, raw)), theirs) in QUIC_CAPTURES.iter().zip(&ours).zip(reference(&args)) {
        assert_same(name, prints, raw, &theirs);
        assert!(prints.ja4().starts_with("q13d"), "{name}: {}", prints.ja4());
    }
}

/// The QUIC first flights of tests/data/quic.
mod quic_capture {
    include!("common/quic_capture.rs");
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The JA4 the reference gives a TCP capture.
fn reference_ja4(file: &str) -> String {
    let path = format!("{}/tests/data/{file}", env!("CARGO_MANIFEST_DIR"));
    reference(&[path])[0]["ja4"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_matching_a_ja4_prefix_lets_one_client_in_and_refuses_another() {
    let chromium = capture("chromium_pq.bin");
    let curl = capture("curl.bin");
    let chromium_ja4 = reference_ja4("chromium_pq.bin");
    let curl_ja4 = reference_ja4("curl.bin");
    // The prefix: Chromium's first part, which curl's does not share.
    let prefix = &chromium_ja4[..10];
    assert!(!curl_ja4.starts_with(prefix), "{curl_ja4} vs {prefix}");
    let (backend, mut seen) = recording_backend().await;
    let config = format!(
        r#"
[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]

[[route]]
name = "browsers"
sni = ["*.example.com"]
backend = "b"

[route.match]
ja4 = ["{prefix}*"]

[backend.b]
addresses = ["{backend}"]
"#
    );
    let relay = Relay::start(&config).await;

    let (local, back) = send_and_finish(relay.addr(), &chromium).await;
    assert_eq!(back, b"");
    let line = relay.closed_line(local).await;
    assert_eq!(line["close"], "done", "{line}");
    assert_eq!(line["route"], "browsers", "{line}");
    assert_eq!(line["tls.ja4"], chromium_ja4.as_str(), "{line}");
    assert_eq!(seen.recv().await.unwrap().all, chromium);

    // curl: refused with a handshake_failure alert, nothing forwarded.
    let (local, back) = send_and_finish(relay.addr(), &curl).await;
    assert_eq!(back, [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 40]);
    let line = relay.closed_line(local).await;
    assert_eq!(line["close"], "ja4_refused", "{line}");
    assert_eq!(line["sni"], "curl.example.com", "{line}");
    assert_eq!(line["tls.ja4"], curl_ja4.as_str(), "{line}");
    assert!(seen.try_recv().is_err(), "curl's hello was forwarded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_line_carries_the_fingerprints_only_when_asked() {
    let (backend, mut seen) = recording_backend().await;
    let config = format!(
        r#"
[[listener]]
name = "logged"
listen = ["127.0.0.1:0"]
fingerprints = true

[[listener]]
name = "quiet"
listen = ["127.0.0.1:0"]

[listener.match]
ja4_deny = ["q*"]

[[route]]
listener = "logged"
sni = ["*.example.com"]
backend = "b"

[[route]]
listener = "quiet"
sni = ["*.example.com"]
backend = "b"

[backend.b]
addresses = ["{backend}"]
"#
    );
    let relay = Relay::start(&config).await;
    // A hello over two records is fingerprinted from the reassembled
    // message, as the reference reads it.
    let hello = capture("openssl_two_records.bin");
    let path = format!(
        "{}/tests/data/openssl_two_records.bin",
        env!("CARGO_MANIFEST_DIR")
    );
    let theirs = &reference(&[path])[0];
    let (local, _) = send_and_finish(relay.addr_of("logged"), &hello).await;
    let line = relay.closed_line(local).await;
    assert_eq!(line["close"], "done", "{line}");
    assert_eq!(line["tls.ja4"], theirs["ja4"], "{line}");
    assert_eq!(line["tls.ja3"], theirs["ja3_hash"], "{line}");
    assert_eq!(line["tls.ja3_string"], theirs["ja3"], "{line}");
    assert_eq!(seen.recv().await.unwrap().all, hello);

    // Without `fingerprints`, a rule alone (the "quiet" listener's
    // `ja4_deny`, which this hello passes) makes the relay compute them.
    let (local, _) = send_and_finish(relay.addr_of("quiet"), &hello).await;
    let line = relay.closed_line(local).await;
    assert_eq!(line["close"], "done", "{line}");
    assert_eq!(line["tls.ja4"], theirs["ja4"], "{line}");
    assert_eq!(seen.recv().await.unwrap().all, hello);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_flows_carry_a_q_fingerprint_and_obey_the_rules() {
    let backend = udp_echo_backend().await;
    let flight = quic_capture::capture("chromium");
    let message = initial::hello_message(
        flight.iter().map(Vec::as_slice),
        HelloLimits::for_hello_bytes(LIMIT),
    )
    .unwrap();
    let theirs = &reference(&[format!("quic:{}", hex(&message))])[0];
    let ja4 = theirs["ja4"].as_str().unwrap();
    let config = format!(
        r#"
[[listener]]
name = "open"
protocol = "quic"
listen = ["127.0.0.1:0"]
idle_timeout = "300ms"
fingerprints = true

[[listener]]
name = "closed"
protocol = "quic"
listen = ["127.0.0.1:0"]

[listener.match]
ja4 = ["t13d*"]

[[route]]
listener = "open"
sni = ["chrome.example.com"]
backend = "b"

[route.match]
ja4 = ["{ja4}"]

[[route]]
listener = "closed"
sni = ["chrome.example.com"]
backend = "b"

[backend.b]
addresses = ["{backend}"]
"#
    );
    let relay = Relay::start(&config).await;
    let client = common::udp::echoed_flow(relay.addr_of("open"), "127.0.0.1", &flight).await;
    let line = relay.closed_line(client.local_addr().unwrap()).await;
    assert_eq!(line["close"], "idle_timeout", "{line}");
    assert_eq!(line["tls.ja4"], ja4, "{line}");
    assert_eq!(line["tls.ja3"], theirs["ja3_hash"], "{line}");

    // A listener that takes only TCP-like `t13d` prints refuses it.
    let client = common::udp::send_flow(relay.addr_of("closed"), &flight).await;
    let line = relay.closed_line(client.local_addr().unwrap()).await;
    assert_eq!(line["close"], "ja4_refused", "{line}");
    assert_eq!(line["tls.ja4"], ja4, "{line}");
}

/// A backend that reports each connection's first read and then holds the
/// connection until the relay closes it.
pub(crate) async fn holding_backend() -> (
    std::net::SocketAddr,
    tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>,
) {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                let n = stream.read(&mut buf).await.unwrap_or(0);
                let _ = tx.send(buf[..n].to_vec());
                let mut rest = Vec::new();
                let _ = stream.read_to_end(&mut rest).await;
            });
        }
    });
    (addr, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_key_ja4_counts_each_tls_stack_apart_after_the_hello() {
    use tokio::io::AsyncWriteExt;
    let chromium = capture("chromium_pq.bin");
    let curl = capture("curl.bin");
    let (backend, mut relayed) = holding_backend().await;
    let tokens = token_file(&format!("ops:{}\n", crate::admin_sources::TOKEN));
    let config = format!(
        r#"
[admin]
listen = "127.0.0.1:0"
token_file = "{tokens}"

[[listener]]
name = "by_ja4"
listen = ["127.0.0.1:0"]

[listener.limits]
connections_per_source = 1
limit_key = "ja4"

[[listener]]
name = "by_source"
listen = ["127.0.0.1:0"]

[listener.limits]
connections_per_source = 1

[[route]]
listener = "by_ja4"
sni = ["*.example.com"]
backend = "b"

[[route]]
listener = "by_source"
sni = ["*.example.com"]
backend = "b"

[backend.b]
addresses = ["{backend}"]
"#,
        tokens = tokens.display()
    );
    let relay = Relay::start(&config).await;
    // One Chromium connection held open on each listener.
    let mut held = Vec::new();
    for name in ["by_ja4", "by_source"] {
        let mut client = tokio::net::TcpStream::connect(relay.addr_of(name))
            .await
            .unwrap();
        client.write_all(&chromium).await.unwrap();
        assert_eq!(relayed.recv().await.unwrap(), chromium, "{name}");
        held.push(client);
    }

    // Keyed by JA4: a second Chromium is over its stack's one connection,
    // refused once its hello is read (the line names its JA4) ...
    let (local, back) = send_and_finish(relay.addr_of("by_ja4"), &chromium).await;
    assert_eq!(back, b"");
    let line = relay.closed_line(local).await;
    assert_eq!(line["close"], "limit_concurrent", "{line}");
    assert_eq!(
        line["tls.ja4"],
        reference_ja4("chromium_pq.bin").as_str(),
        "{line}"
    );
    // ... while curl, from the same address, is another key and goes through.
    let (local, _) = send_and_finish(relay.addr_of("by_ja4"), &curl).await;
    let line = relay.closed_line(local).await;
    assert_eq!(line["close"], "done", "{line}");
    assert_eq!(relayed.recv().await.unwrap(), curl);

    // The source table lists the stack by its JA4, with its open
    // connection and its refusal.
    let admin = relay.admin_addr().await;
    let answer = crate::admin_sources::call(
        admin,
        "GET",
        "/sources?listener=by_ja4",
        Some(crate::admin_sources::TOKEN),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let table = answer.json();
    let row_of = |ja4: &str| {
        table["sources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|row| row["ja4"] == ja4)
            .unwrap_or_else(|| panic!("{ja4} not listed: {table}"))
            .clone()
    };
    let chromium_row = row_of(&reference_ja4("chromium_pq.bin"));
    assert_eq!(chromium_row["open"], 1, "{table}");
    assert_eq!(chromium_row["refused"]["limit_concurrent"], 1, "{table}");
    assert!(
        chromium_row["key"].as_str().unwrap().starts_with("ja4#"),
        "{table}"
    );

    // Keyed by source (the default), curl is refused at accept: same
    // address, before a byte is read, so no fingerprint.
    let (local, _) = send_and_finish(relay.addr_of("by_source"), &curl).await;
    let line = relay.closed_line(local).await;
    assert_eq!(line["close"], "limit_concurrent", "{line}");
    assert_eq!(line["tls.ja4"], Value::Null, "{line}");
    assert!(relayed.try_recv().is_err(), "a refused hello was relayed");
    drop(held);
}
