//! The relay: bytes both ways between client and backend until both sides
//! are done.
//!
//! Half-close is propagated, not turned into a teardown: when one side sends
//! FIN, the relay shuts down writing toward the other side and keeps the
//! opposite direction flowing until it ends too. When a side's last bytes
//! and its FIN arrive together, they leave together: the bytes are written
//! corked (`copy`, `Copied::Last`) and the shutdown(2), or the close once
//! both directions have ended, follows in the same poll and carries them
//! out with the FIN in one segment, as HAProxy does. The connection is closed
//! early only when a side fails (reset, write error, or it stopped
//! answering: keepalive probes or retransmissions timed out, which is never
//! excused), when no byte moved in
//! either direction for `idle_timeout`, when one side has sent FIN and no
//! byte moved for `half_close_timeout` since (the later of that FIN and the
//! last byte, like HAProxy's `timeout client-fin`/`server-fin`: a reply
//! still streaming after the client's FIN is not cut), when the connection
//! reaches its `max_connection_lifetime` (at a moment drawn per connection
//! in the last tenth of it, so long sessions opened together do not all
//! reconnect together), when the route's drain reaches this connection's
//! moment, or when it is stopped (the process's shutdown or an operator,
//! through its registry entry's `Activity`). The timeouts are the route's
//! ([`Timeouts`], the listener's unless the route overrides them).
//!
//! A reset is a failure only when it cuts data (see `excuse`). A peer
//! that sent FIN, and whose bytes were all delivered, may then reset: a
//! server that closed after its response and TLS close_notify answers the
//! client's late close_notify with a reset from its kernel. Or it resets
//! instead of sending FIN: a server that closes its socket with the
//! client's close_notify (and FIN) unread makes its kernel send a reset,
//! not a FIN. Either way, once the other side had finished or the peer's
//! FIN came first, and everything the peer sent that arrived is delivered,
//! the connection ends as `done`. Linux tells a reset after the peer's FIN
//! (EPIPE) from one before (ECONNRESET), see `fin_before_reset`; a read
//! returns what arrived before a reset first. Any other reset stays
//! `client_reset` / `backend_reset`.
//!
//! [`Relay`] is a hand-written future, not an `async fn`: it is what every
//! open connection's task holds for its whole life, so its state is laid
//! out by hand (about 310 bytes: two direction slots, one timer and one
//! cancellation waiter, the drain's) instead of by the compiler's
//! coroutine layout, which kept almost twice that. The process's shutdown
//! needs no waiter of its own: it stops every registered connection's
//! [`Activity`] (`registry::shut_down`), the record whose stop the relay
//! already waits on for an operator's close. One timer serves the idle and half-close
//! timeouts, the lifetime and the drain moment; it sleeps until the
//! earliest moment the connection could be idle or must end and re-arms
//! itself, so no timer is reset per read. Idle accounting and byte counts
//! live in [`Activity`], atomics touched per transfer (see `ready`).
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
//! Not here: how bytes are moved (see `copy` and `splice`), the shared
//! types and readiness helpers (see `ready`), or where the timeouts come
//! from (the configuration builds [`Timeouts`]).
//!
//! A connection with bandwidth limits (`throttle`) runs each direction as
//! one boxed future for its whole life instead (`throttled`): bursts as
//! above, each read first waiting for the buckets. The relay has no field
//! for it, so connections without limits are laid out and run as before.
//!
//! Cost: no allocation for a small message; one boxed future per bulk
//! burst (per direction for the connection's life, when limited).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep, sleep_until};
use tokio_util::sync::WaitForCancellationFuture;

use crate::close_reason::CloseReason;
use crate::drain::{DrainGuard, unit_fraction};
use crate::pump::copy::{Copied, copy_burst, copy_once, write_rest};
use crate::pump::ready::{Activity, Burst, BurstError, Side, readable};
use crate::pump::splice;
use crate::pump::throttle::Throttle;
use crate::sockopt;

/// A connection's relay timeouts: plain settings, defined with the rest.
pub(crate) use crate::config::settings::Timeouts;

/// A lifetime ends at a moment drawn per connection in
/// [`LIFETIME_FLOOR`, 1] × `max_connection_lifetime`, so sessions opened
/// together (after a deploy, a network blip) are not all closed, and do not
/// all reconnect, at once.
pub(crate) const LIFETIME_FLOOR: f64 = 0.9;

