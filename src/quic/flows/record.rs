//! A flow's record and bounds: its counters shared with its task
//! ([`Stats`]), its record ([`FlowRecord`]: the one access record of both
//! protocols, [`crate::flow::access::ConnRecord`], with a flow's part,
//! [`FlowPart`])
//! and an open flow's idle and lifetime bounds ([`Expiry`]).
//!
//! Not here: the table that decides what a flow does ([`super`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use std::time::Instant;

use crate::addr::PeerAddr;
use crate::config::Listener;
use crate::flow::access::{self, Arrival, CloseReason, ConnRecord, QuicFields, RecordPart};
use crate::flow::route::RouteEntry;
use crate::metrics::ListenerMetrics;
use crate::pump::ready::Transferred;
use crate::pump::relay::lifetime_end;
use crate::quic::Version;
use crate::quic::cid::Path;

/// Datagrams and bytes each way, and the last activity, of one flow;
/// shared with the flow's task, which counts what it relays.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub datagrams_up: AtomicU64,
    pub bytes_up: AtomicU64,
    pub datagrams_down: AtomicU64,
    pub bytes_down: AtomicU64,
    /// Milliseconds from the flow's start to its last datagram.
    pub last: AtomicU64,
}

impl Stats {
    /// A client datagram of `len` bytes at `now`.
    pub(crate) fn up(&self, len: usize, started: Instant, now: Instant) {
        self.datagrams_up.fetch_add(1, Ordering::Relaxed);
        self.bytes_up.fetch_add(len as u64, Ordering::Relaxed);
        self.touch(started, now);
    }

    /// A backend datagram of `len` bytes at `now`.
    pub(crate) fn down(&self, len: usize, started: Instant, now: Instant) {
        self.datagrams_down.fetch_add(1, Ordering::Relaxed);
        self.bytes_down.fetch_add(len as u64, Ordering::Relaxed);
        self.touch(started, now);
    }

    /// The time from the flow's start to its last datagram.
    pub(crate) fn last(&self) -> Duration {
        Duration::from_millis(self.last.load(Ordering::Relaxed))
    }

    fn touch(&self, started: Instant, now: Instant) {
        let ms = now.saturating_duration_since(started).as_millis() as u64;
        self.last.fetch_max(ms, Ordering::Relaxed);
    }
}

/// A QUIC flow's part of its record ([`FlowRecord`]), owned (the flow
/// outlives any borrow): the listener, the arrival and the route's name a
/// TCP connection borrows, and what only a flow's line says.
#[derive(Debug)]
pub(crate) struct FlowPart {
    pub listener: Arc<Listener>,
    pub arrival: Arrival,
    pub route: Option<Box<str>>,
    /// The address the client sent its first datagram to (the PROXY
    /// header's destination), when known.
    pub dialled: Option<SocketAddr>,
    pub version: Option<Version>,
    /// The relay's end of the flow's backend socket: the client address
    /// the backend sees, logged so that its lines can be matched to this
    /// flow (a backend that reads no PROXY header over UDP sees only it).
    pub backend_local: Option<SocketAddr>,
    pub stats: Arc<Stats>,
    /// The client's current address once the flow is open (NAT rebinding).
    pub path: Option<Arc<Path>>,
}

impl FlowPart {
    /// The moment the flow's first datagram arrived.
    pub(crate) fn started(&self) -> Instant {
        self.arrival.at.into_std()
    }

    /// The client's first address (`client.peer`).
    pub(crate) fn peer(&self) -> SocketAddr {
        self.arrival.peer.0
    }
}

impl<'l> RecordPart<'l> for FlowPart {
    fn listener(&self) -> &Arc<Listener> {
        &self.listener
    }
    fn arrival(&self) -> &Arrival {
        &self.arrival
    }
    fn route(&self) -> Option<&str> {
        self.route.as_deref()
    }
    fn set_route(&mut self, entry: &'l RouteEntry) {
        self.route = Some(entry.route.clone());
    }
    fn quic(&self) -> Option<QuicFields> {
        let s = &self.stats;
        let (last_peer, rebinds) = match &self.path {
            Some(path) => (path.client(), path.rebinds()),
            None => (self.peer(), 0),
        };
        Some(QuicFields {
            version: self.version.map(Version::as_str),
            last_peer,
            rebinds,
            datagrams_up: s.datagrams_up.load(Ordering::Relaxed),
            datagrams_down: s.datagrams_down.load(Ordering::Relaxed),
            backend_local: self.backend_local,
        })
    }
    fn moved(&self) -> Option<Transferred> {
        let s = &self.stats;
        Some(Transferred {
            up: s.bytes_up.load(Ordering::Relaxed),
            down: s.bytes_down.load(Ordering::Relaxed),
        })
    }
}

/// A QUIC flow's record: the one access record of both protocols
/// ([`ConnRecord`]), with a flow's part; its line's byte counts are the
/// flow's [`Stats`] (`RecordPart::moved`), its level the reason table's (a
/// flow always sent a datagram, so it is never `silent`).
pub(crate) type FlowRecord = ConnRecord<FlowPart>;

/// A fresh record for a flow from `peer` whose first datagram arrived
/// `now`, sent to `dialled` (counted by its caller, as every datagram is).
pub(crate) fn flow_record(
    listener: Arc<Listener>,
    peer: SocketAddr,
    now: Instant,
    metrics: Arc<ListenerMetrics>,
    dialled: Option<SocketAddr>,
) -> FlowRecord {
    let part = FlowPart {
        listener,
        arrival: Arrival {
            peer: PeerAddr(peer),
            at: now.into(),
            metrics,
        },
        route: None,
        dialled,
        version: None,
        backend_local: None,
        stats: Arc::default(),
        path: None,
    };
    ConnRecord::with_part(access::next_conn_id(), part)
}

/// An open flow's idle and lifetime bounds: `idle_timeout` with no
/// datagram either way, and the route's `max_connection_lifetime` at the
/// moment a TCP connection with this id would draw (in the last tenth of
/// the lifetime, counted from the flow's first datagram).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Expiry {
    started: Instant,
    idle: Duration,
    end_of_life: Option<Instant>,
}

impl Expiry {
    pub(crate) fn new(
        started: Instant,
        idle: Duration,
        lifetime: Option<Duration>,
        id: u64,
    ) -> Expiry {
        Expiry {
            started,
            idle,
            end_of_life: lifetime_end(started.into(), lifetime, id).map(|end| end.into_std()),
        }
    }

    /// When to look again, the last datagram having come `last` after the
    /// start.
    pub(crate) fn deadline(&self, last: Duration) -> Instant {
        let idle_at = self.started + last + self.idle;
        self.end_of_life.map_or(idle_at, |end| end.min(idle_at))
    }

    /// Why the flow ends at `now`, if it does: its lifetime first.
    pub(crate) fn expired(&self, now: Instant, last: Duration) -> Option<CloseReason> {
        if self.end_of_life.is_some_and(|end| now >= end) {
            return Some(CloseReason::MaxLifetime);
        }
        (now >= self.started + last + self.idle).then_some(CloseReason::IdleTimeout)
    }
}
