//! PROXY v2 TLVs through the real relay binary, read by a maintained
//! reader that is not ours: go-proxyproto (Debian's
//! `golang-github-pires-go-proxyproto-dev`, built here with Debian's
//! `golang-go` as a GOPATH program from `tests/data/proxy_reader/main.go`;
//! a missing package fails the test). Debian's HAProxy is 2.6, which has
//! neither `fc_pp_tlv` nor `set-proxy-v2-tlv-fmt` (both 2.9), so HAProxy
//! takes part as the upstream whose header is passed through.
//!
//! - a backend's `proxy_protocol_tlvs` (the client's first ALPN, the SNI,
//!   fixed text and bytes) as the reader sees them, in order, after the
//!   relay's own, with and without an ALPN offered;
//! - `pass_through_tlvs` from a hand-built peer header (AWS's VPC endpoint
//!   TLV, another product's 0xE0, a type the relay sends itself, a type
//!   not listed), from HAProxy's `send-proxy-v2` (its SSL TLV), and from
//!   one snirelay to the next, read by the recording backend of
//!   `tests/it/common` with snirelay's own parser.

use crate::common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use common::*;
use serde_json::Value;
use snirelay::wire::proxy::{self, HOPS_MAGIC, TLV_HOPS};

/// The reader's binary, built once per test process.
fn reader_binary() -> &'static PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/proxy_reader");
        let gopath = PathBuf::from("/usr/share/gocode");
        assert!(
            gopath
                .join("src/github.com/pires/go-proxyproto/tlvparse")
                .is_dir(),
            "go-proxyproto is not installed: this test needs it \
             (apt-get install golang-go golang-github-pires-go-proxyproto-dev)"
        );
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("proxy_reader");
        let status = Command::new("go")
            .args(["build", "-o"])
            .arg(&out)
            .arg(".")
            .current_dir(&source)
            .env("GO111MODULE", "off")
            .env("GOPATH", &gopath)
            .env(
                "GOCACHE",
                PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("go-cache"),
            )
            .env("GOFLAGS", "")
            .status()
            .unwrap_or_else(|e| {
                panic!("go is not installed: this test needs it (apt-get install golang-go): {e}")
            });
        assert!(status.success(), "building the go-proxyproto reader failed");
        out
    })
}

/// The reader, listening; and its address.
async fn reader() -> (Tool, SocketAddr) {
    let binary = reader_binary().to_str().unwrap().to_owned();
    let mut tool = Tool::spawn(&binary, &[], scratch_dir("proxy-reader"), "golang-go");
    let line = tool.wait_line(|l| l.starts_with("listening ")).await;
    let addr = line["listening ".len()..].parse().unwrap();
    (tool, addr)
}

/// The reader's record of the connection from `source`.
async fn read_by(tool: &mut Tool, source: SocketAddr) -> Value {
    let needle = format!("\"source\":\"{source}\"");
    let line = tool.wait_line(|l| l.contains(&needle)).await;
    let record: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(record["error"], "", "{record}");
    record
}

/// The TLVs the reader saw: (type, value).
fn tlvs(record: &Value) -> Vec<(u8, Vec<u8>)> {
    record["tlvs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let hex = t["hex"].as_str().unwrap();
            let value = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            (t["type"].as_u64().unwrap() as u8, value)
        })
        .collect()
}

/// The `connection closed` line of the connection that claimed `client`.
async fn closed_claiming(relay: &Relay, client: &str) -> Value {
    relay
        .wait_log(|l| l["message"] == "connection closed" && l["client.claimed"] == client)
        .await
}

