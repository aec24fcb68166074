//! A `protocol = "quic"` listener at run time: UDP sockets on the
//! listener's addresses, and the flows of the clients that send to them.
//!
//! A flow is one client address and port. Each socket has one task
//! ([`run_socket`]) that reads every datagram and keeps the socket's flows
//! in a map:
//! - a new source starts a *pending* flow, if admission lets it (the
//!   listener's `[listener.limits]`, a process-wide connection permit of
//!   `[global] max_connections`, and the pending caps below); otherwise its
//!   datagram is dropped (counted, and summarised in a log line at most once
//!   a second);
//! - a pending flow's datagrams go to its [`Parser`] and are held (bounded
//!   per flow by [`Limits`], per socket by [`MAX_HELD_BYTES`]) until the
//!   parser gives a verdict or `client_hello_timeout` passes since the
//!   first one (`hello_timeout`, checked every [`SWEEP`]);
//! - on a hello, the flow is routed by the listener's route table exactly as
//!   a TCP connection (`route::RouteTable::decide`, then the route's
//!   admission); a refusal answers the client with the QUIC refusal
//!   ([`super::refusal`], the TLS alert the TCP path would send) and ends the
//!   flow; a route connects one UDP socket to one of its backend's fixed
//!   addresses (in turn), forwards the held datagrams in arrival order and
//!   the flow is *open*;
//! - an open flow's client datagrams are sent on its backend socket without
//!   being read; a task per flow (`relay_back`) sends the backend's
//!   datagrams to the client from the listening socket, and ends the flow
//!   at `idle_timeout` with no datagram either way, when its route drains
//!   after a reload, or on shutdown;
//! - other verdicts end the flow silently (`not_quic`, `unknown_version`,
//!   `malformed`, `too_large`, `no_sni`...);
//! - NAT rebinding ([`super::cid`]): `relay_back` learns the backend's
//!   connection IDs from its long-header packets (at most four per flow);
//!   a datagram from an address no flow has, whose Destination Connection
//!   ID is one of them, moves that open flow to the new address (the old
//!   address's entry is gone, the backend's datagrams go to the new one,
//!   the access line counts `client.rebinds` and names `client.last_peer`);
//!   a new address that matches nothing starts a pending flow as above.
//!
//! Every flow that sent a datagram ends with one access line (the TCP
//! fields, `protocol = "quic"`, the QUIC version, datagrams and bytes each
//! way) and the TCP close metrics.
//!
//! Bounds: pending flows per socket at most [`MAX_PENDING_FLOWS`] and never
//! more than the connection permits still free (so a flood of spoofed
//! Initials can take at most half of what is free, and established flows
//! and TCP connections keep the rest); held bytes per socket at most
//! [`MAX_HELD_BYTES`]; open and pending flows together hold one permit each.
//! Datagrams that would break a bound are dropped, which a QUIC client
//! survives by retransmitting.
//!
//! Drain: on stop, no new flow starts; open flows run until they idle out
//! or the drain timeout closes them. A listener (or address) a reload
//! removes ends its flows at once.
//!
//! Not here (yet): recvmmsg/sendmmsg and GSO/GRO batching (one system call
//! per datagram, through tokio's `UdpSocket`); following a client that
//! migrates to a connection ID issued later in an encrypted frame (see
//! [`super::cid`]); backend
//! address selection by policy, weights, caps and health (flows take the
//! fixed addresses in turn); binary upgrade (UDP sockets are not handed
//! over); Retry and PROXY headers (not asked).

use std::collections::{HashMap, VecDeque};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::Version;
use super::cid::{self, CidTable, FlowCids, Path};
use super::initial::{ConnectionId, Limits, Parser, QuicHello, Verdict};
use super::refusal::{HANDSHAKE_FAILURE, UNRECOGNIZED_NAME, refusal};
use crate::addr::PeerAddr;
use crate::admit::{self, Admitted, RouteAdmitted, Source};
use crate::close::{self, CloseReason, Fault};
use crate::config::{Backend, Listener};
use crate::drain::DrainGuard;
use crate::generation::Generation;
use crate::metrics::{self, ListenerMetrics};
use crate::route::NoRoute;

