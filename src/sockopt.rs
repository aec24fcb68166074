//! Every socket option the relay sets, in one place.
//!
//! Listening sockets are built with socket2 so that the options that must be
//! set before `bind`/`listen` (SO_REUSEADDR, IPV6_V6ONLY, the backlog) are
//! explicit; relayed sockets get TCP_NODELAY, since the relay forwards TLS
//! records whose latency matters more than segment count (set on listening
//! sockets, whose accepted sockets inherit it, and on each backend socket).
//! The relay's only flagged write is here too: `try_write_before_fin`
//! (MSG_MORE) corks a direction's last bytes so that its FIN goes out in
//! the same segment; `fin_queued` tells whether a peer's FIN is queued;
//! `recv_now` reads a new connection's first bytes without waiting for
//! the event loop to report them. Backend sockets are opened and their
//! connect started here (`start_connect`), and the hello's replay is
//! sent on them at once (`send_now`).
//! While a client trickles its ClientHello, `inspect` raises SO_RCVLOWAT
//! so that the kernel wakes the relay only once enough bytes are queued.
//! A `protocol = "quic"` listener's UDP sockets are bound here too
//! (`bind_udp_with`: v6-only, optional SO_REUSEPORT), adopted after a
//! binary upgrade (`adopt_udp`), with the Unix SOCK_SEQPACKET pair that
//! carries datagrams from the old process to the new one meanwhile
//! (`seqpacket_pair`, `adopt_seqpacket`; see [`crate::quic::handover`]); its
//! flows' backend sockets ask for UDP GRO here (`enable_udp_gro`); the
//! options quinn-udp sets on a listening socket for batched I/O (GRO,
//! IP_PKTINFO, no fragmentation) are set inside that crate ([`crate::quic::io`]).
//! Sockets are created close-on-exec (socket2's default on Linux).
//! TCP keepalive (`tcp_keepalive`) is set on listening sockets, whose
//! accepted sockets inherit it, and on each backend socket once its
//! connection has relayed for [`KEEPALIVE_ARM_DELAY`] (see
//! `KeepaliveSecs`: most connections end before that and never pay the
//! five calls); with TCP_USER_TIMEOUT at the same horizon (see
//! [`set_keepalive`] for why); `is_peer_timeout` tells the relay that a
//! failed socket's peer stopped answering.
//! The descriptor limit is raised here too, at startup (through nix's safe
//! wrapper).
//!
//! Listening sockets may also be inherited (systemd socket activation, or a
//! takeover from the process being replaced): the few functions that turn
//! raw descriptor numbers into owned ones are, with the one setsockopt(2)
//! libc has no name for (IP_LOCAL_PORT_RANGE), the only `unsafe` in the
//! crate, each allowed on that function alone, with its SAFETY argument.
//!
//! A backend socket may be bound before its connect (`LocalBind`): to a
//! `source` address with IP_BIND_ADDRESS_NO_PORT (the port is picked per
//! 4-tuple at connect time, so one source address serves the whole port
//! range toward every destination) and optionally IP_LOCAL_PORT_RANGE, or
//! to the client's address and port with IP_TRANSPARENT. One setsockopt(2)
//! and a bind(2) more per connect when a `source` is set; none otherwise.
//!
//! Not here: anything that reads or writes data (the takeover's small
//! message exchange is framed in `takeover`; only the sendmsg/recvmsg calls
//! are here).

use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener};

use socket2::{Domain, Protocol, Socket, Type};

/// Disables Nagle's algorithm on a relayed socket. Client sockets need no
/// call: listening sockets get TCP_NODELAY and accepted ones inherit it.
pub(crate) fn set_nodelay(stream: &tokio::net::TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)
}

// ------------------------------------------------------------ TCP keepalive

/// TCP keepalive settings (`tcp_keepalive`): plain settings.
pub use crate::config::settings::Keepalive;

impl Keepalive {
    /// How long the peer may leave data unacknowledged: the same horizon
    /// as the probes', idle + interval × count (TCP_USER_TIMEOUT).
    pub(crate) fn user_timeout(&self) -> std::time::Duration {
        self.idle + self.interval * self.count
    }
}

