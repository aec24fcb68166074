//! TLS client fingerprints of a ClientHello: FoxIO's JA4 (`t…` over TCP,
//! `q…` over QUIC) and JA3 (its string and MD5 hash), computed from the
//! message the relay already holds and the [`HelloLayout`] its parser noted
//! ([`crate::wire::client_hello`]), never by parsing the hello again.
//!
//! JA4 (FoxIO's specification, BSD-3-Clause, `technical_details/JA4.md`):
//! `{t|q}{version}{d|i}{ciphers:02}{extensions:02}{alpn}_{b}_{c}` where
//! - the version is the highest `supported_versions` entry, else the
//!   `legacy_version` (`13`, `12`, `11`, `10`, `s3`, `s2`, DTLS `d1` `d2`
//!   `d3`, anything else `00`);
//! - `d` when a `server_name` extension is present, else `i`;
//! - the counts are of cipher suites and of extensions (SNI and ALPN
//!   included), capped at 99;
//! - `alpn` is the first and last character of the first ALPN name, or,
//!   when either is not an ASCII letter or digit, the first and last
//!   character of the name's hex form; `00` without ALPN;
//! - `b` is the first 12 hex digits of the SHA-256 of the cipher suites as
//!   4-digit lowercase hex, sorted, joined by `,`;
//! - `c` the same of the extension types sorted (SNI and ALPN left out),
//!   then `_` and the `signature_algorithms` in the client's order (the `_`
//!   and list only when the extension is present);
//! - an empty list hashes to `000000000000`.
//!
//! GREASE values (RFC 8701, `0x?a?a`) are ignored everywhere: counts,
//! lists, versions and signature algorithms.
//!
//! JA3 (Salesforce's): `version,ciphers,extensions,groups,point_formats`,
//! decimal, each list joined by `-` in the client's order, GREASE left
//! out, the version the `legacy_version`; its hash is the MD5 of that
//! string in lowercase hex. The same formula is applied to a QUIC hello.
//!
//! Not here: deciding when a fingerprint is wanted (the caller computes one
//! only when a route, a limit or the access log asks), matching one against
//! configured patterns beyond [`Ja4Pattern`], or reading sockets.
//!
//! Cost: one walk of the extensions block, two sorts of a few dozen
//! numbers, two SHA-256 and one MD5 of a few hundred bytes, and four small
//! strings (see `benches/fingerprint.rs` and benches/README.md). Nothing
//! is spent on a connection for which no fingerprint is asked.

use std::fmt::Write as _;

use crate::wire::client_hello::{HelloLayout, Span};

const EXTENSION_SERVER_NAME: u16 = 0;
const EXTENSION_ALPN: u16 = 16;
const EXTENSION_SUPPORTED_VERSIONS: u16 = 43;
/// What JA4 writes for an empty list's hash.
const EMPTY_HASH: &str = "000000000000";

/// The transport a hello came over: JA4's first character.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// TLS over TCP: `t`.
    Tcp,
    /// QUIC: `q`.
    Quic,
}

/// A hello's fingerprints, computed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprints {
    ja4: String,
    ja3: String,
    ja3_hash: String,
}

impl Fingerprints {
    /// The fingerprints of the ClientHello handshake `message` whose fields
    /// sit where `layout` says (both from [`crate::wire::client_hello`]).
    pub fn compute(message: &[u8], layout: &HelloLayout, transport: Transport) -> Self {
        let hello = Fields::read(message, layout);
        let ja3 = hello.ja3();
        Fingerprints {
            ja4: hello.ja4(transport, false),
            ja3_hash: hex(&md5::compute(ja3.as_bytes()).0),
            ja3,
        }
    }

    /// The JA4 fingerprint, `t13d1516h2_8daaf6152771_e5627efa2ab1`.
    pub fn ja4(&self) -> &str {
        &self.ja4
    }

    /// The JA3 string, `771,4865-4866-…,0-23-…,29-23-24,0`.
    pub fn ja3(&self) -> &str {
        &self.ja3
    }

    /// The JA3 hash: the MD5 of [`Self::ja3`], 32 lowercase hex digits.
    pub fn ja3_hash(&self) -> &str {
        &self.ja3_hash
    }
}

