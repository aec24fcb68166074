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
//! constant below applies. (Later settings that exist both globally and per
//! listener resolve as section beats global beats default; a route's relay
//! timeouts as route beats listener beats default.)
//!
//! Reading the file happens on a thread of its own with a timeout
//! (`read_file`, `CONFIG_READ_TIMEOUT`): the path may name a FIFO with
//! no writer or sit on a hung mount, and neither may stop the event loop
//! from handling SIGTERM.
//!
//! Not here: binding sockets or any other I/O beyond reading the file.

mod check;
pub(crate) mod effective;
pub(crate) mod file;
pub mod keys;
pub mod reference;
pub(crate) mod settings;

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
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crate::wire::cidr::Cidr;
use crate::wire::fingerprint::Ja4Pattern;
use crate::wire::matcher::SniMatcher;
use crate::wire::sni::Pattern;
use check::Checker;

/// Open client connections the whole process accepts before it pauses accepting.
pub(crate) const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// How long draining connections (on stop, or on reload for changed routes) may live on.
pub(crate) const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
/// Kernel accept queue length per listening socket.
pub(crate) const DEFAULT_BACKLOG: u32 = 1024;
/// Time from accept until the ClientHello must be complete.
pub(crate) const DEFAULT_CLIENT_HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// A relayed connection on which no byte moved either way for this long is closed.
pub(crate) const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// How long a connection one side has half-closed (sent FIN) may stay
/// quiet; HAProxy's `timeout client-fin`/`server-fin`.
pub(crate) const DEFAULT_HALF_CLOSE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a connection may live: no limit unless set.
pub(crate) const DEFAULT_MAX_CONNECTION_LIFETIME: Option<Duration> = None;
/// Bytes the relay buffers while waiting for a complete ClientHello.
pub const DEFAULT_MAX_CLIENT_HELLO_BYTES: usize = 16 * 1024;
/// Per backend address connect attempt.
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// `[listener.proxy_protocol] mode`: a trusted source must send a header.
pub(crate) const DEFAULT_PROXY_PROTOCOL_MODE: Mode = Mode::Require;
/// `[listener.proxy_protocol] max_hops`: relay-to-relay hops a connection may
/// have crossed before this listener refuses it (`hop_limit`).
pub const DEFAULT_MAX_HOPS: u8 = 3;
/// `[backend.*] proxy_protocol`: no header is sent.
pub(crate) const DEFAULT_PROXY_PROTOCOL: Outbound = Outbound::None;
/// `[backend.*] proxy_protocol_crc32c`: no checksum TLV.
pub(crate) const DEFAULT_PROXY_PROTOCOL_CRC32C: bool = false;
/// `[backend.*] policy`: the first healthy address, failing over down the list.
pub(crate) const DEFAULT_POLICY: Policy = Policy::Ordered;
/// `[backend.*] max_fails`: consecutive failed connects that mark an
/// address down (passive health). 0 turns passive health off.
pub(crate) const DEFAULT_MAX_FAILS: u32 = 3;
/// `[backend.*] fail_backoff`: how long passive health keeps an address down.
pub(crate) const DEFAULT_FAIL_BACKOFF: Duration = Duration::from_secs(10);
/// `[backend.*] resolve_interval`: how often the system resolver is asked again.
pub(crate) const DEFAULT_RESOLVE_INTERVAL: Duration = Duration::from_secs(30);
/// `[backend.*] min_ttl` / `max_ttl`: the bounds on a record's TTL when
/// `resolver` is set (a TTL of 0 must not become a query storm; a TTL of a
/// day must not pin a dead address).
pub(crate) const DEFAULT_MIN_TTL: Duration = Duration::from_secs(5);
pub(crate) const DEFAULT_MAX_TTL: Duration = Duration::from_secs(300);
/// `[backend.*] fastest_interval`: connect times are measured again after a
/// random moment within this interval (full jitter).
pub(crate) const DEFAULT_FASTEST_INTERVAL: Duration = Duration::from_secs(5 * 60);
/// `[backend.*.health]` defaults.
pub(crate) const DEFAULT_HEALTH_INTERVAL: Duration = Duration::from_secs(5);
pub(crate) const DEFAULT_HEALTH_TIMEOUT: Duration = Duration::from_secs(2);
pub(crate) const DEFAULT_HEALTH_RISE: u32 = 2;
pub(crate) const DEFAULT_HEALTH_FALL: u32 = 3;
/// `[backend.*.health] kind`: a TCP connect.
pub(crate) const DEFAULT_HEALTH_KIND: &str = "tcp";
/// `[backend.*] fastest_measure`: the TCP connect time.
pub(crate) const DEFAULT_FASTEST_MEASURE: FastestMeasure = FastestMeasure::Connect;
/// An address's `weight` when unset (`addresses` entries as plain strings).
pub(crate) const DEFAULT_WEIGHT: u32 = 1;
// `max_connections` (per address) and `max_connections_per_address`
// default to no cap.
/// `[backend.*.cluster]` defaults.
pub(crate) const DEFAULT_CLUSTER_PORT: u16 = 443;
pub(crate) const DEFAULT_POSITIVE_TTL: Duration = Duration::from_secs(30);
pub(crate) const DEFAULT_NEGATIVE_TTL: Duration = Duration::from_secs(2);
pub(crate) const DEFAULT_LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);
// Pangolin nodes (issue 17).
/// `[backend.*.cluster] hop_proxy_protocol`: v2, which carries the hop count.
pub(crate) const DEFAULT_HOP_PROXY_PROTOCOL: Outbound = Outbound::V2;

