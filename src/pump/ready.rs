//! What every part of the byte pump shares: the [`Side`] a burst moves,
//! how a burst ended ([`Burst`], [`BurstError`]), the [`Activity`] record
//! (bytes per direction, when a byte last moved) and the readiness helpers
//! `readable` and `writable`.
//!
//! It sits below the rest of the pump: [`super::relay`],
//! [`super::direction`], [`super::copy`] and [`super::splice`] import
//! it and it imports none of them (nor anything else in the crate), so the
//! pump's dependencies run one way. `inspect` waits on a socket with
//! `readable` too, which keeps the wait as small there as it is here.
//!
//! Not here: moving bytes (see [`super::copy`] and [`super::splice`]) or
//! deciding when a connection ends (see [`super::relay`]).
//!
//! Cost: [`Activity`] is three atomics touched per transfer, and an
//! operator's stop (a code and one waker slot, locked once when the relay
//! first waits and once when an operator stops it); the readiness helpers
//! hold no waiter node (see `readable`).

use std::io;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::Instant;

/// Bytes moved so far, by direction.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Transferred {
    /// Client → backend, including the replayed hello.
    pub up: u64,
    /// Backend → client.
    pub down: u64,
}

/// What moved and when: bytes per direction, and when a byte last moved;
/// and whether an operator stopped the connection (the registry's
/// `DELETE /connections`, a route drain, a push of local names).
/// Atomics, so the relay and its boxed bursts can share it without locking.
///
/// The stop lives here, in the registry entry the relay already reads,
/// rather than in a cancellation token of its own: a child token is one
/// more allocation per connection (112 bytes, and a slot in its parent's
/// list), where this is a byte and a waker slot in the entry.
#[derive(Debug)]
pub struct Activity {
    /// Milliseconds since [`epoch`].
    last_ms: AtomicU64,
    up: AtomicU64,
    down: AtomicU64,
    /// Why an operator stopped it (a nonzero code of the registry's); 0
    /// while it runs. The first code given wins.
    stopped_as: AtomicU8,
    /// The waker of the task that waits for the stop, once it has waited.
    stop_waker: Mutex<Option<Waker>>,
}

/// The process-wide origin of [`Activity`] timestamps, so an activity
/// record need not carry its own start `Instant`.
fn epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

impl Default for Activity {
    fn default() -> Self {
        Activity::new()
    }
}

impl Activity {
    /// Starts counting now, as if a byte had just moved.
    pub fn new() -> Self {
        let activity = Activity {
            last_ms: AtomicU64::new(0),
            up: AtomicU64::new(0),
            down: AtomicU64::new(0),
            stopped_as: AtomicU8::new(0),
            stop_waker: Mutex::new(None),
        };
        activity.touch();
        activity
    }

    // Called per transfer from the other pump modules: `#[inline]` keeps
    // these in their callers' codegen units, as when they shared one file.
    #[inline]
    pub(crate) fn touch(&self) {
        let now = epoch().elapsed().as_millis() as u64;
        self.last_ms.store(now, Ordering::Relaxed);
    }

    /// Counts `n` bytes written toward `side`'s destination.
    #[inline]
    pub(crate) fn add(&self, side: Side, n: usize) {
        let counter = match side {
            Side::Up => &self.up,
            Side::Down => &self.down,
        };
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Bytes moved so far.
    pub(crate) fn moved(&self) -> Transferred {
        Transferred {
            up: self.up.load(Ordering::Relaxed),
            down: self.down.load(Ordering::Relaxed),
        }
    }

    /// Bytes moved so far toward `side`'s destination.
    pub(crate) fn on(&self, side: Side) -> u64 {
        match side {
            Side::Up => self.up.load(Ordering::Relaxed),
            Side::Down => self.down.load(Ordering::Relaxed),
        }
    }

    /// When a byte last moved.
    #[inline]
    pub(crate) fn last(&self) -> Instant {
        epoch() + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }

    /// Stops the connection as `code` (nonzero; the first code given
    /// wins) and wakes the task that waits for it, if it has waited.
    pub(crate) fn stop(&self, code: u8) {
        let _ = self
            .stopped_as
            .compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire);
        let waker = lock(&self.stop_waker).take();
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Wakes the task that waits for the stop, if it has waited, without
    /// stopping it (its waker stays): the relay, woken, reads its drain
    /// signal again ([`crate::flow::registry::drains_fired`]).
    pub(crate) fn nudge(&self) {
        if let Some(waker) = lock(&self.stop_waker).as_ref() {
            waker.wake_by_ref();
        }
    }

    /// The code it was stopped as; 0 while it runs.
    #[inline]
    pub(crate) fn stopped_as(&self) -> u8 {
        self.stopped_as.load(Ordering::Acquire)
    }

    /// Ready with the stop's code once stopped; otherwise keeps `cx`'s
    /// waker to be woken by [`stop`](Self::stop). A task that is always
    /// polled with the same waker (a connection's own task) may poll this
    /// once and read [`stopped_as`](Self::stopped_as) after.
    pub(crate) fn poll_stopped(&self, cx: &mut Context<'_>) -> Poll<u8> {
        // The code is read under the lock `stop` takes after setting it:
        // either it is seen here, or `stop` finds this waker.
        let mut slot = lock(&self.stop_waker);
        match self.stopped_as.load(Ordering::Acquire) {
            0 => {
                if !slot.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    *slot = Some(cx.waker().clone());
                }
                Poll::Pending
            }
            code => Poll::Ready(code),
        }
    }

    /// Resolves with the stop's code once stopped (see
    /// [`poll_stopped`](Self::poll_stopped)).
    pub(crate) async fn stopped(&self) -> u8 {
        std::future::poll_fn(|cx| self.poll_stopped(cx)).await
    }
}

/// Milliseconds from the process-wide origin of [`Activity`] stamps to
/// `at` (0 for a moment before it): a moment kept in eight bytes.
pub(crate) fn stamp(at: Instant) -> u64 {
    at.saturating_duration_since(epoch()).as_millis() as u64
}

/// The moment a [`stamp`] stands for.
pub(crate) fn from_stamp(ms: u64) -> Instant {
    epoch() + Duration::from_millis(ms)
}

/// A waker slot's lock; a panic while holding it leaves a valid slot.
fn lock(slot: &Mutex<Option<Waker>>) -> std::sync::MutexGuard<'_, Option<Waker>> {
    slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A direction of the relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// Client → backend.
    Up,
    /// Backend → client.
    Down,
}

/// Waits until `stream` is readable. Unlike `TcpStream::readable`, whose
/// future carries a 152-byte waiter node, this keeps the waker in tokio's
/// per-socket slot, so the idle state of a relay stays small. Only the relay
/// task polls its sockets, so one waker slot per direction is enough.
pub(crate) async fn readable(stream: &TcpStream) -> io::Result<()> {
    std::future::poll_fn(|cx| stream.poll_read_ready(cx)).await
}

/// Waits until `stream` is writable; see [`readable`].
pub(crate) async fn writable(stream: &TcpStream) -> io::Result<()> {
    std::future::poll_fn(|cx| stream.poll_write_ready(cx)).await
}

/// How one burst of a direction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Burst {
    /// The source has nothing more to read for now.
    Idle,
    /// The source sent FIN; everything before it was delivered.
    Eof,
}

/// Which side of a burst failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BurstError {
    #[error("reading the source failed: {0}")]
    Read(io::Error),
    #[error("writing the destination failed: {0}")]
    Write(io::Error),
}