/// JA4's raw form (`ja4_r`): the lists in clear instead of their hashes,
/// for reading what a fingerprint is made of.
pub fn ja4_raw(message: &[u8], layout: &HelloLayout, transport: Transport) -> String {
    Fields::read(message, layout).ja4(transport, true)
}

/// The fields both fingerprints read, GREASE removed, in the client's order.
struct Fields<'a> {
    legacy_version: u16,
    /// Highest non-GREASE `supported_versions` entry, when the extension is
    /// present and lists one.
    supported_version: Option<u16>,
    ciphers: Vec<u16>,
    extensions: Vec<u16>,
    server_name: bool,
    groups: Vec<u16>,
    point_formats: &'a [u8],
    signature_algorithms: Option<Vec<u16>>,
    first_alpn: Option<&'a [u8]>,
}

impl<'a> Fields<'a> {
    fn read(message: &'a [u8], layout: &HelloLayout) -> Self {
        let mut extensions = Vec::with_capacity(24);
        let mut server_name = false;
        let mut supported_version = None;
        // The block's framing was checked by the parser; `get` keeps a
        // layout from another message from panicking all the same.
        let mut block = layout.extensions.of(message);
        while let [a, b, c, d, rest @ ..] = block {
            let kind = u16::from_be_bytes([*a, *b]);
            let len = usize::from(u16::from_be_bytes([*c, *d]));
            let data = rest.get(..len).unwrap_or_default();
            block = rest.get(len..).unwrap_or_default();
            match kind {
                EXTENSION_SERVER_NAME => server_name = true,
                EXTENSION_SUPPORTED_VERSIONS => {
                    // ProtocolVersion versions<2..254>
                    supported_version = data
                        .get(1..)
                        .unwrap_or_default()
                        .chunks_exact(2)
                        .map(|v| u16::from_be_bytes([v[0], v[1]]))
                        .filter(|&v| !grease(v))
                        .max();
                }
                _ => {}
            }
            if !grease(kind) {
                extensions.push(kind);
            }
        }
        let first_alpn = layout.first_alpn.map(|span| span.of(message));
        Fields {
            legacy_version: layout.legacy_version,
            supported_version,
            ciphers: u16s(layout.ciphers.of(message)),
            extensions,
            server_name,
            groups: layout
                .supported_groups
                .map(|span| u16s(span.of(message)))
                .unwrap_or_default(),
            point_formats: layout
                .ec_point_formats
                .map(|span: Span| span.of(message))
                .unwrap_or_default(),
            signature_algorithms: layout
                .signature_algorithms
                .map(|span| u16s(span.of(message))),
            first_alpn,
        }
    }

    fn ja4(&self, transport: Transport, raw: bool) -> String {
        let mut out = String::with_capacity(if raw { 256 } else { 36 });
        out.push(match transport {
            Transport::Tcp => 't',
            Transport::Quic => 'q',
        });
        out.push_str(version_code(
            self.supported_version.unwrap_or(self.legacy_version),
        ));
        out.push(if self.server_name { 'd' } else { 'i' });
        let _ = write!(
            out,
            "{:02}{:02}",
            self.ciphers.len().min(99),
            self.extensions.len().min(99)
        );
        alpn_code(self.first_alpn, &mut out);

        let mut ciphers = self.ciphers.clone();
        ciphers.sort_unstable();
        let ciphers = hex_list(&ciphers);
        let mut extensions: Vec<u16> = self
            .extensions
            .iter()
            .copied()
            .filter(|&kind| kind != EXTENSION_SERVER_NAME && kind != EXTENSION_ALPN)
            .collect();
        extensions.sort_unstable();
        let mut extensions_and_signatures = hex_list(&extensions);
        if let Some(signatures) = &self.signature_algorithms {
            extensions_and_signatures.push('_');
            extensions_and_signatures.push_str(&hex_list(signatures));
        }
        out.push('_');
        if raw {
            out.push_str(&ciphers);
            out.push('_');
            out.push_str(&extensions_and_signatures);
        } else {
            out.push_str(&hash12(&ciphers, self.ciphers.is_empty()));
            out.push('_');
            out.push_str(&hash12(&extensions_and_signatures, extensions.is_empty()));
        }
        out
    }

