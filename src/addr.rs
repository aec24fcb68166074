//! Client addresses, measured and claimed, as different types.
//!
//! A [`PeerAddr`] is the socket's remote address: measured by the kernel,
//! always true. A [`ClaimedAddr`] is what a PROXY protocol header from a
//! trusted peer relay says the client is: a claim. Keeping them apart in the
//! type system means no code can log, limit or forward one as the other by
//! accident (docs/design.md "Claims and measurements").

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
