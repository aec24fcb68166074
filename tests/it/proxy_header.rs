//! The inbound PROXY header parser (`proxy::wire::parse`) as a pure function:
//! prefix tests for every header shape, and exact verdicts for hostile input.

use std::net::SocketAddr;

use snirelay::proxy::outbound::{self, Announcement, Outbound};
use snirelay::wire::proxy::{Announced, Invalid, Parse, ProxyVersion, Sniff, parse, sniff};

fn addr(text: &str) -> SocketAddr {
    text.parse().unwrap()
}

fn v2(crc: bool, hops: Option<u8>, source: &str, destination: &str) -> Vec<u8> {
    let mut a = Announcement::new(
        addr(source),
        addr(destination),
        None,
        Some("app.example.com"),
        123456789,
    );
    a.hops = hops;
    outbound::header(Outbound::V2, crc, &a).unwrap()
}

/// A v2 header as HAProxy 2.6 sends it with `send-proxy-v2 proxy-v2-options
/// crc32c` (built by hand, byte by byte, from the spec).
fn v2_by_hand() -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.extend([0x21, 0x11, 0, 12 + 7]);
    h.extend([192, 0, 2, 1, 198, 51, 100, 2, 0x1F, 0x90, 0x01, 0xBB]);
    h.extend([0x03, 0, 4, 0, 0, 0, 0]);
    let sum = crc32c::crc32c(&h);
    let n = h.len();
    h[n - 4..].copy_from_slice(&sum.to_be_bytes());
    h
}

/// A `PROXY UNKNOWN` header of exactly `len` bytes (filler after UNKNOWN
/// is allowed and ignored).
fn v1_unknown(len: usize) -> Vec<u8> {
    let mut h = b"PROXY UNKNOWN ".to_vec();
    h.resize(len - 2, b'x');
    h.extend(b"\r\n");
    h
}

/// Every valid header this suite knows, with what it must parse to.
fn valid_headers() -> Vec<(Vec<u8>, Announced)> {
    let proxy4 = Announced::Proxy {
        source: addr("198.51.100.7:50000"),
        destination: addr("192.0.2.1:443"),
    };
    let proxy6 = Announced::Proxy {
        source: addr("[2001:db8::7]:50000"),
        destination: addr("[2001:db8::1]:443"),
    };
    vec![
        (v2(false, None, "198.51.100.7:50000", "192.0.2.1:443"), proxy4),
        (v2(true, Some(2), "198.51.100.7:50000", "192.0.2.1:443"), proxy4),
        (v2(true, None, "[2001:db8::7]:50000", "[2001:db8::1]:443"), proxy6),
        (outbound::local_header(Outbound::V2, false).unwrap(), Announced::Local),
        (outbound::local_header(Outbound::V2, true).unwrap(), Announced::Local),
        (
            v2_by_hand(),
            Announced::Proxy {
                source: addr("192.0.2.1:8080"),
                destination: addr("198.51.100.2:443"),
            },
        ),
        (b"PROXY TCP4 198.51.100.7 192.0.2.1 50000 443\r\n".to_vec(), proxy4),
        (b"PROXY TCP6 2001:db8::7 2001:db8::1 50000 443\r\n".to_vec(), proxy6),
        (b"PROXY UNKNOWN\r\n".to_vec(), Announced::Unknown),
        (
            b"PROXY UNKNOWN ffff:f...f:ffff ffff:f...f:ffff 65535 65535\r\n".to_vec(),
            Announced::Unknown,
        ),
        (
            // The longest TCP header: 104 bytes.
            b"PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n".to_vec(),
            Announced::Proxy {
                source: addr("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535"),
                destination: addr("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535"),
            },
        ),
        // The longest v1 header the spec allows: 107 bytes.
        (v1_unknown(107), Announced::Unknown),
        // PROXY over UDP: a valid combination the relay does not carry,
        // so it falls back to UNSPEC (the connection's own addresses).
        (v2_family(0x21, 0x12, &[0; 12]), Announced::Unknown),
        // LOCAL with an IPv6 family byte over a 12-byte block: the family
        // is ignored and the declared length skipped.
        (v2_family(0x20, 0x21, &[0; 12]), Announced::Local),
        (
            b"PROXY TCP4 198.51.100.7 192.0.2.1 0 443\r\n".to_vec(),
            Announced::Proxy {
                source: addr("198.51.100.7:0"),
                destination: addr("192.0.2.1:443"),
            },
        ),
    ]
}