    fn ja3(&self) -> String {
        let mut out = String::with_capacity(256);
        push_decimal(self.legacy_version, &mut out);
        for list in [&self.ciphers, &self.extensions, &self.groups] {
            out.push(',');
            decimal_list(list.iter().copied(), &mut out);
        }
        out.push(',');
        decimal_list(self.point_formats.iter().map(|&f| u16::from(f)), &mut out);
        out
    }
}

/// RFC 8701: GREASE values are `0x?a?a` with both bytes equal.
fn grease(value: u16) -> bool {
    value & 0x0f0f == 0x0a0a && value >> 8 == value & 0xff
}

/// Two-byte entries, GREASE removed.
fn u16s(bytes: &[u8]) -> Vec<u16> {
    bytes
        .chunks_exact(2)
        .map(|v| u16::from_be_bytes([v[0], v[1]]))
        .filter(|&v| !grease(v))
        .collect()
}

fn version_code(version: u16) -> &'static str {
    match version {
        0x0304 => "13",
        0x0303 => "12",
        0x0302 => "11",
        0x0301 => "10",
        0x0300 => "s3",
        0x0002 | 0x0200 => "s2",
        0xfeff => "d1",
        0xfefd => "d2",
        0xfefc => "d3",
        _ => "00",
    }
}

/// JA4's two ALPN characters.
fn alpn_code(first: Option<&[u8]>, out: &mut String) {
    match first {
        Some([]) | None => out.push_str("00"),
        Some(name) => {
            let (head, tail) = (name[0], name[name.len() - 1]);
            if head.is_ascii_alphanumeric() && tail.is_ascii_alphanumeric() {
                out.push(char::from(head));
                out.push(char::from(tail));
            } else {
                // The first and last digits of the name's hex form.
                let _ = write!(out, "{:x}{:x}", head >> 4, tail & 0x0f);
            }
        }
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// `bytes` as lowercase hex.
fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    out
}

/// `values` as 4-digit lowercase hex joined by `,` (by hand: `write!` per
/// item was most of the fingerprint's cost).
fn hex_list(values: &[u16]) -> String {
    let mut out = String::with_capacity(values.len() * 5);
    for (i, &value) in values.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        for shift in [12, 8, 4, 0] {
            out.push(char::from(HEX[usize::from((value >> shift) & 0xf)]));
        }
    }
    out
}

/// `values` (GREASE left out) in decimal joined by `-`.
fn decimal_list(values: impl Iterator<Item = u16>, out: &mut String) {
    for (i, value) in values.filter(|&v| !grease(v)).enumerate() {
        if i > 0 {
            out.push('-');
        }
        push_decimal(value, out);
    }
}

fn push_decimal(value: u16, out: &mut String) {
    let mut digits = [0u8; 5];
    let mut n = value;
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &digit in &digits[at..] {
        out.push(char::from(digit));
    }
}

/// The first 12 hex digits of the SHA-256 of `text`, or twelve zeros for
/// an empty list.
fn hash12(text: &str, empty: bool) -> String {
    if empty {
        return EMPTY_HASH.to_string();
    }
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, text.as_bytes());
    let mut out = String::with_capacity(12);
    for byte in &digest.as_ref()[..6] {
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    out
}

/// A configured JA4 pattern: an exact fingerprint, or a prefix followed by
/// `*` (`t13d*`, `t13d1516h2_8daaf6152771_*`). Compared byte for byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ja4Pattern {
    /// Matches this fingerprint only.
    Exact(String),
    /// Matches every fingerprint that starts with this.
    Prefix(String),
}

