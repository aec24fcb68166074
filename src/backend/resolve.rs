//! DNS-resolved backends (`resolve = "host:port"`): the A/AAAA set is the
//! address list. Through the system resolver every `resolve_interval`.
//!
//! A failed re-resolution keeps the last good set (serve stale) and logs
//! it; a backend that never resolved has no set, and its connections close
//! `no_address`.
//!
//! Not here: per-SNI cluster lookups (`cluster`).

use std::net::SocketAddr;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::BackendRuntime;
use crate::config::DnsSource;
use crate::metrics;

/// Resolves `source` now and then until `cancel` fires, publishing each
/// answer to `runtime`.
pub async fn run(runtime: Arc<BackendRuntime>, source: DnsSource, cancel: CancellationToken) {
    let backend = runtime.config.name.clone();
    loop {
        let answer = tokio::net::lookup_host((source.host.as_str(), source.port)).await;
        match answer {
            Ok(addrs) => {
                let addrs: Vec<SocketAddr> = addrs.collect();
                if addrs.is_empty() {
                    metrics::metrics().lookup("dns", "empty");
                    tracing::warn!(%backend, host = %source.host, "DNS answer is empty; keeping the last good set");
                } else {
                    metrics::metrics().lookup("dns", "ok");
                    if runtime.publish(&addrs) {
                        tracing::info!(%backend, host = %source.host, addresses = ?addrs, "backend addresses resolved");
                    }
                }
            }
            Err(error) => {
                metrics::metrics().lookup("dns", "error");
                tracing::warn!(%backend, host = %source.host, %error, "DNS resolution failed; keeping the last good set");
            }
        }
        tokio::select! {
            () = tokio::time::sleep(source.interval) => {}
            () = cancel.cancelled() => return,
        }
    }
}
