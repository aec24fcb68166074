//! Backend selection policies: everything a `[backend.*] policy` is, in one
//! place. Its name (parsed from the file, shown by `/config`, listed in
//! errors), the `[backend.*]` keys only it accepts, the run-time state it
//! keeps between connections and the task that keeps that state fresh, and
//! how it ranks a set's addresses for one connection.
//!
//! The policies: `ordered` (list order), `round_robin` (a rotating start),
//! `least_connections` (fewest open connections, ties rotated),
//! `source_hash` (rendezvous hashing on the client's IP address, never its
//! port, so a client stays on its address while the set around it changes
//! and only the clients of a removed address move), `fastest` (the ranked
//! choice first, then list order; the ranking is `super::fastest`'s).
//!
//! Adding a policy happens in this file: a line in the `policies!` table
//! (variant and name; parsing, `/config` and the error listing follow from
//! it), an arm in [`Policy::ranker`] and, when it ranks in a way no
//! [`Ranker`] does yet, a variant and an arm in [`Ranker::rank`]. The
//! compiler points at every match that needs an arm (`Policy::start` for a
//! task that keeps state fresh; the state itself is a field of [`State`]).
//! A policy with keys of its own also adds them to [`OWN_KEYS`], and needs
//! the raw key in `config::file` and its checked value in
//! [`super::Backend`] (the file model and the settings have one home each;
//! `config` finds a set key by its name, so nothing here names the file
//! model). `select`,
//! `connect` and the backend runtime name no policy.
//!
//! Not here: putting healthy addresses first and bounding the attempts
//! (`super::select`), connecting (`crate::connect`), measuring latency
//! (`super::fastest`).
//!
//! Cost per connection: [`Policy::ranker`] reads the state once (one
//! relaxed atomic add for the rotating policies, one uncontended lock for
//! `fastest`, nothing for the others); [`Ranker::rank`] is a match and
//! integer arithmetic (a SipHash of two addresses for `source_hash`). No
//! allocation, no dynamic dispatch.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio_util::sync::CancellationToken;

use super::{BackendRuntime, Endpoint, fastest};
use crate::cidr::canonical;

