//! The admin listener (`[admin] listen`): `GET /metrics`, `/healthz`,
//! `/readyz` and, when `[admin] expose_config = true`, `/config`, plus the
//! control endpoints (below), served with hyper (HTTP/1.1), on TCP or a
//! Unix socket.
//!
//! - `/metrics`: the Prometheus/OpenMetrics text of `crate::metrics`.
//! - `/healthz`: 200 while the process runs its event loop.
//! - `/readyz`: 200 once the listeners are bound and the configuration is
//!   loaded, 503 before that and while draining. The flag is a
//!   [`Readiness`] that the server (or anything else) flips. With `[admin]
//!   ready_requires`, also 503 while a listed backend has no usable
//!   address, with a JSON body naming it (`ready`).
//! - `/config`: the effective configuration as JSON, in the shape of the
//!   TOML file with every key filled in ([`Config::to_file`], the one
//!   source: it cannot leave a key out), plus `pending_restart`: the keys
//!   a reload changed that only a restart applies. 404 unless
//!   `expose_config` is set, so whoever may scrape `/metrics` does not also
//!   read every route and backend.
//! - `/`: the status page (`status`), HTML for people, rendered on
//!   request from the metrics, the configuration and the backends' state.
//!
//! Loopback only unless `admin.allow_public = true` (enforced in config).
//! Only GET and HEAD, but for control endpoints.
//!
//! **Any other path** is 404, or, with `[admin] forward_unmatched_to`,
//! forwarded to that upstream and its answer streamed back (`forward`:
//! Gerbil's API behind the base address Pangolin posts to). The paths
//! above and the control endpoints are never forwarded.
//!
//! **Admission: a health probe cannot be starved.** Connections are
//! accepted at once, always: no permit is taken before accept. A connection
//! that has sent nothing costs a socket, a task and a table slot, and no HTTP
//! state: hyper (and its read buffer) only takes over once a first byte
//! has arrived, and a connection silent for [`FIRST_BYTE_TIMEOUT`] is
//! closed. Each request, from its first byte until its response is
//! flushed, must finish within [`REQUEST_TIMEOUT`]; a keep-alive
//! connection idle between requests for [`KEEP_ALIVE_TIMEOUT`] is closed.
//! At most [`MAX_ADMIN_CONNECTIONS`] sockets are open at once; a new one
//! past that closes an older one (`evicted`), chosen in this order: the
//! oldest that has sent nothing, else the oldest idle keep-alive, else the
//! oldest mid-request. The newest connection is never the one dropped, so a
//! probe gets its answer however many connections an attacker holds; the
//! attacker only churns its own. Request heads are bounded
//! (`MAX_REQUEST_HEAD_BYTES`, `MAX_REQUEST_HEADERS`). Every connection
//! runs on its own task, and nothing here is shared with the relay path but
//! the runtime (and, for control, the atomics of the backends' address
//! state it writes). Each close is counted in
//! `snirelay_admin_connections_closed_total{reason}` and logged at debug.
//!
//! **Control** (issue 16; `control`): `GET /backends` and `POST
//! /backends/{backend}/addresses/{addr}/state` change what the relay does
//! at run time. They are refused unless the caller is known (`auth`): on
//! a Unix socket (`listen = "unix:/path"`, mode 0660: whoever may open it
//! may control) every caller is, named by its peer credentials; on TCP only
//! with a bearer token from `[admin] token_file` (401 without a good one,
//! 403 when no token file is configured; a push of local names without a
//! token from a source in `[admin] push_unauthenticated_from` is let in).
//! The read-only endpoints stay open on either. A control request's body
//! is bounded (`control::MAX_BODY_BYTES`;
//! `control::MAX_LOCAL_NAMES_BODY_BYTES` for the pushed local names; 413
//! past it) and read within the same [`REQUEST_TIMEOUT`]. Adding a control endpoint is one entry in
//! `control::route`.
//!
//! Both kinds of socket share the accept loop, the table and its bounds.
//!
//! Not here: the metrics themselves; what a state means for the relay
//! ([`crate::backend::plan`], [`crate::backend::AddressState`]).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::backend::Backends;
use crate::config::Config;
use crate::config::effective::PendingRestart;
use crate::flow::generation::Generation;
use crate::metrics;

