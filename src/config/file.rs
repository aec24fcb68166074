//! The configuration file as written: a serde model of the TOML, nothing more.
//!
//! Every key is optional here unless the file is meaningless without it, and
//! values that need checking (durations, addresses, patterns) stay strings so
//! that validation can report every bad value at once, each with its key.
//! Unknown keys are refused by serde (`deny_unknown_fields`), so a typo never
//! silently becomes a default. The validated form is [`super::Config`].
//!
//! The model also serialises: [`super::effective`] fills it from a validated
//! config with every key set to the value in force, and that is what
//! `/config` shows (as JSON) and what a round trip writes back (as TOML).
//! An unset `Option` is written as nothing in TOML and as `null` in JSON.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The configuration file as written: every section, `None` or empty where
/// not set, before any check.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// `[global]`; empty when absent.
    #[serde(default)]
    pub global: GlobalSection,
    /// The `[[listener]]` tables, in file order.
    #[serde(default, rename = "listener")]
    pub listeners: Vec<ListenerSection>,
    /// The `[[route]]` tables, in file order.
    #[serde(default, rename = "route")]
    pub routes: Vec<RouteSection>,
    /// The `[backend.NAME]` tables, by name.
    #[serde(default, rename = "backend")]
    pub backends: BTreeMap<String, BackendSection>,
    /// `[admin]`: the optional metrics/health listener.
    pub admin: Option<AdminSection>,
    /// `[log]`: where log lines go.
    #[serde(default)]
    pub log: LogSection,
}

