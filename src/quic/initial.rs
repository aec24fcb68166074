//! The ClientHello of a QUIC flow, read from the client's Initial packets:
//! a pure, I/O-free state machine fed one datagram at a time.
//!
//! A [`Parser`] takes the datagrams of one flow in arrival order (each call
//! passes one whole datagram) and answers with the [`QuicHello`] once the
//! hello is complete, [`Verdict::Incomplete`] while it needs more, or the
//! refusal that ends the flow. In each datagram it walks the coalesced
//! long-header packets (RFC 9000 §12.2): Initial packets of QUIC v1 or v2
//! have their header protection removed and their payload decrypted with
//! the version's public Initial keys (RFC 9001 §5, RFC 9369; derived by
//! rustls from the Destination Connection ID, once per flow); 0-RTT and
//! Handshake packets are skipped by their Length; a short-header packet
//! (or zero padding) after them ends the datagram. In an Initial's payload,
//! PADDING, PING, ACK (with or without ECN counts) are skipped and CRYPTO
//! frames are reassembled by offset into the handshake message, out of
//! order, overlapping and across packets and datagrams (Chrome sends a
//! post-quantum hello in two Initial packets and shuffles its CRYPTO
//! frames). The complete message goes to the TLS decoder the TCP path uses
//! ([`client_hello::decode_handshake`]), so both paths apply the same
//! strictness to the same hello.
//!
//! Verdicts ([`Verdict`]; the listener's close reasons for QUIC flows will
//! be built from them, so they are not in `reason` yet):
//! - `not_quic`: the flow's first datagram is not a long header (short
//!   header, or fewer than five bytes), or carries version 0 (a Version
//!   Negotiation packet, which only servers send);
//! - `unknown_version`: a long header of a version other than v1 and v2;
//!   version negotiation is the backend's business, so the caller may
//!   forward such a flow rather than refuse it;
//! - `malformed`: anything a server would reject: a packet that does not
//!   fit its datagram, a Retry, a datagram under 1200 bytes carrying an
//!   Initial (RFC 9000 §14.1), a Destination Connection ID that changes or
//!   is shorter than 8 bytes (§7.2), a packet that fails authentication,
//!   non-zero reserved bits, an empty payload — but once an Initial of the
//!   flow has been authenticated, a later datagram that fails any of these
//!   checks *before* its packet is authenticated is discarded instead (the
//!   datagram is counted against [`HelloLimits`], nothing of it is kept), as a
//!   server discards packets it cannot authenticate (RFC 9000 §12.2, RFC
//!   9001 §5.2): otherwise anyone who can send from the client's address
//!   and port could end its pending flow with one datagram of noise; — a
//!   frame other than PADDING,
//!   PING, ACK and CRYPTO (CONNECTION_CLOSE included: a client that gives
//!   up before its hello is complete has nothing to route), CRYPTO bytes
//!   that conflict with bytes already received for the same offset, bytes
//!   past the end of the message, a message that is not a ClientHello or
//!   fails the decoder's checks; later datagrams that are not long headers
//!   of the flow's version (a client has no other keys before the server
//!   answers);
//! - `too_large`: the message, or a CRYPTO frame's end offset, exceeds
//!   [`HelloLimits::hello_bytes`] (`max_client_hello_bytes`), or the flow sent
//!   more datagrams or bytes than [`HelloLimits`] lets it hold before the hello
//!   is complete;
//! - `no_sni` is not a verdict: a complete hello without a name is a
//!   [`QuicHello`] whose `hello.server_name` is `None`, for the caller's
//!   `no_sni` policy, as on TCP;
//! - `hello_timeout` is the caller's: the parser has no clock. The flow must
//!   end as `hello_timeout` when `client_hello_timeout` has passed since its
//!   first datagram without a verdict; the parser holds nothing that could
//!   outlive the flow.
//!
//! Guarantees the flow relies on: every strict prefix of a flow's datagram
//! sequence is `Incomplete`; a verdict other than `Incomplete`, once given,
//! never changes (later feeds return it again without reading); the hello
//! does not depend on the order the packets or datagrams came in. The
//! datagrams themselves are the caller's to hold and forward: the parser
//! copies only each Initial packet it decrypts, for the time of that call.
//!
//! Its parts: the verdicts ([`verdict`]), the bounds-checked cursor and
//! QUIC's integers ([`reader`]), and the walk of an Initial's frames with
//! the CRYPTO stream's reassembly ([`crypto_stream`]); packets, keys and
//! the flow's state are this file's.
//!
//! Never held: any key of the connection. The Initial keys are public
//! (anyone who sees the first datagram derives them); the Handshake and
//! 1-RTT keys come from a key exchange the relay takes no part in.
//!
//! Cost per flow: the keys (derived once, on the first Initial: one HKDF
//! extract and a few expands, and the AES key schedules of both directions'
//! packet and header-protection keys; about 6 µs, `benches/quic_initial.rs`),
//! one AES-GCM decryption per Initial packet (about 1.2 KB each), and the
//! reassembly buffer, which grows to the highest CRYPTO offset received
//! (never past `hello_bytes`) with a bitmap of one bit per byte. Work is
//! linear in the bytes fed: each CRYPTO byte is compared or stored once. The
//! buffers and the keys are freed as soon as a verdict is given; the
//! [`Parser`] itself is 360 bytes.