/// Where `[admin]` listens when the section leaves `listen` out: loopback
/// only. A non-loopback address needs `allow_public = true`.
pub(crate) const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9901";
/// `[admin] allow_public`: a non-loopback `listen` is refused unless set.
pub(crate) const DEFAULT_ADMIN_ALLOW_PUBLIC: bool = false;
/// `[admin] expose_config`: `/config` (every route and backend) is not
/// served to whoever may scrape `/metrics` unless the operator says so.
pub(crate) const DEFAULT_ADMIN_EXPOSE_CONFIG: bool = false;
/// `[admin] address_labels`: `snirelay_backend_address_up` carries an
/// `address` label (bounded per backend, see `metrics`). Off, no metric
/// names an origin address.
pub(crate) const DEFAULT_ADMIN_ADDRESS_LABELS: bool = true;
// Pushed local names (issue 17).
/// `[admin] moved_close_window`: connections of names a push no longer
/// lists as local close at moments spread over this long, so a site that
/// moves does not make all its clients reconnect in the same instant.
pub(crate) const DEFAULT_MOVED_CLOSE_WINDOW: Duration = Duration::from_secs(5);

/// `[log] target`: standard error, as journald and container runtimes
/// expect.
pub const DEFAULT_LOG_TARGET: LogTarget = LogTarget::Stderr;
/// `[log] syslog`: the local syslog daemon's socket.
pub const DEFAULT_SYSLOG: &str = "unix:/dev/log";
/// `[log] facility`: what an HAProxy edge logs to (`log /dev/log local0`).
pub const DEFAULT_LOG_FACILITY: &str = "local0";
/// `[log] syslog_format`: RFC 5424 (full timestamp, host, app, pid).
pub const DEFAULT_SYSLOG_FORMAT: SyslogFormat = SyslogFormat::Rfc5424;
/// `[log] queue`: lines held while a syslog or journald target is slow
/// or down (a few hundred bytes each, only while held): about two seconds
/// of access lines at 2,000 connections a second.
pub const DEFAULT_LOG_QUEUE: usize = 4096;

