//! Following a QUIC flow to a new client address by connection ID (NAT
//! rebinding, RFC 9000 §9.3): reading the connection IDs of a datagram's
//! first packet header, the per-socket table of the IDs the backends chose
//! ([`CidTable`]), the few IDs one flow has taught it ([`FlowCids`]), and
//! the flow's current client address, shared by the socket task that moves
//! it and the flow task that sends to it ([`Path`]).
//!
//! What is learned: the Source Connection ID of a backend's long-header
//! packet (Initial, 0-RTT, Handshake, Retry; v1 or v2), read from the first
//! packet of each datagram the backend sends on an open flow. A client puts
//! that ID in the Destination Connection ID of its packets until it moves
//! to an ID the backend issued later in an encrypted NEW_CONNECTION_ID frame
//! (which no relay can read). So a datagram from an address no flow has,
//! whose Destination Connection ID is a learned one, is the same client
//! behind a NAT that gave it a new port or address: its flow is moved there.
//!
//! Header reading only, no decryption: a long header's CIDs sit in clear
//! after the version (RFC 8999 §5.1); a short header's Destination
//! Connection ID is bytes `1..1 + len` with a length the header does not
//! carry, so the table keeps a count of each length it holds and tries each
//! (in practice one: a backend picks one length).
//!
//! Bounds: a flow teaches at most [`MAX_CIDS_PER_FLOW`] IDs (later ones are
//! ignored), so a socket's table holds at most that many per open flow, and
//! open flows are bounded by the connection permits; an ID leaves the table
//! when its flow ends. IDs shorter than [`MIN_FOLLOWED_CID_LEN`] are not
//! learned: an off-path sender could guess them and pull a flow to its own
//! address. An ID another flow already taught is not taken over (the first
//! flow keeps it).
//!
//! The same IDs, and shorter ones down to
//! [`MIN_VALIDATING_CID_LEN`](crate::quic::flows::MIN_VALIDATING_CID_LEN),
//! also validate a flow's client ([`FlowCids::carried_by`]: a datagram to an
//! ID only the backend's answer showed proves its sender receives at its
//! address; see [`crate::quic::flows`]); [`Path`] carries that verdict to
//! the flow task.
//!
//! Not here: sockets and flows (the listener), Version Negotiation packets
//! (version 0: their CIDs echo the client's), and IDs issued inside
//! encrypted frames (not readable; see docs/quic.md, "## QUIC listener").
//!
//! Cost: per backend datagram one byte test (short headers, the bulk of a
//! connection, stop there) and for long headers a header read and a compare
//! with at most four IDs; per datagram from an unknown client address one
//! hash lookup per learned length.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use super::Version;
use super::initial::{ConnectionId, MAX_CID_LEN};

/// Connection IDs one flow may teach the table: a backend shows one in its
/// handshake (two if it answered a Retry, or changed its mind), so four is
/// room to spare while keeping the table a small multiple of the flows.
pub const MAX_CIDS_PER_FLOW: usize = 4;
/// Shorter IDs are not followed: 8 bytes (64 bits) cannot be guessed by
/// someone who does not see the traffic; most servers use 8 to 20.
pub const MIN_FOLLOWED_CID_LEN: usize = 8;

/// The first byte's long-header bit (RFC 8999 §5.1).
const LONG_HEADER: u8 = 0x80;

/// A long header's connection IDs, borrowed from the datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LongHeader<'a> {
    /// The header's version field (0 for Version Negotiation).
    pub version: u32,
    /// The destination connection ID.
    pub dcid: &'a [u8],
    /// The source connection ID.
    pub scid: &'a [u8],
}

/// The connection IDs of the long header that begins `datagram`, of any
/// version (the layout up to the SCID is invariant, RFC 8999 §5.1); `None`
/// for a short header or a header cut short. IDs longer than 20 bytes
/// (possible in other versions) are `None` too: they are never learned.
pub fn long_header(datagram: &[u8]) -> Option<LongHeader<'_>> {
    let (&first, rest) = datagram.split_first()?;
    if first & LONG_HEADER == 0 {
        return None;
    }
    let version = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?);
    let rest = &rest[4..];
    let (dcid, rest) = cid_field(rest)?;
    let (scid, _) = cid_field(rest)?;
    Some(LongHeader {
        version,
        dcid,
        scid,
    })
}

/// A length-prefixed connection ID and what follows it.
fn cid_field(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let (&len, rest) = bytes.split_first()?;
    let len = usize::from(len);
    if len > MAX_CID_LEN || rest.len() < len {
        return None;
    }
    Some(rest.split_at(len))
}