/// How long a relayed connection runs before its backend socket gets its
/// `tcp_keepalive` (the five calls of [`set_keepalive`], about 2.7 µs
/// against about 75 µs of the relay's core per short connection: `cargo
/// bench --bench sockopt`, `loadbench --pin`). A connection that ends
/// sooner, as most do (a request and its response, a health check), never
/// makes them; probing only starts after `idle` anyway, so a vanished
/// backend is noticed at most this much later. Client sockets are not
/// concerned: they inherit keepalive from the listening socket for free.
pub const KEEPALIVE_ARM_DELAY: std::time::Duration = std::time::Duration::from_secs(1);

/// [`Keepalive`] in the kernel's own units (whole seconds and a probe
/// count, which is all the configuration accepts): five bytes, so that a
/// connection's state can carry its backend's settings until
/// [`KEEPALIVE_ARM_DELAY`] has passed without growing (see
/// [`crate::pump::relay`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeepaliveSecs {
    idle: u16,
    interval: u16,
    // Non-zero, so that `Option<KeepaliveSecs>` needs no tag byte.
    count: std::num::NonZeroU8,
}

impl KeepaliveSecs {
    /// `keepalive`, each value clamped to what the kernel accepts (the
    /// configuration's bounds: 1..=32767 s, 1..=127 probes).
    pub(crate) fn new(keepalive: Keepalive) -> KeepaliveSecs {
        let secs = |d: std::time::Duration| d.as_secs().clamp(1, 32_767) as u16;
        KeepaliveSecs {
            idle: secs(keepalive.idle),
            interval: secs(keepalive.interval),
            count: std::num::NonZeroU8::new(keepalive.count.clamp(1, 127) as u8)
                .expect("clamped to 1..=127"),
        }
    }

    /// The settings again, as [`set_keepalive`] takes them.
    pub(crate) fn keepalive(self) -> Keepalive {
        Keepalive {
            idle: std::time::Duration::from_secs(self.idle.into()),
            interval: std::time::Duration::from_secs(self.interval.into()),
            count: self.count.get().into(),
        }
    }
}

/// Turns keepalive on with `keepalive`'s timing, or off (`None`): five
/// setsockopt(2) calls on, two off.
///
/// Keepalive alone misses a peer that vanishes while data sent to it is
/// unacknowledged: Linux probes only a socket with nothing in flight, and
/// retransmissions give up only after `tcp_retries2` (about 15 minutes).
/// That is the common case, not a corner one (the peer's network goes
/// while a response is on its way), so TCP_USER_TIMEOUT is set to the
/// probes' own horizon (`Keepalive::user_timeout`): a peer that answers
/// nothing for that long is gone, whether it was being probed or sent data.
/// With both set, the kernel also ends probing at that horizon (tcp(7)),
/// which is where `count` probes end anyway. A peer that keeps a zero
/// window but acks the window probes is alive and is not timed out (since
/// Linux 5.11).
///
/// On a listening socket the settings are inherited by every socket
/// accepted from it (Linux copies SO_KEEPALIVE, the TCP_KEEP* values and
/// the user timeout into the new socket and arms its keepalive timer when
/// the handshake completes; nginx's `so_keepalive` relies on the same), so
/// client sockets get them with no call per connection. A connection whose
/// handshake completed before a reload changed the listener's setting
/// keeps the old one.
pub fn set_keepalive(
    socket: &impl std::os::fd::AsFd,
    keepalive: Option<Keepalive>,
) -> io::Result<()> {
    let socket = socket2::SockRef::from(socket);
    match keepalive {
        None => {
            socket.set_keepalive(false)?;
            socket.set_tcp_user_timeout(None)
        }
        Some(keepalive) => {
            socket.set_tcp_keepalive(
                &socket2::TcpKeepalive::new()
                    .with_time(keepalive.idle)
                    .with_interval(keepalive.interval)
                    .with_retries(keepalive.count),
            )?;
            socket.set_tcp_user_timeout(Some(keepalive.user_timeout()))
        }
    }
}