pub(crate) mod auth;
pub(crate) mod control;
pub(crate) mod forward;
pub(crate) mod ready;
pub(crate) mod sources;
pub(crate) mod status;

use forward::AdminBody;

/// Admin sockets open at once. Past it, a new connection closes an older
/// one (see the module header) rather than waiting: accept never blocks.
/// Memory at the cap: a silent connection is a descriptor, its task (about
/// 1 KiB, hyper's connection state included) and a slot of a few hundred
/// bytes; one that has sent a byte adds hyper's read buffer (at most
/// `MAX_REQUEST_HEAD_BYTES`) and its response, so about 10 MiB for a full
/// table at worst. Cost: picking whom to evict scans the table (at most
/// this many entries, under one lock), only when it is full.
pub const MAX_ADMIN_CONNECTIONS: usize = 1024;
/// The admin socket's kernel queue of connections not yet accepted. The
/// accept loop empties it at once; it fills only while the process is not
/// scheduled, and then a probe's SYN dropped from a short queue (std's
/// 128) costs the probe a one-second retransmit. Cost: kernel memory for
/// pending connections only.
pub(crate) const ADMIN_BACKLOG: u32 = 1024;
/// A connection must send its first byte within this long, or it is closed
/// (`silent`). It holds no HTTP state meanwhile, and is the first evicted.
pub const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(1);
/// From a request's first byte until its response is flushed: a request
/// trickled in (or a response read) more slowly than this is closed
/// (`request_timeout`). Loopback scrapers and probes need milliseconds.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// A keep-alive connection that sends no new request for this long is
/// closed (`idle_timeout`). Scrapers that keep connections open between
/// scrapes (Prometheus, every 15 s by default) simply reconnect.
pub const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest request line plus headers (hyper's `max_buf_size`, and its
/// minimum): the read buffer a connection may hold. Larger heads get 431.
pub(crate) const MAX_REQUEST_HEAD_BYTES: usize = 8 * 1024;
/// Headers per request; more get 431. Parsed into a heap array of this
/// many entries per request.
pub(crate) const MAX_REQUEST_HEADERS: usize = 32;

/// Whether the relay should receive new connections: what `/readyz` says.
/// Starts not ready.
#[derive(Debug, Default)]
pub struct Readiness(AtomicBool);

impl Readiness {
    pub(crate) fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Release);
    }

    pub(crate) fn is_ready(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// What the admin endpoints read.
pub struct AdminState {
    pub(crate) readiness: Arc<Readiness>,
    /// The configuration in force, and the keys of it that wait for a restart.
    config: Mutex<(Arc<Config>, Arc<[PendingRestart]>)>,
    // Run-time control (issue 16).
    /// The backends' run-time state of the current generation.
    backends: Mutex<Arc<Backends>>,
    // The status page (issue 16).
    /// The configuration's generation (1 at start, one more per applied
    /// reload) and when it was loaded.
    loaded: Mutex<(u64, SystemTime)>,
    /// The page's connection rates: the counters of its last sample.
    rates: status::Rates,
    /// Each listener's published generation, by name: `/sources` reads
    /// the admission state in force from it.
    listeners: Mutex<Vec<(String, watch::Receiver<Arc<Generation>>)>>,
}

impl AdminState {
    /// Also applies the configuration's `[admin] address_labels` to the
    /// metrics.
    pub fn new(
        config: Arc<Config>,
        readiness: Arc<Readiness>,
        backends: Arc<Backends>,
    ) -> AdminState {
        apply_metrics_settings(&config);
        AdminState {
            readiness,
            config: Mutex::new((config, Arc::new([]))),
            backends: Mutex::new(backends),
            loaded: Mutex::new((1, SystemTime::now())),
            rates: status::Rates::default(),
            listeners: Mutex::default(),
        }
    }

    /// The listeners running now (after start and after each reload),
    /// each by the receiver of its generations.
    pub(crate) fn set_listeners(&self, listeners: Vec<(String, watch::Receiver<Arc<Generation>>)>) {
        *self.listeners.lock().unwrap_or_else(|e| e.into_inner()) = listeners;
    }

    /// Each listener's generation in force (its admission state and its
    /// routes' gates), by listener name.
    pub(crate) fn generations(&self) -> Vec<(String, Arc<Generation>)> {
        self.listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(name, generation)| (name.clone(), generation.borrow().clone()))
            .collect()
    }

    /// The backends a reload published: control acts on these from now.
    pub(crate) fn set_backends(&self, backends: Arc<Backends>) {
        *self.backends.lock().unwrap_or_else(|e| e.into_inner()) = backends;
    }

    fn backends(&self) -> Arc<Backends> {
        self.backends
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Replaces the configuration `/config` shows (after a reload) and the
    /// keys of it that wait for a restart, and applies its `expose_config`
    /// and `address_labels` from now on. Counts a new generation, loaded now.
    pub(crate) fn set_config(&self, config: Arc<Config>, pending: Vec<PendingRestart>) {
        apply_metrics_settings(&config);
        *self.config.lock().unwrap_or_else(|e| e.into_inner()) = (config, pending.into());
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        *loaded = (loaded.0 + 1, SystemTime::now());
    }

    /// The configuration's generation and when it was loaded.
    pub(crate) fn loaded(&self) -> (u64, SystemTime) {
        *self.loaded.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn config(&self) -> (Arc<Config>, Arc<[PendingRestart]>) {
        self.config
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// What `/readyz` says now: listening, and `[admin] ready_requires`
    /// judged against the backends in force (`ready`).
    pub(crate) fn ready(&self) -> ready::ReadyVerdict {
        let (config, _) = self.config();
        ready::judge(self.readiness.is_ready(), &config, &self.backends())
    }

    /// `[admin] forward_unmatched_to` in force.
    fn forward_unmatched_to(&self) -> Option<crate::config::ForwardTo> {
        self.config
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .admin
            .as_ref()
            .and_then(|a| a.forward_unmatched_to.clone())
    }

    fn expose_config(&self) -> bool {
        self.config
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .admin
            .as_ref()
            .is_some_and(|a| a.expose_config)
    }
}

fn apply_metrics_settings(config: &Config) {
    if let Some(admin) = &config.admin {
        metrics::metrics().set_address_labels(admin.address_labels);
    }
}

/// Why an admin connection ended: the `reason` of
/// `snirelay_admin_connections_closed_total` and the `close` log field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AdminClose {
    /// The client closed, or asked to (`Connection: close`).
    Done,
    /// Nothing within [`FIRST_BYTE_TIMEOUT`].
    Silent,
    /// A request not finished within [`REQUEST_TIMEOUT`].
    RequestTimeout,
    /// No new request within [`KEEP_ALIVE_TIMEOUT`].
    IdleTimeout,
    /// Closed to make room for a newer connection.
    Evicted,
    /// Malformed or oversized request, or a socket error.
    Error,
    /// The relay is stopping.
    Shutdown,
}

impl AdminClose {
    fn as_str(self) -> &'static str {
        match self {
            AdminClose::Done => "done",
            AdminClose::Silent => "silent",
            AdminClose::RequestTimeout => "request_timeout",
            AdminClose::IdleTimeout => "idle_timeout",
            AdminClose::Evicted => "evicted",
            AdminClose::Error => "error",
            AdminClose::Shutdown => "shutdown",
        }
    }
}

// Where a connection is, as the eviction order sees it.
const SILENT: u8 = 0;
const IDLE: u8 = 1;
const READING: u8 = 2;
const RESPONDING: u8 = 3;

/// One open admin connection, as the table and its task share it.
#[derive(Debug, Default)]
struct Slot {
    /// [`SILENT`], [`READING`], [`RESPONDING`] or [`IDLE`].
    state: AtomicU8,
    /// Fired when the table evicts this connection.
    evicted: CancellationToken,
    /// 0, or 1 + the state the connection was in when a phase deadline
    /// first passed (which deadline closed it: a request's or keep-alive's).
    timed_out: AtomicU8,
    /// The current phase's deadline, as [`Guarded`] enforces it: a
    /// forwarded request must be answered before it.
    deadline: Mutex<Option<Instant>>,
}

impl Slot {
    fn state(&self) -> u8 {
        self.state.load(Ordering::Relaxed)
    }

    fn set(&self, state: u8) {
        self.state.store(state, Ordering::Relaxed);
    }

    fn deadline(&self) -> Option<Instant> {
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_deadline(&self, deadline: Instant) {
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner()) = Some(deadline);
    }

    /// Eviction order: lower goes first.
    fn rank(&self) -> usize {
        match self.state() {
            SILENT => 0,
            IDLE => 1,
            _ => 2,
        }
    }
}

/// The open admin connections by age (ids only grow), at most `cap`.
struct Table {
    cap: usize,
    inner: Mutex<TableInner>,
}

#[derive(Default)]
struct TableInner {
    next: u64,
    open: BTreeMap<u64, Arc<Slot>>,
}

impl Table {
    fn new(cap: usize) -> Table {
        Table {
            cap,
            inner: Mutex::default(),
        }
    }

    /// Enters a new connection, evicting an older one first if the table
    /// is full. Never refuses.
    fn enter(&self) -> (u64, Arc<Slot>) {
        let mut t = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        while t.open.len() >= self.cap {
            // The oldest of the lowest rank: BTreeMap iterates by age.
            let mut first = [None; 3];
            for (id, slot) in &t.open {
                let rank = slot.rank();
                if first[rank].is_none() {
                    first[rank] = Some(*id);
                    if rank == 0 {
                        break;
                    }
                }
            }
            let Some(victim) = first.into_iter().flatten().next() else {
                break;
            };
            if let Some(slot) = t.open.remove(&victim) {
                slot.evicted.cancel();
            }
        }
        let id = t.next;
        t.next += 1;
        let slot = Arc::new(Slot::default());
        t.open.insert(id, slot.clone());
        (id, slot)
    }

    fn leave(&self, id: u64) {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .open
            .remove(&id);
    }
}

/// A connection's place in the table, given back (and its close counted,
/// then logged) when its task ends, however it ends.
struct Entry {
    table: Arc<Table>,
    id: u64,
    peer: Arc<Peer>,
    close: AdminClose,
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.table.leave(self.id);
        let close = self.close.as_str();
        metrics::metrics().admin_closed(close);
        tracing::debug!(admin.peer = %self.peer, close, "admin connection closed");
    }
}