use std::sync::Arc;

use rustls::Side;
use rustls::quic::Keys;

mod crypto_stream;
mod reader;
mod verdict;

pub use verdict::Verdict;

use super::{PacketType, Version, initial_keys};
use crate::wire::client_hello::{self, ClientHello};
use crate::wire::fingerprint::{Fingerprints, Transport};
use crypto_stream::{Crypto, frames};
use reader::Reader;

/// A client's datagram carrying an Initial packet must be at least this
/// long (RFC 9000 §14.1); servers discard shorter ones.
pub(crate) const MIN_INITIAL_DATAGRAM: usize = 1200;
/// The longest connection ID in v1 and v2 (RFC 9000 §17.2).
pub(crate) const MAX_CID_LEN: usize = 20;
/// The shortest Destination Connection ID of a client's first Initial
/// (RFC 9000 §7.2).
pub(crate) const MIN_CLIENT_DCID_LEN: usize = 8;
/// Header protection samples 16 bytes, taken 4 bytes after the start of the
/// packet number field (RFC 9001 §5.4.2).
const SAMPLE_OFFSET: usize = 4;
const SAMPLE_LEN: usize = 16;
/// The AEAD tag after every payload (AES-128-GCM).
const TAG_LEN: usize = 16;

/// What a flow may send before its hello is complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HelloLimits {
    /// The handshake message's length and the highest CRYPTO offset
    /// (`max_client_hello_bytes`).
    pub hello_bytes: usize,
    /// Datagrams fed, the one that completes the hello included.
    pub datagrams: usize,
    /// Bytes of those datagrams.
    pub held_bytes: usize,
}

impl HelloLimits {
    /// The limits for a listener's `max_client_hello_bytes`: the flow may
    /// send four times the hello's bytes (at least 8 KiB) before it is
    /// complete, in as many datagrams as that holds at the 1200 bytes a
    /// client pads its Initial datagrams to (54 and 64 KiB for the default
    /// 16 KiB). A real client needs one datagram per 1.1 KB or so of
    /// hello, so retransmitted Initials and coalesced 0-RTT fit.
    pub fn for_hello_bytes(hello_bytes: usize) -> Self {
        let held_bytes = hello_bytes.saturating_mul(4).max(8 * 1024);
        HelloLimits {
            hello_bytes,
            datagrams: held_bytes / MIN_INITIAL_DATAGRAM,
            held_bytes,
        }
    }
}

