//! A backend's validated settings: what `[backend.NAME]` (with its
//! `health` and `cluster` tables) says once [`crate::config::check`] has checked
//! it, the policies' and node choices' names, and the keys only one policy
//! accepts. Plain data: the backend runtime (`backend`) reads these and
//! adds its behaviour (ranking, hashing, lookups) in its own `impl` blocks.
//!
//! Not here: choosing, connecting or looking anything up (`backend`).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use super::{Keepalive, Outbound, ProxyTlv, TrustedName};
use crate::wire::cidr::Cidr;
use crate::wire::sni::Pattern;

/// `[backend.*] connect_attempts` when unset: every address, but at most
/// this many (the effective default is min(addresses, 3)).
pub(crate) const DEFAULT_CONNECT_ATTEMPTS_CAP: usize = 3;

/// One `[backend.NAME]`: where routed connections go, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backend {
    /// The `NAME` of `[backend.NAME]`; routes name the backend by it.
    pub name: String,
    /// The fixed address list; empty when the addresses are found at run
    /// time (`source` says how).
    pub addresses: Vec<SocketAddr>,
    /// `connect_timeout`: how long one address attempt may take.
    pub connect_timeout: Duration,
    /// The PROXY header sent to this backend before the client's bytes.
    pub proxy_protocol: Outbound,
    /// Whether that (v2) header carries a CRC32C TLV.
    pub proxy_protocol_crc32c: bool,
    /// `max_datagram_size`: the largest datagram a v2 header over UDP may
    /// make toward this backend; `None`: the default
    /// ([`crate::proxy::datagram::DEFAULT_MAX_DATAGRAM_SIZE`]).
    pub max_datagram_size: Option<usize>,
    /// `quic_reads_proxy_protocol`: the QUIC server at the addresses
    /// strips the v2 header a quic listener sends, so `check` does not
    /// warn about it. Read by the checker only.
    pub quic_reads_proxy_protocol: bool,
    /// `proxy_protocol_tlvs`: the TLVs that (v2) header adds, in order,
    /// each type once. Shared, so a connection holds it without a copy.
    pub proxy_protocol_tlvs: Arc<[ProxyTlv]>,
    /// Where the addresses come from.
    pub source: AddressSource,
    pub(crate) policy: Policy,
    /// Addresses tried per connection; `None` means min(addresses, 3),
    /// counted against the address set in force at connect time.
    pub connect_attempts: Option<usize>,
    /// Passive health: consecutive failed connects that mark an address
    /// down (0: never), and for how long.
    pub max_fails: u32,
    pub(crate) fail_backoff: Duration,
    /// Active health checks; `None` without `[backend.*.health]`.
    pub health: Option<HealthCheck>,
    /// `policy = "fastest"`: the re-measurement interval (full jitter).
    pub fastest_interval: Duration,
    // TCP keepalive on backend sockets (issue 15).
    /// `tcp_keepalive`: set on each connected socket; `None`: off.
    pub tcp_keepalive: Option<Keepalive>,
    // Weights, connection caps and the fastest measure (issue 15).
    /// The fixed addresses with their weight and own cap: the same
    /// addresses as `addresses`, in the same order (empty when the
    /// addresses are found at run time).
    pub members: Vec<Member>,
    /// `backup_policy`: which backups take over while every non-backup
    /// address is down (only meaningful with a `backup` member).
    pub backup_policy: BackupPolicy,
    /// `max_connections_per_address`: the cap of every address without
    /// one of its own (`None`: no cap).
    pub max_connections_per_address: Option<u32>,
    /// `policy = "fastest"`: what is timed.
    pub fastest_measure: FastestMeasure,
    // Egress source addresses and the transparent source (issue 33).
    /// `source`: where connections to the addresses are made from (an
    /// address entry's own `source` wins over it).
    pub egress: Egress,
}

/// `source`: the local address a backend connection (or a QUIC flow's
/// backend socket) is made from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Egress {
    /// Unset: the host's routing picks the address, the kernel the port.
    #[default]
    Host,
    /// `{ addresses, ports }`: one of these addresses (of the destination's
    /// family), the port from `ports` or the kernel's range.
    Addresses(SourceAddresses),
    /// `"client"`: the client's own address and port (IP_TRANSPARENT).
    Client,
}

