//! Half-close as the relay keeps it: how far each direction is ([`End`]:
//! open, ended by its source's FIN, or dropped by a reset that cut
//! nothing), and whether a peer's failure ends the connection or is
//! excused ([`excuse`]).
//!
//! A reset is a failure only when it cuts data. A peer that sent FIN, and
//! whose bytes were all delivered, may then reset: a server that closed
//! after its response and TLS close_notify answers the client's late
//! close_notify with a reset from its kernel. Or it resets instead of
//! sending FIN: a server that closes its socket with the client's
//! close_notify (and FIN) unread makes its kernel send a reset, not a FIN.
//! Either way, once the other side had finished or the peer's FIN came
//! first, and everything the peer sent that arrived is delivered, the
//! connection ends as `done`. Linux tells a reset after the peer's FIN
//! from one before (see [`super::failure`]). Any other reset stays
//! `client_reset` / `backend_reset`.
//!
//! Not here: passing a FIN on (shutdown(2), or the close once both
//! directions have ended) and the half-close timeout ([`super::relay`]);
//! what failed and how it reads ([`super::failure`]).

use crate::close_reason::CloseReason;
use crate::pump::failure::{At, RelayFailure, RelayPeer};

/// How far a direction is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum End {
    Open,
    /// Its source sent FIN and everything before it was delivered.
    Fin,
    /// Ended by a reset that cut nothing (see [`excuse`]): its destination
    /// reset after its own FIN, or its source reset after the other side
    /// had finished.
    Dropped,
}

/// Decides whether a peer's failure ends the connection as that peer's
/// reset, given how far the directions are (`up`: client to backend,
/// `down`: backend to client). It does not when the reset cuts nothing,
/// which is when either
/// - the peer had sent FIN and everything it sent is delivered (its
///   direction is [`End::Fin`]), or the error shows its FIN came first and
///   its direction can still deliver the rest (it stays open and must end
///   in FIN); or
/// - the other side had finished (the direction toward the peer is
///   [`End::Fin`]), and the reset came while reading the peer, so all it
///   sent that arrived was delivered, or while passing that FIN on (its
///   direction stays open to deliver the rest). This is the server that
///   closes its socket with the client's last bytes (TLS close_notify)
///   unread: its kernel then sends a reset instead of a FIN.
///
/// The direction toward the peer is then dropped (and the peer's own, when
/// reading it failed), and the connection ends as `done` once both have
/// ended.
pub(super) fn excuse(failure: RelayFailure, up: &mut End, down: &mut End) -> Option<CloseReason> {
    // A peer that stopped answering lost whatever was on its way to it:
    // never excused.
    if failure.timed_out {
        return Some(failure.reason());
    }
    let (from_peer, to_peer) = match failure.peer {
        RelayPeer::Client => (up, down),
        RelayPeer::Backend => (down, up),
    };
    let fin_first = match *from_peer {
        End::Fin => true,
        End::Open => failure.after_fin,
        End::Dropped => false,
    };
    let other_finished = *to_peer == End::Fin
        && *from_peer == End::Open
        && matches!(failure.at, At::Read | At::Shutdown);
    if !fin_first && !other_finished {
        return Some(failure.reason());
    }
    if failure.at == At::Read {
        *from_peer = End::Dropped;
    }
    if *to_peer == End::Open {
        *to_peer = End::Dropped;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(peer: RelayPeer, at: At, after_fin: bool) -> RelayFailure {
        RelayFailure {
            peer,
            at,
            after_fin,
            timed_out: false,
        }
    }

    /// `excuse` on directions in states (`up`, `down`): the reason it
    /// returns and the states it leaves.
    fn judge(f: RelayFailure, mut up: End, mut down: End) -> (Option<CloseReason>, End, End) {
        let reason = excuse(f, &mut up, &mut down);
        (reason, up, down)
    }

    use End::{Dropped, Fin, Open};
    use RelayPeer::{Backend, Client};

    #[test]
    fn a_reset_after_the_peers_fin_drops_only_the_direction_toward_it() {
        // The backend sent FIN and all of it was delivered: its reset (to
        // the client's late close_notify) drops the direction toward it.
        let f = failure(Backend, At::Write, false);
        assert_eq!(judge(f, Open, Fin), (None, Dropped, Fin));
        // The same for the client, the other way round.
        let f = failure(Client, At::Write, false);
        assert_eq!(judge(f, Fin, Open), (None, Fin, Dropped));
        // A reset after a FIN not yet read: the peer's direction stays open
        // to deliver the rest.
        let f = failure(Backend, At::Write, true);
        assert_eq!(judge(f, Open, Open), (None, Dropped, Open));
        let f = failure(Backend, At::Shutdown, true);
        assert_eq!(judge(f, Fin, Open), (None, Fin, Open));
    }

    #[test]
    fn a_reset_after_the_other_side_finished_cuts_nothing() {
        // The client's close_notify and FIN reached the backend, which
        // reset instead of sending FIN: everything it sent was delivered.
        let f = failure(Backend, At::Read, false);
        assert_eq!(judge(f, Fin, Open), (None, Fin, Dropped));
        // Seen when passing the client's FIN on: the backend's rest is
        // still to be read and delivered.
        let f = failure(Backend, At::Shutdown, false);
        assert_eq!(judge(f, Fin, Open), (None, Fin, Open));
        // The other way round.
        let f = failure(Client, At::Read, false);
        assert_eq!(judge(f, Open, Fin), (None, Dropped, Fin));
    }

    #[test]
    fn a_peer_that_stopped_answering_is_never_excused() {
        let mut f = failure(Client, At::Write, true);
        f.timed_out = true;
        // Even after the client's own FIN: what was on its way to it is lost.
        assert_eq!(
            judge(f, Fin, Open),
            (Some(CloseReason::ClientKeepalive), Fin, Open)
        );
        let mut f = failure(Backend, At::Read, false);
        f.timed_out = true;
        assert_eq!(
            judge(f, Fin, Open),
            (Some(CloseReason::BackendKeepalive), Fin, Open)
        );
    }

    #[test]
    fn a_reset_that_cuts_data_ends_the_connection() {
        let reset = Some(CloseReason::BackendReset);
        // Mid-exchange, both ways open.
        let f = failure(Backend, At::Read, false);
        assert_eq!(judge(f, Open, Open).0, reset);
        let f = failure(Backend, At::Write, false);
        assert_eq!(judge(f, Open, Open).0, reset);
        let f = failure(Client, At::Read, false);
        assert_eq!(judge(f, Open, Open).0, Some(CloseReason::ClientReset));
        // The client fails while the backend's rest is still on its way
        // after the backend's own reset: that cuts the backend's data.
        let f = failure(Client, At::Write, true);
        assert_eq!(judge(f, Dropped, Open).0, Some(CloseReason::ClientReset));
        // The client side was dropped, not finished: a backend reset then
        // still cuts the backend's data.
        let f = failure(Backend, At::Read, false);
        assert_eq!(judge(f, Dropped, Open).0, reset);
    }
}