/// Sends `bytes` through `relay`; returns the reader's record of the PROXY
/// header, the relay's access line, and that line's `conn_id` (what the
/// UNIQUE_ID TLV carries). `claimed`: the client a peer header in `bytes`
/// names (the reader sees it as the source), else the socket's own.
async fn through(
    relay: &Relay,
    reader: &mut Tool,
    bytes: &[u8],
    claimed: Option<&str>,
) -> (Value, Value, String) {
    let (client, _) = send_and_finish(relay.addr(), bytes).await;
    let (record, line) = match claimed {
        Some(claimed) => (
            read_by(reader, claimed.parse().unwrap()).await,
            closed_claiming(relay, claimed).await,
        ),
        None => (
            read_by(reader, client).await,
            relay.closed_line(client).await,
        ),
    };
    let conn_id = line["conn_id"].as_u64().unwrap().to_string();
    (record, line, conn_id)
}

fn hops(n: u8) -> Vec<u8> {
    proxy::hops_value(n).to_vec()
}

fn config(listener_extra: &str, backend: SocketAddr, backend_extra: &str) -> String {
    format!(
        r#"
[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]
{listener_extra}

[[route]]
sni = ["*.example.com"]
backend = "b"

[backend.b]
addresses = ["{backend}"]
proxy_protocol = "v2"
{backend_extra}
"#
    )
}

