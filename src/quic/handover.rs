//! A QUIC listening socket across a binary upgrade: who reads it, and how
//! the datagrams of the other process's flows reach that process.
//!
//! The old process hands its UDP socket to the new one (`takeover`), so
//! both hold the *same* kernel socket: each datagram is read by whichever
//! process reads first. Two readers would split every flow's datagrams
//! between them: the new process would take datagrams of the old one's
//! open flows for new flows (short headers, `not_quic`) and the old one
//! would drop those of new flows. So there is one reader at a time:
//!
//! - the old process keeps reading the socket while it drains, relays its
//!   own flows (pending and open) as before, and forwards every datagram of
//!   a flow it does not hold, with its client address, over a Unix
//!   SOCK_SEQPACKET channel ([`Successor`]) handed over with the socket,
//!   from the moment the new process says it is ready (before the old
//!   one starts draining: a flow it started before then stays its own);
//! - the new process reads that channel ([`Predecessor`]) instead of the
//!   socket, and serves what arrives exactly as a datagram read from it
//!   (its answers go out on the shared socket directly);
//! - when the old process's last flow has ended (idle, or at its
//!   `drain_timeout`), its socket task ends and the channel closes; the new
//!   process sees end-of-file and reads the socket itself from then on.
//!   Datagrams that arrive in between wait in the socket's receive queue.
//!
//! So a flow that keeps sending within the old process's drain window
//! loses nothing to the upgrade, and a new flow is served by the new
//! process from its first datagram. A chain of upgrades composes: a
//! process that is both reads its predecessor's channel, forwards what is
//! not its own to its successor, and ends only once its predecessor has.
//!
//! Wire: one message per datagram, [`HEADER`] bytes (address family 4 or
//! 6, 16 address bytes, port, big-endian) then the payload. A message the
//! channel cannot take now is dropped, as the network would drop it.
//! Neither std nor tokio has a SOCK_SEQPACKET type, so the channel is held
//! as their Unix *datagram* socket type: it issues the same send and recv
//! calls, which a SEQPACKET socket answers the same way, except that recv
//! gives 0 bytes at end-of-file (every message here has a header, so 0
//! means only that).
//!
//! Cost: none outside an upgrade but one mutex check per datagram of an
//! unknown client (a new flow). During one, a forwarded datagram costs the
//! old process a receive, a copy behind the header and a send, and the new
//! one a receive.
//!
//! Not here: passing descriptors (`takeover`, `sockopt`), which sockets
//! are handed over ([`crate::run::listener_set`]), what a datagram does
//! ([`crate::quic::socket_task`]).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixDatagram;
use std::sync::{Arc, Mutex};

use crate::sockopt;

/// Bytes before a forwarded datagram: family, address, port.
pub(crate) const HEADER: usize = 1 + 16 + 2;

/// The old process's side: where datagrams of flows it does not hold go
/// once it drains. Empty until a binary upgrade hands the socket over.
#[derive(Debug, Default)]
pub(crate) struct Successor {
    channel: Mutex<Channel>,
}

/// A successor's channel: sent with the socket, then in use once the new
/// process is ready.
#[derive(Debug, Default)]
struct Channel {
    offered: Option<UnixDatagram>,
    ready: Option<UnixDatagram>,
}

impl Successor {
    /// Makes a channel for a handover: this side keeps one end, the other
    /// is sent with the socket. Nothing goes through it before
    /// [`Successor::ready`].
    pub(crate) fn open(&self) -> io::Result<OwnedFd> {
        let (ours, theirs) = sockopt::seqpacket_pair()?;
        self.lock().offered = Some(UnixDatagram::from(ours));
        Ok(theirs)
    }

    /// The new process is ready: from now on every datagram of a client
    /// this process holds no flow for is forwarded. Set before this
    /// process starts its drain, so no new flow starts here after it.
    pub(crate) fn ready(&self) {
        let mut channel = self.lock();
        if let Some(offered) = channel.offered.take() {
            channel.ready = Some(offered);
        }
    }

    /// Forgets an offered channel (the handover was abandoned: the new
    /// process is gone or never became ready).
    pub(crate) fn close(&self) {
        self.lock().offered = None;
    }

