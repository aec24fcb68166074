//! A listener's generation: everything one accept reads, published as one
//! value.
//!
//! A reload used to publish a listener's settings and routes, its admission
//! state, the backends' run-time state and the accept pacing on four
//! separate channels, one after another, so an accept on another worker
//! could pair a new route table with the old backends (a route whose
//! backend the reload added then found no backend and closed with
//! `no_address`). A [`Generation`] holds all four; the server builds the
//! whole value and publishes it with one `watch::Sender::send_replace`, and
//! an accept loop reads exactly one generation per accepted connection,
//! which the connection keeps for life.
//!
//! Not here: building the parts (`config`, `admit`, `backend`), deciding
//! what a reload changes (`reload`), or publishing (`server`).
//!
//! Cost: one `Arc` clone per accept (the loop re-reads the generation only
//! when a reload has published a new one: an atomic version check).

use std::sync::Arc;

use crate::admit::Admission;
use crate::backend::Backends;
use crate::config::Listener;

/// Process-wide accept pacing (`global.max_connection_rate`).
pub type Pace = Arc<governor::DefaultDirectRateLimiter>;

/// One listener's state as of one reload (or the start).
pub struct Generation {
    /// The listener's validated settings and compiled routes.
    pub listener: Arc<Listener>,
    /// Its admission state: carried over from the previous generation
    /// unless the reload changed `[listener.limits]`.
    pub admission: Arc<Admission>,
    /// Every backend's run-time state (shared by all listeners).
    pub backends: Arc<Backends>,
    /// Accept pacing, shared by every listener; `None` when unpaced.
    pub pace: Option<Pace>,
}
