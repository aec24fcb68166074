//! The announce stage (outbound PROXY protocol): the PROXY protocol header a backend receives before
//! the client's first byte, so the origin learns who the client is without
//! the edge terminating TLS.
//!
//! Per backend, `proxy_protocol = "v2" | "v1" | "none"`. The header is put in
//! front of the replayed ClientHello bytes, so both leave in one write (one
//! segment, normally): a backend never sees a header without its hello.
//! - Command PROXY over TCP. Source: the claimed client when one arrived
//!   from a trusted peer, otherwise the measured peer. Destination: what the
//!   client connected to (the claimed destination, otherwise the local
//!   address of the accepted socket). When the two differ in family, both
//!   are sent as IPv6 with IPv4-mapped addresses; an IPv4-mapped pair is
//!   sent as IPv4. No address is ever invented.
//! - v2 TLVs: AUTHORITY = the SNI (or the AUTHORITY that arrived from a
//!   peer relay, carried through); UNIQUE_ID = the decimal `conn_id` of the
//!   connection's log line; CRC32C when `proxy_protocol_crc32c = true`; the
//!   hop count when the connection itself arrived with a header
//!   (incremented), as `TLV_HOPS` with the [`proxy::HOPS_MAGIC`]
//!   sub-type (the one wire format, defined in `wire`). No SSL TLV: the
//!   relay negotiated no TLS.
//! - Then the backend's `proxy_protocol_tlvs`, in the order configured
//!   ([`AddedTlvs::configured`]): a value learnt from the connection (the
//!   client's first offered ALPN, the SNI; left out when the connection
//!   has none, or when it is longer than its source's bound), fixed text or
//!   fixed bytes; then the TLVs the listener's `pass_through_tlvs` copied
//!   from the inbound header ([`AddedTlvs::passed`]), except those of a
//!   type the backend's list sends: the relay's own value wins over a
//!   peer's claim, whether or not it has one for this connection. CRC32C,
//!   when on, is last and covers them all.
//! - v1 carries addresses only (`PROXY TCP4|TCP6 …\r\n`).
//! - [`local_header`] encodes the LOCAL command (v1: `PROXY UNKNOWN`) for
//!   anything the relay sends on its own behalf, such as health checks.
//!
//! Encoding is the `ppp` crate's; the CRC32C (the `crc32c` crate) is filled
//! in here. Not here: reading headers (see `inbound`, over `wire`'s parser). Cost: one header of
//! well under 512 bytes per connection, copied once with the hello; with
//! added and passed TLVs, at most [`crate::wire::proxy_tlv`]'s bounds more (the
//! whole header stays within the 4,096 bytes a receiving snirelay takes).

use std::net::{IpAddr, SocketAddr};

use ppp::v2;

use crate::wire::cidr::canonical;
use crate::wire::proxy::{self, Announced, TLV_AUTHORITY, TLV_CRC32C, TLV_HOPS, TLV_UNIQUE_ID};
use crate::wire::proxy_tlv::PassedTlvs;

/// A backend's `proxy_protocol` setting: plain settings.
pub use crate::config::settings::Outbound;
/// A backend's `proxy_protocol_tlvs` entries: plain settings.
pub use crate::config::settings::{ProxyTlv, TlvSource, TlvValue};

/// The TLVs a v2 header carries beyond the relay's own.
#[derive(Debug, Clone, Copy)]
pub struct AddedTlvs<'a> {
    /// The backend's `proxy_protocol_tlvs`.
    pub configured: &'a [ProxyTlv],
    /// What the connection says, for the configured values learnt from it.
    pub learnt: Learnt<'a>,
    /// TLVs the listener's `pass_through_tlvs` copied from the inbound
    /// header.
    pub passed: &'a PassedTlvs,
}

impl AddedTlvs<'_> {
    /// Nothing beyond the relay's own TLVs.
    pub const NONE: AddedTlvs<'static> = AddedTlvs {
        configured: &[],
        learnt: Learnt {
            sni: None,
            alpn: None,
            ja4: None,
            ja3: None,
        },
        passed: &PassedTlvs::NONE,
    };
}

/// What one connection tells the [`TlvSource`]s, borrowed from its hello.
#[derive(Debug, Clone, Copy, Default)]
pub struct Learnt<'a> {
    /// The SNI, normalised.
    pub sni: Option<&'a str>,
    /// The first ALPN protocol the client offered.
    pub alpn: Option<&'a [u8]>,
    /// The hello's JA4, when its fingerprints were computed.
    pub ja4: Option<&'a str>,
    /// The hello's JA3 hash, when its fingerprints were computed.
    pub ja3: Option<&'a str>,
}

