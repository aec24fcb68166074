//! Admission: whether a freshly accepted connection may go on, decided
//! before a single byte is read from it.
//!
//! Checks run cheapest first, each on the connection's [`SourceKey`] (the
//! source address cut to `source_prefix_v4` / `source_prefix_v6` bits, with
//! IPv4-mapped IPv6 counted as IPv4):
//! 1. the listener's `deny` list, then its `allow` list (deny wins) →
//!    [`Refusal::Denied`];
//! 2. `connections_per_source`, open connections per key → [`Refusal::Concurrent`];
//! 3. `connection_rate_per_source` / `connection_burst_per_source`, a keyed
//!    GCRA → [`Refusal::Rate`]. A connection refused at step 2 spends no
//!    rate token, so a client parked at its concurrency cap does not also
//!    burn its rate; with `rate_counts_refused` every refused attempt (at
//!    step 2 or 3) spends one, as HAProxy's `conn_rate` counts them (see
//!    `KeyedGcra` for the bound that keeps this from locking a source out
//!    for long). Or, instead of the rate, `attempts_per_source` within
//!    `attempts_period` (`attempts`): every attempt past the lists is
//!    counted first, admitted or refused (at step 2 or 3), over a sliding
//!    period with HAProxy's `conn_rate` arithmetic, and the attempt that
//!    makes the count exceed the limit is refused as [`Refusal::Rate`].
//!
//! `limit_key` chooses what steps 2 and 3 count by: the source key (the
//! default), the hello's JA4, or both. With the JA4 those steps cannot run
//! before a byte is read: the door at accept (or after the preface) then
//! applies the lists alone, and `Admission::after_hello` counts right
//! after inspection, before routing, on the key the hello completes; a
//! refusal there closes the connection as at accept, with nothing
//! forwarded and no alert. A JA4 is keyed by 48 bits of a SipHash of it
//! ([`Ja4Key`]), 6 bytes beside the address: a `SourceKey` grows from 17
//! to 23 bytes, which every connection's held slot absorbs in padding (the
//! 36 bytes of a JA4 inline, or 8 of a 64-bit hash, took the connection
//! task past its 896-byte allocation step, see `tcp::connection`).
//!
//! With `dry_run` the counting limits (2 and 3) still count and report what
//! they would refuse, but refuse nothing; `deny`/`allow` are policy, not
//! sizing, and always apply. Unset limits cost nothing: no table exists.
//!
//! This is the one admission gate, with two doors. [`Admission::at_accept`]
//! decides a direct client on its measured [`PeerAddr`] before a byte is
//! read, and defers a trusted peer relay (the budget rule: a peer's own
//! address is exempt, since one peer carries many clients).
//! [`Admission::after_preface`] decides the client such a peer claims, on
//! its [`ClaimedAddr`], as if it had connected directly, and counts nothing
//! for a connection that claims nobody (LOCAL, UNKNOWN, a v2 fallback, no
//! header in `optional` mode). Either way the key is a typed value built
//! from a [`Source`].
//!
//! Memory (both tables are bounded and swept by [`Admission::sweep`], which
//! the server runs every `SWEEP_INTERVAL`):
//! - the source table (`SourceTable`, present when either counting limit
//!   is set) holds one entry (17-byte key + counters, ~100 bytes with
//!   hash-table overhead) per key with an open connection (the count is
//!   released by the RAII [`SourceGuard`]), plus the sources seen recently:
//!   one rate window (`burst / rate`; none without a rate) after their
//!   last attempt, or [`REFUSED_SOURCE_MEMORY`] if they were ever refused,
//!   and never more than [`MAX_REMEMBERED_SOURCES`] of those; the sweep
//!   forgets them and gives back spare capacity after a burst. The entry
//!   keeps what the admin listener's `GET /sources` shows of a source
//!   (attempts, refusals by reason, recent rate, last attempt:
//!   `Admission::sources`, `Admission::clear_source`), so that listing
//!   is the limiter's own state;
//! - the attempt table (`attempts_per_source`) holds one entry (~64 bytes)
//!   per key seen within the last two `attempts_period`s, dropped by the
//!   sweep once its count reads 0 (see `attempts`);
//! - the rate table holds one entry (~50 bytes in governor's sharded
//!   `DashMap` store) per key seen within the last `burst / rate` seconds
//!   plus up to one sweep interval; `retain_recent` drops keys whose bucket
//!   is full again, and `shrink_to_fit` returns the space.
//!
//! Hot path: one hash of a 17-byte key per table, one short mutex hold for
//! the source table and one sharded lock + CAS for the rate table; no
//! allocation except when a new key enters a table. A refusal takes the
//! source table's lock once more to count it. Measured in
//! `benches/admission.rs`.
//!
//! `spawn_sweeper` runs the sweep for one listener and logs a summary of
//! what was refused since the last one.
//!
//! Per route: a `RouteGate` applies a route's `[route.limits]` (the same
//! steps, on the same kind of [`Admission`]) and its `max_connections` once
//! the ClientHello has named the route, refusing with a `RouteRefusal`.
//!
//! Across reloads: `Admission::next` builds the state for changed limits
//! on the tables of the previous one where they mean the same thing (same
//! source prefixes; for the rate table, the same rate; for the attempt
//! table, the same count and period), so the per-source
//! counts of connections still open carry over and a lowered cap holds at
//! once; `RouteGate::next` does the same for a route, its open count
//! included. The concurrency table therefore keeps no cap of its own.
//!
//! Not here: accepting, the global connection cap and rate (see `accept`),
//! reading the connection, or routing (`route`; `conn` calls the route's
//! gate once the route is known, and `generation` keeps the gates by route
//! name).

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock, Reference};
use governor::nanos::Nanos;
use governor::state::StateStore;
use governor::state::keyed::{DashMapStateStore, ShrinkableKeyedStateStore};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::addr::{ClaimedAddr, PeerAddr};
use attempts::AttemptTable;

