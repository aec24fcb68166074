//! A bounds-checked cursor over one datagram or one decrypted payload,
//! with QUIC's variable-length integers (RFC 9000 §16).
//!
//! Not here: what the bytes mean; every shortfall is
//! [`Verdict::Malformed`], since a datagram is never cut.

use super::verdict::Verdict;

/// A bounds-checked cursor; every shortfall is `Malformed` (a datagram is
/// never cut: what is missing was never sent).
pub(super) struct Reader<'a> {
    buf: &'a [u8],
    pub(super) pos: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8], Verdict> {
        let end = self.pos.checked_add(n).ok_or(Verdict::Malformed)?;
        let bytes = self.buf.get(self.pos..end).ok_or(Verdict::Malformed)?;
        self.pos = end;
        Ok(bytes)
    }

    pub(super) fn u8(&mut self) -> Result<u8, Verdict> {
        Ok(self.take(1)?[0])
    }

    pub(super) fn u32(&mut self) -> Result<u32, Verdict> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(super) fn vec8(&mut self) -> Result<&'a [u8], Verdict> {
        let len = usize::from(self.u8()?);
        self.take(len)
    }

    /// A variable-length integer (RFC 9000 §16).
    pub(super) fn varint(&mut self) -> Result<u64, Verdict> {
        let first = self.u8()?;
        let len = 1usize << (first >> 6);
        let mut value = u64::from(first & 0x3f);
        for &byte in self.take(len - 1)? {
            value = value << 8 | u64::from(byte);
        }
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_read_all_four_lengths() {
        // RFC 9000 §A.1 examples.
        for (bytes, value) in [
            (
                &[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c][..],
                151_288_809_941_952_652,
            ),
            (&[0x9d, 0x7f, 0x3e, 0x7d][..], 494_878_333),
            (&[0x7b, 0xbd][..], 15_293),
            (&[0x25][..], 37),
        ] {
            let mut r = Reader::new(bytes);
            assert_eq!(r.varint(), Ok(value));
            assert!(r.is_empty());
        }
        assert_eq!(Reader::new(&[0x7b]).varint(), Err(Verdict::Malformed));
    }
}