/// `[log]`: where log lines go (stderr when absent).
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LogSection {
    /// `"stderr"`, `"stdout"`, `"journald"` or `"syslog"`.
    pub target: Option<String>,
    /// `"unix:/dev/log"`, `"udp://host:514"` or `"tcp://host:514"`.
    pub syslog: Option<String>,
    /// An RFC 5424 facility by name (`"local0"`).
    pub facility: Option<String>,
    /// `"rfc5424"` or `"rfc3164"`.
    pub syslog_format: Option<String>,
    /// Lines held for a socket target.
    pub queue: Option<i64>,
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GlobalSection {
    pub max_connections: Option<i64>,
    pub drain_timeout: Option<String>,
    pub(crate) threads: Option<i64>,
    pub(crate) splice: Option<bool>,
    pub(crate) pipe_size: Option<i64>,
    pub(crate) max_pipes: Option<i64>,
    /// New connections per second for the whole process (unset: unlimited).
    pub max_connection_rate: Option<i64>,
    /// What `snirelay certs` makes of a coalescing risk: "warn" or "error".
    pub(crate) coalescing_risk: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerSection {
    pub name: String,
    pub listen: OneOrMany,
    pub backlog: Option<i64>,
    pub client_hello_timeout: Option<String>,
    pub idle_timeout: Option<String>,
    pub(crate) max_client_hello_bytes: Option<i64>,
    pub(crate) no_sni: Option<String>,
    pub(crate) proxy_protocol: Option<ProxyProtocolSection>,
    pub(crate) reuse_port: Option<bool>,
    pub(crate) splice: Option<bool>,
    /// `[listener.limits]`: admission limits and source lists.
    pub limits: Option<LimitsSection>,
    // Relay timeouts beside `idle_timeout` (issue 15, point 2).
    /// Once a side has sent FIN, how long the connection may stay quiet.
    pub half_close_timeout: Option<String>,
    /// How long a connection may live; unset or `false`: no limit.
    pub max_connection_lifetime: Option<DurationOrOff>,
    // TCP keepalive on client sockets (issue 15).
    /// `tcp_keepalive`: `{ idle, interval, count }`, `true` or `false`.
    pub tcp_keepalive: Option<KeepaliveSetting>,
    // Hello rules (TLS version, ECH).
    /// Refuse hellos that offer nothing newer: `"1.0"` … `"1.3"`.
    pub min_tls_version: Option<String>,
    /// What a hello with ECH does: `"pass"`, `"reject"` or a backend name.
    pub ech: Option<String>,
    /// The config ids of the ECH configurations this edge's origins
    /// publish: an outer ECH with one of them is real, any other GREASE.
    pub ech_config_ids: Option<Vec<i64>>,
    // QUIC listeners (issue 18).
    /// `"tcp"` (default) or `"quic"`: what the listener binds and reads.
    pub protocol: Option<String>,
    // Client fingerprints (JA4, JA3).
    /// Compute every hello's JA4 and JA3 and log them.
    pub fingerprints: Option<bool>,
    /// `[listener.match]`: fingerprints every hello on the listener must
    /// (or must not) have.
    pub r#match: Option<MatchSection>,
    // Bandwidth limits (issue 33), in bytes per second; unset: none.
    /// Each connection, client → backend.
    pub rate_up: Option<i64>,
    /// Each connection, backend → client.
    pub rate_down: Option<i64>,
    /// All of one source's connections together, client → backend.
    pub rate_per_source_up: Option<i64>,
    /// All of one source's connections together, backend → client.
    pub rate_per_source_down: Option<i64>,
    /// Bytes at once above a rate (default: one second's worth).
    pub burst: Option<i64>,
}

/// `[listener.match]` and `[route.match]`: JA4 patterns (exact, or a
/// prefix ending in `*`) a hello must match one of (`ja4`) and must match
/// none of (`ja4_deny`).
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MatchSection {
    pub ja4: Option<Vec<String>>,
    pub ja4_deny: Option<Vec<String>>,
}

/// `[listener.proxy_protocol]`: inbound PROXY headers from trusted peers.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProxyProtocolSection {
    pub trusted: Vec<String>,
    pub mode: Option<String>,
    pub max_hops: Option<i64>,
    // PROXY v2 TLVs.
    /// TLV types copied from a peer's header to a v2 backend's.
    pub pass_through_tlvs: Option<Vec<i64>>,
}

/// `[listener.limits]`; an unset limit takes its default (see
/// [`crate::config::DEFAULT_CONNECTIONS_PER_SOURCE`]; the rate limits default to off).
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSection {
    pub(crate) connections_per_source: Option<CountOrOff>,
    pub(crate) connection_rate_per_source: Option<i64>,
    pub(crate) connection_burst_per_source: Option<i64>,
    pub(crate) source_prefix_v4: Option<i64>,
    pub(crate) source_prefix_v6: Option<i64>,
    pub(crate) dry_run: Option<bool>,
    #[serde(default)]
    pub(crate) allow: Vec<String>,
    #[serde(default)]
    pub(crate) deny: Vec<String>,
    /// Refused attempts spend rate tokens too (HAProxy `conn_rate`).
    pub rate_counts_refused: Option<bool>,
    /// What the counting limits count by: `"source"`, `"ja4"` or
    /// `"source+ja4"`.
    pub limit_key: Option<String>,
    /// Attempts (admitted or refused) one source may make within
    /// `attempts_period`, counted as HAProxy's `conn_rate`.
    pub attempts_per_source: Option<i64>,
    /// The sliding period of `attempts_per_source` (default 1s).
    pub attempts_period: Option<String>,
    /// Sources the table remembers without an open connection (HAProxy's
    /// stick-table `size`).
    pub max_sources: Option<i64>,
    /// Under a JA4 `limit_key`: the source's own limits, as a multiple of
    /// the per-key ones.
    pub ja4_source_multiple: Option<i64>,
}

/// A limit given as a count, or `false` to turn it off (`true` is an error:
/// it names no count).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub(crate) enum CountOrOff {
    Count(i64),
    Switch(bool),
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSection {
    pub name: Option<String>,
    /// The listeners the route applies to: one name, a list of names, or
    /// `"*"` for every listener (see `check::route`).
    pub listener: Option<OneOrMany>,
    /// Names written inline; empty when the route reads them all from
    /// `sni_file` (and then not written back).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sni: Vec<String>,
    /// A file of names, one a line, read with the configuration.
    pub sni_file: Option<String>,
    pub backend: String,
    // Per-route admission, decided once the route is known.
    /// `[route.limits]`: the `[listener.limits]` keys, per source within
    /// this route.
    pub limits: Option<LimitsSection>,
    /// Open connections on this route, all sources together.
    pub max_connections: Option<i64>,
    // Per-route relay timeouts (issue 15, point 2); unset: the listener's.
    pub idle_timeout: Option<String>,
    pub half_close_timeout: Option<String>,
    pub(crate) max_connection_lifetime: Option<DurationOrOff>,
    // Name rules (what HAProxy's ACL spelled).
    /// Match names only where the pattern's labels are in lower case.
    pub case_sensitive_names: Option<bool>,
    /// Match only names without `_` in a label.
    pub ldh_names: Option<bool>,
    // Hello rules (ALPN, ECH).
    /// The route takes only hellos offering one of these ALPN protocols.
    pub alpn: Option<Vec<String>>,
    /// The listener's `ech`, for this route.
    pub ech: Option<String>,
    // Client fingerprints (JA4).
    /// `[route.match]`: fingerprints a hello on this route must (or must
    /// not) have.
    pub r#match: Option<MatchSection>,
    // Bandwidth limits (issue 33); unset: the listener's, `false`: none.
    pub(crate) rate_up: Option<CountOrOff>,
    pub(crate) rate_down: Option<CountOrOff>,
    pub(crate) rate_per_source_up: Option<CountOrOff>,
    pub(crate) rate_per_source_down: Option<CountOrOff>,
    /// Bytes at once above a rate; unset: the listener's `burst`.
    pub burst: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BackendSection {
    /// A fixed address list; one of `addresses`, `resolve` and `[cluster]`.
    /// Each entry is `"IP:port"` or `{ address, weight, max_connections }`.
    pub addresses: Option<Vec<AddressEntry>>,
    pub connect_timeout: Option<String>,
    pub proxy_protocol: Option<String>,
    pub proxy_protocol_crc32c: Option<bool>,
    pub max_datagram_size: Option<i64>,
    /// The QUIC server at the addresses reads the PROXY v2 header a quic
    /// listener sends (no `check` warning then).
    pub quic_reads_proxy_protocol: Option<bool>,
    // PROXY v2 TLVs.
    /// TLVs the v2 header adds: `{ type, value | text | bytes }` each.
    pub proxy_protocol_tlvs: Option<Vec<ProxyTlvEntry>>,
    pub policy: Option<String>,
    /// Which backups take over: `"first"` or `"all"`.
    pub backup_policy: Option<String>,
    pub connect_attempts: Option<i64>,
    /// Passive health: consecutive failed connects that mark an address down.
    pub max_fails: Option<i64>,
    /// Passive health: how long such an address stays down.
    pub fail_backoff: Option<String>,
    /// `host:port` whose A/AAAA set is the address list.
    pub resolve: Option<String>,
    /// `IP:53`: ask this DNS server (and follow TTLs) instead of the system resolver.
    pub resolver: Option<String>,
    pub(crate) resolve_interval: Option<String>,
    pub(crate) min_ttl: Option<String>,
    pub(crate) max_ttl: Option<String>,
    /// `policy = "fastest"`: how often connect times are measured again.
    pub fastest_interval: Option<String>,
    /// `[backend.NAME.health]`: active TCP checks.
    pub health: Option<HealthSection>,
    /// `[backend.NAME.cluster]`: the address is looked up per SNI.
    pub cluster: Option<ClusterSection>,
    // TCP keepalive on backend sockets (issue 15).
    /// `tcp_keepalive`: `{ idle, interval, count }`, `true` or `false`.
    pub tcp_keepalive: Option<KeepaliveSetting>,
    // Connection caps and the fastest measure (issue 15).
    /// The cap of every address without a `max_connections` of its own.
    pub max_connections_per_address: Option<i64>,
    /// `policy = "fastest"`: `"connect"` or `"tls"` (the health ClientHello).
    pub fastest_measure: Option<String>,
    // Egress source addresses and the transparent source (issue 33).
    /// `source`: `{ addresses, ports }` or `"client"`.
    pub source: Option<SourceSetting>,
}

/// `source = { addresses = ["10.0.0.2"], ports = "1024-65535" }` or
/// `source = "client"`. Read by hand rather than `untagged`, so that a
/// misspelt key in the table keeps serde's own message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum SourceSetting {
    Word(String),
    Table(EgressSourceTable),
}

/// The table form of `source`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EgressSourceTable {
    /// Local addresses, IPv4 and IPv6.
    pub addresses: Option<Vec<String>>,
    /// `"LOW-HIGH"`: the local port range.
    pub ports: Option<String>,
}

