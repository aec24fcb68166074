//! Where a backend's connections are made from: its `source` (or an
//! address entry's own), as the run time holds it. A TCP connect and a
//! QUIC flow's backend socket both ask [`EgressChoice::bind_each`] for the local
//! side to bind, and try one source after another within the same attempt.
//!
//! The table form (`source = { addresses, ports }`) spreads connections
//! over its addresses **round robin**, among those of the destination's
//! family. Round robin rather than least-used: what runs out on a source
//! address is its ports toward one destination, and the kernel picks that
//! port per 4-tuple at connect time (IP_BIND_ADDRESS_NO_PORT), so equal
//! shares use each source's port space equally; a least-used count would
//! need a guard held by every connection and released on close (a field in
//! each connection's task and an atomic on its close), where round robin
//! costs one atomic add per connect. An address whose bind or connect
//! finds no free port (EADDRNOTAVAIL, EADDRINUSE) is skipped for
//! [`COOLDOWN`] and the next one tried at once; each such event is counted
//! (`snirelay_source_address_exhausted_total{backend,source}`) and told in
//! a WARN at most once per [`WARN_INTERVAL`] per backend source set (with
//! the count since the last). None of this is the backend address's
//! fault, so passive health does not hear of it
//! ([`crate::sockopt::is_local_connect_failure`]). When every source of the family
//! has run out (or is cooling down) the attempt fails with the last such
//! error, and the connection goes on to the next planned backend address
//! or closes `connect_failed`.
//!
//! `source = "client"` binds to the client's own address and port
//! (IP_TRANSPARENT): the claimed address behind a trusted PROXY peer, as
//! HAProxy's `usesrc clientip` does behind `accept-proxy`, else the
//! measured peer.
//!
//! At start and at every reload ([`probe`]) each source address is bound
//! once on a scratch socket (port 0, no port reserved) so that an address
//! this host does not have is a start (or reload) error naming the key, not
//! a stream of failed connects; `ports` is set there too, so a kernel
//! without IP_LOCAL_PORT_RANGE (before 6.3) says so at start. A backend
//! with `source = "client"` needs CAP_NET_ADMIN or CAP_NET_RAW: the probe
//! sets IP_TRANSPARENT on a scratch socket and names the key and the
//! capability when that is refused.
//!
//! [`EgressChoice::connect_tcp`] makes a TCP connect from a source, for relayed
//! connections and health checks alike.
//!
//! Not here: the socket calls (`sockopt`), choosing the backend address
//! (`plan`), checking the key (`config::check`).

use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use tokio::net::TcpStream;

use crate::backend::endpoint::now_ms;
use crate::config::{Backend, Config, Egress as Setting, SourceAddresses};
use crate::metrics;
use crate::sockopt::{self, LocalBind};

/// How long a source address that ran out of ports is skipped.
pub(crate) const COOLDOWN: Duration = Duration::from_secs(1);

/// At most one WARN about exhausted source addresses per backend source
/// set per this interval.
pub(crate) const WARN_INTERVAL: Duration = Duration::from_secs(5);

/// A backend's egress, as its runtime holds it: the backend's own and the
/// address entries' overrides.
#[derive(Debug)]
pub(crate) struct EgressRuntime {
    backend: EgressChoice,
    /// Address entries with a `source` of their own (usually none).
    members: Box<[(SocketAddr, EgressChoice)]>,
}

impl EgressRuntime {
    /// The egress of `config` (fresh state: nothing cooling down).
    pub(crate) fn new(config: &Backend) -> EgressRuntime {
        EgressRuntime {
            backend: EgressChoice::new(&config.name, &config.egress),
            members: config
                .members
                .iter()
                .filter_map(|m| {
                    let own = m.source.as_ref()?;
                    Some((m.addr, EgressChoice::new(&config.name, own)))
                })
                .collect(),
        }
    }

