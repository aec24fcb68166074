//! Sealing an Initial packet: header, payload encryption and header
//! protection, the inverse of what [`super::initial`] removes.
//!
//! The relay needs it for its own packets (a refusal the client
//! understands: a server Initial carrying CONNECTION_CLOSE, sealed with the
//! flow's public Initial keys), and tests and the fuzz target use it to
//! build client Initials around the frames they choose. The keys are
//! rustls'; no cipher is written here. The known answers of RFC 9001 and
//! RFC 9369 Appendix A are checked here (tests), which pins the version's
//! salt and labels as rustls derives them as well as this sealer.
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

/// What a test reads back from a sealed Initial: the inverse of
/// [`seal_initial`], written separately from the parser so that each checks
/// the other.
#[cfg(test)]
pub(crate) mod open {
    use rustls::quic::DirectionalKeys;

    pub(crate) struct Opened {
        pub first: u8,
        pub version: u32,
        pub dcid: Vec<u8>,
        pub scid: Vec<u8>,
        pub pn: u64,
        pub payload: Vec<u8>,
        /// Bytes of the datagram after this packet.
        pub rest: usize,
    }

    /// Opens the long-header Initial at the start of `datagram` with `keys`
    /// (a client's `remote` keys for a server's packet). Token must be empty;
    /// the packet number is taken as is (the first packet of its space).
    pub(crate) fn open_initial(keys: &DirectionalKeys, datagram: &[u8]) -> Option<Opened> {
        let mut at = 5;
        let version = u32::from_be_bytes(datagram.get(1..5)?.try_into().ok()?);
        let dcid_len = usize::from(*datagram.get(at)?);
        let dcid = datagram.get(at + 1..at + 1 + dcid_len)?.to_vec();
        at += 1 + dcid_len;
        let scid_len = usize::from(*datagram.get(at)?);
        let scid = datagram.get(at + 1..at + 1 + scid_len)?.to_vec();
        at += 1 + scid_len;
        if *datagram.get(at)? != 0 {
            return None; // a token
        }
        at += 1;
        let (length, len_len) = varint(datagram.get(at..)?)?;
        at += len_len;
        let pn_offset = at;
        let end = pn_offset + usize::try_from(length).ok()?;
        let mut packet = datagram.get(..end)?.to_vec();
        let sample = packet.get(pn_offset + 4..pn_offset + 20)?.to_vec();
        let (head, pn_field) = packet.split_at_mut(pn_offset);
        keys.header
            .decrypt_in_place(&sample, &mut head[0], &mut pn_field[..4])
            .ok()?;
        let first = packet[0];
        let pn_len = usize::from(first & 0x03) + 1;
        let pn = packet[pn_offset..pn_offset + pn_len]
            .iter()
            .fold(0u64, |pn, byte| pn << 8 | u64::from(*byte));
        let (header, payload) = packet.split_at_mut(pn_offset + pn_len);
        let payload = keys.packet.decrypt_in_place(pn, header, payload).ok()?;
        Some(Opened {
            first,
            version,
            dcid,
            scid,
            pn,
            payload: payload.to_vec(),
            rest: datagram.len() - end,
        })
    }

    /// A variable-length integer (RFC 9000 §16) and its length.
    pub(crate) fn varint(buf: &[u8]) -> Option<(u64, usize)> {
        let first = *buf.first()?;
        let len = 1 << (first >> 6);
        let bytes = buf.get(..len)?;
        let value = bytes[1..]
            .iter()
            .fold(u64::from(first & 0x3f), |value, byte| {
                value << 8 | u64::from(*byte)
            });
        Some((value, len))
    }

    pub(crate) fn hex(text: &str) -> Vec<u8> {
        let text: String = text.split_whitespace().collect();
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
            .collect()
    }
}

/// Known answers from RFC 9001 Appendix A (v1) and RFC 9369 Appendix A
/// (v2): the client's first Initial for Destination Connection ID
/// 0x8394c8f03e515708 and the server's answer. rustls does not expose the
/// derived key, IV and header-protection key, so they are checked through
/// what they produce: sealing the appendix's plaintext must give its
/// protected packet byte for byte (a wrong key, IV or HP key changes it),
/// and the client's view of the server keys must open the server's packet.
#[cfg(test)]
mod tests {
    use rustls::Side;

    use super::open::{hex, open_initial};
    use super::*;
    use crate::quic::initial_keys;

    const DCID: &str = "8394c8f03e515708";

