//! The listener lifecycle: for each running listener, its published
//! [`Generation`], its sockets and their accept loops.
//!
//! A listener starts with the sockets `bind` opened for it and one
//! generation; a reload publishes the next generation (carrying the
//! admission state over, and the per-source counts of open connections
//! even when `[listener.limits]` changed), adds accept
//! loops for new sockets and stops those of addresses the file removed.
//! Sockets of addresses that stay are never closed, so a reload refuses no
//! connection. Each listener's admission tables are swept by a task of its
//! own ([`crate::admission::spawn_sweeper`]) that follows the published generation.
//!
//! Accept scaling: each bound socket gets one accept loop per runtime
//! worker thread (`global.threads`), all accepting on that one socket, so
//! every worker takes new connections instead of one loop feeding the
//! others through work stealing. Measured with `scripts/loadbench.sh
//! --threads 2 --only rate` on the shared 2-core machine: the median
//! snirelay/HAProxy rate ratio went from 0.67 (one loop, 5 runs) to 0.87
//! (two loops, 5 runs), proxy CPU per connection about the same (187 vs
//! 197 µs; the losing loop's wake-up costs one EAGAIN accept) — noisy
//! (load average 6–10 from other builds), so a modest gain, not a proof.
//! The kernel alternative, an SO_REUSEPORT group of one socket per worker,
//! is not used by default: `bind` owns binding, a reload keeps sockets by
//! address, and a binary upgrade hands over one descriptor per address
//! (`takeover`); a group would multiply all three, and connections queued
//! in a group member's backlog are lost when that member closes.
//! `reuse_port = true` still sets the option for an operator who runs
//! several processes on one address. Both alternatives were prototyped
//! against this design (issue 33, `loadbench --threads 2 --slices 12`,
//! paired 2 s slices against HAProxy `nbthread 2`): one current-thread
//! runtime per thread, each with its accept loop on the shared socket,
//! 1.008 and 0.994 of HAProxy's rate; the same with an SO_REUSEPORT group
//! of one socket per thread, 1.013 and 0.976; this design in the same
//! sessions 0.987, 1.002, 0.987 and 1.019. No difference: both proxies keep
//! about one core busy on the 2-core machine, so the rate follows CPU per
//! connection, not how accepts are spread (benches/README.md).
//!
//! Each listening socket carries its listener's `tcp_keepalive` (set when
//! its loops start and again on every reload), which the sockets accepted
//! from it inherit.
//!
//! A `protocol = "quic"` listener has the same generation and sweeper, but
//! UDP sockets it binds itself ([`Listeners::start`], and on reload for
//! addresses the file adds) unless systemd passed it datagram sockets
//! (`ListenDatagram=`, kept as they are across reloads like a tcp
//! listener's activated sockets), each run by [`crate::quic::socket_task::run_socket`]
//! instead of accept loops. A binary upgrade hands them over too, each
//! with a channel for the datagrams the old process forwards while it
//! drains ([`crate::quic::handover`]): [`Listeners::open_quic_channels`] and
//! [`Listeners::for_handover`] on the old side, [`Listeners::inherit_udp`]
//! on the new one.
//!
//! Not here: deciding what a reload changes (`server`, `reload`), binding
//! ([`crate::run::bind`]), or accepting ([`crate::tcp::accept_loop`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admission;
use crate::backend::Backends;
use crate::config::{Listener, Protocol};
use crate::drain::DrainSignal;
use crate::flow::generation::{Generation, SharedPace};
use crate::quic::handover::{Handover, Predecessor, Successor};
use crate::quic::socket_task as quic;
use crate::run::bind::{BindError, BindKey, Sockets};
use crate::tcp::accept_loop::AcceptLoop;
use crate::{run::takeover, sockopt};

/// What every accept loop of the process shares.
#[derive(Clone)]
pub(crate) struct Shared {
    /// Process-wide connection permits (`global.max_connections`).
    pub permits: Arc<Semaphore>,
    /// Connection tasks, so a drain can wait for them.
    pub connections: TaskTracker,
    /// Accept loops, so a drain can wait for them to let go of sockets.
    pub accepting: TaskTracker,
    /// Fires to stop every accept loop (each socket has a child token).
    pub stop_accepting: CancellationToken,
    /// Fires to close every connection.
    pub close_connections: CancellationToken,
}

