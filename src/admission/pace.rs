//! `[global] max_connection_rate`: the process's new connections per
//! second, counted as HAProxy 2.6 counts `maxconnrate` (its global
//! `conn_per_sec`, a one-second `freq_ctr`), so that an imported edge
//! accepts when HAProxy would.
//!
//! HAProxy's listener stops accepting while `freq_ctr_remain(&conn_per_sec,
//! maxconnrate, 0)` is 0, that is while this second's accepts plus the
//! previous second's, weighted by the share of it a sliding second still
//! covers, reach the limit ([`FreqCtr::average`]); it then sleeps until
//! the estimate falls below it (`next_event_delay`) and counts each
//! connection it accepts. So `maxconnrate 10` takes 10 at once, then
//! nothing until the second that began with them is over, then one about
//! every 100 ms: 10 in the first second, not the 19 a token bucket of 10
//! lets through (its burst, then one per tenth of a second at once).
//!
//! A TCP accept loop holds a place ([`Pace::reserve`], or sleeps for the
//! wait it is given) before it accepts and counts the connection it
//! accepted on it ([`AcceptPlace::count`]), at the moment it came; a place
//! held counts as taken meanwhile (HAProxy's `pend`), so accept loops on
//! several threads cannot pass the limit together. Clients above the
//! rate wait in the listen backlog; nobody is refused. A QUIC socket task
//! takes a new flow's share with [`Pace::try_take`] and drops the
//! datagram of a flow over it (the client retransmits).
//!
//! Cost: one uncontended mutex hold and a few integer operations per
//! accepted connection; a paced loop computes its wait by a bisection
//! over at most two seconds (11 steps), once per wake-up.
//!
//! Not here: per-source rates ([`super::attempts`], the GCRA in
//! [`super`]) or the concurrency cap (`max_connections`, the accept
//! loops' semaphore).

use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::attempts::FreqCtr;

/// HAProxy's `maxconnrate` period: one second, in milliseconds.
const PERIOD_MS: u64 = 1_000;

/// The process-wide new-connection counter and its limit.
#[derive(Debug)]
pub(crate) struct Pace {
    counted: Mutex<Counted>,
    /// What the counter's milliseconds count from.
    start: Instant,
    /// `max_connection_rate`.
    limit: u64,
}

#[derive(Debug, Default)]
struct Counted {
    /// Connections counted (none yet: `None`).
    ctr: Option<FreqCtr>,
    /// Accept loops that found room and wait in accept (HAProxy's
    /// `pend`): counted as if accepted, so two loops cannot both take
    /// the last place.
    reserved: u64,
}

impl Counted {
    fn average(&self, now: u64) -> u64 {
        self.ctr.map_or(0, |c| c.average(now, PERIOD_MS)) + self.reserved
    }

    fn count(&mut self, now: u64) {
        match self.ctr.as_mut() {
            Some(ctr) => ctr.update(now, PERIOD_MS),
            None => self.ctr = Some(FreqCtr::first(now)),
        }
    }
}

/// A place one accept loop holds while it waits in accept: counted when
/// a connection comes ([`AcceptPlace::count`]), given back when dropped.
#[derive(Debug)]
pub(crate) struct AcceptPlace(Arc<Pace>);

impl AcceptPlace {
    /// Counts the connection accepted on this place.
    pub(crate) fn count(self) {
        let now = self.0.now_ms();
        let mut counted = self.0.lock();
        counted.count(now);
        // `drop(self)` gives the place back.
    }
}

impl Drop for AcceptPlace {
    fn drop(&mut self) {
        let mut counted = self.0.lock();
        counted.reserved = counted.reserved.saturating_sub(1);
    }
}

