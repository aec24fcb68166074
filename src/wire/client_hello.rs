//! The TLS ClientHello parser: a pure, I/O-free state machine over the bytes
//! a client has sent since accept.
//!
//! A [`Reassembler`] is fed the stream as it grows (each call passes every
//! byte read so far) and answers either with the [`ClientHello`] (SNI, ALPN,
//! the highest TLS version offered, the outer fields of an ECH extension,
//! and how many bytes carried it) or with an [`Inspect`]
//! verdict. The handshake message may be split over several TLS records and
//! each record over any number of TCP segments. [`parse`] is the one-shot
//! form, for tests, benches and fuzzing. [`decode_handshake`] decodes a
//! handshake message that came without TLS records (QUIC's CRYPTO frames,
//! reassembled by [`crate::quic::initial`]).
//!
//! Guarantees the I/O side relies on:
//! - every strict prefix of a valid hello is [`Inspect::Incomplete`], never a
//!   wrong verdict, so feeding after each read is always safe;
//! - a stream whose first byte is not a TLS handshake record is
//!   [`Inspect::NotTls`] after one byte (HTTP, SSLv2, SSH, noise);
//! - nothing past `limit` bytes is ever needed: a hello that announces more,
//!   or that has not completed within `limit` bytes, is [`Inspect::TooLarge`];
//! - once a verdict other than `Incomplete` is given, it never changes.
//!
//! Strictness (RFC 8446 §4.1.2 and §4.2, RFC 6066 §3), all [`Inspect::Malformed`]:
//! the name the relay routes on must be the only one a backend could honour,
//! so a hello with two `server_name` extensions, or two names of one type in
//! its list (two `host_name`s), or an empty `host_name`, is refused; so is
//! any duplicated extension type, an empty or odd-length `cipher_suites`,
//! an empty `compression_methods`, a `legacy_session_id` over 32 bytes, and
//! bytes left over inside any length-delimited
//! field the parser decodes: the handshake message, the record that ends it,
//! the extensions block, each extension, and inside `server_name`, ALPN,
//! `supported_versions`, `supported_groups`, `signature_algorithms(_cert)`,
//! `ec_point_formats`, `psk_key_exchange_modes`, `key_share` and
//! `encrypted_client_hello` (those are
//! read here, not with tls-parser's list combinators, which drop a partial
//! trailing entry silently). A `server_name` list holding only name types
//! other than `host_name` means no SNI; a `host_name` next to another type
//! is routed on. Other extensions are checked for framing alone, so a client
//! using one this parser does not know is still routed.
//!
//! ECH (draft-ietf-tls-esni, extension 0xfe0d): the `ECHClientHello` is read
//! as the draft frames it, an `outer` (type 0: cipher suite, config id,
//! `enc<0..2^16-1>`, `payload<1..2^16-1>`) or an `inner` (type 1, nothing
//! after the type: a hello already decrypted by a client-facing server in
//! front). Anything else is malformed: a real client and a GREASE one both
//! send this exact framing. Only the config id is kept; the payload is
//! ciphertext (or, for GREASE, random bytes of a plausible length), so no
//! field but the config id can tell the two apart (see `route`).
//!
//! Versions (RFC 8446 §4.2.1): the highest version offered is the highest
//! entry of `supported_versions` in the TLS family (0x03xx), GREASE values
//! (0x?a?a) and unknown ones (pre-standard drafts) ignored; without the
//! extension, the hello's `legacy_version`.
//!
//! The fixed fields (version, random, session id, cipher suites,
//! compression methods) are read by hand as the extensions are; tls-parser
//! frames each extension. Its whole-message parser accepts exactly the
//! same messages (a property test holds the two together) but collects the
//! cipher suites and compression methods, which a relay never reads, into
//! two vectors: reading them in place took the hello's decoding from 3,319
//! to 2,093 instructions per connection (callgrind, the load benchmark's
//! hello).
//!
//! Fingerprints (JA4, JA3; [`crate::wire::fingerprint`]) read fields this parser
//! otherwise only checks: the cipher suites, every extension type in order,
//! `supported_groups`, `ec_point_formats` and `signature_algorithms`. The
//! decoder notes where they sit in the message as a [`HelloLayout`] (a few
//! offsets, no allocation), so a fingerprint is computed from the bytes
//! already held, when something asks for one, without a second parse.
//!
//! Not here: reading sockets, deadlines, or deciding what a name may reach.
//!
//! Cost: linear in the bytes received, however they are cut. Each feed walks
//! only the bytes added since the last one (record headers are read once,
//! payload bytes looked at once), and the message is decoded exactly once,
//! when its announced length is complete. No copy when the hello sits in one
//! record (the common case); otherwise each payload byte is copied once into
//! one buffer that grows with the bytes received (never with the length a
//! client merely announces). A trickling client (one-byte records,
//! one per segment) thus costs the relay per read a constant, not a re-parse
//! of everything buffered.

