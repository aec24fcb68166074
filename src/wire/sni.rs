//! Server names: the [`Sni`] a client asked for, and the [`Pattern`]s an
//! allowlist is written in.
//!
//! Both go through one normaliser so that what the config says and what a
//! client sends are compared in the same form: ASCII-lowercased, one trailing
//! dot removed (a pattern's; a client's name that ends in a dot is refused,
//! as RFC 6066 §3 has it), and validated as a DNS host name (labels of 1–63 bytes of
//! letters, digits, `-` or `_`; at most 253 bytes; not an IP literal, which
//! RFC 6066 forbids in SNI). Internationalised names must arrive as punycode
//! (`xn--…`), as every TLS client sends them; raw UTF-8 is refused.
//!
//! A pattern is an exact name, `*.suffix` (every name below the suffix),
//! or `*` alone: the default route, for a valid name no other pattern
//! matches. Any other use of `*` (`*.`, `*x`, `a.*.b`) is refused.
//!
//! This module does not match names against routes (see `matcher`) and does
//! no I/O. Normalising allocates one `String` per client name, because the
//! name is logged with the connection anyway (the route decision hands that
//! same allocation to the log record, `Sni::into_boxed_str`). It checks
//! and lowercases in one pass over the bytes: splitting into labels and
//! searching each cost 1,102 instructions for `www.example.com`, the one
//! pass 595 (callgrind).

use std::fmt;

/// Longest DNS name, in bytes, without the trailing dot (RFC 1035 §2.3.4).
pub(crate) const MAX_NAME_BYTES: usize = 253;
/// Longest DNS label, in bytes.
pub(crate) const MAX_LABEL_BYTES: usize = 63;

/// Why a server name or pattern is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// The name or pattern is empty.
    #[error("empty name")]
    Empty,
    /// Longer than `MAX_NAME_BYTES` (253) bytes, without the trailing dot.
    #[error("name is {0} bytes long; at most {MAX_NAME_BYTES} are allowed")]
    TooLong(usize),
    /// Two dots in a row, or a leading dot.
    #[error("empty label (two dots in a row, or a leading dot)")]
    EmptyLabel,
    /// A label longer than `MAX_LABEL_BYTES` (63) bytes.
    #[error("label `{0}` is longer than {MAX_LABEL_BYTES} bytes")]
    LabelTooLong(String),
    /// A character outside letters, digits, `-` and `_` (or `*` where allowed).
    #[error("character {0:?} is not allowed in a host name (use punycode for non-ASCII names)")]
    BadChar(char),
    /// An IPv4 or IPv6 address literal, which SNI may not carry (RFC 6066 §3).
    #[error("an IP address is not a server name")]
    IpLiteral,
    /// A client's name that ends in a dot: RFC 6066 §3's HostName carries
    /// none (patterns in the configuration may have one).
    #[error("a server name ends in a dot, which RFC 6066 forbids")]
    TrailingDot,
    /// `*.` with no domain after it.
    #[error("`*.` names no domain: write `*.domain`, or `*` alone for the default route")]
    BareWildcard,
    /// A `*` anywhere but alone as the leftmost label.
    #[error("`*` may only stand alone as the leftmost label, as in `*.example.com`")]
    MisplacedWildcard,
}

/// A server name as a client sent it in SNI, normalised and validated.
///
/// Invariant: lowercase ASCII, no trailing dot (RFC 6066 §3: a HostName
/// carries none, so a name that ends in one is refused), a valid host
/// name. Built only by [`Sni::parse`], so holding one proves the checks
/// ran. It also remembers how the client spelled it where a route may
/// care ([`Sni::lower_case_from`], [`Sni::ldh`]): two bytes more.
#[derive(Debug, Clone)]
pub struct Sni {
    name: String,
    /// One past the last capital letter the client wrote (0: none).
    capitals_end: u8,
    /// Whether a label holds `_`.
    underscore: bool,
}

impl PartialEq for Sni {
    fn eq(&self, other: &Sni) -> bool {
        self.name == other.name
    }
}

impl Eq for Sni {}

