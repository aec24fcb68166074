//! Address validation of open flows (RFC 9000 §8, §21.1.1): a client's
//! first Initial is sealed with keys anyone can derive, so a complete,
//! routable Initial can come from any spoofed address. An open flow is
//! *unvalidated* until its client sends a datagram to a connection ID the
//! backend chose in its answer
//! ([`FlowCids::carried_by`](crate::quic::cid::FlowCids::carried_by): only a sender
//! that receives at the flow's address can know it); only then does it
//! take a process-wide connection permit ([`Permits`], `[global]
//! max_connections`). Until then it lives in this socket's small budget
//! of unvalidated flows ([`Unvalidated`]): at most
//! [`MAX_UNVALIDATED_FLOWS`] in all and [`MAX_UNVALIDATED_PER_SOURCE`] per
//! [`source_key`](super::bounds::source_key), for at most
//! [`UNVALIDATED_LIFETIME`] (then it closes `unvalidated`); a new flow at a
//! bound takes the place of the oldest (of its source's, at the source
//! bound), which closes `evicted`, so a flood of forged Initials never
//! keeps a real client out and never holds a permit a TCP client needs.
//! A flow that validates when no permit is free closes `max_connections`
//! and is counted in the socket's summary of new flows dropped at a bound
//! (what a full process does to a new QUIC flow).
//!
//! What the relay sends toward an unvalidated address is held to
//! [`AMPLIFICATION_FACTOR`] times what it received from it ([`may_send`],
//! asked by the flow task per backend datagram; one past it is dropped and
//! counted, and the backend retransmits).
//!
//! Not here: the flow states themselves ([`super::state`]), learning the
//! backend's IDs ([`crate::quic::cid`]), stopping a flow's task (the socket
//! task, on [`Event::Stop`]).
//!
//! Cost: per datagram of a validated flow, nothing more (one branch); of
//! an unvalidated one, a compare with at most four IDs. Memory: one queue
//! entry (32 B) per unvalidated flow and one per-source count.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use super::bounds::Summary;
use super::state::FlowState;
use super::{Event, FlowTable, Permits, Stages};
use crate::flow::access::CloseReason;
use crate::flow::generation::Generation;
use crate::metrics::registry::Metrics;

/// Open unvalidated flows per listening socket. A real client validates
/// one round trip after the backend's first answer, so on an edge VM 256
/// is room for 256 handshakes in flight at once (over 1,000 new flows a
/// second at a 250 ms round trip); each holds a backend socket (one file
/// descriptor) and a task, about 2 KiB, so a flood costs at most 256
/// descriptors and ~0.5 MiB per socket.
pub(crate) const MAX_UNVALIDATED_FLOWS: usize = 256;
/// Open unvalidated flows of one source per listening socket: one address
/// (or a NAT's) cannot own the budget; 32 handshakes at once is more than
/// a browser opens to one name.
pub(crate) const MAX_UNVALIDATED_PER_SOURCE: usize = 32;
/// How long an open flow may stay unvalidated: RFC 9002's first probe
/// timeout is about 1 s (3 × the 333 ms initial RTT), doubling per loss;
/// 5 s covers a client whose first two flights were lost, and a forged
/// flow that is never evicted is gone long before `idle_timeout` (30 s).
pub(crate) const UNVALIDATED_LIFETIME: Duration = Duration::from_secs(5);
/// RFC 9000 §8: before validation, at most three times the bytes received
/// from an address are sent to it.
pub(crate) const AMPLIFICATION_FACTOR: u64 = 3;
/// The shortest backend connection ID that validates a client: 4 bytes
/// (quic-go's default) cannot be guessed by a sender that does not see
/// the answer within [`UNVALIDATED_LIFETIME`]. A backend choosing shorter
/// IDs leaves its flows unvalidated (they close `unvalidated`).
pub(crate) const MIN_VALIDATING_CID_LEN: usize = 4;

/// Whether `len` more bytes may go to an unvalidated client that sent
/// `received` bytes and was sent `sent` so far (RFC 9000 §8).
pub(crate) fn may_send(received: u64, sent: u64, len: usize) -> bool {
    sent + len as u64 <= AMPLIFICATION_FACTOR * received
}

