//! Configuration: the TOML file turned once into an immutable, validated
//! snapshot.
//!
//! Two types, as in sozu: [`file::FileConfig`] is the file as written (serde,
//! unknown keys refused, `Option` for "not set"); [`Config`] is what the relay
//! runs on, with no `Option` left: durations, socket addresses, compiled SNI
//! matchers and resolved backend references. [`Config::from_toml`] is the only
//! way from one to the other and reports *every* problem it finds, each naming
//! its key and the bad value, so `snirelay check` can list them all at once.
//! [`effective`] is the way back: `Config::to_file` writes every key with its
//! value in force (what `/config` shows, and what a round trip re-reads).
//!
//! Precedence: a value set in a section wins; otherwise the `DEFAULT_*`
//! constant below applies. (Later settings that exist both globally and per
//! listener resolve as section beats global beats default; a route's relay
//! timeouts as route beats listener beats default.)
//!
//! Reading the file happens on a thread of its own with a timeout
//! ([`read_file`], [`CONFIG_READ_TIMEOUT`]): the path may name a FIFO with
//! no writer or sit on a hung mount, and neither may stop the event loop
//! from handling SIGTERM.
//!
//! Not here: binding sockets or any other I/O beyond reading the file.

pub mod effective;
pub mod file;
pub mod keys;
pub mod reference;

/// `[backend.*] policy`: its names, own keys and ordering live with the
/// rest of what a policy is, in `backend::policy`.
pub use crate::backend::policy::Policy;
// The validated backend settings are the backend runtime's own types (so
// that `backend` depends on nothing here); validation builds them.
pub use crate::backend::{
    AddressSource, Backend, Cluster, ClusterLookup, DEFAULT_CONNECT_ATTEMPTS_CAP, DnsSource,
    HealthCheck,
};
pub use crate::backend::{ClusterProtocol, LookupHeader, LookupTls, node_choice::NodeChoice};
pub use crate::backend::{FastestMeasure, HealthKind, Member};
/// A connection's relay timeouts, the relay's own type (see `pump::relay`).
pub use crate::pump::relay::Timeouts;

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crate::admit::{Limits, Rate};
use crate::backend::cluster_http::is_host_name;
use crate::cidr::{Cidr, CidrSet};
use crate::matcher::SniMatcher;
use crate::proxy::inbound::{Inbound, Mode, TrustedName};
use crate::proxy::outbound::Outbound;
use crate::sni::Pattern;
use crate::sockopt::Keepalive;
use file::{AddressEntry, AddressTable};
use file::{
    AdminSection, BackendSection, ClusterSection, CountOrOff, DurationOrOff, FileConfig,
    HealthSection, LimitsSection, ListenerSection, ProxyProtocolSection,
};
use file::{HeaderFile, HeaderValueSetting};
use file::{KeepaliveSection, KeepaliveSetting};

/// Open client connections the whole process accepts before it pauses accepting.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// How long draining connections (on stop, or on reload for changed routes) may live on.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
/// Kernel accept queue length per listening socket.
pub const DEFAULT_BACKLOG: u32 = 1024;
/// Time from accept until the ClientHello must be complete.
pub const DEFAULT_CLIENT_HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// A relayed connection on which no byte moved either way for this long is closed.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// How long a connection one side has half-closed (sent FIN) may stay
/// quiet; HAProxy's `timeout client-fin`/`server-fin`.
pub const DEFAULT_HALF_CLOSE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a connection may live: no limit unless set.
pub const DEFAULT_MAX_CONNECTION_LIFETIME: Option<Duration> = None;
/// Bytes the relay buffers while waiting for a complete ClientHello.
pub const DEFAULT_MAX_CLIENT_HELLO_BYTES: usize = 16 * 1024;
/// Per backend address connect attempt.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// `[listener.proxy_protocol] mode`: a trusted source must send a header.
pub const DEFAULT_PROXY_PROTOCOL_MODE: Mode = Mode::Require;
/// `[listener.proxy_protocol] max_hops`: relay-to-relay hops a connection may
/// have crossed before this listener refuses it (`hop_limit`).
pub const DEFAULT_MAX_HOPS: u8 = 3;
/// `[backend.*] proxy_protocol`: no header is sent.
pub const DEFAULT_PROXY_PROTOCOL: Outbound = Outbound::None;
/// `[backend.*] proxy_protocol_crc32c`: no checksum TLV.
pub const DEFAULT_PROXY_PROTOCOL_CRC32C: bool = false;
/// `[backend.*] policy`: the first healthy address, failing over down the list.
pub const DEFAULT_POLICY: Policy = Policy::Ordered;
/// `[backend.*] max_fails`: consecutive failed connects that mark an
/// address down (passive health). 0 turns passive health off.
pub const DEFAULT_MAX_FAILS: u32 = 3;
/// `[backend.*] fail_backoff`: how long passive health keeps an address down.
pub const DEFAULT_FAIL_BACKOFF: Duration = Duration::from_secs(10);
/// `[backend.*] resolve_interval`: how often the system resolver is asked again.
pub const DEFAULT_RESOLVE_INTERVAL: Duration = Duration::from_secs(30);
/// `[backend.*] min_ttl` / `max_ttl`: the bounds on a record's TTL when
/// `resolver` is set (a TTL of 0 must not become a query storm; a TTL of a
/// day must not pin a dead address).
pub const DEFAULT_MIN_TTL: Duration = Duration::from_secs(5);
pub const DEFAULT_MAX_TTL: Duration = Duration::from_secs(300);
/// `[backend.*] fastest_interval`: connect times are measured again after a
/// random moment within this interval (full jitter).
pub const DEFAULT_FASTEST_INTERVAL: Duration = Duration::from_secs(5 * 60);
/// `[backend.*.health]` defaults.
pub const DEFAULT_HEALTH_INTERVAL: Duration = Duration::from_secs(5);
pub const DEFAULT_HEALTH_TIMEOUT: Duration = Duration::from_secs(2);
pub const DEFAULT_HEALTH_RISE: u32 = 2;
pub const DEFAULT_HEALTH_FALL: u32 = 3;
/// `[backend.*.health] kind`: a TCP connect.
pub const DEFAULT_HEALTH_KIND: &str = "tcp";
/// `[backend.*] fastest_measure`: the TCP connect time.
pub const DEFAULT_FASTEST_MEASURE: FastestMeasure = FastestMeasure::Connect;
/// An address's `weight` when unset (`addresses` entries as plain strings).
pub const DEFAULT_WEIGHT: u32 = 1;
// `max_connections` (per address) and `max_connections_per_address`
// default to no cap.
/// `[backend.*.cluster]` defaults.
pub const DEFAULT_CLUSTER_PORT: u16 = 443;
pub const DEFAULT_POSITIVE_TTL: Duration = Duration::from_secs(30);
pub const DEFAULT_NEGATIVE_TTL: Duration = Duration::from_secs(2);
pub const DEFAULT_LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);
// Pangolin nodes (issue 17).
/// `[backend.*.cluster] hop_proxy_protocol`: v2, which carries the hop count.
pub const DEFAULT_HOP_PROXY_PROTOCOL: Outbound = Outbound::V2;

/// Where `[admin]` listens when the section leaves `listen` out: loopback
/// only. A non-loopback address needs `allow_public = true`.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9901";
/// `[admin] allow_public`: a non-loopback `listen` is refused unless set.
pub const DEFAULT_ADMIN_ALLOW_PUBLIC: bool = false;
/// `[admin] expose_config`: `/config` (every route and backend) is not
/// served to whoever may scrape `/metrics` unless the operator says so.
pub const DEFAULT_ADMIN_EXPOSE_CONFIG: bool = false;
/// `[admin] address_labels`: `snirelay_backend_address_up` carries an
/// `address` label (bounded per backend, see `metrics`). Off, no metric
/// names an origin address.
pub const DEFAULT_ADMIN_ADDRESS_LABELS: bool = true;
// Pushed local names (issue 17).
/// `[admin] moved_close_window`: connections of names a push no longer
/// lists as local close at moments spread over this long, so a site that
/// moves does not make all its clients reconnect in the same instant.
pub const DEFAULT_MOVED_CLOSE_WINDOW: Duration = Duration::from_secs(5);

/// Whether listening sockets set SO_REUSEPORT. Off: the binary upgrade
/// hands the listening sockets over (`run --takeover`), which needs no
/// second bind, and with the option off a second snirelay started by
/// mistake on the same address fails to bind instead of silently taking
/// half of the connections.
pub const DEFAULT_REUSE_PORT: bool = false;
/// Relay through splice(2) and a kernel pipe per direction (Linux) rather
/// than a userspace copy. A listener's `splice` beats `[global] splice`.
pub const DEFAULT_SPLICE: bool = true;
/// Bytes a pooled pipe holds (F_SETPIPE_SZ); the kernel rounds up to a power
/// of two pages. 64 KiB is the kernel's own default and HAProxy's.
pub const DEFAULT_PIPE_SIZE: usize = 64 * 1024;
/// Pipes the whole process may have open at once, in use or pooled; each is
/// two descriptors. A direction that finds the pool empty copies through
/// userspace for that burst instead of waiting.
pub const DEFAULT_MAX_PIPES: usize = 512;
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
pub const DEFAULT_TCP_KEEPALIVE: Keepalive = Keepalive {
    idle: Duration::from_secs(60),
    interval: Duration::from_secs(10),
    count: 6,
};
/// Linux bounds: TCP_KEEPIDLE and TCP_KEEPINTVL (seconds), TCP_KEEPCNT.
const KEEPALIVE_SECS_RANGE: std::ops::RangeInclusive<i64> = 1..=32_767;
const KEEPALIVE_COUNT_RANGE: std::ops::RangeInclusive<i64> = 1..=127;

// `max_connection_rate` and `connection_rate_per_source` default to
// unlimited; a burst defaults to one second's worth of its rate.

/// `[[listener]] min_tls_version`: unset, every version is accepted.
pub const DEFAULT_MIN_TLS_VERSION: Option<TlsVersion> = None;
/// `[[listener]] ech`: ECH hellos are routed like any other.
pub const DEFAULT_ECH: EchPolicy = EchPolicy::Pass;

