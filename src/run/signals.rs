//! Process signals, turned into an [`Intent`] read from a channel.
//!
//! SIGHUP → [`Intent::Reload`], SIGTERM → [`Intent::Drain`] (a second one
//! while draining means "now"), SIGINT → [`Intent::Stop`]. The server only
//! ever sees the channel, so tests and embedders can send intents without
//! signals.
//!
//! Not here: what an intent does ([`super::server`]).

use std::io;

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

/// What the operator asked the process to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Intent {
    /// Re-read the configuration file.
    Reload,
    /// Stop accepting, let connections finish within `drain_timeout`, exit.
    Drain,
    /// Exit now.
    Stop,
}

/// Installs the signal handlers and returns the channel they feed.
pub(crate) fn intents() -> io::Result<mpsc::Receiver<Intent>> {
    let mut hup = signal(SignalKind::hangup())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let (tx, rx) = mpsc::channel(8);
    tokio::spawn(async move {
        loop {
            let intent = tokio::select! {
                Some(()) = hup.recv() => Intent::Reload,
                Some(()) = term.recv() => Intent::Drain,
                Some(()) = int.recv() => Intent::Stop,
                else => return,
            };
            if tx.send(intent).await.is_err() {
                return;
            }
        }
    });
    Ok(rx)
}
