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
//! (`refused`). It is the one access record of both protocols: the fields
//! both fill are its own, and what each transport holds its own way is its
//! part ([`RecordPart`]): a TCP connection's borrows ([`TcpPart`]), a QUIC
//! flow keeps its record for its life and its part owns what it needs
//! ([`crate::quic::flows::record::FlowPart`]), with the fields only a flow's line
//! has ([`QuicFields`]: `protocol = "quic"`, the QUIC version, the client's
//! last address and rebinds, datagrams each way, `backend.local`), which a
//! TCP line leaves out. The level is the reason's, from the table in
//! [`crate::close_reason`], on either protocol.
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

/// A fresh connection id, for a record made with [`ConnRecord::with_part`]
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

/// What routing read off the hello, for the access line (the decision
/// fills it, [`crate::flow::decision::decide`]).
#[derive(Debug, Default)]
pub(crate) struct Heard {
    /// The server name as it is logged (see
    /// [`crate::flow::route::Decision::sni`]).
    pub sni: Option<Box<str>>,
    pub ech: Option<EchKind>,
    /// The `alpn` field ([`crate::flow::decision::alpn_field`]).
    pub alpn: Option<Box<str>>,
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

/// What the connection's log line says; filled in stage by stage. The
/// fields every transport fills are here, once; what a transport holds its
/// own way (the listener, the arrival, the route's name, and a QUIC flow's
/// extra fields) is its `part` ([`RecordPart`]): a TCP connection's
/// borrows from its snapshot ([`TcpPart`], never copied per connection), a
/// QUIC flow's owns what it keeps for its life
/// ([`crate::quic::flows::record::FlowPart`]).
#[derive(Debug)]
pub(crate) struct ConnRecord<P> {
    /// The connection's id (`conn_id` in log lines), unique in this process.
    pub id: u64,
    /// The transport's own part: listener, arrival, route name, extra fields.
    pub(crate) part: P,
    /// The SNI its hello named, once read; `None` before, or without one.
    pub sni: Option<Box<str>>,
    pub(crate) alpn: Option<Box<str>>,
    /// What the hello's ECH extension was (see [`EchKind`]).
    pub ech: Option<EchKind>,
    /// The backend chosen; `None` until routed.
    pub backend: Option<Arc<Backend>>,
    /// The backend address connected to; `None` until connected.
    pub backend_addr: Option<std::net::SocketAddr>,
    pub(crate) moved: Transferred,
    /// The client address a trusted peer's PROXY header claims (`client.claimed`).
    pub claimed: Option<ClaimedAddr>,
    /// The hello's JA4 and JA3 (`tls.ja4`, `tls.ja3`, `tls.ja3_string`),
    /// when the listener computes them (see
    /// [`crate::flow::route::RouteTable::wants_fingerprints`]).
    pub fingerprints: Option<Arc<Fingerprints>>,
}

/// What one transport's record holds its own way: where the listener, the
/// arrival and the route's name are, and the fields only its line has.
pub(crate) trait RecordPart<'l> {
    /// The listener that accepted the connection.
    fn listener(&self) -> &Arc<Listener>;
    /// Its peer, accept time and metric series.
    fn arrival(&self) -> &Arrival;
    /// The name of the route it took; `None` until routed.
    fn route(&self) -> Option<&str>;
    /// Takes the route's name from `entry`.
    fn set_route(&mut self, entry: &'l RouteEntry);
    /// A QUIC flow's fields for its line, read at its close; `None` for TCP.
    fn quic(&self) -> Option<QuicFields>;
    /// The bytes moved each way, where the part counts them itself (a
    /// QUIC flow's task does); `None`: the record's own count.
    fn moved(&self) -> Option<Transferred>;
}

/// A TCP connection's part of its record: borrowed from the connection's
/// snapshot and its task (`'l`), so a connection's task holds each once.
#[derive(Debug)]
pub(crate) struct TcpPart<'l> {
    listener: &'l Arc<Listener>,
    /// Borrowed: see [`Arrival`].
    arrival: &'l Arrival,
    route: Option<&'l str>,
}

impl<'l> RecordPart<'l> for TcpPart<'l> {
    fn listener(&self) -> &Arc<Listener> {
        self.listener
    }
    fn arrival(&self) -> &Arrival {
        self.arrival
    }
    fn route(&self) -> Option<&str> {
        self.route
    }
    fn set_route(&mut self, entry: &'l RouteEntry) {
        self.route = Some(&entry.route);
    }
    fn quic(&self) -> Option<QuicFields> {
        None
    }
    fn moved(&self) -> Option<Transferred> {
        None
    }
}

/// A TCP connection's record.
pub(crate) type TcpRecord<'l> = ConnRecord<TcpPart<'l>>;

impl<'l> TcpRecord<'l> {
    /// A record for a connection just accepted, with a fresh id. Inlined,
    /// as `with_part` is, so the record is built in place in
    /// the connection's task (see [`crate::pump::relay::relay`]).
    #[inline(always)]
    pub(crate) fn new(listener: &'l Arc<Listener>, arrival: &'l Arrival) -> Self {
        ConnRecord::with_part(
            next_conn_id(),
            TcpPart {
                listener,
                arrival,
                route: None,
            },
        )
    }

    /// The arrival the record borrows, for as long as it is borrowed (not
    /// only as long as the record is): stages read it while they fill in
    /// the record.
    pub(crate) fn arrival_borrowed(&self) -> &'l Arrival {
        self.part.arrival
    }
}

