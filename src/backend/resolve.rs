//! DNS-resolved backends (`resolve = "host:port"`): the A/AAAA set is the
//! address list, kept fresh by one background task per backend.
//!
//! - Without `resolver`: the system resolver (what the host's other
//!   traffic uses, /etc/hosts included) every `resolve_interval`.
//! - With `resolver = "IP:53"`: that server alone ([`super::dns::query`]),
//!   asked again when the answer's smallest TTL runs out, the TTL clamped
//!   to `min_ttl..=max_ttl` (a TTL of 0 is not a query storm, a TTL of a
//!   day does not pin a dead address).
//!
//! Nothing here empties a working backend. A failed resolution (timeout,
//! SERVFAIL, ...) and an answer with no address (NXDOMAIN, no record) both
//! keep the last good set (serve stale), are logged at warn once when the
//! trouble starts and at info when it ends, and are retried after a
//! back-off: from `min_ttl` (system resolver: [`FIRST_RETRY`], at most
//! `resolve_interval`) doubling up to [`RETRY_CAP`] (within
//! `min_ttl..=max_ttl`), never in a loop. A backend that never resolved
//! has no set, and its connections close `no_address` after waiting
//! `connect_timeout` for the first answer (`BackendRuntime::addresses`).
//!
//! Metrics: `lookup("dns", ok | empty | error)` per resolution.
//!
//! Each resolution is [`crate::backend::host_lookup::resolve_once`], the one
//! the cluster lookups (`super::cluster`, for host names in an answer) go
//! through too.
//!
//! Not here: one resolution itself ([`crate::backend::host_lookup`]),
//! per-SNI cluster lookups (`cluster`), caching (the published set is the
//! cache), search domains (the name is fully qualified when a `resolver`
//! is set).

use std::fmt::Display;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::BackendRuntime;
use super::host_lookup::resolve_once;
use crate::config::settings::DnsSource;
use crate::metrics;

/// The first retry after a failure with the system resolver (or sooner
/// when `resolve_interval` is shorter).
pub(crate) const FIRST_RETRY: Duration = Duration::from_secs(1);
/// The longest wait between retries of a failing resolution (or
/// `max_ttl` / `resolve_interval` when shorter, `min_ttl` when longer).
pub(crate) const RETRY_CAP: Duration = Duration::from_secs(30);

/// Resolves `source` now and then until `cancel` fires, publishing each
/// answer to `runtime`.
pub(crate) async fn run(
    runtime: Arc<BackendRuntime>,
    source: DnsSource,
    cancel: CancellationToken,
) {
    let mut tracker = Tracker {
        backend: runtime.config.name.clone(),
        runtime,
        failures: 0,
    };
    loop {
        let next = match source.resolver {
            Some(server) => tracker.ask_server(&source, server).await,
            None => tracker.ask_system(&source).await,
        };
        tokio::select! {
            () = tokio::time::sleep(next) => {}
            () = cancel.cancelled() => return,
        }
    }
}

/// One backend's resolution state, for logging its changes.
struct Tracker {
    runtime: Arc<BackendRuntime>,
    backend: String,
    /// Consecutive failed or empty resolutions.
    failures: u32,
}

impl Tracker {
    /// Asks `resolver`; returns when to ask again.
    async fn ask_server(&mut self, source: &DnsSource, server: SocketAddr) -> Duration {
        let retry = backoff(
            self.failures,
            source.min_ttl,
            RETRY_CAP.clamp(source.min_ttl, source.max_ttl),
        );
        match resolve_once(&source.host, source.port, Some(server)).await {
            Ok(found) if found.addrs.is_empty() => {
                self.empty(
                    source,
                    "negative DNS answer (no such name, or no A/AAAA record)",
                );
                retry
            }
            Ok(found) => {
                let ttl = found.ttl.unwrap_or(source.min_ttl);
                let next = ttl.clamp(source.min_ttl, source.max_ttl);
                self.resolved(source, &found.addrs, next);
                next
            }
            Err(error) => {
                self.failed(source, &error);
                retry
            }
        }
    }

