//! The preface stage: an inbound PROXY protocol header (v2 or v1) from a
//! trusted peer relay, read before the ClientHello.
//!
//! Runs only on listeners with a `[listener.proxy_protocol]` section; others
//! go straight to `inspect`. Per connection:
//! - the source is trusted when its socket address lies in `trusted`;
//! - every source is sniffed: a PROXY signature (v2's 12-byte signature, or
//!   v1's `"PROXY "`) from an untrusted source is closed (`proxy_untrusted`);
//!   anything else from it goes on untouched;
//! - a trusted source in mode `require` must send a valid header before
//!   `client_hello_timeout` (`proxy_missing`, `proxy_invalid`); in mode
//!   `optional` a first byte that cannot start a signature (a TLS record
//!   starts with 0x16) means "no header" and the connection goes on as is,
//!   so a fleet can migrate without a flag day.
//!
//! Every byte read past the header is kept in [`Preface::buffered`] and
//! handed to `inspect`, which starts from it: sniffing never loses or
//! re-reads a byte.
//!
//! Validation follows the spec (haproxy's proxy-protocol.txt): v2 needs
//! version 2, command LOCAL or PROXY, a known family and protocol, a length
//! that holds the family's addresses, TLVs that tile the rest exactly, and a
//! matching CRC32C when that TLV is present; v1 is at most 107 bytes and
//! ends in CRLF. Encoding and field parsing are the `ppp` crate's; framing,
//! the CRC32C check (the `crc32c` crate) and the hop guard are ours.
//!
//! # Claims, hops, and per-source limits
//! A PROXY command with TCP over IPv4/IPv6 yields a [`ClaimedAddr`] (logged as
//! `client.claimed`, never mixed with `client.peer`). LOCAL (v2) and
//! UNKNOWN (v1), and PROXY with an unspecified or unix family, claim nothing:
//! the socket addresses are used. The custom TLV [`TLV_HOPS`] counts
//! relay-to-relay hops; a header without it counts as one hop. More than
//! `max_hops` is refused (`hop_limit`), so a routing loop between cluster
//! nodes dies within a few hops.
//!
//! Budget decision (see [`Source::limit_key`]): a trusted peer's own
//! connections are **exempt** from per-source limits keyed on the peer's
//! address — one peer relay carries many clients, and capping it as one
//! source would cut a whole edge's traffic at 100 connections. Instead,
//! connections that carry a claim are limited by the claimed address (the
//! real client), as if it had connected directly; those with no claim
//! (LOCAL health checks, UNKNOWN, or no header in `optional` mode) are not
//! counted as a client. A trusted peer is bounded by `global.max_connections`
//! only. Because the claim is known only after the preface, admission for a
//! trusted source happens after this stage, not before the first read.
//!
//! Cost: at most one small buffer ([`READ_CHUNK`]) per connection, moved on to
//! `inspect`; a header is parsed once when complete (framing is re-checked
//! per read, which is a few comparisons).

use std::io;
use std::net::{IpAddr, SocketAddr};

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout_at};

use crate::addr::{ClaimedAddr, PeerAddr};
use crate::cidr::Cidr;
use crate::close::CloseReason;

/// The v2 signature (12 bytes).
pub const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// The v1 signature, with its separating space.
pub const V1_SIGNATURE: &[u8; 6] = b"PROXY ";
/// Longest v1 header, CRLF included (spec §2.1).
pub const V1_MAX_BYTES: usize = 107;
/// Longest v2 header accepted, fixed part included. The spec allows up to
/// 16 + 65535; no peer sends more than a few hundred bytes, and buffering
/// 64 KiB per connection for a header would be a gift to an attacker.
pub const V2_MAX_BYTES: usize = 4096;
/// Bytes asked for per read while sniffing or reading a header.
pub const READ_CHUNK: usize = 4096;

/// TLV types (spec §2.2.1–2.2.7) and our custom hop count.
pub const TLV_AUTHORITY: u8 = 0x02;
pub const TLV_CRC32C: u8 = 0x03;
pub const TLV_UNIQUE_ID: u8 = 0x05;
/// Custom (0xE0–0xEF is reserved for application use): relay-to-relay hops
/// so far, one byte, at least 1.
pub const TLV_HOPS: u8 = 0xE0;

