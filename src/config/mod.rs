//! Configuration: the TOML file turned once into an immutable, validated
//! snapshot.
//!
//! Two types, as in sozu: [`file::FileConfig`] is the file as written (serde,
//! unknown keys refused, `Option` for "not set"); [`Config`] is what the relay
//! runs on, with no `Option` left: durations, socket addresses, compiled SNI
//! matchers and resolved backend references. [`Config::from_toml`] is the only
//! way from one to the other and reports *every* problem it finds, each naming
//! its key and the bad value, so `snirelay check` can list them all at once.
//! `effective` is the way back: `Config::to_file` writes every key with its
//! value in force (what `/config` shows, and what a round trip re-reads).
//!
//! The parts: [`keys`] declares every key once (type, default, range,
//! unit, doc, TCP/QUIC), and the reference and man page are written from it
//! ([`mod@reference`]); `check` (one file per section) builds [`Config`];
//! `settings` holds the validated settings the runtime modules read, as
//! plain data, so that configuration imports no runtime module
//! (`tests/it/module_graph.rs` holds it to that).
//!
//! Precedence: a value set in a section wins; otherwise the `DEFAULT_*`
//! constant ([`defaults`]) applies. (Later settings that exist both globally and per
//! listener resolve as section beats global beats default; a route's relay
//! timeouts as route beats listener beats default.)
//!
//! Reading the file happens on a thread of its own with a timeout
//! ([`reader`]): the path may name a FIFO with no writer or sit on a hung
//! mount, and neither may stop the event loop from handling SIGTERM.
//! `[admin]`'s validated types are in [`mod@admin`].
//!
//! Not here: binding sockets or any other I/O beyond reading the file.

mod admin;
mod check;
mod defaults;
pub(crate) mod effective;
pub(crate) mod file;
pub mod keys;
mod ranges;
mod reader;
pub mod reference;
pub(crate) mod settings;
mod shape;

pub use admin::*;
pub use defaults::*;
use ranges::*;
pub(crate) use reader::*;

pub use file::FileConfig;
/// The validated settings, plain data the runtime modules read (see
/// `settings`).
pub(crate) use settings::{
    AddressSource, DnsSource, FastestMeasure, HealthCheck, HealthKind, Inbound, LimitKey,
    LookupHeader, LookupTls, NodeAddress, NodeChoice, ProxyTlv, Timeouts, TlvSource, TlvValue,
    TrustedName,
};
pub use settings::{
    Attempts, Backend, BackupPolicy, Bandwidth, ByteRate, Cluster, ClusterLookup, ClusterProtocol,
    Egress, Keepalive, Limits, Member, Mode, Outbound, Policy, Rate, SourceAddresses,
};
pub(crate) use settings::{Facility, Log, LogTarget, SyslogAddress, SyslogFormat};

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroU64};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::wire::fingerprint::Ja4Pattern;
use crate::wire::matcher::{NameIndex, SniMatcher};
use crate::wire::sni::PatternRef;
use check::Checker;
use shape::take_misshapen;

/// The validated configuration one set of connections runs on.
#[derive(Debug, Clone)]
pub struct Config {
    /// `[global]`: process-wide settings.
    pub global: Global,
    /// The `[[listener]]` tables, in file order.
    pub listeners: Vec<Arc<Listener>>,
    /// The `[backend.NAME]` tables, by name.
    pub backends: BTreeMap<String, Arc<Backend>>,
    /// The admin listener (`/metrics`, `/healthz`, `/readyz`, and `/config`
    /// with `expose_config`); none without `[admin]`.
    pub admin: Option<Admin>,
    /// `[log]`: where log lines go; read at start.
    pub log: Log,
    /// What the file allows but is likely a mistake (a backend sending
    /// PROXY headers to a QUIC server, say), each under its key: `check`
    /// prints them, the relay logs them at start and at each reload.
    pub warnings: Vec<Problem>,
}