/// A complete ClientHello and what the flow's Initials said about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuicHello {
    /// The decoded hello; `len` is the handshake message's length.
    pub hello: ClientHello,
    /// The QUIC version of the client's Initials.
    pub version: Version,
    /// The Destination Connection ID of the client's Initials (the one the
    /// Initial keys are derived from).
    pub dcid: ConnectionId,
    /// The client's Source Connection ID.
    pub scid: ConnectionId,
    /// Datagrams fed up to the one that completed the hello.
    pub datagrams: usize,
    /// The hello's JA4 and JA3 (transport `q`), computed only when the
    /// parser was asked to ([`Parser::fingerprinting`]).
    pub fingerprints: Option<Arc<Fingerprints>>,
}

/// A connection ID: at most `MAX_CID_LEN` bytes, held inline.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnectionId {
    len: u8,
    bytes: [u8; MAX_CID_LEN],
}

impl ConnectionId {
    /// `None` when `id` is longer than `MAX_CID_LEN`.
    pub fn new(id: &[u8]) -> Option<Self> {
        let mut bytes = [0; MAX_CID_LEN];
        bytes.get_mut(..id.len())?.copy_from_slice(id);
        Some(ConnectionId {
            len: id.len() as u8,
            bytes,
        })
    }

    /// The ID's bytes (empty for a zero-length ID).
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl std::fmt::Debug for ConnectionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for byte in self.as_bytes() {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

/// The reassembled ClientHello handshake message of a whole flow's
/// datagrams, as [`parse`] reads them (tests and tools: a listener never
/// keeps the message past its verdict).
pub fn hello_message<'a>(
    datagrams: impl IntoIterator<Item = &'a [u8]>,
    limits: HelloLimits,
) -> Result<Vec<u8>, Verdict> {
    let mut parser = Parser::new(limits);
    parser.keep_message = true;
    for datagram in datagrams {
        match parser.feed(datagram) {
            Err(Verdict::Incomplete) => {}
            Ok(_) => return parser.crypto.message().map(<[u8]>::to_vec),
            Err(verdict) => return Err(verdict),
        }
    }
    Err(Verdict::Incomplete)
}

/// Parses a whole flow's datagrams at once (tests, benches, fuzzing).
pub fn parse<'a>(
    datagrams: impl IntoIterator<Item = &'a [u8]>,
    limits: HelloLimits,
) -> Result<QuicHello, Verdict> {
    let mut parser = Parser::new(limits);
    let mut answer = Err(Verdict::Incomplete);
    for datagram in datagrams {
        answer = parser.feed(datagram);
        if answer != Err(Verdict::Incomplete) {
            break;
        }
    }
    answer
}

/// What the first long-header packet fixed for the whole flow.
struct Flow {
    version: Version,
    dcid: ConnectionId,
    scid: ConnectionId,
    /// Derived on the flow's first Initial packet.
    keys: Option<Keys>,
    /// The highest Initial packet number decrypted, to expand truncated
    /// ones (RFC 9000 §17.1).
    largest_pn: Option<u64>,
}

/// The incremental reader of one flow's Initials. See the module header.
pub struct Parser {
    limits: HelloLimits,
    flow: Option<Flow>,
    crypto: Crypto,
    datagrams: usize,
    held_bytes: usize,
    /// An Initial of this flow has been authenticated: from then on a
    /// datagram that fails before authentication is discarded.
    authenticated: bool,
    /// Set while the frames of an authenticated packet are read: an error
    /// then is the client's own (a verdict), not noise (a discard).
    reading_frames: bool,
    /// Datagrams discarded so far.
    discarded: usize,
    /// The verdict, once given (a hello or a refusal).
    answer: Option<Result<QuicHello, Verdict>>,
    /// Whether a hello's fingerprints are computed (see `fingerprinting`).
    fingerprinting: bool,
    /// Keep the CRYPTO stream past the verdict (`hello_message` only).
    keep_message: bool,
}