    /// The egress of connections to `addr`.
    pub(crate) fn for_addr(&self, addr: SocketAddr) -> &EgressChoice {
        self.members
            .iter()
            .find(|(a, _)| *a == addr)
            .map_or(&self.backend, |(_, e)| e)
    }
}

/// Where one connection's backend socket is bound from. Cloning is at
/// most one reference count.
#[derive(Debug, Clone, Default)]
pub(crate) enum EgressChoice {
    /// The host's routing decides.
    #[default]
    Host,
    /// One of these addresses.
    SourcePool(Arc<SourcePool>),
    /// The client's own address and port.
    Client,
}

impl EgressChoice {
    fn new(backend: &str, setting: &Setting) -> EgressChoice {
        match setting {
            Setting::Host => EgressChoice::Host,
            Setting::Client => EgressChoice::Client,
            Setting::Addresses(sources) => {
                EgressChoice::SourcePool(Arc::new(SourcePool::new(backend, sources)))
            }
        }
    }

    /// Calls `attempt` with the local side to bind for a socket to `dest`
    /// on behalf of `client`, once, or (a pool) once per source address of
    /// `dest`'s family, in turn, until one does not run out of ports. The
    /// error is the last attempt's, or a clear one when no source can be
    /// bound to `dest` at all.
    /// One TCP connect to `addr` from this source (`client`: the client's
    /// address, for `source = "client"`): at once when the handshake
    /// completed inside connect(2) (a loopback backend, see
    /// [`crate::sockopt::start_connect`]), else once the event loop reports the
    /// socket writable, as `TcpStream::connect` does. The socket is bound
    /// first as the source says, trying its addresses in turn while they
    /// run out of ports ([`bind_each`](Self::bind_each)). For a relayed
    /// connection ([`crate::tcp::dial`]) and a health check or `fastest` probe
    /// (`health`) alike.
    pub(crate) async fn connect_tcp(
        &self,
        addr: SocketAddr,
        client: SocketAddr,
    ) -> io::Result<TcpStream> {
        let connecting = self.bind_each(addr, client, |bind| sockopt::start_connect(addr, bind))?;
        let stream = TcpStream::from_std(connecting.socket)?;
        if !connecting.connected {
            stream.writable().await?;
            if let Some(error) = stream.take_error()? {
                return Err(error);
            }
        }
        Ok(stream)
    }

    /// The egress of a health check or a `fastest` probe to this source:
    /// the same addresses, but the host's own for `source = "client"`
    /// (a check has no client; HAProxy's checks leave `usesrc` out the
    /// same way).
    pub(crate) fn for_checks(&self) -> &EgressChoice {
        static HOST: EgressChoice = EgressChoice::Host;
        match self {
            EgressChoice::Client => &HOST,
            other => other,
        }
    }

    pub(crate) fn bind_each<T>(
        &self,
        dest: SocketAddr,
        client: SocketAddr,
        mut attempt: impl FnMut(LocalBind) -> io::Result<T>,
    ) -> io::Result<T> {
        match self {
            EgressChoice::Host => attempt(LocalBind::Host),
            EgressChoice::Client => {
                if client.is_ipv4() != dest.is_ipv4() {
                    return Err(io::Error::new(
                        io::ErrorKind::AddrNotAvailable,
                        format!(
                            "source = \"client\": the client ({client}) and the backend address \
                             ({dest}) are of different families"
                        ),
                    ));
                }
                attempt(LocalBind::Transparent(client))
            }
            EgressChoice::SourcePool(pool) => pool.bind_each(dest, &mut attempt),
        }
    }
}

/// A `source = { addresses, ports }`: its addresses in turn, each with
/// its cooldown.
pub(crate) struct SourcePool {
    backend: Box<str>,
    sources: Box<[EgressSource]>,
    ports: Option<(u16, u16)>,
    /// The rotation: the next connection starts at `next % sources`.
    next: AtomicUsize,
    /// Exhaustion events since the last WARN.
    unreported: AtomicU64,
    warn: governor::DefaultDirectRateLimiter,
}

