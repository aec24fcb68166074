//! Listening sockets: binding a listener's addresses, and the pool of
//! sockets inherited at start from systemd (socket activation) or from the
//! process this one replaces (`takeover`).
//!
//! A socket is known across reloads and handoffs by its [`BindKey`]: the
//! address as configured (port 0 included, so a test's ephemeral port
//! survives a reload), or the address of a socket systemd passed. At start
//! a listener takes systemd's sockets for its name if there are any (they
//! replace `listen`), else per address the previous process's socket, else
//! a freshly bound one ([`open_at_start`]). systemd's sockets are told
//! apart by type (SO_TYPE): a tcp listener takes stream sockets
//! (`ListenStream=`), a quic listener datagram sockets (`ListenDatagram=`,
//! [`take_activated_udp`]); a socket of the other type under a listener's
//! name stops the start ([`BindError::WrongType`]).
//!
//! Not here: the socket options themselves (`sockopt`), the descriptor
//! passing ([`crate::run::takeover`]), or accepting ([`crate::tcp::accept_loop`],
//! [`crate::run::listener_set`]).

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::str::FromStr;

use crate::config::{Listener, Protocol};
use crate::{run::takeover, sockopt};

/// Why a listener's sockets could not be had.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BindError {
    #[error("listener {listener:?}: cannot listen on {addr}: {source}")]
    Bind {
        listener: String,
        addr: SocketAddr,
        source: io::Error,
    },
    #[error("listener {listener:?}: inherited socket {key} is unusable: {source}")]
    Inherited {
        listener: String,
        key: String,
        source: io::Error,
    },
    #[error(
        "listener {listener:?} has protocol = \"{protocol}\", but systemd passed it a {passed} socket on {addr} \
         ({unit_key} in its socket unit): a tcp listener takes ListenStream= sockets, a quic listener ListenDatagram= ones"
    )]
    WrongType {
        listener: String,
        protocol: &'static str,
        passed: &'static str,
        addr: SocketAddr,
        unit_key: &'static str,
    },
}

/// Identifies one listening socket of a listener across reloads and
/// handoffs: the configured address (port 0 included, so a test's
/// ephemeral port survives), or the address of a socket systemd passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum BindKey {
    Config(SocketAddr),
    Activated(SocketAddr),
}

impl BindKey {
    /// The address the key names.
    pub(crate) fn addr(self) -> SocketAddr {
        match self {
            BindKey::Config(a) | BindKey::Activated(a) => a,
        }
    }
}

impl fmt::Display for BindKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BindKey::Config(a) => write!(f, "config {a}"),
            BindKey::Activated(a) => write!(f, "activated {a}"),
        }
    }
}

impl FromStr for BindKey {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        match s.split_once(' ') {
            Some(("config", a)) => a.parse().map(BindKey::Config).map_err(drop),
            Some(("activated", a)) => a.parse().map(BindKey::Activated).map_err(drop),
            _ => Err(()),
        }
    }
}

/// A listener's sockets, each with its key.
pub(crate) type Sockets = Vec<(BindKey, std::net::TcpListener)>;

/// Sockets inherited at start, not yet claimed by a listener.
#[derive(Default)]
pub(crate) struct Pool {
    sockets: Vec<(String, BindKey, std::net::TcpListener)>,
    /// systemd's datagram sockets (`ListenDatagram=`), for quic listeners.
    /// (A previous process's UDP sockets are handed to the QUIC listeners
    /// with their forwarding channels, see `Listeners::inherit_udp`.)
    datagrams: Vec<(String, BindKey, std::net::UdpSocket)>,
}

