//! Properties of the ClientHello parser over generated input (proptest):
//! it never panics, on noise or on mutated hellos; a generated valid hello,
//! split into any records, parses to what was put in; every strict prefix
//! of it is `Incomplete`; and the incremental `Reassembler`, fed any cut of
//! any stream, answers what the one-shot `parse` answers on the same bytes;
//! and the hand-read fixed fields of a hello (version, random, session id,
//! cipher suites, compression methods, extensions block) accept exactly
//! what tls-parser's handshake parser accepts.

use proptest::prelude::*;
use snirelay::wire::client_hello::{
    ClientHello, Ech, Inspect, Reassembler, decode_handshake, parse,
};

const LIMIT: usize = 64 * 1024;

/// What a generated hello carries.
#[derive(Debug, Clone)]
struct Spec {
    server_name: Option<Vec<u8>>,
    alpn: Vec<Vec<u8>>,
    ech: bool,
    session_id: Vec<u8>,
    ciphers: Vec<u16>,
    /// Extensions the relay ignores: (type, body).
    other: Vec<(u16, Vec<u8>)>,
    /// Record payload sizes to cut the handshake message into.
    cuts: Vec<usize>,
}

fn u16be(n: usize) -> [u8; 2] {
    (n as u16).to_be_bytes()
}

fn extension(kind: u16, body: &[u8]) -> Vec<u8> {
    let mut e = kind.to_be_bytes().to_vec();
    e.extend_from_slice(&u16be(body.len()));
    e.extend_from_slice(body);
    e
}

/// The handshake message (header included) for `spec`.
fn handshake(spec: &Spec) -> Vec<u8> {
    let mut body = vec![0x03, 0x03];
    body.extend_from_slice(&[0x5a; 32]);
    body.push(spec.session_id.len() as u8);
    body.extend_from_slice(&spec.session_id);
    body.extend_from_slice(&u16be(spec.ciphers.len() * 2));
    for c in &spec.ciphers {
        body.extend_from_slice(&c.to_be_bytes());
    }
    body.extend_from_slice(&[0x01, 0x00]);

    let mut exts = Vec::new();
    for (kind, data) in &spec.other {
        exts.extend(extension(*kind, data));
    }
    if let Some(name) = &spec.server_name {
        let mut list = vec![0x00];
        list.extend_from_slice(&u16be(name.len()));
        list.extend_from_slice(name);
        let mut sni = u16be(list.len()).to_vec();
        sni.extend(list);
        exts.extend(extension(0, &sni));
    }
    if !spec.alpn.is_empty() {
        let mut list = Vec::new();
        for p in &spec.alpn {
            list.push(p.len() as u8);
            list.extend_from_slice(p);
        }
        let mut alpn = u16be(list.len()).to_vec();
        alpn.extend(list);
        exts.extend(extension(16, &alpn));
    }
    if spec.ech {
        // An outer ECHClientHello: HKDF-SHA256, AES-128-GCM, config id 7,
        // a 32-byte enc and a 3-byte payload.
        let mut ech = vec![0x00, 0x00, 0x01, 0x00, 0x01, 7, 0x00, 32];
        ech.extend_from_slice(&[0xec; 32]);
        ech.extend_from_slice(&[0x00, 0x03, 0x01, 0x02, 0x03]);
        exts.extend(extension(0xfe0d, &ech));
    }
    body.extend_from_slice(&u16be(exts.len()));
    body.extend(exts);

    let mut message = vec![0x01];
    message.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    message.extend(body);
    message
}

/// The TLS records carrying `message`, cut at the spec's sizes.
fn records(spec: &Spec, message: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = message;
    let mut cuts = spec.cuts.iter().cycle();
    while !rest.is_empty() {
        let n = (*cuts.next().unwrap()).clamp(1, rest.len());
        out.extend_from_slice(&[0x16, 0x03, 0x01]);
        out.extend_from_slice(&u16be(n));
        out.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
    }
    out
}

