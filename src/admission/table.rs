//! The source table: one bounded table per listener (and per route with
//! limits) holding every counter of every source in one [`SourceEntry`]
//! (open connections, the rate limit's GCRA time, the `attempts_per_source`
//! counter, what `GET /sources` shows), as HAProxy's stick table keeps a
//! source's counters in one entry; and [`SourceTable::attempt`], which
//! counts one attempt against [`Rules`] under one lock hold; and the RAII
//! [`SourceGuard`] that gives an open connection's count back.
//!
//! Bounds, since a UDP source address (and a JA4) costs an attacker
//! nothing:
//! - the table is split in [`SHARDS`] shards by a keyed SipHash of the
//!   source key (one shard below 1,024 sources), each behind its own mutex;
//! - an entry with an open connection is *held*: never evicted (its count
//!   must stay right), and bounded by the process's connections;
//! - the others are *idle*, kept in least-recently-used order, at most
//!   `max_sources` in all (split evenly over the shards). A new idle entry
//!   in a full shard evicts that shard's least recently used one, counted
//!   in [`SourceTable::evicted`]; so a new source is always tracked, and
//!   what a flood of forged sources pushes out first is what was quiet
//!   longest. Only a source refused by `deny`/`allow` is not entered when
//!   its shard is full (the list decides it again next time; nothing is
//!   lost);
//! - expiry is incremental ([`SourceTable::expire`]): each sweep looks at
//!   most [`EXPIRY_SCAN`] entries from the least recent end of a shard per
//!   lock hold, and goes on only while every entry it looked at had
//!   expired; so no sweep holds a lock for more than a bounded step, however
//!   large the table. Spare capacity is given back once a shard is under a
//!   quarter full (a rehash of one shard, at most `max_sources / 16`
//!   entries).
//!
//! Memory per entry: the 23-byte key and the 104-byte entry in a linked
//! node of 144 bytes, plus a 9-byte slot of the hash table: about 160 bytes
//! (measured with `cargo bench --bench admission`), so 16 MB at the
//! default `max_sources` of 100,000.
//!
//! Not here: which limits apply to a connection and what a refusal means
//! ([`super::gate`]), the counters' arithmetic ([`super::attempts`] for
//! `attempts_per_source`).

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use governor::nanos::Nanos;
use hashlink::LinkedHashMap;

use super::attempts::FreqCtr;
use super::key::SourceKey;
use super::sources::*;

/// Shards of a table of at least [`SHARDED_FROM`] sources.
pub(super) const SHARDS: usize = 16;
/// Below this `max_sources` a table is one shard, so that its bound is
/// exactly `max_sources` rather than rounded per shard.
const SHARDED_FROM: usize = 1024;
/// Entries [`SourceTable::expire`] looks at per lock hold.
pub(super) const EXPIRY_SCAN: usize = 512;

/// The rate limit as the table applies it: a GCRA with emission interval
/// `t` and tolerance `tau` (nanoseconds), as governor computes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Gcra {
    pub(super) t: u64,
    pub(super) tau: u64,
    /// A refused attempt spends a token too (`rate_counts_refused`).
    pub(super) counts_refused: bool,
}

impl Gcra {
    /// One attempt at `now` against the time `tat` (0: a fresh key):
    /// whether it is within the rate. With `counts_refused` a refused
    /// attempt also moves `tat` on by `t`, at most `t` past the point where
    /// the key would be admitted again, so a source that stops is let in
    /// after at most one burst window, never locked out for as long as it
    /// flooded.
    fn check(&self, tat: &mut u64, now: u64) -> bool {
        let (t, tau) = (self.t, self.tau);
        let at = if *tat == 0 { now } else { *tat };
        if now >= at.saturating_sub(tau) {
            *tat = at.max(now) + t;
            true
        } else {
            if self.counts_refused {
                *tat = (at + t).min(now + tau + t);
            }
            false
        }
    }
}

/// The counting limits one key is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Rules {
    /// `connections_per_source` (`u32::MAX` unlimited).
    pub(super) cap: u32,
    pub(super) rate: Option<Gcra>,
    /// `attempts_per_source` and its period in milliseconds.
    pub(super) attempts: Option<(u32, u64)>,
    pub(super) dry_run: bool,
}