impl TlvSource {
    /// This source's value for a connection: `None` when it has none, or
    /// one longer than [`TlvSource::max_len`] (the bound the configuration
    /// was checked against; a value is left out, never cut).
    pub(crate) fn value<'a>(self, learnt: &Learnt<'a>) -> Option<&'a [u8]> {
        let value = match self {
            TlvSource::Alpn => learnt.alpn,
            TlvSource::Sni => learnt.sni.map(str::as_bytes),
            TlvSource::Ja4 => learnt.ja4.map(str::as_bytes),
            TlvSource::Ja3 => learnt.ja3.map(str::as_bytes),
        }?;
        (value.len() <= self.max_len()).then_some(value)
    }
}

impl TlvValue {
    fn bytes<'a>(&'a self, learnt: &Learnt<'a>) -> Option<&'a [u8]> {
        match self {
            TlvValue::From(source) => source.value(learnt),
            TlvValue::Text(text) => Some(text.as_bytes()),
            TlvValue::Bytes(bytes) => Some(bytes),
        }
    }
}

/// What the header for one client connection says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announcement {
    pub(crate) source: SocketAddr,
    pub(crate) destination: SocketAddr,
    pub(crate) authority: Option<Vec<u8>>,
    pub(crate) unique_id: u64,
    /// Set when the connection arrived with a PROXY header.
    pub hops: Option<u8>,
}

impl Announcement {
    /// The announcement for a connection from `peer` to `local`, which may
    /// have arrived with `inbound` (from a trusted peer) and carries `sni`.
    pub fn new(
        peer: SocketAddr,
        local: SocketAddr,
        inbound: Option<&proxy::Header>,
        sni: Option<&str>,
        conn_id: u64,
    ) -> Announcement {
        let (source, destination) = match inbound.map(|h| h.addresses) {
            Some(Announced::Proxy {
                source,
                destination,
            }) => (source, destination),
            _ => (peer, local),
        };
        let authority = inbound
            .and_then(|h| h.authority.clone())
            .or_else(|| sni.map(|s| s.as_bytes().to_vec()));
        Announcement {
            source,
            destination,
            authority,
            unique_id: conn_id,
            hops: inbound.map(|h| h.hops.saturating_add(1)),
        }
    }
}

/// Both addresses in one family: IPv4 when both are (or map to) IPv4,
/// otherwise IPv6 with IPv4-mapped addresses.
pub(crate) fn same_family(source: SocketAddr, destination: SocketAddr) -> (SocketAddr, SocketAddr) {
    let (s, d) = (canonical(source.ip()), canonical(destination.ip()));
    let (s, d) = match (s, d) {
        (IpAddr::V4(_), IpAddr::V4(_)) => (s, d),
        _ => (v6(s), v6(d)),
    };
    (
        SocketAddr::new(s, source.port()),
        SocketAddr::new(d, destination.port()),
    )
}

fn v6(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V6(v4.to_ipv6_mapped()),
        IpAddr::V6(_) => ip,
    }
}

/// The header for `announcement`, or nothing when the backend takes none.
pub fn header(version: Outbound, crc32c: bool, announcement: &Announcement) -> Option<Vec<u8>> {
    header_with(version, crc32c, announcement, &AddedTlvs::NONE)
}

/// [`header`], with `added` after the relay's own TLVs in a v2 header.
pub(crate) fn header_with(
    version: Outbound,
    crc32c: bool,
    announcement: &Announcement,
    added: &AddedTlvs<'_>,
) -> Option<Vec<u8>> {
    header_over(version, crc32c, announcement, added, v2::Protocol::Stream)
}