/// What the listener expects from trusted sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Require,
    Optional,
}

/// A listener's validated `[listener.proxy_protocol]` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inbound {
    pub trusted: Vec<Cidr>,
    pub mode: Mode,
    pub max_hops: u8,
}

impl Inbound {
    pub fn trusts(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|net| net.contains(ip))
    }
}

/// What a complete, valid header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Bytes the header occupies at the start of the stream.
    pub len: usize,
    pub version: Version,
    pub addresses: Announced,
    /// The AUTHORITY TLV (v2 only): the original SNI, as the sender saw it.
    pub authority: Option<Vec<u8>>,
    /// The hop count: [`TLV_HOPS`] if present, else 1.
    pub hops: u8,
    /// Whether a CRC32C TLV was present (and therefore matched).
    pub checksummed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// The header's command and addresses, reduced to what the relay uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Announced {
    /// PROXY over TCP: who the client is and what it connected to.
    Proxy {
        source: SocketAddr,
        destination: SocketAddr,
    },
    /// v2 LOCAL: the peer's own connection (e.g. a health check).
    Local,
    /// v1 UNKNOWN, or v2 PROXY with an unspecified or unix family: a client
    /// whose address the peer could not say.
    Unknown,
}

/// The verdict of [`parse`] on the bytes read so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parse {
    /// A complete, valid header.
    Header(Header),
    /// A prefix of something that may still become a valid header.
    Incomplete,
    /// The bytes cannot start a PROXY header (e.g. a TLS record).
    NotProxy,
    /// A PROXY signature followed by something the spec forbids.
    Invalid(Invalid),
}

/// How a header broke the spec.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    #[error("v2 version nibble {0:#x} is not 2")]
    Version(u8),
    #[error("v2 command {0:#x} is neither LOCAL nor PROXY")]
    Command(u8),
    #[error("v2 family/protocol byte {0:#04x} is not defined")]
    FamilyProtocol(u8),
    #[error("v2 PROXY over a datagram protocol on a TCP connection")]
    Datagram,
    #[error("v2 header of {0} bytes exceeds the {V2_MAX_BYTES}-byte cap")]
    TooLarge(usize),
    #[error("v2 addresses or TLVs inconsistent with the length: {0}")]
    Layout(String),
    #[error("v2 TLV {0:#04x} has a bad length or value, or appears twice")]
    Tlv(u8),
    #[error("v2 CRC32C mismatch")]
    Checksum,
    #[error("v1 header longer than {V1_MAX_BYTES} bytes or not CRLF-terminated")]
    V1Framing,
    #[error("v1 header: {0}")]
    V1Syntax(String),
}

/// What the first bytes are, as far as a PROXY signature goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sniff {
    /// A prefix of a signature (or nothing yet).
    Incomplete,
    /// Cannot start a PROXY header (e.g. a TLS record, first byte 0x16).
    NotProxy,
    /// A whole signature of this version: a PROXY header, valid or not.
    Signature(Version),
}

/// Whether the first bytes start a PROXY signature: decided on the first
/// byte for anything that is not one.
pub fn sniff(bytes: &[u8]) -> Sniff {
    let Some(&first) = bytes.first() else {
        return Sniff::Incomplete;
    };
    let (signature, version): (&[u8], _) = match first {
        b'\r' => (V2_SIGNATURE, Version::V2),
        b'P' => (V1_SIGNATURE, Version::V1),
        _ => return Sniff::NotProxy,
    };
    let n = bytes.len().min(signature.len());
    if bytes[..n] != signature[..n] {
        Sniff::NotProxy
    } else if n < signature.len() {
        Sniff::Incomplete
    } else {
        Sniff::Signature(version)
    }
}

/// Parses a PROXY header at the start of `bytes`. Pure: every strict prefix
/// of a valid header is [`Parse::Incomplete`].
pub fn parse(bytes: &[u8]) -> Parse {
    match sniff(bytes) {
        Sniff::Incomplete => Parse::Incomplete,
        Sniff::NotProxy => Parse::NotProxy,
        Sniff::Signature(Version::V2) => parse_v2(bytes),
        Sniff::Signature(Version::V1) => parse_v1(bytes),
    }
}

