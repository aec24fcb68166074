//! Golden, prefix, order and hostile-input tests for the QUIC Initial
//! parser (`snirelay::quic::initial`): real first flights captured from
//! Chromium, ngtcp2 and aioquic (v1 and v2; tests/data/quic, see its
//! README), and Initials sealed here with rustls' Initial keys around a
//! ClientHello rustls builds, to cut, shuffle and corrupt at will.

use std::sync::Arc;

use rustls::Side;
use rustls::pki_types::ServerName;
use snirelay::config::DEFAULT_MAX_CLIENT_HELLO_BYTES as LIMIT;
use snirelay::quic::initial::{HelloLimits, Parser, QuicHello, Verdict, parse};
use snirelay::quic::seal::seal_initial;
use snirelay::quic::{Version, initial_keys};

fn limits() -> HelloLimits {
    HelloLimits::for_hello_bytes(LIMIT)
}

include!("common/quic_capture.rs");

fn parse_all(datagrams: &[Vec<u8>], limits: HelloLimits) -> Result<QuicHello, Verdict> {
    parse(datagrams.iter().map(Vec::as_slice), limits)
}

fn sni(hello: &QuicHello) -> &str {
    std::str::from_utf8(hello.hello.server_name.as_deref().unwrap()).unwrap()
}

struct Golden {
    file: &'static str,
    sni: &'static str,
    version: Version,
    datagrams: usize,
}

const GOLDEN: &[Golden] = &[
    Golden {
        file: "chromium",
        sni: "chrome.example.com",
        version: Version::V1,
        datagrams: 2,
    },
    Golden {
        file: "ngtcp2",
        // The GnuTLS example client names a numeric host "localhost".
        sni: "localhost",
        version: Version::V1,
        datagrams: 1,
    },
    Golden {
        file: "aioquic_v1",
        sni: "aioquic.example.com",
        version: Version::V1,
        datagrams: 1,
    },
    Golden {
        file: "aioquic_v2",
        sni: "aioquic-v2.example.com",
        version: Version::V2,
        datagrams: 1,
    },
];

#[test]
fn captures_yield_their_sni_and_version() {
    for golden in GOLDEN {
        let datagrams = capture(golden.file);
        assert_eq!(datagrams.len(), golden.datagrams, "{}", golden.file);
        let hello =
            parse_all(&datagrams, limits()).unwrap_or_else(|v| panic!("{}: {v:?}", golden.file));
        assert_eq!(sni(&hello), golden.sni, "{}", golden.file);
        assert_eq!(hello.version, golden.version, "{}", golden.file);
        assert_eq!(hello.datagrams, golden.datagrams, "{}", golden.file);
        assert!(
            hello.hello.alpn.iter().any(|p| p == b"h3"),
            "{}: ALPN {:?}",
            golden.file,
            hello.hello.alpn
        );
        assert_eq!(hello.hello.version, Some(0x0304), "{}", golden.file);
        // The connection IDs are the ones on the wire.
        let first = &datagrams[0];
        let dcid_len = usize::from(first[5]);
        assert_eq!(hello.dcid.as_bytes(), &first[6..6 + dcid_len]);
    }
}

#[test]
fn chromium_sends_a_post_quantum_hello_in_two_initials() {
    let datagrams = capture("chromium");
    let hello = parse_all(&datagrams, limits()).unwrap();
    // Larger than one datagram: X25519MLKEM768's key share alone is 1216 B.
    assert!(hello.hello.len > 1200, "{}", hello.hello.len);
    // Neither datagram alone is enough, in either order.
    for datagram in &datagrams {
        assert_eq!(
            parse_all(std::slice::from_ref(datagram), limits()),
            Err(Verdict::Incomplete)
        );
    }
}

