//! Backend sockets: a TCP socket opened and its connect started
//! ([`start_connect`], telling a loopback connect complete at once), a QUIC
//! flow's UDP socket ([`udp_connect`], asking for UDP GRO with
//! [`enable_udp_gro`]), each bound first as [`LocalBind`] says.
//!
//! A backend socket may be bound before its connect: to a `source` address
//! with IP_BIND_ADDRESS_NO_PORT (the port is picked per 4-tuple at connect
//! time, so one source address serves the whole port range toward every
//! destination) and optionally IP_LOCAL_PORT_RANGE, or to the client's
//! address and port with IP_TRANSPARENT (`source = "client"`). One
//! setsockopt(2) and a bind(2) more per connect when a `source` is set;
//! none otherwise. [`probe_source`] and [`probe_transparent`] check at
//! start-up that a `source` can be bound.
//!
//! Not here: the IP_LOCAL_PORT_RANGE call itself, which needs `unsafe`
//! ([`super::sys`]); choosing the backend address and source
//! ([`crate::backend::egress`], [`crate::tcp::dial`]); what a failed
//! connect means ([`super::errors`]).

use std::io;
use std::net::{IpAddr, SocketAddr};

use socket2::{Domain, Protocol, Socket, Type};

use super::sys::set_local_port_range;

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

/// Asks the kernel to coalesce datagrams of one source into one receive
/// (UDP_GRO, Linux 5.0 and later) on a QUIC flow's backend socket. An
/// error means the kernel cannot: the socket then reads one datagram per
/// slot, which changes nothing else.
pub(crate) fn enable_udp_gro(socket: &impl std::os::fd::AsFd) -> io::Result<()> {
    nix::sys::socket::setsockopt(socket, nix::sys::socket::sockopt::UdpGroSegment, &true)
        .map_err(io::Error::from)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sockopt::{is_local_connect_failure, is_source_exhausted};

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
}
