//! Client addresses, measured and claimed, as different types.
//!
//! A [`PeerAddr`] is the socket's remote address: measured by the kernel,
//! always true. A [`ClaimedAddr`] is what a PROXY protocol header from a
//! trusted peer relay says the client is: a claim. Keeping them apart in the
//! type system means no code can log, limit or forward one as the other by
//! accident (docs/design.md "Claims and measurements").
//!
//! Not here: reading a claim off the wire ([`crate::wire::proxy`],
//! [`crate::proxy::inbound`]) or deciding whom to trust.

use std::fmt;
use std::net::SocketAddr;

/// The remote address of the accepted socket (log field `client.peer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerAddr(pub SocketAddr);

/// The client address a trusted PROXY header claims (log field `client.claimed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClaimedAddr(pub SocketAddr);

impl fmt::Display for PeerAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Display for ClaimedAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A socket address kept in 24 bytes where `SocketAddr` takes 32: the IP
/// address, the port and an IPv6 scope, without the IPv6 flow label (which
/// no log line or listing shows). For what is held once per open
/// connection in a shared table (the connection registry, whose entry it
/// keeps in a smaller allocation class).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PackedAddr {
    ip: [u8; 16],
    scope: u32,
    port: u16,
    family: Family,
}

/// The family of a [`PackedAddr`] (an enum, so that an
/// `Option<PackedAddr>` takes no more room).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    V4,
    V6,
}

impl From<SocketAddr> for PackedAddr {
    fn from(addr: SocketAddr) -> Self {
        match addr {
            SocketAddr::V4(v4) => {
                let mut ip = [0u8; 16];
                ip[..4].copy_from_slice(&v4.ip().octets());
                PackedAddr {
                    ip,
                    scope: 0,
                    port: v4.port(),
                    family: Family::V4,
                }
            }
            SocketAddr::V6(v6) => PackedAddr {
                ip: v6.ip().octets(),
                scope: v6.scope_id(),
                port: v6.port(),
                family: Family::V6,
            },
        }
    }
}

impl PackedAddr {
    /// The address as a `SocketAddr` (flow label 0).
    pub(crate) fn get(self) -> SocketAddr {
        match self.family {
            Family::V4 => {
                let [a, b, c, d, ..] = self.ip;
                SocketAddr::from(([a, b, c, d], self.port))
            }
            Family::V6 => SocketAddr::V6(std::net::SocketAddrV6::new(
                self.ip.into(),
                self.port,
                0,
                self.scope,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::addr::PackedAddr;
    use std::net::SocketAddr;

    #[test]
    fn packed_addresses_come_back_whole_in_24_bytes() {
        for text in [
            "192.0.2.7:443",
            "0.0.0.0:0",
            "[2001:db8::1]:8443",
            "[fe80::1%3]:22",
            "[::ffff:192.0.2.1]:80",
        ] {
            let addr: SocketAddr = text.parse().unwrap();
            assert_eq!(PackedAddr::from(addr).get(), addr, "{text}");
        }
        assert_eq!(std::mem::size_of::<Option<PackedAddr>>(), 24);
    }
}