/// Every strict prefix of the datagram sequence is `Incomplete`; a first
/// datagram cut short gets the exact refusal (a datagram is never cut on
/// the wire, so what is missing was never sent); a later one cut short is
/// noise the flow survives: discarded, `Incomplete`, and the whole datagram
/// after it still completes the flow as it would have.
fn check_prefixes(name: &str, datagrams: &[Vec<u8>]) {
    for n in 0..datagrams.len() {
        assert_eq!(
            parse_all(&datagrams[..n], limits()),
            Err(Verdict::Incomplete),
            "{name}: first {n} datagrams"
        );
        for cut in 0..datagrams[n].len() {
            let mut parser = Parser::new(limits());
            for whole in &datagrams[..n] {
                assert_eq!(parser.feed(whole), Err(Verdict::Incomplete));
            }
            let expected = if n == 0 && cut < 5 {
                // Not even a version: not a QUIC long header.
                Verdict::NotQuic
            } else if n == 0 {
                Verdict::Malformed
            } else {
                Verdict::Incomplete
            };
            assert_eq!(
                parser.feed(&datagrams[n][..cut]),
                Err(expected),
                "{name}: datagram {n} cut at {cut}"
            );
            if n > 0 {
                // The flow goes on as if the cut datagram had not come.
                let mut answer = Err(Verdict::Incomplete);
                for whole in &datagrams[n..] {
                    answer = parser.feed(whole);
                }
                assert_eq!(
                    answer.map(|hello| hello.hello.server_name),
                    parse_all(datagrams, limits()).map(|hello| hello.hello.server_name),
                    "{name}: after datagram {n} cut at {cut}"
                );
            }
        }
    }
}

#[test]
fn every_strict_prefix_of_a_capture_is_incomplete_or_refused_exactly() {
    for golden in GOLDEN {
        check_prefixes(golden.file, &capture(golden.file));
    }
}

/// Calls `f` with every permutation of `items` (Heap's algorithm).
fn permutations<T: Clone>(items: &[T], f: &mut impl FnMut(&[T])) {
    fn heap<T>(k: usize, items: &mut Vec<T>, f: &mut impl FnMut(&[T])) {
        if k <= 1 {
            f(items);
            return;
        }
        for i in 0..k - 1 {
            heap(k - 1, items, f);
            let j = if k % 2 == 0 { i } else { 0 };
            items.swap(j, k - 1);
        }
        heap(k - 1, items, f);
    }
    let mut items = items.to_vec();
    let k = items.len();
    heap(k, &mut items, f);
}

#[test]
fn every_order_of_the_chromium_datagrams_gives_the_same_hello() {
    let datagrams = capture("chromium");
    let expected = parse_all(&datagrams, limits()).unwrap();
    let mut orders = 0;
    permutations(&datagrams, &mut |order| {
        let hello = parse_all(order, limits()).unwrap();
        assert_eq!(hello.hello, expected.hello);
        orders += 1;
    });
    assert_eq!(orders, 2);
}

// ---- Initials sealed here --------------------------------------------------

const DCID: &[u8] = &[0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08];
const SCID: &[u8] = &[0x11, 0x22, 0x33, 0x44];

/// A ClientHello as rustls' QUIC client sends it (CRYPTO data, no record):
/// TLS 1.3, its default groups (X25519MLKEM768 first: about 1.4 KB), ALPN
/// h3, and SNI unless `name` is an IP address.
fn rustls_hello(version: Version, name: &str) -> Vec<u8> {
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h3".to_vec()];
    let version = match version {
        Version::V1 => rustls::quic::Version::V1,
        Version::V2 => rustls::quic::Version::V2,
    };
    let name = ServerName::try_from(name.to_owned()).unwrap();
    // Transport parameters: initial_max_data = 0 is enough for a hello.
    let params = vec![0x04, 0x01, 0x00];
    let mut conn =
        rustls::quic::ClientConnection::new(Arc::new(config), version, name, params).unwrap();
    let mut hello = Vec::new();
    conn.write_hs(&mut hello);
    assert_eq!(hello[0], 1, "a ClientHello");
    hello
}

fn varint(value: u64, out: &mut Vec<u8>) {
    match value {
        0..0x40 => out.push(value as u8),
        0x40..0x4000 => out.extend_from_slice(&(value as u16 | 0x4000).to_be_bytes()),
        _ => out.extend_from_slice(&(value as u32 | 0x8000_0000).to_be_bytes()),
    }
}

fn crypto_frame(offset: usize, data: &[u8]) -> Vec<u8> {
    let mut frame = vec![0x06];
    varint(offset as u64, &mut frame);
    varint(data.len() as u64, &mut frame);
    frame.extend_from_slice(data);
    frame
}

/// A client Initial packet with `frames` (padded so that the packet alone
/// fills `pad_to` bytes), sealed with the client's Initial keys for `dcid`.
fn seal(version: Version, dcid: &[u8], pn: u32, frames: &[u8], pad_to: usize) -> Vec<u8> {
    let keys = initial_keys(version, dcid, Side::Client);
    seal_initial(version, &keys.local, dcid, SCID, pn, frames, pad_to).unwrap()
}

