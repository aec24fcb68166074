use crate::wire::proxy::*;

fn addr(text: &str) -> SocketAddr {
    text.parse().unwrap()
}

fn header(bytes: &[u8]) -> Header {
    match parse(bytes) {
        Parse::Header(h) => h,
        other => panic!("{other:?} for {:?}", String::from_utf8_lossy(bytes)),
    }
}

/// A v2 header: command, family/protocol byte, address block, TLVs.
fn v2(command: u8, family: u8, addresses: &[u8], tlvs: &[u8]) -> Vec<u8> {
    let mut h = V2_SIGNATURE.to_vec();
    h.extend([0x20 | command, family]);
    h.extend(((addresses.len() + tlvs.len()) as u16).to_be_bytes());
    h.extend(addresses);
    h.extend(tlvs);
    h
}

const TCP4: [u8; 12] = [192, 0, 2, 1, 198, 51, 100, 2, 0x1F, 0x90, 0x01, 0xBB];

fn tlv(kind: u8, value: &[u8]) -> Vec<u8> {
    let mut t = vec![kind];
    t.extend((value.len() as u16).to_be_bytes());
    t.extend(value);
    t
}

fn hops(n: u8) -> Vec<u8> {
    tlv(TLV_HOPS, &hops_value(n))
}

#[test]
fn v1_ports_are_plain_decimal_only() {
    let line = |sport: &str, dport: &str| {
        format!("PROXY TCP4 198.51.100.7 192.0.2.1 {sport} {dport}\r\n").into_bytes()
    };
    for (sport, dport) in [("0", "443"), ("65535", "1"), ("1", "0"), ("50000", "65535")] {
        let h = header(&line(sport, dport));
        let Announced::Proxy {
            source,
            destination,
        } = h.addresses
        else {
            panic!("{h:?}")
        };
        assert_eq!(source.port().to_string(), sport);
        assert_eq!(destination.port().to_string(), dport);
    }
    // §2.1: "a decimal integer in the range [0..65535] inclusive.
    // Heading zeroes are not permitted".
    for bad in [
        "+80", "080", "00", "65536", "99999", "100000", "-1", "8o", "0x50",
    ] {
        let verdict = Parse::Invalid(Invalid::V1Port(bad.into()));
        assert_eq!(parse(&line(bad, "443")), verdict, "source {bad}");
        assert_eq!(parse(&line("80", bad)), verdict, "destination {bad}");
    }
}

#[test]
fn v1_fields_are_exactly_one_space_apart() {
    for bad in [
        "PROXY TCP4 198.51.100.7 192.0.2.1  80 443\r\n",
        "PROXY TCP4 198.51.100.7 192.0.2.1 80  443\r\n",
        "PROXY TCP4  198.51.100.7 192.0.2.1 80 443\r\n",
        "PROXY TCP4 198.51.100.7 192.0.2.1 80 443 \r\n",
        "PROXY TCP4 198.51.100.7 192.0.2.1 80 \r\n",
        "PROXY TCP4 198.51.100.7 192.0.2.1 80\r\n",
        "PROXY TCP6 2001:db8::7 2001:db8::1 80 443 x\r\n",
        "PROXY TCP4 198.51.100.7 192.0.2.1 80 443\t\r\n",
    ] {
        let verdict = parse(bad.as_bytes());
        assert!(
            matches!(
                verdict,
                Parse::Invalid(Invalid::V1Fields | Invalid::V1Port(_) | Invalid::V1Framing)
            ),
            "{bad:?}: {verdict:?}"
        );
    }
    assert_eq!(
        parse(b"PROXY TCP4 198.51.100.7 192.0.2.1  80 443\r\n"),
        Parse::Invalid(Invalid::V1Fields)
    );
    // The address grammar: no leading zeros in IPv4 (left to ppp,
    // which uses the standard library's parser).
    assert!(matches!(
        parse(b"PROXY TCP4 198.51.100.07 192.0.2.1 80 443\r\n"),
        Parse::Invalid(Invalid::V1Syntax(_))
    ));
    // UNKNOWN: "the receiver must ignore anything presented before the
    // CRLF", double spaces and signs included.
    assert_eq!(
        header(b"PROXY UNKNOWN  +1 080\r\n").addresses,
        Announced::Unknown
    );
}

