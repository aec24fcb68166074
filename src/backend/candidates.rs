//! The backend choice a TCP connection and a QUIC flow share: which
//! addresses a connection may choose among ([`candidates`]: the fixed or
//! resolved set, or a cluster's answer for the SNI, another node's addresses
//! or this node's `local_backend`) and how they are ranked
//! ([`Candidates::plan`]: the policy's or the cluster's ranking, healthy
//! first, none at its cap or drained, at most `connect_attempts`).
//!
//! Both walk the plan the same way ([`Walk`]: each planned address with its
//! slot taken, one that filled up since the plan skipped, and one reason
//! when none is left) and report attempts to the same passive health and
//! connect metrics ([`Report`]). A TCP connection tries the addresses in
//! order until one connects ([`crate::tcp::dial`]); a QUIC flow takes the
//! first, since UDP has no connect to fail
//! ([`crate::quic::backend_address`]).
//!
//! Not here: connecting or opening sockets (the transports), the planning
//! itself ([`super::plan`]), the ranking policies ([`super::balance`]).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::backend::balance::Ranker;
use crate::backend::cluster::{Answer, LookupError};
use crate::backend::node_order::NodeChoice;
use crate::backend::{AddressSet, Backend, BackendRuntime, Backends, InFlight, plan};
use crate::close_reason::CloseReason;
use crate::metrics::BackendSeries;

/// What the backend choice needs to know about the connection or flow:
/// made once, by [`crate::flow::carry_out`], for either transport. Owned
/// (a QUIC flow's crosses into the task that waits for DNS or a cluster
/// lookup); the SNI is kept only for a cluster backend, the one choice
/// that reads it, so the usual connection allocates nothing for it.
#[derive(Debug, Clone)]
pub(crate) struct Pick {
    /// The client's address and port: the claimed one behind a trusted
    /// relay, else the peer. `source_hash` hashes its address; a
    /// cluster's `node_choice = "gerbil_fnv"` hashes both as Gerbil
    /// writes them, with `claimed`.
    pub client: SocketAddr,
    /// Whether `client` is a trusted peer's claim.
    pub claimed: bool,
    /// The normalised SNI, for a cluster backend's lookup; `None` for any
    /// other backend.
    pub sni: Option<Box<str>>,
    /// The address the client dialled, for a cluster backend (an answer
    /// naming it means this node). `None` for any other backend, which has
    /// no use for it and so is spared the getsockname(2).
    pub local: Option<IpAddr>,
}

/// Why no backend address could be reached or chosen.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    #[error("none of {attempts} backend address(es) accepted a connection; last: {last}")]
    Failed { attempts: usize, last: io::Error },
    #[error("the backend has no address (never resolved, or the lookup found none)")]
    NoAddress,
    #[error("the cluster answer points outside allowed_targets")]
    TargetNotAllowed,
    #[error("every backend address has max_connections open")]
    Full,
    #[error("the cluster lookup this name needs is past the backend's lookup limits")]
    LookupLimited,
}

impl From<ConnectError> for CloseReason {
    fn from(e: ConnectError) -> Self {
        match e {
            ConnectError::Failed { .. } => CloseReason::ConnectFailed,
            ConnectError::NoAddress => CloseReason::NoAddress,
            ConnectError::TargetNotAllowed => CloseReason::TargetNotAllowed,
            ConnectError::Full => CloseReason::BackendFull,
            ConnectError::LookupLimited => CloseReason::LookupLimited,
        }
    }
}

impl From<LookupError> for ConnectError {
    fn from(e: LookupError) -> Self {
        match e {
            LookupError::NoAddress => ConnectError::NoAddress,
            LookupError::TargetNotAllowed => ConnectError::TargetNotAllowed,
            LookupError::Limited => ConnectError::LookupLimited,
        }
    }
}

/// The addresses a connection may choose among, and the backend whose
/// settings (policy, caps, passive health) apply to them: the routed
/// backend, or a cluster's `local_backend`.
#[derive(Debug)]
pub(crate) struct Candidates<'b> {
    pub runtime: &'b BackendRuntime,
    pub set: AddressSet,
    /// A ranking that replaces the backend's policy (a cluster's
    /// `node_choice = "gerbil_fnv"` among another node's addresses).
    ranker: Option<Ranker>,
    /// The set is a cluster's `local_backend`'s.
    pub local: bool,
}

impl<'b> Candidates<'b> {
    /// The addresses to try, best first: the policy's (or the cluster's)
    /// ranking, healthy first, none at its cap or drained, at most the
    /// backend's `connect_attempts`.
    pub(crate) fn plan(&self, client: IpAddr) -> plan::Plan {
        let backend = &self.runtime.config;
        let attempts = backend.attempts(self.set.len());
        let cap = backend.max_connections_per_address;
        match self.ranker {
            Some(ranker) => plan::plan_ranked(ranker, &self.set, attempts, cap),
            None => plan::plan_with_backups(
                backend.policy,
                backend.backup_policy,
                &self.runtime.selection,
                &self.set,
                attempts,
                client,
                cap,
            ),
        }
    }

    /// The planned addresses for `client`, walked in order, each with its
    /// slot taken ([`Walk::next_slot`]).
    pub(crate) fn walk(&self, client: IpAddr) -> Walk<'_, 'b> {
        Walk {
            plan: self.plan(client),
            candidates: self,
            next: 0,
            taken: 0,
        }
    }