impl Egress {
    /// Whether a connection to `dest` can be made from this source at all
    /// (the table form needs an address of its family; the client's
    /// family is only known per connection).
    pub(crate) fn can_reach(&self, dest: &SocketAddr) -> bool {
        match self {
            Egress::Addresses(sources) => sources
                .addresses
                .iter()
                .any(|a| a.is_ipv4() == dest.is_ipv4()),
            Egress::Host | Egress::Client => true,
        }
    }
}

/// The table form of `source`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceAddresses {
    /// `addresses`: local addresses, IPv4 and IPv6, each once.
    pub addresses: Vec<IpAddr>,
    /// `ports = "LOW-HIGH"`: the local port range (IP_LOCAL_PORT_RANGE);
    /// `None`: the kernel's `ip_local_port_range`.
    pub ports: Option<(u16, u16)>,
}

/// `[backend.*] fastest_measure`: what `policy = "fastest"` times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FastestMeasure {
    /// The TCP connect.
    Connect,
    /// From connect until the ServerHello of a TLS health probe (needs
    /// `[backend.*.health] kind = "tls"`, whose `sni` it sends).
    Tls,
}

impl FastestMeasure {
    pub fn as_str(self) -> &'static str {
        match self {
            FastestMeasure::Connect => "connect",
            FastestMeasure::Tls => "tls",
        }
    }
}

impl Backend {
    /// Attempts for a connection when `n` addresses are known.
    pub(crate) fn attempts(&self, n: usize) -> usize {
        self.connect_attempts
            .unwrap_or(n.min(DEFAULT_CONNECT_ATTEMPTS_CAP))
            .max(1)
    }

    /// The cluster settings of a cluster-resolved backend.
    pub(crate) fn cluster(&self) -> Option<&Cluster> {
        match &self.source {
            AddressSource::Cluster(cluster) => Some(cluster),
            _ => None,
        }
    }
}

/// Where a backend's addresses come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddressSource {
    /// `addresses = [...]`.
    Fixed,
    /// `resolve = "host:port"`: the A/AAAA set.
    Dns(DnsSource),
    /// `[backend.*.cluster]`: looked up per SNI.
    Cluster(Cluster),
}

/// `resolve` and its settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsSource {
    pub host: String,
    pub port: u16,
    /// `resolver = "IP:53"`: ask this server and follow record TTLs
    /// (clamped to `min_ttl..=max_ttl`); `None`: the system resolver every
    /// `interval`.
    pub resolver: Option<SocketAddr>,
    pub interval: Duration,
    pub min_ttl: Duration,
    pub max_ttl: Duration,
}

/// `[backend.*.health]`: active checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    pub interval: Duration,
    pub timeout: Duration,
    /// Consecutive successes that mark a down address up.
    pub rise: u32,
    /// Consecutive failures that mark an up address down.
    pub fall: u32,
    /// What a check is: a TCP connect, or a TLS ClientHello answered.
    pub kind: HealthKind,
}

/// `[backend.*.health] kind` (and `sni`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthKind {
    /// A TCP connect (and a clean close).
    Tcp,
    /// A ClientHello for `sni`, passed when a ServerHello (or a
    /// HelloRetryRequest) comes back; the connection is then closed with
    /// an alert. The check never completes the handshake (a separate,
    /// less frequent certificate fetch does, `backend::health`).
    Tls { sni: String },
}

impl HealthKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            HealthKind::Tcp => "tcp",
            HealthKind::Tls { .. } => "tls",
        }
    }

    /// The SNI of a TLS check.
    pub(crate) fn sni(&self) -> Option<&str> {
        match self {
            HealthKind::Tcp => None,
            HealthKind::Tls { sni } => Some(sni),
        }
    }
}

