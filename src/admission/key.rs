//! Whom admission counts: the [`Source`] of a connection (its measured
//! peer, or the client a trusted relay claims) and the [`SourceKey`] its
//! tables are keyed by (the address cut to the listener's prefix, or a
//! hello's JA4 as a [`Ja4Key`], alone or with it).
//!
//! Not here: the limits that count by them ([`super::gate`],
//! [`super::route`]).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::addr::{ClaimedAddr, PeerAddr};
use crate::wire::cidr::{self, canonical};

/// Whose address a connection is admitted on: the measured peer, or (for a
/// trusted peer relay, once the PROXY preface is read) the claimed client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The measured TCP peer: a client, or an untrusted relay.
    Peer(PeerAddr),
    /// The client a trusted peer relay's PROXY header claims.
    Claimed(ClaimedAddr),
}

impl From<PeerAddr> for Source {
    fn from(peer: PeerAddr) -> Self {
        Source::Peer(peer)
    }
}

impl From<ClaimedAddr> for Source {
    fn from(claimed: ClaimedAddr) -> Self {
        Source::Claimed(claimed)
    }
}

impl Source {
    /// The address limits apply to, with IPv4-mapped IPv6 turned into IPv4
    /// so that a dual-stack socket cannot give one client two keys.
    pub(crate) fn ip(self) -> IpAddr {
        let ip = match self {
            Source::Peer(PeerAddr(addr)) | Source::Claimed(ClaimedAddr(addr)) => addr.ip(),
        };
        canonical(ip)
    }
}

/// The per-source table key: a source address cut to its prefix, or (by
/// `limit_key`) a hello's JA4, alone or with that source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceKey {
    /// An IPv4 source cut to `source_prefix_v4` bits.
    V4([u8; 4]),
    /// An IPv6 source cut to `source_prefix_v6` bits.
    V6([u8; 16]),
    /// A hello's JA4 alone (`limit_key = "ja4"`), as a 48-bit hash.
    Ja4(Ja4Key),
    /// An IPv4 source cut to its prefix, with the hello's JA4 (`"source+ja4"`).
    V4Ja4([u8; 4], Ja4Key),
    /// An IPv6 source cut to its prefix, with the hello's JA4 (`"source+ja4"`).
    V6Ja4([u8; 16], Ja4Key),
}

/// A JA4 fingerprint as a table key: 48 bits of a SipHash-1-3 of it with
/// fixed keys (the same on every run), as bytes so the key keeps an
/// alignment of 1. Two JA4s share a key with odds of 2^-48, and a limit
/// then counts them together, nothing worse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ja4Key([u8; 6]);

impl Ja4Key {
    /// The key of `ja4`.
    pub fn new(ja4: &str) -> Ja4Key {
        use std::hash::Hasher;
        let mut hasher = siphasher::sip::SipHasher13::new_with_keys(0, 0);
        hasher.write(ja4.as_bytes());
        let [a, b, c, d, e, f, ..] = hasher.finish().to_be_bytes();
        Ja4Key([a, b, c, d, e, f])
    }
}

impl fmt::Display for Ja4Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ja4#")?;
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl SourceKey {
    /// This key with `ja4` beside its address.
    pub(crate) fn with_ja4(self, ja4: &str) -> SourceKey {
        let ja4 = Ja4Key::new(ja4);
        match self {
            SourceKey::V4(ip) | SourceKey::V4Ja4(ip, _) => SourceKey::V4Ja4(ip, ja4),
            SourceKey::V6(ip) | SourceKey::V6Ja4(ip, _) => SourceKey::V6Ja4(ip, ja4),
            SourceKey::Ja4(_) => SourceKey::Ja4(ja4),
        }
    }

    /// The key of `source`: its address (IPv4-mapped IPv6 as IPv4) with the
    /// bits past `prefix_v4` or `prefix_v6` zeroed.
    pub fn new(source: Source, prefix_v4: u8, prefix_v6: u8) -> SourceKey {
        match source.ip() {
            IpAddr::V4(v4) => {
                SourceKey::V4((u32::from(v4) & cidr::mask32(prefix_v4)).to_be_bytes())
            }
            IpAddr::V6(v6) => {
                SourceKey::V6((u128::from(v6) & cidr::mask128(prefix_v6)).to_be_bytes())
            }
        }
    }
}

impl fmt::Display for SourceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceKey::V4(b) => Ipv4Addr::from(*b).fmt(f),
            SourceKey::V6(b) => Ipv6Addr::from(*b).fmt(f),
            SourceKey::Ja4(ja4) => ja4.fmt(f),
            SourceKey::V4Ja4(b, ja4) => write!(f, "{}+{ja4}", Ipv4Addr::from(*b)),
            SourceKey::V6Ja4(b, ja4) => write!(f, "{}+{ja4}", Ipv6Addr::from(*b)),
        }
    }
}