/// [`header_with`] for the transport `protocol` (STREAM for a TCP
/// connection, DGRAM for a UDP flow: [`crate::proxy::datagram`]); v1 has
/// only the TCP form.
pub(crate) fn header_over(
    version: Outbound,
    crc32c: bool,
    announcement: &Announcement,
    added: &AddedTlvs<'_>,
    protocol: v2::Protocol,
) -> Option<Vec<u8>> {
    let (source, destination) = same_family(announcement.source, announcement.destination);
    match version {
        Outbound::None => None,
        Outbound::V1 => Some(
            ppp::v1::Addresses::from((source, destination))
                .to_string()
                .into_bytes(),
        ),
        Outbound::V2 => {
            let unique_id = announcement.unique_id.to_string();
            let mut tlvs: Vec<(u8, &[u8])> = Vec::with_capacity(3 + added.configured.len());
            if let Some(authority) = &announcement.authority {
                tlvs.push((TLV_AUTHORITY, authority));
            }
            tlvs.push((TLV_UNIQUE_ID, unique_id.as_bytes()));
            let hops = announcement.hops.map(proxy::hops_value);
            if let Some(hops) = &hops {
                tlvs.push((TLV_HOPS, hops));
            }
            for tlv in added.configured {
                if let Some(value) = tlv.value.bytes(&added.learnt) {
                    tlvs.push((tlv.kind, value));
                }
            }
            let configured = |kind| added.configured.iter().any(|t| t.kind == kind);
            tlvs.extend(added.passed.iter().filter(|&(kind, _)| !configured(kind)));
            let builder = v2::Builder::with_addresses(
                v2::Version::Two | v2::Command::Proxy,
                protocol,
                (source, destination),
            );
            Some(finish(builder, &tlvs, crc32c))
        }
    }
}

/// A LOCAL-command header: the relay speaking for itself (health checks).
pub fn local_header(version: Outbound, crc32c: bool) -> Option<Vec<u8>> {
    match version {
        Outbound::None => None,
        Outbound::V1 => Some(b"PROXY UNKNOWN\r\n".to_vec()),
        Outbound::V2 => {
            let builder = v2::Builder::new(
                v2::Version::Two | v2::Command::Local,
                v2::AddressFamily::Unspecified | v2::Protocol::Unspecified,
            );
            Some(finish(builder, &[], crc32c))
        }
    }
}

/// Puts `header` in front of `replay`, for one write; returns the header's
/// length so byte counts can leave it out.
pub(crate) fn prepend(header: Option<Vec<u8>>, replay: Vec<u8>) -> (Vec<u8>, usize) {
    match header {
        None => (replay, 0),
        Some(mut header) => {
            let len = header.len();
            header.extend_from_slice(&replay);
            (header, len)
        }
    }
}

pub(crate) fn finish(builder: v2::Builder, tlvs: &[(u8, &[u8])], crc32c: bool) -> Vec<u8> {
    let mut builder = builder;
    for &(kind, value) in tlvs {
        builder = builder.write_tlv(kind, value).expect(BOUNDED);
    }
    if crc32c {
        builder = builder.write_tlv(TLV_CRC32C, &[0; 4]).expect(BOUNDED);
    }
    let mut bytes = builder.build().expect(BOUNDED);
    if crc32c {
        // The checksum covers the whole header with its own value zeroed,
        // which is how it was written; it goes last, in network order.
        let sum = crc32c::crc32c(&bytes);
        let at = bytes.len() - 4;
        bytes[at..].copy_from_slice(&sum.to_be_bytes());
    }
    bytes
}

