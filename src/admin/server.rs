//! The admin listener's accept loop and each connection's life, from
//! accept to close: hyper (HTTP/1.1) serves a connection's requests once
//! its first byte has arrived, answered by [`super::router`].
//!
//! **Admission: a health probe cannot be starved.** Connections are
//! accepted at once, always: no permit is taken before accept. A connection
//! that has sent nothing costs a socket, a task and a table slot, and no HTTP
//! state: hyper (and its read buffer) only takes over once a first byte
//! has arrived, and a connection silent for [`FIRST_BYTE_TIMEOUT`] is
//! closed. Each request, from its first byte until its response is
//! flushed, must finish within [`REQUEST_TIMEOUT`]; a keep-alive
//! connection idle between requests for
//! [`super::limits::KEEP_ALIVE_TIMEOUT`] is closed
//! ([`super::stream::Guarded`] holds those deadlines). At most
//! [`MAX_ADMIN_CONNECTIONS`] sockets are open at once; a new one past that
//! closes an older one (`evicted`, [`super::table`] picks which). The
//! newest connection is never the one dropped, so a probe gets its answer
//! however many connections an attacker holds; the attacker only churns
//! its own. Request heads are bounded ([`MAX_REQUEST_HEAD_BYTES`],
//! [`MAX_REQUEST_HEADERS`]). Every connection runs on its own task, and
//! nothing here is shared with the relay path but the runtime (and, for
//! control, the atomics of the backends' address state it writes). Each
//! close is counted in `snirelay_admin_connections_closed_total{reason}`
//! and logged at debug.
//!
//! Both kinds of socket (TCP and Unix) share the accept loop, the table
//! and its bounds.
//!
//! Not here: what a request is answered ([`super::router`]); the sockets
//! and their deadlines ([`super::stream`]); the table and its eviction
//! order ([`super::table`]).

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::io::AsyncReadExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::limits::{
    FIRST_BYTE_TIMEOUT, MAX_ADMIN_CONNECTIONS, MAX_REQUEST_HEAD_BYTES, MAX_REQUEST_HEADERS,
    REQUEST_TIMEOUT,
};
use super::peer::AdminPeer;
use super::router::respond;
use super::state::AdminState;
use super::stream::{AdminSocket, AdminStream, Guarded};
use super::table::{
    AdminClose, ConnectionLease, ConnectionSlot, ConnectionTable, IDLE, READING, RESPONDING,
};
use crate::metrics;

/// Serves admin requests on `socket` until `shutdown` fires.
pub(crate) async fn serve(
    socket: AdminSocket,
    state: Arc<AdminState>,
    shutdown: CancellationToken,
) {
    let table = Arc::new(ConnectionTable::new(MAX_ADMIN_CONNECTIONS));
    for close in AdminClose::ALL {
        metrics::metrics().admin_close_series(close.as_str());
    }
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
        let lease = ConnectionLease {
            table: table.clone(),
            id,
            peer: peer.clone(),
            close: AdminClose::Error,
        };
        let (state, shutdown, http) = (state.clone(), shutdown.clone(), http.clone());
        connections.spawn(async move {
            let mut lease = lease;
            lease.close = connection(stream, peer, &slot, state, &shutdown, &http).await;
        });
    }
    connections.close();
    let _ = tokio::time::timeout(Duration::from_secs(1), connections.wait()).await;
}

/// One admin connection, from accept to close.
async fn connection(
    stream: AdminStream,
    peer: Arc<AdminPeer>,
    slot: &Arc<ConnectionSlot>,
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
