//! TCP keepalive: [`set_keepalive`] on a listening socket (whose accepted
//! sockets inherit it) or a backend socket, with TCP_USER_TIMEOUT at the
//! probes' horizon; [`KeepaliveSecs`], the settings in five bytes, carried
//! by a connection until [`KEEPALIVE_ARM_DELAY`] has passed.
//!
//! Not here: the settings themselves, plain data read from the
//! configuration ([`crate::config::settings`]); when a connection arms its
//! backend's keepalive ([`crate::pump::relay`]); telling a peer that
//! stopped answering from one that closed ([`super::errors`]).

use std::io;

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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::sockopt::bind_listener_with;

    const PROBES: Keepalive = Keepalive {
        idle: Duration::from_secs(7),
        interval: Duration::from_secs(3),
        count: 4,
    };

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
}
