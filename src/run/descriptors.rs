//! Whether the descriptor limit (RLIMIT_NOFILE) lets the process keep
//! `[global] max_connections`: what the relay says at start, at every
//! applied reload, and what `check` says on the machine it runs on.
//!
//! A relayed TCP connection holds two descriptors (the client's socket and
//! the backend's); a QUIC flow one (its connected UDP socket toward the
//! backend: the client side is the listener's shared socket). The splice
//! pipe pool ([`crate::pump::splice`]) is shared and bounded, at most
//! `max_pipes` pipes of two descriptors each, and only used when a listener
//! splices. On top comes a fixed reserve ([`RESERVED_DESCRIPTORS`]) plus
//! one per listening socket. `[global] max_connections` caps TCP
//! connections and QUIC flows together, and a route's `max_connections`
//! sits under it, so the global cap is the one held against the limit.
//!
//! Decision (docs/operations.md, "Descriptor limit"): the relay warns,
//! naming both numbers and the fix, and keeps the configured cap. Lowering
//! the cap behind the operator's back would make `/config` and the file
//! disagree; past the limit the relay does not fall over either (accept
//! backs off on EMFILE, a connect that gets EMFILE closes that connection
//! `connect_failed` without marking the backend down), it refuses the
//! connections beyond it.
//!
//! Not here: raising the soft limit to the hard one at start
//! ([`crate::sockopt::raise_nofile_limit`]) or reading it
//! ([`crate::sockopt::nofile_limit`]).

use crate::config::{Config, Protocol};

/// Descriptors kept aside for everything but relayed connections: standard
/// streams, the runtime (epoll, its wakers, the signal pipe), the admin
/// listener and its clients, the log target, DNS lookups and health checks
/// in flight. Listening sockets are counted on top.
pub(crate) const RESERVED_DESCRIPTORS: u64 = 64;

/// What a configuration needs of the descriptor limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DescriptorBudget {
    /// `[global] max_connections`.
    pub(crate) max_connections: u64,
    /// Descriptors a relayed connection holds: 2 with a TCP listener, 1
    /// when every listener is QUIC.
    pub(crate) per_connection: u64,
    /// The splice pipe pool at its fullest (`2 × max_pipes`), 0 when no
    /// listener splices.
    pub(crate) pipes: u64,
    /// [`RESERVED_DESCRIPTORS`] plus one per listening socket.
    pub(crate) reserve: u64,
}

impl DescriptorBudget {
    /// The budget of `config`.
    pub(crate) fn of(config: &Config) -> DescriptorBudget {
        let tcp = config.listeners.iter().any(|l| l.protocol == Protocol::Tcp);
        let splices = config
            .listeners
            .iter()
            .any(|l| l.protocol == Protocol::Tcp && l.splice);
        let listening: usize = config.listeners.iter().map(|l| l.listen.len()).sum();
        DescriptorBudget {
            max_connections: config.global.max_connections as u64,
            per_connection: if tcp { 2 } else { 1 },
            pipes: if splices {
                2 * config.global.max_pipes as u64
            } else {
                0
            },
            reserve: RESERVED_DESCRIPTORS + listening as u64,
        }
    }

    /// Descriptors the process may hold at `max_connections`.
    pub(crate) fn needed(&self) -> u64 {
        self.max_connections * self.per_connection + self.pipes + self.reserve
    }

    /// Connections that fit under `limit` descriptors, at most
    /// `max_connections`.
    pub(crate) fn connections_within(&self, limit: u64) -> u64 {
        (limit.saturating_sub(self.pipes + self.reserve) / self.per_connection)
            .min(self.max_connections)
    }

    /// The shortfall under `limit`, if `max_connections` does not fit.
    pub(crate) fn shortfall(self, limit: u64) -> Option<Shortfall> {
        (self.needed() > limit).then_some(Shortfall {
            budget: self,
            limit,
        })
    }
}

/// A configuration whose `max_connections` the descriptor limit cannot keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shortfall {
    pub(crate) budget: DescriptorBudget,
    /// The limit it was held against.
    pub(crate) limit: u64,
}

