//! An accept loop on one listening socket. The server runs one such loop
//! per runtime worker thread on each socket (the socket is shared through
//! an `Arc`; see `server` for the measurement behind that), so all workers
//! accept. Everything below holds per loop; the permits, the admission
//! state and the metric series are shared by all loops of a listener.
//!
//! Before each `accept` the loop takes a permit from the process-wide
//! connection semaphore (`global.max_connections`): at the cap it simply
//! stops accepting, so new clients wait in the kernel backlog instead of
//! being accepted and dropped, and it resumes as connections end (the permit
//! is released when the connection's task finishes).
//!
//! When `accept` fails for lack of a resource (EMFILE, ENFILE, ENOBUFS,
//! ENOMEM) the loop backs off exponentially (10 ms doubling to 1 s) instead
//! of spinning on a socket that stays readable, and logs once per burst.
//!
//! With `global.max_connection_rate` set, the loop also waits for a token of
//! a process-wide GCRA limiter before each `accept`, so above the rate new
//! clients wait in the backlog rather than being refused. Cost: one CAS per
//! accept; memory: one `u64` for the whole process.
//!
//! A loop accepts at most [`ACCEPT_BATCH`] connections in a row, then lets
//! the other tasks of its thread run before it accepts more (HAProxy's
//! `tune.maxaccept`, whose default is 4 for the same reason).
//!
//! Each accepted connection is then put to admission (allow/deny lists and
//! per-source limits, [`crate::admission`]) before its task starts and
//! before any byte is read; a refused one is logged, counted and closed at
//! once. That step is [`crate::flow::gate`], the one admission gate of both
//! protocols: a QUIC listener puts each new flow through it too, so a
//! refusal is counted, logged and closed the same way on TCP and QUIC.
//!
//! Each connection reads the listener's current [`Generation`] (settings,
//! routes, admission, backends, pacing: one value, published by a reload in
//! one swap) at accept time and keeps it for life; the loop itself holds
//! none while it waits, so a reload frees the previous generation once
//! the connections that took it have ended. Not here: what happens on
//! a connection (see [`crate::tcp::connection`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::addr::PeerAddr;
use crate::admission::AtAccept;
use crate::flow::access::{Arrival, TcpRecord};
use crate::flow::gate;
use crate::flow::generation::Generation;
use crate::tcp::connection::{self, Accepted};
use crate::{metrics, sockopt};

/// Connections a loop accepts in a row before it yields to the other tasks
/// of its thread. Without a bound a loop drains the whole accept queue in
/// one turn (as far as tokio's budget of 128 operations allows), and that
/// run of new connections then takes the thread for their first steps
/// together while the established connections' replies wait behind them;
/// their clients, idle meanwhile, come back in bursts. 64 clients against
/// one pinned core (`loadbench --pin 0,1 --slices 12`, paired slices
/// against HAProxy, medians of the per-pair ratios): connections/s 0.92x
/// HAProxy's unbounded (60 pairs), 0.98-0.99x with a bound of 4, 8 or 16
/// (36-60 pairs each, no difference among them); latency p99 1.13x
/// unbounded, 0.99x at 8. Not a setting: nothing gains from the unbounded
/// drain, and a yield every 8 connections costs a few instructions each.
pub(crate) const ACCEPT_BATCH: u32 = 8;

const BACKOFF_FIRST: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Everything an accept loop needs, passed in rather than global.
pub(crate) struct AcceptLoop {
    pub socket: Arc<TcpListener>,
    /// The listener's current generation; replaced on reload.
    pub generation: watch::Receiver<Arc<Generation>>,
    /// Process-wide connection permits.
    pub permits: Arc<Semaphore>,
    /// Tracks connection tasks so shutdown can wait for them.
    pub tracker: TaskTracker,
    /// Fires to stop accepting on this socket.
    pub stop_accepting: CancellationToken,
    /// Fires to close the connections this loop started.
    pub close_connections: CancellationToken,
}