/// Whether listening sockets set SO_REUSEPORT. Off: the binary upgrade
/// hands the listening sockets over (`run --takeover`), which needs no
/// second bind, and with the option off a second snirelay started by
/// mistake on the same address fails to bind instead of silently taking
/// half of the connections.
pub(crate) const DEFAULT_REUSE_PORT: bool = false;
/// Relay through splice(2) and a kernel pipe per direction (Linux) rather
/// than a userspace copy. A listener's `splice` beats `[global] splice`.
pub(crate) const DEFAULT_SPLICE: bool = true;
/// Bytes a pooled pipe holds (F_SETPIPE_SZ); the kernel rounds up to a power
/// of two pages. 64 KiB is the kernel's own default and HAProxy's.
pub const DEFAULT_PIPE_SIZE: usize = 64 * 1024;
/// Pipes the whole process may have open at once, in use or pooled; each is
/// two descriptors. A direction that finds the pool empty copies through
/// userspace for that burst instead of waiting.
pub(crate) const DEFAULT_MAX_PIPES: usize = 512;
/// Runtime worker threads when
/// `[global] threads` is not set: the cores this process may run on.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Bits of an IPv4 source address that make one source for per-source limits.
pub const DEFAULT_SOURCE_PREFIX_V4: u8 = 32;
/// Bits of an IPv6 source address that make one source (one /64 is what a
/// single subscriber is usually given).
pub const DEFAULT_SOURCE_PREFIX_V6: u8 = 64;
/// Open connections one source may hold (`[listener.limits]
/// connections_per_source`) when the key is not set; `false` turns the limit
/// off. Without it one source could take the whole `max_connections` budget
/// and every other client would wait in the backlog behind it; 256 is far
/// above what one browser or agent opens, and in line with Gerbil's
/// per-source default.
pub const DEFAULT_CONNECTIONS_PER_SOURCE: NonZeroU32 = NonZeroU32::new(256).unwrap();
/// `tcp_keepalive` (per listener and per backend) when unset or `true`:
/// on, so a peer that vanishes without FIN or RST is closed after
/// idle + interval × count = 2 minutes of silence (probed, or with data
/// unacknowledged: see `sockopt::set_keepalive`) instead of holding two
/// descriptors until `idle_timeout`. (HAProxy `clitcpka`/`srvtcpka`, nginx
/// `so_keepalive` and Envoy `tcp_keepalive` take the system's timings
/// unless told otherwise: a 2-hour idle, too late to matter at an edge.)
pub(crate) const DEFAULT_TCP_KEEPALIVE: Keepalive = Keepalive {
    idle: Duration::from_secs(60),
    interval: Duration::from_secs(10),
    count: 6,
};
/// Linux bounds: TCP_KEEPIDLE and TCP_KEEPINTVL (seconds), TCP_KEEPCNT.
const KEEPALIVE_SECS_RANGE: std::ops::RangeInclusive<i64> = 1..=32_767;
const KEEPALIVE_COUNT_RANGE: std::ops::RangeInclusive<i64> = 1..=127;

// `max_connection_rate` and `connection_rate_per_source` default to
// unlimited; a burst defaults to one second's worth of its rate.

/// `attempts_period` when `attempts_per_source` is set without it: one
/// second, as HAProxy's `conn_rate(1s)`.
pub(crate) const DEFAULT_ATTEMPTS_PERIOD: Duration = Duration::from_secs(1);

/// `[[listener]] min_tls_version`: unset, every version is accepted.
pub(crate) const DEFAULT_MIN_TLS_VERSION: Option<TlsVersion> = None;
/// `[[listener]] ech`: ECH hellos are routed like any other.
pub(crate) const DEFAULT_ECH: EchPolicy = EchPolicy::Pass;