/// `[global]`: process-wide settings; each listener's own keys beat them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Global {
    /// `max_connections`: open client connections for the whole process; at the
    /// cap accepting pauses (clients wait in the kernel backlog).
    pub max_connections: usize,
    /// `drain_timeout`: how long open connections may finish on stop; after a
    /// reload, the window over which changed routes' connections close.
    pub drain_timeout: Duration,
    /// Runtime worker threads.
    pub threads: usize,
    /// `[global] splice`: the value of a listener's `splice` when it sets
    /// none (each listener's own is [`Listener::splice`]).
    pub splice: bool,
    /// Bytes per pooled pipe. Global only: pipes are pooled process-wide, so
    /// they all have one size.
    pub pipe_size: usize,
    /// Pipes open at once, process-wide (each is two descriptors).
    pub max_pipes: usize,
    /// New connections per second the process accepts; `None` is unlimited.
    /// Above it, connections wait in the kernel backlog (accepting is paced),
    /// like HAProxy's `maxconnrate`. Memory: one GCRA cell for the process;
    /// hot path: one compare-and-swap before each `accept`.
    pub max_connection_rate: Option<NonZeroU32>,
    /// `coalescing_risk`: what `snirelay certs` makes of a certificate
    /// that lets a browser reuse one backend's connection for a name
    /// routed to another. The relay itself never reads it.
    pub coalescing_risk: CoalescingRisk,
}

/// `[global] coalescing_risk`: how `snirelay certs` reports a certificate
/// presented for a name routed to one backend that also covers a name
/// routed to another, with an ALPN that lets a browser reuse the
/// connection (h2, RFC 9113 §9.1.1; h3, RFC 9114 §3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CoalescingRisk {
    /// `"warn"`: printed as a warning; exit code 1.
    #[default]
    Warn,
    /// `"error"`: printed as an error; exit code 2.
    Error,
}

impl CoalescingRisk {
    /// Every choice, as the file writes them.
    pub const ALL: [CoalescingRisk; 2] = [CoalescingRisk::Warn, CoalescingRisk::Error];

    /// As written in the file.
    pub const fn as_str(self) -> &'static str {
        match self {
            CoalescingRisk::Warn => "warn",
            CoalescingRisk::Error => "error",
        }
    }
}