use tls_parser::{TlsExtension, parse_tls_extension_unknown};

/// TLS record header: type (1), legacy version (2), length (2).
pub(crate) const RECORD_HEADER_LEN: usize = 5;
/// Largest plaintext record payload a peer may send (RFC 8446 §5.1).
pub(crate) const MAX_RECORD_PAYLOAD: usize = 1 << 14;
/// Handshake header: type (1), length (3).
const HANDSHAKE_HEADER_LEN: usize = 4;
const CONTENT_TYPE_HANDSHAKE: u8 = 22;
const HANDSHAKE_CLIENT_HELLO: u8 = 1;
const EXTENSION_SERVER_NAME: u16 = 0;
const EXTENSION_SUPPORTED_GROUPS: u16 = 10;
const EXTENSION_EC_POINT_FORMATS: u16 = 11;
const EXTENSION_SIGNATURE_ALGORITHMS: u16 = 13;
const EXTENSION_ALPN: u16 = 16;
const EXTENSION_SUPPORTED_VERSIONS: u16 = 43;
const EXTENSION_PSK_KEY_EXCHANGE_MODES: u16 = 45;
const EXTENSION_SIGNATURE_ALGORITHMS_CERT: u16 = 50;
const EXTENSION_KEY_SHARE: u16 = 51;
const EXTENSION_ENCRYPTED_CLIENT_HELLO: u16 = 0xfe0d;
const SNI_TYPE_HOST_NAME: u8 = 0;
const ECH_TYPE_OUTER: u8 = 0;
const ECH_TYPE_INNER: u8 = 1;

/// What the inspection learned from a complete ClientHello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientHello {
    /// The raw `host_name` from the server_name extension, if any; not yet
    /// normalised (see [`crate::wire::sni::Sni::parse`]).
    pub server_name: Option<Vec<u8>>,
    /// The ALPN protocol names, in the client's order.
    pub alpn: Vec<Vec<u8>>,
    /// The `encrypted_client_hello` extension, if present (real or GREASE:
    /// only a configured config id tells them apart, see `route`).
    pub ech: Option<Ech>,
    /// The highest TLS version offered (`0x0303` is TLS 1.2, `0x0304` 1.3):
    /// from `supported_versions` when present, else `legacy_version`. `None`
    /// when `supported_versions` lists no version of the TLS family.
    pub version: Option<u16>,
    /// Bytes of the stream, from its start, up to the end of the record that
    /// completed the hello.
    pub len: usize,
}