/// The hello cut into `pieces` CRYPTO frames, one Initial datagram each.
fn split_hello(version: Version, hello: &[u8], pieces: usize) -> Vec<Vec<u8>> {
    let size = hello.len().div_ceil(pieces);
    hello
        .chunks(size)
        .enumerate()
        .map(|(i, chunk)| {
            seal(
                version,
                DCID,
                i as u32,
                &crypto_frame(i * size, chunk),
                1200,
            )
        })
        .collect()
}

#[test]
fn a_sealed_v1_and_v2_hello_in_four_datagrams_parses_in_every_order() {
    for version in [Version::V1, Version::V2] {
        let hello = rustls_hello(version, "sealed.example.com");
        let datagrams = split_hello(version, &hello, 4);
        let mut orders = 0;
        permutations(&datagrams, &mut |order| {
            let parsed = parse_all(order, limits()).unwrap();
            assert_eq!(sni(&parsed), "sealed.example.com");
            assert_eq!(parsed.version, version);
            assert_eq!(parsed.hello.len, hello.len());
            orders += 1;
        });
        assert_eq!(orders, 24);
        check_prefixes("sealed", &datagrams);
    }
}

#[test]
fn shuffled_overlapping_crypto_frames_in_one_packet_reassemble() {
    let hello = rustls_hello(Version::V1, "shuffle.example.com");
    // Frames of 100 bytes every 70 bytes (30 bytes of each overlap the
    // next), written last to first, with PING and ACK (plain and ECN)
    // frames between them.
    let mut frames = Vec::new();
    let starts: Vec<usize> = (0..hello.len()).step_by(70).collect();
    for &start in starts.iter().rev() {
        let end = (start + 100).min(hello.len());
        frames.extend(crypto_frame(start, &hello[start..end]));
        frames.push(0x01);
        // ACK: largest 5, delay 0, 1 more range, first range 1, gap 0, length 1.
        frames.extend_from_slice(&[0x02, 0x05, 0x00, 0x01, 0x01, 0x00, 0x01]);
        // ACK_ECN: largest 0, delay 0, no more ranges, first range 0, 3 counts.
        frames.extend_from_slice(&[0x03, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02, 0x03]);
    }
    let datagram = seal(Version::V1, DCID, 0, &frames, 1200);
    let parsed = parse_all(&[datagram], limits()).unwrap();
    assert_eq!(sni(&parsed), "shuffle.example.com");
}

#[test]
fn coalesced_0rtt_handshake_and_padding_after_the_initial_are_skipped() {
    let hello = rustls_hello(Version::V1, "coalesced.example.com");
    let mut datagram = seal(Version::V1, DCID, 0, &crypto_frame(0, &hello), 0);
    // A 0-RTT packet (type bits 01) and a Handshake one (10) of the same
    // connection, each skipped by its Length without being decrypted.
    for first in [0xd3u8, 0xe3] {
        datagram.push(first);
        datagram.extend_from_slice(&1u32.to_be_bytes());
        datagram.push(DCID.len() as u8);
        datagram.extend_from_slice(DCID);
        datagram.push(0);
        datagram.extend_from_slice(&[0x40, 40]);
        datagram.extend_from_slice(&[0xaa; 40]);
    }
    // Zero bytes to 1200: read as a short header that ends the datagram.
    datagram.resize(datagram.len().max(1200) + 10, 0);
    let parsed = parse_all(&[datagram], limits()).unwrap();
    assert_eq!(sni(&parsed), "coalesced.example.com");
}

#[test]
fn a_hello_without_a_name_is_a_hello_with_no_sni() {
    let hello = rustls_hello(Version::V1, "192.0.2.1");
    let parsed = parse_all(&split_hello(Version::V1, &hello, 2), limits()).unwrap();
    assert_eq!(parsed.hello.server_name, None);
}

// ---- hostile inputs, each with its exact verdict ---------------------------

fn one(datagram: Vec<u8>) -> Result<QuicHello, Verdict> {
    parse_all(&[datagram], limits())
}

#[test]
fn not_quic_and_unknown_versions_are_told_apart() {
    assert_eq!(one(vec![]), Err(Verdict::NotQuic));
    assert_eq!(one(b"GET / HTTP/1.1\r\n".to_vec()), Err(Verdict::NotQuic));
    // A short header as a flow's first datagram.
    assert_eq!(one(vec![0x40; 1200]), Err(Verdict::NotQuic));
    // Version Negotiation (version 0): only servers send it.
    assert_eq!(one(vec![0x80, 0, 0, 0, 0, 0, 0]), Err(Verdict::NotQuic));
    // A draft version, and a GREASE one (RFC 9000 §15).
    let mut draft = capture("ngtcp2").remove(0);
    draft[1..5].copy_from_slice(&0xff00_001du32.to_be_bytes());
    assert_eq!(one(draft), Err(Verdict::UnknownVersion(0xff00_001d)));
    assert_eq!(
        one(vec![0xc0, 0x1a, 0x2a, 0x3a, 0x4a]),
        Err(Verdict::UnknownVersion(0x1a2a_3a4a))
    );
}

