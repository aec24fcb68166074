//! Binary upgrade by listening-socket handoff: `snirelay run --takeover PATH`.
//!
//! The running relay listens on the Unix socket PATH. A new relay started
//! with the same `--takeover PATH` connects there before binding anything;
//! the old one sends every listening socket it has, each with its listener
//! name and bind key, as SCM_RIGHTS descriptors in one message. The new
//! relay adopts the sockets whose listener and address its own config still
//! has (binding the others fresh, closing the leftovers), starts accepting,
//! and writes `ready`. Only then does the old relay stop accepting and drain
//! as on SIGTERM; the new one takes over PATH for the next upgrade.
//!
//! Why a handoff rather than two sockets with SO_REUSEPORT: both processes
//! accept from the *same* kernel socket, so no connection waits in a queue
//! that is about to be closed. With SO_REUSEPORT each process has its own
//! accept queue and Linux resets the connections still queued on the old
//! one when it closes (unless `net.ipv4.tcp_migrate_req` is set).
//!
//! When nobody listens on PATH (first start, or the old relay is gone) the
//! new relay simply binds its sockets. If the new relay fails before
//! `ready`, the old one notices the closed connection and keeps serving.
//!
//! Wire format (version line, one line per descriptor in descriptor order,
//! `end`; names are `escape_default`-escaped so tabs and newlines cannot
//! break the framing):
//!
//! ```text
//! snirelay-takeover 1
//! <listener>\t<bind key>
//! end
//! ```
//!
//! The old process's side is [`offer`], [`next_request`] and [`hand_over`];
//! the new one's is [`receive`] and [`Incoming::ready`].
//!
//! The admin listener's TCP socket travels too, as the entry [`ADMIN`]: the
//! new relay adopts it when its `[admin] listen` is the same address (it
//! could not bind it while the old one holds it), and the old relay stops
//! serving admin requests once replaced.
//!
//! The UDP sockets of `protocol = "quic"` listeners travel too, keyed
//! [`UDP`] + bind key, each with a Unix SOCK_SEQPACKET socket keyed
//! [`UDP_FORWARD`] + the same bind key (later in the same message): until the old process lets go of
//! the UDP socket (its last flow ended), it alone reads it and forwards
//! what is not its own through that channel ([`crate::quic::handover`]).
//!
//! Not here: the descriptor passing syscalls (`sockopt`), serving, or
//! which sockets there are ([`crate::run::listener_set`]).

use std::io::{self, Read, Write};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use crate::sockopt;

const VERSION_LINE: &str = "snirelay-takeover 1";
const END_LINE: &str = "end";
const READY: &[u8] = b"ready\n";
/// Bound on the handoff message; far above any real listener list.
const MAX_MESSAGE: usize = 256 * 1024;
/// How long the new relay waits for the old one to send its sockets.
const RECEIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the old relay waits for `ready` before it gives up and keeps serving.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A listening socket received from the previous process.
#[derive(Debug)]
pub(crate) struct Received {
    /// The listener name, escaped as on the wire.
    pub listener: String,
    /// The bind key (see `server::BindKey`'s text form).
    pub key: String,
    /// The listening socket itself.
    pub fd: OwnedFd,
}

/// The new process's side of a handoff in progress.
#[derive(Debug)]
pub(crate) struct Incoming {
    /// The sockets received, one per bind key.
    pub sockets: Vec<Received>,
    stream: UnixStream,
}

#[allow(missing_docs)] // each variant's #[error] text documents it
#[derive(Debug, thiserror::Error)]
pub(crate) enum TakeoverError {
    #[error("takeover socket {path}: {source}")]
    Io { path: String, source: io::Error },
    #[error("takeover socket {path}: malformed handoff message: {why}")]
    Protocol { path: String, why: String },
}

/// The wire name of the admin listener's TCP socket, handed over with the
/// relay's listeners (its key is the address it is bound to) so the new
/// process does not fail binding an address the old one still holds.
/// [`escape`] doubles every backslash of a real listener name, so no
/// listener can appear on the wire as `\admin`.
pub(crate) const ADMIN: &str = r"\admin";

