//! The server: binds (or inherits) every listener of a snapshot, runs their
//! accept loops, and carries out the operator's intents: reload, drain,
//! stop, and the hand-over of its sockets to a new binary.
//!
//! Shutdown is passed in as a channel of [`Intent`]s and propagated through a
//! tree of cancellation tokens: `stop_accepting` (with one child per bound
//! socket, so a reload can close a single one) ends the accept loops,
//! `close_connections` (fired only once the drain budget is spent, or on
//! Stop) ends the relays. A `TaskTracker` lets a drain wait for connections
//! without polling. Every wait is bounded.
//!
//! Reload (SIGHUP): read and validate the file; on error keep everything
//! and count the failure. Otherwise bind the sockets the new file adds (any
//! failure rejects the whole reload, and the new sockets are closed again),
//! hand unchanged route identities their drain signals (`reload`), publish
//! the new listener snapshots to the accept loops, close the sockets the
//! file removed, and fire the drain signals of what changed. Sockets of
//! listeners that stay are never closed, so no connection is refused.
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
//! is not used by default: this module owns binding, a reload keeps
//! sockets by address, and a binary upgrade hands over one descriptor per
//! address (`takeover`); a group would multiply all three, and connections
//! queued in a group member's backlog are lost when that member closes.
//! `reuse_port = true` still sets the option for an operator who runs
//! several processes on one address.
//!
//! Not here: what a connection does (see `conn`), the diff (`reload`), the
//! handoff protocol (`takeover`), sd_notify (`notify`).

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::accept::AcceptLoop;
use crate::admin::{self, AdminState, Readiness};
use crate::admit::{self, Admission};
use crate::backend::Backends;
use crate::config::{Config, ConfigError, Listener};
use crate::notify::Notifier;
use crate::signals::Intent;
use crate::{metrics, reload, sockopt, takeover};

/// How long to wait for connection tasks to finish after they were told to close.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("listener {listener:?}: cannot listen on {addr}: {source}")]
    Bind {
        listener: String,
        addr: SocketAddr,
        source: io::Error,
    },
    #[error("listener {listener:?}: inherited socket {key} is unusable: {source}")]
    Inherited {
        listener: String,
        key: String,
        source: io::Error,
    },
    #[error("admin.listen: cannot listen on {addr}: {source}")]
    AdminBind { addr: SocketAddr, source: io::Error },
}

/// Why a reload was rejected (the running snapshot stays).
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Bind(#[from] ServeError),
}

/// Everything `serve` needs besides the first snapshot.
#[derive(Debug)]
pub struct ServeOptions {
    /// Re-read on reload.
    pub config_path: PathBuf,
    /// Sockets passed by systemd (socket activation), by listener name.
    pub activated: Vec<sockopt::ActivatedFd>,
    /// Sockets handed over by the process this one replaces.
    pub takeover_from: Option<takeover::Incoming>,
    /// Where to offer this process's sockets to the next binary.
    pub takeover_path: Option<PathBuf>,
    pub notifier: Notifier,
}

impl ServeOptions {
    pub fn new(config_path: PathBuf) -> ServeOptions {
        ServeOptions {
            config_path,
            activated: Vec::new(),
            takeover_from: None,
            takeover_path: None,
            notifier: Notifier::disabled(),
        }
    }
}

/// Identifies one listening socket of a listener across reloads and
/// handoffs: the configured address (port 0 included, so a test's
/// ephemeral port survives), or the address of a socket systemd passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum BindKey {
    Config(SocketAddr),
    Activated(SocketAddr),
}

impl fmt::Display for BindKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BindKey::Config(a) => write!(f, "config {a}"),
            BindKey::Activated(a) => write!(f, "activated {a}"),
        }
    }
}

impl FromStr for BindKey {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        match s.split_once(' ') {
            Some(("config", a)) => a.parse().map(BindKey::Config).map_err(drop),
            Some(("activated", a)) => a.parse().map(BindKey::Activated).map_err(drop),
            _ => Err(()),
        }
    }
}

