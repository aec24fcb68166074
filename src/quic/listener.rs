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
//!   flow; a route's backend address is chosen as TCP chooses it
//!   ([`super::pick`]: fixed, DNS or cluster addresses, policy, health, caps,
//!   operator states), at once when the addresses are known, otherwise by a
//!   task while the flow is *connecting* (its datagrams still held, within
//!   the same bounds) that reports back over a channel; then one UDP socket
//!   is connected to that address, the held datagrams are forwarded in
//!   arrival order and the flow is *open*, holding its address's slot (caps
//!   and `least_connections` count flows) until it ends;
//! - an open flow's client datagrams are sent on its backend socket without
//!   being read; a task per flow (`relay_back`) sends the backend's
//!   datagrams to the client from the listening socket (the first one, or
//!   an ICMP port unreachable before it, is the address's passive health
//!   verdict), and ends the flow at `idle_timeout` with no datagram either
//!   way, at its route's `max_connection_lifetime` (`max_lifetime`, at the
//!   moment a TCP connection draws, in the last tenth of the lifetime,
//!   counted from the flow's first datagram), when its route drains after
//!   a reload or its address is put in `maint` (`address_maint`), on
//!   shutdown, or when an operator closes or
//!   drains it: an open flow is in the connection registry
//!   (`crate::registry`, admin `/connections` and the status page) like a
//!   TCP connection, with protocol `quic`, and ends with the same reasons
//!   (`admin`, `drained`; `moved` for a flow sent to a cluster's
//!   `local_backend` when a push of local names drops its name);
//! - other verdicts end the flow silently (`not_quic`, `unknown_version`,
//!   `malformed`, `too_large`, `no_sni`...);
//! - NAT rebinding ([`super::cid`]): `relay_back` learns the backend's
//!   connection IDs from its long-header packets (at most four per flow);
//!   a datagram from an address no flow has, whose Destination Connection
//!   ID is one of them, moves that open flow to the new address (the old
//!   address's entry is gone, the backend's datagrams go to the new one,
//!   the access line counts `client.rebinds` and names `client.last_peer`);
//!   a new address that matches nothing starts a pending flow as above
//!   (or, in a process being replaced, goes to its successor: a client of
//!   one of this process's flows is matched before that).
//!
//! Every flow that sent a datagram ends with one access line (the TCP
//! fields, `alpn`, `ech` and `ech_kind` included, `protocol = "quic"`, the
//! QUIC version, datagrams and bytes each
//! way, and `backend.local`, the address the backend sees the flow come
//! from) and the TCP close metrics.
//!
//! Bounds: pending flows (connecting ones included) per socket at most
//! [`MAX_PENDING_FLOWS`] and never
//! more than the connection permits still free (so a flood of spoofed
//! Initials can take at most half of what is free, and established flows
//! and TCP connections keep the rest); held bytes per socket at most
//! [`MAX_HELD_BYTES`]; open and pending flows together hold one permit each.
//! New flows are paced by `[global] max_connection_rate` (shared with
//! TCP's accept loops): above it a new flow's datagram is dropped.
//! Datagrams that would break a bound are dropped, which a QUIC client
//! survives by retransmitting.
//!
//! Drain: on stop, no new flow starts; open flows run until they idle out
//! or the drain timeout closes them. A listener (or address) a reload
//! removes ends its flows at once.
//!
//! Binary upgrade ([`super::handover`]): the socket is handed to the new
//! process, but only one process reads it at a time. A replaced process
//! keeps reading while it drains, relays its own flows as before and
//! forwards the datagrams of any other client to its successor (instead of
//! dropping them as on a plain stop); the new process reads that channel
//! instead of the socket until it closes (the old one's last flow ended),
//! then the socket.
//!
//! Datagram I/O is batched ([`super::io`]): the listening socket and each
//! backend socket are read with `recvmmsg` (and GRO, where a slot holds
//! several datagrams of one source, handed out one by one, so a pending
//! flow's parser is still fed single datagrams); consecutive datagrams of
//! one open flow, either way, go out in one GSO send. Kernels without GSO
//! or GRO get one datagram per send or per slot, nothing else changes.
//! Stats count datagrams, not batches.
//!
//! Not here (yet): following a client that migrates to a connection ID
//! issued later in an encrypted frame (see [`super::cid`]); Retry and PROXY
//! headers (not asked; a cluster's hop header is not sent over UDP).