/// One `[[listener]]`: where clients connect, how their hellos are read, and
/// the routes they may take.
#[derive(Debug, Clone)]
pub struct Listener {
    /// `name`: the listener's name, used by routes and in logs.
    pub name: String,
    /// `listen`: the addresses bound (IPv6 sockets are v6-only).
    pub listen: Vec<SocketAddr>,
    /// `backlog`: kernel accept queue per address, in connections.
    pub backlog: u32,
    /// `client_hello_timeout`: from accept until the ClientHello is complete;
    /// else `hello_timeout`.
    pub client_hello_timeout: Duration,
    /// `idle_timeout`: close a relayed connection when no byte moved either way
    /// for this long.
    pub idle_timeout: Duration,
    pub(crate) max_client_hello_bytes: usize,
    pub(crate) no_sni: NoSni,
    /// The `[[route]]` tables of this listener.
    pub routes: Vec<Route>,
    /// Every route's patterns, each route's in turn (`Route::patterns`
    /// are its ids): stored once, and shared with the route table each
    /// generation compiles (`flow::route::RouteTable`).
    pub(crate) names: Arc<NameIndex>,
    /// Inbound PROXY protocol; `None` when the listener has no
    /// `[listener.proxy_protocol]` section (no preface stage at all).
    pub proxy_protocol: Option<Inbound>,
    /// Set SO_REUSEPORT on this listener's sockets.
    pub reuse_port: bool,
    /// Relay with splice(2) (listener beats global beats `DEFAULT_SPLICE`).
    pub splice: bool,
    /// `[listener.limits]`: admission (see `admit`).
    pub limits: Limits,
    // Hello rules (TLS version, ECH); see `route`.
    /// Hellos offering nothing newer are refused (`tls_version`); `None`
    /// accepts every version (`DEFAULT_MIN_TLS_VERSION`).
    pub min_tls_version: Option<TlsVersion>,
    /// What a hello with ECH does, on routes that do not say (`DEFAULT_ECH`).
    pub ech: EchPolicy,
    /// The config ids of the edge's real ECH configurations, ascending and
    /// distinct; empty: real and GREASE ECH cannot be told apart.
    pub ech_config_ids: Vec<u8>,
    // TCP keepalive on client sockets (issue 15).
    /// `tcp_keepalive`: set on the listening sockets, whose accepted
    /// sockets inherit it (see `sockopt::set_keepalive`); `None`: off.
    pub tcp_keepalive: Option<Keepalive>,
    // Relay timeouts beside `idle_timeout`; a route may override all three
    // (`Route::timeouts`).
    /// `half_close_timeout`: once one side has sent FIN, close when no byte moved
    /// for this long.
    pub half_close_timeout: Duration,
    /// `None`: connections live as long as they like.
    pub max_connection_lifetime: Option<Duration>,
    // QUIC listeners (issue 18).
    /// `protocol`: TCP (TLS over TCP) or QUIC (UDP datagrams).
    pub protocol: Protocol,
    // Client fingerprints (see `wire::fingerprint`).
    /// `fingerprints`: compute and log every hello's JA4 and JA3
    /// ([`DEFAULT_FINGERPRINTS`]); matches and a JA4 limit key compute
    /// them whatever this says.
    pub fingerprints: bool,
    /// `[listener.match]`: JA4 rules every hello on the listener obeys.
    pub hello_match: HelloMatch,
    // Bandwidth limits (issue 33).
    /// `rate_up`, `rate_down`, `rate_per_source_up`,
    /// `rate_per_source_down` and `burst`: those of its routes that set
    /// none, and of its `no_sni` backend.
    pub bandwidth: Bandwidth,
}

/// `fingerprints` when unset: off, so a hello costs no fingerprint unless
/// something reads it (Envoy's `tls_inspector` defaults the same way).
pub const DEFAULT_FINGERPRINTS: bool = false;

/// `[listener.match]` / `[route.match]`: JA4 patterns a hello must match one
/// of (`ja4`, when not empty) and none of (`ja4_deny`). Empty: any hello.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HelloMatch {
    /// `ja4`: a hello must match one of these (when not empty).
    pub ja4: Vec<Ja4Pattern>,
    /// `ja4_deny`: a hello matching one of these is refused.
    pub ja4_deny: Vec<Ja4Pattern>,
}

impl HelloMatch {
    /// Whether the rules say nothing (no fingerprint is needed for them).
    pub(crate) fn is_empty(&self) -> bool {
        self.ja4.is_empty() && self.ja4_deny.is_empty()
    }

    /// Whether a hello with this JA4 passes (`None`: no fingerprint, which
    /// passes only rules that say nothing).
    pub(crate) fn allows(&self, ja4: Option<&str>) -> bool {
        if self.is_empty() {
            return true;
        }
        let Some(ja4) = ja4 else {
            return false;
        };
        (self.ja4.is_empty() || self.ja4.iter().any(|p| p.matches(ja4)))
            && !self.ja4_deny.iter().any(|p| p.matches(ja4))
    }
}

// QUIC listeners (issue 18).
/// `protocol`: what a listener binds and reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// TCP sockets carrying TLS.
    #[default]
    Tcp,
    /// UDP sockets carrying QUIC v1/v2; see `quic::socket_task`.
    Quic,
}

impl Protocol {
    /// As written in the file and in log lines.
    pub const fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Quic => "quic",
        }
    }
}

/// `idle_timeout` of a `protocol = "quic"` listener when unset: QUIC's own
/// usual idle timeout (RFC 9000 §10.1 leaves it to the endpoints; 30 s is
/// what quiche, ngtcp2's examples and browsers settle near), since a flow
/// has no FIN and only idleness ends it.
pub(crate) const DEFAULT_QUIC_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