impl Shortfall {
    /// What to write, with the number to write: the unit's, a container's
    /// and a shell's way, or the cap that fits.
    pub(crate) fn fix(&self) -> String {
        let needed = self.budget.needed();
        format!(
            "raise the limit to {needed}: LimitNOFILE={needed} in the systemd unit, \
             --ulimit nofile={needed}:{needed} for a container, `ulimit -n {needed}` before a \
             manual start; or lower [global] max_connections to {}",
            self.budget.connections_within(self.limit)
        )
    }

    /// `check`'s line, for a limit read in the shell it runs in.
    pub(crate) fn check_warning(&self) -> String {
        let b = &self.budget;
        format!(
            "warning: [global] max_connections = {} needs {} descriptors ({} per connection, {} \
             for splice pipes, {} reserved), but the descriptor limit here (RLIMIT_NOFILE, hard, \
             which `run` raises the soft one to) is {}: the relay would keep {} connections; {}",
            b.max_connections,
            b.needed(),
            b.per_connection,
            b.pipes,
            b.reserve,
            self.limit,
            b.connections_within(self.limit),
            self.fix()
        )
    }
}

/// Logs a warning when the process's soft descriptor limit (raised to the
/// hard one at start) cannot keep `config`'s `max_connections`; called at
/// start and after each applied reload. Nothing when it fits.
pub(crate) fn warn_if_short(config: &Config) {
    let limit = match crate::sockopt::nofile_limit() {
        Ok((soft, _hard)) => soft,
        Err(error) => {
            tracing::warn!(%error, "cannot read the descriptor limit (RLIMIT_NOFILE)");
            return;
        }
    };
    if let Some(short) = DescriptorBudget::of(config).shortfall(limit) {
        let b = short.budget;
        tracing::warn!(
            max_connections = b.max_connections,
            descriptors.needed = b.needed(),
            descriptors.limit = short.limit,
            descriptors.per_connection = b.per_connection,
            descriptors.pipes = b.pipes,
            descriptors.reserved = b.reserve,
            connections.fit = b.connections_within(short.limit),
            fix = %short.fix(),
            "the descriptor limit (RLIMIT_NOFILE) cannot keep max_connections"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn config(global: &str, listeners: &str) -> Config {
        let text = format!(
            "[global]\n{global}\n{listeners}\n[[route]]\nsni = [\"a.example\"]\nbackend = \"b\"\n\
             [backend.b]\naddresses = [\"127.0.0.1:9\"]\n"
        );
        Config::from_toml(&text, Path::new("test.toml")).unwrap()
    }

    const TCP: &str = "[[listener]]\nname = \"tls\"\nlisten = [\"127.0.0.1:0\", \"[::1]:0\"]\n";

    #[test]
    fn a_tcp_connection_takes_two_and_the_pipe_pool_its_pipes() {
        let b = DescriptorBudget::of(&config("max_connections = 50000\nmax_pipes = 100", TCP));
        assert_eq!(
            b,
            DescriptorBudget {
                max_connections: 50_000,
                per_connection: 2,
                pipes: 200,
                reserve: RESERVED_DESCRIPTORS + 2,
            }
        );
        assert_eq!(b.needed(), 100_000 + 200 + 66);
        assert_eq!(b.connections_within(1_066), 400);
        assert_eq!(b.connections_within(0), 0);
        assert_eq!(b.connections_within(u64::MAX), 50_000);
        let short = b.shortfall(20_000).unwrap();
        assert!(
            short.fix().contains("LimitNOFILE=100266"),
            "{}",
            short.fix()
        );
        assert!(
            short.fix().ends_with("max_connections to 9867"),
            "{}",
            short.fix()
        );
        assert!(b.shortfall(100_266).is_none());
    }

    #[test]
    fn without_splicing_no_pipes_are_counted() {
        let b = DescriptorBudget::of(&config("max_connections = 10\nsplice = false", TCP));
        assert_eq!((b.pipes, b.needed()), (0, 20 + 66));
    }

    #[test]
    fn a_quic_flow_takes_one() {
        let quic = "[[listener]]\nname = \"h3\"\nprotocol = \"quic\"\nlisten = [\"127.0.0.1:0\"]\n";
        let b = DescriptorBudget::of(&config("max_connections = 10", quic));
        assert_eq!((b.per_connection, b.pipes), (1, 0));
    }
}