fn spec() -> impl Strategy<Value = Spec> {
    let name = proptest::collection::vec(
        prop_oneof![
            b'a'..=b'z',
            b'A'..=b'Z',
            b'0'..=b'9',
            Just(b'.'),
            Just(b'-')
        ],
        1..80,
    );
    let proto = proptest::collection::vec(any::<u8>(), 1..20);
    // Types the parser decodes or checks itself (SNI, ALPN, ECH, and the
    // lists whose framing it verifies: supported_groups, ec_point_formats,
    // signature_algorithms(_cert), supported_versions, psk_key_exchange_modes,
    // key_share) are excluded here: arbitrary bytes are not a valid one.
    let other_kind = any::<u16>().prop_filter("decoded types", |k| {
        ![0, 10, 11, 13, 16, 43, 45, 50, 51, 0xfe0d].contains(k)
    });
    (
        proptest::option::of(name),
        proptest::collection::vec(proto, 0..5),
        any::<bool>(),
        proptest::collection::vec(any::<u8>(), 0..=32),
        proptest::collection::vec(any::<u16>(), 1..20),
        // Keyed by type: a type twice is a duplicated extension (malformed).
        proptest::collection::btree_map(
            other_kind,
            proptest::collection::vec(any::<u8>(), 0..64),
            0..6,
        )
        .prop_map(|m| m.into_iter().collect::<Vec<_>>()),
        proptest::collection::vec(1usize..400, 1..4),
    )
        .prop_map(
            |(server_name, alpn, ech, session_id, ciphers, other, cuts)| Spec {
                server_name,
                alpn,
                ech,
                session_id,
                ciphers,
                other,
                cuts,
            },
        )
}

/// Feeds `stream` to a reassembler in reads of the given sizes (cycled),
/// never more than `limit` bytes in all, as `inspect` reads; returns the
/// first answer other than `Incomplete` (or the last) and the bytes fed.
fn feed(stream: &[u8], reads: &[usize], limit: usize) -> (Result<ClientHello, Inspect>, usize) {
    let mut reader = Reassembler::new(limit);
    let mut fed = 0;
    let mut reads = reads.iter().cycle();
    loop {
        let room = limit.saturating_sub(fed).max(1);
        fed += (*reads.next().unwrap()).min(room).min(stream.len() - fed);
        let answer = reader.feed(&stream[..fed]);
        if answer != Err(Inspect::Incomplete) || fed == stream.len() {
            return (answer, fed);
        }
    }
}

/// The fixed fields as tls-parser reads them (the relay's decoder before it
/// read them by hand): `legacy_version` and the extensions block, or `None`
/// for a message the relay must refuse whatever its extensions.
fn fixed_fields_by_tls_parser(message: &[u8]) -> Option<(u16, Vec<u8>)> {
    use tls_parser::{TlsMessage, TlsMessageHandshake, parse_tls_message_handshake};
    let Ok((_, TlsMessage::Handshake(TlsMessageHandshake::ClientHello(hello)))) =
        parse_tls_message_handshake(message)
    else {
        return None;
    };
    if hello.ciphers.is_empty() || hello.comp.is_empty() {
        return None;
    }
    // tls-parser reads an extensions block that overruns the message as
    // "no extensions": the message must end exactly where its fields do.
    let fixed = 4
        + 2
        + 32
        + 1
        + hello.session_id.map_or(0, <[u8]>::len)
        + 2
        + 2 * hello.ciphers.len()
        + 1
        + hello.comp.len();
    let expected = fixed + hello.ext.map_or(0, |ext| 2 + ext.len());
    (message.len() == expected).then(|| (hello.version.0, hello.ext.unwrap_or_default().to_vec()))
}