// Binary upgrade of QUIC listeners.
/// Key prefix of a QUIC listener's UDP socket on the wire (`udp config
/// 127.0.0.1:443`): such entries are not TCP listening sockets, and the
/// new process takes them out ([`Incoming::take_keyed`]) before adopting
/// the rest.
pub(crate) const UDP: &str = "udp ";
/// Key prefix of the Unix SOCK_SEQPACKET socket that goes with a UDP
/// socket (`udp-forward config 127.0.0.1:443`): the old process forwards
/// the socket's datagrams of flows it does not hold through it until it
/// lets go of the socket (see [`crate::quic::handover`]).
pub(crate) const UDP_FORWARD: &str = "udp-forward ";

/// Escapes a listener name for the wire.
pub(crate) fn escape(name: &str) -> String {
    name.escape_default().to_string()
}

/// Connects to the relay serving PATH and receives its listening sockets.
/// `Ok(None)` when no relay listens there.
pub(crate) fn receive(path: &Path) -> Result<Option<Incoming>, TakeoverError> {
    let io_err = |source| TakeoverError::Io {
        path: path.display().to_string(),
        source,
    };
    let stream = match UnixStream::connect(path) {
        Ok(stream) => stream,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(io_err(e)),
    };
    stream
        .set_read_timeout(Some(RECEIVE_TIMEOUT))
        .map_err(io_err)?;
    let mut text = Vec::new();
    let mut fds = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    while !text.ends_with(format!("\n{END_LINE}\n").as_bytes()) {
        let (n, more) = sockopt::recv_fds(&stream, &mut buf).map_err(io_err)?;
        if n == 0 {
            return Err(TakeoverError::Protocol {
                path: path.display().to_string(),
                why: "connection closed before the end line".into(),
            });
        }
        text.extend_from_slice(&buf[..n]);
        fds.extend(more);
        if text.len() > MAX_MESSAGE {
            return Err(TakeoverError::Protocol {
                path: path.display().to_string(),
                why: format!("longer than {MAX_MESSAGE} bytes"),
            });
        }
    }
    let sockets = parse(&text, fds).map_err(|why| TakeoverError::Protocol {
        path: path.display().to_string(),
        why,
    })?;
    Ok(Some(Incoming { sockets, stream }))
}

fn parse(text: &[u8], fds: Vec<OwnedFd>) -> Result<Vec<Received>, String> {
    let text = std::str::from_utf8(text).map_err(|_| "not UTF-8".to_owned())?;
    let mut lines = text.lines();
    if lines.next() != Some(VERSION_LINE) {
        return Err(format!("the first line is not {VERSION_LINE:?}"));
    }
    let entries: Vec<&str> = lines.take_while(|l| *l != END_LINE).collect();
    if entries.len() != fds.len() {
        return Err(format!(
            "{} sockets described but {} received",
            entries.len(),
            fds.len()
        ));
    }
    entries
        .into_iter()
        .zip(fds)
        .map(|(line, fd)| {
            let (listener, key) = line
                .split_once('\t')
                .ok_or_else(|| format!("line {line:?} has no tab"))?;
            Ok(Received {
                listener: listener.to_owned(),
                key: key.to_owned(),
                fd,
            })
        })
        .collect()
}

impl Incoming {
    /// Takes the admin listener's socket out of the handoff, returning it
    /// when it is bound to `addr` (this process's `[admin] listen`); one
    /// bound elsewhere is closed. Either way no entry named [`ADMIN`] is
    /// left for the relay's listeners.
    pub(crate) fn take_admin(&mut self, addr: Option<std::net::SocketAddr>) -> Option<OwnedFd> {
        let mut found = None;
        let mut i = 0;
        while i < self.sockets.len() {
            if self.sockets[i].listener == ADMIN {
                let received = self.sockets.swap_remove(i);
                if addr.is_some_and(|a| a.to_string() == received.key) {
                    found = Some(received.fd);
                }
            } else {
                i += 1;
            }
        }
        found
    }

    /// Takes out of the handoff every entry whose key starts with
    /// `prefix` ([`UDP`], [`UDP_FORWARD`]), with the prefix removed from
    /// its key.
    pub(crate) fn take_keyed(&mut self, prefix: &str) -> Vec<Received> {
        let mut taken = Vec::new();
        let mut i = 0;
        while i < self.sockets.len() {
            if self.sockets[i].key.starts_with(prefix) {
                let mut received = self.sockets.remove(i);
                received.key.drain(..prefix.len());
                taken.push(received);
            } else {
                i += 1;
            }
        }
        taken
    }

    /// Tells the old process that this one accepts now, so it may drain.
    pub(crate) fn ready(mut self) -> io::Result<()> {
        self.stream.write_all(READY)
    }
}