/// Bounds that keep a setting meaningful.
const MAX_CLIENT_HELLO_BYTES_RANGE: std::ops::RangeInclusive<i64> = 512..=262_144;
const MAX_CONNECTIONS_RANGE: std::ops::RangeInclusive<i64> = 1..=10_000_000;
const BACKLOG_RANGE: std::ops::RangeInclusive<i64> = 1..=65_535;
const MAX_HOPS_RANGE: std::ops::RangeInclusive<i64> = 1..=16;
const THREADS_RANGE: std::ops::RangeInclusive<i64> = 1..=1024;
/// One page up to Linux's default `fs.pipe-max-size` (1 MiB).
const PIPE_SIZE_RANGE: std::ops::RangeInclusive<i64> = 4096..=1_048_576;
const MAX_PIPES_RANGE: std::ops::RangeInclusive<i64> = 1..=1_000_000;
const RATE_RANGE: std::ops::RangeInclusive<i64> = 1..=10_000_000;
/// `attempts_period`, in milliseconds (HAProxy counts in millisecond
/// ticks): long enough to count a burst, at most an hour.
const ATTEMPTS_PERIOD_MS_RANGE: std::ops::RangeInclusive<i64> = 100..=3_600_000;
/// `rate_up` and the other bandwidth rates, in bytes per second: from
/// 1 KB/s (below it a connection is stalled, not shaped) to 1 TB/s.
const BANDWIDTH_RANGE: std::ops::RangeInclusive<i64> = 1_000..=1_000_000_000_000;
/// `burst`, in bytes: at least one 1,500-byte packet, at most 1 TB.
const BURST_RANGE: std::ops::RangeInclusive<i64> = 1_500..=1_000_000_000_000;
const PREFIX_V4_RANGE: std::ops::RangeInclusive<i64> = 1..=32;
const PREFIX_V6_RANGE: std::ops::RangeInclusive<i64> = 1..=128;
const CONNECT_ATTEMPTS_RANGE: std::ops::RangeInclusive<i64> = 1..=64;
const MAX_FAILS_RANGE: std::ops::RangeInclusive<i64> = 0..=1000;
const RISE_FALL_RANGE: std::ops::RangeInclusive<i64> = 1..=100;
const PORT_RANGE: std::ops::RangeInclusive<i64> = 1..=65_535;
/// An address's `weight`: 0 is refused (remove the address instead), and
/// 256 is HAProxy's maximum.
const WEIGHT_RANGE: std::ops::RangeInclusive<i64> = 1..=256;
/// `[log] queue`, in lines.
const LOG_QUEUE_RANGE: std::ops::RangeInclusive<i64> = 1..=1_000_000;
/// `max_connections` of an address and `max_connections_per_address`.
const ADDRESS_CONNECTIONS_RANGE: std::ops::RangeInclusive<i64> = 1..=10_000_000;
/// A PROXY v2 TLV type is one byte.
const TLV_TYPE_RANGE: std::ops::RangeInclusive<i64> = 0..=255;

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
}

/// `[admin]`: the admin listener and who may use its control endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admin {
    /// A loopback (or, with `allow_public`, any) TCP address, or
    /// `unix:/path` (control endpoints open to whoever may connect).
    pub listen: AdminListen,
    /// `allow_public`: a non-loopback `listen` was meant (checked here;
    /// kept so the effective configuration shows it).
    pub allow_public: bool,
    /// Serve `/config` (`DEFAULT_ADMIN_EXPOSE_CONFIG`).
    pub expose_config: bool,
    /// Backend address metrics by address (`DEFAULT_ADMIN_ADDRESS_LABELS`).
    pub address_labels: bool,
    // Run-time control (issue 16).
    /// `token_file` and the tokens it held when the configuration was
    /// loaded (read again on every reload).
    pub token_file: Option<TokenFile>,
    // Pushed local names (issue 17).
    /// Where the pushed local names are kept across restarts (relative to
    /// the configuration file's directory); `None`: in memory only.
    pub local_names_file: Option<PathBuf>,
    /// `DEFAULT_MOVED_CLOSE_WINDOW`.
    pub moved_close_window: Duration,
    // One base address for a Pangolin node (issue 30).
    /// Sources whose `POST /update-local-snis` needs no token (TCP only;
    /// empty by default: a token is required). A push that presents a
    /// token is judged by it, wherever it comes from.
    pub push_unauthenticated_from: Vec<Cidr>,
    /// Where requests for paths the admin listener does not serve go;
    /// `None`: they are answered 404 as before.
    pub forward_unmatched_to: Option<ForwardTo>,
    /// `ready_requires`: what must have a usable address for `/readyz` to
    /// answer 200; empty (the default): ready once listening.
    pub ready_requires: Vec<ReadyRequirement>,
}

