//! Latency ranking (`policy = "fastest"`).
//!
//! Not here yet: the measuring rounds (see the backend issue).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::BackendRuntime;

/// The current choice of a `fastest` backend.
#[derive(Debug, Default)]
pub struct Ranking {
    preferred: Mutex<Option<SocketAddr>>,
}

impl Ranking {
    /// The address connections should try first, if any is ranked.
    pub fn preferred(&self) -> Option<SocketAddr> {
        *self.preferred.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Measures `runtime`'s addresses until `cancel` fires.
pub async fn run(runtime: Arc<BackendRuntime>, cancel: CancellationToken) {
    let _ = runtime;
    cancel.cancelled().await;
}
