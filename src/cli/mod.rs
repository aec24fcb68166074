//! The command line: `snirelay [run] --config FILE`, `snirelay check --config FILE`,
//! `snirelay probe NAME --sni HOST [--readyz URL]`, `snirelay certs`, `snirelay ctl ...` (the control API
//! of the admin listener named in the configuration file), `snirelay
//! import-haproxy FILE`.
//!
//! Kept in the library so that documentation (a man page) can be generated
//! from the same definition the binary parses; so is what `check` prints
//! about a valid file (`check_summary`).
//!
//! Not here: carrying a command out ([`commands`]), or the configuration's
//! own checks ([`crate::config`]).

pub(crate) mod certs;
mod commands;
pub(crate) mod ctl;
pub(crate) mod haproxy_import;
pub mod manual;
pub(crate) mod probe;
pub(crate) mod readyz;

pub use commands::main;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::config::Config;
use crate::logging::LogFormat;
use crate::wire::sni::PatternRef;

/// Where the packaged configuration lives.
pub(crate) const DEFAULT_CONFIG_PATH: &str = "/etc/snirelay/snirelay.toml";

/// snirelay: a layer-4 relay that routes TLS connections by SNI without
/// terminating TLS.
#[derive(Debug, Parser)]
#[command(name = "snirelay", version = crate::VERSION, about, long_about = None)]
// `snirelay --config FILE` is `run`: its options come before a command
// only when there is none (`snirelay -c FILE check` is a usage error, not
// a check of the default file).
#[command(args_conflicts_with_subcommands = true)]
pub struct Cli {
    /// What to do; `run` when left out.
    #[command(subcommand)]
    pub command: Option<Command>,

    /// `run`'s options, for `snirelay` without a command.
    #[command(flatten)]
    pub run: RunArgs,
}

impl Cli {
    /// The command to carry out: the one given, or `run` with the options
    /// given before it.
    pub fn into_command(self) -> Command {
        self.command.unwrap_or(Command::Run(self.run))
    }
}

#[allow(missing_docs)] // clap would print doc comments as help text
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum Command {
    /// Serve the configuration (the default).
    Run(RunArgs),
    /// Validate the configuration: prints `ok` (then a line per default route, and a note per backend with `source = "client"`), or every problem found; exits 1 on error.
    Check(CheckArgs),
    /// Time TCP connect and TLS handshake per address of NAME, as a client sees them.
    ///
    /// For each address NAME resolves to (system resolver), in parallel and
    /// each within --timeout: connect, then a full TLS handshake on the same
    /// socket. A relay whose backend is down still accepts TCP, so only a
    /// completed handshake counts as healthy. Exits 0 when every address is
    /// healthy, 1 when some are, 2 when none is (or NAME does not resolve).
    Probe(ProbeArgs),
    /// Report the certificate each backend presents for each name routed to it.
    ///
    /// For every route of every listener of --config: each exact name, and
    /// for a `*.suffix` pattern the name `snirelay-check.suffix`, at most
    /// --max-names distinct names per backend (the rest are counted as
    /// skipped). Each name is sent as SNI to every address of the route's
    /// backend (a fixed list, a `resolve` answer now, or where a cluster's
    /// lookup sends that name now): for a TCP
    /// listener, after the PROXY LOCAL header when the backend speaks
    /// PROXY, in a complete TLS handshake offering h2 and http/1.1; for a
    /// QUIC listener, in a complete QUIC handshake offering h3. Each within
    /// --timeout, --concurrency at once. Each row gives the certificate's
    /// subject names, issuer and not-after, whether it covers the name (RFC
    /// 6125), whether it verifies (system roots or --ca) and the ALPN the
    /// backend selected; a certificate that also covers a name the listener
    /// routes to another backend (or a cluster sends elsewhere), where h2
    /// or h3 was selected, is a coalescing risk. QUIC routes to a backend
    /// sent PROXY v2 headers over UDP, and default routes, are listed as
    /// not checked. A separate command from `check`, which reads the file only:
    /// this one connects to every backend.
    Certs(CertsArgs),
    /// Control a running relay through its admin listener (`[admin]` listen
    /// and `token_file` of `--config`).
    ///
    /// Exits 0 when the relay accepted the request, 1 when it refused it
    /// (the answer is printed), 2 when it could not be asked.
    Ctl(CtlArgs),
    /// Translate an HAProxy configuration (the mode tcp subset of an SNI edge) into snirelay TOML on stdout.
    ///
    /// Every HAProxy line is accounted for in a comment: beside the key it
    /// became, as needing no key (snirelay does the same without one), or
    /// as not translated (with its line number and why; stderr lists
    /// these too). Exits 0 when no line is left untranslated (lines that
    /// need no key do not count), 1 when some are (the TOML is still
    /// printed), 2 when FILE cannot be read or has no mode tcp frontend.
    ImportHaproxy(ImportHaproxyArgs),
}

