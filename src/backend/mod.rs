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
//! stopped. A connection reads the registry it was accepted under.
//!
//! Where the addresses come from (`config::AddressSource`):
//! - fixed: the configured list, known from the start;
//! - DNS (`resolve`): [`resolve`] publishes each answer; until the first
//!   one a connection waits up to its `connect_timeout`, then closes
//!   `no_address`; a failed re-resolution keeps the last good set;
//! - cluster (`[backend.*.cluster]`): looked up per SNI by [`cluster`],
//!   whose answer is either another node or this one (`local_backend`).
//!
//! Not here: choosing among addresses ([`select`], [`policy`]) or
//! connecting (`crate::connect`). This module names no policy: what one
//! needs at run time is [`policy::State`] and [`policy::Policy`]'s start
//! hook.

pub mod cluster;
pub mod dns;
mod endpoint;
pub mod fastest;
pub mod health;
pub mod policy;
pub mod resolve;
pub mod select;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub use endpoint::{AddressSet, Endpoint, EndpointState, InFlight, carry, same_addresses};

use crate::config::{AddressSource, Backend, Config};
use crate::metrics;

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
        let metrics = metrics::metrics().backend_series(&config.name);
        let fixed = matches!(config.source, AddressSource::Fixed);
        let resolved = Resolved {
            set: carry(&[], &config.addresses),
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
        if let Some(check) = self.config.health {
            tokio::spawn(health::run(self.clone(), check, self.tasks.clone()));
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
    by_name: HashMap<String, Arc<BackendRuntime>>,
}

impl Backends {
    /// Runtimes for `config`, reusing those of `previous` whose backend is
    /// unchanged and starting the others. Stopping the runtimes `previous`
    /// no longer needs is [`Backends::retire`]'s job.
    pub fn start(config: &Config, previous: Option<&Backends>) -> Backends {
        let mut by_name = HashMap::new();
        for (name, backend) in &config.backends {
            let kept = previous
                .and_then(|p| p.by_name.get(name))
                .filter(|runtime| *runtime.config == **backend)
                .cloned();
            let runtime = kept.unwrap_or_else(|| {
                let runtime = Arc::new(BackendRuntime::new(backend.clone()));
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
}