/// The backend's chosen connection ID in a datagram it sent, if its first
/// packet is a long header of v1 or v2 with an ID long enough to follow.
pub fn backend_scid(datagram: &[u8]) -> Option<ConnectionId> {
    backend_scid_of(datagram, MIN_FOLLOWED_CID_LEN)
}

/// As [`backend_scid`], for an ID of at least `min_len` bytes (the flow
/// table validates a client on shorter IDs than it follows:
/// [`crate::quic::flows::MIN_VALIDATING_CID_LEN`]).
pub fn backend_scid_of(datagram: &[u8], min_len: usize) -> Option<ConnectionId> {
    // Short headers are the bulk of a connection: one byte decides.
    if datagram.first()? & LONG_HEADER == 0 {
        return None;
    }
    let header = long_header(datagram)?;
    Version::from_wire(header.version)?;
    if header.scid.len() < min_len {
        return None;
    }
    ConnectionId::new(header.scid)
}

/// The connection IDs one flow has taught the table (at most
/// [`MAX_CIDS_PER_FLOW`]).
#[derive(Debug, Default, Clone)]
pub struct FlowCids {
    ids: [Option<ConnectionId>; MAX_CIDS_PER_FLOW],
}

impl FlowCids {
    /// Adds `id`; false when it is already there or the flow has taught as
    /// many as it may.
    pub fn add(&mut self, id: ConnectionId) -> bool {
        if self.contains(&id) {
            return false;
        }
        match self.ids.iter_mut().find(|slot| slot.is_none()) {
            Some(slot) => {
                *slot = Some(id);
                true
            }
            None => false,
        }
    }

    /// Whether `id` is one of them.
    pub fn contains(&self, id: &ConnectionId) -> bool {
        self.ids.iter().flatten().any(|known| known == id)
    }

    /// The IDs held, in the order learnt.
    pub fn iter(&self) -> impl Iterator<Item = &ConnectionId> {
        self.ids.iter().flatten()
    }

    /// How many IDs are held.
    pub fn len(&self) -> usize {
        self.iter().count()
    }

    /// Whether no ID is held.
    pub fn is_empty(&self) -> bool {
        self.ids.iter().all(Option::is_none)
    }

    /// Whether the Destination Connection ID of the datagram's first
    /// packet is one of them (a long header's is read; a short header's
    /// is compared at each held ID's length).
    pub fn carried_by(&self, datagram: &[u8]) -> bool {
        let Some(&first) = datagram.first() else {
            return false;
        };
        if first & LONG_HEADER != 0 {
            let Some(header) = long_header(datagram) else {
                return false;
            };
            return self.iter().any(|id| id.as_bytes() == header.dcid);
        }
        self.iter()
            .any(|id| datagram.get(1..1 + id.as_bytes().len()) == Some(id.as_bytes()))
    }
}

/// One listening socket's learned connection IDs, each with the current
/// client address of the flow that taught it.
#[derive(Debug, Default)]
pub struct CidTable {
    flows: HashMap<ConnectionId, SocketAddr>,
    /// How many IDs of each length the table holds, so that a short header
    /// is looked up only at lengths in use.
    lengths: [u32; MAX_CID_LEN + 1],
}

impl CidTable {
    /// Records `id` for the flow at `flow`; false when another flow holds
    /// it already (it keeps it).
    pub fn learn(&mut self, id: ConnectionId, flow: SocketAddr) -> bool {
        match self.flows.get(&id) {
            Some(&holder) => holder == flow,
            None => {
                self.flows.insert(id, flow);
                self.lengths[id.as_bytes().len()] += 1;
                true
            }
        }
    }

    /// Forgets the IDs of a flow that ended.
    pub fn forget(&mut self, ids: &FlowCids) {
        for id in ids.iter() {
            if self.flows.remove(id).is_some() {
                self.lengths[id.as_bytes().len()] -= 1;
            }
        }
    }

    /// Points a moved flow's IDs at its new address.
    pub fn moved(&mut self, ids: &FlowCids, to: SocketAddr) {
        for id in ids.iter() {
            if let Some(flow) = self.flows.get_mut(id) {
                *flow = to;
            }
        }
    }

    /// The flow (its current address) whose learned ID is the Destination
    /// Connection ID of the datagram's first packet.
    pub fn lookup(&self, datagram: &[u8]) -> Option<SocketAddr> {
        if self.flows.is_empty() {
            return None;
        }
        let first = *datagram.first()?;
        if first & LONG_HEADER != 0 {
            let dcid = ConnectionId::new(long_header(datagram)?.dcid)?;
            return self.flows.get(&dcid).copied();
        }
        (MIN_FOLLOWED_CID_LEN..=MAX_CID_LEN)
            .filter(|&len| self.lengths[len] > 0)
            .find_map(|len| {
                let dcid = ConnectionId::new(datagram.get(1..1 + len)?)?;
                self.flows.get(&dcid).copied()
            })
    }

