//! Fuzzes the incremental ClientHello reader (`client_hello::Reassembler`)
//! against the one-shot `parse`, feeding a random stream cut at random
//! points the way `inspect` feeds it: after each read, never more than
//! `limit` bytes in all.
//!
//! Checks: the reader answers at the byte where `parse` on the same bytes
//! gives the same answer; when the whole input fits the limit (the relay
//! never holds more), `parse` on all of it agrees too; it never wants more
//! than `limit` bytes; a hello never claims bytes it was not given or past
//! the limit; and an answer, once given, stays.

#![no_main]

use libfuzzer_sys::fuzz_target;
use snirelay::wire::client_hello::{Inspect, Reassembler, parse};

fuzz_target!(|data: &[u8]| {
    // Bytes 0-1: the limit (small ones reach the too-large paths); byte 2:
    // the seed of the cut points; the rest: the stream.
    let (limit, seed, input) = match data {
        [a, b, s, rest @ ..] => (usize::from(u16::from_be_bytes([*a, *b])), *s, rest),
        _ => return,
    };
    let mut state = u32::from(seed).wrapping_mul(0x9e37_79b9) | 1;
    let mut next_cut = move || {
        // xorshift32: cheap, deterministic per input.
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        // Mostly segment-sized reads, sometimes a whole socket buffer.
        match state % 8 {
            0 => 1 + (state >> 8) as usize % 16_384,
            _ => 1 + (state >> 8) as usize % 64,
        }
    };
    let mut reader = Reassembler::new(limit);
    let mut fed = 0;
    let answer = loop {
        if fed == input.len() {
            break None;
        }
        let room = limit.saturating_sub(fed).max(1);
        fed += next_cut().min(room).min(input.len() - fed);
        match reader.feed(&input[..fed]) {
            Err(Inspect::Incomplete) => {
                assert!(fed < limit, "incomplete with {fed} bytes at limit {limit}");
            }
            answer => break Some(answer),
        }
    };
    let held = &input[..fed];
    match answer {
        None => {
            assert_eq!(parse(held, limit), Err(Inspect::Incomplete));
        }
        Some(answer) => {
            assert_eq!(
                parse(held, limit),
                answer,
                "one-shot parse of the same bytes"
            );
            if input.len() <= limit {
                assert_eq!(parse(input, limit), answer, "one-shot parse of all");
            }
            if let Ok(hello) = &answer {
                assert!(hello.len <= held.len() && hello.len <= limit);
            }
            assert_eq!(reader.feed(input), answer, "the answer changed");
        }
    }
});
