//! The CRYPTO stream of a flow's Initial packets: the frames of one
//! decrypted Initial payload walked ([`frames`]: PADDING, PING, ACK and
//! CRYPTO, anything else refused) and the CRYPTO bytes reassembled by
//! offset into the one handshake message ([`Crypto`]), out of order and
//! overlapping, with the message's header judged as soon as it is in.
//!
//! Not here: packets, keys and decryption (the [`Parser`](super::Parser)'s),
//! nor the TLS decoding of the finished message.

use super::reader::Reader;
use super::verdict::Verdict;

/// Handshake header: type (1), length (3).
const HANDSHAKE_HEADER_LEN: usize = 4;
const HANDSHAKE_CLIENT_HELLO: u8 = 1;
/// The largest value a variable-length integer holds (RFC 9000 §16).
const MAX_VARINT: u64 = (1 << 62) - 1;

const FRAME_PADDING: u64 = 0x00;
const FRAME_PING: u64 = 0x01;
const FRAME_ACK: u64 = 0x02;
const FRAME_ACK_ECN: u64 = 0x03;
const FRAME_CRYPTO: u64 = 0x06;

/// Walks an Initial packet's frames, feeding CRYPTO data to `crypto`.
pub(super) fn frames(payload: &[u8], crypto: &mut Crypto, limit: usize) -> Result<(), Verdict> {
    let mut r = Reader::new(payload);
    while !r.is_empty() {
        match r.varint()? {
            FRAME_PADDING | FRAME_PING => {}
            kind @ (FRAME_ACK | FRAME_ACK_ECN) => {
                // Largest Acknowledged, ACK Delay, ACK Range Count, First
                // ACK Range; each further range a Gap and a Length. The
                // loop is bounded by the payload: each varint takes a byte.
                r.varint()?;
                r.varint()?;
                let ranges = r.varint()?;
                r.varint()?;
                for _ in 0..ranges {
                    r.varint()?;
                    r.varint()?;
                }
                if kind == FRAME_ACK_ECN {
                    // ECT(0), ECT(1) and ECN-CE counts.
                    for _ in 0..3 {
                        r.varint()?;
                    }
                }
            }
            FRAME_CRYPTO => {
                let offset = r.varint()?;
                let len = r.varint()?;
                if offset.saturating_add(len) > MAX_VARINT {
                    return Err(Verdict::Malformed);
                }
                let data = r.take(usize::try_from(len).map_err(|_| Verdict::Malformed)?)?;
                crypto.insert(offset, data, limit)?;
            }
            _ => return Err(Verdict::Malformed),
        }
    }
    Ok(())
}

/// The CRYPTO stream of the Initial space, reassembled by offset.
#[derive(Debug, Default)]
pub(super) struct Crypto {
    /// Bytes up to the highest offset received; gaps are zero.
    data: Vec<u8>,
    /// One bit per byte of `data`: received.
    have: Vec<u64>,
    /// Bytes received from offset 0 without a gap.
    contiguous: usize,
    /// The message's length, header included, once its header is in.
    total: Option<usize>,
}

impl Crypto {
    pub(super) fn insert(
        &mut self,
        offset: u64,
        bytes: &[u8],
        limit: usize,
    ) -> Result<(), Verdict> {
        let end = offset.saturating_add(bytes.len() as u64);
        if end > limit as u64 {
            return Err(Verdict::TooLarge);
        }
        // Both fit in usize: they are at most `limit`.
        let (offset, end) = (offset as usize, end as usize);
        if self.total.is_some_and(|total| end > total) {
            // A second message in the client's Initials: TLS has none.
            return Err(Verdict::Malformed);
        }
        if end > self.data.len() {
            self.data.resize(end, 0);
            self.have.resize(end.div_ceil(64), 0);
        }
        for (at, &byte) in (offset..end).zip(bytes) {
            let (word, bit) = (at / 64, 1u64 << (at % 64));
            if self.have[word] & bit != 0 {
                if self.data[at] != byte {
                    // Two different bytes for one offset: which one the
                    // server would use is not ours to guess.
                    return Err(Verdict::Malformed);
                }
            } else {
                self.have[word] |= bit;
                self.data[at] = byte;
            }
        }
        while self.contiguous < self.data.len()
            && self.have[self.contiguous / 64] & (1 << (self.contiguous % 64)) != 0
        {
            self.contiguous += 1;
        }
        self.check_header(limit)
    }

    /// Judges the handshake header as soon as its bytes are in.
    fn check_header(&mut self, limit: usize) -> Result<(), Verdict> {
        if self.have.first().is_some_and(|word| word & 1 != 0)
            && self.data[0] != HANDSHAKE_CLIENT_HELLO
        {
            return Err(Verdict::Malformed);
        }
        if self.total.is_none() && self.contiguous >= HANDSHAKE_HEADER_LEN {
            let [_, a, b, c] = [self.data[0], self.data[1], self.data[2], self.data[3]];
            let total = HANDSHAKE_HEADER_LEN
                + (usize::from(a) << 16 | usize::from(b) << 8 | usize::from(c));
            if total > limit {
                return Err(Verdict::TooLarge);
            }
            if self.data.len() > total {
                return Err(Verdict::Malformed);
            }
            self.total = Some(total);
        }
        Ok(())
    }

    /// The whole message, or `Incomplete`.
    pub(super) fn message(&self) -> Result<&[u8], Verdict> {
        match self.total {
            Some(total) if self.contiguous >= total => Ok(&self.data[..total]),
            _ => Err(Verdict::Incomplete),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crypto_reassembles_overlaps_and_refuses_conflicts() {
        let message = [1, 0, 0, 4, 10, 11, 12, 13];
        let mut crypto = Crypto::default();
        crypto.insert(4, &message[4..], 100).unwrap();
        assert_eq!(crypto.message(), Err(Verdict::Incomplete));
        crypto.insert(2, &message[2..6], 100).unwrap();
        crypto.insert(0, &message[..3], 100).unwrap();
        assert_eq!(crypto.message(), Ok(&message[..]));
        let mut bad = Crypto::default();
        bad.insert(0, &message[..6], 100).unwrap();
        assert_eq!(bad.insert(5, &[99], 100), Err(Verdict::Malformed));
        let mut past = Crypto::default();
        past.insert(0, &message, 100).unwrap();
        assert_eq!(past.insert(8, &[0], 100), Err(Verdict::Malformed));
        assert_eq!(
            Crypto::default().insert(99, &[0, 0], 100),
            Err(Verdict::TooLarge)
        );
        assert_eq!(
            Crypto::default().insert(0, &[2], 100),
            Err(Verdict::Malformed)
        );
        assert_eq!(
            Crypto::default().insert(0, &[1, 0, 0, 200], 100),
            Err(Verdict::TooLarge)
        );
    }
}
