//! Backends at run time: the address set each backend chooses from now,
//! what is known about each address, what its policy keeps between
//! connections, and the background tasks that keep that knowledge fresh
//! (DNS re-resolution, active health checks, and whatever task the policy
//! asks for, such as latency ranking). Connections only read it.
//!
//! [`Backends`] holds one [`BackendRuntime`] per `[backend.*]`. A reload
//! builds a new registry from the new snapshot and carries over every
//! runtime whose backend is unchanged, with its resolved set, health and
//! ranking; runtimes of removed or changed backends have their tasks
//! stopped. A changed backend's new runtime learns nothing from the old one
//! except, per fixed address, the count of connections still open (so they
//! count against `max_connections`) and the operator's state of the address
//! (`AddressState`, with what `maint` needs to reach those connections). A
//! connection reads the registry it was accepted under.
//!
//! The validated settings a runtime is built from ([`Backend`],
//! [`AddressSource`], [`HealthCheck`], [`Cluster`]) are defined here and
//! built by `config`, so nothing in `backend` imports `config`.
//!
//! Where the addresses come from ([`AddressSource`]):
//! - fixed: the configured list, known from the start;
//! - DNS (`resolve`): [`resolve`] publishes each answer; until the first
//!   one a connection waits up to its `connect_timeout`, then closes
//!   `no_address`; a failed re-resolution keeps the last good set;
//! - cluster (`[backend.*.cluster]`): looked up per SNI by [`cluster`]
//!   (over HTTP, in snirelay's protocol or Pangolin's, by [`cluster_http`]),
//!   whose answer is either another node or this one (`local_backend`);
//!   [`node_choice`] says which of several nodes comes first; names pushed
//!   as local ([`local_names`]) or listed in `local_overrides` go to
//!   `local_backend` without a lookup.
//!
//! Not here: choosing among addresses ([`select`], [`policy`]) or
//! connecting (`crate::connect`). This module names no policy: what one
//! needs at run time is [`policy::State`] and [`policy::Policy`]'s start
//! hook.

pub mod cluster;
pub mod cluster_http;
pub mod dns;
mod endpoint;
pub mod fastest;
pub mod health;
pub mod local_names;
pub mod node_choice;
pub mod policy;
pub mod resolve;
pub mod select;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub use endpoint::{
    AddressSet, AddressState, Endpoint, EndpointState, InFlight, Member, carry, carry_members,
    same_addresses,
};

use crate::cidr::Cidr;
use crate::metrics;
use crate::proxy::outbound::Outbound;
use crate::sni::Pattern;
use crate::sockopt::Keepalive;
use policy::Policy;

// ------------------------------------------------------------ settings
// A backend's validated settings: what `[backend.NAME]` (and its `health`
// and `cluster` tables) says once `config` has checked it. They are the
// folder's shared vocabulary, defined here rather than in `config` so that
// the dependency runs one way: `config` builds these values (and re-exports
// the types under its own paths), the runtime reads them, and nothing in
// `backend` imports `config`.

