//! QUIC, as far as a relay that routes by SNI needs it: the versions it
//! reads ([`Version`]), their public Initial keys ([`initial_keys`]), the
//! pure parser that turns a flow's first datagrams into its ClientHello
//! ([`initial`]), its inverse, which seals Initial packets ([`seal`]), and
//! the refusal built with it: the server Initial carrying CONNECTION_CLOSE
//! with a TLS alert, which a client reports at once ([`refusal`]), the
//! flow table that decides what each client's flow does, fed datagrams and
//! time without I/O (`flows`), and the `protocol = "quic"` listener that
//! runs it over UDP sockets (`socket_task`), with batched datagram I/O (`io`: recvmmsg, GSO, GRO
//! through quinn-udp), following a flow to a client's new address by the
//! connection IDs its backend chose ([`cid`]).
//!
//! Only what is public is read: a client's Initial packets are protected
//! with keys derived from their Destination Connection ID and a salt the
//! version publishes (RFC 9001 §5.2, RFC 9369 §3.3.1), so anyone on the
//! path can remove that protection. The keys are derived by rustls (its
//! default aws-lc-rs provider); no cipher is written here. Nothing of the
//! handshake that follows (Handshake and 1-RTT keys) is ever derivable or
//! held: those packets pass through unread.
//!
//! Not here, except in `socket_task`, `io` and `handover`: sockets and
//! tasks; flows and their deadlines only in `flows` (see [`initial`] for
//! what the caller bounds). Not
//! anywhere: version negotiation (a long header of another version is
//! [`initial::Verdict::UnknownVersion`]; answering it is the backend's
//! business, since only the backend knows which versions it speaks).

pub(crate) mod backend_address;
pub mod cid;
pub(crate) mod flow_task;
pub(crate) mod flows;
pub(crate) mod handover;
pub mod initial;
pub(crate) mod io;
pub mod refusal;
pub mod seal;
pub(crate) mod socket_task;

use rustls::Side;
use rustls::quic::Keys;

/// A QUIC version whose Initial packets this relay can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Version {
    /// QUIC version 1 (RFC 9000, RFC 9001).
    V1,
    /// QUIC version 2 (RFC 9369): the same protocol with another version
    /// number, salt, HKDF labels and long-header packet type bits.
    V2,
}

/// Long-header packet types, named once the version's bits are mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PacketType {
    Initial,
    ZeroRtt,
    Handshake,
    Retry,
}

impl Version {
    /// The version of a long header's 32-bit field, if it is one of ours.
    pub(crate) const fn from_wire(version: u32) -> Option<Version> {
        match version {
            0x0000_0001 => Some(Version::V1),
            0x6b33_43cf => Some(Version::V2),
            _ => None,
        }
    }

    /// The version as it appears on the wire.
    pub(crate) const fn wire(self) -> u32 {
        match self {
            Version::V1 => 0x0000_0001,
            Version::V2 => 0x6b33_43cf,
        }
    }

    /// The name for log lines and labels.
    pub const fn as_str(self) -> &'static str {
        match self {
            Version::V1 => "v1",
            Version::V2 => "v2",
        }
    }

    /// The packet type of a long header's first byte (bits 4-5): v2
    /// rotates v1's assignment (RFC 9369 §3.2), so that middleboxes which
    /// only know v1 do not ossify it.
    pub(crate) const fn packet_type(self, first: u8) -> PacketType {
        let bits = (first >> 4) & 0x03;
        match (self, bits) {
            (Version::V1, 0) | (Version::V2, 1) => PacketType::Initial,
            (Version::V1, 1) | (Version::V2, 2) => PacketType::ZeroRtt,
            (Version::V1, 2) | (Version::V2, 3) => PacketType::Handshake,
            _ => PacketType::Retry,
        }
    }

    /// The matching rustls version (salt and HKDF labels).
    pub(crate) const fn rustls(self) -> rustls::quic::Version {
        match self {
            Version::V1 => rustls::quic::Version::V1,
            Version::V2 => rustls::quic::Version::V2,
        }
    }
}

/// The Initial keys of the connection whose client chose `client_dcid` as
/// its first Destination Connection ID, for `side`: the server side's
/// `remote` keys open the client's Initials, its `local` ones seal the
/// server's. Derived by rustls (HKDF over the version's salt and labels).
pub fn initial_keys(version: Version, client_dcid: &[u8], side: Side) -> Keys {
    Keys::initial(
        version.rustls(),
        INITIAL_SUITE.suite,
        INITIAL_SUITE.quic,
        client_dcid,
        side,
    )
}

/// Initial packets are always AES-128-GCM with SHA-256 (RFC 9001 §5.2).
static INITIAL_SUITE: std::sync::LazyLock<rustls::quic::Suite> = std::sync::LazyLock::new(|| {
    rustls::crypto::aws_lc_rs::cipher_suite::TLS13_AES_128_GCM_SHA256
        .tls13()
        .and_then(|suite| suite.quic_suite())
        .expect("rustls' TLS13_AES_128_GCM_SHA256 has a QUIC suite")
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packet_type_bits_follow_the_version() {
        // First bytes of real Initials: 0xc? in v1, 0xd? in v2.
        assert_eq!(Version::V1.packet_type(0xc3), PacketType::Initial);
        assert_eq!(Version::V2.packet_type(0xd1), PacketType::Initial);
        assert_eq!(Version::V1.packet_type(0xd1), PacketType::ZeroRtt);
        assert_eq!(Version::V2.packet_type(0xe1), PacketType::ZeroRtt);
        assert_eq!(Version::V1.packet_type(0xe1), PacketType::Handshake);
        assert_eq!(Version::V2.packet_type(0xf1), PacketType::Handshake);
        assert_eq!(Version::V1.packet_type(0xf0), PacketType::Retry);
        assert_eq!(Version::V2.packet_type(0xc0), PacketType::Retry);
        for v in [Version::V1, Version::V2] {
            assert_eq!(Version::from_wire(v.wire()), Some(v));
        }
        assert_eq!(Version::from_wire(0xff00_001d), None);
    }
}