impl AcceptLoop {
    pub(crate) async fn run(mut self) {
        // Connection tokens hang off one token per loop, so creating and
        // dropping them locks this loop's node rather than a node shared by
        // every connection of the process.
        let close_mine = self.close_connections.child_token();
        // The generation in force, re-read only when a reload publishes a
        // new one (an atomic version check per accept instead of a lock),
        // and let go of whenever the loop waits (see `Held`).
        let mut held = Held(Some(self.generation.borrow_and_update().clone()));
        // A listener keeps its name across reloads, so its series do too.
        let series = {
            let generation = held.current(&mut self.generation);
            metrics::metrics().listener(
                &generation.listener.name,
                generation.listener.protocol.as_str(),
            )
        };
        let mut backoff = Backoff::default();
        let mut in_a_row = 0;
        loop {
            if in_a_row == ACCEPT_BATCH {
                in_a_row = 0;
                // Back behind the other ready tasks and the next poll of
                // the sockets' readiness (tokio defers a yielded task).
                tokio::task::yield_now().await;
            }
            // A stop is seen here at the latest, so the waits below may try
            // their own branch first (`biased`): while connections keep
            // coming, accept is always ready, and polling the stop beside
            // it would register and unregister a waiter on the shared
            // token for every connection.
            if self.stop_accepting.is_cancelled() {
                return;
            }
            let permit = held.unless_ready(async {
                tokio::select! {
                    biased;
                    permit = self.permits.clone().acquire_owned() => permit.ok(),
                    () = self.stop_accepting.cancelled() => None,
                }
            });
            let Some(permit) = permit.await else { return };
            // `max_connection_rate`: wait until one more is within it
            // (clients wait in the backlog meanwhile), as HAProxy's
            // listener does for `maxconnrate`.
            let reserved = loop {
                let Some(pace) = &held.current(&mut self.generation).pace else {
                    break None;
                };
                match pace.reserve() {
                    Ok(reserved) => break Some(reserved),
                    Err(wait) => {
                        let waited = held.unless_ready(async {
                            tokio::select! {
                                () = tokio::time::sleep(wait) => true,
                                () = self.stop_accepting.cancelled() => false,
                            }
                        });
                        if !waited.await {
                            return;
                        }
                    }
                }
            };
            let accepted = held.unless_ready(async {
                tokio::select! {
                    biased;
                    accepted = self.socket.accept() => Some(accepted),
                    () = self.stop_accepting.cancelled() => None,
                }
            });
            let Some(accepted) = accepted.await else {
                return;
            };
            match accepted {
                Ok((stream, peer)) => {
                    backoff.recovered();
                    if let Some(reserved) = reserved {
                        reserved.count();
                    }
                    let accepted = Accepted {
                        stream,
                        arrival: Arrival {
                            peer: PeerAddr(peer),
                            at: Instant::now(),
                            metrics: series.clone(),
                        },
                    };
                    // A reload may have landed while this loop waited in
                    // accept; the connection gets the newest generation,
                    // read once, whole.
                    let generation = held.current(&mut self.generation);
                    self.start(accepted, generation, permit, &close_mine);
                    in_a_row += 1;
                }
                Err(error) if sockopt::is_resource_exhaustion(&error) => {
                    drop(permit);
                    let waited = held.unless_ready(backoff.wait(&error, &self.stop_accepting));
                    if !waited.await {
                        return;
                    }
                }
                Err(error) => {
                    // Per-connection failures (ECONNABORTED and the like).
                    tracing::debug!(error = %error, "accept failed");
                }
            }
        }
    }

    /// Admits `accepted` and starts its task, or closes it unread.
    fn start(
        &self,
        accepted: Accepted,
        generation: &Arc<Generation>,
        permit: OwnedSemaphorePermit,
        close_mine: &CancellationToken,
    ) {
        let listener = &generation.listener;
        let arrival = &accepted.arrival;
        let per_source = match gate::admit(generation, arrival.peer, &arrival.metrics) {
            Ok(AtAccept::Admitted(admitted)) => admitted.guard,
            Ok(AtAccept::AfterPreface) => None,
            // Closed unread: dropping the socket and the permit.
            Err(refused) => return refused.close(TcpRecord::new(listener, arrival)),
        };
        // The loop's own token, shared: a connection is only ever cancelled
        // with all of its loop's, so it needs no node (an allocation) of
        // its own. Boxed before it is spawned: the future is moved once,
        // into its box, where tokio's spawn would otherwise copy all of it
        // several times on the way into the task (see `connection::handle`).
        self.tracker.spawn(Box::pin(connection::handle(
            accepted,
            generation.clone(),
            close_mine.clone(),
            connection::Slots {
                _permit: permit,
                per_source,
            },
        )));
    }
}

/// The generation an accept loop holds between accepts. It is let go of
/// whenever the loop waits (for a permit, the pace, a connection, the
/// back-off), so a reload that publishes the next generation frees the
/// previous one as soon as the connections that took it have ended, not
/// when the next connection arrives: until then an idle listener kept a
/// whole route table alive per reload, 100,000 names' worth on the names
/// bench (benches/README.md, "Names"). Re-reading it after a wait costs one
/// read lock of the watch channel, paid only by a loop that found nothing
/// to accept.
struct Held(Option<Arc<Generation>>);

impl Held {
    /// The newest generation: the one held, unless a reload published
    /// another (an atomic version check) or the loop let go of it.
    fn current(&mut self, published: &mut watch::Receiver<Arc<Generation>>) -> &Arc<Generation> {
        if published.has_changed().unwrap_or(false) {
            self.0 = None;
        }
        self.0
            .get_or_insert_with(|| published.borrow_and_update().clone())
    }

    /// Awaits `wait`; if it is not ready at its first poll, lets go of the
    /// generation first, so none is kept alive while the loop is parked.
    async fn unless_ready<T>(&mut self, wait: impl Future<Output = T>) -> T {
        let mut wait = std::pin::pin!(wait);
        std::future::poll_fn(|cx| {
            let polled = wait.as_mut().poll(cx);
            if polled.is_pending() {
                self.0 = None;
            }
            polled
        })
        .await
    }
}