use std::collections::{HashMap, VecDeque};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::Interest;
use tokio::net::UdpSocket;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::Version;
use super::cid::{self, CidTable, FlowCids, Path};
use super::handover::{self, Handover, Predecessor, Successor};
use super::initial::{ConnectionId, Limits, Parser, QuicHello, Verdict};
use super::io::{Offload, RecvBatch, SendBatch, with_scratch};
use super::pick::{self, Ask, Health, Picked};
use super::refusal::{HANDSHAKE_FAILURE, UNRECOGNIZED_NAME, refusal};
use crate::accept;
use crate::addr::PeerAddr;
use crate::admit::{self, Admitted, AtAccept, RouteAdmitted};
use crate::backend::InFlight;
use crate::close::{self, CloseReason, ConnRecord, QuicFields};
use crate::config::{Backend, Listener};
use crate::drain::DrainGuard;
use crate::generation::Generation;
use crate::metrics::{self, ListenerMetrics};
use crate::pump::ready::{Activity, Side};
use crate::pump::relay::lifetime_end;
use crate::registry::{self, Entry, Registered};
use crate::route::{EchKind, NoRoute};

/// Pending flows (hello not complete yet) per listening socket.
pub const MAX_PENDING_FLOWS: usize = 1024;
/// Bytes held for pending flows per listening socket (16 MiB): with the
/// per-flow limit (64 KiB for the default `max_client_hello_bytes`) a
/// flood cannot make the held datagrams grow past this.
pub const MAX_HELD_BYTES: usize = 16 << 20;
/// How often pending flows are checked against `client_hello_timeout`.
pub const SWEEP: Duration = Duration::from_millis(100);
/// The largest UDP payload (a datagram forwarded by the process this one
/// replaced, after its header).
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
/// every flow ends at once) or the process drains and its last flow ended
/// (and, after an upgrade, its predecessor let go of the socket: see
/// [`handover`]).
pub async fn run_socket(
    socket: std::net::UdpSocket,
    generation: watch::Receiver<Arc<Generation>>,
    runtime: Runtime,
    stop: CancellationToken,
    handover: Handover,
) {
    let sockets = Offload::new(&socket).and_then(|offload| {
        let now = socket.try_clone()?;
        Ok((UdpSocket::from_std(socket)?, now, offload))
    });
    let (socket, now, offload) = match sockets {
        Ok(sockets) => sockets,
        Err(error) => {
            tracing::error!(%error, "cannot use a QUIC listening socket");
            return;
        }
    };
    // What the kernel offers decides only how many system calls a batch
    // takes (1 and 1 mean one datagram per call).
    tracing::debug!(
        gso_segments = offload.max_segments(),
        gro_segments = offload.gro_segments(),
        "QUIC datagram batching"
    );
    let mut task = SocketTask::new(
        Arc::new(socket),
        now,
        Arc::new(offload),
        generation,
        runtime,
        stop,
    );
    task.successor = handover.successor;
    task.run(handover.predecessor).await;
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

/// What a flow keeps for its access line, owned (the flow outlives any
/// borrow); its close writes it as the one access record of both protocols
/// (`close::ConnRecord`).
struct FlowRecord {
    id: u64,
    listener: Arc<Listener>,
    peer: SocketAddr,
    started: Instant,
    version: Option<Version>,
    sni: Option<Box<str>>,
    /// The hello's ALPN list and ECH extension, logged as TCP logs them.
    alpn: Option<Box<str>>,
    ech: Option<EchKind>,
    route: Option<Box<str>>,
    backend: Option<Arc<Backend>>,
    backend_addr: Option<SocketAddr>,
    /// The relay's end of the flow's backend socket: the client address
    /// the backend sees, logged so that its lines can be matched to this
    /// flow (no PROXY header on UDP carries the real one).
    backend_local: Option<SocketAddr>,
    stats: Arc<Stats>,
    metrics: Arc<ListenerMetrics>,
    /// The client's current address once the flow is open (NAT rebinding).
    path: Option<Arc<Path>>,
}

impl FlowRecord {
    /// Counts the flow's end and writes its one access line, at the level
    /// the reason table gives (a flow always sent a datagram, so it is
    /// never `silent`).
    fn close(self, reason: CloseReason) {
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
        let mut record = ConnRecord::arrived(
            self.id,
            &self.listener,
            PeerAddr(self.peer),
            self.started,
            self.metrics,
        );
        record.sni = self.sni;
        record.alpn = self.alpn;
        record.ech = self.ech;
        record.route = self.route.as_deref();
        record.backend = self.backend;
        record.backend_addr = self.backend_addr;
        record.moved.up = s.bytes_up.load(Ordering::Relaxed);
        record.moved.down = s.bytes_down.load(Ordering::Relaxed);
        record.close_flow(reason, &quic);
    }
}

/// A flow whose hello is not complete yet.
struct Pending {
    parser: Parser,
    held: Vec<Box<[u8]>>,
    held_bytes: usize,
    record: FlowRecord,
    _permit: OwnedSemaphorePermit,
    _admitted: Option<Admitted>,
}

/// A flow relaying to its backend.
struct Open {
    /// The backend socket its task reads, written here without waiting
    /// ([`Offload::send`]): a datagram it cannot take now is dropped, as
    /// the network would drop it.
    backend: Arc<UdpSocket>,
    backend_addr: SocketAddr,
    stats: Arc<Stats>,
    started: Instant,
    /// The flow's registry entry (admin `/connections`), for its counts.
    entry: Arc<Entry>,
    /// Where the flow's task sends, and the connection IDs the flow taught
    /// the socket's table (forgotten when it ends).
    path: Arc<Path>,
    cids: FlowCids,
}

/// A flow whose hello is routed, waiting for its backend address (a DNS
/// answer, a cluster lookup): its datagrams are still held, within the
/// same bounds as a pending flow's.
struct Connecting {
    held: Vec<Box<[u8]>>,
    held_bytes: usize,
    /// The most it may hold (the pending flow's `Limits::held_bytes`).
    max_held_bytes: usize,
    record: FlowRecord,
    idle: Duration,
    /// The route's `max_connection_lifetime` (`None`: no limit).
    lifetime: Option<Duration>,
    /// The connection permit, and the listener's and route's admission
    /// slots.
    held_slots: (
        OwnedSemaphorePermit,
        Option<Admitted>,
        Option<RouteAdmitted>,
    ),
}

/// What a flow's address lookup reports back to its socket task.
struct Chosen {
    from: SocketAddr,
    id: u64,
    /// The address and the route's drain guard, or why the flow closes.
    outcome: Result<(Picked, DrainGuard), CloseReason>,
}

enum Flow {
    Pending(Box<Pending>),
    Connecting(Box<Connecting>),
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
    /// Flows not open yet (pending and connecting): they hold datagrams.
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
    /// Connecting flows' address lookups report here.
    chosen_tx: mpsc::UnboundedSender<Chosen>,
    chosen_rx: mpsc::UnboundedReceiver<Chosen>,
    /// The process that replaces this one, once a binary upgrade handed
    /// the socket over: datagrams of flows not held here go there.
    successor: Arc<Successor>,
    /// The listener's metric series, made on the first flow.
    metrics: Option<Arc<ListenerMetrics>>,
    /// Batched I/O: the kernel's offloads, and the open flows' client
    /// datagrams of one receive gathered per flow for one send.
    offload: Arc<Offload>,
    up: SendBatch,
}

impl SocketTask {
    fn new(
        socket: Arc<UdpSocket>,
        now: std::net::UdpSocket,
        offload: Arc<Offload>,
        generation: watch::Receiver<Arc<Generation>>,
        runtime: Runtime,
        stop: CancellationToken,
    ) -> SocketTask {
        let (ended_tx, ended_rx) = mpsc::unbounded_channel();
        let (learned_tx, learned_rx) = mpsc::unbounded_channel();
        let (chosen_tx, chosen_rx) = mpsc::unbounded_channel();
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
            chosen_tx,
            chosen_rx,
            successor: Arc::default(),
            metrics: None,
            offload,
            up: SendBatch::default(),
        }
    }

    /// Serves the socket; after a binary upgrade, `predecessor` is the
    /// old process's channel, read instead of the socket until it closes.
    async fn run(&mut self, mut predecessor: Option<Predecessor>) {
        let mut batch = RecvBatch::new();
        let mut forwarded = match predecessor {
            Some(_) => vec![0u8; handover::HEADER + MAX_DATAGRAM],
            None => Vec::new(),
        };
        let mut sweep = tokio::time::interval(SWEEP);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let draining = self.runtime.stop_accepting.is_cancelled();
            if self.stop.is_cancelled() && !draining {
                break;
            }
            // Not while a predecessor still reads the socket: whoever
            // replaces this process would then read it alongside.
            if draining && self.flows.is_empty() && predecessor.is_none() {
                break;
            }
            tokio::select! {
                received = async { predecessor.as_ref().expect("guarded").recv(&mut forwarded).await }, if predecessor.is_some() => match received {
                    Some((from, end)) => {
                        self.datagram(&forwarded[handover::HEADER..end], from);
                        self.flush_up();
                    }
                    None => {
                        predecessor = None;
                        tracing::info!(listener = %self.generation.borrow().listener.name, "the previous process let go of the QUIC socket; reading it now");
                    }
                },
                received = self.offload.recv(&self.socket, &mut batch), if predecessor.is_none() => match received {
                    Ok(_) => {
                        for (from, datagram) in batch.datagrams() {
                            self.datagram(datagram, from);
                        }
                        self.flush_up();
                    }
                    // ICMP errors of earlier sends and the like: the
                    // socket itself still works.
                    Err(error) => tracing::debug!(%error, "QUIC socket receive error"),
                },
                Some(path) = self.ended_rx.recv() => self.ended(&path),
                Some((path, id)) = self.learned_rx.recv() => self.learned(&path, id),
                Some(chosen) = self.chosen_rx.recv() => self.chosen(chosen),
                _ = sweep.tick() => self.sweep(),
                () = self.stop.cancelled(), if !self.stop.is_cancelled() => {}
                () = self.runtime.close_connections.cancelled() => break,
            }
        }
        // Pending flows end here; open ones through their tasks.
        self.close_flows.cancel();
        for (_, flow) in self.flows.drain() {
            match flow {
                Flow::Pending(pending) => pending.record.close(CloseReason::Shutdown),
                Flow::Connecting(connecting) => connecting.record.close(CloseReason::Shutdown),
                Flow::Open(_) => {}
            }
        }
    }

    fn datagram(&mut self, datagram: &[u8], from: SocketAddr) {
        match self.flows.get_mut(&from) {
            Some(Flow::Open(open)) => {
                open.stats.up(datagram.len(), open.started);
                moved(&open.entry.activity, Side::Up, datagram.len());
                // Gathered with the flow's next datagrams of this receive,
                // for one send (`flush_up`).
                let (flows, offload) = (&self.flows, &self.offload);
                self.up.push(
                    from,
                    datagram,
                    offload.max_segments(),
                    |client, contents, segment| send_up(flows, offload, client, contents, segment),
                );
            }
            Some(Flow::Pending(_)) => self.feed(datagram, from),
            Some(Flow::Connecting(connecting)) => {
                let record = &connecting.record;
                record.stats.up(datagram.len(), record.started);
                // Beyond a bound it is dropped unread; the client retransmits.
                if connecting.held_bytes + datagram.len() <= connecting.max_held_bytes
                    && self.held_bytes + datagram.len() <= MAX_HELD_BYTES
                {
                    connecting.held.push(datagram.into());
                    connecting.held_bytes += datagram.len();
                    self.held_bytes += datagram.len();
                }
            }
            None => {
                // A client of an open flow that moved (NAT rebinding).
                if self.rebind(datagram, from) {
                    return;
                }
                // Replaced (a binary upgrade): a new flow is the new
                // process's, which reads the socket once this one is done.
                if self.successor.forward(from, datagram) {
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
        // What this receive gathered for the old address goes first.
        self.flush_up();
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
        moved(&open.entry.activity, Side::Up, datagram.len());
        let _ = self
            .offload
            .send_connected(&open.backend, open.backend_addr, datagram, None);
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

    /// Sends the open flows' datagrams gathered from the last receive.
    fn flush_up(&mut self) {
        let (flows, offload) = (&self.flows, &self.offload);
        self.up
            .flush(|client, contents, segment| send_up(flows, offload, client, contents, segment));
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
        let generation = self.generation.borrow().clone();
        // `[global] max_connection_rate`: TCP clients above it wait in the
        // backlog; a UDP socket has none, so a new flow's datagram is
        // dropped and the client's retransmission tries again.
        if generation
            .pace
            .as_ref()
            .is_some_and(|pace| pace.check().is_err())
        {
            self.drop_new_flow();
            return false;
        }
        let Ok(permit) = self.runtime.permits.clone().try_acquire_owned() else {
            self.drop_new_flow();
            return false;
        };
        let listener = generation.listener.clone();
        // One handle per socket (a listener keeps its name and protocol),
        // so a flow's metrics cost atomic adds, as a TCP connection's.
        let metrics = self
            .metrics
            .get_or_insert_with(|| {
                metrics::metrics().listener(&listener.name, listener.protocol.as_str())
            })
            .clone();
        // The accept gate, as for a TCP connection; a refusal is closed
        // there, without a flow: nothing is held for it.
        let refused = QuicFields {
            version: None,
            last_peer: from,
            rebinds: 0,
            datagrams_up: 1,
            datagrams_down: 0,
            backend_local: None,
        };
        let admitted = match accept::gate(&generation, PeerAddr(from), &metrics, || {
            let mut record = ConnRecord::arrived(
                close::next_conn_id(),
                &listener,
                PeerAddr(from),
                Instant::now(),
                metrics.clone(),
            );
            record.moved.up = datagram.len() as u64;
            (record, Some(&refused))
        }) {
            Ok(AtAccept::Admitted(admitted)) => Some(admitted),
            // Never: a QUIC listener has no PROXY protocol, so no trusted
            // peer to decide after a preface.
            Ok(AtAccept::AfterPreface) => None,
            Err(_refused) => return false,
        };
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
                "QUIC datagrams of new flows dropped: pending flows, connection permits or max_connection_rate at their bound"
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
            Some(other) => {
                self.flows.insert(from, other);
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
        record.ech = decision.ech;
        record.alpn = close::alpn_field(&hello.hello.alpn);
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
                    Ok(admitted) => {
                        if let Some(held) = &admitted.source {
                            close::log_route_dry_run(
                                &record.listener,
                                PeerAddr(from),
                                &target.route,
                                held,
                            );
                        }
                        Some(admitted)
                    }
                    Err(refusal) => {
                        let reason = CloseReason::from(refusal);
                        record.metrics.limit_refused(reason);
                        record.close(reason);
                        return;
                    }
                }
            }
        };
        // The address: chosen at once when the backend's addresses are
        // known; otherwise (a first DNS answer, a cluster lookup) the flow
        // waits in `Connecting` while a task finds it.
        let Some(runtime) = generation.backends.get(&target.backend.name) else {
            record.close(CloseReason::NoAddress);
            return;
        };
        // The listening socket's address stands for the one the client
        // dialled: a cluster answer naming it is this node.
        let local = match runtime.cluster {
            Some(_) => match self.socket.local_addr() {
                Ok(local) => Some(local.ip()),
                Err(_) => {
                    record.close(CloseReason::ConnectFailed);
                    return;
                }
            },
            None => None,
        };
        let ask = Ask {
            client: from,
            sni: record.sni.clone(),
            local,
        };
        let drain = target.drain.enter();
        let connecting = Connecting {
            held_bytes: held.iter().map(|d| d.len()).sum(),
            held,
            max_held_bytes: Limits::for_hello_bytes(record.listener.max_client_hello_bytes)
                .held_bytes,
            record,
            idle: target.timeouts.idle,
            lifetime: target.timeouts.lifetime,
            held_slots: (permit, admitted, route_admitted),
        };
        if let Some(picked) = pick::pick_now(&generation.backends, runtime, &ask) {
            let outcome = picked.map(|p| (p, drain)).map_err(CloseReason::from);
            self.open(connecting, from, outcome);
            return;
        }
        self.pending += 1;
        self.held_bytes += connecting.held_bytes;
        let id = connecting.record.id;
        let backend = target.backend.name.clone();
        self.flows
            .insert(from, Flow::Connecting(Box::new(connecting)));
        let chosen = self.chosen_tx.clone();
        let close = self.close_flows.clone();
        self.runtime.connections.spawn(async move {
            let backends = &generation.backends;
            let outcome = match backends.get(&backend) {
                None => Err(CloseReason::NoAddress),
                Some(runtime) => tokio::select! {
                    picked = pick::pick(backends, runtime, &ask) => picked.map_err(CloseReason::from),
                    () = drain.closing(id) => Err(drain.reason()),
                    () = close.cancelled() => Err(CloseReason::Shutdown),
                },
            };
            let outcome = outcome.map(|picked| (picked, drain));
            // The socket task may be gone (its stop): nothing to report to.
            let _ = chosen.send(Chosen { from, id, outcome });
        });
    }

    /// A connecting flow's address is known (or why not): it opens or closes.
    fn chosen(&mut self, chosen: Chosen) {
        let Chosen { from, id, outcome } = chosen;
        let connecting = match self.flows.remove(&from) {
            Some(Flow::Connecting(connecting)) if connecting.record.id == id => connecting,
            Some(other) => {
                self.flows.insert(from, other);
                return;
            }
            None => return,
        };
        self.pending -= 1;
        self.held_bytes -= connecting.held_bytes;
        self.open(*connecting, from, outcome);
    }

    /// Opens a flow on its chosen address: one UDP socket connected to it,
    /// the held datagrams forwarded in arrival order, and the task that
    /// relays the backend's answers; or closes it with the reason.
    fn open(
        &mut self,
        connecting: Connecting,
        from: SocketAddr,
        outcome: Result<(Picked, DrainGuard), CloseReason>,
    ) {
        let Connecting {
            held,
            mut record,
            idle,
            lifetime,
            held_slots,
            ..
        } = connecting;
        let (picked, drain) = match outcome {
            Ok(chosen) => chosen,
            Err(reason) => {
                record.close(reason);
                return;
            }
        };
        let Picked {
            addr: backend_addr,
            in_flight,
            mut health,
            local,
        } = picked;
        record.backend_addr = Some(backend_addr);
        let backend = match connect(backend_addr) {
            Ok(socket) => Arc::new(socket),
            Err(error) => {
                tracing::debug!(%error, backend.addr = %backend_addr, "cannot open a QUIC backend socket");
                health.refused(&in_flight);
                record.close(CloseReason::ConnectFailed);
                return;
            }
        };
        record.backend_local = backend.local_addr().ok();
        for datagram in &held {
            let _ = self
                .offload
                .send_connected(&backend, backend_addr, datagram, None);
        }
        drop(held);
        // From now on the flow drains with its route or with its address
        // (an operator's `maint`), as a TCP connection does.
        let drain = in_flight.state().drain_part(drain.signal()).enter();
        let stats = record.stats.clone();
        let started = record.started;
        let path = Arc::new(Path::new(from));
        record.path = Some(path.clone());
        // Listed, filtered and closable by the admin listener like a TCP
        // connection (a `local` one also by a push of local names); its
        // stop is a child of this socket's `close_flows`.
        let route = record.route.clone().unwrap_or_default();
        let routed = record
            .backend
            .clone()
            .expect("a flow is opened after it was routed to a backend");
        let registered = registry::register(
            registry::Meta {
                id: record.id,
                listener: &record.listener,
                route: &route,
                sni: record.sni.as_deref(),
                backend: &routed,
                backend_addr,
                client: from,
                claimed: None,
                accepted: started,
                local,
            },
            &self.close_flows,
        );
        moved(
            registered.activity(),
            Side::Up,
            stats.bytes_up.load(Ordering::Relaxed) as usize,
        );
        self.flows.insert(
            from,
            Flow::Open(Open {
                backend: backend.clone(),
                backend_addr,
                stats,
                started,
                entry: registered.shared(),
                path: path.clone(),
                cids: FlowCids::default(),
            }),
        );
        let flow = FlowTask {
            record,
            backend,
            socket: self.socket.clone(),
            offload: self.offload.clone(),
            path,
            idle,
            lifetime,
            registered,
            ended: self.ended_tx.clone(),
            learned: self.learned_tx.clone(),
            drain,
            health,
            in_flight,
            _held: held_slots,
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
        alpn: None,
        ech: None,
        route: None,
        backend: None,
        backend_addr: None,
        backend_local: None,
        stats: Arc::default(),
        metrics,
        path: None,
    }
}

/// Counts `len` bytes toward `side` in a registry entry's activity.
fn moved(activity: &Activity, side: Side, len: usize) {
    activity.add(side, len);
    activity.touch();
}

/// Sends an open flow's gathered client datagrams on its backend socket;
/// dropped if the flow is gone or the socket cannot take them now.
fn send_up(
    flows: &HashMap<SocketAddr, Flow>,
    offload: &Offload,
    client: SocketAddr,
    contents: &[u8],
    segment: Option<usize>,
) {
    if let Some(Flow::Open(open)) = flows.get(&client) {
        let _ = offload.send_connected(&open.backend, open.backend_addr, contents, segment);
    }
}

/// One UDP socket of the backend's family, connected to `addr`, so that
/// only its datagrams are read from it (with GRO where the kernel has it).
fn connect(addr: SocketAddr) -> std::io::Result<UdpSocket> {
    let local: SocketAddr = match addr {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = std::net::UdpSocket::bind(local)?;
    socket.connect(addr)?;
    socket.set_nonblocking(true)?;
    // Without GRO each receive slot holds one datagram: nothing else
    // changes.
    let _ = crate::sockopt::enable_udp_gro(&socket);
    UdpSocket::from_std(socket)
}

/// An open flow's task: what it holds for its life.
struct FlowTask {
    record: FlowRecord,
    backend: Arc<UdpSocket>,
    socket: Arc<UdpSocket>,
    offload: Arc<Offload>,
    /// The client's address, which moves with NAT rebinding.
    path: Arc<Path>,
    idle: Duration,
    /// `max_connection_lifetime`, counted from the flow's first datagram.
    lifetime: Option<Duration>,
    /// Its registry entry: removed when the flow ends; its stop fires on
    /// this socket's close or an operator's `DELETE /connections`.
    registered: Registered,
    ended: mpsc::UnboundedSender<Arc<Path>>,
    learned: mpsc::UnboundedSender<(Arc<Path>, ConnectionId)>,
    drain: DrainGuard,
    /// What the flow tells its address's passive health.
    health: Health,
    /// Counts the flow on its backend address (caps, `least_connections`).
    in_flight: InFlight,
    /// The connection permit, and the listener's and route's admission
    /// slots, released when the flow ends.
    _held: (
        OwnedSemaphorePermit,
        Option<Admitted>,
        Option<RouteAdmitted>,
    ),
}

/// Sends the backend's datagrams to the client until the flow ends, then
/// closes it.
async fn relay_back(flow: FlowTask) {
    let FlowTask {
        record,
        backend,
        socket,
        offload,
        path,
        idle,
        lifetime,
        registered,
        ended,
        learned,
        drain,
        mut health,
        in_flight,
        _held,
    } = flow;
    let mut client = path.client();
    let mut rebinds = 0;
    // The connection IDs reported to the socket task, so each goes once.
    let mut taught = FlowCids::default();
    let started = record.started;
    let closing = drain.closing(record.id);
    tokio::pin!(closing);
    // The same moment a TCP connection with this id would draw: in the
    // last tenth of the lifetime, so flows opened together end apart.
    let end_of_life = lifetime_end(started, lifetime, record.id);
    let reason = loop {
        let last = Duration::from_millis(record.stats.last.load(Ordering::Relaxed));
        let idle_at = started + last + idle;
        let deadline = end_of_life.map_or(idle_at, |end| end.min(idle_at));
        tokio::select! {
            // ERROR too: an ICMP port unreachable alone makes the socket
            // report an error, not readability.
            ready = backend.ready(Interest::READABLE | Interest::ERROR) => match ready.and_then(|ready| {
                if ready.is_readable() {
                    if path.rebinds() != rebinds {
                        rebinds = path.rebinds();
                        client = path.client();
                    }
                    relay_down(&offload, &backend, &socket, client, &record.stats, started, |datagram| {
                        if let Some(id) = cid::backend_scid(datagram)
                            && taught.add(id)
                        {
                            let _ = learned.send((path.clone(), id));
                        }
                    })
                } else {
                    pending_error(&backend)
                }
            }) {
                Ok(0) => {}
                Ok(bytes) => {
                    health.answered(&in_flight, started);
                    moved(registered.activity(), Side::Down, bytes);
                }
                // An ICMP port unreachable for an earlier datagram: a
                // failed connect for passive health if the backend never
                // answered; UDP has no connection to lose, so the flow
                // goes on until it idles out (the backend restarting, say).
                Err(error) if error.kind() == std::io::ErrorKind::ConnectionRefused => {
                    health.refused(&in_flight);
                    tracing::debug!(%error, "QUIC backend refused a datagram");
                }
                Err(error) => {
                    tracing::debug!(%error, "QUIC backend socket receive error");
                    break CloseReason::BackendReset;
                }
            },
            () = tokio::time::sleep_until(deadline) => {
                let now = Instant::now();
                if end_of_life.is_some_and(|end| now >= end) {
                    break CloseReason::MaxLifetime;
                }
                let last = Duration::from_millis(record.stats.last.load(Ordering::Relaxed));
                if now >= started + last + idle {
                    break CloseReason::IdleTimeout;
                }
            }
            // Its route drained by a reload, or its address put in `maint`.
            () = &mut closing => break drain.reason(),
            // Shutdown, or an operator's close or drain (told apart by
            // the entry, as for TCP).
            () = registered.stop().cancelled() => break registered.reason(CloseReason::Shutdown),
        }
    };
    drop(in_flight);
    drop(registered);
    record.close(reason);
    let _ = ended.send(path);
}

/// Takes the error a backend socket reports (SO_ERROR: an ICMP error of an
/// earlier send), as the `Err` of a receive; once none is left, clears the
/// socket's error readiness and reports nothing relayed.
fn pending_error(backend: &UdpSocket) -> std::io::Result<usize> {
    match backend.try_io(Interest::ERROR, || {
        backend
            .take_error()?
            .ok_or_else(|| std::io::ErrorKind::WouldBlock.into())
    }) {
        Ok(error) => Err(error),
        Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => Ok(0),
        Err(error) => Err(error),
    }
}

/// Sends what the backend socket holds now to the client, one receive
/// batch gathered into GSO sends, in this thread's scratch buffers (no
/// await in between, so a flow holds no buffer while it waits). A datagram
/// the listening socket cannot take now is dropped, as the network would.
/// Returns the bytes it relayed (0: the socket was empty).
fn relay_down(
    offload: &Offload,
    backend: &UdpSocket,
    socket: &UdpSocket,
    client: SocketAddr,
    stats: &Stats,
    started: Instant,
    mut learn: impl FnMut(&[u8]),
) -> std::io::Result<usize> {
    with_scratch(|recv, send| {
        offload.try_recv(backend, recv)?;
        let max_segments = offload.max_segments();
        let mut bytes = 0;
        for (_, datagram) in recv.datagrams() {
            stats.down(datagram.len(), started);
            bytes += datagram.len();
            learn(datagram);
            send.push(client, datagram, max_segments, |to, contents, segment| {
                let _ = offload.send(socket, to, contents, segment);
            });
        }
        offload.flush(socket, client, send);
        Ok(bytes)
    })
}