/// One socket's open unvalidated flows, oldest first.
#[derive(Debug)]
pub(super) struct Unvalidated {
    /// The process's series their gauge and closes are counted in.
    process: &'static Metrics,
    /// (opened, address, id); entries of flows that validated or ended
    /// are skipped, and compacted when they outnumber the live ones.
    order: VecDeque<(Instant, SocketAddr, u64)>,
    count: usize,
    by_source: HashMap<IpAddr, usize>,
    /// Evicted for new flows, and their summary line.
    evicted: u64,
    summary: Summary,
}

/// What became of a client datagram fed to [`FlowTable::up`].
#[derive(Debug)]
pub(crate) enum Up<'a, B> {
    /// No open flow at that address.
    NotOpen,
    /// An open flow's: relay it; `validated` if it validated the flow now
    /// (the flow task is to know: [`crate::quic::cid::Path::validate`]).
    Open { io: &'a mut B, validated: bool },
    /// It validated the flow but no permit was free: the flow closes
    /// ([`Event::Stop`]), the datagram is dropped.
    Closed,
}

impl<B, P: std::fmt::Debug, S: Stages> FlowTable<B, P, S> {
    #[cfg(test)]
    /// Open unvalidated flows, and those evicted so far.
    pub(crate) fn unvalidated(&self) -> (usize, u64) {
        (self.unvalidated.count, self.unvalidated.evicted)
    }