/// When a connection started at `started` reaches its `lifetime`: the
/// moment `seed` (the connection id) draws in its last tenth (see
/// [`LIFETIME_FLOOR`]); `None` without a lifetime. QUIC flows take theirs
/// from here too, so both protocols spread their ends the same way.
pub(crate) fn lifetime_end(
    started: Instant,
    lifetime: Option<Duration>,
    seed: u64,
) -> Option<Instant> {
    lifetime.map(|life| {
        // Another draw than the drain moment's for the same seed.
        let share = LIFETIME_FLOOR + (1.0 - LIFETIME_FLOOR) * unit_fraction(!seed);
        started + life.mul_f64(share)
    })
}

/// Which peer failed.
#[derive(Debug, Clone, Copy)]
enum Peer {
    Client,
    Backend,
}

/// What failed on a peer's socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    /// Reading what the peer sent. Every byte read before it was delivered
    /// (a burst writes what it read before it reads again).
    Read,
    /// Writing to the peer.
    Write,
    /// Passing the other side's FIN on to the peer (shutdown(2)).
    Shutdown,
}

/// A peer's failure: whether the error says that the peer had sent FIN
/// before it reset (see [`fin_before_reset`]), and whether it stopped
/// answering instead (keepalive probes or retransmissions timed out, see
/// [`crate::sockopt::is_peer_timeout`]).
#[derive(Debug, Clone, Copy)]
struct Failure {
    peer: Peer,
    at: At,
    after_fin: bool,
    timed_out: bool,
}

impl Failure {
    /// Reading `peer` failed with `error`. A read returns what the peer
    /// sent and then its FIN before any reset, so a failed read never
    /// follows a FIN.
    fn read(peer: Peer, error: &io::Error) -> Failure {
        Failure {
            peer,
            at: At::Read,
            after_fin: false,
            timed_out: sockopt::is_peer_timeout(error),
        }
    }

    /// Writing (`At::Write`) or shutting down writing (`At::Shutdown`) to
    /// `peer` on `stream` failed with `error`.
    fn write(peer: Peer, at: At, stream: &TcpStream, error: &io::Error) -> Failure {
        Failure {
            peer,
            at,
            after_fin: fin_before_reset(stream, error),
            timed_out: sockopt::is_peer_timeout(error),
        }
    }

    /// The close reason when this failure ends the connection.
    fn reason(self) -> CloseReason {
        match (self.peer, self.timed_out) {
            (Peer::Client, false) => CloseReason::ClientReset,
            (Peer::Backend, false) => CloseReason::BackendReset,
            (Peer::Client, true) => CloseReason::ClientKeepalive,
            (Peer::Backend, true) => CloseReason::BackendKeepalive,
        }
    }
}

/// Whether a failed write (or shutdown) toward a peer shows that the peer's
/// FIN reached us before its reset. Linux records a reset as EPIPE on a
/// socket that had received FIN (CLOSE_WAIT) and as ECONNRESET otherwise;
/// the first call to meet it consumes it. A write returns it as its error;
/// shutdown(2) fails with ENOTCONN and leaves it pending in SO_ERROR. Any
/// other error, or none recorded, counts as a reset before FIN.
fn fin_before_reset(stream: &TcpStream, error: &io::Error) -> bool {
    match error.kind() {
        io::ErrorKind::BrokenPipe => true,
        io::ErrorKind::NotConnected => {
            matches!(stream.take_error(), Ok(Some(e)) if e.kind() == io::ErrorKind::BrokenPipe)
        }
        _ => false,
    }
}

/// How far a direction is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Open,
    /// Its source sent FIN and everything before it was delivered.
    Fin,
    /// Ended by a reset that cut nothing (see [`excuse`]): its destination
    /// reset after its own FIN, or its source reset after the other side
    /// had finished.
    Dropped,
}

/// A boxed burst: what a direction holds while it moves bulk data.
type BurstFuture<'a> = Pin<Box<dyn Future<Output = Result<Burst, BurstError>> + Send + 'a>>;

/// One direction's slot in [`Relay`].
struct Direction<'a> {
    side: Side,
    /// The bulk burst in progress, if any.
    burst: Option<BurstFuture<'a>>,
    end: End,
}

impl<'a> Direction<'a> {
    fn new(side: Side) -> Self {
        Direction {
            side,
            burst: None,
            end: End::Open,
        }
    }

