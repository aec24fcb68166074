//! `attempts_per_source`: a per-key count of connection attempts over a
//! sliding period, computed with the arithmetic of HAProxy 2.6's
//! `conn_rate(<period>)` (its `freq_ctr`), so that a limit imported from
//! `reject if { sc0_conn_rate gt N }` admits and refuses what HAProxy does.
//!
//! Each key keeps a `FreqCtr`: the start of its current period (`tick`,
//! a millisecond), the attempts counted in that period (`curr`) and in the
//! period before (`prev`). An attempt first counts itself
//! (HAProxy's `update_freq_ctr_period`, run by `track-sc0` before any
//! `reject` rule reads the counter), then reads the estimate
//! (`read_freq_ctr_period`), and is refused when the estimate is above the
//! limit (`gt N`):
//!
//! - **rotation**: when `now − tick ≥ period`, `prev = curr`, `curr = 0`
//!   and `tick += period` (the periods stay aligned on the first one);
//!   if `now − tick` is still `≥ period` (two periods or more were
//!   missed), `prev = 0` and `tick = now`. The tick is then made even
//!   (`tick & !1`: HAProxy uses its lowest bit as a lock), so a period may
//!   start one millisecond before the attempt that opened it.
//! - **estimate**: with `remain = tick + period − now` (in `(0, period]`
//!   right after an update), `estimate = ⌊(prev · remain + curr · period)
//!   / period⌋ = curr + ⌊prev · remain / period⌋`: this period's attempts
//!   plus the previous period's weighted by the share of it the sliding
//!   window still covers, rounded down (`div64_32` of a 64-bit product).
//!   Reading a key whose period is over (`remain < 0`) shifts `curr` into
//!   `prev` as a rotation would, and reads 0 once two periods have gone.
//!   HAProxy's flapping correction (`curr == 0 && prev ≤ 1` reads `prev`)
//!   is kept for such reads; the attempt's own read never meets it, since
//!   the attempt has just counted itself.
//!
//! So the k-th attempt of a source's first period reads k: with
//! `attempts_per_source = 30` the first 30 pass and the 31st is refused,
//! however the attempts are spread within the period. A source that keeps
//! retrying at r attempts per period reads about r + 1 and stays refused
//! while r ≥ N; once it stops, the weight of its last period falls with
//! every millisecond and it is admitted again when the estimate reaches N.
//!
//! Where this differs from HAProxy: time is the relay's monotonic clock in
//! milliseconds since the table was made, not HAProxy's wrapping 32-bit
//! `now_ms` updated once per poll loop; the parity of a millisecond (which
//! the even-tick rounding reads) therefore differs between the two, and a
//! new key starts its first period at its first attempt (HAProxy's zeroed
//! entry does the same, except within two periods of its clock's wrap).
//!
//! Memory: 24 bytes in a source's entry of the source table
//! ([`super::table`]), which keeps the entry for two periods after its last
//! attempt (then it reads 0). Hot path: a few integer operations per
//! attempt, under the table's lock.
//!
//! Not here: the table, what is refused with what reason, dry run, or the
//! other limits ([`super::table`], [`super::gate`]).

/// One key's counter, as HAProxy's `struct freq_ctr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FreqCtr {
    /// The start of the current period, in milliseconds (even).
    tick: u64,
    /// Attempts in the current period.
    curr: u32,
    /// Attempts in the period before it.
    prev: u32,
}

impl FreqCtr {
    /// A key's counter after its first attempt at `now` (ms).
    pub(crate) fn first(now: u64) -> FreqCtr {
        FreqCtr {
            tick: now & !1,
            curr: 1,
            prev: 0,
        }
    }

    /// A key's counter before its first attempt at `now` (ms): a period
    /// starting then, nothing counted.
    pub(crate) fn fresh(now: u64) -> FreqCtr {
        FreqCtr {
            tick: now & !1,
            curr: 0,
            prev: 0,
        }
    }

    /// Counts one attempt at `now` (`update_freq_ctr_period(ctr, period, 1)`).
    pub(crate) fn update(&mut self, now: u64, period: u64) {
        if now.saturating_sub(self.tick) >= period {
            self.prev = self.curr;
            self.curr = 0;
            self.tick += period;
            if now.saturating_sub(self.tick) >= period {
                // Two periods or more went by without an attempt.
                self.prev = 0;
                self.tick = now;
            }
            self.tick &= !1;
        }
        self.curr = self.curr.saturating_add(1);
    }

