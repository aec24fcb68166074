//! The relay: bytes both ways between client and backend until both sides
//! are done.
//!
//! Half-close is propagated, not turned into a teardown: when one side sends
//! FIN, the relay shuts down writing toward the other side and keeps the
//! opposite direction flowing until it ends too. The connection is closed
//! early only when a side fails (reset, write error), when no byte moved in
//! either direction for `idle_timeout`, or when the passed-in cancellation
//! token fires (drain or shutdown).
//!
//! Idle accounting is one atomic timestamp touched per transfer; the idle
//! watchdog sleeps until the earliest moment the connection could be idle and
//! re-arms itself, so no timer is reset per read.
//!
//! Each direction moves data in bursts: it waits for its source to be
//! readable while holding nothing, then reads once into the worker thread's
//! 16 KiB scratch buffer and writes that straight on. Small messages (TLS
//! handshakes, interactive traffic) cost just that read and write, as with
//! HAProxy's `splice-auto`. A read that fills the scratch buffer means bulk
//! data: the rest of the burst then goes through a kernel pipe with
//! splice(2) (see `splice`), or, with `splice = false` or no pipe free,
//! through more scratch reads. When the source would block the burst ends
//! and the pipe goes back to the pool. An idle connection therefore pins its
//! two sockets and its task, nothing more. Byte counts, half-close, idle
//! timeout and cancellation are handled here, the same for every path.
//!
//! Cost: no allocation per burst; the scratch buffer is per thread and is
//! never held across an await. Only bytes the destination could not take at
//! once are copied into a heap buffer until written.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use std::io;

use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

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

