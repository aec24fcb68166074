//! The refusal a QUIC client understands: the server Initial packet that
//! closes its connection with a TLS alert, built as a pure function of the
//! client's first Initial.
//!
//! A flow whose name is not routed (or that is refused for another reason
//! a TLS alert can say) is answered with one datagram holding one server
//! Initial packet (RFC 9000 §17.2.2) of the client's version:
//! - Destination Connection ID: the client's Source Connection ID (a server
//!   addresses the client by the ID the client chose, §7.2);
//! - Source Connection ID: the client's original Destination Connection
//!   ID. Any ID would do, since no packet follows; this one keeps the
//!   function pure (no randomness) and reveals nothing the client did not
//!   send;
//! - no token, packet number 0, in 4 bytes (as [`super::seal`] writes it);
//! - one CONNECTION_CLOSE frame of type 0x1c (the only one allowed in an
//!   Initial, §12.4) with error code `CRYPTO_ERROR` + the alert
//!   (0x0100 + 112 = 0x170 for `unrecognized_name`, RFC 9001 §4.8), frame
//!   type 0x06 (the CRYPTO frame that carried the refused ClientHello) and a
//!   short reason phrase;
//! - sealed with the server's Initial keys, which anyone derives from the
//!   client's Destination Connection ID (RFC 9001 §5.2; "server in" or v2's
//!   labels, by rustls).
//!
//! No padding to 1200 bytes: that is required only of datagrams carrying
//! ack-eliciting Initials (RFC 9000 §14.1), and CONNECTION_CLOSE is not
//! ack-eliciting. The payload is just long enough for the header-protection
//! sample (RFC 9001 §5.4.2), which [`super::seal::seal_initial`] ensures.
//! The answer (51 bytes for two 8-byte IDs and an empty reason; 78 for
//! ngtcp2's 18- and 17-byte IDs and an 8-byte reason) is then
//! far smaller than the 1200-byte datagram it answers, so a spoofed source
//! gains no amplification from it (RFC 9000 §8.1 allows three times).
//!
//! The client enters the draining state on it (RFC 9000 §10.2.2) and
//! reports the alert at once instead of retransmitting until its handshake
//! timeout. An on-path attacker could forge the same packet (Initial keys
//! are public, §21.2); a refusal from the relay adds nothing to that.
//!
//! Not here: deciding to refuse, sending, rate-limiting refusals (the
//! listener's), Version Negotiation (left to the backend, see
//! [`super::initial`]).

use rustls::Side;

use super::initial::ConnectionId;
use super::seal::seal_initial;
use super::{Version, initial_keys};

/// The TLS alerts a refusal carries, as TCP's alert record does.
pub use crate::wire::alert::{HANDSHAKE_FAILURE, UNRECOGNIZED_NAME};
/// QUIC carries a TLS alert as transport error `CRYPTO_ERROR` + the alert
/// (RFC 9001 §4.8): 0x0100-0x01ff.
pub const CRYPTO_ERROR: u64 = 0x0100;
/// CONNECTION_CLOSE signalling a QUIC-layer error (RFC 9000 §19.19).
const FRAME_CONNECTION_CLOSE: u64 = 0x1c;
/// The frame type that triggered the error: CRYPTO, which carried the
/// ClientHello.
const FRAME_CRYPTO: u64 = 0x06;
/// Longest reason phrase written; longer ones are cut (at a character
/// boundary). It is a debugging aid in plaintext to anyone on the path.
pub(crate) const MAX_REASON: usize = 64;

/// The datagram that refuses the connection whose client sent its first
/// Initial of `version` from `client_scid` to `client_dcid`, with TLS
/// `alert` and `reason` (cut to `MAX_REASON` bytes; empty is fine).
pub fn refusal(
    version: Version,
    client_dcid: &ConnectionId,
    client_scid: &ConnectionId,
    alert: u8,
    reason: &str,
) -> Vec<u8> {
    let mut cut = reason.len().min(MAX_REASON);
    while !reason.is_char_boundary(cut) {
        cut -= 1;
    }
    let reason = &reason.as_bytes()[..cut];
    let mut frame = Vec::with_capacity(8 + reason.len());
    varint(FRAME_CONNECTION_CLOSE, &mut frame);
    varint(CRYPTO_ERROR + u64::from(alert), &mut frame);
    varint(FRAME_CRYPTO, &mut frame);
    varint(reason.len() as u64, &mut frame);
    frame.extend_from_slice(reason);
    let keys = initial_keys(version, client_dcid.as_bytes(), Side::Server);
    // Connection IDs are at most 20 bytes and the packet under 200: the
    // only cases in which sealing declines cannot occur.
    seal_initial(
        version,
        &keys.local,
        client_scid.as_bytes(),
        client_dcid.as_bytes(),
        0,
        &frame,
        0,
    )
    .expect("a refusal is far below the sealer's limits")
}

