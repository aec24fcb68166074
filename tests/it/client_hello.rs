//! Golden and prefix tests for the ClientHello parser, on real captures
//! (tests/data, see its README for provenance) and on a hello rustls builds
//! here, plus hostile inputs with their exact verdicts.

use crate::common;

use snirelay::config::DEFAULT_MAX_CLIENT_HELLO_BYTES as LIMIT;
use snirelay::wire::client_hello::{Inspect, parse};

struct Golden {
    file: &'static str,
    sni: Option<&'static str>,
    alpn: &'static [&'static str],
    ech: bool,
}

const GOLDEN: &[Golden] = &[
    Golden {
        file: "openssl_sni.bin",
        sni: Some("www.example.com"),
        alpn: &["h2", "http/1.1"],
        ech: false,
    },
    Golden {
        file: "openssl_no_sni.bin",
        sni: None,
        alpn: &[],
        ech: false,
    },
    Golden {
        file: "curl.bin",
        sni: Some("curl.example.com"),
        alpn: &["h2", "http/1.1"],
        ech: false,
    },
    Golden {
        file: "chromium_pq.bin",
        sni: Some("chrome.example.com"),
        alpn: &["h2", "http/1.1"],
        ech: true,
    },
];

/// Every strict prefix is Incomplete; the whole yields the hello.
fn check_prefixes(bytes: &[u8]) {
    for cut in 0..bytes.len() {
        assert_eq!(
            parse(&bytes[..cut], LIMIT),
            Err(Inspect::Incomplete),
            "prefix of {cut} of {} bytes",
            bytes.len()
        );
    }
    let hello = parse(bytes, LIMIT).expect("full capture parses");
    assert_eq!(hello.len, bytes.len());
}

fn alpn_of(hello: &snirelay::wire::client_hello::ClientHello) -> Vec<String> {
    hello
        .alpn
        .iter()
        .map(|p| String::from_utf8(p.clone()).unwrap())
        .collect()
}

#[test]
fn captured_hellos_parse_and_every_prefix_is_incomplete() {
    for golden in GOLDEN {
        let bytes = common::capture(golden.file);
        check_prefixes(&bytes);
        let hello = parse(&bytes, LIMIT).unwrap();
        let sni = hello
            .server_name
            .as_deref()
            .map(|s| std::str::from_utf8(s).unwrap());
        assert_eq!(sni, golden.sni, "{}", golden.file);
        assert_eq!(alpn_of(&hello), golden.alpn, "{}", golden.file);
        assert_eq!(hello.ech.is_some(), golden.ech, "{}", golden.file);
    }
}

#[test]
fn a_hello_split_over_two_records_is_reassembled() {
    let bytes = common::capture("openssl_two_records.bin");
    // Two records: 512 + 71 bytes of payload.
    assert_eq!(u16::from_be_bytes([bytes[3], bytes[4]]), 512);
    check_prefixes(&bytes);
    let hello = parse(&bytes, LIMIT).unwrap();
    assert_eq!(
        hello.server_name.as_deref(),
        Some(&b"split.example.com"[..])
    );
    assert_eq!(hello.alpn.len(), 35);
    assert_eq!(alpn_of(&hello)[..2], ["h2", "http/1.1"]);
}

#[test]
fn bytes_after_the_hello_are_not_part_of_it() {
    let mut bytes = common::capture("curl.bin");
    let len = bytes.len();
    bytes.extend_from_slice(&[0x17, 0x03, 0x03, 0x00, 0x05, 1, 2, 3, 4, 5]);
    assert_eq!(parse(&bytes, LIMIT).unwrap().len, len);
}

/// The ClientHello rustls sends, made in memory: with aws-lc-rs it carries
/// an X25519MLKEM768 key share (group 0x11ec, 1216 bytes).
fn rustls_hello(max_fragment: Option<usize>) -> Vec<u8> {
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"acme-tls/1".to_vec()];
    config.max_fragment_size = max_fragment;
    common::hello_bytes(config, "pq.example.com")
}

#[test]
fn a_post_quantum_rustls_hello_routes_whole_and_fragmented() {
    let whole = rustls_hello(None);
    assert!(
        whole.windows(4).any(|w| w == [0x11, 0xec, 0x04, 0xc0]),
        "no X25519MLKEM768 key share in the rustls hello"
    );
    assert!(whole.len() > 1200, "{} bytes", whole.len());
    check_prefixes(&whole);
    let hello = parse(&whole, LIMIT).unwrap();
    assert_eq!(hello.server_name.as_deref(), Some(&b"pq.example.com"[..]));
    assert_eq!(alpn_of(&hello), ["h2", "acme-tls/1"]);

    let fragmented = rustls_hello(Some(300));
    assert!(
        fragmented.len() > whole.len(),
        "not fragmented into several records"
    );
    check_prefixes(&fragmented);
    assert_eq!(
        parse(&fragmented, LIMIT).unwrap().server_name,
        hello.server_name
    );
}

