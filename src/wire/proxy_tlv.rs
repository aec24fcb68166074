//! PROXY v2 TLV types as the spec assigns them, sets of types, and the
//! TLVs a relay copies from an inbound header to its outbound one.
//!
//! - [`TlvRole`]: what haproxy's proxy-protocol.txt (§2.2.1–2.2.8) says a
//!   type is, and whether an operator may have the relay send it
//!   (`TlvRole::addable`) or copy it through (`TlvRole::passable`).
//! - [`TlvTypes`]: a set of types, 32 bytes, no allocation; a lookup is a
//!   shift and a mask.
//! - [`PassedTlvs`]: the TLVs of chosen types read from a valid header, in
//!   their order, at most [`MAX_PASSED_TLV_BYTES`] encoded; our hop count
//!   is never among them (`passed_tlvs`).
//!
//! Pure: no I/O and no configuration. Not here: parsing and validating a
//! header ([`crate::wire::proxy`], which this reads only after it accepted the
//! header), or writing one ([`crate::proxy::outbound`]).
//!
//! Cost: nothing unless a listener lists types to pass through; then one
//! more walk over a header's TLVs and one allocation when any is kept.

use crate::wire::proxy::{self, Announced, HOPS_MAGIC, Header, ProxyVersion, TLV_HOPS};

/// Bytes (type, length and value of each) the TLVs copied from one inbound
/// header may take in the outbound one. A TLV that would pass the bound is
/// dropped whole, never cut; so is every later one. With the relay's own
/// TLVs and at most [`MAX_ADDED_TLV_BYTES`] configured ones, an outbound
/// header stays within the [`proxy::V2_MAX_BYTES`] a receiving snirelay
/// accepts.
pub const MAX_PASSED_TLV_BYTES: usize = 2048;

/// Bytes the TLVs a backend's `proxy_protocol_tlvs` adds may take in the
/// worst case (each value at its longest), type and length included.
pub const MAX_ADDED_TLV_BYTES: usize = 1024;

/// The longest a TLV the relay writes itself can be: AUTHORITY (a host
/// name), UNIQUE_ID (a u64 in decimal), the hop count and CRC32C, with
/// their type and length bytes.
pub const MAX_OWN_TLV_BYTES: usize =
    3 + proxy::MAX_AUTHORITY_BYTES + 3 + 20 + 3 + proxy::HOPS_VALUE_LEN + 3 + 4;

/// The fixed part of a v2 header and the largest address block (IPv6).
const MAX_FIXED_AND_ADDRESSES: usize = 16 + 36;

// The worst outbound header a receiving snirelay must still accept.
const _: () = assert!(
    MAX_FIXED_AND_ADDRESSES + MAX_OWN_TLV_BYTES + MAX_ADDED_TLV_BYTES + MAX_PASSED_TLV_BYTES
        <= proxy::V2_MAX_BYTES
);

/// PP2_TYPE_ALPN (§2.2.1): "the upper layer protocol in use over the
/// connection"; the relay can only say which one the client offered first.
pub const TLV_ALPN: u8 = 0x01;
/// PP2_TYPE_NOOP (§2.2.4): padding, to be ignored.
pub const TLV_NOOP: u8 = 0x04;
/// PP2_TYPE_SSL (§2.2.5); its sub-types 0x21–0x25 live inside its value.
pub const TLV_SSL: u8 = 0x20;
/// PP2_TYPE_NETNS (§2.2.6).
pub const TLV_NETNS: u8 = 0x30;

/// What the spec makes of a TLV type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlvRole {
    /// 0x01, PP2_TYPE_ALPN.
    Alpn,
    /// 0x02, PP2_TYPE_AUTHORITY: the relay sends its own (the SNI).
    Authority,
    /// 0x03, PP2_TYPE_CRC32C: covers one header, so never copied.
    Crc32c,
    /// 0x04, PP2_TYPE_NOOP.
    Noop,
    /// 0x05, PP2_TYPE_UNIQUE_ID: the relay sends its own (the `conn_id`).
    UniqueId,
    /// 0x20, PP2_TYPE_SSL: what a TLS terminator saw.
    Ssl,
    /// 0x21–0x25, PP2_SUBTYPE_SSL_*: only ever inside an SSL TLV.
    SslSubtype,
    /// 0x30, PP2_TYPE_NETNS.
    Netns,
    /// 0xE0: the first custom type, which our hop count shares with
    /// other products behind its sub-type (see [`crate::wire::proxy`]).
    HopsShared,
    /// 0xE1–0xEF, PP2_TYPE_MIN_CUSTOM..MAX_CUSTOM: "application-specific
    /// data", never used by the protocol itself.
    Custom,
    /// 0xF0–0xF7, PP2_TYPE_MIN_EXPERIM..MAX_EXPERIM: temporary
    /// experiments, "should not be used by production functionality".
    Experimental,
    /// 0xF8–0xFF, PP2_TYPE_MIN_FUTURE..MAX_FUTURE: kept for the protocol's
    /// future, "potentially to extend the protocol with multibyte type
    /// values".
    Future,
    /// Any other value: not assigned, so the spec may give it a meaning.
    Unassigned,
}

