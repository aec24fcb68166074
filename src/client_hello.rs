//! The TLS ClientHello parser: a pure function over the bytes read so far.
//!
//! [`parse`] takes everything a client has sent since accept and answers
//! either with the [`ClientHello`] (SNI, ALPN, ECH presence, and how many
//! bytes carried it) or with an [`Inspect`] verdict. The handshake message may
//! be split over several TLS records and each record over any number of TCP
//! segments; the record layer is walked here, and the reassembled handshake
//! message is decoded with `tls-parser`.
//!
//! Guarantees the I/O side relies on:
//! - every strict prefix of a valid hello is [`Inspect::Incomplete`], never a
//!   wrong verdict, so re-parsing after each read is always safe;
//! - a stream whose first byte is not a TLS handshake record is
//!   [`Inspect::NotTls`] after one byte (HTTP, SSLv2, SSH, noise);
//! - nothing past `limit` bytes is ever needed: a hello that announces more,
//!   or that has not completed within `limit` bytes, is [`Inspect::TooLarge`].
//!
//! Not here: reading sockets, deadlines, or deciding what a name may reach.
//! Cost: no copy when the hello sits in one record (the common case); one
//! reassembly buffer of the hello's size otherwise.

use std::borrow::Cow;

use tls_parser::{
    TlsExtension, TlsMessage, TlsMessageHandshake, parse_tls_extension_alpn_content,
    parse_tls_extension_sni_content, parse_tls_extension_unknown, parse_tls_message_handshake,
};

/// TLS record header: type (1), legacy version (2), length (2).
pub const RECORD_HEADER_LEN: usize = 5;
/// Largest plaintext record payload a peer may send (RFC 8446 §5.1).
pub const MAX_RECORD_PAYLOAD: usize = 1 << 14;
/// Handshake header: type (1), length (3).
const HANDSHAKE_HEADER_LEN: usize = 4;
const CONTENT_TYPE_HANDSHAKE: u8 = 22;
const HANDSHAKE_CLIENT_HELLO: u8 = 1;
const EXTENSION_SERVER_NAME: u16 = 0;
const EXTENSION_ALPN: u16 = 16;
const EXTENSION_ENCRYPTED_CLIENT_HELLO: u16 = 0xfe0d;
const SNI_TYPE_HOST_NAME: u8 = 0;

/// What the inspection learned from a complete ClientHello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientHello {
    /// The raw `host_name` from the server_name extension, if any; not yet
    /// normalised (see [`crate::sni::Sni::parse`]).
    pub server_name: Option<Vec<u8>>,
    /// The ALPN protocol names, in the client's order.
    pub alpn: Vec<Vec<u8>>,
    /// Whether an `encrypted_client_hello` extension is present (real or
    /// GREASE; the relay cannot tell them apart and does not need to).
    pub ech: bool,
    /// Bytes of the stream, from its start, up to the end of the record that
    /// completed the hello.
    pub len: usize,
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
    let (message, len) = reassemble(buf, limit)?;
    let mut hello = decode(&message)?;
    hello.len = len;
    Ok(hello)
}

/// Walks TLS records from the start of `buf` until one handshake message is
/// complete; returns that message and the stream length that carried it.
fn reassemble(buf: &[u8], limit: usize) -> Result<(Cow<'_, [u8]>, usize), Inspect> {
    // Verdicts on the first bytes come before anything else, so that a
    // non-TLS stream is refused after its first byte.
    match buf {
        [] => return Err(Inspect::Incomplete),
        [kind, ..] if *kind != CONTENT_TYPE_HANDSHAKE => return Err(Inspect::NotTls),
        [_, major, ..] if *major != 3 => return Err(Inspect::NotTls),
        _ => {}
    }
    let mut message: Cow<'_, [u8]> = Cow::Borrowed(&[]);
    let mut pos = 0;
    loop {
        let Some(header) = buf.get(pos..pos + RECORD_HEADER_LEN) else {
            return Err(incomplete_within(buf.len(), limit));
        };
        if header[0] != CONTENT_TYPE_HANDSHAKE || header[1] != 3 {
            // The first record was checked above; a later one that is not a
            // handshake record interrupts the hello.
            return Err(Inspect::Malformed);
        }
        let payload_len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        if payload_len == 0 || payload_len > MAX_RECORD_PAYLOAD {
            return Err(Inspect::Malformed);
        }
        let end = pos + RECORD_HEADER_LEN + payload_len;
        if end > limit {
            return Err(Inspect::TooLarge);
        }
        let Some(payload) = buf.get(pos + RECORD_HEADER_LEN..end) else {
            // Judge the handshake header early if it is already here, so an
            // oversized or wrong message is refused without waiting for it.
            let partial = &buf[pos + RECORD_HEADER_LEN..];
            if message.is_empty() {
                check_handshake_header(partial, limit)?;
            } else {
                check_handshake_header(&[&message[..], partial].concat(), limit)?;
            }
            return Err(Inspect::Incomplete);
        };
        if message.is_empty() {
            message = Cow::Borrowed(payload);
        } else {
            message.to_mut().extend_from_slice(payload);
        }
        pos = end;
        if let Some(total) = check_handshake_header(&message, limit)? {
            if message.len() >= total {
                return Ok((truncate(message, total), pos));
            }
        }
    }
}