/// Who is on the other end of an admin connection.
#[derive(Debug, Clone)]
pub enum Peer {
    /// A TCP peer's address and port.
    Tcp(SocketAddr),
    /// SO_PEERCRED of a Unix socket peer (`None`s when unavailable).
    Unix {
        /// The peer process's user id.
        uid: Option<u32>,
        /// The peer process's id.
        pid: Option<i32>,
    },
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Peer::Tcp(addr) => write!(f, "{addr}"),
            Peer::Unix { uid, pid } => {
                let show = |v: Option<String>| v.unwrap_or_else(|| "?".to_owned());
                write!(
                    f,
                    "uid={},pid={}",
                    show(uid.map(|u| u.to_string())),
                    show(pid.map(|p| p.to_string()))
                )
            }
        }
    }
}

/// The admin listening socket: TCP or Unix.
pub enum AdminSocket {
    /// A TCP listener (`listen = "IP:port"`).
    Tcp(TcpListener),
    /// A Unix stream socket (`listen = "unix:/path"`).
    Unix(UnixListener),
}

impl AdminSocket {
    async fn accept(&self) -> io::Result<(AdminStream, Peer)> {
        match self {
            AdminSocket::Tcp(l) => {
                let (s, peer) = l.accept().await?;
                Ok((AdminStream::Tcp(s), Peer::Tcp(peer)))
            }
            AdminSocket::Unix(l) => {
                let (s, _) = l.accept().await?;
                let cred = s.peer_cred().ok();
                let peer = Peer::Unix {
                    uid: cred.map(|c| c.uid()),
                    pid: cred.and_then(|c| c.pid()),
                };
                Ok((AdminStream::Unix(s), peer))
            }
        }
    }
}