/// A v2 header with this version/command and family/protocol byte and
/// `block` after the fixed part.
fn v2_family(version_command: u8, family_protocol: u8, block: &[u8]) -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.extend([version_command, family_protocol]);
    h.extend((block.len() as u16).to_be_bytes());
    h.extend(block);
    h
}

#[test]
fn every_strict_prefix_of_a_valid_header_is_incomplete() {
    for (header, _) in valid_headers() {
        for end in 0..header.len() {
            assert_eq!(
                parse(&header[..end]),
                Parse::Incomplete,
                "prefix of {end} bytes of {:?}",
                String::from_utf8_lossy(&header)
            );
        }
    }
}

#[test]
fn a_whole_header_parses_to_its_addresses_and_length_even_with_bytes_after_it() {
    let hello = b"\x16\x03\x01\x00\x05hello";
    for (header, expected) in valid_headers() {
        let mut stream = header.clone();
        stream.extend_from_slice(hello);
        for bytes in [&header[..], &stream[..]] {
            match parse(bytes) {
                Parse::Header(h) => {
                    assert_eq!(
                        h.addresses,
                        expected,
                        "{:?}",
                        String::from_utf8_lossy(&header)
                    );
                    assert_eq!(h.len, header.len());
                }
                other => panic!("{other:?} for {:?}", String::from_utf8_lossy(&header)),
            }
        }
    }
    assert_eq!(valid_headers()[8].0.len(), 15);
    assert_eq!(valid_headers()[10].0.len(), 104);
    assert_eq!(valid_headers()[11].0.len(), 107);
}

#[test]
fn headers_report_version_authority_hops_and_checksum() {
    let h = match parse(&v2(true, Some(2), "198.51.100.7:1", "192.0.2.1:443")) {
        Parse::Header(h) => h,
        other => panic!("{other:?}"),
    };
    assert_eq!(h.version, ProxyVersion::V2);
    assert_eq!(h.authority.as_deref(), Some(&b"app.example.com"[..]));
    assert_eq!(h.hops, 2);
    assert!(h.checksummed);
    let h = match parse(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n") {
        Parse::Header(h) => h,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (h.version, h.hops, h.authority, h.checksummed),
        (ProxyVersion::V1, 1, None, false)
    );
}

#[test]
fn anything_that_cannot_start_a_signature_is_not_proxy_at_once() {
    for bytes in [
        &b"\x16"[..],
        b"\x16\x03\x01\x02\x00\x01",
        b"GET / HTTP/1.1\r\n",
        b"\r\n\r\n\0\r\nQUI!",
        b"\r\r",
        b"PROXZ",
        b"PROXY\r\n",
        b"P\x16",
        b"\0",
    ] {
        assert_eq!(parse(bytes), Parse::NotProxy, "{bytes:?}");
        assert_eq!(sniff(bytes), Sniff::NotProxy, "{bytes:?}");
    }
    assert_eq!(
        sniff(b"\r\n\r\n\0\r\nQUIT\n"),
        Sniff::Signature(ProxyVersion::V2)
    );
    assert_eq!(sniff(b"PROXY "), Sniff::Signature(ProxyVersion::V1));
    assert_eq!(sniff(b"PROX"), Sniff::Incomplete);
    assert_eq!(sniff(b""), Sniff::Incomplete);
}

fn with(mut bytes: Vec<u8>, at: usize, value: u8) -> Vec<u8> {
    bytes[at] = value;
    bytes
}

fn set_length(mut bytes: Vec<u8>, len: u16) -> Vec<u8> {
    bytes[14..16].copy_from_slice(&len.to_be_bytes());
    bytes
}