/// Exponential back-off while `accept` fails for lack of resources, logged
/// once per burst of failures.
struct Backoff {
    next: Duration,
    failures_in_burst: u64,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff {
            next: BACKOFF_FIRST,
            failures_in_burst: 0,
        }
    }
}

impl Backoff {
    /// An accept succeeded: the burst, if any, is over.
    fn recovered(&mut self) {
        if self.failures_in_burst > 0 {
            tracing::info!(failures = self.failures_in_burst, "accepting again");
            *self = Backoff::default();
        }
    }

    /// Waits before the next accept; false when `stop` fired meanwhile.
    async fn wait(&mut self, error: &std::io::Error, stop: &CancellationToken) -> bool {
        if self.failures_in_burst == 0 {
            tracing::warn!(error = %error, "accept failed for lack of resources; backing off");
        }
        self.failures_in_burst += 1;
        tokio::select! {
            () = tokio::time::sleep(self.next) => {}
            () = stop.cancelled() => return false,
        }
        self.next = (self.next * 2).min(BACKOFF_MAX);
        true
    }
}

#[cfg(test)]
mod tests {
    use crate::tcp::accept_loop::*;

    /// With more connections waiting than a batch, the other tasks of the
    /// thread run between batches: a task that looks after every turn of
    /// its own never finds more than `ACCEPT_BATCH` new connection tasks
    /// since its last look. (Unbounded, the loop starts all of them in
    /// one turn.)
    #[tokio::test(flavor = "current_thread")]
    async fn a_loop_starts_at_most_a_batch_of_connections_before_other_tasks_run() {
        let generation = Generation::for_tests();
        let (_publish, generation) = watch::channel(generation);
        let socket = Arc::new(TcpListener::bind("127.0.0.1:0").await.unwrap());
        let addr = socket.local_addr().unwrap();
        // Their handshakes complete in the kernel: all wait in the backlog.
        let waiting = 3 * ACCEPT_BATCH as usize + 5;
        let _clients: Vec<_> = (0..waiting)
            .map(|_| std::net::TcpStream::connect(addr).unwrap())
            .collect();
        let tracker = TaskTracker::new();
        let stop = CancellationToken::new();
        let accepting = tokio::spawn(
            AcceptLoop {
                socket,
                generation,
                permits: Arc::new(Semaphore::new(4 * waiting)),
                tracker: tracker.clone(),
                stop_accepting: stop.clone(),
                close_connections: CancellationToken::new(),
            }
            .run(),
        );
        // The connection tasks wait for hellos that never come, so the
        // tracker counts every connection started so far.
        let mut seen = vec![0];
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while seen.last() < Some(&waiting) {
            assert!(
                std::time::Instant::now() < deadline,
                "started only {seen:?}"
            );
            tokio::task::yield_now().await;
            seen.push(tracker.len());
        }
        let largest = seen.windows(2).map(|w| w[1] - w[0]).max();
        assert!(
            largest <= Some(ACCEPT_BATCH as usize),
            "connections started between two looks: {seen:?}"
        );
        stop.cancel();
        accepting.await.unwrap();
    }

    /// A loop waiting for connections holds no generation: once a reload
    /// publishes the next one, the previous is freed (here: only the test's
    /// own handle is left) without any connection arriving, and the next
    /// connection still gets the newest.
    #[tokio::test(flavor = "current_thread")]
    async fn a_waiting_loop_lets_go_of_the_previous_generation() {
        let first = Generation::for_tests();
        let (publish, generation) = watch::channel(first.clone());
        let socket = Arc::new(TcpListener::bind("127.0.0.1:0").await.unwrap());
        let addr = socket.local_addr().unwrap();
        let tracker = TaskTracker::new();
        let stop = CancellationToken::new();
        let accepting = tokio::spawn(
            AcceptLoop {
                socket,
                generation,
                permits: Arc::new(Semaphore::new(4)),
                tracker: tracker.clone(),
                stop_accepting: stop.clone(),
                close_connections: CancellationToken::new(),
            }
            .run(),
        );
        // The loop runs until it waits in accept (one thread: it runs
        // while this task yields).
        tokio::task::yield_now().await;
        let second = Generation::for_tests();
        drop(publish.send_replace(second.clone()));
        assert_eq!(Arc::strong_count(&first), 1, "the loop still holds it");
        let _client = std::net::TcpStream::connect(addr).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while tracker.is_empty() {
            assert!(std::time::Instant::now() < deadline, "never accepted");
            tokio::task::yield_now().await;
        }
        // The connection's task keeps the generation it was given: the
        // newest (the channel and this test hold the other two counts).
        assert_eq!(Arc::strong_count(&second), 3);
        stop.cancel();
        accepting.await.unwrap();
    }
}
