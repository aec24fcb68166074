//! Choosing a QUIC flow's backend address, and what the flow then tells
//! passive health about it.
//!
//! The choice is the one both transports share
//! ([`crate::backend::candidates`]): the fixed set,
//! a DNS backend's resolved set (waiting up to `connect_timeout` for the
//! first answer, then `no_address`), or a cluster's per-SNI answer (with
//! `local_overrides`, pushed local names, `allowed_targets` and
//! `node_choice`, the cluster's `local_backend` when the answer is this
//! node); ranked by the policy, healthy addresses first, drained and
//! maintained addresses and those at their cap left out. UDP has no connect
//! that could fail, so there is no attempts loop: the first planned address
//! whose slot can be taken wins, and the flow holds that slot
//! ([`InFlight`]) while it is open, so caps and `least_connections` count
//! flows as they count TCP connections. A plan with every address at its
//! cap closes the flow `backend_full`.
//!
//! Passive health ([`Health`]): a flow has no connect, so what stands for
//! one is the backend's first answer. An ICMP port unreachable (a refused
//! receive on the flow's backend socket) before any answer counts as a
//! failed connect to the address (once per flow, so a client's
//! retransmissions do not mark it down alone); the first answer counts as a
//! successful one, and its delay after the flow's first datagram feeds the
//! backend's connect-time histogram. Later refusals are the backend's
//! business (a restart): the flow goes on until it idles out.
//!
//! The flow's backend socket is bound as the address's `source` says
//! ([`Picked::egress`]: a source address in turn, or the client's own
//! address and port); a socket that cannot be bound for want of a local
//! port is not the backend's fault and is not counted against it.
//!
//! Not here: the flow's sockets and datagrams (`super::socket_task`), the
//! planning itself ([`crate::backend::plan`]).

use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use tokio::time::Instant;

use crate::backend::candidates::{self, ConnectError, Pick, Report, Slot};
use crate::backend::egress::EgressChoice;
use crate::backend::{Backend, BackendRuntime, Backends, InFlight};
use crate::metrics::BackendSeries;

/// The address a flow goes to, with its slot taken.
#[derive(Debug)]
pub(crate) struct Picked {
    pub addr: SocketAddr,
    /// Counts the flow on its address until dropped.
    pub in_flight: InFlight,
    /// The flow goes to a cluster's `local_backend`.
    pub local: bool,
    /// What the flow reports to the address's passive health.
    pub health: Health,
    /// Where the flow's backend socket is bound from (the address's
    /// `source`, see [`crate::backend::egress`]).
    pub egress: EgressChoice,
}

/// Chooses the address of `runtime`'s backend for a flow described by
/// `pick`: the first planned address whose slot can be taken.
pub(crate) async fn pick(
    backends: &Backends,
    runtime: &BackendRuntime,
    pick: &Pick,
) -> Result<Picked, ConnectError> {
    let candidates = candidates::candidates(backends, runtime, pick).await?;
    let mut walk = candidates.walk(pick.client.ip());
    let Some(Slot { addr, in_flight }) = walk.next_slot() else {
        return Err(walk.exhausted(None));
    };
    Ok(Picked {
        addr,
        in_flight,
        local: candidates.local,
        health: Health {
            backend: candidates.runtime.config.clone(),
            metrics: candidates.runtime.metrics.clone(),
            addr,
            verdict: None,
        },
        egress: candidates.runtime.egress.for_addr(addr).clone(),
    })
}

/// [`pick`] without waiting, for a backend whose addresses are known now
/// (fixed, or a DNS set already resolved): `None` when the choice would
/// wait (a first DNS answer, or any cluster lookup), and the caller runs
/// [`pick`] in a task. Spares the usual flow a task and a channel hop.
pub(crate) fn pick_now(
    backends: &Backends,
    runtime: &BackendRuntime,
    for_flow: &Pick,
) -> Option<Result<Picked, ConnectError>> {
    // A cluster lookup is never polled and dropped half-way: it holds the
    // name's single flight.
    if runtime.cluster.is_some() {
        return None;
    }
    // With the set known, `pick` completes on its first poll; otherwise it
    // has only subscribed to the DNS answer, which dropping undoes.
    let future = pin!(pick(backends, runtime, for_flow));
    match future.poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(outcome) => Some(outcome),
        Poll::Pending => None,
    }
}

/// A flow's report to its address's passive health: one verdict per flow.
#[derive(Debug)]
pub(crate) struct Health {
    /// The backend whose address it is (a cluster's `local_backend` for a
    /// local flow): its name, `max_fails` and `fail_backoff`.
    backend: Arc<Backend>,
    metrics: BackendSeries,
    addr: SocketAddr,
    /// Whether the verdict is given: `Some(true)` once the backend answered.
    verdict: Option<bool>,
}