impl std::fmt::Debug for Parser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parser")
            .field("limits", &self.limits)
            .field("version", &self.flow.as_ref().map(|flow| flow.version))
            .field("datagrams", &self.datagrams)
            .field("held_bytes", &self.held_bytes)
            .field("answer", &self.answer)
            .finish_non_exhaustive()
    }
}

impl Parser {
    /// A parser for a new flow, holding at most what `limits` allow.
    pub fn new(limits: HelloLimits) -> Self {
        Parser {
            limits,
            flow: None,
            crypto: Crypto::default(),
            datagrams: 0,
            held_bytes: 0,
            authenticated: false,
            reading_frames: false,
            discarded: 0,
            answer: None,
            fingerprinting: false,
            keep_message: false,
        }
    }

    /// Also computes the hello's fingerprints ([`QuicHello::fingerprints`])
    /// when `on`: from the reassembled message, before it is freed, which
    /// is the only moment it is whole. Off, nothing is spent on them.
    pub fn fingerprinting(mut self, on: bool) -> Self {
        self.fingerprinting = on;
        self
    }

    /// Reads the flow's next datagram and answers as [`parse`] would on all
    /// the datagrams fed so far.
    pub fn feed(&mut self, datagram: &[u8]) -> Result<QuicHello, Verdict> {
        if let Some(answer) = &self.answer {
            return answer.clone();
        }
        let answer = self.datagram(datagram).and_then(|()| self.complete());
        if answer != Err(Verdict::Incomplete) {
            // Nothing is needed past a verdict: free the buffers and the
            // keys now, not when the flow ends.
            if !self.keep_message {
                self.crypto = Crypto::default();
            }
            if let Some(flow) = &mut self.flow {
                flow.keys = None;
            }
            self.answer = Some(answer.clone());
        }
        answer
    }

    /// Datagrams fed so far (the answer's included).
    pub fn datagrams(&self) -> usize {
        self.datagrams
    }

    /// Datagrams discarded because they failed before authentication
    /// after the flow's first authenticated Initial.
    pub fn discarded(&self) -> usize {
        self.discarded
    }

    /// The flow's version, once its first long header was read.
    pub(crate) fn version(&self) -> Option<Version> {
        self.flow.as_ref().map(|flow| flow.version)
    }

    fn datagram(&mut self, datagram: &[u8]) -> Result<(), Verdict> {
        if self.flow.is_none() {
            // The version-independent invariants (RFC 8999) come first, so
            // that noise and other versions get their own verdicts.
            classify(datagram)?;
        }
        self.datagrams += 1;
        self.held_bytes = self.held_bytes.saturating_add(datagram.len());
        if self.datagrams > self.limits.datagrams || self.held_bytes > self.limits.held_bytes {
            return Err(Verdict::TooLarge);
        }
        // Whether a failure is noise to discard is decided by what held
        // before this datagram: its own packets may authenticate and then
        // fail later in it.
        let discard_noise = self.authenticated;
        match self.packets(datagram) {
            Err(_) if discard_noise && !std::mem::take(&mut self.reading_frames) => {
                self.discarded += 1;
                Ok(())
            }
            outcome => outcome,
        }
    }

    /// Reads the coalesced packets of `datagram`.
    fn packets(&mut self, datagram: &[u8]) -> Result<(), Verdict> {
        let mut rest = datagram;
        let mut first = true;
        let mut initials = 0;
        while let Some(&byte) = rest.first() {
            if byte & 0x80 == 0 {
                if first {
                    // A client has no 1-RTT keys before the server answered.
                    return Err(Verdict::Malformed);
                }
                // A short-header packet (or zero padding) is last in its
                // datagram and runs to its end.
                break;
            }
            let (packet, after) = self.packet(rest)?;
            if packet == PacketType::Initial {
                initials += 1;
            }
            rest = after;
            first = false;
        }
        if initials > 0 && datagram.len() < MIN_INITIAL_DATAGRAM {
            // The client's own packets, authenticated: a verdict.
            self.reading_frames = true;
            return Err(Verdict::Malformed);
        }
        if rest.is_empty() && first {
            // An empty datagram in an established flow.
            return Err(Verdict::Malformed);
        }
        Ok(())
    }

