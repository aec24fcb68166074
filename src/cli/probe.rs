//! `snirelay probe`: the operator's monitor, from the client's side.
//!
//! NAME is resolved through the system resolver (the address list real
//! clients get). Every address is probed in parallel, each with its own
//! budget (`--timeout`), and on ONE socket: the TCP connect is timed, then a
//! full TLS handshake (rustls) is timed on that same connection. Both numbers
//! are reported per address. A relay whose backend is dead accepts TCP
//! perfectly well, so an address is healthy only when the handshake
//! completes.
//!
//! Outcomes: text or `--json` on stdout, optionally a Prometheus textfile
//! (written to a temporary file in the same directory and renamed over the
//! target, so a collector never reads half a file). Exit code: 0 when every
//! address is healthy, 1 when some are, 2 when none is.
//!
//! With `--readyz URL` the edge's admin listener is asked too (`readyz`):
//! an edge that answers anything but 200 wants no clients, and the exit
//! code is 2.
//!
//! Not here: retries, HTTP requests to the origin, or anything after the handshake; the
//! probe closes the connection with a TLS close_notify once it is done.
//! Cost: one TCP connection and one handshake per address per run.

use std::fmt::Write as _;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use serde::Serialize;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout};
use tokio_rustls::TlsConnector;

use crate::backend::certificate::{AcceptAnyCertificate, provider};
use crate::cli::ProbeArgs;
use crate::cli::readyz::{self, ReadyzReport};
use crate::system_roots::add_system_roots;

/// Why a probe could not run at all (as opposed to an unhealthy address).
#[allow(missing_docs)] // each variant's #[error] text documents it
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProbeError {
    #[error("--sni {0:?}: not a valid server name")]
    ServerName(String),
    #[error("{path}: cannot read: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("{path}: {message}")]
    Pem { path: PathBuf, message: String },
    #[error(
        "no trusted CA certificates: the system store is empty or unreadable ({0}); use --ca FILE"
    )]
    NoRoots(String),
    #[error("TLS client setup: {0}")]
    Tls(#[from] rustls::Error),
    #[error("cannot resolve {name}:{port}: {source}")]
    Resolve {
        name: String,
        port: u16,
        source: io::Error,
    },
    #[error("{name}:{port} resolved to no address")]
    NoAddress { name: String, port: u16 },
    #[error("cannot write {path}: {source}")]
    Textfile { path: PathBuf, source: io::Error },
}

/// What happened at one address; names are a contract with dashboards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Status {
    /// TCP connect and TLS handshake both completed.
    Healthy,
    /// The address actively refused the TCP connection.
    Refused,
    /// No TCP connection within the budget.
    ConnectTimeout,
    /// TCP connect failed otherwise (unreachable, reset, ...).
    ConnectFailed,
    /// TCP was fine, the TLS handshake failed (closed, alert, bad certificate).
    HandshakeFailed,
    /// TCP was fine, the handshake did not finish within the budget.
    HandshakeTimeout,
}

impl Status {
    /// Every status, in the order the metrics list them.
    pub(crate) const ALL: [Status; 6] = [
        Status::Healthy,
        Status::Refused,
        Status::ConnectTimeout,
        Status::ConnectFailed,
        Status::HandshakeFailed,
        Status::HandshakeTimeout,
    ];

    /// The status's name in the report and the metrics.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Status::Healthy => "healthy",
            Status::Refused => "refused",
            Status::ConnectTimeout => "connect_timeout",
            Status::ConnectFailed => "connect_failed",
            Status::HandshakeFailed => "handshake_failed",
            Status::HandshakeTimeout => "handshake_timeout",
        }
    }
}

