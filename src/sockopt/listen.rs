//! Listening sockets bound here: TCP ([`bind_listener_with`]: SO_REUSEADDR,
//! optional SO_REUSEPORT, v6-only, TCP_NODELAY for its accepted sockets to
//! inherit, the backlog) and a `protocol = "quic"` listener's UDP socket
//! ([`bind_udp_with`]), each with the options that must be set before
//! `bind`/`listen`.
//!
//! Not here: listening sockets inherited from systemd or the process being
//! replaced ([`super::inherit`]); keepalive on them ([`super::keepalive`]);
//! the listeners' life ([`crate::run::bind`]).

use std::io;
use std::net::{SocketAddr, TcpListener};

use socket2::{Domain, Protocol, Socket, Type};

/// Binds a non-blocking listening socket, with SO_REUSEPORT when the
/// listener's `reuse_port` asks for it.
///
/// IPv6 sockets are v6-only, so `0.0.0.0:443` and `[::]:443` can be listed
/// side by side, each explicit, as the config contract intends.
pub(crate) fn bind_listener_with(
    addr: SocketAddr,
    backlog: u32,
    reuse_port: bool,
) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_nonblocking(true)?;
    // Accepted sockets inherit TCP_NODELAY, which spares every client
    // connection its own setsockopt(2).
    socket.set_tcp_nodelay(true)?;
    socket.bind(&addr.into())?;
    socket.listen(i32::try_from(backlog).unwrap_or(i32::MAX))?;
    Ok(socket.into())
}

// QUIC listeners (issue 18).
/// Binds a non-blocking UDP socket for a `protocol = "quic"` listener, with
/// SO_REUSEPORT when its `reuse_port` asks for it; IPv6 sockets are
/// v6-only, as TCP listening sockets are.
pub(crate) fn bind_udp_with(addr: SocketAddr, reuse_port: bool) -> io::Result<std::net::UdpSocket> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Client sockets get TCP_NODELAY through the listening socket alone
    /// (the relay sets it on no accepted socket): this pins the Linux
    /// behaviour that relies on.
    #[test]
    fn accepted_sockets_inherit_the_listening_sockets_nodelay() {
        let listener = bind_listener_with("127.0.0.1:0".parse().unwrap(), 8, false).unwrap();
        listener.set_nonblocking(false).unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        assert!(accepted.nodelay().unwrap());
        // Not a default: a connecting socket has it off.
        assert!(!client.nodelay().unwrap());
    }
}