/// One socket being accepted on.
struct Bound {
    /// Fires to stop this socket's accept loop (which then closes it).
    stop: CancellationToken,
    /// A duplicate, kept so the socket can be handed to a new binary.
    /// Dropped together with `stop` firing, so the socket really closes.
    dup: OwnedFd,
}

struct RunningListener {
    snapshot: watch::Sender<Arc<Listener>>,
    /// The listener's admission state; replaced (tables reset) only when a
    /// reload changes its `[listener.limits]`.
    admission: watch::Sender<Arc<Admission>>,
    binds: BTreeMap<BindKey, Bound>,
    /// Its sockets came from systemd: they are kept as they are on reload.
    activated: bool,
}

/// Sockets inherited at start, not yet claimed by a listener.
#[derive(Default)]
struct Pool {
    sockets: Vec<(String, BindKey, std::net::TcpListener)>,
}

impl Pool {
    fn take(&mut self, listener: &str, key: BindKey) -> Option<std::net::TcpListener> {
        let name = takeover::escape(listener);
        let at = self
            .sockets
            .iter()
            .position(|(l, k, _)| *l == name && *k == key)?;
        Some(self.sockets.swap_remove(at).2)
    }

    fn take_activated(&mut self, listener: &str) -> Vec<(BindKey, std::net::TcpListener)> {
        let name = takeover::escape(listener);
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.sockets.len() {
            let (l, k, _) = &self.sockets[i];
            if *l == name && matches!(k, BindKey::Activated(_)) {
                let (_, k, s) = self.sockets.swap_remove(i);
                out.push((k, s));
            } else {
                i += 1;
            }
        }
        out.sort_by_key(|(k, _)| *k);
        out
    }
}

struct Server {
    config: Config,
    listeners: BTreeMap<String, RunningListener>,
    permits: Arc<Semaphore>,
    tracker: TaskTracker,
    accepting: TaskTracker,
    stop_accepting: CancellationToken,
    close_connections: CancellationToken,
    config_path: PathBuf,
    notifier: Notifier,
    reloads_applied: u64,
    reloads_failed: u64,
    /// What `/readyz` says: true once serving, false from the drain on.
    readiness: Arc<Readiness>,
    /// The admin listener's state, to show a reloaded configuration.
    admin: Option<Arc<AdminState>>,
    /// Accept pacing (`global.max_connection_rate`), shared by every loop.
    pace: watch::Sender<Option<Arc<governor::DefaultDirectRateLimiter>>>,
    /// Every backend's run-time state, rebuilt (carrying unchanged
    /// backends over) on reload.
    backends: watch::Sender<Arc<Backends>>,
}

fn pace_for(config: &Config) -> Option<Arc<governor::DefaultDirectRateLimiter>> {
    let rate = config.global.max_connection_rate?;
    Some(Arc::new(governor::RateLimiter::direct(
        governor::Quota::per_second(rate),
    )))
}

/// What the diff said, and what the reload did about it.
struct Applied {
    diff: reload::Diff,
    binds_added: usize,
    binds_removed: usize,
    marked: usize,
}