pub(crate) mod attempts;
#[cfg(test)]
mod attempts_tests;
pub(crate) mod pace;
use crate::close_reason::CloseReason;
use crate::wire::cidr::{self, canonical};

/// How often the per-source tables are swept.
pub(crate) const SWEEP_INTERVAL: Duration = Duration::from_secs(10);

// ------------------------------------------------------------------ config

/// A listener's admission settings: plain settings, defined with the rest.
pub use crate::config::settings::{LimitKey, Limits, Rate};

// --------------------------------------------------------------- the key

/// What the gate at accept decided for an admitted connection.
#[derive(Debug)]
pub enum AtAccept {
    /// Admitted on its measured address; the slot is held for its life.
    Admitted(Admitted),
    /// A trusted peer relay: decided after its preface.
    AfterPreface,
}

/// Whose address a connection is admitted on: the measured peer, or (for a
/// trusted peer relay, once the PROXY preface is read) the claimed client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The measured TCP peer: a client, or an untrusted relay.
    Peer(PeerAddr),
    /// The client a trusted peer relay's PROXY header claims.
    Claimed(ClaimedAddr),
}

impl From<PeerAddr> for Source {
    fn from(peer: PeerAddr) -> Self {
        Source::Peer(peer)
    }
}

impl From<ClaimedAddr> for Source {
    fn from(claimed: ClaimedAddr) -> Self {
        Source::Claimed(claimed)
    }
}

impl Source {
    /// The address limits apply to, with IPv4-mapped IPv6 turned into IPv4
    /// so that a dual-stack socket cannot give one client two keys.
    pub(crate) fn ip(self) -> IpAddr {
        let ip = match self {
            Source::Peer(PeerAddr(addr)) | Source::Claimed(ClaimedAddr(addr)) => addr.ip(),
        };
        canonical(ip)
    }
}

/// The per-source table key: a source address cut to its prefix, or (by
/// `limit_key`) a hello's JA4, alone or with that source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceKey {
    /// An IPv4 source cut to `source_prefix_v4` bits.
    V4([u8; 4]),
    /// An IPv6 source cut to `source_prefix_v6` bits.
    V6([u8; 16]),
    /// A hello's JA4 alone (`limit_key = "ja4"`), as a 48-bit hash.
    Ja4(Ja4Key),
    /// An IPv4 source cut to its prefix, with the hello's JA4 (`"source+ja4"`).
    V4Ja4([u8; 4], Ja4Key),
    /// An IPv6 source cut to its prefix, with the hello's JA4 (`"source+ja4"`).
    V6Ja4([u8; 16], Ja4Key),
}