    /// The estimate at `now` (`read_freq_ctr_period`: `freq_ctr_total`
    /// with the flapping correction, divided by the period).
    pub(crate) fn read(&self, now: u64, period: u64) -> u64 {
        let (curr, past, _) = self.shifted(now, period);
        if curr == 0 && past <= 1 {
            return past;
        }
        self.average(now, period)
    }

    /// `freq_ctr_total` divided by the period, without the flapping
    /// correction: what HAProxy's `freq_ctr_remain` compares with a
    /// limit (`maxconnrate`, see [`super::pace`]).
    pub(crate) fn average(&self, now: u64, period: u64) -> u64 {
        let (curr, past, remain) = self.shifted(now, period);
        (past * remain + curr * period) / period
    }

    /// The counts as of `now` (a period that is over shifts `curr` into
    /// `prev`, two read 0) and what is left of the current period.
    fn shifted(&self, now: u64, period: u64) -> (u64, u64, u64) {
        let (mut curr, mut past) = (u64::from(self.curr), u64::from(self.prev));
        let mut remain = i128::from(self.tick) + i128::from(period) - i128::from(now);
        if remain < 0 {
            remain += i128::from(period);
            past = if remain >= 0 { curr } else { 0 };
            curr = 0;
        }
        (curr, past, remain.max(0) as u64)
    }

    /// The first millisecond at or after `now` at which [`Self::average`]
    /// is below `limit` (it only falls while nothing is counted), as
    /// HAProxy's `next_event_delay` waits for. Two periods after the
    /// current one began it reads 0, so the search is bounded.
    pub(crate) fn below_at(&self, now: u64, period: u64, limit: u64) -> u64 {
        if self.average(now, period) < limit {
            return now;
        }
        let (mut lo, mut hi) = (now, self.tick + 2 * period);
        while lo + 1 < hi {
            let mid = lo + (hi - lo) / 2;
            if self.average(mid, period) < limit {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        hi
    }

    /// Whether the counter reads 0 at `now` and stays so: two periods
    /// have passed since its current one began.
    #[cfg(test)]
    fn spent(&self, now: u64, period: u64) -> bool {
        now.saturating_sub(self.tick) >= 2 * period
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The estimate HAProxy's `freq_ctr` gives at each attempt of a
    /// schedule (ms), for a period of 1000 ms.
    fn estimates(times: &[u64]) -> Vec<u64> {
        let mut ctr: Option<FreqCtr> = None;
        times
            .iter()
            .map(|&now| {
                let c = ctr.get_or_insert_with(|| {
                    let mut fresh = FreqCtr::first(now);
                    fresh.curr = 0;
                    fresh
                });
                c.update(now, 1000);
                c.read(now, 1000)
            })
            .collect()
    }

    #[test]
    fn the_k_th_attempt_of_a_first_period_reads_k() {
        let times: Vec<u64> = (0..60).map(|i| i * 930 / 59).collect();
        assert_eq!(estimates(&times), (1..=60).collect::<Vec<_>>());
    }

    #[test]
    fn the_previous_period_is_weighted_by_what_is_left_of_the_window() {
        // 50 attempts in [0, 1000), then one at 1000 + x: it reads
        // 1 + ⌊50 · (1000 − x) / 1000⌋.
        let mut times: Vec<u64> = (0..50).map(|i| i * 20).collect();
        times.push(1400);
        assert_eq!(*estimates(&times).last().unwrap(), 1 + 30);
        times.pop();
        times.push(1401);
        assert_eq!(*estimates(&times).last().unwrap(), 1 + 29);
    }

    #[test]
    fn periods_stay_aligned_and_two_missed_periods_start_afresh() {
        let mut ctr = FreqCtr::first(3);
        assert_eq!(ctr.tick, 2, "the tick is made even");
        ctr.update(1500, 1000);
        assert_eq!((ctr.tick, ctr.prev, ctr.curr), (1002, 1, 1));
        ctr.update(3100, 1000);
        assert_eq!((ctr.tick, ctr.prev, ctr.curr), (3100, 0, 1));
        // Read without an update: the period passed shifts into prev.
        assert_eq!(ctr.read(4600, 1000), 1, "flapping correction: prev ≤ 1");
        ctr.curr = 10;
        assert_eq!(ctr.read(4600, 1000), 10 * 500 / 1000);
        assert_eq!(ctr.read(5100, 1000), 0, "two periods gone");
        assert!(ctr.spent(5100, 1000) && !ctr.spent(5099, 1000));
    }
}
