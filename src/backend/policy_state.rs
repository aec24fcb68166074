//! What a backend's policy keeps between connections: one [`State`] per
//! backend runtime, and so carried over a reload with it. The rotating
//! start of `round_robin` and `least_connections`, the counters of smooth
//! weighted round-robin (`Smooth`, and how a pick moves them), and
//! `fastest`'s current choice (`Ranking`).
//!
//! Not here: the policies and how one reads this state for a connection
//! ([`crate::backend::balance`]), the task that keeps `fastest`'s choice
//! fresh (`super::fastest`).

use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::AtomicUsize;

use super::Endpoint;

/// What a policy keeps between connections, one per backend runtime (and
/// so carried over a reload with it).
#[derive(Debug, Default)]
pub struct State {
    /// `round_robin` and `least_connections`: the rotating start.
    pub(super) rotation: AtomicUsize,
    /// `round_robin` with unequal weights: the smooth rotation.
    pub(super) smooth: Smooth,
    /// `fastest`: the current choice, kept by `fastest::run`.
    pub(super) ranking: Ranking,
}

/// Smooth weighted round-robin (the sequence nginx's upstream module
/// produces): every pick adds each eligible address's weight to its
/// counter, takes the address with the highest counter (the first on a
/// tie) and takes the total weight off it. Over any run of `total weight`
/// picks each address is chosen `weight` times, spread out rather than in
/// bursts (weights 5, 1, 1 give a a b a c a a, not a a a a a b c).
#[derive(Debug, Default)]
pub(super) struct Smooth {
    /// The counter of each address, by address: a set that changes
    /// (never for a fixed list) keeps the counters of the addresses it kept.
    current: Mutex<Vec<(SocketAddr, i64)>>,
}

impl Smooth {
    /// The index in `set` of the next pick among the `eligible` addresses
    /// (all of them when none is).
    pub(super) fn pick(&self, set: &[Endpoint], eligible: impl Fn(&Endpoint) -> bool) -> usize {
        if set.is_empty() {
            return 0;
        }
        let any = set.iter().any(&eligible);
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        let same =
            current.len() == set.len() && current.iter().zip(set).all(|(c, e)| c.0 == e.addr);
        if !same {
            let kept: Vec<(SocketAddr, i64)> = set
                .iter()
                .map(|e| {
                    let was = current.iter().find(|c| c.0 == e.addr).map_or(0, |c| c.1);
                    (e.addr, was)
                })
                .collect();
            *current = kept;
        }
        let mut total = 0i64;
        let mut best: Option<usize> = None;
        for (i, endpoint) in set.iter().enumerate() {
            if any && !eligible(endpoint) {
                continue;
            }
            let weight = i64::from(endpoint.weight);
            current[i].1 += weight;
            total += weight;
            if best.is_none_or(|b| current[i].1 > current[b].1) {
                best = Some(i);
            }
        }
        let best = best.unwrap_or(0);
        current[best].1 -= total;
        best
    }
}

/// The current choice of a `fastest` backend.
#[derive(Debug, Default)]
pub(crate) struct Ranking {
    preferred: Mutex<Option<SocketAddr>>,
}

impl Ranking {
    /// The address connections should try first, if any is ranked.
    pub(crate) fn preferred(&self) -> Option<SocketAddr> {
        *self.preferred.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn set(&self, addr: Option<SocketAddr>) {
        *self.preferred.lock().unwrap_or_else(|e| e.into_inner()) = addr;
    }
}