impl Ja4Pattern {
    /// Reads `text`: `*` only as the last character; only the characters a
    /// JA4 holds (ASCII letters, digits, `_`).
    pub fn parse(text: &str) -> Result<Ja4Pattern, String> {
        let (body, prefix) = match text.strip_suffix('*') {
            Some(body) => (body, true),
            None => (text, false),
        };
        if body.is_empty() && !prefix {
            return Err("an empty JA4 pattern matches nothing".into());
        }
        if let Some(bad) = body
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '_'))
        {
            return Err(format!(
                "{text:?}: a JA4 holds only letters, digits and `_` ({bad:?}); `*` may only end a prefix"
            ));
        }
        if body.len() > 36 {
            return Err(format!("{text:?} is longer than a JA4 (36 characters)"));
        }
        Ok(if prefix {
            Ja4Pattern::Prefix(body.to_string())
        } else {
            Ja4Pattern::Exact(body.to_string())
        })
    }

    /// Whether `ja4` matches.
    pub fn matches(&self, ja4: &str) -> bool {
        match self {
            Ja4Pattern::Exact(exact) => ja4 == exact,
            Ja4Pattern::Prefix(prefix) => ja4.starts_with(prefix.as_str()),
        }
    }
}

impl std::fmt::Display for Ja4Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ja4Pattern::Exact(exact) => f.write_str(exact),
            Ja4Pattern::Prefix(prefix) => write!(f, "{prefix}*"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::client_hello::{decode_handshake_with_layout, parse};

    /// A ClientHello handshake message from its parts.
    fn message(legacy: u16, ciphers: &[u16], extensions: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&legacy.to_be_bytes());
        body.extend_from_slice(&[7; 32]);
        body.push(0);
        body.extend_from_slice(&((ciphers.len() * 2) as u16).to_be_bytes());
        for c in ciphers {
            body.extend_from_slice(&c.to_be_bytes());
        }
        body.extend_from_slice(&[1, 0]);
        let mut block = Vec::new();
        for (kind, data) in extensions {
            block.extend_from_slice(&kind.to_be_bytes());
            block.extend_from_slice(&(data.len() as u16).to_be_bytes());
            block.extend_from_slice(data);
        }
        if !extensions.is_empty() {
            body.extend_from_slice(&(block.len() as u16).to_be_bytes());
            body.extend_from_slice(&block);
        }
        let mut out = vec![1, 0, (body.len() >> 8) as u8, body.len() as u8];
        out.extend_from_slice(&body);
        out
    }

    fn list16(values: &[u16]) -> Vec<u8> {
        let mut out = ((values.len() * 2) as u16).to_be_bytes().to_vec();
        for v in values {
            out.extend_from_slice(&v.to_be_bytes());
        }
        out
    }

    fn alpn(names: &[&[u8]]) -> Vec<u8> {
        let mut list = Vec::new();
        for name in names {
            list.push(name.len() as u8);
            list.extend_from_slice(name);
        }
        let mut out = (list.len() as u16).to_be_bytes().to_vec();
        out.extend_from_slice(&list);
        out
    }

    fn sni(name: &str) -> Vec<u8> {
        let mut out = ((name.len() + 3) as u16).to_be_bytes().to_vec();
        out.push(0);
        out.extend_from_slice(&(name.len() as u16).to_be_bytes());
        out.extend_from_slice(name.as_bytes());
        out
    }

    fn fingerprints(message: &[u8], transport: Transport) -> (Fingerprints, String) {
        let (_, layout) = decode_handshake_with_layout(message).unwrap();
        (
            Fingerprints::compute(message, &layout, transport),
            ja4_raw(message, &layout, transport),
        )
    }

    /// The hello behind the specification's own example (JA4.md): its
    /// fifteen ciphers and the extensions and signature algorithms of its
    /// `ja4_r`, with SNI and ALPN (`h2`), in a Chrome-like order with GREASE
    /// values in every list, which must change nothing.
    fn specification_hello(grease: bool) -> Vec<u8> {
        let mut ciphers = vec![
            0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8, 0xc013, 0xc014,
            0x009c, 0x009d, 0x002f, 0x0035,
        ];
        let mut versions: Vec<u16> = vec![0x0304, 0x0303];
        let mut groups = vec![0x001d, 0x0017, 0x0018];
        if grease {
            ciphers.insert(0, 0x5a5a);
            versions.insert(0, 0x7a7a);
            groups.insert(0, 0x2a2a);
        }
        let mut versions_data = vec![(versions.len() * 2) as u8];
        for v in &versions {
            versions_data.extend_from_slice(&v.to_be_bytes());
        }
        let mut extensions = vec![
            (0x0000, sni("example.com")),
            (0x0017, vec![]),
            (0xff01, vec![0]),
            (0x000a, list16(&groups)),
            (0x000b, vec![1, 0]),
            (0x0023, vec![]),
            (0x0010, alpn(&[b"h2", b"http/1.1"])),
            (0x0005, vec![1, 0, 0, 0, 0]),
            (
                0x000d,
                list16(&[
                    0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806, 0x0601,
                ]),
            ),
            (0x0012, vec![]),
            (0x0033, {
                let mut share = vec![0, 36, 0, 0x1d, 0, 32];
                share.extend_from_slice(&[9; 32]);
                share
            }),
            (0x002d, vec![1, 1]),
            (0x002b, versions_data),
            (0x001b, vec![2, 0, 2]),
            (0x4469, vec![0, 3, 2, b'h', b'2']),
            (0x0015, vec![0; 8]),
        ];
        if grease {
            extensions.insert(0, (0x0a0a, vec![]));
            extensions.push((0xfafa, vec![0]));
        }
        message(0x0303, &ciphers, &extensions)
    }

    #[test]
    fn the_specifications_example_fingerprint() {
        // JA4.md: t13d1516h2_8daaf6152771_e5627efa2ab1, and its raw lists.
        for grease in [false, true] {
            let hello = specification_hello(grease);
            let (prints, raw) = fingerprints(&hello, Transport::Tcp);
            assert_eq!(
                prints.ja4(),
                "t13d1516h2_8daaf6152771_e5627efa2ab1",
                "grease {grease}"
            );
            assert_eq!(
                raw,
                "t13d1516h2_002f,0035,009c,009d,1301,1302,1303,c013,c014,c02b,c02c,c02f,c030,\
                 cca8,cca9_0005,000a,000b,000d,0012,0015,0017,001b,0023,002b,002d,0033,4469,\
                 ff01_0403,0804,0401,0503,0805,0501,0806,0601"
            );
        }
    }

    #[test]
    fn quic_starts_with_q() {
        let (prints, _) = fingerprints(&specification_hello(true), Transport::Quic);
        assert_eq!(prints.ja4(), "q13d1516h2_8daaf6152771_e5627efa2ab1");
    }

    #[test]
    fn ja3_string_and_hash() {
        // Salesforce's JA3 README example: the MD5 of a known string.
        assert_eq!(
            format!(
                "{:x}",
                md5::compute(
                    b"769,47-53-5-10-49161-49162-49171-49172-50-56-19-4,0-10-11,23-24-25,0"
                )
            ),
            "ada70206e40642a3e4461f35503241d5"
        );
        let hello = specification_hello(true);
        let (prints, _) = fingerprints(&hello, Transport::Tcp);
        assert_eq!(
            prints.ja3(),
            "771,4865-4866-4867-49195-49199-49196-49200-52393-52392-49171-49172-156-157-47-53,\
             0-23-65281-10-11-35-16-5-13-18-51-45-43-27-17513-21,29-23-24,0"
        );
        assert_eq!(
            prints.ja3_hash(),
            format!("{:x}", md5::compute(prints.ja3().as_bytes()))
        );
        assert_eq!(prints.ja3_hash().len(), 32);
    }

    #[test]
    fn no_sni_no_alpn_tls12_and_empty_lists() {
        let hello = message(0x0303, &[0x0a0a, 0xc02f], &[]);
        let (prints, raw) = fingerprints(&hello, Transport::Tcp);
        assert_eq!(raw, "t12i010000_c02f_");
        assert_eq!(
            prints.ja4(),
            format!("t12i010000_{}_000000000000", &sha256_hex("c02f")[..12])
        );
        assert_eq!(prints.ja3(), "771,49199,,,");
        // Only SNI and ALPN: the extension list is empty once they are out.
        let hello = message(
            0x0301,
            &[0x002f],
            &[(0x0000, sni("a.example")), (0x0010, alpn(&[b"http/1.1"]))],
        );
        let (prints, _) = fingerprints(&hello, Transport::Tcp);
        assert!(prints.ja4().starts_with("t10d0102h1_"), "{}", prints.ja4());
        assert!(prints.ja4().ends_with("_000000000000"), "{}", prints.ja4());
    }

    fn sha256_hex(text: &str) -> String {
        let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, text.as_bytes());
        digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn alpn_characters_follow_the_specification() {
        // JA4.md's ALPN rules: first and last character, hex digits when
        // either is not alphanumeric, a one-character name twice.
        for (name, code) in [
            (&b"h2"[..], "h2"),
            (b"http/1.1", "h1"),
            (b"h3", "h3"),
            (b"x", "xx"),
            (b"acme-tls/1", "a1"),
            (&[0xab][..], "ab"),
            (&[0xab, 0xcd][..], "ad"),
            (&[0x30, 0xab][..], "3b"),
            (b"/", "2f"),
            (b"h2/", "6f"),
        ] {
            let mut out = String::new();
            alpn_code(Some(name), &mut out);
            assert_eq!(out, code, "{name:?}");
        }
        let mut out = String::new();
        alpn_code(None, &mut out);
        assert_eq!(out, "00");
    }

    #[test]
    fn counts_stop_at_99_and_grease_is_not_counted() {
        let ciphers: Vec<u16> = (1..=120).chain([0x1a1a, 0x2a2a]).collect();
        let hello = message(0x0303, &ciphers, &[]);
        let (prints, _) = fingerprints(&hello, Transport::Tcp);
        assert!(prints.ja4().starts_with("t12i9900"), "{}", prints.ja4());
        assert!(grease(0x0a0a) && grease(0xfafa) && !grease(0x0a1a) && !grease(0x1301));
    }

    #[test]
    fn versions_map_to_the_specifications_codes() {
        for (version, code) in [
            (0x0304, "13"),
            (0x0303, "12"),
            (0x0302, "11"),
            (0x0301, "10"),
            (0x0300, "s3"),
            (0xfefd, "d2"),
            (0x7f1c, "00"),
        ] {
            assert_eq!(version_code(version), code);
        }
    }

    #[test]
    fn a_hello_over_two_records_gives_the_same_prints() {
        let message = specification_hello(true);
        let mut stream = Vec::new();
        for chunk in message.chunks(100) {
            stream.extend_from_slice(&[22, 3, 1, 0, chunk.len() as u8]);
            stream.extend_from_slice(chunk);
        }
        let mut reader = crate::wire::client_hello::Reassembler::new(1 << 16);
        assert!(reader.hello_message(&stream).is_none());
        reader.feed(&stream).unwrap();
        let (held, layout) = reader.hello_message(&stream).unwrap();
        assert_eq!(held, &message[..]);
        assert_eq!(
            Fingerprints::compute(held, &layout, Transport::Tcp).ja4(),
            "t13d1516h2_8daaf6152771_e5627efa2ab1"
        );
        // In one record, read in place.
        let mut one = vec![22, 3, 1];
        one.extend_from_slice(&(message.len() as u16).to_be_bytes());
        one.extend_from_slice(&message);
        assert!(parse(&one, 1 << 16).is_ok());
    }

    #[test]
    fn patterns_are_exact_or_a_prefix() {
        let exact = Ja4Pattern::parse("t13d1516h2_8daaf6152771_e5627efa2ab1").unwrap();
        assert!(exact.matches("t13d1516h2_8daaf6152771_e5627efa2ab1"));
        assert!(!exact.matches("t13d1516h2_8daaf6152771_e5627efa2ab2"));
        let prefix = Ja4Pattern::parse("t13d*").unwrap();
        assert!(prefix.matches("t13d1516h2_8daaf6152771_e5627efa2ab1"));
        assert!(!prefix.matches("q13d1516h2_8daaf6152771_e5627efa2ab1"));
        assert_eq!(prefix.to_string(), "t13d*");
        assert!(Ja4Pattern::parse("*").unwrap().matches("anything"));
        assert!(Ja4Pattern::parse("t1*3").is_err());
        assert!(Ja4Pattern::parse("").is_err());
        assert!(Ja4Pattern::parse("t13 d").is_err());
    }
}