/// An accepted admin connection.
enum AdminStream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// Serves admin requests on `socket` until `shutdown` fires.
pub(crate) async fn serve(
    socket: AdminSocket,
    state: Arc<AdminState>,
    shutdown: CancellationToken,
) {
    let table = Arc::new(Table::new(MAX_ADMIN_CONNECTIONS));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.max_buf_size(MAX_REQUEST_HEAD_BYTES)
        .max_headers(MAX_REQUEST_HEADERS)
        // Our own deadlines (`Guarded`) bound every phase, idle included.
        .header_read_timeout(None);
    let http = Arc::new(http);
    let connections = TaskTracker::new();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = socket.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::debug!(%error, "admin accept failed");
                    // Resource exhaustion must not spin this loop.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        let peer = Arc::new(peer);
        let (id, slot) = table.enter();
        metrics::metrics().admin_opened();
        let entry = Entry {
            table: table.clone(),
            id,
            peer: peer.clone(),
            close: AdminClose::Error,
        };
        let (state, shutdown, http) = (state.clone(), shutdown.clone(), http.clone());
        connections.spawn(async move {
            let mut entry = entry;
            entry.close = connection(stream, peer, &slot, state, &shutdown, &http).await;
        });
    }
    connections.close();
    let _ = tokio::time::timeout(Duration::from_secs(1), connections.wait()).await;
}

