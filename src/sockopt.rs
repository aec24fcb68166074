//! Every socket option the relay sets, in one place.
//!
//! Listening sockets are built with socket2 so that the options that must be
//! set before `bind`/`listen` (SO_REUSEADDR, IPV6_V6ONLY, the backlog) are
//! explicit; accepted and connected sockets get TCP_NODELAY, since the relay
//! forwards TLS records whose latency matters more than segment count.
//! Sockets are created close-on-exec (socket2's default on Linux).
//!
//! Not here: anything that reads or writes data.

use std::io;
use std::net::{SocketAddr, TcpListener};

use socket2::{Domain, Protocol, Socket, Type};

/// Binds a non-blocking listening socket.
///
/// IPv6 sockets are v6-only, so `0.0.0.0:443` and `[::]:443` can be listed
/// side by side, each explicit, as the config contract intends.
pub fn bind_listener(addr: SocketAddr, backlog: u32) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(i32::try_from(backlog).unwrap_or(i32::MAX))?;
    Ok(socket.into())
}

/// Disables Nagle's algorithm on a relayed socket.
pub fn set_nodelay(stream: &tokio::net::TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)
}

/// Whether an `accept` error means the process or system ran out of a
/// resource (descriptors, buffers, memory), so the loop must back off rather
/// than retry at once.
pub fn is_resource_exhaustion(error: &io::Error) -> bool {
    const EMFILE: i32 = 24;
    const ENFILE: i32 = 23;
    const ENOBUFS: i32 = 105;
    const ENOMEM: i32 = 12;
    matches!(
        error.raw_os_error(),
        Some(EMFILE | ENFILE | ENOBUFS | ENOMEM)
    )
}
