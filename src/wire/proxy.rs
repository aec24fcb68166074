//! The PROXY protocol's wire format (v2 and v1): recognising a signature
//! ([`sniff`]), parsing a header ([`parse`]), and the value of our hop-count
//! TLV (`hops_value`), shared by the inbound stage that reads headers
//! (`inbound`) and the outbound announcement that writes them (`outbound`).
//!
//! Pure functions over `&[u8]`: no I/O, no deadlines, no configuration.
//!
//! Validation follows the spec (haproxy's proxy-protocol.txt, quoted where
//! it decides behaviour):
//! - v2 needs version 2 and command LOCAL or PROXY. A LOCAL header is
//!   valid whatever its family byte and length say: the declared length is
//!   skipped and nothing in it is read. A PROXY header needs a defined
//!   family and protocol, a length that holds the family's addresses, TLVs
//!   that tile the rest exactly, and a matching CRC32C when that TLV is
//!   present. The transport the reader carries over IPv4/IPv6 (STREAM for
//!   a TCP connection, [`parse`]; DGRAM for a UDP flow, [`parse_as`])
//!   carries a claim; any other valid combination (UNSPEC, AF_UNIX, the
//!   other transport) falls back to the connection's own addresses, as the
//!   spec asks of receivers that do not carry it (under the UNSPEC family
//!   the block has no defined address size, so the whole of it is opaque
//!   and no TLV is read).
//! - v1 is at most 107 bytes, ends in CRLF, and a TCP4/TCP6 line is six
//!   fields one space apart with ports in plain decimal (no sign, no
//!   leading zero, at most 65535); UNKNOWN ignores the rest of its line.
//! - TLVs the relay reads appear at most once (a repeat is refused);
//!   the others are skipped. AUTHORITY is kept only when it is a valid host
//!   name of at most [`MAX_AUTHORITY_BYTES`]; otherwise it is ignored.
//!
//! Field parsing is the `ppp` crate's (so is encoding, in `outbound`);
//! framing, the v1
//! field grammar `ppp` is lenient about, the CRC32C check (the `crc32c`
//! crate) and the hop guard are ours.
//!
//! # Claims and hops
//! A PROXY command with TCP over IPv4/IPv6 yields the addresses a peer
//! claims ([`Announced::Proxy`]), unless its source cannot be a client
//! (`check_claim`: unspecified, multicast, broadcast, or the relay's own
//! listening socket), which is refused as invalid. LOCAL (v2), UNKNOWN
//! (v1), and the v2 fallbacks above claim nothing. Our hop count travels in
//! the custom TLV `TLV_HOPS` behind the [`HOPS_MAGIC`] sub-type; a header
//! without it (or with another product's 0xE0 TLV only) counts as one hop.
//!
//! Not here: reading from a socket, trust, modes and `max_hops` (see
//! `inbound`), or building the headers the relay sends (see `outbound`).
//!
//! Cost: a header is parsed once when complete (framing is re-checked per
//! read, which is a few comparisons).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use crate::wire::cidr::canonical;
use crate::wire::sni::Sni;

/// The v2 signature (12 bytes).
pub const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// The v1 signature, with its separating space.
pub(crate) const V1_SIGNATURE: &[u8; 6] = b"PROXY ";
/// Longest v1 header, CRLF included (spec §2.1).
pub const V1_MAX_BYTES: usize = 107;
/// Longest v2 header accepted, fixed part included. The spec allows up to
/// 16 + 65535; no peer sends more than a few hundred bytes, and buffering
/// 64 KiB per connection for a header would be a gift to an attacker.
pub const V2_MAX_BYTES: usize = 4096;

/// TLV types (spec §2.2.1–2.2.7) and our custom hop count.
pub const TLV_AUTHORITY: u8 = 0x02;
pub(crate) const TLV_CRC32C: u8 = 0x03;
/// UNIQUE_ID (spec §2.2.5): an opaque connection id of up to 128 bytes.
pub const TLV_UNIQUE_ID: u8 = 0x05;
/// The custom type the hop count travels in. §2.2.8 reserves 0xE0–0xEF
/// "for application-specific data" and says "If you need more values
/// consider extending the range with a type field in your TLVs": any
/// product may use 0xE0, so ours is told apart by [`HOPS_MAGIC`].
pub const TLV_HOPS: u8 = 0xE0;
/// The sub-type of a [`TLV_HOPS`] value that makes it our hop count. The
/// whole value is these 13 ASCII bytes and then one byte, the hops so far
/// (at least 1): `E0 00 0E "snirelay-hops" NN`. A 0xE0 TLV that does not
/// start with them is another product's and is ignored.
pub const HOPS_MAGIC: &[u8; 13] = b"snirelay-hops";
/// Length of a hop-count value: the magic and one count byte.
pub(crate) const HOPS_VALUE_LEN: usize = HOPS_MAGIC.len() + 1;
/// Longest AUTHORITY used: a DNS name is at most 253 bytes (255 on the
/// wire); anything longer is not a host name.
pub const MAX_AUTHORITY_BYTES: usize = 255;