    /// What an attempt on one of these addresses tells the backend's
    /// connect metrics and the address's passive health.
    pub(crate) fn report(&self) -> Report<'_> {
        Report {
            backend: &self.runtime.config,
            metrics: &self.runtime.metrics,
        }
    }
}

/// The planned addresses of [`Candidates`], in order: the one walk of
/// both transports (a TCP connection tries each until one connects, a
/// QUIC flow takes the first, having no connect that could fail).
#[derive(Debug)]
pub(crate) struct Walk<'c, 'b> {
    candidates: &'c Candidates<'b>,
    plan: plan::Plan,
    next: usize,
    /// Slots taken so far (attempts made).
    taken: usize,
}

/// A planned address with its slot taken.
#[derive(Debug)]
pub(crate) struct Slot {
    pub addr: SocketAddr,
    /// Counts the connection or flow on the address until dropped.
    pub in_flight: InFlight,
}

impl Walk<'_, '_> {
    /// The next planned address whose slot can be taken now (one that
    /// filled up since the plan is skipped), or `None` at the plan's end.
    pub(crate) fn next_slot(&mut self) -> Option<Slot> {
        let backend = &self.candidates.runtime.config;
        while let Some(&i) = self.plan.as_slice().get(self.next) {
            self.next += 1;
            let endpoint = &self.candidates.set[usize::from(i)];
            let cap = endpoint.cap(backend.max_connections_per_address);
            if let Some(in_flight) = endpoint.state.try_enter(cap) {
                self.taken += 1;
                return Some(Slot {
                    addr: endpoint.addr,
                    in_flight,
                });
            }
        }
        None
    }

    /// Why the walk ended with nothing, `last` being the last attempt's
    /// error: no slot taken with addresses planned (or every address at its
    /// cap) is `backend_full`; otherwise a connect that failed, or found no
    /// address (all drained).
    pub(crate) fn exhausted(&self, last: Option<io::Error>) -> ConnectError {
        if self.taken == 0 && (self.plan.full() || !self.plan.is_empty()) {
            return ConnectError::Full;
        }
        ConnectError::Failed {
            attempts: self.taken,
            last: last.unwrap_or_else(|| {
                io::Error::new(io::ErrorKind::NotFound, "no backend address may be chosen")
            }),
        }
    }
}

/// Reports attempts on a backend's addresses: its connect metrics
/// (`snirelay_backend_connect_*`) and each address's passive health
/// (`max_fails`, `fail_backoff`). Borrowed for a TCP connect; a QUIC
/// flow's report comes later, from its task
/// ([`crate::quic::backend_address::Health`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Report<'a> {
    pub backend: &'a Backend,
    pub metrics: &'a BackendSeries,
}

impl Report<'_> {
    /// The address answered: a successful connect, which took `took` (not
    /// counted again when `None`).
    pub(crate) fn succeeded(&self, in_flight: &InFlight, addr: SocketAddr, took: Option<Duration>) {
        if let Some(took) = took {
            self.metrics.connect_attempt(Ok(took));
        }
        in_flight
            .state()
            .connect_succeeded(&self.backend.name, addr);
    }

    /// The address refused, or never answered: a failed connect.
    pub(crate) fn failed(&self, in_flight: &InFlight, addr: SocketAddr) {
        self.metrics.connect_attempt(Err(()));
        let backend = self.backend;
        in_flight.state().connect_failed(
            &backend.name,
            addr,
            backend.max_fails,
            backend.fail_backoff,
        );
    }
}

/// Finds the addresses `runtime`'s backend offers a connection described
/// by `pick`: the fixed or resolved set (waiting up to `connect_timeout`
/// for a first DNS answer), or a cluster's answer for the SNI (another
/// node's addresses, or this node's `local_backend`).
pub(crate) async fn candidates<'b>(
    backends: &'b Backends,
    runtime: &'b BackendRuntime,
    pick: &Pick,
) -> Result<Candidates<'b>, ConnectError> {
    let wait = runtime.config.connect_timeout;
    let Some(cache) = &runtime.cluster else {
        let set = runtime
            .addresses(wait)
            .await
            .ok_or(ConnectError::NoAddress)?;
        return Ok(Candidates {
            runtime,
            set,
            ranker: None,
            local: false,
        });
    };
    let sni = pick.sni.as_deref().ok_or(ConnectError::NoAddress)?;
    let local = pick
        .local
        .expect("setup looks up the dialled address for a cluster backend");
    // Boxed: the lookup (an HTTP exchange) is a large future, and
    // inline it would enlarge every connection's setup future; this
    // allocation is paid by cluster backends only.
    match Box::pin(cache.lookup(sni, local)).await? {
        Answer::Remote(nodes) => {
            let ranker = match runtime.config.cluster().map(|c| c.node_choice) {
                Some(NodeChoice::GerbilFnv) if !nodes.set.is_empty() => {
                    let n = nodes.set.len();
                    let start = nodes.gerbil_first(pick.client, pick.claimed);
                    Some(Ranker::Rotated { start, n })
                }
                _ => None,
            };
            Ok(Candidates {
                runtime,
                set: nodes.set,
                ranker,
                local: false,
            })
        }
        Answer::Local => {
            let local = runtime
                .config
                .cluster()
                .and_then(|c| c.local_backend.as_deref())
                .and_then(|name| backends.get(name))
                .ok_or(ConnectError::NoAddress)?;
            let set = local
                .addresses(local.config.connect_timeout)
                .await
                .ok_or(ConnectError::NoAddress)?;
            Ok(Candidates {
                runtime: local,
                set,
                ranker: None,
                local: true,
            })
        }
    }
}
