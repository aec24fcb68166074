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
//! Each accepted connection is then put to admission (`admit`: allow/deny
//! lists and per-source limits) before its task starts and before any byte
//! is read; a refused one is logged, counted and closed at once.
//!
//! Each connection reads the listener's current [`Generation`] (settings,
//! routes, admission, backends, pacing: one value, published by a reload in
//! one swap) at accept time and keeps it for life. Not here: what happens on
//! a connection (see `conn`).

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::addr::PeerAddr;
use crate::admit::AtAccept;
use crate::close::Accepted;
use crate::conn;
use crate::generation::Generation;
use crate::{close, metrics, sockopt};

const BACKOFF_FIRST: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Everything an accept loop needs, passed in rather than global.
pub struct AcceptLoop {
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
    pub async fn run(mut self) {
        // Connection tokens hang off one token per loop, so creating and
        // dropping them locks this loop's node rather than a node shared by
        // every connection of the process.
        let close_mine = self.close_connections.child_token();
        // The generation in force, re-read only when a reload publishes a
        // new one (an atomic version check per accept instead of a lock).
        let mut generation = self.generation.borrow_and_update().clone();
        // A listener keeps its name across reloads, so its series do too.
        let series = metrics::metrics().listener(
            &generation.listener.name,
            generation.listener.protocol.as_str(),
        );
        let mut backoff = Backoff::default();
        loop {
            // A stop is seen here at the latest, so the waits below may try
            // their own branch first (`biased`): while connections keep
            // coming, accept is always ready, and polling the stop beside
            // it would register and unregister a waiter on the shared
            // token for every connection.
            if self.stop_accepting.is_cancelled() {
                return;
            }
            let permit = tokio::select! {
                biased;
                permit = self.permits.clone().acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_closed) => return,
                },
                () = self.stop_accepting.cancelled() => return,
            };
            self.refresh(&mut generation);
            if let Some(pace) = &generation.pace {
                tokio::select! {
                    _ = pace.until_ready() => {}
                    () = self.stop_accepting.cancelled() => return,
                }
            }
            let accepted = tokio::select! {
                biased;
                accepted = self.socket.accept() => accepted,
                () = self.stop_accepting.cancelled() => return,
            };
            match accepted {
                Ok((stream, peer)) => {
                    backoff.recovered();
                    let accepted = Accepted {
                        stream,
                        peer: PeerAddr(peer),
                        at: Instant::now(),
                        metrics: series.clone(),
                    };
                    // A reload may have landed while this loop waited in
                    // accept; the connection gets the newest generation,
                    // read once, whole.
                    self.refresh(&mut generation);
                    self.start(accepted, &generation, permit, &close_mine);
                }
                Err(error) if sockopt::is_resource_exhaustion(&error) => {
                    drop(permit);
                    if !backoff.wait(&error, &self.stop_accepting).await {
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

    /// Takes the newest generation if a reload has published one.
    fn refresh(&mut self, generation: &mut Arc<Generation>) {
        if self.generation.has_changed().unwrap_or(false) {
            *generation = self.generation.borrow_and_update().clone();
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
        let Generation {
            listener,
            admission,
            ..
        } = &**generation;
        // Counted (and `active`) before admission: a refused connection is
        // closed through the same record.
        accepted.metrics.accepted();
        let trusted_peer = listener
            .proxy_protocol
            .as_ref()
            .is_some_and(|inbound| inbound.trusts(accepted.peer.0.ip()));
        let admitted = match admission.at_accept(accepted.peer, trusted_peer) {
            Ok(AtAccept::Admitted(admitted)) => Some(admitted),
            Ok(AtAccept::AfterPreface) => None,
            Err(refusal) => {
                // Closed unread: dropping the socket and the permit.
                close::refused(&accepted, listener, refusal);
                return;
            }
        };
        if let Some(admitted) = &admitted {
            close::log_dry_run(listener, accepted.peer, admitted);
        }
        // The loop's own token, shared: a connection is only ever cancelled
        // with all of its loop's, so it needs no node (an allocation) of
        // its own. Boxed before it is spawned: the future is moved once,
        // into its box, where tokio's spawn would otherwise copy all of it
        // several times on the way into the task (see `conn::handle`).
        self.tracker.spawn(Box::pin(conn::handle(
            accepted,
            generation.clone(),
            close_mine.clone(),
            conn::Slots {
                _permit: permit,
                admitted,
            },
        )));
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
