//! Choosing the addresses a connection tries, in order: the backend's
//! policy ranks the set (`super::balance`), healthy addresses come before
//! down ones, addresses at their connection cap are left out, and the plan
//! stops at `connect_attempts`.
//!
//! Health orders, it never refuses: when every address is down they are all
//! still tried, in policy order (a checker that is wrong, or slower than a
//! recovery, must not become the reason a client is turned away). A cap
//! does refuse: an address with `max_connections` open is not planned at
//! all, and a plan with no address left (`Plan::full`) closes the
//! connection `backend_full` without a connect (the cap is the operator's
//! statement of what the backend can take).
//!
//! An address the operator drained or put in maintenance
//! (`super::AddressState`) is never planned either: that is a refusal
//! the operator asked for, unlike health.
//!
//! Cost: no allocation; one rank per address (for the first 64; beyond,
//! one per address and attempt) and O(n × attempts) comparisons for a set
//! of n, with attempts ≤ 64, plus what the policy reads once per plan (see
//! `super::balance`); `benches/select.rs` measures it. Not here: what any
//! one policy does, connecting, or health bookkeeping.

use std::net::IpAddr;

use super::Endpoint;
use crate::backend::balance::{Policy, Ranker, State};

/// Upper bound of `connect_attempts` (the configuration enforces it).
pub(crate) const MAX_ATTEMPTS: usize = 64;
/// Addresses whose rank a plan computes once and keeps (on the stack).
const RANKED: usize = 64;

/// The indices (into the set) of the addresses to try, best first.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    order: [u16; MAX_ATTEMPTS],
    len: usize,
    /// Addresses left out because they were at their cap.
    full: usize,
}

impl Plan {
    pub(crate) fn as_slice(&self) -> &[u16] {
        &self.order[..self.len]
    }

    /// How many addresses the plan tries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the plan has no address to try.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the plan is empty because every address is at its cap.
    pub(crate) fn full(&self) -> bool {
        self.len == 0 && self.full > 0
    }

    fn contains(&self, i: usize) -> bool {
        self.as_slice().contains(&(i as u16))
    }
}

/// Plans up to `attempts` addresses of `set` under `policy`, whose
/// run-time state is `state`, for a connection from `client` (the claimed
/// address behind a trusted relay). `cap` is the backend's
/// `max_connections_per_address` (an address's own cap wins).
pub fn plan(
    policy: Policy,
    state: &State,
    set: &[Endpoint],
    attempts: usize,
    client: IpAddr,
    cap: Option<u32>,
) -> Plan {
    let set = &set[..set.len().min(usize::from(u16::MAX))];
    let ranker = policy.ranker(state, set, client, |e| {
        e.state.is_up() && e.state.selectable() && !e.is_full(cap)
    });
    plan_ranked(ranker, set, attempts, cap)
}

/// [`plan`] with the ranking given: for a choice that is not a backend
/// policy (a cluster's `node_choice = "gerbil_fnv"`, a rotation that
/// starts at Gerbil's pick).
pub(crate) fn plan_ranked(
    ranker: Ranker,
    set: &[Endpoint],
    attempts: usize,
    cap: Option<u32>,
) -> Plan {
    let set = &set[..set.len().min(usize::from(u16::MAX))];
    let n = set.len();
    let full = set.iter().filter(|e| e.is_full(cap)).count();
    let attempts = attempts.min(MAX_ATTEMPTS).min(n - full);
    let mut plan = Plan {
        order: [0; MAX_ATTEMPTS],
        len: 0,
        full,
    };
    // Each address's rank is computed once per plan for the first
    // `RANKED` addresses (a `source_hash` rank is a SipHash and a
    // fixed-point log, worth not repeating per attempt); beyond them, on
    // the fly.
    let mut ranks = [0u128; RANKED];
    for (i, rank) in ranks.iter_mut().enumerate().take(n) {
        *rank = ranker.rank(set, i);
    }
    let rank = |i: usize| match ranks.get(i) {
        Some(&rank) => rank,
        None => ranker.rank(set, i),
    };
    for want_up in [true, false] {
        while plan.len < attempts {
            let best = (0..n)
                .filter(|&i| {
                    set[i].state.is_up() == want_up
                        && set[i].state.selectable()
                        && !set[i].is_full(cap)
                        && !plan.contains(i)
                })
                .min_by_key(|&i| rank(i));
            let Some(best) = best else { break };
            plan.order[plan.len] = best as u16;
            plan.len += 1;
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use crate::backend::endpoint::carry;
    use crate::backend::plan::*;
    use std::net::SocketAddr;
    use std::time::Duration;

    fn set(n: u16) -> std::sync::Arc<[Endpoint]> {
        let addrs: Vec<SocketAddr> = (1..=n)
            .map(|p| SocketAddr::from(([127, 0, 0, 1], p)))
            .collect();
        carry(&[], &addrs)
    }

    const CLIENT: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));

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
        let st = State::default();
        assert_eq!(
            ports(&s, &plan(Policy::Ordered, &st, &s, 3, CLIENT, None)),
            [1, 2, 3]
        );
        mark_down(&s[0]);
        assert_eq!(
            ports(&s, &plan(Policy::Ordered, &st, &s, 3, CLIENT, None)),
            [2, 3, 4]
        );
        assert_eq!(
            ports(&s, &plan(Policy::Ordered, &st, &s, 4, CLIENT, None)),
            [2, 3, 4, 1]
        );
    }

    #[test]
    fn every_address_down_still_plans_all_of_them() {
        let s = set(3);
        s.iter().for_each(mark_down);
        let st = State::default();
        assert_eq!(
            ports(&s, &plan(Policy::Ordered, &st, &s, 3, CLIENT, None)),
            [1, 2, 3]
        );
    }

    #[test]
    fn attempts_are_capped_by_the_set_and_the_maximum() {
        let s = set(2);
        let st = State::default();
        assert_eq!(plan(Policy::Ordered, &st, &s, 10, CLIENT, None).len(), 2);
        assert!(plan(Policy::Ordered, &st, &[], 3, CLIENT, None).is_empty());
    }

    #[test]
    fn addresses_at_their_cap_are_left_out_and_all_full_says_so() {
        let s = set(3);
        let _a = s[0].state.enter();
        // Backend-wide cap 1: address 1 is full, the others are planned.
        let st = State::default();
        let p = plan(Policy::Ordered, &st, &s, 3, CLIENT, Some(1));
        assert_eq!(ports(&s, &p), [2, 3]);
        assert!(!p.full());
        let _b = s[1].state.enter();
        let _c = s[2].state.enter();
        let p = plan(Policy::Ordered, &st, &s, 3, CLIENT, Some(1));
        assert!(p.is_empty() && p.full());
        // No cap: everything, and an empty set is not "full".
        assert_eq!(plan(Policy::Ordered, &st, &s, 3, CLIENT, None).len(), 3);
        assert!(!plan(Policy::Ordered, &st, &[], 3, CLIENT, Some(1)).full());
    }

    #[test]
    fn an_empty_set_plans_nothing_under_every_policy() {
        // The rotating policies must not divide by the size of an empty set.
        let st = State::default();
        for &p in Policy::ALL {
            assert!(plan(p, &st, &[], 3, CLIENT, None).is_empty(), "{p:?}");
        }
    }
}