/// Binds (or inherits) every listener in `config` and serves until a drain
/// or stop completes. Logs `listening` once per socket, then `ready`.
pub async fn serve(
    config: Config,
    mut options: ServeOptions,
    mut intents: mpsc::Receiver<Intent>,
) -> Result<(), ServeError> {
    let mut pool = inherit(&mut options)?;
    let mut server = Server {
        permits: Arc::new(Semaphore::new(config.global.max_connections)),
        listeners: BTreeMap::new(),
        tracker: TaskTracker::new(),
        accepting: TaskTracker::new(),
        stop_accepting: CancellationToken::new(),
        close_connections: CancellationToken::new(),
        config_path: options.config_path.clone(),
        notifier: options.notifier,
        reloads_applied: 0,
        reloads_failed: 0,
        pace: watch::channel(pace_for(&config)).0,
        backends: watch::channel(Arc::new(Backends::start(&config, None))).0,
        config: config.clone(),
        readiness: Arc::new(Readiness::default()),
        admin: None,
    };

    // The admin listener comes up first, so /readyz answers 503 until the
    // relay listeners are bound. (A changed [admin] listen takes a restart;
    // its other keys follow each reload through AdminState::set_config.)
    let stop_admin = CancellationToken::new();
    let _stop_admin_on_return = stop_admin.clone().drop_guard();
    if let Some(settings) = &config.admin {
        let socket = sockopt::bind_listener_with(settings.listen, admin::ADMIN_BACKLOG, false)
            .and_then(TcpListener::from_std)
            .map_err(|source| ServeError::AdminBind {
                addr: settings.listen,
                source,
            })?;
        let local = socket.local_addr().unwrap_or(settings.listen);
        tracing::info!(addr = %local, "admin listening");
        let state = Arc::new(AdminState::new(
            Arc::new(config.clone()),
            server.readiness.clone(),
        ));
        tokio::spawn(admin::serve(socket, state.clone(), stop_admin.clone()));
        server.admin = Some(state);
    }

    // Open everything before accepting anywhere: a failure leaves nothing half-started.
    let mut opened = Vec::new();
    for listener in &config.listeners {
        opened.push((listener.clone(), open_at_start(&mut pool, listener)?));
    }
    for (listener, (sockets, activated)) in opened {
        server.start_listener(listener, sockets, activated)?;
    }
    for (listener, key, _) in pool.sockets.drain(..) {
        tracing::warn!(listener = %listener, socket = %key, "inherited socket matches no listener; closing it");
    }
    // Ready for /readyz before the `ready` line, so whoever waits for the
    // line finds the endpoint agreeing.
    server.readiness.set(true);
    tracing::info!(
        listeners = config.listeners.len(),
        max_connections = config.global.max_connections,
        "ready"
    );
    server.notifier.ready("serving");
    if let Some(incoming) = options.takeover_from.take() {
        match incoming.ready() {
            Ok(()) => tracing::info!("took over the listening sockets of the previous process"),
            Err(error) => tracing::warn!(%error, "could not tell the previous process to drain"),
        }
    }
    let takeover_listener = options.takeover_path.as_ref().and_then(|path| {
        offer_takeover(path)
            .inspect_err(|error| {
                tracing::warn!(path = %path.display(), %error, "cannot offer binary takeover");
            })
            .ok()
    });

    // Serve until told otherwise.
    let (handoff_tx, mut handoff_rx) = mpsc::channel::<bool>(1);
    let mut handoff_in_progress = false;
    let why = loop {
        tokio::select! {
            intent = intents.recv() => match intent {
                Some(Intent::Reload) => server.reload(),
                Some(Intent::Drain) | None => break "asked to stop",
                Some(Intent::Stop) => {
                    tracing::info!("stopping now");
                    server.stop_accepting.cancel();
                    server.close_connections.cancel();
                    return Ok(());
                }
            },
            accepted = accept_takeover(takeover_listener.as_ref()) => {
                let Ok(stream) = accepted else { continue };
                if handoff_in_progress {
                    tracing::warn!("another binary takeover is already in progress; refusing this one");
                    continue;
                }
                handoff_in_progress = server.hand_over(stream, handoff_tx.clone());
            }
            Some(ok) = handoff_rx.recv() => {
                handoff_in_progress = false;
                if ok {
                    tracing::info!("the new process accepts on our sockets; draining");
                    break "replaced by a new process";
                }
                tracing::warn!("binary takeover abandoned: the new process did not become ready; still serving");
            }
        }
    };
    drop(takeover_listener);
    server.drain(why, intents).await;
    Ok(())
}