#[cfg(test)]
/// The keepalive settings in force on `socket` (`None`: off), read back
/// to check what [`set_keepalive`] did; an error if the user timeout does
/// not go with them.
pub(crate) fn keepalive(socket: &impl std::os::fd::AsFd) -> io::Result<Option<Keepalive>> {
    let socket = socket2::SockRef::from(socket);
    let user_timeout = socket.tcp_user_timeout()?;
    if !socket.keepalive()? {
        return match user_timeout {
            None => Ok(None),
            Some(t) => Err(io::Error::other(format!(
                "keepalive off, user timeout {t:?}"
            ))),
        };
    }
    let keepalive = Keepalive {
        idle: socket.tcp_keepalive_time()?,
        interval: socket.tcp_keepalive_interval()?,
        count: socket.tcp_keepalive_retries()?,
    };
    if user_timeout != Some(keepalive.user_timeout()) {
        return Err(io::Error::other(format!(
            "user timeout {user_timeout:?} for {keepalive:?}"
        )));
    }
    Ok(Some(keepalive))
}

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

// The macro names `libc` and itself unqualified.
use nix::{libc, setsockopt_impl, sockopt_impl};

sockopt_impl!(
    /// SO_RCVLOWAT: bytes queued before the socket reads as readable.
    RecvLowat,
    SetOnly,
    libc::SOL_SOCKET,
    libc::SO_RCVLOWAT,
    usize
);

/// Sets SO_RCVLOWAT: the kernel neither wakes the relay nor reports the
/// socket readable until `bytes` are queued (or the peer closes, or the
/// receive buffer is under pressure). `inspect` uses it while a client
/// trickles its hello, and sets it back to 1 before relaying.
pub(crate) fn set_recv_lowat(stream: &tokio::net::TcpStream, bytes: usize) -> io::Result<()> {
    nix::sys::socket::setsockopt(stream, RecvLowat, &bytes.max(1)).map_err(io::Error::from)
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

// ------------------------------------------------- inherited listening sockets
//
// Listening sockets can also come from outside: from systemd (socket
// activation, fds 3.. described by LISTEN_PID/LISTEN_FDS/LISTEN_FDNAMES) or
// from the process being replaced (`run --takeover`, fds passed with
// SCM_RIGHTS). Turning a raw descriptor number into an owned one is the only
// `unsafe` the relay needs, so it lives here, each block with its SAFETY
// argument. Every inherited descriptor is checked to be a listening TCP
// socket, or a UDP socket (a QUIC listener's, from systemd's
// `ListenDatagram=` or the process being replaced), and made close-on-exec
// and non-blocking before use.

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

/// Asks the kernel to coalesce datagrams of one source into one receive
/// (UDP_GRO, Linux 5.0 and later) on a QUIC flow's backend socket. An
/// error means the kernel cannot: the socket then reads one datagram per
/// slot, which changes nothing else.
pub(crate) fn enable_udp_gro(socket: &impl std::os::fd::AsFd) -> io::Result<()> {
    nix::sys::socket::setsockopt(socket, nix::sys::socket::sockopt::UdpGroSegment, &true)
        .map_err(io::Error::from)
}

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

/// A descriptor passed in by systemd, with its LISTEN_FDNAMES name.
#[derive(Debug)]
pub(crate) struct ActivatedFd {
    pub name: String,
    pub fd: std::os::fd::OwnedFd,
}

/// The first descriptor systemd passes (SD_LISTEN_FDS_START).
const LISTEN_FDS_START: i32 = 3;

/// Takes the sockets systemd passed with socket activation, if any were
/// passed to this process, and removes LISTEN_* from the environment so
/// they are taken once only. An fd without a name in LISTEN_FDNAMES gets
/// systemd's default name, `unknown`.
///
/// Must be called before any thread is started (the environment is changed).
#[allow(unsafe_code)]
pub(crate) fn take_activated_fds() -> io::Result<Vec<ActivatedFd>> {
    let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidInput, what);
    let Ok(pid) = std::env::var("LISTEN_PID") else {
        return Ok(Vec::new());
    };
    let count = std::env::var("LISTEN_FDS").unwrap_or_default();
    let names = std::env::var("LISTEN_FDNAMES").unwrap_or_default();
    // SAFETY: called from `main` before the async runtime or any other
    // thread exists, so nothing reads the environment concurrently.
    unsafe {
        std::env::remove_var("LISTEN_PID");
        std::env::remove_var("LISTEN_FDS");
        std::env::remove_var("LISTEN_FDNAMES");
    }
    if pid.parse::<u32>().ok() != Some(std::process::id()) {
        // Meant for another process (e.g. our parent); not ours to take.
        return Ok(Vec::new());
    }
    let count: i32 = count
        .parse()
        .map_err(|_| invalid(format!("LISTEN_FDS={count:?} is not a number")))?;
    if !(0..=1024).contains(&count) {
        return Err(invalid(format!("LISTEN_FDS={count} is out of range")));
    }
    let mut names = names.split(':');
    let mut fds = Vec::new();
    for raw in LISTEN_FDS_START..LISTEN_FDS_START + count {
        // SAFETY: LISTEN_PID names this process, so by the sd_listen_fds
        // protocol descriptors 3..3+LISTEN_FDS are open and were handed to
        // us; we remove LISTEN_* above, so each is wrapped exactly once and
        // nothing else in the process owns it.
        let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) };
        let name = names
            .next()
            .filter(|n| !n.is_empty())
            .unwrap_or("unknown")
            .to_owned();
        fds.push(ActivatedFd { name, fd });
    }
    Ok(fds)
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