impl fmt::Debug for SourcePool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SourcePool")
            .field("backend", &self.backend)
            .field("sources", &self.sources)
            .field("ports", &self.ports)
            .finish_non_exhaustive()
    }
}

/// One source address and its state.
#[derive(Debug)]
struct EgressSource {
    ip: IpAddr,
    /// Skipped until this moment (`now_ms`), 0 when usable.
    cooling_until: AtomicU64,
    exhausted: Counter,
}

impl SourcePool {
    fn new(backend: &str, setting: &SourceAddresses) -> SourcePool {
        let quota = governor::Quota::with_period(WARN_INTERVAL)
            .expect("the interval is not zero")
            .allow_burst(NonZeroU32::MIN);
        SourcePool {
            backend: backend.into(),
            sources: setting
                .addresses
                .iter()
                .map(|&ip| EgressSource {
                    ip,
                    cooling_until: AtomicU64::new(0),
                    exhausted: metrics::metrics().source_address_exhausted(backend, ip),
                })
                .collect(),
            ports: setting.ports,
            next: AtomicUsize::new(0),
            unreported: AtomicU64::new(0),
            warn: governor::RateLimiter::direct(quota),
        }
    }

    fn bind_each<T>(
        &self,
        dest: SocketAddr,
        attempt: &mut impl FnMut(LocalBind) -> io::Result<T>,
    ) -> io::Result<T> {
        let n = self.sources.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let mut of_family = 0;
        let mut last = None;
        for k in 0..n {
            let source = &self.sources[start.wrapping_add(k) % n];
            if source.ip.is_ipv4() != dest.is_ipv4() {
                continue;
            }
            of_family += 1;
            // The clock is read only for a source that ran out lately.
            let cooling_until = source.cooling_until.load(Ordering::Relaxed);
            if cooling_until != 0 && cooling_until > now_ms() {
                continue;
            }
            let bind = LocalBind::Address {
                ip: source.ip,
                ports: self.ports,
            };
            match attempt(bind) {
                Err(error) if sockopt::is_source_exhausted(&error) => {
                    self.exhausted(source, dest, &error);
                    last = Some(error);
                }
                outcome => return outcome,
            }
        }
        Err(match (of_family, last) {
            (0, _) => io::Error::new(
                io::ErrorKind::AddrNotAvailable,
                format!(
                    "backend {}: `source` has no {} address for {dest}",
                    self.backend,
                    if dest.is_ipv4() { "IPv4" } else { "IPv6" }
                ),
            ),
            (_, Some(error)) => error,
            (_, None) => io::Error::new(
                io::ErrorKind::AddrNotAvailable,
                format!(
                    "backend {}: every `source` address ran out of local ports toward {dest} \
                     in the last {COOLDOWN:?}",
                    self.backend
                ),
            ),
        })
    }

    /// `source` had no free port toward `dest`: skipped for [`COOLDOWN`],
    /// counted, and told at most once per [`WARN_INTERVAL`].
    fn exhausted(&self, source: &EgressSource, dest: SocketAddr, error: &io::Error) {
        source
            .cooling_until
            .store(now_ms() + COOLDOWN.as_millis() as u64, Ordering::Relaxed);
        source.exhausted.inc();
        let events = self.unreported.fetch_add(1, Ordering::Relaxed) + 1;
        if self.warn.check().is_ok() {
            self.unreported.fetch_sub(events, Ordering::Relaxed);
            tracing::warn!(
                backend = %self.backend,
                source = %source.ip,
                backend.addr = %dest,
                %error,
                events,
                cooldown_ms = COOLDOWN.as_millis() as u64,
                "a source address ran out of local ports; trying the next (at most one such line per 5s)"
            );
        }
    }
}