/// One socket being accepted on.
struct Bound {
    /// Fires to stop this socket's accept loops (which then close it).
    stop: CancellationToken,
    /// A duplicate, kept so the socket can be handed to a new binary.
    /// Dropped together with `stop` firing, so the socket really closes.
    dup: OwnedFd,
    /// A QUIC socket's forwarding side for a binary upgrade (`None` on
    /// TCP sockets).
    successor: Option<Arc<Successor>>,
}

struct Running {
    /// The current generation. Its admission state is replaced only when
    /// a reload changes `[listener.limits]`, and even then the counts of
    /// open connections carry over.
    generation: watch::Sender<Arc<Generation>>,
    binds: BTreeMap<BindKey, Bound>,
    /// Its sockets came from systemd: they are kept as they are on reload.
    activated: bool,
}

/// Every running listener, by name.
pub(crate) struct Listeners {
    running: BTreeMap<String, Running>,
    shared: Shared,
    /// UDP sockets handed over by the process being replaced, with their
    /// forwarding channel, by escaped listener name and bind key; taken
    /// by the QUIC listeners as they start.
    inherited_udp: Vec<InheritedUdp>,
}

/// A UDP socket from the previous process (see [`Listeners::inherit_udp`]).
struct InheritedUdp {
    listener: String,
    key: BindKey,
    socket: OwnedFd,
    channel: Option<OwnedFd>,
}

/// What a reload did to one listener.
#[derive(Debug, Default)]
pub(crate) struct Rebound {
    /// Sockets accepted on anew, and closed.
    pub added: usize,
    pub removed: usize,
    /// The drain signals of route identities the new generation does not
    /// carry on: their connections must drain.
    pub to_drain: Vec<Arc<DrainSignal>>,
}

impl Listeners {
    pub(crate) fn new(shared: Shared) -> Listeners {
        Listeners {
            running: BTreeMap::new(),
            shared,
            inherited_udp: Vec::new(),
        }
    }

    /// Keeps the UDP sockets (`sockets`) and forwarding channels
    /// (`channels`) a previous process handed over, for the QUIC listeners
    /// about to start; an entry whose key does not parse is closed.
    pub(crate) fn inherit_udp(
        &mut self,
        sockets: Vec<takeover::Received>,
        channels: Vec<takeover::Received>,
    ) {
        let mut channels: Vec<_> = channels
            .into_iter()
            .filter_map(|c| Some((c.listener, c.key.parse::<BindKey>().ok()?, c.fd)))
            .collect();
        for received in sockets {
            let Ok(key) = received.key.parse::<BindKey>() else {
                tracing::warn!(listener = %received.listener, key = %received.key, "unknown bind key of a UDP socket handed over; closed");
                continue;
            };
            let channel = channels
                .iter()
                .position(|(l, k, _)| *l == received.listener && *k == key)
                .map(|at| channels.swap_remove(at).2);
            self.inherited_udp.push(InheritedUdp {
                listener: received.listener,
                key,
                socket: received.fd,
                channel,
            });
        }
    }

    /// Closes the handed-over UDP sockets no QUIC listener took (its
    /// address left the configuration), saying so.
    pub(crate) fn close_unclaimed_udp(&mut self) {
        for unclaimed in self.inherited_udp.drain(..) {
            tracing::info!(listener = %unclaimed.listener, socket = %unclaimed.key, "UDP socket handed over but not configured; closed");
        }
    }

    /// Opens, for a binary upgrade, one forwarding channel per QUIC
    /// socket: this process keeps one end (used once it drains), and the
    /// other is returned to be handed over with the socket.
    pub(crate) fn open_quic_channels(&self) -> Vec<(String, String, OwnedFd)> {
        let mut channels = Vec::new();
        for (name, running) in &self.running {
            for (key, bound) in &running.binds {
                let Some(successor) = &bound.successor else {
                    continue;
                };
                match successor.open() {
                    Ok(fd) => channels.push((
                        takeover::escape(name),
                        format!("{}{key}", takeover::UDP_FORWARD),
                        fd,
                    )),
                    Err(error) => {
                        tracing::warn!(listener = %name, socket = %key, %error, "cannot open a QUIC handover channel; the new process will read the socket at once");
                    }
                }
            }
        }
        channels
    }

