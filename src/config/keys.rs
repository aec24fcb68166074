//! Every key of the configuration file, declared once: its dotted name, type,
//! default, range, unit, which listener kinds it applies to, and one line of
//! doc.
//!
//! [`KEYS`] is the one list. From it come the configuration reference
//! (`docs/config-keys.md`) and the `snirelay.toml(5)` man page (both written
//! by [`super::reference`], run `cargo run --example docgen`), the keys a
//! `protocol = "quic"` listener or its routes refuse (the checker reads
//! [`Applies::Tcp`] here), and the ranges the checker enforces (each entry
//! names the same range constant the checker uses). `tests/it/config.rs` holds
//! the rest together: the serde file model accepts exactly these keys,
//! `every_key.toml` sets exactly these keys, `/config` shows exactly these
//! keys, and each declared default is the value a minimal configuration
//! gets.
//!
//! Names: a table's key is `table.key`; an array of tables (`[[listener]]`)
//! is named without brackets (`listener.backlog`), a table of named tables
//! (`[backend.NAME]`) with `*` (`backend.*.policy`). A table is declared
//! too, as a key of kind [`Kind::Table`] or [`Kind::Tables`].
//!
//! Not here: parsing or checking values (`config::check`), the defaults'
//! typed constants (`config`), or what a key does at run time.

use std::ops::RangeInclusive;

use super::ranges::{
    ADDRESS_CONNECTIONS_RANGE, ATTEMPTS_PERIOD_MS_RANGE, BACKLOG_RANGE, BANDWIDTH_RANGE,
    BURST_RANGE, CONNECT_ATTEMPTS_RANGE, JA4_SOURCE_MULTIPLE_RANGE, KEEPALIVE_COUNT_RANGE,
    KEEPALIVE_SECS_RANGE, LOG_QUEUE_RANGE, LOOKUPS_IN_FLIGHT_RANGE, MAX_CLIENT_HELLO_BYTES_RANGE,
    MAX_CONNECTIONS_RANGE, MAX_DATAGRAM_SIZE_RANGE, MAX_FAILS_RANGE, MAX_HOPS_RANGE,
    MAX_PIPES_RANGE, MAX_SOURCES_RANGE, NEW_NAMES_RANGE, PIPE_SIZE_RANGE, PORT_RANGE,
    PREFIX_V4_RANGE, PREFIX_V6_RANGE, RATE_RANGE, RISE_FALL_RANGE, THREADS_RANGE, TLV_TYPE_RANGE,
    WEIGHT_RANGE,
};

/// One key of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// Dotted name: `listener.limits.dry_run`, `backend.*.health.rise`.
    pub name: &'static str,
    /// What a value looks like.
    pub kind: Kind,
    /// What an unset key means.
    pub default: KeyDefault,
    /// Inclusive bounds of an integer (or of a duration in `unit`s).
    pub range: Option<(i64, i64)>,
    /// The unit of a number or duration, when it has one worth saying.
    pub unit: Option<&'static str>,
    /// Which listeners the key means something on.
    pub applies: Applies,
    /// One line of doc.
    pub doc: &'static str,
}

/// What a value looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A table (`[admin]`).
    Table,
    /// An array of tables (`[[listener]]`).
    Tables,
    /// A table per name (`[backend.NAME]`).
    NamedTables,
    /// A whole number.
    Integer,
    /// `true` or `false`.
    Bool,
    /// A string such as `"250ms"`, `"5s"`, `"1h"`.
    Duration,
    /// A duration, or `false` for none.
    DurationOrOff,
    /// A count, or `false` for none.
    CountOrOff,
    /// Free text.
    String,
    /// One of these strings.
    Choice(&'static [&'static str]),
    /// One of these strings, or the name of a `[backend.*]`.
    ChoiceOrBackend(&'static [&'static str]),
    /// The name of a `[backend.*]`.
    Backend,
    /// `"IP:port"`.
    Address,
    /// `"IP:port"` or a list of them.
    Addresses,
    /// A list of strings.
    Strings,
    /// A list of networks (`"10.0.0.0/8"`, or a bare address).
    Networks,
    /// A list of integers.
    Integers,
    /// A URL.
    Url,
    /// A path, relative to the configuration file's directory.
    Path,
    /// `{ idle, interval, count }`, `true` or `false`.
    Keepalive,
    /// `{ addresses, ports }` or `"client"`.
    Source,
    /// A listener's name, a list of them, or `"*"` for every listener.
    Listeners,
    /// A table of names the operator chooses, each a value or `{ file }`.
    Map,
}

impl Kind {
    /// As the reference writes it.
    pub(crate) fn describe(self) -> String {
        let quoted = |names: &[&str]| {
            names
                .iter()
                .map(|n| format!("\"{n}\""))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            Kind::Table => "table".into(),
            Kind::Tables => "array of tables".into(),
            Kind::NamedTables => "table per name".into(),
            Kind::Integer => "integer".into(),
            Kind::Bool => "boolean".into(),
            Kind::Duration => "duration".into(),
            Kind::DurationOrOff => "duration or false".into(),
            Kind::CountOrOff => "integer or false".into(),
            Kind::String => "string".into(),
            Kind::Choice(names) => format!("one of {}", quoted(names)),
            Kind::ChoiceOrBackend(names) => format!("{} or a backend name", quoted(names)),
            Kind::Backend => "backend name".into(),
            Kind::Address => "\"IP:port\"".into(),
            Kind::Addresses => "\"IP:port\" or a list".into(),
            Kind::Strings => "list of strings".into(),
            Kind::Networks => "list of networks".into(),
            Kind::Integers => "list of integers".into(),
            Kind::Url => "URL".into(),
            Kind::Path => "path".into(),
            Kind::Keepalive => "table, true or false".into(),
            Kind::Source => "table or \"client\"".into(),
            Kind::Listeners => "listener name, list of names, or \"*\"".into(),
            Kind::Map => "table of names".into(),
        }
    }