    /// This direction's source and destination peers.
    fn peers(&self) -> (Peer, Peer) {
        match self.side {
            Side::Up => (Peer::Client, Peer::Backend),
            Side::Down => (Peer::Backend, Peer::Client),
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
        let (reader, writer) = self.peers();
        let side = self.side;
        loop {
            if let Some(burst) = &mut self.burst {
                let outcome = ready!(burst.as_mut().poll(cx));
                self.burst = None;
                match outcome {
                    Ok(Burst::Idle) => {}
                    // Half-close: the other direction keeps flowing.
                    Ok(Burst::Eof) => return Poll::Ready(Ok(())),
                    Err(BurstError::Read(e)) => return Poll::Ready(Err(Failure::read(reader, &e))),
                    Err(BurstError::Write(e)) => {
                        return Poll::Ready(Err(Failure::write(writer, At::Write, to, &e)));
                    }
                }
            }
            // Holding nothing while the source is quiet. This also spends
            // the task's cooperative budget, so a busy direction yields.
            if let Err(e) = ready!(from.poll_read_ready(cx)) {
                return Poll::Ready(Err(Failure::read(reader, &e)));
            }
            match copy_once(from, to, side, activity) {
                // Bulk data: move the rest of the burst through a pipe.
                Ok(Copied::Full) => {
                    self.burst = Some(Box::pin(bulk(from, to, side, pipes, activity, None)));
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
                // The last bytes are corked: the caller's FIN (shutdown
                // or close, in this same poll) sends them with it.
                Ok(Copied::Eof | Copied::Last) => return Poll::Ready(Ok(())),
                Err(BurstError::Read(e)) => return Poll::Ready(Err(Failure::read(reader, &e))),
                Err(BurstError::Write(e)) => {
                    return Poll::Ready(Err(Failure::write(writer, At::Write, to, &e)));
                }
            }
        }
    }
}

/// Decides whether a peer's failure ends the connection as that peer's
/// reset. It does not when the reset cuts nothing, which is when either
/// - the peer had sent FIN and everything it sent is delivered (its
///   direction is [`End::Fin`]), or the error shows its FIN came first and
///   its direction can still deliver the rest (it stays open and must end
///   in FIN); or
/// - the other side had finished (the direction toward the peer is
///   [`End::Fin`]), and the reset came while reading the peer, so all it
///   sent that arrived was delivered, or while passing that FIN on (its
///   direction stays open to deliver the rest). This is the server that
///   closes its socket with the client's last bytes (TLS close_notify)
///   unread: its kernel then sends a reset instead of a FIN.
///
/// The direction toward the peer is then dropped (and the peer's own, when
/// reading it failed), and the connection ends as `done` once both have
/// ended.
fn excuse<'a>(
    failure: Failure,
    up: &mut Direction<'a>,
    down: &mut Direction<'a>,
) -> Option<CloseReason> {
    // A peer that stopped answering lost whatever was on its way to it:
    // never excused.
    if failure.timed_out {
        return Some(failure.reason());
    }
    let (from_peer, to_peer) = match failure.peer {
        Peer::Client => (up, down),
        Peer::Backend => (down, up),
    };
    let fin_first = match from_peer.end {
        End::Fin => true,
        End::Open => failure.after_fin,
        End::Dropped => false,
    };
    let other_finished = to_peer.end == End::Fin
        && from_peer.end == End::Open
        && matches!(failure.at, At::Read | At::Shutdown);
    if !fin_first && !other_finished {
        return Some(failure.reason());
    }
    if failure.at == At::Read {
        from_peer.end = End::Dropped;
    }
    if to_peer.end == End::Open {
        to_peer.end = End::Dropped;
    }
    None
}

pin_project_lite::pin_project! {
    /// Relays both ways until both directions have ended, a side fails,
    /// a timeout or the lifetime runs out, the activity's stop fires
    /// (shutdown, or an operator's) or the drain reaches this connection's
    /// moment. See [`relay`].
    pub struct Relay<'a> {
        client: &'a TcpStream,
        backend: &'a TcpStream,
        up: Direction<'a>,
        down: Direction<'a>,
        activity: &'a Activity,
        timeouts: &'a Timeouts,
        drain: &'a DrainGuard,
        seed: u64,
        // Bulk bursts go through the process's pipe pool (`splice`).
        use_splice: bool,
        // The backend's keepalive until it is set: the timer first wakes
        // `KEEPALIVE_ARM_DELAY` after the relay starts (or sooner, if the
        // connection could end sooner) and sets it then, so a connection
        // that ends before never makes the calls. Five bytes, in what was
        // the padding after `use_splice`.
        keepalive: Option<sockopt::KeepaliveSecs>,
        // The earlier of the lifetime's end and, once the drain has fired,
        // the drain moment. Which one it is, is found again when it comes
        // (no flag kept: a byte more would cost the task eight).
        deadline: Option<Instant>,
        // Whether `drain_fired` and the activity's stop have been polled
        // once, so that they hold this task's waker.
        waiting: bool,
        // Wakes at the earliest moment the connection could be idle, or at
        // its deadline, whichever comes first.
        #[pin]
        timer: Sleep,
        #[pin]
        drain_fired: WaitForCancellationFuture<'a>,
    }
}

