//! Sealing an Initial packet: header, payload encryption and header
//! protection, the inverse of what [`super::initial`] removes.
//!
//! The relay needs it for its own packets (a refusal the client
//! understands: a server Initial carrying CONNECTION_CLOSE, sealed with the
//! flow's public Initial keys), and tests and the fuzz target use it to
//! build client Initials around the frames they choose. The keys are
//! rustls'; no cipher is written here.
//!
//! Not here: choosing frames, connection IDs or packet numbers, or sending.

use rustls::quic::DirectionalKeys;

use super::Version;

/// Header protection samples 16 bytes, 4 bytes after the packet number's
/// start (RFC 9001 §5.4.2): with a 4-byte packet number, the payload's first.
const SAMPLE_LEN: usize = 16;
/// The packet number is always written in 4 bytes: every sample is then
/// within the payload, whatever its size, and the cost is 3 bytes a packet.
const PN_LEN: usize = 4;
const TAG_LEN: usize = 16;

/// An Initial packet of `version` from `dcid` and `scid`, with packet
/// number `pn`, carrying `frames` followed by PADDING frames up to `pad_to`
/// bytes of packet in all (a client's datagram must reach 1200), sealed
/// with `keys` (a client's `local` keys for a client packet, a server's for
/// a server one). `None` when a connection ID is longer than 255 bytes or
/// the packet would be longer than a two-byte Length can say (16 KiB).
pub fn seal_initial(
    version: Version,
    keys: &DirectionalKeys,
    dcid: &[u8],
    scid: &[u8],
    pn: u32,
    frames: &[u8],
    pad_to: usize,
) -> Option<Vec<u8>> {
    let type_bits = match version {
        Version::V1 => 0x00,
        Version::V2 => 0x10,
    };
    // Long header, fixed bit, Initial, 4-byte packet number.
    let mut packet = vec![0xc0 | type_bits | (PN_LEN as u8 - 1)];
    packet.extend_from_slice(&version.wire().to_be_bytes());
    packet.push(u8::try_from(dcid.len()).ok()?);
    packet.extend_from_slice(dcid);
    packet.push(u8::try_from(scid.len()).ok()?);
    packet.extend_from_slice(scid);
    packet.push(0); // no token
    let mut payload = frames.to_vec();
    // A sample needs 16 bytes after the packet number's first 4.
    let min_payload = SAMPLE_LEN.saturating_sub(TAG_LEN).max(1);
    let fixed = packet.len() + 2 + PN_LEN + TAG_LEN;
    let wanted = pad_to.saturating_sub(fixed).max(min_payload);
    if payload.len() < wanted {
        payload.resize(wanted, 0); // PADDING frames
    }
    let length = PN_LEN + payload.len() + TAG_LEN;
    let length = u16::try_from(length).ok().filter(|len| *len < 0x4000)?;
    packet.extend_from_slice(&(length | 0x4000).to_be_bytes());
    let pn_offset = packet.len();
    packet.extend_from_slice(&pn.to_be_bytes());
    let tag = keys
        .packet
        .encrypt_in_place(u64::from(pn), &packet, &mut payload)
        .ok()?;
    packet.extend_from_slice(&payload);
    packet.extend_from_slice(tag.as_ref());
    let sample_at = pn_offset + PN_LEN;
    let mut sample = [0; SAMPLE_LEN];
    sample.copy_from_slice(&packet[sample_at..sample_at + SAMPLE_LEN]);
    let (head, pn_field) = packet.split_at_mut(pn_offset);
    keys.header
        .encrypt_in_place(&sample, &mut head[0], &mut pn_field[..PN_LEN])
        .ok()?;
    Some(packet)
}