/// The result for one address.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct AddressReport {
    /// The address probed.
    pub address: SocketAddr,
    /// How the probe of this address ended.
    pub status: Status,
    /// TCP connect time; absent when the connect did not complete.
    pub tcp_connect_ms: Option<f64>,
    /// TLS handshake time after connect; absent unless it completed.
    pub tls_handshake_ms: Option<f64>,
    /// Negotiated TLS version and ALPN (when the handshake completed).
    pub tls_version: Option<String>,
    /// What failed, when the probe did not succeed.
    pub error: Option<String>,
}

/// The result for one run.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Report {
    /// The NAME probed, as given.
    pub name: String,
    /// The server name sent in the ClientHello.
    pub sni: String,
    /// The port probed on every address.
    pub port: u16,
    /// How many addresses answered with a completed handshake.
    pub healthy: usize,
    /// How many addresses NAME resolved to.
    pub total: usize,
    /// The exit code this report stands for.
    pub exit_code: u8,
    /// One result per address, in resolver order.
    pub addresses: Vec<AddressReport>,
    /// With `--readyz`: what the edge's `/readyz` said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub readyz: Option<ReadyzReport>,
}

impl Report {
    fn new(name: String, sni: String, port: u16, addresses: Vec<AddressReport>) -> Report {
        let healthy = addresses
            .iter()
            .filter(|a| a.status == Status::Healthy)
            .count();
        let total = addresses.len();
        let exit_code = if total > 0 && healthy == total {
            0
        } else if healthy > 0 {
            1
        } else {
            2
        };
        Report {
            name,
            sni,
            port,
            healthy,
            total,
            exit_code,
            addresses,
            readyz: None,
        }
    }

    /// Adds what the edge's `/readyz` said: an edge that is not ready
    /// wants no clients, so the exit code is 2 whatever the handshakes
    /// did.
    pub(crate) fn with_readyz(mut self, readyz: ReadyzReport) -> Report {
        if !readyz.ready {
            self.exit_code = 2;
        }
        self.readyz = Some(readyz);
        self
    }

    /// Human-readable lines for a terminal.
    pub(crate) fn to_text(&self) -> String {
        let mut out = format!(
            "probe {}:{} sni={}: {}/{} address(es) healthy\n",
            self.name, self.port, self.sni, self.healthy, self.total
        );
        for a in &self.addresses {
            let ms = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.1} ms"));
            let _ = write!(
                out,
                "  {:<40} {:<17} tcp {:>10}  tls {:>10}",
                a.address.to_string(),
                a.status.as_str(),
                ms(a.tcp_connect_ms),
                ms(a.tls_handshake_ms),
            );
            if let Some(v) = &a.tls_version {
                let _ = write!(out, "  {v}");
            }
            if let Some(e) = &a.error {
                let _ = write!(out, "  error: {e}");
            }
            out.push('\n');
        }
        if let Some(readyz) = &self.readyz {
            out.push_str(&readyz.to_text());
        }
        out
    }

    /// The report as pretty-printed JSON (`--json`).
    pub(crate) fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report always serializes")
    }

    /// The Prometheus text exposition format, for node_exporter's textfile
    /// collector. Labels: `name`, `sni`, `address` (and `status`).
    pub(crate) fn to_prometheus(&self, now: SystemTime) -> String {
        let base = format!(
            "name=\"{}\",sni=\"{}\"",
            escape_label(&self.name),
            escape_label(&self.sni)
        );
        let mut out = String::new();
        let mut family = |name: &str, kind: &str, help: &str, rows: Vec<(String, String)>| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (labels, value) in rows {
                let _ = writeln!(out, "{name}{{{labels}}} {value}");
            }
        };
        let per_addr = |a: &AddressReport| format!("{base},address=\"{}\"", a.address);
        family(
            "snirelay_probe_up",
            "gauge",
            "1 when TCP connect and TLS handshake both completed at this address.",
            self.addresses
                .iter()
                .map(|a| {
                    (
                        per_addr(a),
                        u8::from(a.status == Status::Healthy).to_string(),
                    )
                })
                .collect(),
        );
        family(
            "snirelay_probe_status",
            "gauge",
            "1 for the outcome at this address, 0 for the others.",
            self.addresses
                .iter()
                .flat_map(|a| {
                    Status::ALL.iter().map(move |s| {
                        (
                            format!("{},status=\"{}\"", per_addr(a), s.as_str()),
                            u8::from(*s == a.status).to_string(),
                        )
                    })
                })
                .collect(),
        );
        family(
            "snirelay_probe_tcp_connect_seconds",
            "gauge",
            "TCP connect time (only addresses where the connect completed).",
            self.addresses
                .iter()
                .filter_map(|a| Some((per_addr(a), (a.tcp_connect_ms? / 1000.0).to_string())))
                .collect(),
        );
        family(
            "snirelay_probe_tls_handshake_seconds",
            "gauge",
            "TLS handshake time on the connected socket (only completed handshakes).",
            self.addresses
                .iter()
                .filter_map(|a| Some((per_addr(a), (a.tls_handshake_ms? / 1000.0).to_string())))
                .collect(),
        );
        family(
            "snirelay_probe_addresses",
            "gauge",
            "Addresses the name resolved to.",
            vec![(base.clone(), self.total.to_string())],
        );
        family(
            "snirelay_probe_healthy_addresses",
            "gauge",
            "Addresses that completed the handshake.",
            vec![(base.clone(), self.healthy.to_string())],
        );
        if let Some(readyz) = &self.readyz {
            family(
                "snirelay_probe_readyz_up",
                "gauge",
                "1 when the edge's /readyz (--readyz) answered 200.",
                vec![(
                    format!("{base},url=\"{}\"", escape_label(&readyz.url)),
                    u8::from(readyz.ready).to_string(),
                )],
            );
        }
        let secs = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        family(
            "snirelay_probe_last_run_timestamp_seconds",
            "gauge",
            "When this probe ran (Unix time).",
            vec![(base.clone(), secs.to_string())],
        );
        out
    }
}