/// `snirelay run [--config FILE] [--log-format F] [--log-level L]
/// [--takeover PATH]`, also `snirelay` alone.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct RunArgs {
    /// The configuration file.
    #[arg(long, short = 'c', default_value = DEFAULT_CONFIG_PATH)]
    pub config: PathBuf,

    /// Log line format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Log filter: a level (`info`, `debug`) or RUST_LOG-style directives.
    #[arg(long, default_value = "info")]
    pub log_level: String,

    /// Binary upgrade: take the listening sockets of the relay serving this
    /// Unix socket (if one does), tell it to drain once this one accepts,
    /// then serve the socket for the next upgrade.
    #[arg(long, value_name = "PATH")]
    pub takeover: Option<PathBuf>,
}

/// `snirelay check [--config FILE]`
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct CheckArgs {
    /// The configuration file.
    #[arg(long, short = 'c', default_value = DEFAULT_CONFIG_PATH)]
    pub config: PathBuf,
}

/// `snirelay import-haproxy FILE`
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct ImportHaproxyArgs {
    /// The HAProxy configuration file (haproxy.cfg).
    pub file: PathBuf,

    /// Print, instead of the TOML, each HAProxy line that decides a
    /// connection's outcome beside the snirelay key and value that make
    /// the same decision, or why none does ("no key", "not translated"):
    /// a table to audit a migration by. Same exit codes.
    #[arg(long)]
    pub check: bool,
}

/// `snirelay ctl [--config FILE] [--json] SUBCOMMAND`
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct CtlArgs {
    /// The configuration file whose `[admin]` says where and how to ask.
    #[arg(long, short = 'c', global = true, default_value = DEFAULT_CONFIG_PATH)]
    pub config: PathBuf,

    /// Print the relay's JSON answer instead of text.
    #[arg(long, global = true)]
    pub json: bool,

    #[allow(missing_docs)] // clap would print doc comments as help text
    #[command(subcommand)]
    pub action: CtlAction,
}

#[allow(missing_docs)] // clap would print doc comments as help text
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum CtlAction {
    /// List every backend address with its state, health and open connections.
    Addresses,
    /// Take ADDR (IP:port) out of new connections; open ones continue.
    Drain(CtlAddress),
    /// Take ADDR out of new connections and close open ones within drain_timeout.
    Maint(CtlAddress),
    /// Put ADDR back into service.
    Ready(CtlAddress),
    // Connections (issue 16, point 3).
    /// List the open relayed connections (every page), filtered.
    Connections(CtlFilter),
    /// Close the matching connections now (close reason `admin`); needs a filter.
    Close(CtlFilter),
    /// Whether the relay is ready (`/readyz`) and, with `[admin] ready_requires`, which backends are down; exits 1 when not ready.
    Status,
    /// The per-source admission table: open connections, recent rate, refusals by reason, last seen.
    Sources(CtlSources),
    /// Clear one source's counters (its open connections stay counted).
    ClearSource(CtlSourceKey),
}

/// `snirelay ctl sources [--sort open|rate|refused] [--limit N]`
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct CtlSources {
    /// Order: `open` connections, recent `rate`, or `refused` connections, highest first.
    #[arg(long, default_value = "refused", value_parser = ["open", "rate", "refused"])]
    pub sort: String,
    /// Rows shown.
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// Only this listener's tables.
    #[arg(long)]
    pub listener: Option<String>,
    /// Only this route's table (`[route.limits]`).
    #[arg(long)]
    pub route: Option<String>,
}

/// `snirelay ctl clear-source KEY`
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct CtlSourceKey {
    /// The source's key, as `ctl sources` shows it.
    pub key: String,
    /// Only in this listener's tables (default: every table).
    #[arg(long)]
    pub listener: Option<String>,
    /// Only in this route's table.
    #[arg(long)]
    pub route: Option<String>,
}

impl CtlSources {
    /// The query string of `GET /sources`.
    pub fn query(&self) -> String {
        let mut query = format!("sort={}&limit={}", self.sort, self.limit);
        for (key, value) in [("listener", &self.listener), ("route", &self.route)] {
            if let Some(value) = value {
                query.push_str(&format!("&{key}={}", encode(value)));
            }
        }
        query
    }
}

impl CtlSourceKey {
    /// The path and query of `DELETE /sources/{key}`.
    pub(crate) fn path(&self) -> String {
        let filters: Vec<String> = [("listener", &self.listener), ("route", &self.route)]
            .into_iter()
            .filter_map(|(key, value)| value.as_ref().map(|v| format!("{key}={}", encode(v))))
            .collect();
        let mut path = format!("/sources/{}", encode(&self.key));
        if !filters.is_empty() {
            path.push('?');
            path.push_str(&filters.join("&"));
        }
        path
    }
}

/// Which connections `ctl connections` lists and `ctl close` closes; the
/// filters combine.
#[derive(Debug, Clone, PartialEq, Eq, Default, clap::Args)]
pub struct CtlFilter {
    /// The server name (exact).
    #[arg(long)]
    pub sni: Option<String>,
    /// The route's name.
    #[arg(long)]
    pub route: Option<String>,
    /// The backend's name.
    #[arg(long)]
    pub backend: Option<String>,
    /// The listener's name.
    #[arg(long)]
    pub listener: Option<String>,
    /// An IP or CIDR prefix: the measured or the claimed client.
    #[arg(long)]
    pub client: Option<String>,
    /// One connection, by the id of its log line.
    #[arg(long)]
    pub id: Option<u64>,
    /// `tcp` (connections) or `quic` (QUIC flows).
    #[arg(long)]
    pub protocol: Option<String>,
}