/// One admin connection, from accept to close.
async fn connection(
    stream: AdminStream,
    peer: Arc<Peer>,
    slot: &Arc<Slot>,
    state: Arc<AdminState>,
    shutdown: &CancellationToken,
    http: &hyper::server::conn::http1::Builder,
) -> AdminClose {
    // No HTTP state (no buffer) until the client has sent something. A
    // peek, not `readable()`: readiness may be reported before any byte.
    // (A Unix stream cannot peek: its first byte is read and replayed.)
    let mut first = [0u8; 1];
    let mut stream = stream;
    let waited = async {
        match &mut stream {
            AdminStream::Tcp(s) => s.peek(&mut first).await.map(|n| (n, false)),
            AdminStream::Unix(s) => s.read(&mut first).await.map(|n| (n, true)),
        }
    };
    let replay = tokio::select! {
        () = shutdown.cancelled() => return AdminClose::Shutdown,
        () = slot.evicted.cancelled() => return AdminClose::Evicted,
        () = tokio::time::sleep(FIRST_BYTE_TIMEOUT) => return AdminClose::Silent,
        peeked = waited => match peeked {
            Ok((0, _)) => return AdminClose::Done,
            Ok((_, read)) => read.then_some(first[0]),
            Err(_) => return AdminClose::Error,
        },
    };
    slot.set(READING);
    let deadline = Instant::now() + REQUEST_TIMEOUT;
    slot.set_deadline(deadline);
    let io = Guarded {
        stream,
        replay,
        slot: slot.clone(),
        deadline: Box::pin(tokio::time::sleep_until(deadline)),
        wrote: false,
    };
    let service_slot = slot.clone();
    let service = hyper::service::service_fn(move |req| {
        service_slot.set(RESPONDING);
        let state = state.clone();
        let peer = peer.clone();
        let deadline = service_slot
            .deadline()
            .unwrap_or_else(|| Instant::now() + REQUEST_TIMEOUT);
        async move { Ok::<_, Infallible>(respond(req, &state, &peer, deadline).await) }
    });
    let conn = http.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            // Checked first: hyper ends an idle connection whose read failed
            // without an error.
            match slot.timed_out.load(Ordering::Relaxed) {
                t if t == IDLE + 1 => AdminClose::IdleTimeout,
                1.. => AdminClose::RequestTimeout,
                0 => match result {
                    Ok(()) => AdminClose::Done,
                    Err(error) => {
                        tracing::trace!(%error, "admin connection failed");
                        AdminClose::Error
                    }
                },
            }
        }
        () = shutdown.cancelled() => AdminClose::Shutdown,
        () = slot.evicted.cancelled() => AdminClose::Evicted,
    }
}