impl Health {
    fn report(&self) -> Report<'_> {
        Report {
            backend: &self.backend,
            metrics: &self.metrics,
        }
    }

    /// The backend sent a datagram: a successful connect (the first time).
    pub(crate) fn answered(&mut self, in_flight: &InFlight, started: Instant) {
        if self.verdict == Some(true) {
            return;
        }
        // Counted once: a refusal before it was counted already.
        let took = self.verdict.is_none().then(|| started.elapsed());
        self.verdict = Some(true);
        self.report().succeeded(in_flight, self.addr, took);
    }

    /// The backend's socket reported a refusal (ICMP port unreachable):
    /// a failed connect if the backend never answered and the flow had not
    /// reported one yet. Returns whether it counted.
    pub(crate) fn refused(&mut self, in_flight: &InFlight) -> bool {
        if self.verdict.is_some() {
            return false;
        }
        self.verdict = Some(false);
        self.report().failed(in_flight, self.addr);
        true
    }
}

#[cfg(test)]
mod tests {
    use crate::quic::backend_address::*;
    use std::path::Path;

    use crate::backend::AddressState;
    use crate::config::Config;

    /// Backends of a quic listener's route: `b` with `body`, and a
    /// cluster `c` whose lookup is never reached here.
    fn backends(body: &str) -> Backends {
        let config = Config::from_toml(
            &format!(
                r#"
                [[listener]]
                name = "h3"
                protocol = "quic"
                listen = ["127.0.0.1:0"]
                [[route]]
                sni = ["example.com"]
                backend = "b"
                [[route]]
                sni = ["*.example.com"]
                backend = "c"
                [backend.b]
                {body}
                [backend.c.cluster]
                lookup_url = "http://127.0.0.1:9/resolve"
                allowed_targets = ["127.0.0.0/8"]
                "#
            ),
            Path::new("pick.toml"),
        )
        .unwrap();
        Backends::start(&config.backends, None)
    }

    fn for_flow() -> Pick {
        Pick {
            client: "10.0.0.1:4433".parse().unwrap(),
            claimed: false,
            sni: Some("example.com".into()),
            local: Some("127.0.0.1".parse().unwrap()),
        }
    }

    fn now(backends: &Backends, name: &str) -> Option<Result<Picked, ConnectError>> {
        pick_now(backends, backends.get(name).unwrap(), &for_flow())
    }

    #[tokio::test]
    async fn the_first_free_planned_address_wins_and_its_slot_is_held() {
        let backends = backends(
            r#"addresses = ["127.0.0.1:1", "127.0.0.1:2"]
               max_connections_per_address = 1"#,
        );
        let first = now(&backends, "b").unwrap().unwrap();
        assert_eq!(first.addr.port(), 1);
        // `ordered`: the next flow skips the full address.
        let second = now(&backends, "b").unwrap().unwrap();
        assert_eq!(second.addr.port(), 2);
        assert!(matches!(now(&backends, "b"), Some(Err(ConnectError::Full))));
        drop(first);
        assert_eq!(now(&backends, "b").unwrap().unwrap().addr.port(), 1);
    }

    #[tokio::test]
    async fn drained_addresses_are_not_chosen_and_none_left_is_no_connect() {
        let backends = backends(r#"addresses = ["127.0.0.1:1", "127.0.0.1:2"]"#);
        let set = backends.get("b").unwrap().current().set;
        set[0].state.set_operator(AddressState::Maint);
        assert_eq!(now(&backends, "b").unwrap().unwrap().addr.port(), 2);
        set[1].state.set_operator(AddressState::Drain);
        assert!(matches!(
            now(&backends, "b"),
            Some(Err(ConnectError::Failed { attempts: 0, .. }))
        ));
    }

    #[tokio::test]
    async fn a_cluster_lookup_is_never_started_without_waiting() {
        let backends = backends(r#"addresses = ["127.0.0.1:1"]"#);
        assert!(now(&backends, "c").is_none());
        assert_eq!(
            backends.get("c").unwrap().cluster.as_ref().unwrap().len(),
            0
        );
    }

    #[tokio::test]
    async fn a_refusal_before_any_answer_is_one_failed_connect_per_flow() {
        let backends = backends(
            r#"addresses = ["127.0.0.1:1"]
               max_fails = 2"#,
        );
        let mut flow = now(&backends, "b").unwrap().unwrap();
        let state = flow.in_flight.state().clone();
        assert!(flow.health.refused(&flow.in_flight));
        assert!(!flow.health.refused(&flow.in_flight), "once per flow");
        assert!(state.is_up(), "one flow's refusals are one failure");
        let mut other = now(&backends, "b").unwrap().unwrap();
        assert!(other.health.refused(&other.in_flight));
        assert!(!state.is_up(), "max_fails flows refused: down");
        // An answer (even after a refusal) brings it back; later refusals
        // are not counted.
        flow.health.answered(&flow.in_flight, Instant::now());
        assert!(state.is_up());
        assert!(!flow.health.refused(&flow.in_flight));
        assert!(state.is_up());
    }
}