/// What [`SourceTable::attempt`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Verdict {
    /// The attempt holds a count in the entry (release it on close).
    pub(super) counted: bool,
    /// The attempt is refused.
    pub(super) refusal: Option<Refusal>,
    /// Under `dry_run`: `connections_per_source` would have refused it.
    pub(super) dry_run_concurrent: bool,
    /// Under `dry_run`: the rate or the attempts would have refused it.
    pub(super) dry_run_rate: bool,
}

impl Verdict {
    /// Under `dry_run`: the refusal the limits would have made.
    pub(super) fn would_refuse(&self) -> Option<Refusal> {
        match (self.dry_run_concurrent, self.dry_run_rate) {
            (true, _) => Some(Refusal::Concurrent),
            (false, true) => Some(Refusal::Rate),
            (false, false) => None,
        }
    }

    fn refused(refusal: Refusal) -> Verdict {
        Verdict {
            counted: false,
            refusal: Some(refusal),
            dry_run_concurrent: false,
            dry_run_rate: false,
        }
    }
}

/// One attempt by the source `entry`, at `now`: attempts counted first (as
/// `track-sc0` counts a connection before a `reject` rule reads it), then
/// `connections_per_source`, then the rate; refusals counted in the entry.
fn decide(entry: &mut SourceEntry, rules: &Rules, now: Nanos) -> Verdict {
    let now_ns = u64::from(now);
    entry.touch(now);
    let within_attempts = rules.attempts.is_none_or(|(limit, period)| {
        let now_ms = now_ns / 1_000_000;
        let counter = entry
            .attempt_counter
            .get_or_insert_with(|| FreqCtr::fresh(now_ms));
        counter.update(now_ms, period);
        counter.read(now_ms, period) <= u64::from(limit)
    });
    let (mut dry_run_concurrent, mut dry_run_rate) = (false, false);
    if entry.open >= rules.cap {
        if !rules.dry_run {
            if let Some(rate) = rules.rate.filter(|r| r.counts_refused) {
                // The attempt counts against the rate, as in HAProxy's
                // conn_rate; the refusal stays `Concurrent`.
                rate.check(&mut entry.tat, now_ns);
            }
            entry.refuse(Reason::Concurrent);
            return Verdict::refused(Refusal::Concurrent);
        }
        entry.refuse(Reason::DryRunConcurrent);
        dry_run_concurrent = true;
    }
    let within_rate = rules
        .rate
        .is_none_or(|rate| rate.check(&mut entry.tat, now_ns));
    if !(within_rate && within_attempts) {
        if !rules.dry_run {
            entry.refuse(Reason::Rate);
            return Verdict::refused(Refusal::Rate);
        }
        entry.refuse(Reason::DryRunRate);
        dry_run_rate = true;
    }
    entry.open += 1;
    Verdict {
        counted: true,
        refusal: None,
        dry_run_concurrent,
        dry_run_rate,
    }
}

/// One shard: the entries with an open connection, and the others in
/// least-recently-used order (front: least recent).
#[derive(Debug)]
struct Shard {
    held: HashMap<SourceKey, SourceEntry, RandomState>,
    idle: LinkedHashMap<SourceKey, SourceEntry, RandomState>,
}

/// The per-source table (see the module header).
///
/// The limits are the caller's ([`Rules`], from the generation admitting),
/// not the table's: a reload that changes them shares the table, so the
/// counts of connections still open carry over.
#[derive(Debug)]
pub(crate) struct SourceTable {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    /// `max_sources` divided over the shards, rounded up.
    idle_per_shard: AtomicUsize,
    evicted: AtomicU64,
}

impl SourceTable {
    /// An empty table that remembers at most `max_sources` idle sources.
    pub(super) fn new(max_sources: u32) -> SourceTable {
        let max = max_sources as usize;
        let shards = if max >= SHARDED_FROM { SHARDS } else { 1 };
        let hasher = RandomState::new();
        SourceTable {
            shards: (0..shards)
                .map(|_| {
                    Mutex::new(Shard {
                        held: HashMap::with_hasher(hasher.clone()),
                        idle: LinkedHashMap::with_hasher(hasher.clone()),
                    })
                })
                .collect(),
            idle_per_shard: AtomicUsize::new(max.div_ceil(shards).max(1)),
            hasher,
            evicted: AtomicU64::new(0),
        }
    }

