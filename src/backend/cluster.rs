//! Cluster-resolved backends (`[backend.*.cluster]`): the node that holds a
//! site, looked up per SNI and cached.
//!
//! Two ways to ask:
//! - `lookup_url`: an HTTP(S) POST, in snirelay's protocol or Pangolin's
//!   (the request, transport and reply are `super::cluster_http`'s). An
//!   empty endpoint list means this node holds the site ([`Answer::Local`];
//!   without a `local_backend` that is a negative answer). HTTP 404 means
//!   the cluster knows no node for the name (negative). Any other status,
//!   or a reply not understood, is a failed lookup. Address endpoints are
//!   taken literally: a node may serve on another port of this node's own
//!   address. Host-name endpoints (Pangolin answers its exit nodes'
//!   `endpoint`, usually a name) are resolved as a `resolve` backend
//!   resolves (`super::host_lookup::resolve_once`: the system resolver, or
//!   the cluster's `resolver`), all at once, within what is left of
//!   `lookup_timeout`. A name that does not resolve (in time) is skipped
//!   and logged; the others are used; an answer none of whose endpoints
//!   gave an address is a failed lookup. A name one of whose addresses is
//!   the one the client dialled is this node ([`Answer::Local`]).
//!
//! With `this_node` set, the addresses it lists (host names resolved at
//! load) are this node instead, whatever the client dialled: any endpoint
//! of an answer, an address (whatever its port) or a name, that gives one
//! of them makes the answer [`Answer::Local`], and those addresses are
//! never connected to, nor checked against `allowed_targets`. That is the
//! address a node is known by when it differs from the one its clients'
//! connections arrive on: behind a container's published port (Docker's
//! DNAT) or a 1:1 NAT, the relay sees a private address while the control
//! plane answers the public one (Pangolin's `gerbil.base_endpoint`).
//! - `dns_server`: the SNI's A/AAAA records at the cluster's authoritative
//!   DNS, connected on `port`. An answer naming the address the client
//!   dialled is this node ([`Answer::Local`]); no records is negative.
//!
//! Each lookup is bounded by `lookup_timeout` as a whole (connect, request,
//! reply, redirects, name resolution). Addresses outside `allowed_targets`
//! are dropped one by one and logged at warn (with the host name they came
//! from); an answer left with none is refused (`target_not_allowed`).
//!
//! The cache, per SNI:
//! - positive answers live for `positive_ttl` (DNS, or host names resolved
//!   through a `resolver`: the smaller of the smallest record TTL and
//!   `positive_ttl`); negative ones (no node, refused targets) for
//!   `negative_ttl`;
//! - single flight: one lookup per SNI at a time; connections that arrive
//!   while it runs wait for it and share its outcome, whatever it is;
//! - serve stale: when a lookup fails, the last answer (up to `MAX_STALE`
//!   past its expiry) keeps being served, and the lookup is retried after
//!   `negative_ttl` (so a control plane that hangs costs one connection a
//!   `lookup_timeout` per `negative_ttl`, not every connection). With no
//!   answer to serve, the failure itself is kept for `negative_ttl` and
//!   connections close `no_address`. A warning is logged once per SNI per
//!   failure streak, and recovery at info;
//! - endpoints keep their [`super::Endpoint`] state (passive health,
//!   in-flight counts) across refreshes, and a refresh that only reorders
//!   the endpoints keeps the set as it was (with `node_choice =
//!   "gerbil_fnv"`, which picks by position, it takes the new order);
//! - bounded, in two shares ([`table`]): at most [`table::MAX_ENTRIES`] names
//!   with an answer (fresh or stale-servable) and [`table::MAX_UNANSWERED`]
//!   without one (first lookup pending, no node, refused, failed). A new
//!   name takes its place among the unanswered and makes room there only;
//!   an answer makes room among the answers only. So names that did not
//!   resolve never evict names that did. Room is made a batch at a time
//!   (dead entries first, then the soonest to expire), never a sweep per
//!   name; names with a lookup in flight are never evicted. About 250 B
//!   per name and 200 B per one-endpoint answer: ~5 MB per backend when
//!   both shares are full.
//!
//! Lookups are bounded per backend ([`limit`], issue 49): at most
//! `max_lookups_in_flight` run at once, and names with no answer to serve
//! (new ones, expired negatives) are looked up at most
//! `new_names_per_second` (a bucket of one second's worth). A name that
//! would need a lookup past either closes `lookup_limited` at once,
//! nothing looked up and nothing cached (so never a negative entry of the
//! cluster's); a name with a stale answer whose refresh is refused is
//! served that answer. A cached name (fresh or stale-servable) never takes
//! from the rate. Waiting for another connection's lookup of the same
//! name takes neither. So a flood of random names costs the control plane
//! at most `new_names_per_second` lookups a second (after its first
//! second's burst), and the connections (or QUIC flows) waiting on a
//! lookup wait on at most `max_lookups_in_flight` names.
//!
//! Before any of that, a name in `local_overrides` or in the pushed local
//! names (`super::local_names`) is [`Answer::Local`] when the backend has a
//! `local_backend`: no lookup, nothing cached. A push drops the cached
//! answers of the names it changed (`Cache::forget`).
//!
//! Cost on the hot path: a cached answer is two short mutex sections (the
//! name table, then the entry) and one `Arc` clone; no await.
//!
//! Not here: connecting to the answer ([`crate::tcp::dial`], which chooses
//! among a site's nodes by `node_choice` and sends `hop_proxy_protocol`
//! towards them), the HTTP lookup (`super::cluster_http`) or the DNS wire
//! protocol (`super::dns`).

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::cluster_http::{self, HttpTarget, Target};
use super::host_lookup;
use super::{AddressSet, carry, same_addresses};
use crate::backend::node_order::{NodeChoice, gerbil_index};
use crate::config::settings::{Cluster, ClusterLookup};
use crate::metrics;
use crate::wire::cidr::canonical;
use crate::wire::matcher::SniMatcher;
use crate::wire::sni::Sni;
use limit::{Limited, Limits};
use table::{CacheEntry, Table};

