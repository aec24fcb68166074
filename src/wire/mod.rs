//! Parsers and wire formats without I/O: pure functions over `&[u8]` or
//! `&str` (and the allowlist matcher compiled from server-name patterns),
//! each fuzzed or golden-tested, none reading a socket or the
//! configuration (docs/design.md, "Structure").
//!
//! Not here: QUIC's Initial packets, keys and connection IDs, which stay
//! with the rest of QUIC in `quic` (they are QUIC's own, and nothing else
//! reads them).

pub mod alert;
pub mod cidr;
pub mod client_hello;
pub mod fingerprint;
pub mod matcher;
pub mod proxy;
pub mod proxy_tlv;
pub mod sni;
