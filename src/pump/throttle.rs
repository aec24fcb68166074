//! Bandwidth limits: token buckets of bytes on the relay path (`rate_up`,
//! `rate_down`, `rate_per_source_up`, `rate_per_source_down`, `burst`).
//!
//! A limited connection's relay asks its [`Throttle`] before every read or
//! splice from a source: the buckets of that direction must hold at least
//! a chunk (the read's size, or the burst if smaller, capped at
//! [`MIN_TAKE`]); then up to the read's size is taken from them, the read
//! or splice moves at most that many bytes (the splice path passes it as
//! the splice length, so it stays zero-copy), and [`Throttle::settle`]
//! gives back what the read did not use. So a bucket is never overdrawn
//! and bytes are charged exactly. A direction waits for tokens holding no
//! pipe and no buffer, only its boxed future: the copy path waits in
//! [`Throttle::reserve`] (its buffer is the thread's, never held across an
//! await), the splice path ends its burst and gives its pipe back when
//! [`Throttle::try_take`] finds too few tokens, and the relay then waits in
//! [`Throttle::until_ready`] before leasing a pipe again.
//!
//! The buckets are GCRA cells in governor's state stores: the
//! connection's own ([`InMemoryState`], one atomic) and its source's
//! ([`DashMapStateStore`] keyed by the connection limits' `SourceKey`).
//! governor's `RateLimiter::check_n` is all-or-nothing: it cannot say how
//! many cells are free now, which a splice length needs, nor give unused
//! cells back. The arithmetic is therefore written here, on governor's
//! stores, as `admission::rate::KeyedGcra` does: one compare-and-swap per
//! bucket per take, nanosecond times (one byte is 1e9 / rate ns, computed
//! per take in 128 bits, so fast rates do not round).
//!
//! Per-source buckets live in a [`SourceBuckets`] table per route (or per
//! listener, shared by its routes without their own); a key is dropped by
//! [`SourceBuckets::sweep`] once its bucket is full again (a full bucket
//! is a fresh key), so the table holds at most the sources that moved
//! bytes within the last `burst / rate` seconds plus a sweep interval:
//! bounded by the open connections.
//!
//! Cost: a connection with no limit has no [`Throttle`] (a `None` pointer
//! in its task) and pays one `Option` check per read. A limited one: a
//! boxed `Throttle` (~64 bytes) for its life, two clock reads and two or
//! four compare-and-swaps per read, and one timer per wait.
//!
//! Not here: when a read happens ([`super::direction`], [`super::copy`],
//! [`super::splice`]), where the limits come from (the route table copies
//! them from the configuration's [`crate::config::Bandwidth`] into
//! [`Limits`]), or the metric family of the time waited (the counters are
//! given).

use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use governor::nanos::Nanos;
use governor::state::keyed::{DashMapStateStore, ShrinkableKeyedStateStore};
use governor::state::{InMemoryState, NotKeyed, StateStore};
use prometheus_client::metrics::counter::Counter;

use crate::admission::SourceKey;
use crate::pump::ready::Side;

/// One token bucket of bytes, as plain numbers: `bytes_per_second`, up to
/// `burst` at once (the route table copies a route's settings into it,
/// [`crate::flow::route`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Quota {
    /// The rate, in bytes per second.
    pub bytes_per_second: NonZeroU64,
    /// Bytes that may move at once above the rate.
    pub burst: NonZeroU64,
}

/// A route's bandwidth limits as the throttle takes them. "Up" is client
/// → backend, "down" backend → client; all `None`: no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Limits {
    /// Each connection's own bucket, client → backend.
    pub up: Option<Quota>,
    /// Each connection's own bucket, backend → client.
    pub down: Option<Quota>,
    /// One bucket per source, client → backend.
    pub per_source_up: Option<Quota>,
    /// One bucket per source, backend → client.
    pub per_source_down: Option<Quota>,
    /// The route sets its own per-source rates: its sources get a table of
    /// their own instead of the listener's.
    pub own_per_source: bool,
}

impl Limits {
    /// Whether any bucket is set.
    pub(crate) fn is_limited(&self) -> bool {
        self.up.is_some()
            || self.down.is_some()
            || self.per_source_up.is_some()
            || self.per_source_down.is_some()
    }
}