/// `Incomplete`, unless the bytes already buffered leave no room to finish.
fn incomplete_within(buffered: usize, limit: usize) -> Inspect {
    if buffered >= limit {
        Inspect::TooLarge
    } else {
        Inspect::Incomplete
    }
}

/// Checks the handshake header once its 4 bytes are in; returns the full
/// message length (header included) when known.
fn check_handshake_header(message: &[u8], limit: usize) -> Result<Option<usize>, Inspect> {
    match message {
        [kind, ..] if *kind != HANDSHAKE_CLIENT_HELLO => Err(Inspect::Malformed),
        [_, a, b, c, ..] => {
            let body = usize::from(*a) << 16 | usize::from(*b) << 8 | usize::from(*c);
            let total = HANDSHAKE_HEADER_LEN + body;
            // Each record adds a header, so a message that alone exceeds the
            // limit can never fit.
            if total + RECORD_HEADER_LEN > limit {
                return Err(Inspect::TooLarge);
            }
            Ok(Some(total))
        }
        _ => Ok(None),
    }
}

fn truncate(message: Cow<'_, [u8]>, len: usize) -> Cow<'_, [u8]> {
    match message {
        Cow::Borrowed(bytes) => Cow::Borrowed(&bytes[..len]),
        Cow::Owned(mut bytes) => {
            bytes.truncate(len);
            Cow::Owned(bytes)
        }
    }
}

/// Decodes one complete ClientHello handshake message.
fn decode(message: &[u8]) -> Result<ClientHello, Inspect> {
    let hello = match parse_tls_message_handshake(message) {
        Ok((_, TlsMessage::Handshake(TlsMessageHandshake::ClientHello(hello)))) => hello,
        _ => return Err(Inspect::Malformed),
    };
    // tls-parser reads an extensions block whose length overruns the message
    // as "no extensions"; the message must end exactly where its fields do.
    let fixed = HANDSHAKE_HEADER_LEN
        + 2 // legacy_version
        + 32 // random
        + 1
        + hello.session_id.map_or(0, <[u8]>::len)
        + 2
        + 2 * hello.ciphers.len()
        + 1
        + hello.comp.len();
    let expected = match hello.ext {
        None => fixed,
        Some(ext) => fixed + 2 + ext.len(),
    };
    if message.len() != expected {
        return Err(Inspect::Malformed);
    }
    let mut found = ClientHello {
        server_name: None,
        alpn: Vec::new(),
        ech: false,
        len: 0,
    };
    // Only the extensions the relay needs are decoded; the rest are checked
    // for framing alone, so a client using an extension this parser does not
    // know (or encodes a known one unusually) is still routed.
    let mut rest = hello.ext.unwrap_or_default();
    while !rest.is_empty() {
        let Ok((next, TlsExtension::Unknown(kind, data))) = parse_tls_extension_unknown(rest)
        else {
            return Err(Inspect::Malformed);
        };
        rest = next;
        match kind.0 {
            EXTENSION_SERVER_NAME => found.server_name = Some(host_name(data)?),
            EXTENSION_ALPN => found.alpn = alpn(data)?,
            EXTENSION_ENCRYPTED_CLIENT_HELLO => found.ech = true,
            _ => {}
        }
    }
    Ok(found)
}

fn host_name(data: &[u8]) -> Result<Vec<u8>, Inspect> {
    match parse_tls_extension_sni_content(data) {
        Ok(([], TlsExtension::SNI(names))) => names
            .into_iter()
            .find(|(kind, _)| kind.0 == SNI_TYPE_HOST_NAME)
            .map(|(_, name)| name.to_vec())
            .ok_or(Inspect::Malformed),
        _ => Err(Inspect::Malformed),
    }
}

fn alpn(data: &[u8]) -> Result<Vec<Vec<u8>>, Inspect> {
    match parse_tls_extension_alpn_content(data) {
        Ok(([], TlsExtension::ALPN(names))) => Ok(names.into_iter().map(<[u8]>::to_vec).collect()),
        _ => Err(Inspect::Malformed),
    }
}