/// One entry of `[admin] ready_requires`: a backend, or the backend of a
/// route, that must have a usable address (up, not drained or in
/// maintenance, resolved) for `/readyz` to answer 200; `any_backend`: at
/// least one backend must.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadyRequirement {
    /// `"backend:NAME"`.
    Backend(String),
    /// `"route:NAME"`: the backend of every route of that name.
    Route(String),
    /// `"any_backend"`.
    AnyBackend,
}

impl ReadyRequirement {
    /// Parses `backend:NAME`, `route:NAME` or `any_backend` (names are not
    /// checked here).
    pub fn parse(text: &str) -> Result<ReadyRequirement, String> {
        let named = |name: &str, what: &str| {
            if name.is_empty() {
                Err(format!("{text:?} names no {what}"))
            } else {
                Ok(name.to_owned())
            }
        };
        if text == "any_backend" {
            Ok(ReadyRequirement::AnyBackend)
        } else if let Some(name) = text.strip_prefix("backend:") {
            named(name, "backend").map(ReadyRequirement::Backend)
        } else if let Some(name) = text.strip_prefix("route:") {
            named(name, "route").map(ReadyRequirement::Route)
        } else {
            Err(format!(
                "{text:?}: write \"backend:NAME\", \"route:NAME\" or \"any_backend\""
            ))
        }
    }
}

impl fmt::Display for ReadyRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadyRequirement::Backend(name) => write!(f, "backend:{name}"),
            ReadyRequirement::Route(name) => write!(f, "route:{name}"),
            ReadyRequirement::AnyBackend => f.write_str("any_backend"),
        }
    }
}

/// `[admin] forward_unmatched_to`, checked: a plain-HTTP upstream named by
/// an IP address or a host name (resolved on each forwarded request, so
/// `/etc/hosts` and DNS changes apply without a reload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardTo {
    /// The URL as written (for logs and `/config`).
    pub url: String,
    /// The host: an IP address (IPv6 without brackets) or a lowercase name.
    pub host: String,
    /// The port; 80 when the URL names none.
    pub port: u16,
}

impl ForwardTo {
    /// Parses `http://host[:port][/]`: plain HTTP (the upstream is on the
    /// node), no user, path, query or fragment, since the request's own
    /// path and query are forwarded unchanged.
    pub fn parse(text: &str) -> Result<ForwardTo, String> {
        let rest = match text.split_once("://") {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
            Some((scheme, _)) => {
                return Err(format!(
                    "{text:?}: only http:// is forwarded to (not {scheme}://): the upstream \
                     is a plain-HTTP API on this node, such as Gerbil's"
                ));
            }
            None => return Err(format!("{text:?}: write it as \"http://127.0.0.1:3004\"")),
        };
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains(['/', '?', '#']) {
            return Err(format!(
                "{text:?}: no path, query or fragment: requests keep their own"
            ));
        }
        if authority.contains('@') {
            return Err(format!("{text:?}: no user information in the URL"));
        }
        let (host, port) = if let Some(inner) = authority.strip_prefix('[') {
            let (v6, after) = inner
                .split_once(']')
                .ok_or_else(|| format!("{text:?}: an IPv6 address needs its closing `]`"))?;
            let v6: std::net::Ipv6Addr = v6
                .parse()
                .map_err(|_| format!("{text:?}: {v6:?} is not an IPv6 address"))?;
            let port =
                match after {
                    "" => None,
                    p => Some(p.strip_prefix(':').ok_or_else(|| {
                        format!("{text:?}: expected `:port` after the IPv6 address")
                    })?),
                };
            (v6.to_string(), port)
        } else {
            let (host, port) = match authority.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            };
            let host = if let Ok(ip) = host.parse::<std::net::Ipv4Addr>() {
                ip.to_string()
            } else {
                match crate::wire::sni::Sni::parse(host.as_bytes()) {
                    Ok(name) => name.as_str().to_owned(),
                    Err(e) => return Err(format!("{text:?}: host {host:?}: {e}")),
                }
            };
            (host, port)
        };
        let port = match port {
            None => 80,
            Some(p) => match p.parse::<u16>() {
                Ok(port) if port > 0 => port,
                _ => return Err(format!("{text:?}: {p:?} is not a port (1-65535)")),
            },
        };
        Ok(ForwardTo {
            url: text.to_owned(),
            host,
            port,
        })
    }
}