    /// How many IDs the table follows.
    pub fn len(&self) -> usize {
        self.flows.len()
    }

    /// Whether the table follows no ID.
    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }
}

/// An open flow's client address, which the socket task changes when the
/// flow moves and the flow task reads to send the backend's datagrams, and
/// whether its client has shown it receives there (address validation,
/// RFC 9000 §8: until then the flow task holds what it sends to 3x what
/// came from the client, [`crate::quic::flows::may_send`]).
#[derive(Debug)]
pub struct Path {
    client: Mutex<SocketAddr>,
    /// Moves so far; also tells the flow task, with one atomic load per
    /// datagram, when to read the address again.
    rebinds: AtomicU32,
    /// Set once by the socket task when the flow table validates the flow.
    validated: AtomicBool,
}

impl Path {
    /// A path starting at the client's first address, with no move yet.
    pub fn new(client: SocketAddr) -> Path {
        Path {
            client: Mutex::new(client),
            rebinds: AtomicU32::new(0),
            validated: AtomicBool::new(false),
        }
    }

    /// Whether the client has shown it receives at its address.
    pub(crate) fn validated(&self) -> bool {
        self.validated.load(Ordering::Acquire)
    }

    /// The client has shown it receives at its address.
    pub(crate) fn validate(&self) {
        self.validated.store(true, Ordering::Release);
    }

