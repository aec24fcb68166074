//! What failed when a relayed socket errs: which peer ([`RelayPeer`]), in
//! which operation ([`At`]: reading it, writing to it, or passing the other
//! side's FIN on), whether the error shows that the peer had sent FIN
//! before it reset ([`fin_before_reset`]), and whether it stopped answering
//! instead (keepalive probes or retransmissions timed out, see
//! [`crate::sockopt::is_peer_timeout`]). A [`RelayFailure`] carries all of
//! it, and names the close reason it ends the connection with
//! ([`RelayFailure::reason`]): `client_reset`, `backend_reset`,
//! `client_keepalive` or `backend_keepalive`.
//!
//! Linux tells a reset after the peer's FIN (EPIPE) from one before
//! (ECONNRESET); a read returns what arrived before a reset first, so a
//! failed read never follows a FIN. The tests here pin those errors.
//!
//! Not here: whether a failure ends the connection at all (a reset that
//! cuts nothing is excused: [`super::half_close`]), or the relay that
//! meets them ([`super::direction`], [`super::relay`]).

use std::io;

use tokio::net::TcpStream;

use crate::close_reason::CloseReason;
use crate::sockopt;

/// Which peer of a relayed connection failed.
#[derive(Debug, Clone, Copy)]
pub(super) enum RelayPeer {
    Client,
    Backend,
}

/// What failed on a peer's socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum At {
    /// Reading what the peer sent. Every byte read before it was delivered
    /// (a burst writes what it read before it reads again).
    Read,
    /// Writing to the peer.
    Write,
    /// Passing the other side's FIN on to the peer (shutdown(2)).
    Shutdown,
}

/// A peer's failure: whether the error says that the peer had sent FIN
/// before it reset (see [`fin_before_reset`]), and whether it stopped
/// answering instead (keepalive probes or retransmissions timed out, see
/// [`crate::sockopt::is_peer_timeout`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct RelayFailure {
    pub(super) peer: RelayPeer,
    pub(super) at: At,
    pub(super) after_fin: bool,
    pub(super) timed_out: bool,
}

impl RelayFailure {
    /// Reading `peer` failed with `error`. A read returns what the peer
    /// sent and then its FIN before any reset, so a failed read never
    /// follows a FIN.
    pub(super) fn read(peer: RelayPeer, error: &io::Error) -> RelayFailure {
        RelayFailure {
            peer,
            at: At::Read,
            after_fin: false,
            timed_out: sockopt::is_peer_timeout(error),
        }
    }

    /// Writing (`At::Write`) or shutting down writing (`At::Shutdown`) to
    /// `peer` on `stream` failed with `error`.
    pub(super) fn write(
        peer: RelayPeer,
        at: At,
        stream: &TcpStream,
        error: &io::Error,
    ) -> RelayFailure {
        RelayFailure {
            peer,
            at,
            after_fin: fin_before_reset(stream, error),
            timed_out: sockopt::is_peer_timeout(error),
        }
    }

    /// The close reason when this failure ends the connection.
    pub(super) fn reason(self) -> CloseReason {
        match (self.peer, self.timed_out) {
            (RelayPeer::Client, false) => CloseReason::ClientReset,
            (RelayPeer::Backend, false) => CloseReason::BackendReset,
            (RelayPeer::Client, true) => CloseReason::ClientKeepalive,
            (RelayPeer::Backend, true) => CloseReason::BackendKeepalive,
        }
    }
}

/// Whether a failed write (or shutdown) toward a peer shows that the peer's
/// FIN reached us before its reset. Linux records a reset as EPIPE on a
/// socket that had received FIN (CLOSE_WAIT) and as ECONNRESET otherwise;
/// the first call to meet it consumes it. A write returns it as its error;
/// shutdown(2) fails with ENOTCONN and leaves it pending in SO_ERROR. Any
/// other error, or none recorded, counts as a reset before FIN.
fn fin_before_reset(stream: &TcpStream, error: &io::Error) -> bool {
    match error.kind() {
        io::ErrorKind::BrokenPipe => true,
        io::ErrorKind::NotConnected => {
            matches!(stream.take_error(), Ok(Some(e)) if e.kind() == io::ErrorKind::BrokenPipe)
        }
        _ => false,
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    use std::time::Duration;

    use tokio::io::Interest;
    use tokio::net::TcpListener;

    /// A connected pair on loopback: (ours, the peer).
    pub(in crate::pump) async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let ours = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (peer, _) = listener.accept().await.unwrap();
        (ours, peer)
    }

    /// The peer sends `tail`, then FIN if `fin`, then resets; returns once
    /// our socket has the reset.
    pub(in crate::pump) async fn peer_resets(
        ours: &TcpStream,
        peer: TcpStream,
        tail: &[u8],
        fin: bool,
    ) {
        peer.try_write(tail).unwrap();
        if fin {
            sockopt::shutdown_write(&peer).unwrap();
        }
        socket2::SockRef::from(&peer)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(peer);
        ours.ready(Interest::ERROR).await.unwrap();
    }

    // What `fin_before_reset` relies on, pinned: Linux's errors after a
    // peer's reset, with its FIN (and data) still unread.
    #[tokio::test]
    async fn a_write_after_a_reset_that_followed_fin_is_broken_pipe() {
        let (ours, peer) = pair().await;
        peer_resets(&ours, peer, b"tail", true).await;
        let error = ours.try_write(b"close_notify").unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::BrokenPipe, "{error}");
        assert!(fin_before_reset(&ours, &error));
        // And what the peer sent before its FIN can still be delivered.
        let mut buf = [0u8; 16];
        assert_eq!(ours.try_read(&mut buf).unwrap(), 4);
        assert_eq!(&buf[..4], b"tail");
        assert_eq!(ours.try_read(&mut buf).unwrap(), 0);
    }

    #[tokio::test]
    async fn a_shutdown_after_a_reset_that_followed_fin_leaves_broken_pipe_pending() {
        let (ours, peer) = pair().await;
        peer_resets(&ours, peer, b"tail", true).await;
        let error = sockopt::shutdown_write(&ours).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::NotConnected, "{error}");
        assert!(fin_before_reset(&ours, &error));
    }

    #[tokio::test]
    async fn a_reset_without_fin_is_connection_reset() {
        let (ours, peer) = pair().await;
        peer_resets(&ours, peer, b"tail", false).await;
        let error = ours.try_write(b"more").unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::ConnectionReset, "{error}");
        assert!(!fin_before_reset(&ours, &error));

        // Reading gives what arrived before the reset, then the reset.
        let (ours, peer) = pair().await;
        peer_resets(&ours, peer, b"tail", false).await;
        let mut buf = [0u8; 16];
        assert_eq!(ours.try_read(&mut buf).unwrap(), 4);
        let error = ours.try_read(&mut buf).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::ConnectionReset, "{error}");

        // Once shutdown(2) has met it (and `fin_before_reset` consumed it),
        // what arrived is still read, then an end of stream.
        let (ours, peer) = pair().await;
        peer_resets(&ours, peer, b"tail", false).await;
        let error = sockopt::shutdown_write(&ours).unwrap_err();
        assert!(!fin_before_reset(&ours, &error));
        assert_eq!(ours.try_read(&mut buf).unwrap(), 4);
        assert_eq!(ours.try_read(&mut buf).unwrap(), 0);
    }
}