/// What a complete, valid header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Bytes the header occupies at the start of the stream.
    pub len: usize,
    /// Which protocol version the header was written in.
    pub version: ProxyVersion,
    /// The command and addresses it announces.
    pub addresses: Announced,
    /// The AUTHORITY TLV (v2 PROXY only): the original SNI as the sender
    /// saw it, normalised like an SNI; `None` when absent or when it is not
    /// a valid host name of at most [`MAX_AUTHORITY_BYTES`].
    pub authority: Option<Vec<u8>>,
    /// The hop count: our `TLV_HOPS` if present, else 1.
    pub hops: u8,
    /// Whether a CRC32C TLV was present (and therefore matched).
    pub checksummed: bool,
}

/// The transport protocol byte of a v2 header (§2.2, the low nibble of
/// the 14th byte) that a reader carries: what a claim is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyTransport {
    /// `STREAM` (TCP): a header at the start of a connection.
    Stream,
    /// `DGRAM` (UDP): a header at the start of a datagram.
    Datagram,
}

/// The PROXY protocol version a header was written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyVersion {
    /// A text header (`PROXY TCP4 ...\r\n`).
    V1,
    /// A binary header (the 12-byte signature, then version 2).
    V2,
}

/// The header's command and addresses, reduced to what the relay uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Announced {
    /// PROXY over TCP: who the client is and what it connected to.
    Proxy {
        /// The client's address and port, as the peer claims it.
        source: SocketAddr,
        /// The address and port the client connected to.
        destination: SocketAddr,
    },
    /// v2 LOCAL: the peer's own connection (e.g. a health check); the
    /// rest of the header is ignored.
    Local,
    /// v1 UNKNOWN, or v2 PROXY for anything but the reader's transport
    /// over IPv4/IPv6 (UNSPEC, AF_UNIX, the other transport): a client whose
    /// address the peer could not say, or that the reader does not carry.
    /// The socket's addresses are used.
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
    /// The version nibble (the high four bits of byte 13) is not 2.
    #[error("v2 version nibble {0:#x} is not 2")]
    Version(u8),
    /// The command nibble is neither 0 (LOCAL) nor 1 (PROXY).
    #[error("v2 command {0:#x} is neither LOCAL nor PROXY")]
    Command(u8),
    /// The family/protocol byte (byte 14) is not one the spec defines.
    #[error("v2 family/protocol byte {0:#04x} is not defined")]
    FamilyProtocol(u8),
    /// The declared length makes the header longer than [`V2_MAX_BYTES`].
    #[error("v2 header of {0} bytes exceeds the {V2_MAX_BYTES}-byte cap")]
    TooLarge(usize),
    /// The address block or the TLVs do not fit the declared length exactly.
    #[error("v2 addresses or TLVs inconsistent with the length: {0}")]
    Layout(String),
    /// A TLV the relay reads has a bad length or value, or appears twice.
    #[error("v2 TLV {0:#04x} has a bad length or value, or appears twice")]
    Tlv(u8),
    /// The CRC32C TLV does not match the header's checksum.
    #[error("v2 CRC32C mismatch")]
    Checksum,
    /// A datagram that ends inside the header it starts: a header never
    /// spans datagrams.
    #[error("the header does not fit in its datagram")]
    Truncated,
    /// A v1 header in a datagram: v1 has no UDP form.
    #[error("a v1 header has no UDP form")]
    V1OverUdp,
    /// A v1 line longer than [`V1_MAX_BYTES`], not ended by CRLF, or holding a
    /// byte outside printable ASCII.
    #[error("v1 header longer than {V1_MAX_BYTES} bytes or not CRLF-terminated")]
    V1Framing,
    /// A v1 line `ppp` refuses (an unknown protocol, an address that does not
    /// parse); the text is its error.
    #[error("v1 header: {0}")]
    V1Syntax(String),
    /// A v1 TCP4/TCP6 line that is not six non-empty fields one space apart.
    #[error("v1 TCP4/TCP6 header is not six non-empty fields one space apart")]
    V1Fields,
    /// A v1 port with a sign, a leading zero, or above 65535.
    #[error("v1 port {0:?} is not a decimal 0..=65535 without sign or leading zero")]
    V1Port(String),
    /// A PROXY command whose source cannot be a client (see `check_claim`).
    #[error("claimed source {claimed} cannot be a client: {why}")]
    ImpossibleClaim {
        /// The source address and port the peer claimed.
        claimed: SocketAddr,
        /// Why it cannot be a client.
        why: Impossible,
    },
}