/// A JA4 fingerprint as a table key: 48 bits of a SipHash-1-3 of it with
/// fixed keys (the same on every run), as bytes so the key keeps an
/// alignment of 1. Two JA4s share a key with odds of 2^-48, and a limit
/// then counts them together, nothing worse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ja4Key([u8; 6]);

impl Ja4Key {
    /// The key of `ja4`.
    pub fn new(ja4: &str) -> Ja4Key {
        use std::hash::Hasher;
        let mut hasher = siphasher::sip::SipHasher13::new_with_keys(0, 0);
        hasher.write(ja4.as_bytes());
        let [a, b, c, d, e, f, ..] = hasher.finish().to_be_bytes();
        Ja4Key([a, b, c, d, e, f])
    }
}

impl fmt::Display for Ja4Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ja4#")?;
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl SourceKey {
    /// This key with `ja4` beside its address.
    pub(crate) fn with_ja4(self, ja4: &str) -> SourceKey {
        let ja4 = Ja4Key::new(ja4);
        match self {
            SourceKey::V4(ip) | SourceKey::V4Ja4(ip, _) => SourceKey::V4Ja4(ip, ja4),
            SourceKey::V6(ip) | SourceKey::V6Ja4(ip, _) => SourceKey::V6Ja4(ip, ja4),
            SourceKey::Ja4(_) => SourceKey::Ja4(ja4),
        }
    }

    /// The key of `source`: its address (IPv4-mapped IPv6 as IPv4) with the
    /// bits past `prefix_v4` or `prefix_v6` zeroed.
    pub fn new(source: Source, prefix_v4: u8, prefix_v6: u8) -> SourceKey {
        match source.ip() {
            IpAddr::V4(v4) => {
                SourceKey::V4((u32::from(v4) & cidr::mask32(prefix_v4)).to_be_bytes())
            }
            IpAddr::V6(v6) => {
                SourceKey::V6((u128::from(v6) & cidr::mask128(prefix_v6)).to_be_bytes())
            }
        }
    }
}

impl fmt::Display for SourceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceKey::V4(b) => Ipv4Addr::from(*b).fmt(f),
            SourceKey::V6(b) => Ipv6Addr::from(*b).fmt(f),
            SourceKey::Ja4(ja4) => ja4.fmt(f),
            SourceKey::V4Ja4(b, ja4) => write!(f, "{}+{ja4}", Ipv4Addr::from(*b)),
            SourceKey::V6Ja4(b, ja4) => write!(f, "{}+{ja4}", Ipv6Addr::from(*b)),
        }
    }
}

// -------------------------------------------------------------- decisions

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
    attempts: Option<Arc<AttemptTable<SourceKey, C>>>,
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

// --------------------------------------------------------------- per route

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
                Some(counted.unwrap_or(listed))
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

// ------------------------------------------------------------- rate table

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
struct KeyedGcra<C: Clock> {
    cells: Arc<Cells<C>>,
    t: Nanos,
    tau: Nanos,
    counts_refused: bool,
}

/// The per-key times and the clock they are read from, shared by the
/// generations a reload carries the table over to.
struct Cells<C: Clock> {
    store: DashMapStateStore<SourceKey>,
    clock: C,
    start: C::Instant,
}