/// Turns systemd's and the previous process's descriptors into a pool of
/// checked listening sockets.
fn inherit(options: &mut ServeOptions) -> Result<Pool, ServeError> {
    let mut pool = Pool::default();
    for activated in options.activated.drain(..) {
        let unusable = |source| ServeError::Inherited {
            listener: activated.name.clone(),
            key: "from systemd".into(),
            source,
        };
        let socket = sockopt::adopt_listener(activated.fd).map_err(unusable)?;
        let local = socket.local_addr().map_err(unusable)?;
        pool.sockets.push((
            takeover::escape(&activated.name),
            BindKey::Activated(local),
            socket,
        ));
    }
    if let Some(incoming) = &mut options.takeover_from {
        for received in incoming.sockets.drain(..) {
            let unusable = |source| ServeError::Inherited {
                listener: received.listener.clone(),
                key: received.key.clone(),
                source,
            };
            let key = received.key.parse::<BindKey>().map_err(|()| {
                unusable(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "unknown bind key",
                ))
            })?;
            let socket = sockopt::adopt_listener(received.fd).map_err(unusable)?;
            pool.sockets.push((received.listener, key, socket));
        }
    }
    Ok(pool)
}

type Opened = (Vec<(BindKey, std::net::TcpListener)>, bool);

/// The sockets of one listener at start: systemd's for this name if any
/// (they replace `listen`), else per address the previous process's, else
/// freshly bound.
fn open_at_start(pool: &mut Pool, listener: &Listener) -> Result<Opened, ServeError> {
    let activated = pool.take_activated(&listener.name);
    if !activated.is_empty() {
        return Ok((activated, true));
    }
    let mut sockets = Vec::new();
    for &addr in &listener.listen {
        let key = BindKey::Config(addr);
        let socket = match pool.take(&listener.name, key) {
            Some(socket) => socket,
            None => bind(listener, addr)?,
        };
        sockets.push((key, socket));
    }
    Ok((sockets, false))
}

fn bind(listener: &Listener, addr: SocketAddr) -> Result<std::net::TcpListener, ServeError> {
    sockopt::bind_listener_with(addr, listener.backlog, listener.reuse_port).map_err(|source| {
        ServeError::Bind {
            listener: listener.name.clone(),
            addr,
            source,
        }
    })
}

fn offer_takeover(path: &std::path::Path) -> io::Result<UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let listener = UnixListener::bind(path)?;
    // Whoever can connect can take the sockets: owner only.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    tracing::info!(path = %path.display(), "offering binary takeover");
    Ok(listener)
}

async fn accept_takeover(listener: Option<&UnixListener>) -> io::Result<tokio::net::UnixStream> {
    match listener {
        Some(listener) => listener.accept().await.map(|(stream, _)| stream),
        None => std::future::pending().await,
    }
}

impl Server {
    /// Publishes `listener` and starts an accept loop per socket.
    fn start_listener(
        &mut self,
        listener: Arc<Listener>,
        sockets: Vec<(BindKey, std::net::TcpListener)>,
        activated: bool,
    ) -> Result<(), ServeError> {
        let (snapshot, _) = watch::channel(listener.clone());
        let admission = Arc::new(Admission::new(&listener.limits));
        let (admission, _) = watch::channel(admission);
        spawn_sweeper(
            listener.name.clone(),
            admission.subscribe(),
            self.stop_accepting.clone(),
        );
        let mut running = RunningListener {
            snapshot,
            admission,
            binds: BTreeMap::new(),
            activated,
        };
        for (key, socket) in sockets {
            let bound = self.spawn_loop(
                &listener,
                &running.snapshot,
                &running.admission,
                key,
                socket,
            )?;
            running.binds.insert(key, bound);
        }
        self.listeners.insert(listener.name.clone(), running);
        Ok(())
    }

