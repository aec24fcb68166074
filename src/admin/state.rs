//! What the admin endpoints read and act on ([`AdminState`]): the
//! configuration in force and the keys of it that wait for a restart, its
//! generation and load time, the backends' run-time state, each
//! listener's published generation, the status page's rate samples, and
//! the listening flag `/readyz` reports ([`Readiness`]). The server swaps
//! what a reload changed (`set_config`, `set_backends`, `set_listeners`);
//! every request reads the current value under a short lock.
//!
//! Not here: the endpoints that read it ([`super::router`],
//! [`super::control`], [`super::status`]), or how `/readyz` judges the
//! backends ([`super::ready`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tokio::sync::watch;

use super::rates::Rates;
use super::ready;
use crate::backend::Backends;
use crate::config::Config;
use crate::config::effective::PendingRestart;
use crate::flow::generation::Generation;
use crate::metrics;

/// Whether the relay should receive new connections: what `/readyz` says.
/// Starts not ready.
#[derive(Debug, Default)]
pub struct Readiness(AtomicBool);

impl Readiness {
    pub(crate) fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Release);
    }

    pub(crate) fn is_ready(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// What the admin endpoints read.
pub struct AdminState {
    pub(crate) readiness: Arc<Readiness>,
    /// The configuration in force, and the keys of it that wait for a restart.
    config: Mutex<(Arc<Config>, Arc<[PendingRestart]>)>,
    // Run-time control (issue 16).
    /// The backends' run-time state of the current generation.
    backends: Mutex<Arc<Backends>>,
    // The status page (issue 16).
    /// The configuration's generation (1 at start, one more per applied
    /// reload) and when it was loaded.
    loaded: Mutex<(u64, SystemTime)>,
    /// The page's connection rates: the counters of its last sample.
    pub(super) rates: Rates,
    /// Each listener's published generation, by name: `/sources` reads
    /// the admission state in force from it.
    listeners: Mutex<Vec<(String, watch::Receiver<Arc<Generation>>)>>,
}

impl AdminState {
    /// Also applies the configuration's `[admin] address_labels` to the
    /// metrics.
    pub fn new(
        config: Arc<Config>,
        readiness: Arc<Readiness>,
        backends: Arc<Backends>,
    ) -> AdminState {
        apply_metrics_settings(&config);
        AdminState {
            readiness,
            config: Mutex::new((config, Arc::new([]))),
            backends: Mutex::new(backends),
            loaded: Mutex::new((1, SystemTime::now())),
            rates: Rates::default(),
            listeners: Mutex::default(),
        }
    }

    /// The listeners running now (after start and after each reload),
    /// each by the receiver of its generations.
    pub(crate) fn set_listeners(&self, listeners: Vec<(String, watch::Receiver<Arc<Generation>>)>) {
        *self.listeners.lock().unwrap_or_else(|e| e.into_inner()) = listeners;
    }

    /// Each listener's generation in force (its admission state and its
    /// routes' gates), by listener name.
    pub(crate) fn generations(&self) -> Vec<(String, Arc<Generation>)> {
        self.listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(name, generation)| (name.clone(), generation.borrow().clone()))
            .collect()
    }

    /// The backends a reload published: control acts on these from now.
    pub(crate) fn set_backends(&self, backends: Arc<Backends>) {
        *self.backends.lock().unwrap_or_else(|e| e.into_inner()) = backends;
    }

    pub(super) fn backends(&self) -> Arc<Backends> {
        self.backends
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Replaces the configuration `/config` shows (after a reload) and the
    /// keys of it that wait for a restart, and applies its `expose_config`
    /// and `address_labels` from now on. Counts a new generation, loaded now.
    pub(crate) fn set_config(&self, config: Arc<Config>, pending: Vec<PendingRestart>) {
        apply_metrics_settings(&config);
        *self.config.lock().unwrap_or_else(|e| e.into_inner()) = (config, pending.into());
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        *loaded = (loaded.0 + 1, SystemTime::now());
    }

    /// The configuration's generation and when it was loaded.
    pub(crate) fn loaded(&self) -> (u64, SystemTime) {
        *self.loaded.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn config(&self) -> (Arc<Config>, Arc<[PendingRestart]>) {
        self.config
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// What `/readyz` says now: listening, and `[admin] ready_requires`
    /// judged against the backends in force ([`super::ready`]).
    pub(crate) fn ready(&self) -> ready::ReadyVerdict {
        let (config, _) = self.config();
        ready::judge(self.readiness.is_ready(), &config, &self.backends())
    }

    /// `[admin] forward_unmatched_to` in force.
    pub(super) fn forward_unmatched_to(&self) -> Option<crate::config::ForwardTo> {
        self.config
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .admin
            .as_ref()
            .and_then(|a| a.forward_unmatched_to.clone())
    }

    pub(super) fn expose_config(&self) -> bool {
        self.config
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .admin
            .as_ref()
            .is_some_and(|a| a.expose_config)
    }
}

fn apply_metrics_settings(config: &Config) {
    if let Some(admin) = &config.admin {
        metrics::metrics().set_address_labels(admin.address_labels);
    }
}