impl Pool {
    /// Turns systemd's and the previous process's descriptors into a pool
    /// of checked listening sockets.
    pub(crate) fn inherit(
        activated: Vec<sockopt::ActivatedFd>,
        takeover_from: Option<&mut takeover::Incoming>,
    ) -> Result<Pool, BindError> {
        let mut pool = Pool::default();
        for activated in activated {
            let unusable = |source| BindError::Inherited {
                listener: activated.name.clone(),
                key: "from systemd".into(),
                source,
            };
            let socket = sockopt::adopt_activated(activated.fd).map_err(unusable)?;
            let key = BindKey::Activated(socket.local_addr().map_err(unusable)?);
            let name = takeover::escape(&activated.name);
            match socket {
                sockopt::ActivatedSocket::Stream(socket) => pool.sockets.push((name, key, socket)),
                sockopt::ActivatedSocket::Datagram(socket) => {
                    pool.datagrams.push((name, key, socket))
                }
            }
        }
        if let Some(incoming) = takeover_from {
            for received in incoming.sockets.drain(..) {
                let unusable = |source| BindError::Inherited {
                    listener: received.listener.clone(),
                    key: received.key.clone(),
                    source,
                };
                let key = received.key.parse::<BindKey>().map_err(|()| {
                    unusable(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "unknown bind key",
                    ))
                })?;
                let socket = sockopt::adopt_listener(received.fd).map_err(unusable)?;
                pool.sockets.push((received.listener, key, socket));
            }
        }
        Ok(pool)
    }

    fn take(&mut self, listener: &str, key: BindKey) -> Option<std::net::TcpListener> {
        let name = takeover::escape(listener);
        let at = self
            .sockets
            .iter()
            .position(|(l, k, _)| *l == name && *k == key)?;
        Some(self.sockets.swap_remove(at).2)
    }

    fn take_activated(&mut self, listener: &str) -> Sockets {
        let name = takeover::escape(listener);
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.sockets.len() {
            let (l, k, _) = &self.sockets[i];
            if *l == name && matches!(k, BindKey::Activated(_)) {
                let (_, k, s) = self.sockets.swap_remove(i);
                out.push((k, s));
            } else {
                i += 1;
            }
        }
        out.sort_by_key(|(k, _)| *k);
        out
    }

    /// Closes what no listener claimed, saying so.
    pub(crate) fn close_unclaimed(&mut self) {
        let datagrams = self.datagrams.drain(..).map(|(l, k, _)| (l, k));
        for (listener, key) in self
            .sockets
            .drain(..)
            .map(|(l, k, _)| (l, k))
            .chain(datagrams)
        {
            tracing::warn!(listener = %listener, socket = %key, "inherited socket matches no listener; closing it");
        }
    }

    /// The first socket systemd passed for `listener` of the type the
    /// listener does not take, as the error that stops the start.
    fn wrong_type(&self, listener: &Listener) -> Option<BindError> {
        let name = takeover::escape(&listener.name);
        let (passed, unit_key, addr) = match listener.protocol {
            Protocol::Tcp => self
                .datagrams
                .iter()
                .find(|(l, _, _)| *l == name)
                .map(|(_, k, _)| ("datagram", "ListenDatagram=", k.addr()))?,
            Protocol::Quic => self
                .sockets
                .iter()
                .find(|(l, k, _)| *l == name && matches!(k, BindKey::Activated(_)))
                .map(|(_, k, _)| ("stream", "ListenStream=", k.addr()))?,
        };
        Some(BindError::WrongType {
            listener: listener.name.clone(),
            protocol: listener.protocol.as_str(),
            passed,
            addr,
            unit_key,
        })
    }
}

/// The datagram sockets systemd passed for a quic `listener` (they replace
/// its `listen`), sorted by address; none when systemd passed none for its
/// name. A stream socket under its name is an error.
pub(crate) fn take_activated_udp(
    pool: &mut Pool,
    listener: &Listener,
) -> Result<Vec<(BindKey, std::net::UdpSocket)>, BindError> {
    if let Some(error) = pool.wrong_type(listener) {
        return Err(error);
    }
    let name = takeover::escape(&listener.name);
    let mut out = Vec::new();
    let mut i = 0;
    while i < pool.datagrams.len() {
        if pool.datagrams[i].0 == name {
            let (_, key, socket) = pool.datagrams.swap_remove(i);
            out.push((key, socket));
        } else {
            i += 1;
        }
    }
    out.sort_by_key(|(k, _)| *k);
    Ok(out)
}

/// The sockets of one listener at start, and whether they came from
/// systemd: systemd's for this name if any (they replace `listen`), else
/// per address the previous process's, else freshly bound.
pub(crate) fn open_at_start(
    pool: &mut Pool,
    listener: &Listener,
) -> Result<(Sockets, bool), BindError> {
    if let Some(error) = pool.wrong_type(listener) {
        return Err(error);
    }
    let activated = pool.take_activated(&listener.name);
    if !activated.is_empty() {
        return Ok((activated, true));
    }
    let mut sockets = Vec::new();
    for &addr in &listener.listen {
        let key = BindKey::Config(addr);
        let socket = match pool.take(&listener.name, key) {
            Some(socket) => socket,
            None => bind(listener, addr)?,
        };
        sockets.push((key, socket));
    }
    Ok((sockets, false))
}

/// Binds one of `listener`'s addresses with its socket options.
pub(crate) fn bind(
    listener: &Listener,
    addr: SocketAddr,
) -> Result<std::net::TcpListener, BindError> {
    sockopt::bind_listener_with(addr, listener.backlog, listener.reuse_port).map_err(|source| {
        BindError::Bind {
            listener: listener.name.clone(),
            addr,
            source,
        }
    })
}

#[cfg(test)]
mod tests {
    use crate::run::bind::*;

    #[test]
    fn bind_keys_round_trip_through_their_text_form() {
        for key in [
            BindKey::Config("127.0.0.1:0".parse().unwrap()),
            BindKey::Config("[::1]:443".parse().unwrap()),
            BindKey::Activated("0.0.0.0:443".parse().unwrap()),
        ] {
            assert_eq!(key.to_string().parse::<BindKey>(), Ok(key));
        }
        assert!("config".parse::<BindKey>().is_err());
        assert!("bound 127.0.0.1:1".parse::<BindKey>().is_err());
        assert!("config 127.0.0.1".parse::<BindKey>().is_err());
    }
}
