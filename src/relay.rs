//! The relay: bytes both ways between client and backend until both sides
//! are done.
//!
//! Half-close is propagated, not turned into a teardown: when one side sends
//! FIN, the relay shuts down writing toward the other side and keeps the
//! opposite direction flowing until it ends too. The connection is closed
//! early only when a side fails (reset, write error), when no byte moved in
//! either direction for `idle_timeout`, when the route's drain reaches this
//! connection's moment, or when the shutdown token fires.
//!
//! [`Relay`] is a hand-written future, not an `async fn`: it is what every
//! open connection's task holds for its whole life, so its state is laid
//! out by hand (about 400 bytes: two direction slots, one timer and two
//! cancellation waiters) instead of by the compiler's coroutine layout,
//! which kept almost twice that. One timer serves both the idle timeout and
//! the drain moment; it sleeps until the earliest moment the connection
//! could be idle and re-arms itself, so no timer is reset per read. Idle
//! accounting and byte counts live in [`Activity`], atomics touched per
//! transfer.
//!
//! Each direction moves data in bursts: it waits for its source to be
//! readable while holding nothing, then reads once into the worker thread's
//! 16 KiB scratch buffer and writes that straight on. Small messages (TLS
//! handshakes, interactive traffic) cost just that read and write, as with
//! HAProxy's `splice-auto`. A read that fills the scratch buffer means bulk
//! data: the rest of the burst then goes through a kernel pipe with
//! splice(2) (see `splice`), or, with `splice = false` or no pipe free,
//! through more scratch reads, in a boxed future that lives only for the
//! burst. When the source is drained the burst ends and the pipe goes back
//! to the pool. An idle connection therefore pins its two sockets and its
//! task, nothing more.
//!
//! Cost: no allocation for a small message; one boxed future per bulk
//! burst. The scratch buffer is per thread and never held across an await.
//! Only bytes the destination could not take at once are copied into a heap
//! buffer until written.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep, sleep_until};
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::close::CloseReason;
use crate::drain::DrainGuard;
use crate::{sockopt, splice};

thread_local! {
    /// Per worker thread; borrowed only inside synchronous sections.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0; COPY_BUFFER]);
}

/// Bytes copied per read.
const COPY_BUFFER: usize = 16 * 1024;

/// Bytes moved so far, by direction.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Transferred {
    /// Client → backend, including the replayed hello.
    pub up: u64,
    /// Backend → client.
    pub down: u64,
}

/// Which side of a direction failed.
#[derive(Debug, Clone, Copy)]
enum Failure {
    Client,
    Backend,
}

impl From<Failure> for CloseReason {
    fn from(f: Failure) -> Self {
        match f {
            Failure::Client => CloseReason::ClientReset,
            Failure::Backend => CloseReason::BackendReset,
        }
    }
}

/// What moved and when: bytes per direction, and when a byte last moved.
/// Atomics, so the relay and its boxed bursts can share it without locking.
#[derive(Debug)]
pub struct Activity {
    /// Milliseconds since [`epoch`].
    last_ms: AtomicU64,
    up: AtomicU64,
    down: AtomicU64,
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
        };
        activity.touch();
        activity
    }

    pub(crate) fn touch(&self) {
        let now = epoch().elapsed().as_millis() as u64;
        self.last_ms.store(now, Ordering::Relaxed);
    }

    /// Counts `n` bytes written toward `side`'s destination.
    pub(crate) fn add(&self, side: Side, n: usize) {
        let counter = match side {
            Side::Up => &self.up,
            Side::Down => &self.down,
        };
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Bytes moved so far.
    pub fn moved(&self) -> Transferred {
        Transferred {
            up: self.up.load(Ordering::Relaxed),
            down: self.down.load(Ordering::Relaxed),
        }
    }

    fn last(&self) -> Instant {
        epoch() + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }
}

/// A direction of the relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
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
pub enum Burst {
    /// The source has nothing more to read for now.
    Idle,
    /// The source sent FIN; everything before it was delivered.
    Eof,
}

/// Which side of a burst failed.
#[derive(Debug, thiserror::Error)]
pub enum BurstError {
    #[error("reading the source failed: {0}")]
    Read(io::Error),
    #[error("writing the destination failed: {0}")]
    Write(io::Error),
}

/// A boxed burst: what a direction holds while it moves bulk data.
type BurstFuture<'a> = Pin<Box<dyn Future<Output = Result<Burst, BurstError>> + Send + 'a>>;

/// One direction's slot in [`Relay`].
struct Direction<'a> {
    side: Side,
    /// The bulk burst in progress, if any.
    burst: Option<BurstFuture<'a>>,
    done: bool,
}

impl<'a> Direction<'a> {
    fn new(side: Side) -> Self {
        Direction {
            side,
            burst: None,
            done: false,
        }
    }

    /// The failures of this direction's reader and writer.
    fn failures(&self) -> (Failure, Failure) {
        match self.side {
            Side::Up => (Failure::Client, Failure::Backend),
            Side::Down => (Failure::Backend, Failure::Client),
        }
    }

