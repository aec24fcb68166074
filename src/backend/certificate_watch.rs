//! The certificates a backend's addresses present for the names it serves,
//! watched while the relay runs: with a `kind = "tls"` health check, each
//! address is asked, with a complete handshake per name
//! ([`crate::backend::certificate`]), for the check's `sni` and for every
//! name a TCP listener routes to the backend ([`names_served`]: exact
//! names, and one name below each `*.suffix`, at most
//! [`MAX_NAMES_PER_BACKEND`]). A backend may choose its certificate by the
//! name asked, so one fetch says nothing of another name's certificate.
//!
//! Per address it exports the earliest not-after of those certificates and
//! whether each covers the name it was presented for
//! (`snirelay_backend_certificate_not_after_seconds`,
//! `snirelay_backend_certificate_covers`, by backend and address). An
//! address is asked once the names are handed over
//! ([`super::Backends::serve_names`], at start and at each reload, which a
//! kept backend takes without a restart), at once when it appears or the
//! names change, and then every
//! [`CERTIFICATE_REFRESH`]; an address where a fetch failed is asked again
//! one check `interval` later, its gauges left as they were.
//!
//! The fetches run in a task of their own, beside the health checks
//! ([`super::health`]), at most [`FETCHES_AT_ONCE`] at a time, each within
//! the check's `timeout`, from the backend's `source` and after its PROXY
//! LOCAL header, as the checks' probes are: a slow or dead address never
//! delays a health round, and it never changes an address's health. Cost:
//! one handshake per name per address per ten minutes.
//!
//! Bounds: nothing here is keyed or grown by what a client sends. The
//! names are the configuration's (at most [`MAX_NAMES_PER_BACKEND`] per
//! backend), the addresses the backend's set (fixed, or the operator's
//! DNS answer, which one DNS message bounds); a removed address is
//! forgotten at the next round, and the gauges are kept within the
//! address series' bound of 64 per backend (`metrics`).
//!
//! Not here: what a certificate says or covers ([`crate::backend::certificate`]),
//! the health verdict ([`super::health`]), or `snirelay certs`, which asks
//! once, for every name, and reports each ([`crate::cli::certs`]). Nor
//! QUIC: the watch asks over TCP, beside a TCP health check, and names only
//! quic listeners route are not asked; a QUIC server's certificate at the
//! same address would share the address's gauges with the TCP server's and
//! blur which one expires. `snirelay certs` makes the QUIC handshakes.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::BackendRuntime;
use super::certificate::{CertificateClient, name_to_send};
use super::health::Probe;
use crate::config::settings::HealthCheck;
use crate::config::{AddressSource, Config, Protocol};
use crate::metrics;

/// How long a certificate learned at an address is trusted to stay the
/// same before it is fetched again.
pub(crate) const CERTIFICATE_REFRESH: Duration = Duration::from_secs(600);

/// The most names of one backend whose certificates are watched (and that
/// `snirelay certs` checks by default): the first in file order.
pub(crate) const MAX_NAMES_PER_BACKEND: usize = 50;

/// Handshakes of one backend's watch in flight at once.
pub(crate) const FETCHES_AT_ONCE: usize = 8;

/// The names each backend serves, as the certificate checks send them:
/// the exact names and a name below each `*.suffix` of every route of
/// every TCP listener, in file order, each once, at most `max` per
/// backend. A default route (`*`) names none; cluster backends are left
/// out (their addresses depend on the name).
pub(crate) fn names_served(config: &Config, max: usize) -> BTreeMap<String, Arc<[String]>> {
    let mut names: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for listener in &config.listeners {
        if listener.protocol != Protocol::Tcp {
            continue;
        }
        for route in &listener.routes {
            let backend = &route.backend;
            if matches!(backend.source, AddressSource::Cluster(_)) {
                continue;
            }
            let served = names.entry(backend.name.clone()).or_default();
            for name in listener.patterns(route).filter_map(name_to_send) {
                if served.len() < max && !served.contains(&name) {
                    served.push(name);
                }
            }
        }
    }
    names
        .into_iter()
        .map(|(backend, names)| (backend, names.into()))
        .collect()
}

/// The names to ask each address for: the check's `sni`, then the names
/// served, each once.
fn names_to_ask(sni: &str, served: &[String]) -> Vec<ServerName<'static>> {
    let mut names: Vec<&str> = vec![sni];
    for name in served {
        if !names.contains(&name.as_str()) {
            names.push(name);
        }
    }
    names
        .into_iter()
        .filter_map(|name| ServerName::try_from(name.to_owned()).ok())
        .collect()
}

/// What one address showed for every name asked: the earliest not-after
/// and whether every certificate covered its name; or the first failure.
type Learned = Result<(i64, bool), String>;