/// The socket as hyper sees it, with the deadline of the connection's
/// current phase: a read or write that would wait past it fails with
/// `TimedOut`. The phase moves with the traffic: bytes read on an idle
/// connection start a request ([`REQUEST_TIMEOUT`]); a flush after the
/// response was written makes it idle ([`KEEP_ALIVE_TIMEOUT`]).
struct Guarded {
    stream: AdminStream,
    /// The first byte of a Unix stream, read before hyper took over.
    replay: Option<u8>,
    slot: Arc<Slot>,
    deadline: Pin<Box<Sleep>>,
    /// Response bytes written since the service answered.
    wrote: bool,
}

impl Guarded {
    /// Polls the deadline (registering the waker while waiting on the
    /// socket); past it, the error that ends the connection.
    fn check_deadline(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        self.deadline.as_mut().poll(cx).is_ready().then(|| {
            let _ = self.slot.timed_out.compare_exchange(
                0,
                self.slot.state() + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            io::Error::new(io::ErrorKind::TimedOut, "admin connection deadline")
        })
    }

    fn restart(&mut self, state: u8, within: Duration) {
        self.slot.set(state);
        let deadline = Instant::now() + within;
        self.slot.set_deadline(deadline);
        self.deadline.as_mut().reset(deadline);
    }
}

impl AsyncRead for Guarded {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(byte) = this.replay.take() {
            buf.put_slice(&[byte]);
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        match this.stream.pin().poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before && this.slot.state() == IDLE {
                    this.restart(READING, REQUEST_TIMEOUT);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => match this.check_deadline(cx) {
                Some(error) => Poll::Ready(Err(error)),
                None => Poll::Pending,
            },
            other => other,
        }
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match this.stream.pin().poll_write(cx, buf) {
            Poll::Ready(Ok(n)) => {
                this.wrote |= n > 0;
                Poll::Ready(Ok(n))
            }
            Poll::Pending => match this.check_deadline(cx) {
                Some(error) => Poll::Ready(Err(error)),
                None => Poll::Pending,
            },
            other => other,
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let flushed = this.stream.pin().poll_flush(cx);
        if matches!(flushed, Poll::Ready(Ok(()))) && this.wrote && this.slot.state() == RESPONDING {
            this.wrote = false;
            this.restart(IDLE, KEEP_ALIVE_TIMEOUT);
        }
        flushed
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().stream.pin().poll_shutdown(cx)
    }
}

/// Either stream, as one `AsyncRead + AsyncWrite`.
enum Pinned<'a> {
    Tcp(Pin<&'a mut TcpStream>),
    Unix(Pin<&'a mut UnixStream>),
}

impl AdminStream {
    fn pin(&mut self) -> Pinned<'_> {
        match self {
            AdminStream::Tcp(s) => Pinned::Tcp(Pin::new(s)),
            AdminStream::Unix(s) => Pinned::Unix(Pin::new(s)),
        }
    }
}

impl Pinned<'_> {
    fn poll_read(self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self {
            Pinned::Tcp(s) => s.poll_read(cx, buf),
            Pinned::Unix(s) => s.poll_read(cx, buf),
        }
    }

    fn poll_write(self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self {
            Pinned::Tcp(s) => s.poll_write(cx, buf),
            Pinned::Unix(s) => s.poll_write(cx, buf),
        }
    }

    fn poll_flush(self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Pinned::Tcp(s) => s.poll_flush(cx),
            Pinned::Unix(s) => s.poll_flush(cx),
        }
    }

    fn poll_shutdown(self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Pinned::Tcp(s) => s.poll_shutdown(cx),
            Pinned::Unix(s) => s.poll_shutdown(cx),
        }
    }
}

/// Answers `req`; `deadline` is when the connection's deadline for it
/// passes.
async fn respond(
    req: Request<Incoming>,
    state: &AdminState,
    peer: &Peer,
    deadline: Instant,
) -> Response<AdminBody> {
    let path = req.uri().path();
    if control::is_control(path) {
        return control::respond(req, state, peer).await.map(Either::Left);
    }
    if !serves(path, state)
        && let Some(to) = state.forward_unmatched_to()
    {
        return forward::forward(req, &to, peer, deadline).await;
    }
    read_only(req, state).map(Either::Left)
}