    /// Moves data until the source is drained (Pending) or sent FIN (Ready).
    fn poll_move(
        &mut self,
        cx: &mut Context<'_>,
        (from, to): (&'a TcpStream, &'a TcpStream),
        activity: &'a Activity,
        pipes: Option<&'static splice::PipePool>,
    ) -> Poll<Result<(), Failure>> {
        let (reader, writer) = self.failures();
        let side = self.side;
        loop {
            if let Some(burst) = &mut self.burst {
                let outcome = ready!(burst.as_mut().poll(cx));
                self.burst = None;
                match outcome {
                    Ok(Burst::Idle) => {}
                    // Half-close: the other direction keeps flowing.
                    Ok(Burst::Eof) => return Poll::Ready(Ok(())),
                    Err(BurstError::Read(_)) => return Poll::Ready(Err(reader)),
                    Err(BurstError::Write(_)) => return Poll::Ready(Err(writer)),
                }
            }
            // Holding nothing while the source is quiet. This also spends
            // the task's cooperative budget, so a busy direction yields.
            if ready!(from.poll_read_ready(cx)).is_err() {
                return Poll::Ready(Err(reader));
            }
            match copy_once(from, to, side, activity) {
                // Bulk data: move the rest of the burst through a pipe.
                Ok(Copied::Full) => {
                    self.burst = Some(Box::pin(bulk(from, to, side, pipes, activity)));
                }
                Ok(Copied::Stuck(rest)) => {
                    self.burst = Some(Box::pin(async move {
                        write_rest(to, rest, side, activity).await?;
                        Ok(Burst::Idle)
                    }));
                }
                // A short read drained the source (readiness is cleared), so
                // the next `poll_read_ready` waits; after a stale wake-up it
                // also does.
                Ok(Copied::Partial | Copied::Idle) => {}
                Ok(Copied::Eof) => return Poll::Ready(Ok(())),
                Err(BurstError::Read(_)) => return Poll::Ready(Err(reader)),
                Err(BurstError::Write(_)) => return Poll::Ready(Err(writer)),
            }
        }
    }
}

pin_project_lite::pin_project! {
    /// Relays both ways until both directions have ended, a side fails,
    /// nothing moved for `idle`, `cancel` fires (shutdown) or the drain
    /// reaches this connection's moment. See [`relay`].
    pub struct Relay<'a> {
        client: &'a TcpStream,
        backend: &'a TcpStream,
        up: Direction<'a>,
        down: Direction<'a>,
        activity: &'a Activity,
        pipes: Option<&'static splice::PipePool>,
        idle: Duration,
        drain: &'a DrainGuard,
        seed: u64,
        drain_at: Option<Instant>,
        // Wakes at the earliest moment the connection could be idle, or at
        // its drain moment, whichever comes first.
        #[pin]
        timer: Sleep,
        #[pin]
        drain_fired: WaitForCancellationFuture<'a>,
        #[pin]
        cancelled: WaitForCancellationFuture<'a>,
    }
}

/// Relays between `client` and `backend` (the caller has already written
/// the replayed hello), with splice(2) when `use_splice` is set. `activity`
/// collects the byte counts; `seed` picks this connection's moment in a
/// drain window.
#[allow(clippy::too_many_arguments)]
pub fn relay<'a>(
    client: &'a TcpStream,
    backend: &'a TcpStream,
    activity: &'a Activity,
    idle: Duration,
    cancel: &'a CancellationToken,
    drain: &'a DrainGuard,
    seed: u64,
    use_splice: bool,
) -> Relay<'a> {
    Relay {
        client,
        backend,
        up: Direction::new(Side::Up),
        down: Direction::new(Side::Down),
        activity,
        pipes: use_splice.then(splice::pool),
        idle,
        drain,
        seed,
        drain_at: None,
        timer: sleep_until(activity.last() + idle),
        drain_fired: drain.fired(),
        cancelled: cancel.cancelled(),
    }
}

impl Future for Relay<'_> {
    type Output = CloseReason;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<CloseReason> {
        let mut this = self.project();
        let (activity, pipes) = (*this.activity, *this.pipes);
        let (client, backend) = (*this.client, *this.backend);
        // A direction that ends passes its FIN on with shutdown(2) only
        // while the other direction still flows; once both have ended, the
        // close that follows sends the FIN (no unread data is left, so it is
        // a FIN, not a reset), one syscall fewer per connection.
        for side in [Side::Up, Side::Down] {
            let (direction, other, ends) = match side {
                Side::Up => (&mut *this.up, &*this.down, (client, backend)),
                Side::Down => (&mut *this.down, &*this.up, (backend, client)),
            };
            if direction.done {
                continue;
            }
            if let Poll::Ready(outcome) = direction.poll_move(cx, ends, activity, pipes) {
                if let Err(failure) = outcome {
                    return Poll::Ready(failure.into());
                }
                direction.done = true;
                if !other.done && sockopt::shutdown_write(ends.1).is_err() {
                    return Poll::Ready(direction.failures().1.into());
                }
            }
        }
        if this.up.done && this.down.done {
            return Poll::Ready(CloseReason::Done);
        }
        if this.drain_at.is_none() && this.drain_fired.as_mut().poll(cx).is_ready() {
            let at = this.drain.moment(*this.seed);
            *this.drain_at = Some(at);
            if at < this.timer.deadline() {
                this.timer.as_mut().reset(at);
            }
        }
        while this.timer.as_mut().poll(cx).is_ready() {
            let now = Instant::now();
            if this.drain_at.is_some_and(|at| at <= now) {
                return Poll::Ready(CloseReason::Drained);
            }
            let idle_at = activity.last() + *this.idle;
            if idle_at <= now {
                return Poll::Ready(CloseReason::IdleTimeout);
            }
            let next = this.drain_at.map_or(idle_at, |at| at.min(idle_at));
            this.timer.as_mut().reset(next);
        }
        if this.cancelled.as_mut().poll(cx).is_ready() {
            return Poll::Ready(CloseReason::Shutdown);
        }
        Poll::Pending
    }
}

