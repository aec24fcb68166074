use std::net::SocketAddr;

use ppp::v2;

use super::*;
use crate::wire::proxy::Announced;

fn addr(text: &str) -> SocketAddr {
    text.parse().unwrap()
}

fn announcement(
    source: &str,
    destination: &str,
    sni: Option<&str>,
    hops: Option<u8>,
) -> Announcement {
    Announcement {
        source: addr(source),
        destination: addr(destination),
        authority: sni.map(|s| s.as_bytes().to_vec()),
        unique_id: 18_446_744_073_709_551_615,
        hops,
    }
}

/// The TLVs of a header as an independent reader (`ppp`) sees them.
fn read_by_ppp(bytes: &[u8]) -> (v2::Header<'_>, Vec<(u8, Vec<u8>)>) {
    let header = v2::Header::try_from(bytes).expect("ppp reads the header");
    let tlvs = header
        .tlvs()
        .map(|t| t.unwrap())
        .map(|t| (t.kind, t.value.to_vec()))
        .collect();
    (header, tlvs)
}

#[test]
fn the_full_header_is_dgram_with_the_client_and_the_tcp_tlvs() {
    let a = announcement(
        "[2001:db8::7]:5555",
        "[2001:db8::1]:443",
        Some("app.example.com"),
        Some(2),
    );
    let headers = DatagramHeaders::new(&a, false, &AddedTlvs::NONE);
    let Prefix::Header(full) = headers.prefix(1200, DEFAULT_MAX_DATAGRAM_SIZE) else {
        panic!("a 1,200-byte datagram takes the full header");
    };
    let (header, tlvs) = read_by_ppp(full);
    assert_eq!(header.command, v2::Command::Proxy);
    assert_eq!(header.protocol, v2::Protocol::Datagram);
    assert_eq!(
        header.addresses,
        v2::Addresses::from((addr("[2001:db8::7]:5555"), addr("[2001:db8::1]:443")))
    );
    let kinds: Vec<u8> = tlvs.iter().map(|t| t.0).collect();
    assert_eq!(
        kinds,
        [proxy::TLV_AUTHORITY, proxy::TLV_UNIQUE_ID, proxy::TLV_HOPS]
    );
    assert_eq!(tlvs[0].1, b"app.example.com");
    assert_eq!(tlvs[1].1, b"18446744073709551615");
    // 16 + 36 + (3 + 15) + (3 + 20) + 17: the arithmetic of the module's
    // header for a 15-byte name.
    assert_eq!(full.len(), 16 + 36 + 18 + 23 + 17);
    // Our own reader, carrying DGRAM, claims the client; carrying STREAM
    // (a TCP listener) it falls back to no claim.
    let Parse::Header(ours) = proxy::parse_as(full, ProxyTransport::Datagram) else {
        panic!()
    };
    assert_eq!(
        ours.addresses,
        Announced::Proxy {
            source: addr("[2001:db8::7]:5555"),
            destination: addr("[2001:db8::1]:443")
        }
    );
    assert_eq!(
        (ours.hops, ours.authority.as_deref()),
        (2, Some(&b"app.example.com"[..]))
    );
    let Parse::Header(as_tcp) = proxy::parse(full) else {
        panic!()
    };
    assert_eq!(as_tcp.addresses, Announced::Unknown);
    assert_eq!(as_tcp.hops, 2);
}