impl Pace {
    /// A counter for `per_second` new connections, none counted yet.
    pub(crate) fn new(per_second: NonZeroU32) -> Pace {
        Pace {
            counted: Mutex::default(),
            start: Instant::now(),
            limit: u64::from(per_second.get()),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counted> {
        self.counted.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for one more connection now, or how long until there may
    /// be one (`next_event_delay`; at least a millisecond).
    pub(crate) fn reserve(self: &Arc<Self>) -> Result<AcceptPlace, Duration> {
        self.reserve_at(self.now_ms())
    }

    fn reserve_at(self: &Arc<Self>, now: u64) -> Result<AcceptPlace, Duration> {
        let mut counted = self.lock();
        if counted.average(now) < self.limit {
            counted.reserved += 1;
            return Ok(AcceptPlace(self.clone()));
        }
        let room = self.limit.saturating_sub(counted.reserved).max(1);
        let at = counted
            .ctr
            .map_or(now, |c| c.below_at(now, PERIOD_MS, room));
        Err(Duration::from_millis((at - now).max(1)))
    }

    /// Counts one new flow if it is within the rate; `false` (nothing
    /// counted) when it is not.
    pub(crate) fn try_take(&self) -> bool {
        self.try_take_at(self.now_ms())
    }

    fn try_take_at(&self, now: u64) -> bool {
        let mut counted = self.lock();
        if counted.average(now) >= self.limit {
            return false;
        }
        counted.count(now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pace(per_second: u32) -> Arc<Pace> {
        Arc::new(Pace::new(NonZeroU32::new(per_second).unwrap()))
    }

    /// The wait `reserve_at` gives at `now`, or zero with the place
    /// counted at once (an accept that found a client waiting).
    fn take_or_wait(pace: &Arc<Pace>, now: u64) -> Duration {
        match pace.reserve_at(now) {
            Ok(reserved) => {
                let mut counted = pace.lock();
                counted.count(now);
                drop(counted);
                drop(reserved);
                Duration::ZERO
            }
            Err(wait) => wait,
        }
    }

    /// `maxconnrate 10` with clients always waiting: 10 at once, then
    /// nothing until the first second is over, then one every 100 ms.
    #[test]
    fn ten_at_once_then_none_until_the_second_is_over_then_one_a_tenth() {
        let pace = pace(10);
        let mut now = 0;
        let mut accepted = Vec::new();
        while accepted.len() < 15 {
            match take_or_wait(&pace, now) {
                Duration::ZERO => accepted.push(now),
                wait => now += wait.as_millis() as u64,
            }
        }
        assert_eq!(&accepted[..10], &[0; 10]);
        // The 11th: this second's 10 become the previous second's, and
        // 10 · remain / 1000 falls below 10 one millisecond in.
        assert_eq!(accepted[10], 1_001);
        let gaps: Vec<u64> = accepted[10..].windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.iter().all(|g| (90..=110).contains(g)), "{accepted:?}");
        let first_second = accepted.iter().filter(|t| **t < 1_000).count();
        assert_eq!(first_second, 10);
    }

    #[test]
    fn a_quiet_process_accepts_at_once_and_an_idle_one_is_back_to_a_full_second() {
        let pace = pace(3);
        for _ in 0..3 {
            assert_eq!(take_or_wait(&pace, 5), Duration::ZERO);
        }
        assert!(take_or_wait(&pace, 5) > Duration::ZERO);
        // Two seconds later nothing counts any more.
        assert_eq!(take_or_wait(&pace, 2_010), Duration::ZERO);
    }

    /// Two accept loops waiting in accept hold two places: a third finds
    /// none until one is given back, and a place given back unused
    /// counts nothing.
    #[test]
    fn places_held_in_accept_count_until_used_or_given_back() {
        let pace = pace(2);
        let a = pace.reserve_at(0).unwrap();
        let b = pace.reserve_at(0).unwrap();
        assert!(pace.reserve_at(0).is_err());
        assert!(!pace.try_take_at(0));
        drop(b);
        a.count();
        // One counted, one place free again.
        assert!(pace.try_take_at(0));
        assert!(!pace.try_take_at(0));
    }

    #[test]
    fn a_new_flow_over_the_rate_is_not_counted() {
        let pace = pace(2);
        assert!(pace.try_take_at(0));
        assert!(pace.try_take_at(0));
        for _ in 0..100 {
            assert!(!pace.try_take_at(500));
        }
        // The refused flows counted nothing: one second later the
        // estimate is 2 · 999/1000 → 1, room for one.
        assert!(pace.try_take_at(1_001));
        assert!(!pace.try_take_at(1_001));
    }
}
