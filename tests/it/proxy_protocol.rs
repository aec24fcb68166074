//! PROXY protocol through the real relay binary: headers out to a recording
//! backend, headers in from trusted and untrusted sources, relay-to-relay
//! chains and the hop guard that cuts a routing loop.

use crate::common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use snirelay::proxy::outbound::{self, Announcement, Outbound};
use snirelay::wire::proxy::{self, Announced, Parse};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

const SNI: &str = "www.example.com";

/// The relay (listener extras, backend extras as in [`config`]) in front
/// of a recording backend, and that backend's receiver.
async fn relay_to_recorder(
    listener_extra: &str,
    backend_extra: &str,
) -> (Relay, mpsc::UnboundedReceiver<Recorded>) {
    let (backend, seen) = recording_backend().await;
    let relay = Relay::start(&config(listener_extra, backend, backend_extra)).await;
    (relay, seen)
}

async fn next(rx: &mut mpsc::UnboundedReceiver<Recorded>) -> Recorded {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("backend saw no connection in time")
        .unwrap()
}

fn header_of(bytes: &[u8]) -> proxy::Header {
    match proxy::parse(bytes) {
        Parse::Header(h) => h,
        other => panic!("backend did not get a PROXY header: {other:?}"),
    }
}

/// The UNIQUE_ID TLV of a v2 header, as text.
fn unique_id(bytes: &[u8]) -> String {
    let header = ppp::v2::Header::try_from(bytes).unwrap();
    let id = header
        .tlvs()
        .map(|t| t.unwrap())
        .find(|t| t.kind == proxy::TLV_UNIQUE_ID)
        .expect("no UNIQUE_ID TLV");
    String::from_utf8(id.value.to_vec()).unwrap()
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
connect_timeout = "2s"
{backend_extra}
"#
    )
}

fn trusting(mode: &str, trusted: &str) -> String {
    format!("[listener.proxy_protocol]\ntrusted = [{trusted:?}]\nmode = {mode:?}\n")
}

/// A v2 header claiming `source` → `destination`, as a peer relay sends it.
fn v2_header(source: &str, destination: &str, hops: Option<u8>, crc: bool) -> Vec<u8> {
    let mut a = Announcement::new(
        source.parse().unwrap(),
        destination.parse().unwrap(),
        None,
        Some(SNI),
        77,
    );
    a.hops = hops;
    outbound::header(Outbound::V2, crc, &a).unwrap()
}