/// `[backend.*.cluster]`: the node that holds a site, looked up per SNI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    /// How the node holding an SNI is found: `dns_server` or `lookup_url`.
    pub lookup: ClusterLookup,
    /// The backend that serves sites this node holds itself.
    pub local_backend: Option<String>,
    /// `positive_ttl`: how long an answer is kept.
    pub positive_ttl: Duration,
    /// `negative_ttl`: how long a failed or empty lookup is kept.
    pub negative_ttl: Duration,
    /// `lookup_timeout`: how long one lookup may take.
    pub lookup_timeout: Duration,
    /// Where an answer may send traffic; any other address is refused.
    pub allowed_targets: Vec<Cidr>,
    // Lookup floods (issue 49).
    /// `max_lookups_in_flight`: lookups this backend runs at once; a name
    /// that needs one past it is closed `lookup_limited`.
    pub max_lookups_in_flight: usize,
    /// `new_names_per_second`: lookups per second of names with no answer
    /// to serve (a bucket of one second's worth); past it, `lookup_limited`.
    pub new_names_per_second: u32,
    // Pangolin lookups and Gerbil's node choice (issue 17).
    /// What a `lookup_url` speaks (DNS lookups: always `Snirelay`).
    pub protocol: ClusterProtocol,
    /// Request headers of every HTTP lookup, in file order.
    pub headers: Vec<LookupHeader>,
    /// An `https://` lookup's trust and client certificate (shared: it is
    /// large, and the same across clones of the settings).
    pub tls: Option<Arc<LookupTls>>,
    /// How a connection chooses among a site's nodes.
    pub node_choice: NodeChoice,
    // Pangolin nodes (issue 17).
    /// Names always sent to `local_backend`, before the pushed set and any
    /// lookup (exact names and `*.suffix` patterns).
    pub local_overrides: Vec<Pattern>,
    /// The PROXY header towards other nodes (the backend's
    /// `proxy_protocol` follows it): v2 carries the hop count, v1 is what
    /// Gerbil nodes read.
    pub hop_proxy_protocol: Outbound,
    /// `this_node`: the addresses that mean this node in an answer, in
    /// file order (empty: the address the client dialled does).
    pub this_node: Vec<NodeAddress>,
}

/// One entry of `[backend.*.cluster] this_node`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeAddress {
    /// An address, as written (IPv4-mapped ones as IPv4).
    Ip(IpAddr),
    /// A host name, resolved when the configuration was loaded.
    Name(TrustedName),
}

impl NodeAddress {
    /// The addresses this entry stands for.
    pub fn addrs(&self) -> &[IpAddr] {
        match self {
            NodeAddress::Ip(ip) => std::slice::from_ref(ip),
            NodeAddress::Name(name) => &name.addrs,
        }
    }
}

impl std::fmt::Display for NodeAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeAddress::Ip(ip) => write!(f, "{ip}"),
            NodeAddress::Name(name) => f.write_str(&name.name),
        }
    }
}

/// `[backend.*.cluster] protocol`: the lookup's request and reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterProtocol {
    /// POST `{"hostname"}` to `lookup_url` itself; endpoints are `ip:port`
    /// or `host:port`.
    Snirelay,
    /// Pangolin's Gerbil route: POST `{"hostname", "publicKey"}` to
    /// `{lookup_url}/gerbil/get-resolved-hostname`; endpoints without a
    /// port get `default_port`.
    Pangolin {
        /// The node's WireGuard public key, as Pangolin knows the exit node.
        public_key: String,
        /// Where `public_key` was read from, when it came from a file.
        public_key_file: Option<std::path::PathBuf>,
        /// `default_port`: the port of an endpoint answered without one.
        default_port: u16,
    },
}

impl ClusterProtocol {
    /// The `protocol` key's value: `snirelay` or `pangolin`.
    pub fn as_str(&self) -> &'static str {
        match self {
            ClusterProtocol::Snirelay => "snirelay",
            ClusterProtocol::Pangolin { .. } => "pangolin",
        }
    }
}

/// One `[backend.*.cluster.headers]` entry, its value read (from the file
/// at load and at every reload when it names one).
#[derive(Clone, PartialEq, Eq)]
pub struct LookupHeader {
    pub name: String,
    /// Never logged or shown when it came from a file.
    pub value: String,
    pub file: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for LookupHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("LookupHeader");
        d.field("name", &self.name);
        match &self.file {
            Some(path) => d.field("file", path),
            None => d.field("value", &self.value),
        };
        d.finish()
    }
}

