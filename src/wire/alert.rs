//! The TLS alert descriptions (RFC 8446 §6.2) the relay refuses hellos
//! with, as the wire carries them: numbers both transports' encoders
//! write. A refusal's description is chosen once, for both transports
//! ([`crate::flow::route::NoRoute::alert`]); TCP sends it as an alert
//! record ([`crate::tcp::refuse`]), QUIC as a CONNECTION_CLOSE's
//! `CRYPTO_ERROR` ([`crate::quic::refusal`]).
//!
//! Not here: deciding to refuse, which description a refusal gets, or
//! encoding the alert.

/// `handshake_failure`, for refusals that name no cause (ECH, JA4).
pub const HANDSHAKE_FAILURE: u8 = 40;
/// `protocol_version`: the hello offers no version as new as
/// `min_tls_version`.
pub const PROTOCOL_VERSION: u8 = 70;
/// `unrecognized_name` (RFC 6066 §3): no route serves the name.
pub const UNRECOGNIZED_NAME: u8 = 112;
