//! ClientHellos of a chosen size for the reassembly benches: a real-looking
//! TLS 1.3 hello (SNI, ALPN, versions, groups, a key share) padded until its
//! stream fills a cap, cut into records of a chosen payload size. A hello
//! in full-size records stops short of a 256 KiB cap: no ClientHello can
//! exceed about 128 KiB (its cipher suites and its extensions block each
//! have a 16-bit length).

/// The stream a client sends: `name` as SNI, the handshake message cut into
/// records of `record_payload` bytes, as long as fits in `cap` bytes (and
/// as a ClientHello can be).
pub(crate) fn stream(name: &str, cap: usize, record_payload: usize) -> Vec<u8> {
    let base = message(name, 0).len();
    let size = |m: usize| m + 5 * m.div_ceil(record_payload);
    // The largest message whose records fit the cap.
    let mut m = cap * record_payload / (record_payload + 5);
    while size(m + 1) <= cap {
        m += 1;
    }
    while size(m) > cap {
        m -= 1;
    }
    let m = m.min(max_message(name));
    assert!(m >= base + 4, "cap {cap} too small for a hello");
    let message = message(name, m - base);
    assert_eq!(message.len(), m);
    records(&message, record_payload)
}

/// `message` cut into handshake records of `size` payload bytes.
pub(crate) fn records(message: &[u8], size: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(message.len() + 5 * message.len().div_ceil(size));
    for chunk in message.chunks(size) {
        out.extend_from_slice(&[22, 3, 1]);
        out.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
        out.extend_from_slice(chunk);
    }
    out
}

fn vec16(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as u16).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

/// Largest `cipher_suites` vector (RFC 8446: `<2..2^16-2>`).
const MAX_CIPHERS: usize = 65_534;
/// Largest extensions block (a 16-bit length).
const MAX_BLOCK: usize = 65_535;

/// A ClientHello message with `filler` extra bytes (0 or at least 4): first
/// one unknown extension, up to the 64 KiB extensions block, then extra
/// cipher suites (and a second compression method when the rest is odd).
/// A ClientHello cannot be much larger than 128 KiB: both vectors have
/// 16-bit lengths.
fn message(name: &str, filler: usize) -> Vec<u8> {
    let mut block = Vec::new();
    for (kind, data) in [
        (0u16, vec16(&[&[0][..], &vec16(name.as_bytes())].concat())),
        (10, vec16(&[0x00, 0x1d, 0x00, 0x17])),
        (13, vec16(&[0x08, 0x04, 0x04, 0x03])),
        (
            16,
            vec16(&[
                2, b'h', b'2', 8, b'h', b't', b't', b'p', b'/', b'1', b'.', b'1',
            ]),
        ),
        (43, vec![2, 0x03, 0x04]),
        (
            51,
            vec16(&[&[0x00, 0x1d][..], &vec16(&[0x77; 32])].concat()),
        ),
    ] {
        block.extend_from_slice(&kind.to_be_bytes());
        block.extend(vec16(&data));
    }
    assert!(filler == 0 || filler >= 4);
    let into_block = filler.min(MAX_BLOCK - block.len());
    if into_block > 0 {
        block.extend_from_slice(&0xff00u16.to_be_bytes());
        block.extend(vec16(&vec![0; into_block - 4]));
    }
    let rest = filler - into_block;
    let mut ciphers = vec![0x13, 0x01, 0x13, 0x02];
    ciphers.resize(ciphers.len() + (rest & !1), 0x0a);
    assert!(ciphers.len() <= MAX_CIPHERS, "no ClientHello is that large");
    // An odd byte goes into compression_methods (a second method).
    let compression = [&[0][..], &[0x40][..rest & 1]].concat();

    let mut body = vec![0x03, 0x03];
    body.extend_from_slice(&[0x5a; 32]);
    body.push(32);
    body.extend_from_slice(&[0x33; 32]);
    body.extend(vec16(&ciphers));
    body.push(compression.len() as u8);
    body.extend_from_slice(&compression);
    body.extend(vec16(&block));
    let mut message = vec![1];
    message.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    message.extend(body);
    message
}

/// The largest message [`message`] can make.
fn max_message(name: &str) -> usize {
    let base = message(name, 0);
    // The block's own length and the fixed fields are in `base`.
    let block = base.len() - (4 + 2 + 32 + 33 + 2 + 4 + 2 + 2);
    base.len() + (MAX_BLOCK - block) + (MAX_CIPHERS - 4)
}

/// Read or write sizes of 1..=64 bytes adding up to `total`, the same
/// sequence every run (a fixed xorshift).
pub(crate) fn segment_sizes(total: usize) -> Vec<usize> {
    let mut state = 0x2545_f491_u32;
    let mut sizes = Vec::new();
    let mut sum = 0;
    while sum < total {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let n = (1 + state as usize % 64).min(total - sum);
        sizes.push(n);
        sum += n;
    }
    sizes
}
