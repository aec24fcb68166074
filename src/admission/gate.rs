//! One listener's (or route's) admission state and its decisions
//! ([`Admission`]): the lists, `connections_per_source`, the rate or the
//! attempts, dry runs, the doors at accept, after the preface and after
//! the hello, the counters the metrics read, and a reload's carried state
//! (see the module header of [`super`] for the order of the checks).
//!
//! Not here: the tables it counts in ([`super::sources`],
//! [`super::rate`], [`super::attempts`]), a route's own gate
//! ([`super::route`]), the periodic sweep ([`super::sweep`]).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use governor::clock::{Clock, DefaultClock, Reference};
use governor::nanos::Nanos;

use super::attempts::AttemptTable;
use super::key::*;
use super::rate::*;
use super::sources::*;
use super::{LimitKey, Limits};
use crate::addr::{ClaimedAddr, PeerAddr};
use crate::close_reason::CloseReason;

/// What the gate at accept decided for an admitted connection.
#[derive(Debug)]
pub enum AtAccept {
    /// Admitted on its measured address; the slot is held for its life.
    Admitted(Admitted),
    /// A trusted peer relay: decided after its preface.
    AfterPreface,
}

/// Why a connection was refused at admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The source is on the listener's `deny` list, or not on a non-empty `allow` list.
    #[error("source is denied on this listener")]
    Denied,
    /// The source already has `connections_per_source` connections open.
    #[error("source has too many open connections")]
    Concurrent,
    /// The source is over `connection_rate_per_source` or `attempts_per_source`.
    #[error("source opens connections too fast")]
    Rate,
}

impl From<Refusal> for CloseReason {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::Denied => CloseReason::Denied,
            Refusal::Concurrent => CloseReason::LimitConcurrent,
            Refusal::Rate => CloseReason::LimitRate,
        }
    }
}

/// An admitted connection: hold it for the connection's life.
#[derive(Debug)]
pub struct Admitted {
    /// Releases the connection's slot in the concurrency table on drop.
    pub guard: Option<SourceGuard>,
    /// Under `dry_run`: the refusal the limits would have made.
    pub would_refuse: Option<Refusal>,
    /// The source's table key (`source` in log lines).
    pub key: SourceKey,
}

/// Counts of admission outcomes since start.
#[derive(Debug, Default)]
pub struct Counters {
    pub(crate) admitted: AtomicU64,
    pub(crate) denied: AtomicU64,
    pub(crate) limit_concurrent: AtomicU64,
    pub(crate) limit_rate: AtomicU64,
    pub(crate) dry_run_concurrent: AtomicU64,
    pub(crate) dry_run_rate: AtomicU64,
}

/// A snapshot of [`Counters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub(crate) admitted: u64,
    pub(crate) denied: u64,
    pub(crate) limit_concurrent: u64,
    pub(crate) limit_rate: u64,
    pub(crate) dry_run_concurrent: u64,
    pub(crate) dry_run_rate: u64,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> Counts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Counts {
            admitted: get(&self.admitted),
            denied: get(&self.denied),
            limit_concurrent: get(&self.limit_concurrent),
            limit_rate: get(&self.limit_rate),
            dry_run_concurrent: get(&self.dry_run_concurrent),
            dry_run_rate: get(&self.dry_run_rate),
        }
    }
}

impl Counts {
    /// Refusals (real and dry-run) between `earlier` and `self`.
    pub(crate) fn refused_since(&self, earlier: &Counts) -> Counts {
        Counts {
            admitted: self.admitted - earlier.admitted,
            denied: self.denied - earlier.denied,
            limit_concurrent: self.limit_concurrent - earlier.limit_concurrent,
            limit_rate: self.limit_rate - earlier.limit_rate,
            dry_run_concurrent: self.dry_run_concurrent - earlier.dry_run_concurrent,
            dry_run_rate: self.dry_run_rate - earlier.dry_run_rate,
        }
    }

    pub(crate) fn any_refused(&self) -> bool {
        self.denied
            + self.limit_concurrent
            + self.limit_rate
            + self.dry_run_concurrent
            + self.dry_run_rate
            > 0
    }
}

