//! A flow's record and bounds: its counters shared with its task
//! ([`Stats`]), what its access line says ([`FlowRecord`], written as the
//! one access record of both protocols, [`crate::flow::access::ConnRecord`])
//! and an open flow's idle and lifetime bounds ([`Expiry`]).
//!
//! Not here: the table that decides what a flow does ([`super`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use std::time::Instant;

use crate::addr::PeerAddr;
use crate::config::{Backend, Listener};
use crate::flow::access::{self, Arrival, CloseReason, ConnRecord, QuicFields};
use crate::flow::decision::Heard;
use crate::flow::route::{EchKind, RouteEntry};
use crate::metrics::ListenerMetrics;
use crate::pump::relay::lifetime_end;
use crate::quic::Version;
use crate::quic::cid::Path;
use crate::wire::fingerprint::Fingerprints;

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

/// What a flow keeps for its access line, owned (the flow outlives any
/// borrow); [`FlowRecord::close`] writes it as the one access record of
/// both protocols (`access::ConnRecord`).
#[derive(Debug)]
pub(crate) struct FlowRecord {
    pub id: u64,
    pub listener: Arc<Listener>,
    pub peer: SocketAddr,
    pub started: Instant,
    pub version: Option<Version>,
    pub sni: Option<Box<str>>,
    /// The hello's ALPN list and ECH extension, logged as TCP logs them.
    pub alpn: Option<Box<str>>,
    pub ech: Option<EchKind>,
    pub route: Option<Box<str>>,
    pub backend: Option<Arc<Backend>>,
    pub backend_addr: Option<SocketAddr>,
    /// The relay's end of the flow's backend socket: the client address
    /// the backend sees, logged so that its lines can be matched to this
    /// flow (no PROXY header on UDP carries the real one).
    pub backend_local: Option<SocketAddr>,
    pub stats: Arc<Stats>,
    pub metrics: Arc<ListenerMetrics>,
    /// The client's current address once the flow is open (NAT rebinding).
    pub path: Option<Arc<Path>>,
    /// The hello's JA4 and JA3, when the listener computes them.
    pub fingerprints: Option<Arc<Fingerprints>>,
}

impl FlowRecord {
    /// A fresh record for a flow from `peer` that started `now`.
    pub(crate) fn new(
        listener: Arc<Listener>,
        peer: SocketAddr,
        now: Instant,
        metrics: Arc<ListenerMetrics>,
    ) -> FlowRecord {
        FlowRecord {
            id: access::next_conn_id(),
            listener,
            peer,
            started: now,
            version: None,
            sni: None,
            alpn: None,
            ech: None,
            route: None,
            backend: None,
            backend_addr: None,
            backend_local: None,
            stats: Arc::default(),
            metrics,
            path: None,
            fingerprints: None,
        }
    }

    /// The hello's log fields, as the decision after it read them.
    pub(crate) fn heard(&mut self, heard: Heard) {
        self.sni = heard.sni;
        self.ech = heard.ech;
        self.alpn = heard.alpn;
    }

    /// The route the flow took (or was refused on by its limits).
    pub(crate) fn routed(&mut self, entry: &RouteEntry) {
        self.route = Some(entry.route.clone());
        self.backend = Some(entry.backend.clone());
    }

    /// Counts the flow's end and writes its one access line, at the level
    /// the reason table gives (a flow always sent a datagram, so it is
    /// never `silent`).
    pub(crate) fn close(self, reason: CloseReason) {
        let s = &self.stats;
        let (last_peer, rebinds) = match &self.path {
            Some(path) => (path.client(), path.rebinds()),
            None => (self.peer, 0),
        };
        let quic = QuicFields {
            version: self.version.map(Version::as_str),
            last_peer,
            rebinds,
            datagrams_up: s.datagrams_up.load(Ordering::Relaxed),
            datagrams_down: s.datagrams_down.load(Ordering::Relaxed),
            backend_local: self.backend_local,
        };
        let arrival = Arrival {
            peer: PeerAddr(self.peer),
            at: self.started.into(),
            metrics: self.metrics,
        };
        let mut record = ConnRecord::arrived(self.id, &self.listener, &arrival);
        record.sni = self.sni;
        record.alpn = self.alpn;
        record.ech = self.ech;
        record.route = self.route.as_deref();
        record.backend = self.backend;
        record.backend_addr = self.backend_addr;
        record.fingerprints = self.fingerprints;
        record.moved.up = s.bytes_up.load(Ordering::Relaxed);
        record.moved.down = s.bytes_down.load(Ordering::Relaxed);
        record.close_flow(reason, &quic);
    }
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