/// Relays between `client` and `backend` (the caller has already written
/// the replayed hello), with splice(2) when `use_splice` is set. `activity`
/// collects the byte counts; `started` is when the connection was accepted
/// (its lifetime counts from there); `activity`'s stop is the process's
/// shutdown or an operator's (each ends the relay as `shutdown`, which the
/// registry tells apart: `registry::shut_down` stops every entry, the
/// accept loop's token no longer reaches a relaying connection); `seed` picks this connection's moment
/// in a drain window and in the last tenth of its lifetime. `keepalive`,
/// the backend's, is set on `backend` once the relay has run for
/// [`sockopt::KEEPALIVE_ARM_DELAY`] (if it is still open then).
/// `throttle`, the connection's bandwidth limits, paces every read; the
/// relay keeps no field for it (see `throttled`).
#[allow(clippy::too_many_arguments)]
// Inlined into the connection's task so the relay is built where the task
// keeps it, not returned and copied in: about 500 instructions per
// connection (`scripts/callgrind-rate.sh`, three runs each, with the
// record's constructors inlined too).
#[inline(always)]
pub(crate) fn relay<'a>(
    client: &'a TcpStream,
    backend: &'a TcpStream,
    activity: &'a Activity,
    timeouts: &'a Timeouts,
    started: Instant,
    drain: &'a DrainGuard,
    seed: u64,
    use_splice: bool,
    keepalive: Option<sockopt::KeepaliveSecs>,
    throttle: Option<&'a Throttle>,
) -> Relay<'a> {
    let deadline = lifetime_end(started, timeouts.lifetime, seed);
    // The registry has just stamped the activity: the relay starts now.
    let started_relaying = activity.last();
    let idle_at = started_relaying + timeouts.idle;
    let mut wake = deadline.map_or(idle_at, |at| at.min(idle_at));
    if keepalive.is_some() {
        wake = wake.min(started_relaying + sockopt::KEEPALIVE_ARM_DELAY);
    }
    let (mut up, mut down) = (Direction::new(Side::Up), Direction::new(Side::Down));
    // A bandwidth limit: each direction is one boxed future for the
    // connection's life, every read of it paced by the buckets. Nothing is
    // stored for it in the relay itself, so an unlimited connection pays
    // neither memory nor a branch per read.
    if let Some(throttle) = throttle {
        let pipes = if use_splice { splice::pool() } else { None };
        up.burst = Some(Box::pin(throttled(
            client,
            backend,
            Side::Up,
            pipes,
            activity,
            throttle,
        )));
        down.burst = Some(Box::pin(throttled(
            backend,
            client,
            Side::Down,
            pipes,
            activity,
            throttle,
        )));
    }
    Relay {
        client,
        backend,
        up,
        down,
        activity,
        timeouts,
        drain,
        seed,
        use_splice,
        keepalive,
        deadline,
        waiting: false,
        timer: sleep_until(wake),
        drain_fired: drain.fired(),
    }
}

