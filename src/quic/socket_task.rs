//! A `protocol = "quic"` listener at run time: UDP sockets on the
//! listener's addresses, and the I/O of the flows of the clients that send
//! to them.
//!
//! Each socket has one task ([`run_socket`]) that only moves bytes: it
//! reads every datagram, feeds it to the socket's flow table
//! ([`super::flows::FlowTable`], which decides everything about flows:
//! admission through the accept gate, caps, held bytes, the hello, routing,
//! refusals, rebinding, hello timeouts, drain) and performs what the table
//! returns:
//! - an open flow's datagram goes out on the flow's backend socket,
//!   unread, gathered per flow for one send;
//! - a refusal (the QUIC answer the TCP path's TLS alert stands for,
//!   [`super::refusal`]) is sent to the client before the flow's close;
//! - a close writes the flow's access line (`access::ConnRecord`, as a TCP
//!   connection's) and its close metrics;
//! - a routed flow's backend address is chosen as TCP chooses it
//!   (`super::backend_address`: fixed, DNS or cluster addresses, policy, health,
//!   caps, operator states), at once when the addresses are known,
//!   otherwise by a task that reports back over a channel while the table
//!   holds the flow's datagrams;
//! - a flow handed over to open gets one UDP socket connected to its
//!   address, its held datagrams in arrival order, a registry entry
//!   ([`crate::flow::registry`], admin `/connections` and the status page, protocol
//!   `quic`) and a task ([`super::flow_task`]) that sends the backend's datagrams to
//!   the client from the listening socket (the first one, or an ICMP port
//!   unreachable before it, is the address's passive health verdict), tells
//!   the table the connection IDs the backend chose (NAT rebinding,
//!   [`super::cid`]), and ends the flow at its bounds (idle, lifetime:
//!   [`super::flows::Expiry`]), when its route drains after a reload or its
//!   address is put in `maint` (`address_maint`), on shutdown, or when an
//!   operator closes or drains it (`admin`, `drained`; `moved` for a flow
//!   sent to a cluster's `local_backend` when a push of local names drops
//!   its name) or unvalidated ([`super::flows::Event::Stop`]); it holds
//!   its address's slot (caps and `least_connections` count flows) and
//!   admission slots until then (its permit, once validated, is the
//!   table's: [`super::flows::FlowTable::up`]), and reports its end.
//!
//! Every flow that sent a datagram ends with one access line (the TCP
//! fields, `alpn`, `ech` and `ech_kind` included, `protocol = "quic"`, the
//! QUIC version, datagrams and bytes each way, and `backend.local`, the
//! address the backend sees the flow come from) and the TCP close metrics.
//!
//! Drain: on stop, no new flow starts; open flows run until they idle out
//! or the drain timeout closes them. A listener (or address) a reload
//! removes ends its flows at once.
//!
//! Binary upgrade (`super::handover`): the socket is handed to the new
//! process, but only one process reads it at a time. A replaced process
//! keeps reading while it drains, relays its own flows as before and
//! forwards the datagrams of any other client to its successor (instead of
//! dropping them as on a plain stop); the new process reads that channel
//! instead of the socket until it closes (the old one's last flow ended),
//! then the socket.
//!
//! Datagram I/O is batched (`super::io`): the listening socket and each
//! backend socket are read with `recvmmsg` (and GRO, where a slot holds
//! several datagrams of one source, handed out one by one, so a pending
//! flow's parser is still fed single datagrams); consecutive datagrams of
//! one open flow, either way, go out in one GSO send, and the lone
//! datagrams of many flows toward their clients are gathered
//! (`super::io::Gather`) and sent together by the socket task in
//! `sendmmsg` calls. Kernels without GSO
//! or GRO get one datagram per send or per slot, nothing else changes.
//! Stats count datagrams, not batches.
//!
//! An open flow's client datagrams toward a `proxy_protocol = "v2"`
//! backend (a cluster's hop toward another node included) carry its PROXY
//! header until the backend answers ([`crate::proxy::datagram`]; made by
//! the table when it routes the flow). On a listener with
//! `[listener.proxy_protocol]`, every datagram of a trusted peer relay is
//! stripped of its header here, before the table sees it
//! ([`super::flows::preface`]); the flow's answers go to the peer's address.
//!
//! Not here: what becomes of a flow (the table, [`super::flows`]), an open
//! flow's own task ([`super::flow_task`]). Not here (yet): following a
//! client that migrates to a connection ID issued later in an encrypted
//! frame (see [`super::cid`]); Retry (not asked).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use std::time::Instant;
use tokio::net::UdpSocket;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::cid::Path;
use super::flow_task::Stop;
use super::flow_task::{FlowTask, moved, relay_back};
use super::flows::stages::{FlowStages, RoutedHold, ToChoose};
use super::flows::{Datagram, Event, Expiry, FlowTable, Opening, Permits, PickFor, Stats, Up};
use super::handover::{self, Handover, Predecessor, Successor};
use super::initial::ConnectionId;
use super::io::{Gather, Offload, RecvBatch, SendBatch};
use crate::config::Listener;
use crate::drain::DrainGuard;
use crate::flow::access::CloseReason;
use crate::flow::generation::Generation;
use crate::flow::registry::{self, ConnectionEntry};
use crate::metrics;
use crate::proxy::datagram::{DatagramHeaders, Prefix};
use crate::pump::ready::Side;
use crate::quic::backend_address::{self, Picked};
use crate::quic::flows::preface;