    fn spawn_loop(
        &self,
        listener: &Listener,
        snapshot: &watch::Sender<Arc<Listener>>,
        admission: &watch::Sender<Arc<Admission>>,
        key: BindKey,
        socket: std::net::TcpListener,
    ) -> Result<Bound, ServeError> {
        let addr = match key {
            BindKey::Config(a) | BindKey::Activated(a) => a,
        };
        let failed = |source| ServeError::Bind {
            listener: listener.name.clone(),
            addr,
            source,
        };
        let dup = socket.as_fd().try_clone_to_owned().map_err(failed)?;
        let socket = TcpListener::from_std(socket).map_err(failed)?;
        let local = socket.local_addr().unwrap_or(addr);
        tracing::info!(listener = %listener.name, addr = %local, socket = %key, "listening");
        metrics::metrics().listener_started(&listener.name);
        let stop = self.stop_accepting.child_token();
        // One accept loop per worker thread, all on this one socket (see
        // the module header for why not an SO_REUSEPORT group).
        let socket = Arc::new(socket);
        let loops = tokio::runtime::Handle::current().metrics().num_workers();
        for _ in 0..loops.max(1) {
            self.accepting.spawn(
                AcceptLoop {
                    socket: socket.clone(),
                    config: snapshot.subscribe(),
                    permits: self.permits.clone(),
                    tracker: self.tracker.clone(),
                    stop_accepting: stop.clone(),
                    close_connections: self.close_connections.clone(),
                    admission: admission.subscribe(),
                    pace: self.pace.subscribe(),
                    backends: self.backends.subscribe(),
                }
                .run(),
            );
        }
        Ok(Bound { stop, dup })
    }

    fn reload(&mut self) {
        self.notifier.reloading();
        match self.try_reload() {
            Ok(applied) => {
                self.reloads_applied += 1;
                let d = &applied.diff;
                tracing::info!(
                    listeners.added = %d.listeners_added.join(","),
                    listeners.removed = %d.listeners_removed.join(","),
                    binds.added = applied.binds_added,
                    binds.removed = applied.binds_removed,
                    routes.added = d.routes_added.len(),
                    routes.removed = d.routes_removed.len(),
                    routes.changed = d.routes_changed.len(),
                    routes.list = %summary(d),
                    backends.added = %d.backends_added.join(","),
                    backends.removed = %d.backends_removed.join(","),
                    backends.changed = %d.backends_changed.join(","),
                    connections.drained = applied.marked,
                    drain_timeout = ?self.config.global.drain_timeout,
                    reloads.applied = self.reloads_applied,
                    reloads.failed = self.reloads_failed,
                    "reload applied"
                );
                metrics::metrics().reload("ok");
                if let Some(admin) = &self.admin {
                    admin.set_config(Arc::new(self.config.clone()));
                }
                self.notifier.ready("serving; reload applied");
            }
            Err(error) => {
                self.reloads_failed += 1;
                metrics::metrics().reload("failed");
                tracing::error!(
                    error = %error,
                    reloads.applied = self.reloads_applied,
                    reloads.failed = self.reloads_failed,
                    "reload rejected; still serving the previous configuration"
                );
                self.notifier
                    .ready(&format!("serving; reload rejected: {error}"));
            }
        }
    }