/// Where, inside a complete ClientHello handshake message, the fields a
/// fingerprint reads sit: offsets into the message (type and length
/// included) whose framing the decoder has already checked. Plain data,
/// `Copy`, filled in while decoding at no extra cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HelloLayout {
    /// The hello's `legacy_version`.
    pub legacy_version: u16,
    /// The `cipher_suites` entries (two bytes each).
    pub ciphers: Span,
    /// The extensions block (each extension's type, length and data), empty
    /// when the hello has none.
    pub extensions: Span,
    /// The `supported_groups` entries, when the extension is present.
    pub supported_groups: Option<Span>,
    /// The `ec_point_formats` entries (one byte each), when present.
    pub ec_point_formats: Option<Span>,
    /// The `signature_algorithms` entries, when present.
    pub signature_algorithms: Option<Span>,
    /// The first ALPN protocol name, when ALPN is present.
    pub first_alpn: Option<Span>,
}

/// A range of bytes inside a handshake message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    /// Offset of the first byte from the message's start.
    pub start: u32,
    /// Length in bytes.
    pub len: u32,
}

impl Span {
    /// The bytes of `message` this span covers (empty if the span does not
    /// lie inside it, which a layout from the same message never does).
    pub(crate) fn of(self, message: &[u8]) -> &[u8] {
        let start = self.start as usize;
        message
            .get(start..start + self.len as usize)
            .unwrap_or_default()
    }

    /// Where `part`, a subslice of `message`, sits in it.
    fn within(message: &[u8], part: &[u8]) -> Span {
        let start = (part.as_ptr() as usize).wrapping_sub(message.as_ptr() as usize);
        debug_assert!(start + part.len() <= message.len(), "not a subslice");
        // A message is at most 2^24 + 3 bytes: both fit.
        Span {
            start: start as u32,
            len: part.len() as u32,
        }
    }
}

/// The `ECHClientHello` of an `encrypted_client_hello` extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ech {
    /// An outer hello: the inner one is encrypted to the key of the ECH
    /// configuration with this id (or, for GREASE, the id is random).
    Outer {
        /// The `config_id` of the ECH configuration the client used.
        config_id: u8,
    },
    /// An inner hello in the clear: a client-facing server decrypted it.
    Inner,
}

/// Why the bytes so far are not (yet) a ClientHello.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Inspect {
    /// Valid so far; more bytes are needed.
    #[error("incomplete ClientHello")]
    Incomplete,
    /// The stream does not start with a TLS handshake record.
    #[error("not TLS")]
    NotTls,
    /// A TLS handshake record, but not a well-formed ClientHello.
    #[error("malformed ClientHello")]
    Malformed,
    /// The hello needs more than the configured number of bytes.
    #[error("ClientHello larger than the limit")]
    TooLarge,
}

/// Parses the ClientHello at the start of `buf`, needing at most `limit` bytes.
pub fn parse(buf: &[u8], limit: usize) -> Result<ClientHello, Inspect> {
    Reassembler::new(limit).feed(buf)
}

/// The incremental ClientHello reader: walks TLS records as bytes arrive and
/// reassembles the handshake message they carry.
///
/// Each [`feed`](Self::feed) passes the whole stream so far (the caller keeps
/// it anyway, to replay it); only the bytes past the previous call are
/// walked. Size: a few words and the reassembly buffer, which stays empty
/// unless the hello spans records.
#[derive(Debug)]
pub struct Reassembler {
    limit: usize,
    /// Stream bytes walked so far: whole record headers and payload bytes.
    walked: usize,
    /// Payload bytes of the current record not yet walked; 0 between records.
    record_left: usize,
    /// Records whose header has been read.
    records: usize,
    /// Message bytes seen so far, across records.
    message_len: usize,
    /// The handshake header, gathered byte by byte (it may span records).
    header: [u8; HANDSHAKE_HEADER_LEN],
    /// The whole message's length, header included, once the header is in.
    total: Option<usize>,
    /// The message so far, once it spans records; empty while it sits in
    /// the first record, where it is read in place.
    message: Vec<u8>,
    /// The refusal, once given.
    failed: Option<Inspect>,
    /// Whether the whole message is in (and `total` bytes of it held).
    complete: bool,
    /// Where the fingerprinted fields sit, once the hello is decoded.
    layout: Option<HelloLayout>,
}