    /// Reads the long-header packet at the start of `buf`; answers its type
    /// and the bytes after it.
    fn packet<'b>(&mut self, buf: &'b [u8]) -> Result<(PacketType, &'b [u8]), Verdict> {
        let mut r = Reader::new(buf);
        let first = r.u8()?;
        let wire = r.u32()?;
        let dcid = r.vec8()?;
        let scid = r.vec8()?;
        let version = Version::from_wire(wire).ok_or(Verdict::Malformed)?;
        // The fixed bit must be set before a transport parameter could
        // allow greasing it (RFC 9287), which is after the handshake.
        if first & 0x40 == 0 || dcid.len() > MAX_CID_LEN || scid.len() > MAX_CID_LEN {
            return Err(Verdict::Malformed);
        }
        match &self.flow {
            Some(flow) => {
                // A client keeps its first Destination Connection ID until
                // the server answers (RFC 9000 §7.2), and its version.
                if flow.version != version || flow.dcid.as_bytes() != dcid {
                    return Err(Verdict::Malformed);
                }
            }
            None => {
                if dcid.len() < MIN_CLIENT_DCID_LEN {
                    return Err(Verdict::Malformed);
                }
                self.flow = Some(Flow {
                    version,
                    dcid: ConnectionId::new(dcid).ok_or(Verdict::Malformed)?,
                    scid: ConnectionId::new(scid).ok_or(Verdict::Malformed)?,
                    keys: None,
                    largest_pn: None,
                });
            }
        }
        let kind = version.packet_type(first);
        if kind == PacketType::Retry {
            // Only servers send Retry, and it has no Length to skip it by.
            return Err(Verdict::Malformed);
        }
        if kind == PacketType::Initial {
            let token = r.varint()?;
            r.take(usize::try_from(token).map_err(|_| Verdict::Malformed)?)?;
        }
        let length = usize::try_from(r.varint()?).map_err(|_| Verdict::Malformed)?;
        let pn_offset = r.pos;
        let end = pn_offset.checked_add(length).ok_or(Verdict::Malformed)?;
        if end > buf.len() {
            return Err(Verdict::Malformed);
        }
        if kind == PacketType::Initial {
            let flow = self.flow.as_mut().ok_or(Verdict::Malformed)?;
            let payload = flow.decrypt(&buf[..end], pn_offset)?;
            self.authenticated = true;
            // An error in the frames of an authenticated packet is the
            // client's own: a verdict even where noise would be discarded.
            self.reading_frames = true;
            frames(&payload, &mut self.crypto, self.limits.hello_bytes)?;
            self.reading_frames = false;
        }
        Ok((kind, &buf[end..]))
    }

    /// The hello, once the CRYPTO stream holds the whole message.
    fn complete(&self) -> Result<QuicHello, Verdict> {
        let message = self.crypto.message()?;
        let (hello, layout) = client_hello::decode_handshake_with_layout(message)?;
        let flow = self.flow.as_ref().ok_or(Verdict::Malformed)?;
        let fingerprints = self
            .fingerprinting
            .then(|| Arc::new(Fingerprints::compute(message, &layout, Transport::Quic)));
        Ok(QuicHello {
            hello,
            version: flow.version,
            dcid: flow.dcid,
            scid: flow.scid,
            datagrams: self.datagrams,
            fingerprints,
        })
    }
}

