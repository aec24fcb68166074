//! The flow table of one QUIC listening socket, as a sans-I/O state
//! machine: fed datagrams, time and the results of the I/O it asked for, it
//! decides what each flow does and returns it as events. It reads no clock
//! (every call takes `now`, a `std::time::Instant`), holds no runtime
//! handle, guard, token or global (it is given its metric series;
//! connection permits come through [`Permits`], and what the stages hold
//! for a flow, its admission slots, drain guard and chosen address, through
//! [`Stages`], whose values it keeps unread; its tests are plain
//! `#[test]`s, some on stages of plain values) and touches no socket; the socket task
//! (`super::socket_task`) reads datagrams, feeds them here, performs the
//! returned [`Event`]s and reports back (in the spirit of quinn-proto's
//! `Endpoint::handle`).
//!
//! A flow is one client address and port, in one of three states:
//! - *pending*: its hello is not complete. A new source starts one if the
//!   table accepts new flows (not draining), `[global]
//!   max_connection_rate` leaves room and the accept gate admits it
//!   ([`crate::flow::gate`], the same gate and close as a TCP
//!   connection's); otherwise its datagram is dropped (counted, and
//!   summarised in a log line at most once a second). At the socket's
//!   pending caps ([`MAX_PENDING_FLOWS`], never more than the free
//!   connection permits, [`MAX_HELD_BYTES`]) it takes the place of
//!   the oldest pending flow, which closes `evicted` (and of its own
//!   source's oldest once the source holds [`MAX_PENDING_PER_SOURCE`]), so
//!   a half-hello flood cannot keep a new client's first datagram out.
//!   Its datagrams go to its [`Parser`] and are held (bounded per flow by
//!   [`HelloLimits`]) until the parser gives a verdict or
//!   `client_hello_timeout` passes ([`FlowTable::sweep`]);
//! - *connecting*: its hello is decided and the decision carried out
//!   ([`crate::flow::carry_out`], as a TCP connection's: routed, then
//!   admitted on the route) and the socket task was asked to choose its
//!   backend address ([`Event::Pick`]); its datagrams are still held,
//!   within the same bounds, until the answer ([`FlowTable::chosen`]), which
//!   hands the flow to the socket task to open ([`Event::Open`]), or closes
//!   it;
//! - *open*: relaying, after the socket task reported its backend socket
//!   ([`FlowTable::opened`]). Its client datagrams are returned to the
//!   socket task unread ([`FlowTable::up`]); the connection IDs its backend
//!   chose are learned ([`FlowTable::learned`]) so that a datagram from a
//!   new address carrying one of them moves the flow there (NAT rebinding,
//!   [`Datagram::Moved`] then [`FlowTable::rebind`]); it leaves the table
//!   when the socket task reports its end ([`FlowTable::ended`]). An open
//!   flow is *unvalidated* until its client sends to one of those IDs
//!   ([`validation`]): only then does it take a connection permit
//!   (`[global] max_connections`); until then it counts in the socket's
//!   small budget of unvalidated flows (a cap in all and per source,
//!   oldest evicted first, a short lifetime after which it closes
//!   `unvalidated`: [`Event::Stop`]) and is sent at most 3x what it sent.
//!   No pending or connecting flow holds a permit either.
//!
//! A refused hello closes with the QUIC refusal the client understands
//! ([`Event::Close`] with an answer: the TLS alert the TCP path would
//! send). Every close carries the flow's [`FlowRecord`], which the socket
//! task writes (`access::ConnRecord`, the access record of both protocols).
//!
//! Drain ([`FlowTable::drain`]): no new flow starts; pending flows still
//! end at their hello timeout, open ones at their own bounds;
//! [`FlowTable::close_all`] ends what is left. An open flow's idle and
//! lifetime bounds are [`Expiry`], which the flow's task (holding the
//! backend socket, whose datagrams it relays without a hop through the
//! socket task) asks with the times it saw.
//!
//! Its parts: the stages it calls ([`stages`]), what it holds per flow by stage ([`state`]), the bounds on
//! pending flows and the source they count against ([`bounds`]), what it
//! tells the socket task ([`events`]), the flow's record ([`record`]), the
//! PROXY header a trusted peer relay's datagrams carry ([`preface`]: read
//! on a flow's first datagram as the TCP preface reads a connection's,
//! its claim admitted and counted per source, the pending bounds keyed on
//! it), the PROXY headers toward its backend ([`announce`]) and the
//! validation of open flows' clients ([`validation`]).
//!
//! Not here: sockets, tasks, channels, the backend choice itself
//! ([`backend_address`](super::backend_address)), the refusal's bytes
//! ([`refusal`](super::refusal)) or the Initial parser
//! ([`initial`](super::initial)).
//!
//! Cost: one hash lookup per datagram of an open flow; a pending flow's
//! datagram is parsed and copied once into its held list.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use std::time::Instant;