impl Reassembler {
    /// A reader that needs at most `limit` bytes of stream.
    pub fn new(limit: usize) -> Self {
        Reassembler {
            limit,
            walked: 0,
            record_left: 0,
            records: 0,
            message_len: 0,
            header: [0; HANDSHAKE_HEADER_LEN],
            total: None,
            message: Vec::new(),
            failed: None,
            complete: false,
            layout: None,
        }
    }

    /// Walks what `stream` adds to the stream fed before (`stream` must
    /// start with every byte fed so far) and answers as [`parse`] would on
    /// all of `stream`.
    pub fn feed(&mut self, stream: &[u8]) -> Result<ClientHello, Inspect> {
        if let Some(refusal) = self.failed {
            return Err(refusal);
        }
        if self.complete {
            // Answered already: the same bytes decode the same way.
            return self.decode(stream);
        }
        let answer = self.walk(stream);
        if let Err(refusal) = answer {
            if refusal != Inspect::Incomplete {
                // The buffer is not needed past a refusal; free it now
                // rather than when the connection's setup ends.
                self.message = Vec::new();
                self.failed = Some(refusal);
            }
        }
        answer
    }

    /// The shortest stream that could hold the whole hello, as far as the
    /// bytes walked tell (one byte more than those, while its length is not
    /// known). A hint for how many bytes the I/O side may let accumulate
    /// before reading again: no answer but a refusal can come sooner.
    pub fn needs(&self) -> usize {
        let Some(total) = self.total else {
            return self.walked + 1;
        };
        let rest = total - self.message_len;
        if rest <= self.record_left {
            self.walked + rest.max(1)
        } else {
            // At least one more record, so one more header.
            self.walked + rest + RECORD_HEADER_LEN
        }
    }

    fn walk(&mut self, stream: &[u8]) -> Result<ClientHello, Inspect> {
        debug_assert!(stream.len() >= self.walked, "the stream shrank");
        // Verdicts on the first bytes come before anything else, so that a
        // non-TLS stream is refused after its first byte.
        if self.records == 0 {
            match stream {
                [] => return Err(Inspect::Incomplete),
                [kind, ..] if *kind != CONTENT_TYPE_HANDSHAKE => return Err(Inspect::NotTls),
                [_, major, ..] if *major != 3 => return Err(Inspect::NotTls),
                _ => {}
            }
        }
        loop {
            if self.record_left == 0 {
                self.record_header(stream)?;
            }
            let start = self.walked;
            let available = stream.len() - start;
            let take = available.min(self.record_left);
            if take == 0 {
                return Err(self.incomplete_within(stream.len()));
            }
            let chunk = &stream[start..start + take];
            self.walked += take;
            self.record_left -= take;
            let used = self.message_bytes(chunk)?;
            if self.total == Some(self.message_len) {
                // A record must end where the hello does: anything after it
                // in the same record would be a second handshake message
                // in the client's first flight, which TLS does not have.
                if used < take || self.record_left != 0 {
                    return Err(Inspect::Malformed);
                }
                self.complete = true;
                let (hello, layout) = self.decode_with_layout(stream)?;
                self.layout = Some(layout);
                return Ok(hello);
            }
        }
    }

    /// Decodes the complete message: in place when it sits in the first
    /// record, else from the reassembly buffer.
    fn decode(&self, stream: &[u8]) -> Result<ClientHello, Inspect> {
        Ok(self.decode_with_layout(stream)?.0)
    }

    fn decode_with_layout(&self, stream: &[u8]) -> Result<(ClientHello, HelloLayout), Inspect> {
        let (mut hello, layout) = decode(self.message_in(stream))?;
        hello.len = self.walked;
        Ok((hello, layout))
    }

