//! The relay: bytes both ways between client and backend until both sides
//! are done.
//!
//! Half-close is propagated, not turned into a teardown: when one side sends
//! FIN, the relay shuts down writing toward the other side and keeps the
//! opposite direction flowing until it ends too. When a side's last bytes
//! and its FIN arrive together, they leave together: the bytes are written
//! corked ([`super::copy`], `Copied::Last`) and the shutdown(2), or the
//! close once both directions have ended, follows in the same poll and
//! carries them out with the FIN in one segment, as HAProxy does. The
//! connection is closed early only when a side fails (reset, write error,
//! or it stopped answering: keepalive probes or retransmissions timed out,
//! which is never excused), when no byte moved in
//! either direction for `idle_timeout`, when one side has sent FIN and no
//! byte moved for `half_close_timeout` since (the later of that FIN and the
//! last byte, like HAProxy's `timeout client-fin`/`server-fin`: a reply
//! still streaming after the client's FIN is not cut), when the connection
//! reaches its `max_connection_lifetime` (at a moment drawn per connection
//! in the last tenth of it, so long sessions opened together do not all
//! reconnect together), when the route's drain reaches this connection's
//! moment, or when it is stopped (the process's shutdown or an operator,
//! through its registry entry's `Activity`). The timeouts are the route's
//! ([`RelayTimeouts`], the listener's unless the route overrides them). A reset
//! is a failure only when it cuts data ([`super::half_close`]).
//!
//! [`Relay`] is a hand-written future, not an `async fn`: it is what every
//! open connection's task holds for its whole life, so its state is laid
//! out by hand (about 230 bytes: two direction slots and one timer)
//! instead of by the compiler's coroutine layout, which kept almost three
//! times that. It keeps no waiter besides its timer: the process's
//! shutdown stops every registered connection's [`Activity`]
//! ([`crate::flow::registry::shut_down`]), the record whose stop the relay
//! already waits on for an operator's close, and a fired drain signal
//! wakes the task through the same record's waker
//! ([`crate::flow::registry::drains_fired`]), after which the relay reads
//! the signal itself. One timer
//! serves the idle and half-close
//! timeouts, the lifetime and the drain moment; it sleeps until the
//! earliest moment the connection could be idle or must end and re-arms
//! itself, so no timer is reset per read. Idle accounting and byte counts
//! live in [`Activity`], atomics touched per transfer (see [`super::ready`]).
//!
//! Each direction moves data in bursts ([`super::direction`]); an idle
//! connection therefore pins its two sockets and its task, nothing more. A
//! connection with bandwidth limits ([`super::throttle`]) runs each
//! direction as one boxed future for its whole life instead
//! ([`super::direction::throttled`]). The relay has no field for it, so
//! connections without limits are laid out and run as before.
//!
//! Cost: no allocation for a small message; one boxed future per bulk
//! burst (per direction for the connection's life, when limited).
//!
//! Not here: one direction's bursts ([`super::direction`]); how bytes are
//! moved ([`super::copy`], [`super::splice`]); what failed and whether a
//! reset is excused ([`super::failure`], [`super::half_close`]); the shared
//! types and readiness helpers ([`super::ready`]); or where the timeouts
//! come from (the route table builds [`RelayTimeouts`] from the configuration).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep, sleep_until};

use crate::close_reason::CloseReason;
use crate::drain::{DrainGuard, unit_fraction};
use crate::pump::direction::{Direction, throttled};
use crate::pump::failure::{At, RelayFailure};
use crate::pump::half_close::{End, excuse};
use crate::pump::ready::{Activity, Side};
use crate::pump::splice;
use crate::pump::throttle::Throttle;
use crate::sockopt;

/// A connection's relay timeouts, as plain durations (the route table
/// builds them from its route's settings, [`crate::flow::route`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RelayTimeouts {
    /// No byte moved either way for this long ends the connection.
    pub idle: Duration,
    /// Once a side has sent FIN, no byte moved for this long ends it. Only
    /// shortens `idle`: a longer value never bites.
    pub half_close: Duration,
    /// The connection's lifetime, counted from accept; `None`: no limit.
    pub lifetime: Option<Duration>,
}

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
        timeouts: &'a RelayTimeouts,
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
        // Whether the activity's stop has been polled once, so that its
        // waker slot holds this task's waker: the stop and the drain
        // signal both wake the task through it.
        waiting: bool,
        // Wakes at the earliest moment the connection could be idle, or at
        // its deadline, whichever comes first.
        #[pin]
        timer: Sleep,
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
/// relay keeps no field for it (see [`throttled`]).
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
    timeouts: &'a RelayTimeouts,
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
        // The first poll leaves this task's waker in the activity's stop
        // slot before the drain signal is read below: a drain that fires
        // after that read wakes the task through the slot
        // ([`crate::flow::registry::drains_fired`], run after the signal is
        // set), and one that fired before is seen by the read.
        if !*this.waiting {
            let _ = activity.poll_stopped(cx);
            *this.waiting = true;
        }
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
                            .map(|e| RelayFailure::write(destination, At::Shutdown, ends.1, &e)),
                        End::Fin | End::Dropped => None,
                    }
                }
            };
            if let Some(failure) = failure
                && let Some(reason) = excuse(failure, &mut this.up.end, &mut this.down.end)
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
        // Once fired, the signal stays fired; the moment is then looked up
        // again per poll, a hash, only on a draining connection.
        let draining = this.drain.signal().is_fired();
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
        // record: its waker slot, filled by the first poll, stays filled,
        // since the relay is polled by its connection's task only and the
        // waker never changes; from then on its code alone tells.
        if activity.stopped_as() != 0 {
            return Poll::Ready(CloseReason::Shutdown);
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use tokio::io::Interest;

    use crate::pump::failure::tests::{pair, peer_resets};

    /// What a relay under test borrows besides its two sockets: fresh
    /// counters, one-minute timeouts, and signals that never fire.
    struct Fixture {
        activity: Activity,
        timeouts: RelayTimeouts,
        drain: DrainGuard,
    }

    impl Fixture {
        fn new() -> Fixture {
            Fixture {
                activity: Activity::new(),
                timeouts: RelayTimeouts {
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
}
