//! One route's admission ([`RouteGate`]): `[route.limits]` per source
//! within the route, on an [`Admission`] of its own, and its
//! `max_connections`, decided once the ClientHello has named the route
//! (by [`crate::flow::decision`]), refusing with a [`RouteRefusal`].
//!
//! Not here: the listener's gate ([`super::gate`]).

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use governor::clock::DefaultClock;

use super::Limits;
use super::gate::*;
use super::key::*;
use super::sources::Refusal;
use crate::addr::{ClaimedAddr, PeerAddr};
use crate::close_reason::CloseReason;

/// Why a connection was refused by its route's admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RouteRefusal {
    #[error("route's limits: {0}")]
    Source(Refusal),
    #[error("route has max_connections open")]
    Full,
}

impl From<RouteRefusal> for CloseReason {
    fn from(refusal: RouteRefusal) -> Self {
        match refusal {
            RouteRefusal::Source(Refusal::Denied) => CloseReason::RouteDenied,
            RouteRefusal::Source(Refusal::Concurrent) => CloseReason::RouteLimitConcurrent,
            RouteRefusal::Source(Refusal::Rate) => CloseReason::RouteLimitRate,
            RouteRefusal::Full => CloseReason::RouteFull,
        }
    }
}

/// The source a route's limits apply to: the claimed client behind a
/// trusted peer relay, or the measured peer of a direct client; `None` for
/// a trusted peer's own connection (it claims nobody), which per-source
/// limits do not count, as at accept.
pub(crate) fn route_source(
    peer: PeerAddr,
    trusted_peer: bool,
    claimed: Option<ClaimedAddr>,
) -> Option<Source> {
    match claimed {
        Some(claimed) => Some(Source::Claimed(claimed)),
        None if trusted_peer => None,
        None => Some(Source::Peer(peer)),
    }
}

/// One route's admission: `[route.limits]` per source within the route
/// and `max_connections` for the route as a whole, decided once the
/// ClientHello has named the route.
///
/// Memory and hot path: those of an [`Admission`] for the limits, plus one
/// shared `AtomicU32` and one compare-and-swap loop for `max_connections`;
/// nothing when the route sets neither (no gate exists).
#[derive(Debug)]
pub(crate) struct RouteGate {
    sources: Option<Admission>,
    max_connections: Option<NonZeroU32>,
    /// Open connections on the route, counted while `max_connections` is
    /// set; shared with the route's gates before and after a reload.
    open: Option<Arc<AtomicU32>>,
}

/// A connection's hold on its route's admission: released on drop.
#[derive(Debug)]
pub(crate) struct RouteAdmitted {
    /// The per-source slot (and, under `dry_run`, what would be refused).
    pub source: Option<Admitted>,
    _open: Option<OpenGuard>,
}

/// One connection counted in a route's `max_connections`.
#[derive(Debug)]
struct OpenGuard(Arc<AtomicU32>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl RouteGate {
    #[cfg(test)]
    /// A route's gate; `None` when it sets neither limits nor
    /// `max_connections`.
    pub(crate) fn new(
        limits: Option<&Limits>,
        max_connections: Option<NonZeroU32>,
    ) -> Option<RouteGate> {
        RouteGate::next(None, limits, max_connections)
    }

    /// The gate for a route's (possibly changed) settings after
    /// `previous`, the same route's gate before a reload: the counts of
    /// connections still open carry over (see [`Admission::next`]), and so
    /// does the route's open count while `max_connections` stays set.
    pub(crate) fn next(
        previous: Option<&RouteGate>,
        limits: Option<&Limits>,
        max_connections: Option<NonZeroU32>,
    ) -> Option<RouteGate> {
        if limits.is_none() && max_connections.is_none() {
            return None;
        }
        let sources = limits.map(|limits| match previous.and_then(|p| p.sources.as_ref()) {
            Some(was) => was.next(limits, DefaultClock::default()),
            None => Admission::new(limits),
        });
        let open =
            max_connections.map(|_| previous.and_then(|p| p.open.clone()).unwrap_or_default());
        Some(RouteGate {
            sources,
            max_connections,
            open,
        })
    }

    /// Decides one connection on the route, `source` as [`route_source`]
    /// gives it. The per-source limits go first, so a denied source is
    /// told so even on a full route.
    #[cfg(test)]
    pub(crate) fn admit(&self, source: Option<Source>) -> Result<RouteAdmitted, RouteRefusal> {
        self.admit_with(source, None)
    }

    /// `RouteGate::admit` for a hello whose JA4 is `ja4`: a route's
    /// `limit_key` with the JA4 counts by it (the hello is read by now).
    pub(crate) fn admit_with(
        &self,
        source: Option<Source>,
        ja4: Option<&str>,
    ) -> Result<RouteAdmitted, RouteRefusal> {
        let admitted = match (&self.sources, source) {
            (Some(sources), Some(source)) => {
                let listed = sources.admit(source).map_err(RouteRefusal::Source)?;
                let counted = sources
                    .after_hello(Some(source), ja4)
                    .map_err(RouteRefusal::Source)?;
                Some(match counted {
                    Some(counted) => counted.joined(Some(listed)),
                    None => listed,
                })
            }
            _ => None,
        };
        let open = match (&self.open, self.max_connections) {
            (Some(open), Some(max)) => {
                let taken = open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < max.get()).then_some(n + 1)
                });
                if taken.is_err() {
                    // `admitted` drops here, giving back its source slot.
                    return Err(RouteRefusal::Full);
                }
                Some(OpenGuard(open.clone()))
            }
            _ => None,
        };
        Ok(RouteAdmitted {
            source: admitted,
            _open: open,
        })
    }

    /// The route's per-source admission state (`[route.limits]`), if set.
    pub(crate) fn sources(&self) -> Option<&Admission> {
        self.sources.as_ref()
    }

    /// Sweeps the per-source tables (see [`Admission::sweep`]).
    pub(crate) fn sweep(&self) {
        if let Some(sources) = &self.sources {
            sources.sweep();
        }
    }

    #[cfg(test)]
    /// Open connections counted on the route (0 without `max_connections`).
    pub(crate) fn open(&self) -> u32 {
        self.open.as_ref().map_or(0, |o| o.load(Ordering::Acquire))
    }
}
