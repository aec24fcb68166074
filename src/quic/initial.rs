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

use super::{PacketType, Version, initial_keys};
use crate::wire::client_hello::{self, ClientHello, Inspect};
use crate::wire::fingerprint::{Fingerprints, Transport};

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
/// Handshake header: type (1), length (3).
const HANDSHAKE_HEADER_LEN: usize = 4;
const HANDSHAKE_CLIENT_HELLO: u8 = 1;
/// The largest value a variable-length integer holds (RFC 9000 §16).
const MAX_VARINT: u64 = (1 << 62) - 1;

const FRAME_PADDING: u64 = 0x00;
const FRAME_PING: u64 = 0x01;
const FRAME_ACK: u64 = 0x02;
const FRAME_ACK_ECN: u64 = 0x03;
const FRAME_CRYPTO: u64 = 0x06;

/// Why the datagrams so far give no ClientHello (yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Verdict {
    /// Valid so far; the hello needs more datagrams.
    #[error("incomplete ClientHello")]
    Incomplete,
    /// The flow's first datagram is not a QUIC long header.
    #[error("not QUIC")]
    NotQuic,
    /// A long header of a version this parser does not read.
    #[error("QUIC version {0:#010x} is not v1 or v2")]
    UnknownVersion(u32),
    /// QUIC v1 or v2, but not well-formed Initials carrying a ClientHello.
    #[error("malformed QUIC Initial")]
    Malformed,
    /// More than the limits let the flow send before its hello is complete.
    #[error("ClientHello larger than the limit")]
    TooLarge,
}

impl Verdict {
    /// The outcome's name, as the TCP close reasons spell theirs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Verdict::Incomplete => "incomplete",
            Verdict::NotQuic => "not_quic",
            Verdict::UnknownVersion(_) => "unknown_version",
            Verdict::Malformed => "malformed",
            Verdict::TooLarge => "too_large",
        }
    }
}

impl From<Inspect> for Verdict {
    /// The TLS decoder's answer on a complete message.
    fn from(inspect: Inspect) -> Self {
        match inspect {
            Inspect::TooLarge => Verdict::TooLarge,
            Inspect::Incomplete | Inspect::NotTls | Inspect::Malformed => Verdict::Malformed,
        }
    }
}

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

/// Walks an Initial packet's frames, feeding CRYPTO data to `crypto`.
fn frames(payload: &[u8], crypto: &mut Crypto, limit: usize) -> Result<(), Verdict> {
    let mut r = Reader::new(payload);
    while !r.is_empty() {
        match r.varint()? {
            FRAME_PADDING | FRAME_PING => {}
            kind @ (FRAME_ACK | FRAME_ACK_ECN) => {
                // Largest Acknowledged, ACK Delay, ACK Range Count, First
                // ACK Range; each further range a Gap and a Length. The
                // loop is bounded by the payload: each varint takes a byte.
                r.varint()?;
                r.varint()?;
                let ranges = r.varint()?;
                r.varint()?;
                for _ in 0..ranges {
                    r.varint()?;
                    r.varint()?;
                }
                if kind == FRAME_ACK_ECN {
                    // ECT(0), ECT(1) and ECN-CE counts.
                    for _ in 0..3 {
                        r.varint()?;
                    }
                }
            }
            FRAME_CRYPTO => {
                let offset = r.varint()?;
                let len = r.varint()?;
                if offset.saturating_add(len) > MAX_VARINT {
                    return Err(Verdict::Malformed);
                }
                let data = r.take(usize::try_from(len).map_err(|_| Verdict::Malformed)?)?;
                crypto.insert(offset, data, limit)?;
            }
            _ => return Err(Verdict::Malformed),
        }
    }
    Ok(())
}

/// The CRYPTO stream of the Initial space, reassembled by offset.
#[derive(Debug, Default)]
struct Crypto {
    /// Bytes up to the highest offset received; gaps are zero.
    data: Vec<u8>,
    /// One bit per byte of `data`: received.
    have: Vec<u64>,
    /// Bytes received from offset 0 without a gap.
    contiguous: usize,
    /// The message's length, header included, once its header is in.
    total: Option<usize>,
}

