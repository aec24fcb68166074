//! The PROXY protocol (v2 and v1), split by role:
//!
//! - [`crate::wire::proxy`]: the format itself: signatures, the header parser, TLV
//!   reading, the claim check and our hop-count value. Pure, no I/O.
//! - [`inbound`]: the preface stage: reading a header from a trusted peer
//!   relay off the socket, under the ClientHello deadline, and the
//!   listener's `[listener.proxy_protocol]` settings.
//! - [`outbound`]: the announce stage: the header a backend receives,
//!   encoded with `ppp`, and the backend's `proxy_protocol` setting.
//!
//! `inbound → wire ← outbound`: the two stages share the format and never
//! each other.

pub mod inbound;
pub mod outbound;
