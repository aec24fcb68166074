//! Connecting to a backend: its addresses in order, each attempt bounded by
//! the backend's `connect_timeout`.
//!
//! A refused or unreachable address costs almost nothing and the next is
//! tried at once; a black-holed one costs one `connect_timeout`. Each failed
//! attempt is logged at debug; the connection's outcome is logged once, by
//! the caller.
//!
//! Not here: choosing among addresses by health or policy (a later stage
//! will order them), or anything sent on the connection.

use std::io;
use std::net::SocketAddr;

use tokio::net::TcpStream;
use tokio::time::{Instant, timeout};

use crate::close::CloseReason;
use crate::config::Backend;
use crate::{metrics, sockopt};

/// An open connection to one of a backend's addresses.
#[derive(Debug)]
pub struct Connected {
    pub stream: TcpStream,
    pub addr: SocketAddr,
}

#[derive(Debug, thiserror::Error)]
#[error("none of {attempts} backend address(es) accepted a connection; last: {last}")]
pub struct ConnectError {
    pub attempts: usize,
    pub last: io::Error,
}

impl From<ConnectError> for CloseReason {
    fn from(_: ConnectError) -> Self {
        CloseReason::ConnectFailed
    }
}

/// Connects to the first address of `backend` that accepts.
pub async fn connect(backend: &Backend) -> Result<Connected, ConnectError> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "backend has no address");
    for &addr in &backend.addresses {
        let started = Instant::now();
        let attempt = timeout(backend.connect_timeout, TcpStream::connect(addr)).await;
        let outcome = match &attempt {
            Ok(Ok(_)) => Ok(started.elapsed()),
            _ => Err(()),
        };
        metrics::metrics().connect_attempt(&backend.name, outcome);
        let error = match attempt {
            Ok(Ok(stream)) => {
                let _ = sockopt::set_nodelay(&stream);
                return Ok(Connected { stream, addr });
            }
            Ok(Err(e)) => e,
            Err(_) => io::Error::new(io::ErrorKind::TimedOut, "connect timed out"),
        };
        tracing::debug!(backend = %backend.name, %addr, error = %error, "backend connect attempt failed");
        last = error;
    }
    Err(ConnectError {
        attempts: backend.addresses.len(),
        last,
    })
}
