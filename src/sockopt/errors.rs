//! What a failed socket call's error means: the peer stopped answering
//! ([`is_peer_timeout`]), this host ran out of something
//! ([`is_resource_exhaustion`], [`is_local_connect_failure`]), a `source`
//! address has no free port ([`is_source_exhausted`]). Read by the accept
//! loops, passive health and the egress source choice.
//!
//! Not here: the calls that fail: relayed streams ([`super::stream`]),
//! backend connects ([`super::connect`]), listening sockets
//! ([`super::listen`]).

use std::io;

/// Whether a failed read or write means the peer stopped answering rather
/// than closing or resetting: keepalive probes went unanswered, or
/// retransmissions of unacknowledged data ran out (ETIMEDOUT). When ICMP
/// errors arrived meanwhile, Linux reports the last of them instead
/// (EHOSTUNREACH, ENETUNREACH); on an established socket it reports them
/// only then, since without IP_RECVERR they are soft errors.
pub(crate) fn is_peer_timeout(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::TimedOut
            | io::ErrorKind::HostUnreachable
            | io::ErrorKind::NetworkUnreachable
    )
}

/// Whether an error means the process or system ran out of a resource
/// (descriptors, buffers, memory): an accept loop must back off rather
/// than retry at once, and a failed connect is not the backend's fault
/// ([`is_local_connect_failure`]).
pub(crate) fn is_resource_exhaustion(error: &io::Error) -> bool {
    const EMFILE: i32 = 24;
    const ENFILE: i32 = 23;
    const ENOBUFS: i32 = 105;
    const ENOMEM: i32 = 12;
    matches!(
        error.raw_os_error(),
        Some(EMFILE | ENFILE | ENOBUFS | ENOMEM)
    )
}

/// Whether a failed backend connect ran out of something on this host (a
/// free local port toward that address, descriptors, buffers, memory,
/// epoll watches) rather than hearing from the backend: such a failure
/// says nothing about the backend, and passive health must not count it.
///
/// So is a failure to bind the socket's local side (a `source` address
/// with no free port, EADDRNOTAVAIL or EADDRINUSE; a `source` of the
/// wrong family, EAFNOSUPPORT).
pub(crate) fn is_local_connect_failure(error: &io::Error) -> bool {
    use nix::libc::{EADDRINUSE, EADDRNOTAVAIL, EAFNOSUPPORT, ENOSPC};
    is_resource_exhaustion(error)
        || matches!(
            error.raw_os_error(),
            Some(EADDRNOTAVAIL | EADDRINUSE | EAFNOSUPPORT | ENOSPC)
        )
        || matches!(
            error.kind(),
            io::ErrorKind::AddrNotAvailable | io::ErrorKind::AddrInUse
        )
}

/// Whether a bind or connect from a `source` address failed because that
/// address has no free local port (toward this destination, or in its
/// `ports`): EADDRNOTAVAIL or EADDRINUSE. Another source may still work.
pub(crate) fn is_source_exhausted(error: &io::Error) -> bool {
    use nix::libc::{EADDRINUSE, EADDRNOTAVAIL};
    matches!(error.raw_os_error(), Some(EADDRNOTAVAIL | EADDRINUSE))
}

#[cfg(test)]
mod tests {
    use nix::libc;

    use super::*;

    #[test]
    fn timeouts_and_unreachable_peers_are_peer_timeouts_resets_are_not() {
        let errno = io::Error::from_raw_os_error;
        for peer_gone in [libc::ETIMEDOUT, libc::EHOSTUNREACH, libc::ENETUNREACH] {
            assert!(is_peer_timeout(&errno(peer_gone)), "{peer_gone}");
        }
        for other in [libc::ECONNRESET, libc::EPIPE, libc::ECONNABORTED] {
            assert!(!is_peer_timeout(&errno(other)), "{other}");
        }
    }
}