impl<C: Clock> KeyedGcra<C> {
    fn new(rate: Rate, clock: C) -> KeyedGcra<C> {
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
    fn with_counts_refused(&self, counts_refused: bool) -> KeyedGcra<C> {
        KeyedGcra {
            cells: self.cells.clone(),
            t: self.t,
            tau: self.tau,
            counts_refused,
        }
    }

    fn now(&self) -> Nanos {
        self.cells.clock.now().duration_since(self.cells.start)
    }

    /// One attempt by `key`: whether it is within the rate.
    fn check(&self, key: &SourceKey) -> bool {
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
    fn sweep(&self) {
        let drop_below = self.now().saturating_sub(self.t);
        self.cells.store.retain_recent(drop_below);
        self.cells.store.shrink_to_fit();
    }

    fn len(&self) -> usize {
        ShrinkableKeyedStateStore::len(&self.cells.store)
    }
}

// ------------------------------------------------------------ source table

/// How long a source with no open connection is remembered after its last
/// attempt when it has been refused (a source that was only admitted is
/// forgotten sooner, see `Admission::forget_after`): long enough for an
/// operator to find who was hammering after the flood stops.
pub const REFUSED_SOURCE_MEMORY: Duration = Duration::from_secs(60);
/// Sources kept with no open connection, at most: past it, a source whose
/// last connection closes is forgotten at once and a refused source not
/// yet in the table is not entered (its refusal is still counted in the
/// listener's counters and metrics). Bounds the table at the keys with
/// open connections plus this many (about 100 bytes each: 6.5 MiB).
pub const MAX_REMEMBERED_SOURCES: usize = 65_536;
/// The window the recent connection rate is measured over (a sliding
/// window estimated from this window's attempts and the previous one's).
pub const RATE_WINDOW: Duration = Duration::from_secs(10);

/// Why a source's attempt was refused (or, under `dry_run`, would have
/// been): the columns of a row's refusals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reason {
    Denied,
    Concurrent,
    Rate,
    DryRunConcurrent,
    DryRunRate,
}

/// The refusal reasons' names in a [`SourceRow`], in its `refused` order:
/// the same words as the listener's counters and close reasons.
pub const REFUSAL_REASONS: [&str; 5] = [
    "denied",
    "limit_concurrent",
    "limit_rate",
    "dry_run_concurrent",
    "dry_run_rate",
];

/// One source as the table knows it.
#[derive(Debug, Default)]
struct SourceEntry {
    /// Open connections (what `connections_per_source` caps).
    open: u32,
    /// Attempts (admitted or refused) since the entry was made or cleared.
    attempts: u64,
    /// Refusals by [`Reason`] (its index).
    refused: [u64; 5],
    /// The last attempt, as time since the table's epoch.
    last_seen: Nanos,
    /// The rate window of `this_window` (time since the epoch divided by
    /// [`RATE_WINDOW`]), and the attempts in it and in the one before.
    window: u64,
    this_window: u32,
    last_window: u32,
    /// The JA4 itself, for an entry keyed by it (`limit_key` with `ja4`),
    /// whose key keeps only a hash: what `/sources` shows.
    ja4: Option<Box<str>>,
}

impl SourceEntry {
    fn touch(&mut self, now: Nanos) {
        self.attempts += 1;
        self.last_seen = now;
        let window = window_of(now);
        if window != self.window {
            self.last_window = if window == self.window + 1 {
                self.this_window
            } else {
                0
            };
            self.this_window = 0;
            self.window = window;
        }
        self.this_window = self.this_window.saturating_add(1);
    }

    fn refusals(&self) -> u64 {
        // Dry-run refusals were admitted: they are not refusals here.
        self.refused[..3].iter().sum()
    }

    /// Attempts per second over the last [`RATE_WINDOW`]: this window's
    /// attempts plus the previous window's, weighted by how much of it the
    /// sliding window still covers.
    fn rate(&self, now: Nanos) -> f64 {
        let window_ns = RATE_WINDOW.as_nanos() as f64;
        let into = (u64::from(now) % RATE_WINDOW.as_nanos() as u64) as f64 / window_ns;
        let (this, last) = match window_of(now) {
            w if w == self.window => (self.this_window, self.last_window),
            w if w == self.window + 1 => (0, self.this_window),
            _ => (0, 0),
        };
        (f64::from(this) + f64::from(last) * (1.0 - into)) / RATE_WINDOW.as_secs_f64()
    }
}

fn window_of(now: Nanos) -> u64 {
    u64::from(now) / RATE_WINDOW.as_nanos() as u64
}

/// One row of the source table, as `GET /sources` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceRow {
    /// The source's key (its address cut to the listener's prefix).
    pub key: SourceKey,
    /// The source's connections open now.
    pub open: u32,
    /// Attempts per second over the last [`RATE_WINDOW`].
    pub rate_per_second: f64,
    /// Attempts that were let in (those refused only in dry run included).
    pub admitted: u64,
    /// Refusals by reason, in [`REFUSAL_REASONS`] order.
    pub refused: [u64; 5],
    /// Since the last attempt.
    pub last_seen_ago: Duration,
    /// The JA4 of a key that has one (`limit_key` with `ja4`; the key
    /// itself keeps a hash of it).
    pub ja4: Option<String>,
}

