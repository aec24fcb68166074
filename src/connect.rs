//! Connecting to a backend: find its addresses (fixed, resolved, or looked
//! up for this SNI), let the policy plan the attempts, and try them in
//! order, each bounded by the backend's `connect_timeout`.
//!
//! A refused or unreachable address costs almost nothing and the next is
//! tried at once; a black-holed one costs one `connect_timeout`; at most
//! `connect_attempts` are tried (default min(addresses, 3)), so a
//! connection waits at most attempts × connect_timeout here. Each failed
//! attempt is logged at debug and counted for passive health; the
//! connection's outcome is logged once, by the caller. An address at its
//! `max_connections` is skipped (its slot is taken before the connect);
//! when every address is, the connection closes `backend_full` without a
//! connect.
//!
//! A cluster backend whose answer is this node connects through its
//! `local_backend` instead, with that backend's policy and PROXY setting.
//! Among another node's addresses, the cluster's `node_choice` decides
//! (`source_hash`, or `gerbil_fnv`: Gerbil's pick first, see
//! `backend::node_choice`).
//! `local_backend` instead, with that backend's policy and PROXY setting
//! (and the connection is marked [`Connected::local`], so a push that no
//! longer lists its name can close it).
//!
//! A connected socket gets TCP_NODELAY and the backend's `tcp_keepalive`
//! (five setsockopt(2) calls, about 2.7 µs against 0.6 µs for TCP_NODELAY:
//! `cargo bench --bench sockopt`; none when off). The client side inherits
//! its keepalive from the listening socket at no cost per connection.
//!
//! Not here: anything sent on the connection (`announce`).

use std::io;
use std::net::{IpAddr, SocketAddr};

use tokio::net::TcpStream;
use tokio::time::{Instant, timeout};

use crate::backend::cluster::{Answer, LookupError};
use crate::backend::node_choice::{NodeChoice, gerbil_index};
use crate::backend::policy::Ranker;
use crate::backend::{AddressSet, BackendRuntime, Backends, InFlight, select};
use crate::proxy::outbound::Outbound;
use crate::reason::CloseReason;
use crate::sockopt;

/// An open connection to one of a backend's addresses.
#[derive(Debug)]
pub struct Connected {
    pub stream: TcpStream,
    pub addr: SocketAddr,
    /// The PROXY header the chosen backend expects, and whether it carries
    /// a CRC32C (a cluster's local backend may differ from the cluster's).
    pub proxy_protocol: Outbound,
    pub proxy_protocol_crc32c: bool,
    /// Counts this connection on its address until dropped.
    pub in_flight: InFlight,
    /// Sent to a cluster backend's `local_backend` (a pushed local name, a
    /// `local_overrides` name or an answer naming this node).
    pub local: bool,
}

/// What the connect stage needs to know about the connection.
#[derive(Debug, Clone, Copy)]
pub struct Pick<'a> {
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

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("none of {attempts} backend address(es) accepted a connection; last: {last}")]
    Failed { attempts: usize, last: io::Error },
    #[error("the backend has no address (never resolved, or the lookup found none)")]
    NoAddress,
    #[error("the cluster answer points outside allowed_targets")]
    TargetNotAllowed,
    #[error("every backend address has max_connections open")]
    Full,
}

impl From<ConnectError> for CloseReason {
    fn from(e: ConnectError) -> Self {
        match e {
            ConnectError::Failed { .. } => CloseReason::ConnectFailed,
            ConnectError::NoAddress => CloseReason::NoAddress,
            ConnectError::TargetNotAllowed => CloseReason::TargetNotAllowed,
            ConnectError::Full => CloseReason::BackendFull,
        }
    }
}

impl From<LookupError> for ConnectError {
    fn from(e: LookupError) -> Self {
        match e {
            LookupError::NoAddress => ConnectError::NoAddress,
            LookupError::TargetNotAllowed => ConnectError::TargetNotAllowed,
        }
    }
}