use super::cid::CidTable;
use super::initial::{HelloLimits, Parser, QuicHello, Verdict};
use super::refusal::refusal;
use crate::config::Listener;
use crate::flow::access::CloseReason;
use crate::flow::generation::Generation;
use crate::metrics::ListenerMetrics;
use crate::metrics::registry::Metrics;

mod announce;
mod bounds;
mod events;
mod open;
pub(crate) mod preface;
pub(crate) mod record;
pub(crate) mod stages;
mod state;
mod validation;

pub(crate) use bounds::{MAX_HELD_BYTES, MAX_PENDING_FLOWS, MAX_PENDING_PER_SOURCE};
use bounds::{Summary, source_key};
pub(crate) use events::{Datagram, Event, Opening, Permits, PickFor};
use preface::DatagramArrival;
pub(crate) use record::{Expiry, FlowRecord, Stats, flow_record};
pub(crate) use stages::{FlowStages, Stages};
use state::{ConnectingFlow, FlowState, Pending};
pub(crate) use validation::{MIN_VALIDATING_CID_LEN, Up, may_send};

/// The flows of one listening socket; `B` is what the socket task keeps
/// per open flow, `P` a connection permit ([`Permits`]), `S` the stages
/// it calls, whose values it keeps without looking into them ([`Stages`]).
#[derive(Debug)]
pub(crate) struct FlowTable<B, P, S: Stages = FlowStages> {
    flows: HashMap<SocketAddr, FlowState<B, P, S>>,
    /// Pending flows by start, for the hello timeout (entries of flows
    /// that moved on are skipped).
    pending_order: VecDeque<(Instant, SocketAddr)>,
    /// Flows not open yet (pending and connecting): they hold datagrams.
    pending: usize,
    /// Pending flows (not connecting ones) by [`source_key`].
    pending_by_source: HashMap<IpAddr, usize>,
    /// Pending flows evicted for new ones, in all, and their summary line.
    evicted: u64,
    eviction_summary: Summary,
    held_bytes: usize,
    /// Connection IDs the open flows' backends chose (NAT rebinding).
    cids: CidTable,
    /// No new flows (the process drains, or the socket stops).
    draining: bool,
    /// The listening socket's address: it stands for the address a
    /// client dialled when a cluster answer must recognise this node.
    local: Option<SocketAddr>,
    /// New flows dropped at a bound, and their summary line.
    drop_summary: Summary,
    /// The listener's metric series (a listener keeps its name and
    /// protocol, so one handle serves the socket's life).
    metrics: Arc<ListenerMetrics>,
    /// Open flows not validated yet ([`validation`]), and those that
    /// validated with no permit free, to end.
    unvalidated: validation::Unvalidated,
    refused: Vec<SocketAddr>,
    events: VecDeque<Event<B, S>>,
    stages: S,
}