/// Pending flows (hello not complete yet) per listening socket.
pub const MAX_PENDING_FLOWS: usize = 1024;
/// Bytes held for pending flows per listening socket (16 MiB): with the
/// per-flow limit (64 KiB for the default `max_client_hello_bytes`) a
/// flood cannot make the held datagrams grow past this.
pub const MAX_HELD_BYTES: usize = 16 << 20;
/// How often pending flows are checked against `client_hello_timeout`.
pub const SWEEP: Duration = Duration::from_millis(100);
/// The largest UDP payload.
const MAX_DATAGRAM: usize = 65_535;
/// TLS alert `protocol_version`.
const PROTOCOL_VERSION: u8 = 70;

/// What every QUIC socket task of the process shares with the TCP side.
#[derive(Clone)]
pub struct Runtime {
    /// Process-wide connection permits (`global.max_connections`).
    pub permits: Arc<Semaphore>,
    /// Flow and socket tasks, so a drain can wait for them.
    pub connections: TaskTracker,
    /// Fires when the process drains (no new flows).
    pub stop_accepting: CancellationToken,
    /// Fires to close every flow.
    pub close_connections: CancellationToken,
}

/// Binds a UDP socket for `listener` on `addr` (options in `sockopt`).
pub fn bind(listener: &Listener, addr: SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    crate::sockopt::bind_udp_with(addr, listener.reuse_port)
}

/// Runs `socket` until `stop` fires (the address or listener went away:
/// every flow ends at once) or the process drains and its last flow ended.
pub async fn run_socket(
    socket: std::net::UdpSocket,
    generation: watch::Receiver<Arc<Generation>>,
    runtime: Runtime,
    stop: CancellationToken,
) {
    let sockets = socket
        .try_clone()
        .and_then(|now| Ok((UdpSocket::from_std(socket)?, now)));
    let (socket, now) = match sockets {
        Ok(sockets) => sockets,
        Err(error) => {
            tracing::error!(%error, "cannot use a QUIC listening socket");
            return;
        }
    };
    let mut task = SocketTask::new(Arc::new(socket), now, generation, runtime, stop);
    task.run().await;
}

/// Datagrams and bytes each way, and the last activity, of one flow.
#[derive(Debug, Default)]
struct Stats {
    datagrams_up: AtomicU64,
    bytes_up: AtomicU64,
    datagrams_down: AtomicU64,
    bytes_down: AtomicU64,
    /// Milliseconds from the flow's start to its last datagram.
    last: AtomicU64,
}

impl Stats {
    fn up(&self, len: usize, started: Instant) {
        self.datagrams_up.fetch_add(1, Ordering::Relaxed);
        self.bytes_up.fetch_add(len as u64, Ordering::Relaxed);
        self.touch(started);
    }

    fn down(&self, len: usize, started: Instant) {
        self.datagrams_down.fetch_add(1, Ordering::Relaxed);
        self.bytes_down.fetch_add(len as u64, Ordering::Relaxed);
        self.touch(started);
    }

    fn touch(&self, started: Instant) {
        let ms = started.elapsed().as_millis() as u64;
        self.last.fetch_max(ms, Ordering::Relaxed);
    }
}

/// What a flow's access line says.
struct FlowRecord {
    id: u64,
    listener: Arc<Listener>,
    peer: SocketAddr,
    started: Instant,
    version: Option<Version>,
    sni: Option<Box<str>>,
    route: Option<Box<str>>,
    backend: Option<Arc<Backend>>,
    backend_addr: Option<SocketAddr>,
    stats: Arc<Stats>,
    metrics: Arc<ListenerMetrics>,
    /// The client's current address once the flow is open (NAT rebinding).
    path: Option<Arc<Path>>,
}

