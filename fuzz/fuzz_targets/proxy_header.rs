//! Fuzzes the inbound PROXY header sniffer and parser (`proxy::wire::sniff`,
//! `proxy::wire::parse`) and the claim check (`proxy::wire::check_claim`):
//! no input may panic, and the verdicts must agree with each other, with
//! the stream they came from, and with the rules of `proxy::wire` (LOCAL
//! reads nothing, an AUTHORITY kept is a normalised host name of at most
//! 255 bytes, a hop count is at least 1); and the pass-through of a valid
//! header's TLVs (`wire::proxy_tlv::passed_tlvs`), which keeps every type
//! asked for within its bound and never our hop count. The same bytes as
//! one datagram (`proxy::datagram::read`, `wire::proxy::parse_as` for
//! DGRAM): a header is stripped exactly, claims only for its own
//! transport, and never spans the datagram.

#![no_main]

use libfuzzer_sys::fuzz_target;
use snirelay::wire::proxy::{Announced, MAX_AUTHORITY_BYTES, Parse, Sniff, V1_MAX_BYTES, V2_MAX_BYTES, ProxyVersion, check_claim, parse, sniff};
use snirelay::proxy::datagram::{Read, read};
use snirelay::wire::proxy::{HOPS_MAGIC, ProxyTransport, TLV_HOPS, parse_as};
use snirelay::wire::proxy_tlv::{MAX_PASSED_TLV_BYTES, TlvTypes, passed_tlvs};
use snirelay::wire::sni::Sni;

fuzz_target!(|data: &[u8]| {
    datagram(data);
    let verdict = parse(data);
    match (sniff(data), &verdict) {
        (Sniff::Incomplete, Parse::Incomplete) | (Sniff::NotProxy, Parse::NotProxy) => {}
        (Sniff::Signature(_), Parse::Incomplete | Parse::Invalid(_)) => {}
        (Sniff::Signature(version), Parse::Header(h)) => {
            assert_eq!(version, h.version);
            assert!(h.len <= data.len());
            let cap = match h.version {
                ProxyVersion::V1 => V1_MAX_BYTES,
                ProxyVersion::V2 => V2_MAX_BYTES,
            };
            assert!(h.len <= cap);
            assert!(h.hops >= 1);
            match h.addresses {
                Announced::Local => {
                    assert_eq!((h.hops, &h.authority, h.checksummed), (1, &None, false));
                }
                Announced::Proxy {
                    source,
                    destination,
                } => {
                    // Whatever the claim, checking it never panics.
                    let _ = check_claim(source, destination);
                }
                Announced::Unknown => {}
            }
            if let Some(authority) = &h.authority {
                assert!(authority.len() <= MAX_AUTHORITY_BYTES);
                let sni = Sni::parse(authority).expect("a kept AUTHORITY is a host name");
                assert_eq!(sni.as_str().as_bytes(), &authority[..], "kept normalised");
            }
            let every_type: TlvTypes = (0..=u8::MAX).collect();
            let passed = passed_tlvs(data, h, &every_type);
            let mut bytes = 0;
            for (kind, value) in passed.tlvs.iter() {
                assert!(!(kind == TLV_HOPS && value.starts_with(HOPS_MAGIC)));
                bytes += 3 + value.len();
            }
            assert!(bytes <= MAX_PASSED_TLV_BYTES);
            if h.addresses == Announced::Local {
                assert!(passed.tlvs.is_empty());
            }
            // The header alone parses the same; bytes after it change nothing.
            assert_eq!(parse(&data[..h.len]), verdict);
            // Every strict prefix of a valid header is Incomplete.
            for end in [0, 1, h.len / 2, h.len - 1] {
                assert_eq!(parse(&data[..end]), Parse::Incomplete, "prefix {end}");
            }
        }
        (s, p) => panic!("sniff {s:?} disagrees with parse {p:?}"),
    }
    if verdict == Parse::Incomplete {
        // Incomplete never holds more than a header's worth of bytes.
        assert!(data.len() < V2_MAX_BYTES.max(V1_MAX_BYTES));
    }
});

/// The bytes as one datagram from a trusted peer.
fn datagram(data: &[u8]) {
    let as_dgram = parse_as(data, ProxyTransport::Datagram);
    let as_stream = parse(data);
    match read(data) {
        Read::Plain(payload) => {
            assert_eq!(payload, data);
            assert!(data.is_empty() || sniff(data) == Sniff::NotProxy);
        }
        Read::Header { header, payload } => {
            assert_eq!(header.version, ProxyVersion::V2);
            assert_eq!(Parse::Header(header.clone()), as_dgram);
            assert_eq!(payload, &data[header.len..]);
            // The same header read for TCP differs at most in its claim:
            // one transport's claim is the other's fallback.
            let Parse::Header(stream) = &as_stream else {
                panic!("a datagram header does not parse for TCP: {as_stream:?}");
            };
            assert_eq!((stream.len, stream.hops, &stream.authority), (header.len, header.hops, &header.authority));
            assert!(
                stream.addresses == header.addresses
                    || stream.addresses == Announced::Unknown
                    || header.addresses == Announced::Unknown
            );
        }
        Read::Invalid(_) => {
            assert!(!matches!(as_dgram, Parse::Header(ref h) if h.version == ProxyVersion::V2));
        }
    }
}
