//! Drain signals: how a reload tells the connections of one route identity
//! to wind down, without touching anyone else.
//!
//! Every route identity of a snapshot (listener, pattern and `alpn` set →
//! backend; see `route`) owns an `Arc<DrainSignal>`, made when the first
//! connection takes the identity (`route::DrainSlot`: a list of 100,000
//! names holds 100,000 empty 16-byte slots in one block, not 100,000
//! signals); a connection
//! routed through it holds a [`DrainGuard`]. A reload that keeps the identity unchanged hands the same
//! signal on to the new snapshot, so connections started under any older
//! snapshot stay reachable. A reload that changes or removes the identity
//! fires (`DrainSignal::fire`) the signal once: each connection then closes
//! at its own random moment in `[fired, fired + drain_timeout)`, so clients
//! do not all reconnect at once.
//!
//! An operator's `maint` on a backend address drains the connections on
//! that address only, whatever their route: once connected, a connection
//! moves its guard from the route's signal to a *part* of it, one per
//! (route identity, address) (`DrainSignal::part`, kept by the address's
//! [`crate::backend::EndpointState`]). A part fires with its route (sharing the
//! route's window), or alone when its address goes to maintenance; a
//! connection then closes with [`CloseReason::AddressMaint`] instead of
//! `drained`.
//!
//! Not here: deciding what changed (see `reload`), or closing sockets (the
//! connection does that when `DrainGuard::closing` resolves).
//!
//! Cost: per connection, one more SNI-matcher lookup at route time (to find
//! the pattern that matched), one `Arc` clone and two relaxed atomic adds;
//! once connected, the move to a part: one uncontended lock of the address's
//! short list of parts (one per route identity with connections on it) and
//! two more atomic adds, about 35-40 ns (`cargo bench --bench drain_part`).
//! No registry of connections, no task, nothing per byte. The jitter comes
//! from std's randomly keyed SipHash over the connection id, so no RNG
//! crate is needed.

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::close_reason::CloseReason;

/// The drain switch of one route identity.
#[derive(Debug, Default)]
pub struct DrainSignal {
    fired: CancellationToken,
    /// When it fired, and the window over which closes are spread.
    window: OnceLock<(Instant, Duration)>,
    live: AtomicUsize,
    // Address maintenance (issue 16).
    /// The route identity's signal this is a part of: it fires this one
    /// too (tokio's child token), with its window, and counts this one's
    /// connections as its own.
    parent: Option<Arc<DrainSignal>>,
}

impl DrainSignal {
    /// A signal that has not fired, with no parent.
    pub fn new() -> Arc<DrainSignal> {
        Arc::new(DrainSignal::default())
    }

    /// Registers a connection on this identity for as long as the guard lives.
    pub fn enter(self: &Arc<Self>) -> DrainGuard {
        self.live.fetch_add(1, Ordering::Relaxed);
        if let Some(parent) = &self.parent {
            parent.live.fetch_add(1, Ordering::Relaxed);
        }
        DrainGuard {
            signal: self.clone(),
        }
    }

    /// A new part of this signal, for its connections on one backend
    /// address: fired with this one, or on its own
    /// (`EndpointState::maint`).
    pub(crate) fn part(self: &Arc<Self>) -> Arc<DrainSignal> {
        Arc::new(DrainSignal {
            fired: self.fired.child_token(),
            window: OnceLock::new(),
            live: AtomicUsize::new(0),
            parent: Some(self.clone()),
        })
    }

    /// Whether this is a part of `route`.
    pub(crate) fn is_part_of(&self, route: &Arc<DrainSignal>) -> bool {
        self.parent.as_ref().is_some_and(|p| Arc::ptr_eq(p, route))
    }

    /// Marks every connection on this identity for drain over `window`,
    /// starting now. Returns how many connections were open. Firing twice
    /// keeps the first window. A relaying TCP connection keeps no waiter
    /// on the signal: it reads it when its task is next woken, so whoever
    /// fires signals with connections on them then wakes the relays
    /// ([`crate::flow::registry::drains_fired`]).
    pub(crate) fn fire(&self, window: Duration) -> usize {
        let _ = self.window.set((Instant::now(), window));
        self.fired.cancel();
        self.live.load(Ordering::Relaxed)
    }

    pub(crate) fn is_fired(&self) -> bool {
        self.fired.is_cancelled()
    }

