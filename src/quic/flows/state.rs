//! What the [`FlowTable`](super::FlowTable) holds for each client
//! address, by stage: a pending flow (its hello not complete, its
//! datagrams held), a connecting one (routed, waiting for its backend's
//! address, still holding) and an open one (the socket task's handle, and
//! its connection permit once validated). None but a validated open flow
//! holds a permit.
//!
//! Not here: moving a flow from one stage to the next (the table's), nor
//! the bounds on what they hold ([`bounds`](super::bounds)).

use std::net::IpAddr;
use std::time::Duration;

use super::record::FlowRecord;
use super::stages::Stages;
use crate::quic::cid::FlowCids;
use crate::quic::initial::Parser;
use crate::wire::proxy::Header;
use crate::wire::proxy_tlv::PassedTlvs;

/// A flow whose hello is not complete yet, holding `S` (its source's
/// slot, [`Stages::Slot`]).
#[derive(Debug)]
pub(super) struct Pending<S> {
    pub(super) parser: Parser,
    pub(super) held: Vec<Box<[u8]>>,
    pub(super) held_bytes: usize,
    pub(super) record: FlowRecord,
    /// What it holds from its admission (its source's slot).
    pub(super) slot: S,
    /// The source it counts against ([`source_key`](super::bounds::source_key)
    /// of its claimed client behind a trusted peer, else of its address).
    pub(super) source: IpAddr,
    /// The trusted peer's PROXY header that relays it, and the TLVs kept
    /// from it (for the backend's header).
    pub(super) relayed: Option<(Header, PassedTlvs)>,
}

/// A routed flow waiting for its backend address: its datagrams are still
/// held, within the same bounds as a pending flow's; `K` is what it holds
/// ([`Stages::Kept`]).
#[derive(Debug)]
pub(super) struct ConnectingFlow<K> {
    pub(super) held: Vec<Box<[u8]>>,
    pub(super) held_bytes: usize,
    /// The most it may hold (the pending flow's `HelloLimits::held_bytes`).
    pub(super) max_held_bytes: usize,
    pub(super) record: FlowRecord,
    pub(super) idle: Duration,
    pub(super) lifetime: Option<Duration>,
    pub(super) kept: K,
    /// The source it counts against once open (as a pending flow's).
    pub(super) source: IpAddr,
}

/// An open flow: the socket task's handle `B` (its backend socket and
/// counters), the connection IDs it taught the table, and once its client
/// showed it receives (validation, [`super::validation`]) its connection
/// permit `P`.
#[derive(Debug)]
pub(super) struct Open<B, P> {
    pub(super) id: u64,
    pub(super) io: B,
    /// The IDs followed for NAT rebinding (in the socket's table).
    pub(super) cids: FlowCids,
    /// The IDs its backend showed, of any length that validates
    /// ([`MIN_VALIDATING_CID_LEN`](super::validation::MIN_VALIDATING_CID_LEN)).
    pub(super) seen: FlowCids,
    /// `None` while unvalidated (counted in the socket's budget).
    pub(super) permit: Option<P>,
    /// The source it counts against ([`Pending::source`]).
    pub(super) source: IpAddr,
}

/// A flow by stage; `S` the stages' types (see [`super::stages`]).
#[derive(Debug)]
pub(super) enum FlowState<B, P, S: Stages> {
    Pending(Box<Pending<S::Slot>>),
    Connecting(Box<ConnectingFlow<S::Kept>>),
    Open(Open<B, P>),
}