/// When a byte last moved, in milliseconds since the relay started.
pub(crate) struct Activity {
    start: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Activity {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    pub(crate) fn touch(&self) {
        let now = self.start.elapsed().as_millis() as u64;
        self.last_ms.store(now, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }
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

/// Relays both ways, with splice(2) when `use_splice` is set, until both
/// directions have ended, a side fails, nothing moved for `idle`, `cancel`
/// fires (shutdown) or `drain` reaches this connection's moment (`seed`
/// picks it in the drain window). The caller has already written the
/// replayed hello.
///
/// This future is what an open connection's task holds for its whole life,
/// so it is kept small: one timer serves both the idle timeout and the drain
/// moment, and the directions hold no buffer or pipe between bursts.
#[allow(clippy::too_many_arguments)]
pub async fn relay(
    client: &TcpStream,
    backend: &TcpStream,
    idle: Duration,
    cancel: &CancellationToken,
    drain: &DrainGuard,
    seed: u64,
    moved: &mut Transferred,
    use_splice: bool,
) -> CloseReason {
    let activity = Activity::new();
    let pipes = use_splice.then(splice::pool);
    let up = pump(
        client,
        backend,
        (Failure::Client, Failure::Backend),
        pipes,
        &activity,
        &mut moved.up,
    );
    let down = pump(
        backend,
        client,
        (Failure::Backend, Failure::Client),
        pipes,
        &activity,
        &mut moved.down,
    );
    // Wakes at the earliest moment the connection could be idle, or at its
    // drain moment, whichever comes first; re-armed, not reset per read.
    let timer = sleep_until(activity.start + idle);
    tokio::pin!(up, down, timer);
    let mut drain_at: Option<Instant> = None;
    let (mut up_done, mut down_done) = (false, false);
    // A direction that ends passes its FIN on with shutdown(2) only while
    // the other direction still flows; once both have ended, the close that
    // follows sends the FIN (no unread data is left, so it is a FIN, not a
    // reset), one syscall fewer per connection.
    while !(up_done && down_done) {
        tokio::select! {
            result = &mut up, if !up_done => match result {
                Ok(()) => {
                    up_done = true;
                    if !down_done && sockopt::shutdown_write(backend).is_err() {
                        return CloseReason::BackendReset;
                    }
                }
                Err(failure) => return failure.into(),
            },
            result = &mut down, if !down_done => match result {
                Ok(()) => {
                    down_done = true;
                    if !up_done && sockopt::shutdown_write(client).is_err() {
                        return CloseReason::ClientReset;
                    }
                }
                Err(failure) => return failure.into(),
            },
            () = &mut timer => {
                let now = Instant::now();
                if drain_at.is_some_and(|at| at <= now) {
                    return CloseReason::Drained;
                }
                let idle_at = activity.last() + idle;
                if idle_at <= now {
                    return CloseReason::IdleTimeout;
                }
                timer.as_mut().reset(drain_at.map_or(idle_at, |at| at.min(idle_at)));
            }
            () = drain.fired(), if drain_at.is_none() => {
                let at = drain.moment(seed);
                drain_at = Some(at);
                if at < timer.deadline() {
                    timer.as_mut().reset(at);
                }
            }
            () = cancel.cancelled() => return CloseReason::Shutdown,
        }
    }
    CloseReason::Done
}

/// Moves one direction until EOF (the caller passes the FIN on).
async fn pump(
    from: &TcpStream,
    to: &TcpStream,
    (reader, writer): (Failure, Failure),
    pipes: Option<&splice::PipePool>,
    activity: &Activity,
    count: &mut u64,
) -> Result<(), Failure> {
    loop {
        // Holding nothing while the source is quiet.
        readable(from).await.map_err(|_| reader)?;
        // The slow paths run as boxed futures: inline, their state would sit
        // in every connection's task for its whole life, idle or not; boxed,
        // only a connection moving bulk data (or stuck on a full send
        // buffer) holds it, for that burst.
        let burst = match copy_once(from, to, activity, count) {
            // Bulk data: move the rest of the burst through a pipe.
            Ok(Copied::Full) => Box::pin(bulk(from, to, pipes, activity, count)).await,
            Ok(Copied::Stuck(rest)) => Box::pin(write_rest(to, rest, activity, count))
                .await
                .map(|()| Burst::Idle),
            // A short read drained the source (readiness is cleared), so
            // the next `readable` waits; after a stale wake-up it also does.
            Ok(Copied::Partial | Copied::Idle) => continue,
            Ok(Copied::Eof) => Ok(Burst::Eof),
            Err(e) => Err(e),
        };
        match burst {
            Ok(Burst::Idle) => {}
            // Half-close: the other direction keeps flowing.
            Ok(Burst::Eof) => return Ok(()),
            Err(BurstError::Read(_)) => return Err(reader),
            Err(BurstError::Write(_)) => return Err(writer),
        }
    }
}

/// The rest of a bulk burst: spliced when a pipe is free, else copied.
async fn bulk(
    from: &TcpStream,
    to: &TcpStream,
    pipes: Option<&splice::PipePool>,
    activity: &Activity,
    count: &mut u64,
) -> Result<Burst, BurstError> {
    match pipes.and_then(splice::PipePool::lease) {
        Some(mut lease) => {
            let touch = || activity.touch();
            splice::burst(from, to, &mut lease, &touch, count).await
        }
        None => copy_burst(from, to, activity, count).await,
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
    activity: &Activity,
    count: &mut u64,
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
                        *count += written as u64;
                        return Ok(Copied::Stuck(buffer[written..n].to_vec()));
                    }
                    Err(e) => {
                        outcome = Some(Err(BurstError::Write(e)));
                        return Err(io::ErrorKind::Other.into());
                    }
                }
            }
            *count += written as u64;
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
    activity: &Activity,
    count: &mut u64,
) -> Result<(), BurstError> {
    let mut unsent: &[u8] = &rest;
    while !unsent.is_empty() {
        writable(to).await.map_err(BurstError::Write)?;
        match to.try_write(unsent) {
            Ok(w) => {
                unsent = &unsent[w..];
                *count += w as u64;
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
    activity: &Activity,
    count: &mut u64,
) -> Result<Burst, BurstError> {
    loop {
        // Returns at once while readiness holds; yields when the task's
        // cooperative budget is spent.
        readable(from).await.map_err(BurstError::Read)?;
        match copy_once(from, to, activity, count)? {
            Copied::Eof => return Ok(Burst::Eof),
            Copied::Idle | Copied::Partial => return Ok(Burst::Idle),
            Copied::Stuck(rest) => write_rest(to, rest, activity, count).await?,
            Copied::Full => {}
        }
    }
}