impl TlvRole {
    pub(crate) fn of(kind: u8) -> TlvRole {
        match kind {
            TLV_ALPN => TlvRole::Alpn,
            proxy::TLV_AUTHORITY => TlvRole::Authority,
            proxy::TLV_CRC32C => TlvRole::Crc32c,
            TLV_NOOP => TlvRole::Noop,
            proxy::TLV_UNIQUE_ID => TlvRole::UniqueId,
            TLV_SSL => TlvRole::Ssl,
            0x21..=0x25 => TlvRole::SslSubtype,
            TLV_NETNS => TlvRole::Netns,
            TLV_HOPS => TlvRole::HopsShared,
            0xE1..=0xEF => TlvRole::Custom,
            0xF0..=0xF7 => TlvRole::Experimental,
            0xF8..=0xFF => TlvRole::Future,
            _ => TlvRole::Unassigned,
        }
    }

    /// Whether a backend's `proxy_protocol_tlvs` may send this type: the
    /// custom and experimental ranges, and ALPN (with the client's ALPN
    /// only: the configuration checks the value). Refused: the types the
    /// relay writes itself (AUTHORITY, UNIQUE_ID, CRC32C, the hop count's
    /// 0xE0), NOOP, SSL and NETNS (the relay terminates no TLS and has no
    /// namespace to name), and unassigned and future values.
    pub(crate) fn addable(self) -> bool {
        matches!(
            self,
            TlvRole::Alpn | TlvRole::Custom | TlvRole::Experimental
        )
    }

    /// Whether a listener's `pass_through_tlvs` may copy this type: what an
    /// upstream can say about a connection the relay did not see (ALPN,
    /// SSL, NETNS, custom, experimental, and 0xE0 other than our hop
    /// count). Refused: what the relay writes itself (AUTHORITY, UNIQUE_ID,
    /// CRC32C), NOOP, the SSL sub-types (never top-level) and unassigned
    /// and future values.
    pub(crate) fn passable(self) -> bool {
        matches!(
            self,
            TlvRole::Alpn
                | TlvRole::Ssl
                | TlvRole::Netns
                | TlvRole::HopsShared
                | TlvRole::Custom
                | TlvRole::Experimental
        )
    }

    /// As the spec names it, for error messages.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            TlvRole::Alpn => "PP2_TYPE_ALPN",
            TlvRole::Authority => "PP2_TYPE_AUTHORITY, which the relay sends itself (the SNI)",
            TlvRole::Crc32c => "PP2_TYPE_CRC32C (see proxy_protocol_crc32c)",
            TlvRole::Noop => "PP2_TYPE_NOOP (padding)",
            TlvRole::UniqueId => {
                "PP2_TYPE_UNIQUE_ID, which the relay sends itself (the connection id)"
            }
            TlvRole::Ssl => "PP2_TYPE_SSL (a TLS terminator's; the relay terminates none)",
            TlvRole::SslSubtype => "a PP2_SUBTYPE_SSL_* type, only ever inside PP2_TYPE_SSL",
            TlvRole::Netns => "PP2_TYPE_NETNS",
            TlvRole::HopsShared => "0xE0, the type of the relay's own hop count",
            TlvRole::Custom => "a custom type",
            TlvRole::Experimental => "an experimental type",
            TlvRole::Future => "reserved by the spec for its future (0xF8-0xFF)",
            TlvRole::Unassigned => "not assigned by the spec",
        }
    }
}

/// A set of TLV types.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TlvTypes([u64; 4]);

impl TlvTypes {
    /// No type.
    pub const NONE: TlvTypes = TlvTypes([0; 4]);

    /// Adds type `kind`.
    pub fn insert(&mut self, kind: u8) {
        self.0[usize::from(kind >> 6)] |= 1 << (kind & 63);
    }