impl Listener {
    /// Pattern → indices into `routes`: one, or several routes of the same
    /// pattern that differ in `alpn`. Built anew on each call, for tools
    /// and tests: routing looks names up in the listener's `names` (the
    /// route table shares them), and the checker finds patterns taken
    /// twice there too.
    pub fn matcher(&self) -> SniMatcher<Vec<usize>> {
        let mut matcher: SniMatcher<Vec<usize>> = SniMatcher::new();
        for (id, route) in self.routes.iter().enumerate() {
            for pattern in self.patterns(route) {
                let pattern = pattern.to_pattern();
                match matcher.get_mut(&pattern) {
                    Some(ids) => ids.push(id),
                    None => {
                        let _ = matcher.insert(&pattern, vec![id]);
                    }
                }
            }
        }
        matcher
    }

    /// The patterns of `route` (one of this listener's): those of `sni`,
    /// then those of `sni_file`.
    pub(crate) fn patterns(
        &self,
        route: &Route,
    ) -> impl ExactSizeIterator<Item = PatternRef<'_>> + '_ {
        self.names.patterns(route.patterns.clone())
    }

    /// The route of pattern `id` (the listener's own id) whose `alpn` set
    /// is `alpn`, if the listener has one. `names` is the index `id`
    /// comes from: where it is this listener's own (an unchanged list
    /// kept across a reload, [`Config::share_unchanged_names`]), the id
    /// finds the route without a lookup by name.
    pub(crate) fn route_of_id(
        &self,
        names: &Arc<NameIndex>,
        id: u32,
        alpn: &[String],
    ) -> Option<&Route> {
        let with_alpn = |id| {
            self.routes
                .get(self.route_index(id))
                .filter(|r| r.alpn == alpn)
        };
        if Arc::ptr_eq(names, &self.names) {
            if let Some(route) = with_alpn(id) {
                return Some(route);
            }
        }
        // Another list, or this id's route has another `alpn` set: by name
        // (a hash lookup in `names`, whatever the number of names).
        self.names.ids(names.pattern(id)).find_map(with_alpn)
    }

    /// The index in `routes` of the route pattern `id` belongs to (the
    /// routes' ids follow one another); `routes.len()` past the last.
    pub(crate) fn route_index(&self, id: u32) -> usize {
        self.routes.partition_point(|r| r.patterns.end <= id)
    }

    /// The listener's relay timeouts: those of its routes that set none,
    /// and of its `no_sni` backend.
    pub(crate) fn timeouts(&self) -> Timeouts {
        Timeouts {
            idle: self.idle_timeout,
            half_close: self.half_close_timeout,
            lifetime: self.max_connection_lifetime,
        }
    }
}

/// `min_tls_version`: a TLS version a hello must offer (or a newer one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    /// TLS 1.0 (`0x0301`).
    V1_0,
    /// TLS 1.1 (`0x0302`).
    V1_1,
    /// TLS 1.2 (`0x0303`).
    V1_2,
    /// TLS 1.3 (`0x0304`).
    V1_3,
}

impl TlsVersion {
    pub(crate) const ALL: [TlsVersion; 4] = [
        TlsVersion::V1_0,
        TlsVersion::V1_1,
        TlsVersion::V1_2,
        TlsVersion::V1_3,
    ];

    /// As written in the file: `"1.2"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            TlsVersion::V1_0 => "1.0",
            TlsVersion::V1_1 => "1.1",
            TlsVersion::V1_2 => "1.2",
            TlsVersion::V1_3 => "1.3",
        }
    }

    /// On the wire (`ProtocolVersion`): 0x0301 … 0x0304.
    pub(crate) const fn wire(self) -> u16 {
        match self {
            TlsVersion::V1_0 => 0x0301,
            TlsVersion::V1_1 => 0x0302,
            TlsVersion::V1_2 => 0x0303,
            TlsVersion::V1_3 => 0x0304,
        }
    }
}

