//! Backend selection policies: everything a `[backend.*] policy` is, in one
//! place. Its name (parsed from the file, shown by `/config`, listed in
//! errors), the `[backend.*]` keys only it accepts, the task that keeps its
//! run-time state fresh (the state it keeps between connections is
//! [`crate::backend::policy_state`]'s), and how it ranks a set's addresses
//! for one connection.
//!
//! The policies: `ordered` (list order), `round_robin` (a rotating start;
//! with unequal weights, smooth weighted round-robin), `least_connections`
//! (fewest open connections per unit of weight, ties rotated),
//! `source_hash` (weighted rendezvous hashing on the client's IP address,
//! never its port, so a client stays on its address while the set around it
//! changes and only the clients of a removed address move), `fastest` (the
//! ranked choice first, then list order; the ranking is `super::fastest`'s;
//! weights do not apply).
//!
//! `source_hash` is the same on every relay of a fleet, whatever toolchain
//! built it: the hash is SipHash-2-4 with an all-zero key over a fixed byte
//! layout ([`affinity_hash`]), and the weighting is integer fixed-point
//! arithmetic ([`affinity_rank`]), no floating point; a test pins outputs.
//!
//! Adding a policy: a line in the `policies!` table (variant and name;
//! parsing, `/config` and the error listing follow from it), which is
//! plain settings and lives in [`crate::config::settings`] with the rest of them,
//! then, here, an arm in `Policy::ranker` and, when it ranks in a way no
//! `Ranker` does yet, a variant and an arm in `Ranker::rank`. The
//! compiler points at every match that needs an arm (`Policy::start` for a
//! task that keeps state fresh; the state itself is a field of [`State`]).
//! A policy with keys of its own also adds them to `OWN_KEYS`, and needs
//! the raw key in [`crate::config::file`] and its checked value in
//! [`super::Backend`] (the file model and the settings have one home each;
//! `config` finds a set key by its name, so nothing here names the file
//! model). [`crate::backend::plan`],
//! [`crate::tcp::dial`] and the backend runtime name no policy.
//!
//! Not here: putting healthy addresses first and bounding the attempts
//! (`super::plan`), connecting ([`crate::tcp::dial`]), measuring latency
//! (`super::fastest`), the state kept between connections
//! ([`crate::backend::policy_state`]).
//!
//! Cost per connection: `Policy::ranker` reads the state once (one
//! relaxed atomic add for the rotating policies, one uncontended lock for
//! `fastest` and for `round_robin` with unequal weights, nothing for the
//! others); `Ranker::rank` is a match and integer arithmetic (for
//! `source_hash` a SipHash of 34 bytes and a 32-step fixed-point log2). No
//! allocation, no dynamic dispatch.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use siphasher::sip::SipHasher24;

use tokio_util::sync::CancellationToken;

use super::policy_state::State;
use super::{BackendRuntime, Endpoint, fastest};
use crate::wire::cidr::canonical;

// The policies' names, and the keys only one of them accepts, are plain
// settings in `config::settings`; the run-time side of each is here.
pub use crate::config::settings::Policy;

impl Policy {
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

