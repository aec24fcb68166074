//! The name table of one cluster backend's cache: each name's
//! [`NameSlot`] (its cached answer and the lock its lookup in flight
//! holds), in two partitions so that names that did not resolve can never
//! push out the answers of names that did (issue 49):
//!
//! - **answered**: names whose last answer sends connections somewhere
//!   (another node, or this one), fresh or only stale-servable: at most
//!   [`MAX_ENTRIES`]. Room is made here only when an answer is promoted
//!   into it, so only another answer can evict one.
//! - **unanswered**: new names (their first lookup not finished), names
//!   the cluster knows no node for, refused answers, failed lookups with
//!   nothing to serve: at most [`MAX_UNANSWERED`]. A new name takes its
//!   place here, and room is made among these only.
//!
//! A name moves between them when a lookup finished ([`Table::settle`]).
//! When a partition is full: its entries that can no longer serve go, and
//! if that frees less than a batch ([`EVICT_BATCH`] among the answered,
//! [`UNANSWERED_BATCH`] among the unanswered), the live ones that expire
//! soonest until it does: one O(n) sweep per batch of new names, never one
//! per name. Entries with a lookup in flight stay; there
//! are at most `max_lookups_in_flight` of them (at most 1,000, below
//! either share), so a sweep always frees room.
//!
//! Memory per name: the shared [`NameSlot`] (152 B and a 16 B `Arc`
//! header: the entry's instants, its answer's three shared slices, the
//! lookup lock), the key (16 B and the name's bytes) and its map slot
//! (25 B, at most 7/8 full): about 250 B for a name without an answer.
//! An answer adds its endpoints (56 B each, and their shared state, about
//! 100 B) and their places: about 200 B for a one-endpoint answer. So at
//! most ~4.5 MB answered and ~0.6 MB unanswered per backend when both
//! shares are full of one-endpoint answers.
//!
//! Not here: what a lookup does, what the answer means for a connection,
//! or whether a lookup may run ([`super::limit`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use prometheus_client::metrics::counter::Counter;
use tokio::time::Instant;

use super::CachedAnswer;

/// Names with an answer cached per cluster backend.
pub(crate) const MAX_ENTRIES: usize = 10_000;
/// Names without one (pending, negative, failed) cached per cluster
/// backend.
pub(crate) const MAX_UNANSWERED: usize = MAX_ENTRIES / 4;
/// Answered entries dropped at once when that partition is full of live
/// answers.
pub(crate) const EVICT_BATCH: usize = MAX_ENTRIES / 8;
/// Unanswered entries dropped at once when that share is full.
pub(crate) const UNANSWERED_BATCH: usize = MAX_UNANSWERED / 8;

/// One name's cached answer, how long it is served, and the state of its
/// lookups.
#[derive(Debug)]
pub(crate) struct CacheEntry {
    /// The answer to serve; `None` until the first lookup finished.
    pub(crate) stored: Option<CachedAnswer>,
    /// Until then `stored` is served without a lookup.
    pub(crate) fresh_until: Instant,
    /// Until then `stored` is served when a lookup fails.
    pub(crate) stale_until: Instant,
    /// Bumped by every finished lookup: a connection that waited for the
    /// lookup in flight sees it changed and takes the outcome as it is.
    pub(crate) generation: u64,
    /// In a streak of failed lookups (warned once).
    pub(crate) failing: bool,
}

impl CacheEntry {
    /// Whether the stored answer sends connections somewhere: another
    /// node (with an allowed address) or this one.
    pub(crate) fn answered(&self) -> bool {
        match &self.stored {
            Some(CachedAnswer::Here) => true,
            Some(CachedAnswer::Nodes { set, mine, .. }) => *mine || !set.is_empty(),
            Some(CachedAnswer::NoNode) | None => false,
        }
    }

    /// Whether an answer is there to serve at `now`, fresh or stale.
    pub(crate) fn servable(&self, now: Instant) -> bool {
        self.stored.is_some() && (now < self.fresh_until || now < self.stale_until)
    }
}

/// One name's place in the cache: its entry, and the lock its lookup in
/// flight holds.
#[derive(Debug)]
pub(crate) struct NameSlot {
    entry: Mutex<CacheEntry>,
    /// Held by the connection doing this name's lookup.
    pub(crate) flight: tokio::sync::Mutex<()>,
}

impl NameSlot {
    pub(crate) fn new(now: Instant) -> NameSlot {
        NameSlot {
            entry: Mutex::new(CacheEntry {
                stored: None,
                fresh_until: now,
                stale_until: now,
                generation: 0,
                failing: false,
            }),
            flight: tokio::sync::Mutex::new(()),
        }
    }

    pub(crate) fn entry(&self) -> MutexGuard<'_, CacheEntry> {
        self.entry.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn in_flight(&self) -> bool {
        self.flight.try_lock().is_err()
    }
}

type Slots = HashMap<Box<str>, Arc<NameSlot>>;

/// The two partitions. Lock order: the table, then an entry; never the
/// table while an entry is held.
#[derive(Debug, Default)]
pub(crate) struct Table {
    answered: Slots,
    unanswered: Slots,
    /// Names each share evicted (`snirelay_cluster_cache_evicted_total`).
    evicted_answered: Counter,
    evicted_unanswered: Counter,
}

