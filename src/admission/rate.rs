//! The rate table behind `connection_rate_per_source`: a keyed GCRA on
//! governor's sharded store ([`KeyedGcra`]).
//!
//! Memory: one entry (~50 bytes) per key seen within the last
//! `burst / rate` seconds plus up to one sweep interval. Not here: the
//! attempt counter of `attempts_per_source` ([`super::attempts`]).

use std::sync::Arc;
use std::time::Duration;

use governor::clock::{Clock, Reference};
use governor::nanos::Nanos;
use governor::state::StateStore;
use governor::state::keyed::{DashMapStateStore, ShrinkableKeyedStateStore};

use super::Rate;
use super::key::SourceKey;

/// The keyed GCRA behind `connection_rate_per_source`: governor's sharded
/// per-key store, driven by the same arithmetic as governor's own keyed
/// limiter (emission interval `t` = 1 s / rate, tolerance `tau` =
/// (burst − 1) · `t`) plus one thing governor cannot do: with
/// `rate_counts_refused` a refused attempt also moves the key's
/// theoretical arrival time on by `t`, so attempts, refused ones included,
/// must stay under the rate for any to be admitted (HAProxy's `conn_rate`).
/// That push is bounded to `t` past the point where the key would be
/// admitted again, so a source that stops is let in after at most one
/// burst window (`burst / rate` seconds), never locked out for as long as
/// it flooded.
pub(super) struct KeyedGcra<C: Clock> {
    pub(super) cells: Arc<Cells<C>>,
    pub(super) t: Nanos,
    pub(super) tau: Nanos,
    pub(super) counts_refused: bool,
}

/// The per-key times and the clock they are read from, shared by the
/// generations a reload carries the table over to.
pub(super) struct Cells<C: Clock> {
    pub(super) store: DashMapStateStore<SourceKey>,
    pub(super) clock: C,
    pub(super) start: C::Instant,
}

impl<C: Clock> KeyedGcra<C> {
    pub(super) fn new(rate: Rate, clock: C) -> KeyedGcra<C> {
        let t = Nanos::from(Duration::from_secs(1) / rate.per_second.get());
        let start = clock.now();
        KeyedGcra {
            cells: Arc::new(Cells {
                store: DashMapStateStore::default(),
                clock,
                start,
            }),
            t,
            tau: t * u64::from(rate.burst.get() - 1),
            counts_refused: false,
        }
    }

    /// The same keys and times, read with another `rate_counts_refused`.
    pub(super) fn with_counts_refused(&self, counts_refused: bool) -> KeyedGcra<C> {
        KeyedGcra {
            cells: self.cells.clone(),
            t: self.t,
            tau: self.tau,
            counts_refused,
        }
    }

    pub(super) fn now(&self) -> Nanos {
        self.cells.clock.now().duration_since(self.cells.start)
    }

    /// One attempt by `key`: whether it is within the rate.
    pub(super) fn check(&self, key: &SourceKey) -> bool {
        let now = self.now();
        let (t, tau) = (self.t, self.tau);
        let decided: Result<bool, ()> = self.cells.store.measure_and_replace(key, |tat| {
            let tat = tat.unwrap_or(now);
            if now >= tat.saturating_sub(tau) {
                Ok((true, tat.max(now) + t))
            } else if self.counts_refused {
                Ok((false, (tat + t).min(now + tau + t)))
            } else {
                Err(())
            }
        });
        decided.unwrap_or(false)
    }

    /// Drops keys whose state is that of a fresh key again (as governor's
    /// `retain_recent`) and returns the space.
    pub(super) fn sweep(&self) {
        let drop_below = self.now().saturating_sub(self.t);
        self.cells.store.retain_recent(drop_below);
        self.cells.store.shrink_to_fit();
    }

    pub(super) fn len(&self) -> usize {
        ShrinkableKeyedStateStore::len(&self.cells.store)
    }
}