/// Watches the certificates of `runtime`'s addresses until `cancel` fires;
/// `check` is its `kind = "tls"` health check (anything else returns).
pub(crate) async fn run(
    runtime: Arc<BackendRuntime>,
    check: HealthCheck,
    cancel: CancellationToken,
) {
    let Some(sni) = check.kind.sni() else {
        return;
    };
    let Ok(client) = CertificateClient::without_roots(&[]) else {
        return;
    };
    let backend = runtime.config.name.clone();
    let probe = Probe::new(&runtime.config, check.timeout).with_source_of(&runtime);
    let mut set_changes = runtime.subscribe();
    let mut names = runtime.subscribe_names();
    // Nothing is asked before the names are known: a first round on the
    // check's `sni` alone would export what the names may contradict.
    tokio::select! {
        () = cancel.cancelled() => return,
        known = names.wait_for(Option::is_some) => {
            if known.is_err() {
                return;
            }
        }
    }
    // When each address is next asked: keyed by the backend's own
    // addresses (its configuration or its DNS answer), pruned to the
    // current set every round; nothing a client sends adds an entry.
    let mut due: HashMap<SocketAddr, Instant> = HashMap::new();
    loop {
        let addrs: Vec<SocketAddr> = set_changes
            .borrow_and_update()
            .set
            .iter()
            .map(|e| e.addr)
            .collect();
        let asked = names_to_ask(
            sni,
            names.borrow_and_update().as_deref().unwrap_or_default(),
        );
        due.retain(|addr, _| addrs.contains(addr));
        let now = Instant::now();
        let fetch: Vec<SocketAddr> = addrs
            .iter()
            .copied()
            .filter(|addr| due.get(addr).is_none_or(|at| *at <= now))
            .collect();
        let learned = tokio::select! {
            () = cancel.cancelled() => return,
            learned = fetch_all(&client, &probe, &fetch, &asked) => learned,
        };
        for (addr, learned) in learned {
            let next = match learned {
                Ok((not_after, covers)) => {
                    metrics::metrics().backend_certificate(&backend, addr, not_after, covers);
                    now + CERTIFICATE_REFRESH
                }
                Err(error) => {
                    tracing::debug!(%backend, %addr, %error, "certificate fetch failed");
                    now + check.interval
                }
            };
            due.insert(addr, next);
        }
        let wake = due
            .values()
            .min()
            .copied()
            .unwrap_or(now + CERTIFICATE_REFRESH);
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep_until(wake) => {}
            changed = set_changes.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            changed = names.changed() => {
                if changed.is_err() {
                    return;
                }
                // New names: every address is asked again at once.
                due.clear();
            }
        }
    }
}

/// Asks every address of `addrs` for every name of `names`, at most
/// [`FETCHES_AT_ONCE`] at a time, each within the probe's budget.
async fn fetch_all(
    client: &CertificateClient,
    probe: &Probe,
    addrs: &[SocketAddr],
    names: &[ServerName<'static>],
) -> Vec<(SocketAddr, Learned)> {
    let permits = Arc::new(Semaphore::new(FETCHES_AT_ONCE));
    let mut tasks = JoinSet::new();
    for &addr in addrs {
        for name in names {
            let (client, probe, name) = (client.clone(), probe.clone(), name.clone());
            let permits = permits.clone();
            tasks.spawn(async move {
                let _permit = permits.acquire_owned().await;
                let shown = name.to_str().into_owned();
                let learned = client
                    .fetch_within(probe.budget(), probe.connect(addr), probe.header(), name)
                    .await
                    .map(|p| (p.certificate.not_after, p.certificate.covers(&shown)))
                    .map_err(|error| format!("{shown}: {error}"));
                (addr, learned)
            });
        }
    }
    let mut by_addr: BTreeMap<SocketAddr, Learned> = BTreeMap::new();
    while let Some(joined) = tasks.join_next().await {
        let Ok((addr, learned)) = joined else {
            continue;
        };
        let merged = match (by_addr.remove(&addr), learned) {
            (None, learned) => learned,
            (Some(Err(error)), _) | (Some(Ok(_)), Err(error)) => Err(error),
            (Some(Ok((a, covered_a))), Ok((b, covered_b))) => {
                Ok((a.min(b), covered_a && covered_b))
            }
        };
        by_addr.insert(addr, merged);
    }
    by_addr.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn each_tcp_backend_serves_its_routes_names_once_and_at_most_max() {
        let config = Config::from_toml(
            r#"
[[listener]]
name = "tls"
listen = ["127.0.0.1:443"]
[[listener]]
name = "tls2"
listen = ["127.0.0.1:444"]
[[listener]]
name = "h3"
protocol = "quic"
listen = ["127.0.0.1:443"]
[[route]]
name = "site"
listener = ["tls", "tls2", "h3"]
sni = ["a.example.test", "*.b.example.test", "c.example.test"]
backend = "one"
[[route]]
name = "again"
listener = "tls"
sni = ["a.example.test.local", "d.example.test"]
backend = "one"
[[route]]
name = "rest"
listener = "tls"
sni = ["*"]
backend = "two"
[backend.one]
addresses = ["127.0.0.1:8443"]
[backend.two]
addresses = ["127.0.0.1:9443"]
"#,
            Path::new("test.toml"),
        )
        .unwrap();
        let served = names_served(&config, 4);
        assert_eq!(
            &*served["one"],
            [
                "a.example.test",
                "snirelay-check.b.example.test",
                "c.example.test",
                "a.example.test.local"
            ]
        );
        assert!(served["two"].is_empty());
        let asked: Vec<String> = names_to_ask("c.example.test", &served["one"])
            .iter()
            .map(|n| n.to_str().into_owned())
            .collect();
        assert_eq!(
            asked,
            [
                "c.example.test",
                "a.example.test",
                "snirelay-check.b.example.test",
                "a.example.test.local"
            ]
        );
    }
}
