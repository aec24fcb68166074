//! One resolution of a host name, as a `resolve` backend does it: through
//! a given `resolver = "IP:53"` ([`crate::backend::dns::query`], A and
//! AAAA), else through the system resolver (getaddrinfo), each within its
//! timeout. The DNS task (`super::resolve`) and the cluster lookups
//! (`super::cluster`, for host names in an answer) both resolve through
//! [`resolve_once`], so both kinds of backend see a name the same way.
//!
//! Not here: keeping a set fresh, retries and TTL clamping
//! (`super::resolve`), caching (the callers'), the DNS wire protocol
//! ([`crate::backend::dns`]).

use std::net::SocketAddr;
use std::time::Duration;

use super::dns;

/// How long one resolution through `resolver` may take (A and AAAA side
/// by side, UDP retransmissions included). Longer counts as failed.
pub(crate) const QUERY_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one getaddrinfo call may take: glibc's own worst case with the
/// default resolv.conf (3 nameservers × 2 attempts × 5 s), so a dead first
/// nameserver is waited out rather than counted as a failure. The call
/// runs on a blocking thread, which a timeout cannot stop; the retry
/// back-off bounds how many can be left behind.
pub(crate) const SYSTEM_TIMEOUT: Duration = Duration::from_secs(30);

/// What one resolution of a name found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resolution {
    /// The addresses, each with the port asked for, in the resolver's
    /// order, without duplicates. Empty: a negative answer.
    pub addrs: Vec<SocketAddr>,
    /// How long the answer may be used, when a `resolver` was asked (the
    /// record TTL, unclamped); the system resolver reports none.
    pub ttl: Option<Duration>,
}

/// Why a resolution learnt nothing.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ResolveError {
    #[error(transparent)]
    Dns(#[from] dns::DnsError),
    #[error("{0}")]
    System(std::io::Error),
    #[error("no answer from the system resolver within {SYSTEM_TIMEOUT:?}")]
    SystemTimeout,
}

/// Resolves `host` once, as a `resolve` backend does: through `resolver`
/// when given (A and AAAA, [`QUERY_TIMEOUT`]), else through the system
/// resolver (getaddrinfo: /etc/hosts, then DNS as nsswitch.conf says;
/// [`SYSTEM_TIMEOUT`]). Also what a cluster lookup resolves the host names
/// of its answer with (`super::cluster`), so both kinds of backend see a
/// name the same way.
pub(crate) async fn resolve_once(
    host: &str,
    port: u16,
    resolver: Option<SocketAddr>,
) -> Result<Resolution, ResolveError> {
    if let Some(server) = resolver {
        let answer = dns::query(server, host, QUERY_TIMEOUT).await?;
        let addrs = answer
            .addrs
            .iter()
            .map(|&ip| SocketAddr::new(ip, port))
            .collect();
        return Ok(Resolution {
            addrs,
            ttl: Some(answer.ttl),
        });
    }
    let lookup = tokio::net::lookup_host((host, port));
    match tokio::time::timeout(SYSTEM_TIMEOUT, lookup).await {
        Ok(Ok(found)) => {
            let mut addrs: Vec<SocketAddr> = Vec::new();
            for addr in found {
                if !addrs.contains(&addr) {
                    addrs.push(addr);
                }
            }
            Ok(Resolution { addrs, ttl: None })
        }
        Ok(Err(error)) => Err(ResolveError::System(error)),
        Err(_) => Err(ResolveError::SystemTimeout),
    }
}