/// Escapes a Prometheus label value: backslash, double quote, newline.
fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Resolves NAME and probes every address in parallel.
pub(crate) async fn run(args: &ProbeArgs) -> Result<Report, ProbeError> {
    let sni = args.sni.clone().unwrap_or_else(|| args.name.clone());
    let server_name =
        ServerName::try_from(sni.clone()).map_err(|_| ProbeError::ServerName(sni.clone()))?;
    let connector = TlsConnector::from(Arc::new(client_config(args)?));

    let resolved = tokio::net::lookup_host((args.name.as_str(), args.port))
        .await
        .map_err(|source| ProbeError::Resolve {
            name: args.name.clone(),
            port: args.port,
            source,
        })?;
    let mut addresses: Vec<SocketAddr> = Vec::new();
    for addr in resolved {
        if !addresses.contains(&addr) {
            addresses.push(addr);
        }
    }
    if addresses.is_empty() {
        return Err(ProbeError::NoAddress {
            name: args.name.clone(),
            port: args.port,
        });
    }

    let mut tasks = tokio::task::JoinSet::new();
    for (index, addr) in addresses.iter().copied().enumerate() {
        let connector = connector.clone();
        let server_name = server_name.clone();
        let budget = args.timeout;
        tasks.spawn(async move { (index, probe_one(addr, connector, server_name, budget).await) });
    }
    let mut reports: Vec<Option<AddressReport>> = vec![None; addresses.len()];
    while let Some(done) = tasks.join_next().await {
        let (index, report) = done.expect("a probe task never panics");
        reports[index] = Some(report);
    }
    let reports = reports.into_iter().flatten().collect();
    let report = Report::new(args.name.clone(), sni, args.port, reports);
    Ok(match &args.readyz {
        Some(url) => report.with_readyz(readyz::check(url, args.timeout).await),
        None => report,
    })
}