impl std::hash::Hash for Sni {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl Sni {
    /// Normalises and validates the raw bytes of an SNI `host_name` entry.
    pub fn parse(raw: &[u8]) -> Result<Sni, NameError> {
        let text = std::str::from_utf8(raw).map_err(|_| {
            let bad = raw.iter().find(|b| !b.is_ascii()).copied().unwrap_or(0);
            NameError::BadChar(char::from(bad))
        })?;
        if text.ends_with('.') && text.len() > 1 {
            return Err(NameError::TrailingDot);
        }
        let name = normalise_host(text)?;
        // At most 253 bytes: the position fits a u8.
        let capitals_end = text
            .bytes()
            .rposition(|b| b.is_ascii_uppercase())
            .map_or(0, |at| at as u8 + 1);
        let underscore = text.contains('_');
        Ok(Sni {
            name,
            capitals_end,
            underscore,
        })
    }

    /// A name an operator or a peer wrote (a configuration value, a pushed
    /// name list, a PROXY AUTHORITY): as [`Sni::parse`], but one trailing
    /// dot, the DNS root, is accepted and removed. Only a client's
    /// ClientHello is held to RFC 6066's HostName.
    pub fn parse_written(raw: &[u8]) -> Result<Sni, NameError> {
        let raw = match raw.strip_suffix(b".") {
            Some(name) if !name.is_empty() => name,
            _ => raw,
        };
        Sni::parse(raw)
    }

    /// The name, normalised (lowercase, no trailing dot).
    pub fn as_str(&self) -> &str {
        &self.name
    }

    /// Whether the client wrote the last `len` bytes of the name in lower
    /// case (`len` = the name's length: all of it). A case-sensitive
    /// route's pattern names those bytes.
    pub fn lower_case_from(&self, len: usize) -> bool {
        usize::from(self.capitals_end) + len <= self.name.len()
    }

    /// Whether every label is letters, digits and hyphens (no `_`).
    pub fn ldh(&self) -> bool {
        !self.underscore
    }

    /// The name as a boxed `str`, without a copy (the normaliser allocates
    /// exactly the name's length).
    pub(crate) fn into_boxed_str(self) -> Box<str> {
        self.name.into_boxed_str()
    }
}

impl fmt::Display for Sni {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// One allowlist entry: an exact name, or every name below a domain.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Pattern {
    /// `example.com`: that name only.
    Exact(String),
    /// `*.example.com`, stored as the suffix `example.com`: every name below
    /// it at any depth, never the suffix itself.
    Below(String),
    /// `*` alone: the default route, for any valid name no exact or
    /// wildcard pattern of the listener matches.
    Any,
}

impl Pattern {
    /// Parses a config pattern: `example.com`, `*.example.com` or `*`.
    pub fn parse(text: &str) -> Result<Pattern, NameError> {
        if text == "*" {
            return Ok(Pattern::Any);
        }
        if text == "*." {
            return Err(NameError::BareWildcard);
        }
        if let Some(suffix) = text.strip_prefix("*.") {
            if suffix.contains('*') {
                return Err(NameError::MisplacedWildcard);
            }
            return normalise_host(suffix).map(Pattern::Below);
        }
        if text.contains('*') {
            return Err(NameError::MisplacedWildcard);
        }
        normalise_host(text).map(Pattern::Exact)
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.as_pattern_ref().fmt(f)
    }
}

impl Pattern {
    /// The pattern, borrowed: what an allowlist stores once (see
    /// `matcher::NameIndex`) and hands back.
    pub fn as_pattern_ref(&self) -> PatternRef<'_> {
        match self {
            Pattern::Exact(name) => PatternRef::Exact(name),
            Pattern::Below(suffix) => PatternRef::Below(suffix),
            Pattern::Any => PatternRef::Any,
        }
    }
}

