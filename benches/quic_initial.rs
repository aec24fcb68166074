//! QUIC Initial parsing cost, on the real first flight Chromium sent
//! (tests/data/quic/chromium.hex: a post-quantum hello in two 1250-byte
//! datagrams, 16 shuffled CRYPTO frames): the work a `quic` listener does
//! per new flow before it can route, and its parts. `flow` is the whole
//! thing as a flow does it (a new parser, both datagrams fed); `keys` is
//! the Initial key derivation alone (once per flow); `one_datagram` is a
//! parser fed only the first datagram (keys, one header-protection removal
//! and one AES-GCM opening, half the CRYPTO bytes).

#![allow(missing_docs)] // criterion_group! defines an undocumented pub fn

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rustls::Side;
use snirelay::quic::initial::{HelloLimits, Parser, Verdict, parse};
use snirelay::quic::{Version, initial_keys};
use std::hint::black_box;

include!("../tests/it/common/quic_capture.rs");

fn quic_initial(c: &mut Criterion) {
    let limits = HelloLimits::for_hello_bytes(16 * 1024);
    let datagrams = capture("chromium");
    let bytes: usize = datagrams.iter().map(Vec::len).sum();
    assert!(parse(datagrams.iter().map(Vec::as_slice), limits).is_ok());
    let mut group = c.benchmark_group("quic_initial");
    group.throughput(Throughput::Bytes(bytes as u64));
    group.bench_function("chromium/flow", |b| {
        b.iter(|| parse(black_box(&datagrams).iter().map(Vec::as_slice), limits))
    });
    group.throughput(Throughput::Bytes(datagrams[0].len() as u64));
    group.bench_function("chromium/one_datagram", |b| {
        b.iter(|| {
            let answer = Parser::new(limits).feed(black_box(&datagrams[0]));
            assert_eq!(answer, Err(Verdict::Incomplete));
        })
    });
    let dcid = &datagrams[0][6..6 + usize::from(datagrams[0][5])];
    group.throughput(Throughput::Elements(1));
    group.bench_function("keys", |b| {
        b.iter(|| initial_keys(Version::V1, black_box(dcid), Side::Server))
    });
    group.finish();
}

criterion_group!(benches, quic_initial);
criterion_main!(benches);