impl<'de> Deserialize<'de> for SourceSetting {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SourceSettingVisitor;
        impl<'de> serde::de::Visitor<'de> for SourceSettingVisitor {
            type Value = SourceSetting;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a table { addresses, ports } or \"client\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(SourceSetting::Word(v.to_owned()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Self::Value, A::Error> {
                EgressSourceTable::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(SourceSetting::Table)
            }
        }
        deserializer.deserialize_any(SourceSettingVisitor)
    }
}

/// One entry of `addresses`: a plain `"IP:port"`, or a table with its
/// weight and connection cap. Read by hand rather than `untagged`, so that
/// a misspelt key in a table is reported by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum AddressEntry {
    Plain(String),
    Table(AddressTable),
}

impl<'de> Deserialize<'de> for AddressEntry {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct AddressEntryVisitor;
        impl<'de> serde::de::Visitor<'de> for AddressEntryVisitor {
            type Value = AddressEntry;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(
                    "\"IP:port\" or { address = \"IP:port\", weight = N, max_connections = N, source = ..., backup = true }",
                )
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<AddressEntry, E> {
                Ok(AddressEntry::Plain(text.to_owned()))
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<AddressEntry, A::Error> {
                AddressTable::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(AddressEntry::Table)
            }
        }
        deserializer.deserialize_any(AddressEntryVisitor)
    }
}