/// A plain hello with these fixed fields' outcome: `version` and this
/// extensions block after one cipher suite and null compression.
fn canonical(version: u16, extensions: &[u8]) -> Vec<u8> {
    let mut body = version.to_be_bytes().to_vec();
    body.extend_from_slice(&[0; 32]);
    body.extend_from_slice(&[0, 0, 2, 0x13, 0x01, 1, 0]);
    body.extend_from_slice(&u16be(extensions.len()));
    body.extend_from_slice(extensions);
    let mut message = vec![0x01, 0, (body.len() >> 8) as u8, body.len() as u8];
    message.extend(body);
    message
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Mutated hellos (bytes changed, cut short or lengthened) decode as
    /// tls-parser's reading of their fixed fields says: refused when it
    /// refuses them, else exactly as a plain hello with the same version and
    /// extensions block.
    #[test]
    fn decode_reads_the_fixed_fields_as_tls_parser_does(
        spec in spec(),
        flips in proptest::collection::vec((0usize..96, any::<u8>()), 0..4),
        cut in any::<prop::sample::Index>(),
        extra in proptest::collection::vec(any::<u8>(), 0..3),
    ) {
        let mut message = handshake(&spec);
        for (at, value) in flips {
            let i = at.min(message.len() - 1);
            message[i] = value;
        }
        let end = cut.index(message.len() + 1).max(message.len().saturating_sub(8));
        message.truncate(end);
        message.extend(extra);
        let decoded = decode_handshake(&message).map(|hello| ClientHello { len: 0, ..hello });
        match fixed_fields_by_tls_parser(&message) {
            None => prop_assert_eq!(decoded, Err(Inspect::Malformed)),
            Some((version, extensions)) => {
                let plain = decode_handshake(&canonical(version, &extensions))
                    .map(|hello| ClientHello { len: 0, ..hello });
                prop_assert_eq!(decoded, plain);
            }
        }
    }

    #[test]
    fn the_reassembler_fed_any_cut_of_a_valid_hello_answers_like_parse(
        spec in spec(),
        reads in proptest::collection::vec(1usize..300, 1..8),
    ) {
        let bytes = records(&spec, &handshake(&spec));
        let (answer, fed) = feed(&bytes, &reads, LIMIT);
        prop_assert_eq!(fed, bytes.len());
        prop_assert_eq!(answer, parse(&bytes, LIMIT));
    }

    #[test]
    fn the_reassembler_fed_any_cut_of_noise_answers_like_parse(
        spec in spec(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8),
        reads in proptest::collection::vec(1usize..100, 1..8),
        limit in 0usize..4096,
    ) {
        let mut bytes = records(&spec, &handshake(&spec));
        for (at, value) in flips {
            let i = at.index(bytes.len());
            bytes[i] = value;
        }
        let (answer, fed) = feed(&bytes, &reads, limit);
        prop_assert_eq!(&answer, &parse(&bytes[..fed], limit));
        if answer == Err(Inspect::Incomplete) {
            prop_assert!(fed < limit, "wants more than the limit");
        }
    }

    #[test]
    fn valid_hellos_parse_and_every_strict_prefix_is_incomplete(spec in spec()) {
        let bytes = records(&spec, &handshake(&spec));
        let expected = ClientHello {
            server_name: spec.server_name.clone(),
            alpn: spec.alpn.clone(),
            ech: spec.ech.then_some(Ech::Outer { config_id: 7 }),
            // No supported_versions: the legacy_version, TLS 1.2.
            version: Some(0x0303),
            len: bytes.len(),
        };
        prop_assert_eq!(parse(&bytes, LIMIT), Ok(expected));
        for end in 0..bytes.len() {
            prop_assert_eq!(parse(&bytes[..end], LIMIT), Err(Inspect::Incomplete), "prefix {}", end);
        }
    }

    #[test]
    fn the_parser_never_panics_on_noise(bytes in proptest::collection::vec(any::<u8>(), 0..2048), limit in 0usize..4096) {
        let _ = parse(&bytes, limit);
    }

    #[test]
    fn the_parser_never_panics_on_mutated_hellos(
        spec in spec(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
        limit in 512usize..LIMIT,
    ) {
        let mut bytes = records(&spec, &handshake(&spec));
        for (at, value) in flips {
            let i = at.index(bytes.len());
            bytes[i] = value;
        }
        let end = cut.index(bytes.len() + 1);
        if let Ok(hello) = parse(&bytes[..end], limit) {
            prop_assert!(hello.len <= end && hello.len <= limit);
        }
    }
}

/// cargo-fuzz `client_hello`, crash-1489f923…: input `00 00` (limit 0, no
/// bytes). An empty buffer is `Incomplete` at any limit; the harness's
/// "incomplete only below the limit" check was wrong for it, not the parser.
/// The check that matters holds for every non-empty buffer: once `limit`
/// bytes are held and the hello is still open, the verdict is `TooLarge`.
#[test]
fn fuzz_crash_empty_input_is_incomplete_and_a_full_buffer_is_too_large() {
    assert_eq!(parse(&[], 0), Err(Inspect::Incomplete));
    assert_eq!(parse(&[], 512), Err(Inspect::Incomplete));
    assert_eq!(parse(&[0x16], 1), Err(Inspect::TooLarge));
    assert_eq!(parse(&[0x16, 0x03, 0x01], 3), Err(Inspect::TooLarge));
}