/// A [`Pattern`] whose name is borrowed (normalised and valid, as a
/// `Pattern`'s is): how an allowlist that holds its names in one string
/// lends them out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PatternRef<'a> {
    /// `example.com`.
    Exact(&'a str),
    /// `*.example.com`, as its suffix `example.com`.
    Below(&'a str),
    /// `*`.
    Any,
}

impl<'a> PatternRef<'a> {
    /// The pattern `Display` wrote as `text` (already normalised: this
    /// does not validate).
    pub(crate) fn from_written(text: &'a str) -> PatternRef<'a> {
        if text == "*" {
            PatternRef::Any
        } else if let Some(suffix) = text.strip_prefix("*.") {
            PatternRef::Below(suffix)
        } else {
            PatternRef::Exact(text)
        }
    }

    /// An owned copy.
    pub fn to_pattern(self) -> Pattern {
        match self {
            PatternRef::Exact(name) => Pattern::Exact(name.to_owned()),
            PatternRef::Below(suffix) => Pattern::Below(suffix.to_owned()),
            PatternRef::Any => Pattern::Any,
        }
    }
}

impl PartialEq<Pattern> for PatternRef<'_> {
    fn eq(&self, other: &Pattern) -> bool {
        *self == other.as_pattern_ref()
    }
}

impl fmt::Display for PatternRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PatternRef::Exact(name) => f.write_str(name),
            PatternRef::Below(suffix) => write!(f, "*.{suffix}"),
            PatternRef::Any => f.write_str("*"),
        }
    }
}

/// Lowercases, strips one trailing dot and validates a host name.
fn normalise_host(text: &str) -> Result<String, NameError> {
    let name = text.strip_suffix('.').unwrap_or(text);
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(NameError::TooLong(name.len()));
    }
    // One pass over the bytes, checking and lowercasing together: this runs
    // for every connection's name, where splitting into labels and
    // searching each cost as much as the rest of the route decision.
    let mut lower = String::with_capacity(name.len());
    let mut label_start = 0;
    let mut last_label_digits = true;
    for (at, byte) in name.bytes().enumerate() {
        match byte {
            b'.' => {
                let label = &name[label_start..at];
                check_label(label)?;
                label_start = at + 1;
                last_label_digits = true;
            }
            b'a'..=b'z' | b'A'..=b'Z' | b'-' | b'_' => last_label_digits = false,
            b'0'..=b'9' => {}
            _ => {
                // A label is judged on its length first, as a whole.
                let label_end = name[at..].find('.').map_or(name.len(), |dot| at + dot);
                check_label(&name[label_start..label_end])?;
                // The whole character, for the error (non-ASCII names must
                // come as punycode).
                let bad = name[at..].chars().next().unwrap_or(char::from(byte));
                return Err(NameError::BadChar(bad));
            }
        }
        lower.push(char::from(byte.to_ascii_lowercase()));
    }
    check_label(&name[label_start..])?;
    // No top-level domain is all digits, so `10.0.0.1` or `1.2.3` is an
    // address, not a name.
    if last_label_digits {
        return Err(NameError::IpLiteral);
    }
    Ok(lower)
}