/// `{ address = "IP:port", weight = 3, max_connections = 100 }`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AddressTable {
    pub(crate) address: String,
    pub weight: Option<i64>,
    pub max_connections: Option<i64>,
    /// This address's own `source` (the backend's when unset).
    pub source: Option<SourceSetting>,
    /// Planned only while every non-backup address is down.
    pub backup: Option<bool>,
}

/// One entry of `proxy_protocol_tlvs`: a type, and one of `value` (a
/// source the connection supplies), `text` or `bytes` (hex). The checker
/// reports which of the three is missing or doubled.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyTlvEntry {
    #[serde(rename = "type")]
    pub kind: i64,
    pub value: Option<String>,
    pub text: Option<String>,
    pub bytes: Option<String>,
}

/// `[backend.NAME.health]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HealthSection {
    pub interval: Option<String>,
    pub(crate) timeout: Option<String>,
    pub(crate) rise: Option<i64>,
    pub(crate) fall: Option<i64>,
    // TLS checks (issue 15).
    /// `"tcp"` (a connect) or `"tls"` (a ClientHello answered).
    pub kind: Option<String>,
    /// The server name a `tls` check sends.
    pub sni: Option<String>,
}

/// `[backend.NAME.cluster]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSection {
    pub(crate) dns_server: Option<String>,
    pub(crate) port: Option<i64>,
    pub(crate) lookup_url: Option<String>,
    /// `IP:53`: resolve host names in `lookup_url` answers there instead
    /// of through the system resolver (as `[backend.*] resolver`).
    pub resolver: Option<String>,
    pub(crate) local_backend: Option<String>,
    pub positive_ttl: Option<String>,
    pub negative_ttl: Option<String>,
    pub lookup_timeout: Option<String>,
    pub(crate) allowed_targets: Option<Vec<String>>,
    // Lookup floods (issue 49).
    /// Lookups this backend runs at once.
    pub max_lookups_in_flight: Option<i64>,
    /// Names without an answer to serve looked up per second.
    pub new_names_per_second: Option<i64>,
    // Pangolin lookups and Gerbil's node choice (issue 17).
    /// `"snirelay"` (the default) or `"pangolin"`.
    pub protocol: Option<String>,
    /// `pangolin`: the node's WireGuard public key, or the file holding it.
    pub public_key: Option<String>,
    pub(crate) public_key_file: Option<String>,
    /// `pangolin`: the port of an endpoint answered without one.
    pub default_port: Option<i64>,
    /// Request headers of every lookup: a value, or `{ file = "/path" }`.
    pub headers: Option<BTreeMap<String, HeaderValueSetting>>,
    /// `https://` lookups: the CA (PEM; the system roots when unset) and
    /// a client certificate and key (PEM).
    pub ca_file: Option<String>,
    pub(crate) client_cert_file: Option<String>,
    pub(crate) client_key_file: Option<String>,
    /// `"source_hash"` (the default) or `"gerbil_fnv"`.
    pub node_choice: Option<String>,
    // Pangolin nodes (issue 17).
    /// Names always sent to `local_backend` (exact or `*.suffix`).
    pub local_overrides: Option<Vec<String>>,
    /// `"v2"` (default) or `"v1"`: the PROXY header towards other nodes.
    pub hop_proxy_protocol: Option<String>,
    /// This node's own addresses or host names: an answer naming one is
    /// this node (unset: an answer naming the address the client dialled).
    pub this_node: Option<Vec<String>>,
}

