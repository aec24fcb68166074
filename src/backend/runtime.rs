//! One backend's run-time state ([`BackendRuntime`]): the address set it
//! chooses from now ([`Resolved`], published by its address source and
//! followed by its checkers), what its policy keeps between connections,
//! a cluster backend's per-SNI answers, its egress, its metrics, and the
//! token that stops its background tasks.
//!
//! Not here: the registry of every backend's runtime, which starts and
//! stops those tasks ([`crate::backend::Backends`]); the tasks themselves
//! (`super::resolve`, `super::health`, the policy's own); choosing among
//! the addresses ([`crate::backend::plan`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{AddressSet, Endpoint, EndpointState, carry, carry_members, same_addresses};
use super::{cluster, egress, policy_state};
use crate::config::settings::{AddressSource, Backend};
use crate::metrics;

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
    pub(super) tasks: CancellationToken,
    /// This backend's connect metrics, resolved once.
    pub metrics: metrics::BackendSeries,
    /// Where its connections are made from (`source`), with each source
    /// address's cooldown.
    pub(crate) egress: egress::EgressRuntime,
    /// The names routed to it, for its certificate watch
    /// ([`super::certificate_watch`]); `None` until
    /// [`super::Backends::serve_names`] hands them over.
    names: watch::Sender<Option<Arc<[String]>>>,
}

impl BackendRuntime {
    /// A runtime for `config`, its tasks not started (the registry,
    /// [`super::Backends`], starts those of the runtimes it builds).
    pub fn new(config: Arc<Backend>) -> BackendRuntime {
        BackendRuntime::replacing(config, None)
    }

    /// A runtime for `config` that replaces `previous` (the same backend
    /// under its old definition): nothing learnt is kept, but each fixed
    /// address it shares with the old set shares its count of open
    /// connections, so the connections still open under the old
    /// definition count against `max_connections` until they close.
    pub(super) fn replacing(
        config: Arc<Backend>,
        previous: Option<&BackendRuntime>,
    ) -> BackendRuntime {
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
        // What the configuration implies shows from the start: a fixed
        // address's health as the relay holds it (up until a check or a
        // connect says otherwise), and the lookups of a resolved backend.
        match &config.source {
            AddressSource::Fixed => {
                for endpoint in &set {
                    metrics::metrics().backend_address_health(
                        &config.name,
                        endpoint.addr,
                        endpoint.state.is_up(),
                    );
                }
            }
            AddressSource::Dns(_) => metrics::metrics().lookup_series("dns"),
            AddressSource::Cluster(_) => metrics::metrics().lookup_series("cluster"),
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
            names: watch::channel(None).0,
        }
    }

    /// Hands over the names routed to this backend; its certificate watch
    /// hears of a change.
    pub(crate) fn serve_names(&self, names: Arc<[String]>) {
        self.names.send_if_modified(|held| {
            let changed = held.as_deref() != Some(&*names);
            if changed {
                *held = Some(names);
            }
            changed
        });
    }

    /// The names routed to this backend (`None` until handed over), and
    /// their changes.
    pub(crate) fn subscribe_names(&self) -> watch::Receiver<Option<Arc<[String]>>> {
        self.names.subscribe()
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