    /// What this policy needs to rank `set` for one connection from
    /// `client`, read once from `state`. `eligible` says which addresses
    /// may take the connection now (up and under their cap); a weighted
    /// rotation picks among those, or among all when none is. `in_turn`
    /// says which addresses the rotation turns over: the whole set, or the
    /// backend's non-`backup` addresses, or its backups while every other
    /// address is down (so each of them gets its turn, not the one after
    /// a run of the others).
    pub(crate) fn ranker(
        self,
        state: &State,
        set: &[Endpoint],
        client: IpAddr,
        eligible: impl Fn(&Endpoint) -> bool,
        in_turn: impl Fn(&Endpoint) -> bool,
    ) -> Ranker {
        let n = set.len();
        let rotate = || {
            let turns = set.iter().filter(|e| in_turn(e)).count();
            let start = match (n, turns) {
                (0, _) | (_, 0) => 0,
                (n, turns) if turns == n => state.rotation.fetch_add(1, Ordering::Relaxed) % n,
                (_, turns) => {
                    let turn = state.rotation.fetch_add(1, Ordering::Relaxed) % turns;
                    (0..n).filter(|&i| in_turn(&set[i])).nth(turn).unwrap_or(0)
                }
            };
            (start, n)
        };
        match self {
            Policy::Ordered => Ranker::ListOrder,
            Policy::RoundRobin if !equal_weights(set) => Ranker::Rotated {
                start: state.smooth.pick(set, eligible),
                n,
            },
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

/// Whether every address of `set` has the same weight (the common case:
/// the rotation then needs no lock).
fn equal_weights(set: &[Endpoint]) -> bool {
    set.windows(2).all(|w| w[0].weight == w[1].weight)
}

/// One connection's view of its policy: how to rank the addresses of the
/// set it was made for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Ranker {
    /// List order.
    ListOrder,
    /// List order, rotated to begin at `start` of `n`.
    Rotated { start: usize, n: usize },
    /// Fewest open connections per unit of weight first; ties in rotated
    /// order.
    LeastLoaded { start: usize, n: usize },
    /// Best weighted rendezvous rank with `client` (canonical) first.
    Affinity { client: IpAddr },
    /// The preferred address first, then list order.
    Preferred(Option<SocketAddr>),
}

impl Ranker {
    /// The rank of `set[i]`: lower ranks are tried first.
    pub(crate) fn rank(&self, set: &[Endpoint], i: usize) -> u128 {
        let rotated = |start: usize, n: usize| ((i + n - start) % n) as u128;
        match *self {
            Ranker::ListOrder => i as u128,
            Ranker::Rotated { start, n } => rotated(start, n),
            Ranker::LeastLoaded { start, n } => {
                // Open connections per unit of weight, in 32.32 fixed point.
                let load =
                    ((set[i].state.active() as u128) << 32) / u128::from(set[i].weight.max(1));
                (load << 64) | rotated(start, n)
            }
            Ranker::Affinity { client } => {
                affinity_rank(affinity_hash(client, set[i].addr), set[i].weight)
            }
            Ranker::Preferred(preferred) => {
                let preferred = preferred == Some(set[i].addr);
                (u128::from(!preferred) << 64) | i as u128
            }
        }
    }
}

/// The rendezvous hash of (client, address): SipHash-2-4 with the all-zero
/// key over 34 bytes: the client's IP address as 16 bytes (an IPv4 address
/// IPv4-mapped, `::ffff:a.b.c.d`), the backend address's IP the same way,
/// and its port, big-endian. A specification, not an implementation's
/// choice: every relay of a fleet, whatever built it, computes the same
/// value, and `tests` pins some.
pub fn affinity_hash(client: IpAddr, addr: SocketAddr) -> u64 {
    let sixteen = |ip: IpAddr| match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    };
    let mut bytes = [0u8; 34];
    bytes[..16].copy_from_slice(&sixteen(client));
    bytes[16..32].copy_from_slice(&sixteen(addr.ip()));
    bytes[32..].copy_from_slice(&addr.port().to_be_bytes());
    SipHasher24::new_with_keys(0, 0).hash(&bytes)
}

/// The weighted rendezvous rank of an address whose hash with the client
/// is `hash`: -log2(u) / weight with u = (hash + 1) / 2^64 in (0, 1], in
/// 32.32 fixed point; the lowest rank wins. This is weighted rendezvous
/// hashing (the highest weight / -ln(u) wins; log2 orders as ln does), so
/// an address takes a share of clients in proportion to its weight, and
/// removing one moves only its clients. Integer arithmetic only, so it is
/// bit-for-bit the same on every platform.
pub fn affinity_rank(hash: u64, weight: u32) -> u128 {
    (u128::from(neg_log2_fixed(hash)) << 32) / u128::from(weight.max(1))
}

/// -log2((h + 1) / 2^64) in 32.32 fixed point (0 for h = u64::MAX): the
/// integer part from the highest set bit, 32 fraction bits by repeated
/// squaring of the normalised mantissa.
fn neg_log2_fixed(h: u64) -> u64 {
    let x = u128::from(h) + 1;
    let e = 127 - x.leading_zeros(); // floor(log2 x), 0..=64
    const ONE: u128 = 1 << 63; // the mantissa in Q1.63, in [1, 2)
    let mut m = if e <= 63 {
        x << (63 - e)
    } else {
        x >> (e - 63)
    };
    let mut frac = 0u64;
    for _ in 0..32 {
        m = (m * m) >> 63;
        frac <<= 1;
        if m >= 2 * ONE {
            m >>= 1;
            frac |= 1;
        }
    }
    let log2 = (u64::from(e) << 32) | frac;
    (64u64 << 32) - log2
}

#[cfg(test)]
mod tests {
    use crate::backend::balance::*;
    use crate::backend::endpoint::{Member, carry, carry_members};
    use crate::backend::plan::{self, Plan};