fn parse_v2(bytes: &[u8]) -> Parse {
    use ppp::v2;
    const FIXED: usize = 16;
    if bytes.len() < FIXED {
        return Parse::Incomplete;
    }
    let version_command = bytes[12];
    if version_command >> 4 != 2 {
        return Parse::Invalid(Invalid::Version(version_command >> 4));
    }
    if version_command & 0x0F > 1 {
        return Parse::Invalid(Invalid::Command(version_command & 0x0F));
    }
    let family_protocol = bytes[13];
    if family_protocol >> 4 > 3 || family_protocol & 0x0F > 2 {
        return Parse::Invalid(Invalid::FamilyProtocol(family_protocol));
    }
    let total = FIXED + usize::from(u16::from_be_bytes([bytes[14], bytes[15]]));
    if total > V2_MAX_BYTES {
        return Parse::Invalid(Invalid::TooLarge(total));
    }
    if bytes.len() < total {
        return Parse::Incomplete;
    }
    let raw = &bytes[..total];
    let header = match v2::Header::try_from(raw) {
        Ok(header) => header,
        Err(e) => return Parse::Invalid(Invalid::Layout(e.to_string())),
    };

    let mut authority = None;
    let mut crc = None;
    let mut hops = None;
    let tlv_start = total - header.tlv_bytes().len();
    let mut offset = tlv_start;
    for tlv in header.tlvs() {
        let tlv = match tlv {
            Ok(tlv) => tlv,
            Err(e) => return Parse::Invalid(Invalid::Layout(e.to_string())),
        };
        let value_at = offset + 3;
        offset = value_at + tlv.value.len();
        let twice = match tlv.kind {
            TLV_AUTHORITY => authority.replace(tlv.value.to_vec()).is_some(),
            TLV_CRC32C if tlv.value.len() == 4 => crc.replace(value_at).is_some(),
            TLV_HOPS if tlv.value.len() == 1 && tlv.value[0] >= 1 => {
                hops.replace(tlv.value[0]).is_some()
            }
            TLV_CRC32C | TLV_HOPS => true,
            _ => false,
        };
        if twice {
            return Parse::Invalid(Invalid::Tlv(tlv.kind));
        }
    }
    if let Some(at) = crc {
        let claimed = u32::from_be_bytes([raw[at], raw[at + 1], raw[at + 2], raw[at + 3]]);
        let computed = crc32c::crc32c_append(crc32c::crc32c(&raw[..at]), &[0; 4]);
        let computed = crc32c::crc32c_append(computed, &raw[at + 4..]);
        if computed != claimed {
            return Parse::Invalid(Invalid::Checksum);
        }
    }

    let addresses = match (header.command, header.addresses) {
        (v2::Command::Local, _) => Announced::Local,
        (v2::Command::Proxy, v2::Addresses::IPv4(a)) if header.protocol == v2::Protocol::Stream => {
            Announced::Proxy {
                source: (a.source_address, a.source_port).into(),
                destination: (a.destination_address, a.destination_port).into(),
            }
        }
        (v2::Command::Proxy, v2::Addresses::IPv6(a)) if header.protocol == v2::Protocol::Stream => {
            Announced::Proxy {
                source: (a.source_address, a.source_port).into(),
                destination: (a.destination_address, a.destination_port).into(),
            }
        }
        (v2::Command::Proxy, v2::Addresses::IPv4(_) | v2::Addresses::IPv6(_)) => {
            return Parse::Invalid(Invalid::Datagram);
        }
        (v2::Command::Proxy, v2::Addresses::Unspecified | v2::Addresses::Unix(_)) => {
            Announced::Unknown
        }
    };
    Parse::Header(Header {
        len: total,
        version: Version::V2,
        addresses,
        authority,
        hops: hops.unwrap_or(1),
        checksummed: crc.is_some(),
    })
}

