//! The admission gate both transports share: the one place where a new
//! arrival (a TCP connection just accepted, a QUIC flow's first datagram)
//! is admitted, before a byte of it is read ([`admit()`]).
//!
//! Not here: the limits themselves ([`crate::admission`]), the accept loop
//! ([`crate::tcp::accept_loop`]) or the flow table
//! ([`crate::quic::flows`]) that call it, or the admission after the hello
//! ([`crate::flow::decision`]).

use crate::addr::PeerAddr;
use crate::admission::AtAccept;
use crate::flow::access::{self, CloseReason, ConnRecord, RecordPart};
use crate::flow::decision::{DryRun, HelloRefused, is_trusted_peer};
use crate::flow::generation::Generation;
use crate::metrics::ListenerMetrics;

/// The admission gate, for a TCP connection just accepted or a QUIC flow's
/// first datagram, before a byte of it is read: the one place where a new
/// arrival is admitted ([`crate::admission::Admission::at_accept`]), on its measured
/// `peer`, under `generation`'s listener limits.
///
/// The arrival is counted first (`accepted`, and `active` until its close),
/// so that a refused one is closed through the same close stage: its record
/// (a QUIC flow's with its fields), made by `refused_record` only then, writes
/// its access line ([`access::refused`]), the refusal counted as every
/// refusal is ([`HelloRefused::count`]), and `Err` carries the reason; the caller
/// drops the arrival unread. Admitted, a dry run's would-be refusal is
/// logged, and the slot is returned, to be held for the arrival's life; a
/// trusted peer relay is decided after its preface instead ([`crate::tcp::connection`]).
pub(crate) fn admit<'r, P: RecordPart<'r>>(
    generation: &Generation,
    peer: PeerAddr,
    metrics: &ListenerMetrics,
    refused_record: impl FnOnce() -> ConnRecord<P>,
) -> Result<AtAccept, CloseReason> {
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
            access::refused(refused_record(), refused.reason);
            Err(refused.reason)
        }
    }
}
