//! Choosing the addresses a connection tries, in order: the backend's
//! `policy` ranks the set, healthy addresses come before down ones, and the
//! plan stops at `connect_attempts`.
//!
//! Health orders, it never refuses: when every address is down they are all
//! still tried, in policy order (a checker that is wrong, or slower than a
//! recovery, must not become the reason a client is turned away).
//!
//! Policies: `ordered` (list order), `round_robin` (a rotating start),
//! `least_connections` (fewest open connections, ties rotated),
//! `source_hash` (rendezvous hashing on the client's IP address, never its
//! port, so a client stays on its address while the set around it changes
//! and only the clients of a removed address move), `fastest` (the ranked
//! choice first, then list order).
//!
//! Cost: no allocation; O(n × attempts) comparisons for a set of n, with
//! attempts ≤ 64. Not here: connecting or health bookkeeping.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::Endpoint;
use crate::cidr::canonical;
use crate::config::Policy;

/// Upper bound of `connect_attempts` (the configuration enforces it).
pub const MAX_ATTEMPTS: usize = 64;

/// The indices (into the set) of the addresses to try, best first.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    order: [u16; MAX_ATTEMPTS],
    len: usize,
}

impl Plan {
    pub fn as_slice(&self) -> &[u16] {
        &self.order[..self.len]
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn contains(&self, i: usize) -> bool {
        self.as_slice().contains(&(i as u16))
    }
}

/// What a policy may look at besides the set.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The client's address: the claimed one behind a trusted relay.
    pub client: IpAddr,
    /// The backend's rotating counter (`round_robin`, ties of `least_connections`).
    pub rotation: &'a AtomicUsize,
    /// `fastest`: the address the ranking prefers now.
    pub preferred: Option<SocketAddr>,
}