    /// Forwards one datagram from `from`; false when no successor is
    /// ready (the caller then treats it as its own).
    pub(crate) fn forward(&self, from: SocketAddr, datagram: &[u8]) -> bool {
        let channel = self.lock();
        let Some(channel) = channel.ready.as_ref() else {
            return false;
        };
        let mut message = Vec::with_capacity(HEADER + datagram.len());
        message.extend_from_slice(&encode(from));
        message.extend_from_slice(datagram);
        // Full (the new process is behind) or gone: dropped, as UDP would.
        let _ = channel.send(&message);
        true
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Channel> {
        self.channel.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The new process's side: the channel its predecessor forwards on.
#[derive(Debug)]
pub(crate) struct Predecessor {
    channel: tokio::net::UnixDatagram,
}

impl Predecessor {
    /// Adopts the channel received with a UDP socket.
    pub(crate) fn adopt(fd: OwnedFd) -> io::Result<Predecessor> {
        let socket = UnixDatagram::from(sockopt::adopt_seqpacket(fd)?);
        Ok(Predecessor {
            channel: tokio::net::UnixDatagram::from_std(socket)?,
        })
    }

    /// The next forwarded datagram, written to `buf` (at least [`HEADER`]
    /// bytes more than the largest datagram): its client and where its
    /// payload ends in `buf` (it starts at [`HEADER`]). `None` once the
    /// predecessor has closed the channel (or it failed): read the
    /// socket from now on.
    pub(crate) async fn recv(&self, buf: &mut [u8]) -> Option<(SocketAddr, usize)> {
        loop {
            match self.channel.recv(buf).await {
                Ok(0) => return None,
                Ok(len) => match decode(&buf[..len]) {
                    Some(from) => return Some((from, len)),
                    // Not a forwarded datagram: skipped.
                    None => continue,
                },
                Err(error) => {
                    tracing::debug!(%error, "cannot read the previous process's forwarded datagrams");
                    return None;
                }
            }
        }
    }
}

/// Every QUIC socket's part in an upgrade: the channel it reads first,
/// if it was handed over, and where it forwards once it is replaced.
#[derive(Debug, Default)]
pub(crate) struct Handover {
    pub predecessor: Option<Predecessor>,
    pub successor: Arc<Successor>,
}

fn encode(from: SocketAddr) -> [u8; HEADER] {
    let mut header = [0u8; HEADER];
    match from.ip() {
        IpAddr::V4(ip) => {
            header[0] = 4;
            header[1..5].copy_from_slice(&ip.octets());
        }
        IpAddr::V6(ip) => {
            header[0] = 6;
            header[1..17].copy_from_slice(&ip.octets());
        }
    }
    header[17..19].copy_from_slice(&from.port().to_be_bytes());
    header
}

fn decode(message: &[u8]) -> Option<SocketAddr> {
    let header = message.get(..HEADER)?;
    let port = u16::from_be_bytes([header[17], header[18]]);
    let ip = match header[0] {
        4 => IpAddr::V4(Ipv4Addr::new(header[1], header[2], header[3], header[4])),
        6 => IpAddr::V6(Ipv6Addr::from(
            <[u8; 16]>::try_from(&header[1..17]).expect("16 bytes"),
        )),
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn datagrams_cross_with_their_client_until_the_old_side_closes() {
        let successor = Successor::default();
        let v4: SocketAddr = "192.0.2.7:4433".parse().unwrap();
        let v6: SocketAddr = "[2001:db8::1]:443".parse().unwrap();
        assert!(!successor.forward(v4, b"nobody yet"));
        let predecessor = Predecessor::adopt(successor.open().unwrap()).unwrap();
        assert!(!successor.forward(v4, b"not ready yet"));
        successor.ready();
        assert!(successor.forward(v4, b"first"));
        assert!(successor.forward(v6, &[0xc0; 1350]));
        let mut buf = vec![0u8; HEADER + 65_535];
        let (from, end) = predecessor.recv(&mut buf).await.unwrap();
        assert_eq!((from, &buf[HEADER..end]), (v4, &b"first"[..]));
        let (from, end) = predecessor.recv(&mut buf).await.unwrap();
        assert_eq!((from, &buf[HEADER..end]), (v6, &[0xc0; 1350][..]));
        // The old side's end closes with it (here: a new offer replaces
        // nothing in use, so drop the whole successor).
        drop(successor);
        assert!(predecessor.recv(&mut buf).await.is_none());
    }

    #[test]
    fn a_short_or_unknown_header_is_no_address() {
        assert_eq!(decode(&[4; HEADER - 1]), None);
        assert_eq!(decode(&[9; HEADER]), None);
    }
}
