//! The bounds on one cluster backend's lookups (issue 49): how many run at
//! once (`max_lookups_in_flight`, a semaphore whose permit a lookup holds
//! until it finished) and how many names with no answer to serve are
//! looked up per second (`new_names_per_second`, a token bucket of one
//! second's worth, full at start). A server name costs a client nothing,
//! so without them a flood of random names is a flood of lookups at the
//! control plane.
//!
//! The caller decides what counts as new: a name with a fresh or
//! stale-servable answer never takes a token, only a permit (its refresh).
//! Checked in that order, so a refusal by the rate gives the permit back
//! and a refusal by the permits spends no token.
//!
//! Not here: what a refusal means for the connection (closed
//! `lookup_limited`, or served its stale answer: [`super::Cache::lookup`]).
//!
//! Cost: an atomic try-acquire, and for a new name a short mutex section
//! (two floats and an instant); 80-odd bytes per backend.

use std::sync::{Mutex, PoisonError};

use prometheus_client::metrics::counter::Counter;
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::Instant;

use crate::metrics;

/// Which bound refused a lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limited {
    /// `max_lookups_in_flight` lookups already run.
    InFlight,
    /// `new_names_per_second` is spent.
    NewNames,
}

impl Limited {
    /// The metric label and log word.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Limited::InFlight => "in_flight",
            Limited::NewNames => "new_names",
        }
    }
}

/// Tokens for new names: `rate` per second, at most `rate` held.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// One cluster backend's lookup bounds and their refusal counters.
#[derive(Debug)]
pub(crate) struct Limits {
    in_flight: Semaphore,
    rate: f64,
    bucket: Mutex<Bucket>,
    refused_in_flight: Counter,
    refused_new_names: Counter,
}

impl Limits {
    /// `max_in_flight` lookups at once, `rate` new names per second;
    /// refusals counted under `backend`.
    pub(crate) fn new(backend: &str, max_in_flight: usize, rate: u32, now: Instant) -> Limits {
        let rate = f64::from(rate.max(1));
        Limits {
            in_flight: Semaphore::new(max_in_flight.max(1)),
            rate,
            bucket: Mutex::new(Bucket {
                tokens: rate,
                at: now,
            }),
            refused_in_flight: metrics::metrics()
                .lookups_limited(backend, Limited::InFlight.as_str()),
            refused_new_names: metrics::metrics()
                .lookups_limited(backend, Limited::NewNames.as_str()),
        }
    }

    /// A permit for one lookup, held until it finished; for a `new_name`
    /// (no answer to serve) a token too. A refusal is counted.
    pub(crate) fn admit(
        &self,
        new_name: bool,
        now: Instant,
    ) -> Result<SemaphorePermit<'_>, Limited> {
        let Ok(permit) = self.in_flight.try_acquire() else {
            self.refused_in_flight.inc();
            return Err(Limited::InFlight);
        };
        if new_name && !self.take_token(now) {
            self.refused_new_names.inc();
            return Err(Limited::NewNames);
        }
        Ok(permit)
    }

    /// Takes a token if one is there.
    fn take_token(&self, now: Instant) -> bool {
        let mut bucket = self.bucket.lock().unwrap_or_else(PoisonError::into_inner);
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * self.rate).min(self.rate);
        bucket.at = bucket.at.max(now);
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Lookups running now (for tests).
    #[cfg(test)]
    pub(crate) fn running(&self, max_in_flight: usize) -> usize {
        max_in_flight - self.in_flight.available_permits()
    }
}