/// ppp's writer fails only past 65,535 payload bytes; ours holds two
/// addresses, an AUTHORITY of at most [`crate::wire::proxy::V2_MAX_BYTES`], a u64 in
/// decimal, a 14-byte hop value, the added TLVs within
/// `proxy_tlv::MAX_ADDED_TLV_BYTES` and `MAX_PASSED_TLV_BYTES`, and a
/// checksum.
const BOUNDED: &str = "a PROXY v2 header of bounded size always encodes";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::proxy::{Parse, ProxyVersion, parse};

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    fn parsed(bytes: &[u8]) -> proxy::Header {
        match parse(bytes) {
            Parse::Header(h) => h,
            other => panic!("{other:?} for {bytes:?}"),
        }
    }

    #[test]
    fn v2_header_round_trips_with_tlvs_and_checksum() {
        let a = Announcement::new(
            addr("198.51.100.7:50000"),
            addr("192.0.2.1:443"),
            None,
            Some("app.example.com"),
            42,
        );
        for crc in [false, true] {
            let bytes = header(Outbound::V2, crc, &a).unwrap();
            let h = parsed(&bytes);
            assert_eq!(h.len, bytes.len());
            assert_eq!(h.version, ProxyVersion::V2);
            assert_eq!(
                h.addresses,
                Announced::Proxy {
                    source: a.source,
                    destination: a.destination
                }
            );
            assert_eq!(h.authority.as_deref(), Some(&b"app.example.com"[..]));
            assert_eq!(h.hops, 1);
            assert_eq!(h.checksummed, crc);
            let header = v2::Header::try_from(&bytes[..]).unwrap();
            let ids: Vec<_> = header
                .tlvs()
                .map(|t| t.unwrap())
                .filter(|t| t.kind == TLV_UNIQUE_ID)
                .map(|t| t.value.to_vec())
                .collect();
            assert_eq!(ids, vec![b"42".to_vec()]);
            assert!(header.tlvs().all(|t| t.unwrap().kind != TLV_HOPS));
        }
    }

    #[test]
    fn a_flipped_bit_fails_the_checksum() {
        let a = Announcement::new(
            addr("198.51.100.7:50000"),
            addr("192.0.2.1:443"),
            None,
            Some("a.example"),
            7,
        );
        let mut bytes = header(Outbound::V2, true, &a).unwrap();
        bytes[17] ^= 1;
        assert_eq!(parse(&bytes), Parse::Invalid(proxy::Invalid::Checksum));
    }

    #[test]
    fn mixed_families_map_to_ipv6_and_mapped_pairs_to_ipv4() {
        let (s, d) = same_family(addr("198.51.100.7:1"), addr("[2001:db8::1]:443"));
        assert_eq!(s, addr("[::ffff:198.51.100.7]:1"));
        assert_eq!(d, addr("[2001:db8::1]:443"));
        let (s, d) = same_family(
            addr("[::ffff:198.51.100.7]:1"),
            addr("[::ffff:192.0.2.1]:443"),
        );
        assert_eq!((s, d), (addr("198.51.100.7:1"), addr("192.0.2.1:443")));
        let a = Announcement::new(
            addr("198.51.100.7:1"),
            addr("[2001:db8::1]:443"),
            None,
            None,
            1,
        );
        let v1 = header(Outbound::V1, false, &a).unwrap();
        assert_eq!(
            v1,
            b"PROXY TCP6 ::ffff:198.51.100.7 2001:db8::1 1 443\r\n".to_vec()
        );
        assert_eq!(
            parsed(&header(Outbound::V2, false, &a).unwrap()).addresses,
            Announced::Proxy {
                source: addr("[::ffff:198.51.100.7]:1"),
                destination: addr("[2001:db8::1]:443")
            }
        );
    }

    #[test]
    fn a_relayed_connection_carries_client_authority_and_one_more_hop() {
        let inbound = proxy::Header {
            len: 0,
            version: ProxyVersion::V2,
            addresses: Announced::Proxy {
                source: addr("203.0.113.9:4000"),
                destination: addr("192.0.2.80:443"),
            },
            authority: Some(b"orig.example".to_vec()),
            hops: 2,
            checksummed: false,
        };
        let a = Announcement::new(
            addr("10.0.0.2:999"),
            addr("10.0.0.3:8443"),
            Some(&inbound),
            Some("other.example"),
            5,
        );
        assert_eq!(a.source, addr("203.0.113.9:4000"));
        assert_eq!(a.destination, addr("192.0.2.80:443"));
        let bytes = header(Outbound::V2, true, &a).unwrap();
        let h = parsed(&bytes);
        assert_eq!(h.hops, 3);
        assert_eq!(h.authority.as_deref(), Some(&b"orig.example"[..]));
        // The hop count goes out behind our sub-type, never as a bare byte.
        let hops: Vec<_> = v2::Header::try_from(&bytes[..])
            .unwrap()
            .tlvs()
            .map(|t| t.unwrap())
            .filter(|t| t.kind == TLV_HOPS)
            .map(|t| t.value.to_vec())
            .collect();
        assert_eq!(hops, vec![b"snirelay-hops\x03".to_vec()]);
    }

    fn tlvs_of(bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
        v2::Header::try_from(bytes)
            .unwrap()
            .tlvs()
            .map(|t| t.unwrap())
            .map(|t| (t.kind, t.value.to_vec()))
            .collect()
    }

    #[test]
    fn added_tlvs_follow_the_relays_own_in_order_and_configured_types_win() {
        let a = Announcement::new(
            addr("198.51.100.7:50000"),
            addr("192.0.2.1:443"),
            None,
            Some("app.example.com"),
            9,
        );
        let configured = [
            ProxyTlv {
                kind: 0x01,
                value: TlvValue::From(TlvSource::Alpn),
            },
            ProxyTlv {
                kind: 0xE2,
                value: TlvValue::From(TlvSource::Sni),
            },
            ProxyTlv {
                kind: 0xE3,
                value: TlvValue::Text("edge-7".into()),
            },
            ProxyTlv {
                kind: 0xE4,
                value: TlvValue::Bytes(vec![0, 0xFF]),
            },
        ];
        // A peer's 0xE3 loses to the configured one; its 0xEA passes.
        let inbound = {
            let mut h = proxy::V2_SIGNATURE.to_vec();
            let tlvs = [&[0xE3, 0, 4][..], b"peer", &[0xEA, 0, 3], b"vpc"].concat();
            h.extend([0x21, 0x11]);
            h.extend(((12 + tlvs.len()) as u16).to_be_bytes());
            h.extend([203, 0, 113, 9, 192, 0, 2, 80, 0x0F, 0xA0, 0x01, 0xBB]);
            h.extend(tlvs);
            h
        };
        let header_in = parsed(&inbound);
        let keep = [0xE3, 0xEA].into_iter().collect();
        let passed = crate::wire::proxy_tlv::passed_tlvs(&inbound, &header_in, &keep).tlvs;
        for crc in [false, true] {
            let added = AddedTlvs {
                configured: &configured,
                learnt: Learnt {
                    sni: Some("app.example.com"),
                    alpn: Some(b"h2"),
                    ja4: None,
                    ja3: None,
                },
                passed: &passed,
            };
            let bytes = header_with(Outbound::V2, crc, &a, &added).unwrap();
            let mut want = vec![
                (TLV_AUTHORITY, b"app.example.com".to_vec()),
                (TLV_UNIQUE_ID, b"9".to_vec()),
                (0x01, b"h2".to_vec()),
                (0xE2, b"app.example.com".to_vec()),
                (0xE3, b"edge-7".to_vec()),
                (0xE4, vec![0, 0xFF]),
                (0xEA, b"vpc".to_vec()),
            ];
            let mut got = tlvs_of(&bytes);
            if crc {
                assert_eq!(got.pop().map(|t| t.0), Some(TLV_CRC32C));
                assert!(parsed(&bytes).checksummed);
            }
            assert_eq!(got, want);
            // No ALPN offered, no SNI: those two are left out.
            let bare = AddedTlvs {
                learnt: Learnt::default(),
                ..added
            };
            want.retain(|t| t.0 != 0x01 && t.0 != 0xE2);
            let mut got = tlvs_of(&header_with(Outbound::V2, crc, &a, &bare).unwrap());
            if crc {
                got.pop();
            }
            assert_eq!(got, want);
        }
    }

    #[test]
    fn a_learnt_value_past_its_bound_is_left_out_not_cut() {
        let long = vec![b'a'; 256];
        let learnt = Learnt {
            sni: None,
            alpn: Some(&long),
            ja4: None,
            ja3: None,
        };
        assert_eq!(TlvSource::Alpn.value(&learnt), None);
        let ok = Learnt {
            alpn: Some(&long[..255]),
            ..learnt
        };
        assert_eq!(TlvSource::Alpn.value(&ok), Some(&long[..255]));
    }

    #[test]
    fn fingerprint_sources_give_the_hello_s_fingerprints() {
        let ja4 = "t13d1516h2_8daaf6152771_e5627efa2ab1";
        let ja3 = "e7d705a3286e19ea42f587b344ee6865";
        let learnt = Learnt {
            ja4: Some(ja4),
            ja3: Some(ja3),
            ..Learnt::default()
        };
        assert_eq!(TlvSource::Ja4.value(&learnt), Some(ja4.as_bytes()));
        assert_eq!(TlvSource::Ja3.value(&learnt), Some(ja3.as_bytes()));
        // No fingerprints computed: no TLV, as with no SNI.
        assert_eq!(TlvSource::Ja4.value(&Learnt::default()), None);
        assert_eq!(TlvSource::Ja3.value(&Learnt::default()), None);
    }

    #[test]
    fn local_headers_parse_as_local_or_unknown() {
        for crc in [false, true] {
            let bytes = local_header(Outbound::V2, crc).unwrap();
            assert_eq!(parsed(&bytes).addresses, Announced::Local);
        }
        let v1 = local_header(Outbound::V1, false).unwrap();
        assert_eq!(parsed(&v1).addresses, Announced::Unknown);
        assert_eq!(local_header(Outbound::None, true), None);
    }

    #[test]
    fn prepend_puts_the_header_first_in_one_buffer() {
        let (bytes, n) = prepend(Some(b"HDR".to_vec()), b"hello".to_vec());
        assert_eq!((bytes.as_slice(), n), (&b"HDRhello"[..], 3));
        let (bytes, n) = prepend(None, b"hello".to_vec());
        assert_eq!((bytes.as_slice(), n), (&b"hello"[..], 0));
    }
}