/// One address, one socket: connect, then handshake, within `budget` overall.
async fn probe_one(
    address: SocketAddr,
    connector: TlsConnector,
    server_name: ServerName<'static>,
    budget: Duration,
) -> AddressReport {
    let mut report = AddressReport {
        address,
        status: Status::Healthy,
        tcp_connect_ms: None,
        tls_handshake_ms: None,
        tls_version: None,
        error: None,
    };
    let deadline = Instant::now() + budget;
    let started = Instant::now();
    let stream = match tokio::time::timeout_at(deadline, TcpStream::connect(address)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            report.status = if e.kind() == io::ErrorKind::ConnectionRefused {
                Status::Refused
            } else {
                Status::ConnectFailed
            };
            report.error = Some(e.to_string());
            return report;
        }
        Err(_) => {
            report.status = Status::ConnectTimeout;
            report.error = Some(format!("no TCP connection within {budget:?}"));
            return report;
        }
    };
    report.tcp_connect_ms = Some(millis(started.elapsed()));
    let _ = stream.set_nodelay(true);

    let handshake_started = Instant::now();
    match tokio::time::timeout_at(deadline, connector.connect(server_name, stream)).await {
        Ok(Ok(mut tls)) => {
            report.tls_handshake_ms = Some(millis(handshake_started.elapsed()));
            let (_, session) = tls.get_ref();
            let mut version = session
                .protocol_version()
                .and_then(|v| v.as_str())
                .unwrap_or("unknown")
                .to_owned();
            if let Some(alpn) = session.alpn_protocol() {
                let _ = write!(version, " alpn={}", String::from_utf8_lossy(alpn));
            }
            report.tls_version = Some(version);
            // A polite close; its outcome does not change the verdict.
            let _ = timeout(Duration::from_millis(200), tls.shutdown()).await;
        }
        Ok(Err(e)) => {
            report.status = Status::HandshakeFailed;
            report.error = Some(handshake_error(&e));
        }
        Err(_) => {
            report.status = Status::HandshakeTimeout;
            report.error = Some(format!("TLS handshake not complete within {budget:?}"));
        }
    }
    report
}

fn handshake_error(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::UnexpectedEof => {
            "connection closed during the handshake (is the backend down?)".to_owned()
        }
        _ => e.to_string(),
    }
}

fn millis(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0
}

/// The TLS client: trust (system store, `--ca`, or `--insecure`) and an
/// optional client certificate.
fn client_config(args: &ProbeArgs) -> Result<ClientConfig, ProbeError> {
    let builder =
        ClientConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()?;
    let builder = if args.insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider())))
    } else {
        builder.with_root_certificates(trusted_roots(args.ca.as_deref())?)
    };
    let config = match (&args.client_cert, &args.client_key) {
        (Some(cert), Some(key)) => {
            let chain = read_certs(cert)?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| ProbeError::Pem {
                path: key.clone(),
                message: format!("no usable private key: {e}"),
            })?;
            builder.with_client_auth_cert(chain, key)?
        }
        _ => builder.with_no_client_auth(),
    };
    Ok(config)
}

