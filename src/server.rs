//! The server: binds every listener of a snapshot, runs their accept loops,
//! and carries out the operator's intents (drain, stop).
//!
//! Shutdown is passed in as a channel of [`Intent`]s and propagated through a
//! tree of cancellation tokens: `stop_accepting` ends the accept loops,
//! `close_connections` (fired only once the drain budget is spent, or on
//! Stop) ends the relays. A `TaskTracker` lets a drain wait for connections
//! without polling. Every wait is bounded.
//!
//! Not here: what a connection does (see `conn`).

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::accept::AcceptLoop;
use crate::config::Config;
use crate::signals::Intent;
use crate::sockopt;

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
}

/// Binds every listener in `config` and serves until a drain or stop
/// completes. Logs `listening` once per bound address, then `ready`.
pub async fn serve(config: Config, mut intents: mpsc::Receiver<Intent>) -> Result<(), ServeError> {
    let permits = Arc::new(Semaphore::new(config.global.max_connections));
    let tracker = TaskTracker::new();
    let stop_accepting = CancellationToken::new();
    let close_connections = CancellationToken::new();

    let mut loops = Vec::new();
    let mut senders = Vec::new();
    for listener in &config.listeners {
        let (tx, rx) = watch::channel(listener.clone());
        senders.push(tx);
        for &addr in &listener.listen {
            let socket = sockopt::bind_listener(addr, listener.backlog)
                .and_then(TcpListener::from_std)
                .map_err(|source| ServeError::Bind {
                    listener: listener.name.clone(),
                    addr,
                    source,
                })?;
            let local = socket.local_addr().unwrap_or(addr);
            tracing::info!(listener = %listener.name, addr = %local, "listening");
            loops.push(AcceptLoop {
                socket,
                config: rx.clone(),
                permits: permits.clone(),
                tracker: tracker.clone(),
                stop_accepting: stop_accepting.clone(),
                close_connections: close_connections.clone(),
            });
        }
    }
    let accepting = TaskTracker::new();
    for accept_loop in loops {
        accepting.spawn(accept_loop.run());
    }
    accepting.close();
    tracing::info!(
        listeners = config.listeners.len(),
        max_connections = config.global.max_connections,
        "ready"
    );

    // Serve until told otherwise.
    loop {
        match intents.recv().await {
            Some(Intent::Reload) => {
                tracing::warn!(
                    "reload requested, but live reload is not available yet; restart to apply changes"
                );
            }
            Some(Intent::Drain) | None => break,
            Some(Intent::Stop) => {
                tracing::info!("stopping now");
                stop_accepting.cancel();
                close_connections.cancel();
                return Ok(());
            }
        }
    }

    // Drain: no new connections; existing ones get `drain_timeout`.
    let drain = config.global.drain_timeout;
    stop_accepting.cancel();
    tracker.close();
    accepting.wait().await;
    tracing::info!(connections = tracker.len(), timeout = ?drain, "draining");
    let finished = tokio::select! {
        () = tracker.wait() => true,
        () = tokio::time::sleep(drain) => false,
        intent = intents.recv() => {
            tracing::info!(?intent, "stopping now");
            false
        }
    };
    if !finished {
        close_connections.cancel();
        let _ = tokio::time::timeout(CLOSE_GRACE, tracker.wait()).await;
    }
    drop(senders);
    tracing::info!("stopped");
    Ok(())
}