/// One listener's admission state: its limits and per-source tables.
///
/// Shared by every accept loop of the listener (its IPv4 and IPv6 sockets
/// count against the same keys).
pub struct Admission<C: Clock = DefaultClock> {
    limits: Limits,
    /// Shared with the generations before and after this one whose source
    /// keys are cut the same way, so open connections stay counted across
    /// a reload ([`Admission::next`]).
    ///
    /// The source table: open connections per key (what
    /// `connections_per_source` caps) and what `/sources` shows of each
    /// key; present when either counting limit is set.
    concurrent: Option<Arc<SourceTable>>,
    rate: Option<Arc<KeyedGcra<C>>>,
    /// `attempts_per_source`'s counters (shared across reloads as `rate`).
    pub(super) attempts: Option<Arc<AttemptTable<SourceKey, C>>>,
    /// What the source table's times count from (carried over with it).
    clock: C,
    epoch: C::Instant,
    /// What this admission refused and admitted, for the metrics.
    pub counters: Counters,
}

impl<C: Clock + Clone> fmt::Debug for Admission<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admission")
            .field("limits", &self.limits)
            .field("tracked", &self.tracked())
            .finish()
    }
}

/// Sizes of the per-source tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tracked {
    /// Keys with open connections.
    pub concurrent_keys: usize,
    /// Slots allocated in the concurrency table.
    pub concurrent_capacity: usize,
    /// Keys with a rate-limiter cell.
    pub rate_keys: usize,
    /// Keys with an `attempts_per_source` counter.
    pub attempt_keys: usize,
    /// Keys in the source table: those with open connections, and those
    /// remembered for `/sources` since (see `SourceTable`).
    pub sources: usize,
}

impl Admission<DefaultClock> {
    /// The admission stage of one listener (or route) `limits`, on the system clock.
    pub fn new(limits: &Limits) -> Admission {
        Admission::with_clock(limits, DefaultClock::default())
    }
}

impl<C: Clock + Clone> Admission<C> {
    /// Builds the state for `limits`, reading time from `clock` (tests pass
    /// a fake one to step through rate windows).
    pub fn with_clock(limits: &Limits, clock: C) -> Admission<C> {
        let concurrent = (limits.connections_per_source.is_some()
            || limits.rate_per_source.is_some()
            || limits.attempts_per_source.is_some())
        .then(|| Arc::new(SourceTable::default()));
        let attempts = limits
            .attempts_per_source
            .map(|a| AttemptTable::new(a.count, a.period, clock.clone()));
        let epoch = clock.now();
        let rate = limits.rate_per_source.map(|rate| {
            let mut gcra = KeyedGcra::new(rate, clock.clone());
            gcra.counts_refused = limits.rate_counts_refused;
            Arc::new(gcra)
        });
        Admission {
            limits: limits.clone(),
            concurrent,
            rate,
            attempts,
            clock,
            epoch,
            counters: Counters::default(),
        }
    }

    /// The state for changed `limits` after `self` (a reload): the tables
    /// that can mean the same thing carry over, so the per-source counts of
    /// connections still open are kept and a lowered cap applies to them
    /// at once. The source table (with the counts of open connections and
    /// what `/sources` shows) carries over when the source prefixes are
    /// unchanged (its keys are cut by them) and both set a counting limit;
    /// the rate table when the prefixes and the rate are unchanged; the
    /// attempt table when the prefixes, the count and the period are.
    /// A table that cannot carry over starts empty: a limit turned on by
    /// the reload counts from then on, since an unset limit keeps no table.
    pub(crate) fn next(&self, limits: &Limits, clock: C) -> Admission<C> {
        let same_keys = self.limits.source_prefix_v4 == limits.source_prefix_v4
            && self.limits.source_prefix_v6 == limits.source_prefix_v6;
        let mut next = Admission::with_clock(limits, clock);
        if same_keys && next.concurrent.is_some() {
            if let Some(table) = &self.concurrent {
                next.concurrent = Some(table.clone());
                next.epoch = self.epoch;
            }
        }
        if same_keys && next.rate.is_some() && self.limits.rate_per_source == limits.rate_per_source
        {
            if let Some(rate) = &self.rate {
                next.rate = Some(Arc::new(
                    rate.with_counts_refused(limits.rate_counts_refused),
                ));
            }
        }
        if let (true, Some(was), Some(wanted)) =
            (same_keys, &self.attempts, limits.attempts_per_source)
        {
            if was.counts(wanted.count, wanted.period) {
                next.attempts = Some(was.clone());
            }
        }
        next
    }

