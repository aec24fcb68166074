//! What the flow table hands the socket task and takes from it: the
//! connection permits it takes ([`Permits`]), the [`Event`]s to perform and
//! what became of a datagram ([`Datagram`]).
//!
//! Not here: deciding any of it ([`super::FlowTable`]).

use std::net::SocketAddr;
use std::time::Duration;

use super::record::FlowRecord;
use super::stages::Stages;
use crate::flow::access::CloseReason;

/// The process-wide connection permits (`[global] max_connections`) as the
/// table sees them: how many are free, and one taken for a flow that
/// validated, which holds it (`P`) until it ends. The socket task passes the runtime's
/// semaphore; tests pass a counter. The table waits for none.
pub(crate) trait Permits {
    /// A taken permit, given back when dropped.
    type Permit: std::fmt::Debug;
    /// Permits free now.
    fn available(&self) -> usize;
    /// Takes one, if one is free.
    fn try_take(&self) -> Option<Self::Permit>;
}

/// What the socket task is asked to do, or told happened; `B` is its
/// handle on an open flow, `S` the stages whose values it carries.
#[derive(Debug)]
pub(crate) enum Event<B, S: Stages> {
    /// Choose the backend address of the flow from `from` ([`crate::quic::backend_address`]:
    /// at once when the addresses are known, else in a task) and report it
    /// with [`super::FlowTable::chosen`].
    Pick(Box<PickFor<S::ToChoose>>),
    /// The flow's address is chosen: open its backend socket, send the held
    /// datagrams in arrival order, start its relay and report it with
    /// [`super::FlowTable::opened`] (or close it `connect_failed`).
    Open(Box<Opening<S>>),
    /// An open flow left the table unvalidated (evicted, expired, or no
    /// permit when it validated): end its task with `reason` (which
    /// writes its access line).
    Stop { io: B, reason: CloseReason },
    /// The flow ended: send `answer` to the client first, if any (a
    /// refusal: counted as a datagram down once sent), then close `record`.
    Close {
        record: Box<FlowRecord>,
        reason: CloseReason,
        answer: Option<(SocketAddr, Vec<u8>)>,
    },
}

/// A routed flow whose backend address is to be chosen.
#[derive(Debug)]
pub(crate) struct PickFor<C> {
    pub from: SocketAddr,
    pub id: u64,
    /// What the choice needs ([`Stages::ToChoose`]).
    pub choose: C,
}

/// A flow handed to the socket task to open on its chosen address.
#[derive(Debug)]
pub(crate) struct Opening<S: Stages> {
    pub from: SocketAddr,
    pub record: FlowRecord,
    /// Its datagrams so far, in arrival order.
    pub held: Vec<Box<[u8]>>,
    /// The route's `idle_timeout` and `max_connection_lifetime`.
    pub idle: Duration,
    pub lifetime: Option<Duration>,
    /// What the routed flow holds ([`Stages::Kept`]).
    pub kept: S::Kept,
    /// The source it counts against ([`super::bounds::source_key`]).
    pub source: std::net::IpAddr,
    /// The address chosen ([`Stages::Chosen`]).
    pub chosen: S::Chosen,
}

/// What became of a datagram fed to [`super::FlowTable::handle`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Datagram {
    /// An open flow's: relay it to the flow's backend, unread, through
    /// [`super::FlowTable::up`] (which the socket task asks first: an open
    /// flow's datagram costs one lookup).
    Open,
    /// Taken by a pending or connecting flow (held, or dropped at a bound).
    Taken,
    /// From an address no flow has, whose Destination Connection ID an
    /// open flow's backend chose: the client moved; [`super::FlowTable::rebind`].
    Moved,
    /// From an address no flow has: a new flow ([`super::FlowTable::start`]), or
    /// a successor's after an upgrade.
    Unknown,
}