    /// The handshake message: in place in `stream` when it sits in the
    /// first record, else the reassembly buffer.
    fn message_in<'a>(&'a self, stream: &'a [u8]) -> &'a [u8] {
        if self.records == 1 {
            &stream[RECORD_HEADER_LEN..RECORD_HEADER_LEN + self.message_len]
        } else {
            &self.message[..]
        }
    }

    /// The complete hello's message and where its fingerprinted fields sit,
    /// once [`feed`](Self::feed) has answered with a hello; `stream` is the
    /// stream last fed. `None` before that.
    pub fn hello_message<'a>(&'a self, stream: &'a [u8]) -> Option<(&'a [u8], HelloLayout)> {
        let layout = self.layout?;
        Some((self.message_in(stream), layout))
    }

    /// Reads the record header at `walked`, or answers why it cannot yet.
    fn record_header(&mut self, stream: &[u8]) -> Result<(), Inspect> {
        let Some(header) = stream.get(self.walked..self.walked + RECORD_HEADER_LEN) else {
            return Err(self.incomplete_within(stream.len()));
        };
        if header[0] != CONTENT_TYPE_HANDSHAKE || header[1] != 3 {
            // The first record was checked in `walk`; a later one that is
            // not a handshake record interrupts the hello.
            return Err(Inspect::Malformed);
        }
        let payload_len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        if payload_len == 0 || payload_len > MAX_RECORD_PAYLOAD {
            return Err(Inspect::Malformed);
        }
        if self.walked + RECORD_HEADER_LEN + payload_len > self.limit {
            return Err(Inspect::TooLarge);
        }
        if self.records == 1 {
            // The hello spans records: from here on it is reassembled in
            // its own buffer, starting with the first record's payload. The
            // buffer grows with the bytes that came, not with the length
            // the client announced, which costs it nothing to claim.
            let first = &stream[RECORD_HEADER_LEN..RECORD_HEADER_LEN + self.message_len];
            self.message.extend_from_slice(first);
        }
        self.walked += RECORD_HEADER_LEN;
        self.record_left = payload_len;
        self.records += 1;
        Ok(())
    }

    /// Takes the next message bytes from `chunk` (from one record), up to
    /// the message's end once its length is known; answers how many it took.
    fn message_bytes(&mut self, chunk: &[u8]) -> Result<usize, Inspect> {
        let mut rest = chunk;
        // The handshake header is judged byte by byte as it arrives, so an
        // oversized or wrong message is refused without waiting for it.
        while self.message_len < HANDSHAKE_HEADER_LEN {
            let Some((&byte, after)) = rest.split_first() else {
                return Ok(chunk.len());
            };
            if self.message_len == 0 && byte != HANDSHAKE_CLIENT_HELLO {
                return Err(Inspect::Malformed);
            }
            self.header[self.message_len] = byte;
            self.message_len += 1;
            if self.records > 1 {
                self.message.push(byte);
            }
            rest = after;
        }
        let total = match self.total {
            Some(total) => total,
            None => {
                let [_, a, b, c] = self.header;
                let body = usize::from(a) << 16 | usize::from(b) << 8 | usize::from(c);
                let total = HANDSHAKE_HEADER_LEN + body;
                // Each record adds a header, so a message that alone
                // exceeds the limit can never fit.
                if total + RECORD_HEADER_LEN > self.limit {
                    return Err(Inspect::TooLarge);
                }
                self.total = Some(total);
                total
            }
        };
        // Bytes past the message's end are left for `walk` to refuse.
        let wanted = (total - self.message_len).min(rest.len());
        if self.records > 1 {
            self.message.extend_from_slice(&rest[..wanted]);
        }
        self.message_len += wanted;
        Ok(chunk.len() - rest.len() + wanted)
    }

    /// `Incomplete`, unless the bytes already buffered leave no room to finish.
    fn incomplete_within(&self, buffered: usize) -> Inspect {
        if buffered >= self.limit {
            Inspect::TooLarge
        } else {
            Inspect::Incomplete
        }
    }
}