/// `[backend.*] connect_attempts` when unset: every address, but at most
/// this many (the effective default is min(addresses, 3)).
pub const DEFAULT_CONNECT_ATTEMPTS_CAP: usize = 3;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backend {
    pub name: String,
    /// The fixed address list; empty when the addresses are found at run
    /// time (`source` says how).
    pub addresses: Vec<SocketAddr>,
    pub connect_timeout: Duration,
    /// The PROXY header sent to this backend before the client's bytes.
    pub proxy_protocol: Outbound,
    /// Whether that (v2) header carries a CRC32C TLV.
    pub proxy_protocol_crc32c: bool,
    /// Where the addresses come from.
    pub source: AddressSource,
    pub policy: Policy,
    /// Addresses tried per connection; `None` means min(addresses, 3),
    /// counted against the address set in force at connect time.
    pub connect_attempts: Option<usize>,
    /// Passive health: consecutive failed connects that mark an address
    /// down (0: never), and for how long.
    pub max_fails: u32,
    pub fail_backoff: Duration,
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
    /// `max_connections_per_address`: the cap of every address without
    /// one of its own (`None`: no cap).
    pub max_connections_per_address: Option<u32>,
    /// `policy = "fastest"`: what is timed.
    pub fastest_measure: FastestMeasure,
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
    pub fn attempts(&self, n: usize) -> usize {
        self.connect_attempts
            .unwrap_or(n.min(DEFAULT_CONNECT_ATTEMPTS_CAP))
            .max(1)
    }

    /// The cluster settings of a cluster-resolved backend.
    pub fn cluster(&self) -> Option<&Cluster> {
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
    /// an alert. The handshake is never completed.
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
    pub fn sni(&self) -> Option<&str> {
        match self {
            HealthKind::Tcp => None,
            HealthKind::Tls { sni } => Some(sni),
        }
    }
}

/// `[backend.*.cluster]`: the node that holds a site, looked up per SNI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    pub lookup: ClusterLookup,
    /// The backend that serves sites this node holds itself.
    pub local_backend: Option<String>,
    pub positive_ttl: Duration,
    pub negative_ttl: Duration,
    pub lookup_timeout: Duration,
    /// Where an answer may send traffic; any other address is refused.
    pub allowed_targets: Vec<Cidr>,
    // Pangolin lookups and Gerbil's node choice (issue 17).
    /// What a `lookup_url` speaks (DNS lookups: always `Snirelay`).
    pub protocol: ClusterProtocol,
    /// Request headers of every HTTP lookup, in file order.
    pub headers: Vec<LookupHeader>,
    /// An `https://` lookup's trust and client certificate (shared: it is
    /// large, and the same across clones of the settings).
    pub tls: Option<Arc<LookupTls>>,
    /// How a connection chooses among a site's nodes.
    pub node_choice: node_choice::NodeChoice,
    // Pangolin nodes (issue 17).
    /// Names always sent to `local_backend`, before the pushed set and any
    /// lookup (exact names and `*.suffix` patterns).
    pub local_overrides: Vec<Pattern>,
    /// The PROXY header towards other nodes (the backend's
    /// `proxy_protocol` follows it): v2 carries the hop count, v1 is what
    /// Gerbil nodes read.
    pub hop_proxy_protocol: Outbound,
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
        default_port: u16,
    },
}

impl ClusterProtocol {
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

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterLookup {
    /// Ask the cluster's authoritative DNS for the SNI's A/AAAA records and
    /// connect to `port` on them.
    Dns { server: SocketAddr, port: u16 },
    /// POST to this `http://` or `https://` URL (the request and reply are
    /// [`Cluster::protocol`]'s); an empty endpoint list means this node.
    /// Host names in the answer are resolved through `resolver` (`IP:53`)
    /// when set, else the system resolver, as a `resolve` backend's.
    Http {
        url: String,
        resolver: Option<SocketAddr>,
    },
}

// ------------------------------------------------------------- run time

/// What a backend's address source has said so far.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub set: AddressSet,
    /// False until the source answered once (a DNS backend at start).
    pub known: bool,
}

/// One backend's run-time state.
#[derive(Debug)]
pub struct BackendRuntime {
    pub config: Arc<Backend>,
    addresses: watch::Sender<Resolved>,
    /// What the backend's policy keeps between connections (a rotation,
    /// a latency ranking).
    pub selection: policy::State,
    /// Per-SNI answers of a cluster-resolved backend.
    pub cluster: Option<cluster::Cache>,
    /// Stops this runtime's background tasks.
    tasks: CancellationToken,
    /// This backend's connect metrics, resolved once.
    pub metrics: metrics::BackendSeries,
}

impl BackendRuntime {
    /// A runtime for `config`; its tasks start with [`BackendRuntime::start`].
    pub fn new(config: Arc<Backend>) -> BackendRuntime {
        BackendRuntime::replacing(config, None)
    }

    /// A runtime for `config` that replaces `previous` (the same backend
    /// under its old definition): nothing learnt is kept, but each fixed
    /// address it shares with the old set shares its count of open
    /// connections, so the connections still open under the old
    /// definition count against `max_connections` until they close.
    fn replacing(config: Arc<Backend>, previous: Option<&BackendRuntime>) -> BackendRuntime {
        let metrics = metrics::metrics().backend_series(&config.name);
        let fixed = matches!(config.source, AddressSource::Fixed);
        let mut set: Vec<Endpoint> = carry_members(&[], &config.members).to_vec();
        if let Some(previous) = previous {
            let old = previous.current().set;
            for endpoint in &mut set {
                if let Some(was) = old.iter().find(|e| e.addr == endpoint.addr) {
                    endpoint.state = Arc::new(EndpointState::counting_with(&was.state));
                }
            }
        }
        let resolved = Resolved {
            set: set.into(),
            known: fixed,
        };
        BackendRuntime {
            cluster: config
                .cluster()
                .map(|c| cluster::Cache::new(&config.name, c)),
            config,
            addresses: watch::channel(resolved).0,
            selection: policy::State::default(),
            tasks: CancellationToken::new(),
            metrics,
        }
    }

