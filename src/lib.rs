//! snirelay: a layer-4 relay that routes TLS connections by their SNI
//! without terminating TLS.
//!
//! A connection's life, one module per stage (see DESIGN.md):
//! [`accept`] → [`admit`] (per-source limits) → [`preface`] (PROXY protocol
//! in) → [`inspect`] (over the pure [`client_hello`] parser) → [`route`]
//! (over [`sni`] and [`matcher`]) → [`connect`] (over the run-time state of
//! [`backend`]: address sets, health, selection) → [`announce`] (PROXY
//! protocol out) → [`relay`] → [`close`], strung together in [`conn`]. [`config`] turns the TOML file
//! into an immutable snapshot, [`server`] binds and serves it (each
//! listener as one [`generation`] per reload), [`signals`]
//! turns signals into intents. Socket options live in [`sockopt`] only.
//! [`probe`] is the operator's client-side monitor; [`metrics`] and
//! [`admin`] are the relay's own observability.
//! A reload diffs snapshots in [`reload`] and drains what changed through
//! [`drain`] signals; [`notify`] speaks sd_notify and [`takeover`] hands
//! listening sockets to a new binary.
//! splice(2) and its pipe pool live in [`splice`].

#![deny(unsafe_code)]

pub(crate) mod accept;
pub mod addr;
pub mod admin;
pub mod admit;
pub mod announce;
pub mod backend;
pub(crate) mod bind;
pub mod cidr;
pub mod cli;
pub mod client_hello;
pub mod close;
pub mod config;
pub(crate) mod conn;
pub(crate) mod connect;
pub(crate) mod drain;
pub(crate) mod generation;
pub mod inspect;
pub(crate) mod listeners;
pub mod logging;
pub mod matcher;
pub(crate) mod metrics;
pub mod notify;
pub mod preface;
pub mod probe;
pub mod relay;
pub(crate) mod reload;
pub(crate) mod route;
pub mod server;
pub mod signals;
pub mod sni;
pub mod sockopt;
pub mod splice;
pub mod takeover;