/// Plans up to `attempts` addresses of `set` under `policy`.
pub fn plan(policy: Policy, set: &[Endpoint], attempts: usize, cx: &Context<'_>) -> Plan {
    let n = set.len().min(usize::from(u16::MAX));
    let attempts = attempts.min(MAX_ATTEMPTS).min(n);
    let start = match policy {
        Policy::RoundRobin | Policy::LeastConnections if n > 0 => {
            cx.rotation.fetch_add(1, Ordering::Relaxed) % n
        }
        _ => 0,
    };
    let client = canonical(cx.client);
    // Lower ranks first.
    let rank = |i: usize| -> u128 {
        let rotated = ((i + n - start) % n) as u128;
        match policy {
            Policy::Ordered => i as u128,
            Policy::RoundRobin => rotated,
            Policy::LeastConnections => ((set[i].state.active() as u128) << 64) | rotated,
            Policy::SourceHash => u128::from(u64::MAX - affinity(client, set[i].addr)),
            Policy::Fastest => {
                let preferred = cx.preferred == Some(set[i].addr);
                (u128::from(!preferred) << 64) | i as u128
            }
        }
    };
    let mut plan = Plan {
        order: [0; MAX_ATTEMPTS],
        len: 0,
    };
    for want_up in [true, false] {
        while plan.len < attempts {
            let best = (0..n)
                .filter(|&i| set[i].state.is_up() == want_up && !plan.contains(i))
                .min_by_key(|&i| rank(i));
            let Some(best) = best else { break };
            plan.order[plan.len] = best as u16;
            plan.len += 1;
        }
    }
    plan
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
    use std::time::Duration;

    fn set(n: u16) -> std::sync::Arc<[Endpoint]> {
        let addrs: Vec<SocketAddr> = (1..=n)
            .map(|p| SocketAddr::from(([127, 0, 0, 1], p)))
            .collect();
        carry(&[], &addrs)
    }

    fn cx<'a>(rotation: &'a AtomicUsize, client: [u8; 4]) -> Context<'a> {
        Context {
            client: IpAddr::from(client),
            rotation,
            preferred: None,
        }
    }

    fn ports(set: &[Endpoint], plan: &Plan) -> Vec<u16> {
        plan.as_slice()
            .iter()
            .map(|&i| set[i as usize].addr.port())
            .collect()
    }

    fn mark_down(e: &Endpoint) {
        e.state
            .connect_failed("b", e.addr, 1, Duration::from_secs(60));
    }

    #[test]
    fn ordered_is_list_order_with_down_addresses_last() {
        let s = set(4);
        let r = AtomicUsize::new(0);
        assert_eq!(
            ports(&s, &plan(Policy::Ordered, &s, 3, &cx(&r, [10, 0, 0, 1]))),
            [1, 2, 3]
        );
        mark_down(&s[0]);
        assert_eq!(
            ports(&s, &plan(Policy::Ordered, &s, 3, &cx(&r, [10, 0, 0, 1]))),
            [2, 3, 4]
        );
        assert_eq!(
            ports(&s, &plan(Policy::Ordered, &s, 4, &cx(&r, [10, 0, 0, 1]))),
            [2, 3, 4, 1]
        );
    }

    #[test]
    fn every_address_down_still_plans_all_of_them() {
        let s = set(3);
        s.iter().for_each(mark_down);
        let r = AtomicUsize::new(0);
        assert_eq!(
            ports(&s, &plan(Policy::Ordered, &s, 3, &cx(&r, [10, 0, 0, 1]))),
            [1, 2, 3]
        );
    }

    #[test]
    fn round_robin_rotates_the_first_choice() {
        let s = set(3);
        let r = AtomicUsize::new(0);
        let firsts: Vec<u16> = (0..6)
            .map(|_| ports(&s, &plan(Policy::RoundRobin, &s, 2, &cx(&r, [10, 0, 0, 1])))[0])
            .collect();
        assert_eq!(firsts, [1, 2, 3, 1, 2, 3]);
    }

    #[test]
    fn least_connections_prefers_the_least_loaded() {
        let s = set(3);
        let _a = s[0].state.enter();
        let _b = s[0].state.enter();
        let _c = s[2].state.enter();
        let r = AtomicUsize::new(0);
        assert_eq!(
            ports(
                &s,
                &plan(Policy::LeastConnections, &s, 3, &cx(&r, [10, 0, 0, 1]))
            ),
            [2, 3, 1]
        );
    }

    #[test]
    fn source_hash_is_sticky_on_the_ip_and_moves_only_clients_of_a_removed_address() {
        let s = set(5);
        let r = AtomicUsize::new(0);
        let pick =
            |s: &[Endpoint], c: [u8; 4]| ports(s, &plan(Policy::SourceHash, s, 1, &cx(&r, c)))[0];
        let mut spread = std::collections::HashSet::new();
        for last in 0..200u8 {
            let client = [10, 0, 1, last];
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
        let mapped = Context {
            client: "::ffff:10.0.1.7".parse().unwrap(),
            rotation: &r,
            preferred: None,
        };
        assert_eq!(
            ports(&s, &plan(Policy::SourceHash, &s, 1, &mapped))[0],
            pick(&s, [10, 0, 1, 7])
        );
    }

    #[test]
    fn fastest_puts_the_preferred_address_first() {
        let s = set(3);
        let r = AtomicUsize::new(0);
        let c = Context {
            client: IpAddr::from([10, 0, 0, 1]),
            rotation: &r,
            preferred: Some(s[2].addr),
        };
        assert_eq!(ports(&s, &plan(Policy::Fastest, &s, 3, &c)), [3, 1, 2]);
    }

    #[test]
    fn attempts_are_capped_by_the_set_and_the_maximum() {
        let s = set(2);
        let r = AtomicUsize::new(0);
        assert_eq!(
            plan(Policy::Ordered, &s, 10, &cx(&r, [10, 0, 0, 1])).len(),
            2
        );
        assert!(plan(Policy::Ordered, &[], 3, &cx(&r, [10, 0, 0, 1])).is_empty());
    }
}