impl Crypto {
    fn insert(&mut self, offset: u64, bytes: &[u8], limit: usize) -> Result<(), Verdict> {
        let end = offset.saturating_add(bytes.len() as u64);
        if end > limit as u64 {
            return Err(Verdict::TooLarge);
        }
        // Both fit in usize: they are at most `limit`.
        let (offset, end) = (offset as usize, end as usize);
        if self.total.is_some_and(|total| end > total) {
            // A second message in the client's Initials: TLS has none.
            return Err(Verdict::Malformed);
        }
        if end > self.data.len() {
            self.data.resize(end, 0);
            self.have.resize(end.div_ceil(64), 0);
        }
        for (at, &byte) in (offset..end).zip(bytes) {
            let (word, bit) = (at / 64, 1u64 << (at % 64));
            if self.have[word] & bit != 0 {
                if self.data[at] != byte {
                    // Two different bytes for one offset: which one the
                    // server would use is not ours to guess.
                    return Err(Verdict::Malformed);
                }
            } else {
                self.have[word] |= bit;
                self.data[at] = byte;
            }
        }
        while self.contiguous < self.data.len()
            && self.have[self.contiguous / 64] & (1 << (self.contiguous % 64)) != 0
        {
            self.contiguous += 1;
        }
        self.check_header(limit)
    }

    /// Judges the handshake header as soon as its bytes are in.
    fn check_header(&mut self, limit: usize) -> Result<(), Verdict> {
        if self.have.first().is_some_and(|word| word & 1 != 0)
            && self.data[0] != HANDSHAKE_CLIENT_HELLO
        {
            return Err(Verdict::Malformed);
        }
        if self.total.is_none() && self.contiguous >= HANDSHAKE_HEADER_LEN {
            let [_, a, b, c] = [self.data[0], self.data[1], self.data[2], self.data[3]];
            let total = HANDSHAKE_HEADER_LEN
                + (usize::from(a) << 16 | usize::from(b) << 8 | usize::from(c));
            if total > limit {
                return Err(Verdict::TooLarge);
            }
            if self.data.len() > total {
                return Err(Verdict::Malformed);
            }
            self.total = Some(total);
        }
        Ok(())
    }

    /// The whole message, or `Incomplete`.
    fn message(&self) -> Result<&[u8], Verdict> {
        match self.total {
            Some(total) if self.contiguous >= total => Ok(&self.data[..total]),
            _ => Err(Verdict::Incomplete),
        }
    }
}

/// A bounds-checked cursor; every shortfall is `Malformed` (a datagram is
/// never cut: what is missing was never sent).
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Verdict> {
        let end = self.pos.checked_add(n).ok_or(Verdict::Malformed)?;
        let bytes = self.buf.get(self.pos..end).ok_or(Verdict::Malformed)?;
        self.pos = end;
        Ok(bytes)
    }

    fn u8(&mut self) -> Result<u8, Verdict> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, Verdict> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn vec8(&mut self) -> Result<&'a [u8], Verdict> {
        let len = usize::from(self.u8()?);
        self.take(len)
    }

    /// A variable-length integer (RFC 9000 §16).
    fn varint(&mut self) -> Result<u64, Verdict> {
        let first = self.u8()?;
        let len = 1usize << (first >> 6);
        let mut value = u64::from(first & 0x3f);
        for &byte in self.take(len - 1)? {
            value = value << 8 | u64::from(byte);
        }
        Ok(value)
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

    #[test]
    fn varints_read_all_four_lengths() {
        // RFC 9000 §A.1 examples.
        for (bytes, value) in [
            (
                &[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c][..],
                151_288_809_941_952_652,
            ),
            (&[0x9d, 0x7f, 0x3e, 0x7d][..], 494_878_333),
            (&[0x7b, 0xbd][..], 15_293),
            (&[0x25][..], 37),
        ] {
            let mut r = Reader::new(bytes);
            assert_eq!(r.varint(), Ok(value));
            assert!(r.is_empty());
        }
        assert_eq!(Reader::new(&[0x7b]).varint(), Err(Verdict::Malformed));
    }

    #[test]
    fn crypto_reassembles_overlaps_and_refuses_conflicts() {
        let message = [1, 0, 0, 4, 10, 11, 12, 13];
        let mut crypto = Crypto::default();
        crypto.insert(4, &message[4..], 100).unwrap();
        assert_eq!(crypto.message(), Err(Verdict::Incomplete));
        crypto.insert(2, &message[2..6], 100).unwrap();
        crypto.insert(0, &message[..3], 100).unwrap();
        assert_eq!(crypto.message(), Ok(&message[..]));
        let mut bad = Crypto::default();
        bad.insert(0, &message[..6], 100).unwrap();
        assert_eq!(bad.insert(5, &[99], 100), Err(Verdict::Malformed));
        let mut past = Crypto::default();
        past.insert(0, &message, 100).unwrap();
        assert_eq!(past.insert(8, &[0], 100), Err(Verdict::Malformed));
        assert_eq!(
            Crypto::default().insert(99, &[0, 0], 100),
            Err(Verdict::TooLarge)
        );
        assert_eq!(
            Crypto::default().insert(0, &[2], 100),
            Err(Verdict::Malformed)
        );
        assert_eq!(
            Crypto::default().insert(0, &[1, 0, 0, 200], 100),
            Err(Verdict::TooLarge)
        );
    }
}