/// Why a claimed source address cannot be a client's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Impossible {
    /// `0.0.0.0` or `::` (IPv4-mapped forms included).
    #[error("unspecified address")]
    Unspecified,
    /// An IPv4 or IPv6 multicast address.
    #[error("multicast address")]
    Multicast,
    /// `255.255.255.255`.
    #[error("broadcast address")]
    Broadcast,
    /// The address and port the claiming peer connected to (the relay's own
    /// listening socket).
    #[error("the relay's own listening address")]
    RelayItself,
}

/// Checks the source a trusted peer claims against what a TCP client can
/// be: never an unspecified, multicast or broadcast address (a TCP peer
/// cannot have one), nor the address and port the peer itself connected to
/// (`local`, the relay's listening socket: a forged or looped claim).
/// IPv4-mapped IPv6 forms count as the IPv4 address they carry. The port
/// matters for the last check only: a client may share the relay's IP
/// (a relay chain on one host), never its listening socket.
pub fn check_claim(source: SocketAddr, local: SocketAddr) -> Result<(), Invalid> {
    let ip = canonical(source.ip());
    let why = if ip.is_unspecified() {
        Impossible::Unspecified
    } else if ip.is_multicast() {
        Impossible::Multicast
    } else if ip == IpAddr::V4(Ipv4Addr::BROADCAST) {
        Impossible::Broadcast
    } else if ip == canonical(local.ip()) && source.port() == local.port() {
        Impossible::RelayItself
    } else {
        return Ok(());
    };
    Err(Invalid::ImpossibleClaim {
        claimed: source,
        why,
    })
}

/// What the first bytes are, as far as a PROXY signature goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sniff {
    /// A prefix of a signature (or nothing yet).
    Incomplete,
    /// Cannot start a PROXY header (e.g. a TLS record, first byte 0x16).
    NotProxy,
    /// A whole signature of this version: a PROXY header, valid or not.
    Signature(ProxyVersion),
}