    pub(crate) fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The table key for `source` under this listener's prefixes.
    pub(crate) fn key(&self, source: Source) -> SourceKey {
        SourceKey::new(
            source,
            self.limits.source_prefix_v4,
            self.limits.source_prefix_v6,
        )
    }

    /// Decides one new connection. Counts the outcome. With a `limit_key`
    /// that needs the hello, only the lists are judged here and nothing is
    /// counted: `Admission::after_hello` counts.
    pub fn admit(&self, source: Source) -> Result<Admitted, Refusal> {
        let ip = source.ip();
        let key = self.key(source);
        if self.limits.deny.contains(ip)
            || (!self.limits.allow.is_empty() && !self.limits.allow.contains(ip))
        {
            self.counters.denied.fetch_add(1, Ordering::Relaxed);
            if let Some(table) = &self.concurrent {
                table.refused(key, Reason::Denied, self.now());
            }
            return Err(Refusal::Denied);
        }
        if self.limits.limit_key.needs_ja4() {
            return Ok(Admitted {
                guard: None,
                would_refuse: None,
                key,
            });
        }
        self.count(key, None)
    }

    /// The door right after inspection, for a `limit_key` with the JA4:
    /// counts `source`'s connection (already past the lists) on the key
    /// its hello completes. `None` when there is nothing to count here: the
    /// key is the source alone (counted at accept), or the connection is a
    /// trusted peer's own (`source` is `None`). Without a fingerprint
    /// (`ja4` is `None`, which a listener with such a key never passes)
    /// the source alone is counted.
    pub(crate) fn after_hello(
        &self,
        source: Option<Source>,
        ja4: Option<&str>,
    ) -> Result<Option<Admitted>, Refusal> {
        let (Some(source), true) = (source, self.limits.limit_key.needs_ja4()) else {
            return Ok(None);
        };
        let key = self.key(source);
        let key = match (self.limits.limit_key, ja4) {
            (LimitKey::Ja4, Some(ja4)) => SourceKey::Ja4(Ja4Key::new(ja4)),
            (_, Some(ja4)) => key.with_ja4(ja4),
            (_, None) => key,
        };
        self.count(key, ja4).map(Some)
    }

    /// Steps 2 and 3 on `key`.
    fn count(&self, key: SourceKey, ja4: Option<&str>) -> Result<Admitted, Refusal> {
        let dry_run = self.limits.dry_run;
        let mut would_refuse = None;
        // Counted before anything can refuse it, as `track-sc0` counts a
        // connection before a `reject` rule reads the count.
        let within_attempts = self.attempts.as_ref().is_none_or(|a| a.attempt(key));

        let cap = self
            .limits
            .connections_per_source
            .map_or(u32::MAX, |c| c.get());
        let now = self.now();
        let guard = match &self.concurrent {
            None => None,
            Some(table) => match table.acquire(key, ja4, cap, dry_run, now) {
                (guard, true) => Some(guard),
                (guard, false) => {
                    if !dry_run {
                        drop(guard);
                        if self.limits.rate_counts_refused {
                            // The attempt counts against the rate, as in
                            // HAProxy's conn_rate; the refusal stays
                            // `Concurrent`.
                            if let Some(rate) = &self.rate {
                                rate.check(&key);
                            }
                        }
                        self.counters
                            .limit_concurrent
                            .fetch_add(1, Ordering::Relaxed);
                        table.count(&key, Reason::Concurrent);
                        return Err(Refusal::Concurrent);
                    }
                    self.counters
                        .dry_run_concurrent
                        .fetch_add(1, Ordering::Relaxed);
                    table.count(&key, Reason::DryRunConcurrent);
                    would_refuse = Some(Refusal::Concurrent);
                    Some(guard)
                }
            },
        };

        let within_rate = self.rate.as_ref().is_none_or(|rate| rate.check(&key));
        if !(within_rate && within_attempts) {
            let table = self.concurrent.as_ref();
            if !dry_run {
                // `guard` drops here, giving back the concurrency slot.
                self.counters.limit_rate.fetch_add(1, Ordering::Relaxed);
                if let Some(table) = table {
                    table.count(&key, Reason::Rate);
                }
                return Err(Refusal::Rate);
            }
            self.counters.dry_run_rate.fetch_add(1, Ordering::Relaxed);
            if let Some(table) = table {
                table.count(&key, Reason::DryRunRate);
            }
            would_refuse.get_or_insert(Refusal::Rate);
        }
        self.counters.admitted.fetch_add(1, Ordering::Relaxed);
        Ok(Admitted {
            guard,
            would_refuse,
            key,
        })
    }