    /// The new process is ready: the QUIC sockets forward what is not
    /// their own to it from now on.
    pub(crate) fn quic_channels_ready(&self) {
        for running in self.running.values() {
            for bound in running.binds.values() {
                if let Some(successor) = &bound.successor {
                    successor.ready();
                }
            }
        }
    }

    /// Forgets the forwarding channels of an abandoned handover.
    pub(crate) fn close_quic_channels(&self) {
        for running in self.running.values() {
            for bound in running.binds.values() {
                if let Some(successor) = &bound.successor {
                    successor.close();
                }
            }
        }
    }

    /// Publishes `generation` for a new listener and starts accepting on
    /// `sockets`; a QUIC listener runs `udp` (the datagram sockets systemd
    /// passed for it) or, without them, its own UDP sockets.
    pub(crate) fn start(
        &mut self,
        generation: Generation,
        sockets: Sockets,
        activated: bool,
        udp: Vec<(BindKey, std::net::UdpSocket)>,
    ) -> Result<(), BindError> {
        let listener = generation.listener.clone();
        generation.create_series();
        let (generation, _) = watch::channel(Arc::new(generation));
        admission::spawn_sweeper(
            listener.name.clone(),
            generation.subscribe(),
            |g: &Arc<Generation>| g.admission.clone(),
            |g: &Arc<Generation>| {
                let routes = g.route_gates.sweep();
                g.routes.sweep_throttles();
                routes
            },
            self.shared.stop_accepting.clone(),
        );
        let mut running = Running {
            generation,
            binds: BTreeMap::new(),
            activated,
        };
        for (key, socket) in sockets {
            let bound = self.spawn_loops(&listener, &running.generation, key, socket)?;
            running.binds.insert(key, bound);
        }
        // QUIC listeners (issue 18): their UDP sockets are bound here,
        // unless systemd passed them (`ListenDatagram=`) to this process
        // or to the one it replaces, which handed them over with their
        // `activated` keys; either way they replace `listen`.
        if listener.protocol == Protocol::Quic {
            let name = takeover::escape(&listener.name);
            let handed: Vec<BindKey> = self
                .inherited_udp
                .iter()
                .filter(|u| u.listener == name && matches!(u.key, BindKey::Activated(_)))
                .map(|u| u.key)
                .collect();
            let sockets: Vec<(BindKey, Option<std::net::UdpSocket>)> = if !udp.is_empty() {
                udp.into_iter().map(|(k, s)| (k, Some(s))).collect()
            } else if !handed.is_empty() {
                handed.into_iter().map(|k| (k, None)).collect()
            } else {
                listener
                    .listen
                    .iter()
                    .map(|&a| (BindKey::Config(a), None))
                    .collect()
            };
            running.activated = sockets
                .iter()
                .any(|(k, _)| matches!(k, BindKey::Activated(_)));
            for (key, socket) in sockets {
                let bound = self.spawn_quic(&listener, &running.generation, key, socket)?;
                running.binds.insert(key, bound);
            }
        }
        self.running.insert(listener.name.clone(), running);
        Ok(())
    }

    /// The addresses of `listener` a reload must bind: those not bound
    /// yet, none for a listener whose sockets came from systemd.
    pub(crate) fn unbound(&self, listener: &Listener) -> Vec<SocketAddr> {
        let running = self.running.get(&listener.name);
        if running.is_some_and(|r| r.activated) {
            tracing::debug!(listener = %listener.name, "sockets from systemd: `listen` is not applied");
            return Vec::new();
        }
        // QUIC listeners bind their UDP sockets in `start` and `apply`.
        if listener.protocol == Protocol::Quic {
            return Vec::new();
        }
        listener
            .listen
            .iter()
            .copied()
            .filter(|&addr| !running.is_some_and(|r| r.binds.contains_key(&BindKey::Config(addr))))
            .collect()
    }