/// Connects to `runtime`'s backend for a connection described by `pick`.
pub async fn connect(
    backends: &Backends,
    runtime: &BackendRuntime,
    pick: &Pick<'_>,
) -> Result<Connected, ConnectError> {
    let wait = runtime.config.connect_timeout;
    match &runtime.cluster {
        None => {
            let set = runtime
                .addresses(wait)
                .await
                .ok_or(ConnectError::NoAddress)?;
            try_in_order(runtime, &set, pick, None).await
        }
        Some(cache) => {
            let sni = pick.sni.ok_or(ConnectError::NoAddress)?;
            let local = pick
                .local
                .expect("setup looks up the dialled address for a cluster backend");
            // Boxed: the lookup (an HTTP exchange) is a large future, and
            // inline it would enlarge every connection's setup future; this
            // allocation is paid by cluster backends only.
            match Box::pin(cache.lookup(sni, local)).await? {
                Answer::Remote(set) => {
                    let ranker = match runtime.config.cluster().map(|c| c.node_choice) {
                        Some(NodeChoice::GerbilFnv) if !set.is_empty() => {
                            let n = set.len();
                            let start = gerbil_index(pick.client_addr, pick.claimed, n);
                            Some(Ranker::Rotated { start, n })
                        }
                        _ => None,
                    };
                    try_in_order(runtime, &set, pick, ranker).await
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
                    let mut connected = try_in_order(local, &set, pick, None).await?;
                    connected.local = true;
                    Ok(connected)
                }
            }
        }
    }
}

/// Tries the planned addresses of `set` one after another, ranked by the
/// backend's policy or by `ranker` when given.
async fn try_in_order(
    runtime: &BackendRuntime,
    set: &AddressSet,
    pick: &Pick<'_>,
    ranker: Option<Ranker>,
) -> Result<Connected, ConnectError> {
    let backend = &runtime.config;
    let attempts = backend.attempts(set.len());
    let cap = backend.max_connections_per_address;
    let plan = match ranker {
        Some(ranker) => select::plan_ranked(ranker, set, attempts, cap),
        None => select::plan(
            backend.policy,
            &runtime.selection,
            set,
            attempts,
            pick.client,
            cap,
        ),
    };
    let mut last = io::Error::new(io::ErrorKind::NotFound, "backend has no address");
    let mut tried = 0;
    for &i in plan.as_slice() {
        let endpoint = &set[usize::from(i)];
        let addr = endpoint.addr;
        // The slot first: an address that filled up since the plan is skipped.
        let Some(in_flight) = endpoint
            .state
            .try_enter(endpoint.cap(backend.max_connections_per_address))
        else {
            continue;
        };
        tried += 1;
        let started = Instant::now();
        let attempt = timeout(backend.connect_timeout, TcpStream::connect(addr)).await;
        let outcome = match &attempt {
            Ok(Ok(_)) => Ok(started.elapsed()),
            _ => Err(()),
        };
        runtime.metrics.connect_attempt(outcome);
        let error = match attempt {
            Ok(Ok(stream)) => {
                let _ = sockopt::set_nodelay(&stream);
                // A new socket has keepalive off already: nothing to undo.
                if let Some(keepalive) = backend.tcp_keepalive {
                    let _ = sockopt::set_keepalive(&stream, Some(keepalive));
                }
                endpoint.state.connect_succeeded(&backend.name, addr);
                return Ok(Connected {
                    stream,
                    addr,
                    proxy_protocol: backend.proxy_protocol,
                    proxy_protocol_crc32c: backend.proxy_protocol_crc32c,
                    in_flight,
                    local: false,
                });
            }
            Ok(Err(e)) => e,
            Err(_) => io::Error::new(io::ErrorKind::TimedOut, "connect timed out"),
        };
        tracing::debug!(backend = %backend.name, %addr, error = %error, "backend connect attempt failed");
        endpoint
            .state
            .connect_failed(&backend.name, addr, backend.max_fails, backend.fail_backoff);
        last = error;
    }
    if tried == 0 && (plan.full() || !plan.is_empty()) {
        return Err(ConnectError::Full);
    }
    Err(ConnectError::Failed {
        attempts: tried,
        last,
    })
}