/// How long past its expiry an answer may still be served while lookups
/// fail (RFC 8767 suggests one to three days for DNS).
pub(crate) const MAX_STALE: Duration = Duration::from_secs(24 * 60 * 60);

/// Where a cluster lookup sends a connection.
#[derive(Debug, Clone)]
pub enum Answer {
    /// Another node (or several): connect there, with PROXY v2.
    Remote(Nodes),
    /// This node holds the site: use `local_backend`.
    Local,
}

/// Another node's addresses, and where each endpoint of the answer begins
/// among them (for `node_choice = "gerbil_fnv"`, which picks an endpoint
/// of the answer, not an address).
#[derive(Debug, Clone)]
pub struct Nodes {
    /// The allowed addresses, endpoint by endpoint in answer order, each
    /// endpoint's in its resolver's order, without repeats.
    pub set: AddressSet,
    /// Per endpoint of the answer, in answer order (those that gave no
    /// allowed address included): the index in `set` of its first
    /// address; for one that gave none, of the next endpoint's first.
    starts: Arc<[usize]>,
}

impl Nodes {
    /// The index in `set` Gerbil's pick starts at for a client at `client`
    /// (`claimed`: from a trusted PROXY header): Gerbil's
    /// `selectStickyEndpoint` picks endpoint `FNV-1a(client text) % n`
    /// among the `n` endpoints as answered, names unresolved, and dials it;
    /// its addresses come first here, then the next endpoints' in answer
    /// order, wrapping round. `set` must not be empty.
    pub(crate) fn gerbil_first(&self, client: SocketAddr, claimed: bool) -> usize {
        let n = self.set.len().max(1);
        let endpoint = gerbil_index(client, claimed, self.starts.len());
        self.starts.get(endpoint).map_or(0, |&start| start % n)
    }
}

