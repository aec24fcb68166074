//! The close stage: why a connection ended, and the one log line and the
//! metrics that say so.
//!
//! Every stage's error folds into exactly one [`CloseReason`], whose table
//! (name, whose fault, which stage; the log level and the hello-outcome
//! metric derived from it) is the leaf module [`crate::close_reason`],
//! re-exported here.
//!
//! The [`ConnRecord`] collects a connection's log fields as the stages learn
//! them and writes them once, at close (`ConnRecord::close`); a
//! connection refused at admission is closed through the same record
//! (`refused`). It is the one access record of both protocols: a QUIC
//! flow's line is the same record, built when the flow closes from what
//! the flow kept ([`crate::quic::flows::FlowRecord`]), closed with the fields only a
//! flow has (`ConnRecord::close_flow`, [`QuicFields`]: `protocol =
//! "quic"`, the QUIC version, the client's last address and rebinds,
//! datagrams each way, `backend.local`), which a TCP line leaves out. The
//! level is the reason's, from the table in [`crate::close_reason`], on
//! either protocol.
//!
//! Cost: a close is atomic adds on series resolved ahead of the connection
//! (see `metrics`) and, unless the reason is silent, one `tracing` event;
//! the table lookups are `const fn` matches. Nothing is allocated here.
//!
//! Not here: deciding that a connection ends (each stage does), nor the
//! order of stages ([`crate::tcp::connection`], [`crate::quic::flows`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::time::Instant;
use tracing::Level;

use crate::addr::{ClaimedAddr, PeerAddr};
pub use crate::close_reason::CloseReason;
pub(crate) use crate::close_reason::Fault;
use crate::config::{Backend, Listener};
use crate::flow::decision::Heard;
use crate::flow::route::{EchKind, RouteEntry};
use crate::metrics::{self, ListenerMetrics};
use crate::pump::ready::Transferred;
use crate::wire::fingerprint::Fingerprints;

/// Where and when a connection (or QUIC flow) arrived, and its listener's
/// metric series. Held once, by whoever holds the connection (its task,
/// in [`crate::tcp::connection::Accepted`]); its [`ConnRecord`] borrows it, so a connection's
/// task carries the 56 bytes once, not twice.
#[derive(Debug)]
pub struct Arrival {
    /// The measured peer (`client.peer`).
    pub(crate) peer: PeerAddr,
    /// When it was accepted (the line's `duration_ms` counts from here).
    pub(crate) at: Instant,
    /// The listener's pre-resolved metric series.
    pub metrics: Arc<ListenerMetrics>,
}

static NEXT_CONN_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh connection id, for a record made with [`ConnRecord::arrived`]
/// (a QUIC flow's, see [`crate::quic::flows`], which needs its id before its
/// record): one sequence for every protocol.
pub(crate) fn next_conn_id() -> u64 {
    NEXT_CONN_ID.fetch_add(1, Ordering::Relaxed)
}

/// What a QUIC flow's access line says beyond what a TCP connection's says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuicFields {
    /// The QUIC version of the flow's Initials, once read (`quic_version`).
    pub version: Option<&'static str>,
    /// The client's address when the flow ended (`client.last_peer`): the
    /// first one unless the flow followed it (NAT rebinding).
    pub last_peer: SocketAddr,
    /// How often the flow followed its client (`client.rebinds`).
    pub rebinds: u32,
    pub(crate) datagrams_up: u64,
    pub(crate) datagrams_down: u64,
    /// The relay's end of the flow's backend socket (`backend.local`): the
    /// client address the backend sees (no PROXY header on UDP).
    pub backend_local: Option<SocketAddr>,
}

/// How long each direction of a connection with bandwidth limits waited
/// for tokens (`throttled_ms.up`, `throttled_ms.down`; written only when
/// not zero).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Throttled {
    /// Client → backend, in milliseconds.
    pub up_ms: u64,
    /// Backend → client, in milliseconds.
    pub down_ms: u64,
}

/// What the connection's log line says; filled in stage by stage. Names
/// are borrowed from the connection's snapshot (`'l`) or shared with it
/// (`Arc`), never copied per connection.
#[derive(Debug)]
pub struct ConnRecord<'l> {
    /// The connection's id (`conn_id` in log lines), unique in this process.
    pub id: u64,
    /// The listener that accepted it.
    pub listener: &'l Listener,
    /// Its peer, accept time and metric series (borrowed: see [`Arrival`]).
    pub(crate) arrival: &'l Arrival,
    /// The SNI its hello named, once read; `None` before, or without one.
    pub sni: Option<Box<str>>,
    pub(crate) alpn: Option<Box<str>>,
    /// What the hello's ECH extension was (see `route::EchKind`).
    pub ech: Option<EchKind>,
    /// The name of the route it took; `None` until routed.
    pub route: Option<&'l str>,
    /// The backend chosen; `None` until routed.
    pub backend: Option<Arc<Backend>>,
    /// The backend address connected to; `None` until connected.
    pub backend_addr: Option<std::net::SocketAddr>,
    pub(crate) moved: Transferred,
    /// The client address a trusted peer's PROXY header claims (`client.claimed`).
    pub claimed: Option<ClaimedAddr>,
    /// The hello's JA4 and JA3 (`tls.ja4`, `tls.ja3`, `tls.ja3_string`),
    /// when the listener computes them (see
    /// `route::RouteTable::wants_fingerprints`).
    pub fingerprints: Option<Arc<Fingerprints>>,
}