    /// The gate at accept, before a byte is read. A direct client is
    /// decided now, on its measured address. A trusted peer relay is not
    /// counted on its own address (one peer carries many clients): it is
    /// decided after its preface, on the client it claims
    /// ([`Admission::after_preface`]).
    pub fn at_accept(&self, peer: PeerAddr, trusted_peer: bool) -> Result<AtAccept, Refusal> {
        if trusted_peer {
            return Ok(AtAccept::AfterPreface);
        }
        self.admit(Source::Peer(peer)).map(AtAccept::Admitted)
    }

    /// The gate after a trusted peer's preface. A claimed client is
    /// decided as if it had connected directly, on the claimed address; a
    /// connection that claims nobody (LOCAL, UNKNOWN, a v2 fallback, or no
    /// header in `optional` mode) is the peer's own and is not counted as a
    /// client (`global.max_connections` still bounds it).
    pub fn after_preface(&self, claimed: Option<ClaimedAddr>) -> Result<Option<Admitted>, Refusal> {
        claimed
            .map(|claimed| self.admit(Source::Claimed(claimed)))
            .transpose()
    }

    /// Drops rate cells of sources that are quiet again and returns spare
    /// table capacity. Cost: linear in the tracked keys, run off the hot
    /// path every `SWEEP_INTERVAL`.
    pub fn sweep(&self) {
        if let Some(rate) = &self.rate {
            rate.sweep();
        }
        if let Some(attempts) = &self.attempts {
            attempts.sweep();
        }
        if let Some(table) = &self.concurrent {
            table.sweep(self.now(), self.forget_after());
        }
    }

    /// Time since the source table's epoch, by this admission's clock.
    fn now(&self) -> Nanos {
        self.clock.now().duration_since(self.epoch)
    }

    /// How long a source with no open connection and no refusal stays in
    /// the source table: as long as the rate table keeps its cell (one
    /// burst window, `burst / rate`) or the attempt table its counter (two
    /// periods), and not at all without either (as before, its entry goes
    /// with its last connection, at the next sweep).
    fn forget_after(&self) -> Nanos {
        let rate = self
            .rate
            .as_ref()
            .map_or(Nanos::from(0u64), |r| r.tau + r.t);
        let attempts = self
            .attempts
            .as_ref()
            .map_or(Nanos::from(0u64), |a| Nanos::from(a.memory()));
        rate.max(attempts)
    }

    /// The source table's rows (see [`SourceRow`]); empty when neither
    /// counting limit is set (no table exists). Cost: one pass over the
    /// table under its lock, a row copied per key.
    pub(crate) fn sources(&self) -> Vec<SourceRow> {
        match &self.concurrent {
            Some(table) => table.rows(self.now()),
            None => Vec::new(),
        }
    }

    /// Clears the counters of the source whose key reads `key` (as a row
    /// shows it): its refusals, admitted count, recent rate, and its rate
    /// limiter's cell, so a rate-limited source is let in again at once;
    /// its open connections stay counted. Returns whether it was there.
    pub(crate) fn clear_source(&self, key: &str) -> bool {
        let Some(table) = &self.concurrent else {
            return false;
        };
        let Some(found) = table.clear(key) else {
            return false;
        };
        if let Some(rate) = &self.rate {
            rate.cells.store.remove(&found);
        }
        if let Some(attempts) = &self.attempts {
            attempts.remove(&found);
        }
        true
    }

    /// How many sources the tables track now (their memory, in keys).
    pub fn tracked(&self) -> Tracked {
        let (concurrent_keys, concurrent_capacity) = self
            .concurrent
            .as_ref()
            .map(|t| t.size())
            .unwrap_or_default();
        Tracked {
            concurrent_keys,
            concurrent_capacity,
            rate_keys: self.rate.as_ref().map_or(0, |r| r.len()),
            attempt_keys: self.attempts.as_ref().map_or(0, |a| a.len()),
            sources: self.concurrent.as_ref().map_or(0, |t| t.len()),
        }
    }
}
