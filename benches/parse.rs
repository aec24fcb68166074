//! ClientHello parsing cost, on real captured hellos (tests/data): the work
//! the relay does per connection before it can route. Also the cost of the
//! "incomplete" verdict on a prefix in one shot (the relay itself walks only
//! the bytes each read adds: see `benches/reassembly.rs`).

#![allow(missing_docs)] // criterion_group! defines an undocumented pub fn

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use snirelay::wire::client_hello;
use std::hint::black_box;

const LIMIT: usize = 16 * 1024;

fn capture(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn parse(c: &mut Criterion) {
    let mut group = c.benchmark_group("client_hello::parse");
    for name in [
        "openssl_sni.bin",
        "curl.bin",
        "chromium_pq.bin",
        "openssl_two_records.bin",
        "openssl_no_sni.bin",
    ] {
        let bytes = capture(name);
        assert!(client_hello::parse(&bytes, LIMIT).is_ok(), "{name}");
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_function(name, |b| {
            b.iter(|| client_hello::parse(black_box(&bytes), LIMIT))
        });
    }
    let pq = capture("chromium_pq.bin");
    let half = &pq[..pq.len() / 2];
    group.throughput(Throughput::Bytes(half.len() as u64));
    group.bench_function("chromium_pq.bin/incomplete-half", |b| {
        b.iter(|| client_hello::parse(black_box(half), LIMIT))
    });
    group.finish();
}

criterion_group!(benches, parse);
criterion_main!(benches);
