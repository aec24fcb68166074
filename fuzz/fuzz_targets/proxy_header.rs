//! Fuzzes the inbound PROXY header sniffer and parser (`preface::sniff`,
//! `preface::parse`): no input may panic, and the verdicts must agree with
//! each other and with the stream they came from.

#![no_main]

use libfuzzer_sys::fuzz_target;
use snirelay::preface::{Parse, Sniff, V1_MAX_BYTES, V2_MAX_BYTES, Version, parse, sniff};

fuzz_target!(|data: &[u8]| {
    let verdict = parse(data);
    match (sniff(data), &verdict) {
        (Sniff::Incomplete, Parse::Incomplete) | (Sniff::NotProxy, Parse::NotProxy) => {}
        (Sniff::Signature(_), Parse::Incomplete | Parse::Invalid(_)) => {}
        (Sniff::Signature(version), Parse::Header(h)) => {
            assert_eq!(version, h.version);
            assert!(h.len <= data.len());
            let cap = match h.version {
                Version::V1 => V1_MAX_BYTES,
                Version::V2 => V2_MAX_BYTES,
            };
            assert!(h.len <= cap);
            assert!(h.hops >= 1);
            // The header alone parses the same; bytes after it change nothing.
            assert_eq!(parse(&data[..h.len]), verdict);
            // Every strict prefix of a valid header is Incomplete.
            for end in [0, 1, h.len / 2, h.len - 1] {
                assert_eq!(parse(&data[..end]), Parse::Incomplete, "prefix {end}");
            }
        }
        (s, p) => panic!("sniff {s:?} disagrees with parse {p:?}"),
    }
    if verdict == Parse::Incomplete {
        // Incomplete never holds more than a header's worth of bytes.
        assert!(data.len() < V2_MAX_BYTES.max(V1_MAX_BYTES));
    }
});
