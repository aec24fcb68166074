//! An open flow's life in the [`FlowTable`]: handed over to relay
//! ([`FlowTable::opened`], unvalidated), following its client to a new
//! address by a connection ID its backend chose ([`FlowTable::learned`],
//! [`FlowTable::rebind`]: NAT rebinding) and its end
//! ([`FlowTable::ended`]).
//!
//! Not here: validating its client and the budget of unvalidated flows
//! ([`super::validation`]), the IDs' table ([`crate::quic::cid`]).

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use super::state::{FlowState, Open};
use super::{FlowTable, Permits, Stages};
use crate::quic::cid::{self, FlowCids};
use crate::quic::initial::ConnectionId;

impl<B, P: std::fmt::Debug, S: Stages> FlowTable<B, P, S> {
    /// Moves the open flow whose backend chose the datagram's Destination
    /// Connection ID to `from` (its client's new address), validated;
    /// returns its handle and its previous address, or `None` if no open
    /// flow has it (or it validated with no permit free, and closes).
    pub(crate) fn rebind(
        &mut self,
        from: SocketAddr,
        datagram: &[u8],
        permits: &impl Permits<Permit = P>,
    ) -> Option<(SocketAddr, &mut B)> {
        let old = self.cids.lookup(datagram)?;
        // The sender knows an ID only the backend's answer showed: the
        // flow is validated (it takes its permit, or closes).
        if !self.validate_moved(old, permits) {
            return None;
        }
        // The table names open flows only; anything else is left alone.
        let open = match self.flows.remove(&old) {
            Some(FlowState::Open(open)) => open,
            Some(other) => {
                self.flows.insert(old, other);
                return None;
            }
            None => return None,
        };
        self.cids.moved(&open.cids, from);
        match self
            .flows
            .entry(from)
            .insert_entry(FlowState::Open(open))
            .into_mut()
        {
            FlowState::Open(open) => Some((old, &mut open.io)),
            _ => unreachable!("inserted as open"),
        }
    }

    /// The flow `id` of `source` handed over by [`Event::Open`](super::Event::Open) relays
    /// from `from` through `io` since `now`, unvalidated: it counts in the
    /// socket's budget of unvalidated flows, taking the oldest one's place
    /// at a bound ([`super::validation`]).
    pub(crate) fn opened(
        &mut self,
        now: Instant,
        from: SocketAddr,
        id: u64,
        source: IpAddr,
        io: B,
    ) {
        self.admit_unvalidated(now, from, id, source);
        self.flows.insert(
            from,
            FlowState::Open(Open {
                id,
                io,
                cids: FlowCids::default(),
                seen: FlowCids::default(),
                permit: None,
                source,
            }),
        );
    }

    /// The open flow `id`, now at `at`, ended: its address and its
    /// connection IDs are free. (Its task may report after its address went
    /// to another flow: then nothing happens.)
    pub(crate) fn ended(&mut self, at: SocketAddr, id: u64) -> Option<B> {
        match self.flows.get(&at) {
            Some(FlowState::Open(open)) if open.id == id => {}
            _ => return None,
        }
        let Some(FlowState::Open(open)) = self.flows.remove(&at) else {
            unreachable!("matched as open just above");
        };
        self.cids.forget(&open.cids);
        self.forget_unvalidated(open.permit.is_some(), open.source);
        // Its permit, if it had one, is free now.
        Some(open.io)
    }

    /// The backend of the open flow `id`, now at `at`, showed connection ID
    /// `cid`: learned, within the flow's share, to validate its client and
    /// (if long enough) to follow it.
    pub(crate) fn learned(&mut self, at: SocketAddr, id: u64, cid: ConnectionId) {
        let Some(FlowState::Open(open)) = self.flows.get_mut(&at) else {
            return;
        };
        if open.id != id {
            return;
        }
        open.seen.add(cid);
        if cid.as_bytes().len() >= cid::MIN_FOLLOWED_CID_LEN
            && open.cids.len() < cid::MAX_CIDS_PER_FLOW
            && !open.cids.contains(&cid)
            && self.cids.learn(cid, at)
        {
            open.cids.add(cid);
        }
    }
}