/// Whether the first bytes start a PROXY signature: decided on the first
/// byte for anything that is not one.
pub fn sniff(bytes: &[u8]) -> Sniff {
    let Some(&first) = bytes.first() else {
        return Sniff::Incomplete;
    };
    let (signature, version): (&[u8], _) = match first {
        b'\r' => (V2_SIGNATURE, ProxyVersion::V2),
        b'P' => (V1_SIGNATURE, ProxyVersion::V1),
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

/// Parses a PROXY header at the start of a TCP connection's `bytes`
/// ([`parse_as`] for [`ProxyTransport::Stream`]). Pure: every strict prefix of
/// a valid header is [`Parse::Incomplete`].
pub fn parse(bytes: &[u8]) -> Parse {
    parse_as(bytes, ProxyTransport::Stream)
}

/// Parses a PROXY header at the start of `bytes` for a reader that
/// carries `carried`: a v2 PROXY header of that transport over IPv4/IPv6
/// claims its addresses, one of the other falls back to
/// [`Announced::Unknown`]. v1 has no UDP form, so a v1 header is read as
/// TCP whatever the reader carries (a datagram reader refuses it: see
/// [`crate::proxy::datagram`]). Pure, as [`parse`].
pub fn parse_as(bytes: &[u8], carried: ProxyTransport) -> Parse {
    match sniff(bytes) {
        Sniff::Incomplete => Parse::Incomplete,
        Sniff::NotProxy => Parse::NotProxy,
        Sniff::Signature(ProxyVersion::V2) => parse_v2(bytes, carried),
        Sniff::Signature(ProxyVersion::V1) => parse_v1(bytes),
    }
}

fn parse_v2(bytes: &[u8], carried: ProxyTransport) -> Parse {
    use ppp::v2;
    const FIXED: usize = 16;
    if bytes.len() < FIXED {
        return Parse::Incomplete;
    }
    let version_command = bytes[12];
    if version_command >> 4 != 2 {
        return Parse::Invalid(Invalid::Version(version_command >> 4));
    }
    let command = version_command & 0x0F;
    if command > 1 {
        return Parse::Invalid(Invalid::Command(command));
    }
    let family_protocol = bytes[13];
    // §2.2: family and protocol values other than those listed "must not be
    // emitted in version 2 of this protocol and must be rejected as invalid
    // by receivers". LOCAL is the exception: its block, family included, is
    // ignored (below), so an unassigned value there is not refused.
    if command == COMMAND_PROXY && (family_protocol >> 4 > 3 || family_protocol & 0x0F > 2) {
        return Parse::Invalid(Invalid::FamilyProtocol(family_protocol));
    }
    let total = FIXED + usize::from(u16::from_be_bytes([bytes[14], bytes[15]]));
    if total > V2_MAX_BYTES {
        return Parse::Invalid(Invalid::TooLarge(total));
    }
    if bytes.len() < total {
        return Parse::Incomplete;
    }
    if command == COMMAND_LOCAL {
        // §2.2, LOCAL: "The receiver must accept this connection as valid
        // and must use the real connection endpoints and discard the
        // protocol block including the family which is ignored", and
        // "Receivers MUST always consider this field to skip the
        // appropriate number of bytes and must not assume zero is presented
        // for LOCAL connections". So the declared length is skipped whatever
        // the family byte says, and nothing in the block (addresses or TLVs,
        // a CRC32C or a hop count among them) is read.
        return Parse::Header(Header {
            len: total,
            version: ProxyVersion::V2,
            addresses: Announced::Local,
            authority: None,
            hops: 1,
            checksummed: false,
        });
    }
    let raw = &bytes[..total];
    let header = match v2::Header::try_from(raw) {
        Ok(header) => header,
        Err(e) => return Parse::Invalid(Invalid::Layout(e.to_string())),
    };

    let tlvs = match read_tlvs(&header, total) {
        Ok(tlvs) => tlvs,
        Err(invalid) => return Parse::Invalid(invalid),
    };
    if let Some(at) = tlvs.crc_at {
        let claimed = u32::from_be_bytes([raw[at], raw[at + 1], raw[at + 2], raw[at + 3]]);
        let computed = crc32c::crc32c_append(crc32c::crc32c(&raw[..at]), &[0; 4]);
        let computed = crc32c::crc32c_append(computed, &raw[at + 4..]);
        if computed != claimed {
            return Parse::Invalid(Invalid::Checksum);
        }
    }

    let ours = header.protocol
        == match carried {
            ProxyTransport::Stream => v2::Protocol::Stream,
            ProxyTransport::Datagram => v2::Protocol::Datagram,
        };
    let addresses = match header.addresses {
        v2::Addresses::IPv4(a) if ours => Announced::Proxy {
            source: (a.source_address, a.source_port).into(),
            destination: (a.destination_address, a.destination_port).into(),
        },
        v2::Addresses::IPv6(a) if ours => Announced::Proxy {
            source: (a.source_address, a.source_port).into(),
            destination: (a.destination_address, a.destination_port).into(),
        },
        // §2.2: "Only the UNSPEC protocol byte (\x00) is mandatory to
        // implement on the receiver. A receiver is not required to implement
        // other ones, provided that it automatically falls back to the
        // UNSPEC mode for the valid combinations above that it does not
        // support." A reader carries one transport: the other, AF_UNIX and
        // UNSPEC fall back to the connection's own addresses (no claim). Their
        // TLVs, the hop count among them, are still read, except under the
        // UNSPEC family: its address block has no defined size, so `ppp`
        // takes the whole rest as addresses, and so do we (no TLV is read).
        _ => Announced::Unknown,
    };
    Parse::Header(Header {
        len: total,
        version: ProxyVersion::V2,
        addresses,
        authority: tlvs.authority,
        hops: tlvs.hops.unwrap_or(1),
        checksummed: tlvs.crc_at.is_some(),
    })
}

/// The v2 command nibbles (§2.2).
const COMMAND_LOCAL: u8 = 0x0;
const COMMAND_PROXY: u8 = 0x1;

/// What the TLVs of a PROXY-command header say, as far as the relay reads
/// them.
struct Tlvs {
    authority: Option<Vec<u8>>,
    /// Where the CRC32C value starts in the header, if there is one.
    crc_at: Option<usize>,
    hops: Option<u8>,
}

/// Reads the TLVs of `header` (`total` bytes long). Each TLV type the
/// relay reads may appear once: a second AUTHORITY, CRC32C or hop count is
/// ambiguous (which name, which checksum, which count?), so the header is
/// refused. Types it does not read (UNIQUE_ID, NOOP, ALPN, another
/// product's 0xE0 …) are skipped however often they appear.
fn read_tlvs(header: &ppp::v2::Header<'_>, total: usize) -> Result<Tlvs, Invalid> {
    let mut tlvs = Tlvs {
        authority: None,
        crc_at: None,
        hops: None,
    };
    let mut seen_authority = false;
    let mut offset = total - header.tlv_bytes().len();
    for tlv in header.tlvs() {
        let tlv = tlv.map_err(|e| Invalid::Layout(e.to_string()))?;
        let value_at = offset + 3;
        offset = value_at + tlv.value.len();
        let twice = match tlv.kind {
            TLV_AUTHORITY => {
                // A claim like the addresses: an invalid name is ignored
                // (the relay's own SNI is announced instead), never refused,
                // since nothing is decided on it.
                tlvs.authority = authority(&tlv.value);
                std::mem::replace(&mut seen_authority, true)
            }
            TLV_CRC32C if tlv.value.len() == 4 => tlvs.crc_at.replace(value_at).is_some(),
            TLV_CRC32C => return Err(Invalid::Tlv(TLV_CRC32C)),
            TLV_HOPS => match hop_count(&tlv.value) {
                Some(Ok(hops)) => tlvs.hops.replace(hops).is_some(),
                Some(Err(())) => return Err(Invalid::Tlv(TLV_HOPS)),
                // Another product's use of the shared custom type.
                None => false,
            },
            _ => false,
        };
        if twice {
            return Err(Invalid::Tlv(tlv.kind));
        }
    }
    Ok(tlvs)
}

/// An AUTHORITY value the relay will use: a valid host name (the same
/// check as a client's SNI) of at most [`MAX_AUTHORITY_BYTES`], normalised
/// (lowercased, trailing dot removed). Anything else is `None`.
fn authority(value: &[u8]) -> Option<Vec<u8>> {
    if value.len() > MAX_AUTHORITY_BYTES {
        return None;
    }
    Sni::parse_written(value)
        .ok()
        .map(|sni| sni.as_str().as_bytes().to_vec())
}

/// The value of our hop-count TLV: [`HOPS_MAGIC`] then the count, one byte.
pub fn hops_value(hops: u8) -> [u8; HOPS_VALUE_LEN] {
    let mut value = [0; HOPS_VALUE_LEN];
    value[..HOPS_MAGIC.len()].copy_from_slice(HOPS_MAGIC);
    value[HOPS_MAGIC.len()] = hops;
    value
}

/// Reads a [`TLV_HOPS`] value: `None` when it is not ours (no
/// [`HOPS_MAGIC`] prefix), `Err` when it is ours but not exactly the magic
/// and one count byte of at least 1.
fn hop_count(value: &[u8]) -> Option<Result<u8, ()>> {
    let count = value.strip_prefix(HOPS_MAGIC)?;
    Some(match count {
        &[hops] if hops >= 1 => Ok(hops),
        _ => Err(()),
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
    if let Err(invalid) = check_v1_fields(&line[..end - 2]) {
        return Parse::Invalid(invalid);
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
        version: ProxyVersion::V1,
        addresses,
        authority: None,
        hops: 1,
        checksummed: false,
    })
}

/// The parts of §2.1's grammar for a `TCP4`/`TCP6` line that `ppp` leaves
/// to Rust's integer parsing, which takes a leading `+`: "exactly one
/// space" between fields (so six fields, none empty), and each port "a
/// decimal integer in the range [0..65535] inclusive. Heading zeroes are not
/// permitted". `line` is the header without its CRLF. `UNKNOWN` lines are
/// left alone: "the receiver must ignore anything presented before the
/// CRLF". Addresses are left to `ppp`, which uses the standard library's
/// parsers (no leading zeros in IPv4; IPv6 as `inet_pton` reads it).
fn check_v1_fields(line: &[u8]) -> Result<(), Invalid> {
    let fields = || line.split(|&b| b == b' ');
    if !matches!(fields().nth(1), Some(b"TCP4" | b"TCP6")) {
        return Ok(());
    }
    let count = fields().count();
    if count != 6 || fields().any(<[u8]>::is_empty) {
        return Err(Invalid::V1Fields);
    }
    for port in fields().skip(4) {
        let decimal = (1..=5).contains(&port.len())
            && port.iter().all(u8::is_ascii_digit)
            && (port == b"0" || port[0] != b'0')
            && port.iter().fold(0u32, |n, d| n * 10 + u32::from(d - b'0')) <= 65535;
        if !decimal {
            return Err(Invalid::V1Port(String::from_utf8_lossy(port).into_owned()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
