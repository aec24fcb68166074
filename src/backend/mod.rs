//! Backends at run time: the address set each backend chooses from now,
//! what is known about each address, what its policy keeps between
//! connections, and the background tasks that keep that knowledge fresh
//! (DNS re-resolution, active health checks, and whatever task the policy
//! asks for, such as latency ranking). Connections only read it.
//!
//! [`Backends`] holds one [`BackendRuntime`] per `[backend.*]` (one
//! runtime's state is `runtime`'s; the registry, and starting a new
//! runtime's tasks, are this module's). A reload builds a new registry
//! from the new snapshot and carries over every runtime whose backend is
//! unchanged, with its resolved set, health and ranking; runtimes of
//! removed or changed backends have their tasks stopped. A changed backend's new runtime learns nothing from the old one
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
pub(crate) mod certificate;
pub(crate) mod certificate_watch;
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
mod runtime;

use std::collections::BTreeMap;
use std::sync::Arc;

pub use endpoint::{Endpoint, EndpointState, Member};

pub(crate) use endpoint::carry;
pub use endpoint::carry_members;

pub(crate) use endpoint::{AddressSet, AddressState, InFlight, same_addresses};

pub use runtime::{BackendRuntime, Resolved};

// ------------------------------------------------------------ settings
// A backend's validated settings (`Backend`, `AddressSource`, `Cluster`,
// ...) are plain data defined with the rest of the settings, in
// `config::settings`; the runtime here reads them.
pub(crate) use crate::config::settings::AddressSource;
pub use crate::config::settings::{Backend, Cluster, ClusterLookup, ClusterProtocol};

// ------------------------------------------------------------- run time
// One backend's run-time state is `runtime`'s; the registry of them all,
// which starts and stops their tasks, is here.

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
                start_tasks(&runtime);
                runtime
            });
            by_name.insert(name.clone(), runtime);
        }
        Backends { by_name }
    }

    /// Hands each runtime the names `config` routes to it (as its
    /// certificate watch asks them, [`certificate_watch::names_served`]);
    /// a runtime kept from the previous configuration takes the new names
    /// without restarting.
    pub(crate) fn serve_names(&self, config: &crate::config::Config) {
        let mut served =
            certificate_watch::names_served(config, certificate_watch::MAX_NAMES_PER_BACKEND);
        for (name, runtime) in &self.by_name {
            runtime.serve_names(served.remove(name).unwrap_or_default());
        }
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

/// Starts the tasks a new runtime needs: re-resolution, active health
/// checks (and with `kind = "tls"` the certificate watch), and its
/// policy's own (latency ranking). They stop with
/// [`BackendRuntime::stop`].
fn start_tasks(runtime: &Arc<BackendRuntime>) {
    let tasks = &runtime.tasks;
    if let AddressSource::Dns(source) = &runtime.config.source {
        tokio::spawn(resolve::run(runtime.clone(), source.clone(), tasks.clone()));
    }
    if let Some(check) = &runtime.config.health {
        tokio::spawn(health::run(runtime.clone(), check.clone(), tasks.clone()));
        if check.kind.sni().is_some() {
            tokio::spawn(certificate_watch::run(
                runtime.clone(),
                check.clone(),
                tasks.clone(),
            ));
        }
    }
    runtime.config.policy.start(runtime, tasks);
}