    /// Applies a reloaded `listener`: publishes its next generation (over
    /// `backends` and `pace`), accepts on the new `sockets`, and stops
    /// accepting on addresses the file no longer names. A listener the
    /// reload added is started.
    pub(crate) fn apply(
        &mut self,
        listener: &Arc<Listener>,
        sockets: Sockets,
        backends: &Arc<Backends>,
        pace: &Option<SharedPace>,
    ) -> Rebound {
        let mut rebound = Rebound {
            added: sockets.len(),
            ..Rebound::default()
        };
        let Some(running) = self.running.get_mut(&listener.name) else {
            let generation = Generation::first(listener.clone(), backends, pace);
            if let Err(error) = self.start(generation, sockets, false, Vec::new()) {
                tracing::error!(%error, "cannot start a listener the reload added");
            }
            return rebound;
        };
        let previous = running.generation.borrow().clone();
        let next = previous.next(listener.clone(), backends, pace);
        next.create_series();
        rebound.to_drain = previous.routes.retired_by(Some(&next.routes));
        running.generation.send_replace(Arc::new(next));
        // Kept sockets take the reloaded keepalive for the connections
        // they accept from now on.
        let tcp = listener.protocol == Protocol::Tcp;
        for (key, bound) in running.binds.iter().filter(|_| tcp) {
            if let Err(error) = sockopt::set_keepalive(&bound.dup, listener.tcp_keepalive) {
                tracing::warn!(listener = %listener.name, socket = %key, %error, "cannot apply tcp_keepalive");
            }
        }
        if !running.activated {
            running.binds.retain(|key, bound| {
                let kept = listener.listen.iter().any(|&a| BindKey::Config(a) == *key);
                if !kept {
                    bound.stop.cancel();
                    rebound.removed += 1;
                    tracing::info!(listener = %listener.name, socket = %key, "no longer listening");
                }
                kept
            });
        }
        let generation = running.generation.clone();
        // QUIC listeners (issue 18): bind the addresses the file added.
        if listener.protocol == Protocol::Quic && !running.activated {
            let added: Vec<SocketAddr> = listener
                .listen
                .iter()
                .copied()
                .filter(|&a| !running.binds.contains_key(&BindKey::Config(a)))
                .collect();
            for addr in added {
                match self.spawn_quic(listener, &generation, BindKey::Config(addr), None) {
                    Ok(bound) => {
                        rebound.added += 1;
                        if let Some(running) = self.running.get_mut(&listener.name) {
                            running.binds.insert(BindKey::Config(addr), bound);
                        }
                    }
                    Err(error) => {
                        tracing::error!(%error, "cannot listen on a QUIC address the reload added")
                    }
                }
            }
        }
        for (key, socket) in sockets {
            match self.spawn_loops(listener, &generation, key, socket) {
                Ok(bound) => {
                    if let Some(running) = self.running.get_mut(&listener.name) {
                        running.binds.insert(key, bound);
                    }
                }
                Err(error) => {
                    tracing::error!(%error, "cannot accept on a socket the reload added")
                }
            }
        }
        rebound
    }

    /// Stops a listener the reload removed: every socket closes and every
    /// route identity drains.
    pub(crate) fn remove(&mut self, name: &str) -> Rebound {
        let Some(running) = self.running.remove(name) else {
            return Rebound::default();
        };
        for (key, bound) in &running.binds {
            bound.stop.cancel();
            tracing::info!(listener = %name, socket = %key, "no longer listening");
        }
        Rebound {
            added: 0,
            removed: running.binds.len(),
            to_drain: running.generation.borrow().routes.retired_by(None),
        }
    }

    /// Each running listener's generations, by name (for the admin
    /// listener's `/sources`).
    pub(crate) fn generations(&self) -> Vec<(String, watch::Receiver<Arc<Generation>>)> {
        self.running
            .iter()
            .map(|(name, running)| (name.clone(), running.generation.subscribe()))
            .collect()
    }

    /// Every listening socket, named for a new binary (`takeover`); a
    /// QUIC listener's UDP sockets keyed with [`takeover::UDP`].
    pub(crate) fn for_handover(&self) -> Vec<(String, String, BorrowedFd<'_>)> {
        self.running
            .iter()
            .flat_map(|(name, running)| {
                running.binds.iter().map(|(key, bound)| {
                    let key = match bound.successor {
                        Some(_) => format!("{}{key}", takeover::UDP),
                        None => key.to_string(),
                    };
                    (takeover::escape(name), key, bound.dup.as_fd())
                })
            })
            .collect()
    }