/// The old process's side: sends `sockets` (escaped listener name, bind
/// key, descriptor) over a connection from a new process.
pub(crate) fn send(
    stream: &UnixStream,
    sockets: &[(String, String, BorrowedFd<'_>)],
) -> io::Result<()> {
    if sockets.len() > sockopt::MAX_PASSED_FDS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} listening sockets; at most {} can be handed over",
                sockets.len(),
                sockopt::MAX_PASSED_FDS
            ),
        ));
    }
    let mut text = format!("{VERSION_LINE}\n");
    for (listener, key, _) in sockets {
        text.push_str(&format!("{listener}\t{key}\n"));
    }
    text.push_str(END_LINE);
    text.push('\n');
    let fds: Vec<BorrowedFd<'_>> = sockets.iter().map(|(_, _, fd)| *fd).collect();
    sockopt::send_fds(stream, text.as_bytes(), &fds)
}

/// Waits (blocking, bounded by [`READY_TIMEOUT`]) for the new process to
/// say `ready`. False when it closed or timed out instead.
pub(crate) fn wait_ready(mut stream: UnixStream) -> bool {
    if stream.set_read_timeout(Some(READY_TIMEOUT)).is_err() {
        return false;
    }
    let mut got = [0u8; READY.len()];
    stream.read_exact(&mut got).is_ok() && got == READY
}

/// The old process's listening side: offers this process's sockets at
/// `path` (owner only: whoever can connect can take the sockets).
pub(crate) fn offer(path: &Path) -> io::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let listener = tokio::net::UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    tracing::info!(path = %path.display(), "offering binary takeover");
    Ok(listener)
}

/// The next new process to ask for the sockets; pending forever when no
/// takeover is offered.
pub(crate) async fn next_request(
    offered: Option<&tokio::net::UnixListener>,
) -> io::Result<tokio::net::UnixStream> {
    match offered {
        Some(listener) => listener.accept().await.map(|(stream, _)| stream),
        None => std::future::pending().await,
    }
}

/// Sends `sockets` to the new process on `stream`, then waits (on a
/// blocking thread, bounded by [`READY_TIMEOUT`]) for it to say `ready`
/// and reports the outcome on `done`. False when nothing was sent.
pub(crate) fn hand_over(
    stream: tokio::net::UnixStream,
    sockets: &[(String, String, BorrowedFd<'_>)],
    done: tokio::sync::mpsc::Sender<bool>,
) -> bool {
    let sent = (|| {
        let stream = stream.into_std()?;
        stream.set_nonblocking(false)?;
        stream.set_write_timeout(Some(Duration::from_secs(5)))?;
        send(&stream, sockets)?;
        tracing::info!(
            sockets = sockets.len(),
            "handed the listening sockets to a new process; waiting for it to be ready"
        );
        io::Result::Ok(stream)
    })();
    match sent {
        Ok(stream) => {
            tokio::task::spawn_blocking(move || {
                let ok = wait_ready(stream);
                let _ = done.blocking_send(ok);
            });
            true
        }
        Err(error) => {
            tracing::warn!(%error, "binary takeover failed while sending the sockets");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::run::takeover::*;
    use std::os::fd::AsFd;

    #[test]
    fn sockets_survive_the_round_trip_with_their_names() {
        let (old, new) = UnixStream::pair().unwrap();
        let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let sockets = [
            (escape("tls"), "config 127.0.0.1:0".to_owned(), a.as_fd()),
            (
                escape("we\tird"),
                "config 127.0.0.1:0".to_owned(),
                b.as_fd(),
            ),
        ];
        send(&old, &sockets).unwrap();
        let mut buf = vec![0u8; 4096];
        let (n, fds) = sockopt::recv_fds(&new, &mut buf).unwrap();
        let received = parse(&buf[..n], fds).unwrap();
        assert_eq!(received.len(), 2);
        assert_eq!(received[1].listener, "we\\tird");
        let adopted = sockopt::adopt_listener(received[0].fd.try_clone().unwrap()).unwrap();
        assert_eq!(adopted.local_addr().unwrap(), a.local_addr().unwrap());
    }

    #[test]
    fn a_count_mismatch_is_refused() {
        let text = format!("{VERSION_LINE}\ntls\tconfig 127.0.0.1:1\n{END_LINE}\n");
        assert!(parse(text.as_bytes(), Vec::new()).is_err());
        assert!(parse(b"hello\nend\n", Vec::new()).is_err());
    }
}