impl SourceRow {
    /// Real refusals (not dry-run ones).
    pub(crate) fn refused_total(&self) -> u64 {
        self.refused[..3].iter().sum()
    }
}

/// The per-source table: open connections per key, which
/// `connections_per_source` caps, and what an operator sees of each
/// source (`GET /sources`): its attempts, refusals by reason, recent rate
/// and last attempt. This is the limiter's own state, not a copy: the
/// entry the cap reads is the entry the page shows.
///
/// An entry is made at a source's first attempt and kept while it has
/// open connections; after that the sweep forgets it once it has been
/// quiet for `forget_after` (the rate table's window; none without a rate)
/// or, if it was ever refused, for [`REFUSED_SOURCE_MEMORY`]; and never more
/// than [`MAX_REMEMBERED_SOURCES`] entries without an open connection are
/// kept.
///
/// The cap is the caller's (the [`Limits`] of the generation admitting),
/// not the table's: a reload that changes it shares the table, so the
/// counts of connections still open carry over.
///
/// Hot path: one lock, one hash of the 17-byte key and a few integer
/// updates per attempt, as the bare count was; one lock per close.
#[derive(Debug, Default)]
struct SourceTable {
    inner: Mutex<SourceMap>,
}

#[derive(Debug, Default)]
struct SourceMap {
    entries: HashMap<SourceKey, SourceEntry>,
    /// Entries whose `open` is above zero.
    with_open: usize,
}

impl SourceTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, SourceMap> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes a slot for `key`. Returns the guard and whether the key was
    /// under `cap`. Over the cap the count is raised only when `force`
    /// (dry run), so that the reported numbers stay true.
    fn acquire(
        self: &Arc<Self>,
        key: SourceKey,
        ja4: Option<&str>,
        cap: u32,
        force: bool,
        now: Nanos,
    ) -> (SourceGuard, bool) {
        let mut map = self.lock();
        let SourceMap { entries, with_open } = &mut *map;
        let entry = entries.entry(key).or_default();
        if let (None, Some(ja4)) = (&entry.ja4, ja4) {
            entry.ja4 = Some(ja4.into());
        }
        entry.touch(now);
        let under = entry.open < cap;
        if under || force {
            if entry.open == 0 {
                *with_open += 1;
            }
            entry.open += 1;
        }
        drop(map);
        let guard = SourceGuard {
            table: Arc::clone(self),
            key,
            counted: under || force,
        };
        (guard, under)
    }

    /// Counts a refusal of an attempt already entered by `acquire`.
    fn count(&self, key: &SourceKey, reason: Reason) {
        if let Some(entry) = self.lock().entries.get_mut(key) {
            entry.refused[reason as usize] += 1;
        }
    }

    /// An attempt refused before it reached the cap (`deny`): entered
    /// unless the table already remembers its fill of quiet sources.
    fn refused(&self, key: SourceKey, reason: Reason, now: Nanos) {
        let mut map = self.lock();
        let remembered = map.entries.len() - map.with_open;
        let entry = match map.entries.get_mut(&key) {
            Some(entry) => entry,
            None if remembered >= MAX_REMEMBERED_SOURCES => return,
            None => map.entries.entry(key).or_default(),
        };
        entry.touch(now);
        entry.refused[reason as usize] += 1;
    }

    fn release(&self, key: &SourceKey) {
        let mut map = self.lock();
        let SourceMap { entries, with_open } = &mut *map;
        let Some(entry) = entries.get_mut(key) else {
            return;
        };
        entry.open = entry.open.saturating_sub(1);
        if entry.open == 0 {
            *with_open -= 1;
            if entries.len() - *with_open > MAX_REMEMBERED_SOURCES {
                entries.remove(key);
            }
        }
    }

    /// Forgets quiet sources (see the type) and returns spare capacity.
    fn sweep(&self, now: Nanos, forget_after: Nanos) {
        let refused_memory = Nanos::from(REFUSED_SOURCE_MEMORY);
        let mut map = self.lock();
        map.entries.retain(|_, e| {
            let quiet = now.saturating_sub(e.last_seen);
            e.open > 0
                || (e.refusals() > 0 && quiet < refused_memory)
                || (e.refusals() == 0 && quiet < forget_after)
        });
        let entries = &mut map.entries;
        // Keep headroom so a steady load does not reallocate every sweep.
        if entries.capacity() > 64 && entries.capacity() > 4 * entries.len() {
            let keep = 2 * entries.len();
            entries.shrink_to(keep);
        }
    }

    /// Keys with open connections, and slots allocated.
    fn size(&self) -> (usize, usize) {
        let map = self.lock();
        (map.with_open, map.entries.capacity())
    }

    fn len(&self) -> usize {
        self.lock().entries.len()
    }

    fn rows(&self, now: Nanos) -> Vec<SourceRow> {
        let map = self.lock();
        map.entries
            .iter()
            .map(|(key, e)| SourceRow {
                key: *key,
                open: e.open,
                rate_per_second: e.rate(now),
                admitted: e.attempts - e.refusals(),
                refused: e.refused,
                last_seen_ago: now.saturating_sub(e.last_seen).into(),
                ja4: e.ja4.as_deref().map(str::to_owned),
            })
            .collect()
    }

    /// Clears the counters of the key that reads `text`; forgets it when
    /// it has no open connection. Returns the key found.
    fn clear(&self, text: &str) -> Option<SourceKey> {
        let mut map = self.lock();
        let key = *map.entries.keys().find(|k| k.to_string() == text)?;
        let entry = map.entries.get_mut(&key)?;
        if entry.open == 0 {
            map.entries.remove(&key);
        } else {
            *entry = SourceEntry {
                open: entry.open,
                last_seen: entry.last_seen,
                ja4: entry.ja4.take(),
                ..SourceEntry::default()
            };
        }
        Some(key)
    }
}

