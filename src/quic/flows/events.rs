//! What the flow table hands the socket task and takes from it: the
//! connection permits it takes ([`Permits`]), the places a flow holds
//! ([`FlowSlots`]), the [`Event`]s to perform and what became of a datagram
//! ([`Datagram`]).
//!
//! Not here: deciding any of it ([`super::FlowTable`]).

use std::net::SocketAddr;
use std::time::Duration;

use super::record::FlowRecord;
use crate::admission::{RouteAdmitted, SourceGuard};
use crate::backend::candidates::Pick;
use crate::drain::DrainGuard;
use crate::flow::access::CloseReason;
use crate::quic::backend_address::Picked;

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

/// The places a flow holds while it lives: the listener's and route's
/// admission slots (released when dropped). Its connection permit is the
/// table's, taken once the flow is validated
/// ([`super::validation`]).
pub(crate) type FlowSlots = (Option<SourceGuard>, Option<RouteAdmitted>);

/// What the socket task is asked to do, or told happened; `B` is its
/// handle on an open flow.
#[derive(Debug)]
pub(crate) enum Event<B> {
    /// Choose the backend address of the flow from `from` ([`crate::quic::backend_address`]:
    /// at once when the addresses are known, else in a task) and report it
    /// with [`super::FlowTable::chosen`].
    Pick(Box<PickFor>),
    /// The flow's address is chosen: open its backend socket, send the held
    /// datagrams in arrival order, start its relay and report it with
    /// [`super::FlowTable::opened`] (or close it `connect_failed`).
    Open(Box<Opening>),
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
pub(crate) struct PickFor {
    pub from: SocketAddr,
    pub id: u64,
    /// The backend's name (`Generation::backends`).
    pub backend: String,
    /// What the choice needs to know ([`crate::flow::carry_out`]'s).
    pub pick: Pick,
    /// The route's drain signal, entered: a reload that drains the route
    /// while the address is being chosen ends the flow (`drained`).
    pub drain: DrainGuard,
}

/// A flow handed to the socket task to open on its chosen address.
#[derive(Debug)]
pub(crate) struct Opening {
    pub from: SocketAddr,
    pub record: FlowRecord,
    /// Its datagrams so far, in arrival order.
    pub held: Vec<Box<[u8]>>,
    /// The route's `idle_timeout` and `max_connection_lifetime`.
    pub idle: Duration,
    pub lifetime: Option<Duration>,
    pub slots: FlowSlots,
    /// The source it counts against ([`super::bounds::source_key`]).
    pub source: std::net::IpAddr,
    pub picked: Picked,
    pub drain: DrainGuard,
    /// The PROXY headers its datagrams carry until the backend answers,
    /// if its backend takes them.
    pub headers: Option<std::sync::Arc<crate::proxy::datagram::DatagramHeaders>>,
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