/// The rest of a bulk burst: spliced when a pipe is free, else copied.
async fn bulk(
    from: &TcpStream,
    to: &TcpStream,
    side: Side,
    pipes: Option<&splice::PipePool>,
    activity: &Activity,
) -> Result<Burst, BurstError> {
    match pipes.and_then(splice::PipePool::lease) {
        Some(mut lease) => splice::burst(from, to, &mut lease, side, activity).await,
        None => copy_burst(from, to, side, activity).await,
    }
}

/// What one scratch read found.
enum Copied {
    /// It filled the scratch buffer: more is probably waiting.
    Full,
    /// Less than a buffer: the source is drained for now, and its readiness
    /// is cleared without another read (see [`copy_once`]).
    Partial,
    /// The destination took only part of what was read; the rest must be
    /// written before anything else is read.
    Stuck(Vec<u8>),
    /// Nothing to read (readiness is now cleared).
    Idle,
    Eof,
}

/// One read into the thread's scratch buffer, written on at once. Whatever
/// the destination can't take now comes back as [`Copied::Stuck`].
///
/// A read shorter than the buffer means the socket's receive queue is
/// empty, so readiness is cleared with it, as HAProxy does, instead of
/// paying a read that would only return EAGAIN. This is race-free: tokio
/// clears only the readiness it had seen before the read, so data arriving
/// after it raises a new event, and a FIN or an error stays set.
fn copy_once(
    from: &TcpStream,
    to: &TcpStream,
    side: Side,
    activity: &Activity,
) -> Result<Copied, BurstError> {
    let mut outcome = None;
    let read = from.try_io(Interest::READABLE, || {
        SCRATCH.with_borrow_mut(|buffer| {
            let n = match from.try_read(buffer) {
                Ok(0) => return Ok(Copied::Eof),
                Ok(n) => n,
                Err(e) => return Err(e),
            };
            activity.touch();
            let mut written = 0;
            while written < n {
                match to.try_write(&buffer[written..n]) {
                    Ok(w) => written += w,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        activity.add(side, written);
                        return Ok(Copied::Stuck(buffer[written..n].to_vec()));
                    }
                    Err(e) => {
                        outcome = Some(Err(BurstError::Write(e)));
                        return Err(io::ErrorKind::Other.into());
                    }
                }
            }
            activity.add(side, written);
            activity.touch();
            if n == buffer.len() {
                Ok(Copied::Full)
            } else {
                // Reported as WouldBlock so that `try_io` clears readiness.
                outcome = Some(Ok(Copied::Partial));
                Err(io::ErrorKind::WouldBlock.into())
            }
        })
    });
    match (read, outcome) {
        (_, Some(decided)) => decided,
        (Ok(copied), None) => Ok(copied),
        (Err(e), None) if e.kind() == io::ErrorKind::WouldBlock => Ok(Copied::Idle),
        (Err(e), None) => Err(BurstError::Read(e)),
    }
}

/// Writes what the destination could not take at once (rare: its send
/// buffer was full), waiting for it to drain.
async fn write_rest(
    to: &TcpStream,
    rest: Vec<u8>,
    side: Side,
    activity: &Activity,
) -> Result<(), BurstError> {
    let mut unsent: &[u8] = &rest;
    while !unsent.is_empty() {
        writable(to).await.map_err(BurstError::Write)?;
        match to.try_write(unsent) {
            Ok(w) => {
                unsent = &unsent[w..];
                activity.add(side, w);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(BurstError::Write(e)),
        }
    }
    activity.touch();
    Ok(())
}

/// The userspace fallback of `splice::burst`: scratch reads until the
/// source is drained.
async fn copy_burst(
    from: &TcpStream,
    to: &TcpStream,
    side: Side,
    activity: &Activity,
) -> Result<Burst, BurstError> {
    loop {
        // Returns at once while readiness holds; yields when the task's
        // cooperative budget is spent.
        readable(from).await.map_err(BurstError::Read)?;
        match copy_once(from, to, side, activity)? {
            Copied::Eof => return Ok(Burst::Eof),
            Copied::Idle | Copied::Partial => return Ok(Burst::Idle),
            Copied::Stuck(rest) => write_rest(to, rest, side, activity).await?,
            Copied::Full => {}
        }
    }
}