impl Future for Relay<'_> {
    type Output = CloseReason;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<CloseReason> {
        let mut this = self.project();
        let activity = *this.activity;
        let pipes = if *this.use_splice {
            splice::pool()
        } else {
            None
        };
        let (client, backend) = (*this.client, *this.backend);
        let timeouts = *this.timeouts;
        let was_open = this.up.end == End::Open && this.down.end == End::Open;
        // A direction that ends passes its FIN on with shutdown(2) only
        // while the other direction still flows; once both have ended, the
        // close that follows sends the FIN (no unread data is left, so it is
        // a FIN, not a reset), one syscall fewer per connection.
        for side in [Side::Up, Side::Down] {
            let (direction, ends) = match side {
                Side::Up => (&mut *this.up, (client, backend)),
                Side::Down => (&mut *this.down, (backend, client)),
            };
            if direction.end != End::Open {
                continue;
            }
            let Poll::Ready(outcome) = direction.poll_move(cx, ends, activity, pipes) else {
                continue;
            };
            let failure = match outcome {
                Err(failure) => Some(failure),
                Ok(()) => {
                    direction.end = End::Fin;
                    let destination = direction.peers().1;
                    let other = match side {
                        Side::Up => this.down.end,
                        Side::Down => this.up.end,
                    };
                    match other {
                        End::Open => sockopt::shutdown_write(ends.1)
                            .err()
                            .map(|e| Failure::write(destination, At::Shutdown, ends.1, &e)),
                        End::Fin | End::Dropped => None,
                    }
                }
            };
            if let Some(failure) = failure
                && let Some(reason) = excuse(failure, this.up, this.down)
            {
                return Poll::Ready(reason);
            }
        }
        let (up, down) = (this.up.end, this.down.end);
        if up != End::Open && down != End::Open {
            return Poll::Ready(CloseReason::Done);
        }
        let half_closed = up != End::Open || down != End::Open;
        if was_open && half_closed {
            // The half-close clock starts at the FIN (or the drop), and may
            // be sooner than the idle moment the timer sleeps until.
            activity.touch();
            let at = activity.last() + timeouts.half_close;
            if at < this.timer.deadline() {
                this.timer.as_mut().reset(at);
            }
        }
        // Once fired, the drain future stays ready; its moment is then
        // looked up again per poll, a hash, only on a draining connection.
        let draining = if *this.waiting {
            this.drain.signal().is_fired()
        } else {
            this.drain_fired.as_mut().poll(cx).is_ready()
        };
        let drain_at = draining.then(|| this.drain.moment(*this.seed));
        if let Some(at) = drain_at
            && this.deadline.is_none_or(|deadline| at < deadline)
        {
            *this.deadline = Some(at);
            if at < this.timer.deadline() {
                this.timer.as_mut().reset(at);
            }
        }
        while this.timer.as_mut().poll(cx).is_ready() {
            // Whatever woke the timer, the connection has lasted (nearly)
            // long enough for its backend keepalive: set it now, once.
            if let Some(keepalive) = this.keepalive.take() {
                let _ = sockopt::set_keepalive(backend, Some(keepalive.keepalive()));
            }
            let now = Instant::now();
            if this.deadline.is_some_and(|at| at <= now) {
                return Poll::Ready(if drain_at.is_some_and(|at| at <= now) {
                    this.drain.reason()
                } else {
                    CloseReason::MaxLifetime
                });
            }
            let half_close = half_closed && timeouts.half_close <= timeouts.idle;
            let quiet = if half_close {
                timeouts.half_close
            } else {
                timeouts.idle
            };
            let idle_at = activity.last() + quiet;
            if idle_at <= now {
                return Poll::Ready(if half_close {
                    CloseReason::HalfCloseTimeout
                } else {
                    CloseReason::IdleTimeout
                });
            }
            let next = this.deadline.map_or(idle_at, |at| at.min(idle_at));
            this.timer.as_mut().reset(next);
        }
        // The stop (the process's shutdown, or an operator's close, drain
        // or move, all through the registry) is read from the activity
        // record: its waker slot, filled by the first wait, stays filled,
        // since the relay is polled by its connection's task only and the
        // waker never changes; from then on its code alone tells.
        let stopped = if *this.waiting {
            activity.stopped_as() != 0
        } else {
            activity.poll_stopped(cx).is_ready()
        };
        if stopped {
            return Poll::Ready(CloseReason::Shutdown);
        }
        *this.waiting = true;
        Poll::Pending
    }
}

/// A limited direction, from the relay's start to its source's FIN: a
/// burst whenever the source is readable and the buckets hold a chunk,
/// every read of it paced by `throttle` (see `throttle`). Waits for tokens
/// holding no pipe.
async fn throttled(
    from: &TcpStream,
    to: &TcpStream,
    side: Side,
    pipes: Option<&splice::PipePool>,
    activity: &Activity,
    throttle: &Throttle,
) -> Result<Burst, BurstError> {
    loop {
        readable(from).await.map_err(BurstError::Read)?;
        throttle.until_ready(side).await;
        if let Burst::Eof = bulk(from, to, side, pipes, activity, Some(throttle)).await? {
            return Ok(Burst::Eof);
        }
    }
}

