//! systemd readiness notification (sd_notify), without libsystemd.
//!
//! The protocol is one datagram of `KEY=VALUE` lines sent to the Unix socket
//! named in `NOTIFY_SOCKET` (a path, or an abstract name when it starts with
//! `@`). The relay sends `READY=1` once its listeners are bound,
//! `RELOADING=1` with `MONOTONIC_USEC` before a reload and `READY=1` after
//! it (what `Type=notify-reload` expects), and `STOPPING=1` when it starts
//! to drain (not after a binary hand-over: `READY=1` carries `MAINPID`, so
//! the new process is the unit's main one by then). `STATUS=` carries a
//! one-line human summary.
//!
//! Not here: socket activation (see [`crate::sockopt::take_activated_fds`]).
//!
//! Cost: one datagram per state change; when `NOTIFY_SOCKET` is unset every
//! call is a no-op. A failed send is logged at debug and otherwise ignored:
//! notification must never stop the relay.

use std::io;
use std::os::unix::net::{SocketAddr, UnixDatagram};

use crate::sockopt;

/// Where to send notifications, read once at start.
#[derive(Debug)]
pub(crate) struct Notifier {
    target: Option<(UnixDatagram, SocketAddr)>,
}

impl Notifier {
    /// Reads `NOTIFY_SOCKET`; no socket means every call does nothing.
    pub(crate) fn from_env() -> Notifier {
        let target = std::env::var_os("NOTIFY_SOCKET").and_then(|name| {
            let addr = match target_addr(name.as_encoded_bytes()) {
                Ok(addr) => addr,
                Err(error) => {
                    tracing::warn!(%error, "NOTIFY_SOCKET is unusable; not notifying systemd");
                    return None;
                }
            };
            let socket = UnixDatagram::unbound().ok()?;
            Some((socket, addr))
        });
        Notifier { target }
    }

    /// A notifier that never sends (tests, embedders).
    pub(crate) fn disabled() -> Notifier {
        Notifier { target: None }
    }

    fn send(&self, message: &str) {
        if let Some((socket, addr)) = &self.target
            && let Err(error) = socket.send_to_addr(message.as_bytes(), addr)
        {
            tracing::debug!(%error, "sd_notify failed");
        }
    }

    /// Listeners are bound and accepting.
    pub(crate) fn ready(&self, status: &str) {
        self.send(&format!(
            "READY=1\nSTATUS={}\nMAINPID={}",
            one_line(status),
            std::process::id()
        ));
    }

    /// A reload starts now.
    pub(crate) fn reloading(&self) {
        self.send(&format!(
            "RELOADING=1\nMONOTONIC_USEC={}\nSTATUS=reloading",
            sockopt::monotonic_usec()
        ));
    }

    /// Draining: no new connections.
    pub(crate) fn stopping(&self, status: &str) {
        self.send(&format!("STOPPING=1\nSTATUS={}", one_line(status)));
    }
}

fn one_line(text: &str) -> String {
    text.replace('\n', " ")
}

fn target_addr(name: &[u8]) -> io::Result<SocketAddr> {
    match name.split_first() {
        Some((b'@', abstract_name)) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(abstract_name)
        }
        Some((b'/', _)) => {
            use std::os::unix::ffi::OsStrExt;
            SocketAddr::from_pathname(std::ffi::OsStr::from_bytes(name))
        }
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "neither an absolute path nor an @abstract name",
        )),
    }
}

#[cfg(test)]
mod tests {
    use crate::run::notify::*;

    #[test]
    fn notifications_reach_a_path_socket() {
        let dir = std::env::temp_dir().join(format!("snirelay-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify");
        let _ = std::fs::remove_file(&path);
        let server = UnixDatagram::bind(&path).unwrap();
        let notifier = Notifier {
            target: Some((
                UnixDatagram::unbound().unwrap(),
                target_addr(path.as_os_str().as_encoded_bytes()).unwrap(),
            )),
        };
        notifier.reloading();
        let mut buf = [0u8; 256];
        let n = server.recv(&mut buf).unwrap();
        let text = std::str::from_utf8(&buf[..n]).unwrap();
        assert!(text.starts_with("RELOADING=1\nMONOTONIC_USEC="), "{text}");
        let usec: u64 = text.lines().nth(1).unwrap()["MONOTONIC_USEC=".len()..]
            .parse()
            .unwrap();
        assert!(usec > 0);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn relative_names_are_refused() {
        assert!(target_addr(b"notify").is_err());
        assert!(target_addr(b"").is_err());
        assert!(target_addr(b"@abstract").is_ok());
    }
}