/// Why a configuration's sources cannot be used on this host.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SourceError {
    #[error(
        "{key}: cannot bind {ip} on this host ({error}); list only addresses this host has \
         (or that net.ipv4.ip_nonlocal_bind allows)"
    )]
    Address {
        key: String,
        ip: IpAddr,
        error: io::Error,
    },
    #[error(
        "{key}.ports: this kernel refuses IP_LOCAL_PORT_RANGE ({error}); it needs Linux 6.3 or \
         later: remove `ports` (the kernel's net.ipv4.ip_local_port_range then applies)"
    )]
    PortRange { key: String, error: io::Error },
    #[error(
        "{key} = \"client\" needs the CAP_NET_ADMIN capability (or CAP_NET_RAW) to set \
         IP_TRANSPARENT ({error}); grant it (systemd: AmbientCapabilities=CAP_NET_ADMIN) or \
         remove the key"
    )]
    Transparent { key: String, error: io::Error },
}

/// Checks that every `source` of `config` can be used on this host: each
/// address bound once (with its `ports`), IP_TRANSPARENT allowed where a
/// backend has `source = "client"`. Run at start and at each reload.
pub(crate) fn probe(config: &Config) -> Result<(), SourceError> {
    for backend in config.backends.values() {
        let key = format!("backend.{}.source", backend.name);
        probe_one(&key, &backend.egress)?;
        for (i, member) in backend.members.iter().enumerate() {
            if let Some(own) = &member.source {
                probe_one(
                    &format!("backend.{}.addresses[{i}].source", backend.name),
                    own,
                )?;
            }
        }
    }
    Ok(())
}

fn probe_one(key: &str, setting: &Setting) -> Result<(), SourceError> {
    match setting {
        Setting::Host => Ok(()),
        Setting::Client => {
            for v6 in [false, true] {
                match sockopt::probe_transparent(v6) {
                    Ok(()) => {}
                    // A host without IPv6 cannot take IPv6 clients either.
                    Err(e) if v6 && e.raw_os_error() == Some(nix::libc::EAFNOSUPPORT) => {}
                    Err(error) => {
                        return Err(SourceError::Transparent {
                            key: key.to_owned(),
                            error,
                        });
                    }
                }
            }
            Ok(())
        }
        Setting::Addresses(sources) => {
            for &ip in &sources.addresses {
                if let Err(error) = sockopt::probe_source(ip, None) {
                    return Err(SourceError::Address {
                        key: format!("{key}.addresses"),
                        ip,
                        error,
                    });
                }
                if let Some(ports) = sources.ports
                    && let Err(error) = sockopt::probe_source(ip, Some(ports))
                {
                    return Err(SourceError::PortRange {
                        key: key.to_owned(),
                        error,
                    });
                }
            }
            if let Some((low, high)) = sources.ports {
                warn_outside_system_range(key, low, high);
            }
            Ok(())
        }
    }
}