/// Most descriptors one message may carry (Linux SCM_MAX_FD).
pub(crate) const MAX_PASSED_FDS: usize = 253;

/// Receives one message from a Unix stream socket: some payload bytes and
/// the descriptors that came with them (close-on-exec).
#[allow(unsafe_code)]
pub(crate) fn recv_fds(
    stream: &std::os::unix::net::UnixStream,
    buf: &mut [u8],
) -> io::Result<(usize, Vec<std::os::fd::OwnedFd>)> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let mut cmsg = nix::cmsg_space!([i32; MAX_PASSED_FDS]);
    let mut iov = [io::IoSliceMut::new(buf)];
    let msg = recvmsg::<()>(
        stream.as_raw_fd(),
        &mut iov,
        Some(&mut cmsg),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .map_err(io::Error::from)?;
    let mut fds = Vec::new();
    let cmsgs = msg.cmsgs().map_err(io::Error::from)?;
    for message in cmsgs {
        if let ControlMessageOwned::ScmRights(raw) = message {
            for fd in raw {
                // SAFETY: the kernel just installed this descriptor in our
                // table for this message (SCM_RIGHTS); nothing else refers
                // to it, so it is wrapped exactly once.
                fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
    }
    Ok((msg.bytes, fds))
}

/// CLOCK_MONOTONIC in microseconds, as systemd's MONOTONIC_USEC wants it.
pub(crate) fn monotonic_usec() -> u64 {
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC) {
        Ok(ts) => ts.tv_sec() as u64 * 1_000_000 + ts.tv_nsec() as u64 / 1_000,
        Err(_) => 0,
    }
}

/// Sends FIN on `stream` (shutdown for writing) through a shared reference,
/// so the opposite direction of a relay can keep reading the same socket.
pub(crate) fn shutdown_write(stream: &tokio::net::TcpStream) -> io::Result<()> {
    socket2::SockRef::from(stream).shutdown(std::net::Shutdown::Write)
}

/// Writes `bytes` to `stream` with MSG_MORE: the kernel holds them back
/// (corks them) instead of sending them at once, so the FIN of a
/// shutdown(2) or close(2) that must follow at once is tacked onto the same
/// segment (`tcp_send_fin` sets FIN on the unsent tail). Only for the last
/// bytes of a direction whose end is already known: corked bytes wait
/// for the next write or that FIN. Non-blocking, like `try_write`: a full
/// send buffer gives `WouldBlock` and clears the write readiness.
pub(crate) fn try_write_before_fin(
    stream: &tokio::net::TcpStream,
    bytes: &[u8],
) -> io::Result<usize> {
    stream.try_io(tokio::io::Interest::WRITABLE, || {
        socket2::SockRef::from(stream)
            .send_with_flags(bytes, nix::libc::MSG_MORE | nix::libc::MSG_NOSIGNAL)
    })
}

/// Whether `stream`'s peer has sent FIN, and nothing worse, as far as the
/// event loop has seen (EPOLLRDHUP, kept by tokio as the final
/// `read_closed` readiness, without EPOLLHUP or EPOLLERR: a reset also
/// raises EPOLLRDHUP, and must stay a reset). No syscall: it reads the
/// readiness tokio already holds. `true` means the FIN is queued behind
/// whatever data is left to read, so a read that returns less than asked
/// has drained the stream up to its end.
pub(crate) fn fin_queued(stream: &tokio::net::TcpStream) -> bool {
    use std::future::Future;
    use tokio::io::Interest;
    // `ready()` answers at once from the readiness tokio holds when any
    // bit of interest is set (writable almost always is); only when none
    // is does it register a waiter, which the drop below removes again:
    // either way it never waits.
    let ready = stream.ready(Interest::READABLE | Interest::WRITABLE | Interest::ERROR);
    let mut ready = std::pin::pin!(ready);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    matches!(
        ready.as_mut().poll(&mut cx),
        std::task::Poll::Ready(Ok(r)) if r.is_read_closed() && !r.is_write_closed() && !r.is_error()
    )
}

/// One recv(2) on `stream` now, whatever readiness the runtime holds for it
/// (tokio's own reads answer WouldBlock without a syscall until the event
/// loop has seen the socket readable). For the first read of a new
/// connection, whose bytes usually came with the handshake's last ACK:
/// reading them at once spares the connection a turn of the event loop.
///
/// A read shorter than `buf` drained the socket, so the read readiness
/// the runtime may already hold (the event loop saw the bytes arrive) is
/// stale: it is cleared here, or the relay's first read would pay a
/// recv(2) that answers EAGAIN. Clearing cannot lose bytes: epoll is
/// edge-triggered, so any that arrive after this read are a new event,
/// and tokio only clears readiness no newer than what it held before
/// (end of stream, a final state, is never cleared).
pub(crate) fn recv_now(stream: &tokio::net::TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    use std::io::Read;
    let socket = socket2::SockRef::from(stream);
    let n = (&*socket).read(buf)?;
    if n > 0 && n < buf.len() {
        // Runs the closure only if the runtime holds read readiness; its
        // WouldBlock clears it.
        let _ = stream.try_io(tokio::io::Interest::READABLE, || {
            Err::<(), _>(io::ErrorKind::WouldBlock.into())
        });
    }
    Ok(n)
}

/// A backend socket whose connect has been started ([`start_connect`]).
#[derive(Debug)]
pub(crate) struct Connecting {
    pub socket: std::net::TcpStream,
    /// The handshake is already complete: nothing to wait for.
    pub connected: bool,
}

/// Opens a non-blocking, close-on-exec TCP socket with TCP_NODELAY and
/// starts its connect to `addr`. To a loopback address the three-way
/// handshake runs inside connect(2), which still answers EINPROGRESS: one
/// getpeername(2) then tells that the socket is connected, and the caller
/// skips waiting a turn of the event loop for it to become writable (the
/// getsockopt(SO_ERROR) that wait would end with is skipped too, so the
/// count of calls is the same). Elsewhere the handshake takes a round
/// trip, and `connected` is false without a probe.
pub(crate) fn start_connect(addr: SocketAddr, bind: LocalBind) -> io::Result<Connecting> {
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::STREAM.nonblocking().cloexec(),
        Some(Protocol::TCP),
    )?;
    socket.set_tcp_nodelay(true)?;
    bind_local(&socket, addr, bind, true)?;
    let connected = match socket.connect(&addr.into()) {
        Ok(()) => true,
        Err(e) if e.raw_os_error() == Some(nix::libc::EINPROGRESS) => {
            addr.ip().is_loopback() && socket.peer_addr().is_ok()
        }
        Err(e) => return Err(e),
    };
    Ok(Connecting {
        socket: socket.into(),
        connected,
    })
}

