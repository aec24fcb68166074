//! Fuzzes the QUIC Initial parser (`quic::initial::Parser`) with arbitrary
//! datagram sequences, fed one datagram at a time as a flow feeds them.
//!
//! Input: byte 0 chooses the mode and version, bytes 1-2 the hello limit
//! (small ones reach the too-large paths), bytes 3-4 the datagram cap; the
//! rest is a sequence of chunks, each a 2-byte length and that many bytes.
//! In raw mode each chunk is a datagram as it came off the wire. In sealed
//! mode each chunk is the plaintext frames of one client Initial, sealed
//! here with the public Initial keys (padded to 1200 bytes), so the fuzzer
//! reaches the frame walker and the CRYPTO reassembly behind the AEAD.
//!
//! Checks: no panic; a verdict other than `Incomplete` comes at the latest
//! past the datagram cap and never changes afterwards; the one-shot `parse`
//! of the datagrams fed agrees; a hello never claims more bytes than the
//! limit or more datagrams than were fed.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rustls::Side;
use snirelay::quic::initial::{HelloLimits, Parser, Verdict, parse};
use snirelay::quic::seal::seal_initial;
use snirelay::quic::{Version, initial_keys};

const DCID: &[u8] = &[0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08];

fuzz_target!(|data: &[u8]| {
    let (mode, limit, cap, mut rest) = match data {
        [m, a, b, c, d, rest @ ..] => (
            *m,
            usize::from(u16::from_be_bytes([*a, *b])),
            usize::from(u16::from_be_bytes([*c, *d]) % 64),
            rest,
        ),
        _ => return,
    };
    let sealed = mode & 1 == 1;
    let version = if mode & 2 == 0 { Version::V1 } else { Version::V2 };
    let keys = sealed.then(|| initial_keys(version, DCID, Side::Client));
    let mut datagrams = Vec::new();
    while let [a, b, after @ ..] = rest {
        let len = usize::from(u16::from_be_bytes([*a, *b])).min(after.len());
        let (chunk, next) = after.split_at(len);
        rest = next;
        let datagram = match &keys {
            Some(keys) => {
                let pn = datagrams.len() as u32;
                match seal_initial(version, &keys.local, DCID, &[], pn, chunk, 1200) {
                    Some(packet) => packet,
                    None => return,
                }
            }
            None => chunk.to_vec(),
        };
        datagrams.push(datagram);
    }
    let limits = HelloLimits {
        datagrams: cap,
        ..HelloLimits::for_hello_bytes(limit)
    };
    let mut parser = Parser::new(limits);
    let mut answer = Err(Verdict::Incomplete);
    let mut fed = 0;
    for datagram in &datagrams {
        fed += 1;
        answer = parser.feed(datagram);
        if answer != Err(Verdict::Incomplete) {
            break;
        }
        assert!(fed <= cap, "incomplete after {fed} datagrams, cap {cap}");
    }
    assert_eq!(
        parse(datagrams[..fed].iter().map(Vec::as_slice), limits),
        answer,
        "one-shot parse of the same datagrams"
    );
    if let Ok(hello) = &answer {
        assert!(hello.hello.len <= limit);
        assert!(hello.datagrams == fed);
    }
    if answer != Err(Verdict::Incomplete) {
        for datagram in &datagrams[fed..] {
            assert_eq!(parser.feed(datagram), answer, "the answer changed");
        }
        assert_eq!(parser.feed(&[]), answer, "the answer changed");
    }
});
