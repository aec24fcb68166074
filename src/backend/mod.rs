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
//! `AddressSource`, `HealthCheck`, [`Cluster`]) are plain data defined
//! in [`crate::config::settings`] and built by `config`; the dependency runs one
//! way, from the runtime to the configuration.
//!
//! Where the addresses come from (`AddressSource`):
//! - fixed: the configured list, known from the start;
//! - DNS (`resolve`): `resolve` publishes each answer; until the first
//!   one a connection waits up to its `connect_timeout`, then closes
//!   `no_address`; a failed re-resolution keeps the last good set;
//! - cluster (`[backend.*.cluster]`): looked up per SNI by [`cluster`]
//!   (over HTTP, in snirelay's protocol or Pangolin's, by `cluster_http`),
//!   whose answer is either another node or this one (`local_backend`);
//!   `node_order` says which of several nodes comes first; names pushed
//!   as local ([`local_names`]) or listed in `local_overrides` go to
//!   `local_backend` without a lookup.
//!
//! Not here: choosing among addresses ([`candidates`], [`plan`],
//! [`balance`]) or connecting ([`crate::tcp::dial`]). This module names no policy: what one
//! needs at run time is [`policy_state::State`] and [`balance::Policy`]'s
//! start hook.

pub mod balance;
pub(crate) mod candidates;
pub mod cluster;
pub(crate) mod cluster_http;
pub mod dns;
pub(crate) mod egress;
mod endpoint;
pub(crate) mod fastest;
pub(crate) mod health;
pub(crate) mod host_lookup;
pub mod local_names;
pub(crate) mod node_order;
pub mod plan;
pub mod policy_state;
pub(crate) mod resolve;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub use endpoint::{Endpoint, EndpointState, Member};

pub(crate) use endpoint::carry;
pub use endpoint::carry_members;

pub(crate) use endpoint::{AddressSet, AddressState, InFlight, same_addresses};

use crate::metrics;

// ------------------------------------------------------------ settings
// A backend's validated settings (`Backend`, `AddressSource`, `Cluster`,
// ...) are plain data defined with the rest of the settings, in
// `config::settings`; the runtime here reads them.
pub(crate) use crate::config::settings::{
    AddressSource, DnsSource, FastestMeasure, HealthCheck, HealthKind,
};
pub use crate::config::settings::{Backend, Cluster, ClusterLookup, ClusterProtocol};

// ------------------------------------------------------------- run time

/// What a backend's address source has said so far.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub(crate) set: AddressSet,
    /// False until the source answered once (a DNS backend at start).
    pub known: bool,
}

/// One backend's run-time state.
#[derive(Debug)]
pub struct BackendRuntime {
    pub(crate) config: Arc<Backend>,
    addresses: watch::Sender<Resolved>,
    /// What the backend's policy keeps between connections (a rotation,
    /// a latency ranking).
    pub selection: policy_state::State,
    /// Per-SNI answers of a cluster-resolved backend.
    pub cluster: Option<cluster::Cache>,
    /// Stops this runtime's background tasks.
    tasks: CancellationToken,
    /// This backend's connect metrics, resolved once.
    pub metrics: metrics::BackendSeries,
    /// Where its connections are made from (`source`), with each source
    /// address's cooldown.
    pub(crate) egress: egress::EgressRuntime,
}

impl BackendRuntime {
    /// A runtime for `config`; its tasks start with `BackendRuntime::start`.
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
        let egress = egress::EgressRuntime::new(&config);
        BackendRuntime {
            cluster: config
                .cluster()
                .map(|c| cluster::Cache::new(&config.name, c)),
            config,
            addresses: watch::channel(resolved).0,
            selection: policy_state::State::default(),
            tasks: CancellationToken::new(),
            metrics,
            egress,
        }
    }

    /// Starts the tasks this backend needs: re-resolution, active health
    /// checks, and the policy's own (latency ranking).
    pub(crate) fn start(self: &Arc<Self>) {
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
    pub(crate) fn stop(&self) {
        self.tasks.cancel();
    }

    /// The set in force now.
    pub(crate) fn current(&self) -> Resolved {
        self.addresses.borrow().clone()
    }

    /// Follows changes of the set (for checkers and rankers).
    pub(crate) fn subscribe(&self) -> watch::Receiver<Resolved> {
        self.addresses.subscribe()
    }

    /// Publishes a newly resolved address list, keeping what is known about
    /// the addresses it shares with the current set. Returns whether the
    /// set of addresses changed.
    pub(crate) fn publish(&self, addrs: &[SocketAddr]) -> bool {
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
    pub(crate) async fn addresses(&self, wait: Duration) -> Option<AddressSet> {
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
    pub(crate) fn start(
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
    pub(crate) fn retire(&self, next: &Backends) {
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
    #[cfg(test)]
    pub(crate) fn stop(&self) {
        self.by_name.values().for_each(|r| r.stop());
    }

    pub(crate) fn get(&self, name: &str) -> Option<&Arc<BackendRuntime>> {
        self.by_name.get(name)
    }

    /// Every runtime, by name in order (for the admin listener).
    pub(crate) fn sorted(&self) -> Vec<(&str, &Arc<BackendRuntime>)> {
        let mut all: Vec<_> = self.by_name.iter().map(|(n, r)| (n.as_str(), r)).collect();
        all.sort_by(|a, b| a.0.cmp(b.0));
        all
    }
}
