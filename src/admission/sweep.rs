//! The background task that sweeps a listener's per-source tables and
//! summarises what admission refused ([`spawn_sweeper`]).
//!
//! Not here: the tables, or what a sweep drops ([`super::gate`]).

use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::SWEEP_INTERVAL;
use super::gate::*;

/// Sources forgotten by one sweep past which the freed memory is handed
/// back to the system (about 1.5 MB of entries).
const RELEASE_AFTER_FORGETTING: usize = 10_000;

/// Sweeps a listener's per-source tables every [`SWEEP_INTERVAL`] and logs,
/// at warn, how many connections admission refused (or, in dry run, would
/// have refused) since the last sweep: refusals are logged one by one only
/// at debug, since a flood makes many. Follows `published` (the listener's
/// generation, whose admission state `admission_of` picks out): most
/// reloads carry the state over, and only a new one starts the counts
/// afresh. `sweep_routes` sweeps the generation's route gates (their
/// refusals are counted in metrics, not in this summary) and returns
/// their sources and evictions in all. After each sweep the listener's
/// `snirelay_admission_sources` and `snirelay_admission_sources_evicted`
/// are brought up to date (from start, at zero). Ends when the listener is
/// gone (the sender dropped) or `stop` fires.
pub(crate) fn spawn_sweeper<T: Send + Sync + 'static>(
    listener: String,
    mut published: watch::Receiver<T>,
    admission_of: fn(&T) -> Arc<Admission>,
    sweep_routes: fn(&T) -> (usize, u64),
    stop: CancellationToken,
) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(SWEEP_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut current = admission_of(&published.borrow_and_update());
        let mut last = current.counters.snapshot();
        // Evictions reported so far, of the tables in force.
        let mut evicted_reported = 0;
        let mut sources_before = 0;
        crate::metrics::metrics().admission_tables(&listener, current.tracked().sources, 0);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                changed = published.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let admission = admission_of(&published.borrow_and_update());
                    if !Arc::ptr_eq(&admission, &current) {
                        current = admission;
                        last = current.counters.snapshot();
                    }
                    continue;
                }
                () = stop.cancelled() => return,
            }
            current.sweep();
            let (route_sources, route_evicted) = sweep_routes(&published.borrow());
            let tracked = current.tracked();
            // A sweep that forgot many sources (a flood that stopped) hands
            // the freed pages back, as a reload does: the heap keeps them
            // otherwise, and a flood's peak would stay resident.
            let sources_now = tracked.sources + route_sources;
            if sources_before >= sources_now + RELEASE_AFTER_FORGETTING {
                crate::sockopt::release_freed_memory();
            }
            sources_before = sources_now;
            let evicted = tracked.evicted + route_evicted;
            // A reload that made new tables starts their counts at zero.
            let new = evicted.checked_sub(evicted_reported).unwrap_or(evicted);
            evicted_reported = evicted;
            crate::metrics::metrics().admission_tables(
                &listener,
                tracked.sources + route_sources,
                new,
            );
            let now = current.counters.snapshot();
            let delta = now.refused_since(&last);
            if delta.any_refused() {
                tracing::warn!(
                    listener = %listener,
                    admitted = delta.admitted,
                    denied = delta.denied,
                    limit_concurrent = delta.limit_concurrent,
                    limit_rate = delta.limit_rate,
                    dry_run_concurrent = delta.dry_run_concurrent,
                    dry_run_rate = delta.dry_run_rate,
                    tracked_sources = tracked.sources,
                    evicted_sources = new,
                    "admission refused connections"
                );
            }
            last = now;
        }
    });
}