/// The longest host name (RFC 1035), without its trailing dot.
const MAX_NAME_LEN: usize = 253;

/// Whether `text` is a host name: dot-separated labels of 1 to 63 letters,
/// digits, `-` or `_`, not starting or ending with `-`, at most
/// 253 bytes (a trailing dot allowed), and a last label that
/// is not all digits (that would be a mistyped IPv4 address, not a name).
pub(crate) fn is_host_name(text: &str) -> bool {
    let text = text.strip_suffix('.').unwrap_or(text);
    let label = |l: &str| {
        (1..=63).contains(&l.len())
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    (1..=MAX_NAME_LEN).contains(&text.len())
        && text.split('.').all(label)
        && !text
            .rsplit('.')
            .next()
            .is_some_and(|last| last.bytes().all(|b| b.is_ascii_digit()))
}

/// Where the admin listener listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminListen {
    /// A TCP address: loopback, or any with `allow_public`.
    Tcp(SocketAddr),
    /// `unix:/path`: a Unix stream socket, created with mode 0660.
    Unix(PathBuf),
}

impl std::fmt::Display for AdminListen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdminListen::Tcp(addr) => write!(f, "{addr}"),
            AdminListen::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// `[admin] token_file`, read: the bearer tokens by name.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenFile {
    pub(crate) path: PathBuf,
    /// (name, token); names are unique. Never logged or shown.
    pub tokens: Vec<(String, String)>,
}

impl std::fmt::Debug for TokenFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.tokens.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("TokenFile")
            .field("path", &self.path)
            .field("names", &names)
            .finish()
    }
}

/// Parses a token file: one bare token (named `token`), or lines
/// `name:token`; blank lines and `#` comments are skipped. Tokens are
/// printable ASCII without spaces; names are unique.
pub fn parse_tokens(text: &str) -> Result<Vec<(String, String)>, String> {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let valid = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_graphic());
    let mut tokens: Vec<(String, String)> = Vec::new();
    if let [only] = lines.as_slice()
        && !only.contains(':')
    {
        if !valid(only) {
            return Err("the token holds a character that is not printable ASCII".into());
        }
        tokens.push(("token".to_owned(), (*only).to_owned()));
        return Ok(tokens);
    }
    for (n, line) in lines.iter().enumerate() {
        let Some((name, token)) = line.split_once(':') else {
            return Err(format!(
                "line {}: expected `name:token` (a file of several tokens names each)",
                n + 1
            ));
        };
        let name = name.trim();
        let token = token.trim();
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.@".contains(&b))
        {
            return Err(format!(
                "line {}: the name {name:?} is not [A-Za-z0-9-_.@]+",
                n + 1
            ));
        }
        if !valid(token) {
            return Err(format!(
                "line {}: the token of {name:?} is empty or not printable ASCII",
                n + 1
            ));
        }
        if tokens.iter().any(|(other, _)| other == name) {
            return Err(format!("line {}: the name {name:?} appears twice", n + 1));
        }
        tokens.push((name.to_owned(), token.to_owned()));
    }
    if tokens.is_empty() {
        return Err("the file holds no token".into());
    }
    Ok(tokens)
}