impl FlowRecord {
    /// Counts the flow's end and writes its one access line.
    fn close(&self, reason: CloseReason) {
        let s = &self.stats;
        let bytes_up = s.bytes_up.load(Ordering::Relaxed);
        let bytes_down = s.bytes_down.load(Ordering::Relaxed);
        let backend = self.backend.as_ref().map(|b| b.name.as_str());
        let (last_peer, rebinds) = match &self.path {
            Some(path) => (path.client(), path.rebinds()),
            None => (self.peer, 0),
        };
        self.metrics.closed(&metrics::Closed {
            listener: &self.listener.name,
            route: self.route.as_deref(),
            backend,
            reason,
            sni: self.sni.is_some(),
            ech: false,
            bytes_up,
            bytes_down,
        });
        macro_rules! line {
            ($level:expr) => {
                tracing::event!(
                    target: "snirelay::access",
                    $level,
                    conn_id = self.id,
                    listener = %self.listener.name,
                    protocol = "quic",
                    client.peer = %self.peer,
                    client.last_peer = %last_peer,
                    client.rebinds = rebinds,
                    quic_version = self.version.map(Version::as_str),
                    sni = self.sni.as_deref(),
                    route = self.route.as_deref(),
                    backend,
                    backend.addr = self.backend_addr.map(tracing::field::display),
                    datagrams.up = s.datagrams_up.load(Ordering::Relaxed),
                    datagrams.down = s.datagrams_down.load(Ordering::Relaxed),
                    bytes.up = bytes_up,
                    bytes.down = bytes_down,
                    duration_ms = self.started.elapsed().as_millis() as u64,
                    close = reason.as_str(),
                    "connection closed"
                )
            };
        }
        // A flow always sent a datagram, so even `Nobody` gets its line.
        match reason.fault() {
            Fault::Normal | Fault::Client | Fault::Nobody => line!(tracing::Level::INFO),
            Fault::Admission => line!(tracing::Level::DEBUG),
            Fault::Ours => line!(tracing::Level::WARN),
        }
    }
}

/// A flow whose hello is not complete yet.
struct Pending {
    parser: Parser,
    held: Vec<Box<[u8]>>,
    held_bytes: usize,
    record: FlowRecord,
    _permit: OwnedSemaphorePermit,
    _admitted: Admitted,
}

/// A flow relaying to its backend.
struct Open {
    /// The backend socket (a duplicate descriptor of the one its task
    /// reads), non-blocking: a datagram it cannot take now is dropped, as
    /// the network would drop it. A std socket, since tokio's `try_send`
    /// refuses until the socket has reported readiness once, which a fresh
    /// socket has not.
    now: std::net::UdpSocket,
    stats: Arc<Stats>,
    started: Instant,
    /// Where the flow's task sends, and the connection IDs the flow taught
    /// the socket's table (forgotten when it ends).
    path: Arc<Path>,
    cids: FlowCids,
}

enum Flow {
    Pending(Box<Pending>),
    Open(Open),
}

struct SocketTask {
    socket: Arc<UdpSocket>,
    /// The same socket (a duplicate descriptor), for sends that must not
    /// wait (see [`Open::now`]).
    now: std::net::UdpSocket,
    generation: watch::Receiver<Arc<Generation>>,
    runtime: Runtime,
    stop: CancellationToken,
    flows: HashMap<SocketAddr, Flow>,
    /// Pending flows by start, for the hello timeout (entries of flows
    /// that moved on are skipped).
    pending_order: VecDeque<(Instant, SocketAddr)>,
    pending: usize,
    held_bytes: usize,
    /// Open flows report their end here, so the map lets go of them.
    ended_tx: mpsc::UnboundedSender<Arc<Path>>,
    ended_rx: mpsc::UnboundedReceiver<Arc<Path>>,
    /// NAT rebinding: connection IDs the backends chose, by flow, and the
    /// channel the flow tasks report them on (at most
    /// `cid::MAX_CIDS_PER_FLOW` messages per flow).
    cids: CidTable,
    learned_tx: mpsc::UnboundedSender<(Arc<Path>, ConnectionId)>,
    learned_rx: mpsc::UnboundedReceiver<(Arc<Path>, ConnectionId)>,
    /// Closes the open flows of this socket (its stop, not a drain).
    close_flows: CancellationToken,
    /// New flows dropped at a bound since the last summary line.
    dropped: usize,
    last_summary: Option<Instant>,
    /// Spreads flows over a backend's addresses.
    turn: AtomicUsize,
}