    fn try_reload(&mut self) -> Result<Applied, ReloadError> {
        let mut new = Config::load(&self.config_path)?;
        let diff = reload::carry_over(&self.config, &mut new);

        // Bind everything new first; dropping `opened` on error closes it all.
        let mut opened: BTreeMap<String, Vec<(BindKey, std::net::TcpListener)>> = BTreeMap::new();
        for listener in &new.listeners {
            let running = self.listeners.get(&listener.name);
            if running.is_some_and(|r| r.activated) {
                tracing::debug!(listener = %listener.name, "sockets from systemd: `listen` is not applied");
                continue;
            }
            for &addr in &listener.listen {
                let key = BindKey::Config(addr);
                if running.is_some_and(|r| r.binds.contains_key(&key)) {
                    continue;
                }
                let socket = bind(listener, addr)?;
                opened
                    .entry(listener.name.clone())
                    .or_default()
                    .push((key, socket));
            }
        }

        // Commit: nothing below can fail the reload.
        let backends = Arc::new(Backends::start(&new, Some(&self.backends.borrow())));
        self.backends
            .send_replace(backends.clone())
            .retire(&backends);
        let mut binds_added = 0;
        let mut binds_removed = 0;
        for listener in &new.listeners {
            let sockets = opened.remove(&listener.name).unwrap_or_default();
            binds_added += sockets.len();
            let Some(running) = self.listeners.get_mut(&listener.name) else {
                let activated = false;
                if let Err(error) = self.start_listener(listener.clone(), sockets, activated) {
                    tracing::error!(%error, "cannot start a listener the reload added");
                }
                continue;
            };
            running.snapshot.send_replace(listener.clone());
            if running.admission.borrow().limits() != &listener.limits {
                tracing::info!(listener = %listener.name, "admission limits changed; per-source counts start afresh");
                running
                    .admission
                    .send_replace(Arc::new(Admission::new(&listener.limits)));
            }
            if !running.activated {
                let keep: Vec<BindKey> = listener
                    .listen
                    .iter()
                    .map(|&a| BindKey::Config(a))
                    .collect();
                running.binds.retain(|key, bound| {
                    let kept = keep.contains(key);
                    if !kept {
                        bound.stop.cancel();
                        binds_removed += 1;
                        tracing::info!(listener = %listener.name, socket = %key, "no longer listening");
                    }
                    kept
                });
            }
            for (key, socket) in sockets {
                let snapshot = self.listeners[&listener.name].snapshot.clone();
                let admission = self.listeners[&listener.name].admission.clone();
                match self.spawn_loop(listener, &snapshot, &admission, key, socket) {
                    Ok(bound) => {
                        if let Some(running) = self.listeners.get_mut(&listener.name) {
                            running.binds.insert(key, bound);
                        }
                    }
                    Err(error) => {
                        tracing::error!(%error, "cannot accept on a socket the reload added")
                    }
                }
            }
        }
        for name in &diff.listeners_removed {
            if let Some(running) = self.listeners.remove(name) {
                for (key, bound) in running.binds {
                    bound.stop.cancel();
                    binds_removed += 1;
                    tracing::info!(listener = %name, socket = %key, "no longer listening");
                }
            }
        }

        let window = new.global.drain_timeout;
        let marked = diff.to_drain.iter().map(|s| s.fire(window)).sum();
        self.resize_permits(new.global.max_connections);
        if new.global.max_connection_rate != self.config.global.max_connection_rate {
            self.pace.send_replace(pace_for(&new));
        }
        self.config = new;
        Ok(Applied {
            diff,
            binds_added,
            binds_removed,
            marked,
        })
    }

    fn resize_permits(&self, wanted: usize) {
        let had = self.config.global.max_connections;
        if wanted > had {
            self.permits.add_permits(wanted - had);
        } else if wanted < had {
            let missing = (had - wanted) - self.permits.forget_permits(had - wanted);
            if missing > 0 {
                // Take the rest back as connections end.
                let permits = self.permits.clone();
                tokio::spawn(async move {
                    if let Ok(p) = permits.acquire_many_owned(missing as u32).await {
                        p.forget();
                    }
                });
            }
        }
    }

    /// Sends every listening socket to a new process; true when sent.
    fn hand_over(&self, stream: tokio::net::UnixStream, done: mpsc::Sender<bool>) -> bool {
        let sent = (|| {
            let stream = stream.into_std()?;
            stream.set_nonblocking(false)?;
            stream.set_write_timeout(Some(Duration::from_secs(5)))?;
            let sockets: Vec<_> = self
                .listeners
                .iter()
                .flat_map(|(name, running)| {
                    running.binds.iter().map(|(key, bound)| {
                        (takeover::escape(name), key.to_string(), bound.dup.as_fd())
                    })
                })
                .collect();
            takeover::send(&stream, &sockets)?;
            tracing::info!(
                sockets = sockets.len(),
                "handed the listening sockets to a new process; waiting for it to be ready"
            );
            io::Result::Ok(stream)
        })();
        match sent {
            Ok(stream) => {
                tokio::task::spawn_blocking(move || {
                    let ok = takeover::wait_ready(stream);
                    let _ = done.blocking_send(ok);
                });
                true
            }
            Err(error) => {
                tracing::warn!(%error, "binary takeover failed while sending the sockets");
                false
            }
        }
    }