// ------------------------------------------------------ egress source binds
//
// A backend socket (TCP, or a QUIC flow's UDP socket) may be bound before
// its connect: to one of the backend's `source` addresses, or to the
// client's own address and port (`source = "client"`, IP_TRANSPARENT).

/// IP_LOCAL_PORT_RANGE (Linux 6.3, `include/uapi/linux/in.h`): the local
/// port range of one socket, `low | high << 16`; libc does not name it.
const IP_LOCAL_PORT_RANGE: nix::libc::c_int = 51;

/// Where a backend socket is bound before its connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LocalBind {
    /// Not bound: the routing table picks the address, connect(2) the port.
    Host,
    /// This local address, the port picked at connect time for the 4-tuple
    /// (IP_BIND_ADDRESS_NO_PORT), within `ports` (IP_LOCAL_PORT_RANGE)
    /// when set.
    Address {
        ip: IpAddr,
        ports: Option<(u16, u16)>,
    },
    /// The client's address and port, not local to this host
    /// (IP_TRANSPARENT / IPV6_TRANSPARENT, with SO_REUSEADDR).
    Transparent(SocketAddr),
}

/// Binds `socket` (about to connect to `dest`) as `bind` says. A bind of
/// the wrong family is refused here, as EAFNOSUPPORT, before any syscall.
///
/// A TCP socket (`stream`) is bound to a source address with
/// IP_BIND_ADDRESS_NO_PORT: its port is picked at connect time, free per
/// 4-tuple. A UDP socket is bound with its port at once: UDP ports are not
/// shared between destinations anyway, and with the option a UDP socket
/// that finds no port fails its connect with EAGAIN, which would not read
/// as this host's shortage (EADDRINUSE, as the bind answers).
fn bind_local(socket: &Socket, dest: SocketAddr, bind: LocalBind, stream: bool) -> io::Result<()> {
    let family_error = || io::Error::from_raw_os_error(nix::libc::EAFNOSUPPORT);
    match bind {
        LocalBind::Host => Ok(()),
        LocalBind::Address { ip, ports } => {
            if ip.is_ipv4() != dest.is_ipv4() {
                return Err(family_error());
            }
            if stream {
                nix::sys::socket::setsockopt(
                    socket,
                    nix::sys::socket::sockopt::IpBindAddressNoPort,
                    &true,
                )?;
            }
            if let Some((low, high)) = ports {
                set_local_port_range(socket, low, high)?;
            }
            socket.bind(&SocketAddr::new(ip, 0).into())
        }
        LocalBind::Transparent(client) => {
            if client.is_ipv4() != dest.is_ipv4() {
                return Err(family_error());
            }
            set_transparent(socket, client.is_ipv6())?;
            socket.set_reuse_address(true)?;
            socket.bind(&client.into())
        }
    }
}