const ADDED: &str = r#"proxy_protocol_tlvs = [
  { type = 0x01, value = "alpn" },
  { type = 0xE2, value = "sni" },
  { type = 0xE3, text = "edge-7" },
  { type = 0xE4, bytes = "0a1b" },
]"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_proxyproto_reads_each_added_tlv_after_the_relays_own() {
    let (mut reader, reader_addr) = reader().await;
    let relay = Relay::start(&config(
        "",
        reader_addr,
        &format!("proxy_protocol_crc32c = true\n{ADDED}"),
    ))
    .await;

    // openssl's capture offers h2 then http/1.1, for www.example.com.
    let hello = capture("openssl_sni.bin");
    let (record, _, conn_id) = through(&relay, &mut reader, &hello, None).await;
    assert_eq!(record["destination"], relay.addr().to_string());
    let record_header: String = hello[..5].iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(record["after_hex"], record_header, "the hello follows");
    let mut seen = tlvs(&record);
    let (crc_type, crc) = seen.pop().unwrap();
    assert_eq!((crc_type, crc.len()), (0x03, 4), "CRC32C last: {seen:?}");
    assert_eq!(
        seen,
        [
            (0x02, b"www.example.com".to_vec()),
            (0x05, conn_id.into_bytes()),
            (0x01, b"h2".to_vec()),
            (0xE2, b"www.example.com".to_vec()),
            (0xE3, b"edge-7".to_vec()),
            (0xE4, vec![0x0A, 0x1B]),
        ]
    );

    // A hello without ALPN: the ALPN TLV is left out, the rest stay.
    let hello = hello_for("noalpn.example.com");
    let (record, _, conn_id) = through(&relay, &mut reader, &hello, None).await;
    let mut seen = tlvs(&record);
    assert_eq!(seen.pop().map(|t| t.0), Some(0x03));
    assert_eq!(
        seen,
        [
            (0x02, b"noalpn.example.com".to_vec()),
            (0x05, conn_id.into_bytes()),
            (0xE2, b"noalpn.example.com".to_vec()),
            (0xE3, b"edge-7".to_vec()),
            (0xE4, vec![0x0A, 0x1B]),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fingerprint_tlvs_carry_the_hellos_ja4_and_ja3_as_the_reference_computes_them() {
    let (mut reader, reader_addr) = reader().await;
    // No `fingerprints = true` on the listener: a backend that sends a
    // fingerprint TLV is enough for the relay to compute them.
    let relay = Relay::start(&config(
        "",
        reader_addr,
        r#"proxy_protocol_tlvs = [
  { type = 0xE1, value = "ja4" },
  { type = 0xE5, value = "ja3" },
]"#,
    ))
    .await;
    let hello = capture("openssl_sni.bin");
    let path = format!("{}/tests/data/openssl_sni.bin", env!("CARGO_MANIFEST_DIR"));
    let theirs = &crate::fingerprint::reference(&[path])[0];
    let (record, line, conn_id) = through(&relay, &mut reader, &hello, None).await;
    let ja4 = theirs["ja4"].as_str().unwrap();
    let ja3 = theirs["ja3_hash"].as_str().unwrap();
    assert_eq!(
        tlvs(&record),
        [
            (0x02, b"www.example.com".to_vec()),
            (0x05, conn_id.into_bytes()),
            (0xE1, ja4.as_bytes().to_vec()),
            (0xE5, ja3.as_bytes().to_vec()),
        ]
    );
    assert_eq!(line["tls.ja4"], ja4, "{line}");
}

/// A v2 header from 203.0.113.9:4000 to 192.0.2.80:443 carrying `tlvs`.
fn peer_header(tlvs: &[(u8, &[u8])]) -> Vec<u8> {
    let source: SocketAddr = "203.0.113.9:4000".parse().unwrap();
    let destination: SocketAddr = "192.0.2.80:443".parse().unwrap();
    let mut builder = ppp::v2::Builder::with_addresses(
        ppp::v2::Version::Two | ppp::v2::Command::Proxy,
        ppp::v2::Protocol::Stream,
        (source, destination),
    );
    for &(kind, value) in tlvs {
        builder = builder.write_tlv(kind, value).unwrap();
    }
    builder.build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listed_tlvs_of_a_peer_header_reach_the_reader_and_the_relays_own_win() {
    let (mut reader, reader_addr) = reader().await;
    let relay = Relay::start(&config(
        "[listener.proxy_protocol]\ntrusted = [\"127.0.0.1\"]\n\
         pass_through_tlvs = [0xEA, 0xE3, 0xE0, 0x01]",
        reader_addr,
        "proxy_protocol_tlvs = [{ type = 0xE3, text = \"edge-7\" }]",
    ))
    .await;

    let vpce = b"\x01vpce-0123456789abcdef0";
    let psc = b"\x00\x00\x00\x00\x00\x00\x30\x39";
    let mut bytes = peer_header(&[
        (0x05, b"peer-id"),
        (0xEA, vpce),
        (0xE3, b"peer-value"),
        (TLV_HOPS, psc),
        (0xEB, b"not listed"),
        (0x01, b"peer-alpn"),
    ]);
    bytes.extend(capture("openssl_sni.bin"));
    let (record, _, conn_id) = through(&relay, &mut reader, &bytes, Some("203.0.113.9:4000")).await;
    assert_eq!(record["destination"], "192.0.2.80:443");
    assert_eq!(
        tlvs(&record),
        [
            (0x02, b"www.example.com".to_vec()),
            (0x05, conn_id.into_bytes()),
            (TLV_HOPS, hops(2)),
            // The configured 0xE3 wins over the peer's, which is dropped.
            (0xE3, b"edge-7".to_vec()),
            (0xEA, vpce.to_vec()),
            (TLV_HOPS, psc.to_vec()),
            (0x01, b"peer-alpn".to_vec()),
        ]
    );
    // The reader's own decoding of AWS's TLV.
    assert_eq!(record["aws_vpce"], "vpce-0123456789abcdef0");
}

/// A peer as most are deployed: trusted by host name, and its header
/// carries no TLV at all (an AWS NLB outside PrivateLink, a relay without
/// `proxy_protocol_tlvs`). Nothing is passed through and nothing made up:
/// the reader sees the relay's own TLVs only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_header_without_tlvs_passes_nothing_through() {
    let (mut reader, reader_addr) = reader().await;
    let relay = Relay::start(&config(
        "[listener.proxy_protocol]\ntrusted = [\"localhost\"]\n\
         pass_through_tlvs = [0xEA, 0xE3]",
        reader_addr,
        "",
    ))
    .await;
    let mut bytes = peer_header(&[]);
    bytes.extend(capture("openssl_sni.bin"));
    let (record, _, conn_id) = through(&relay, &mut reader, &bytes, Some("203.0.113.9:4000")).await;
    assert_eq!(
        tlvs(&record),
        [
            (0x02, b"www.example.com".to_vec()),
            (0x05, conn_id.into_bytes()),
            (TLV_HOPS, hops(2)),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_send_proxy_v2s_ssl_tlv_passes_through_to_the_reader() {
    let (mut reader, reader_addr) = reader().await;
    let relay = Relay::start(&config(
        "[listener.proxy_protocol]\ntrusted = [\"127.0.0.1\"]\npass_through_tlvs = [0x20]",
        reader_addr,
        "",
    ))
    .await;
    let port = free_port();
    let dir = scratch_dir("haproxy");
    std::fs::write(
        dir.join("haproxy.cfg"),
        format!(
            r#"
global
    log stdout format raw local0 info
defaults
    mode tcp
    timeout connect 2s
    timeout client 10s
    timeout server 10s
frontend fe
    bind 127.0.0.1:{port}
    default_backend be
backend be
    server edge {} send-proxy-v2 proxy-v2-options ssl,crc32c,unique-id
"#,
            relay.addr()
        ),
    )
    .unwrap();
    let mut hap = Tool::spawn("haproxy", &["-f", "haproxy.cfg", "-db"], dir, "haproxy");
    let hap_addr: SocketAddr = ([127, 0, 0, 1], port).into();
    wait_accepting(hap_addr, &mut hap).await;

    let (client, _) = send_and_finish(hap_addr, &capture("openssl_sni.bin")).await;
    let record = read_by(&mut reader, client).await;
    let line = closed_claiming(&relay, &client.to_string()).await;
    let conn_id = line["conn_id"].as_u64().unwrap().to_string();
    // HAProxy's CRC32C (checked by the relay) and empty UNIQUE_ID are not
    // passed; its SSL TLV (client 0: a plain TCP frontend; verify 0) is.
    assert_eq!(
        tlvs(&record),
        [
            (0x02, b"www.example.com".to_vec()),
            (0x05, conn_id.into_bytes()),
            (TLV_HOPS, hops(2)),
            (0x20, vec![0, 0, 0, 0, 0]),
        ]
    );
    assert_eq!(record["ssl_found"], true, "{record}");
    assert_eq!(record["ssl_client"], false);
    assert_eq!(record["ssl_verified"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_relays_tlv_passes_through_the_next_to_the_recording_backend() {
    let (backend, mut seen) = recording_backend().await;
    let inner = Relay::start(&config(
        "[listener.proxy_protocol]\ntrusted = [\"127.0.0.1\"]\npass_through_tlvs = [0xE2]",
        backend,
        "",
    ))
    .await;
    let outer = Relay::start(&config(
        "",
        inner.addr(),
        "proxy_protocol_tlvs = [{ type = 0xE2, value = \"sni\" }, { type = 0xE5, text = \"outer\" }]",
    ))
    .await;
    let hello = client_hello("chain.example.com", &["h2"]);
    let (client, _) = send_and_finish(outer.addr(), &hello).await;
    let got = tokio::time::timeout(WAIT, seen.recv())
        .await
        .expect("backend saw no connection in time")
        .unwrap();
    let header = match proxy::parse(&got.all) {
        proxy::Parse::Header(h) => h,
        other => panic!("no PROXY header: {other:?}"),
    };
    assert_eq!(header.hops, 2);
    assert_eq!(&got.all[header.len..], &hello[..]);
    let inner_line = closed_claiming(&inner, &client.to_string()).await;
    let found: Vec<(u8, Vec<u8>)> = ppp::v2::Header::try_from(&got.all[..header.len])
        .unwrap()
        .tlvs()
        .map(|t| t.unwrap())
        .map(|t| (t.kind, t.value.to_vec()))
        .collect();
    let conn_id = inner_line["conn_id"].as_u64().unwrap().to_string();
    // 0xE5 is not listed on the inner relay, so it stops there.
    assert_eq!(
        found,
        [
            (0x02, b"chain.example.com".to_vec()),
            (0x05, conn_id.into_bytes()),
            (TLV_HOPS, hops(2)),
            (0xE2, b"chain.example.com".to_vec()),
        ]
    );
    assert!(found[2].1.starts_with(HOPS_MAGIC));
}