/// The most a bucket waits to fill before a read: a full read's worth
/// (16 KiB scratch, or a pipe), the burst if smaller, and never more than
/// this, so that a small message on a drained bucket waits for at most
/// this many bytes' time (16 ms at 1 MB/s), while bulk data moves in
/// chunks of at least this much (about 61 wake-ups per second at 1 MB/s).
pub(crate) const MIN_TAKE: u64 = 16 * 1024;

/// The clock every bucket reads: nanoseconds since the first use (never 0
/// once read, since governor's stores take 0 for "no state").
fn now() -> Nanos {
    static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);
    let elapsed = EPOCH.elapsed();
    Nanos::from(elapsed + Duration::from_nanos(1))
}

/// Nanoseconds `bytes` take at `rate` bytes per second, rounded up.
fn nanos_for(bytes: u64, rate: NonZeroU64) -> u64 {
    let ns = (u128::from(bytes) * 1_000_000_000).div_ceil(u128::from(rate.get()));
    u64::try_from(ns).unwrap_or(u64::MAX)
}

/// One bucket's GCRA: what a take of up to `want` bytes (at least `floor`
/// of them) does to a theoretical arrival time `tat`, at `now`. `Ok`: the
/// bytes taken and the new time; `Err`: how long until `floor` are free.
fn take(
    quota: Quota,
    tat: Option<Nanos>,
    now: Nanos,
    want: u64,
    floor: u64,
) -> Result<(u64, Nanos), Duration> {
    let (now, tat) = (now.as_u64(), tat.map_or(0, Nanos::as_u64));
    let tau = nanos_for(quota.burst.get(), quota.bytes_per_second);
    // A bucket is full once its time is not ahead of now: credit beyond
    // the burst is lost.
    let base = tat.max(now);
    let free_ns = (now + tau).saturating_sub(base);
    let free = u64::try_from(
        u128::from(free_ns) * u128::from(quota.bytes_per_second.get()) / 1_000_000_000,
    )
    .unwrap_or(u64::MAX)
    .min(quota.burst.get());
    if free >= floor {
        let taken = want.min(free);
        Ok((
            taken,
            Nanos::from(base + nanos_for(taken, quota.bytes_per_second)),
        ))
    } else {
        let ready_at = (base + nanos_for(floor, quota.bytes_per_second)).saturating_sub(tau);
        Err(Duration::from_nanos(ready_at.saturating_sub(now).max(1)))
    }
}

/// Gives `bytes` back to a bucket (a take the read did not use).
fn give_back<S: StateStore>(store: &S, key: &S::Key, quota: Quota, bytes: u64) {
    if bytes == 0 {
        return;
    }
    let back = nanos_for(bytes, quota.bytes_per_second);
    let _: Result<(), ()> = store.measure_and_replace(key, |tat| {
        let tat = tat.map_or(0, Nanos::as_u64);
        Ok(((), Nanos::from(tat.saturating_sub(back).max(1))))
    });
}

/// Takes from one bucket (see [`take`]).
fn take_from<S: StateStore>(
    store: &S,
    key: &S::Key,
    quota: Quota,
    want: u64,
) -> Result<u64, Duration> {
    let floor = want.min(quota.burst.get()).clamp(1, MIN_TAKE);
    let now = now();
    store.measure_and_replace(key, |tat| take(quota, tat, now, want, floor))
}

/// The per-source buckets of one direction of a route (or of a listener,
/// shared by its routes without their own), keyed like the connection
/// limits.
pub(crate) struct SourceBuckets {
    quota: Quota,
    store: DashMapStateStore<SourceKey>,
}

impl std::fmt::Debug for SourceBuckets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceBuckets")
            .field("quota", &self.quota)
            .field("sources", &self.len())
            .finish()
    }
}

impl SourceBuckets {
    /// An empty table of buckets of `quota`.
    pub(crate) fn new(quota: Quota) -> SourceBuckets {
        SourceBuckets {
            quota,
            store: DashMapStateStore::default(),
        }
    }

