//! The admission gates both transports share: the one place where a new
//! arrival (a TCP connection just accepted, a QUIC flow's first datagram)
//! is admitted, before a byte of it is read ([`admit()`]), and the one
//! where a trusted peer relay's connection or flow is admitted on the
//! client its PROXY header claims ([`after_preface`]). With them, what the
//! decision after the hello reads the same way: whether a peer is a
//! trusted relay ([`is_trusted_peer`]) and a dry run's note ([`DryRun`]).
//!
//! Not here: the limits themselves ([`crate::admission`]), the accept loop
//! ([`crate::tcp::accept_loop`]) or the flow table
//! ([`crate::quic::flows`]) that call it, or the admission after the hello
//! ([`crate::flow::decision`]).

use crate::addr::{ClaimedAddr, PeerAddr};
use crate::admission::{Admitted, AtAccept, RouteRefusal, SourceKey};
use crate::config::Listener;
use crate::flow::access::{self, CloseReason, ConnRecord, RecordPart};
use crate::flow::generation::Generation;
use crate::metrics::ListenerMetrics;

/// An arrival the gate refused, counted already; the caller closes its
/// record through [`GateRefused::close`] and drops the arrival unread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a refused arrival's record is closed with `close`"]
pub(crate) struct GateRefused {
    pub reason: CloseReason,
}

impl GateRefused {
    /// Writes the refused arrival's access line through `record` (there is
    /// no TLS alert to send: nothing of it was read).
    pub(crate) fn close<'r, P: RecordPart<'r>>(self, record: ConnRecord<P>) {
        access::refused(record, self.reason);
    }
}

/// The admission gate, for a TCP connection just accepted or a QUIC flow's
/// first datagram, before a byte of it is read: the one place where a new
/// arrival is admitted ([`crate::admission::Admission::at_accept`]), on its measured
/// `peer`, under `generation`'s listener limits.
///
/// The arrival is counted first (`accepted`, and `active` until its close),
/// so that a refused one is closed through the same close stage
/// ([`GateRefused::close`]), the refusal counted in `limit_refusals` as a
/// refusal by limits after the hello is
/// ([`crate::flow::decision::HelloRefused::count`]). Admitted, a dry run's would-be refusal is
/// logged, and the slot is returned, to be held for the arrival's life; a
/// trusted peer relay is decided after its preface instead ([`after_preface`]).
pub(crate) fn admit(
    generation: &Generation,
    peer: PeerAddr,
    metrics: &ListenerMetrics,
) -> Result<AtAccept, GateRefused> {
    let Generation {
        listener,
        admission,
        ..
    } = generation;
    metrics.accepted();
    match admission.at_accept(peer, is_trusted_peer(listener, peer)) {
        Ok(at_accept) => {
            if let AtAccept::Admitted(admitted) = &at_accept
                && let Some(dry) = DryRun::of(None, admitted)
            {
                dry.log(listener, peer);
            }
            Ok(at_accept)
        }
        Err(refusal) => {
            let reason = CloseReason::from(refusal);
            metrics.limit_refused(reason);
            Err(GateRefused { reason })
        }
    }
}

/// Admits a trusted peer relay's connection or flow from `peer` on the
/// client its PROXY header `claimed` ([`crate::admission::Admission::after_preface`]):
/// a claimed client as if it had come directly, the peer's own
/// connections (no claim) not counted as a client's. Admitted, a dry
/// run's would-be refusal is logged; refused, the refusal is counted and
/// its close reason returned.
pub(crate) fn after_preface(
    generation: &Generation,
    peer: PeerAddr,
    claimed: Option<ClaimedAddr>,
    metrics: &ListenerMetrics,
) -> Result<Option<Admitted>, CloseReason> {
    match generation.admission.after_preface(claimed) {
        Ok(admitted) => {
            if let Some(dry) = admitted.as_ref().and_then(|a| DryRun::of(None, a)) {
                dry.log(&generation.listener, peer);
            }
            Ok(admitted)
        }
        Err(refusal) => {
            let reason = CloseReason::from(refusal);
            metrics.limit_refused(reason);
            Err(reason)
        }
    }
}

/// Whether `peer` is one of `listener`'s trusted peer relays
/// (`[listener.proxy_protocol] trusted`): the one reading of that list, at
/// accept (here) and after the hello ([`crate::flow::decision::Arrived::source`]).
pub(crate) fn is_trusted_peer(listener: &Listener, peer: PeerAddr) -> bool {
    listener
        .proxy_protocol
        .as_ref()
        .is_some_and(|inbound| inbound.trusts(peer.0.ip()))
}

/// A refusal a dry run would have made, to be logged at debug.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DryRun<'g> {
    /// The route whose limits would refuse; `None`: the listener's.
    pub route: Option<&'g str>,
    pub source: SourceKey,
    pub would_refuse: CloseReason,
}

impl<'g> DryRun<'g> {
    /// The note of a slot counted under `dry_run` (the listener's, or
    /// `route`'s), if it would have been refused.
    pub(crate) fn of(route: Option<&'g str>, admitted: &Admitted) -> Option<DryRun<'g>> {
        let would = admitted.would_refuse?;
        Some(DryRun {
            route,
            source: admitted.key,
            would_refuse: match route {
                None => would.into(),
                Some(_) => RouteRefusal::Source(would).into(),
            },
        })
    }

    /// Logs the refusal the dry run would have made.
    pub(crate) fn log(&self, listener: &Listener, peer: PeerAddr) {
        tracing::debug!(
            listener = %listener.name,
            route = self.route,
            client.peer = %peer,
            source = %self.source,
            would_refuse = self.would_refuse.as_str(),
            "dry run: admission would refuse this connection"
        );
    }
}