    /// Drops every listener and its socket duplicates (on drain: the
    /// accept loops have been told to stop; without this the sockets would
    /// stay open, queueing connections nobody accepts, until exit).
    pub(crate) fn clear(&mut self) {
        self.running.clear();
    }

    /// Runs a QUIC listener's UDP socket for `key`: `activated` (from
    /// systemd), the one the previous process handed over for `key`, or
    /// one bound here on a configured address.
    fn spawn_quic(
        &mut self,
        listener: &Listener,
        generation: &watch::Sender<Arc<Generation>>,
        key: BindKey,
        activated: Option<std::net::UdpSocket>,
    ) -> Result<Bound, BindError> {
        let addr = key.addr();
        let failed = |source| BindError::Bind {
            listener: listener.name.clone(),
            addr,
            source,
        };
        // Handed over by the process being replaced, or bound here.
        let name = takeover::escape(&listener.name);
        let inherited = self
            .inherited_udp
            .iter()
            .position(|u| u.listener == name && u.key == key)
            .map(|at| self.inherited_udp.swap_remove(at));
        let mut handover = Handover::default();
        let adopted = inherited.is_some();
        let socket = match (activated, inherited) {
            (Some(socket), _) => socket,
            (None, Some(inherited)) => {
                let socket = sockopt::adopt_udp(inherited.socket).map_err(failed)?;
                handover.predecessor = inherited
                    .channel
                    .map(Predecessor::adopt)
                    .transpose()
                    .map_err(failed)?;
                socket
            }
            (None, None) => quic::bind(listener, addr).map_err(failed)?,
        };
        let dup = socket.as_fd().try_clone_to_owned().map_err(failed)?;
        let local = socket.local_addr().unwrap_or(addr);
        tracing::info!(listener = %listener.name, addr = %local, socket = %key, protocol = "quic", inherited = adopted, "listening");
        let successor = handover.successor.clone();
        let stop = self.shared.stop_accepting.child_token();
        let runtime = quic::Runtime {
            permits: self.shared.permits.clone(),
            connections: self.shared.connections.clone(),
            stop_accepting: self.shared.stop_accepting.clone(),
            close_connections: self.shared.close_connections.clone(),
        };
        self.shared.connections.spawn(quic::run_socket(
            socket,
            generation.subscribe(),
            runtime,
            stop.clone(),
            handover,
        ));
        Ok(Bound {
            stop,
            dup,
            successor: Some(successor),
        })
    }

    /// Starts one accept loop per runtime worker on `socket`.
    fn spawn_loops(
        &self,
        listener: &Listener,
        generation: &watch::Sender<Arc<Generation>>,
        key: BindKey,
        socket: std::net::TcpListener,
    ) -> Result<Bound, BindError> {
        let addr = key.addr();
        let failed = |source| BindError::Bind {
            listener: listener.name.clone(),
            addr,
            source,
        };
        // Accepted sockets inherit keepalive from the listening socket.
        sockopt::set_keepalive(&socket, listener.tcp_keepalive).map_err(failed)?;
        let dup = socket.as_fd().try_clone_to_owned().map_err(failed)?;
        let socket = TcpListener::from_std(socket).map_err(failed)?;
        let local = socket.local_addr().unwrap_or(addr);
        tracing::info!(listener = %listener.name, addr = %local, socket = %key, "listening");
        let stop = self.shared.stop_accepting.child_token();
        // One accept loop per worker thread, all on this one socket (see
        // the module header for why not an SO_REUSEPORT group).
        let socket = Arc::new(socket);
        let loops = tokio::runtime::Handle::current().metrics().num_workers();
        for _ in 0..loops.max(1) {
            self.shared.accepting.spawn(
                AcceptLoop {
                    socket: socket.clone(),
                    generation: generation.subscribe(),
                    permits: self.shared.permits.clone(),
                    tracker: self.shared.connections.clone(),
                    stop_accepting: stop.clone(),
                    close_connections: self.shared.close_connections.clone(),
                }
                .run(),
            );
        }
        Ok(Bound {
            stop,
            dup,
            successor: None,
        })
    }
}