    /// Asks the system resolver; returns when to ask again.
    async fn ask_system(&mut self, source: &DnsSource) -> Duration {
        let first = FIRST_RETRY.min(source.interval);
        let retry = backoff(
            self.failures,
            first,
            RETRY_CAP.clamp(first, source.interval),
        );
        match resolve_once(&source.host, source.port, None).await {
            Ok(found) if found.addrs.is_empty() => {
                self.empty(source, "the system resolver returned no address");
                retry
            }
            Ok(found) => {
                self.resolved(source, &found.addrs, source.interval);
                source.interval
            }
            Err(error) => {
                self.failed(source, &error);
                retry
            }
        }
    }

    fn resolved(&mut self, source: &DnsSource, addrs: &[SocketAddr], next: Duration) {
        metrics::metrics().lookup("dns", "ok");
        let backend = &self.backend;
        let addresses = list(addrs);
        let first = !self.runtime.current().known;
        let changed = self.runtime.publish(addrs);
        if self.failures > 0 {
            tracing::info!(%backend, host = %source.host, failures = self.failures, "DNS resolution recovered");
            self.failures = 0;
        }
        if first {
            tracing::info!(%backend, host = %source.host, %addresses, next = ?next, "backend addresses resolved");
        } else if changed {
            tracing::info!(%backend, host = %source.host, %addresses, next = ?next, "backend addresses changed");
        } else {
            tracing::debug!(%backend, host = %source.host, %addresses, next = ?next, "backend addresses unchanged");
        }
    }

    fn empty(&mut self, source: &DnsSource, what: &str) {
        metrics::metrics().lookup("dns", "empty");
        self.trouble(source, what);
    }

    fn failed(&mut self, source: &DnsSource, error: &dyn Display) {
        metrics::metrics().lookup("dns", "error");
        self.trouble(source, &error.to_string());
    }

    /// Logs a failed or empty resolution: at warn when the trouble starts,
    /// at debug while it lasts.
    fn trouble(&mut self, source: &DnsSource, error: &str) {
        self.failures = self.failures.saturating_add(1);
        let backend = &self.backend;
        let current = self.runtime.current();
        let failures = self.failures;
        match (current.known, failures == 1) {
            (true, true) => {
                let addresses = list(&current.set.iter().map(|e| e.addr).collect::<Vec<_>>());
                tracing::warn!(%backend, host = %source.host, %error, %addresses, "DNS resolution failed; serving stale");
            }
            (false, true) => {
                tracing::warn!(%backend, host = %source.host, %error, "DNS resolution failed; the backend has no address yet (connections close no_address)");
            }
            (true, false) => {
                tracing::debug!(%backend, host = %source.host, %error, failures, "DNS resolution still failing; serving stale");
            }
            (false, false) => {
                tracing::debug!(%backend, host = %source.host, %error, failures, "DNS resolution still failing; no address yet");
            }
        }
    }
}

/// The wait before retry number `failures + 1`: `first`, doubling, at most
/// `cap` (and never less than `first`).
fn backoff(failures: u32, first: Duration, cap: Duration) -> Duration {
    let doubled = first.saturating_mul(1u32 << failures.min(16));
    doubled.min(cap).max(first)
}

fn list(addrs: &[SocketAddr]) -> String {
    addrs
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_first_up_to_the_cap() {
        let ms = Duration::from_millis;
        let waits: Vec<Duration> = (0..6).map(|n| backoff(n, ms(200), ms(1000))).collect();
        assert_eq!(
            waits,
            [ms(200), ms(400), ms(800), ms(1000), ms(1000), ms(1000)]
        );
        assert_eq!(backoff(u32::MAX, ms(200), ms(1000)), ms(1000));
        // A cap below the first wait never makes it shorter.
        assert_eq!(backoff(3, ms(500), ms(100)), ms(500));
    }
}
