//! The admin listener's sockets: the listening socket ([`AdminSocket`],
//! TCP or Unix) and what it accepts ([`AdminStream`], with who is on the
//! other end), and the stream as hyper sees it ([`Guarded`]): every read
//! and write bounded by the deadline of the connection's current phase,
//! which moves with the traffic (bytes read on an idle connection start a
//! request, a flushed response makes it idle).
//!
//! Not here: the accept loop and a connection's life ([`super::server`]),
//! the phases and their slot ([`super::table`]), or how long each phase
//! may take ([`super::limits`]).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::time::{Instant, Sleep};

use super::limits::{KEEP_ALIVE_TIMEOUT, REQUEST_TIMEOUT};
use super::peer::AdminPeer;
use super::table::{ConnectionSlot, IDLE, READING, RESPONDING};

/// The admin listening socket: TCP or Unix.
pub enum AdminSocket {
    /// A TCP listener (`listen = "IP:port"`).
    Tcp(TcpListener),
    /// A Unix stream socket (`listen = "unix:/path"`).
    Unix(UnixListener),
}

impl AdminSocket {
    pub(super) async fn accept(&self) -> io::Result<(AdminStream, AdminPeer)> {
        match self {
            AdminSocket::Tcp(l) => {
                let (s, peer) = l.accept().await?;
                Ok((AdminStream::Tcp(s), AdminPeer::Tcp(peer)))
            }
            AdminSocket::Unix(l) => {
                let (s, _) = l.accept().await?;
                let cred = s.peer_cred().ok();
                let peer = AdminPeer::Unix {
                    uid: cred.map(|c| c.uid()),
                    pid: cred.and_then(|c| c.pid()),
                };
                Ok((AdminStream::Unix(s), peer))
            }
        }
    }
}

/// An accepted admin connection.
pub(super) enum AdminStream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// The socket as hyper sees it, with the deadline of the connection's
/// current phase: a read or write that would wait past it fails with
/// `TimedOut`. The phase moves with the traffic: bytes read on an idle
/// connection start a request ([`REQUEST_TIMEOUT`]); a flush after the
/// response was written makes it idle ([`KEEP_ALIVE_TIMEOUT`]).
pub(super) struct Guarded {
    pub(super) stream: AdminStream,
    /// The first byte of a Unix stream, read before hyper took over.
    pub(super) replay: Option<u8>,
    pub(super) slot: Arc<ConnectionSlot>,
    pub(super) deadline: Pin<Box<Sleep>>,
    /// Response bytes written since the service answered.
    pub(super) wrote: bool,
}

impl Guarded {
    /// Polls the deadline (registering the waker while waiting on the
    /// socket); past it, the error that ends the connection.
    fn check_deadline(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        self.deadline.as_mut().poll(cx).is_ready().then(|| {
            let _ = self.slot.timed_out.compare_exchange(
                0,
                self.slot.state() + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            io::Error::new(io::ErrorKind::TimedOut, "admin connection deadline")
        })
    }

    fn restart(&mut self, state: u8, within: Duration) {
        self.slot.set(state);
        let deadline = Instant::now() + within;
        self.slot.set_deadline(deadline);
        self.deadline.as_mut().reset(deadline);
    }
}

impl AsyncRead for Guarded {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(byte) = this.replay.take() {
            buf.put_slice(&[byte]);
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        match this.stream.pin().poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before && this.slot.state() == IDLE {
                    this.restart(READING, REQUEST_TIMEOUT);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => match this.check_deadline(cx) {
                Some(error) => Poll::Ready(Err(error)),
                None => Poll::Pending,
            },
            other => other,
        }
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match this.stream.pin().poll_write(cx, buf) {
            Poll::Ready(Ok(n)) => {
                this.wrote |= n > 0;
                Poll::Ready(Ok(n))
            }
            Poll::Pending => match this.check_deadline(cx) {
                Some(error) => Poll::Ready(Err(error)),
                None => Poll::Pending,
            },
            other => other,
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let flushed = this.stream.pin().poll_flush(cx);
        if matches!(flushed, Poll::Ready(Ok(()))) && this.wrote && this.slot.state() == RESPONDING {
            this.wrote = false;
            this.restart(IDLE, KEEP_ALIVE_TIMEOUT);
        }
        flushed
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().stream.pin().poll_shutdown(cx)
    }
}

/// Either stream, as one `AsyncRead + AsyncWrite`.
enum Pinned<'a> {
    Tcp(Pin<&'a mut TcpStream>),
    Unix(Pin<&'a mut UnixStream>),
}

impl AdminStream {
    fn pin(&mut self) -> Pinned<'_> {
        match self {
            AdminStream::Tcp(s) => Pinned::Tcp(Pin::new(s)),
            AdminStream::Unix(s) => Pinned::Unix(Pin::new(s)),
        }
    }
}

impl Pinned<'_> {
    fn poll_read(self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self {
            Pinned::Tcp(s) => s.poll_read(cx, buf),
            Pinned::Unix(s) => s.poll_read(cx, buf),
        }
    }

    fn poll_write(self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self {
            Pinned::Tcp(s) => s.poll_write(cx, buf),
            Pinned::Unix(s) => s.poll_write(cx, buf),
        }
    }

    fn poll_flush(self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Pinned::Tcp(s) => s.poll_flush(cx),
            Pinned::Unix(s) => s.poll_flush(cx),
        }
    }

    fn poll_shutdown(self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Pinned::Tcp(s) => s.poll_shutdown(cx),
            Pinned::Unix(s) => s.poll_shutdown(cx),
        }
    }
}
