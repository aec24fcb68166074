//! One listener's (or route's) admission state and its decisions
//! ([`Admission`]): the lists, `connections_per_source`, the rate or the
//! attempts, dry runs, the doors at accept, after the preface and after
//! the hello, the counters the metrics read, and a reload's carried state
//! (see the module header of [`super`] for the order of the checks).
//!
//! Not here: the table it counts in and its bounds ([`super::table`]), a
//! route's own gate ([`super::route`]), the periodic sweep
//! ([`super::sweep`]).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use governor::clock::{Clock, DefaultClock, Reference};
use governor::nanos::Nanos;

use super::key::*;
use super::sources::*;
use super::table::{Gcra, Rules, SourceGuard, SourceTable};
use super::{LimitKey, Limits};
use crate::addr::{ClaimedAddr, PeerAddr};

/// What the gate at accept decided for an admitted connection.
#[derive(Debug)]
pub enum AtAccept {
    /// Admitted on its measured address; the slot is held for its life.
    Admitted(Admitted),
    /// A trusted peer relay: decided after its preface.
    AfterPreface,
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

impl Admitted {
    /// This admission (after the hello, on a key with the JA4) holding
    /// `earlier`'s slot too (the source's, counted at accept), so that a
    /// connection keeps both counts for its life.
    pub(crate) fn joined(self, earlier: Option<Admitted>) -> Admitted {
        let Some(earlier) = earlier else {
            return self;
        };
        Admitted {
            guard: SourceGuard::join(self.guard, earlier.guard),
            would_refuse: self.would_refuse.or(earlier.would_refuse),
            key: self.key,
        }
    }
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

/// One listener's admission state: its limits and per-source table.
///
/// Shared by every accept loop of the listener (its IPv4 and IPv6 sockets
/// count against the same keys).
pub struct Admission<C: Clock = DefaultClock> {
    limits: Limits,
    /// The source table: every counter of every source (see
    /// [`SourceTable`]); present when a counting limit is set. Shared with
    /// the generations before and after this one whose source keys are cut
    /// the same way, so open connections stay counted across a reload
    /// ([`Admission::next`]).
    table: Option<Arc<SourceTable>>,
    /// The counting limits on a connection's key.
    rules: Rules,
    /// Under a JA4 `limit_key`, the limits on the source alone:
    /// `ja4_source_multiple` times `rules`.
    source_rules: Rules,
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

/// Sizes of the source table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tracked {
    /// Keys with open connections.
    pub concurrent_keys: usize,
    /// Slots allocated in the table.
    pub concurrent_capacity: usize,
    /// Keys in the source table: those with open connections, and those
    /// remembered since (see [`SourceTable`]).
    pub sources: usize,
    /// Sources evicted at `max_sources` since the table was made.
    pub evicted: u64,
}

/// The counting limits of `limits`, each `multiple` times its setting.
fn rules_of(limits: &Limits, multiple: u32) -> Rules {
    let times = |n: u32| n.saturating_mul(multiple);
    Rules {
        cap: limits
            .connections_per_source
            .map_or(u32::MAX, |c| times(c.get())),
        rate: limits.rate_per_source.map(|rate| {
            let t = Nanos::from(std::time::Duration::from_secs(1) / times(rate.per_second.get()));
            let t = u64::from(t);
            Gcra {
                t,
                tau: t * u64::from(times(rate.burst.get()) - 1),
                counts_refused: limits.rate_counts_refused,
            }
        }),
        attempts: limits.attempts_per_source.map(|a| {
            let period = u64::try_from(a.period.as_millis()).unwrap_or(u64::MAX);
            (times(a.count.get()), period.max(1))
        }),
        dry_run: limits.dry_run,
    }
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
        let table = (limits.connections_per_source.is_some()
            || limits.rate_per_source.is_some()
            || limits.attempts_per_source.is_some())
        .then(|| Arc::new(SourceTable::new(limits.max_sources.get())));
        let epoch = clock.now();
        Admission {
            limits: limits.clone(),
            table,
            rules: rules_of(limits, 1),
            source_rules: rules_of(limits, limits.ja4_source_multiple.get()),
            clock,
            epoch,
            counters: Counters::default(),
        }
    }

    /// The state for changed `limits` after `self` (a reload): the table
    /// carries over when the source prefixes are unchanged (its keys are
    /// cut by them) and both set a counting limit, so the per-source
    /// counts of connections still open are kept and a lowered cap applies
    /// to them at once; what it holds of the rate is forgotten when the
    /// rate changed, and of `attempts_per_source` when its count or period
    /// changed (those count afresh). A table that cannot carry over starts
    /// empty: a limit turned on by the reload counts from then on, since an
    /// unset limit keeps no table.
    pub(crate) fn next(&self, limits: &Limits, clock: C) -> Admission<C> {
        let same_keys = self.limits.source_prefix_v4 == limits.source_prefix_v4
            && self.limits.source_prefix_v6 == limits.source_prefix_v6;
        let mut next = Admission::with_clock(limits, clock);
        if let (true, Some(_), Some(table)) = (same_keys, &next.table, &self.table) {
            table.set_max_sources(limits.max_sources.get());
            if self.rules.rate.map(|r| (r.t, r.tau)) != next.rules.rate.map(|r| (r.t, r.tau)) {
                table.forget(|e| e.tat = 0);
            }
            if self.rules.attempts != next.rules.attempts {
                table.forget(|e| e.attempt_counter = None);
            }
            next.table = Some(table.clone());
            next.epoch = self.epoch;
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
            if let Some(table) = &self.table {
                table.refused(key, Reason::Denied, self.now());
            }
            return Err(Refusal::Denied);
        }
        let rules = match self.limits.limit_key.needs_ja4() {
            // The source alone, at `ja4_source_multiple` times the limits:
            // a client that makes a new JA4 per connection gets no more.
            true => &self.source_rules,
            false => &self.rules,
        };
        self.count(key, None, rules)
    }