impl SocketTask {
    fn new(
        socket: Arc<UdpSocket>,
        now: std::net::UdpSocket,
        generation: watch::Receiver<Arc<Generation>>,
        runtime: Runtime,
        stop: CancellationToken,
    ) -> SocketTask {
        let (ended_tx, ended_rx) = mpsc::unbounded_channel();
        let (learned_tx, learned_rx) = mpsc::unbounded_channel();
        let close_flows = runtime.close_connections.child_token();
        SocketTask {
            socket,
            now,
            generation,
            runtime,
            stop,
            flows: HashMap::new(),
            pending_order: VecDeque::new(),
            pending: 0,
            held_bytes: 0,
            ended_tx,
            ended_rx,
            cids: CidTable::default(),
            learned_tx,
            learned_rx,
            close_flows,
            dropped: 0,
            last_summary: None,
            turn: AtomicUsize::new(0),
        }
    }

    async fn run(&mut self) {
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let mut sweep = tokio::time::interval(SWEEP);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let draining = self.runtime.stop_accepting.is_cancelled();
            if self.stop.is_cancelled() && !draining {
                break;
            }
            if draining && self.flows.is_empty() {
                break;
            }
            tokio::select! {
                received = self.socket.recv_from(&mut buf) => match received {
                    Ok((len, from)) => self.datagram(&buf[..len], from),
                    // ICMP errors of earlier sends and the like: the
                    // socket itself still works.
                    Err(error) => tracing::debug!(%error, "QUIC socket receive error"),
                },
                Some(path) = self.ended_rx.recv() => self.ended(&path),
                Some((path, id)) = self.learned_rx.recv() => self.learned(&path, id),
                _ = sweep.tick() => self.sweep(),
                () = self.stop.cancelled(), if !self.stop.is_cancelled() => {}
                () = self.runtime.close_connections.cancelled() => break,
            }
        }
        // Pending flows end here; open ones through their tasks.
        self.close_flows.cancel();
        for (_, flow) in self.flows.drain() {
            if let Flow::Pending(pending) = flow {
                pending.record.close(CloseReason::Shutdown);
            }
        }
    }

    fn datagram(&mut self, datagram: &[u8], from: SocketAddr) {
        match self.flows.get_mut(&from) {
            Some(Flow::Open(open)) => {
                open.stats.up(datagram.len(), open.started);
                // UDP: a datagram the socket cannot take now is dropped,
                // as the network would; QUIC retransmits.
                let _ = open.now.send(datagram);
            }
            Some(Flow::Pending(_)) => self.feed(datagram, from),
            None => {
                if self.rebind(datagram, from) {
                    return;
                }
                if self.start(datagram, from) {
                    self.feed(datagram, from);
                }
            }
        }
    }

    /// An open flow ended: its address and its connection IDs are free.
    fn ended(&mut self, path: &Arc<Path>) {
        if let Some((at, open)) = open_at(&mut self.flows, path) {
            let cids = std::mem::take(&mut open.cids);
            self.flows.remove(&at);
            self.cids.forget(&cids);
        }
    }

    /// An open flow's backend showed a connection ID: learned, within the
    /// flow's share (its task stops at the same bound; this is the guard).
    fn learned(&mut self, path: &Arc<Path>, id: ConnectionId) {
        let Some((at, open)) = open_at(&mut self.flows, path) else {
            return;
        };
        if open.cids.len() < cid::MAX_CIDS_PER_FLOW
            && !open.cids.contains(&id)
            && self.cids.learn(id, at)
        {
            open.cids.add(id);
        }
    }

    /// A datagram from an address no flow has: if its Destination
    /// Connection ID is one an open flow's backend chose, that client moved
    /// (NAT rebinding): the flow continues from `from`.
    fn rebind(&mut self, datagram: &[u8], from: SocketAddr) -> bool {
        let Some(old) = self.cids.lookup(datagram) else {
            return false;
        };
        // The table names open flows only; anything else is left alone.
        let open = match self.flows.remove(&old) {
            Some(Flow::Open(open)) => open,
            Some(other) => {
                self.flows.insert(old, other);
                return false;
            }
            None => return false,
        };
        open.path.moved(from);
        self.cids.moved(&open.cids, from);
        open.stats.up(datagram.len(), open.started);
        let _ = open.now.send(datagram);
        tracing::debug!(
            listener = %self.generation.borrow().listener.name,
            client.previous = %old,
            client.last_peer = %from,
            client.rebinds = open.path.rebinds(),
            "QUIC flow followed to a new client address"
        );
        self.flows.insert(from, Flow::Open(open));
        true
    }

    /// Starts a pending flow for `from`, if every bound lets it.
    fn start(&mut self, datagram: &[u8], from: SocketAddr) -> bool {
        if self.runtime.stop_accepting.is_cancelled() || self.stop.is_cancelled() {
            return false;
        }
        let free = self.runtime.permits.available_permits();
        if self.pending >= MAX_PENDING_FLOWS
            || self.pending >= free
            || self.held_bytes + datagram.len() > MAX_HELD_BYTES
        {
            self.drop_new_flow();
            return false;
        }
        let Ok(permit) = self.runtime.permits.clone().try_acquire_owned() else {
            self.drop_new_flow();
            return false;
        };
        let generation = self.generation.borrow().clone();
        let listener = generation.listener.clone();
        let metrics = metrics::metrics().listener(&listener.name);
        let peer = PeerAddr(from);
        let admitted = match generation.admission.admit(Source::Peer(peer)) {
            Ok(admitted) => admitted,
            Err(refusal) => {
                // Counted and logged (at debug) like a TCP refusal, but
                // without a flow: nothing is held for it.
                metrics.accepted();
                let record = flow_record(listener, from, metrics);
                record.stats.up(datagram.len(), record.started);
                let reason = CloseReason::from(refusal);
                record.metrics.limit_refused(reason);
                record.close(reason);
                return false;
            }
        };
        close::log_dry_run(&listener, peer, &admitted);
        metrics.accepted();
        let limits = Limits::for_hello_bytes(listener.max_client_hello_bytes);
        let record = flow_record(listener, from, metrics);
        // Entries of flows that moved on stay until they reach the front;
        // compacted when they outnumber the live ones, so the queue stays
        // within a few times MAX_PENDING_FLOWS however fast flows finish.
        if self.pending_order.len() >= 4 * MAX_PENDING_FLOWS {
            let flows = &self.flows;
            self.pending_order.retain(|(started, addr)| {
                matches!(flows.get(addr), Some(Flow::Pending(p)) if p.record.started == *started)
            });
        }
        self.pending_order.push_back((record.started, from));
        self.pending += 1;
        self.flows.insert(
            from,
            Flow::Pending(Box::new(Pending {
                parser: Parser::new(limits),
                held: Vec::new(),
                held_bytes: 0,
                record,
                _permit: permit,
                _admitted: admitted,
            })),
        );
        true
    }

    fn drop_new_flow(&mut self) {
        self.dropped += 1;
        let now = Instant::now();
        if self
            .last_summary
            .is_none_or(|at| now >= at + Duration::from_secs(1))
        {
            tracing::warn!(
                listener = %self.generation.borrow().listener.name,
                dropped = self.dropped,
                pending = self.pending,
                held_bytes = self.held_bytes,
                "QUIC datagrams of new flows dropped: pending flows or connection permits at their bound"
            );
            self.last_summary = Some(now);
            self.dropped = 0;
        }
    }

    /// Feeds a pending flow's datagram to its parser.
    fn feed(&mut self, datagram: &[u8], from: SocketAddr) {
        let Some(Flow::Pending(pending)) = self.flows.get_mut(&from) else {
            return;
        };
        if self.held_bytes + datagram.len() > MAX_HELD_BYTES {
            // Dropped unread; the client retransmits.
            return;
        }
        pending
            .record
            .stats
            .up(datagram.len(), pending.record.started);
        let verdict = pending.parser.feed(datagram);
        pending.record.version = pending.parser.version();
        match verdict {
            Err(Verdict::Incomplete) => {
                pending.held.push(datagram.into());
                pending.held_bytes += datagram.len();
                self.held_bytes += datagram.len();
            }
            Err(verdict) => {
                let reason = match verdict {
                    Verdict::NotQuic => CloseReason::NotQuic,
                    Verdict::UnknownVersion(_) => CloseReason::UnknownVersion,
                    Verdict::TooLarge => CloseReason::TooLarge,
                    Verdict::Malformed | Verdict::Incomplete => CloseReason::Malformed,
                };
                if let Some(pending) = self.take_pending(from) {
                    pending.record.close(reason);
                }
            }
            Ok(hello) => {
                if let Some(mut pending) = self.take_pending(from) {
                    pending.held.push(datagram.into());
                    self.route(*pending, hello, from);
                }
            }
        }
    }

    /// Takes a pending flow out of the map and the pending counts.
    fn take_pending(&mut self, from: SocketAddr) -> Option<Box<Pending>> {
        match self.flows.remove(&from) {
            Some(Flow::Pending(pending)) => {
                self.pending -= 1;
                self.held_bytes -= pending.held_bytes;
                Some(pending)
            }
            Some(open) => {
                self.flows.insert(from, open);
                None
            }
            None => None,
        }
    }

    /// Ends pending flows past `client_hello_timeout`.
    fn sweep(&mut self) {
        let timeout = self.generation.borrow().listener.client_hello_timeout;
        let now = Instant::now();
        while let Some(&(started, from)) = self.pending_order.front() {
            if now < started + timeout {
                break;
            }
            self.pending_order.pop_front();
            let same = matches!(self.flows.get(&from), Some(Flow::Pending(p)) if p.record.started == started);
            if same && let Some(pending) = self.take_pending(from) {
                pending.record.close(CloseReason::HelloTimeout);
            }
        }
    }

    /// Routes a complete hello: refuses it, or opens the flow.
    fn route(&mut self, pending: Pending, hello: QuicHello, from: SocketAddr) {
        let Pending {
            held,
            mut record,
            _permit: permit,
            _admitted: admitted,
            ..
        } = pending;
        let generation = self.generation.borrow().clone();
        let decision = generation.routes.decide(&hello.hello);
        record.sni = decision.sni;
        let target = match decision.target {
            Ok(target) => target,
            Err(no_route) => {
                let alert = match no_route {
                    NoRoute::NoSni | NoRoute::Unmatched => UNRECOGNIZED_NAME,
                    NoRoute::TlsVersion => PROTOCOL_VERSION,
                    NoRoute::EchRejected => HANDSHAKE_FAILURE,
                };
                let answer = refusal(hello.version, &hello.dcid, &hello.scid, alert, "no route");
                if self.now.send_to(&answer, from).is_ok() {
                    record.stats.down(answer.len(), record.started);
                }
                record.close(no_route.into());
                return;
            }
        };
        // Only the no-SNI fallback of a `no_sni = "reject"` listener is
        // missing; a hello without a name that reached a route is routed.
        record.route = Some(target.route.clone());
        record.backend = Some(target.backend.clone());
        let route_admitted = match generation.route_gates.get(&target.route) {
            None => None,
            Some(gate) => {
                let source = admit::route_source(PeerAddr(from), false, None);
                match gate.admit(source) {
                    Ok(admitted) => Some(admitted),
                    Err(refusal) => {
                        let reason = CloseReason::from(refusal);
                        record.metrics.limit_refused(reason);
                        record.close(reason);
                        return;
                    }
                }
            }
        };
        let addresses = &target.backend.addresses;
        if addresses.is_empty() {
            record.close(CloseReason::NoAddress);
            return;
        }
        let turn = self.turn.fetch_add(1, Ordering::Relaxed);
        let backend_addr = addresses[turn % addresses.len()];
        record.backend_addr = Some(backend_addr);
        let (backend, now) = match connect(backend_addr) {
            Ok(sockets) => sockets,
            Err(error) => {
                tracing::debug!(%error, backend.addr = %backend_addr, "cannot open a QUIC backend socket");
                record.close(CloseReason::ConnectFailed);
                return;
            }
        };
        for datagram in &held {
            let _ = now.send(datagram);
        }
        drop(held);
        let drain = target.drain.enter();
        let idle = target.timeouts.idle;
        let stats = record.stats.clone();
        let started = record.started;
        let path = Arc::new(Path::new(from));
        record.path = Some(path.clone());
        self.flows.insert(
            from,
            Flow::Open(Open {
                now,
                stats,
                started,
                path: path.clone(),
                cids: FlowCids::default(),
            }),
        );
        let flow = FlowTask {
            record,
            backend,
            socket: self.socket.clone(),
            path,
            idle,
            close: self.close_flows.clone(),
            ended: self.ended_tx.clone(),
            learned: self.learned_tx.clone(),
            drain,
            _held: (permit, admitted, route_admitted),
        };
        self.runtime.connections.spawn(relay_back(flow));
    }
}