    /// Whether type `kind` is in the set.
    pub fn contains(&self, kind: u8) -> bool {
        self.0[usize::from(kind >> 6)] & (1 << (kind & 63)) != 0
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0 == [0; 4]
    }

    /// The types, lowest first.
    pub fn iter(&self) -> impl Iterator<Item = u8> + '_ {
        (0..=u8::MAX).filter(|&kind| self.contains(kind))
    }
}

impl FromIterator<u8> for TlvTypes {
    fn from_iter<I: IntoIterator<Item = u8>>(kinds: I) -> TlvTypes {
        let mut set = TlvTypes::NONE;
        kinds.into_iter().for_each(|kind| set.insert(kind));
        set
    }
}

/// TLVs copied from an inbound header, encoded as they go out (type, two
/// length bytes, value), at most [`MAX_PASSED_TLV_BYTES`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassedTlvs(Vec<u8>);

impl PassedTlvs {
    /// No TLV passed through.
    pub const NONE: PassedTlvs = PassedTlvs(Vec::new());

    /// Whether no TLV was passed through.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The TLVs as (type, value), in the order they arrived.
    pub fn iter(&self) -> impl Iterator<Item = (u8, &[u8])> + '_ {
        let mut rest = &self.0[..];
        std::iter::from_fn(move || {
            let (&[kind, high, low], tail) = rest.split_first_chunk::<3>()?;
            let (value, tail) = tail.split_at(usize::from(u16::from_be_bytes([high, low])));
            rest = tail;
            Some((kind, value))
        })
    }

    /// Adds one TLV unless it would pass the bound; says whether it did.
    fn push(&mut self, kind: u8, value: &[u8]) -> bool {
        if self.0.len() + 3 + value.len() > MAX_PASSED_TLV_BYTES {
            return false;
        }
        self.0.push(kind);
        self.0
            .extend_from_slice(&(value.len() as u16).to_be_bytes());
        self.0.extend_from_slice(value);
        true
    }
}

/// What `passed_tlvs` kept, and how many TLVs of a kept type it dropped
/// for the bound.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Passed {
    /// The TLVs kept, encoded.
    pub tlvs: PassedTlvs,
    /// TLVs of a kept type left out because the bound was reached.
    pub dropped: usize,
}

