//! The stages a TCP connection and a QUIC flow share (docs/design.md, "A
//! connection's life"): routing a ClientHello to a route and backend, the
//! close record with its one log line and metrics, the registry of open
//! connections, and the listener's generation each accept reads.
//!
//! Not here: the stages only one transport has (`tcp`, `quic`), what a
//! reason is (`close_reason`, a leaf every layer names), or the admission
//! limits (`admission`, which the configuration's settings build).

pub mod access;
pub(crate) mod carry_out;
pub(crate) mod decision;
pub(crate) mod gate;
pub(crate) mod generation;
pub mod registry;
pub(crate) mod route;