/// The TLS client of an `https://` lookup: the files it was built from
/// (compared, with their contents, to tell a reload what changed) and the
/// rustls configuration built from them at load.
#[derive(Clone)]
pub struct LookupTls {
    /// `ca_file`; `None`: the system's roots.
    pub ca_file: Option<std::path::PathBuf>,
    pub client_cert_file: Option<std::path::PathBuf>,
    pub client_key_file: Option<std::path::PathBuf>,
    /// The contents of the three files, in that order (empty when unset).
    pub contents: [Arc<[u8]>; 3],
    pub client: Arc<rustls::ClientConfig>,
}

impl PartialEq for LookupTls {
    fn eq(&self, other: &Self) -> bool {
        self.ca_file == other.ca_file
            && self.client_cert_file == other.client_cert_file
            && self.client_key_file == other.client_key_file
            && self.contents == other.contents
    }
}

impl Eq for LookupTls {}

impl std::fmt::Debug for LookupTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LookupTls")
            .field("ca_file", &self.ca_file)
            .field("client_cert_file", &self.client_cert_file)
            .field("client_key_file", &self.client_key_file)
            .finish_non_exhaustive()
    }
}

/// `[backend.*.cluster]`: where the lookup goes (`dns_server` or `lookup_url`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterLookup {
    /// Ask the cluster's authoritative DNS for the SNI's A/AAAA records and
    /// connect to `port` on them.
    Dns {
        /// `dns_server`: the DNS server asked for the SNI's A/AAAA records.
        server: SocketAddr,
        /// `port`: the port connected to on the addresses found.
        port: u16,
    },
    /// POST to this `http://` or `https://` URL (the request and reply are
    /// [`Cluster::protocol`]'s); an empty endpoint list means this node.
    /// Host names in the answer are resolved through `resolver` (`IP:53`)
    /// when set, else the system resolver, as a `resolve` backend's.
    Http {
        /// `lookup_url`: the `http://` or `https://` URL.
        url: String,
        /// `resolver`: the DNS server that resolves host names in answers;
        /// `None` uses the system resolver.
        resolver: Option<SocketAddr>,
    },
}

// ------------------------------------------------------------ addresses

/// A configured address: where, its weight, its own cap and source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The address (`address`, or the `"IP:port"` string).
    pub addr: SocketAddr,
    /// `weight`: the address's share under `round_robin`, `least_connections`
    /// and `source_hash` (1 to 256).
    pub weight: u32,
    /// `max_connections`: open connections to this address, at the cap the next
    /// address is used; `None` falls back to `max_connections_per_address`.
    pub max_connections: Option<u32>,
    /// `source`: this address's own egress source; `None`: the backend's.
    pub source: Option<Egress>,
    /// `backup`: planned only while every non-backup address is down
    /// (HAProxy's `backup` server).
    pub backup: bool,
}

/// `[backend.*] backup_policy`: which `backup` addresses take the
/// connections while every other address is down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackupPolicy {
    /// `"first"`: the first healthy backup in list order (HAProxy's default).
    #[default]
    First,
    /// `"all"`: every healthy backup, ranked by the backend's policy
    /// (HAProxy's `option allbackups`).
    All,
}

impl BackupPolicy {
    /// Every choice, as the file writes them.
    pub const ALL: [BackupPolicy; 2] = [BackupPolicy::First, BackupPolicy::All];

    /// As written in the file.
    pub const fn as_str(self) -> &'static str {
        match self {
            BackupPolicy::First => "first",
            BackupPolicy::All => "all",
        }
    }
}

impl Member {
    /// An address with weight 1 and no cap of its own (a resolved one).
    pub(crate) fn plain(addr: SocketAddr) -> Member {
        Member {
            addr,
            weight: 1,
            max_connections: None,
            source: None,
            backup: false,
        }
    }
}

// ------------------------------------------------------------- policies