/// Decodes one complete ClientHello handshake message (type, length and
/// body, no record header), as QUIC's CRYPTO frames carry it: the same
/// checks as for a hello read from TLS records. [`ClientHello::len`] is the
/// message's length. `Incomplete` is never answered: the message must be
/// whole.
pub fn decode_handshake(message: &[u8]) -> Result<ClientHello, Inspect> {
    Ok(decode_handshake_with_layout(message)?.0)
}

/// [`decode_handshake`], also answering where the fields a fingerprint
/// reads sit in `message`.
pub fn decode_handshake_with_layout(message: &[u8]) -> Result<(ClientHello, HelloLayout), Inspect> {
    let (mut hello, layout) = decode(message)?;
    hello.len = message.len();
    Ok((hello, layout))
}

/// Decodes one complete ClientHello handshake message.
///
/// The fixed fields (RFC 8446 §4.1.2) are read here with [`Field`], as the
/// extensions are: tls-parser's `parse_tls_message_handshake` accepts the
/// same messages (the test `decode_reads_the_fixed_fields_as_tls_parser_does`
/// holds the two together) but collects the cipher suites and compression
/// methods into two vectors this relay never reads, a third of the hello's
/// decoding cost.
fn decode(message: &[u8]) -> Result<(ClientHello, HelloLayout), Inspect> {
    let (legacy_version, ciphers, extensions) = fixed_fields(message)?;
    let mut layout = HelloLayout {
        legacy_version,
        ciphers: Span::within(message, ciphers),
        extensions: Span::within(message, extensions),
        ..HelloLayout::default()
    };
    let mut found = ClientHello {
        server_name: None,
        alpn: Vec::new(),
        ech: None,
        version: tls_version(legacy_version),
        len: 0,
    };
    // Every type is kept to find duplicates: sorting a few dozen numbers
    // once is cheaper than a 64 Ki-bit set, and stays linearithmic for a
    // hostile hello of thousands of empty extensions. One allocation in
    // the common case: an extension takes at least 4 bytes, and a browser's
    // hello carries some 10 to 20.
    let mut kinds = Vec::with_capacity((extensions.len() / 4).min(32));
    let mut rest = extensions;
    while !rest.is_empty() {
        let Ok((next, TlsExtension::Unknown(kind, data))) = parse_tls_extension_unknown(rest)
        else {
            return Err(Inspect::Malformed);
        };
        rest = next;
        kinds.push(kind.0);
        match kind.0 {
            EXTENSION_SERVER_NAME => found.server_name = host_name(data)?.map(<[u8]>::to_vec),
            EXTENSION_ALPN => {
                found.alpn = alpn(data)?;
                // The first name follows the list's two-byte length and its
                // own one-byte length.
                let first = found.alpn.first().map_or(0, Vec::len);
                layout.first_alpn = Some(Span::within(message, &data[3..3 + first]));
            }
            EXTENSION_ENCRYPTED_CLIENT_HELLO => found.ech = Some(ech(data)?),
            EXTENSION_SUPPORTED_VERSIONS => found.version = supported_versions(data)?,
            EXTENSION_SUPPORTED_GROUPS => {
                let list = list16(data, 2, 2)?;
                layout.supported_groups = Some(Span::within(message, list));
            }
            EXTENSION_SIGNATURE_ALGORITHMS => {
                let list = list16(data, 2, 2)?;
                layout.signature_algorithms = Some(Span::within(message, list));
            }
            EXTENSION_SIGNATURE_ALGORITHMS_CERT => {
                list16(data, 2, 2)?;
            }
            EXTENSION_EC_POINT_FORMATS => {
                let list = list8(data, 1, 1)?;
                layout.ec_point_formats = Some(Span::within(message, list));
            }
            EXTENSION_PSK_KEY_EXCHANGE_MODES => {
                list8(data, 1, 1)?;
            }
            EXTENSION_KEY_SHARE => key_share(data)?,
            _ => {}
        }
    }
    kinds.sort_unstable();
    if kinds.windows(2).any(|pair| pair[0] == pair[1]) {
        return Err(Inspect::Malformed);
    }
    Ok((found, layout))
}