    /// Sets a new `max_sources` (a reload); a shard over it gives up its
    /// least recently used entries at the next insert or sweep.
    pub(super) fn set_max_sources(&self, max_sources: u32) {
        let per_shard = (max_sources as usize).div_ceil(self.shards.len()).max(1);
        self.idle_per_shard.store(per_shard, Ordering::Relaxed);
    }

    fn shard(&self, key: &SourceKey) -> MutexGuard<'_, Shard> {
        let i = if self.shards.len() == 1 {
            0
        } else {
            (self.hasher.hash_one(key) as usize) % self.shards.len()
        };
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    fn each_shard(&self) -> impl Iterator<Item = MutexGuard<'_, Shard>> {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Evicts `shard`'s least recently used idle entries until at most
    /// `keep` are left, counting them.
    fn trim(&self, shard: &mut Shard, keep: usize) {
        while shard.idle.len() > keep && shard.idle.pop_front().is_some() {
            self.evicted.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Puts `entry` at the most recent end of `shard`'s idle entries,
    /// evicting the least recent ones past the bound.
    fn make_idle(&self, shard: &mut Shard, key: SourceKey, entry: SourceEntry) {
        let bound = self.idle_per_shard.load(Ordering::Relaxed);
        self.trim(shard, bound.saturating_sub(1));
        shard.idle.insert(key, entry);
    }

    /// One attempt by `key` under `rules` at `now` (see [`Verdict`]); `ja4`
    /// is kept in a new entry keyed by it, for `/sources`.
    pub(super) fn attempt(
        &self,
        key: SourceKey,
        ja4: Option<&str>,
        rules: &Rules,
        now: Nanos,
    ) -> Verdict {
        let mut guard = self.shard(&key);
        let shard = &mut *guard;
        if let Some(entry) = shard.held.get_mut(&key) {
            return decide(entry, rules, now);
        }
        let mut entry = shard.idle.remove(&key).unwrap_or_default();
        if let (None, Some(ja4)) = (&entry.ja4, ja4) {
            entry.ja4 = Some(ja4.into());
        }
        let verdict = decide(&mut entry, rules, now);
        if entry.open > 0 {
            shard.held.insert(key, entry);
        } else {
            self.make_idle(shard, key, entry);
        }
        verdict
    }

    /// An attempt refused before any count (`deny`/`allow`): counted in
    /// its entry, entered only if its shard has room.
    pub(super) fn refused(&self, key: SourceKey, reason: Reason, now: Nanos) {
        let bound = self.idle_per_shard.load(Ordering::Relaxed);
        let mut guard = self.shard(&key);
        let shard = &mut *guard;
        let full = shard.idle.len() >= bound;
        let entry = match shard.held.get_mut(&key) {
            Some(entry) => entry,
            None if !shard.idle.contains_key(&key) && full => return,
            None => {
                shard.idle.to_back(&key);
                shard.idle.entry(key).or_insert_with(SourceEntry::default)
            }
        };
        entry.touch(now);
        entry.refuse(reason);
    }

    /// Gives back one open connection's count.
    pub(super) fn release(&self, key: &SourceKey) {
        let mut guard = self.shard(key);
        let shard = &mut *guard;
        let Some(entry) = shard.held.get_mut(key) else {
            return;
        };
        entry.open = entry.open.saturating_sub(1);
        if entry.open == 0 {
            if let Some(entry) = shard.held.remove(key) {
                self.make_idle(shard, *key, entry);
            }
        }
    }

    /// Drops idle entries that have expired (`memory` says how long an
    /// entry is kept after its last attempt), a bounded step per lock hold
    /// (see the module header), trims shards over a lowered bound, and
    /// gives back spare capacity.
    pub(super) fn expire(&self, now: Nanos, memory: impl Fn(&SourceEntry) -> Nanos) {
        let expired = |e: &SourceEntry| now.saturating_sub(e.last_seen) >= memory(e);
        let bound = self.idle_per_shard.load(Ordering::Relaxed);
        for lock in self.shards.iter() {
            loop {
                let mut shard = lock.lock().unwrap_or_else(|e| e.into_inner());
                self.trim(&mut shard, bound);
                let gone: Vec<SourceKey> = shard
                    .idle
                    .iter()
                    .take(EXPIRY_SCAN)
                    .filter(|(_, e)| expired(e))
                    .map(|(k, _)| *k)
                    .collect();
                let all_gone = gone.len() == EXPIRY_SCAN;
                for key in &gone {
                    shard.idle.remove(key);
                }
                if !all_gone {
                    shrink(&mut shard);
                    break;
                }
            }
        }
    }

    /// Applies `forget` to every entry: a reload that changed the rate
    /// forgets the rate state, one that changed `attempts_per_source`'s
    /// count or period the attempt counters.
    pub(super) fn forget(&self, forget: impl Fn(&mut SourceEntry)) {
        for mut shard in self.each_shard() {
            let Shard { held, idle } = &mut *shard;
            held.values_mut().chain(idle.values_mut()).for_each(&forget);
        }
    }

    /// `f` of `key`'s entry, if the table has one (tests).
    #[cfg(test)]
    pub(super) fn read<R>(&self, key: &SourceKey, f: impl FnOnce(&SourceEntry) -> R) -> Option<R> {
        let shard = self.shard(key);
        shard.held.get(key).or_else(|| shard.idle.get(key)).map(f)
    }

    /// Entries evicted at the bound since the table was made.
    pub(crate) fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    /// Keys with open connections, all keys, and slots allocated.
    pub(super) fn size(&self) -> (usize, usize, usize) {
        self.each_shard().fold((0, 0, 0), |(held, all, cap), s| {
            (
                held + s.held.len(),
                all + s.held.len() + s.idle.len(),
                cap + s.held.capacity() + s.idle.capacity(),
            )
        })
    }

    /// The rows `/sources` shows, one per entry.
    pub(super) fn rows(&self, now: Nanos) -> Vec<SourceRow> {
        let mut rows = Vec::new();
        for shard in self.each_shard() {
            rows.extend(
                shard
                    .held
                    .iter()
                    .chain(shard.idle.iter())
                    .map(|(key, e)| e.row(*key, now)),
            );
        }
        rows
    }

    /// Clears the counters of the key that reads `text` (its attempts,
    /// refusals, rate and attempt state); forgets it when it has no open
    /// connection. Returns the key found.
    pub(super) fn clear(&self, text: &str) -> Option<SourceKey> {
        for mut shard in self.each_shard() {
            let found = shard
                .held
                .keys()
                .chain(shard.idle.keys())
                .find(|k| k.to_string() == text)
                .copied();
            let Some(key) = found else { continue };
            if shard.idle.remove(&key).is_none() {
                if let Some(entry) = shard.held.get_mut(&key) {
                    *entry = SourceEntry {
                        open: entry.open,
                        last_seen: entry.last_seen,
                        ja4: entry.ja4.take(),
                        ..SourceEntry::default()
                    };
                }
            }
            return Some(key);
        }
        None
    }
}

/// Gives a shard's spare capacity back once it is under a quarter used
/// (all of it once empty).
fn shrink(shard: &mut Shard) {
    let spare = |capacity: usize, len: usize| capacity > 4 * len && (capacity > 64 || len == 0);
    if spare(shard.idle.capacity(), shard.idle.len()) {
        shard.idle.shrink_to_fit();
    }
    if spare(shard.held.capacity(), shard.held.len()) {
        shard.held.shrink_to_fit();
    }
}

/// One connection's slot in the source table; released on drop. Under a
/// JA4 `limit_key` a connection holds two: its source's and its key's,
/// the first kept in `earlier` (see [`super::Admitted::joined`]).
pub struct SourceGuard {
    pub(super) table: Arc<SourceTable>,
    pub(super) earlier: Option<Box<SourceGuard>>,
    pub(super) key: SourceKey,
    pub(super) counted: bool,
}

impl SourceGuard {
    /// `later` (a slot counted after the hello) holding `earlier` (the
    /// source's, counted at accept) for as long as it lives; whichever is
    /// there when the other is not.
    pub(crate) fn join(
        later: Option<SourceGuard>,
        earlier: Option<SourceGuard>,
    ) -> Option<SourceGuard> {
        match (later, earlier) {
            (Some(mut later), earlier) => {
                later.earlier = earlier.map(Box::new);
                Some(later)
            }
            (None, earlier) => earlier,
        }
    }
}

impl fmt::Debug for SourceGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SourceGuard")
            .field("key", &self.key)
            .field("earlier", &self.earlier)
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
