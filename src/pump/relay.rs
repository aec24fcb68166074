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
//! transfer (see `ready`).
//!
//! Each direction moves data in bursts: it waits for its source to be
//! readable while holding nothing, then makes one scratch read and write
//! (`copy::copy_once`). A read that fills the scratch buffer means bulk
//! data: the rest of the burst then goes through a kernel pipe with
//! splice(2) (see `splice`), or, with `splice = false` or no pipe free,
//! through more scratch reads (`copy::copy_burst`, the fallback), in a
//! boxed future that lives only for the burst. When the source is drained
//! the burst ends and the pipe goes back to the pool. An idle connection
//! therefore pins its two sockets and its task, nothing more.
//!
//! Not here: how bytes are moved (see `copy` and `splice`), or the shared
//! types and readiness helpers (see `ready`).
//!
//! Cost: no allocation for a small message; one boxed future per bulk
//! burst.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep, sleep_until};
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::drain::DrainGuard;
use crate::pump::copy::{Copied, copy_burst, copy_once, write_rest};
use crate::pump::ready::{Activity, Burst, BurstError, Side};
use crate::pump::splice;
use crate::reason::CloseReason;
use crate::sockopt;

/// Which side of a direction failed, and whether it stopped answering
/// (keepalive or retransmissions timed out) rather than reset.
#[derive(Debug, Clone, Copy)]
enum Failure {
    Client,
    Backend,
    ClientTimeout,
    BackendTimeout,
}

impl Failure {
    /// This side failed with `error`.
    fn because(self, error: &std::io::Error) -> Failure {
        match self {
            Failure::Client if sockopt::is_peer_timeout(error) => Failure::ClientTimeout,
            Failure::Backend if sockopt::is_peer_timeout(error) => Failure::BackendTimeout,
            other => other,
        }
    }
}

impl From<Failure> for CloseReason {
    fn from(f: Failure) -> Self {
        match f {
            Failure::Client => CloseReason::ClientReset,
            Failure::Backend => CloseReason::BackendReset,
            Failure::ClientTimeout => CloseReason::ClientKeepalive,
            Failure::BackendTimeout => CloseReason::BackendKeepalive,
        }
    }
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
                    Err(BurstError::Read(e)) => return Poll::Ready(Err(reader.because(&e))),
                    Err(BurstError::Write(e)) => return Poll::Ready(Err(writer.because(&e))),
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
                Err(BurstError::Read(e)) => return Poll::Ready(Err(reader.because(&e))),
                Err(BurstError::Write(e)) => return Poll::Ready(Err(writer.because(&e))),
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
        pipes: if use_splice { splice::pool() } else { None },
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
