//! The server: starts every listener of the first snapshot, then carries
//! out the operator's intents: reload, drain, stop, and the hand-over of
//! its sockets to a new binary.
//!
//! Shutdown is passed in as a channel of [`Intent`]s and propagated through a
//! tree of cancellation tokens: `stop_accepting` (with one child per bound
//! socket, so a reload can close a single one) ends the accept loops,
//! `close_connections` (fired only once the drain budget is spent, or on
//! Stop) ends the connections still in setup and the QUIC flows, and
//! `registry::shut_down`, called right after it, the relaying ones. A `TaskTracker` lets a drain wait for connections
//! without polling. Every wait is bounded.
//!
//! Reload (SIGHUP): read and validate the file; on error keep everything
//! and count the failure. Otherwise bind the sockets the new file adds (any
//! failure rejects the whole reload, and the new sockets are closed again),
//! hand unchanged route identities their drain signals (`reload`), publish
//! each listener's new `Generation` (settings and routes, admission,
//! backends, pacing: one value, one swap, so no accept sees a mix of old
//! and new), close the sockets the file removed, stop the backend runtimes
//! no generation uses any more, and fire the drain signals of what changed.
//! Sockets of listeners that stay are never closed, so no connection is
//! refused. Keys read only at start ([`crate::config::effective::RESTART_KEYS`]:
//! threads, the pipe pool, the admin listener) keep their running value; a
//! reload whose file changes one logs a warning per key and `/config`
//! lists it under `pending_restart`.
//!
//! Hand-over: once the new binary is ready (it has sent READY=1 with its own
//! MAINPID), the old one drains without STOPPING=1, so systemd keeps the
//! unit running under the new main process.
//!
//! The reload itself: the file read on its own thread within
//! [`crate::config::CONFIG_READ_TIMEOUT`], checked, compared with the
//! running snapshot ([`crate::run::reload`]'s diff), and applied, or
//! refused with the running snapshot kept (docs/design.md, "Generations").
//!
//! Not here: binding and inherited sockets (`bind`), the listeners' accept
//! loops and generations ([`crate::run::listener_set`]), what a connection does ([`crate::tcp::connection`]),
//! the diff (`reload`), the handoff protocol (`takeover`), the admission
//! sweep ([`crate::admission`]), sd_notify ([`crate::run::notify`]).

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admin::{self, AdminState, Readiness};
use crate::backend::Backends;
use crate::config::file::FileConfig;
use crate::config::{self, Config, ConfigError, ReadTicket, effective};
use crate::flow::generation::{Generation, SharedPace};
use crate::flow::registry;
use crate::run::bind::{self, BindError, BindKey, Pool, Sockets};
use crate::run::descriptors;
use crate::run::listener_set::{Listeners, Shared};
use crate::run::notify::Notifier;
use crate::run::signals::Intent;

/// Why a relay drains after handing its sockets to a new binary.
const REPLACED: &str = "replaced by a new process";
use crate::{
    metrics,
    run::{reload, takeover},
    sockopt,
};

/// How long to wait for connection tasks to finish after they were told to close.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