/// The TLVs of types in `keep` from `raw`, the bytes of `header` as
/// [`proxy::parse`] accepted it. Only a v2 PROXY header has TLVs to pass
/// (LOCAL's block is never read, and under the UNSPEC family the block is
/// opaque, as [`crate::wire::proxy`] reads it); our hop count never passes, as it
/// is counted, not carried. Repeats pass as they came; from the first TLV
/// that would pass [`MAX_PASSED_TLV_BYTES`] on, nothing more is kept.
pub fn passed_tlvs(raw: &[u8], header: &Header, keep: &TlvTypes) -> Passed {
    let mut passed = Passed::default();
    if keep.is_empty() || header.version != ProxyVersion::V2 || header.addresses == Announced::Local
    {
        return passed;
    }
    let Some(raw) = raw.get(..header.len) else {
        return passed;
    };
    let Ok(parsed) = ppp::v2::Header::try_from(raw) else {
        return passed;
    };
    for tlv in parsed.tlvs() {
        // The header was accepted whole, so its TLVs tile.
        let Ok(tlv) = tlv else { break };
        let ours = tlv.kind == TLV_HOPS && tlv.value.starts_with(HOPS_MAGIC);
        if !keep.contains(tlv.kind) || ours {
            continue;
        }
        if passed.dropped > 0 || !passed.tlvs.push(tlv.kind, &tlv.value) {
            passed.dropped += 1;
        }
    }
    passed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::proxy::{Parse, V2_SIGNATURE, hops_value, parse};

    fn tlv(kind: u8, value: &[u8]) -> Vec<u8> {
        let mut t = vec![kind];
        t.extend((value.len() as u16).to_be_bytes());
        t.extend(value);
        t
    }

    fn v2(command: u8, family: u8, addresses: &[u8], tlvs: &[u8]) -> Vec<u8> {
        let mut h = V2_SIGNATURE.to_vec();
        h.extend([0x20 | command, family]);
        h.extend(((addresses.len() + tlvs.len()) as u16).to_be_bytes());
        h.extend(addresses);
        h.extend(tlvs);
        h
    }

    const TCP4: [u8; 12] = [192, 0, 2, 1, 198, 51, 100, 2, 0x1F, 0x90, 0x01, 0xBB];

    fn header(bytes: &[u8]) -> Header {
        match parse(bytes) {
            Parse::Header(h) => h,
            other => panic!("{other:?}"),
        }
    }

    fn kept(bytes: &[u8], keep: &[u8]) -> Passed {
        passed_tlvs(bytes, &header(bytes), &keep.iter().copied().collect())
    }

    #[test]
    fn roles_follow_the_spec() {
        let addable: Vec<u8> = (0..=u8::MAX)
            .filter(|&k| TlvRole::of(k).addable())
            .collect();
        let mut want = vec![0x01];
        want.extend(0xE1..=0xF7);
        assert_eq!(addable, want);
        let passable: Vec<u8> = (0..=u8::MAX)
            .filter(|&k| TlvRole::of(k).passable())
            .collect();
        let mut want = vec![0x01, 0x20, 0x30];
        want.extend(0xE0..=0xF7);
        assert_eq!(passable, want);
        for (kind, role) in [
            (0x02, TlvRole::Authority),
            (0x03, TlvRole::Crc32c),
            (0x04, TlvRole::Noop),
            (0x05, TlvRole::UniqueId),
            (0x23, TlvRole::SslSubtype),
            (0x06, TlvRole::Unassigned),
            (0x00, TlvRole::Unassigned),
            (0xF8, TlvRole::Future),
        ] {
            assert_eq!(TlvRole::of(kind), role, "{kind:#04x}");
        }
    }

    #[test]
    fn a_type_set_holds_exactly_its_members() {
        let set: TlvTypes = [0x00, 0x3F, 0x40, 0xEA, 0xFF].into_iter().collect();
        assert_eq!(
            set.iter().collect::<Vec<_>>(),
            [0x00, 0x3F, 0x40, 0xEA, 0xFF]
        );
        assert!(!set.contains(0x41) && !set.contains(0xFE));
        assert!(TlvTypes::NONE.is_empty() && !set.is_empty());
    }

    #[test]
    fn kept_types_pass_in_order_with_repeats_and_never_our_hop_count() {
        let mut tlvs = tlv(0xEA, b"vpce-1");
        tlvs.extend(tlv(0x02, b"a.example"));
        tlvs.extend(tlv(TLV_HOPS, &hops_value(2)));
        tlvs.extend(tlv(TLV_HOPS, b"\x01psc-connection"));
        tlvs.extend(tlv(0xEB, b"not kept"));
        tlvs.extend(tlv(0xEA, b""));
        let bytes = v2(1, 0x11, &TCP4, &tlvs);
        let passed = kept(&bytes, &[0xEA, TLV_HOPS]);
        assert_eq!(passed.dropped, 0);
        assert_eq!(
            passed.tlvs.iter().collect::<Vec<_>>(),
            [
                (0xEA, &b"vpce-1"[..]),
                (TLV_HOPS, &b"\x01psc-connection"[..]),
                (0xEA, &b""[..]),
            ]
        );
        assert!(kept(&bytes, &[]).tlvs.is_empty());
    }

    #[test]
    fn local_and_unspec_headers_pass_nothing() {
        let tlvs = tlv(0xEA, b"x");
        // LOCAL over TCP4 with a TLV: the block is never read.
        assert!(kept(&v2(0, 0x11, &TCP4, &tlvs), &[0xEA]).tlvs.is_empty());
        // PROXY under UNSPEC: the block is opaque.
        assert!(kept(&v2(1, 0x00, &[], &tlvs), &[0xEA]).tlvs.is_empty());
        // PROXY over UDP4 (a fallback to UNSPEC for addresses): TLVs read.
        assert_eq!(
            kept(&v2(1, 0x12, &TCP4, &tlvs), &[0xEA])
                .tlvs
                .iter()
                .count(),
            1
        );
    }

    #[test]
    fn the_bound_drops_whole_tlvs_from_the_first_that_does_not_fit() {
        let big = vec![b'x'; 1000];
        let mut tlvs = Vec::new();
        for _ in 0..3 {
            tlvs.extend(tlv(0xEA, &big));
        }
        tlvs.extend(tlv(0xEA, b"small"));
        let bytes = v2(1, 0x11, &TCP4, &tlvs);
        let passed = kept(&bytes, &[0xEA]);
        assert_eq!(passed.tlvs.iter().count(), 2);
        assert_eq!(
            passed.dropped, 2,
            "the third big one and the small one after it"
        );
        assert!(passed.tlvs.0.len() <= MAX_PASSED_TLV_BYTES);
    }
}