    /// Drops the sources whose bucket is full again (as governor's
    /// `retain_recent`: a full bucket is what a new key gets) and returns
    /// the space.
    pub(crate) fn sweep(&self) {
        self.store.retain_recent(now());
        self.store.shrink_to_fit();
    }

    /// Sources with a bucket now.
    pub(crate) fn len(&self) -> usize {
        ShrinkableKeyedStateStore::len(&self.store)
    }
}

/// What the connections of one route share: the limits, the per-source
/// tables and the throttled-time counters. Built per route when the
/// generation is; a reload makes new ones for new connections, and open
/// connections keep theirs.
#[derive(Debug)]
pub(crate) struct RouteThrottle {
    up: Option<Quota>,
    down: Option<Quota>,
    per_source_up: Option<Arc<SourceBuckets>>,
    per_source_down: Option<Arc<SourceBuckets>>,
    /// `snirelay_throttled_seconds_total{listener,route,direction}`.
    throttled_up: Counter<f64, std::sync::atomic::AtomicU64>,
    throttled_down: Counter<f64, std::sync::atomic::AtomicU64>,
}

/// A listener's per-source tables, which its routes without their own
/// `rate_per_source_*` share.
#[derive(Debug, Default, Clone)]
pub(crate) struct ListenerBuckets {
    up: Option<Arc<SourceBuckets>>,
    down: Option<Arc<SourceBuckets>>,
}

impl ListenerBuckets {
    /// The tables of a listener's `limits`.
    pub(crate) fn new(bandwidth: &Limits) -> ListenerBuckets {
        ListenerBuckets {
            up: bandwidth
                .per_source_up
                .map(|q| Arc::new(SourceBuckets::new(q))),
            down: bandwidth
                .per_source_down
                .map(|q| Arc::new(SourceBuckets::new(q))),
        }
    }
}

impl RouteThrottle {
    /// The throttle of a route with `limits` (at least one set, see
    /// [`Limits::is_limited`]), counting the time its connections wait in
    /// `throttled_up` and `throttled_down`. Per-source tables are
    /// `shared`'s (the listener's) unless the route has its own per-source
    /// rates.
    pub(crate) fn new(
        limits: &Limits,
        shared: &ListenerBuckets,
        throttled_up: Counter<f64, AtomicU64>,
        throttled_down: Counter<f64, AtomicU64>,
    ) -> Arc<RouteThrottle> {
        let table = |quota: Option<Quota>, shared: &Option<Arc<SourceBuckets>>| {
            let quota = quota?;
            match shared {
                Some(table) if !limits.own_per_source && table.quota == quota => {
                    Some(table.clone())
                }
                _ => Some(Arc::new(SourceBuckets::new(quota))),
            }
        };
        Arc::new(RouteThrottle {
            up: limits.up,
            down: limits.down,
            per_source_up: table(limits.per_source_up, &shared.up),
            per_source_down: table(limits.per_source_down, &shared.down),
            throttled_up,
            throttled_down,
        })
    }

    /// Sweeps the per-source tables (see [`SourceBuckets::sweep`]).
    pub(crate) fn sweep(&self) {
        for table in [&self.per_source_up, &self.per_source_down]
            .into_iter()
            .flatten()
        {
            table.sweep();
        }
    }

    /// A connection's throttle on this route; `source` keys its per-source
    /// buckets (`None`: a trusted peer's own connection, which counts
    /// against no source, as with the connection limits).
    pub(crate) fn connection(self: &Arc<Self>, source: Option<SourceKey>) -> Throttle {
        Throttle {
            route: self.clone(),
            source,
            up: InMemoryState::default(),
            down: InMemoryState::default(),
            waited_up: AtomicU64::new(0),
            waited_down: AtomicU64::new(0),
        }
    }
}

/// One connection's buckets; `None` in the relay for a connection with
/// no limit.
#[derive(Debug)]
pub(crate) struct Throttle {
    route: Arc<RouteThrottle>,
    source: Option<SourceKey>,
    up: InMemoryState,
    down: InMemoryState,
    /// Nanoseconds each direction waited, for the access line.
    waited_up: AtomicU64,
    waited_down: AtomicU64,
}

