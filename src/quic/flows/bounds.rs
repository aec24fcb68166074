//! How much one listening socket holds for flows whose hello is not
//! complete: the bounds on pending flows, on their held bytes and per
//! source, the source ([`source_key`]) a pending flow counts against, and
//! the summary line ([`Summary`]) that reports flows dropped or evicted at
//! a bound at most once a second.
//!
//! Not here: what happens at a bound (the [`FlowTable`](super::FlowTable)
//! evicts or drops; its header says which).

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

/// Pending flows (hello not complete yet) per listening socket.
pub(crate) const MAX_PENDING_FLOWS: usize = 1024;
/// Bytes held for pending flows per listening socket (16 MiB): with the
/// per-flow limit (64 KiB for the default `max_client_hello_bytes`) a
/// flood cannot make the held datagrams grow past this.
pub(crate) const MAX_HELD_BYTES: usize = 16 << 20;
/// Pending flows of one source (an IPv4 address, an IPv6 /64) per
/// listening socket: a source at this bound evicts its own oldest pending
/// flow for a new one, so one source cannot own the table. A client's
/// handshake is pending for about one round trip: 64 is room for as many
/// clients starting at once behind one NAT.
pub(crate) const MAX_PENDING_PER_SOURCE: usize = 64;

/// The source a pending flow counts against: its IPv4 address, or the /64
/// of its IPv6 address (one host or one site's customer network; an
/// IPv4-mapped address counts as IPv4).
pub(crate) fn source_key(addr: SocketAddr) -> IpAddr {
    match addr.ip() {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !u128::from(u64::MAX))),
        },
    }
}

/// Flows dropped (or evicted) at a bound, reported in one warning line at
/// most once a second rather than one line each.
#[derive(Debug, Default)]
pub(super) struct Summary {
    since_line: usize,
    last_line: Option<Instant>,
}

impl Summary {
    /// Counts one more; when a second has passed since the last line (or
    /// there was none), the count to write in a new line, which starts
    /// the count again.
    pub(super) fn count(&mut self, now: Instant) -> Option<usize> {
        self.since_line += 1;
        if self
            .last_line
            .is_none_or(|at| now >= at + Duration::from_secs(1))
        {
            self.last_line = Some(now);
            Some(std::mem::take(&mut self.since_line))
        } else {
            None
        }
    }
}