/// The open flow at `path`'s current address, if it is that flow (its
/// task's messages may arrive after its address went to another flow).
fn open_at<'a>(
    flows: &'a mut HashMap<SocketAddr, Flow>,
    path: &Arc<Path>,
) -> Option<(SocketAddr, &'a mut Open)> {
    let at = path.client();
    match flows.get_mut(&at) {
        Some(Flow::Open(open)) if Arc::ptr_eq(&open.path, path) => Some((at, open)),
        _ => None,
    }
}

/// A fresh record for a flow from `peer`.
fn flow_record(
    listener: Arc<Listener>,
    peer: SocketAddr,
    metrics: Arc<ListenerMetrics>,
) -> FlowRecord {
    FlowRecord {
        id: close::next_conn_id(),
        listener,
        peer,
        started: Instant::now(),
        version: None,
        sni: None,
        route: None,
        backend: None,
        backend_addr: None,
        stats: Arc::default(),
        metrics,
        path: None,
    }
}

/// One UDP socket of the backend's family, connected to `addr`, so that
/// only its datagrams are read from it: the tokio socket its task reads,
/// and a duplicate for sends that must not wait.
fn connect(addr: SocketAddr) -> std::io::Result<(UdpSocket, std::net::UdpSocket)> {
    let local: SocketAddr = match addr {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = std::net::UdpSocket::bind(local)?;
    socket.connect(addr)?;
    socket.set_nonblocking(true)?;
    let now = socket.try_clone()?;
    Ok((UdpSocket::from_std(socket)?, now))
}

/// An open flow's task: what it holds for its life.
struct FlowTask {
    record: FlowRecord,
    backend: UdpSocket,
    socket: Arc<UdpSocket>,
    /// The client's address, which moves with NAT rebinding.
    path: Arc<Path>,
    idle: Duration,
    close: CancellationToken,
    ended: mpsc::UnboundedSender<Arc<Path>>,
    learned: mpsc::UnboundedSender<(Arc<Path>, ConnectionId)>,
    drain: DrainGuard,
    /// The connection permit, and the listener's and route's admission
    /// slots, released when the flow ends.
    _held: (OwnedSemaphorePermit, Admitted, Option<RouteAdmitted>),
}

/// Sends the backend's datagrams to the client until the flow ends, then
/// closes it.
async fn relay_back(flow: FlowTask) {
    let FlowTask {
        record,
        backend,
        socket,
        path,
        idle,
        close,
        ended,
        learned,
        drain,
        _held,
    } = flow;
    let mut client = path.client();
    let mut rebinds = 0;
    // The connection IDs reported to the socket task, so each goes once.
    let mut taught = FlowCids::default();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let started = record.started;
    let closing = drain.closing(record.id);
    tokio::pin!(closing);
    let reason = loop {
        let last = Duration::from_millis(record.stats.last.load(Ordering::Relaxed));
        let deadline = started + last + idle;
        tokio::select! {
            received = backend.recv(&mut buf) => match received {
                Ok(len) => {
                    record.stats.down(len, started);
                    if let Some(id) = cid::backend_scid(&buf[..len])
                        && taught.add(id)
                    {
                        let _ = learned.send((path.clone(), id));
                    }
                    if path.rebinds() != rebinds {
                        rebinds = path.rebinds();
                        client = path.client();
                    }
                    let _ = socket.send_to(&buf[..len], client).await;
                }
                // An ICMP port unreachable for an earlier datagram (the
                // backend restarting, say): UDP has no connection to
                // lose, so the flow goes on until it idles out.
                Err(error) if error.kind() == std::io::ErrorKind::ConnectionRefused => {
                    tracing::debug!(%error, "QUIC backend refused a datagram");
                }
                Err(error) => {
                    tracing::debug!(%error, "QUIC backend socket receive error");
                    break CloseReason::BackendReset;
                }
            },
            () = tokio::time::sleep_until(deadline) => {
                let last = Duration::from_millis(record.stats.last.load(Ordering::Relaxed));
                if Instant::now() >= started + last + idle {
                    break CloseReason::IdleTimeout;
                }
            }
            () = &mut closing => break CloseReason::Drained,
            () = close.cancelled() => break CloseReason::Shutdown,
        }
    };
    record.close(reason);
    let _ = ended.send(path);
}
