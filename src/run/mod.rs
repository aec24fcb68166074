//! The process (docs/design.md, "Generations, reload, drain, stop"): the
//! server and the operator's intents, the set of running listeners, binding
//! and inherited sockets, what a reload changes, the binary upgrade's socket
//! hand-over, signals and sd_notify.
//!
//! Not here: what a connection does once accepted (`tcp`, `quic`, `flow`).

pub(crate) mod bind;
pub(crate) mod descriptors;
pub(crate) mod listener_set;
pub(crate) mod notify;
pub(crate) mod reload;
pub(crate) mod server;
pub(crate) mod signals;
pub(crate) mod takeover;