#[allow(missing_docs)] // each variant's #[error] text documents it
#[derive(Debug, thiserror::Error)]
pub(crate) enum ServeError {
    #[error(transparent)]
    Bind(#[from] BindError),
    #[error("admin.listen: cannot listen on {addr}: {source}")]
    AdminBind { addr: String, source: io::Error },
}

/// Binds the admin socket: TCP (logged as `admin listening` with its
/// address), or a Unix socket created with mode 0660 (a stale socket file
/// left by a previous run is removed first; any other file is not).
/// A TCP socket handed over by the previous process (`inherited`) is
/// adopted instead of bound. Also returns a duplicate of the TCP socket
/// and its address, to hand over in turn.
fn admin_socket(
    listen: &config::AdminListen,
    inherited: Option<OwnedFd>,
) -> Result<(admin::AdminSocket, Option<(OwnedFd, SocketAddr)>), ServeError> {
    let failed = |source| ServeError::AdminBind {
        addr: listen.to_string(),
        source,
    };
    match listen {
        config::AdminListen::Tcp(addr) => {
            let socket = match inherited {
                Some(fd) => sockopt::adopt_listener(fd),
                None => sockopt::bind_listener_with(*addr, admin::ADMIN_BACKLOG, false),
            }
            .map_err(failed)?;
            let dup = socket.try_clone().map_err(failed)?;
            let socket = TcpListener::from_std(socket).map_err(failed)?;
            let local = socket.local_addr().unwrap_or(*addr);
            tracing::info!(addr = %local, "admin listening");
            Ok((admin::AdminSocket::Tcp(socket), Some((dup.into(), local))))
        }
        config::AdminListen::Unix(path) => {
            use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
            // A missing directory is made as systemd's RuntimeDirectory=
            // makes the packaged unit's (mode 0700: only the relay's user
            // and root reach the socket), so the same file runs outside it.
            if let Some(dir) = path.parent()
                && !dir.as_os_str().is_empty()
                && !dir.exists()
            {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
                    .map_err(failed)?;
                tracing::info!(dir = %dir.display(), "created the admin socket's directory");
            }
            if let Ok(meta) = std::fs::symlink_metadata(path)
                && meta.file_type().is_socket()
            {
                std::fs::remove_file(path).map_err(failed)?;
            }
            let socket = tokio::net::UnixListener::bind(path).map_err(failed)?;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
                .map_err(failed)?;
            tracing::info!(addr = %listen, "admin listening");
            Ok((admin::AdminSocket::Unix(socket), None))
        }
    }
}

/// Why a reload was rejected (the running snapshot stays).
#[allow(missing_docs)] // each variant's #[error] text documents it
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReloadError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Bind(#[from] BindError),
    #[error(transparent)]
    Source(#[from] crate::backend::egress::SourceError),
}

/// Everything `serve` needs besides the first snapshot.
#[derive(Debug)]
pub(crate) struct ServeOptions {
    /// Re-read on reload.
    pub config_path: PathBuf,
    /// Sockets passed by systemd (socket activation), by listener name.
    pub activated: Vec<sockopt::ActivatedFd>,
    /// Sockets handed over by the process this one replaces.
    pub takeover_from: Option<takeover::Incoming>,
    /// Where to offer this process's sockets to the next binary.
    pub takeover_path: Option<PathBuf>,
    /// Where readiness, reloads and stopping are reported (sd_notify).
    pub notifier: Notifier,
}

impl ServeOptions {
    /// Options for serving `config_path` with nothing inherited or handed over.
    pub(crate) fn new(config_path: PathBuf) -> ServeOptions {
        ServeOptions {
            config_path,
            activated: Vec::new(),
            takeover_from: None,
            takeover_path: None,
            notifier: Notifier::disabled(),
        }
    }
}

struct Server {
    config: Config,
    /// The configuration the process started with, as the file model: the
    /// values of the keys only a restart applies
    /// ([`crate::config::effective::RESTART_KEYS`]), and only their sections.
    started: FileConfig,
    listeners: Listeners,
    /// What every accept loop shares: permits, trackers, stop tokens.
    shared: Shared,
    config_path: PathBuf,
    notifier: Notifier,
    reloads_applied: u64,
    reloads_failed: u64,
    /// What `/readyz` says: true once serving, false from the drain on.
    readiness: Arc<Readiness>,
    /// The admin listener's state, to show a reloaded configuration.
    admin: Option<Arc<AdminState>>,
    /// Accept pacing (`global.max_connection_rate`), shared by every loop;
    /// published in each listener's generation.
    pace: Option<SharedPace>,
    /// Every backend's run-time state, rebuilt (carrying unchanged
    /// backends over) on reload; published in each listener's generation.
    backends: Arc<Backends>,
}

fn pace_for(config: &Config) -> Option<SharedPace> {
    let rate = config.global.max_connection_rate?;
    Some(Arc::new(crate::admission::pace::Pace::new(rate)))
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
pub(crate) async fn serve(
    config: Config,
    mut options: ServeOptions,
    mut intents: mpsc::Receiver<Intent>,
) -> Result<(), ServeError> {
    // The admin socket is not one of the relay's listeners: out of the
    // handoff before the pool sorts those.
    let admin_addr = match config.admin.as_ref().map(|a| &a.listen) {
        Some(config::AdminListen::Tcp(addr)) => Some(*addr),
        _ => None,
    };
    let inherited_admin = options
        .takeover_from
        .as_mut()
        .and_then(|incoming| incoming.take_admin(admin_addr));
    // So are QUIC listeners' UDP sockets and their forwarding channels.
    let (inherited_udp, inherited_channels) = match options.takeover_from.as_mut() {
        Some(incoming) => (
            incoming.take_keyed(takeover::UDP),
            incoming.take_keyed(takeover::UDP_FORWARD),
        ),
        None => (Vec::new(), Vec::new()),
    };
    let mut pool = Pool::inherit(
        std::mem::take(&mut options.activated),
        options.takeover_from.as_mut(),
    )?;
    let shared = Shared {
        permits: Arc::new(Semaphore::new(config.global.max_connections)),
        connections: TaskTracker::new(),
        accepting: TaskTracker::new(),
        stop_accepting: CancellationToken::new(),
        close_connections: CancellationToken::new(),
    };
    let backends = Arc::new(Backends::start(&config.backends, None));
    backends.serve_names(&config);
    let mut server = Server {
        listeners: Listeners::new(shared.clone()),
        shared,
        config_path: options.config_path.clone(),
        notifier: options.notifier,
        reloads_applied: 0,
        reloads_failed: 0,
        pace: pace_for(&config),
        backends,
        config: config.clone(),
        started: effective::restart_part(&config),
        readiness: Arc::new(Readiness::default()),
        admin: None,
    };

    // The admin listener comes up first, so /readyz answers 503 until the
    // relay listeners are bound. (A changed [admin] listen takes a restart;
    // its other keys follow each reload through AdminState::set_config.)
    let stop_admin = CancellationToken::new();
    let _stop_admin_on_return = stop_admin.clone().drop_guard();
    let mut admin_handover = None;
    if let Some(settings) = &config.admin {
        // Pushed local names (issue 17): the last set pushed is served from
        // the first connection on, until the next push. An unreadable file
        // is not fatal: names are then looked up until the next push.
        if let Some(path) = &settings.local_names_file {
            match crate::backend::local_names::load(path) {
                Ok((names, ignored)) => tracing::info!(
                    file = %path.display(),
                    local_names = names,
                    ignored,
                    "pushed local names loaded"
                ),
                Err(error) => tracing::warn!(
                    file = %path.display(),
                    %error,
                    "cannot read the pushed local names; none until the next push"
                ),
            }
        }
        let (socket, dup) = admin_socket(&settings.listen, inherited_admin)?;
        admin_handover = dup;
        let state = Arc::new(AdminState::new(
            Arc::new(config.clone()),
            server.readiness.clone(),
            server.backends.clone(),
        ));
        tokio::spawn(admin::serve(socket, state.clone(), stop_admin.clone()));
        server.admin = Some(state);
    }

    server
        .listeners
        .inherit_udp(inherited_udp, inherited_channels);
    // Open everything before accepting anywhere: a failure leaves nothing half-started.
    let mut opened = Vec::new();
    for listener in &config.listeners {
        // QUIC listeners bind their UDP sockets when they start, unless
        // systemd passed them some (`ListenDatagram=`).
        if listener.protocol == crate::config::Protocol::Quic {
            let udp = bind::take_activated_udp(&mut pool, listener)?;
            opened.push((listener.clone(), (Sockets::new(), !udp.is_empty()), udp));
            continue;
        }
        let sockets = bind::open_at_start(&mut pool, listener)?;
        opened.push((listener.clone(), sockets, Vec::new()));
    }
    for (listener, (sockets, activated), udp) in opened {
        let generation = Generation::first(listener, &server.backends, &server.pace);
        server
            .listeners
            .start(generation, sockets, activated, udp)?;
    }
    pool.close_unclaimed();
    server.listeners.close_unclaimed_udp();
    if let Some(admin) = &server.admin {
        admin.set_listeners(server.listeners.generations());
    }
    // Ready for /readyz before the `ready` line, so whoever waits for the
    // line finds the endpoint agreeing.
    server.readiness.set(true);
    log_trusted_names(&config);
    log_config_warnings(&config);
    descriptors::warn_if_short(&config);
    tracing::info!(
        listeners = config.listeners.len(),
        max_connections = config.global.max_connections,
        "ready"
    );
    // The server's own copy is the one reloads replace: kept here, this
    // first snapshot's listeners (every route's names) would stay alive
    // beside the running ones for the life of the process.
    drop(config);
    // What reading and checking the file allocated and freed goes back to
    // the system (see `reload` for why it is done by hand).
    sockopt::release_freed_memory();
    server.notifier.ready("serving");
    if let Some(incoming) = options.takeover_from.take() {
        match incoming.ready() {
            Ok(()) => tracing::info!("took over the listening sockets of the previous process"),
            Err(error) => tracing::warn!(%error, "could not tell the previous process to drain"),
        }
    }
    let takeover_listener = options.takeover_path.as_ref().and_then(|path| {
        takeover::offer(path)
            .inspect_err(|error| {
                tracing::warn!(path = %path.display(), %error, "cannot offer binary takeover");
            })
            .ok()
    });

    // Serve until told otherwise.
    let (handoff_tx, mut handoff_rx) = mpsc::channel::<bool>(1);
    let mut handoff_in_progress = false;
    // A reload reads the file off this loop (see `config::read_file`): the
    // read in flight, and whether another SIGHUP came in while it ran.
    let mut reading: Option<PendingRead> = None;
    let mut read_again = false;
    let why = loop {
        tokio::select! {
            intent = intents.recv() => match intent {
                Some(Intent::Reload) if reading.is_some() => read_again = true,
                Some(Intent::Reload) => reading = server.start_reload(),
                Some(Intent::Drain) | None => break "asked to stop",
                Some(Intent::Stop) => {
                    tracing::info!("stopping now");
                    server.shared.stop_accepting.cancel();
                    server.shared.close_connections.cancel();
                    registry::shut_down();
                    return Ok(());
                }
            },
            accepted = takeover::next_request(takeover_listener.as_ref()) => {
                let Ok(stream) = accepted else { continue };
                if handoff_in_progress {
                    tracing::warn!("another binary takeover is already in progress; refusing this one");
                    continue;
                }
                // Our ends of these stay with the QUIC sockets (used once
                // the new process is ready); theirs close here once sent.
                let channels = server.listeners.open_quic_channels();
                let mut sockets = server.listeners.for_handover();
                sockets.extend(channels.iter().map(|(l, k, fd)| (l.clone(), k.clone(), fd.as_fd())));
                if let Some((fd, addr)) = &admin_handover {
                    sockets.push((takeover::ADMIN.to_owned(), addr.to_string(), fd.as_fd()));
                }
                handoff_in_progress = takeover::hand_over(stream, &sockets, handoff_tx.clone());
                if !handoff_in_progress {
                    server.listeners.close_quic_channels();
                }
            }
            read = async { reading.as_mut().expect("guarded").finish().await }, if reading.is_some() => {
                reading = None;
                server.reload(read);
                // The file may have changed after that read began.
                if std::mem::take(&mut read_again) {
                    reading = server.start_reload();
                }
            }
            Some(ok) = handoff_rx.recv() => {
                handoff_in_progress = false;
                if ok {
                    // Before the drain starts: no new QUIC flow starts here now.
                    server.listeners.quic_channels_ready();
                    tracing::info!("the new process accepts on our sockets; draining");
                    break REPLACED;
                }
                server.listeners.close_quic_channels();
                tracing::warn!("binary takeover abandoned: the new process did not become ready; still serving");
            }
        }
    };
    drop(takeover_listener);
    if why == REPLACED {
        // The new process serves the admin socket now (same kernel socket).
        stop_admin.cancel();
        drop(admin_handover);
    }
    server.drain(why, intents).await;
    Ok(())
}

impl Server {
    /// Stops accepting, lets connections finish within `drain_timeout`,
    /// then closes the rest. A second Drain or a Stop cuts the wait short.
    async fn drain(mut self, why: &str, mut intents: mpsc::Receiver<Intent>) {
        let drain = self.config.global.drain_timeout;
        self.readiness.set(false);
        // A replaced process is no longer the service's main process: the
        // new one sent READY=1 with its own MAINPID, and under systemd
        // (NotifyAccess=all) a STOPPING=1 from us would stop the whole unit,
        // the new relay included.
        if why != REPLACED {
            self.notifier.stopping(why);
        }
        self.shared.stop_accepting.cancel();
        self.listeners.clear();
        let Shared {
            accepting,
            connections,
            close_connections,
            ..
        } = &self.shared;
        accepting.close();
        accepting.wait().await;
        connections.close();
        tracing::info!(connections = connections.len(), timeout = ?drain, reason = why, "draining");
        metrics::metrics().set_draining(connections.len() as i64);
        let deadline = tokio::time::sleep(drain);
        tokio::pin!(deadline);
        let finished = loop {
            tokio::select! {
                () = connections.wait() => break true,
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
                connections = connections.len(),
                "closing the connections still open"
            );
            close_connections.cancel();
            registry::shut_down();
            let _ = tokio::time::timeout(CLOSE_GRACE, connections.wait()).await;
        }
        tracing::info!("stopped");
    }
}

// The reload as the server carries it out.

impl Server {
    /// Starts reading the file for a reload; the outcome arrives through
    /// the returned read (or at once, when it cannot even start).
    fn start_reload(&mut self) -> Option<PendingRead> {
        self.notifier.reloading();
        let (tx, rx) = tokio::sync::oneshot::channel();
        match config::read_file(&self.config_path, move |read| {
            let _ = tx.send(read);
        }) {
            Ok(ticket) => Some(PendingRead {
                ticket: Some(ticket),
                result: rx,
                deadline: tokio::time::Instant::now() + config::CONFIG_READ_TIMEOUT,
                path: self.config_path.clone(),
            }),
            Err(error) => {
                self.reload(Err(error));
                None
            }
        }
    }

    /// Applies the outcome of a reload's read: a new configuration, or a
    /// logged and counted refusal that leaves everything as it was.
    fn reload(&mut self, read: Result<String, ConfigError>) {
        let loaded = read.and_then(|text| Config::from_toml(&text, &self.config_path));
        match loaded
            .map_err(ReloadError::from)
            .and_then(|new| self.try_reload(new))
        {
            Ok(applied) => {
                self.reloads_applied += 1;
                // Counted before the admin listener shows the new
                // generation: its page never shows a generation whose
                // reload is not yet counted.
                metrics::metrics().reload("ok");
                // Applied, except what was fixed at start: said on every
                // reload while the file and the process disagree.
                let pending = effective::pending_restart(
                    &self.started,
                    &effective::restart_part(&self.config),
                );
                // The admin listener serves the new configuration before
                // the line says it is applied: whoever waits for the line
                // (a script, a test) then finds it in force there too.
                if let Some(admin) = &self.admin {
                    admin.set_config(Arc::new(self.config.clone()), pending.clone());
                    admin.set_backends(self.backends.clone());
                    admin.set_listeners(self.listeners.generations());
                }
                let d = &applied.diff;
                tracing::info!(
                    listeners.added = %d.listeners_added.join(","),
                    listeners.removed = %d.listeners_removed.join(","),
                    binds.added = applied.binds_added,
                    binds.removed = applied.binds_removed,
                    routes.added = d.routes_added.count,
                    routes.removed = d.routes_removed.count,
                    routes.changed = d.routes_changed.count,
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
                log_trusted_names(&self.config);
                log_config_warnings(&self.config);
                descriptors::warn_if_short(&self.config);
                for p in &pending {
                    tracing::warn!(
                        key = p.key,
                        running = %p.running,
                        file = %p.file,
                        "needs a restart; the running value stays"
                    );
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
        // Everything the reload freed (the file's text and model, the
        // diff, the previous generation when no connection holds it, or
        // the refused configuration) goes back to the system now: left to
        // mimalloc, freed pages stay resident until its purge delay has
        // passed and some thread allocates again, so an idle relay kept
        // each reload's garbage (benches/README.md, "Names").
        sockopt::release_freed_memory();
    }

    fn try_reload(&mut self, mut new: Config) -> Result<Applied, ReloadError> {
        new.share_unchanged_names(&self.config);
        let diff = reload::diff(&self.config, &new);
        // A source address this host lacks refuses the reload, as at start.
        crate::backend::egress::probe(&new)?;

        // Bind everything new first; dropping `opened` on error closes it all.
        let mut opened: BTreeMap<String, Sockets> = BTreeMap::new();
        for listener in &new.listeners {
            for addr in self.listeners.unbound(listener) {
                let socket = bind::bind(listener, addr)?;
                opened
                    .entry(listener.name.clone())
                    .or_default()
                    .push((BindKey::Config(addr), socket));
            }
        }

        // Commit: nothing below can fail the reload. Every listener gets one
        // new generation holding the new backends and pacing; the old
        // backends' runtimes stop only once no listener publishes them.
        let backends = Arc::new(Backends::start(&new.backends, Some(&self.backends)));
        backends.serve_names(&new);
        let retired = std::mem::replace(&mut self.backends, backends);
        if new.global.max_connection_rate != self.config.global.max_connection_rate {
            self.pace = pace_for(&new);
        }
        let mut rebound = Vec::new();
        for listener in &new.listeners {
            let sockets = opened.remove(&listener.name).unwrap_or_default();
            rebound.push(
                self.listeners
                    .apply(listener, sockets, &self.backends, &self.pace),
            );
        }
        for name in &diff.listeners_removed {
            rebound.push(self.listeners.remove(name));
        }
        retired.retire(&self.backends);

        // Drain what the new generations do not carry on, once all of them
        // are published.
        let window = new.global.drain_timeout;
        let binds_added = rebound.iter().map(|r| r.added).sum();
        let binds_removed = rebound.iter().map(|r| r.removed).sum();
        let marked = rebound
            .iter()
            .flat_map(|r| &r.to_drain)
            .map(|signal| signal.fire(window))
            .sum();
        if marked > 0 {
            registry::drains_fired();
        }
        self.resize_permits(new.global.max_connections);
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
            self.shared.permits.add_permits(wanted - had);
        } else if wanted < had {
            let missing = (had - wanted) - self.shared.permits.forget_permits(had - wanted);
            if missing > 0 {
                // Take the rest back as connections end.
                let permits = self.shared.permits.clone();
                tokio::spawn(async move {
                    if let Ok(p) = permits.acquire_many_owned(missing as u32).await {
                        p.forget();
                    }
                });
            }
        }
    }
}

/// A reload's read of the configuration file, running on its own thread.
struct PendingRead {
    /// Taken when the read finishes or is given up on.
    ticket: Option<ReadTicket>,
    result: tokio::sync::oneshot::Receiver<Result<String, ConfigError>>,
    /// Set when the read starts, so polling again keeps the same bound.
    deadline: tokio::time::Instant,
    path: PathBuf,
}

impl PendingRead {
    /// The file's text, or why there is none: the read failed, or did not
    /// finish within [`config::CONFIG_READ_TIMEOUT`]. Cancel-safe: the
    /// server's loop polls it among other events.
    async fn finish(&mut self) -> Result<String, ConfigError> {
        let outcome = tokio::time::timeout_at(self.deadline, &mut self.result).await;
        let ticket = self.ticket.take();
        match outcome {
            Ok(Ok(read)) => read,
            // The reading thread cannot drop its sender without sending.
            Ok(Err(_)) | Err(_) => {
                if let Some(ticket) = ticket {
                    ticket.abandon();
                }
                Err(ConfigError::ReadTimeout {
                    path: self.path.clone(),
                })
            }
        }
    }
}

/// The route identities that changed, for the reload log line: at most
/// [`reload::ROUTES_LISTED`] named, then how many more.
fn summary(diff: &reload::Diff) -> String {
    let named = diff
        .routes_added
        .first
        .iter()
        .map(|r| format!("+{r}"))
        .chain(diff.routes_removed.first.iter().map(|r| format!("-{r}")))
        .chain(diff.routes_changed.first.iter().map(|r| format!("~{r}")))
        .take(reload::ROUTES_LISTED)
        .collect::<Vec<_>>();
    let all = diff.routes_added.count + diff.routes_removed.count + diff.routes_changed.count;
    let mut text = named.join(" ");
    if all > named.len() {
        text.push_str(&format!(" (+{} more)", all - named.len()));
    }
    text
}

/// Logs what each host name in a listener's `[listener.proxy_protocol]
/// trusted` resolved to when the configuration was loaded (at start and
/// at every reload): which addresses are trusted by name, until the next.
/// The configuration's warnings (`Config::warnings`, what `check` prints
/// on stderr), one WARN line each: at start and after each applied reload.
fn log_config_warnings(config: &Config) {
    for warning in &config.warnings {
        tracing::warn!(key = %warning.key, warning = %warning.message(), "configuration warning");
    }
}

fn log_trusted_names(config: &Config) {
    for listener in &config.listeners {
        let Some(inbound) = &listener.proxy_protocol else {
            continue;
        };
        for name in &inbound.trusted_names {
            let addresses: Vec<String> = name.addrs.iter().map(ToString::to_string).collect();
            tracing::info!(
                listener = %listener.name,
                name = %name.name,
                addresses = %addresses.join(","),
                "trusted host name resolved"
            );
        }
    }
}