impl CtlFilter {
    /// The filters as a query string (`sni=a.example&route=web`), values
    /// percent-encoded; empty when no filter is set.
    pub fn query(&self) -> String {
        let id = self.id.map(|id| id.to_string());
        [
            ("sni", &self.sni),
            ("route", &self.route),
            ("backend", &self.backend),
            ("listener", &self.listener),
            ("client", &self.client),
            ("id", &id),
            ("protocol", &self.protocol),
        ]
        .into_iter()
        .filter_map(|(key, value)| value.as_ref().map(|v| format!("{key}={}", encode(v))))
        .collect::<Vec<_>>()
        .join("&")
    }
}

/// Percent-encodes all but RFC 3986's unreserved characters.
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An address of a backend, named by IP:port.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct CtlAddress {
    /// The address, as `IP:port` (`[v6]:port`).
    pub addr: String,
    /// The backend; needed only when several backends have ADDR.
    #[arg(long)]
    pub backend: Option<String>,
}

/// `snirelay probe NAME --sni HOST [--port 443] [--json] ...`
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct ProbeArgs {
    /// Host name (resolved through the system resolver, as real clients do) or IP address.
    pub name: String,

    /// Server name sent in the ClientHello and verified in the certificate; NAME when left out.
    #[arg(long)]
    pub sni: Option<String>,

    /// TCP port.
    #[arg(long, default_value_t = 443)]
    pub port: u16,

    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,

    /// Trust only the CA certificates in this PEM file (default: the system store).
    #[arg(long, value_name = "FILE", conflicts_with = "insecure")]
    pub ca: Option<PathBuf>,

    /// Do not verify the server certificate (the handshake still completes).
    #[arg(long)]
    pub insecure: bool,

    /// Client certificate chain (PEM) for origins that require mutual TLS.
    #[arg(long, value_name = "FILE", requires = "client_key")]
    pub client_cert: Option<PathBuf>,

    /// Private key (PEM) of --client-cert.
    #[arg(long, value_name = "FILE", requires = "client_cert")]
    pub client_key: Option<PathBuf>,

    /// Budget per address for TCP connect plus TLS handshake.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,

    /// Also ask the edge's admin listener whether it is ready (`http://HOST:PORT[/readyz]`); an answer other than 200 makes the exit code 2.
    #[arg(long, value_name = "URL")]
    pub readyz: Option<String>,

    /// Also write the result in Prometheus text format to this file
    /// (atomically: a temporary file renamed over it), for node_exporter's
    /// textfile collector.
    #[arg(long, value_name = "PATH")]
    pub textfile: Option<PathBuf>,
}

/// `snirelay certs [--config FILE] [--format text|json] [--ca FILE] ...`
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct CertsArgs {
    /// The configuration file whose routes and backends are checked.
    #[arg(long, short = 'c', default_value = DEFAULT_CONFIG_PATH)]
    pub config: PathBuf,

    /// Output: `text` (a table) or `json` (one document).
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    pub format: String,

    /// Trust only the CA certificates in this PEM file (default: the system store).
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,

    /// Budget per name and address for TCP connect plus TLS handshake, or for the QUIC handshake.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,

    /// Handshakes in flight at once.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,

    /// Distinct names checked per backend at most (each over every listener routing it there), in file order; the rest are counted as skipped.
    #[arg(long, default_value_t = crate::backend::certificate_watch::MAX_NAMES_PER_BACKEND)]
    pub max_names: usize,
}

/// What `check` prints after `ok` for a valid file: one line per default
/// route (`sni = ["*"]`), since such a listener relays names it does not
/// list instead of refusing them. Nothing for a file without one.
pub(crate) fn check_summary(config: &Config) -> Vec<String> {
    let mut lines = Vec::new();
    for listener in &config.listeners {
        for route in &listener.routes {
            if !listener.patterns(route).any(|p| p == PatternRef::Any) {
                continue;
            }
            let alpn = if route.alpn.is_empty() {
                String::new()
            } else {
                format!(" for alpn {}", route.alpn.join(","))
            };
            lines.push(format!(
                "listener {}: default route {}{alpn} -> backend {} (names matching no other route are relayed)",
                listener.name, route.name, route.backend.name
            ));
        }
    }
    // Known only where it runs: `check` may run elsewhere, unprivileged.
    for backend in config.backends.values() {
        let own = backend
            .members
            .iter()
            .any(|m| m.source == Some(crate::config::Egress::Client));
        if backend.egress == crate::config::Egress::Client || own {
            lines.push(format!(
                "note: backend {}: source = \"client\" needs CAP_NET_ADMIN (or CAP_NET_RAW) when \
                 run, and policy routing that returns the backend's replies through this host \
                 (docs/operations.md, \"Transparent source\")",
                backend.name
            ));
        }
    }
    lines
}