impl<B, P: std::fmt::Debug, S: Stages> FlowTable<B, P, S> {
    /// An empty table for a socket bound to `local`, counting in its
    /// listener's `metrics` and the `process`'s series, calling `stages`.
    pub(crate) fn new(
        local: Option<SocketAddr>,
        metrics: Arc<ListenerMetrics>,
        process: &'static Metrics,
        stages: S,
    ) -> FlowTable<B, P, S> {
        FlowTable {
            flows: HashMap::new(),
            pending_order: VecDeque::new(),
            pending: 0,
            pending_by_source: HashMap::new(),
            evicted: 0,
            eviction_summary: Summary::default(),
            held_bytes: 0,
            cids: CidTable::default(),
            draining: false,
            local,
            drop_summary: Summary::default(),
            metrics,
            unvalidated: validation::Unvalidated::new(process),
            refused: Vec::new(),
            events: VecDeque::new(),
            stages,
        }
    }

    /// The next event to perform, in the order they happened.
    pub(crate) fn poll_event(&mut self) -> Option<Event<B, S>> {
        self.stop_refused();
        self.events.pop_front()
    }

    #[cfg(test)]
    /// Flows of every state.
    pub(crate) fn len(&self) -> usize {
        self.flows.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    #[cfg(test)]
    /// Flows not open yet, and the bytes they hold.
    pub(crate) fn pending(&self) -> (usize, usize) {
        (self.pending, self.held_bytes)
    }

    #[cfg(test)]
    /// Pending flows evicted for new ones so far.
    pub(crate) fn evicted(&self) -> u64 {
        self.evicted
    }

    /// No new flow starts from now on.
    pub(crate) fn drain(&mut self) {
        self.draining = true;
    }

    /// Whether a flow of any state is at `at`.
    pub(crate) fn holds(&self, at: SocketAddr) -> bool {
        self.flows.contains_key(&at)
    }

    /// The open flow at `at`, if any (to relay datagrams gathered for it).
    pub(crate) fn open_at(&self, at: SocketAddr) -> Option<&B> {
        match self.flows.get(&at) {
            Some(FlowState::Open(open)) => Some(&open.io),
            _ => None,
        }
    }

    /// A datagram from `from` at `now`: an open flow's, held or parsed
    /// (events may follow), or from an address no flow has.
    pub(crate) fn handle(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: &[u8],
        generation: &Generation,
    ) -> Datagram {
        match self.flows.get_mut(&from) {
            Some(FlowState::Open(_)) => Datagram::Open,
            Some(FlowState::Pending(_)) => {
                self.feed(now, from, datagram, generation);
                Datagram::Taken
            }
            Some(FlowState::Connecting(connecting)) => {
                let record = &connecting.record;
                record
                    .part
                    .stats
                    .up(datagram.len(), record.part.started(), now);
                // Beyond a bound it is dropped unread; the client retransmits.
                if connecting.held_bytes + datagram.len() <= connecting.max_held_bytes
                    && self.held_bytes + datagram.len() <= MAX_HELD_BYTES
                {
                    connecting.held.push(datagram.into());
                    connecting.held_bytes += datagram.len();
                    self.held_bytes += datagram.len();
                }
                Datagram::Taken
            }
            None if self.cids.lookup(datagram).is_some() => Datagram::Moved,
            None => Datagram::Unknown,
        }
    }

    /// Starts a pending flow for `from`'s first datagram, sent to `to` (the
    /// listening address when the kernel did not say), if every bound
    /// and the accept gate let it, and feeds it the datagram. `permits`
    /// are the process-wide connection permits (`[global]
    /// max_connections`): none is taken before the flow validates
    /// ([`validation`]), but no more flows are pending than are free.
    pub(crate) fn start(
        &mut self,
        now: Instant,
        from: SocketAddr,
        to: Option<IpAddr>,
        arrival: DatagramArrival<'_>,
        generation: &Generation,
        permits: &impl Permits<Permit = P>,
    ) -> bool {
        if self.draining {
            return false;
        }
        // `[global] max_connection_rate`: TCP clients above it wait in the
        // backlog; a UDP socket has none, so a new flow's datagram is
        // dropped and the client's retransmission tries again.
        if generation
            .pace
            .as_ref()
            .is_some_and(|pace| !pace.try_take())
        {
            self.drop_new_flow(now, &generation.listener);
            return false;
        }
        let listener = generation.listener.clone();
        let metrics = self.metrics.clone();
        let dialled = self.local.map(|local| match to {
            Some(ip) => SocketAddr::new(ip, local.port()),
            None => local,
        });
        // The flow's record, made once: a refusal below closes it, its
        // datagram counted as it came; an admitted flow keeps it, its
        // datagram counted when fed to the parser.
        let mut record = flow_record(listener.clone(), from, now, metrics.clone(), dialled);
        let len = arrival.len();
        // The accept gate and the preface (a trusted peer's PROXY header,
        // and admission on the client it claims), as for a TCP
        // connection; refused, closed without a flow: nothing is held.
        let admitted = match self.stages.admit(generation, &mut record, arrival) {
            Ok(admitted) => admitted,
            Err(reason) => {
                record.part.stats.up(len, now, now);
                self.close(record, reason, None);
                return false;
            }
        };
        let claimed = record.claimed;
        let datagram = admitted.payload;
        // Room for it: after the gate, so that a refused source evicts
        // nobody. Nothing evictable (every place held by a connecting
        // flow): dropped, the client retransmits. A relayed flow counts
        // against the client it claims, as its per-source limits do.
        let source = source_key(claimed.map_or(from, |c| c.0));
        if !self.make_room(now, source, datagram.len(), permits) {
            self.drop_new_flow(now, &generation.listener);
            // Counted at the gate: closed as a flow that lost its place
            // is, so every accepted flow is closed once.
            record.part.stats.up(len, now, now);
            self.close(record, CloseReason::Evicted, None);
            return false;
        }
        let limits = HelloLimits::for_hello_bytes(listener.max_client_hello_bytes);
        // Entries of flows that moved on stay until they reach the front;
        // compacted when they outnumber the live ones, so the queue stays
        // within a few times MAX_PENDING_FLOWS however fast flows finish.
        if self.pending_order.len() >= 4 * MAX_PENDING_FLOWS {
            let flows = &self.flows;
            self.pending_order.retain(|(started, addr)| {
                matches!(flows.get(addr), Some(FlowState::Pending(p)) if p.record.part.started() == *started)
            });
        }
        self.pending_order.push_back((record.part.started(), from));
        self.pending += 1;
        *self.pending_by_source.entry(source).or_default() += 1;
        self.flows.insert(
            from,
            FlowState::Pending(Box::new(Pending {
                parser: Parser::new(limits).fingerprinting(generation.routes.wants_fingerprints()),
                held: Vec::new(),
                held_bytes: 0,
                record,
                slot: admitted.slot,
                source,
                relayed: admitted.relayed,
            })),
        );
        self.feed(now, from, datagram, generation);
        true
    }

    /// Makes room for a new pending flow from `source` with a first
    /// datagram of `len` bytes, evicting pending flows (oldest first) as
    /// needed: the source's own oldest when it has
    /// [`MAX_PENDING_PER_SOURCE`], then the table's oldest while a socket
    /// bound (count, the free permits, held bytes) is reached. False
    /// if a bound is still reached with nothing left to evict.
    fn make_room(
        &mut self,
        now: Instant,
        source: IpAddr,
        len: usize,
        permits: &impl Permits,
    ) -> bool {
        if self.pending_by_source.get(&source).copied().unwrap_or(0) >= MAX_PENDING_PER_SOURCE {
            self.evict_oldest(now, Some(source));
        }
        while self.pending >= MAX_PENDING_FLOWS
            || self.pending >= permits.available()
            || self.held_bytes + len > MAX_HELD_BYTES
        {
            if !self.evict_oldest(now, None) {
                return false;
            }
        }
        true
    }

    /// Ends the oldest pending flow (of `source`, if given) as `evicted`;
    /// false if there is none. Connecting flows (their hello routed) are
    /// never evicted.
    fn evict_oldest(&mut self, now: Instant, source: Option<IpAddr>) -> bool {
        let flows = &self.flows;
        let live = |(started, addr): &(Instant, SocketAddr)| matches!(flows.get(addr), Some(FlowState::Pending(p)) if p.record.part.started() == *started);
        let found = match source {
            // Entries of flows that moved on are dropped on the way.
            None => loop {
                match self.pending_order.front() {
                    None => break None,
                    Some(entry) if live(entry) => break self.pending_order.pop_front(),
                    Some(_) => {
                        self.pending_order.pop_front();
                    }
                }
            },
            // Left in the queue: its entry is stale once the flow is gone.
            Some(source) => self
                .pending_order
                .iter()
                .find(|entry| {
                    live(entry)
                        && matches!(flows.get(&entry.1), Some(FlowState::Pending(p)) if p.source == source)
                })
                .copied(),
        };
        let Some((_, addr)) = found else {
            return false;
        };
        let Some(pending) = self.take_pending(addr) else {
            return false;
        };
        let listener = pending.record.part.listener.clone();
        self.close(pending.record, CloseReason::Evicted, None);
        self.evicted += 1;
        if let Some(evicted) = self.eviction_summary.count(now) {
            tracing::warn!(
                listener = %listener.name,
                evicted,
                pending = self.pending,
                held_bytes = self.held_bytes,
                "QUIC pending flows evicted to make room for new flows: pending flows, connection permits or held bytes at their bound"
            );
        }
        true
    }

    fn drop_new_flow(&mut self, now: Instant, listener: &Listener) {
        if let Some(dropped) = self.drop_summary.count(now) {
            tracing::warn!(
                listener = %listener.name,
                dropped,
                pending = self.pending,
                held_bytes = self.held_bytes,
                "QUIC datagrams of new flows dropped: pending flows, connection permits or max_connection_rate at their bound"
            );
        }
    }

    /// Feeds a pending flow's datagram to its parser.
    fn feed(&mut self, now: Instant, from: SocketAddr, datagram: &[u8], generation: &Generation) {
        let Some(FlowState::Pending(pending)) = self.flows.get_mut(&from) else {
            return;
        };
        if self.held_bytes + datagram.len() > MAX_HELD_BYTES {
            // Dropped unread; the client retransmits.
            return;
        }
        let record = &mut pending.record;
        record
            .part
            .stats
            .up(datagram.len(), record.part.started(), now);
        let verdict = pending.parser.feed(datagram);
        pending.record.part.version = pending.parser.version();
        match verdict {
            Err(Verdict::Incomplete) => {
                pending.held.push(datagram.into());
                pending.held_bytes += datagram.len();
                self.held_bytes += datagram.len();
            }
            Err(verdict) => {
                let reason = match verdict {
                    Verdict::NotQuic => CloseReason::NotQuic,
                    Verdict::UnknownVersion(_) => CloseReason::UnknownVersion,
                    Verdict::TooLarge => CloseReason::TooLarge,
                    Verdict::Malformed | Verdict::Incomplete => CloseReason::Malformed,
                };
                if let Some(pending) = self.take_pending(from) {
                    self.close(pending.record, reason, None);
                }
            }
            Ok(hello) => {
                if let Some(mut pending) = self.take_pending(from) {
                    pending.held.push(datagram.into());
                    self.route(*pending, hello, from, generation);
                }
            }
        }
    }

    fn close(
        &mut self,
        record: FlowRecord,
        reason: CloseReason,
        answer: Option<(SocketAddr, Vec<u8>)>,
    ) {
        self.events.push_back(Event::Close {
            record: Box::new(record),
            reason,
            answer,
        });
    }

    /// Takes a pending flow out of the map and the pending counts.
    fn take_pending(&mut self, from: SocketAddr) -> Option<Box<Pending<S::Slot>>> {
        match self.flows.remove(&from) {
            Some(FlowState::Pending(pending)) => {
                self.pending -= 1;
                self.held_bytes -= pending.held_bytes;
                let source = pending.source;
                if let Some(count) = self.pending_by_source.get_mut(&source) {
                    *count -= 1;
                    if *count == 0 {
                        self.pending_by_source.remove(&source);
                    }
                }
                Some(pending)
            }
            Some(other) => {
                self.flows.insert(from, other);
                None
            }
            None => None,
        }
    }

    /// Ends pending flows `client_hello_timeout` (`timeout`) after their
    /// first datagram, and open ones still unvalidated
    /// [`UNVALIDATED_LIFETIME`](validation::UNVALIDATED_LIFETIME) after they opened.
    pub(crate) fn sweep(&mut self, now: Instant, timeout: Duration) {
        self.expire_unvalidated(now);
        while let Some(&(started, from)) = self.pending_order.front() {
            if now < started + timeout {
                break;
            }
            self.pending_order.pop_front();
            let same = matches!(self.flows.get(&from), Some(FlowState::Pending(p)) if p.record.part.started() == started);
            if same && let Some(pending) = self.take_pending(from) {
                self.close(pending.record, CloseReason::HelloTimeout, None);
            }
        }
    }

    /// Routes a complete hello ([`Stages::carry_out`], as a TCP connection's is carried out):
    /// refused, the alert, if the refusal has one, in a CONNECTION_CLOSE,
    /// else ended at once, nothing forwarded; routed, it asks for its
    /// address.
    fn route(
        &mut self,
        pending: Pending<S::Slot>,
        hello: QuicHello,
        from: SocketAddr,
        generation: &Generation,
    ) {
        let Pending {
            held,
            mut record,
            slot,
            relayed,
            source,
            ..
        } = pending;
        let routed = self.stages.carry_out(
            generation,
            &mut record,
            &hello,
            slot,
            relayed.as_ref(),
            self.local,
        );
        let routed = match routed {
            Ok(routed) => routed,
            Err(refused) => {
                let answer = refused.alert.map(|alert| {
                    let datagram =
                        refusal(hello.version, &hello.dcid, &hello.scid, alert, "no route");
                    (from, datagram)
                });
                self.close(record, refused.reason, answer);
                return;
            }
        };
        let id = record.id;
        let connecting = ConnectingFlow {
            held_bytes: held.iter().map(|d| d.len()).sum(),
            held,
            max_held_bytes: HelloLimits::for_hello_bytes(
                record.part.listener.max_client_hello_bytes,
            )
            .held_bytes,
            record,
            idle: routed.idle,
            lifetime: routed.lifetime,
            kept: routed.kept,
            source,
        };
        self.pending += 1;
        self.held_bytes += connecting.held_bytes;
        self.flows
            .insert(from, FlowState::Connecting(Box::new(connecting)));
        self.events.push_back(Event::Pick(Box::new(PickFor {
            from,
            id,
            choose: routed.to_choose,
        })));
    }

    /// The address of the connecting flow `id` from `from` is chosen
    /// (`chosen`, as the stages hand it back), or why not: it is handed
    /// over to open, or closes.
    pub(crate) fn chosen(
        &mut self,
        from: SocketAddr,
        id: u64,
        outcome: Result<S::Chosen, CloseReason>,
    ) {
        let connecting = match self.flows.remove(&from) {
            Some(FlowState::Connecting(connecting)) if connecting.record.id == id => connecting,
            Some(other) => {
                self.flows.insert(from, other);
                return;
            }
            None => return,
        };
        self.pending -= 1;
        self.held_bytes -= connecting.held_bytes;
        let ConnectingFlow {
            held,
            record,
            idle,
            lifetime,
            kept,
            source,
            ..
        } = *connecting;
        match outcome {
            Err(reason) => self.close(record, reason, None),
            Ok(chosen) => self.events.push_back(Event::Open(Box::new(Opening {
                from,
                record,
                held,
                idle,
                lifetime,
                kept,
                source,
                chosen,
            }))),
        }
    }

    /// Ends every flow not open yet with `reason` (the socket stops); open
    /// flows end through their tasks. No new flow starts after.
    pub(crate) fn close_all(&mut self, reason: CloseReason) {
        self.draining = true;
        let flows: Vec<_> = self.flows.drain().collect();
        self.pending = 0;
        self.held_bytes = 0;
        self.pending_order.clear();
        self.pending_by_source.clear();
        self.unvalidated.clear();
        for (_, flow) in flows {
            match flow {
                FlowState::Pending(pending) => self.close(pending.record, reason, None),
                FlowState::Connecting(connecting) => self.close(connecting.record, reason, None),
                FlowState::Open(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests;