/// `ech`: what a hello carrying an `encrypted_client_hello` extension does
/// once its outer SNI has chosen a route. With `ech_config_ids`, only real
/// ECH (a configured config id) is concerned and GREASE passes as if it
/// had none; without them every ECH hello is (see `route`).
#[derive(Debug, Clone)]
pub enum EchPolicy {
    /// Route it like any other hello.
    Pass,
    /// Refuse it with a `handshake_failure` alert (`ech_rejected`).
    Reject,
    /// Relay it to this backend instead of the route's.
    Backend(Arc<Backend>),
}

impl PartialEq for EchPolicy {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (EchPolicy::Pass, EchPolicy::Pass) | (EchPolicy::Reject, EchPolicy::Reject) => true,
            (EchPolicy::Backend(a), EchPolicy::Backend(b)) => **a == **b,
            _ => false,
        }
    }
}

impl EchPolicy {
    /// As written in the file: `"pass"`, `"reject"` or the backend's name.
    pub fn as_str(&self) -> &str {
        match self {
            EchPolicy::Pass => "pass",
            EchPolicy::Reject => "reject",
            EchPolicy::Backend(backend) => &backend.name,
        }
    }
}

/// What a listener does with a ClientHello that carries no SNI.
#[derive(Debug, Clone)]
pub enum NoSni {
    /// Send an `unrecognized_name` alert and close.
    Reject,
    /// Relay to this backend.
    Backend(Arc<Backend>),
}

/// One `[[route]]`: names on a listener, and the backend they go to.
#[derive(Debug, Clone)]
pub struct Route {
    /// `name`: the route's name in logs, and its identity for per-route limits
    /// (default: its first pattern).
    pub name: String,
    /// The route's patterns, as ids in its listener's `names`
    /// ([`Listener::patterns`]): those of `sni` first, then those of
    /// `sni_file`.
    pub(crate) patterns: Range<u32>,
    /// `sni_file`, found from the configuration file's directory, and how
    /// many of `patterns` are written inline (the rest came from the file).
    pub(crate) sni_file: Option<PathBuf>,
    pub(crate) inline_patterns: usize,
    /// `backend`: the `[backend.NAME]` to relay to.
    pub backend: Arc<Backend>,
    // Per-route admission (see `admit::RouteGate`).
    /// `[route.limits]`; `None` without the table. Unlike a listener's,
    /// `connections_per_source` has no default here: the listener's
    /// already bounds every source.
    pub limits: Option<Limits>,
    /// `max_connections`: open connections on the route; `None` is unlimited.
    pub max_connections: Option<NonZeroU32>,
    /// The route's relay timeouts: each one its own where set, else the
    /// listener's.
    pub timeouts: Timeouts,
    /// `case_sensitive_names` and `ldh_names`: which spellings of a name
    /// the route's patterns take.
    pub names: NameRules,
    // Hello rules (ALPN, ECH); see `route`.
    /// The route takes only hellos offering one of these protocols (as
    /// written, distinct); empty: any hello.
    pub alpn: Vec<String>,
    /// The route's own `ech`; `None` follows the listener's.
    pub ech: Option<EchPolicy>,
    /// `[route.match]`: JA4 rules a hello on this route obeys, after the
    /// listener's.
    pub hello_match: HelloMatch,
    /// The route's bandwidth limits: each its own where set, else the
    /// listener's.
    pub bandwidth: Bandwidth,
}

/// Which spellings of a name a route's patterns take (both off: any
/// valid host name, compared lowercased).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NameRules {
    /// `case_sensitive_names`: the labels a pattern names must be in lower
    /// case in the client's name (HAProxy's ACLs without `-i`).
    pub case_sensitive: bool,
    /// `ldh_names`: no `_` in any label (a `[a-z0-9-]` regex).
    pub ldh: bool,
}

/// One problem in a configuration file: the key, in TOML path form, and
/// what is wrong with its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The key, in TOML path form.
    pub key: String,
    pub(crate) message: String,
}