#[test]
fn corrupt_or_rule_breaking_initials_are_malformed() {
    let hello = rustls_hello(Version::V1, "bad.example.com");
    let good = seal(Version::V1, DCID, 0, &crypto_frame(0, &hello), 1200);
    assert!(one(good.clone()).is_ok());
    // A flipped ciphertext bit fails authentication.
    let mut flipped = good.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    assert_eq!(one(flipped), Err(Verdict::Malformed));
    // An Initial in a datagram under 1200 bytes.
    assert_eq!(
        one(seal(
            Version::V1,
            DCID,
            0,
            &crypto_frame(0, &hello[..100]),
            0
        )),
        Err(Verdict::Malformed)
    );
    // A Destination Connection ID shorter than 8 bytes.
    assert_eq!(
        one(seal(
            Version::V1,
            &DCID[..7],
            0,
            &crypto_frame(0, &hello),
            1200
        )),
        Err(Verdict::Malformed)
    );
    // A STREAM frame (0x08) in an Initial; a CONNECTION_CLOSE (0x1c).
    for frame in [0x08u8, 0x1c] {
        let mut frames = crypto_frame(0, &hello[..100]);
        frames.extend_from_slice(&[frame, 0, 0, 0]);
        assert_eq!(
            one(seal(Version::V1, DCID, 0, &frames, 1200)),
            Err(Verdict::Malformed),
            "frame {frame:#x}"
        );
    }
    // A frame cut short inside the packet.
    assert_eq!(
        one(seal(Version::V1, DCID, 0, &[0x06, 0x00, 0x40], 0)),
        Err(Verdict::Malformed)
    );
    // CRYPTO data that is not a ClientHello (a ServerHello's type, 2).
    let mut server_hello = hello.clone();
    server_hello[0] = 2;
    assert_eq!(
        one(seal(
            Version::V1,
            DCID,
            0,
            &crypto_frame(0, &server_hello),
            1200
        )),
        Err(Verdict::Malformed)
    );
    // A Retry packet from a client (type bits 11 in v1).
    let mut retry = good.clone();
    retry[0] = 0xf0;
    assert_eq!(one(retry), Err(Verdict::Malformed));
}

#[test]
fn conflicting_and_surplus_crypto_bytes_are_malformed() {
    let hello = rustls_hello(Version::V1, "conflict.example.com");
    let mut datagrams = split_hello(Version::V1, &hello, 2);
    // The same bytes again (a retransmission) are fine...
    let again = seal(Version::V1, DCID, 7, &crypto_frame(0, &hello[..50]), 1200);
    datagrams.insert(1, again);
    assert!(parse_all(&datagrams, limits()).is_ok());
    // ...different ones for the same offsets are not.
    let mut other = hello[..50].to_vec();
    other[40] ^= 0xff;
    let conflict = seal(Version::V1, DCID, 8, &crypto_frame(0, &other), 1200);
    datagrams[1] = conflict;
    assert_eq!(parse_all(&datagrams, limits()), Err(Verdict::Malformed));
    // Bytes past the message's end.
    let mut surplus = hello.clone();
    surplus.push(0);
    assert_eq!(
        one(seal(Version::V1, DCID, 0, &crypto_frame(0, &surplus), 1200)),
        Err(Verdict::Malformed)
    );
}