/// A reservation: bytes a read may move, from which buckets.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reserved {
    /// The most the read may move.
    pub bytes: usize,
}

impl Throttle {
    /// The connection's own bucket of `side` and its quota.
    fn own(&self, side: Side) -> (Option<Quota>, &InMemoryState) {
        match side {
            Side::Up => (self.route.up, &self.up),
            Side::Down => (self.route.down, &self.down),
        }
    }

    /// The source's bucket table of `side`, if it has one.
    fn shared(&self, side: Side) -> Option<(&SourceBuckets, &SourceKey)> {
        let table = match side {
            Side::Up => self.route.per_source_up.as_deref(),
            Side::Down => self.route.per_source_down.as_deref(),
        }?;
        Some((table, self.source.as_ref()?))
    }

    /// Takes up to `want` bytes from every bucket of `side` now, or says
    /// how long to wait; a partial take from the first bucket is given
    /// back when the second has less.
    fn try_reserve(&self, side: Side, want: u64) -> Result<u64, Duration> {
        let (own_quota, own) = self.own(side);
        let mut granted = want;
        if let Some(quota) = own_quota {
            granted = take_from(own, &NotKeyed::NonKey, quota, granted)?;
        }
        if let Some((table, key)) = self.shared(side) {
            match take_from(&table.store, key, table.quota, granted) {
                Ok(shared) => {
                    if let Some(quota) = own_quota {
                        give_back(own, &NotKeyed::NonKey, quota, granted - shared);
                    }
                    granted = shared;
                }
                Err(wait) => {
                    if let Some(quota) = own_quota {
                        give_back(own, &NotKeyed::NonKey, quota, granted);
                    }
                    return Err(wait);
                }
            }
        }
        Ok(granted)
    }

    /// Waits until `side` may move some bytes, and reserves up to `want`
    /// of them (at least one). The time spent waiting is added to the
    /// route's `snirelay_throttled_seconds_total`.
    pub(crate) async fn reserve(&self, side: Side, want: usize) -> Reserved {
        let want = want as u64;
        let mut waited: Option<Instant> = None;
        let bytes = loop {
            match self.try_reserve(side, want) {
                Ok(bytes) => break bytes,
                Err(wait) => {
                    waited.get_or_insert_with(Instant::now);
                    tokio::time::sleep(wait).await;
                }
            }
        };
        if let Some(since) = waited {
            let (counter, total) = match side {
                Side::Up => (&self.route.throttled_up, &self.waited_up),
                Side::Down => (&self.route.throttled_down, &self.waited_down),
            };
            let waited = since.elapsed();
            counter.inc_by(waited.as_secs_f64());
            total.fetch_add(waited.as_nanos() as u64, Ordering::Relaxed);
        }
        Reserved {
            bytes: usize::try_from(bytes).unwrap_or(usize::MAX),
        }
    }

    /// Takes up to `want` bytes for `side` if its buckets hold a chunk now
    /// (see [`Throttle::reserve`]); `None` without waiting otherwise.
    pub(crate) fn try_take(&self, side: Side, want: usize) -> Option<Reserved> {
        let bytes = self.try_reserve(side, want as u64).ok()?;
        Some(Reserved {
            bytes: usize::try_from(bytes).unwrap_or(usize::MAX),
        })
    }

    /// Waits, holding nothing, until `side`'s buckets hold a chunk (what
    /// [`Throttle::try_take`] needs), and takes nothing.
    pub(crate) async fn until_ready(&self, side: Side) {
        let reserved = self.reserve(side, MIN_TAKE as usize).await;
        self.settle(side, reserved, 0);
    }

    /// How long each direction has waited for tokens so far: (up, down).
    pub(crate) fn waited(&self) -> (Duration, Duration) {
        let read = |n: &AtomicU64| Duration::from_nanos(n.load(Ordering::Relaxed));
        (read(&self.waited_up), read(&self.waited_down))
    }