/// Why a cluster backend has no address to connect to for a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    #[error("the lookup found no node for this name")]
    /// The lookup found no node for the name, or failed with no older answer
    /// to serve.
    NoAddress,
    #[error("the answer points outside allowed_targets")]
    /// Every address the answer gave is outside `allowed_targets`.
    TargetNotAllowed,
    #[error("the lookup would pass max_lookups_in_flight or new_names_per_second")]
    /// The name has no answer to serve and a lookup for it would pass the
    /// backend's `max_lookups_in_flight` or `new_names_per_second`.
    Limited,
}

/// Why one lookup failed (logged; the connection sees [`LookupError`]).
#[derive(Debug, thiserror::Error)]
enum QueryError {
    #[error("no answer within lookup_timeout ({0:?})")]
    Timeout(Duration),
    #[error(transparent)]
    Http(#[from] cluster_http::HttpError),
    #[error("DNS lookup failed: {0}")]
    Dns(#[from] super::dns::DnsError),
    #[error("no endpoint of the answer resolved to an address ({0})")]
    Unresolved(String),
}

/// What one successful lookup said, before `allowed_targets`.
#[derive(Debug)]
enum Found {
    /// Node endpoints in answer order, and how long the answer may be
    /// cached.
    Nodes(Vec<Reached>, Duration),
    /// An empty endpoint list: this node.
    Here,
    /// The cluster knows no node for the name.
    Nowhere,
}

/// One endpoint of an answer, its name resolved.
#[derive(Debug)]
struct Reached {
    /// The host name the answer gave (for the log), if it gave one.
    name: Option<Box<str>>,
    /// Its addresses (none: it did not resolve).
    addrs: Vec<SocketAddr>,
    /// Whether an address of it that the client dialled is this node: a
    /// DNS answer's address, a host name's; not an address an HTTP
    /// answer gave literally (a node may serve on another port of it).
    names_node: bool,
}

impl Reached {
    /// `addrs`, each its own endpoint (a DNS answer, or literal addresses).
    fn each(addrs: &[SocketAddr], names_node: bool) -> Vec<Reached> {
        addrs
            .iter()
            .map(|&addr| Reached {
                name: None,
                addrs: vec![addr],
                names_node,
            })
            .collect()
    }
}

/// An answer as cached.
#[derive(Debug, Clone)]
enum CachedAnswer {
    /// The allowed endpoints (possibly none: refused), where each answered
    /// endpoint begins among them, and the addresses that mean this node
    /// when a client dialled one (a DNS answer's, a host name's).
    Nodes {
        set: AddressSet,
        starts: Arc<[usize]>,
        here: Arc<[IpAddr]>,
        /// An endpoint gave an address of `this_node`.
        mine: bool,
    },
    Here,
    /// No node, or a failed lookup with nothing older to serve.
    NoNode,
}

/// Where a cluster backend's answers come from: its HTTP lookup or its
/// DNS server.
#[derive(Debug)]
enum AnswerSource {
    /// The lookup, and the `resolver` of host names in its answers (`None`:
    /// the system resolver).
    Http {
        target: Box<HttpTarget>,
        resolver: Option<SocketAddr>,
    },
    Dns {
        server: SocketAddr,
        port: u16,
    },
}

/// Per-SNI answers of one cluster backend.
#[derive(Debug)]
pub struct Cache {
    config: Cluster,
    backend: String,
    source: AnswerSource,
    table: Mutex<Table>,
    /// `max_lookups_in_flight` and `new_names_per_second`.
    limits: Limits,
    /// `local_overrides`, compiled (empty: no check).
    overrides: SniMatcher<()>,
    /// The addresses of `this_node` (empty: the dialled address is this
    /// node).
    this_node: Vec<IpAddr>,
}

impl Cache {
    /// A cache for the cluster settings of backend `backend`.
    pub fn new(backend: &str, config: &Cluster) -> Cache {
        let source = match &config.lookup {
            ClusterLookup::Dns { server, port } => AnswerSource::Dns {
                server: *server,
                port: *port,
            },
            ClusterLookup::Http { url, resolver } => AnswerSource::Http {
                target: Box::new(HttpTarget::new(url, config)),
                resolver: *resolver,
            },
        };
        let mut overrides = SniMatcher::new();
        for pattern in &config.local_overrides {
            // A duplicate pattern says the same thing twice.
            let _ = overrides.insert(pattern, ());
        }
        let mut this_node: Vec<IpAddr> = Vec::new();
        for ip in config.this_node.iter().flat_map(|n| n.addrs()) {
            let ip = canonical(*ip);
            if !this_node.contains(&ip) {
                this_node.push(ip);
            }
        }
        Cache {
            config: config.clone(),
            backend: backend.to_owned(),
            source,
            table: Mutex::new(Table::counted(backend)),
            limits: Limits::new(
                backend,
                config.max_lookups_in_flight,
                config.new_names_per_second,
                Instant::now(),
            ),
            overrides,
            this_node,
        }
    }

    /// Whether `sni` goes to `local_backend` without a lookup: it is in
    /// `local_overrides`, or in the pushed local names.
    pub fn is_local_name(&self, sni: &str) -> bool {
        if self.config.local_backend.is_none() {
            return false;
        }
        if !self.overrides.is_empty()
            && Sni::parse_written(sni.as_bytes())
                .is_ok_and(|sni| self.overrides.find(&sni).is_some())
        {
            return true;
        }
        super::local_names::contains(sni)
    }

    /// Drops the cached answers of `names` (their next connection looks
    /// up afresh). A lookup in flight finishes into its own slot, which is
    /// no longer in the table, and its waiters take its outcome.
    pub(crate) fn forget<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> usize {
        let mut table = self.table();
        names.into_iter().filter(|name| table.remove(name)).count()
    }

    /// The answer for `sni`; `local` is the address the client dialled.
    pub async fn lookup(&self, sni: &str, local: IpAddr) -> Result<Answer, LookupError> {
        // Names this node serves, by configuration or by push: no lookup.
        if self.is_local_name(sni) {
            return Ok(Answer::Local);
        }
        // A name not cached is admitted before it takes a place, so a
        // refused one leaves nothing behind (not even a negative entry).
        let existing = self.table().get(sni).cloned();
        let (slot, mut admitted) = match existing {
            Some(slot) => (slot, None),
            None => {
                let permit = self
                    .limits
                    .admit(true, Instant::now())
                    .map_err(|limit| self.limited(sni, limit))?;
                (
                    self.table().get_or_insert(sni, Instant::now()),
                    Some(permit),
                )
            }
        };
        let seen = {
            let entry = slot.entry();
            if let Some(stored) = entry.stored.as_ref()
                && Instant::now() < entry.fresh_until
            {
                metrics::metrics().lookup("cluster", "cache_hit");
                return self.serve(stored, local);
            }
            entry.generation
        };
        // Single flight: one connection looks up, the others wait here.
        let _flight = match slot.flight.try_lock() {
            Ok(flight) => flight,
            Err(_) => {
                tracing::debug!(backend = %self.backend, %sni, "waiting for the cluster lookup in flight");
                slot.flight.lock().await
            }
        };
        let stale = {
            let entry = slot.entry();
            if entry.generation != seen
                && let Some(stored) = entry.stored.as_ref()
            {
                metrics::metrics().lookup("cluster", "cache_hit");
                return self.serve(stored, local);
            }
            entry
                .servable(Instant::now())
                .then(|| entry.stored.clone())
                .flatten()
        };
        // A cached name's refresh takes a permit, never a token; refused,
        // its stale answer is served and the next connection tries again.
        let _permit = match admitted.take() {
            Some(permit) => permit,
            None => match self.limits.admit(stale.is_none(), Instant::now()) {
                Ok(permit) => permit,
                Err(limit) => {
                    let refused = self.limited(sni, limit);
                    return match &stale {
                        Some(stored) => self.serve(stored, local),
                        None => Err(refused),
                    };
                }
            },
        };
        let deadline = Instant::now() + self.config.lookup_timeout;
        let found = self.query(sni, deadline).await;
        let mut entry = slot.entry();
        self.learn(sni, &mut entry, found);
        let stored = entry.stored.clone().unwrap_or(CachedAnswer::NoNode);
        drop(entry);
        self.table().settle(sni, &slot, Instant::now());
        self.serve(&stored, local)
    }

    /// Counts and logs a lookup refused by `limit`.
    fn limited(&self, sni: &str, limit: Limited) -> LookupError {
        tracing::debug!(backend = %self.backend, %sni, limit = limit.as_str(), "cluster lookup refused by the backend's lookup limits");
        LookupError::Limited
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What a cached answer means for a connection that dialled `local`.
    fn serve(&self, stored: &CachedAnswer, local: IpAddr) -> Result<Answer, LookupError> {
        match stored {
            CachedAnswer::Nodes {
                set,
                starts,
                here,
                mine,
            } => {
                let local = canonical(local);
                if *mine || here.contains(&local) {
                    Ok(Answer::Local)
                } else if set.is_empty() {
                    Err(LookupError::TargetNotAllowed)
                } else {
                    Ok(Answer::Remote(Nodes {
                        set: set.clone(),
                        starts: starts.clone(),
                    }))
                }
            }
            CachedAnswer::Here => Ok(Answer::Local),
            CachedAnswer::NoNode => Err(LookupError::NoAddress),
        }
    }

    /// Records the outcome of a lookup in `entry`.
    fn learn(&self, sni: &str, entry: &mut CacheEntry, found: Result<Found, QueryError>) {
        let now = Instant::now();
        let config = &self.config;
        let backend = self.backend.as_str();
        entry.generation = entry.generation.wrapping_add(1);
        let found = match found {
            Ok(found) => found,
            Err(error) => {
                metrics::metrics().lookup("cluster", "error");
                let stale = entry.stored.is_some() && now < entry.stale_until;
                if !stale {
                    entry.stored = Some(CachedAnswer::NoNode);
                    entry.stale_until = now;
                }
                entry.fresh_until = now + config.negative_ttl;
                if std::mem::replace(&mut entry.failing, true) {
                    tracing::debug!(%backend, %sni, %error, serving_stale = stale, "cluster lookup failed again");
                } else if stale {
                    tracing::warn!(%backend, %sni, %error, "cluster lookup failed; serving the last answer");
                } else {
                    tracing::warn!(%backend, %sni, %error, "cluster lookup failed and there is no earlier answer; closing as no_address");
                }
                return;
            }
        };
        if std::mem::replace(&mut entry.failing, false) {
            tracing::info!(%backend, %sni, "cluster lookup answers again");
        }
        let (stored, ttl) = match found {
            Found::Nodes(reached, ttl) => {
                metrics::metrics().lookup("cluster", "ok");
                let (allowed, starts, here, mine) = self.admit(sni, &reached);
                let previous = match &entry.stored {
                    Some(CachedAnswer::Nodes { set, .. }) => set.clone(),
                    _ => AddressSet::from([]),
                };
                let next = carry(&previous, &allowed);
                // `gerbil_fnv` picks by position: a reordered answer is new.
                let in_order = config.node_choice != NodeChoice::GerbilFnv
                    || previous
                        .iter()
                        .zip(next.iter())
                        .all(|(a, b)| a.addr == b.addr);
                let set = if same_addresses(&previous, &next) && !previous.is_empty() && in_order {
                    previous
                } else {
                    tracing::debug!(%backend, %sni, endpoints = ?allowed, "cluster answer");
                    next
                };
                // A refused answer is retried as soon as a negative one.
                let ttl = if set.is_empty() && !mine {
                    ttl.min(config.negative_ttl)
                } else {
                    ttl
                };
                let stored = CachedAnswer::Nodes {
                    set,
                    starts: starts.into(),
                    here: here.into(),
                    mine,
                };
                (stored, ttl)
            }
            Found::Here if config.local_backend.is_some() => {
                metrics::metrics().lookup("cluster", "empty");
                (CachedAnswer::Here, config.positive_ttl)
            }
            Found::Here | Found::Nowhere => {
                metrics::metrics().lookup("cluster", "empty");
                (CachedAnswer::NoNode, config.negative_ttl)
            }
        };
        let positive = !matches!(stored, CachedAnswer::NoNode);
        entry.stored = Some(stored);
        entry.fresh_until = now + ttl;
        entry.stale_until = if positive {
            entry.fresh_until + MAX_STALE
        } else {
            entry.fresh_until
        };
    }

    /// The addresses of `reached` that `allowed_targets` lets through
    /// (each once, in answer order), where each endpoint begins among them
    /// (see [`Nodes`]), the dialled addresses that mean this node, and
    /// whether an endpoint gave an address of `this_node` (which is left
    /// out of the rest). Every address refused is logged, with the host
    /// name it came from.
    fn admit(
        &self,
        sni: &str,
        reached: &[Reached],
    ) -> (Vec<SocketAddr>, Vec<usize>, Vec<IpAddr>, bool) {
        let backend = self.backend.as_str();
        let mut allowed: Vec<SocketAddr> = Vec::new();
        let mut starts = Vec::with_capacity(reached.len());
        let mut here = Vec::new();
        let mut mine = false;
        for endpoint in reached {
            if endpoint.names_node && self.this_node.is_empty() {
                here.extend(endpoint.addrs.iter().map(|a| canonical(a.ip())));
            }
            let mut first = None;
            for addr in &endpoint.addrs {
                if self.this_node.contains(&canonical(addr.ip())) {
                    mine = true;
                    continue;
                }
                let ok = self
                    .config
                    .allowed_targets
                    .iter()
                    .any(|c| c.contains(addr.ip()));
                if !ok {
                    match &endpoint.name {
                        Some(name) => {
                            tracing::warn!(%backend, %sni, endpoint = %name, %addr, "cluster answer names a host that resolves outside allowed_targets; this address dropped");
                        }
                        None => {
                            tracing::warn!(%backend, %sni, %addr, "cluster answer outside allowed_targets; dropped");
                        }
                    }
                    continue;
                }
                let at = match allowed.iter().position(|a| a == addr) {
                    Some(at) => at,
                    None => {
                        allowed.push(*addr);
                        allowed.len() - 1
                    }
                };
                first.get_or_insert(at);
            }
            starts.push(first.unwrap_or(allowed.len()));
        }
        if mine {
            tracing::debug!(%backend, %sni, "cluster answer names this node (this_node)");
        }
        (allowed, starts, here, mine)
    }

    /// Asks the cluster once, by `deadline`.
    async fn query(&self, sni: &str, deadline: Instant) -> Result<Found, QueryError> {
        let timeout = QueryError::Timeout(self.config.lookup_timeout);
        match &self.source {
            AnswerSource::Http { target, resolver } => {
                let reply = tokio::time::timeout_at(deadline, target.lookup(sni))
                    .await
                    .map_err(|_| timeout)??;
                Ok(match reply {
                    cluster_http::Reply::Nodes(targets) => {
                        self.resolve_targets(sni, targets, *resolver, deadline)
                            .await?
                    }
                    cluster_http::Reply::Here => Found::Here,
                    cluster_http::Reply::Nowhere => Found::Nowhere,
                })
            }
            AnswerSource::Dns { server, port } => {
                let answer = tokio::time::timeout_at(
                    deadline,
                    super::dns::query(*server, sni, self.config.lookup_timeout),
                )
                .await
                .map_err(|_| timeout)??;
                if answer.addrs.is_empty() {
                    return Ok(Found::Nowhere);
                }
                let addrs: Vec<SocketAddr> = answer
                    .addrs
                    .iter()
                    .map(|&ip| SocketAddr::new(ip, *port))
                    .collect();
                Ok(Found::Nodes(
                    Reached::each(&addrs, true),
                    answer.ttl.min(self.config.positive_ttl),
                ))
            }
        }
    }

    /// Resolves the host names among `targets`, side by side, each by
    /// `deadline`; a name that does not resolve in time is skipped (and
    /// logged). The answer's TTL is `positive_ttl`, or less when a
    /// `resolver`'s record TTL is.
    async fn resolve_targets(
        &self,
        sni: &str,
        targets: Vec<Target>,
        resolver: Option<SocketAddr>,
        deadline: Instant,
    ) -> Result<Found, QueryError> {
        let mut names = tokio::task::JoinSet::new();
        for (i, target) in targets.iter().enumerate() {
            if let Target::Name { host, port } = target {
                let (host, port) = (host.clone(), *port);
                names.spawn(async move {
                    let found = tokio::time::timeout_at(
                        deadline,
                        host_lookup::resolve_once(&host, port, resolver),
                    )
                    .await;
                    (i, found)
                });
            }
        }
        let mut resolved: Vec<Option<_>> = targets.iter().map(|_| None).collect();
        // Each task ends by `deadline`; the set is dropped (and whatever
        // is left aborted) with this future.
        while let Some(joined) = names.join_next().await {
            if let Ok((i, found)) = joined {
                resolved[i] = Some(found);
            }
        }
        let backend = self.backend.as_str();
        let mut ttl = self.config.positive_ttl;
        let mut reached = Vec::with_capacity(targets.len());
        let mut unresolved = Vec::new();
        for (target, found) in targets.into_iter().zip(resolved) {
            let (host, found) = match target {
                Target::Addr(addr) => {
                    reached.extend(Reached::each(&[addr], false));
                    continue;
                }
                Target::Name { host, .. } => (host, found),
            };
            let addrs = match found {
                Some(Ok(Ok(found))) if !found.addrs.is_empty() => {
                    if let Some(record) = found.ttl {
                        ttl = ttl.min(record);
                    }
                    found.addrs
                }
                other => {
                    let error = match other {
                        Some(Ok(Ok(_))) => "no address for the name".to_owned(),
                        Some(Ok(Err(error))) => error.to_string(),
                        Some(Err(_)) => format!(
                            "no answer within lookup_timeout ({:?})",
                            self.config.lookup_timeout
                        ),
                        None => "the resolution ended without an answer".to_owned(),
                    };
                    tracing::warn!(%backend, %sni, endpoint = %host, %error, "cluster answer names a host that does not resolve; skipped, the other endpoints are used");
                    unresolved.push(host.clone());
                    Vec::new()
                }
            };
            reached.push(Reached {
                name: Some(host.into()),
                addrs,
                names_node: true,
            });
        }
        if reached.iter().all(|r| r.addrs.is_empty()) {
            return Err(QueryError::Unresolved(unresolved.join(", ")));
        }
        Ok(Found::Nodes(reached, ttl))
    }

    /// The slot of `sni`, made (and room made for it among the
    /// unanswered) if new; no lookup bound is asked.
    #[cfg(test)]
    fn slot(&self, sni: &str) -> Arc<table::NameSlot> {
        self.table().get_or_insert(sni, Instant::now())
    }

    /// Names cached now, answered or not (for tests and metrics).
    pub fn len(&self) -> usize {
        self.table().len()
    }

    /// Whether no name is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether lookups fail with nothing to serve instead: some name's
    /// last lookup failed without an earlier answer, and no cached name
    /// has an answer it may still serve (fresh or stale). A cache that has
    /// looked nothing up yet is not failing. Read by `/readyz`; a scan of
    /// at most [`table::MAX_ENTRIES`] + [`table::MAX_UNANSWERED`] entries under the table's
    /// lock.
    pub(crate) fn failing(&self) -> bool {
        let now = Instant::now();
        let table = self.table();
        let mut failing = false;
        for slot in table.slots() {
            let entry = slot.entry();
            match &entry.stored {
                Some(CachedAnswer::NoNode) => failing |= entry.failing,
                Some(_) if now < entry.fresh_until || now < entry.stale_until => return false,
                _ => {}
            }
        }
        failing
    }
}

mod limit;
mod table;
#[cfg(test)]
mod tests;