    #[cfg(test)]
    /// Connections currently registered.
    pub(crate) fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// The window in force: this signal's own, else (a part) its route's.
    fn window(&self) -> Option<(&(Instant, Duration), bool)> {
        match self.window.get() {
            Some(own) => Some((own, self.parent.is_some())),
            None => self.parent.as_ref()?.window.get().map(|w| (w, false)),
        }
    }
}

/// One connection's registration with a [`DrainSignal`].
#[derive(Debug)]
pub struct DrainGuard {
    signal: Arc<DrainSignal>,
}

impl DrainGuard {
    /// Resolves at this connection's moment to close: never while the
    /// identity is kept; after a drain, at a point of the window chosen at
    /// random (per `seed`, the connection id). A connection routed after the
    /// window began may find its moment already past and close at once.
    pub(crate) async fn closing(&self, seed: u64) {
        self.fired().await;
        tokio::time::sleep_until(self.moment(seed)).await;
    }

    /// Resolves when the identity is drained (its moment may still be
    /// ahead; see [`moment`](Self::moment)).
    pub(crate) fn fired(&self) -> tokio_util::sync::WaitForCancellationFuture<'_> {
        self.signal.fired.cancelled()
    }

    /// This connection's moment to close once [`fired`](Self::fired) has
    /// resolved: `seed` picks a point of the drain window. Before the
    /// signal fires there is no window, and the moment is now.
    pub(crate) fn moment(&self, seed: u64) -> Instant {
        match self.signal.window() {
            // The first 99 % of the window: the timer fires on a
            // millisecond tick and the close takes a moment more, and the
            // last connection must still be gone when the window ends.
            Some((&(fired, window), _)) => {
                fired + window.mul_f64(DRAIN_SPREAD * unit_fraction(seed))
            }
            None => Instant::now(),
        }
    }

    /// Why the connection closes at its moment: `address_maint` when its
    /// address went to maintenance, `drained` when its route was drained.
    pub(crate) fn reason(&self) -> CloseReason {
        match self.signal.window() {
            Some((_, true)) => CloseReason::AddressMaint,
            _ => CloseReason::Drained,
        }
    }

    /// The signal this guard registers with.
    pub fn signal(&self) -> &Arc<DrainSignal> {
        &self.signal
    }
}

impl Drop for DrainGuard {
    fn drop(&mut self) {
        self.signal.live.fetch_sub(1, Ordering::Relaxed);
        if let Some(parent) = &self.signal.parent {
            parent.live.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// The share of `drain_timeout` over which a drain spreads its closes.
const DRAIN_SPREAD: f64 = 0.99;

/// A random number in `[0, 1)`, different per process and per seed.
pub(crate) fn unit_fraction(seed: u64) -> f64 {
    static KEYS: OnceLock<RandomState> = OnceLock::new();
    let hash = KEYS.get_or_init(RandomState::new).hash_one(seed);
    // 53 random bits fill an f64 mantissa exactly.
    (hash >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions_are_in_range_and_spread() {
        let values: Vec<f64> = (0..1000).map(unit_fraction).collect();
        assert!(values.iter().all(|v| (0.0..1.0).contains(v)));
        let low = values.iter().filter(|&&v| v < 0.5).count();
        assert!((350..650).contains(&low), "{low} of 1000 below 0.5");
    }

    #[tokio::test]
    async fn a_part_fires_with_its_route_or_alone_and_says_why() {
        let route = DrainSignal::new();
        let part = route.part();
        let on_part = part.enter();
        let on_route = route.enter();
        assert_eq!((route.live(), part.live()), (2, 1));
        // The part alone: only its connection, as address maintenance.
        assert_eq!(part.fire(Duration::from_millis(20)), 1);
        assert!(!route.is_fired());
        on_part.closing(1).await;
        assert_eq!(on_part.reason(), CloseReason::AddressMaint);
        // The route: a fresh part fires with it, as a route drain.
        let fresh = route.part();
        let guard = fresh.enter();
        route.fire(Duration::from_millis(20));
        guard.closing(2).await;
        on_route.closing(3).await;
        assert_eq!(guard.reason(), CloseReason::Drained);
        drop((on_part, on_route, guard));
        assert_eq!(route.live(), 0);
    }

    #[tokio::test]
    async fn a_guard_closes_within_the_window_and_counts_live_connections() {
        let signal = DrainSignal::new();
        let guard = signal.enter();
        assert_eq!(signal.live(), 1);
        let start = Instant::now();
        assert_eq!(signal.fire(Duration::from_millis(50)), 1);
        guard.closing(7).await;
        assert!(start.elapsed() < Duration::from_secs(1));
        drop(guard);
        assert_eq!(signal.live(), 0);
    }
}