#[test]
fn noise_after_an_authenticated_initial_is_discarded_and_the_flow_goes_on() {
    let hello = rustls_hello(Version::V1, "change.example.com");
    let datagrams = split_hello(Version::V1, &hello, 2);
    let other_dcid = [9u8; 8];
    let second = seal(
        Version::V1,
        &other_dcid,
        1,
        &crypto_frame(700, &hello[700..]),
        1200,
    );
    let v2 = seal(
        Version::V2,
        DCID,
        1,
        &crypto_frame(700, &hello[700..]),
        1200,
    );
    // After an authenticated Initial each is noise from the client's
    // address (it cannot be authenticated as this flow's): discarded, and
    // the flow completes with its own next datagram. (A short header as a
    // first datagram is `not_quic`.)
    assert_eq!(one(vec![0x40; 1200]), Err(Verdict::NotQuic));
    for noise in [second, v2, vec![0x40; 1200]] {
        let mut parser = Parser::new(limits());
        assert_eq!(parser.feed(&datagrams[0]), Err(Verdict::Incomplete));
        assert_eq!(parser.feed(&noise), Err(Verdict::Incomplete));
        assert_eq!(parser.discarded(), 1);
        let hello = parser.feed(&datagrams[1]).unwrap();
        assert_eq!(sni(&hello), "change.example.com");
    }
    // A flipped bit in a later datagram fails authentication: discarded.
    let mut flipped = datagrams[1].clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    let mut parser = Parser::new(limits());
    assert_eq!(parser.feed(&datagrams[0]), Err(Verdict::Incomplete));
    assert_eq!(parser.feed(&flipped), Err(Verdict::Incomplete));
    assert_eq!(parser.discarded(), 1);
    assert!(parser.feed(&datagrams[1]).is_ok());
}

#[test]
fn limits_on_hello_bytes_offsets_and_datagrams_answer_too_large() {
    let hello = rustls_hello(Version::V1, "large.example.com");
    let datagrams = split_hello(Version::V1, &hello, 2);
    // The message announces more than the limit.
    let small = HelloLimits::for_hello_bytes(hello.len() - 1);
    assert_eq!(parse_all(&datagrams, small), Err(Verdict::TooLarge));
    // A CRYPTO frame ending past the limit, before any header is in.
    let far = seal(
        Version::V1,
        DCID,
        0,
        &crypto_frame(LIMIT - 1, &[0, 0]),
        1200,
    );
    assert_eq!(one(far), Err(Verdict::TooLarge));
    // Datagrams that never complete the hello: PING-only Initials.
    let ping = seal(Version::V1, DCID, 0, &[0x01], 1200);
    let limits = limits();
    for cap in [
        HelloLimits {
            datagrams: 3,
            ..limits
        },
        limits,
    ] {
        let mut parser = Parser::new(cap);
        for _ in 0..cap.datagrams {
            assert_eq!(parser.feed(&ping), Err(Verdict::Incomplete));
        }
        assert_eq!(parser.feed(&ping), Err(Verdict::TooLarge));
    }
    let mut parser = Parser::new(HelloLimits {
        datagrams: 1,
        ..limits
    });
    assert_eq!(parser.feed(&ping), Err(Verdict::Incomplete));
    assert_eq!(parser.feed(&ping), Err(Verdict::TooLarge));
    // The verdict stays, whatever comes next.
    assert_eq!(parser.feed(&datagrams[0]), Err(Verdict::TooLarge));
    // Bytes: one datagram larger than the flow may hold (an Initial and
    // zero bytes after it).
    let mut huge = seal(Version::V1, DCID, 0, &[0x01], 1200);
    huge.resize(limits.held_bytes + 1, 0);
    assert_eq!(one(huge), Err(Verdict::TooLarge));
}

#[test]
fn a_hello_once_given_is_given_again() {
    let datagrams = capture("aioquic_v1");
    let mut parser = Parser::new(limits());
    let first = parser.feed(&datagrams[0]).unwrap();
    assert_eq!(parser.feed(b"anything").unwrap(), first);
    assert_eq!(parser.datagrams(), 1);
}

/// The protected client Initial of RFC 9001 Appendix A.2 and of RFC 9369
/// Appendix A.2 (tests/data/quic, see its README): the parser removes their
/// protection and reads the appendix's ClientHello (241 bytes, for
/// example.com, in one CRYPTO frame before 917 PADDING bytes).
#[test]
fn the_rfc_appendix_client_initials_yield_example_com() {
    for (file, version) in [("rfc9001_a2", Version::V1), ("rfc9369_a2", Version::V2)] {
        let datagrams = capture(file);
        assert_eq!(datagrams.len(), 1);
        assert_eq!(datagrams[0].len(), 1200, "{file}");
        let hello = parse_all(&datagrams, limits()).unwrap_or_else(|v| panic!("{file}: {v:?}"));
        assert_eq!(sni(&hello), "example.com", "{file}");
        assert_eq!(hello.version, version, "{file}");
        assert_eq!(hello.hello.len, 241, "{file}");
        assert_eq!(
            hello.dcid.as_bytes(),
            [0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08]
        );
        assert_eq!(hello.scid.as_bytes(), b"");
        assert_eq!(hello.datagrams, 1);
        check_prefixes(file, &datagrams);
    }
}