/// The first datagram's verdicts from the invariants alone: not a long
/// header, a Version Negotiation packet, or a version not read here.
fn classify(datagram: &[u8]) -> Result<(), Verdict> {
    let [first, a, b, c, d, ..] = *datagram else {
        return Err(Verdict::NotQuic);
    };
    if first & 0x80 == 0 {
        return Err(Verdict::NotQuic);
    }
    let wire = u32::from_be_bytes([a, b, c, d]);
    if wire == 0 {
        return Err(Verdict::NotQuic);
    }
    match Version::from_wire(wire) {
        Some(_) => Ok(()),
        None => Err(Verdict::UnknownVersion(wire)),
    }
}

impl Flow {
    /// Removes header protection from the Initial `packet` (its header and
    /// protected payload, ending where its Length says) and decrypts it;
    /// answers the plaintext frames.
    fn decrypt(&mut self, packet: &[u8], pn_offset: usize) -> Result<Vec<u8>, Verdict> {
        let keys = self
            .keys
            .get_or_insert_with(|| initial_keys(self.version, self.dcid.as_bytes(), Side::Server));
        let sample_at = pn_offset + SAMPLE_OFFSET;
        // The packet number is 1-4 bytes and the payload at least a tag, so
        // a packet too short to sample cannot be a real one.
        let Some(sample) = packet.get(sample_at..sample_at + SAMPLE_LEN) else {
            return Err(Verdict::Malformed);
        };
        let mut copy = packet.to_vec();
        let (head, pn_field) = copy.split_at_mut(pn_offset);
        keys.remote
            .header
            .decrypt_in_place(sample, &mut head[0], &mut pn_field[..4])
            .map_err(|_| Verdict::Malformed)?;
        let first = copy[0];
        // Reserved bits (0x0c) must be zero once protection is removed
        // (RFC 9000 §17.2); a server checks them after decryption, but a
        // bad packet is refused either way.
        if first & 0x0c != 0 {
            return Err(Verdict::Malformed);
        }
        let pn_len = usize::from(first & 0x03) + 1;
        let mut truncated = 0u64;
        for &byte in &copy[pn_offset..pn_offset + pn_len] {
            truncated = truncated << 8 | u64::from(byte);
        }
        let pn = expand_packet_number(self.largest_pn, truncated, pn_len);
        let (header, payload) = copy.split_at_mut(pn_offset + pn_len);
        if payload.len() < TAG_LEN {
            return Err(Verdict::Malformed);
        }
        let plain = keys
            .remote
            .packet
            .decrypt_in_place(pn, header, payload)
            .map_err(|_| Verdict::Malformed)?
            .len();
        if plain == 0 {
            // A packet with no frames (RFC 9000 §12.4).
            return Err(Verdict::Malformed);
        }
        self.largest_pn = Some(self.largest_pn.map_or(pn, |largest| largest.max(pn)));
        copy.drain(..pn_offset + pn_len);
        copy.truncate(plain);
        Ok(copy)
    }
}

/// RFC 9000 §A.3: the packet number closest to the next expected one whose
/// low `len` bytes are `truncated`.
fn expand_packet_number(largest: Option<u64>, truncated: u64, len: usize) -> u64 {
    let expected = largest.map_or(0, |largest| largest + 1);
    let win = 1u64 << (len * 8);
    let hwin = win / 2;
    let mask = win - 1;
    let candidate = (expected & !mask) | truncated;
    if candidate + hwin <= expected && candidate < (1 << 62) - win {
        candidate + win
    } else if candidate > expected + hwin && candidate >= win {
        candidate - win
    } else {
        candidate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packet_numbers_expand_as_in_rfc_9000_appendix_a3() {
        // The RFC's example: largest 0xa82f30ea, truncated 0x9b32 in 2 bytes.
        assert_eq!(
            expand_packet_number(Some(0xa82f_30ea), 0x9b32, 2),
            0xa82f_9b32
        );
        assert_eq!(expand_packet_number(None, 0, 1), 0);
        assert_eq!(expand_packet_number(None, 5, 4), 5);
        assert_eq!(expand_packet_number(Some(0xff), 0x01, 1), 0x101);
    }
}