    /// The client's current address.
    pub(crate) fn client(&self) -> SocketAddr {
        *self.client.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many times the flow moved.
    pub(crate) fn rebinds(&self) -> u32 {
        // Acquire: a reader that sees the new count sees the new address.
        self.rebinds.load(Ordering::Acquire)
    }

    /// The flow moved to `to`.
    pub(crate) fn moved(&self, to: SocketAddr) {
        *self.client.lock().unwrap_or_else(|e| e.into_inner()) = to;
        self.rebinds.fetch_add(1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SERVER_CID: [u8; 8] = [0x5e, 0x4f, 0x3e, 0x2d, 0x1c, 0x0b, 0xfa, 0xe9];
    const CLIENT_CID: [u8; 8] = [0xc1; 8];

    /// A long header of `version` (`first` as the first byte) with these
    /// CIDs, then a few bytes of (pretend) payload.
    fn long(first: u8, version: u32, dcid: &[u8], scid: &[u8]) -> Vec<u8> {
        let mut d = vec![first];
        d.extend_from_slice(&version.to_be_bytes());
        d.push(dcid.len() as u8);
        d.extend_from_slice(dcid);
        d.push(scid.len() as u8);
        d.extend_from_slice(scid);
        d.extend_from_slice(&[0x40, 0x17, 0xaa, 0xbb]);
        d
    }

    fn short(dcid: &[u8]) -> Vec<u8> {
        let mut d = vec![0x43];
        d.extend_from_slice(dcid);
        d.extend_from_slice(&[0x11; 30]);
        d
    }

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    fn id(bytes: &[u8]) -> ConnectionId {
        ConnectionId::new(bytes).unwrap()
    }

    #[test]
    fn the_backend_scid_is_read_from_v1_and_v2_long_headers() {
        // v1 Initial (0xc0), v1 Handshake (0xe0), v2 Initial (0xd0), v2
        // Handshake (0xf0): the server's SCID is what a client sends to.
        for (first, version) in [
            (0xc0, Version::V1),
            (0xe0, Version::V1),
            (0xd0, Version::V2),
            (0xf0, Version::V2),
        ] {
            let d = long(first, version.wire(), &CLIENT_CID, &SERVER_CID);
            assert_eq!(backend_scid(&d), Some(id(&SERVER_CID)), "{first:#x}");
        }
    }

    #[test]
    fn nothing_is_learned_from_short_headers_other_versions_or_short_ids() {
        assert_eq!(backend_scid(&short(&SERVER_CID)), None);
        // Version Negotiation (0) and an unknown version.
        assert_eq!(backend_scid(&long(0x80, 0, &CLIENT_CID, &SERVER_CID)), None);
        assert_eq!(
            backend_scid(&long(0xc0, 0xff00_001d, &CLIENT_CID, &SERVER_CID)),
            None
        );
        // Guessable: zero-length and 4-byte IDs.
        assert_eq!(backend_scid(&long(0xc0, 1, &CLIENT_CID, &[])), None);
        assert_eq!(
            backend_scid(&long(0xc0, 1, &CLIENT_CID, &[1, 2, 3, 4])),
            None
        );
        assert_eq!(backend_scid(&[]), None);
    }

    #[test]
    fn every_truncation_of_a_long_header_is_read_as_nothing() {
        let d = long(0xc0, 1, &CLIENT_CID, &SERVER_CID);
        let header_len = 1 + 4 + 1 + CLIENT_CID.len() + 1 + SERVER_CID.len();
        for cut in 0..header_len {
            assert_eq!(long_header(&d[..cut]), None, "cut at {cut}");
            assert_eq!(backend_scid(&d[..cut]), None, "cut at {cut}");
        }
        assert!(long_header(&d[..header_len]).is_some());
        // A CID length past 20 is not v1 or v2's, and is not read.
        let mut bad = d.clone();
        bad[5] = 21;
        assert_eq!(long_header(&bad), None);
    }

    #[test]
    fn a_learned_id_finds_its_flow_in_short_and_long_headers() {
        let mut table = CidTable::default();
        assert!(table.learn(id(&SERVER_CID), addr(1000)));
        assert_eq!(table.lookup(&short(&SERVER_CID)), Some(addr(1000)));
        // A client's Handshake (v1) or Initial (v2) sent to the server's ID.
        for (first, version) in [(0xe0, Version::V1), (0xd0, Version::V2)] {
            let d = long(first, version.wire(), &SERVER_CID, &CLIENT_CID);
            assert_eq!(table.lookup(&d), Some(addr(1000)));
        }
        // A 20-byte ID beside the 8-byte one: each length is tried.
        let long_id = [0x20; 20];
        assert!(table.learn(id(&long_id), addr(2000)));
        assert_eq!(table.lookup(&short(&long_id)), Some(addr(2000)));
        assert_eq!(table.lookup(&short(&SERVER_CID)), Some(addr(1000)));
    }

    #[test]
    fn unknown_ids_and_truncated_datagrams_find_nothing() {
        let mut table = CidTable::default();
        assert_eq!(table.lookup(&short(&SERVER_CID)), None);
        table.learn(id(&SERVER_CID), addr(1000));
        assert_eq!(table.lookup(&short(&[0x77; 8])), None);
        // The client's own first Initial: its DCID is its random choice.
        assert_eq!(table.lookup(&long(0xc0, 1, &CLIENT_CID, &[])), None);
        // Cut inside the ID.
        let d = short(&SERVER_CID);
        for cut in 0..=SERVER_CID.len() {
            assert_eq!(table.lookup(&d[..cut]), None, "cut at {cut}");
        }
        assert_eq!(table.lookup(&[]), None);
    }

    #[test]
    fn an_id_belongs_to_the_first_flow_that_taught_it() {
        let mut table = CidTable::default();
        assert!(table.learn(id(&SERVER_CID), addr(1000)));
        assert!(table.learn(id(&SERVER_CID), addr(1000)));
        assert!(!table.learn(id(&SERVER_CID), addr(2000)));
        assert_eq!(table.lookup(&short(&SERVER_CID)), Some(addr(1000)));
        assert_eq!(table.len(), 1);
    }

    #[test]
    fn a_moved_flow_is_found_at_its_new_address_and_forgotten_when_it_ends() {
        let mut table = CidTable::default();
        let mut flow = FlowCids::default();
        for n in 0..3u8 {
            assert!(flow.add(id(&[n; 8])));
            table.learn(id(&[n; 8]), addr(1000));
        }
        table.moved(&flow, addr(3000));
        for n in 0..3u8 {
            assert_eq!(table.lookup(&short(&[n; 8])), Some(addr(3000)));
        }
        table.forget(&flow);
        assert!(table.is_empty());
        assert_eq!(table.lengths, [0; MAX_CID_LEN + 1]);
        assert_eq!(table.lookup(&short(&[0; 8])), None);
    }

    #[test]
    fn a_flow_teaches_at_most_four_ids() {
        let mut flow = FlowCids::default();
        assert!(flow.is_empty());
        for n in 0..MAX_CIDS_PER_FLOW as u8 {
            assert!(flow.add(id(&[n; 8])));
            assert!(!flow.add(id(&[n; 8])), "a repeat is not added");
        }
        assert!(!flow.add(id(&[0xff; 8])));
        assert_eq!(flow.len(), MAX_CIDS_PER_FLOW);
        assert!(!flow.contains(&id(&[0xff; 8])));
    }

    #[test]
    fn a_path_reports_its_moves() {
        let path = Path::new(addr(1000));
        assert_eq!((path.client(), path.rebinds()), (addr(1000), 0));
        path.moved(addr(2000));
        assert_eq!((path.client(), path.rebinds()), (addr(2000), 1));
    }
}