/// A variable-length integer (RFC 9000 §16) of at most 2^30 - 1, the
/// largest any field here holds.
fn varint(value: u64, out: &mut Vec<u8>) {
    match value {
        0..0x40 => out.push(value as u8),
        0x40..0x4000 => out.extend_from_slice(&(value as u16 | 0x4000).to_be_bytes()),
        _ => out.extend_from_slice(&(value as u32 | 0x8000_0000).to_be_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quic::seal::open::{open_initial, varint as read_varint};

    const DCID: &[u8] = &[0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08];
    const SCID: &[u8] = &[0xc1, 0x1e, 0x47];

    /// The frames of a refusal as the client reads them: error code, frame
    /// type, reason; and that nothing but PADDING follows.
    fn read_close(payload: &[u8]) -> (u64, u64, Vec<u8>) {
        let (kind, n) = read_varint(payload).unwrap();
        assert_eq!(kind, 0x1c, "a transport CONNECTION_CLOSE");
        let mut at = n;
        let (code, n) = read_varint(&payload[at..]).unwrap();
        at += n;
        let (frame, n) = read_varint(&payload[at..]).unwrap();
        at += n;
        let (len, n) = read_varint(&payload[at..]).unwrap();
        at += n;
        let reason = payload[at..at + len as usize].to_vec();
        at += len as usize;
        assert!(payload[at..].iter().all(|b| *b == 0), "only PADDING after");
        (code, frame, reason)
    }

    #[test]
    fn the_client_opens_it_and_reads_unrecognized_name() {
        let dcid = ConnectionId::new(DCID).unwrap();
        let scid = ConnectionId::new(SCID).unwrap();
        for version in [Version::V1, Version::V2] {
            let datagram = refusal(version, &dcid, &scid, UNRECOGNIZED_NAME, "");
            // The client holds its Initial keys for its own first DCID.
            let client = initial_keys(version, DCID, Side::Client);
            let opened = open_initial(&client.remote, &datagram).unwrap();
            let type_bits = match version {
                Version::V1 => 0x00,
                Version::V2 => 0x10,
            };
            assert_eq!(opened.first, 0xc0 | type_bits | 0x03, "{version:?}");
            assert_eq!(opened.version, version.wire());
            assert_eq!(opened.dcid, SCID, "addressed to the client's SCID");
            assert_eq!(opened.scid, DCID);
            assert_eq!(opened.pn, 0);
            assert_eq!(opened.rest, 0, "one packet in the datagram");
            let (code, frame, reason) = read_close(&opened.payload);
            assert_eq!(code, 0x170, "{version:?}");
            assert_eq!(frame, 0x06);
            assert_eq!(reason, b"");
            // Small (no amplification) yet sampled: header (first byte,
            // version, two IDs with their lengths, token length, Length)
            // then 4 bytes of packet number and 16 of sample at least.
            let pn_offset = 1 + 4 + 1 + SCID.len() + 1 + DCID.len() + 1 + 2;
            assert!(datagram.len() >= pn_offset + 4 + 16);
            // Here: the 5-byte frame and the 16-byte tag.
            assert_eq!(datagram.len(), pn_offset + 4 + 5 + 16, "{version:?}");
        }
    }

    #[test]
    fn other_alerts_reasons_and_empty_ids_round_trip() {
        let dcid = ConnectionId::new(&[7; 20]).unwrap();
        let empty = ConnectionId::new(&[]).unwrap();
        // 1 + 2k bytes: the cut at MAX_REASON falls inside a character.
        let long = format!("a{}", "é".repeat(MAX_REASON));
        for version in [Version::V1, Version::V2] {
            for (alert, reason, expected) in [
                (HANDSHAKE_FAILURE, "no route", "no route".to_owned()),
                (
                    UNRECOGNIZED_NAME,
                    long.as_str(),
                    format!("a{}", "é".repeat(MAX_REASON / 2 - 1)),
                ),
            ] {
                let datagram = refusal(version, &dcid, &empty, alert, reason);
                let client = initial_keys(version, &[7; 20], Side::Client);
                let opened = open_initial(&client.remote, &datagram).unwrap();
                assert_eq!(opened.dcid, b"");
                let (code, _, got) = read_close(&opened.payload);
                assert_eq!(code, 0x100 + u64::from(alert));
                assert_eq!(got, expected.as_bytes(), "cut at a character boundary");
            }
        }
    }

    #[test]
    fn keys_of_another_dcid_or_version_do_not_open_it() {
        let dcid = ConnectionId::new(DCID).unwrap();
        let scid = ConnectionId::new(SCID).unwrap();
        let datagram = refusal(Version::V1, &dcid, &scid, UNRECOGNIZED_NAME, "");
        let other = initial_keys(Version::V1, &[1; 8], Side::Client);
        assert!(open_initial(&other.remote, &datagram).is_none());
        let v2 = initial_keys(Version::V2, DCID, Side::Client);
        assert!(open_initial(&v2.remote, &datagram).is_none());
        // Nor the client's own direction: the server keys sealed it.
        let client = initial_keys(Version::V1, DCID, Side::Client);
        assert!(open_initial(&client.local, &datagram).is_none());
    }
}