/// Whether the admin listener serves `path` itself (but for the control
/// endpoints): these are never forwarded.
fn serves(path: &str, state: &AdminState) -> bool {
    match path {
        "/metrics" | "/" | "/healthz" | "/readyz" => true,
        "/config" => state.expose_config(),
        _ => false,
    }
}

/// The read-only endpoints, and 404 for any other path.
fn read_only(req: Request<Incoming>, state: &AdminState) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
        response
            .headers_mut()
            .insert(hyper::header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    let mut response = match req.uri().path() {
        "/metrics" => {
            let mut response = text(StatusCode::OK, metrics::metrics().render());
            response.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            );
            response
        }
        // The status page: read-only, open like /metrics (it shows no more
        // than /metrics and /backends do, addresses hidden the same way).
        "/" => {
            let mut response = text(StatusCode::OK, status::render(state));
            let headers = response.headers_mut();
            headers.insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            );
            headers.insert(
                hyper::header::CACHE_CONTROL,
                HeaderValue::from_static("no-store"),
            );
            response
        }
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/readyz" => readyz(state),
        // Not served unless configured: the routes and backends are not for
        // whoever may scrape /metrics. Answered like any unknown path.
        "/config" if state.expose_config() => {
            let (config, pending) = state.config();
            let body = serde_json::to_string_pretty(&config_view(&config, &pending))
                .expect("a JSON value always serializes");
            let mut response = text(StatusCode::OK, body + "\n");
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            response
        }
        _ => text(
            StatusCode::NOT_FOUND,
            "not found; try /, /metrics, /healthz, /readyz, /backends\n",
        ),
    };
    if req.method() == Method::HEAD {
        *response.body_mut() = Full::new(Bytes::new());
    }
    response
}

/// `/readyz`: plain text (`ready`, `not ready`) without `[admin]
/// ready_requires`, as before; with it, JSON naming what is down
/// (`ready::ReadyVerdict::to_json`), 200 or 503 alike.
fn readyz(state: &AdminState) -> Response<Full<Bytes>> {
    let verdict = state.ready();
    let status = if verdict.ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let (config, _) = state.config();
    let requires = config
        .admin
        .as_ref()
        .map_or(&[][..], |a| &a.ready_requires[..]);
    if requires.is_empty() {
        return text(
            status,
            if verdict.ready() {
                "ready\n"
            } else {
                "not ready\n"
            },
        );
    }
    let body = serde_json::to_string_pretty(&verdict.to_json(requires))
        .expect("a JSON value always serializes");
    let mut response = text(status, body + "\n");
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

pub(crate) fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// The body of `/config`: the effective configuration
/// ([`Config::to_file`]: every key with its value in force, in the shape of
/// the TOML file), plus `pending_restart`, the keys whose new value waits
/// for a restart (see [`crate::config::effective::pending_restart`]).
pub(crate) fn config_view(config: &Config, pending: &[PendingRestart]) -> Value {
    let mut view = serde_json::to_value(config.to_file()).unwrap_or_else(|_| json!({}));
    if let Value::Object(map) = &mut view {
        map.insert("pending_restart".to_owned(), json!(pending));
    }
    view
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_evicts_silent_then_idle_then_active_oldest_first() {
        let table = Table::new(4);
        let mut slots: Vec<Arc<Slot>> = (0..4).map(|_| table.enter().1).collect();
        slots[0].set(RESPONDING);
        slots[1].set(IDLE);
        slots[2].set(READING);
        // slots[3] is silent.
        let mut enter = |state: u8| {
            let (_, slot) = table.enter();
            slot.set(state);
            slots.push(slot);
            (0..slots.len())
                .filter(|&i| slots[i].evicted.is_cancelled())
                .collect::<Vec<_>>()
        };
        assert_eq!(enter(READING), [3], "the silent one goes first");
        assert_eq!(enter(IDLE), [1, 3], "then the oldest idle one");
        assert_eq!(
            enter(READING),
            [1, 3, 5],
            "a young idle one before any active"
        );
        assert_eq!(enter(SILENT), [0, 1, 3, 5], "then the oldest active one");
        // A connection that ended makes room without evicting.
        table.leave(2);
        assert_eq!(enter(SILENT), [0, 1, 3, 5]);
    }
}
