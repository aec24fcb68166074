//! Choosing the addresses a connection tries, in order: the backend's
//! policy ranks the set (`super::balance`), healthy addresses come before
//! down ones, addresses at their connection cap are left out, and the plan
//! stops at `connect_attempts`.
//!
//! `backup` addresses (HAProxy's `backup` servers) are planned only when
//! every other address is down (by its health check or passively, or
//! drained by the operator): then the healthy backups come first, in list
//! order (`backup_policy = "first"`: the first of them takes the
//! connections, the others are its failover) or ranked by the policy
//! (`"all"`, HAProxy's `option allbackups`); then the down non-backup
//! addresses, then the down backups. While a non-backup address is up no
//! backup is planned.
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
//! `super::balance`), and one more pass over the set to see whether it is
//! the backups' turn; `benches/select.rs` measures it. Not here: what any
//! one policy does, connecting, or health bookkeeping.

use std::net::IpAddr;

use super::Endpoint;
use crate::backend::balance::{Policy, Ranker};
use crate::backend::policy_state::State;
pub use crate::config::BackupPolicy;

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
    plan_with_backups(
        policy,
        BackupPolicy::First,
        state,
        set,
        attempts,
        client,
        cap,
    )
}

/// [`plan`] for a backend whose `backup_policy` is `backups` (it matters
/// only when the set has `backup` addresses).
pub fn plan_with_backups(
    policy: Policy,
    backups: BackupPolicy,
    state: &State,
    set: &[Endpoint],
    attempts: usize,
    client: IpAddr,
    cap: Option<u32>,
) -> Plan {
    let set = &set[..set.len().min(usize::from(u16::MAX))];
    // The backups take the turn only while every other address is down.
    let on_backups = on_backups(set);
    let ranker = policy.ranker(
        state,
        set,
        client,
        |e| e.backup == on_backups && e.state.is_up() && e.state.selectable() && !e.is_full(cap),
        |e| e.backup == on_backups,
    );
    plan_tiers(ranker, backups, set, attempts, cap)
}

/// Whether every non-`backup` address of `set` is down or drained (and the
/// set has a backup): the backups' turn.
fn on_backups(set: &[Endpoint]) -> bool {
    set.iter().any(|e| e.backup)
        && !set
            .iter()
            .any(|e| !e.backup && e.state.is_up() && e.state.selectable())
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
    plan_tiers(ranker, BackupPolicy::First, set, attempts, cap)
}

/// The plan, tier by tier: without backups (or while a non-backup address
/// is up), the healthy addresses then the down ones; on the backups' turn,
/// the healthy backups, the down non-backup addresses, the down backups.
fn plan_tiers(
    ranker: Ranker,
    backups: BackupPolicy,
    set: &[Endpoint],
    attempts: usize,
    cap: Option<u32>,
) -> Plan {
    let set = &set[..set.len().min(usize::from(u16::MAX))];
    // (backup, up) of each tier, in the order they are planned.
    let tiers: &[(bool, bool)] = if on_backups(set) {
        &[(true, true), (false, false), (true, false)]
    } else {
        &[(false, true), (false, false)]
    };
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
    let rank = |i: usize| match (set[i].backup, backups, ranks.get(i)) {
        // The first usable backup takes the connections: list order.
        (true, BackupPolicy::First, _) => i as u128,
        (_, _, Some(&rank)) => rank,
        (_, _, None) => ranker.rank(set, i),
    };
    for &(backup, want_up) in tiers {
        while plan.len < attempts {
            let best = (0..n)
                .filter(|&i| {
                    set[i].backup == backup
                        && set[i].state.is_up() == want_up
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

    /// Ports 1..=n, those in `backups` marked `backup`.
    fn with_backups(n: u16, backups: &[u16]) -> std::sync::Arc<[Endpoint]> {
        let members: Vec<crate::config::Member> = (1..=n)
            .map(|p| crate::config::Member {
                backup: backups.contains(&p),
                ..crate::config::Member::plain(SocketAddr::from(([127, 0, 0, 1], p)))
            })
            .collect();
        crate::backend::carry_members(&[], &members)
    }

    fn planned(policy: Policy, backups: BackupPolicy, s: &[Endpoint], st: &State) -> Vec<u16> {
        ports(
            s,
            &plan_with_backups(policy, backups, st, s, 8, CLIENT, None),
        )
    }

    #[test]
    fn backups_are_planned_only_once_every_other_address_is_down() {
        // 1 and 2 serve; 3 and 4 are backups.
        let s = with_backups(4, &[3, 4]);
        let st = State::default();
        for policy in [BackupPolicy::First, BackupPolicy::All] {
            assert_eq!(planned(Policy::Ordered, policy, &s, &st), [1, 2]);
        }
        mark_down(&s[0]);
        assert_eq!(
            planned(Policy::Ordered, BackupPolicy::First, &s, &st),
            [2, 1],
            "one address up: no backup"
        );
        mark_down(&s[1]);
        assert_eq!(
            planned(Policy::Ordered, BackupPolicy::First, &s, &st),
            [3, 4, 1, 2],
            "healthy backups in list order, then the down addresses, non-backup first"
        );
        mark_down(&s[2]);
        assert_eq!(
            planned(Policy::Ordered, BackupPolicy::First, &s, &st),
            [4, 1, 2, 3]
        );
        mark_down(&s[3]);
        assert_eq!(
            planned(Policy::Ordered, BackupPolicy::First, &s, &st),
            [1, 2, 3, 4],
            "everything down: all tried, non-backup first"
        );
        // A drained address counts as down for the backups' turn.
        let s = with_backups(2, &[2]);
        s[0].state.set_operator(crate::backend::AddressState::Drain);
        assert_eq!(planned(Policy::Ordered, BackupPolicy::First, &s, &st), [2]);
    }

    #[test]
    fn the_first_backup_takes_every_connection_unless_all_backups_share_them() {
        let s = with_backups(3, &[2, 3]);
        mark_down(&s[0]);
        let st = State::default();
        let firsts = |backups| {
            (0..4)
                .map(|_| planned(Policy::RoundRobin, backups, &s, &st)[0])
                .collect::<Vec<_>>()
        };
        assert_eq!(firsts(BackupPolicy::First), [2, 2, 2, 2]);
        let mut all = firsts(BackupPolicy::All);
        all.sort_unstable();
        assert_eq!(all, [2, 2, 3, 3], "the backups take turns");
    }

    #[test]
    fn a_backup_at_the_end_does_not_skew_the_rotation_of_the_others() {
        let s = with_backups(3, &[3]);
        let st = State::default();
        let mut firsts: Vec<u16> = (0..4)
            .map(|_| planned(Policy::RoundRobin, BackupPolicy::First, &s, &st)[0])
            .collect();
        firsts.sort_unstable();
        assert_eq!(firsts, [1, 1, 2, 2]);
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