#[test]
fn hostile_v2_headers_get_exact_verdicts() {
    let good = v2(false, None, "198.51.100.7:50000", "192.0.2.1:443");
    let good_crc = v2(true, None, "198.51.100.7:50000", "192.0.2.1:443");
    let cases: Vec<(Vec<u8>, Parse)> = vec![
        (with(good.clone(), 12, 0x11), Parse::Invalid(Invalid::Version(1))),
        (with(good.clone(), 12, 0x31), Parse::Invalid(Invalid::Version(3))),
        (with(good.clone(), 12, 0x22), Parse::Invalid(Invalid::Command(2))),
        (with(good.clone(), 13, 0x41), Parse::Invalid(Invalid::FamilyProtocol(0x41))),
        (with(good.clone(), 13, 0x13), Parse::Invalid(Invalid::FamilyProtocol(0x13))),
        // A length too short for the family's addresses.
        (
            set_length(good[..16 + 4].to_vec(), 4),
            Parse::Invalid(Invalid::Layout(
                "Header length of 4 bytes cannot store the 12 bytes required for the address family.".into(),
            )),
        ),
        // IPv6 family over an IPv4-sized body.
        (
            set_length(with(good[..28].to_vec(), 13, 0x21), 12),
            Parse::Invalid(Invalid::Layout(
                "Header length of 12 bytes cannot store the 36 bytes required for the address family.".into(),
            )),
        ),
        // Beyond the cap: refused before it is buffered.
        (set_length(good[..16].to_vec(), 5000), Parse::Invalid(Invalid::TooLarge(5016))),
        // A checksum that does not match.
        (
            with(good_crc.clone(), good_crc.len() - 1, good_crc[good_crc.len() - 1] ^ 0xFF),
            Parse::Invalid(Invalid::Checksum),
        ),
        // Tampered address under a checksum.
        (with(good_crc.clone(), 16, 10), Parse::Invalid(Invalid::Checksum)),
    ];
    for (bytes, verdict) in cases {
        assert_eq!(parse(&bytes), verdict, "{bytes:?}");
    }
}

fn v2_with_tlvs(tlvs: &[u8]) -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.extend([0x21, 0x11]);
    h.extend(((12 + tlvs.len()) as u16).to_be_bytes());
    h.extend([192, 0, 2, 1, 198, 51, 100, 2, 0x1F, 0x90, 0x01, 0xBB]);
    h.extend(tlvs);
    h
}

/// Our hop-count TLV as the relay writes it: `E0 00 0E "snirelay-hops" NN`.
fn hops_tlv(hops: u8) -> Vec<u8> {
    [&[0xE0, 0, 14][..], b"snirelay-hops", &[hops]].concat()
}

#[test]
fn tlvs_must_tile_the_header_and_known_ones_must_be_well_formed() {
    let cases: Vec<(Vec<u8>, Parse)> = vec![
        // A TLV running past the end of the header.
        (
            vec![0x02, 0, 10, b'a'],
            Parse::Invalid(Invalid::Layout(
                "Header is not long enough to contain TLV 2 with length 10.".into(),
            )),
        ),
        // Leftover bytes too short to be a TLV.
        (
            vec![0x04, 0],
            Parse::Invalid(Invalid::Layout(
                "Header contains leftover 2 bytes not accounted for by the address family or TLVs."
                    .into(),
            )),
        ),
        // CRC32C must be 4 bytes.
        (vec![0x03, 0, 2, 0, 0], Parse::Invalid(Invalid::Tlv(0x03))),
        // Our hop count: the magic, then one byte of at least 1, once.
        (hops_tlv(0), Parse::Invalid(Invalid::Tlv(0xE0))),
        (
            [&[0xE0, 0, 15][..], b"snirelay-hops", &[1, 1]].concat(),
            Parse::Invalid(Invalid::Tlv(0xE0)),
        ),
        (
            [hops_tlv(1), hops_tlv(2)].concat(),
            Parse::Invalid(Invalid::Tlv(0xE0)),
        ),
        // AUTHORITY twice.
        (
            vec![0x02, 0, 1, b'a', 0x02, 0, 1, b'b'],
            Parse::Invalid(Invalid::Tlv(0x02)),
        ),
        // CRC32C twice (refused before either is checked).
        (
            vec![0x03, 0, 4, 0, 0, 0, 0, 0x03, 0, 4, 0, 0, 0, 0],
            Parse::Invalid(Invalid::Tlv(0x03)),
        ),
    ];
    for (tlvs, verdict) in cases {
        assert_eq!(parse(&v2_with_tlvs(&tlvs)), verdict, "{tlvs:?}");
    }
    // Unknown TLVs (and NOOP padding, and UNIQUE_ID, which the relay does
    // not read, even twice) are skipped.
    let skipped = [
        &[
            0x04, 0, 3, 0, 0, 0, 0xEE, 0, 0, 0x05, 0, 1, b'1', 0x05, 0, 1, b'2',
        ][..],
        &hops_tlv(3),
    ]
    .concat();
    match parse(&v2_with_tlvs(&skipped)) {
        Parse::Header(h) => assert_eq!(h.hops, 3),
        other => panic!("{other:?}"),
    }
}

