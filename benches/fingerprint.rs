//! JA4 and JA3 cost per hello, on real captured hellos (tests/data): the
//! work a listener with `fingerprints = true` or a `match` rule adds after
//! the parse (one walk of the extensions, two sorts, two SHA-256, one MD5,
//! four strings). The parse itself is `benches/parse.rs`; the parse with
//! and without the fingerprint are both timed here for the ratio.

#![allow(missing_docs)] // criterion_group! defines an undocumented pub fn

use criterion::{Criterion, criterion_group, criterion_main};
use snirelay::wire::client_hello::{self, Reassembler};
use snirelay::wire::fingerprint::{Fingerprints, Transport};
use std::hint::black_box;

const LIMIT: usize = 16 * 1024;

fn capture(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn fingerprint(c: &mut Criterion) {
    let mut group = c.benchmark_group("fingerprint");
    for name in ["chromium_pq.bin", "curl.bin", "go_crypto_tls.bin"] {
        let bytes = capture(name);
        let mut reader = Reassembler::new(LIMIT);
        reader.feed(&bytes).unwrap();
        let (message, layout) = reader.hello_message(&bytes).unwrap();
        group.bench_function(format!("{name}/ja4+ja3"), |b| {
            b.iter(|| Fingerprints::compute(black_box(message), black_box(&layout), Transport::Tcp))
        });
        group.bench_function(format!("{name}/parse"), |b| {
            b.iter(|| client_hello::parse(black_box(&bytes), LIMIT))
        });
        group.bench_function(format!("{name}/parse+ja4+ja3"), |b| {
            b.iter(|| {
                let mut reader = Reassembler::new(LIMIT);
                let stream = black_box(&bytes[..]);
                reader.feed(stream).unwrap();
                let (message, layout) = reader.hello_message(stream).unwrap();
                Fingerprints::compute(message, &layout, Transport::Tcp)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, fingerprint);
criterion_main!(benches);