/// The fixed fields of a ClientHello message: its `legacy_version`, its
/// cipher suites and its extensions block (empty when it has none), every
/// field checked for framing and nothing left over.
fn fixed_fields(message: &[u8]) -> Result<(u16, &[u8], &[u8]), Inspect> {
    let mut message = Field(message);
    if message.u8()? != HANDSHAKE_CLIENT_HELLO {
        return Err(Inspect::Malformed);
    }
    let length = message.take(3)?;
    let length =
        usize::from(length[0]) << 16 | usize::from(length[1]) << 8 | usize::from(length[2]);
    let mut body = Field(message.take(length)?);
    // The message ends exactly where its body does.
    message.end()?;
    let legacy_version = body.u16()?;
    body.take(32)?; // random
    // legacy_session_id<0..32>
    if body.vec8()?.0.len() > 32 {
        return Err(Inspect::Malformed);
    }
    // cipher_suites<2..2^16-2>, compression_methods<1..2^8-1>
    let ciphers = body.vec16()?;
    if ciphers.is_empty() || ciphers.0.len() % 2 == 1 {
        return Err(Inspect::Malformed);
    }
    if body.vec8()?.is_empty() {
        return Err(Inspect::Malformed);
    }
    // Extensions are optional (a TLS 1.2 hello may end here); when present,
    // the block must fill the rest of the body exactly.
    let extensions = if body.is_empty() {
        // Empty, at the body's end (so its offset still lies in the message).
        body.0
    } else {
        let block = body.vec16()?;
        body.end()?;
        block.0
    };
    Ok((legacy_version, ciphers.0, extensions))
}

/// A cursor over one length-delimited field: every read is bounds-checked,
/// and [`Field::end`] fails unless the field was consumed exactly.
struct Field<'a>(&'a [u8]);

impl<'a> Field<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Inspect> {
        if n > self.0.len() {
            return Err(Inspect::Malformed);
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, Inspect> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, Inspect> {
        let bytes = self.take(2)?;
        Ok(u16::from_be_bytes([bytes[0], bytes[1]]))
    }

    /// A vector with a one-byte length prefix.
    fn vec8(&mut self) -> Result<Field<'a>, Inspect> {
        let len = usize::from(self.u8()?);
        Ok(Field(self.take(len)?))
    }

    /// A vector with a two-byte length prefix.
    fn vec16(&mut self) -> Result<Field<'a>, Inspect> {
        let len = usize::from(self.u16()?);
        Ok(Field(self.take(len)?))
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn end(self) -> Result<(), Inspect> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(Inspect::Malformed)
        }
    }
}

/// The `host_name` of a server_name extension (RFC 6066 §3), if it has one.
fn host_name(data: &[u8]) -> Result<Option<&[u8]>, Inspect> {
    let mut data = Field(data);
    let mut list = data.vec16()?;
    data.end()?;
    // ServerName server_name_list<1..2^16-1>
    if list.is_empty() {
        return Err(Inspect::Malformed);
    }
    let mut seen = [false; 256];
    let mut host = None;
    while !list.is_empty() {
        let kind = list.u8()?;
        // Every name type defined so far is an opaque<1..2^16-1>; a type
        // this parser does not know is read the same way.
        let name = list.vec16()?.0;
        // "The ServerNameList MUST NOT contain more than one name of the
        // same name_type": a second host_name is a second candidate route.
        if std::mem::replace(&mut seen[usize::from(kind)], true) {
            return Err(Inspect::Malformed);
        }
        if kind == SNI_TYPE_HOST_NAME {
            if name.is_empty() {
                return Err(Inspect::Malformed);
            }
            host = Some(name);
        }
    }
    Ok(host)
}