/// IP_TRANSPARENT (IPV6_TRANSPARENT on an IPv6 socket): the socket may be
/// bound to an address that is not local. Needs CAP_NET_ADMIN or
/// CAP_NET_RAW (EPERM without either).
fn set_transparent(socket: &Socket, v6: bool) -> io::Result<()> {
    if v6 {
        socket.set_ip_transparent_v6(true)
    } else {
        socket.set_ip_transparent_v4(true)
    }
}

/// IP_LOCAL_PORT_RANGE on `socket`: ports the kernel picks from at bind or
/// connect time; ENOPROTOOPT before Linux 6.3.
#[allow(unsafe_code)]
fn set_local_port_range(socket: &Socket, low: u16, high: u16) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let value: u32 = u32::from(low) | (u32::from(high) << 16);
    // SAFETY: `socket` is an open descriptor for the whole call; the value
    // pointer and its length describe one live `u32`, which the kernel
    // copies in and does not keep.
    let rc = unsafe {
        nix::libc::setsockopt(
            socket.as_raw_fd(),
            nix::libc::SOL_IP,
            IP_LOCAL_PORT_RANGE,
            (&raw const value).cast(),
            std::mem::size_of::<u32>() as nix::libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A non-blocking UDP socket connected to `dest`, bound first as `bind`
/// says (a QUIC flow's backend socket).
pub(crate) fn udp_connect(dest: SocketAddr, bind: LocalBind) -> io::Result<std::net::UdpSocket> {
    let socket = Socket::new(
        Domain::for_address(dest),
        Type::DGRAM.nonblocking().cloexec(),
        Some(Protocol::UDP),
    )?;
    bind_local(&socket, dest, bind, false)?;
    socket.connect(&dest.into())?;
    Ok(socket.into())
}

/// Whether this process may bind sockets to non-local addresses: sets
/// IP_TRANSPARENT (IPV6_TRANSPARENT for `v6`) on a scratch socket, which
/// fails with EPERM without CAP_NET_ADMIN or CAP_NET_RAW.
pub(crate) fn probe_transparent(v6: bool) -> io::Result<()> {
    let domain = if v6 { Domain::IPV6 } else { Domain::IPV4 };
    let socket = Socket::new(domain, Type::STREAM.cloexec(), Some(Protocol::TCP))?;
    set_transparent(&socket, v6)
}

/// Whether `ip` is an address of this host that a backend socket can be
/// bound to (with `ports`, that the kernel takes IP_LOCAL_PORT_RANGE):
/// binds a scratch socket to `ip` with IP_BIND_ADDRESS_NO_PORT, which
/// reserves no port, and closes it.
pub fn probe_source(ip: IpAddr, ports: Option<(u16, u16)>) -> io::Result<()> {
    let socket = Socket::new(
        Domain::for_address(SocketAddr::new(ip, 0)),
        Type::STREAM.cloexec(),
        Some(Protocol::TCP),
    )?;
    nix::sys::socket::setsockopt(
        &socket,
        nix::sys::socket::sockopt::IpBindAddressNoPort,
        &true,
    )?;
    if let Some((low, high)) = ports {
        set_local_port_range(&socket, low, high)?;
    }
    socket.bind(&SocketAddr::new(ip, 0).into())
}

/// One send(2) on `stream` now, whatever readiness the runtime holds for it
/// (a socket [`start_connect`] found connected has none yet: tokio's own
/// writes would wait for the event loop to report it writable). No SIGPIPE.
pub(crate) fn send_now(stream: &tokio::net::TcpStream, bytes: &[u8]) -> io::Result<usize> {
    socket2::SockRef::from(stream).send_with_flags(bytes, nix::libc::MSG_NOSIGNAL)
}

/// The descriptor limit before and after [`raise_nofile_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NofileLimit {
    pub(crate) soft_before: u64,
    pub(crate) soft: u64,
    pub(crate) hard: u64,
}

/// Raises the soft RLIMIT_NOFILE to the hard limit: every relayed connection
/// needs two descriptors (and a pipe in flight two more), and the usual soft
/// default of 1024 would cap the relay at a few hundred connections.
pub fn raise_nofile_limit() -> io::Result<NofileLimit> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(io::Error::from)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).map_err(io::Error::from)?;
    }
    Ok(NofileLimit {
        soft_before: soft,
        soft: hard,
        hard,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// To a loopback listener the handshake completes inside connect(2):
    /// `connected` says so and the peer is the listener. To a closed
    /// loopback port it is refused, so `connected` stays false and the
    /// caller's wait for writability reports the refusal.
    #[test]
    fn a_loopback_connect_is_found_complete_at_once_and_a_refused_one_is_not() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let connecting = start_connect(addr, LocalBind::Host).unwrap();
        assert!(connecting.connected);
        assert_eq!(connecting.socket.peer_addr().unwrap(), addr);
        assert!(connecting.socket.nodelay().unwrap());

        let closed = {
            let spare = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            spare.local_addr().unwrap()
        };
        // Linux answers EINPROGRESS and leaves the refusal on the socket;
        // a kernel that refused inside connect(2) would say so at once.
        let refusal = match start_connect(closed, LocalBind::Host) {
            Ok(refused) => {
                assert!(!refused.connected);
                refused.socket.take_error().unwrap().map(|e| e.kind())
            }
            Err(e) => Some(e.kind()),
        };
        assert_eq!(refusal, Some(io::ErrorKind::ConnectionRefused));
    }

    /// A `source` bind: the local address is the source, the port is in
    /// `ports` (IP_LOCAL_PORT_RANGE), picked at connect time; a source of
    /// the wrong family is refused before any syscall.
    #[test]
    fn a_source_bind_takes_the_address_and_a_port_in_the_range() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (_, high) = {
            let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap();
            let mut parts = text.split_whitespace().map(|p| p.parse::<u16>().unwrap());
            (parts.next().unwrap(), parts.next().unwrap())
        };
        let ip: IpAddr = "127.0.0.5".parse().unwrap();
        let bind = LocalBind::Address {
            ip,
            ports: Some((high - 9, high)),
        };
        let connecting = start_connect(addr, bind).unwrap();
        let local = connecting.socket.local_addr().unwrap();
        assert_eq!(local.ip(), ip);
        assert!((high - 9..=high).contains(&local.port()), "{local}");
        let v6 = LocalBind::Address {
            ip: "::1".parse().unwrap(),
            ports: None,
        };
        let error = start_connect(addr, v6).unwrap_err();
        assert!(is_local_connect_failure(&error), "{error}");
        assert!(probe_source(ip, Some((high - 9, high))).is_ok());
        assert!(probe_source("192.0.2.77".parse().unwrap(), None).is_err());
    }

    /// A UDP source bind takes its port at once, so a source with no free
    /// port in its range says EADDRINUSE (a shortage on this host), not a
    /// connect's EAGAIN.
    #[test]
    fn a_udp_source_with_no_free_port_is_a_source_shortage() {
        let dest: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let high = {
            let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap();
            text.split_whitespace()
                .nth(1)
                .unwrap()
                .parse::<u16>()
                .unwrap()
        };
        let port = high - 20;
        let bind = LocalBind::Address {
            ip: "127.0.0.6".parse().unwrap(),
            ports: Some((port, port)),
        };
        let first = udp_connect(dest, bind).unwrap();
        assert_eq!(first.local_addr().unwrap().port(), port);
        let error = udp_connect(dest, bind).unwrap_err();
        assert!(is_source_exhausted(&error), "{error}");
    }

    /// Whether the runtime holds read readiness for `stream`: `try_io`
    /// runs its closure only then (which, answering Ok, clears nothing).
    fn holds_read_readiness(stream: &tokio::net::TcpStream) -> bool {
        let mut ran = false;
        let _ = stream.try_io(tokio::io::Interest::READABLE, || {
            ran = true;
            Ok(())
        });
        ran
    }

    /// A `recv_now` that drains the socket leaves no stale readiness behind
    /// (the next tokio read would otherwise cost a recv(2) answering
    /// EAGAIN), bytes that come later still wake a reader, and a read that
    /// filled its buffer keeps the readiness, since more may be waiting.
    #[tokio::test]
    async fn a_draining_recv_now_clears_stale_readiness_and_later_bytes_still_wake() {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut peer = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (stream, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 64];

        peer.write_all(b"hello").await.unwrap();
        stream.readable().await.unwrap();
        assert!(holds_read_readiness(&stream));
        assert_eq!(recv_now(&stream, &mut buf).unwrap(), 5);
        assert!(!holds_read_readiness(&stream));

        peer.write_all(b"later").await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), stream.readable())
            .await
            .expect("bytes sent after the drained read wake the reader")
            .unwrap();
        assert_eq!(stream.try_read(&mut buf).unwrap(), 5);
        assert_eq!(&buf[..5], b"later");

        peer.write_all(&[7u8; 100]).await.unwrap();
        stream.readable().await.unwrap();
        assert_eq!(recv_now(&stream, &mut buf).unwrap(), 64);
        assert!(holds_read_readiness(&stream));
    }

    const PROBES: Keepalive = Keepalive {
        idle: Duration::from_secs(7),
        interval: Duration::from_secs(3),
        count: 4,
    };

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

    /// Client sockets get keepalive through the listening socket alone:
    /// this pins the Linux behaviour that relies on.
    #[test]
    fn accepted_sockets_inherit_the_listening_sockets_keepalive() {
        let listener = bind_listener_with("127.0.0.1:0".parse().unwrap(), 8, false).unwrap();
        listener.set_nonblocking(false).unwrap();
        let addr = listener.local_addr().unwrap();
        for setting in [Some(PROBES), None] {
            set_keepalive(&listener, setting).unwrap();
            let _client = std::net::TcpStream::connect(addr).unwrap();
            let (accepted, _) = listener.accept().unwrap();
            // `keepalive` also checks the user timeout that goes with it.
            assert_eq!(keepalive(&accepted).unwrap(), setting);
        }
        assert_eq!(PROBES.user_timeout(), Duration::from_secs(7 + 3 * 4));
    }

    #[test]
    fn keepalive_turns_on_and_off() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        assert_eq!(keepalive(&stream).unwrap(), None);
        set_keepalive(&stream, Some(PROBES)).unwrap();
        assert_eq!(keepalive(&stream).unwrap(), Some(PROBES));
        set_keepalive(&stream, None).unwrap();
        assert_eq!(keepalive(&stream).unwrap(), None);
    }

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
