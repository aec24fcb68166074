//! The source table: open connections per [`SourceKey`] (what
//! `connections_per_source` caps, released by the RAII [`SourceGuard`]),
//! and what the admin listener's `GET /sources` shows of each source
//! ([`SourceRow`]), bounded by [`MAX_REMEMBERED_SOURCES`].
//!
//! Not here: deciding on a connection ([`super::gate`]).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use governor::nanos::Nanos;

use super::key::*;

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
pub(super) enum Reason {
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
pub(super) struct SourceEntry {
    /// Open connections (what `connections_per_source` caps).
    pub(super) open: u32,
    /// Attempts (admitted or refused) since the entry was made or cleared.
    pub(super) attempts: u64,
    /// Refusals by [`Reason`] (its index).
    pub(super) refused: [u64; 5],
    /// The last attempt, as time since the table's epoch.
    pub(super) last_seen: Nanos,
    /// The rate window of `this_window` (time since the epoch divided by
    /// [`RATE_WINDOW`]), and the attempts in it and in the one before.
    pub(super) window: u64,
    pub(super) this_window: u32,
    pub(super) last_window: u32,
    /// The JA4 itself, for an entry keyed by it (`limit_key` with `ja4`),
    /// whose key keeps only a hash: what `/sources` shows.
    pub(super) ja4: Option<Box<str>>,
}

impl SourceEntry {
    pub(super) fn touch(&mut self, now: Nanos) {
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

    pub(super) fn refusals(&self) -> u64 {
        // Dry-run refusals were admitted: they are not refusals here.
        self.refused[..3].iter().sum()
    }

    /// Attempts per second over the last [`RATE_WINDOW`]: this window's
    /// attempts plus the previous window's, weighted by how much of it the
    /// sliding window still covers.
    pub(super) fn rate(&self, now: Nanos) -> f64 {
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

pub(super) fn window_of(now: Nanos) -> u64 {
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
/// The cap is the caller's (the [`Limits`](super::Limits) of the generation admitting),
/// not the table's: a reload that changes it shares the table, so the
/// counts of connections still open carry over.
///
/// Hot path: one lock, one hash of the 17-byte key and a few integer
/// updates per attempt, as the bare count was; one lock per close.
#[derive(Debug, Default)]
pub(super) struct SourceTable {
    pub(super) inner: Mutex<SourceMap>,
}

#[derive(Debug, Default)]
pub(super) struct SourceMap {
    pub(super) entries: HashMap<SourceKey, SourceEntry>,
    /// Entries whose `open` is above zero.
    pub(super) with_open: usize,
}

impl SourceTable {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, SourceMap> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes a slot for `key`. Returns the guard and whether the key was
    /// under `cap`. Over the cap the count is raised only when `force`
    /// (dry run), so that the reported numbers stay true.
    pub(super) fn acquire(
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
    pub(super) fn count(&self, key: &SourceKey, reason: Reason) {
        if let Some(entry) = self.lock().entries.get_mut(key) {
            entry.refused[reason as usize] += 1;
        }
    }

    /// An attempt refused before it reached the cap (`deny`): entered
    /// unless the table already remembers its fill of quiet sources.
    pub(super) fn refused(&self, key: SourceKey, reason: Reason, now: Nanos) {
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

    pub(super) fn release(&self, key: &SourceKey) {
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
    pub(super) fn sweep(&self, now: Nanos, forget_after: Nanos) {
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
    pub(super) fn size(&self) -> (usize, usize) {
        let map = self.lock();
        (map.with_open, map.entries.capacity())
    }

    pub(super) fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub(super) fn rows(&self, now: Nanos) -> Vec<SourceRow> {
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
    pub(super) fn clear(&self, text: &str) -> Option<SourceKey> {
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
    pub(super) table: Arc<SourceTable>,
    pub(super) key: SourceKey,
    pub(super) counted: bool,
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