// ------------------------------------------------------------------ outbound

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_header_goes_out_in_the_same_write_as_the_hello() {
    let (relay, mut seen) =
        relay_to_recorder("", "proxy_protocol = \"v2\"\nproxy_protocol_crc32c = true").await;
    let hello = capture("openssl_sni.bin");
    let (client, _) = send_and_finish(relay.addr(), &hello).await;

    let got = next(&mut seen).await;
    let h = header_of(&got.all);
    assert_eq!(
        h.addresses,
        Announced::Proxy {
            source: client,
            destination: relay.addr()
        }
    );
    assert_eq!(h.authority.as_deref(), Some(SNI.as_bytes()));
    assert!(h.checksummed, "CRC32C TLV requested but absent");
    assert_eq!(h.hops, 1, "a direct client carries no hop TLV");
    assert_eq!(&got.all[h.len..], &hello[..], "the hello follows unchanged");
    assert!(
        got.first_read.len() > h.len,
        "the header arrived without the hello ({} bytes first)",
        got.first_read.len()
    );

    let line = relay.closed_line(client).await;
    assert_eq!(line["close"], "done");
    assert_eq!(
        unique_id(&got.all),
        line["conn_id"].as_u64().unwrap().to_string()
    );
    assert_eq!(line["bytes.up"], hello.len() as u64, "header not counted");
    assert!(line["client.claimed"].is_null());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_header_for_older_backends() {
    let (relay, mut seen) = relay_to_recorder("", "proxy_protocol = \"v1\"").await;
    let hello = capture("curl.bin");
    let (client, _) = send_and_finish(relay.addr(), &hello).await;
    let got = next(&mut seen).await;
    let expected = format!(
        "PROXY TCP4 127.0.0.1 127.0.0.1 {} {}\r\n",
        client.port(),
        relay.addr().port()
    );
    assert_eq!(&got.all[..expected.len()], expected.as_bytes());
    assert_eq!(&got.all[expected.len()..], &hello[..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_header_by_default() {
    let (relay, mut seen) = relay_to_recorder("", "").await;
    let hello = capture("openssl_sni.bin");
    send_and_finish(relay.addr(), &hello).await;
    assert_eq!(next(&mut seen).await.all, hello);
}

// ------------------------------------------------------------------- inbound

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusted_v2_and_v1_headers_become_client_claimed_and_are_stripped() {
    let (relay, mut seen) = relay_to_recorder(&trusting("require", "127.0.0.0/8"), "").await;
    let hello = capture("openssl_sni.bin");
    let headers = [
        (
            v2_header("203.0.113.9:4242", "192.0.2.1:443", None, true),
            "203.0.113.9:4242",
        ),
        (
            b"PROXY TCP6 2001:db8::9 2001:db8::1 5555 443\r\n".to_vec(),
            "[2001:db8::9]:5555",
        ),
    ];
    for (header, claimed) in headers {
        // Header and hello trickled in small pieces, split mid-header.
        let mut client = Trickle {
            inner: TcpStream::connect(relay.addr()).await.unwrap(),
            max: 7,
        };
        let local = client.inner.local_addr().unwrap();
        client.write_all(&header).await.unwrap();
        client.write_all(&hello).await.unwrap();
        client.shutdown().await.unwrap();
        let mut rest = Vec::new();
        let _ = client.read_to_end(&mut rest).await;

        assert_eq!(
            next(&mut seen).await.all,
            hello,
            "header stripped, hello intact"
        );
        let line = relay.closed_line(local).await;
        assert_eq!(line["close"], "done");
        assert_eq!(line["client.claimed"], claimed);
        assert_eq!(line["client.peer"], local.to_string());
        assert_eq!(line["sni"], SNI);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_mode_refuses_missing_and_invalid_headers() {
    let (backend, _seen) = recording_backend().await;
    let relay = Relay::start(&config(
        &format!(
            "client_hello_timeout = \"300ms\"\n{}",
            trusting("require", "127.0.0.1/32")
        ),
        backend,
        "",
    ))
    .await;
    let hello = capture("openssl_sni.bin");
    let mut bad_crc = v2_header("203.0.113.9:1", "192.0.2.1:443", None, true);
    let last = bad_crc.len() - 1;
    bad_crc[last] ^= 0x55;
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (hello.clone(), "proxy_missing"),
        ([bad_crc, hello.clone()].concat(), "proxy_invalid"),
        (
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n".to_vec(),
            "proxy_invalid",
        ),
    ];
    for (bytes, reason) in cases {
        let (client, back) = send_and_finish(relay.addr(), &bytes).await;
        assert!(back.is_empty());
        assert_eq!(relay.closed_line(client).await["close"], reason);
    }

    // A trusted source that sends nothing owes a header: missing at the deadline.
    let started = Instant::now();
    let mut idle = TcpStream::connect(relay.addr()).await.unwrap();
    let local = idle.local_addr().unwrap();
    let mut buf = [0u8; 1];
    let n = tokio::time::timeout(WAIT, idle.read(&mut buf))
        .await
        .unwrap();
    assert!(matches!(n, Ok(0) | Err(_)));
    assert!(started.elapsed() < Duration::from_millis(300) + Duration::from_secs(2));
    assert_eq!(relay.closed_line(local).await["close"], "proxy_missing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_sources_may_not_send_a_header_but_tls_passes_untouched() {
    let (relay, mut seen) = relay_to_recorder(
        &format!(
            "client_hello_timeout = \"300ms\"\n{}",
            trusting("require", "10.0.0.0/8")
        ),
        "",
    )
    .await;
    for bytes in [
        v2_header("203.0.113.9:1", "192.0.2.1:443", None, false),
        b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n".to_vec(),
        b"PROXY garbage".to_vec(),
    ] {
        let (client, _) = send_and_finish(relay.addr(), &bytes).await;
        let line = relay.closed_line(client).await;
        assert_eq!(line["close"], "proxy_untrusted");
        assert!(line["client.claimed"].is_null());
    }
    // Half a signature, then nothing: an untrusted client that sent no hello.
    let mut stalled = TcpStream::connect(relay.addr()).await.unwrap();
    let local = stalled.local_addr().unwrap();
    stalled.write_all(b"\r\n\r\n").await.unwrap();
    let mut buf = [0u8; 1];
    let _ = tokio::time::timeout(WAIT, stalled.read(&mut buf))
        .await
        .unwrap();
    assert_eq!(relay.closed_line(local).await["close"], "hello_timeout");

    // The sniffed first bytes are kept: a hello sent one byte per segment
    // reaches the backend whole.
    let hello = capture("openssl_two_records.bin");
    let mut client = Trickle {
        inner: TcpStream::connect(relay.addr()).await.unwrap(),
        max: 1,
    };
    let local = client.inner.local_addr().unwrap();
    client.write_all(&hello).await.unwrap();
    client.shutdown().await.unwrap();
    let mut rest = Vec::new();
    let _ = client.read_to_end(&mut rest).await;
    assert_eq!(next(&mut seen).await.all, hello);
    let line = relay.closed_line(local).await;
    assert_eq!(line["close"], "done");
    assert!(line["client.claimed"].is_null());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optional_mode_takes_headers_and_plain_tls_from_trusted_sources() {
    let (relay, mut seen) = relay_to_recorder(&trusting("optional", "127.0.0.0/8"), "").await;
    let hello = capture("chromium_pq.bin");

    let (plain, _) = send_and_finish(relay.addr(), &hello).await;
    assert_eq!(next(&mut seen).await.all, hello);
    let line = relay.closed_line(plain).await;
    assert_eq!(line["close"], "done");
    assert!(line["client.claimed"].is_null());

    let header = v2_header("[2001:db8::5]:6000", "[2001:db8::1]:443", None, false);
    let (proxied, _) = send_and_finish(relay.addr(), &[header, hello.clone()].concat()).await;
    assert_eq!(next(&mut seen).await.all, hello);
    let line = relay.closed_line(proxied).await;
    assert_eq!(line["client.claimed"], "[2001:db8::5]:6000");

    // LOCAL: the peer's own connection; socket addresses, no claim.
    let local = outbound::local_header(Outbound::V2, true).unwrap();
    let (peer, _) = send_and_finish(relay.addr(), &[local, hello.clone()].concat()).await;
    assert_eq!(next(&mut seen).await.all, hello);
    let line = relay.closed_line(peer).await;
    assert_eq!(line["close"], "done");
    assert!(line["client.claimed"].is_null());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hop_count_above_max_hops_is_refused() {
    let (relay, mut seen) = relay_to_recorder(
        &format!("{}max_hops = 2\n", trusting("require", "127.0.0.0/8")),
        "proxy_protocol = \"v2\"",
    )
    .await;
    let hello = capture("openssl_sni.bin");

    let at_limit = v2_header("203.0.113.9:1", "192.0.2.1:443", Some(2), false);
    let (client, _) = send_and_finish(relay.addr(), &[at_limit, hello.clone()].concat()).await;
    let got = next(&mut seen).await;
    let h = header_of(&got.all);
    assert_eq!(h.hops, 3, "forwarded with one more hop");
    assert_eq!(
        h.addresses,
        Announced::Proxy {
            source: "203.0.113.9:1".parse().unwrap(),
            destination: "192.0.2.1:443".parse().unwrap()
        },
        "the original client and destination are carried through"
    );
    assert_eq!(relay.closed_line(client).await["close"], "done");

    let over = v2_header("203.0.113.9:1", "192.0.2.1:443", Some(3), false);
    let (client, _) = send_and_finish(relay.addr(), &[over, hello].concat()).await;
    let line = relay.closed_line(client).await;
    assert_eq!(line["close"], "hop_limit");
    assert_eq!(line["level"], "WARN");
}

// ------------------------------------------------------- strict inbound rules

/// A v2 PROXY-command header built byte by byte: `family_protocol`, an
/// address `block` and raw `tlvs` (for what `announce` never writes).
fn v2_raw(version_command: u8, family_protocol: u8, block: &[u8], tlvs: &[u8]) -> Vec<u8> {
    let mut h = proxy::V2_SIGNATURE.to_vec();
    h.extend([version_command, family_protocol]);
    h.extend(((block.len() + tlvs.len()) as u16).to_be_bytes());
    h.extend(block);
    h.extend(tlvs);
    h
}

/// TCP over IPv4 from `source` to 192.0.2.1:443, as a v2 address block.
fn tcp4_block(source: [u8; 4], port: u16) -> Vec<u8> {
    [
        &source[..],
        &[192, 0, 2, 1],
        &port.to_be_bytes(),
        &443u16.to_be_bytes(),
    ]
    .concat()
}

fn tlv(kind: u8, value: &[u8]) -> Vec<u8> {
    [&[kind][..], &(value.len() as u16).to_be_bytes(), value].concat()
}

/// Asserts that every connection in `refused` (bytes to send, reason) is
/// closed with that reason, claims nothing and reaches no backend; then
/// that `sentinel` is relayed and is the first thing the backend sees.
async fn refused_then_sentinel(
    relay: &Relay,
    seen: &mut mpsc::UnboundedReceiver<Recorded>,
    refused: Vec<(Vec<u8>, &str)>,
    sentinel: &[u8],
    hello: &[u8],
) -> serde_json::Value {
    for (bytes, reason) in refused {
        let (client, back) = send_and_finish(relay.addr(), &bytes).await;
        assert!(back.is_empty());
        let line = relay.closed_line(client).await;
        let start = String::from_utf8_lossy(&bytes[..bytes.len().min(60)]).into_owned();
        assert_eq!(line["close"], reason, "{start:?}");
        assert!(line["client.claimed"].is_null(), "{line}");
        assert!(line["backend.addr"].is_null(), "{line}");
    }
    let (client, _) = send_and_finish(relay.addr(), &[sentinel, hello].concat()).await;
    let line = relay.closed_line(client).await;
    assert_eq!(line["close"], "done");
    let got = next(seen).await;
    assert!(
        got.all.ends_with(hello),
        "the first connection the backend saw is the sentinel"
    );
    line
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_ports_and_spacing_outside_the_grammar_are_refused() {
    let (relay, mut seen) = relay_to_recorder(&trusting("require", "127.0.0.0/8"), "").await;
    let hello = capture("openssl_sni.bin");
    let line = |ports: &str| {
        [
            format!("PROXY TCP4 203.0.113.9 192.0.2.1 {ports}\r\n").as_bytes(),
            &hello,
        ]
        .concat()
    };
    let refused = [
        "+80 443",
        "80 +443",
        " 80 443",
        "80  443",
        "080 443",
        "65536 443",
        "80 ",
    ]
    .into_iter()
    .map(|ports| (line(ports), "proxy_invalid"))
    .collect();
    let last = refused_then_sentinel(
        &relay,
        &mut seen,
        refused,
        b"PROXY TCP4 203.0.113.9 192.0.2.1 0 65535\r\n",
        &hello,
    )
    .await;
    assert_eq!(last["client.claimed"], "203.0.113.9:0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_that_cannot_be_a_client_are_refused_as_invalid() {
    let (relay, mut seen) = relay_to_recorder(&trusting("require", "127.0.0.0/8"), "").await;
    let hello = capture("openssl_sni.bin");
    let own = relay.addr();
    let claim = |source: &str| {
        [
            v2_header(source, "192.0.2.1:443", None, false),
            hello.clone(),
        ]
        .concat()
    };
    let mut refused: Vec<(Vec<u8>, &str)> = [
        "0.0.0.0:1234".to_string(),
        "[::]:1234".into(),
        "224.0.0.1:1234".into(),
        "[ff02::1]:1234".into(),
        "255.255.255.255:1234".into(),
        "[::ffff:255.255.255.255]:1234".into(),
        "[::ffff:239.1.2.3]:1234".into(),
        // The relay's own listening socket, plain and IPv4-mapped.
        own.to_string(),
        format!("[::ffff:{}]:{}", own.ip(), own.port()),
    ]
    .iter()
    .map(|source| (claim(source), "proxy_invalid"))
    .collect();
    refused.push((
        [&b"PROXY TCP4 0.0.0.0 192.0.2.1 1 443\r\n"[..], &hello].concat(),
        "proxy_invalid",
    ));
    // The relay's IP from another port is a client on the same host.
    let same_host = format!("{}:{}", own.ip(), own.port().wrapping_add(1).max(1));
    let last = refused_then_sentinel(
        &relay,
        &mut seen,
        refused,
        &v2_header(&same_host, "192.0.2.1:443", None, false),
        &hello,
    )
    .await;
    assert_eq!(last["client.claimed"], same_host);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_and_protocols_the_relay_does_not_carry_use_the_connection_addresses() {
    let (relay, mut seen) = relay_to_recorder(
        &trusting("require", "127.0.0.0/8"),
        "proxy_protocol = \"v2\"",
    )
    .await;
    let hello = capture("openssl_sni.bin");
    let udp = tcp4_block([203, 0, 113, 9], 5353);
    let headers = [
        // LOCAL whatever its family and length say: IPv6 over 12 bytes,
        // an unassigned family, junk where TLVs would be.
        v2_raw(0x20, 0x21, &udp, &[]),
        v2_raw(0x20, 0xFF, &[1, 2, 3], &[]),
        // PROXY over UDP, AF_UNIX stream, and UNSPEC: fall back to UNSPEC.
        v2_raw(0x21, 0x12, &udp, &tlv(proxy::TLV_UNIQUE_ID, b"x")),
        v2_raw(0x21, 0x31, &[0; 216], &[]),
        v2_raw(0x21, 0x00, &[], &[]),
    ];
    for header in headers {
        let (client, _) =
            send_and_finish(relay.addr(), &[header.clone(), hello.clone()].concat()).await;
        let line = relay.closed_line(client).await;
        assert_eq!(line["close"], "done", "{header:?}");
        assert!(line["client.claimed"].is_null(), "{line}");
        let got = next(&mut seen).await;
        let h = header_of(&got.all);
        assert_eq!(
            h.addresses,
            Announced::Proxy {
                source: client,
                destination: relay.addr()
            },
            "the backend learns the connection's own endpoints"
        );
        assert_eq!(h.hops, 2, "one hop in (no hop TLV), one more out");
        assert_eq!(&got.all[h.len..], &hello[..]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_our_0xe0_sub_type_is_a_hop_count_and_it_goes_out_in_that_format() {
    let (relay, mut seen) = relay_to_recorder(
        &format!("{}max_hops = 2\n", trusting("require", "127.0.0.0/8")),
        "proxy_protocol = \"v2\"",
    )
    .await;
    let hello = capture("openssl_sni.bin");
    let block = tcp4_block([203, 0, 113, 9], 4000);
    let ours = |n: u8| tlv(0xE0, &[&proxy::HOPS_MAGIC[..], &[n]].concat());
    let cases = [
        // Another product's 0xE0 (or an old relay's bare count, 9 > max):
        // ignored, one hop.
        (tlv(0xE0, &[9]), 2),
        (tlv(0xE0, b"someone else's data"), 2),
        ([tlv(0xE0, &[9]), ours(2)].concat(), 3),
    ];
    for (tlvs, out) in cases {
        let header = v2_raw(0x21, 0x11, &block, &tlvs);
        let (client, _) = send_and_finish(relay.addr(), &[header, hello.clone()].concat()).await;
        assert_eq!(relay.closed_line(client).await["close"], "done");
        let got = next(&mut seen).await;
        let h = header_of(&got.all);
        assert_eq!(h.hops, out);
        // On the wire: type 0xE0, length 14, "snirelay-hops", the count.
        let wire = [&[0xE0, 0, 14][..], b"snirelay-hops", &[out]].concat();
        assert!(
            got.all[..h.len].windows(wire.len()).any(|w| w == wire),
            "{:?}",
            &got.all[..h.len]
        );
    }
    // Ours above max_hops, or ours twice: refused, nothing forwarded.
    let refused = vec![
        (
            [v2_raw(0x21, 0x11, &block, &ours(3)), hello.clone()].concat(),
            "hop_limit",
        ),
        (
            [
                v2_raw(0x21, 0x11, &block, &[ours(1), ours(1)].concat()),
                hello.clone(),
            ]
            .concat(),
            "proxy_invalid",
        ),
    ];
    for (bytes, reason) in refused {
        let (client, back) = send_and_finish(relay.addr(), &bytes).await;
        assert!(back.is_empty());
        let line = relay.closed_line(client).await;
        assert_eq!(line["close"], reason);
        assert!(line["backend.addr"].is_null());
    }
    let sentinel = v2_raw(0x21, 0x11, &block, &[]);
    let (client, _) = send_and_finish(relay.addr(), &[sentinel, hello.clone()].concat()).await;
    assert_eq!(relay.closed_line(client).await["close"], "done");
    assert!(
        next(&mut seen).await.all.ends_with(&hello),
        "refused ones reached no backend"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peers_authority_is_carried_only_when_it_is_a_host_name() {
    let (relay, mut seen) = relay_to_recorder(
        &trusting("require", "127.0.0.0/8"),
        "proxy_protocol = \"v2\"",
    )
    .await;
    let hello = capture("openssl_sni.bin");
    let block = tcp4_block([203, 0, 113, 9], 4000);
    let long = [
        &[b'a'; 63][..],
        b".",
        &[b'b'; 63],
        b".",
        &[b'c'; 63],
        b".",
        &[b'd'; 63],
    ]
    .concat();
    let cases: [(&[u8], &str); 5] = [
        (b"Orig.Example.", "orig.example"),
        // Not host names, or too long: ignored, the relay's own SNI goes on.
        (b"bad name.example", SNI),
        (b"192.0.2.7", SNI),
        (b"", SNI),
        (&long[..], SNI),
    ];
    for (authority, expected) in cases {
        let header = v2_raw(0x21, 0x11, &block, &tlv(proxy::TLV_AUTHORITY, authority));
        let (client, _) = send_and_finish(relay.addr(), &[header, hello.clone()].concat()).await;
        let line = relay.closed_line(client).await;
        assert_eq!(line["close"], "done");
        assert_eq!(line["client.claimed"], "203.0.113.9:4000");
        let h = header_of(&next(&mut seen).await.all);
        assert_eq!(
            h.authority.as_deref(),
            Some(expected.as_bytes()),
            "{:?}",
            String::from_utf8_lossy(authority)
        );
    }
    // Two AUTHORITY TLVs: which name? Refused.
    let twice = [
        tlv(proxy::TLV_AUTHORITY, b"a.example"),
        tlv(proxy::TLV_AUTHORITY, b"a.example"),
    ]
    .concat();
    let refused = vec![(
        [v2_raw(0x21, 0x11, &block, &twice), hello.clone()].concat(),
        "proxy_invalid",
    )];
    let sentinel = v2_raw(0x21, 0x11, &block, &[]);
    refused_then_sentinel(&relay, &mut seen, refused, &sentinel, &hello).await;
}

// ------------------------------------------------------------ relay chains

/// A TCP forwarder on 127.0.0.1:0 to an address set later: lets two relays
/// on port 0 point at each other.
async fn forwarder() -> (SocketAddr, Arc<Mutex<Option<SocketAddr>>>) {
    let target: Arc<Mutex<Option<SocketAddr>>> = Arc::default();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let to = target.clone();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let dest = to.lock().unwrap().expect("forwarder target not set");
            tokio::spawn(async move {
                if let Ok(mut out) = TcpStream::connect(dest).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                }
            });
        }
    });
    (addr, target)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_of_two_relays_delivers_the_original_client_and_sni() {
    let (backend, mut seen) = recording_backend().await;
    let b = Relay::start(&config(
        &trusting("require", "127.0.0.0/8"),
        backend,
        "proxy_protocol = \"v2\"",
    ))
    .await;
    let a = Relay::start(&config("", b.addr(), "proxy_protocol = \"v2\"")).await;

    let hello = capture("openssl_sni.bin");
    let (client, _) = send_and_finish(a.addr(), &hello).await;
    let got = next(&mut seen).await;
    let h = header_of(&got.all);
    assert_eq!(
        h.addresses,
        Announced::Proxy {
            source: client,
            destination: a.addr()
        },
        "the recording backend sees the client and the address it dialled"
    );
    assert_eq!(h.authority.as_deref(), Some(SNI.as_bytes()));
    assert_eq!(h.hops, 2);
    assert_eq!(&got.all[h.len..], &hello[..]);

    assert_eq!(a.closed_line(client).await["close"], "done");
    let line = b
        .wait_log(|l| {
            l["message"] == "connection closed"
                && l["client.claimed"] == client.to_string().as_str()
        })
        .await;
    assert_eq!(line["close"], "done");
    assert_eq!(line["sni"], SNI);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_routing_loop_between_two_relays_is_cut_by_the_hop_guard() {
    let (to_a, set_a) = forwarder().await;
    // A takes clients and (trusted, optional) B's connections; B requires a header.
    let b = Relay::start(&config(
        &trusting("require", "127.0.0.0/8"),
        to_a,
        "proxy_protocol = \"v2\"",
    ))
    .await;
    let a = Relay::start(&config(
        &trusting("optional", "127.0.0.0/8"),
        b.addr(),
        "proxy_protocol = \"v2\"",
    ))
    .await;
    *set_a.lock().unwrap() = Some(a.addr());

    let hello = capture("openssl_sni.bin");
    let (client, back) = send_and_finish(a.addr(), &hello).await;
    assert!(back.is_empty());

    // client → A (0 hops) → B (1) → A (2) → B (3) → A (4 > 3): refused.
    let cut = a.wait_log(|l| l["close"] == "hop_limit").await;
    assert_eq!(cut["client.claimed"], client.to_string());
    let first = a
        .wait_log(|l| {
            l["message"] == "connection closed" && l["client.peer"] == client.to_string().as_str()
        })
        .await;
    assert_eq!(first["close"], "done");
    assert!(first["client.claimed"].is_null());
    let a_lines = a.closed_lines();
    assert!(a_lines.len() <= 3, "A relayed too many hops: {a_lines:#?}");
    assert_eq!(
        a_lines.iter().filter(|l| l["close"] == "hop_limit").count(),
        1
    );
    assert!(b.closed_lines().iter().all(|l| l["close"] != "hop_limit"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_source_limits_apply_to_the_claimed_client_and_exempt_the_trusted_peer() {
    // A backend that holds every connection open and reports each one.
    let (tx, mut opened) = mpsc::unbounded_channel();
    let backend = raw_backend(move |mut stream| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(());
            let mut sink = Vec::new();
            let _ = stream.read_to_end(&mut sink).await;
        }
    })
    .await;
    let listener = format!(
        "{}\n[listener.limits]\nconnections_per_source = 2\n",
        trusting("optional", "127.0.0.0/8")
    );
    let relay = Relay::start(&config(&listener, backend, "")).await;
    let hello = capture("chromium_pq.bin");
    let claiming = |client: &str| {
        [
            v2_header(client, "192.0.2.1:443", None, false),
            hello.clone(),
        ]
        .concat()
    };
    let mut held = Vec::new();
    async fn open(addr: SocketAddr, bytes: &[u8]) -> TcpStream {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(bytes).await.unwrap();
        stream
    }
    async fn relayed(rx: &mut mpsc::UnboundedReceiver<()>) {
        tokio::time::timeout(WAIT, rx.recv())
            .await
            .unwrap()
            .unwrap()
    }

    // Two connections for one claimed client fill its budget ...
    for port in [5001, 5002] {
        held.push(open(relay.addr(), &claiming(&format!("198.51.100.7:{port}"))).await);
        relayed(&mut opened).await;
    }
    // ... so its third is refused, although the peer relay is the same.
    let (third, back) = send_and_finish(relay.addr(), &claiming("198.51.100.7:5003")).await;
    assert!(back.is_empty());
    let line = relay.closed_line(third).await;
    assert_eq!(line["close"], "limit_concurrent");
    assert_eq!(line["client.claimed"], "198.51.100.7:5003");

    // Another client behind the same peer has its own budget.
    held.push(open(relay.addr(), &claiming("198.51.100.8:5001")).await);
    relayed(&mut opened).await;

    // The trusted peer's own connections (no claim) are not counted.
    for _ in 0..3 {
        held.push(open(relay.addr(), &hello).await);
        relayed(&mut opened).await;
    }
    assert_eq!(held.len(), 6);
}