    /// Starts the tasks this backend needs: re-resolution, active health
    /// checks, and the policy's own (latency ranking).
    pub fn start(self: &Arc<Self>) {
        if let AddressSource::Dns(source) = &self.config.source {
            tokio::spawn(resolve::run(
                self.clone(),
                source.clone(),
                self.tasks.clone(),
            ));
        }
        if let Some(check) = &self.config.health {
            tokio::spawn(health::run(self.clone(), check.clone(), self.tasks.clone()));
        }
        self.config.policy.start(self, &self.tasks);
    }

    /// Stops the background tasks (the backend was removed or changed).
    pub fn stop(&self) {
        self.tasks.cancel();
    }

    /// The set in force now.
    pub fn current(&self) -> Resolved {
        self.addresses.borrow().clone()
    }

    /// Follows changes of the set (for checkers and rankers).
    pub fn subscribe(&self) -> watch::Receiver<Resolved> {
        self.addresses.subscribe()
    }

    /// Publishes a newly resolved address list, keeping what is known about
    /// the addresses it shares with the current set. Returns whether the
    /// set of addresses changed.
    pub fn publish(&self, addrs: &[SocketAddr]) -> bool {
        self.addresses.send_if_modified(|resolved| {
            let next = carry(&resolved.set, addrs);
            // A set that only changed order is kept as it is, so `ordered`
            // does not flap with a server that rotates its answers.
            if resolved.known && same_addresses(&resolved.set, &next) {
                return false;
            }
            resolved.set = next;
            resolved.known = true;
            true
        })
    }

    /// The set to connect to: at once when known, otherwise after waiting
    /// up to `wait` for the first answer; `None` when there is none.
    pub async fn addresses(&self, wait: Duration) -> Option<AddressSet> {
        // The usual case, a known set: one read lock, no subscription or timer.
        {
            let resolved = self.addresses.borrow();
            if resolved.known {
                return (!resolved.set.is_empty()).then(|| resolved.set.clone());
            }
        }
        let mut rx = self.addresses.subscribe();
        let ready = tokio::time::timeout(wait, rx.wait_for(|r| r.known)).await;
        match ready {
            Ok(Ok(resolved)) if !resolved.set.is_empty() => Some(resolved.set.clone()),
            _ => None,
        }
    }
}

/// Every backend's runtime, by name.
#[derive(Debug, Default)]
pub struct Backends {
    /// foldhash: looked up for every connection (see `matcher`).
    by_name: foldhash::HashMap<String, Arc<BackendRuntime>>,
}

impl Backends {
    /// Runtimes for the validated `backends` (a configuration's
    /// `[backend.*]` tables by name), reusing those of `previous` whose
    /// backend is unchanged and starting the others. Stopping the runtimes
    /// `previous` no longer needs is [`Backends::retire`]'s job.
    pub fn start(
        backends: &BTreeMap<String, Arc<Backend>>,
        previous: Option<&Backends>,
    ) -> Backends {
        let mut by_name = foldhash::HashMap::default();
        for (name, backend) in backends {
            let before = previous.and_then(|p| p.by_name.get(name));
            let kept = before
                .filter(|runtime| *runtime.config == **backend)
                .cloned();
            let runtime = kept.unwrap_or_else(|| {
                let runtime = Arc::new(BackendRuntime::replacing(
                    backend.clone(),
                    before.map(|b| &**b),
                ));
                runtime.start();
                runtime
            });
            by_name.insert(name.clone(), runtime);
        }
        Backends { by_name }
    }

    /// Stops the runtimes of `self` that `next` does not use.
    pub fn retire(&self, next: &Backends) {
        for (name, runtime) in &self.by_name {
            let kept = next
                .by_name
                .get(name)
                .is_some_and(|n| Arc::ptr_eq(n, runtime));
            if !kept {
                runtime.stop();
            }
        }
    }

    /// Stops every runtime's tasks.
    pub fn stop(&self) {
        self.by_name.values().for_each(|r| r.stop());
    }

    pub fn get(&self, name: &str) -> Option<&Arc<BackendRuntime>> {
        self.by_name.get(name)
    }

    /// Every runtime, by name in order (for the admin listener).
    pub fn sorted(&self) -> Vec<(&str, &Arc<BackendRuntime>)> {
        let mut all: Vec<_> = self.by_name.iter().map(|(n, r)| (n.as_str(), r)).collect();
        all.sort_by(|a, b| a.0.cmp(b.0));
        all
    }
}