fn parse_v1(bytes: &[u8]) -> Parse {
    use ppp::v1;
    let window = &bytes[..bytes.len().min(V1_MAX_BYTES)];
    let end = match window.iter().position(|&b| b == b'\r') {
        // The CR must be followed by LF, and both must fit in 107 bytes.
        Some(cr) if cr + 1 < V1_MAX_BYTES => match bytes.get(cr + 1) {
            Some(b'\n') => cr + 2,
            Some(_) => return Parse::Invalid(Invalid::V1Framing),
            None => return Parse::Incomplete,
        },
        Some(_) => return Parse::Invalid(Invalid::V1Framing),
        None if bytes.len() >= V1_MAX_BYTES - 1 => return Parse::Invalid(Invalid::V1Framing),
        None => {
            // Fail early on bytes no v1 header contains.
            if window.iter().all(|b| (0x20..0x7F).contains(b)) {
                return Parse::Incomplete;
            }
            return Parse::Invalid(Invalid::V1Framing);
        }
    };
    let line = &bytes[..end];
    if !line[..end - 2].iter().all(|b| (0x20..0x7F).contains(b)) {
        return Parse::Invalid(Invalid::V1Framing);
    }
    let header = match v1::Header::try_from(line) {
        Ok(header) => header,
        Err(e) => return Parse::Invalid(Invalid::V1Syntax(e.to_string())),
    };
    let addresses = match header.addresses {
        v1::Addresses::Tcp4(a) => Announced::Proxy {
            source: (a.source_address, a.source_port).into(),
            destination: (a.destination_address, a.destination_port).into(),
        },
        v1::Addresses::Tcp6(a) => Announced::Proxy {
            source: (a.source_address, a.source_port).into(),
            destination: (a.destination_address, a.destination_port).into(),
        },
        v1::Addresses::Unknown => Announced::Unknown,
    };
    Parse::Header(Header {
        len: end,
        version: Version::V1,
        addresses,
        authority: None,
        hops: 1,
        checksummed: false,
    })
}

// ------------------------------------------------------------------- I/O

/// Who a connection is from, for per-source limits (see the module header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// An untrusted source, or a listener without PROXY protocol.
    Direct(PeerAddr),
    /// A trusted peer relaying a client whose address it claims.
    Relayed {
        peer: PeerAddr,
        claimed: ClaimedAddr,
    },
    /// A trusted peer's connection without a claim: LOCAL, UNKNOWN, or no
    /// header in `optional` mode.
    TrustedPeer(PeerAddr),
}

/// The address per-source limits key on, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKey {
    /// Count this connection against this address's prefix.
    Source(IpAddr),
    /// Not counted per source (bounded by `global.max_connections` only).
    Exempt,
}

impl Source {
    /// Claimed address for trusted relays, measured address otherwise; a
    /// trusted peer's own connections are exempt.
    pub fn limit_key(&self) -> LimitKey {
        match self {
            Source::Direct(peer) => LimitKey::Source(peer.0.ip()),
            Source::Relayed { claimed, .. } => LimitKey::Source(claimed.0.ip()),
            Source::TrustedPeer(_) => LimitKey::Exempt,
        }
    }

    pub fn claimed(&self) -> Option<ClaimedAddr> {
        match self {
            Source::Relayed { claimed, .. } => Some(*claimed),
            _ => None,
        }
    }
}

/// The outcome of the preface stage.
#[derive(Debug)]
pub struct Preface {
    pub source: Source,
    /// The header, when a trusted source sent one.
    pub header: Option<Header>,
    /// Bytes read past the header: the start of the ClientHello.
    pub buffered: Vec<u8>,
}

/// Why the preface closed the connection.
#[derive(Debug, thiserror::Error)]
pub enum PrefaceError {
    #[error("closed without sending a byte")]
    Silent,
    #[error("closed in the middle of a PROXY header")]
    Closed,
    #[error("no byte before the deadline")]
    Timeout,
    #[error("a trusted source sent no complete PROXY header in time")]
    Missing,
    #[error("invalid PROXY header: {0}")]
    Invalid(Invalid),
    #[error("PROXY header from an untrusted source")]
    Untrusted,
    #[error("{hops} relay hops exceed max_hops = {max}")]
    HopLimit {
        hops: u8,
        max: u8,
        /// The client the looping connection carries, for the log line.
        claimed: Option<ClaimedAddr>,
    },
}