    /// Stops accepting, lets connections finish within `drain_timeout`,
    /// then closes the rest. A second Drain or a Stop cuts the wait short.
    async fn drain(mut self, why: &str, mut intents: mpsc::Receiver<Intent>) {
        let drain = self.config.global.drain_timeout;
        self.readiness.set(false);
        self.notifier.stopping(why);
        self.stop_accepting.cancel();
        // Our duplicates too, or the sockets would stay open (and queue
        // connections nobody accepts) until exit.
        self.listeners.clear();
        self.accepting.close();
        self.accepting.wait().await;
        self.tracker.close();
        tracing::info!(connections = self.tracker.len(), timeout = ?drain, reason = why, "draining");
        metrics::metrics().set_draining(self.tracker.len() as i64);
        let deadline = tokio::time::sleep(drain);
        tokio::pin!(deadline);
        let finished = loop {
            tokio::select! {
                () = self.tracker.wait() => break true,
                () = &mut deadline => break false,
                intent = intents.recv() => match intent {
                    Some(Intent::Reload) => tracing::info!("reload ignored while draining"),
                    intent => {
                        tracing::info!(?intent, "stopping now");
                        break false;
                    }
                },
            }
        };
        if !finished {
            tracing::info!(
                connections = self.tracker.len(),
                "closing the connections still open"
            );
            self.close_connections.cancel();
            let _ = tokio::time::timeout(CLOSE_GRACE, self.tracker.wait()).await;
        }
        tracing::info!("stopped");
    }
}

/// The route identities that changed, for the reload log line (bounded).
fn summary(diff: &reload::Diff) -> String {
    const MAX: usize = 20;
    let all: Vec<String> = diff
        .routes_added
        .iter()
        .map(|r| format!("+{r}"))
        .chain(diff.routes_removed.iter().map(|r| format!("-{r}")))
        .chain(diff.routes_changed.iter().map(|r| format!("~{r}")))
        .collect();
    let mut text = all.iter().take(MAX).cloned().collect::<Vec<_>>().join(" ");
    if all.len() > MAX {
        text.push_str(&format!(" (+{} more)", all.len() - MAX));
    }
    text
}

/// Sweeps a listener's per-source tables every [`admit::SWEEP_INTERVAL`]
/// and logs, at warn, how many connections admission refused (or, in dry
/// run, would have refused) since the last sweep: refusals are logged one by
/// one only at debug, since a flood makes many. Ends when the listener is
/// gone (its admission sender dropped) or the server stops accepting.
fn spawn_sweeper(
    listener: String,
    mut admission: watch::Receiver<Arc<Admission>>,
    stop: CancellationToken,
) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(admit::SWEEP_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut current = admission.borrow_and_update().clone();
        let mut last = current.counters.snapshot();
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                changed = admission.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    current = admission.borrow_and_update().clone();
                    last = current.counters.snapshot();
                    continue;
                }
                () = stop.cancelled() => return,
            }
            current.sweep();
            let now = current.counters.snapshot();
            let delta = now.refused_since(&last);
            if delta.any_refused() {
                let tracked = current.tracked();
                tracing::warn!(
                    listener = %listener,
                    admitted = delta.admitted,
                    denied = delta.denied,
                    limit_concurrent = delta.limit_concurrent,
                    limit_rate = delta.limit_rate,
                    dry_run_concurrent = delta.dry_run_concurrent,
                    dry_run_rate = delta.dry_run_rate,
                    tracked_sources = tracked.concurrent_keys.max(tracked.rate_keys),
                    "admission refused connections"
                );
            }
            last = now;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bind_keys_round_trip_through_their_text_form() {
        for key in [
            BindKey::Config("127.0.0.1:0".parse().unwrap()),
            BindKey::Config("[::1]:443".parse().unwrap()),
            BindKey::Activated("0.0.0.0:443".parse().unwrap()),
        ] {
            assert_eq!(key.to_string().parse::<BindKey>(), Ok(key));
        }
        assert!("config".parse::<BindKey>().is_err());
        assert!("bound 127.0.0.1:1".parse::<BindKey>().is_err());
        assert!("config 127.0.0.1".parse::<BindKey>().is_err());
    }
}