/// What a relaying TCP connection keeps of its record: the fields its
/// registry entry does not hold. The SNI, the backend's address and the
/// claimed client are the entry's while the connection relays, and the
/// record takes them back at close ([`RelayingRecord::close_record`]); the
/// listener and the arrival are borrowed again from the task. An idle
/// connection's task holds this (72 bytes) instead of the whole record
/// (176), which is what lets the task fit a smaller allocation
/// ([`crate::tcp::connection`]).
#[derive(Debug)]
pub(crate) struct RelayingRecord<'l> {
    id: u64,
    route: Option<&'l str>,
    backend: Option<Arc<Backend>>,
    alpn: Option<Box<str>>,
    fingerprints: Option<Arc<Fingerprints>>,
    /// Bytes counted toward the backend before the relay (the replayed
    /// hello); the relay's own count is added at close.
    up_before: u64,
    ech: Option<EchKind>,
}

/// What the registry entry of a relaying connection gives back to its
/// record at close (see [`RelayingRecord`]).
#[derive(Debug)]
pub(crate) struct FromEntry {
    pub sni: Option<Box<str>>,
    pub backend_addr: SocketAddr,
    pub claimed: Option<ClaimedAddr>,
    /// What the relay moved each way.
    pub relayed: Transferred,
}

impl<'l> TcpRecord<'l> {
    /// The record of a connection that starts relaying, reduced to what
    /// its registry entry does not hold (see [`RelayingRecord`]). Inlined,
    /// so the reduced record is written where the task keeps it.
    #[inline(always)]
    pub(crate) fn relaying(self) -> RelayingRecord<'l> {
        debug_assert_eq!(self.moved.down, 0, "nothing goes down before the relay");
        RelayingRecord {
            id: self.id,
            route: self.part.route,
            backend: self.backend,
            alpn: self.alpn,
            fingerprints: self.fingerprints,
            up_before: self.moved.up,
            ech: self.ech,
        }
    }
}

impl<'l> RelayingRecord<'l> {
    /// The connection's id.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// The whole record again, for the line at close: `listener` and
    /// `arrival` as the record had them, the rest from the entry.
    pub(crate) fn close_record(
        self,
        listener: &'l Arc<Listener>,
        arrival: &'l Arrival,
        entry: FromEntry,
    ) -> TcpRecord<'l> {
        ConnRecord {
            id: self.id,
            part: TcpPart {
                listener,
                arrival,
                route: self.route,
            },
            sni: entry.sni,
            alpn: self.alpn,
            ech: self.ech,
            backend: self.backend,
            backend_addr: Some(entry.backend_addr),
            moved: Transferred {
                up: self.up_before + entry.relayed.up,
                down: entry.relayed.down,
            },
            claimed: entry.claimed,
            fingerprints: self.fingerprints,
        }
    }
}

impl<P> ConnRecord<P> {
    /// The record of connection `id`, as it arrived, its transport's part
    /// being `part`.
    #[inline(always)]
    pub(crate) fn with_part(id: u64, part: P) -> Self {
        ConnRecord {
            id,
            part,
            sni: None,
            alpn: None,
            ech: None,
            backend: None,
            backend_addr: None,
            moved: Transferred::default(),
            claimed: None,
            fingerprints: None,
        }
    }
}

impl<'l, P: RecordPart<'l>> ConnRecord<P> {
    /// The name of the route it took; `None` until routed.
    pub(crate) fn route(&self) -> Option<&str> {
        self.part.route()
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
        self.part.set_route(entry);
        self.backend = Some(entry.backend.clone());
    }

    /// Counts the connection's close and writes its one log line, at the
    /// level of the reason's fault (none for a silent connection).
    pub(crate) fn close(&self, reason: CloseReason) {
        self.write(reason, Throttled::default());
    }

    /// [`ConnRecord::close`] for a connection with bandwidth limits, whose
    /// line also says how long each direction waited for tokens (passed
    /// here, not kept in the record, which would make every connection's task
    /// larger for a limit few routes set).
    pub(crate) fn close_throttled(&self, reason: CloseReason, throttled: Throttled) {
        self.write(reason, throttled);
    }

    /// Counts the close and writes the one access line of either protocol.
    fn write(&self, reason: CloseReason, throttled: Throttled) {
        let quic = self.part.quic();
        let quic = quic.as_ref();
        let listener = self.part.listener();
        let arrival = self.part.arrival();
        let route = self.part.route();
        let moved = self.part.moved().unwrap_or(self.moved);
        let nonzero = |ms: u64| (ms > 0).then_some(ms);
        arrival.metrics.closed(&metrics::Closed {
            route,
            backend: self.backend_name(),
            reason,
            sni: self.sni.is_some(),
            ech: self.ech.is_some(),
            bytes_up: moved.up,
            bytes_down: moved.down,
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
                    listener = %listener.name,
                    protocol = quic.map(|_| "quic"),
                    client.peer = %arrival.peer,
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
                    route = route,
                    backend = self.backend_name(),
                    backend.addr = self.backend_addr.map(tracing::field::display),
                    backend.local = quic
                        .and_then(|q| q.backend_local)
                        .map(tracing::field::display),
                    datagrams.up = quic.map(|q| q.datagrams_up),
                    datagrams.down = quic.map(|q| q.datagrams_down),
                    bytes.up = moved.up,
                    bytes.down = moved.down,
                    throttled_ms.up = nonzero(throttled.up_ms),
                    throttled_ms.down = nonzero(throttled.down_ms),
                    duration_ms = arrival.at.elapsed().as_millis() as u64,
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
/// there is no TLS alert to send. Called by
/// the admission gate ([`crate::flow::gate`]) only.
pub(crate) fn refused<'l, P: RecordPart<'l>>(record: ConnRecord<P>, reason: CloseReason) {
    record.write(reason, Throttled::default());
}