/// Whether two routes' `alpn` lists would both take some hello: both empty
/// (any hello), or a protocol in common.
fn overlap(a: &[String], b: &[String]) -> bool {
    (a.is_empty() && b.is_empty()) || a.iter().any(|p| b.contains(p))
}

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
const PREFIX_V4_RANGE: std::ops::RangeInclusive<i64> = 1..=32;
const PREFIX_V6_RANGE: std::ops::RangeInclusive<i64> = 1..=128;
const CONNECT_ATTEMPTS_RANGE: std::ops::RangeInclusive<i64> = 1..=64;
const MAX_FAILS_RANGE: std::ops::RangeInclusive<i64> = 0..=1000;
const RISE_FALL_RANGE: std::ops::RangeInclusive<i64> = 1..=100;
const PORT_RANGE: std::ops::RangeInclusive<i64> = 1..=65_535;
/// An address's `weight`: 0 is refused (remove the address instead), and
/// 256 is HAProxy's maximum.
const WEIGHT_RANGE: std::ops::RangeInclusive<i64> = 1..=256;
/// `max_connections` of an address and `max_connections_per_address`.
const ADDRESS_CONNECTIONS_RANGE: std::ops::RangeInclusive<i64> = 1..=10_000_000;

/// The validated configuration one set of connections runs on.
#[derive(Debug, Clone)]
pub struct Config {
    pub global: Global,
    pub listeners: Vec<Arc<Listener>>,
    pub backends: BTreeMap<String, Arc<Backend>>,
    /// The admin listener (`/metrics`, `/healthz`, `/readyz`, and `/config`
    /// with `expose_config`); none without `[admin]`.
    pub admin: Option<Admin>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admin {
    /// A loopback (or, with `allow_public`, any) TCP address, or
    /// `unix:/path` (control endpoints open to whoever may connect).
    pub listen: AdminListen,
    /// `allow_public`: a non-loopback `listen` was meant (checked here;
    /// kept so the effective configuration shows it).
    pub allow_public: bool,
    /// Serve `/config` ([`DEFAULT_ADMIN_EXPOSE_CONFIG`]).
    pub expose_config: bool,
    /// Backend address metrics by address ([`DEFAULT_ADMIN_ADDRESS_LABELS`]).
    pub address_labels: bool,
    // Run-time control (issue 16).
    /// `token_file` and the tokens it held when the configuration was
    /// loaded (read again on every reload).
    pub token_file: Option<TokenFile>,
    // Pushed local names (issue 17).
    /// Where the pushed local names are kept across restarts (relative to
    /// the configuration file's directory); `None`: in memory only.
    pub local_names_file: Option<PathBuf>,
    /// [`DEFAULT_MOVED_CLOSE_WINDOW`].
    pub moved_close_window: Duration,
    // One base address for a Pangolin node (issue 30).
    /// Sources whose `POST /update-local-snis` needs no token (TCP only;
    /// empty by default: a token is required). A push that presents a
    /// token is judged by it, wherever it comes from.
    pub push_unauthenticated_from: Vec<Cidr>,
    /// Where requests for paths the admin listener does not serve go;
    /// `None`: they are answered 404 as before.
    pub forward_unmatched_to: Option<ForwardTo>,
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
                match crate::sni::Sni::parse(host.as_bytes()) {
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

/// Where the admin listener listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminListen {
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
    pub path: PathBuf,
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
pub fn read_tokens(path: &Path) -> Result<TokenFile, String> {
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

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Global {
    pub max_connections: usize,
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

#[derive(Debug, Clone)]
pub struct Listener {
    pub name: String,
    pub listen: Vec<SocketAddr>,
    pub backlog: u32,
    pub client_hello_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_client_hello_bytes: usize,
    pub no_sni: NoSni,
    pub routes: Vec<Route>,
    /// Pattern → indices into `routes`: one, or several routes of the same
    /// pattern that differ in `alpn`.
    pub matcher: SniMatcher<Vec<usize>>,
    /// Inbound PROXY protocol; `None` when the listener has no
    /// `[listener.proxy_protocol]` section (no preface stage at all).
    pub proxy_protocol: Option<Inbound>,
    /// Set SO_REUSEPORT on this listener's sockets.
    pub reuse_port: bool,
    /// Relay with splice(2) (listener beats global beats [`DEFAULT_SPLICE`]).
    pub splice: bool,
    /// `[listener.limits]`: admission (see `admit`).
    pub limits: Limits,
    // Hello rules (TLS version, ECH); see `route`.
    /// Hellos offering nothing newer are refused (`tls_version`); `None`
    /// accepts every version ([`DEFAULT_MIN_TLS_VERSION`]).
    pub min_tls_version: Option<TlsVersion>,
    /// What a hello with ECH does, on routes that do not say ([`DEFAULT_ECH`]).
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
    pub half_close_timeout: Duration,
    /// `None`: connections live as long as they like.
    pub max_connection_lifetime: Option<Duration>,
    // QUIC listeners (issue 18).
    /// `protocol`: TCP (TLS over TCP) or QUIC (UDP datagrams).
    pub protocol: Protocol,
}

// QUIC listeners (issue 18).
/// `protocol`: what a listener binds and reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// TCP sockets carrying TLS.
    #[default]
    Tcp,
    /// UDP sockets carrying QUIC v1/v2; see `quic::listener`.
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
pub const DEFAULT_QUIC_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

impl Listener {
    /// The listener's relay timeouts: those of its routes that set none,
    /// and of its `no_sni` backend.
    pub fn timeouts(&self) -> Timeouts {
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
    V1_0,
    V1_1,
    V1_2,
    V1_3,
}

impl TlsVersion {
    pub const ALL: [TlsVersion; 4] = [
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
    pub const fn wire(self) -> u16 {
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

#[derive(Debug, Clone)]
pub struct Route {
    pub name: String,
    pub patterns: Vec<Pattern>,
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
}

/// One problem in a configuration file: the key, in TOML path form, and
/// what is wrong with its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub key: String,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path}: reading did not finish within {}s (a FIFO with no writer, or a hung mount?)",
        CONFIG_READ_TIMEOUT.as_secs()
    )]
    ReadTimeout { path: PathBuf },
    #[error("{path}: an earlier read of the file has not finished yet; not reading it again")]
    ReadStuck { path: PathBuf },
    #[error("{path}: larger than {} bytes", MAX_CONFIG_BYTES)]
    TooLarge { path: PathBuf },
    #[error("{path}: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("{path}: {} problem(s):\n{}", problems.len(), list(problems))]
    Invalid {
        path: PathBuf,
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
pub const CONFIG_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest configuration file read; a real one is a few kilobytes.
pub const MAX_CONFIG_BYTES: u64 = 4 * 1024 * 1024;

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
pub fn read_file(
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
pub struct ReadTicket(Arc<AtomicBool>);

impl ReadTicket {
    /// Marks the read as given up on: it counts as stuck until it returns.
    pub fn abandon(self) {
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
    /// most [`CONFIG_READ_TIMEOUT`] (see [`read_file`]). Blocks the calling
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
        let mut check = Checker {
            dir: path.parent().map(Path::to_owned).unwrap_or_default(),
            ..Checker::default()
        };
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

/// Collects problems while building the snapshot; each helper returns `None`
/// (after recording why) when its value is unusable.
#[derive(Default)]
struct Checker {
    problems: Vec<Problem>,
    declared_backends: HashSet<String>,
    /// The configuration file's directory: a relative `token_file` is
    /// found from there.
    dir: PathBuf,
}

impl Checker {
    fn problem(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem {
            key: key.into(),
            message: message.into(),
        });
    }

    fn config(&mut self, file: &FileConfig) -> Option<Config> {
        self.declared_backends = file.backends.keys().cloned().collect();
        let global = Global {
            max_connections: self
                .ranged(
                    "global.max_connections",
                    file.global.max_connections,
                    MAX_CONNECTIONS_RANGE,
                    DEFAULT_MAX_CONNECTIONS as i64,
                )
                .unwrap_or(0) as usize,
            drain_timeout: self
                .duration(
                    "global.drain_timeout",
                    &file.global.drain_timeout,
                    DEFAULT_DRAIN_TIMEOUT,
                )
                .unwrap_or_default(),
            threads: self
                .ranged(
                    "global.threads",
                    file.global.threads,
                    THREADS_RANGE,
                    default_threads() as i64,
                )
                .unwrap_or(1) as usize,
            splice: file.global.splice.unwrap_or(DEFAULT_SPLICE),
            pipe_size: self
                .ranged(
                    "global.pipe_size",
                    file.global.pipe_size,
                    PIPE_SIZE_RANGE,
                    DEFAULT_PIPE_SIZE as i64,
                )
                .unwrap_or(0) as usize,
            max_pipes: self
                .ranged(
                    "global.max_pipes",
                    file.global.max_pipes,
                    MAX_PIPES_RANGE,
                    DEFAULT_MAX_PIPES as i64,
                )
                .unwrap_or(0) as usize,
            max_connection_rate: self.optional_nonzero(
                "global.max_connection_rate",
                file.global.max_connection_rate,
                RATE_RANGE,
            ),
        };

        let backends: BTreeMap<String, Arc<Backend>> = file
            .backends
            .iter()
            .filter_map(|(name, section)| {
                let backend = self.backend(name, section)?;
                Some((name.clone(), Arc::new(backend)))
            })
            .collect();
        for (name, section) in &file.backends {
            let local = section
                .cluster
                .as_ref()
                .and_then(|c| c.local_backend.as_ref());
            if let Some(local) = local
                && file
                    .backends
                    .get(local)
                    .is_some_and(|b| b.cluster.is_some())
            {
                self.problem(
                    format!("backend.{name}.cluster.local_backend"),
                    format!("{local:?} is itself a [cluster] backend; name one with fixed or resolved addresses"),
                );
            }
        }

        if file.listeners.is_empty() {
            self.problem("listener", "at least one [[listener]] is required");
        }
        let mut names = HashSet::new();
        let mut binds = HashSet::new();
        let mut listeners = Vec::new();
        for (index, section) in file.listeners.iter().enumerate() {
            let key = format!("listener[{index}]");
            if !names.insert(section.name.as_str()) {
                self.problem(
                    format!("{key}.name"),
                    format!("listener name {:?} is used twice", section.name),
                );
            }
            if let Some(mut listener) = self.listener(&key, section, &backends, &mut binds) {
                listener.splice = section.splice.unwrap_or(global.splice);
                // QUIC listeners (issue 18): their own fallbacks too.
                if let NoSni::Backend(backend) = &listener.no_sni {
                    self.quic_backend(
                        &format!("{key}.no_sni"),
                        &listener,
                        &backend.clone(),
                        &backends,
                    );
                }
                if let EchPolicy::Backend(backend) = &listener.ech {
                    self.quic_backend(
                        &format!("{key}.ech"),
                        &listener,
                        &backend.clone(),
                        &backends,
                    );
                }
                listeners.push(listener);
            }
        }
        self.routes(file, &mut listeners, &backends);
        for listener in &listeners {
            // A route dropped for its own problem (reported already) still names it.
            let named = file.routes.iter().any(|r| match &r.listener {
                Some(name) => name == &listener.name,
                None => file.listeners.len() == 1,
            });
            if !named && listener.routes.is_empty() && matches!(listener.no_sni, NoSni::Reject) {
                self.problem(
                    format!("listener {:?}", listener.name),
                    "no [[route]] names this listener, so it would refuse every connection",
                );
            }
        }
        let admin = match &file.admin {
            None => None,
            Some(section) => Some(self.admin(section)?),
        };
        Some(Config {
            global,
            listeners: listeners.into_iter().map(Arc::new).collect(),
            backends,
            admin,
        })
    }

    fn admin(&mut self, section: &AdminSection) -> Option<Admin> {
        let text = section.listen.as_deref().unwrap_or(DEFAULT_ADMIN_LISTEN);
        let allow_public = section.allow_public.unwrap_or(DEFAULT_ADMIN_ALLOW_PUBLIC);
        // Run-time control (issue 16): a Unix socket, and the token file.
        let token_file = match section.token_file.as_deref() {
            None => None,
            Some(path) => match read_tokens(&self.dir.join(path)) {
                Ok(tokens) => Some(tokens),
                Err(message) => {
                    self.problem("admin.token_file", message);
                    return None;
                }
            },
        };
        // Pushed local names (issue 17).
        let moved_close_window = self.duration(
            "admin.moved_close_window",
            &section.moved_close_window,
            DEFAULT_MOVED_CLOSE_WINDOW,
        );
        let local_names_file = match section.local_names_file.as_deref() {
            None => None,
            Some("") => {
                self.problem("admin.local_names_file", "\"\" names no file");
                return None;
            }
            Some(path) => Some(self.dir.join(path)),
        };
        // One base address for a Pangolin node (issue 30).
        let mut push_unauthenticated_from = Vec::new();
        for (i, cidr) in section
            .push_unauthenticated_from
            .iter()
            .flatten()
            .enumerate()
        {
            let key = format!("admin.push_unauthenticated_from[{i}]");
            match cidr.parse::<Cidr>() {
                Ok(net) if net.prefix() == 0 => self.problem(
                    key,
                    format!(
                        "{cidr:?} would take a push from anywhere without a token; \
                         list the control plane's addresses"
                    ),
                ),
                Ok(net) => push_unauthenticated_from.push(net),
                Err(e) => self.problem(key, format!("{cidr:?}: {e}")),
            }
        }
        let forward_unmatched_to = match section.forward_unmatched_to.as_deref() {
            None => None,
            Some(text) => match ForwardTo::parse(text) {
                Ok(to) => Some(to),
                Err(message) => {
                    self.problem("admin.forward_unmatched_to", message);
                    return None;
                }
            },
        };
        if let Some(path) = text.strip_prefix("unix:") {
            if !path.starts_with('/') {
                self.problem(
                    "admin.listen",
                    format!("{text:?}: a Unix socket path must be absolute (\"unix:/run/snirelay/admin.sock\")"),
                );
                return None;
            }
            if !push_unauthenticated_from.is_empty() {
                self.problem(
                    "admin.push_unauthenticated_from",
                    format!(
                        "{text:?} is a Unix socket: its callers have no source address, \
                         and whoever may open it may push already"
                    ),
                );
                return None;
            }
            return Some(Admin {
                listen: AdminListen::Unix(PathBuf::from(path)),
                allow_public,
                expose_config: section.expose_config.unwrap_or(DEFAULT_ADMIN_EXPOSE_CONFIG),
                address_labels: section
                    .address_labels
                    .unwrap_or(DEFAULT_ADMIN_ADDRESS_LABELS),
                token_file,
                local_names_file,
                moved_close_window: moved_close_window?,
                push_unauthenticated_from,
                forward_unmatched_to,
            });
        }
        let listen = self.socket_addr("admin.listen", text)?;
        if !listen.ip().is_loopback() && !allow_public {
            self.problem(
                "admin.listen",
                format!(
                    "{text:?} is not a loopback address; the admin listener exposes \
                     metrics (and the configuration with expose_config), so set \
                     admin.allow_public = true to mean it"
                ),
            );
            return None;
        }
        Some(Admin {
            listen: AdminListen::Tcp(listen),
            allow_public,
            expose_config: section.expose_config.unwrap_or(DEFAULT_ADMIN_EXPOSE_CONFIG),
            address_labels: section
                .address_labels
                .unwrap_or(DEFAULT_ADMIN_ADDRESS_LABELS),
            token_file,
            local_names_file,
            moved_close_window: moved_close_window?,
            push_unauthenticated_from,
            forward_unmatched_to,
        })
    }

    fn backend(&mut self, name: &str, section: &BackendSection) -> Option<Backend> {
        let key = format!("backend.{name}");
        let sources = [
            section.addresses.is_some(),
            section.resolve.is_some(),
            section.cluster.is_some(),
        ];
        match sources.iter().filter(|&&set| set).count() {
            1 => {}
            0 => {
                self.problem(
                    &key,
                    "needs one of `addresses`, `resolve` or a [cluster] section",
                );
                return None;
            }
            _ => {
                self.problem(
                    &key,
                    "`addresses`, `resolve` and [cluster] are alternatives; set only one",
                );
                return None;
            }
        }
        let texts = section.addresses.as_deref().unwrap_or_default();
        if section.addresses.is_some() && texts.is_empty() {
            self.problem(
                format!("{key}.addresses"),
                "at least one address is required",
            );
        }
        let members: Vec<Member> = texts
            .iter()
            .enumerate()
            .filter_map(|(i, entry)| self.member(&format!("{key}.addresses[{i}]"), entry))
            .collect();
        let addresses: Vec<SocketAddr> = members.iter().map(|m| m.addr).collect();
        let max_connections_per_address = self.address_cap(
            &format!("{key}.max_connections_per_address"),
            section.max_connections_per_address,
        );
        let connect_timeout = self.duration(
            &format!("{key}.connect_timeout"),
            &section.connect_timeout,
            DEFAULT_CONNECT_TIMEOUT,
        );
        // A cluster backend's header towards other nodes is its
        // `hop_proxy_protocol` (checked with the [cluster] section).
        let hop = section
            .cluster
            .as_ref()
            .map(|c| match c.hop_proxy_protocol.as_deref() {
                Some("v1") => Outbound::V1,
                _ => DEFAULT_HOP_PROXY_PROTOCOL,
            });
        let proxy_default = hop.unwrap_or(DEFAULT_PROXY_PROTOCOL);
        let proxy_protocol = match section.proxy_protocol.as_deref() {
            None => Some(proxy_default),
            Some("none") => Some(Outbound::None),
            Some("v1") => Some(Outbound::V1),
            Some("v2") => Some(Outbound::V2),
            Some(other) => {
                self.problem(
                    format!("{key}.proxy_protocol"),
                    format!("{other:?} is not one of \"v2\", \"v1\", \"none\""),
                );
                None
            }
        };
        let proxy_protocol_crc32c = section
            .proxy_protocol_crc32c
            .unwrap_or(DEFAULT_PROXY_PROTOCOL_CRC32C);
        if proxy_protocol_crc32c && proxy_protocol.is_some_and(|p| p != Outbound::V2) {
            self.problem(
                format!("{key}.proxy_protocol_crc32c"),
                "true needs proxy_protocol = \"v2\" (only v2 headers carry a checksum)",
            );
        }
        if let Some(hop) = hop
            && proxy_protocol.is_some_and(|p| p != hop)
        {
            self.problem(
                format!("{key}.proxy_protocol"),
                "a [cluster] backend forwards to other nodes with PROXY v2 (it carries the \
                 client and the hop count) or, with `hop_proxy_protocol = \"v1\"`, v1; \
                 leave it unset or set the same version",
            );
        }
        let policy = self.policy(&key, section);
        let connect_attempts = match section.connect_attempts {
            None => Some(None),
            Some(v) => self
                .ranged(
                    &format!("{key}.connect_attempts"),
                    Some(v),
                    CONNECT_ATTEMPTS_RANGE,
                    0,
                )
                .map(|n| Some(n as usize)),
        };
        let max_fails = self.ranged(
            &format!("{key}.max_fails"),
            section.max_fails,
            MAX_FAILS_RANGE,
            i64::from(DEFAULT_MAX_FAILS),
        );
        let fail_backoff = self.duration(
            &format!("{key}.fail_backoff"),
            &section.fail_backoff,
            DEFAULT_FAIL_BACKOFF,
        );
        let fastest_interval = self.duration(
            &format!("{key}.fastest_interval"),
            &section.fastest_interval,
            DEFAULT_FASTEST_INTERVAL,
        );
        // Which keys the table sets, by name, for the policies' own keys.
        let written = toml::Value::try_from(section).ok();
        let is_set = |name: &str| written.as_ref().and_then(|t| t.get(name)).is_some();
        for (own, problem) in Policy::misplaced_keys(policy, is_set) {
            self.problem(format!("{key}.{own}"), problem);
        }
        let health = match &section.health {
            None => Some(None),
            Some(health) => self.health(&format!("{key}.health"), health).map(Some),
        };
        let fastest_measure = match section.fastest_measure.as_deref() {
            None => Some(DEFAULT_FASTEST_MEASURE),
            Some("connect") => Some(FastestMeasure::Connect),
            Some("tls") => {
                let tls_check = section
                    .health
                    .as_ref()
                    .is_some_and(|h| h.kind.as_deref() == Some("tls"));
                if !tls_check {
                    self.problem(
                        format!("{key}.fastest_measure"),
                        "\"tls\" times the TLS health check's ClientHello; it needs \
                         [backend.*.health] kind = \"tls\" (with its sni)",
                    );
                }
                Some(FastestMeasure::Tls)
            }
            Some(other) => {
                self.problem(
                    format!("{key}.fastest_measure"),
                    format!("{other:?} is not one of \"connect\", \"tls\""),
                );
                None
            }
        };
        let source = self.address_source(&key, section);
        if section.cluster.is_some() {
            // Its endpoint state is kept per site, so a cap would count
            // connections per (site, node), not per node.
            if section.max_connections_per_address.is_some() {
                self.problem(
                    format!("{key}.max_connections_per_address"),
                    "a [cluster] backend's nodes are tracked per SNI; cap its local_backend instead",
                );
            }
            if section.health.is_some() {
                self.problem(
                    format!("{key}.health"),
                    "a [cluster] backend's nodes change per SNI; check the local backend instead",
                );
            }
            if section.policy.is_some() && policy.is_some_and(|p| p != Policy::CLUSTER) {
                self.problem(
                    format!("{key}.policy"),
                    format!(
                        "a [cluster] backend chooses among a site's nodes by {:?}",
                        Policy::CLUSTER.as_str()
                    ),
                );
            }
        }
        let tcp_keepalive = self.keepalive(
            &format!("{key}.tcp_keepalive"),
            section.tcp_keepalive.as_ref(),
        );
        if addresses.len() != texts.len() {
            return None;
        }
        let policy = match (&source, policy) {
            (Some(AddressSource::Cluster(_)), _) => Policy::CLUSTER,
            (_, policy) => policy?,
        };
        Some(Backend {
            name: name.to_owned(),
            addresses,
            connect_timeout: connect_timeout?,
            proxy_protocol: proxy_protocol?,
            proxy_protocol_crc32c,
            source: source?,
            policy,
            connect_attempts: connect_attempts?,
            max_fails: max_fails? as u32,
            fail_backoff: fail_backoff?,
            health: health?,
            fastest_interval: fastest_interval?,
            tcp_keepalive: tcp_keepalive?,
            members,
            max_connections_per_address: max_connections_per_address?,
            fastest_measure: fastest_measure?,
        })
    }

    /// One `addresses` entry: a plain `"IP:port"` or a table.
    fn member(&mut self, key: &str, entry: &AddressEntry) -> Option<Member> {
        let (text, weight, max_connections) = match entry {
            AddressEntry::Plain(text) => (text, None, None),
            AddressEntry::Table(AddressTable {
                address,
                weight,
                max_connections,
            }) => (address, *weight, *max_connections),
        };
        let addr_key = match entry {
            AddressEntry::Plain(_) => key.to_owned(),
            AddressEntry::Table(_) => format!("{key}.address"),
        };
        let addr = self.socket_addr(&addr_key, text);
        let weight = self.ranged(
            &format!("{key}.weight"),
            weight,
            WEIGHT_RANGE,
            i64::from(DEFAULT_WEIGHT),
        );
        let max_connections = self.address_cap(&format!("{key}.max_connections"), max_connections);
        Some(Member {
            addr: addr?,
            weight: weight? as u32,
            max_connections: max_connections?,
        })
    }

    /// A per-address connection cap; unset is no cap.
    fn address_cap(&mut self, key: &str, value: Option<i64>) -> Option<Option<u32>> {
        match value {
            None => Some(None),
            Some(v) => self
                .ranged(key, Some(v), ADDRESS_CONNECTIONS_RANGE, 0)
                .map(|n| Some(n as u32)),
        }
    }

    fn policy(&mut self, key: &str, section: &BackendSection) -> Option<Policy> {
        match section.policy.as_deref() {
            None => Some(DEFAULT_POLICY),
            Some(name) => Policy::parse(name)
                .map_err(|problem| self.problem(format!("{key}.policy"), problem))
                .ok(),
        }
    }

    fn health(&mut self, key: &str, section: &HealthSection) -> Option<HealthCheck> {
        let interval = self.duration(
            &format!("{key}.interval"),
            &section.interval,
            DEFAULT_HEALTH_INTERVAL,
        );
        let timeout = self.duration(
            &format!("{key}.timeout"),
            &section.timeout,
            DEFAULT_HEALTH_TIMEOUT,
        );
        let rise = self.ranged(
            &format!("{key}.rise"),
            section.rise,
            RISE_FALL_RANGE,
            i64::from(DEFAULT_HEALTH_RISE),
        );
        let fall = self.ranged(
            &format!("{key}.fall"),
            section.fall,
            RISE_FALL_RANGE,
            i64::from(DEFAULT_HEALTH_FALL),
        );
        let kind = match (
            section.kind.as_deref().unwrap_or(DEFAULT_HEALTH_KIND),
            &section.sni,
        ) {
            ("tcp", None) => Some(HealthKind::Tcp),
            ("tcp", Some(_)) => {
                self.problem(format!("{key}.sni"), "only applies with kind = \"tls\"");
                None
            }
            ("tls", None) => {
                self.problem(
                    format!("{key}.sni"),
                    "kind = \"tls\" needs the server name its ClientHello sends",
                );
                None
            }
            ("tls", Some(sni)) => match crate::sni::Sni::parse(sni.as_bytes()) {
                Ok(name) => Some(HealthKind::Tls {
                    sni: name.as_str().to_owned(),
                }),
                Err(e) => {
                    self.problem(
                        format!("{key}.sni"),
                        format!("{sni:?} is not a host name ({e})"),
                    );
                    None
                }
            },
            (other, _) => {
                self.problem(
                    format!("{key}.kind"),
                    format!("{other:?} is not one of \"tcp\", \"tls\""),
                );
                None
            }
        };
        Some(HealthCheck {
            interval: interval?,
            timeout: timeout?,
            rise: rise? as u32,
            fall: fall? as u32,
            kind: kind?,
        })
    }

    fn address_source(&mut self, key: &str, section: &BackendSection) -> Option<AddressSource> {
        let dns_only = [
            ("resolver", section.resolver.is_some()),
            ("resolve_interval", section.resolve_interval.is_some()),
            ("min_ttl", section.min_ttl.is_some()),
            ("max_ttl", section.max_ttl.is_some()),
        ];
        if section.resolve.is_none() {
            for (name, set) in dns_only {
                if set {
                    self.problem(format!("{key}.{name}"), "only applies with `resolve`");
                }
            }
        }
        if let Some(cluster) = &section.cluster {
            return self
                .cluster(&format!("{key}.cluster"), cluster)
                .map(AddressSource::Cluster);
        }
        let Some(target) = &section.resolve else {
            return Some(AddressSource::Fixed);
        };
        let host_port = match target.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() => port
                .parse::<u16>()
                .ok()
                .filter(|&p| p != 0)
                .map(|p| (host.trim_start_matches('[').trim_end_matches(']'), p)),
            _ => None,
        };
        let Some((host, port)) = host_port else {
            self.problem(
                format!("{key}.resolve"),
                format!("{target:?} is not host:port (e.g. \"origin.example.net:443\")"),
            );
            return None;
        };
        if host.parse::<std::net::IpAddr>().is_ok() {
            self.problem(
                format!("{key}.resolve"),
                format!("{target:?} is an address, not a name; list it in `addresses`"),
            );
            return None;
        }
        let resolver = match &section.resolver {
            None => Some(None),
            Some(text) => self.socket_addr(&format!("{key}.resolver"), text).map(Some),
        };
        let interval = self.duration(
            &format!("{key}.resolve_interval"),
            &section.resolve_interval,
            DEFAULT_RESOLVE_INTERVAL,
        );
        if section.resolver.is_some() && section.resolve_interval.is_some() {
            self.problem(
                format!("{key}.resolve_interval"),
                "with `resolver` the record TTL decides (bounded by min_ttl and max_ttl)",
            );
        }
        if section.resolver.is_none() {
            for (name, set) in &dns_only[2..] {
                if *set {
                    self.problem(
                        format!("{key}.{name}"),
                        "only applies with `resolver` (the system resolver reports no TTL)",
                    );
                }
            }
        }
        let min_ttl = self.duration(&format!("{key}.min_ttl"), &section.min_ttl, DEFAULT_MIN_TTL);
        let max_ttl = self.duration(&format!("{key}.max_ttl"), &section.max_ttl, DEFAULT_MAX_TTL);
        if let (Some(min), Some(max)) = (min_ttl, max_ttl)
            && min > max
        {
            self.problem(
                format!("{key}.min_ttl"),
                format!(
                    "{:?} is longer than max_ttl ({:?})",
                    humantime::format_duration(min).to_string(),
                    humantime::format_duration(max).to_string()
                ),
            );
            return None;
        }
        Some(AddressSource::Dns(DnsSource {
            host: host.to_ascii_lowercase(),
            port,
            resolver: resolver?,
            interval: interval?,
            min_ttl: min_ttl?,
            max_ttl: max_ttl?,
        }))
    }

    fn cluster(&mut self, key: &str, section: &ClusterSection) -> Option<Cluster> {
        if section.resolver.is_some() && section.lookup_url.is_none() {
            self.problem(
                format!("{key}.resolver"),
                "only applies with `lookup_url` (it resolves host names in the answers)",
            );
        }
        let lookup = match (&section.dns_server, &section.lookup_url) {
            (Some(server), None) => {
                let server = self.socket_addr(&format!("{key}.dns_server"), server);
                let port = self.ranged(
                    &format!("{key}.port"),
                    section.port,
                    PORT_RANGE,
                    i64::from(DEFAULT_CLUSTER_PORT),
                );
                server.zip(port).map(|(server, port)| ClusterLookup::Dns {
                    server,
                    port: port as u16,
                })
            }
            (None, Some(url)) => {
                if section.port.is_some() {
                    self.problem(
                        format!("{key}.port"),
                        "only applies with `dns_server` (lookup answers carry ip:port)",
                    );
                }
                let valid = url.parse::<hyper::Uri>().ok().filter(|uri| {
                    matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some()
                });
                let resolver = match &section.resolver {
                    None => Some(None),
                    Some(text) => self.socket_addr(&format!("{key}.resolver"), text).map(Some),
                };
                match (valid, resolver) {
                    (Some(_), Some(resolver)) => Some(ClusterLookup::Http {
                        url: url.clone(),
                        resolver,
                    }),
                    // The resolver's problem is already reported.
                    (Some(_), None) => None,
                    (None, _) => {
                        self.problem(
                            format!("{key}.lookup_url"),
                            format!("{url:?} is not an http:// or https:// URL"),
                        );
                        None
                    }
                }
            }
            _ => {
                self.problem(key, "needs exactly one of `dns_server` and `lookup_url`");
                None
            }
        };
        if let Some(local) = &section.local_backend
            && !self.declared_backends.contains(local)
        {
            self.problem(
                format!("{key}.local_backend"),
                format!("{local:?} names no [backend.*] section"),
            );
        }
        let positive_ttl = self.duration(
            &format!("{key}.positive_ttl"),
            &section.positive_ttl,
            DEFAULT_POSITIVE_TTL,
        );
        let negative_ttl = self.duration(
            &format!("{key}.negative_ttl"),
            &section.negative_ttl,
            DEFAULT_NEGATIVE_TTL,
        );
        let lookup_timeout = self.duration(
            &format!("{key}.lookup_timeout"),
            &section.lookup_timeout,
            DEFAULT_LOOKUP_TIMEOUT,
        );
        let texts = section.allowed_targets.as_deref().unwrap_or_default();
        if texts.is_empty() {
            self.problem(
                format!("{key}.allowed_targets"),
                "at least one network is required: answers steer traffic, so say where it may go",
            );
        }
        let mut allowed_targets = Vec::new();
        for (i, text) in texts.iter().enumerate() {
            match text.parse::<Cidr>() {
                Ok(cidr) => allowed_targets.push(cidr),
                Err(e) => self.problem(
                    format!("{key}.allowed_targets[{i}]"),
                    format!("{text:?}: {e}"),
                ),
            }
        }
        // Pangolin lookups and Gerbil's node choice (issue 17).
        let http = section.lookup_url.as_deref();
        let protocol = self.cluster_protocol(key, section, http.is_some());
        let headers = self.lookup_headers(key, section, http.is_some());
        let tls = self.lookup_tls(key, section, http);
        let node_choice = match section.node_choice.as_deref() {
            None => Some(NodeChoice::default()),
            Some(name) => NodeChoice::parse(name)
                .map_err(|e| self.problem(format!("{key}.node_choice"), e))
                .ok(),
        };
        // Pangolin nodes (issue 17).
        let mut local_overrides = Vec::new();
        let override_texts = section.local_overrides.as_deref().unwrap_or_default();
        for (i, text) in override_texts.iter().enumerate() {
            match Pattern::parse(text) {
                Ok(Pattern::Any) => self.problem(
                    format!("{key}.local_overrides[{i}]"),
                    "\"*\" would send every name to local_backend; name the sites (exact or *.domain)",
                ),
                Ok(pattern) => local_overrides.push(pattern),
                Err(e) => self.problem(
                    format!("{key}.local_overrides[{i}]"),
                    format!("{text:?}: {e}"),
                ),
            }
        }
        if !override_texts.is_empty() && section.local_backend.is_none() {
            self.problem(
                format!("{key}.local_overrides"),
                "needs `local_backend`: the names are sent there",
            );
        }
        let hop_proxy_protocol = match section.hop_proxy_protocol.as_deref() {
            None => Some(DEFAULT_HOP_PROXY_PROTOCOL),
            Some("v2") => Some(Outbound::V2),
            Some("v1") => Some(Outbound::V1),
            Some(other) => {
                self.problem(
                    format!("{key}.hop_proxy_protocol"),
                    format!("{other:?} is not one of \"v2\", \"v1\""),
                );
                None
            }
        };
        if allowed_targets.len() != texts.len()
            || texts.is_empty()
            || local_overrides.len() != override_texts.len()
        {
            return None;
        }
        Some(Cluster {
            lookup: lookup?,
            local_backend: section.local_backend.clone(),
            positive_ttl: positive_ttl?,
            negative_ttl: negative_ttl?,
            lookup_timeout: lookup_timeout?,
            allowed_targets,
            protocol: protocol?,
            headers: headers?,
            tls: tls?,
            node_choice: node_choice?,
            local_overrides,
            hop_proxy_protocol: hop_proxy_protocol?,
        })
    }

    /// `protocol`, and the keys only `pangolin` takes. `http`: the cluster
    /// asks a `lookup_url` (a DNS lookup has no protocol to choose).
    fn cluster_protocol(
        &mut self,
        key: &str,
        section: &ClusterSection,
        http: bool,
    ) -> Option<ClusterProtocol> {
        let name = section.protocol.as_deref().unwrap_or("snirelay");
        if section.protocol.is_some() && !http {
            self.problem(format!("{key}.protocol"), "only applies with `lookup_url`");
            return None;
        }
        match name {
            "snirelay" => {
                let pangolin_only = [
                    ("public_key", section.public_key.is_some()),
                    ("public_key_file", section.public_key_file.is_some()),
                    ("default_port", section.default_port.is_some()),
                ];
                let mut ok = true;
                for (own, set) in pangolin_only {
                    if set {
                        self.problem(
                            format!("{key}.{own}"),
                            "only applies with protocol = \"pangolin\"",
                        );
                        ok = false;
                    }
                }
                ok.then_some(ClusterProtocol::Snirelay)
            }
            "pangolin" => {
                let default_port = self.ranged(
                    &format!("{key}.default_port"),
                    section.default_port,
                    PORT_RANGE,
                    i64::from(DEFAULT_CLUSTER_PORT),
                );
                let (public_key, public_key_file) =
                    match (&section.public_key, &section.public_key_file) {
                        (Some(text), None) => (text.trim().to_owned(), None),
                        (None, Some(path)) => {
                            let path = self.dir.join(path);
                            match std::fs::read_to_string(&path) {
                                Ok(text) => (text.trim().to_owned(), Some(path)),
                                Err(e) => {
                                    self.problem(
                                        format!("{key}.public_key_file"),
                                        format!("{}: {e}", path.display()),
                                    );
                                    return None;
                                }
                            }
                        }
                        _ => {
                            self.problem(
                                format!("{key}.public_key"),
                                "protocol = \"pangolin\" needs exactly one of `public_key` and \
                                 `public_key_file` (Pangolin refuses a lookup without the key)",
                            );
                            return None;
                        }
                    };
                if public_key.is_empty() {
                    let which = if public_key_file.is_some() {
                        "public_key_file"
                    } else {
                        "public_key"
                    };
                    self.problem(format!("{key}.{which}"), "the public key is empty");
                    return None;
                }
                Some(ClusterProtocol::Pangolin {
                    public_key,
                    public_key_file,
                    default_port: default_port? as u16,
                })
            }
            other => {
                self.problem(
                    format!("{key}.protocol"),
                    format!("{other:?} is not one of \"snirelay\", \"pangolin\""),
                );
                None
            }
        }
    }

    /// `[cluster.headers]`: each name an HTTP header the lookup does not
    /// set itself, each value valid in a header (a file's contents without
    /// the trailing newline). Errors never show a value.
    fn lookup_headers(
        &mut self,
        key: &str,
        section: &ClusterSection,
        http: bool,
    ) -> Option<Vec<LookupHeader>> {
        let Some(table) = &section.headers else {
            return Some(Vec::new());
        };
        if !http {
            self.problem(format!("{key}.headers"), "only applies with `lookup_url`");
            return None;
        }
        let mut headers = Vec::new();
        let mut ok = true;
        for (name, setting) in table {
            let at = format!("{key}.headers.{name}");
            let parsed = hyper::header::HeaderName::from_bytes(name.as_bytes());
            let Ok(parsed) = parsed else {
                self.problem(at, "not a valid HTTP header name");
                ok = false;
                continue;
            };
            use hyper::header::{
                CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, HOST, TRANSFER_ENCODING,
            };
            if [
                HOST,
                CONTENT_TYPE,
                CONTENT_LENGTH,
                TRANSFER_ENCODING,
                CONNECTION,
            ]
            .contains(&parsed)
            {
                self.problem(at, "the lookup sets this header itself");
                ok = false;
                continue;
            }
            let (value, file) = match setting {
                HeaderValueSetting::Text(text) => (text.clone(), None),
                HeaderValueSetting::File(HeaderFile { file }) => {
                    let path = self.dir.join(file);
                    match std::fs::read_to_string(&path) {
                        Ok(text) => (text.trim_end_matches(['\n', '\r']).to_owned(), Some(path)),
                        Err(e) => {
                            self.problem(at, format!("{}: {e}", path.display()));
                            ok = false;
                            continue;
                        }
                    }
                }
            };
            if hyper::header::HeaderValue::from_str(&value).is_err() {
                let message = match &file {
                    Some(path) => format!(
                        "{}: the contents are not a valid header value (one line of visible ASCII)",
                        path.display()
                    ),
                    None => "not a valid header value (visible ASCII)".to_owned(),
                };
                self.problem(at, message);
                ok = false;
                continue;
            }
            headers.push(LookupHeader {
                name: name.clone(),
                value,
                file,
            });
        }
        ok.then_some(headers)
    }

    /// `ca_file`, `client_cert_file` and `client_key_file`: read and built
    /// into the TLS client of an `https://` `lookup_url` (`None` inside for
    /// any other lookup).
    fn lookup_tls(
        &mut self,
        key: &str,
        section: &ClusterSection,
        url: Option<&str>,
    ) -> Option<Option<Arc<LookupTls>>> {
        let uri = url.and_then(|u| u.parse::<hyper::Uri>().ok());
        let https = uri
            .as_ref()
            .is_some_and(|u| u.scheme_str() == Some("https"));
        let keys = [
            ("ca_file", &section.ca_file),
            ("client_cert_file", &section.client_cert_file),
            ("client_key_file", &section.client_key_file),
        ];
        if !https {
            let mut ok = true;
            for (own, value) in keys {
                if value.is_some() {
                    self.problem(
                        format!("{key}.{own}"),
                        "only applies with an https:// `lookup_url`",
                    );
                    ok = false;
                }
            }
            return ok.then_some(None);
        }
        if section.client_cert_file.is_some() != section.client_key_file.is_some() {
            self.problem(
                format!("{key}.client_cert_file"),
                "`client_cert_file` and `client_key_file` go together",
            );
            return None;
        }
        // The name the control plane's certificate must carry.
        let host = uri.as_ref().and_then(|u| u.host()).unwrap_or_default();
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if rustls::pki_types::ServerName::try_from(host).is_err() {
            self.problem(
                format!("{key}.lookup_url"),
                format!("{host:?} is not a host name or address TLS can verify"),
            );
            return None;
        }
        let mut paths: [Option<PathBuf>; 3] = [None, None, None];
        let mut contents: [Arc<[u8]>; 3] = [Arc::from([]), Arc::from([]), Arc::from([])];
        for (i, (own, value)) in keys.iter().enumerate() {
            let Some(value) = value else { continue };
            let path = self.dir.join(value);
            match std::fs::read(&path) {
                Ok(bytes) => contents[i] = bytes.into(),
                Err(e) => {
                    self.problem(format!("{key}.{own}"), format!("{}: {e}", path.display()));
                    return None;
                }
            }
            paths[i] = Some(path);
        }
        let ca = paths[0].as_ref().map(|_| &contents[0][..]);
        let client = paths[1]
            .as_ref()
            .map(|_| (&contents[1][..], &contents[2][..]));
        match crate::backend::cluster_http::tls_client(ca, client) {
            Ok(client) => {
                let [ca_file, client_cert_file, client_key_file] = paths;
                Some(Some(Arc::new(LookupTls {
                    ca_file,
                    client_cert_file,
                    client_key_file,
                    contents,
                    client,
                })))
            }
            Err((own, message)) => {
                self.problem(format!("{key}.{own}"), message);
                None
            }
        }
    }

    fn listener(
        &mut self,
        key: &str,
        section: &ListenerSection,
        backends: &BTreeMap<String, Arc<Backend>>,
        binds: &mut HashSet<(bool, SocketAddr)>,
    ) -> Option<Listener> {
        if section.name.is_empty() {
            self.problem(format!("{key}.name"), "must not be empty");
        }
        let raw_listen = section.listen.as_slice();
        if raw_listen.is_empty() {
            self.problem(format!("{key}.listen"), "at least one address is required");
        }
        let mut listen = Vec::new();
        for (i, text) in raw_listen.iter().enumerate() {
            let addr_key = format!("{key}.listen[{i}]");
            let Some(addr) = self.socket_addr(&addr_key, text) else {
                continue;
            };
            // Port 0 asks the kernel for a free port, so it never collides.
            // A UDP (quic) and a TCP listener may share an address.
            let udp = section.protocol.as_deref() == Some("quic");
            if addr.port() != 0 && !binds.insert((udp, addr)) {
                self.problem(addr_key, format!("{text:?} is listed more than once"));
                continue;
            }
            listen.push(addr);
        }
        let backlog = self.ranged(
            &format!("{key}.backlog"),
            section.backlog,
            BACKLOG_RANGE,
            i64::from(DEFAULT_BACKLOG),
        );
        let max_client_hello_bytes = self.ranged(
            &format!("{key}.max_client_hello_bytes"),
            section.max_client_hello_bytes,
            MAX_CLIENT_HELLO_BYTES_RANGE,
            DEFAULT_MAX_CLIENT_HELLO_BYTES as i64,
        );
        let client_hello_timeout = self.duration(
            &format!("{key}.client_hello_timeout"),
            &section.client_hello_timeout,
            DEFAULT_CLIENT_HELLO_TIMEOUT,
        );
        // QUIC listeners (issue 18): parsed first, since it sets defaults.
        let protocol = self.protocol(key, section);
        let idle_timeout = self.duration(
            &format!("{key}.idle_timeout"),
            &section.idle_timeout,
            match protocol {
                Some(Protocol::Quic) => DEFAULT_QUIC_IDLE_TIMEOUT,
                _ => DEFAULT_IDLE_TIMEOUT,
            },
        );
        let no_sni = match section.no_sni.as_deref() {
            None | Some("reject") => Some(NoSni::Reject),
            Some(name) => match backends.get(name) {
                Some(backend) => Some(NoSni::Backend(backend.clone())),
                // Declared but invalid: its own problems are reported already.
                None if self.declared_backends.contains(name) => None,
                None => {
                    self.problem(
                        format!("{key}.no_sni"),
                        format!("{name:?} is neither \"reject\" nor the name of a [backend.*]"),
                    );
                    None
                }
            },
        };
        let proxy_protocol = match &section.proxy_protocol {
            None => Some(None),
            Some(pp) => self.inbound(&format!("{key}.proxy_protocol"), pp).map(Some),
        };
        let half_close_timeout = self.duration(
            &format!("{key}.half_close_timeout"),
            &section.half_close_timeout,
            DEFAULT_HALF_CLOSE_TIMEOUT,
        );
        let max_connection_lifetime = self.duration_or_off(
            &format!("{key}.max_connection_lifetime"),
            &section.max_connection_lifetime,
            DEFAULT_MAX_CONNECTION_LIFETIME,
        );
        let default_limits = LimitsSection::default();
        let limits = self.limits(
            &format!("{key}.limits"),
            section.limits.as_ref().unwrap_or(&default_limits),
            Some(DEFAULT_CONNECTIONS_PER_SOURCE),
        );
        let tcp_keepalive = self.keepalive(
            &format!("{key}.tcp_keepalive"),
            section.tcp_keepalive.as_ref(),
        );
        let min_tls_version = self.min_tls_version(
            &format!("{key}.min_tls_version"),
            section.min_tls_version.as_deref(),
        );
        let ech = match section.ech.as_deref() {
            None => Some(DEFAULT_ECH),
            Some(text) => self.ech_policy(&format!("{key}.ech"), text, backends),
        };
        let ech_config_ids = self.ech_config_ids(
            &format!("{key}.ech_config_ids"),
            section.ech_config_ids.as_deref(),
        );
        Some(Listener {
            name: section.name.clone(),
            listen: (listen.len() == raw_listen.len()).then_some(listen)?,
            backlog: backlog? as u32,
            client_hello_timeout: client_hello_timeout?,
            idle_timeout: idle_timeout?,
            max_client_hello_bytes: max_client_hello_bytes? as usize,
            no_sni: no_sni?,
            routes: Vec::new(),
            matcher: SniMatcher::new(),
            proxy_protocol: proxy_protocol?,
            reuse_port: section.reuse_port.unwrap_or(DEFAULT_REUSE_PORT),
            splice: DEFAULT_SPLICE,
            limits: limits?,
            half_close_timeout: half_close_timeout?,
            max_connection_lifetime: max_connection_lifetime?,
            // A QUIC listener has no TCP socket to keep alive.
            tcp_keepalive: tcp_keepalive?.filter(|_| protocol != Some(Protocol::Quic)),
            min_tls_version: min_tls_version?,
            ech: ech?,
            ech_config_ids: ech_config_ids?,
            protocol: protocol?,
        })
    }

    // QUIC listeners (issue 18).
    /// `protocol`: `"tcp"` or `"quic"`; on a QUIC listener, the keys that
    /// only mean something for TCP are refused, and a `no_sni` or `ech`
    /// backend must be one a QUIC flow can reach.
    fn protocol(&mut self, key: &str, section: &ListenerSection) -> Option<Protocol> {
        let protocol = match section.protocol.as_deref() {
            None | Some("tcp") => Protocol::Tcp,
            Some("quic") => Protocol::Quic,
            Some(other) => {
                self.problem(
                    format!("{key}.protocol"),
                    format!("{other:?} is neither \"tcp\" nor \"quic\""),
                );
                return None;
            }
        };
        if protocol == Protocol::Quic {
            // The listener keys declared TCP-only (`keys::Applies::Tcp`).
            let written = toml::Value::try_from(section).ok();
            let is_set = |name: &str| written.as_ref().and_then(|t| t.get(name)).is_some();
            for name in keys::tcp_only("listener") {
                if is_set(name) {
                    self.problem(
                        format!("{key}.{name}"),
                        format!(
                            "is a TCP setting; a protocol = \"quic\" listener (UDP) has no use for it (listener {:?})",
                            section.name
                        ),
                    );
                }
            }
        }
        Some(protocol)
    }

    /// A route of a QUIC listener: its keys that only mean something for
    /// TCP are refused, as the listener's are. `half_close_timeout` counts
    /// from a FIN, which a flow of datagrams never sees; every other route
    /// key is read by the QUIC path (README, "QUIC listener").
    fn quic_route(&mut self, key: &str, section: &file::RouteSection, listener: &Listener) {
        if listener.protocol != Protocol::Quic {
            return;
        }
        // The route keys declared TCP-only (`keys::Applies::Tcp`).
        let written = toml::Value::try_from(section).ok();
        let is_set = |name: &str| written.as_ref().and_then(|t| t.get(name)).is_some();
        for name in keys::tcp_only("route").filter(|name| is_set(name)) {
            self.problem(
                format!("{key}.{name}"),
                format!(
                    "is a TCP setting (it counts from a FIN); route {:?} is on protocol = \"quic\" listener {:?}, whose flows have none",
                    section.name.as_deref().unwrap_or_else(|| section.sni.first().map_or("", String::as_str)),
                    listener.name
                ),
            );
        }
    }

    /// On a QUIC listener, `backend` (reached from `key`) must send no
    /// PROXY header (a flow sends the client's datagrams as they are), and
    /// a cluster backend's `local_backend` neither; a cluster that asks DNS
    /// (`dns_server`) needs the listener bound to its node's own addresses,
    /// since a flow knows the address it came to only from its socket and
    /// an answer naming this node must be recognised. A cluster backend's
    /// `hop_proxy_protocol` is not sent over UDP: it is no reason to refuse.
    fn quic_backend(
        &mut self,
        key: &str,
        listener: &Listener,
        backend: &Backend,
        backends: &BTreeMap<String, Arc<Backend>>,
    ) {
        if listener.protocol != Protocol::Quic {
            return;
        }
        let cluster = backend.cluster();
        if cluster.is_none() && backend.proxy_protocol != Outbound::None {
            self.problem(
                key.to_owned(),
                format!(
                    "backend {:?} sends PROXY headers, which a protocol = \"quic\" listener cannot send over UDP",
                    backend.name
                ),
            );
        }
        let Some(cluster) = cluster else {
            return;
        };
        let local = cluster
            .local_backend
            .as_deref()
            .and_then(|name| backends.get(name));
        if let Some(local) = local
            && local.proxy_protocol != Outbound::None
        {
            self.problem(
                key.to_owned(),
                format!(
                    "backend {:?} sends this node's sites to local_backend {:?}, which sends PROXY \
                     headers; a protocol = \"quic\" listener cannot send them over UDP",
                    backend.name, local.name
                ),
            );
        }
        if matches!(cluster.lookup, ClusterLookup::Dns { .. })
            && let Some(wildcard) = listener.listen.iter().find(|a| a.ip().is_unspecified())
        {
            self.problem(
                key.to_owned(),
                format!(
                    "backend {:?} asks a dns_server, whose answer names this node by the address \
                     a client dialled; a protocol = \"quic\" listener knows only its socket's, \
                     and {wildcard} is a wildcard: listen on the node's own addresses",
                    backend.name
                ),
            );
        }
    }

    /// `min_tls_version`: `"1.0"` … `"1.3"`.
    fn min_tls_version(&mut self, key: &str, value: Option<&str>) -> Option<Option<TlsVersion>> {
        let Some(text) = value else {
            return Some(DEFAULT_MIN_TLS_VERSION);
        };
        match TlsVersion::ALL.iter().find(|v| v.as_str() == text) {
            Some(version) => Some(Some(*version)),
            None => {
                self.problem(
                    key,
                    format!("{text:?} is not one of \"1.0\", \"1.1\", \"1.2\", \"1.3\""),
                );
                None
            }
        }
    }

    /// `ech` (listener or route): `"pass"`, `"reject"` or a backend name.
    fn ech_policy(
        &mut self,
        key: &str,
        text: &str,
        backends: &BTreeMap<String, Arc<Backend>>,
    ) -> Option<EchPolicy> {
        match text {
            "pass" => Some(EchPolicy::Pass),
            "reject" => Some(EchPolicy::Reject),
            name => match backends.get(name) {
                Some(backend) => Some(EchPolicy::Backend(backend.clone())),
                // Declared but invalid: its own problems are reported already.
                None if self.declared_backends.contains(name) => None,
                None => {
                    self.problem(
                        key,
                        format!(
                            "{name:?} is neither \"pass\", \"reject\" nor the name of a [backend.*]"
                        ),
                    );
                    None
                }
            },
        }
    }

    /// `ech_config_ids`: distinct ids, each 0–255; unset or empty is none.
    fn ech_config_ids(&mut self, key: &str, ids: Option<&[i64]>) -> Option<Vec<u8>> {
        let Some(ids) = ids else {
            return Some(Vec::new());
        };
        if ids.is_empty() {
            self.problem(
                key,
                "[] lists no id; leave the key out when no ECH configuration is known",
            );
            return None;
        }
        let problems = self.problems.len();
        let mut valid = Vec::new();
        for (i, &id) in ids.iter().enumerate() {
            match u8::try_from(id) {
                Ok(id) if valid.contains(&id) => {
                    self.problem(format!("{key}[{i}]"), format!("{id} is listed twice"))
                }
                Ok(id) => valid.push(id),
                Err(_) => self.problem(
                    format!("{key}[{i}]"),
                    format!("{id} is out of range (0..=255: a config id is one byte)"),
                ),
            }
        }
        valid.sort_unstable();
        (self.problems.len() == problems).then_some(valid)
    }

    /// `tcp_keepalive`: unset or `true` is [`DEFAULT_TCP_KEEPALIVE`],
    /// `false` is off (`Some(None)`), a table overrides the default's
    /// timings one by one. Timings are whole seconds within the kernel's
    /// bounds: a sub-second value would be rounded by the kernel, so it is
    /// refused rather than silently changed.
    fn keepalive(
        &mut self,
        key: &str,
        setting: Option<&KeepaliveSetting>,
    ) -> Option<Option<Keepalive>> {
        let section = match setting {
            None | Some(KeepaliveSetting::Switch(true)) => {
                return Some(Some(DEFAULT_TCP_KEEPALIVE));
            }
            Some(KeepaliveSetting::Switch(false)) => return Some(None),
            Some(KeepaliveSetting::Probes(section)) => section,
        };
        let KeepaliveSection {
            idle,
            interval,
            count,
        } = section;
        let idle = self.keepalive_seconds(&format!("{key}.idle"), idle, DEFAULT_TCP_KEEPALIVE.idle);
        let interval = self.keepalive_seconds(
            &format!("{key}.interval"),
            interval,
            DEFAULT_TCP_KEEPALIVE.interval,
        );
        let count = self.ranged(
            &format!("{key}.count"),
            *count,
            KEEPALIVE_COUNT_RANGE,
            i64::from(DEFAULT_TCP_KEEPALIVE.count),
        );
        Some(Some(Keepalive {
            idle: idle?,
            interval: interval?,
            count: count? as u32,
        }))
    }

    /// A keepalive timing: a duration of whole seconds, 1s..=32767s.
    fn keepalive_seconds(
        &mut self,
        key: &str,
        value: &Option<String>,
        default: Duration,
    ) -> Option<Duration> {
        let d = self.duration(key, value, default)?;
        let text = value.as_deref().unwrap_or_default();
        if d.subsec_nanos() != 0 {
            self.problem(
                key,
                format!("{text:?} is not a whole number of seconds (the kernel counts keepalive time in seconds)"),
            );
            return None;
        }
        let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
        if !KEEPALIVE_SECS_RANGE.contains(&secs) {
            self.problem(
                key,
                format!(
                    "{text:?} is out of range ({}s..={}s)",
                    KEEPALIVE_SECS_RANGE.start(),
                    KEEPALIVE_SECS_RANGE.end()
                ),
            );
            return None;
        }
        Some(d)
    }

    fn inbound(&mut self, key: &str, section: &ProxyProtocolSection) -> Option<Inbound> {
        if section.trusted.is_empty() {
            self.problem(
                format!("{key}.trusted"),
                "at least one network is required (only trusted peers may send a header)",
            );
        }
        let mut trusted = Vec::new();
        let mut trusted_names = Vec::new();
        for (i, text) in section.trusted.iter().enumerate() {
            let entry_key = format!("{key}.trusted[{i}]");
            match text.parse::<Cidr>() {
                Ok(net) => trusted.push(net),
                Err(_) if is_host_name(text) => match resolve_trusted_name(text) {
                    Ok(name) => trusted_names.push(name),
                    Err(why) => self.problem(entry_key, why),
                },
                Err(e) => self.problem(entry_key, format!("{text:?}: {e}")),
            }
        }
        let mode = match section.mode.as_deref() {
            None => Some(DEFAULT_PROXY_PROTOCOL_MODE),
            Some("require") => Some(Mode::Require),
            Some("optional") => Some(Mode::Optional),
            Some(other) => {
                self.problem(
                    format!("{key}.mode"),
                    format!("{other:?} is neither \"require\" nor \"optional\""),
                );
                None
            }
        };
        let max_hops = self.ranged(
            &format!("{key}.max_hops"),
            section.max_hops,
            MAX_HOPS_RANGE,
            i64::from(DEFAULT_MAX_HOPS),
        );
        (trusted.len() + trusted_names.len() == section.trusted.len()
            && !section.trusted.is_empty())
        .then_some(())?;
        Some(Inbound {
            trusted,
            trusted_names,
            mode: mode?,
            max_hops: max_hops? as u8,
        })
    }

    /// `[listener.limits]` or `[route.limits]`; an unset concurrency limit
    /// takes `default_per_source`, unset rate limits are off.
    fn limits(
        &mut self,
        key: &str,
        section: &LimitsSection,
        default_per_source: Option<NonZeroU32>,
    ) -> Option<Limits> {
        let problems = self.problems.len();
        let connections_key = format!("{key}.connections_per_source");
        let connections_per_source = match section.connections_per_source {
            None => default_per_source,
            Some(CountOrOff::Switch(false)) => None,
            Some(CountOrOff::Switch(true)) => {
                self.problem(
                    connections_key,
                    "true names no count: give a number, or false to turn the limit off",
                );
                None
            }
            Some(CountOrOff::Count(n)) => {
                self.optional_nonzero(&connections_key, Some(n), MAX_CONNECTIONS_RANGE)
            }
        };
        let rate = self.optional_nonzero(
            &format!("{key}.connection_rate_per_source"),
            section.connection_rate_per_source,
            RATE_RANGE,
        );
        let burst = self.optional_nonzero(
            &format!("{key}.connection_burst_per_source"),
            section.connection_burst_per_source,
            RATE_RANGE,
        );
        if let (None, Some(b)) = (section.connection_rate_per_source, burst) {
            self.problem(
                format!("{key}.connection_burst_per_source"),
                format!("{b} is set without connection_rate_per_source"),
            );
        }
        let prefix_v4 = self.ranged(
            &format!("{key}.source_prefix_v4"),
            section.source_prefix_v4,
            PREFIX_V4_RANGE,
            i64::from(DEFAULT_SOURCE_PREFIX_V4),
        );
        let prefix_v6 = self.ranged(
            &format!("{key}.source_prefix_v6"),
            section.source_prefix_v6,
            PREFIX_V6_RANGE,
            i64::from(DEFAULT_SOURCE_PREFIX_V6),
        );
        let allow = self.cidrs(&format!("{key}.allow"), &section.allow);
        let deny = self.cidrs(&format!("{key}.deny"), &section.deny);
        if self.problems.len() > problems {
            return None;
        }
        Some(Limits {
            connections_per_source,
            rate_per_source: rate.map(|per_second| Rate {
                per_second,
                burst: burst.unwrap_or(per_second),
            }),
            source_prefix_v4: prefix_v4? as u8,
            source_prefix_v6: prefix_v6? as u8,
            dry_run: section.dry_run.unwrap_or(false),
            allow,
            deny,
            rate_counts_refused: section.rate_counts_refused.unwrap_or(false),
        })
    }

    fn cidrs(&mut self, key: &str, texts: &[String]) -> CidrSet {
        let mut set = CidrSet::default();
        for (i, text) in texts.iter().enumerate() {
            match text.parse::<Cidr>() {
                Ok(cidr) => set.insert(cidr),
                Err(e) => self.problem(format!("{key}[{i}]"), format!("{text:?}: {e}")),
            }
        }
        set
    }

    /// An optional positive count: unset is `None` (unlimited).
    fn optional_nonzero(
        &mut self,
        key: &str,
        value: Option<i64>,
        range: std::ops::RangeInclusive<i64>,
    ) -> Option<NonZeroU32> {
        let v = value?;
        let v = self.ranged(key, Some(v), range, 0)?;
        u32::try_from(v).ok().and_then(NonZeroU32::new)
    }

    /// Attaches every `[[route]]` to its listener and compiles the matchers.
    fn routes(
        &mut self,
        file: &FileConfig,
        listeners: &mut [Listener],
        backends: &BTreeMap<String, Arc<Backend>>,
    ) {
        for (index, section) in file.routes.iter().enumerate() {
            let key = format!("route[{index}]");
            let backend = backends.get(&section.backend).cloned();
            if backend.is_none() && !file.backends.contains_key(&section.backend) {
                self.problem(
                    format!("{key}.backend"),
                    format!("{:?} names no [backend.*] section", section.backend),
                );
            }
            let listener = match (&section.listener, file.listeners.len()) {
                (Some(name), _) => {
                    if !file.listeners.iter().any(|l| &l.name == name) {
                        self.problem(
                            format!("{key}.listener"),
                            format!("{name:?} names no [[listener]]"),
                        );
                    }
                    listeners.iter_mut().find(|l| &l.name == name)
                }
                (None, 1) => listeners.first_mut(),
                (None, _) => {
                    self.problem(
                        format!("{key}.listener"),
                        "required when there is more than one [[listener]]",
                    );
                    None
                }
            };
            if section.sni.is_empty() {
                self.problem(
                    format!("{key}.sni"),
                    "at least one name or pattern is required",
                );
            }
            let mut patterns = Vec::new();
            for (i, text) in section.sni.iter().enumerate() {
                match Pattern::parse(text) {
                    Ok(pattern) => patterns.push(pattern),
                    Err(e) => self.problem(format!("{key}.sni[{i}]"), format!("{text:?}: {e}")),
                }
            }
            // Per-route admission: the listener's limit keys, no default cap.
            let limits = match &section.limits {
                None => Some(None),
                Some(limits) => self
                    .limits(&format!("{key}.limits"), limits, None)
                    .map(Some),
            };
            let max_connections = self.optional_nonzero(
                &format!("{key}.max_connections"),
                section.max_connections,
                MAX_CONNECTIONS_RANGE,
            );
            // The route's relay timeouts, checked even when the route is
            // unusable, so that every problem is reported.
            let overrides = self.route_timeouts(&key, section);
            let alpn = self.alpn(&key, section.alpn.as_deref());
            let ech = match section.ech.as_deref() {
                None => Some(None),
                Some(text) => self
                    .ech_policy(&format!("{key}.ech"), text, backends)
                    .map(Some),
            };
            // QUIC listeners: keys their flows cannot honour.
            if let Some(listener) = &listener {
                self.quic_route(&key, section, listener);
            }
            let (Some(listener), Some(backend), Some(limits), Some(alpn), Some(ech)) =
                (listener, backend, limits, alpn, ech)
            else {
                continue;
            };
            let Some(overrides) = overrides else {
                continue;
            };
            // QUIC listeners (issue 18).
            self.quic_backend(&format!("{key}.backend"), listener, &backend, backends);
            if let Some(EchPolicy::Backend(diverted)) = &ech {
                self.quic_backend(&format!("{key}.ech"), listener, diverted, backends);
            }
            let timeouts = overrides(listener.timeouts());
            let route_id = listener.routes.len();
            for (i, pattern) in patterns.iter().enumerate() {
                let taken = listener.matcher.get(pattern).and_then(|ids| {
                    ids.iter()
                        .find(|&&id| id == route_id || overlap(&listener.routes[id].alpn, &alpn))
                });
                match taken {
                    None => match listener.matcher.get_mut(pattern) {
                        Some(ids) => ids.push(route_id),
                        None => {
                            let _ = listener.matcher.insert(pattern, vec![route_id]);
                        }
                    },
                    Some(&id) if id == route_id => self.problem(
                        format!("{key}.sni[{i}]"),
                        format!("pattern `{pattern}` is listed twice in this route"),
                    ),
                    // Two routes of one pattern that would both take the
                    // same hello: which one wins would be an accident.
                    Some(&id) => {
                        let other = &listener.routes[id];
                        let why = if alpn.is_empty() {
                            "; give one of them an `alpn` list".to_owned()
                        } else {
                            format!(
                                " with an overlapping alpn ({:?} and {:?})",
                                other.alpn, alpn
                            )
                        };
                        self.problem(
                            format!("{key}.sni[{i}]"),
                            format!(
                                "pattern `{pattern}` is already taken by another route on listener {:?} (route {:?}{why})",
                                listener.name, other.name
                            ),
                        );
                    }
                }
            }
            let name = section
                .name
                .clone()
                .or_else(|| patterns.first().map(|p| p.to_string()))
                .unwrap_or_else(|| key.clone());
            // Per-route admission state is kept across reloads by route
            // name, so a route with limits needs a name of its own.
            let gated = |limits: &Option<Limits>, max: &Option<NonZeroU32>| {
                limits.is_some() || max.is_some()
            };
            if listener.routes.iter().any(|r| {
                r.name == name
                    && (gated(&r.limits, &r.max_connections) || gated(&limits, &max_connections))
            }) {
                self.problem(
                    format!("{key}.name"),
                    format!(
                        "{name:?} is also the name of another route on listener {:?}; a route with limits or max_connections needs a name of its own",
                        listener.name
                    ),
                );
            }
            listener.routes.push(Route {
                name,
                patterns,
                backend,
                limits,
                max_connections,
                timeouts,
                alpn,
                ech,
            });
        }
    }

    /// A route's own `idle_timeout`, `half_close_timeout` and
    /// `max_connection_lifetime`, as a function that lays them over its
    /// listener's timeouts.
    fn route_timeouts(
        &mut self,
        key: &str,
        section: &file::RouteSection,
    ) -> Option<impl FnOnce(Timeouts) -> Timeouts + use<>> {
        let mut duration = |name: &str, value: &Option<String>| match value {
            None => Some(None),
            Some(_) => self
                .duration(&format!("{key}.{name}"), value, Duration::ZERO)
                .map(Some),
        };
        let idle = duration("idle_timeout", &section.idle_timeout);
        let half_close = duration("half_close_timeout", &section.half_close_timeout);
        let lifetime = match &section.max_connection_lifetime {
            None => Some(None),
            Some(_) => self
                .duration_or_off(
                    &format!("{key}.max_connection_lifetime"),
                    &section.max_connection_lifetime,
                    None,
                )
                .map(Some),
        };
        let (idle, half_close, lifetime) = (idle?, half_close?, lifetime?);
        Some(move |listener: Timeouts| Timeouts {
            idle: idle.unwrap_or(listener.idle),
            half_close: half_close.unwrap_or(listener.half_close),
            lifetime: lifetime.unwrap_or(listener.lifetime),
        })
    }

    /// A duration, or `false` for none; unset gives `default`.
    fn duration_or_off(
        &mut self,
        key: &str,
        value: &Option<DurationOrOff>,
        default: Option<Duration>,
    ) -> Option<Option<Duration>> {
        match value {
            None => Some(default),
            Some(DurationOrOff::Switch(false)) => Some(None),
            Some(DurationOrOff::Switch(true)) => {
                self.problem(
                    key,
                    "true names no duration: give one (e.g. \"24h\"), or false for no limit",
                );
                None
            }
            Some(DurationOrOff::Duration(text)) => self
                .duration(key, &Some(text.clone()), Duration::ZERO)
                .map(Some),
        }
    }

    /// A route's `alpn`: distinct protocol names of 1–255 bytes; unset is
    /// none (the route takes any hello).
    fn alpn(&mut self, key: &str, names: Option<&[String]>) -> Option<Vec<String>> {
        let key = format!("{key}.alpn");
        let Some(names) = names else {
            return Some(Vec::new());
        };
        if names.is_empty() {
            self.problem(
                key,
                "[] matches no hello; leave the key out for a route that takes any ALPN",
            );
            return None;
        }
        let problems = self.problems.len();
        for (i, name) in names.iter().enumerate() {
            if name.is_empty() || name.len() > 255 {
                self.problem(
                    format!("{key}[{i}]"),
                    format!("{name:?}: an ALPN protocol name is 1 to 255 bytes"),
                );
            } else if names[..i].contains(name) {
                self.problem(format!("{key}[{i}]"), format!("{name:?} is listed twice"));
            }
        }
        (self.problems.len() == problems).then(|| names.to_vec())
    }

    fn duration(
        &mut self,
        key: &str,
        value: &Option<String>,
        default: Duration,
    ) -> Option<Duration> {
        let Some(text) = value else {
            return Some(default);
        };
        match humantime::parse_duration(text) {
            Ok(d) if d.is_zero() => {
                self.problem(key, format!("{text:?} must be longer than zero"));
                None
            }
            Ok(d) => Some(d),
            Err(e) => {
                self.problem(
                    key,
                    format!(
                        "{text:?} is not a duration ({e}); write e.g. \"250ms\", \"5s\", \"10m\""
                    ),
                );
                None
            }
        }
    }

    fn ranged(
        &mut self,
        key: &str,
        value: Option<i64>,
        range: std::ops::RangeInclusive<i64>,
        default: i64,
    ) -> Option<i64> {
        match value {
            None => Some(default),
            Some(v) if range.contains(&v) => Some(v),
            Some(v) => {
                self.problem(
                    key,
                    format!("{v} is out of range ({}..={})", range.start(), range.end()),
                );
                None
            }
        }
    }

    fn socket_addr(&mut self, key: &str, text: &str) -> Option<SocketAddr> {
        match text.parse::<SocketAddr>() {
            Ok(addr) => Some(addr),
            Err(_) => {
                self.problem(
                    key,
                    format!(
                        "{text:?} is not an IP:port address (IPv6 goes in brackets: \"[::1]:443\")"
                    ),
                );
                None
            }
        }
    }
}

/// How long the system resolver may take for one host name in
/// `[listener.proxy_protocol] trusted`. The configuration is loaded on the
/// serving task at a reload, so a dead DNS server must not hold it for
/// glibc's own worst case (30 s); past this the name counts as not
/// resolving. The lookup runs on a thread of its own, left to finish.
pub const TRUSTED_NAME_TIMEOUT: Duration = Duration::from_secs(5);

/// A host name in `[listener.proxy_protocol] trusted`, resolved now through
/// the system resolver (getaddrinfo: /etc/hosts, then DNS), as Gerbil
/// resolves its `TRUSTED_UPSTREAMS` at start. A name that does not resolve
/// is an error naming it: trusting nobody by that name without a word
/// would refuse that peer's every header (`proxy_untrusted`).
fn resolve_trusted_name(text: &str) -> Result<TrustedName, String> {
    use std::net::ToSocketAddrs;
    let name = text.strip_suffix('.').unwrap_or(text).to_ascii_lowercase();
    let (tx, rx) = std::sync::mpsc::channel();
    let asked = name.clone();
    std::thread::spawn(move || {
        let found = (asked.as_str(), 0)
            .to_socket_addrs()
            .map(|addrs| addrs.map(|a| a.ip()).collect::<Vec<IpAddr>>());
        let _ = tx.send(found);
    });
    let must = "a trusted name must resolve when the configuration is loaded";
    let found = match rx.recv_timeout(TRUSTED_NAME_TIMEOUT) {
        Ok(Ok(found)) => found,
        Ok(Err(e)) => return Err(format!("host name {name:?} does not resolve ({e}); {must}")),
        Err(_) => {
            return Err(format!(
                "host name {name:?} does not resolve (no answer from the system resolver within {TRUSTED_NAME_TIMEOUT:?}); {must}"
            ));
        }
    };
    let mut addrs: Vec<IpAddr> = Vec::new();
    for ip in found {
        let ip = crate::cidr::canonical(ip);
        if !addrs.contains(&ip) {
            addrs.push(ip);
        }
    }
    if addrs.is_empty() {
        return Err(format!(
            "host name {name:?} does not resolve (no address); {must}"
        ));
    }
    Ok(TrustedName { name, addrs })
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
