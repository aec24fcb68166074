//! Every key's default (`DEFAULT_*`), as the checker applies it and
//! [`super::keys`] documents it: the values in force where a file says
//! nothing.
//!
//! Not here: the accepted ranges ([`super::ranges`]), which key a constant
//! belongs to ([`super::keys`]) or how a value is checked ([`super::check`]).

use std::num::NonZeroU32;
use std::time::Duration;

use super::settings::FastestMeasure;
use super::{EchPolicy, Keepalive, LogTarget, Mode, Outbound, Policy, SyslogFormat, TlsVersion};

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
/// `[backend.*] quic_reads_proxy_protocol` when unset: most QUIC servers
/// cannot strip a PROXY header, so `check` warns unless told otherwise.
pub(crate) const DEFAULT_QUIC_READS_PROXY_PROTOCOL: bool = false;
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
/// `[backend.*.cluster] max_lookups_in_flight`: a Pangolin server answers
/// each lookup with one HTTP request and a database read; 16 at once keeps
/// it busy without queueing behind a flood (docs/backends.md).
pub(crate) const DEFAULT_MAX_LOOKUPS_IN_FLIGHT: usize = 16;
/// `[backend.*.cluster] new_names_per_second`: a real edge sees new site
/// names at a few per second; 50 leaves room for a restart's first
/// connections while bounding a flood of random names (docs/backends.md).
pub(crate) const DEFAULT_NEW_NAMES_PER_SECOND: u32 = 50;
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

// `max_connection_rate` and `connection_rate_per_source` default to
// unlimited; a burst defaults to one second's worth of its rate.

/// `max_sources`: sources a listener's (or route's) table remembers
/// without an open connection. HAProxy's stick tables are sized by hand
/// (`size 100k` is common); at about 160 bytes an entry this is 16 MB,
/// small beside an edge VM's memory and far above the sources an edge sees
/// within one rate window.
pub(crate) const DEFAULT_MAX_SOURCES: NonZeroU32 = NonZeroU32::new(100_000).unwrap();
/// `ja4_source_multiple`: a source may hold four times the per-key limits
/// under a JA4 key: room for a NAT address's browsers and a scripted
/// client apart, and no more for a client that changes its JA4.
pub(crate) const DEFAULT_JA4_SOURCE_MULTIPLE: NonZeroU32 = NonZeroU32::new(4).unwrap();

/// `attempts_period` when `attempts_per_source` is set without it: one
/// second, as HAProxy's `conn_rate(1s)`.
pub(crate) const DEFAULT_ATTEMPTS_PERIOD: Duration = Duration::from_secs(1);

/// `[[listener]] min_tls_version`: unset, every version is accepted.
pub(crate) const DEFAULT_MIN_TLS_VERSION: Option<TlsVersion> = None;
/// `[[listener]] ech`: ECH hellos are routed like any other.
pub(crate) const DEFAULT_ECH: EchPolicy = EchPolicy::Pass;