#[test]
fn another_products_0xe0_tlv_and_the_old_one_byte_hop_format_are_ignored() {
    // Before the magic, snirelay wrote the count as a bare one-byte 0xE0
    // value. It is now indistinguishable from anyone else's 0xE0 TLV, so
    // it counts as no hop TLV at all: one hop.
    for foreign in [
        vec![0xE0, 0, 1, 3],
        vec![0xE0, 0, 1, 0],
        vec![0xE0, 0, 2, 1, 1],
        vec![0xE0, 0, 1, 1, 0xE0, 0, 1, 2],
        [&[0xE0, 0, 5][..], b"hello"].concat(),
    ] {
        match parse(&v2_with_tlvs(&foreign)) {
            Parse::Header(h) => assert_eq!(h.hops, 1, "{foreign:?}"),
            other => panic!("{other:?} for {foreign:?}"),
        }
        match parse(&v2_with_tlvs(&[foreign.clone(), hops_tlv(2)].concat())) {
            Parse::Header(h) => assert_eq!(h.hops, 2, "{foreign:?} before ours"),
            other => panic!("{other:?} for {foreign:?}"),
        }
    }
}

#[test]
fn hostile_v1_headers_get_exact_verdicts() {
    let framing = Parse::Invalid(Invalid::V1Framing);
    let long = [b"PROXY TCP4 ".as_slice(), &[b'1'; 100]].concat();
    let cases: Vec<(Vec<u8>, Parse)> = vec![
        // No CRLF within 107 bytes.
        (long.clone(), framing.clone()),
        // CR not followed by LF.
        (
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rX".to_vec(),
            framing.clone(),
        ),
        // A bare LF.
        (
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n".to_vec(),
            framing.clone(),
        ),
        // Binary inside.
        (b"PROXY TCP4 1.2.3.4\x16".to_vec(), framing.clone()),
        // 108 bytes: one too many.
        (v1_unknown(108), framing.clone()),
        (
            b"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n".to_vec(),
            Parse::Invalid(Invalid::V1Syntax("Header has an invalid protocol.".into())),
        ),
        (
            b"PROXY TCP4 1.2.3.999 5.6.7.8 1 2\r\n".to_vec(),
            Parse::Invalid(Invalid::V1Syntax(
                "Header contains invalid IP address for the source.".into(),
            )),
        ),
        (
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 65536\r\n".to_vec(),
            Parse::Invalid(Invalid::V1Port("65536".into())),
        ),
        // §2.1 ports: decimal digits only, one space before each field.
        (
            b"PROXY TCP4 1.2.3.4 5.6.7.8 +80 443\r\n".to_vec(),
            Parse::Invalid(Invalid::V1Port("+80".into())),
        ),
        (
            b"PROXY TCP4 1.2.3.4 5.6.7.8  80 443\r\n".to_vec(),
            Parse::Invalid(Invalid::V1Fields),
        ),
        (
            b"PROXY TCP4 1.2.3.4 5.6.7.8 080 443\r\n".to_vec(),
            Parse::Invalid(Invalid::V1Port("080".into())),
        ),
        (
            b"PROXY TCP6 ::1 ::2 1 \r\n".to_vec(),
            Parse::Invalid(Invalid::V1Fields),
        ),
        (
            b"PROXY TCP4 ::1 ::1 1 2\r\n".to_vec(),
            Parse::Invalid(Invalid::V1Syntax(
                "Header contains invalid IP address for the source.".into(),
            )),
        ),
    ];
    for (bytes, verdict) in cases {
        assert_eq!(
            parse(&bytes),
            verdict,
            "{:?}",
            String::from_utf8_lossy(&bytes)
        );
    }
}

#[test]
fn per_source_limits_key_on_the_claim_and_exempt_a_trusted_peer_itself() {
    use snirelay::addr::{ClaimedAddr, PeerAddr};
    use snirelay::admission::{Admission, AtAccept, Limits};
    use snirelay::proxy::inbound::Sender;
    let peer = PeerAddr(addr("10.0.0.2:40000"));
    let claimed = ClaimedAddr(addr("203.0.113.9:5555"));
    let gate = Admission::new(&Limits::unlimited());
    match gate.at_accept(peer, false) {
        Ok(AtAccept::Admitted(admitted)) => {
            assert_eq!(admitted.key.to_string(), "10.0.0.2")
        }
        other => panic!("a direct client is decided at accept: {other:?}"),
    }
    assert!(matches!(
        gate.at_accept(peer, true),
        Ok(AtAccept::AfterPreface)
    ));
    let admitted = gate.after_preface(Some(claimed)).unwrap().unwrap();
    assert_eq!(admitted.key.to_string(), "203.0.113.9");
    assert!(gate.after_preface(None).unwrap().is_none());
    assert_eq!(Sender::Relayed { peer, claimed }.claimed(), Some(claimed));
    assert_eq!(Sender::TrustedPeer(peer).claimed(), None);
}
