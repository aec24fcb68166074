//! Active health checks (`[backend.*.health]`): a TCP connect to every
//! address each `interval`.
//!
//! Not here yet: the checker (see the backend issue).

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::BackendRuntime;
use crate::config::HealthCheck;

/// Checks `runtime`'s addresses until `cancel` fires.
pub async fn run(runtime: Arc<BackendRuntime>, check: HealthCheck, cancel: CancellationToken) {
    let _ = (runtime, check);
    cancel.cancelled().await;
}