    /// The door right after inspection, for a `limit_key` with the JA4:
    /// counts `source`'s connection (already past the lists, and counted
    /// on its source alone) on the key its hello completes; hold the
    /// result [`Admitted::joined`] with the admission at accept. `None` when there is nothing to count here: the
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
        self.count(key, ja4, &self.rules).map(Some)
    }

    /// Steps 2 and 3 on `key`, held to `rules`.
    fn count(&self, key: SourceKey, ja4: Option<&str>, rules: &Rules) -> Result<Admitted, Refusal> {
        let Some(table) = &self.table else {
            self.counters.admitted.fetch_add(1, Ordering::Relaxed);
            return Ok(Admitted {
                guard: None,
                would_refuse: None,
                key,
            });
        };
        let verdict = table.attempt(key, ja4, rules, self.now());
        let c = &self.counters;
        let count = |counter: &AtomicU64, yes: bool| {
            if yes {
                counter.fetch_add(1, Ordering::Relaxed);
            }
        };
        count(&c.dry_run_concurrent, verdict.dry_run_concurrent);
        count(&c.dry_run_rate, verdict.dry_run_rate);
        match verdict.refusal {
            Some(Refusal::Concurrent) => count(&c.limit_concurrent, true),
            Some(_) => count(&c.limit_rate, true),
            None => count(&c.admitted, true),
        }
        if let Some(refusal) = verdict.refusal {
            return Err(refusal);
        }
        Ok(Admitted {
            guard: verdict.counted.then(|| SourceGuard {
                table: table.clone(),
                earlier: None,
                key,
                counted: true,
            }),
            would_refuse: verdict.would_refuse(),
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

    /// Forgets sources that have been quiet for their memory (see
    /// `Admission::forget_after`, and at least
    /// [`REFUSED_SOURCE_MEMORY`] once refused), a bounded step per lock hold (see
    /// [`SourceTable::expire`]), and returns spare table capacity. Run off
    /// the hot path every `SWEEP_INTERVAL`.
    pub fn sweep(&self) {
        if let Some(table) = &self.table {
            let (forget_after, refused) = (self.forget_after(), Nanos::from(REFUSED_SOURCE_MEMORY));
            table.expire(self.now(), |e| match e.refusals() {
                0 => forget_after,
                _ => forget_after.max(refused),
            });
        }
    }

    /// Time since the source table's epoch, by this admission's clock.
    fn now(&self) -> Nanos {
        self.clock.now().duration_since(self.epoch)
    }

    /// How long a source with no open connection and no refusal stays in
    /// the source table: as long as its rate state means something (one
    /// burst window, `burst / rate`) or its attempt counter does (two
    /// periods), and not at all without either (its entry goes with its
    /// last connection, at the next sweep). Read with the source rules,
    /// the longer ones under a JA4 key.
    fn forget_after(&self) -> Nanos {
        let rules = &self.source_rules;
        let rate = rules.rate.map_or(0, |r| r.tau + r.t);
        let attempts = rules
            .attempts
            .map_or(0, |(_, period)| 2 * period * 1_000_000);
        Nanos::from(rate.max(attempts))
    }

    /// The source table's rows (see [`SourceRow`]); empty when neither
    /// counting limit is set (no table exists). Cost: one pass over the
    /// table under its lock, a row copied per key.
    pub(crate) fn sources(&self) -> Vec<SourceRow> {
        match &self.table {
            Some(table) => table.rows(self.now()),
            None => Vec::new(),
        }
    }

    /// Clears the counters of the source whose key reads `key` (as a row
    /// shows it): its refusals, admitted count, recent rate, and its rate
    /// limiter's cell, so a rate-limited source is let in again at once;
    /// its open connections stay counted. Returns whether it was there.
    pub(crate) fn clear_source(&self, key: &str) -> bool {
        self.table
            .as_ref()
            .is_some_and(|table| table.clear(key).is_some())
    }

    /// The estimate `key`'s `attempts_per_source` counter reads now (0
    /// for a key not in the table).
    #[cfg(test)]
    pub(crate) fn attempt_estimate(&self, key: &SourceKey) -> u64 {
        let (Some(table), Some((_, period))) = (&self.table, self.rules.attempts) else {
            return 0;
        };
        let now_ms = u64::from(self.now()) / 1_000_000;
        table
            .read(key, |e| {
                e.attempt_counter.map_or(0, |c| c.read(now_ms, period))
            })
            .unwrap_or(0)
    }

    /// How many sources the table tracks now (its memory, in keys).
    pub fn tracked(&self) -> Tracked {
        let (concurrent_keys, sources, concurrent_capacity) =
            self.table.as_ref().map(|t| t.size()).unwrap_or_default();
        Tracked {
            concurrent_keys,
            concurrent_capacity,
            sources,
            evicted: self.table.as_ref().map_or(0, |t| t.evicted()),
        }
    }
}
