//! The admin listener's table of open connections
//! ([`ConnectionTable`], at most [`super::limits::MAX_ADMIN_CONNECTIONS`]): each
//! connection's slot ([`ConnectionSlot`]: where it is, silent, reading a
//! request, responding or idle between requests; its eviction signal; its
//! current deadline), and its place in the table, given back when its task
//! ends, however it ends ([`ConnectionLease`], which counts and logs the
//! close, [`AdminClose`]).
//!
//! A full table makes room for a new connection by closing an older one
//! (`evicted`), chosen in this order: the oldest that has sent nothing,
//! else the oldest idle keep-alive, else the oldest mid-request. It never
//! refuses, and the newest connection is never the one dropped.
//!
//! Not here: accepting and serving the connections ([`super::server`]),
//! or the deadlines each phase runs under ([`super::stream`],
//! [`super::limits`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::peer::AdminPeer;
use crate::metrics;

/// Why an admin connection ended: the `reason` of
/// `snirelay_admin_connections_closed_total` and the `close` log field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AdminClose {
    /// The client closed, or asked to (`Connection: close`).
    Done,
    /// Nothing within [`super::limits::FIRST_BYTE_TIMEOUT`].
    Silent,
    /// A request not finished within [`super::limits::REQUEST_TIMEOUT`].
    RequestTimeout,
    /// No new request within [`super::limits::KEEP_ALIVE_TIMEOUT`].
    IdleTimeout,
    /// Closed to make room for a newer connection.
    Evicted,
    /// Malformed or oversized request, or a socket error.
    Error,
    /// The relay is stopping.
    Shutdown,
}

impl AdminClose {
    /// Every reason: the series the admin listener shows at zero from its
    /// start. A new variant goes here too (its `as_str` arm is enforced).
    pub(super) const ALL: [AdminClose; 7] = [
        AdminClose::Done,
        AdminClose::Silent,
        AdminClose::RequestTimeout,
        AdminClose::IdleTimeout,
        AdminClose::Evicted,
        AdminClose::Error,
        AdminClose::Shutdown,
    ];

    pub(super) fn as_str(self) -> &'static str {
        match self {
            AdminClose::Done => "done",
            AdminClose::Silent => "silent",
            AdminClose::RequestTimeout => "request_timeout",
            AdminClose::IdleTimeout => "idle_timeout",
            AdminClose::Evicted => "evicted",
            AdminClose::Error => "error",
            AdminClose::Shutdown => "shutdown",
        }
    }
}

// Where a connection is, as the eviction order sees it.
pub(super) const SILENT: u8 = 0;
pub(super) const IDLE: u8 = 1;
pub(super) const READING: u8 = 2;
pub(super) const RESPONDING: u8 = 3;

/// One open admin connection, as the table and its task share it.
#[derive(Debug, Default)]
pub(super) struct ConnectionSlot {
    /// [`SILENT`], [`READING`], [`RESPONDING`] or [`IDLE`].
    state: AtomicU8,
    /// Fired when the table evicts this connection.
    pub(super) evicted: CancellationToken,
    /// 0, or 1 + the state the connection was in when a phase deadline
    /// first passed (which deadline closed it: a request's or keep-alive's).
    pub(super) timed_out: AtomicU8,
    /// The current phase's deadline, as [`super::stream::Guarded`] enforces it: a
    /// forwarded request must be answered before it.
    deadline: Mutex<Option<Instant>>,
}

impl ConnectionSlot {
    pub(super) fn state(&self) -> u8 {
        self.state.load(Ordering::Relaxed)
    }

    pub(super) fn set(&self, state: u8) {
        self.state.store(state, Ordering::Relaxed);
    }

    pub(super) fn deadline(&self) -> Option<Instant> {
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn set_deadline(&self, deadline: Instant) {
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner()) = Some(deadline);
    }

    /// Eviction order: lower goes first.
    fn rank(&self) -> usize {
        match self.state() {
            SILENT => 0,
            IDLE => 1,
            _ => 2,
        }
    }
}

/// The open admin connections by age (ids only grow), at most `cap`.
pub(super) struct ConnectionTable {
    cap: usize,
    inner: Mutex<TableInner>,
}

#[derive(Default)]
struct TableInner {
    next: u64,
    open: BTreeMap<u64, Arc<ConnectionSlot>>,
}

impl ConnectionTable {
    pub(super) fn new(cap: usize) -> ConnectionTable {
        ConnectionTable {
            cap,
            inner: Mutex::default(),
        }
    }

    /// Enters a new connection, evicting an older one first if the table
    /// is full. Never refuses.
    pub(super) fn enter(&self) -> (u64, Arc<ConnectionSlot>) {
        let mut t = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        while t.open.len() >= self.cap {
            // The oldest of the lowest rank: BTreeMap iterates by age.
            let mut first = [None; 3];
            for (id, slot) in &t.open {
                let rank = slot.rank();
                if first[rank].is_none() {
                    first[rank] = Some(*id);
                    if rank == 0 {
                        break;
                    }
                }
            }
            let Some(victim) = first.into_iter().flatten().next() else {
                break;
            };
            if let Some(slot) = t.open.remove(&victim) {
                slot.evicted.cancel();
            }
        }
        let id = t.next;
        t.next += 1;
        let slot = Arc::new(ConnectionSlot::default());
        t.open.insert(id, slot.clone());
        (id, slot)
    }

    fn leave(&self, id: u64) {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .open
            .remove(&id);
    }
}

/// A connection's place in the table, given back (and its close counted,
/// then logged) when its task ends, however it ends.
pub(super) struct ConnectionLease {
    pub(super) table: Arc<ConnectionTable>,
    pub(super) id: u64,
    pub(super) peer: Arc<AdminPeer>,
    pub(super) close: AdminClose,
}

impl Drop for ConnectionLease {
    fn drop(&mut self) {
        self.table.leave(self.id);
        let close = self.close.as_str();
        metrics::metrics().admin_closed(close);
        tracing::debug!(admin.peer = %self.peer, close, "admin connection closed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_evicts_silent_then_idle_then_active_oldest_first() {
        let table = ConnectionTable::new(4);
        let mut slots: Vec<Arc<ConnectionSlot>> = (0..4).map(|_| table.enter().1).collect();
        slots[0].set(RESPONDING);
        slots[1].set(IDLE);
        slots[2].set(READING);
        // slots[3] is silent.
        let mut enter = |state: u8| {
            let (_, slot) = table.enter();
            slot.set(state);
            slots.push(slot);
            (0..slots.len())
                .filter(|&i| slots[i].evicted.is_cancelled())
                .collect::<Vec<_>>()
        };
        assert_eq!(enter(READING), [3], "the silent one goes first");
        assert_eq!(enter(IDLE), [1, 3], "then the oldest idle one");
        assert_eq!(
            enter(READING),
            [1, 3, 5],
            "a young idle one before any active"
        );
        assert_eq!(enter(SILENT), [0, 1, 3, 5], "then the oldest active one");
        // A connection that ended makes room without evicting.
        table.leave(2);
        assert_eq!(enter(SILENT), [0, 1, 3, 5]);
    }
}