/// A label's length: 1 to 63 bytes (its characters are checked by the
/// caller).
fn check_label(label: &str) -> Result<(), NameError> {
    if label.is_empty() {
        return Err(NameError::EmptyLabel);
    }
    if label.len() > MAX_LABEL_BYTES {
        return Err(NameError::LabelTooLong(label.to_owned()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::wire::sni::*;

    /// The normaliser as first written (split into labels, check each,
    /// then lowercase): the one-pass version must answer exactly as it did.
    fn normalise_host_by_labels(text: &str) -> Result<String, NameError> {
        let name = text.strip_suffix('.').unwrap_or(text);
        if name.is_empty() {
            return Err(NameError::Empty);
        }
        if name.len() > MAX_NAME_BYTES {
            return Err(NameError::TooLong(name.len()));
        }
        for label in name.split('.') {
            if label.is_empty() {
                return Err(NameError::EmptyLabel);
            }
            if label.len() > MAX_LABEL_BYTES {
                return Err(NameError::LabelTooLong(label.to_owned()));
            }
            if let Some(bad) = label
                .chars()
                .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
            {
                return Err(NameError::BadChar(bad));
            }
        }
        let last = name.rsplit('.').next().unwrap_or(name);
        if name.parse::<std::net::Ipv4Addr>().is_ok() || last.bytes().all(|b| b.is_ascii_digit()) {
            return Err(NameError::IpLiteral);
        }
        Ok(name.to_ascii_lowercase())
    }

    proptest::proptest! {
        #[test]
        fn the_one_pass_normaliser_answers_as_the_label_by_label_one(
            text in "([a-zA-Z0-9_-]{0,70}|[.]|[ *ü]|[0-9]{1,3}){0,12}[.]?",
        ) {
            proptest::prop_assert_eq!(normalise_host(&text), normalise_host_by_labels(&text));
        }
    }

    #[test]
    fn sni_is_lowercased_and_a_trailing_dot_is_refused() {
        assert_eq!(
            Sni::parse(b"WWW.Example.COM").unwrap().as_str(),
            "www.example.com"
        );
        assert_eq!(
            Sni::parse(b"www.example.com.").unwrap_err(),
            NameError::TrailingDot
        );
        assert_eq!(
            Sni::parse(b"a.example.com..").unwrap_err(),
            NameError::TrailingDot
        );
        // Patterns keep taking one.
        assert_eq!(
            Pattern::parse("example.com.").unwrap(),
            Pattern::Exact("example.com".into())
        );
    }

    #[test]
    fn sni_remembers_where_the_client_wrote_capitals_and_underscores() {
        let sni = Sni::parse(b"A.example.com").unwrap();
        assert!(sni.lower_case_from("example.com".len()));
        assert!(!sni.lower_case_from(sni.as_str().len()));
        let sni = Sni::parse(b"a.Example.com").unwrap();
        assert!(!sni.lower_case_from("example.com".len()));
        assert!(sni.lower_case_from("xample.com".len()));
        assert!(Sni::parse(b"www.example.com").unwrap().lower_case_from(15));
        assert!(Sni::parse(b"www.example.com").unwrap().ldh());
        assert!(!Sni::parse(b"a_b.example.com").unwrap().ldh());
    }

    #[test]
    fn bad_names_are_refused_with_their_reason() {
        assert_eq!(Sni::parse(b"").unwrap_err(), NameError::Empty);
        assert_eq!(Sni::parse(b".").unwrap_err(), NameError::Empty);
        assert_eq!(Sni::parse(b"10.0.0.1").unwrap_err(), NameError::IpLiteral);
        assert_eq!(Sni::parse(b"a b.com").unwrap_err(), NameError::BadChar(' '));
        assert_eq!(
            Sni::parse("bücher.de".as_bytes()).unwrap_err(),
            NameError::BadChar('ü')
        );
        assert!(matches!(
            Sni::parse(&[b'a'; 64]).unwrap_err(),
            NameError::LabelTooLong(_)
        ));
        let long = [
            "a".repeat(63),
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(63),
        ]
        .join(".");
        assert_eq!(
            Sni::parse(long.as_bytes()).unwrap_err(),
            NameError::TooLong(255)
        );
        assert_eq!(
            Sni::parse(&[0xff, b'a']).unwrap_err(),
            NameError::BadChar('\u{ff}')
        );
    }

    #[test]
    fn patterns_parse_exact_and_below() {
        assert_eq!(
            Pattern::parse("Example.com").unwrap(),
            Pattern::Exact("example.com".into())
        );
        assert_eq!(
            Pattern::parse("*.example.com").unwrap(),
            Pattern::Below("example.com".into())
        );
        assert_eq!(Pattern::parse("*").unwrap(), Pattern::Any);
        assert_eq!(Pattern::parse("*").unwrap().to_string(), "*");
        assert_eq!(Pattern::parse("*.").unwrap_err(), NameError::BareWildcard);
        assert_eq!(
            Pattern::parse("**").unwrap_err(),
            NameError::MisplacedWildcard
        );
        assert_eq!(
            Pattern::parse("*x").unwrap_err(),
            NameError::MisplacedWildcard
        );
        assert_eq!(
            Pattern::parse("a.*.com").unwrap_err(),
            NameError::MisplacedWildcard
        );
        assert_eq!(
            Pattern::parse("*a.com").unwrap_err(),
            NameError::MisplacedWildcard
        );
        assert_eq!(
            Pattern::parse("*.*.com").unwrap_err(),
            NameError::MisplacedWildcard
        );
        assert_eq!(Pattern::parse("a..com").unwrap_err(), NameError::EmptyLabel);
        assert_eq!(
            Pattern::parse("192.0.2.1").unwrap_err(),
            NameError::IpLiteral
        );
        assert_eq!(
            Pattern::parse("*.xn--bcher-kva.de").unwrap().to_string(),
            "*.xn--bcher-kva.de"
        );
    }
}