/// How often pending flows are checked against `client_hello_timeout`.
pub(crate) const SWEEP: Duration = Duration::from_millis(100);
/// The largest UDP payload (a datagram forwarded by the process this one
/// replaced, after its header).
const MAX_DATAGRAM: usize = 65_535;

/// What every QUIC socket task of the process shares with the TCP side.
#[derive(Clone)]
pub(crate) struct Runtime {
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
pub(crate) fn bind(listener: &Listener, addr: SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    crate::sockopt::bind_udp_with(addr, listener.reuse_port)
}

/// Runs `socket` until `stop` fires (the address or listener went away:
/// every flow ends at once) or the process drains and its last flow ended
/// (and, after an upgrade, its predecessor let go of the socket: see
/// `handover`).
pub(crate) async fn run_socket(
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

/// The socket task's handle on an open flow (kept in the flow table).
#[derive(Debug)]
struct OpenFlow {
    /// The backend socket its task reads, written here without waiting
    /// ([`Offload::send`]): a datagram it cannot take now is dropped, as
    /// the network would drop it.
    backend: Arc<UdpSocket>,
    backend_addr: SocketAddr,
    stats: Arc<Stats>,
    started: Instant,
    /// The flow's registry entry (admin `/connections`), for its counts.
    entry: Arc<ConnectionEntry>,
    /// Where the flow's task sends (NAT rebinding moves it).
    path: Arc<Path>,
    /// The PROXY headers its datagrams carry until the backend answers
    /// (`proxy_protocol = "v2"`); `None`: sent as they came.
    headers: Option<Arc<DatagramHeaders>>,
    /// Ends its task with the table's reason ([`Event::Stop`]).
    stop: Arc<Stop>,
}

/// What a flow's address lookup reports back to its socket task.
struct Chosen {
    from: SocketAddr,
    id: u64,
    /// The address and the route's drain guard, or why the flow closes.
    outcome: Result<(Picked, DrainGuard), CloseReason>,
}

struct SocketTask {
    socket: Arc<UdpSocket>,
    /// The same socket (a duplicate descriptor), for sends that must not
    /// wait (a refusal).
    now: std::net::UdpSocket,
    generation: watch::Receiver<Arc<Generation>>,
    /// The newest generation, re-read when a reload publishes one.
    current: Arc<Generation>,
    runtime: Runtime,
    stop: CancellationToken,
    /// The flows: every decision about them is the table's.
    table: FlowTable<OpenFlow, OwnedSemaphorePermit>,
    /// Open flows report their end here (their path and id), so the table
    /// lets go of them.
    ended_tx: mpsc::UnboundedSender<(Arc<Path>, u64)>,
    ended_rx: mpsc::UnboundedReceiver<(Arc<Path>, u64)>,
    /// NAT rebinding: the connection IDs the backends chose, reported by
    /// the flow tasks (at most `cid::MAX_CIDS_PER_FLOW` messages per flow).
    learned_tx: mpsc::UnboundedSender<(Arc<Path>, u64, ConnectionId)>,
    learned_rx: mpsc::UnboundedReceiver<(Arc<Path>, u64, ConnectionId)>,
    /// Closes the open flows of this socket (its stop, not a drain).
    close_flows: CancellationToken,
    /// Connecting flows' address lookups report here.
    chosen_tx: mpsc::UnboundedSender<Chosen>,
    chosen_rx: mpsc::UnboundedReceiver<Chosen>,
    /// The process that replaces this one, once a binary upgrade handed
    /// the socket over: datagrams of flows not held here go there.
    successor: Arc<Successor>,
    /// Batched I/O: the kernel's offloads, and the open flows' client
    /// datagrams of one receive gathered per flow for one send.
    offload: Arc<Offload>,
    up: SendBatch,
    /// Where a gathered run of datagrams is framed behind its flow's
    /// PROXY header (reused, so framing allocates nothing once grown).
    framed: Vec<u8>,
    /// The open flows' datagrams to their clients, gathered for sends of
    /// many flows at once.
    down: Arc<Gather>,
}

impl SocketTask {
    fn new(
        socket: Arc<UdpSocket>,
        now: std::net::UdpSocket,
        offload: Arc<Offload>,
        mut generation: watch::Receiver<Arc<Generation>>,
        runtime: Runtime,
        stop: CancellationToken,
    ) -> SocketTask {
        let (ended_tx, ended_rx) = mpsc::unbounded_channel();
        let (learned_tx, learned_rx) = mpsc::unbounded_channel();
        let (chosen_tx, chosen_rx) = mpsc::unbounded_channel();
        let close_flows = runtime.close_connections.child_token();
        let current = generation.borrow_and_update().clone();
        // One handle per socket (a listener keeps its name and protocol),
        // so a flow's metrics cost atomic adds, as a TCP connection's.
        let listener = &current.listener;
        let series = metrics::metrics().listener(&listener.name, listener.protocol.as_str());
        let table = FlowTable::new(
            socket.local_addr().ok(),
            series,
            metrics::metrics(),
            FlowStages,
        );
        SocketTask {
            socket,
            now,
            generation,
            current,
            runtime,
            stop,
            table,
            ended_tx,
            ended_rx,
            learned_tx,
            learned_rx,
            close_flows,
            chosen_tx,
            chosen_rx,
            successor: Arc::default(),
            offload,
            up: SendBatch::default(),
            framed: Vec::new(),
            down: Arc::default(),
        }
    }

    /// Takes the newest generation if a reload has published one (an
    /// atomic version check, as in the TCP accept loop).
    fn refresh(&mut self) {
        if self.generation.has_changed().unwrap_or(false) {
            self.current = self.generation.borrow_and_update().clone();
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
        // The waits that outlive a turn are made once, not per turn (each
        // new one registers a waiter, each dropped one removes it, under
        // a lock): the stop and the shutdown, and the flows' wake-up for
        // gathered sends, renewed only when it fires.
        let (stop, close_connections) = (self.stop.clone(), self.runtime.close_connections.clone());
        let stopped = stop.cancelled();
        let closed = close_connections.cancelled();
        let down = self.down.clone();
        let mut gathered = std::pin::pin!(down.wake.notified());
        tokio::pin!(stopped, closed);
        let mut stop_seen = false;
        loop {
            let draining = self.runtime.stop_accepting.is_cancelled();
            if self.stop.is_cancelled() && !draining {
                break;
            }
            // Not while a predecessor still reads the socket: whoever
            // replaces this process would then read it alongside.
            if draining && self.table.is_empty() && predecessor.is_none() {
                break;
            }
            // Biased, the socket last: what the other branches bring
            // (flows' ends and connection IDs, routing answers, the sweep,
            // gathered sends, stops) is never starved by a busy socket,
            // and no random start is drawn per turn.
            tokio::select! {
                biased;
                () = &mut closed => break,
                () = &mut stopped, if !stop_seen => stop_seen = true,
                Some((path, id)) = self.ended_rx.recv() => {
                    self.table.ended(path.client(), id);
                }
                Some((path, id, cid)) = self.learned_rx.recv() => {
                    self.table.learned(path.client(), id, cid);
                }
                Some(Chosen { from, id, outcome }) = self.chosen_rx.recv() => {
                    self.table.chosen(from, id, outcome);
                    self.perform(Instant::now());
                }
                _ = sweep.tick() => {
                    self.refresh();
                    let now = Instant::now();
                    self.table.sweep(now, self.current.listener.client_hello_timeout);
                    self.perform(now);
                }
                // Flows gathered datagrams to their clients: sent once the
                // flows woken with them have run (a yield: after the ready
                // tasks), so that one call carries many flows' datagrams.
                () = &mut gathered => {
                    gathered.set(down.wake.notified());
                    tokio::task::yield_now().await;
                    down.flush(&self.offload, &*self.socket);
                }
                received = async { predecessor.as_ref().expect("guarded").recv(&mut forwarded).await }, if predecessor.is_some() => match received {
                    Some((from, end)) => {
                        self.refresh();
                        self.datagram(Instant::now(), &forwarded[handover::HEADER..end], from, None);
                        self.flush_up();
                    }
                    None => {
                        predecessor = None;
                        tracing::info!(listener = %self.current.listener.name, "the previous process let go of the QUIC socket; reading it now");
                    }
                },
                received = self.offload.recv(&self.socket, &mut batch), if predecessor.is_none() => match received {
                    Ok(_) => {
                        self.refresh();
                        let now = Instant::now();
                        for (from, to, datagram) in batch.datagrams() {
                            self.datagram(now, datagram, from, to);
                        }
                        self.flush_up();
                    }
                    // ICMP errors of earlier sends and the like: the
                    // socket itself still works.
                    Err(error) => tracing::debug!(%error, "QUIC socket receive error"),
                },
            }
        }
        // Flows not open yet end here; open ones through their tasks.
        self.close_flows.cancel();
        self.table.close_all(CloseReason::Shutdown);
        self.perform(Instant::now());
    }

    /// One datagram from `from` to `to` (when the kernel said), received at
    /// `now`: through the table, then what the table asks for.
    fn datagram(&mut self, now: Instant, datagram: &[u8], from: SocketAddr, to: Option<IpAddr>) {
        // A trusted peer relay's PROXY header is stripped here, whatever
        // the flow's state; a flow's first datagram decides the flow
        // (`FlowTable::start`).
        let listener = &self.current.listener;
        let arrival = preface::arrived(listener.proxy_protocol.as_ref(), from, datagram);
        let payload = arrival.payload();
        let permits = &self.runtime.permits;
        let open = match self.table.up(
            now,
            from,
            payload.unwrap_or_default(),
            &self.current,
            permits,
        ) {
            Up::NotOpen => None,
            Up::Open { io, validated } => {
                if validated {
                    // From now on the flow task sends without the 3x bound.
                    io.path.validate();
                }
                Some(io)
            }
            Up::Closed => {
                self.perform(now);
                return;
            }
        };
        if let Some(open) = open {
            let Some(datagram) = payload else {
                tracing::debug!(listener = %self.current.listener.name, client.peer = %from, "a datagram with an invalid PROXY header on an open flow: dropped");
                return;
            };
            open.stats.up(datagram.len(), open.started, now);
            moved(&open.entry.activity, Side::Up, datagram.len());
            // Gathered with the flow's next datagrams of this receive, for
            // one send (`flush_up`).
            let (table, offload, framed) = (&self.table, &self.offload, &mut self.framed);
            self.up.push(
                from,
                datagram,
                offload.max_segments(),
                |client, contents, segment| {
                    send_up(table, offload, framed, client, contents, segment);
                },
            );
            return;
        }
        let payload = match arrival.payload() {
            Some(payload) => payload,
            // An invalid header: a flow's later datagram is dropped, a new
            // flow's first one closes it (`start`, below).
            None if self.table.holds(from) => return,
            None => &[],
        };
        match self.table.handle(now, from, payload, &self.current) {
            Datagram::Open | Datagram::Taken => {}
            // A client of an open flow that moved (NAT rebinding).
            Datagram::Moved if self.rebind(now, payload, from) => {}
            Datagram::Moved | Datagram::Unknown => {
                // Replaced (a binary upgrade): a new flow is the new
                // process's, which reads the socket once this one is done.
                if self.successor.forward(from, datagram) {
                    return;
                }
                if self.runtime.stop_accepting.is_cancelled() || self.stop.is_cancelled() {
                    self.table.drain();
                }
                self.table
                    .start(now, from, to, arrival, &self.current, &self.runtime.permits);
            }
        }
        self.perform(now);
    }

    /// Moves the open flow whose backend chose the datagram's Destination
    /// Connection ID to `from`, and relays the datagram; false if no open
    /// flow has that ID.
    fn rebind(&mut self, now: Instant, datagram: &[u8], from: SocketAddr) -> bool {
        // What this receive gathered for the old address goes first.
        self.flush_up();
        let Some((old, open)) = self.table.rebind(from, datagram, &self.runtime.permits) else {
            self.perform(now);
            return false;
        };
        open.path.moved(from);
        // A moved flow is a validated one (the table took its permit).
        open.path.validate();
        open.stats.up(datagram.len(), open.started, now);
        moved(&open.entry.activity, Side::Up, datagram.len());
        let _ = self
            .offload
            .send_connected(&open.backend, open.backend_addr, datagram, None);
        tracing::debug!(
            listener = %self.current.listener.name,
            client.previous = %old,
            client.last_peer = %from,
            client.rebinds = open.path.rebinds(),
            "QUIC flow followed to a new client address"
        );
        true
    }

    /// Performs what the table asked for, in order.
    fn perform(&mut self, now: Instant) {
        while let Some(event) = self.table.poll_event() {
            match event {
                Event::Close {
                    record,
                    reason,
                    answer,
                } => {
                    if let Some((to, answer)) = answer
                        && self.now.send_to(&answer, to).is_ok()
                    {
                        record
                            .part
                            .stats
                            .down(answer.len(), record.part.started(), now);
                    }
                    record.close(reason);
                }
                Event::Pick(pick) => self.pick(*pick),
                Event::Open(opening) => self.open(now, *opening),
                Event::Stop { io, reason } => io.stop.stop(reason),
            }
        }
    }

    /// Chooses a routed flow's address: at once when the backend's
    /// addresses are known; otherwise (a first DNS answer, a cluster
    /// lookup) a task finds it while the flow waits in the table.
    fn pick(&mut self, pick: PickFor<ToChoose>) {
        let PickFor {
            from,
            id,
            choose:
                ToChoose {
                    backend,
                    pick,
                    drain,
                },
        } = pick;
        let generation = self.current.clone();
        let backends = &generation.backends;
        let Some(runtime) = backends.get(&backend) else {
            self.table.chosen(from, id, Err(CloseReason::NoAddress));
            return;
        };
        if let Some(picked) = backend_address::pick_now(backends, runtime, &pick) {
            let outcome = picked.map(|p| (p, drain)).map_err(CloseReason::from);
            self.table.chosen(from, id, outcome);
            return;
        }
        let chosen = self.chosen_tx.clone();
        let close = self.close_flows.clone();
        self.runtime.connections.spawn(async move {
            let backends = &generation.backends;
            let outcome = match backends.get(&backend) {
                None => Err(CloseReason::NoAddress),
                Some(runtime) => tokio::select! {
                    picked = backend_address::pick(backends, runtime, &pick) => picked.map_err(CloseReason::from),
                    () = drain.closing(id) => Err(drain.reason()),
                    () = close.cancelled() => Err(CloseReason::Shutdown),
                },
            };
            let outcome = outcome.map(|picked| (picked, drain));
            // The socket task may be gone (its stop): nothing to report to.
            let _ = chosen.send(Chosen { from, id, outcome });
        });
    }

    /// Opens a flow on its chosen address: one UDP socket connected to it,
    /// the held datagrams forwarded in arrival order, and the task that
    /// relays the backend's answers; or closes it `connect_failed`.
    fn open(&mut self, now: Instant, opening: Opening<FlowStages>) {
        let Opening {
            from,
            mut record,
            held,
            idle,
            lifetime,
            kept: RoutedHold { slots, headers },
            source,
            chosen: (picked, drain),
        } = opening;
        // The hop header toward another node, or the local backend's own.
        let headers = headers.for_pick(picked.local);
        let Picked {
            addr: backend_addr,
            in_flight,
            mut health,
            local,
            egress,
        } = picked;
        record.backend_addr = Some(backend_addr);
        // `source = "client"` binds the client's address: the one a
        // trusted peer claims, as for a TCP connection.
        let client = record.claimed.map_or(from, |c| c.0);
        let backend = match connect(backend_addr, client, &egress) {
            Ok(socket) => Arc::new(socket),
            Err(error) => {
                tracing::debug!(%error, backend.addr = %backend_addr, "cannot open a QUIC backend socket");
                if !crate::sockopt::is_local_connect_failure(&error) {
                    health.refused(&in_flight);
                }
                record.close(CloseReason::ConnectFailed);
                return;
            }
        };
        record.part.backend_local = backend.local_addr().ok();
        for datagram in &held {
            send_with_header(
                &self.offload,
                &backend,
                backend_addr,
                headers.as_deref(),
                datagram,
            );
        }
        drop(held);
        // From now on the flow drains with its route or with its address
        // (an operator's `maint`), as a TCP connection does.
        let drain = in_flight.state().drain_part(drain.signal()).enter();
        let stats = record.part.stats.clone();
        let started = record.part.started();
        let path = Arc::new(Path::new(from));
        record.part.path = Some(path.clone());
        // Listed, filtered and closable by the admin listener like a TCP
        // connection (a `local` one also by a push of local names); its
        // stop is this socket's `close_flows` or an operator's.
        let registered = registry::register(registry::Meta::of(&record, local));
        moved(
            registered.activity(),
            Side::Up,
            stats.bytes_up.load(std::sync::atomic::Ordering::Relaxed) as usize,
        );
        let stop = Arc::new(Stop::new(self.close_flows.child_token()));
        self.table.opened(
            now,
            from,
            record.id,
            source,
            OpenFlow {
                backend: backend.clone(),
                backend_addr,
                stats,
                started,
                entry: registered.shared(),
                path: path.clone(),
                headers: headers.clone(),
                stop: stop.clone(),
            },
        );
        let expiry = Expiry::new(started, idle, lifetime, record.id);
        let flow = FlowTask {
            record,
            backend,
            socket: self.socket.clone(),
            offload: self.offload.clone(),
            down: self.down.clone(),
            path,
            expiry,
            registered,
            stop,
            ended: self.ended_tx.clone(),
            learned: self.learned_tx.clone(),
            drain,
            health,
            in_flight,
            headers,
            _held: slots,
        };
        self.runtime.connections.spawn(relay_back(flow));
    }

    /// Sends the open flows' datagrams gathered from the last receive.
    fn flush_up(&mut self) {
        let (table, offload, framed) = (&self.table, &self.offload, &mut self.framed);
        self.up.flush(|client, contents, segment| {
            send_up(table, offload, framed, client, contents, segment);
        });
    }
}

/// Sends an open flow's gathered client datagrams on its backend socket;
/// dropped if the flow is gone or the socket cannot take them now. Until
/// the backend answers, each datagram of the run is framed behind the
/// flow's PROXY header in `framed`, and the run still goes in one send: a
/// gathered run's datagrams are all `segment` bytes but the last, which
/// may be shorter, so with one header in front of each they are all
/// `header + segment` but the last, as a GSO send needs. The header is
/// the one a `segment`-byte datagram gets (full, or minimal where the full
/// one would pass `max_datagram_size`), and fits the shorter last one too.
fn send_up(
    table: &FlowTable<OpenFlow, OwnedSemaphorePermit>,
    offload: &Offload,
    framed: &mut Vec<u8>,
    client: SocketAddr,
    contents: &[u8],
    segment: Option<usize>,
) {
    let Some(open) = table.open_at(client) else {
        return;
    };
    match open.headers.as_deref().filter(|h| h.sending()) {
        None => {
            let _ = offload.send_connected(&open.backend, open.backend_addr, contents, segment);
        }
        Some(headers) => {
            let each = segment.unwrap_or(contents.len()).max(1);
            match headers.next(each) {
                Prefix::Header(header) => {
                    framed.clear();
                    for datagram in contents.chunks(each) {
                        framed.extend_from_slice(header);
                        framed.extend_from_slice(datagram);
                    }
                    let segment = segment.map(|each| header.len() + each);
                    let _ =
                        offload.send_connected(&open.backend, open.backend_addr, framed, segment);
                }
                // Answered since the check above, or too large even for
                // the minimal header: datagram by datagram.
                Prefix::Nothing | Prefix::TooLarge => {
                    for datagram in contents.chunks(each) {
                        send_with_header(
                            offload,
                            &open.backend,
                            open.backend_addr,
                            Some(headers),
                            datagram,
                        );
                    }
                }
            }
        }
    }
}

/// Sends one client datagram on a flow's backend socket, behind the
/// flow's PROXY header while it is still sent ([`DatagramHeaders::next`]);
/// one that not even the minimal header fits under the backend's
/// `max_datagram_size` is dropped and counted, as the network would drop
/// one too large for its path.
fn send_with_header(
    offload: &Offload,
    backend: &UdpSocket,
    backend_addr: SocketAddr,
    headers: Option<&DatagramHeaders>,
    datagram: &[u8],
) {
    let prefix = headers.map_or(Prefix::Nothing, |h| h.next(datagram.len()));
    match prefix {
        Prefix::Nothing => {
            let _ = offload.send_connected(backend, backend_addr, datagram, None);
        }
        Prefix::Header(header) => {
            let mut framed = Vec::with_capacity(header.len() + datagram.len());
            framed.extend_from_slice(header);
            framed.extend_from_slice(datagram);
            let _ = offload.send_connected(backend, backend_addr, &framed, None);
        }
        Prefix::TooLarge => {
            metrics::metrics().datagram_too_large();
            tracing::debug!(
                backend.addr = %backend_addr,
                bytes = datagram.len(),
                "a client datagram with its PROXY header would pass max_datagram_size: dropped"
            );
        }
    }
}

/// One UDP socket of the backend's family, connected to `addr` and bound
/// as its `source` says for the client at `from` ([`crate::backend::egress`]), so
/// that only its datagrams are read from it (with GRO where the kernel has
/// it).
fn connect(
    addr: SocketAddr,
    from: SocketAddr,
    egress: &crate::backend::egress::EgressChoice,
) -> std::io::Result<UdpSocket> {
    let socket = egress.bind_each(addr, from, |bind| crate::sockopt::udp_connect(addr, bind))?;
    // Without GRO each receive slot holds one datagram: nothing else
    // changes.
    let _ = crate::sockopt::enable_udp_gro(&socket);
    UdpSocket::from_std(socket)
}

/// The flow table takes the process-wide connection permits from the
/// runtime's semaphore, shared with the TCP accept loops.
impl Permits for Arc<Semaphore> {
    type Permit = OwnedSemaphorePermit;

    fn available(&self) -> usize {
        self.available_permits()
    }

    fn try_take(&self) -> Option<OwnedSemaphorePermit> {
        self.clone().try_acquire_owned().ok()
    }
}
