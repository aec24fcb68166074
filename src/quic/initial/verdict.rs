//! What a flow's datagrams so far give instead of a ClientHello: the
//! [`Verdict`] every stage of the [`Parser`](super::Parser) answers with,
//! and its name as the close reasons spell it.
//!
//! Not here: when each verdict is given (the parser's header lists them)
//! nor what the listener does with it (its flows do).

use crate::wire::client_hello::Inspect;

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