    /// Gives back what a read reserved with [`Throttle::reserve`] but did
    /// not move.
    pub(crate) fn settle(&self, side: Side, reserved: Reserved, moved: usize) {
        let unused = reserved.bytes.saturating_sub(moved) as u64;
        if unused == 0 {
            return;
        }
        let (own_quota, own) = self.own(side);
        if let Some(quota) = own_quota {
            give_back(own, &NotKeyed::NonKey, quota, unused);
        }
        if let Some((table, key)) = self.shared(side) {
            give_back(&table.store, key, table.quota, unused);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quota(rate: u64, burst: u64) -> Quota {
        Quota {
            bytes_per_second: NonZeroU64::new(rate).unwrap(),
            burst: NonZeroU64::new(burst).unwrap(),
        }
    }

    const S: u64 = 1_000_000_000;

    #[test]
    fn a_fresh_bucket_gives_its_burst_then_the_rate() {
        let q = quota(1000, 500);
        let now = Nanos::from(10 * S);
        // Fresh: the burst, and no more.
        let (taken, tat) = take(q, None, now, 10_000, 1).unwrap();
        assert_eq!(taken, 500);
        // Empty now: 100 bytes are free 100 ms later.
        let wait = take(q, Some(tat), now, 10_000, 100).unwrap_err();
        assert_eq!(wait, Duration::from_millis(100));
        let later = Nanos::from(10 * S + S / 10);
        let (taken, _) = take(q, Some(tat), later, 10_000, 100).unwrap();
        assert_eq!(taken, 100);
    }

    #[test]
    fn a_take_is_at_most_what_was_asked_and_credit_is_capped_at_the_burst() {
        let q = quota(1_000_000, 64_000);
        let now = Nanos::from(100 * S);
        // Long idle: still only the burst.
        let (taken, tat) = take(q, Some(Nanos::from(S)), now, 1_000_000, 1).unwrap();
        assert_eq!(taken, 64_000);
        assert_eq!(tat.as_u64(), 100 * S + 64_000_000);
        let (taken, _) = take(q, None, now, 1_000, 1).unwrap();
        assert_eq!(taken, 1_000);
    }

    #[test]
    fn fast_rates_do_not_round_away() {
        // 3 GB/s: a byte is a third of a nanosecond.
        let q = quota(3_000_000_000, 3_000_000_000);
        let mut tat = None;
        let now = Nanos::from(S);
        let mut total = 0;
        for _ in 0..1000 {
            let (taken, next) = take(q, tat, now, 65_536, 1).unwrap();
            total += taken;
            tat = Some(next);
        }
        assert_eq!(total, 65_536_000);
        // 65.536 MB at 3 GB/s is 21.845 ms of the second's credit (each
        // take rounds up by under a nanosecond).
        assert_eq!(tat.unwrap().as_u64(), S + 21_846_000);
    }

    #[test]
    fn given_back_bytes_can_be_taken_again() {
        let q = quota(1000, 1000);
        let store = InMemoryState::default();
        let taken = take_from(&store, &NotKeyed::NonKey, q, 800).unwrap();
        assert_eq!(taken, 800);
        // 200 left: a take that needs the whole burst waits...
        assert!(take_from(&store, &NotKeyed::NonKey, q, 10_000).is_err());
        // ...until 500 come back (700 free; a few ns of refill on top).
        give_back(&store, &NotKeyed::NonKey, q, 500);
        let taken = take_from(&store, &NotKeyed::NonKey, q, 700).unwrap();
        assert_eq!(taken, 700);
        assert!(take_from(&store, &NotKeyed::NonKey, q, 100).is_err());
    }

    #[test]
    fn a_source_table_forgets_full_buckets_at_the_sweep() {
        let table = SourceBuckets::new(quota(1_000_000, 2_000));
        let key = SourceKey::V4([192, 0, 2, 1]);
        assert_eq!(take_from(&table.store, &key, table.quota, 2_000), Ok(2_000));
        assert_eq!(table.len(), 1);
        // Drained: kept by a sweep now (it is not a fresh bucket)...
        table.sweep();
        assert_eq!(table.len(), 1);
        // ...and dropped once it has refilled (2 KB at 1 MB/s: 2 ms).
        std::thread::sleep(Duration::from_millis(5));
        table.sweep();
        assert_eq!(table.len(), 0);
    }
}