/// The kernel narrows its own `ip_local_port_range` to a socket's range
/// and ignores a bound outside it: say so once, at start or reload.
fn warn_outside_system_range(key: &str, low: u16, high: u16) {
    let Ok(text) = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range") else {
        return;
    };
    let mut parts = text
        .split_whitespace()
        .filter_map(|p| p.parse::<u16>().ok());
    let (Some(system_low), Some(system_high)) = (parts.next(), parts.next()) else {
        return;
    };
    if low < system_low || high > system_high {
        tracing::warn!(
            key = %format!("{key}.ports"),
            ports = %format!("{low}-{high}"),
            system = %format!("{system_low}-{system_high}"),
            "`ports` reaches outside net.ipv4.ip_local_port_range; the kernel uses only the part inside it"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(addresses: &[&str]) -> EgressChoice {
        EgressChoice::new(
            "b",
            &Setting::Addresses(SourceAddresses {
                addresses: addresses.iter().map(|a| a.parse().unwrap()).collect(),
                ports: None,
            }),
        )
    }

    fn ip_of(bind: LocalBind) -> IpAddr {
        match bind {
            LocalBind::Address { ip, .. } => ip,
            other => panic!("{other:?}"),
        }
    }

    const DEST4: &str = "192.0.2.1:443";
    const CLIENT: &str = "198.51.100.7:5000";

    #[test]
    fn connections_go_round_the_addresses_of_the_destination_s_family() {
        let egress = pool(&["10.0.0.2", "2001:db8::2", "10.0.0.3"]);
        let dest: SocketAddr = DEST4.parse().unwrap();
        let seen: Vec<IpAddr> = (0..4)
            .map(|_| {
                egress
                    .bind_each(dest, CLIENT.parse().unwrap(), |b| Ok(ip_of(b)))
                    .unwrap()
            })
            .collect();
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.2".parse().unwrap(), "10.0.0.3".parse().unwrap());
        assert_eq!(seen.iter().filter(|&&ip| ip == a).count(), 2, "{seen:?}");
        assert_eq!(seen.iter().filter(|&&ip| ip == b).count(), 2, "{seen:?}");
    }

    #[test]
    fn an_exhausted_address_is_skipped_at_once_and_then_cools_down() {
        let egress = pool(&["10.0.0.2", "10.0.0.3"]);
        let dest: SocketAddr = DEST4.parse().unwrap();
        let full: IpAddr = "10.0.0.2".parse().unwrap();
        let mut tried = Vec::new();
        for _ in 0..4 {
            let got = egress.bind_each(dest, CLIENT.parse().unwrap(), |b| {
                tried.push(ip_of(b));
                if ip_of(b) == full {
                    Err(io::Error::from_raw_os_error(nix::libc::EADDRNOTAVAIL))
                } else {
                    Ok(ip_of(b))
                }
            });
            assert_eq!(got.unwrap(), "10.0.0.3".parse::<IpAddr>().unwrap());
        }
        // Tried once, then cooling down for the rest.
        assert_eq!(
            tried.iter().filter(|&&ip| ip == full).count(),
            1,
            "{tried:?}"
        );
    }

    #[test]
    fn every_address_exhausted_is_the_last_error_and_no_family_is_a_clear_one() {
        let egress = pool(&["10.0.0.2", "10.0.0.3"]);
        let dest: SocketAddr = DEST4.parse().unwrap();
        let error = egress
            .bind_each(dest, CLIENT.parse().unwrap(), |_| {
                Err::<(), _>(io::Error::from_raw_os_error(nix::libc::EADDRINUSE))
            })
            .unwrap_err();
        assert_eq!(error.raw_os_error(), Some(nix::libc::EADDRINUSE));
        assert!(sockopt::is_local_connect_failure(&error));
        let error = egress
            .bind_each(
                "[2001:db8::1]:443".parse().unwrap(),
                CLIENT.parse().unwrap(),
                |_| Ok(()),
            )
            .unwrap_err();
        assert!(error.to_string().contains("no IPv6 address"), "{error}");
    }

    #[test]
    fn checks_leave_from_the_pool_or_the_host_for_a_client_source() {
        let pool = pool(&["127.0.0.2"]);
        assert!(std::ptr::eq(pool.for_checks(), &pool));
        assert!(matches!(
            EgressChoice::Client.for_checks(),
            EgressChoice::Host
        ));
        assert!(matches!(
            EgressChoice::Host.for_checks(),
            EgressChoice::Host
        ));
    }

    #[test]
    fn the_client_source_binds_the_client_s_address_and_port() {
        let client: SocketAddr = CLIENT.parse().unwrap();
        let bind = EgressChoice::Client
            .bind_each(DEST4.parse().unwrap(), client, Ok)
            .unwrap();
        assert_eq!(bind, LocalBind::Transparent(client));
        assert!(
            EgressChoice::Client
                .bind_each("[2001:db8::1]:443".parse().unwrap(), client, Ok)
                .is_err()
        );
    }
}