/// Declares [`Policy`] from one table of variants and names, so that a
/// name cannot be parsed without being displayed, or the reverse.
macro_rules! policies {
    ($($(#[$doc:meta])* $variant:ident => $name:literal,)+) => {
        /// `[backend.*] policy`: how a connection's addresses are ordered.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Policy {
            $($(#[$doc])* $variant,)+
        }

        impl Policy {
            /// Every policy, in the order errors list them.
            pub const ALL: &'static [Policy] = &[$(Policy::$variant),+];

            /// The name in the file, in `/config` and in errors.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Policy::$variant => $name,)+
                }
            }
        }
    };
}

policies! {
    /// The first healthy address in list order.
    Ordered => "ordered",
    /// A rotating first choice, in proportion to the weights.
    RoundRobin => "round_robin",
    /// The fewest open relayed connections per unit of weight; ties rotate.
    LeastConnections => "least_connections",
    /// Sticky on the client's IP address (never its port), weighted.
    SourceHash => "source_hash",
    /// The address with the lowest measured connect time.
    Fastest => "fastest",
}

/// `[backend.*]` keys that belong to one policy: set with any other policy
/// (or with a policy name that is not valid) they are a configuration
/// error, since they would silently do nothing.
pub(crate) const OWN_KEYS: &[OwnKey] = &[
    OwnKey {
        key: "fastest_interval",
        policy: Policy::Fastest,
    },
    OwnKey {
        key: "fastest_measure",
        policy: Policy::Fastest,
    },
];

/// A key only one policy accepts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OwnKey {
    /// Its name in a `[backend.*]` table.
    pub key: &'static str,
    pub policy: Policy,
}

impl Policy {
    /// The policy of a `[cluster]` backend, whatever the file says: a site's
    /// nodes are chosen by the client's address, so a client keeps its node
    /// and every relay of a fleet makes the same choice. (A cluster's
    /// `node_choice = "gerbil_fnv"` ranks another node's addresses instead,
    /// see [`crate::backend::node_order`].)
    pub(crate) const CLUSTER: Policy = Policy::SourceHash;

    /// The policy named `name`; the error names every policy.
    pub fn parse(name: &str) -> Result<Policy, String> {
        Policy::ALL
            .iter()
            .copied()
            .find(|p| p.as_str() == name)
            .ok_or_else(|| {
                let names: Vec<String> = Policy::ALL
                    .iter()
                    .map(|p| format!("{:?}", p.as_str()))
                    .collect();
                format!("{name:?} is not one of {}", names.join(", "))
            })
    }

    /// The keys a `[backend.*]` table sets (`is_set`, by key name) that
    /// `policy` does not accept (`None`: the policy named was not valid, so
    /// no policy's own key applies), each with the reason.
    pub(crate) fn misplaced_keys(
        policy: Option<Policy>,
        is_set: impl Fn(&str) -> bool,
    ) -> impl Iterator<Item = (&'static str, String)> {
        OWN_KEYS
            .iter()
            .filter(move |own| is_set(own.key) && policy != Some(own.policy))
            .map(|own| {
                (
                    own.key,
                    format!("only applies with policy = {:?}", own.policy.as_str()),
                )
            })
    }
}

// ---------------------------------------------------------- node choice

/// `[backend.*.cluster] node_choice`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NodeChoice {
    #[default]
    SourceHash,
    GerbilFnv,
}

impl NodeChoice {
    pub const ALL: &'static [NodeChoice] = &[NodeChoice::SourceHash, NodeChoice::GerbilFnv];

    pub fn as_str(self) -> &'static str {
        match self {
            NodeChoice::SourceHash => "source_hash",
            NodeChoice::GerbilFnv => "gerbil_fnv",
        }
    }

    /// The choice named `name`; the error names every choice.
    pub fn parse(name: &str) -> Result<NodeChoice, String> {
        NodeChoice::ALL
            .iter()
            .copied()
            .find(|c| c.as_str() == name)
            .ok_or_else(|| {
                let names: Vec<String> = NodeChoice::ALL
                    .iter()
                    .map(|c| format!("{:?}", c.as_str()))
                    .collect();
                format!("{name:?} is not one of {}", names.join(", "))
            })
    }
}
