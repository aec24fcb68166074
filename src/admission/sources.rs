//! What the source table keeps of one source ([`SourceEntry`]: its open
//! connections, its rate and attempt state, what `GET /sources` shows),
//! the row that page shows of it ([`SourceRow`]), and the words of a
//! refusal ([`Refusal`] and the per-entry [`Reason`]).
//!
//! Not here: the table, its bounds and the guard that holds a count
//! ([`super::table`]), deciding on a connection ([`super::gate`]).

use std::time::Duration;

use governor::nanos::Nanos;

use super::attempts::FreqCtr;
use super::key::*;
use crate::close_reason::CloseReason;

/// How long a source with no open connection is remembered after its last
/// attempt when it has been refused (a source that was only admitted is
/// forgotten sooner, see `Admission::forget_after`): long enough for an
/// operator to find who was hammering after the flood stops.
pub const REFUSED_SOURCE_MEMORY: Duration = Duration::from_secs(60);
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

/// One source as the table knows it: every counter of every limit in one
/// entry, as an HAProxy stick-table entry keeps a source's counters.
#[derive(Debug, Default)]
pub(super) struct SourceEntry {
    /// The last attempt, as time since the table's epoch.
    pub(super) last_seen: Nanos,
    /// The rate limit's theoretical arrival time (GCRA), in nanoseconds
    /// since the epoch; 0 reads as a fresh key's.
    pub(super) tat: u64,
    /// `attempts_per_source`'s counter; `None` before the first attempt.
    pub(super) attempt_counter: Option<FreqCtr>,
    /// The JA4 itself, for an entry keyed by it (`limit_key` with `ja4`),
    /// whose key keeps only a hash: what `/sources` shows.
    pub(super) ja4: Option<Box<str>>,
    /// Attempts (admitted or refused) since the entry was made or cleared.
    pub(super) attempts: u64,
    /// Refusals by [`Reason`] (its index).
    pub(super) refused: [u32; 5],
    /// Open connections (what `connections_per_source` caps).
    pub(super) open: u32,
    /// The rate window of `this_window` (time since the epoch divided by
    /// [`RATE_WINDOW`]), and the attempts in it and in the one before.
    pub(super) window: u32,
    pub(super) this_window: u32,
    pub(super) last_window: u32,
}

impl SourceEntry {
    pub(super) fn touch(&mut self, now: Nanos) {
        self.attempts += 1;
        self.last_seen = now;
        let window = window_of(now) as u32;
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
        self.refused[..3].iter().map(|&n| u64::from(n)).sum()
    }

    /// What `/sources` shows of this entry, keyed `key`.
    pub(super) fn row(&self, key: SourceKey, now: Nanos) -> SourceRow {
        SourceRow {
            key,
            open: self.open,
            rate_per_second: self.rate(now),
            admitted: self.attempts - self.refusals(),
            refused: self.refused,
            last_seen_ago: now.saturating_sub(self.last_seen).into(),
            ja4: self.ja4.as_deref().map(str::to_owned),
        }
    }

    /// Counts one refusal (or dry-run refusal) for `reason`.
    pub(super) fn refuse(&mut self, reason: Reason) {
        let n = &mut self.refused[reason as usize];
        *n = n.saturating_add(1);
    }

    /// Attempts per second over the last [`RATE_WINDOW`]: this window's
    /// attempts plus the previous window's, weighted by how much of it the
    /// sliding window still covers.
    pub(super) fn rate(&self, now: Nanos) -> f64 {
        let window_ns = RATE_WINDOW.as_nanos() as f64;
        let into = (u64::from(now) % RATE_WINDOW.as_nanos() as u64) as f64 / window_ns;
        let (this, last) = match window_of(now) {
            w if w == u64::from(self.window) => (self.this_window, self.last_window),
            w if w == u64::from(self.window) + 1 => (0, self.this_window),
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
    pub refused: [u32; 5],
    /// Since the last attempt.
    pub last_seen_ago: Duration,
    /// The JA4 of a key that has one (`limit_key` with `ja4`; the key
    /// itself keeps a hash of it).
    pub ja4: Option<String>,
}

impl SourceRow {
    /// Real refusals (not dry-run ones).
    pub(crate) fn refused_total(&self) -> u64 {
        self.refused[..3].iter().map(|&n| u64::from(n)).sum()
    }
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
