//! `snirelay certs`: what each backend presents, for each name routed to
//! it, learned as a TLS client of the backend (the edge holds no keys).
//!
//! The names: for every route of every listener, TCP and QUIC, each exact
//! name as written, and for a `*.suffix` pattern the name
//! [`WILDCARD_PROBE_LABEL`] below it (`snirelay-check.suffix`); a default
//! route (`*`) has no name to send. At most `--max-names` distinct names
//! per backend are checked, in file order (a name a TCP and a QUIC
//! listener both route there is checked over each); the rest are counted
//! per backend as skipped. Every address of the route's backend is tried
//! for each name: a fixed list as configured, a `resolve` backend's answer
//! now (through its `resolver` if it has one), or a cluster backend's for
//! that name as a connection finds it now (its lookup's answer: another
//! node's addresses, reached with the cluster's hop PROXY setting, or its
//! `local_backend`'s when the answer is this node, the route's listener's
//! first address). QUIC routes to a backend the relay sends a PROXY v2
//! header over UDP are listed as not checked, with the reason.
//!
//! Each (name, address) of a TCP listener is one TCP connection (from the
//! host's address, whatever the backend's `source`), the backend's PROXY
//! LOCAL header when it speaks PROXY, and a complete handshake offering
//! `h2` and `http/1.1`; of a QUIC listener, one QUIC handshake (from a UDP
//! socket of the host's) offering `h3` ([`crate::backend::certificate`]).
//! Each is bounded by `--timeout`; at most `--concurrency` run at once. A
//! row reports the certificate's subject names, issuer and not-after,
//! whether it covers the name, whether it verifies (system roots or
//! `--ca`) and the ALPN the backend selected, which is what a browser gets
//! through the relay.
//!
//! Coalescing ([`coalescing()`], in [`mod@coalescing`]): a browser holding an HTTP/2 or HTTP/3
//! connection for one name reuses it for another name the certificate
//! covers and that resolves to the same address (RFC 9113 §9.1.1, RFC 9114
//! §3.3), which behind one listener every name does; the relay, which
//! routes by the hello alone, never sees the second name. So wherever a
//! certificate presented for a name of one route covers a name the same
//! listener routes to another backend, and the backend selected `h2` (or,
//! over QUIC, `h3`), the report names both routes, both backends, the
//! names and the fixes; `[global] coalescing_risk` makes it a warning or
//! an error.
//!
//! Exit code ([`Report::exit_code`]): 2 when a name could not be checked
//! at an address (no connection, no handshake) or its certificate does not
//! cover it or does not verify, or with a coalescing risk under
//! `coalescing_risk = "error"`; 1 when a certificate expires within
//! [`EXPIRY_WARNING_DAYS`] or with a coalescing risk under `"warn"`; 0
//! otherwise. Rows not checked and names skipped are reported and do not
//! change it.
//!
//! Not here: the relay itself (nothing here runs through it), PROXY
//! headers over UDP, client certificates, or revocation.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::pki_types::ServerName;
use serde::Serialize;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

pub(crate) use coalescing::{Coalescing, coalescing};

use crate::backend::Backends;
use crate::backend::candidates::{Pick, candidates};
use crate::backend::certificate::{
    BROWSER_ALPN, CertificateClient, CertificateSummary, H3_ALPN, WILDCARD_PROBE_LABEL,
    name_to_send, quic_endpoint_for, san_covers,
};
use crate::backend::host_lookup::resolve_once;
use crate::cli::CertsArgs;
use crate::cli::probe::{ProbeError, trusted_roots};
use crate::config::{AddressSource, Backend, CoalescingRisk, Config, Outbound, Protocol};
use crate::proxy::outbound::local_header;

/// A certificate with fewer days left than this makes a row a warning.
pub(crate) const EXPIRY_WARNING_DAYS: i64 = 14;

/// One name to check, and where it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub listener: String,
    /// The listener's protocol: a TLS handshake over TCP, or QUIC.
    pub transport: Protocol,
    pub route: String,
    pub backend: String,
    /// The pattern as written (`a.example.com`, `*.example.com`).
    pub pattern: String,
    /// The name sent as SNI.
    pub name: String,
}