#[test]
fn a_datagram_the_full_header_would_make_too_large_takes_the_minimal_one_then_none() {
    let a = announcement(
        "[2001:db8::7]:5555",
        "[2001:db8::1]:443",
        Some("app.example.com"),
        Some(1),
    );
    let headers = DatagramHeaders::new(&a, true, &AddedTlvs::NONE);
    let full_len = match headers.prefix(0, usize::MAX) {
        Prefix::Header(h) => h.len(),
        other => panic!("{other:?}"),
    };
    // The minimal header: addresses, hop count and checksum only.
    let minimal_len = 16 + 36 + 17 + 7;
    let max = DEFAULT_MAX_DATAGRAM_SIZE;
    for payload in [1200, 1250, max - full_len] {
        assert_eq!(
            headers.prefix(payload, max),
            Prefix::Header(match headers.prefix(0, usize::MAX) {
                Prefix::Header(h) => h,
                _ => unreachable!(),
            })
        );
    }
    for payload in [max - full_len + 1, 1357, max - minimal_len] {
        let Prefix::Header(h) = headers.prefix(payload, max) else {
            panic!("{payload}")
        };
        assert_eq!(h.len(), minimal_len, "{payload}");
        assert!(payload + h.len() <= max);
        let (header, tlvs) = read_by_ppp(h);
        assert_eq!(header.protocol, v2::Protocol::Datagram);
        let kinds: Vec<u8> = tlvs.iter().map(|t| t.0).collect();
        assert_eq!(kinds, [proxy::TLV_HOPS, 0x03]);
        // The checksum is right (our reader checks it).
        assert!(matches!(
            proxy::parse_as(h, ProxyTransport::Datagram),
            Parse::Header(_)
        ));
    }
    assert_eq!(headers.prefix(max - minimal_len + 1, max), Prefix::TooLarge);
    // IPv4 without a hop: 16 + 12 bytes.
    let v4 = DatagramHeaders::new(
        &announcement("192.0.2.7:5555", "192.0.2.1:443", None, None),
        false,
        &AddedTlvs::NONE,
    );
    let Prefix::Header(h) = v4.prefix(max - 28, max) else {
        panic!()
    };
    assert_eq!(h.len(), 28);
    // Once the backend answers, nothing more is sent.
    assert!(headers.sending());
    headers.answered();
    assert_eq!(headers.prefix(1200, max), Prefix::Nothing);
    assert_eq!(headers.prefix(max + 1, max), Prefix::Nothing);
}

#[test]
fn reading_strips_a_header_and_refuses_what_is_none_in_one_datagram() {
    let a = announcement(
        "192.0.2.7:5555",
        "192.0.2.1:443",
        Some("app.example.com"),
        None,
    );
    let headers = DatagramHeaders::new(&a, false, &AddedTlvs::NONE);
    let Prefix::Header(h) = headers.prefix(1200, DEFAULT_MAX_DATAGRAM_SIZE) else {
        panic!()
    };
    let quic = [0xC3u8; 1200];
    let mut datagram = h.to_vec();
    datagram.extend_from_slice(&quic);
    match read(&datagram) {
        Read::Header { header, payload } => {
            assert_eq!(payload, &quic[..]);
            assert_eq!(
                header.addresses,
                Announced::Proxy {
                    source: addr("192.0.2.7:5555"),
                    destination: addr("192.0.2.1:443")
                }
            );
        }
        other => panic!("{other:?}"),
    }
    // A QUIC packet as it comes: plain.
    assert_eq!(read(&quic), Read::Plain(&quic[..]));
    assert_eq!(read(&[]), Read::Plain(&[][..]));
    // Cut inside the signature, inside the fixed part, inside the TLVs.
    for end in [1, 11, 12, 15, 20, h.len() - 1] {
        assert_eq!(
            read(&datagram[..end]),
            Read::Invalid(Invalid::Truncated),
            "{end}"
        );
    }
    // v1 has no UDP form.
    assert_eq!(
        read(b"PROXY TCP4 192.0.2.7 192.0.2.1 5555 443\r\n\xC3"),
        Read::Invalid(Invalid::V1OverUdp)
    );
    // A STREAM header on a datagram: read, no claim (as a DGRAM one on TCP).
    let tcp = crate::proxy::outbound::header(Outbound::V2, false, &a).unwrap();
    let mut datagram = tcp.clone();
    datagram.extend_from_slice(&quic);
    match read(&datagram) {
        Read::Header { header, payload } => {
            assert_eq!(header.addresses, Announced::Unknown);
            assert_eq!(payload.len(), quic.len());
        }
        other => panic!("{other:?}"),
    }
    // A broken checksum is refused as on TCP.
    let with_crc = DatagramHeaders::new(&a, true, &AddedTlvs::NONE);
    let Prefix::Header(h) = with_crc.prefix(0, usize::MAX) else {
        panic!()
    };
    let mut bad = h.to_vec();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    assert_eq!(read(&bad), Read::Invalid(Invalid::Checksum));
}