/// One connection's slot in the source table; released on drop.
pub struct SourceGuard {
    table: Arc<SourceTable>,
    key: SourceKey,
    counted: bool,
}

impl fmt::Debug for SourceGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SourceGuard")
            .field("key", &self.key)
            .finish()
    }
}

impl Drop for SourceGuard {
    fn drop(&mut self) {
        if self.counted {
            self.table.release(&self.key);
        }
    }
}

/// Sweeps a listener's per-source tables every [`SWEEP_INTERVAL`] and logs,
/// at warn, how many connections admission refused (or, in dry run, would
/// have refused) since the last sweep: refusals are logged one by one only
/// at debug, since a flood makes many. Follows `published` (the listener's
/// generation, whose admission state `admission_of` picks out): most
/// reloads carry the state over, and only a new one starts the counts
/// afresh. `sweep_routes` sweeps the generation's route gates (their
/// refusals are counted in metrics, not in this summary). Ends when the listener is gone (the sender dropped) or `stop`
/// fires.
pub(crate) fn spawn_sweeper<T: Send + Sync + 'static>(
    listener: String,
    mut published: watch::Receiver<T>,
    admission_of: fn(&T) -> Arc<Admission>,
    sweep_routes: fn(&T),
    stop: CancellationToken,
) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(SWEEP_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut current = admission_of(&published.borrow_and_update());
        let mut last = current.counters.snapshot();
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
            sweep_routes(&published.borrow());
            let now = current.counters.snapshot();
            let delta = now.refused_since(&last);
            if delta.any_refused() {
                let tracked = current.tracked();
                tracing::warn!(
                    listener = %listener,
                    admitted = delta.admitted,
                    denied = delta.denied,
                    limit_concurrent = delta.limit_concurrent,
                    limit_rate = delta.limit_rate,
                    dry_run_concurrent = delta.dry_run_concurrent,
                    dry_run_rate = delta.dry_run_rate,
                    tracked_sources = tracked
                        .concurrent_keys
                        .max(tracked.rate_keys)
                        .max(tracked.attempt_keys),
                    "admission refused connections"
                );
            }
            last = now;
        }
    });
}

#[cfg(test)]
mod tests;