impl Table {
    /// An empty table whose evictions count in `backend`'s series.
    pub(crate) fn counted(backend: &str) -> Table {
        let metrics = crate::metrics::metrics();
        Table {
            evicted_answered: metrics.cluster_cache_evicted(backend, "answered"),
            evicted_unanswered: metrics.cluster_cache_evicted(backend, "unanswered"),
            ..Table::default()
        }
    }

    /// The slot of `name`, if cached.
    pub(crate) fn get(&self, name: &str) -> Option<&Arc<NameSlot>> {
        self.answered
            .get(name)
            .or_else(|| self.unanswered.get(name))
    }

    /// The slot of `name`: the cached one, or a new one among the
    /// unanswered (room made there if that share is full).
    pub(crate) fn get_or_insert(&mut self, name: &str, now: Instant) -> Arc<NameSlot> {
        if let Some(slot) = self.get(name) {
            return slot.clone();
        }
        if self.unanswered.len() >= MAX_UNANSWERED {
            let gone = evict(&mut self.unanswered, MAX_UNANSWERED, UNANSWERED_BATCH, now);
            self.evicted_unanswered.inc_by(gone);
        }
        let slot = Arc::new(NameSlot::new(now));
        self.unanswered.insert(name.into(), slot.clone());
        slot
    }

    /// Puts `name` in the partition its answer now belongs to, after a
    /// lookup of `slot` finished; promoting an answer makes room among the
    /// answered if needed. A name no longer cached as `slot` (forgotten,
    /// or evicted and cached anew) is left as it is.
    pub(crate) fn settle(&mut self, name: &str, slot: &Arc<NameSlot>, now: Instant) {
        let answered = slot.entry().answered();
        let (from, to, bound, batch, evicted) = if answered {
            (
                &mut self.unanswered,
                &mut self.answered,
                MAX_ENTRIES,
                EVICT_BATCH,
                &self.evicted_answered,
            )
        } else {
            (
                &mut self.answered,
                &mut self.unanswered,
                MAX_UNANSWERED,
                UNANSWERED_BATCH,
                &self.evicted_unanswered,
            )
        };
        if !from.get(name).is_some_and(|s| Arc::ptr_eq(s, slot)) {
            return;
        }
        if to.len() >= bound {
            evicted.inc_by(evict(to, bound, batch, now));
        }
        if let Some((key, slot)) = from.remove_entry(name) {
            to.insert(key, slot);
        }
    }

    /// Drops `name`; whether it was cached.
    pub(crate) fn remove(&mut self, name: &str) -> bool {
        self.answered.remove(name).is_some() || self.unanswered.remove(name).is_some()
    }

    /// Names cached, answered and not.
    pub(crate) fn len(&self) -> usize {
        self.answered.len() + self.unanswered.len()
    }

    /// Names cached with an answer.
    #[cfg(test)]
    pub(crate) fn answered_len(&self) -> usize {
        self.answered.len()
    }

    /// Every slot, answered first.
    pub(crate) fn slots(&self) -> impl Iterator<Item = &Arc<NameSlot>> {
        self.answered.values().chain(self.unanswered.values())
    }

    /// Whether `name` is cached among the answered.
    #[cfg(test)]
    pub(crate) fn is_answered(&self, name: &str) -> bool {
        self.answered.contains_key(name)
    }
}

/// Makes room in a full partition of `bound` entries for `batch` new ones
/// ([`EVICT_BATCH`], [`UNANSWERED_BATCH`]): drops
/// entries that can no longer serve, then, if fewer than a batch went, the
/// live ones that expire soonest until a batch is free. So each sweep
/// frees at least a batch, and the next one comes a batch of names later.
/// Entries with a lookup in flight stay. Returns how many went.
fn evict(slots: &mut Slots, bound: usize, batch: usize, now: Instant) -> u64 {
    let before = slots.len();
    let target = bound.saturating_sub(batch);
    slots.retain(|_, slot| slot.in_flight() || slot.entry().servable(now));
    let gone = |slots: &Slots| (before - slots.len()) as u64;
    if slots.len() <= target {
        return gone(slots);
    }
    let mut by_expiry: Vec<(Instant, Box<str>)> = slots
        .iter()
        .filter(|(_, slot)| !slot.in_flight())
        .map(|(name, slot)| (slot.entry().fresh_until, name.clone()))
        .collect();
    let excess = (slots.len() - target).min(by_expiry.len());
    if excess == 0 {
        return gone(slots);
    }
    by_expiry.select_nth_unstable_by_key(excess - 1, |(at, _)| *at);
    for (_, name) in &by_expiry[..excess] {
        slots.remove(name);
    }
    gone(slots)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A share at its bound makes room and counts every name it dropped in
    /// `snirelay_cluster_cache_evicted_total`.
    #[test]
    fn a_full_share_counts_what_it_evicts() {
        let mut table = Table::counted("table-eviction-count");
        let now = Instant::now();
        for i in 0..=MAX_UNANSWERED {
            table.get_or_insert(&format!("n{i}.example.com"), now);
        }
        let evicted = crate::metrics::metrics()
            .cluster_cache_evicted("table-eviction-count", "unanswered")
            .get();
        assert!(table.unanswered.len() <= MAX_UNANSWERED);
        assert_eq!(
            evicted,
            (MAX_UNANSWERED + 1 - table.unanswered.len()) as u64
        );
        assert!(evicted >= UNANSWERED_BATCH as u64);
    }
}