    /// The open flow at `from`, for its client's datagram: relayed unread
    /// (the hot path: one lookup), after it validates the flow if the flow
    /// was not yet and the datagram carries a connection ID its backend
    /// chose; the flow then takes a connection permit, or closes
    /// `max_connections` if none is free.
    pub(crate) fn up(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: &[u8],
        generation: &Generation,
        permits: &impl Permits<Permit = P>,
    ) -> Up<'_, B> {
        // One lookup (the hot path); the fields touched beside the flow
        // are disjoint from the map, so a refused flow is only marked
        // here and taken out before the next event ([`FlowTable::poll_event`]).
        let Some(FlowState::Open(open)) = self.flows.get_mut(&from) else {
            return Up::NotOpen;
        };
        let mut validated = false;
        if open.permit.is_none() && open.seen.carried_by(datagram) {
            let Some(permit) = permits.try_take() else {
                self.refused.push(from);
                if let Some(dropped) = self.drop_summary.count(now) {
                    tracing::warn!(
                        listener = %generation.listener.name,
                        dropped,
                        "QUIC datagrams of new flows dropped: pending flows, connection permits or max_connection_rate at their bound"
                    );
                }
                return Up::Closed;
            };
            open.permit = Some(permit);
            self.unvalidated.left(open.source);
            validated = true;
        }
        Up::Open {
            io: &mut open.io,
            validated,
        }
    }

    /// Ends the flows [`FlowTable::up`] refused a permit, `max_connections`.
    pub(super) fn stop_refused(&mut self) {
        while let Some(at) = self.refused.pop() {
            self.stop_unvalidated(at, CloseReason::MaxConnections);
        }
    }

    /// Validates the unvalidated open flow at `at` (its client moved and
    /// sent to a followed ID): true if it is validated now (or was), false
    /// if no permit was free and it closed.
    pub(super) fn validate_moved(
        &mut self,
        at: SocketAddr,
        permits: &impl Permits<Permit = P>,
    ) -> bool {
        let Some(FlowState::Open(open)) = self.flows.get_mut(&at) else {
            return false;
        };
        if open.permit.is_some() {
            return true;
        }
        let Some(permit) = permits.try_take() else {
            self.stop_unvalidated(at, CloseReason::MaxConnections);
            return false;
        };
        open.permit = Some(permit);
        let source = open.source;
        self.unvalidated.left(source);
        true
    }

    /// Counts a newly open flow from `source` in the budget, first ending
    /// the oldest unvalidated flow of its source at
    /// [`MAX_UNVALIDATED_PER_SOURCE`], then the oldest of all while at
    /// [`MAX_UNVALIDATED_FLOWS`] (both `evicted`).
    pub(super) fn admit_unvalidated(
        &mut self,
        now: Instant,
        at: SocketAddr,
        id: u64,
        source: IpAddr,
    ) {
        if self
            .unvalidated
            .by_source
            .get(&source)
            .copied()
            .unwrap_or(0)
            >= MAX_UNVALIDATED_PER_SOURCE
        {
            self.evict_unvalidated(now, Some(source));
        }
        while self.unvalidated.count >= MAX_UNVALIDATED_FLOWS {
            if !self.evict_unvalidated(now, None) {
                break;
            }
        }
        if self.unvalidated.order.len() >= 4 * MAX_UNVALIDATED_FLOWS {
            let flows = &self.flows;
            self.unvalidated
                .order
                .retain(|&(_, at, id)| live(flows, at, id));
        }
        let budget = &mut self.unvalidated;
        budget.order.push_back((now, at, id));
        budget.count += 1;
        *budget.by_source.entry(source).or_default() += 1;
        budget.process.quic_unvalidated(1);
    }

    /// Ends open flows still unvalidated [`UNVALIDATED_LIFETIME`] after
    /// they opened, `unvalidated`.
    pub(super) fn expire_unvalidated(&mut self, now: Instant) {
        while let Some(&(opened, at, id)) = self.unvalidated.order.front() {
            if now < opened + UNVALIDATED_LIFETIME {
                break;
            }
            self.unvalidated.order.pop_front();
            if live(&self.flows, at, id) {
                self.stop_unvalidated(at, CloseReason::Unvalidated);
            }
        }
    }

    /// Ends the oldest unvalidated flow (of `source`, if given) as
    /// `evicted`; false if there is none.
    fn evict_unvalidated(&mut self, now: Instant, source: Option<IpAddr>) -> bool {
        let flows = &self.flows;
        let found = match source {
            None => loop {
                match self.unvalidated.order.pop_front() {
                    None => break None,
                    Some((_, at, id)) if live(flows, at, id) => break Some(at),
                    Some(_) => {}
                }
            },
            // Left in the queue: its entry is stale once the flow is gone.
            Some(source) => self
                .unvalidated
                .order
                .iter()
                .find(|&&(_, at, id)| {
                    live(flows, at, id)
                        && matches!(flows.get(&at), Some(FlowState::Open(o)) if o.source == source)
                })
                .map(|&(_, at, _)| at),
        };
        let Some(at) = found else {
            return false;
        };
        self.stop_unvalidated(at, CloseReason::Evicted);
        self.unvalidated.evicted += 1;
        if let Some(evicted) = self.unvalidated.summary.count(now) {
            tracing::warn!(
                evicted,
                unvalidated = self.unvalidated.count,
                "QUIC unvalidated flows evicted to make room for new flows: unvalidated flows (or a source's share of them) at their bound"
            );
        }
        true
    }

    /// Takes the unvalidated open flow at `at` out of the table and asks
    /// the socket task to end it with `reason`.
    fn stop_unvalidated(&mut self, at: SocketAddr, reason: CloseReason) {
        let Some(FlowState::Open(open)) = self.flows.remove(&at) else {
            return;
        };
        self.cids.forget(&open.cids);
        self.unvalidated.left(open.source);
        self.unvalidated
            .process
            .quic_unvalidated_closed(reason.as_str());
        self.events.push_back(Event::Stop {
            io: open.io,
            reason,
        });
    }

    /// An open flow at `at` ended or was taken out: if it was unvalidated,
    /// it leaves the budget.
    pub(super) fn forget_unvalidated(&mut self, validated: bool, source: IpAddr) {
        if !validated {
            self.unvalidated.left(source);
        }
    }
}

impl Unvalidated {
    /// An empty budget, counted in `process`'s series.
    pub(super) fn new(process: &'static Metrics) -> Unvalidated {
        Unvalidated {
            process,
            order: VecDeque::new(),
            count: 0,
            by_source: HashMap::new(),
            evicted: 0,
            summary: Summary::default(),
        }
    }

    /// A flow of `source` left the budget (validated, or ended).
    fn left(&mut self, source: IpAddr) {
        self.count -= 1;
        self.process.quic_unvalidated(-1);
        if let Some(count) = self.by_source.get_mut(&source) {
            *count -= 1;
            if *count == 0 {
                self.by_source.remove(&source);
            }
        }
    }

    /// Forgets every flow (the socket stops).
    pub(super) fn clear(&mut self) {
        self.process.quic_unvalidated(-(self.count as i64));
        self.order.clear();
        self.by_source.clear();
        self.count = 0;
    }
}

/// Whether the open flow `id` is at `at` and still unvalidated.
fn live<B, P, S: Stages>(
    flows: &HashMap<SocketAddr, FlowState<B, P, S>>,
    at: SocketAddr,
    id: u64,
) -> bool {
    matches!(flows.get(&at), Some(FlowState::Open(o)) if o.id == id && o.permit.is_none())
}