    /// A table of keys (declared below it).
    pub fn is_table(self) -> bool {
        matches!(self, Kind::Table | Kind::Tables | Kind::NamedTables)
    }
}

/// What an unset key means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyDefault {
    /// This value, in TOML notation, as `/config` shows it.
    Value(&'static str),
    /// One value on a TCP listener, another on a QUIC listener.
    ByProtocol {
        /// The value on a TCP listener.
        tcp: &'static str,
        /// The value on a QUIC listener.
        quic: &'static str,
    },
    /// No value: the words say what that means (`/config` shows `null`).
    Unset(&'static str),
    /// The value of this other key.
    Inherit(&'static str),
    /// Worked out when loaded; the words say how.
    Computed(&'static str),
    /// The key must be set (the words say when).
    Required(&'static str),
    /// A table whose keys have their own defaults.
    Table,
}

impl KeyDefault {
    /// As the reference writes it.
    pub(crate) fn describe(self) -> String {
        match self {
            KeyDefault::Value(value) => format!("`{value}`"),
            KeyDefault::ByProtocol { tcp, quic } => format!("`{tcp}` (tcp), `{quic}` (quic)"),
            KeyDefault::Unset(words)
            | KeyDefault::Computed(words)
            | KeyDefault::Required(words) => words.to_owned(),
            KeyDefault::Inherit(key) => format!("`{key}`"),
            KeyDefault::Table => String::new(),
        }
    }
}

/// Which listeners a key means something on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applies {
    /// No listener's: a key of the process (`[global]`, `[admin]`, `[log]`).
    /// Every key of those tables is, and no other ([`key`] decides it by
    /// the name).
    Process,
    /// TCP and QUIC listeners alike.
    Both,
    /// TCP listeners only: on a `protocol = "quic"` listener, or a route of
    /// one, setting it is a check error.
    Tcp,
    /// QUIC listeners only: set where no `protocol = "quic"` listener
    /// uses it, it is a check error (each such key checks that itself).
    Quic,
}

impl Applies {
    /// As the reference writes it.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Applies::Process => "process",
            Applies::Both => "tcp, quic",
            Applies::Tcp => "tcp",
            Applies::Quic => "quic",
        }
    }
}

const fn range(range: RangeInclusive<i64>) -> Option<(i64, i64)> {
    Some((*range.start(), *range.end()))
}

/// A key with no range, no unit, applying to both kinds of listener, or
/// to the process when it is one of `[global]`, `[admin]` or `[log]`.
const fn key(name: &'static str, kind: Kind, default: KeyDefault, doc: &'static str) -> Key {
    Key {
        name,
        kind,
        default,
        range: None,
        unit: None,
        applies: if process_table(name) {
            Applies::Process
        } else {
            Applies::Both
        },
        doc,
    }
}

/// The tables of the process rather than of a listener.
pub const PROCESS_TABLES: [&str; 3] = ["global", "admin", "log"];

/// Whether `name` is one of [`PROCESS_TABLES`] or a key in one (a `const
/// fn`, so byte by byte).
const fn process_table(name: &str) -> bool {
    let name = name.as_bytes();
    let mut t = 0;
    while t < PROCESS_TABLES.len() {
        let table = PROCESS_TABLES[t].as_bytes();
        let mut i = 0;
        while i < table.len() && i < name.len() && name[i] == table[i] {
            i += 1;
        }
        if i == table.len() && (name.len() == i || name[i] == b'.') {
            return true;
        }
        t += 1;
    }
    false
}

impl Key {
    const fn range(mut self, bounds: RangeInclusive<i64>) -> Key {
        self.range = range(bounds);
        self
    }

    const fn unit(mut self, unit: &'static str) -> Key {
        self.unit = Some(unit);
        self
    }

    const fn tcp(mut self) -> Key {
        self.applies = Applies::Tcp;
        self
    }

    const fn quic(mut self) -> Key {
        self.applies = Applies::Quic;
        self
    }

    /// The part after `prefix.`, when this key sits directly in that table.
    pub fn child_of(&self, prefix: &str) -> Option<&'static str> {
        let rest = self.name.strip_prefix(prefix)?.strip_prefix('.')?;
        (!rest.contains('.')).then_some(rest)
    }
}

/// `route.listener = "*"`: every listener of the file. No listener may
/// take it as its name (the checker refuses it), so it never means one.
pub const ALL_LISTENERS: &str = "*";