    /// A plan without a connection cap.
    fn plan(p: Policy, st: &State, s: &[Endpoint], attempts: usize, c: IpAddr) -> Plan {
        plan::plan(p, st, s, attempts, c, None)
    }

    /// Addresses 127.0.0.1:1.. with these weights.
    fn weighted(weights: &[u32]) -> Arc<[Endpoint]> {
        let members: Vec<Member> = weights
            .iter()
            .enumerate()
            .map(|(i, &weight)| Member {
                addr: SocketAddr::from(([127, 0, 0, 1], i as u16 + 1)),
                weight,
                max_connections: None,
                source: None,
                backup: false,
            })
            .collect();
        carry_members(&[], &members)
    }

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

    #[test]
    fn weighted_round_robin_is_smooth_and_proportional() {
        let s = weighted(&[5, 1, 1]);
        let state = State::default();
        let firsts: Vec<u16> = (0..14)
            .map(|_| {
                ports(
                    &s,
                    &plan(Policy::RoundRobin, &state, &s, 1, client([10, 0, 0, 1])),
                )[0]
            })
            .collect();
        // nginx's smooth sequence for 5, 1, 1, twice.
        assert_eq!(firsts, [1, 1, 2, 1, 3, 1, 1, 1, 1, 2, 1, 3, 1, 1]);
        // Failover after the pick follows the list from there.
        let s = weighted(&[1, 3]);
        let state = State::default();
        let plans: Vec<Vec<u16>> = (0..4)
            .map(|_| {
                ports(
                    &s,
                    &plan(Policy::RoundRobin, &state, &s, 2, client([10, 0, 0, 1])),
                )
            })
            .collect();
        assert_eq!(plans, [vec![2, 1], vec![1, 2], vec![2, 1], vec![2, 1]]);
    }

    #[test]
    fn weighted_round_robin_skips_a_down_address_and_keeps_the_ratio_of_the_rest() {
        let s = weighted(&[2, 1, 4]);
        s[2].state
            .connect_failed("b", s[2].addr, 1, std::time::Duration::from_secs(60));
        let state = State::default();
        let mut counts = [0usize; 3];
        for _ in 0..300 {
            let first = ports(
                &s,
                &plan(Policy::RoundRobin, &state, &s, 1, client([10, 0, 0, 1])),
            )[0];
            counts[usize::from(first) - 1] += 1;
        }
        assert_eq!(counts, [200, 100, 0]);
    }

    #[test]
    fn weighted_least_connections_counts_connections_per_unit_of_weight() {
        let s = weighted(&[3, 1]);
        // Two on the weight-3 address (2/3 each) beat one on the other (1).
        let _a = s[0].state.enter();
        let _b = s[0].state.enter();
        let _c = s[1].state.enter();
        let state = State::default();
        assert_eq!(
            ports(
                &s,
                &plan(
                    Policy::LeastConnections,
                    &state,
                    &s,
                    2,
                    client([10, 0, 0, 1])
                )
            ),
            [1, 2]
        );
    }

