//! The admission gates both transports share: the one place where a new
//! arrival (a TCP connection just accepted, a QUIC flow's first datagram)
//! is admitted, before a byte of it is read ([`admit()`]), and the one
//! where a trusted peer relay's connection or flow is admitted on the
//! client its PROXY header claims ([`after_preface`]).
//!
//! Not here: the limits themselves ([`crate::admission`]), the accept loop
//! ([`crate::tcp::accept_loop`]) or the flow table
//! ([`crate::quic::flows`]) that call it, or the admission after the hello
//! ([`crate::flow::decision`]).

use crate::addr::{ClaimedAddr, PeerAddr};
use crate::admission::{Admitted, AtAccept};
use crate::flow::access::{self, CloseReason, ConnRecord, RecordPart};
use crate::flow::decision::{DryRun, HelloRefused, is_trusted_peer};
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
/// ([`GateRefused::close`]), the refusal counted as every refusal is
/// ([`HelloRefused::count`]). Admitted, a dry run's would-be refusal is
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
            let refused = HelloRefused::by_admission(refusal);
            refused.count(metrics);
            Err(GateRefused {
                reason: refused.reason,
            })
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
            let refused = HelloRefused::by_admission(refusal);
            refused.count(metrics);
            Err(refused.reason)
        }
    }
}