/// The rest of a bulk burst: spliced when a pipe is free, else copied.
async fn bulk(
    from: &TcpStream,
    to: &TcpStream,
    side: Side,
    pipes: Option<&splice::PipePool>,
    activity: &Activity,
    throttle: Option<&Throttle>,
) -> Result<Burst, BurstError> {
    match pipes.and_then(splice::PipePool::lease) {
        Some(mut lease) => splice::burst(from, to, &mut lease, side, activity, throttle).await,
        None => copy_burst(from, to, side, activity, throttle).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use tokio::io::Interest;
    use tokio::net::TcpListener;

    /// A connected pair on loopback: (ours, the peer).
    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let ours = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (peer, _) = listener.accept().await.unwrap();
        (ours, peer)
    }

    /// The peer sends `tail`, then FIN if `fin`, then resets; returns once
    /// our socket has the reset.
    async fn peer_resets(ours: &TcpStream, peer: TcpStream, tail: &[u8], fin: bool) {
        peer.try_write(tail).unwrap();
        if fin {
            sockopt::shutdown_write(&peer).unwrap();
        }
        socket2::SockRef::from(&peer)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(peer);
        ours.ready(Interest::ERROR).await.unwrap();
    }

    // What `fin_before_reset` relies on, pinned: Linux's errors after a
    // peer's reset, with its FIN (and data) still unread.
    #[tokio::test]
    async fn a_write_after_a_reset_that_followed_fin_is_broken_pipe() {
        let (ours, peer) = pair().await;
        peer_resets(&ours, peer, b"tail", true).await;
        let error = ours.try_write(b"close_notify").unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::BrokenPipe, "{error}");
        assert!(fin_before_reset(&ours, &error));
        // And what the peer sent before its FIN can still be delivered.
        let mut buf = [0u8; 16];
        assert_eq!(ours.try_read(&mut buf).unwrap(), 4);
        assert_eq!(&buf[..4], b"tail");
        assert_eq!(ours.try_read(&mut buf).unwrap(), 0);
    }

    #[tokio::test]
    async fn a_shutdown_after_a_reset_that_followed_fin_leaves_broken_pipe_pending() {
        let (ours, peer) = pair().await;
        peer_resets(&ours, peer, b"tail", true).await;
        let error = sockopt::shutdown_write(&ours).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::NotConnected, "{error}");
        assert!(fin_before_reset(&ours, &error));
    }

    #[tokio::test]
    async fn a_reset_without_fin_is_connection_reset() {
        let (ours, peer) = pair().await;
        peer_resets(&ours, peer, b"tail", false).await;
        let error = ours.try_write(b"more").unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::ConnectionReset, "{error}");
        assert!(!fin_before_reset(&ours, &error));

        // Reading gives what arrived before the reset, then the reset.
        let (ours, peer) = pair().await;
        peer_resets(&ours, peer, b"tail", false).await;
        let mut buf = [0u8; 16];
        assert_eq!(ours.try_read(&mut buf).unwrap(), 4);
        let error = ours.try_read(&mut buf).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::ConnectionReset, "{error}");

        // Once shutdown(2) has met it (and `fin_before_reset` consumed it),
        // what arrived is still read, then an end of stream.
        let (ours, peer) = pair().await;
        peer_resets(&ours, peer, b"tail", false).await;
        let error = sockopt::shutdown_write(&ours).unwrap_err();
        assert!(!fin_before_reset(&ours, &error));
        assert_eq!(ours.try_read(&mut buf).unwrap(), 4);
        assert_eq!(ours.try_read(&mut buf).unwrap(), 0);
    }

    /// What a relay under test borrows besides its two sockets: fresh
    /// counters, one-minute timeouts, and signals that never fire.
    struct Fixture {
        activity: Activity,
        timeouts: Timeouts,
        drain: DrainGuard,
    }

    impl Fixture {
        fn new() -> Fixture {
            Fixture {
                activity: Activity::new(),
                timeouts: Timeouts {
                    idle: Duration::from_secs(60),
                    half_close: Duration::from_secs(60),
                    lifetime: None,
                },
                drain: crate::drain::DrainSignal::new().enter(),
            }
        }

        /// A copying relay (no splice) between `client` and `backend`.
        fn relay<'a>(
            &'a self,
            client: &'a TcpStream,
            backend: &'a TcpStream,
            keepalive: Option<sockopt::KeepaliveSecs>,
        ) -> Relay<'a> {
            relay(
                client,
                backend,
                &self.activity,
                &self.timeouts,
                Instant::now(),
                &self.drain,
                1,
                false,
                keepalive,
                None,
            )
        }
    }

    /// Waits (bounded) until `stream`'s readiness shows its peer's FIN.
    async fn until_read_closed(stream: &TcpStream) {
        for _ in 0..1000 {
            if stream
                .ready(Interest::READABLE)
                .await
                .unwrap()
                .is_read_closed()
            {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("the peer's FIN never showed");
    }

    // The backend's last bytes and its FIN arrive together: the relay
    // passes them on corked, with the FIN right behind (one segment: the
    // load benchmark counts segments per connection), and the client's
    // direction stays open (half-close, not a teardown).
    #[tokio::test]
    async fn the_last_bytes_and_their_fin_are_passed_on_together() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let (client, mut client_peer) = pair().await;
        let (backend, mut backend_peer) = pair().await;
        backend_peer.write_all(b"reply").await.unwrap();
        sockopt::shutdown_write(&backend_peer).unwrap();
        until_read_closed(&backend).await;

        let fixture = Fixture::new();
        let relay = fixture.relay(&client, &backend, None);
        let peers = tokio::spawn(async move {
            let mut reply = Vec::new();
            client_peer.read_to_end(&mut reply).await.unwrap();
            assert_eq!(reply, b"reply");
            // Half-close: the client still reaches the backend.
            client_peer.write_all(b"close_notify").await.unwrap();
            sockopt::shutdown_write(&client_peer).unwrap();
            let mut up = Vec::new();
            backend_peer.read_to_end(&mut up).await.unwrap();
            assert_eq!(up, b"close_notify");
        });
        let reason = tokio::time::timeout(Duration::from_secs(10), relay)
            .await
            .unwrap();
        assert_eq!(reason, CloseReason::Done);
        // Both directions have ended: closing sends the client's last bytes
        // (corked) and its FIN on to the backend.
        drop((client, backend));
        tokio::time::timeout(Duration::from_secs(10), peers)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            fixture.activity.moved(),
            crate::pump::ready::Transferred { up: 12, down: 5 }
        );
    }

    // Bytes and then a reset without FIN (a server closing with input
    // unread) also raise "read closed": the bytes are delivered, but the
    // reset stays a reset, never a clean end.
    #[tokio::test]
    async fn bytes_then_a_reset_are_not_taken_for_bytes_then_fin() {
        use tokio::io::AsyncReadExt;

        let (client, mut client_peer) = pair().await;
        let (backend, backend_peer) = pair().await;
        peer_resets(&backend, backend_peer, b"tail", false).await;
        let fixture = Fixture::new();
        let relay = fixture.relay(&client, &backend, None);
        let reason = tokio::time::timeout(Duration::from_secs(10), relay)
            .await
            .unwrap();
        assert_eq!(reason, CloseReason::BackendReset);
        drop((client, backend));
        let mut got = Vec::new();
        let _ = client_peer.read_to_end(&mut got).await;
        assert_eq!(got, b"tail");
    }

    // The backend's keepalive is set once the relay has run for
    // KEEPALIVE_ARM_DELAY, not before, so a connection that ends sooner
    // never makes the five calls; the client's socket is left alone (it
    // inherits the listener's).
    #[tokio::test]
    async fn the_backend_keepalive_is_set_once_the_arm_delay_has_passed() {
        let (client, _client_peer) = pair().await;
        let (backend, _backend_peer) = pair().await;
        let keepalive = sockopt::Keepalive {
            idle: Duration::from_secs(7),
            interval: Duration::from_secs(3),
            count: 4,
        };
        let fixture = Fixture::new();
        let relay = fixture.relay(
            &client,
            &backend,
            Some(sockopt::KeepaliveSecs::new(keepalive)),
        );
        let started = Instant::now();
        tokio::pin!(relay);
        // Timers never fire early: just short of the delay, nothing is set.
        let almost = sockopt::KEEPALIVE_ARM_DELAY - Duration::from_millis(100);
        assert!(tokio::time::timeout(almost, &mut relay).await.is_err());
        assert_eq!(sockopt::keepalive(&backend).unwrap(), None);
        // Then it is, while the relay goes on (bounded wait).
        while sockopt::keepalive(&backend).unwrap().is_none() {
            assert!(started.elapsed() < Duration::from_secs(10), "never set");
            let step = Duration::from_millis(50);
            assert!(tokio::time::timeout(step, &mut relay).await.is_err());
        }
        // The activity clock counts whole milliseconds.
        let tick = Duration::from_millis(2);
        assert!(started.elapsed() + tick >= sockopt::KEEPALIVE_ARM_DELAY);
        assert_eq!(sockopt::keepalive(&backend).unwrap(), Some(keepalive));
        assert_eq!(sockopt::keepalive(&client).unwrap(), None);
    }

    #[test]
    fn keepalive_secs_carry_every_configurable_value() {
        for (idle, interval, count) in [(1, 1, 1), (60, 10, 6), (32_767, 32_767, 127)] {
            let keepalive = sockopt::Keepalive {
                idle: Duration::from_secs(idle),
                interval: Duration::from_secs(interval),
                count,
            };
            assert_eq!(
                sockopt::KeepaliveSecs::new(keepalive).keepalive(),
                keepalive
            );
        }
        assert!(std::mem::size_of::<Option<sockopt::KeepaliveSecs>>() <= 6);
    }

    fn directions(up: End, down: End) -> (Direction<'static>, Direction<'static>) {
        let mut pair = (Direction::new(Side::Up), Direction::new(Side::Down));
        (pair.0.end, pair.1.end) = (up, down);
        pair
    }

    fn failure(peer: Peer, at: At, after_fin: bool) -> Failure {
        Failure {
            peer,
            at,
            after_fin,
            timed_out: false,
        }
    }

    /// `excuse` on directions in states (`up`, `down`): the reason it
    /// returns and the states it leaves.
    fn judge(f: Failure, up: End, down: End) -> (Option<CloseReason>, End, End) {
        let (mut up, mut down) = directions(up, down);
        let reason = excuse(f, &mut up, &mut down);
        (reason, up.end, down.end)
    }

    use End::{Dropped, Fin, Open};
    use Peer::{Backend, Client};

    #[test]
    fn a_reset_after_the_peers_fin_drops_only_the_direction_toward_it() {
        // The backend sent FIN and all of it was delivered: its reset (to
        // the client's late close_notify) drops the direction toward it.
        let f = failure(Backend, At::Write, false);
        assert_eq!(judge(f, Open, Fin), (None, Dropped, Fin));
        // The same for the client, the other way round.
        let f = failure(Client, At::Write, false);
        assert_eq!(judge(f, Fin, Open), (None, Fin, Dropped));
        // A reset after a FIN not yet read: the peer's direction stays open
        // to deliver the rest.
        let f = failure(Backend, At::Write, true);
        assert_eq!(judge(f, Open, Open), (None, Dropped, Open));
        let f = failure(Backend, At::Shutdown, true);
        assert_eq!(judge(f, Fin, Open), (None, Fin, Open));
    }

    #[test]
    fn a_reset_after_the_other_side_finished_cuts_nothing() {
        // The client's close_notify and FIN reached the backend, which
        // reset instead of sending FIN: everything it sent was delivered.
        let f = failure(Backend, At::Read, false);
        assert_eq!(judge(f, Fin, Open), (None, Fin, Dropped));
        // Seen when passing the client's FIN on: the backend's rest is
        // still to be read and delivered.
        let f = failure(Backend, At::Shutdown, false);
        assert_eq!(judge(f, Fin, Open), (None, Fin, Open));
        // The other way round.
        let f = failure(Client, At::Read, false);
        assert_eq!(judge(f, Open, Fin), (None, Dropped, Fin));
    }

    #[test]
    fn a_peer_that_stopped_answering_is_never_excused() {
        let mut f = failure(Client, At::Write, true);
        f.timed_out = true;
        // Even after the client's own FIN: what was on its way to it is lost.
        assert_eq!(
            judge(f, Fin, Open),
            (Some(CloseReason::ClientKeepalive), Fin, Open)
        );
        let mut f = failure(Backend, At::Read, false);
        f.timed_out = true;
        assert_eq!(
            judge(f, Fin, Open),
            (Some(CloseReason::BackendKeepalive), Fin, Open)
        );
    }

    #[test]
    fn a_reset_that_cuts_data_ends_the_connection() {
        let reset = Some(CloseReason::BackendReset);
        // Mid-exchange, both ways open.
        let f = failure(Backend, At::Read, false);
        assert_eq!(judge(f, Open, Open).0, reset);
        let f = failure(Backend, At::Write, false);
        assert_eq!(judge(f, Open, Open).0, reset);
        let f = failure(Client, At::Read, false);
        assert_eq!(judge(f, Open, Open).0, Some(CloseReason::ClientReset));
        // The client fails while the backend's rest is still on its way
        // after the backend's own reset: that cuts the backend's data.
        let f = failure(Client, At::Write, true);
        assert_eq!(judge(f, Dropped, Open).0, Some(CloseReason::ClientReset));
        // The client side was dropped, not finished: a backend reset then
        // still cuts the backend's data.
        let f = failure(Backend, At::Read, false);
        assert_eq!(judge(f, Dropped, Open).0, reset);
    }
}