    #[test]
    fn weighted_source_hash_shares_clients_by_weight_and_stays_sticky() {
        let s = weighted(&[1, 3]);
        let state = State::default();
        let mut counts = [0usize; 2];
        for i in 0..4000u32 {
            let c = IpAddr::from((0x0a00_0000 + i).to_be_bytes());
            let first = ports(&s, &plan(Policy::SourceHash, &state, &s, 1, c))[0];
            counts[usize::from(first) - 1] += 1;
            // Only addresses with weight change shares: equal weights are
            // the unweighted choice.
        }
        // 1 : 3 within a few per cent.
        assert!((900..1100).contains(&counts[0]), "{counts:?}");
        // Raising a weight only moves clients towards that address.
        let more = weighted(&[1, 5]);
        for i in 0..500u32 {
            let c = IpAddr::from((0x0a00_0000 + i).to_be_bytes());
            let before = ports(&s, &plan(Policy::SourceHash, &state, &s, 1, c))[0];
            let after = ports(&more, &plan(Policy::SourceHash, &state, &more, 1, c))[0];
            assert!(
                before == after || after == 2,
                "{c} moved from {before} to {after}"
            );
        }
    }

    /// The hash is SipHash-2-4: the reference vector of the SipHash paper
    /// (key 00..0f, message 00..0e) through the same hasher.
    #[test]
    fn the_affinity_hash_is_siphash_2_4() {
        let key: [u8; 16] = std::array::from_fn(|i| i as u8);
        let message: Vec<u8> = (0..15).collect();
        assert_eq!(
            SipHasher24::new_with_key(&key).hash(&message),
            0xa129_ca61_49be_45e5
        );
    }

    /// Pinned outputs: a relay that computes other values would send the
    /// same client elsewhere than the rest of its fleet.
    #[test]
    fn source_hash_outputs_are_pinned() {
        let a: SocketAddr = "192.0.2.10:443".parse().unwrap();
        let b: SocketAddr = "[2001:db8::1]:8443".parse().unwrap();
        let v4 = client([198, 51, 100, 7]);
        let v6: IpAddr = "2001:db8:42::9".parse().unwrap();
        let got = [
            affinity_hash(v4, a),
            affinity_hash(v4, b),
            affinity_hash(v6, a),
            affinity_hash(v6, b),
        ];
        assert_eq!(got, PINNED_HASHES, "{got:#018x?}");
        let ranks = [
            affinity_rank(got[0], 1),
            affinity_rank(got[0], 3),
            affinity_rank(got[3], 256),
        ];
        assert_eq!(ranks, PINNED_RANKS, "{ranks:?}");
        // An IPv4 client is hashed as its IPv4-mapped form.
        assert_eq!(
            affinity_hash("::ffff:198.51.100.7".parse().unwrap(), a),
            got[0]
        );
    }

    /// Cross-checked against an independent SipHash-2-4 implementation.
    const PINNED_HASHES: [u64; 4] = [
        0xd3c5_84dd_78c7_f22d,
        0x9d6e_3495_2db9_97be,
        0x2d6c_18f2_259f_5e7d,
        0x2931_6952_dabd_bbfe,
    ];
    /// Within 2^-32 of -log2(u) × 2^64 / weight computed in floating point.
    const PINNED_RANKS: [u128; 3] = [
        5_047_674_170_188_496_896,
        1_682_558_056_729_498_965,
        189_920_200_206_843_904,
    ];

    #[test]
    fn the_fixed_point_log_is_exact_at_powers_of_two_and_monotonic() {
        assert_eq!(neg_log2_fixed(u64::MAX), 0);
        // u = 2^-1, 2^-2, 2^-64.
        assert_eq!(neg_log2_fixed((1 << 63) - 1), 1 << 32);
        assert_eq!(neg_log2_fixed((1 << 62) - 1), 2 << 32);
        assert_eq!(neg_log2_fixed(0), 64 << 32);
        // -log2(0.75) = 0.415037...
        let v = neg_log2_fixed(0xBFFF_FFFF_FFFF_FFFF) as f64 / 2f64.powi(32);
        assert!((v - 0.415_037_499_278_843_8).abs() < 1e-8, "{v}");
        let mut last = u64::MAX;
        for h in (0..64).map(|k| 1u64 << k) {
            let v = neg_log2_fixed(h);
            assert!(v <= last);
            last = v;
        }
    }
}