impl<'l> ConnRecord<'l> {
    /// A record for a connection just accepted, with a fresh id. Inlined,
    /// as `arrived` is, so the record is built in place in
    /// the connection's task (see [`crate::pump::relay::relay`]).
    #[inline(always)]
    pub fn new(listener: &'l Listener, arrival: &'l Arrival) -> Self {
        Self::arrived(next_conn_id(), listener, arrival)
    }

    /// The record of connection `id`, as it arrived.
    #[inline(always)]
    pub(crate) fn arrived(id: u64, listener: &'l Listener, arrival: &'l Arrival) -> Self {
        ConnRecord {
            id,
            listener,
            arrival,
            sni: None,
            alpn: None,
            ech: None,
            route: None,
            backend: None,
            backend_addr: None,
            moved: Transferred::default(),
            claimed: None,
            fingerprints: None,
        }
    }

    fn backend_name(&self) -> Option<&str> {
        self.backend.as_ref().map(|b| b.name.as_str())
    }

    /// The hello's log fields, as the decision after it read them.
    pub(crate) fn heard(&mut self, heard: Heard) {
        self.sni = heard.sni;
        self.ech = heard.ech;
        self.alpn = heard.alpn;
    }

    /// The route the connection took (or was refused on by its limits).
    pub(crate) fn routed(&mut self, entry: &'l RouteEntry) {
        self.route = Some(&entry.route);
        self.backend = Some(entry.backend.clone());
    }

    /// Counts the connection's close and writes its one log line, at the
    /// level of the reason's fault (none for a silent connection).
    pub(crate) fn close(&self, reason: CloseReason) {
        self.write(reason, None, Throttled::default());
    }

    /// [`ConnRecord::close`] for a connection with bandwidth limits, whose
    /// line also says how long each direction waited for tokens (passed
    /// here, not kept in the record, for the same reason as `quic`'s).
    pub(crate) fn close_throttled(&self, reason: CloseReason, throttled: Throttled) {
        self.write(reason, None, throttled);
    }

    /// [`ConnRecord::close`] for a QUIC flow, whose line also has `quic`'s
    /// fields. (Passed here rather than kept in the record, which would
    /// make every TCP connection's task a pointer larger.)
    pub(crate) fn close_flow(&self, reason: CloseReason, quic: &QuicFields) {
        self.write(reason, Some(quic), Throttled::default());
    }

    /// Counts the close and writes the one access line of either protocol.
    fn write(&self, reason: CloseReason, quic: Option<&QuicFields>, throttled: Throttled) {
        let nonzero = |ms: u64| (ms > 0).then_some(ms);
        self.arrival.metrics.closed(&metrics::Closed {
            route: self.route,
            backend: self.backend_name(),
            reason,
            sni: self.sni.is_some(),
            ech: self.ech.is_some(),
            bytes_up: self.moved.up,
            bytes_down: self.moved.down,
        });
        // An event's level is part of its static callsite, so it must be a
        // constant: one callsite per fault, each at `Fault::level`.
        macro_rules! line {
            ($fault:expr) => {{
                const LEVEL: Level = match $fault.level() {
                    Some(level) => level,
                    None => panic!("this fault writes no line"),
                };
                tracing::event!(
                    target: "snirelay::access",
                    LEVEL,
                    conn_id = self.id,
                    listener = %self.listener.name,
                    protocol = quic.map(|_| "quic"),
                    client.peer = %self.arrival.peer,
                    client.claimed = self.claimed.map(tracing::field::display),
                    client.last_peer = quic.map(|q| tracing::field::display(q.last_peer)),
                    client.rebinds = quic.map(|q| q.rebinds),
                    quic_version = quic.and_then(|q| q.version),
                    sni = self.sni.as_deref(),
                    alpn = self.alpn.as_deref(),
                    ech = self.ech.is_some(),
                    ech_kind = self.ech.map(EchKind::as_str),
                    tls.ja4 = self.fingerprints.as_deref().map(Fingerprints::ja4),
                    tls.ja3 = self.fingerprints.as_deref().map(Fingerprints::ja3_hash),
                    tls.ja3_string = self.fingerprints.as_deref().map(Fingerprints::ja3),
                    route = self.route,
                    backend = self.backend_name(),
                    backend.addr = self.backend_addr.map(tracing::field::display),
                    backend.local = quic
                        .and_then(|q| q.backend_local)
                        .map(tracing::field::display),
                    datagrams.up = quic.map(|q| q.datagrams_up),
                    datagrams.down = quic.map(|q| q.datagrams_down),
                    bytes.up = self.moved.up,
                    bytes.down = self.moved.down,
                    throttled_ms.up = nonzero(throttled.up_ms),
                    throttled_ms.down = nonzero(throttled.down_ms),
                    duration_ms = self.arrival.at.elapsed().as_millis() as u64,
                    close = reason.as_str(),
                    "connection closed"
                )
            }};
        }
        match reason.fault() {
            Fault::Normal => line!(Fault::Normal),
            Fault::Client => line!(Fault::Client),
            Fault::Admission => line!(Fault::Admission),
            Fault::Ours => line!(Fault::Ours),
            Fault::Nobody => {}
        }
    }
}

/// Closes a connection (or QUIC flow) refused at admission through its
/// `record` with `reason`, its refusal counted by the caller; the caller
/// closes the socket (or drops the datagram) without reading from it, so
/// there is no TLS alert to send. `quic`: a QUIC flow's fields. Called by
/// the admission gate ([`crate::flow::gate`]) only.
pub(crate) fn refused(record: ConnRecord<'_>, quic: Option<&QuicFields>, reason: CloseReason) {
    record.write(reason, quic, Throttled::default());
}