#[test]
fn v2_local_is_valid_whatever_its_family_and_length_say() {
    let garbage_tlvs = [0x03, 0, 9, 1];
    for (family, block) in [
        (0x00, &[][..]),
        (0x00, &TCP4[..]),
        // IPv6 family over a 12-byte block.
        (0x21, &TCP4[..]),
        // Unassigned family and protocol nibbles.
        (0x41, &TCP4[..]),
        (0xFF, &[][..]),
        // A block that is no TLV list at all, including a bad CRC32C.
        (0x11, &garbage_tlvs[..]),
    ] {
        let bytes = v2(0, family, block, &[]);
        let h = header(&bytes);
        assert_eq!(h.len, bytes.len(), "the declared length is skipped");
        assert_eq!(h.addresses, Announced::Local);
        assert_eq!((h.hops, h.authority, h.checksummed), (1, None, false));
        for end in 0..bytes.len() {
            assert_eq!(parse(&bytes[..end]), Parse::Incomplete);
        }
    }
    // The cap still holds: a LOCAL block is buffered too.
    let mut huge = v2(0, 0x00, &[], &[]);
    huge[14..16].copy_from_slice(&5000u16.to_be_bytes());
    assert_eq!(parse(&huge), Parse::Invalid(Invalid::TooLarge(5016)));
}

#[test]
fn v2_proxy_for_a_protocol_the_relay_does_not_carry_falls_back_to_unspec() {
    let tcp6 = [&[0x20; 32][..], &[0, 1, 0, 2]].concat();
    let unix = [0u8; 216];
    for (family, block) in [
        (0x12, &TCP4[..]),
        (0x22, &tcp6[..]),
        (0x31, &unix[..]),
        (0x32, &unix[..]),
        (0x10, &TCP4[..]),
    ] {
        let bytes = v2(1, family, block, &hops(2));
        let h = header(&bytes);
        assert_eq!(h.addresses, Announced::Unknown, "{family:#04x}");
        assert_eq!(h.hops, 2, "TLVs are still read");
        assert_eq!(h.len, bytes.len());
    }
    // The UNSPEC family has no address size, so its whole block is
    // opaque: no TLV in it is read, even a bad CRC32C.
    for family in [0x00, 0x01, 0x02] {
        let bytes = v2(
            1,
            family,
            &[],
            &[hops(2), tlv(TLV_CRC32C, &[1; 4])].concat(),
        );
        let h = header(&bytes);
        assert_eq!(h.addresses, Announced::Unknown, "{family:#04x}");
        assert_eq!((h.hops, h.checksummed), (1, false));
        assert_eq!(h.len, bytes.len());
    }
    // Unassigned values under PROXY: "must be rejected as invalid".
    for family in [0x41, 0x13, 0x1F, 0xF1] {
        assert_eq!(
            parse(&v2(1, family, &TCP4, &[])),
            Parse::Invalid(Invalid::FamilyProtocol(family))
        );
    }
    // A fallback still needs a block that holds its family's addresses.
    assert!(matches!(
        parse(&v2(1, 0x22, &TCP4, &[])),
        Parse::Invalid(Invalid::Layout(_))
    ));
}

#[test]
fn only_a_0xe0_tlv_with_our_magic_is_a_hop_count() {
    let with = |tlvs: &[u8]| parse(&v2(1, 0x11, &TCP4, tlvs));
    assert_eq!(header(&v2(1, 0x11, &TCP4, &hops(3))).hops, 3);
    assert_eq!(
        hops(3),
        [&[0xE0, 0, 14][..], b"snirelay-hops", &[3]].concat(),
        "the documented wire format"
    );
    // Another product's 0xE0, of any length and however often: ignored.
    for foreign in [
        tlv(0xE0, &[]),
        tlv(0xE0, &[9]),
        tlv(0xE0, &[0]),
        tlv(0xE0, b"snirelay"),
        tlv(0xE0, b"SNIRELAY-HOPS\x05"),
        [tlv(0xE0, &[1]), tlv(0xE0, &[2])].concat(),
    ] {
        let Parse::Header(h) = with(&foreign) else {
            panic!("{foreign:?} refused")
        };
        assert_eq!(h.hops, 1, "{foreign:?}");
        let Parse::Header(h) = with(&[foreign.clone(), hops(2)].concat()) else {
            panic!("{foreign:?} refused")
        };
        assert_eq!(h.hops, 2, "{foreign:?} next to ours");
    }
    // Ours but broken: refused.
    let bad = Parse::Invalid(Invalid::Tlv(TLV_HOPS));
    assert_eq!(with(&tlv(0xE0, &hops_value(0))), bad);
    assert_eq!(with(&tlv(0xE0, HOPS_MAGIC)), bad);
    assert_eq!(with(&tlv(0xE0, &[&hops_value(1)[..], &[1]].concat())), bad);
    // Ours twice, even with the same count: refused (first-wins would
    // let a looping sender hide a higher count behind a lower one).
    assert_eq!(with(&[hops(1), hops(1)].concat()), bad);
    assert_eq!(with(&[hops(4), hops(1)].concat()), bad);
}