// ---------------------------------------------------------- hostile input

fn record(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![kind, 3, 1];
    out.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// The handshake message of a real capture (its single record's payload).
fn handshake_message(file: &str) -> Vec<u8> {
    common::capture(file)[5..].to_vec()
}

#[test]
fn non_tls_is_refused_on_the_first_byte() {
    for input in [
        &b"G"[..],
        b"GET / HTTP/1.1\r\n",
        b"SSH-2.0-x",
        &[0x80, 0x2e, 0x01],
        &[0x15],
        &[0x17, 3, 3],
    ] {
        assert_eq!(parse(input, LIMIT), Err(Inspect::NotTls), "{input:?}");
    }
    // A handshake record type with a non-TLS version byte.
    assert_eq!(parse(&[0x16, 0x02], LIMIT), Err(Inspect::NotTls));
}

#[test]
fn malformed_records_get_malformed() {
    let message = handshake_message("openssl_sni.bin");
    // A zero-length record.
    assert_eq!(parse(&record(22, &[]), LIMIT), Err(Inspect::Malformed));
    // A record announcing more than TLS allows.
    assert_eq!(
        parse(&[22, 3, 1, 0x40, 0x01], 1 << 17),
        Err(Inspect::Malformed)
    );
    // A handshake message that is not a ClientHello (ServerHello = 2).
    let mut server_hello = message.clone();
    server_hello[0] = 2;
    assert_eq!(
        parse(&record(22, &server_hello), LIMIT),
        Err(Inspect::Malformed)
    );
    // The hello interrupted by a ChangeCipherSpec record.
    let mut interrupted = record(22, &message[..100]);
    interrupted.extend(record(20, &[1]));
    assert_eq!(parse(&interrupted, LIMIT), Err(Inspect::Malformed));
    // A complete message whose body is garbage.
    let mut garbage = message.clone();
    for b in &mut garbage[4..] {
        *b = 0xff;
    }
    assert_eq!(parse(&record(22, &garbage), LIMIT), Err(Inspect::Malformed));
    // Extensions whose lengths overrun the message.
    let mut overrun = message.clone();
    let at = extensions_length_offset(&overrun);
    let declared = u16::from_be_bytes([overrun[at], overrun[at + 1]]);
    overrun[at..at + 2].copy_from_slice(&(declared + 10).to_be_bytes());
    assert_eq!(parse(&record(22, &overrun), LIMIT), Err(Inspect::Malformed));
    // An extension whose own length overruns the extensions block.
    let mut inner = message.clone();
    inner[at + 4] = 0xff;
    assert_eq!(parse(&record(22, &inner), LIMIT), Err(Inspect::Malformed));
}

/// Where the 2-byte extensions length sits in a ClientHello message.
fn extensions_length_offset(message: &[u8]) -> usize {
    let mut at = 4 + 2 + 32; // handshake header, version, random
    at += 1 + usize::from(message[at]); // session id
    at += 2 + usize::from(u16::from_be_bytes([message[at], message[at + 1]])); // cipher suites
    at += 1 + usize::from(message[at]); // compression methods
    at
}

#[test]
fn oversized_hellos_are_too_large_before_they_are_buffered() {
    // A handshake header announcing 64 KiB, in the first 9 bytes.
    let header = [22, 3, 1, 0x00, 0x04, 1, 0x01, 0x00, 0x00];
    assert_eq!(parse(&header, LIMIT), Err(Inspect::TooLarge));
    // A record announcing more than the limit allows.
    assert_eq!(parse(&[22, 3, 1, 0x3f, 0xff], 4096), Err(Inspect::TooLarge));
    // A real hello under a limit smaller than itself.
    let chrome = common::capture("chromium_pq.bin");
    assert_eq!(parse(&chrome, 1024), Err(Inspect::TooLarge));
    // Many one-byte records: the record headers alone exhaust the limit.
    let message = handshake_message("chromium_pq.bin");
    let trickled: Vec<u8> = message.iter().flat_map(|b| record(22, &[*b])).collect();
    assert!(trickled.len() > 4096);
    assert_eq!(parse(&trickled[..4096], 4096), Err(Inspect::TooLarge));
    // Within a limit that fits them, the same records are a valid hello.
    assert_eq!(
        parse(&trickled, LIMIT).unwrap().server_name.as_deref(),
        Some(&b"chrome.example.com"[..])
    );
}
