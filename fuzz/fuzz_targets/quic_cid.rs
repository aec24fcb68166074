//! Fuzzes the connection-ID reading and table of NAT rebinding
//! (`quic::cid`) against a plain model.
//!
//! Input: a sequence of chunks, each a 2-byte length and that many bytes;
//! a chunk's first byte picks an operation and one of 8 flows, the rest is
//! its datagram: a backend datagram of the flow (its ID, if any, is learned
//! within the flow's share), a client datagram from an unknown address
//! (looked up), the flow's end (its IDs forgotten) or its move to a new
//! address.
//!
//! Checks: no panic; a flow never teaches more than `MAX_CIDS_PER_FLOW`
//! IDs, nor one shorter than `MIN_FOLLOWED_CID_LEN`; a lookup answers a
//! flow whose learned ID the datagram carries where the header puts it (a
//! long header's DCID, or a short header's bytes after the first), and
//! answers nothing when no learned ID is there; the table holds exactly the
//! model's IDs and is empty once every flow ended.

#![no_main]

use std::net::SocketAddr;

use libfuzzer_sys::fuzz_target;
use snirelay::quic::cid::{
    CidTable, FlowCids, MAX_CIDS_PER_FLOW, MIN_FOLLOWED_CID_LEN, backend_scid, long_header,
};
use snirelay::quic::initial::ConnectionId;

const FLOWS: usize = 8;

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Whether `datagram` carries `id` where a lookup reads it.
fn carries(datagram: &[u8], id: &ConnectionId) -> bool {
    let id = id.as_bytes();
    match datagram.first() {
        Some(first) if first & 0x80 != 0 => long_header(datagram).is_some_and(|h| h.dcid == id),
        Some(_) => datagram.get(1..1 + id.len()) == Some(id),
        None => false,
    }
}

fuzz_target!(|data: &[u8]| {
    let mut table = CidTable::default();
    let mut flows: Vec<(SocketAddr, FlowCids)> =
        (0..FLOWS).map(|n| (addr(1000 + n as u16), FlowCids::default())).collect();
    // The model: (id, flow index), first teacher wins.
    let mut model: Vec<(ConnectionId, usize)> = Vec::new();
    let mut next_port = 2000u16;
    let mut rest = data;
    while let [a, b, after @ ..] = rest {
        let len = usize::from(u16::from_be_bytes([*a, *b])).min(after.len());
        let (chunk, next) = after.split_at(len);
        rest = next;
        let Some((&op, datagram)) = chunk.split_first() else {
            continue;
        };
        let flow = usize::from(op >> 2) % FLOWS;
        match op & 3 {
            0 => {
                let Some(id) = backend_scid(datagram) else {
                    continue;
                };
                assert!(id.as_bytes().len() >= MIN_FOLLOWED_CID_LEN);
                let (at, cids) = &mut flows[flow];
                // As the socket task does: within the flow's share, and
                // only an ID no other flow holds.
                if cids.len() < MAX_CIDS_PER_FLOW && !cids.contains(&id) && table.learn(id, *at) {
                    assert!(cids.add(id));
                    assert!(!model.iter().any(|(known, _)| *known == id));
                    model.push((id, flow));
                }
                assert!(cids.len() <= MAX_CIDS_PER_FLOW);
            }
            1 => match table.lookup(datagram) {
                Some(found) => {
                    let index = flows.iter().position(|(at, _)| *at == found);
                    let index = index.expect("a lookup answers a live flow's address");
                    assert!(
                        model
                            .iter()
                            .any(|(id, owner)| *owner == index && carries(datagram, id)),
                        "answered a flow whose ID the datagram does not carry"
                    );
                }
                None => assert!(
                    !model.iter().any(|(id, _)| carries(datagram, id)),
                    "a learned ID was missed"
                ),
            },
            2 => {
                let cids = std::mem::take(&mut flows[flow].1);
                table.forget(&cids);
                model.retain(|(_, owner)| *owner != flow);
            }
            _ => {
                next_port = next_port.wrapping_add(1).max(2000);
                let to = addr(next_port);
                if flows.iter().any(|(at, _)| *at == to) {
                    continue;
                }
                table.moved(&flows[flow].1, to);
                flows[flow].0 = to;
            }
        }
        assert_eq!(table.len(), model.len());
    }
    for (_, cids) in &flows {
        table.forget(cids);
    }
    assert!(table.is_empty());
});
