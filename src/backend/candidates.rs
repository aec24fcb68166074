//! The backend choice a TCP connection and a QUIC flow share: which
//! addresses a connection may choose among ([`candidates`]: the fixed or
//! resolved set, or a cluster's answer for the SNI, another node's addresses
//! or this node's `local_backend`) and how they are ranked
//! ([`Candidates::plan`]: the policy's or the cluster's ranking, healthy
//! first, none at its cap or drained, at most `connect_attempts`).
//!
//! A TCP connection tries the planned addresses in order
//! ([`crate::tcp::dial`]); a QUIC flow takes the first whose slot is free,
//! since UDP has no connect to fail ([`crate::quic::backend_address`]).
//!
//! Not here: connecting or opening sockets (the transports), the planning
//! itself ([`super::plan`]), the ranking policies ([`super::balance`]).

use std::io;
use std::net::{IpAddr, SocketAddr};

use crate::backend::balance::Ranker;
use crate::backend::cluster::{Answer, LookupError};
use crate::backend::node_order::NodeChoice;
use crate::backend::{AddressSet, BackendRuntime, Backends, plan};
use crate::close_reason::CloseReason;

/// What the backend choice needs to know about the connection or flow.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pick<'a> {
    /// The client's address for `source_hash`: the claimed one behind a
    /// trusted relay, else the peer.
    pub client: IpAddr,
    /// The normalised SNI, for cluster lookups.
    pub sni: Option<&'a str>,
    /// The address the client dialled, for a cluster backend (an answer
    /// naming it means this node). `None` for any other backend, which has
    /// no use for it and so is spared the getsockname(2).
    pub local: Option<IpAddr>,
    /// The client's address with its port (claimed, or the peer's), and
    /// whether it was claimed: a cluster's `node_choice = "gerbil_fnv"`
    /// hashes them as Gerbil writes them.
    pub client_addr: SocketAddr,
    pub claimed: bool,
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

impl Candidates<'_> {
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
}

/// Finds the addresses `runtime`'s backend offers a connection described
/// by `pick`: the fixed or resolved set (waiting up to `connect_timeout`
/// for a first DNS answer), or a cluster's answer for the SNI (another
/// node's addresses, or this node's `local_backend`).
pub(crate) async fn candidates<'b>(
    backends: &'b Backends,
    runtime: &'b BackendRuntime,
    pick: &Pick<'_>,
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
    let sni = pick.sni.ok_or(ConnectError::NoAddress)?;
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
                    let start = nodes.gerbil_first(pick.client_addr, pick.claimed);
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
