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
//! [`Generation::first`] and [`Generation::next`] build one from the
//! validated listener and the previous generation, the way
//! `Backends::start` carries backend state over: the route table keeps the
//! drain signals of unchanged identities, the admission tables stay unless
//! the limits changed.
//!
//! Not here: building the parts (`config`, `route`, `admit`, `backend`),
//! the reload's diff for the log (`reload`), or publishing (`listeners`).
//!
//! Cost: one `Arc` clone per accept (the loop re-reads the generation only
//! when a reload has published a new one: an atomic version check).

use std::sync::Arc;

use crate::admit::Admission;
use crate::backend::Backends;
use crate::config::Listener;
use crate::route::RouteTable;

/// Process-wide accept pacing (`global.max_connection_rate`).
pub type Pace = Arc<governor::DefaultDirectRateLimiter>;

/// One listener's state as of one reload (or the start).
pub struct Generation {
    /// The listener's validated settings.
    pub listener: Arc<Listener>,
    /// Its routes: each pattern (and the no-SNI fallback) with its backend
    /// and drain signal, carried over from the previous generation where
    /// the identity is unchanged.
    pub routes: RouteTable,
    /// Its admission state: carried over from the previous generation
    /// unless the reload changed `[listener.limits]`.
    pub admission: Arc<Admission>,
    /// Every backend's run-time state (shared by all listeners).
    pub backends: Arc<Backends>,
    /// Accept pacing, shared by every listener; `None` when unpaced.
    pub pace: Option<Pace>,
}

impl Generation {
    /// A listener's first generation: fresh admission tables and drain
    /// signals.
    pub fn first(
        listener: Arc<Listener>,
        backends: &Arc<Backends>,
        pace: &Option<Pace>,
    ) -> Generation {
        Generation {
            routes: RouteTable::build(&listener, None),
            admission: Arc::new(Admission::new(&listener.limits)),
            listener,
            backends: backends.clone(),
            pace: pace.clone(),
        }
    }

    /// The generation after `self` for a reloaded `listener` of the same
    /// name: route identities that are unchanged keep their drain signals,
    /// and the admission tables carry over unless `[listener.limits]`
    /// changed.
    pub fn next(
        &self,
        listener: Arc<Listener>,
        backends: &Arc<Backends>,
        pace: &Option<Pace>,
    ) -> Generation {
        let admission = if self.admission.limits() == &listener.limits {
            self.admission.clone()
        } else {
            tracing::info!(listener = %listener.name, "admission limits changed; per-source counts start afresh");
            Arc::new(Admission::new(&listener.limits))
        };
        Generation {
            routes: RouteTable::build(&listener, Some(&self.routes)),
            admission,
            listener,
            backends: backends.clone(),
            pace: pace.clone(),
        }
    }
}