/// Declares [`Policy`] from one table of variants and names, so that a
/// name cannot be parsed without being displayed, or the reverse.
macro_rules! policies {
    ($($(#[$doc:meta])* $variant:ident => $name:literal,)+) => {
        /// `[backend.*] policy`: how a connection's addresses are ordered.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Policy {
            $($(#[$doc])* $variant,)+
        }

        impl Policy {
            /// Every policy, in the order errors list them.
            pub const ALL: &'static [Policy] = &[$(Policy::$variant),+];

            /// The name in the file, in `/config` and in errors.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Policy::$variant => $name,)+
                }
            }
        }
    };
}

policies! {
    /// The first healthy address in list order.
    Ordered => "ordered",
    /// A rotating first choice.
    RoundRobin => "round_robin",
    /// The fewest open relayed connections; ties rotate.
    LeastConnections => "least_connections",
    /// Sticky on the client's IP address (never its port).
    SourceHash => "source_hash",
    /// The address with the lowest measured connect time.
    Fastest => "fastest",
}

/// `[backend.*]` keys that belong to one policy: set with any other policy
/// (or with a policy name that is not valid) they are a configuration
/// error, since they would silently do nothing.
pub const OWN_KEYS: &[OwnKey] = &[OwnKey {
    key: "fastest_interval",
    policy: Policy::Fastest,
}];

/// A key only one policy accepts.
#[derive(Debug, Clone, Copy)]
pub struct OwnKey {
    /// Its name in a `[backend.*]` table.
    pub key: &'static str,
    pub policy: Policy,
}

impl Policy {
    /// The policy of a `[cluster]` backend, whatever the file says: a site's
    /// nodes are chosen by the client's address, so a client keeps its node
    /// and every relay of a fleet makes the same choice.
    pub const CLUSTER: Policy = Policy::SourceHash;

    /// The policy named `name`; the error names every policy.
    pub fn parse(name: &str) -> Result<Policy, String> {
        Policy::ALL
            .iter()
            .copied()
            .find(|p| p.as_str() == name)
            .ok_or_else(|| {
                let names: Vec<String> = Policy::ALL
                    .iter()
                    .map(|p| format!("{:?}", p.as_str()))
                    .collect();
                format!("{name:?} is not one of {}", names.join(", "))
            })
    }

    /// The keys a `[backend.*]` table sets (`is_set`, by key name) that
    /// `policy` does not accept (`None`: the policy named was not valid, so
    /// no policy's own key applies), each with the reason.
    pub fn misplaced_keys(
        policy: Option<Policy>,
        is_set: impl Fn(&str) -> bool,
    ) -> impl Iterator<Item = (&'static str, String)> {
        OWN_KEYS
            .iter()
            .filter(move |own| is_set(own.key) && policy != Some(own.policy))
            .map(|own| {
                (
                    own.key,
                    format!("only applies with policy = {:?}", own.policy.as_str()),
                )
            })
    }

    /// Starts the task that keeps this policy's [`State`] fresh, if it has
    /// one; it stops with `tasks`.
    pub(super) fn start(self, runtime: &Arc<BackendRuntime>, tasks: &CancellationToken) {
        match self {
            Policy::Fastest => {
                tokio::spawn(fastest::run(runtime.clone(), tasks.clone()));
            }
            Policy::Ordered
            | Policy::RoundRobin
            | Policy::LeastConnections
            | Policy::SourceHash => {}
        }
    }

    /// What this policy needs to rank a set of `n` addresses for one
    /// connection from `client`, read once from `state`.
    pub fn ranker(self, state: &State, n: usize, client: IpAddr) -> Ranker {
        let rotate = || {
            let start = match n {
                0 => 0,
                n => state.rotation.fetch_add(1, Ordering::Relaxed) % n,
            };
            (start, n)
        };
        match self {
            Policy::Ordered => Ranker::ListOrder,
            Policy::RoundRobin => {
                let (start, n) = rotate();
                Ranker::Rotated { start, n }
            }
            Policy::LeastConnections => {
                let (start, n) = rotate();
                Ranker::LeastLoaded { start, n }
            }
            Policy::SourceHash => Ranker::Affinity {
                client: canonical(client),
            },
            // The ranking takes a lock; only `fastest` reads it.
            Policy::Fastest => Ranker::Preferred(state.ranking.preferred()),
        }
    }
}

/// What a policy keeps between connections, one per backend runtime (and
/// so carried over a reload with it).
#[derive(Debug, Default)]
pub struct State {
    /// `round_robin` and `least_connections`: the rotating start.
    rotation: AtomicUsize,
    /// `fastest`: the current choice, kept by `fastest::run`.
    pub(super) ranking: fastest::Ranking,
}

/// One connection's view of its policy: how to rank the addresses of the
/// set it was made for.
#[derive(Debug, Clone, Copy)]
pub enum Ranker {
    /// List order.
    ListOrder,
    /// List order, rotated to begin at `start` of `n`.
    Rotated { start: usize, n: usize },
    /// Fewest open connections first; ties in rotated order.
    LeastLoaded { start: usize, n: usize },
    /// Highest rendezvous weight with `client` (canonical) first.
    Affinity { client: IpAddr },
    /// The preferred address first, then list order.
    Preferred(Option<SocketAddr>),
}

impl Ranker {
    /// The rank of `set[i]`: lower ranks are tried first.
    pub fn rank(&self, set: &[Endpoint], i: usize) -> u128 {
        let rotated = |start: usize, n: usize| ((i + n - start) % n) as u128;
        match *self {
            Ranker::ListOrder => i as u128,
            Ranker::Rotated { start, n } => rotated(start, n),
            Ranker::LeastLoaded { start, n } => {
                ((set[i].state.active() as u128) << 64) | rotated(start, n)
            }
            Ranker::Affinity { client } => u128::from(u64::MAX - affinity(client, set[i].addr)),
            Ranker::Preferred(preferred) => {
                let preferred = preferred == Some(set[i].addr);
                (u128::from(!preferred) << 64) | i as u128
            }
        }
    }
}

/// The rendezvous weight of (client, address): stable across processes
/// and restarts (the hasher's keys are fixed), so a client keeps its
/// address on every relay of a fleet.
fn affinity(client: IpAddr, addr: SocketAddr) -> u64 {
    let mut h = DefaultHasher::new();
    client.hash(&mut h);
    addr.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::endpoint::carry;
    use crate::backend::select::{Plan, plan};

    fn set(n: u16) -> Arc<[Endpoint]> {
        let addrs: Vec<SocketAddr> = (1..=n)
            .map(|p| SocketAddr::from(([127, 0, 0, 1], p)))
            .collect();
        carry(&[], &addrs)
    }

    fn client(c: [u8; 4]) -> IpAddr {
        IpAddr::from(c)
    }

    fn ports(set: &[Endpoint], plan: &Plan) -> Vec<u16> {
        plan.as_slice()
            .iter()
            .map(|&i| set[i as usize].addr.port())
            .collect()
    }

    #[test]
    fn every_name_parses_to_its_policy_and_errors_list_them_all() {
        for &p in Policy::ALL {
            assert_eq!(Policy::parse(p.as_str()), Ok(p));
        }
        assert_eq!(
            Policy::parse("random").unwrap_err(),
            "\"random\" is not one of \"ordered\", \"round_robin\", \
             \"least_connections\", \"source_hash\", \"fastest\""
        );
        // Names are exact: no case folding, no trimming.
        assert!(Policy::parse("Ordered").is_err());
        assert!(Policy::parse(" ordered").is_err());
    }

    #[test]
    fn a_policy_own_key_is_refused_under_any_other_policy() {
        let set = |key: &str| key == "fastest_interval";
        let misplaced = |p| Policy::misplaced_keys(p, set).collect::<Vec<_>>();
        assert!(misplaced(Some(Policy::Fastest)).is_empty());
        let refused = vec![(
            "fastest_interval",
            "only applies with policy = \"fastest\"".to_owned(),
        )];
        assert_eq!(misplaced(Some(Policy::Ordered)), refused);
        // A policy name that did not parse accepts no policy's own key.
        assert_eq!(misplaced(None), refused);
        assert_eq!(Policy::misplaced_keys(None, |_| false).count(), 0);
    }

    #[test]
    fn round_robin_rotates_the_first_choice() {
        let s = set(3);
        let state = State::default();
        let firsts: Vec<u16> = (0..6)
            .map(|_| {
                ports(
                    &s,
                    &plan(Policy::RoundRobin, &state, &s, 2, client([10, 0, 0, 1])),
                )[0]
            })
            .collect();
        assert_eq!(firsts, [1, 2, 3, 1, 2, 3]);
    }

    #[test]
    fn least_connections_prefers_the_least_loaded() {
        let s = set(3);
        let _a = s[0].state.enter();
        let _b = s[0].state.enter();
        let _c = s[2].state.enter();
        let state = State::default();
        assert_eq!(
            ports(
                &s,
                &plan(
                    Policy::LeastConnections,
                    &state,
                    &s,
                    3,
                    client([10, 0, 0, 1])
                )
            ),
            [2, 3, 1]
        );
    }

    #[test]
    fn source_hash_is_sticky_on_the_ip_and_moves_only_clients_of_a_removed_address() {
        let s = set(5);
        let state = State::default();
        let pick =
            |s: &[Endpoint], c: IpAddr| ports(s, &plan(Policy::SourceHash, &state, s, 1, c))[0];
        let mut spread = std::collections::HashSet::new();
        for last in 0..200u8 {
            let client = client([10, 0, 1, last]);
            let first = pick(&s, client);
            assert_eq!(pick(&s, client), first, "sticky");
            spread.insert(first);
            // Without address 5, only its clients move.
            let fewer = set(4);
            if first != 5 {
                assert_eq!(pick(&fewer, client), first);
            }
        }
        assert_eq!(spread.len(), 5, "clients spread over every address");
        // The same client from an IPv4-mapped IPv6 socket hashes the same.
        assert_eq!(
            pick(&s, "::ffff:10.0.1.7".parse().unwrap()),
            pick(&s, client([10, 0, 1, 7]))
        );
    }

    #[test]
    fn fastest_puts_the_preferred_address_first() {
        let s = set(3);
        let state = State::default();
        state.ranking.set(Some(s[2].addr));
        assert_eq!(
            ports(
                &s,
                &plan(Policy::Fastest, &state, &s, 3, client([10, 0, 0, 1]))
            ),
            [3, 1, 2]
        );
    }
}
