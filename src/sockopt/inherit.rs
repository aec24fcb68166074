//! Sockets that come from outside: from systemd (socket activation, fds
//! 3.. described by LISTEN_PID/LISTEN_FDS/LISTEN_FDNAMES) or from the
//! process being replaced (`run --takeover`, fds passed with SCM_RIGHTS).
//! Every inherited descriptor is checked to be a listening TCP socket
//! ([`adopt_listener`]), or a UDP socket ([`adopt_udp`]: a QUIC
//! listener's, from systemd's `ListenDatagram=` or the process being
//! replaced), and made close-on-exec and non-blocking before use; a
//! systemd socket is told apart by its type ([`adopt_activated`]). Also
//! here: the Unix SOCK_SEQPACKET pair that carries a QUIC listener's
//! datagrams from the old process to the new one during a binary upgrade
//! ([`seqpacket_pair`], [`adopt_seqpacket`]; see
//! [`crate::quic::handover`]), and the sending half of descriptor
//! passing ([`send_fds`]).
//!
//! Not here: turning raw descriptor numbers into owned ones (taking
//! systemd's descriptors, receiving passed ones), the only `unsafe`
//! ([`super::sys`]); the takeover's message exchange, framed in
//! [`crate::run::takeover`].

use std::io;
use std::net::{SocketAddr, TcpListener};

use socket2::{Domain, Socket, Type};

/// Checks that `fd` is a listening TCP socket and prepares it for the
/// accept loop (non-blocking, close-on-exec).
pub(crate) fn adopt_listener(fd: std::os::fd::OwnedFd) -> io::Result<TcpListener> {
    let socket = Socket::from(fd);
    let domain = socket.domain()?;
    if socket.r#type()? != Type::STREAM || !(domain == Domain::IPV4 || domain == Domain::IPV6) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a TCP stream socket",
        ));
    }
    if !socket.is_listener()? {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the socket is not listening",
        ));
    }
    socket.set_cloexec(true)?;
    socket.set_nonblocking(true)?;
    // As for a socket bound here: its accepted sockets inherit it.
    socket.set_tcp_nodelay(true)?;
    Ok(socket.into())
}

// Binary upgrade of QUIC listeners.
/// Checks that `fd` is a bound UDP socket (a QUIC listener's, handed over
/// by the process being replaced) and makes it non-blocking and
/// close-on-exec.
pub(crate) fn adopt_udp(fd: std::os::fd::OwnedFd) -> io::Result<std::net::UdpSocket> {
    let socket = Socket::from(fd);
    let domain = socket.domain()?;
    if socket.r#type()? != Type::DGRAM || !(domain == Domain::IPV4 || domain == Domain::IPV6) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a UDP socket",
        ));
    }
    socket.set_cloexec(true)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// A socket systemd passed, adopted by its type (SO_TYPE): a
/// `ListenStream=` one for a tcp listener, a `ListenDatagram=` one for a
/// quic listener.
#[derive(Debug)]
pub(crate) enum ActivatedSocket {
    Stream(TcpListener),
    Datagram(std::net::UdpSocket),
}

impl ActivatedSocket {
    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            ActivatedSocket::Stream(socket) => socket.local_addr(),
            ActivatedSocket::Datagram(socket) => socket.local_addr(),
        }
    }
}

/// Checks a descriptor systemd passed: a listening TCP socket
/// ([`adopt_listener`]) or a bound UDP socket ([`adopt_udp`]), told apart
/// by SO_TYPE; anything else (a Unix or SEQPACKET socket, a FIFO) is an
/// error.
pub(crate) fn adopt_activated(fd: std::os::fd::OwnedFd) -> io::Result<ActivatedSocket> {
    let socket = Socket::from(fd);
    let kind = socket.r#type()?;
    let fd = std::os::fd::OwnedFd::from(socket);
    if kind == Type::DGRAM {
        adopt_udp(fd).map(ActivatedSocket::Datagram)
    } else {
        adopt_listener(fd).map(ActivatedSocket::Stream)
    }
}

/// A connected pair of Unix SOCK_SEQPACKET sockets, non-blocking and
/// close-on-exec: message boundaries are kept (one datagram per message)
/// and, unlike SOCK_DGRAM, a reader sees end-of-file once the other end
/// is closed.
pub(crate) fn seqpacket_pair() -> io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    let (a, b) = Socket::pair(Domain::UNIX, Type::SEQPACKET, None)?;
    for socket in [&a, &b] {
        socket.set_cloexec(true)?;
        socket.set_nonblocking(true)?;
    }
    Ok((a.into(), b.into()))
}

/// Checks that `fd` is a Unix SOCK_SEQPACKET socket (the far end of
/// [`seqpacket_pair`], handed over) and makes it non-blocking and
/// close-on-exec.
pub(crate) fn adopt_seqpacket(fd: std::os::fd::OwnedFd) -> io::Result<std::os::fd::OwnedFd> {
    let socket = Socket::from(fd);
    if socket.r#type()? != Type::SEQPACKET || socket.domain()? != Domain::UNIX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a Unix seqpacket socket",
        ));
    }
    socket.set_cloexec(true)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// Sends `fds` and `payload` over a Unix stream socket in one message.
pub(crate) fn send_fds(
    stream: &std::os::unix::net::UnixStream,
    payload: &[u8],
    fds: &[std::os::fd::BorrowedFd<'_>],
) -> io::Result<()> {
    use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
    use std::os::fd::AsRawFd;
    let raw: Vec<i32> = fds.iter().map(|fd| fd.as_raw_fd()).collect();
    let cmsgs = if raw.is_empty() {
        Vec::new()
    } else {
        vec![ControlMessage::ScmRights(&raw)]
    };
    let iov = [io::IoSlice::new(payload)];
    let sent = sendmsg::<()>(stream.as_raw_fd(), &iov, &cmsgs, MsgFlags::empty(), None)
        .map_err(io::Error::from)?;
    // The rest carries no descriptors; plain writes are fine.
    io::Write::write_all(&mut &*stream, &payload[sent..])
}
