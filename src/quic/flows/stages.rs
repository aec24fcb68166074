//! The stages a QUIC flow shares with a TCP connection, as the flow table
//! calls them: the accept gate and the preface on a flow's first datagram
//! ([`Stages::admit`]) and the decision after its hello carried out
//! ([`Stages::carry_out`]). The table keeps what they return as values of
//! the trait's types, which it never looks into (as it keeps connection
//! permits, [`super::Permits`]): what the flow holds (admission slots,
//! its route's drain guard, the chosen address's slot) is the stages',
//! so the table's unit tests can run it on plain values.
//!
//! [`FlowStages`] is the one the socket task uses: [`crate::flow::gate`],
//! the preface ([`super::preface`]) and [`crate::flow::carry_out`], with
//! the PROXY headers toward the backend ([`super::announce`]).
//!
//! Not here: when each stage runs, or what the table does with its
//! answer ([`super::FlowTable`]); choosing the address
//! ([`crate::quic::backend_address`]).

use std::net::SocketAddr;
use std::time::Duration;

use super::announce::FlowHeaders;
use super::preface::{self, DatagramArrival};
use super::record::FlowRecord;
use crate::admission::{AtAccept, RouteAdmitted, SourceGuard};
use crate::backend::candidates::Pick;
use crate::drain::DrainGuard;
use crate::flow::access::CloseReason;
use crate::flow::carry_out::{Refused, carry_out};
use crate::flow::gate;
use crate::flow::generation::Generation;
use crate::quic::backend_address::Picked;
use crate::quic::initial::QuicHello;
use crate::wire::proxy::Header;
use crate::wire::proxy_tlv::PassedTlvs;

/// What a flow passes through that holds something for it, and the types
/// of what it holds. See the module header.
pub(crate) trait Stages {
    /// What an admitted new flow holds (its source's slot).
    type Slot: std::fmt::Debug;
    /// What a routed flow holds until it opens, and then for its life.
    type Kept: std::fmt::Debug;
    /// What the socket task needs to choose a routed flow's address.
    type ToChoose: std::fmt::Debug;
    /// The address chosen, as the socket task hands it back.
    type Chosen: std::fmt::Debug;

    /// Admits the new flow `record` describes on its first datagram
    /// `arrival` (its claim, behind a trusted peer, set on the record);
    /// refused: the reason, counted, the record to be closed with it.
    fn admit<'d>(
        &self,
        generation: &Generation,
        record: &mut FlowRecord,
        arrival: DatagramArrival<'d>,
    ) -> Result<Admitted<'d, Self::Slot>, CloseReason>;

    /// Carries out the decision on the flow's complete `hello`; `local` is
    /// the listening socket's address, which stands for the one the client
    /// dialled.
    fn carry_out(
        &self,
        generation: &Generation,
        record: &mut FlowRecord,
        hello: &QuicHello,
        slot: Self::Slot,
        relayed: Option<&(Header, PassedTlvs)>,
        local: Option<SocketAddr>,
    ) -> Result<Routed<Self::Kept, Self::ToChoose>, Refused>;
}

/// A new flow admitted on its first datagram.
#[derive(Debug)]
pub(crate) struct Admitted<'d, S> {
    /// What it holds from now on.
    pub slot: S,
    /// The client's bytes (after a trusted peer's header).
    pub payload: &'d [u8],
    /// The trusted peer's header that relays it, and the TLVs kept from it.
    pub relayed: Option<(Header, PassedTlvs)>,
}

/// A routed flow.
#[derive(Debug)]
pub(crate) struct Routed<K, C> {
    /// Its route's `idle_timeout` and `max_connection_lifetime`.
    pub idle: Duration,
    pub lifetime: Option<Duration>,
    pub kept: K,
    pub to_choose: C,
}

/// The stages as both transports run them (see the module header).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FlowStages;

/// The places a flow holds while it lives: the listener's and route's
/// admission slots (released when dropped). Its connection permit is the
/// table's, taken once the flow is validated.
pub(crate) type FlowSlots = (Option<SourceGuard>, Option<RouteAdmitted>);

/// What a routed flow holds: its admission slots, and the PROXY headers
/// its datagrams may carry.
#[derive(Debug)]
pub(crate) struct RoutedHold {
    pub slots: FlowSlots,
    pub headers: FlowHeaders,
}

/// What choosing a routed flow's address needs.
#[derive(Debug)]
pub(crate) struct ToChoose {
    /// The backend's name (`Generation::backends`).
    pub backend: String,
    pub pick: Pick,
    /// The route's drain signal, entered: a reload that drains the route
    /// while the address is being chosen ends the flow (`drained`).
    pub drain: DrainGuard,
}

impl Stages for FlowStages {
    type Slot = Option<SourceGuard>;
    type Kept = RoutedHold;
    type ToChoose = ToChoose;
    type Chosen = (Picked, DrainGuard);

    fn admit<'d>(
        &self,
        generation: &Generation,
        record: &mut FlowRecord,
        arrival: DatagramArrival<'d>,
    ) -> Result<Admitted<'d, Self::Slot>, CloseReason> {
        let from = record.part.peer();
        let metrics = &record.part.arrival.metrics;
        // The accept gate, as for a TCP connection.
        let gated = match gate::admit(generation, record.part.arrival.peer, metrics) {
            Ok(AtAccept::Admitted(admitted)) => admitted.guard,
            // A trusted peer relay: decided on the client it claims.
            Ok(AtAccept::AfterPreface) => None,
            Err(refused) => return Err(refused.reason),
        };
        // The flow's preface: its first datagram's PROXY header, if any,
        // decided as the TCP preface decides a connection's; then, behind
        // a trusted peer, admission on the claim.
        let dialled = record.part.dialled;
        match preface::decide(generation, from, dialled, arrival, gated, metrics) {
            Ok((preface, slot)) => {
                record.claimed = preface.sender.claimed();
                Ok(Admitted {
                    slot,
                    payload: preface.payload,
                    relayed: preface.relayed,
                })
            }
            Err((claimed, reason)) => {
                record.claimed = claimed;
                Err(reason)
            }
        }
    }

    fn carry_out(
        &self,
        generation: &Generation,
        record: &mut FlowRecord,
        hello: &QuicHello,
        slot: Self::Slot,
        relayed: Option<&(Header, PassedTlvs)>,
        local: Option<SocketAddr>,
    ) -> Result<Routed<RoutedHold, ToChoose>, Refused> {
        // The listening socket's address stands for the one the client
        // dialled: a cluster answer naming it means this node.
        let dialled = || local.ok_or(CloseReason::ConnectFailed);
        let fingerprints = hello.fingerprints.clone();
        let proceed = carry_out(
            generation,
            record,
            &hello.hello,
            fingerprints,
            slot,
            dialled,
        )?;
        let route = proceed.route;
        let headers = FlowHeaders::toward(
            &route.backend,
            &generation.backends,
            record,
            &hello.hello,
            relayed,
        );
        Ok(Routed {
            idle: route.timeouts.idle,
            lifetime: route.timeouts.lifetime,
            kept: RoutedHold {
                slots: (proceed.source_slot, proceed.route_slot),
                headers,
            },
            to_choose: ToChoose {
                backend: route.backend.name.clone(),
                pick: proceed.pick,
                drain: proceed.drain,
            },
        })
    }
}