    /// The CRYPTO frame of A.2 (the same in both RFCs): a ClientHello for
    /// example.com, 241 bytes. The packet pads it with 917 PADDING bytes.
    const CLIENT_CRYPTO: &str = "
        060040f1010000ed0303ebf8fa56f12939b9584a3896472ec40bb863cfd3e868
        04fe3a47f06a2b69484c00000413011302010000c000000010000e00000b6578
        616d706c652e636f6dff01000100000a00080006001d00170018001000070005
        04616c706e000500050100000000003300260024001d00209370b2c9caa47fba
        baf4559fedba753de171fa71f50f1ce15d43e994ec74d748002b000302030400
        0d0010000e0403050306030203080408050806002d00020101001c0002400100
        3900320408ffffffffffffffff05048000ffff07048000ffff08011001048000
        75300901100f088394c8f03e51570806048000ffff";

    fn protected_client_initial(version: Version) -> Vec<u8> {
        let file = match version {
            Version::V1 => "rfc9001_a2",
            Version::V2 => "rfc9369_a2",
        };
        let path = format!("{}/tests/data/quic/{file}.hex", env!("CARGO_MANIFEST_DIR"));
        hex(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}")))
    }

    #[test]
    fn client_initial_keys_seal_the_appendix_packet_byte_for_byte() {
        for version in [Version::V1, Version::V2] {
            let keys = initial_keys(version, &hex(DCID), Side::Client);
            // Packet number 2 in 4 bytes, no SCID, no token, 1200 bytes:
            // the header of A.2 (c3/d3 ... 449e 00000002).
            let sealed = seal_initial(
                version,
                &keys.local,
                &hex(DCID),
                &[],
                2,
                &hex(CLIENT_CRYPTO),
                1200,
            )
            .unwrap();
            let expected = protected_client_initial(version);
            assert_eq!(sealed.len(), 1200, "{version:?}");
            assert_eq!(sealed, expected, "{version:?}");
        }
    }

    #[test]
    fn client_header_protection_masks_match_the_appendix() {
        // A.2: sample (the first 16 protected payload bytes) and the mask's
        // first 5 bytes; a long header (0xc3: 4-byte packet number) takes
        // mask[0]'s low 4 bits, and its packet number all four others.
        for (version, sample, mask) in [
            (
                Version::V1,
                "d1b1c98dd7689fb8ec11d242b123dc9b",
                "437b9aec36",
            ),
            (
                Version::V2,
                "ffe67b6abcdb4298b485dd04de806071",
                "94a0c95e80",
            ),
        ] {
            let keys = initial_keys(version, &hex(DCID), Side::Client);
            let mask = hex(mask);
            let mut first = 0xc3;
            let mut pn = [0u8; 4];
            keys.local
                .header
                .encrypt_in_place(&hex(sample), &mut first, &mut pn)
                .unwrap();
            assert_eq!(first, 0xc3 ^ (mask[0] & 0x0f), "{version:?}");
            assert_eq!(pn[..], mask[1..], "{version:?}");
        }
    }

    #[test]
    fn server_initial_keys_open_the_appendix_server_packet() {
        // A.3: the server's Initial (ACK and the ServerHello's CRYPTO
        // frame, packet number 1 in 2 bytes), opened as the client does.
        let payload = hex("
            02000000000600405a020000560303eefce7f7b37ba1d1632e96677825ddf739
            88cfc79825df566dc5430b9a045a1200130100002e00330024001d00209d3c94
            0d89690b84d08a60993c144eca684d1081287c834d5311bcf32bb9da1a002b00
            020304");
        for (version, first, protected) in [
            (
                Version::V1,
                0xc1,
                "cf000000010008f067a5502a4262b5004075c0d95a482cd0991cd25b0aac406a
                 5816b6394100f37a1c69797554780bb38cc5a99f5ede4cf73c3ec2493a1839b3
                 dbcba3f6ea46c5b7684df3548e7ddeb9c3bf9c73cc3f3bded74b562bfb19fb84
                 022f8ef4cdd93795d77d06edbb7aaf2f58891850abbdca3d20398c276456cbc4
                 2158407dd074ee",
            ),
            (
                Version::V2,
                0xd1,
                "dc6b3343cf0008f067a5502a4262b5004075d92faaf16f05d8a4398c47089698
                 baeea26b91eb761d9b89237bbf87263017915358230035f7fd3945d88965cf17
                 f9af6e16886c61bfc703106fbaf3cb4cfa52382dd16a393e42757507698075b2
                 c984c707f0a0812d8cd5a6881eaf21ceda98f4bd23f6fe1a3e2c43edd9ce7ca8
                 4bed8521e2e140",
            ),
        ] {
            let client = initial_keys(version, &hex(DCID), Side::Client);
            let opened = open_initial(&client.remote, &hex(protected)).unwrap();
            assert_eq!(opened.first, first, "{version:?}");
            assert_eq!(opened.version, version.wire());
            assert_eq!(opened.dcid, b"");
            assert_eq!(opened.scid, hex("f067a5502a4262b5"));
            assert_eq!(opened.pn, 1);
            assert_eq!(opened.payload, payload, "{version:?}");
            assert_eq!(opened.rest, 0);
        }
    }
}
