//! snirelay: a layer-4 relay that routes TLS connections by their SNI
//! without terminating TLS.
//!
//! The source is laid out by job, one folder per layer (docs/design.md,
//! "Structure"); imports run down the list, never up:
//!
//! - [`wire`]: parsers and wire formats without I/O: the ClientHello, server
//!   names and the compiled allowlist matcher, CIDR notation, the PROXY
//!   protocol's format.
//! - [`config`]: the TOML file turned once into an immutable, validated
//!   snapshot (and back, for `/config`).
//! - the leaves every layer names, at the root: [`addr`] (measured and
//!   claimed client addresses), `close_reason` (why a connection ended, and
//!   its one table), [`drain`] (drain signals), `metrics`, `logging`,
//!   [`sockopt`] (every socket option; its [`sockopt::sys`] is the one file
//!   that may hold `unsafe`) and `system_roots`.
//! - [`admission`]: who may connect: allow and deny lists, per-source
//!   limits and rates, built once per snapshot.
//! - [`proxy`]: the PROXY protocol's two stages, inbound (preface) and
//!   outbound (announce); `pump`: the byte pump of a TCP connection.
//! - [`backend`]: backends at run time: address sets, health, balancing
//!   policies, cluster lookups.
//! - [`flow`]: the stages a TCP connection and a QUIC flow share: route,
//!   close, the registry of open connections, a listener's generation.
//! - [`tcp`]: a TCP connection's own stages, read top to bottom in
//!   [`crate::tcp::connection`]: accept loop → preface → inspect → route → dial →
//!   announce → pump → close. [`quic`]: the same for a QUIC flow.
//! - [`admin`]: the admin listener (metrics, status page, control API).
//! - `run`: the process: server, listeners, binding, reload, takeover,
//!   signals, sd_notify. [`cli`]: the operator's other commands (`check`,
//!   `probe`, `ctl`, `import-haproxy`).
//!
//! `tests/it/module_graph.rs` reads the source and fails when two modules (or
//! two submodules of a folder) import each other, directly or through
//! others, or when a module imports one of a higher layer.
//!
//! Syscalls live in two places: socket options and descriptor handling in
//! [`sockopt`], splice(2) and its pipe pool in [`crate::pump::splice`]. `unsafe`
//! is denied crate-wide; [`sockopt::sys`] alone allows it, per function, each
//! block with its `SAFETY` comment ([`crate::pump::splice`] needs none: it uses
//! nix's safe wrappers).

#![deny(unsafe_code)]
// A doc comment names the module it sends a reader to as an intra-doc link,
// private ones included, so that `cargo doc -D warnings` fails when one is
// renamed or gone (broken links stay denied); in the public documentation a
// link to a private item renders as plain code.
#![allow(rustdoc::private_intra_doc_links)]
pub mod addr;
pub mod admin;
pub mod admission;
pub mod backend;
pub mod cli;
mod close_reason;
pub mod config;
pub mod drain;
pub mod flow;
mod logging;
pub mod metrics;
pub mod proxy;
mod pump;
pub mod quic;
mod run;
pub mod sockopt;
mod system_roots;
pub mod tcp;
pub mod wire;

/// The version this build reports (`snirelay --version`, the
/// `snirelay_build_info` metric, the status page): `SNIRELAY_VERSION` when it
/// was set at build time (a packager's or the field test's second build, so
/// two builds of one commit can tell themselves apart), else the crate's
/// version from Cargo.toml. Cargo rebuilds when that variable changes.
pub(crate) const VERSION: &str = match option_env!("SNIRELAY_VERSION") {
    Some(version) => version,
    None => env!("CARGO_PKG_VERSION"),
};
