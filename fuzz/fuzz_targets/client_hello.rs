//! Fuzzes the ClientHello parser with arbitrary network bytes.
//!
//! Beyond "never panics", it checks the guarantees `inspect` relies on: a
//! hello never claims more bytes than it was given or than the limit, the
//! bytes it claims parse to the same answer on their own, and every name it
//! returns goes through the SNI normaliser without panicking, and the
//! fingerprints of every hello it accepts compute without panicking into a
//! JA4 of 36 characters and a 32-digit JA3 hash.

#![no_main]

use libfuzzer_sys::fuzz_target;
use snirelay::wire::client_hello::{Inspect, Reassembler, parse};
use snirelay::wire::fingerprint::{Fingerprints, Transport};
use snirelay::wire::sni::Sni;

fuzz_target!(|data: &[u8]| {
    // The first two bytes choose the limit (the config allows 512..=262144;
    // smaller ones exercise the too-large paths harder).
    let (limit, input) = match data {
        [a, b, rest @ ..] => (usize::from(u16::from_be_bytes([*a, *b])), rest),
        _ => return,
    };
    match parse(input, limit) {
        Ok(hello) => {
            assert!(hello.len <= input.len(), "claims bytes it was not given");
            assert!(hello.len <= limit, "claims bytes past the limit");
            assert_eq!(parse(&input[..hello.len], limit), Ok(hello.clone()));
            if let Some(name) = &hello.server_name {
                let _ = Sni::parse(name);
            }
            let mut reader = Reassembler::new(limit);
            let held = &input[..hello.len];
            assert!(reader.feed(held).is_ok());
            let (message, layout) = reader.hello_message(held).expect("a layout");
            let prints = Fingerprints::compute(message, &layout, Transport::Tcp);
            assert_eq!(prints.ja4().len(), 36, "{}", prints.ja4());
            assert_eq!(prints.ja3_hash().len(), 32);
        }
        Err(Inspect::Incomplete) => {
            // More bytes are wanted, so the limit must not be spent yet:
            // `inspect` would otherwise read into an empty buffer. (It never
            // parses an empty buffer, which is `Incomplete` at any limit;
            // that was the first crash this target found, in the harness.)
            assert!(
                input.is_empty() || input.len() < limit,
                "incomplete at or past the limit"
            );
        }
        Err(Inspect::NotTls | Inspect::Malformed | Inspect::TooLarge) => {}
    }
});