/// The CA certificates a client trusts: those of `ca` (a PEM file) when
/// given, else the system store's.
pub(crate) fn trusted_roots(ca: Option<&Path>) -> Result<RootCertStore, ProbeError> {
    let mut roots = RootCertStore::empty();
    match ca {
        Some(path) => {
            for cert in read_certs(path)? {
                roots.add(cert).map_err(|e| ProbeError::Pem {
                    path: path.to_owned(),
                    message: format!("not a usable CA certificate: {e}"),
                })?;
            }
        }
        None => add_system_roots(&mut roots).map_err(ProbeError::NoRoots)?,
    }
    Ok(roots)
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, ProbeError> {
    let bytes = std::fs::read(path).map_err(|source| ProbeError::Read {
        path: path.to_owned(),
        source,
    })?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ProbeError::Pem {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(ProbeError::Pem {
            path: path.to_owned(),
            message: "no PEM certificate in the file".to_owned(),
        });
    }
    Ok(certs)
}

/// Writes `text` to `path` atomically: a temporary file in the same
/// directory, flushed to disk, then renamed over `path`.
pub(crate) fn write_textfile(path: &Path, text: &str) -> Result<(), ProbeError> {
    let fail = |source| ProbeError::Textfile {
        path: path.to_owned(),
        source,
    };
    let file_name = path
        .file_name()
        .ok_or_else(|| fail(io::Error::new(io::ErrorKind::InvalidInput, "not a file")))?;
    // node_exporter reads only `*.prom`, so the temporary name is ignored.
    let tmp = path.with_file_name(format!(
        ".{}.{}.tmp",
        file_name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| {
        use std::io::Write as _;
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(fail)
}

#[cfg(test)]
mod tests {
    use crate::cli::probe::*;

    fn address(port: u16, status: Status) -> AddressReport {
        AddressReport {
            address: SocketAddr::from(([192, 0, 2, 1], port)),
            status,
            tcp_connect_ms: Some(1.5),
            tls_handshake_ms: (status == Status::Healthy).then_some(12.25),
            tls_version: None,
            error: None,
        }
    }

    fn report(statuses: &[Status]) -> Report {
        let addresses = statuses
            .iter()
            .enumerate()
            .map(|(i, &s)| address(i as u16 + 1, s))
            .collect();
        Report::new("edge".into(), "a\"b".into(), 443, addresses)
    }

    #[test]
    fn exit_code_is_0_all_1_some_2_none() {
        assert_eq!(report(&[Status::Healthy, Status::Healthy]).exit_code, 0);
        assert_eq!(report(&[Status::Healthy, Status::Refused]).exit_code, 1);
        assert_eq!(
            report(&[Status::HandshakeFailed, Status::Refused]).exit_code,
            2
        );
        assert_eq!(report(&[]).exit_code, 2);
    }

    #[test]
    fn an_edge_that_is_not_ready_makes_the_exit_code_2() {
        let readyz = |ready: bool| ReadyzReport {
            url: "http://192.0.2.1:9901/readyz".into(),
            ready,
            status: Some(if ready { 200 } else { 503 }),
            down: Vec::new(),
            error: None,
        };
        let healthy = report(&[Status::Healthy]);
        assert_eq!(healthy.clone().with_readyz(readyz(true)).exit_code, 0);
        let not_ready = healthy.with_readyz(readyz(false));
        assert_eq!(not_ready.exit_code, 2);
        assert!(
            not_ready
                .to_prometheus(UNIX_EPOCH)
                .contains("snirelay_probe_readyz_up{name=\"edge\",sni=\"a\\\"b\",url=\"http://192.0.2.1:9901/readyz\"} 0\n")
        );
        assert!(
            not_ready
                .to_text()
                .ends_with("readyz http://192.0.2.1:9901/readyz: 503 not ready\n")
        );
    }

    #[test]
    fn prometheus_text_escapes_labels_and_converts_to_seconds() {
        let text = report(&[Status::Healthy, Status::Refused])
            .to_prometheus(UNIX_EPOCH + Duration::from_secs(1_700_000_000));
        let labels = "name=\"edge\",sni=\"a\\\"b\"";
        assert!(text.contains(&format!(
            "snirelay_probe_tls_handshake_seconds{{{labels},address=\"192.0.2.1:1\"}} 0.01225\n"
        )));
        assert!(text.contains(&format!(
            "snirelay_probe_up{{{labels},address=\"192.0.2.1:2\"}} 0\n"
        )));
        assert!(text.contains(&format!(
            "snirelay_probe_status{{{labels},address=\"192.0.2.1:2\",status=\"refused\"}} 1\n"
        )));
        assert!(text.contains(&format!("snirelay_probe_healthy_addresses{{{labels}}} 1\n")));
        assert!(text.contains(&format!(
            "snirelay_probe_last_run_timestamp_seconds{{{labels}}} 1700000000\n"
        )));
    }
}