impl Problem {
    /// What is wrong, without the key.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be opened or read.
    #[error("{path}: cannot read: {source}")]
    Read {
        /// The configuration file.
        path: PathBuf,
        /// What the read failed with.
        source: std::io::Error,
    },
    /// Reading took longer than `CONFIG_READ_TIMEOUT` (a FIFO with no writer, a hung mount).
    #[error(
        "{path}: reading did not finish within {}s (a FIFO with no writer, or a hung mount?)",
        CONFIG_READ_TIMEOUT.as_secs()
    )]
    ReadTimeout {
        /// The configuration file.
        path: PathBuf,
    },
    /// An earlier read that timed out is still blocked, so no new one starts.
    #[error("{path}: an earlier read of the file has not finished yet; not reading it again")]
    ReadStuck {
        /// The configuration file.
        path: PathBuf,
    },
    /// The file is larger than `MAX_CONFIG_BYTES`.
    #[error("{path}: larger than {} bytes", MAX_CONFIG_BYTES)]
    TooLarge {
        /// The configuration file.
        path: PathBuf,
    },
    /// The file is not valid TOML, or does not fit the file model (an
    /// unknown key, a value of the wrong type).
    #[error("{path}: {message}")]
    Syntax {
        /// The configuration file.
        path: PathBuf,
        /// The parser's message, with the line and column.
        message: String,
    },
    /// The file parsed but some values are out of range or disagree.
    #[error("{path}: {} problem(s):\n{}", problems.len(), list(problems))]
    Invalid {
        /// The configuration file.
        path: PathBuf,
        /// Every problem found.
        problems: Vec<Problem>,
    },
}

/// A serde message without the Rust type names it may carry (`expected
/// struct ProxyProtocolSection`, `expected i64`): what the shape check
/// ([`shape`]) did not catch still reads as the file's words.
fn plain_words(message: &str) -> String {
    let mut out = message.to_owned();
    for (rust, plain) in [
        ("expected i64", "expected an integer"),
        ("expected u64", "expected an integer"),
        ("expected u32", "expected an integer"),
        ("expected u16", "expected an integer"),
        ("expected f64", "expected a number"),
    ] {
        out = out.replace(rust, plain);
    }
    for (kind, plain) in [
        ("expected struct ", "expected a table"),
        (
            "expected enum ",
            "expected one of the values docs/config-keys.md lists",
        ),
    ] {
        while let Some(at) = out.find(kind) {
            let name_start = at + kind.len();
            let name_end = out[name_start..]
                .find(|c: char| !c.is_alphanumeric() && c != '_')
                .map_or(out.len(), |n| name_start + n);
            out.replace_range(at..name_end, plain);
        }
    }
    out
}

fn list(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| format!("  {p}"))
        .collect::<Vec<_>>()
        .join("\n")
}

impl Config {
    /// Where a listener of `previous` (by name) lists the same patterns
    /// as this one's, this one keeps `previous`'s list instead of its own
    /// copy: a reload of unchanged names then holds one list, not two,
    /// and finds each name's previous identity by its id
    /// ([`Listener::route_of_id`], `RouteTable::build`) rather than by
    /// 100,000 lookups.
    pub(crate) fn share_unchanged_names(&mut self, previous: &Config) {
        // A fresh configuration holds its listeners alone; one shared
        // already keeps its own list.
        for listener in self.listeners.iter_mut().filter_map(Arc::get_mut) {
            let was = previous.listeners.iter().find(|l| l.name == listener.name);
            if let Some(was) = was.filter(|w| w.names.same_patterns(&listener.names)) {
                listener.names = was.names.clone();
            }
        }
    }