/// Reads and checks `[admin] token_file`: it must exist, not be readable
/// by others (mode & 0o004), and hold at least one token.
pub(crate) fn read_tokens(path: &Path) -> Result<TokenFile, String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mode = meta.permissions().mode();
    if mode & 0o004 != 0 {
        return Err(format!(
            "{} is readable by every user (mode {:o}); chmod o-r it",
            path.display(),
            mode & 0o777
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let tokens = parse_tokens(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(TokenFile {
        path: path.to_owned(),
        tokens,
    })
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
    /// pattern that differ in `alpn`. Built anew on each call: the
    /// validated configuration keeps no matcher of its own (the checker
    /// builds one to find patterns taken twice, the running generation
    /// compiles its own route table, `flow::route::RouteTable`), so 100,000 names are
    /// not held twice.
    pub fn matcher(&self) -> SniMatcher<Vec<usize>> {
        let mut matcher: SniMatcher<Vec<usize>> = SniMatcher::new();
        for (id, route) in self.routes.iter().enumerate() {
            for pattern in &route.patterns {
                match matcher.get_mut(pattern) {
                    Some(ids) => ids.push(id),
                    None => {
                        let _ = matcher.insert(pattern, vec![id]);
                    }
                }
            }
        }
        matcher
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
    /// The route's patterns: those of `sni` first, then those of
    /// `sni_file`.
    pub(crate) patterns: Vec<Pattern>,
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

/// One problem in a configuration file: the key, in TOML path form, and
/// what is wrong with its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The key, in TOML path form.
    pub key: String,
    pub(crate) message: String,
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

fn list(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| format!("  {p}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// How long reading the configuration file may take before the load (or
/// reload) is refused. The file is read on a thread of its own, so a file
/// that never answers holds that thread, never the event loop.
pub(crate) const CONFIG_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest configuration file read; a real one is a few kilobytes.
pub(crate) const MAX_CONFIG_BYTES: u64 = 4 * 1024 * 1024;

/// Reads of the configuration file that timed out and are still blocked;
/// while one is, no new read starts (each would strand another thread).
static STUCK_READS: AtomicUsize = AtomicUsize::new(0);

/// Reads the configuration file on a thread of its own and hands the
/// outcome to `deliver`. Opening a FIFO with no writer, or reading from a
/// hung network mount, blocks in the kernel where no timeout reaches, so the
/// read runs where blocking costs one parked thread: the caller waits for
/// [`CONFIG_READ_TIMEOUT`] at most, and gives up with
/// [`ConfigError::ReadTimeout`]. A read that outlives its timeout is counted
/// in `STUCK_READS` until it ends; while one is stuck, later reads are
/// refused with [`ConfigError::ReadStuck`] instead of stranding a thread each.
pub(crate) fn read_file(
    path: &Path,
    deliver: impl FnOnce(Result<String, ConfigError>) + Send + 'static,
) -> Result<ReadTicket, ConfigError> {
    if STUCK_READS.load(Ordering::Acquire) > 0 {
        return Err(ConfigError::ReadStuck {
            path: path.to_owned(),
        });
    }
    let ticket = ReadTicket(Arc::new(AtomicBool::new(false)));
    let abandoned = ticket.0.clone();
    let owned = path.to_owned();
    std::thread::Builder::new()
        .name("config-read".into())
        .spawn(move || {
            let read = read_capped(&owned);
            // Swap under the flag: the waiter either sees the result or
            // has already counted this read as stuck, never both.
            if abandoned.swap(true, Ordering::AcqRel) {
                STUCK_READS.fetch_sub(1, Ordering::AcqRel);
            }
            deliver(read);
        })
        .map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
    Ok(ticket)
}

/// Held by whoever waits for a [`read_file`]; [`ReadTicket::abandon`] when
/// the wait times out.
pub(crate) struct ReadTicket(Arc<AtomicBool>);

impl ReadTicket {
    /// Marks the read as given up on: it counts as stuck until it returns.
    pub(crate) fn abandon(self) {
        if !self.0.swap(true, Ordering::AcqRel) {
            STUCK_READS.fetch_add(1, Ordering::AcqRel);
        }
    }
}

fn read_capped(path: &Path) -> Result<String, ConfigError> {
    use std::io::Read;
    let failed = |source| ConfigError::Read {
        path: path.to_owned(),
        source,
    };
    let mut text = String::new();
    std::fs::File::open(path)
        .map_err(failed)?
        .take(MAX_CONFIG_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(failed)?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(ConfigError::TooLarge {
            path: path.to_owned(),
        });
    }
    Ok(text)
}

impl Config {
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
        let file: FileConfig = toml::from_str(text).map_err(|e| ConfigError::Syntax {
            path: path.to_owned(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        let mut check = Checker::new(path.parent().map(Path::to_owned).unwrap_or_default());
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