/// The keys set directly in table `prefix` that only TCP listeners take.
pub fn tcp_only(prefix: &'static str) -> impl Iterator<Item = &'static str> {
    KEYS.iter()
        .filter(|k| k.applies == Applies::Tcp)
        .filter_map(move |k| k.child_of(prefix))
}

use KeyDefault::{ByProtocol, Computed, Inherit, Required, Unset, Value};

const PROXY_VERSIONS: &[&str] = &["v2", "v1", "none"];
const POLICIES: &[&str] = &[
    "ordered",
    "round_robin",
    "least_connections",
    "source_hash",
    "fastest",
];

/// Every key, section by section, in the order the reference lists them.
pub static KEYS: &[Key] = &[
    // ---------------------------------------------------------------- global
    key("global", Kind::Table, KeyDefault::Table, "Process-wide settings."),
    key("global.max_connections", Kind::Integer, Value("10000"),
        "Open client connections for the whole process; at the cap accepting pauses (clients wait in the kernel backlog).")
        .range(MAX_CONNECTIONS_RANGE).unit("connections"),
    key("global.drain_timeout", Kind::Duration, Value("\"30s\""),
        "How long open connections may finish on stop; after a reload, the window over which changed routes' connections close."),
    key("global.threads", Kind::Integer, Computed("the cores this process may run on"),
        "Runtime worker threads (read at start; a reload leaves it).")
        .range(THREADS_RANGE).unit("threads"),
    key("global.splice", Kind::Bool, Value("true"),
        "Relay through splice(2) and kernel pipes rather than a userspace copy; a listener's `splice` beats it."),
    key("global.pipe_size", Kind::Integer, Value("65536"),
        "Bytes per pooled pipe (F_SETPIPE_SZ); read at start.")
        .range(PIPE_SIZE_RANGE).unit("bytes"),
    key("global.max_pipes", Kind::Integer, Value("512"),
        "Pipes open at once, process-wide (two descriptors each); read at start.")
        .range(MAX_PIPES_RANGE).unit("pipes"),
    key("global.max_connection_rate", Kind::Integer, Unset("unlimited"),
        "New connections per second the process accepts; above it accepting is paced.")
        .range(RATE_RANGE).unit("connections per second"),
    key("global.coalescing_risk", Kind::Choice(&["warn", "error"]), Value("\"warn\""),
        "What `snirelay certs` makes of a certificate that lets a browser reuse one backend's HTTP/2 or HTTP/3 connection for a name routed to another: a warning (exit 1) or an error (exit 2)."),
    // -------------------------------------------------------------- listener
    key("listener", Kind::Tables, KeyDefault::Table, "A listener: where clients connect, and how their hellos are read."),
    key("listener.name", Kind::String, Required("required"),
        "The listener's name, used by routes and in logs."),
    key("listener.listen", Kind::Addresses, Required("required"),
        "One address or a list (`\"0.0.0.0:443\"`, `[\"0.0.0.0:443\", \"[::]:443\"]`); IPv6 sockets are v6-only."),
    key("listener.protocol", Kind::Choice(&["tcp", "quic"]), Value("\"tcp\""),
        "TLS over TCP, or QUIC over UDP routed by the SNI of its Initial packets."),
    key("listener.backlog", Kind::Integer, Value("1024"),
        "Kernel accept queue per address.")
        .range(BACKLOG_RANGE).unit("connections").tcp(),
    key("listener.client_hello_timeout", Kind::Duration, Value("\"5s\""),
        "From accept until the ClientHello is complete; else `hello_timeout`."),
    key("listener.idle_timeout", Kind::Duration, ByProtocol { tcp: "\"5m\"", quic: "\"30s\"" },
        "Close a relayed connection when no byte moved either way for this long."),
    key("listener.half_close_timeout", Kind::Duration, Value("\"30s\""),
        "Once one side has sent FIN, close when no byte moved for this long.")
        .tcp(),
    key("listener.max_connection_lifetime", Kind::DurationOrOff, Value("false"),
        "Close a connection at a moment drawn in the last tenth of this, counted from accept; `false`: no limit."),
    key("listener.rate_up", Kind::Integer, Unset("unlimited"),
        "Bytes per second each connection may send client → backend (a token bucket; see `burst`).")
        .range(BANDWIDTH_RANGE).unit("bytes per second").tcp(),
    key("listener.rate_down", Kind::Integer, Unset("unlimited"),
        "Bytes per second each connection may send backend → client.")
        .range(BANDWIDTH_RANGE).unit("bytes per second").tcp(),
    key("listener.rate_per_source_up", Kind::Integer, Unset("unlimited"),
        "Bytes per second all of one source's connections together may send client → backend.")
        .range(BANDWIDTH_RANGE).unit("bytes per second").tcp(),
    key("listener.rate_per_source_down", Kind::Integer, Unset("unlimited"),
        "Bytes per second all of one source's connections together may send backend → client.")
        .range(BANDWIDTH_RANGE).unit("bytes per second").tcp(),
    key("listener.burst", Kind::Integer, Unset("one second's worth of each rate"),
        "Bytes a bucket may let through at once above its rate; needs a rate.")
        .range(BURST_RANGE).unit("bytes").tcp(),
    key("listener.max_client_hello_bytes", Kind::Integer, Value("16384"),
        "Bytes buffered for the ClientHello, record headers included; else `too_large`.")
        .range(MAX_CLIENT_HELLO_BYTES_RANGE).unit("bytes"),
    key("listener.no_sni", Kind::ChoiceOrBackend(&["reject"]), Value("\"reject\""),
        "A hello without SNI: alert and close, or relay to this backend."),
    key("listener.reuse_port", Kind::Bool, Value("false"),
        "Set SO_REUSEPORT on the listener's sockets (off: a second relay started by mistake fails to bind)."),
    key("listener.splice", Kind::Bool, Inherit("global.splice"),
        "Relay this listener's connections through splice(2).")
        .tcp(),
    key("listener.tcp_keepalive", Kind::Keepalive, Value("{ idle = \"1m\", interval = \"10s\", count = 6 }"),
        "TCP keepalive on client sockets: a table (each key optional), `true` for the defaults, `false` for off.")
        .tcp(),
    key("listener.tcp_keepalive.idle", Kind::Duration, Value("\"1m\""),
        "Quiet time before the first probe, whole seconds.")
        .range(KEEPALIVE_SECS_RANGE).unit("seconds").tcp(),
    key("listener.tcp_keepalive.interval", Kind::Duration, Value("\"10s\""),
        "Time between probes, whole seconds.")
        .range(KEEPALIVE_SECS_RANGE).unit("seconds").tcp(),
    key("listener.tcp_keepalive.count", Kind::Integer, Value("6"),
        "Unanswered probes before the connection is closed.")
        .range(KEEPALIVE_COUNT_RANGE).unit("probes").tcp(),
    key("listener.min_tls_version", Kind::Choice(&["1.0", "1.1", "1.2", "1.3"]), Unset("every version"),
        "A hello whose highest offered version is older gets a `protocol_version` alert (`tls_version`)."),
    key("listener.ech", Kind::ChoiceOrBackend(&["pass", "reject"]), Value("\"pass\""),
        "A hello with ECH: route it, refuse it (`ech_rejected`), or relay it to this backend; a route may set its own."),
    key("listener.ech_config_ids", Kind::Integers, Unset("none known"),
        "Config ids of the ECH configurations your origins publish; with them `ech` concerns real ECH only.")
        .range(0..=255),
    key("listener.fingerprints", Kind::Bool, Value("false"),
        "Compute each hello's JA4 and JA3 and log them (`tls.ja4`, `tls.ja3`); `match` rules and a JA4 `limit_key` compute them anyway."),
    key("listener.match", Kind::Table, Unset("no rule"),
        "JA4 rules every hello on the listener must pass; else `ja4_refused`."),
    key("listener.match.ja4", Kind::Strings, Unset("any fingerprint"),
        "JA4 fingerprints (exact, or a prefix ending in `*`) of which a hello must match one."),
    key("listener.match.ja4_deny", Kind::Strings, Unset("none"),
        "JA4 fingerprints (exact, or a prefix ending in `*`) a hello must match none of."),
    key("listener.proxy_protocol", Kind::Table, Unset("no PROXY header is read"),
        "Inbound PROXY headers from trusted peer relays (v2 or v1 on TCP; v2 on each datagram on QUIC)."),
    key("listener.proxy_protocol.trusted", Kind::Networks, Required("required"),
        "Networks, addresses or host names (resolved at each load) of the peers whose headers are read."),
    key("listener.proxy_protocol.mode", Kind::Choice(&["require", "optional"]), Value("\"require\""),
        "Whether a trusted peer must send a header, or may (QUIC: on a flow's first datagram)."),
    key("listener.proxy_protocol.max_hops", Kind::Integer, Value("3"),
        "Relay-to-relay hops a connection may have crossed before it is refused (`hop_limit`).")
        .range(MAX_HOPS_RANGE).unit("hops"),
    key("listener.proxy_protocol.pass_through_tlvs", Kind::Integers, Value("[]"),
        "TLV types copied from a peer's header into the header a v2 backend receives (0x01, 0x20, 0x30, 0xE0-0xF7).")
        .range(TLV_TYPE_RANGE),
    key("listener.limits", Kind::Table, KeyDefault::Table,
        "Admission per source, decided before a byte is read."),
    key("listener.limits.connections_per_source", Kind::CountOrOff, Value("256"),
        "Open connections one source may hold; `false`: no limit.")
        .range(MAX_CONNECTIONS_RANGE).unit("connections"),
    key("listener.limits.connection_rate_per_source", Kind::Integer, Unset("unlimited"),
        "New connections per second one source may open (GCRA).")
        .range(RATE_RANGE).unit("connections per second"),
    key("listener.limits.connection_burst_per_source", Kind::Integer, Unset("one second's worth of the rate"),
        "Connections one source may open at once above its rate; needs `connection_rate_per_source`.")
        .range(RATE_RANGE).unit("connections"),
    key("listener.limits.source_prefix_v4", Kind::Integer, Value("32"),
        "Bits of an IPv4 address that make one source.")
        .range(PREFIX_V4_RANGE).unit("bits"),
    key("listener.limits.source_prefix_v6", Kind::Integer, Value("64"),
        "Bits of an IPv6 address that make one source.")
        .range(PREFIX_V6_RANGE).unit("bits"),
    key("listener.limits.dry_run", Kind::Bool, Value("false"),
        "Log and count what the limits would refuse, and refuse nothing."),
    key("listener.limits.allow", Kind::Networks, Value("[]"),
        "When not empty, only these sources are admitted."),
    key("listener.limits.deny", Kind::Networks, Value("[]"),
        "Sources refused before anything else."),
    key("listener.limits.rate_counts_refused", Kind::Bool, Value("false"),
        "Refused attempts spend rate tokens too (HAProxy `conn_rate`)."),
    key("listener.limits.attempts_per_source", Kind::Integer, Unset("unlimited"),
        "Attempts (admitted or refused) one source may make within `attempts_period`, counted as HAProxy's `conn_rate`; over it: `limit_rate`.")
        .range(RATE_RANGE).unit("attempts"),
    key("listener.limits.attempts_period", Kind::Duration, Unset("\"1s\" with `attempts_per_source`"),
        "The sliding period `attempts_per_source` counts over; needs `attempts_per_source`.")
        .range(ATTEMPTS_PERIOD_MS_RANGE).unit("milliseconds"),
    key("listener.limits.max_sources", Kind::Integer, Value("100000"),
        "Sources the table remembers without an open connection (HAProxy's stick-table `size`); past it the least recently used is forgotten.")
        .range(MAX_SOURCES_RANGE).unit("sources"),
    // ----------------------------------------------------------------- route
    key("listener.limits.limit_key", Kind::Choice(&["source", "ja4", "source+ja4"]), Value("\"source\""),
        "What the counting limits count by: `source` (the source prefix), `ja4` (the hello's JA4) or `source+ja4` (both); with a JA4 they are decided once the hello is read."),
    key("listener.limits.ja4_source_multiple", Kind::Integer, Computed("4 with a JA4 `limit_key`"),
        "With a JA4 `limit_key`: the source alone is counted too, held to this many times the counting limits.")
        .range(JA4_SOURCE_MULTIPLE_RANGE).unit("times"),
    key("route", Kind::Tables, KeyDefault::Table, "A route: names on a listener, and the backend they go to."),
    key("route.name", Kind::String, Computed("the first pattern"),
        "The route's name in logs, and its identity for per-route limits."),
    key("route.listener", Kind::Listeners, Computed("the only listener"),
        "The listeners the route applies to: a name, a list (`[\"tls\", \"h3\"]`: one block for a name served over TCP and QUIC), or `\"*\"` for every listener; required when there are several."),
    key("route.sni", Kind::Strings, Required("required unless `sni_file` lists a name"),
        "Exact names, `*.suffix` wildcards, and `*` alone (the default route, at most one per listener)."),
    key("route.sni_file", Kind::Path, Unset("none"),
        "A file of more names: one name or pattern a line as in `sni`, `#` comments; read at start, by `check` and at every reload."),
    key("route.alpn", Kind::Strings, Unset("any hello"),
        "The route takes only hellos offering one of these ALPN protocols.")
        .range(1..=255).unit("bytes per name"),
    key("route.case_sensitive_names", Kind::Bool, Value("false"),
        "Match a name only if the labels the pattern names are in lower case in it (those a `*.` stands for may have capitals), as HAProxy's ACLs without `-i`; else the next pattern decides."),
    key("route.ldh_names", Kind::Bool, Value("false"),
        "Match only names of letters, digits and hyphens (no `_` in any label), as a `[a-z0-9-]` regex; else the next pattern decides."),
    key("route.backend", Kind::Backend, Required("required"),
        "The `[backend.NAME]` to relay to."),
    key("route.ech", Kind::ChoiceOrBackend(&["pass", "reject"]), Unset("the listener's `ech`"),
        "This route's ECH policy."),
    key("route.match", Kind::Table, Unset("no rule"),
        "JA4 rules a hello on this route must pass, after the listener's; else `ja4_refused`."),
    key("route.match.ja4", Kind::Strings, Unset("any fingerprint"),
        "JA4 fingerprints (exact, or a prefix ending in `*`) of which a hello must match one."),
    key("route.match.ja4_deny", Kind::Strings, Unset("none"),
        "JA4 fingerprints (exact, or a prefix ending in `*`) a hello must match none of."),
    key("route.max_connections", Kind::Integer, Unset("unlimited"),
        "Open connections on the route, all sources together; over it: `route_full`.")
        .range(MAX_CONNECTIONS_RANGE).unit("connections"),
    key("route.idle_timeout", Kind::Duration, Inherit("listener.idle_timeout"),
        "The route's own idle timeout."),
    key("route.half_close_timeout", Kind::Duration, Inherit("listener.half_close_timeout"),
        "The route's own half-close timeout.")
        .tcp(),
    key("route.max_connection_lifetime", Kind::DurationOrOff, Inherit("listener.max_connection_lifetime"),
        "The route's own lifetime limit; `false` turns the listener's off for this route."),
    key("route.rate_up", Kind::CountOrOff, Unset("the listener's `rate_up`"),
        "The route's own `rate_up`; `false` turns the listener's off for this route.")
        .range(BANDWIDTH_RANGE).unit("bytes per second").tcp(),
    key("route.rate_down", Kind::CountOrOff, Unset("the listener's `rate_down`"),
        "The route's own `rate_down`; `false` turns the listener's off for this route.")
        .range(BANDWIDTH_RANGE).unit("bytes per second").tcp(),
    key("route.rate_per_source_up", Kind::CountOrOff, Unset("the listener's `rate_per_source_up`"),
        "The route's own per-source bucket, client → backend (else the listener's, shared by its routes).")
        .range(BANDWIDTH_RANGE).unit("bytes per second").tcp(),
    key("route.rate_per_source_down", Kind::CountOrOff, Unset("the listener's `rate_per_source_down`"),
        "The route's own per-source bucket, backend → client (else the listener's, shared by its routes).")
        .range(BANDWIDTH_RANGE).unit("bytes per second").tcp(),
    key("route.burst", Kind::Integer, Unset("the listener's `burst`"),
        "The burst of the route's buckets.")
        .range(BURST_RANGE).unit("bytes").tcp(),
    key("route.limits", Kind::Table, Unset("no per-route admission"),
        "The `[listener.limits]` keys, per source within the route once the hello names it."),
    key("route.limits.connections_per_source", Kind::CountOrOff, Value("false"),
        "Open connections one source may hold on this route (`route_limit_concurrent`).")
        .range(MAX_CONNECTIONS_RANGE).unit("connections"),
    key("route.limits.connection_rate_per_source", Kind::Integer, Unset("unlimited"),
        "New connections per second one source may open on this route (`route_limit_rate`).")
        .range(RATE_RANGE).unit("connections per second"),
    key("route.limits.connection_burst_per_source", Kind::Integer, Unset("one second's worth of the rate"),
        "Connections one source may open at once above its rate on this route.")
        .range(RATE_RANGE).unit("connections"),
    key("route.limits.source_prefix_v4", Kind::Integer, Value("32"),
        "Bits of an IPv4 address that make one source.")
        .range(PREFIX_V4_RANGE).unit("bits"),
    key("route.limits.source_prefix_v6", Kind::Integer, Value("64"),
        "Bits of an IPv6 address that make one source.")
        .range(PREFIX_V6_RANGE).unit("bits"),
    key("route.limits.dry_run", Kind::Bool, Value("false"),
        "Log and count what the route's limits would refuse, and refuse nothing."),
    key("route.limits.allow", Kind::Networks, Value("[]"),
        "When not empty, only these sources may use the route (`route_denied`)."),
    key("route.limits.deny", Kind::Networks, Value("[]"),
        "Sources refused on this route (`route_denied`)."),
    key("route.limits.rate_counts_refused", Kind::Bool, Value("false"),
        "Refused attempts spend the route's rate tokens too."),
    key("route.limits.attempts_per_source", Kind::Integer, Unset("unlimited"),
        "Attempts one source may make on this route within `attempts_period`, counted as HAProxy's `conn_rate` (`route_limit_rate`).")
        .range(RATE_RANGE).unit("attempts"),
    key("route.limits.attempts_period", Kind::Duration, Unset("\"1s\" with `attempts_per_source`"),
        "The sliding period the route's `attempts_per_source` counts over.")
        .range(ATTEMPTS_PERIOD_MS_RANGE).unit("milliseconds"),
    key("route.limits.limit_key", Kind::Choice(&["source", "ja4", "source+ja4"]), Value("\"source\""),
        "What the route's counting limits count by: `source`, `ja4` or `source+ja4`, as the listener's `limit_key`."),
    key("route.limits.ja4_source_multiple", Kind::Integer, Computed("4 with a JA4 `limit_key`"),
        "With a JA4 `limit_key`: the source alone is counted too on the route, at this many times its limits.")
        .range(JA4_SOURCE_MULTIPLE_RANGE).unit("times"),
    key("route.limits.max_sources", Kind::Integer, Value("100000"),
        "Sources the route's table remembers without an open connection; past it the least recently used is forgotten.")
        .range(MAX_SOURCES_RANGE).unit("sources"),
    // --------------------------------------------------------------- backend
    key("backend.*", Kind::NamedTables, KeyDefault::Table, "A backend: where routed connections go, and how."),
    key("backend.*.addresses", Kind::Strings, Required("one of `addresses`, `resolve` or `[cluster]`"),
        "Fixed addresses: `\"IP:port\"`, or `{ address, weight, max_connections }`."),
    key("backend.*.addresses.address", Kind::Address, Required("required in the table form"),
        "The address."),
    key("backend.*.addresses.weight", Kind::Integer, Value("1"),
        "The address's share under `round_robin`, `least_connections` and `source_hash`.")
        .range(WEIGHT_RANGE),
    key("backend.*.addresses.max_connections", Kind::Integer, Unset("`max_connections_per_address`"),
        "Open connections to this address; at the cap the next address is used.")
        .range(ADDRESS_CONNECTIONS_RANGE).unit("connections"),
    key("backend.*.addresses.backup", Kind::Bool, Value("false"),
        "Connections go to the address only while every non-backup address is down (HAProxy `backup`)."),
    key("backend.*.addresses.source", Kind::Source, Unset("the backend's `source`"),
        "Where connections to this address are made from, as the backend's `source`."),
    key("backend.*.addresses.source.addresses", Kind::Strings, Required("required in the table form"),
        "Local addresses to connect from, in turn, those of the address's family."),
    key("backend.*.addresses.source.ports", Kind::String, Unset("the kernel's `ip_local_port_range`"),
        "`\"LOW-HIGH\"`: the local ports used (IP_LOCAL_PORT_RANGE, Linux 6.3+)."),
    key("backend.*.source", Kind::Source, Unset("the host's routing picks the address"),
        "`{ addresses, ports }`: connect from these local addresses in turn; `\"client\"`: from the client's address and port (needs CAP_NET_ADMIN)."),
    key("backend.*.source.addresses", Kind::Strings, Required("required in the table form"),
        "Local addresses (IPv4, IPv6) to connect from, in turn, those of the backend address's family."),
    key("backend.*.source.ports", Kind::String, Unset("the kernel's `ip_local_port_range`"),
        "`\"LOW-HIGH\"`: the local ports used (IP_LOCAL_PORT_RANGE, Linux 6.3+)."),
    key("backend.*.resolve", Kind::String, Required("one of `addresses`, `resolve` or `[cluster]`"),
        "`host:port` whose A/AAAA records are the address list."),
    key("backend.*.resolver", Kind::Address, Unset("the system resolver"),
        "`resolve` only: ask this DNS server (`IP:53`) and follow record TTLs."),
    key("backend.*.resolve_interval", Kind::Duration, Value("\"30s\""),
        "`resolve` without `resolver`: how often the system resolver is asked again."),
    key("backend.*.min_ttl", Kind::Duration, Value("\"5s\""),
        "`resolver` only: the shortest a record's TTL is taken to be."),
    key("backend.*.max_ttl", Kind::Duration, Value("\"5m\""),
        "`resolver` only: the longest a record's TTL is taken to be."),
    key("backend.*.connect_timeout", Kind::Duration, Value("\"5s\""),
        "Per address attempt."),
    key("backend.*.connect_attempts", Kind::Integer, Unset("min(addresses, 3)"),
        "Addresses tried per connection.")
        .range(CONNECT_ATTEMPTS_RANGE).unit("attempts"),
    key("backend.*.policy", Kind::Choice(POLICIES), Value("\"ordered\""),
        "How an address is chosen: `ordered`, `round_robin`, `least_connections`, `source_hash` or `fastest` (a `[cluster]` backend: by `source_hash`)."),
    key("backend.*.backup_policy", Kind::Choice(&["first", "all"]), Unset("\"first\" with a `backup` address"),
        "While every non-backup address is down: the first healthy backup in list order, or all of them by `policy` (HAProxy `option allbackups`)."),
    key("backend.*.fastest_interval", Kind::Duration, Value("\"5m\""),
        "`policy = \"fastest\"` only: connect times are measured again within this interval."),
    key("backend.*.fastest_measure", Kind::Choice(&["connect", "tls"]), Value("\"connect\""),
        "`policy = \"fastest\"` only: time the TCP connect, or the TLS health check's ServerHello."),
    key("backend.*.max_fails", Kind::Integer, Value("3"),
        "Consecutive failed connects that mark an address down (0: never).")
        .range(MAX_FAILS_RANGE).unit("connects"),
    key("backend.*.fail_backoff", Kind::Duration, Value("\"10s\""),
        "How long such an address stays down."),
    key("backend.*.max_connections_per_address", Kind::Integer, Unset("no cap"),
        "The cap of every address without a `max_connections` of its own; all full: `backend_full`.")
        .range(ADDRESS_CONNECTIONS_RANGE).unit("connections"),
    key("backend.*.proxy_protocol", Kind::Choice(PROXY_VERSIONS), Value("\"none\""),
        "The PROXY header sent before the hello (a `[cluster]` backend: its `hop_proxy_protocol`)."),
    key("backend.*.proxy_protocol_crc32c", Kind::Bool, Value("false"),
        "Add a CRC32C checksum TLV to v2 headers."),
    key("backend.*.max_datagram_size", Kind::Integer, Unset("1452 (a 1,500-byte MTU over IPv6)"),
        "The largest datagram a PROXY v2 header may make toward this backend, from a `protocol = \"quic\"` listener (needs `proxy_protocol = \"v2\"`): the full header, else the addresses-only one, else the datagram is dropped.")
        .range(MAX_DATAGRAM_SIZE_RANGE).unit("bytes").quic(),
    key("backend.*.quic_reads_proxy_protocol", Kind::Bool, Value("false"),
        "The QUIC server at the addresses strips the PROXY v2 header a `protocol = \"quic\"` listener sends (another snirelay's quic listener with `[listener.proxy_protocol]`, say); without it `check` warns that most QUIC servers cannot (needs `proxy_protocol = \"v2\"`).")
        .quic(),
    key("backend.*.proxy_protocol_tlvs", Kind::Tables, Unset("only the relay's own TLVs"),
        "TLVs the v2 header adds, each `{ type, value }`, `{ type, text }` or `{ type, bytes }`."),
    key("backend.*.proxy_protocol_tlvs.type", Kind::Integer, Required("required"),
        "The TLV type: 0x01 (with `value = \"alpn\"`), a custom 0xE1-0xEF or an experimental 0xF0-0xF7.")
        .range(TLV_TYPE_RANGE),
    key("backend.*.proxy_protocol_tlvs.value", Kind::Choice(&["alpn", "sni", "ja4", "ja3"]), Required("one of `value`, `text` and `bytes`"),
        "Learnt from the connection: `alpn` the client's first offered ALPN protocol, `sni` the server name, `ja4` the hello's JA4 (36 characters), `ja3` its JA3 hash (32 hex digits); left out when it has none."),
    key("backend.*.proxy_protocol_tlvs.text", Kind::String, Required("one of `value`, `text` and `bytes`"),
        "A fixed value, as UTF-8."),
    key("backend.*.proxy_protocol_tlvs.bytes", Kind::String, Required("one of `value`, `text` and `bytes`"),
        "A fixed value, in hex (`\"0a1b\"`)."),
    key("backend.*.tcp_keepalive", Kind::Keepalive, Value("{ idle = \"1m\", interval = \"10s\", count = 6 }"),
        "TCP keepalive on backend sockets, as the listener's."),
    key("backend.*.tcp_keepalive.idle", Kind::Duration, Value("\"1m\""),
        "Quiet time before the first probe, whole seconds.")
        .range(KEEPALIVE_SECS_RANGE).unit("seconds"),
    key("backend.*.tcp_keepalive.interval", Kind::Duration, Value("\"10s\""),
        "Time between probes, whole seconds.")
        .range(KEEPALIVE_SECS_RANGE).unit("seconds"),
    key("backend.*.tcp_keepalive.count", Kind::Integer, Value("6"),
        "Unanswered probes before the connection is closed.")
        .range(KEEPALIVE_COUNT_RANGE).unit("probes"),
    key("backend.*.health", Kind::Table, Unset("passive health only"),
        "Active health checks of every address."),
    key("backend.*.health.interval", Kind::Duration, Value("\"5s\""),
        "Time between checks of an address."),
    key("backend.*.health.timeout", Kind::Duration, Value("\"2s\""),
        "How long one check may take."),
    key("backend.*.health.rise", Kind::Integer, Value("2"),
        "Consecutive passed checks that mark an address up.")
        .range(RISE_FALL_RANGE).unit("checks"),
    key("backend.*.health.fall", Kind::Integer, Value("3"),
        "Consecutive failed checks that mark an address down.")
        .range(RISE_FALL_RANGE).unit("checks"),
    key("backend.*.health.kind", Kind::Choice(&["tcp", "tls"]), Value("\"tcp\""),
        "A connect passes, or a ClientHello for `sni` must be answered by a ServerHello."),
    key("backend.*.health.sni", Kind::String, Unset("required with `kind = \"tls\"`"),
        "The host name the TLS check sends."),
    key("backend.*.cluster", Kind::Table, Required("one of `addresses`, `resolve` or `[cluster]`"),
        "The address is looked up per SNI (DNS or HTTP; Pangolin's lookups too)."),
    key("backend.*.cluster.dns_server", Kind::Address, Required("one of `dns_server` and `lookup_url`"),
        "Ask this DNS server for the SNI's A/AAAA records."),
    key("backend.*.cluster.port", Kind::Integer, Value("443"),
        "`dns_server` only: the port of the addresses found.")
        .range(PORT_RANGE),
    key("backend.*.cluster.lookup_url", Kind::Url, Required("one of `dns_server` and `lookup_url`"),
        "Ask this http:// or https:// URL where the SNI lives."),
    key("backend.*.cluster.resolver", Kind::Address, Unset("the system resolver"),
        "`lookup_url` only: the DNS server (`IP:53`) that resolves host names in answers."),
    key("backend.*.cluster.protocol", Kind::Choice(&["snirelay", "pangolin"]), Value("\"snirelay\""),
        "`lookup_url` only: the lookup's request and answer format."),
    key("backend.*.cluster.public_key", Kind::String, Required("with `protocol = \"pangolin\"`: this or `public_key_file`"),
        "The node's WireGuard public key, sent with each Pangolin lookup."),
    key("backend.*.cluster.public_key_file", Kind::Path, Required("with `protocol = \"pangolin\"`: this or `public_key`"),
        "The file holding the node's WireGuard public key."),
    key("backend.*.cluster.default_port", Kind::Integer, Value("443"),
        "`protocol = \"pangolin\"` only: the port of an endpoint answered without one.")
        .range(PORT_RANGE),
    key("backend.*.cluster.headers", Kind::Map, Unset("none"),
        "`lookup_url` only: request headers, each a value or `{ file = \"/path\" }`."),
    key("backend.*.cluster.ca_file", Kind::Path, Unset("the system roots"),
        "https:// `lookup_url` only: the CA (PEM) the control plane's certificate is checked against."),
    key("backend.*.cluster.client_cert_file", Kind::Path, Unset("no client certificate"),
        "https:// `lookup_url` only: a client certificate (PEM), with `client_key_file`."),
    key("backend.*.cluster.client_key_file", Kind::Path, Unset("no client certificate"),
        "https:// `lookup_url` only: the client certificate's key (PEM)."),
    key("backend.*.cluster.local_backend", Kind::Backend, Unset("none"),
        "Where an answer naming this node connects (a backend with fixed or resolved addresses)."),
    key("backend.*.cluster.local_overrides", Kind::Strings, Value("[]"),
        "Names (exact or `*.domain`) always sent to `local_backend` without a lookup."),
    key("backend.*.cluster.positive_ttl", Kind::Duration, Value("\"30s\""),
        "How long an answer is kept."),
    key("backend.*.cluster.negative_ttl", Kind::Duration, Value("\"2s\""),
        "How long a failed or empty lookup is kept."),
    key("backend.*.cluster.lookup_timeout", Kind::Duration, Value("\"2s\""),
        "How long one lookup may take."),
    key("backend.*.cluster.allowed_targets", Kind::Networks, Required("required"),
        "Networks an answer may point at; answers steer traffic, so say where it may go."),
    key("backend.*.cluster.max_lookups_in_flight", Kind::Integer, Value("16"),
        "Lookups this backend runs at once; a name that needs one more closes `lookup_limited`.")
        .range(LOOKUPS_IN_FLIGHT_RANGE).unit("lookups"),
    key("backend.*.cluster.new_names_per_second", Kind::Integer, Value("50"),
        "Lookups per second (a burst of one second's worth) of names with no answer to serve; past it, `lookup_limited`.")
        .range(NEW_NAMES_RANGE).unit("names per second"),
    key("backend.*.cluster.node_choice", Kind::Choice(&["source_hash", "gerbil_fnv"]), Value("\"source_hash\""),
        "How one of a site's nodes is chosen."),
    key("backend.*.cluster.hop_proxy_protocol", Kind::Choice(&["v2", "v1"]), Value("\"v2\""),
        "The PROXY header towards other nodes (v1 for nodes that still run Gerbil)."),
    key("backend.*.cluster.this_node", Kind::Strings, Unset("the address the client dialled"),
        "This node's own addresses or host names: an answer naming one goes to `local_backend`."),
    // ----------------------------------------------------------------- admin
    key("admin", Kind::Table, Unset("no admin listener"),
        "The admin listener: `/metrics`, `/healthz`, `/readyz`, `/config`, run-time control."),
    key("admin.listen", Kind::String, Value("\"127.0.0.1:9901\""),
        "A TCP address (non-loopback needs `allow_public`), or `unix:/path`; read at start."),
    key("admin.allow_public", Kind::Bool, Value("false"),
        "Allow a `listen` address that is not loopback."),
    key("admin.expose_config", Kind::Bool, Value("false"),
        "Also serve `/config` (every route and backend)."),
    key("admin.address_labels", Kind::Bool, Value("true"),
        "Label backend address metrics with the address; `false` publishes no origin address."),
    key("admin.token_file", Kind::Path, Unset("none"),
        "Bearer tokens (`name:token` lines, or one bare token) that open the control endpoints; not readable by others."),
    key("admin.local_names_file", Kind::Path, Unset("in memory only"),
        "Where names pushed to `POST /update-local-snis` are kept, so a restart serves the last pushed set."),
    key("admin.moved_close_window", Kind::Duration, Value("\"5s\""),
        "Connections of names a push no longer lists as local close at moments spread over this window (`moved`)."),
    key("admin.push_unauthenticated_from", Kind::Networks, Value("[]"),
        "Sources whose `POST /update-local-snis` is taken without a token (TCP admin listener only)."),
    key("admin.forward_unmatched_to", Kind::Url, Unset("unknown paths are 404"),
        "`http://host:port`: requests for paths the admin listener does not serve are forwarded there."),
    key("admin.ready_requires", Kind::Strings, Value("[]"),
        "`\"backend:NAME\"`, `\"route:NAME\"`, `\"any_backend\"`: `/readyz` answers 503 while one of these has no usable address."),
    // ------------------------------------------------------------------- log
    key("log", Kind::Table, KeyDefault::Table,
        "Where log lines go; the whole section is read at start (a change takes a restart)."),
    key("log.target", Kind::Choice(&["stderr", "stdout", "journald", "syslog"]), Value("\"stderr\""),
        "`stderr` or `stdout` (text or JSON per `--log-format`), `journald` (its native socket), or the `syslog` server."),
    key("log.syslog", Kind::String, Value("\"unix:/dev/log\""),
        "With `target = \"syslog\"`: `unix:/path`, `udp://host:port` or `tcp://host:port` (host names allowed, port 514 by default)."),
    key("log.facility", Kind::Choice(&[
        "kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron",
        "authpriv", "ftp", "ntp", "audit", "alert", "clock", "local0", "local1", "local2",
        "local3", "local4", "local5", "local6", "local7",
    ]), Value("\"local0\""),
        "The syslog facility of every line (journald: `SYSLOG_FACILITY`)."),
    key("log.syslog_format", Kind::Choice(&["rfc5424", "rfc3164"]), Value("\"rfc5424\""),
        "The syslog header: RFC 5424, or the older BSD format of RFC 3164."),
    key("log.queue", Kind::Integer, Value("4096"),
        "Lines held while syslog or journald is slow or down; past it lines are dropped and counted, never waited for.")
        .range(LOG_QUEUE_RANGE).unit("lines"),
];
