//! Connecting to a backend: find its addresses (fixed, resolved, or looked
//! up for this SNI), let the policy plan the attempts, and try them in
//! order, each bounded by the backend's `connect_timeout`.
//!
//! The first half, which addresses a connection may choose among and how
//! they are ranked, is the backend choice both transports share
//! ([`crate::backend::candidates`]); the attempts loop ([`connect`]) is
//! TCP's.
//!
//! A refused or unreachable address costs almost nothing and the next is
//! tried at once; a black-holed one costs one `connect_timeout`; at most
//! `connect_attempts` are tried (default min(addresses, 3)), so a
//! connection waits at most attempts × connect_timeout here. Each failed
//! attempt is logged at debug and counted for passive health, except one
//! that failed on this host (no free local port toward the address, no
//! descriptor: [`crate::sockopt::is_local_connect_failure`]), which says nothing of
//! the backend; the connection's outcome is logged once, by the caller.
//! An address at its `max_connections` is skipped (its slot is taken
//! before the connect); when every address is, the connection closes
//! `backend_full` without a connect.
//!
//! A cluster backend whose answer is this node connects through its
//! `local_backend` instead, with that backend's policy and PROXY setting
//! (and the connection is marked [`Connected::local`], so a push that no
//! longer lists its name can close it). Among another node's addresses,
//! the cluster's `node_choice` decides (`source_hash`, or `gerbil_fnv`:
//! Gerbil's pick first, see [`crate::backend::node_order`]).
//!
//! A backend socket gets TCP_NODELAY before its connect (one setsockopt(2),
//! about 0.6 µs: `cargo bench --bench sockopt`). A connect to a loopback
//! backend (a cluster's `local_backend`, a proxy on the same host) has
//! completed by the time connect(2) returns; it is found so at once and the
//! connection goes on without a turn of the event loop
//! ([`crate::sockopt::start_connect`]). The backend's `tcp_keepalive` goes with
//! the connection ([`Connected::keepalive`]) and is set by the relay once
//! the connection has lasted [`crate::sockopt::KEEPALIVE_ARM_DELAY`], so a short
//! connection skips its five calls. The client side inherits its
//! keepalive from the listening socket at no cost per connection.
//!
//! A backend's `source` (or an address entry's) binds the socket before
//! its connect: one of its source addresses, taken in turn, with the next
//! tried at once when one has no free port (neither counted against the
//! backend address), or the client's own address and port
//! ([`crate::backend::egress`]). The choice lives in the backend runtime, not in
//! the connection.
//!
//! Not here: anything sent on the connection ([`crate::proxy::outbound`]).

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpStream;
use tokio::time::{Instant, timeout_at};

use crate::backend::candidates::{Candidates, ConnectError, Pick, Slot, candidates};
use crate::backend::{BackendRuntime, Backends, InFlight};
use crate::proxy::outbound::{Outbound, ProxyTlv};
use crate::sockopt;

/// An open connection to one of a backend's addresses.
#[derive(Debug)]
pub(crate) struct Connected {
    pub stream: TcpStream,
    pub addr: SocketAddr,
    /// The PROXY header the chosen backend expects, and whether it carries
    /// a CRC32C (a cluster's local backend may differ from the cluster's).
    pub proxy_protocol: Outbound,
    pub proxy_protocol_crc32c: bool,
    /// The TLVs its v2 header adds (`None` when there are none, so the
    /// common case takes no reference count).
    pub proxy_protocol_tlvs: Option<Arc<[ProxyTlv]>>,
    /// Counts this connection on its address until dropped.
    pub in_flight: InFlight,
    /// The backend's `tcp_keepalive`, not yet set on `stream`: the relay
    /// sets it once the connection has lasted `KEEPALIVE_ARM_DELAY`.
    pub keepalive: Option<sockopt::KeepaliveSecs>,
    /// Sent to a cluster backend's `local_backend` (a pushed local name, a
    /// `local_overrides` name or an answer naming this node).
    pub local: bool,
}

/// Connects to `runtime`'s backend for a connection described by `pick`.
pub(crate) async fn connect(
    backends: &Backends,
    runtime: &BackendRuntime,
    pick: &Pick,
) -> Result<Connected, ConnectError> {
    let candidates = candidates(backends, runtime, pick).await?;
    let mut connected = try_in_order(&candidates, pick).await?;
    connected.local = candidates.local;
    Ok(connected)
}

/// Tries the planned addresses of the candidates one after another.
async fn try_in_order(candidates: &Candidates<'_>, pick: &Pick) -> Result<Connected, ConnectError> {
    let runtime = candidates.runtime;
    let backend = &runtime.config;
    let report = candidates.report();
    let mut walk = candidates.walk(pick.client.ip());
    // Made only when an attempt fails: an `io::Error` with a message is an
    // allocation, which a connection that connects should not pay.
    let mut last = None;
    while let Some(Slot { addr, in_flight }) = walk.next_slot() {
        // One clock read serves the deadline and the connect time.
        let started = Instant::now();
        let attempt = timeout_at(
            started + backend.connect_timeout,
            runtime.egress.for_addr(addr).connect_tcp(addr, pick.client),
        )
        .await;
        let error = match attempt {
            Ok(Ok(stream)) => {
                report.succeeded(&in_flight, addr, Some(started.elapsed()));
                return Ok(Connected {
                    stream,
                    addr,
                    proxy_protocol: backend.proxy_protocol,
                    proxy_protocol_crc32c: backend.proxy_protocol_crc32c,
                    proxy_protocol_tlvs: (!backend.proxy_protocol_tlvs.is_empty())
                        .then(|| backend.proxy_protocol_tlvs.clone()),
                    in_flight,
                    // A new socket has keepalive off already: nothing to
                    // undo when the backend has it off.
                    keepalive: backend.tcp_keepalive.map(sockopt::KeepaliveSecs::new),
                    local: false,
                });
            }
            Ok(Err(e)) => e,
            Err(_) => io::Error::new(io::ErrorKind::TimedOut, "connect timed out"),
        };
        // No free port toward this address, or no descriptor: the backend
        // was never asked, so its passive health is left alone (counting it
        // would mark a healthy backend down whenever this host runs short).
        // The next planned address may still work.
        let on_this_host = sockopt::is_local_connect_failure(&error);
        tracing::debug!(backend = %backend.name, %addr, error = %error, on_this_host, "backend connect attempt failed");
        if on_this_host {
            runtime.metrics.connect_attempt(Err(()));
        } else {
            report.failed(&in_flight, addr);
        }
        last = Some(error);
    }
    Err(walk.exhausted(last))
}
