//! The calls on a relayed TCP stream, client or backend: TCP_NODELAY
//! ([`set_nodelay`]), SO_RCVLOWAT while a client trickles its hello
//! ([`set_recv_lowat`]), a read and a write that do not wait for the event
//! loop ([`recv_now`], [`send_now`]), the relay's one flagged write
//! ([`try_write_before_fin`], MSG_MORE, so a direction's last bytes and
//! its FIN share a segment), whether a peer's FIN is queued
//! ([`fin_queued`]) and a half close ([`shutdown_write`]).
//!
//! Not here: the byte pump that makes these calls ([`crate::pump`]);
//! opening a backend socket ([`super::connect`]); keepalive
//! ([`super::keepalive`]).

use std::io;

// The macro names `libc` and itself unqualified.
use nix::{libc, setsockopt_impl, sockopt_impl};

/// Disables Nagle's algorithm on a relayed socket. Client sockets need no
/// call: listening sockets get TCP_NODELAY and accepted ones inherit it.
pub(crate) fn set_nodelay(stream: &tokio::net::TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)
}

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
/// receive buffer is under pressure). [`crate::tcp::inspect`] uses it
/// while a client trickles its hello, and sets it back to 1 before
/// relaying.
pub(crate) fn set_recv_lowat(stream: &tokio::net::TcpStream, bytes: usize) -> io::Result<()> {
    nix::sys::socket::setsockopt(stream, RecvLowat, &bytes.max(1)).map_err(io::Error::from)
}

/// One send(2) on `stream` now, whatever readiness the runtime holds for it
/// (a socket [`super::connect::start_connect`] found connected has none yet: tokio's own
/// writes would wait for the event loop to report it writable). No SIGPIPE.
pub(crate) fn send_now(stream: &tokio::net::TcpStream, bytes: &[u8]) -> io::Result<usize> {
    socket2::SockRef::from(stream).send_with_flags(bytes, nix::libc::MSG_NOSIGNAL)
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

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
}