/// A route whose names are not checked, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct NotChecked {
    pub listener: String,
    pub route: String,
    pub backend: String,
    pub reason: String,
}

/// What [`plan`] decided: the names to check, the routes left out, and how
/// many distinct names each backend had past `--max-names`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    pub targets: Vec<Target>,
    pub not_checked: Vec<NotChecked>,
    pub skipped: BTreeMap<String, usize>,
}

/// The names of every route, as [`plan`] picks them (pure: no I/O).
pub(crate) fn plan(config: &Config, max_names: usize) -> Plan {
    let mut plan = Plan::default();
    let mut taken: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    let mut past_cap: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for listener in &config.listeners {
        for route in &listener.routes {
            let backend = &route.backend;
            let reason = if listener.protocol == Protocol::Quic
                && backend.proxy_protocol != Outbound::None
            {
                Some(
                    "quic: the relay sends this backend a PROXY v2 header over UDP \
                     (proxy_protocol = \"v2\"), which a QUIC handshake here does not send",
                )
            } else {
                None
            };
            let not_checked = |reason: &str| NotChecked {
                listener: listener.name.clone(),
                route: route.name.clone(),
                backend: backend.name.clone(),
                reason: reason.to_owned(),
            };
            if let Some(reason) = reason {
                plan.not_checked.push(not_checked(reason));
                continue;
            }
            for pattern in listener.patterns(route) {
                let Some(name) = name_to_send(pattern) else {
                    plan.not_checked
                        .push(not_checked("default route (*): no name to send"));
                    continue;
                };
                let names = taken.entry(backend.name.as_str()).or_default();
                if !names.contains(&name) && names.len() >= max_names {
                    past_cap
                        .entry(backend.name.clone())
                        .or_default()
                        .insert(name);
                    continue;
                }
                names.insert(name.clone());
                plan.targets.push(Target {
                    listener: listener.name.clone(),
                    transport: listener.protocol,
                    route: route.name.clone(),
                    backend: backend.name.clone(),
                    pattern: pattern.to_string(),
                    name,
                });
            }
        }
    }
    plan.skipped = past_cap
        .into_iter()
        .map(|(backend, names)| (backend, names.len()))
        .collect();
    plan
}

/// How a row ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Status {
    /// Covered, verified, not about to expire.
    Ok,
    /// Expires within [`EXPIRY_WARNING_DAYS`].
    Warning,
    /// Not covered, not verified, or nothing learned.
    Error,
}

/// What one (name, address) showed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Row {
    pub listener: String,
    /// `tcp` (a TLS handshake) or `quic` (a QUIC handshake).
    #[serde(serialize_with = "protocol_name")]
    pub transport: Protocol,
    pub route: String,
    pub backend: String,
    pub pattern: String,
    pub name: String,
    /// The address tried; absent when the backend's addresses could not
    /// be found.
    pub address: Option<SocketAddr>,
    pub status: Status,
    /// The certificate presented, when the handshake completed.
    pub certificate: Option<CertificateSummary>,
    /// Days until not-after (negative: expired).
    pub days_left: Option<i64>,
    /// Whether a subject alternative name covers `name` (RFC 6125).
    pub covers: Option<bool>,
    /// `ok`, or why the chain does not verify for `name`.
    pub verified: Option<String>,
    /// The protocol the backend selected of `h2` and `http/1.1` (over
    /// QUIC, `h3`); absent when it selected none.
    pub alpn: Option<String>,
    /// `TLSv1_3` or `TLSv1_2` (QUIC: always `TLSv1_3`).
    pub tls_version: Option<String>,
    /// Why nothing was learned.
    pub error: Option<String>,
}

impl Row {
    fn new(target: &Target, address: Option<SocketAddr>) -> Row {
        Row {
            listener: target.listener.clone(),
            transport: target.transport,
            route: target.route.clone(),
            backend: target.backend.clone(),
            pattern: target.pattern.clone(),
            name: target.name.clone(),
            address,
            status: Status::Error,
            certificate: None,
            days_left: None,
            covers: None,
            verified: None,
            alpn: None,
            tls_version: None,
            error: None,
        }
    }