impl PrefaceError {
    /// The claimed client of a refused but well-formed header.
    pub fn claimed(&self) -> Option<ClaimedAddr> {
        match self {
            PrefaceError::HopLimit { claimed, .. } => *claimed,
            _ => None,
        }
    }
}

impl From<PrefaceError> for CloseReason {
    fn from(e: PrefaceError) -> Self {
        match e {
            PrefaceError::Silent => CloseReason::Silent,
            PrefaceError::Closed => CloseReason::ClientClosed,
            PrefaceError::Timeout => CloseReason::HelloTimeout,
            PrefaceError::Missing => CloseReason::ProxyMissing,
            PrefaceError::Invalid(_) => CloseReason::ProxyInvalid,
            PrefaceError::Untrusted => CloseReason::ProxyUntrusted,
            PrefaceError::HopLimit { .. } => CloseReason::HopLimit,
        }
    }
}

/// Reads the preface of a connection from `peer` on a listener with
/// `config`, all before `deadline` (the ClientHello deadline).
pub async fn read(
    client: &mut TcpStream,
    peer: PeerAddr,
    config: &Inbound,
    deadline: Instant,
) -> Result<Preface, PrefaceError> {
    let trusted = config.trusts(peer.0.ip());
    let mut buffered = Vec::with_capacity(READ_CHUNK);
    if !trusted {
        loop {
            match sniff(&buffered) {
                Sniff::Incomplete => {
                    read_more(client, &mut buffered, deadline, false, config.mode).await?
                }
                Sniff::NotProxy => {
                    return Ok(Preface {
                        source: Source::Direct(peer),
                        header: None,
                        buffered,
                    });
                }
                Sniff::Signature(_) => return Err(PrefaceError::Untrusted),
            }
        }
    }
    let header = loop {
        match parse(&buffered) {
            Parse::Incomplete => {
                read_more(client, &mut buffered, deadline, true, config.mode).await?
            }
            Parse::NotProxy if config.mode == Mode::Require => {
                return Err(PrefaceError::Missing);
            }
            Parse::NotProxy => {
                return Ok(Preface {
                    source: Source::TrustedPeer(peer),
                    header: None,
                    buffered,
                });
            }
            Parse::Invalid(invalid) => return Err(PrefaceError::Invalid(invalid)),
            Parse::Header(header) => break header,
        }
    };
    let source = match header.addresses {
        Announced::Proxy { source, .. } => Source::Relayed {
            peer,
            claimed: ClaimedAddr(source),
        },
        Announced::Local | Announced::Unknown => Source::TrustedPeer(peer),
    };
    if header.hops > config.max_hops {
        return Err(PrefaceError::HopLimit {
            hops: header.hops,
            max: config.max_hops,
            claimed: source.claimed(),
        });
    }
    buffered.drain(..header.len);
    Ok(Preface {
        source,
        header: Some(header),
        buffered,
    })
}

async fn read_more(
    client: &mut TcpStream,
    buffered: &mut Vec<u8>,
    deadline: Instant,
    trusted: bool,
    mode: Mode,
) -> Result<(), PrefaceError> {
    let before = buffered.len();
    buffered.resize(before + READ_CHUNK, 0);
    let read = timeout_at(deadline, client.read(&mut buffered[before..])).await;
    let n = match read {
        Ok(Ok(n)) => n,
        Ok(Err(e)) => return Err(closed(e, before)),
        Err(_elapsed) => {
            buffered.truncate(before);
            // A trusted source owes a header in `require` mode, and a
            // header it started but never finished is missing in either
            // mode; anyone else simply sent no hello in time.
            return Err(if trusted && (before > 0 || mode == Mode::Require) {
                PrefaceError::Missing
            } else {
                PrefaceError::Timeout
            });
        }
    };
    buffered.truncate(before + n);
    match (n, before) {
        (0, 0) => Err(PrefaceError::Silent),
        (0, _) => Err(PrefaceError::Closed),
        _ => Ok(()),
    }
}

fn closed(_error: io::Error, before: usize) -> PrefaceError {
    // As in `inspect`: a reset is the client going away.
    if before == 0 {
        PrefaceError::Silent
    } else {
        PrefaceError::Closed
    }
}