/// A lookup header's value: the text, or the file it is read from (so a
/// secret stays out of the TOML and out of `/config`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum HeaderValueSetting {
    Text(String),
    File(HeaderFile),
}

/// `{ file = "/path" }`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HeaderFile {
    pub(crate) file: String,
}

/// A duration (`"24h"`), or `false` to turn the limit off (`true` is an
/// error: it names no duration).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum DurationOrOff {
    Duration(String),
    Switch(bool),
}

/// `tcp_keepalive` (per listener and per backend): a table of probe
/// timings, each optional, or `true` (the default timings) or `false`
/// (keepalive off).
///
/// Deserialised by hand rather than `untagged`, so that a bad key or value
/// inside the table keeps serde's own message (`unknown field `idel``)
/// instead of "did not match any variant".
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum KeepaliveSetting {
    Switch(bool),
    Probes(KeepaliveSection),
}

/// The table form of `tcp_keepalive`.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct KeepaliveSection {
    /// Quiet time before the first probe (whole seconds).
    pub idle: Option<String>,
    /// Time between probes (whole seconds).
    pub interval: Option<String>,
    /// Unanswered probes before the connection is closed.
    pub count: Option<i64>,
}

impl<'de> Deserialize<'de> for KeepaliveSetting {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeepaliveSettingVisitor;
        impl<'de> serde::de::Visitor<'de> for KeepaliveSettingVisitor {
            type Value = KeepaliveSetting;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a table { idle, interval, count }, true or false")
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Self::Value, E> {
                Ok(KeepaliveSetting::Switch(v))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Self::Value, A::Error> {
                KeepaliveSection::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(KeepaliveSetting::Probes)
            }
        }
        deserializer.deserialize_any(KeepaliveSettingVisitor)
    }
}

/// `listen = "127.0.0.1:8443"` or `listen = ["0.0.0.0:443", "[::]:443"]`;
/// a route's `listener = "tls"` or `listener = ["tls", "h3"]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub(crate) fn as_slice(&self) -> &[String] {
        match self {
            OneOrMany::One(one) => std::slice::from_ref(one),
            OneOrMany::Many(many) => many,
        }
    }
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AdminSection {
    pub listen: Option<String>,
    /// Must be `true` for a `listen` address that is not loopback.
    pub allow_public: Option<bool>,
    /// Serve `/config` (off unless set).
    pub expose_config: Option<bool>,
    /// Label backend address metrics with the address.
    pub address_labels: Option<bool>,
    // Run-time control (issue 16).
    /// A file of bearer tokens (`name:token` lines, or one bare token) that
    /// open the control endpoints on a TCP admin listener.
    pub token_file: Option<String>,
    // Pushed local names (issue 17).
    /// Where the names pushed to `POST /update-local-snis` are kept, so a
    /// restart serves the last pushed set.
    pub local_names_file: Option<String>,
    /// The window over which connections of names a push no longer lists
    /// as local are closed (`moved`).
    pub moved_close_window: Option<String>,
    // One base address for a Pangolin node (issue 30).
    /// Sources (CIDR) whose `POST /update-local-snis` is accepted without a
    /// token, as Gerbil accepts Pangolin's push.
    pub push_unauthenticated_from: Option<Vec<String>>,
    /// `http://host:port`: where requests for paths the admin listener
    /// does not serve are forwarded (Gerbil's API, moved behind it).
    pub forward_unmatched_to: Option<String>,
    /// `"backend:NAME"`, `"route:NAME"`, `"any_backend"`: what must have a
    /// usable address for `/readyz` to answer 200.
    pub ready_requires: Option<Vec<String>>,
}