    fn failed(mut self, error: String) -> Row {
        self.error = Some(error);
        self
    }
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Report {
    /// One row per (name, address), in plan order, addresses in order.
    pub checks: Vec<Row>,
    pub not_checked: Vec<NotChecked>,
    /// Names not checked past `--max-names`, per backend.
    pub skipped: BTreeMap<String, usize>,
    /// The coalescing risks found ([`coalescing()`]).
    pub coalescing: Vec<Coalescing>,
    /// The exit code the report stands for.
    pub exit_code: u8,
}

impl Report {
    fn new(checks: Vec<Row>, plan: Plan, coalescing: Vec<Coalescing>) -> Report {
        let risks = coalescing.iter().map(|c| match c.level {
            CoalescingRisk::Warn => Status::Warning,
            CoalescingRisk::Error => Status::Error,
        });
        let worst = checks
            .iter()
            .map(|r| r.status)
            .chain(risks)
            .max()
            .unwrap_or(Status::Ok);
        let exit_code = match worst {
            Status::Ok => 0,
            Status::Warning => 1,
            Status::Error => 2,
        };
        Report {
            checks,
            not_checked: plan.not_checked,
            skipped: plan.skipped,
            coalescing,
            exit_code,
        }
    }

    /// A table for people.
    pub(crate) fn to_text(&self) -> String {
        let header = [
            "STATUS",
            "ROUTE",
            "BACKEND",
            "NAME",
            "ADDRESS",
            "COVERS",
            "VERIFIED",
            "ALPN",
            "NOT AFTER",
            "ISSUER",
            "NAMES",
        ];
        let mut table: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
        for row in &self.checks {
            let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".to_owned());
            let cert = row.certificate.as_ref();
            let mut cells = vec![
                format!("{:?}", row.status).to_lowercase(),
                format!("{}/{}", row.listener, row.route),
                row.backend.clone(),
                row.name.clone(),
                or_dash(row.address.map(|a| a.to_string())),
                or_dash(row.covers.map(|c| if c { "yes" } else { "no" }.to_owned())),
                or_dash(row.verified.clone()),
                or_dash(row.alpn.clone()),
                or_dash(
                    cert.zip(row.days_left)
                        .map(|(c, d)| format!("{} ({d}d)", utc_date(c.not_after))),
                ),
                or_dash(cert.map(|c| c.issuer.clone())),
                or_dash(cert.map(|c| c.names.join(","))),
            ];
            if let Some(error) = &row.error {
                cells[5] = format!("error: {error}");
                cells.truncate(6);
            }
            table.push(cells);
        }
        let widths: Vec<usize> = (0..header.len())
            .map(|i| {
                table
                    .iter()
                    .filter(|r| r.len() > i + 1)
                    .map(|r| r[i].len())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for cells in &table {
            let last = cells.len() - 1;
            for (i, cell) in cells.iter().enumerate() {
                if i == last {
                    let _ = writeln!(out, "{cell}");
                } else {
                    let _ = write!(out, "{cell:<w$}  ", w = widths[i]);
                }
            }
        }
        for n in &self.not_checked {
            let _ = writeln!(
                out,
                "not checked: {}/{} -> backend {}: {}",
                n.listener, n.route, n.backend, n.reason
            );
        }
        for (backend, count) in &self.skipped {
            let _ = writeln!(
                out,
                "skipped: backend {backend}: {count} name(s) past --max-names"
            );
        }
        for risk in &self.coalescing {
            let _ = writeln!(out, "{}", risk.message);
        }
        out
    }

    /// The report as pretty-printed JSON (`--format json`).
    pub(crate) fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report always serializes")
    }
}

fn protocol_name<S: serde::Serializer>(protocol: &Protocol, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(protocol.as_str())
}

/// `YYYY-MM-DD` of a Unix time (UTC).
fn utc_date(unix: i64) -> String {
    let time = UNIX_EPOCH + Duration::from_secs(unix.max(0) as u64);
    let stamp = humantime::format_rfc3339_seconds(time).to_string();
    stamp[..10].to_owned()
}

/// Why the command could not run at all.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CertsError {
    #[error(transparent)]
    Trust(#[from] ProbeError),
    #[error("TLS client setup: {0}")]
    Client(String),
}

/// Checks every planned name at every address of its backend.
pub(crate) async fn run(config: &Config, args: &CertsArgs) -> Result<Report, CertsError> {
    let roots = trusted_roots(args.ca.as_deref())?;
    let tcp_client =
        CertificateClient::new(roots.clone(), &BROWSER_ALPN).map_err(CertsError::Client)?;
    let quic_client = CertificateClient::new(roots, &H3_ALPN).map_err(CertsError::Client)?;
    let plan = plan(config, args.max_names);
    // One QUIC endpoint per address family, opened when first needed.
    let mut endpoints: HashMap<bool, Result<quinn::Endpoint, String>> = HashMap::new();

    // Each backend's addresses, found once; a cluster backend's per name,
    // as its lookup answers a connection for that name now.
    let mut runtime: Option<Backends> = None;
    let mut addresses: BTreeMap<(&str, Option<&str>), Result<Found, String>> = BTreeMap::new();
    for target in &plan.targets {
        let backend = &config.backends[&target.backend];
        let per_name = backend.cluster().is_some().then_some(target.name.as_str());
        let key = (target.backend.as_str(), per_name);
        if addresses.contains_key(&key) {
            continue;
        }
        let found = match per_name {
            None => backend_addresses(backend).await.map(|addrs| Found {
                addrs,
                settings: backend.clone(),
            }),
            Some(name) => {
                let backends =
                    runtime.get_or_insert_with(|| Backends::start(&config.backends, None));
                let local = listening_ip(config, &target.listener);
                cluster_addresses(backends, &target.backend, name, local).await
            }
        };
        addresses.insert(key, found);
    }

    let permits = Arc::new(Semaphore::new(usize::from(args.concurrency)));
    let mut tasks = JoinSet::new();
    let mut rows: Vec<Option<Row>> = Vec::new();
    for target in &plan.targets {
        let backend = &config.backends[&target.backend];
        let per_name = backend.cluster().is_some().then_some(target.name.as_str());
        let found = match &addresses[&(target.backend.as_str(), per_name)] {
            Ok(found) => found,
            Err(error) => {
                rows.push(Some(Row::new(target, None).failed(error.clone())));
                continue;
            }
        };
        // The PROXY setting of the backend the addresses are: a cluster's
        // hop header toward another node, or its `local_backend`'s own.
        let settings = &found.settings;
        let header: Option<Arc<[u8]>> =
            local_header(settings.proxy_protocol, settings.proxy_protocol_crc32c).map(Arc::from);
        for &address in &found.addrs {
            let index = rows.len();
            let row = Row::new(target, Some(address));
            let (client, handshake) = match target.transport {
                Protocol::Tcp => (tcp_client.clone(), Handshake::Tcp(header.clone())),
                Protocol::Quic => {
                    let endpoint = endpoints
                        .entry(address.is_ipv6())
                        .or_insert_with(|| {
                            quic_endpoint_for(address)
                                .map_err(|e| format!("cannot open a UDP socket: {e}"))
                        })
                        .clone();
                    match endpoint {
                        Ok(endpoint) => (quic_client.clone(), Handshake::Quic(endpoint)),
                        Err(error) => {
                            rows.push(Some(row.failed(error)));
                            continue;
                        }
                    }
                }
            };
            rows.push(None);
            let permits = permits.clone();
            let budget = args.timeout;
            tasks.spawn(async move {
                let _permit = permits.acquire_owned().await;
                (index, check_one(row, &client, handshake, budget).await)
            });
        }
    }
    while let Some(done) = tasks.join_next().await {
        let (index, row) = done.expect("a check task never panics");
        rows[index] = Some(row);
    }
    // Every QUIC connection was closed as its fetch ended: let the
    // endpoints send those closes before the process exits (bounded).
    for endpoint in endpoints.into_values().flatten() {
        let _ = tokio::time::timeout(args.timeout, endpoint.wait_idle()).await;
    }
    let rows: Vec<Row> = rows.into_iter().flatten().collect();
    let risks = coalescing(config, &rows);
    Ok(Report::new(rows, plan, risks))
}

/// The addresses of a fixed or `resolve` backend, now.
async fn backend_addresses(backend: &Backend) -> Result<Vec<SocketAddr>, String> {
    match &backend.source {
        AddressSource::Fixed => Ok(backend.addresses.clone()),
        AddressSource::Dns(dns) => match resolve_once(&dns.host, dns.port, dns.resolver).await {
            Ok(found) if found.addrs.is_empty() => Err(format!("{} has no address", dns.host)),
            Ok(found) => Ok(found.addrs),
            Err(e) => Err(format!("cannot resolve {}: {e}", dns.host)),
        },
        AddressSource::Cluster(_) => Err("a cluster backend".to_owned()),
    }
}

/// A backend's addresses for a name, and the backend whose settings apply
/// to them (a cluster's `local_backend` when the answer is this node).
#[derive(Debug)]
struct Found {
    addrs: Vec<SocketAddr>,
    settings: Arc<Backend>,
}

/// The addresses cluster backend `backend` sends `name` to now, as a
/// connection for that name finds them ([`crate::backend::candidates`]):
/// its lookup's answer, another node's addresses, or (the answer naming
/// this node, `local`, or a local name) its `local_backend`'s.
async fn cluster_addresses(
    backends: &Backends,
    backend: &str,
    name: &str,
    local: IpAddr,
) -> Result<Found, String> {
    let runtime = backends
        .get(backend)
        .ok_or_else(|| format!("backend {backend} did not start"))?;
    let pick = Pick {
        client: SocketAddr::new(local, 0),
        claimed: false,
        sni: Some(name.into()),
        local: Some(local),
    };
    let found = candidates(backends, runtime, &pick)
        .await
        .map_err(|e| format!("cluster lookup for {name}: {e}"))?;
    Ok(Found {
        addrs: found.set.iter().map(|endpoint| endpoint.addr).collect(),
        settings: found.runtime.config.clone(),
    })
}

/// The address listener `name` listens on first, which stands for this
/// node in a cluster's answer (the unspecified address if it has none).
fn listening_ip(config: &Config, name: &str) -> IpAddr {
    config
        .listeners
        .iter()
        .find(|listener| listener.name == name)
        .and_then(|listener| listener.listen.first())
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |addr| addr.ip())
}

/// How a row's handshake is made.
enum Handshake {
    /// A TCP connection, after the backend's PROXY LOCAL header if any.
    Tcp(Option<Arc<[u8]>>),
    /// A QUIC connection from this endpoint.
    Quic(quinn::Endpoint),
}

/// One connection and handshake for `row`'s name at its address, with
/// `client` (offering what its transport's browsers offer).
async fn check_one(
    mut row: Row,
    client: &CertificateClient,
    handshake: Handshake,
    budget: Duration,
) -> Row {
    let Some(address) = row.address else {
        return row;
    };
    let Ok(name) = ServerName::try_from(row.name.clone()) else {
        return row.failed("not a name a TLS client can send".to_owned());
    };
    let fetched = match handshake {
        Handshake::Tcp(header) => {
            let connect = TcpStream::connect(address);
            client
                .fetch_within(budget, connect, header.as_deref(), name)
                .await
        }
        Handshake::Quic(endpoint) => {
            client
                .fetch_quic_within(budget, &endpoint, address, name)
                .await
        }
    };
    let presented = match fetched {
        Ok(presented) => presented,
        Err(error) => return row.failed(error),
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs() as i64;
    let certificate = presented.certificate;
    let covers = certificate.covers(&row.name);
    let days_left = (certificate.not_after - now).div_euclid(86_400);
    let verified = presented
        .verified
        .unwrap_or_else(|| Err("no roots to verify against".to_owned()));
    row.status = if !covers || verified.is_err() {
        Status::Error
    } else if days_left < EXPIRY_WARNING_DAYS {
        Status::Warning
    } else {
        Status::Ok
    };
    row.days_left = Some(days_left);
    row.covers = Some(covers);
    row.verified = Some(verified.err().unwrap_or_else(|| "ok".to_owned()));
    row.alpn = presented.alpn;
    row.tls_version = Some(presented.tls_version);
    row.certificate = Some(certificate);
    row
}

mod coalescing;

#[cfg(test)]
mod tests;