#[test]
fn repeated_tlvs_the_relay_reads_are_refused_and_others_skipped() {
    let with = |tlvs: &[u8]| parse(&v2(1, 0x11, &TCP4, tlvs));
    let authority = tlv(TLV_AUTHORITY, b"a.example");
    assert_eq!(
        with(&[authority.clone(), tlv(TLV_AUTHORITY, b"b.example")].concat()),
        Parse::Invalid(Invalid::Tlv(TLV_AUTHORITY))
    );
    // A repeat counts even when one of them is not a usable name.
    assert_eq!(
        with(&[tlv(TLV_AUTHORITY, b"-"), authority.clone()].concat()),
        Parse::Invalid(Invalid::Tlv(TLV_AUTHORITY))
    );
    // Two CRC32C TLVs: refused before any checksum is computed.
    let crc = tlv(TLV_CRC32C, &[0; 4]);
    assert_eq!(
        with(&[crc.clone(), crc].concat()),
        Parse::Invalid(Invalid::Tlv(TLV_CRC32C))
    );
    // UNIQUE_ID and NOOP are not read: repeats are skipped.
    let ids = [
        tlv(TLV_UNIQUE_ID, b"1"),
        tlv(TLV_UNIQUE_ID, b"2"),
        tlv(0x04, &[]),
        tlv(0x04, &[]),
        authority,
    ]
    .concat();
    assert_eq!(
        header(&v2(1, 0x11, &TCP4, &ids)).authority.as_deref(),
        Some(&b"a.example"[..])
    );
}

#[test]
fn authority_is_used_only_when_it_is_a_host_name_of_at_most_255_bytes() {
    let authority =
        |value: &[u8]| header(&v2(1, 0x11, &TCP4, &tlv(TLV_AUTHORITY, value))).authority;
    assert_eq!(
        authority(b"App.Example.COM."),
        Some(b"app.example.com".to_vec())
    );
    let longest = [
        &[b'a'; 63][..],
        b".",
        &[b'b'; 63],
        b".",
        &[b'c'; 63],
        b".",
        &[b'd'; 61],
    ]
    .concat();
    assert_eq!(longest.len(), 253);
    assert_eq!(authority(&longest), Some(longest.clone()));
    for bad in [
        &b""[..],
        b"192.0.2.1",
        b"a..example",
        b"bad name.example",
        b"caf\xc3\xa9.example",
        b"a\x00.example",
        &[b'a'; 64],
        &[b'a'; 256],
        &[&longest[..], b".x"].concat()[..],
    ] {
        assert_eq!(authority(bad), None, "{:?}", String::from_utf8_lossy(bad));
    }
}

#[test]
fn claims_that_cannot_be_a_client_are_refused() {
    let local = addr("192.0.2.1:443");
    let impossible = |source: &str, why| {
        assert_eq!(
            check_claim(addr(source), local),
            Err(Invalid::ImpossibleClaim {
                claimed: addr(source),
                why
            }),
            "{source}"
        );
    };
    impossible("0.0.0.0:1", Impossible::Unspecified);
    impossible("[::]:1", Impossible::Unspecified);
    impossible("[::ffff:0.0.0.0]:1", Impossible::Unspecified);
    impossible("224.0.0.1:1", Impossible::Multicast);
    impossible("239.255.255.250:1900", Impossible::Multicast);
    impossible("[ff02::1]:1", Impossible::Multicast);
    impossible("[::ffff:224.0.0.251]:5353", Impossible::Multicast);
    impossible("255.255.255.255:1", Impossible::Broadcast);
    impossible("[::ffff:255.255.255.255]:1", Impossible::Broadcast);
    impossible("192.0.2.1:443", Impossible::RelayItself);
    impossible("[::ffff:192.0.2.1]:443", Impossible::RelayItself);
    assert_eq!(
        check_claim(addr("192.0.2.1:443"), addr("[::ffff:192.0.2.1]:443")),
        Err(Invalid::ImpossibleClaim {
            claimed: addr("192.0.2.1:443"),
            why: Impossible::RelayItself
        })
    );
    for fine in [
        "198.51.100.7:50000",
        // The relay's IP from another port: a client on the same host.
        "192.0.2.1:50000",
        "[2001:db8::7]:1",
        "192.0.2.255:1",
        "[::1]:1",
        "127.0.0.1:443",
    ] {
        assert_eq!(check_claim(addr(fine), local), Ok(()), "{fine}");
    }
}
