//! snirelay: a layer-4 relay that routes TLS connections by their SNI
//! without terminating TLS.
//!
//! A connection's life, one module per stage (see docs/design.md): `accept` →
//! [`admit`] (the one admission gate: per-source limits, at accept and on a
//! trusted peer's claim) → preface ([`proxy::inbound`], PROXY protocol in)
//! → [`inspect`] (over the pure [`client_hello`] parser and its incremental
//! reassembler) → `route` (the generation's route table, over [`sni`] and
//! [`matcher`]) → `connect` (over the run-time state of [`backend`]:
//! address sets, health, the selection [`backend::policy`]) → announce
//! ([`proxy::outbound`], PROXY protocol out) → the byte pump ([`pump`]: the
//! [`pump::relay`] future over the [`pump::copy`] and [`pump::splice`]
//! paths) → [`close`] (the record, its one log line and metrics; the
//! reasons' table is the leaf [`reason`]), strung
//! together in `conn`. [`proxy::wire`] is the PROXY protocol's format,
//! shared by both directions. [`quic`] reads the ClientHello of a QUIC
//! flow from its Initial packets (the `quic` listener's inspect stage) and
//! hands it to the same [`client_hello`] decoder.
//!
//! [`config`] turns the TOML file into an immutable, validated snapshot
//! (and back: [`config::effective`]). [`server`] runs the operator's
//! intents; `bind` opens and inherits listening sockets; `listeners` runs
//! each listener as one `generation` per reload (settings, route table,
//! admission, backends: one value, one swap) with its accept loops;
//! `reload` diffs snapshots for the log line and `drain` signals wind down
//! what changed. [`signals`] turns signals into intents, [`notify`] speaks
//! sd_notify and [`takeover`] hands listening sockets to a new binary.
//! [`probe`] is the operator's client-side monitor (it and https cluster
//! lookups trust the system's CAs through `system_roots`); `metrics` and [`admin`]
//! are the relay's own observability, and [`admin`] also its run-time
//! control (`snirelay ctl` is its client). [`haproxy_import`] translates
//! an HAProxy configuration into this crate's TOML (`snirelay
//! import-haproxy`), text to text. Modules no test, bench, example or
//! fuzz target needs are `pub(crate)`.
//!
//! Syscalls live in two places: socket options and descriptor handling in
//! [`sockopt`], splice(2) and its pipe pool in [`pump::splice`]. `unsafe`
//! is denied crate-wide; [`sockopt`] alone allows it, per block, each with
//! its `SAFETY` comment ([`pump::splice`] needs none: it uses nix's safe
//! wrappers).
//!
//! Imports between modules run one way: `tests/it/module_graph.rs` reads the
//! source and fails, naming the loop, when two top-level modules (or two
//! submodules of a folder) depend on each other, directly or through
//! others. There is none: [`config`] depends on [`backend`] (it builds the
//! backends' validated settings, which [`backend`] defines), never the
//! reverse.

#![deny(unsafe_code)]

pub(crate) mod accept;
pub mod addr;
pub mod admin;
pub mod admit;
pub mod backend;
pub(crate) mod bind;
pub mod cidr;
pub mod cli;
pub mod client_hello;
pub mod close;
pub mod config;
pub(crate) mod conn;
pub(crate) mod connect;
pub mod drain;
pub(crate) mod generation;
pub mod haproxy_import;
pub mod inspect;
pub(crate) mod listeners;
pub mod logging;
pub mod matcher;
pub(crate) mod metrics;
pub mod notify;
pub mod probe;
pub mod proxy;
pub mod pump;
pub mod quic;
pub mod reason;
pub mod registry;
pub(crate) mod reload;
pub(crate) mod route;
pub mod server;
pub mod signals;
pub mod sni;
pub mod sockopt;
pub(crate) mod system_roots;
pub mod takeover;

/// The version this build reports (`snirelay --version`, the
/// `snirelay_build_info` metric, the status page): `SNIRELAY_VERSION` when it
/// was set at build time (a packager's or the field test's second build, so
/// two builds of one commit can tell themselves apart), else the crate's
/// version from Cargo.toml. Cargo rebuilds when that variable changes.
pub const VERSION: &str = match option_env!("SNIRELAY_VERSION") {
    Some(version) => version,
    None => env!("CARGO_PKG_VERSION"),
};