/// The protocol names of an ALPN extension (RFC 7301 §3.1).
fn alpn(data: &[u8]) -> Result<Vec<Vec<u8>>, Inspect> {
    let mut data = Field(data);
    let mut list = data.vec16()?;
    data.end()?;
    // ProtocolName protocol_name_list<2..2^16-1>, ProtocolName opaque<1..2^8-1>
    if list.is_empty() {
        return Err(Inspect::Malformed);
    }
    let mut names = Vec::new();
    while !list.is_empty() {
        let name = list.vec8()?.0;
        if name.is_empty() {
            return Err(Inspect::Malformed);
        }
        names.push(name.to_vec());
    }
    Ok(names)
}

/// The highest TLS-family version of a ClientHello `supported_versions`
/// (RFC 8446 §4.2.1: ProtocolVersion versions<2..254>).
fn supported_versions(data: &[u8]) -> Result<Option<u16>, Inspect> {
    let mut data = Field(data);
    let mut list = data.vec8()?;
    data.end()?;
    framed_items(&list, 2, 2)?;
    let mut highest = None;
    while !list.is_empty() {
        highest = highest.max(tls_version(list.u16()?));
    }
    Ok(highest)
}

/// `version` if it is one of the TLS family (0x03xx) and not GREASE.
fn tls_version(version: u16) -> Option<u16> {
    // GREASE versions (RFC 8701) are 0x?a?a; none is 0x03xx, but say so.
    let grease = version & 0x0f0f == 0x0a0a;
    (version >> 8 == 3 && !grease).then_some(version)
}

/// An `ECHClientHello` (draft-ietf-tls-esni §5): `outer` with its cipher
/// suite, config id, `enc<0..2^16-1>` and `payload<1..2^16-1>`, or `inner`
/// with nothing after its type.
fn ech(data: &[u8]) -> Result<Ech, Inspect> {
    let mut data = Field(data);
    match data.u8()? {
        ECH_TYPE_OUTER => {
            let _kdf = data.u16()?;
            let _aead = data.u16()?;
            let config_id = data.u8()?;
            let _enc = data.vec16()?;
            if data.vec16()?.is_empty() {
                return Err(Inspect::Malformed);
            }
            data.end()?;
            Ok(Ech::Outer { config_id })
        }
        ECH_TYPE_INNER => {
            data.end()?;
            Ok(Ech::Inner)
        }
        _ => Err(Inspect::Malformed),
    }
}

/// An extension that is exactly one vector with a one-byte length prefix,
/// of at least `min` bytes, made of `item`-byte entries: its entries.
fn list8(data: &[u8], min: usize, item: usize) -> Result<&[u8], Inspect> {
    let mut data = Field(data);
    let list = data.vec8()?;
    data.end()?;
    framed_items(&list, min, item)?;
    Ok(list.0)
}

/// As [`list8`], with a two-byte length prefix.
fn list16(data: &[u8], min: usize, item: usize) -> Result<&[u8], Inspect> {
    let mut data = Field(data);
    let list = data.vec16()?;
    data.end()?;
    framed_items(&list, min, item)?;
    Ok(list.0)
}

fn framed_items(list: &Field<'_>, min: usize, item: usize) -> Result<(), Inspect> {
    if list.0.len() < min || list.0.len() % item != 0 {
        return Err(Inspect::Malformed);
    }
    Ok(())
}

/// A ClientHello key_share (RFC 8446 §4.2.8): KeyShareEntry
/// client_shares<0..2^16-1>, each a group and an opaque<1..2^16-1>.
fn key_share(data: &[u8]) -> Result<(), Inspect> {
    let mut data = Field(data);
    let mut shares = data.vec16()?;
    data.end()?;
    while !shares.is_empty() {
        let _group = shares.u16()?;
        if shares.vec16()?.is_empty() {
            return Err(Inspect::Malformed);
        }
    }
    Ok(())
}