    /// Reads and validates a configuration file, waiting for the read at
    /// most `CONFIG_READ_TIMEOUT` (see `read_file`). Blocks the calling
    /// thread: for use before the event loop runs (`check`, start-up).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let ticket = read_file(path, move |read| {
            let _ = tx.send(read);
        })?;
        match rx.recv_timeout(CONFIG_READ_TIMEOUT) {
            Ok(read) => Config::from_toml(&read?, path),
            Err(_) => {
                ticket.abandon();
                Err(ConfigError::ReadTimeout {
                    path: path.to_owned(),
                })
            }
        }
    }

    /// Validates configuration text; `path` only names it in errors.
    pub fn from_toml(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let syntax = |e: toml::de::Error| ConfigError::Syntax {
            path: path.to_owned(),
            message: plain_words(e.to_string().trim_end()),
        };
        let mut table: toml::Table = toml::from_str(text).map_err(syntax)?;
        // Every key of the wrong type or of no declared name, at once; the
        // rest is then read and checked in the same run.
        let misshapen: Vec<Problem> = take_misshapen(&mut table)
            .into_iter()
            .map(|p| Problem {
                key: p.key,
                message: p.message,
            })
            .collect();
        let file: FileConfig = if misshapen.is_empty() {
            // Read from the text, so that what the shape check lets through
            // and serde still refuses keeps its line and column.
            toml::from_str(text).map_err(syntax)?
        } else {
            match toml::Value::Table(table).try_into() {
                Ok(file) => file,
                Err(e) => {
                    let mut problems = misshapen;
                    problems.push(Problem {
                        key: "(file)".into(),
                        message: plain_words(e.to_string().trim_end()),
                    });
                    return Err(ConfigError::Invalid {
                        path: path.to_owned(),
                        problems,
                    });
                }
            }
        };
        let mut check = Checker::new(path.parent().map(Path::to_owned).unwrap_or_default());
        check.problems = misshapen;
        let config = check.config(&file);
        match config {
            Some(config) if check.problems.is_empty() => Ok(config),
            _ => Err(ConfigError::Invalid {
                path: path.to_owned(),
                problems: check.problems,
            }),
        }
    }

    /// The listener with this name.
    pub fn listener(&self, name: &str) -> Option<&Arc<Listener>> {
        self.listeners.iter().find(|l| l.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::ForwardTo;

    #[test]
    fn forward_unmatched_to_takes_plain_http_to_an_address_or_a_name() {
        let to = |text: &str| ForwardTo::parse(text).map(|f| (f.host, f.port));
        let ok = |host: &str, port| Ok((host.to_owned(), port));
        assert_eq!(to("http://127.0.0.1:3004"), ok("127.0.0.1", 3004));
        assert_eq!(to("http://127.0.0.1:3004/"), ok("127.0.0.1", 3004));
        assert_eq!(to("HTTP://Gerbil.Internal"), ok("gerbil.internal", 80));
        assert_eq!(to("http://localhost:3003"), ok("localhost", 3003));
        assert_eq!(to("http://[::1]:3004"), ok("::1", 3004));
        assert_eq!(to("http://[::1]"), ok("::1", 80));
        for (bad, says) in [
            ("https://127.0.0.1:3004", "only http://"),
            ("127.0.0.1:3004", "write it as"),
            ("http://127.0.0.1:3004/gerbil", "no path"),
            ("http://127.0.0.1:3004?x=1", "no path"),
            ("http://u:p@127.0.0.1:3004", "no user"),
            ("http://127.0.0.1:0", "not a port"),
            ("http://127.0.0.1:65536", "not a port"),
            ("http://127.0.0.1:", "not a port"),
            ("http://[::1:3004", "closing `]`"),
            ("http://[::1]3004", "`:port`"),
            ("http://[zz]:1", "not an IPv6 address"),
            ("http://::1:3004", "host \"::1\""),
            ("http://gerbil api:3004", "host \"gerbil api\""),
            ("http://:3004", "host \"\""),
        ] {
            let error = to(bad).unwrap_err();
            assert!(error.contains(says), "{bad}: {error}");
            assert!(error.contains(&format!("{bad:?}")), "{bad}: {error}");
        }
    }
}
