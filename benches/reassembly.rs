//! ClientHello reassembly cost as the relay pays it: a
//! `client_hello::Reassembler` fed after every read, each read appended to
//! the connection's buffer first (as `inspect` does), for three ways a
//! client can cut the same cap-filling hello:
//!
//! - `whole`: full 16 KiB records, read 16 KiB at a time (`READ_CHUNK`);
//! - `segments`: full records, arriving in reads of 1 to 64 bytes;
//! - `one_byte_records`: one handshake byte per record, one record (6
//!   bytes) per read: the trickle that used to cost quadratic CPU.
//!
//! at the default cap (16 KiB) and the largest (256 KiB). Each reports the
//! time per hello and, as throughput, per stream byte. The relay process's
//! own CPU for the same cases over real sockets is `benches/hello_cpu.rs`.

#![allow(missing_docs)] // criterion_group! defines an undocumented pub fn

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use snirelay::tcp::inspect::READ_CHUNK;
use snirelay::wire::client_hello::{Inspect, Reassembler};
use std::hint::black_box;

#[path = "support/hello.rs"]
mod hello;

/// Feeds `stream` read by read (sizes cycled) into a fresh reassembler,
/// appending each read to a buffer first; returns the answer.
fn inspect(stream: &[u8], reads: &[usize], limit: usize) -> usize {
    let mut bytes = Vec::new();
    let mut reader = Reassembler::new(limit);
    let mut at = 0;
    for &n in reads.iter().cycle() {
        let end = (at + n).min(stream.len());
        bytes.extend_from_slice(&stream[at..end]);
        at = end;
        match reader.feed(&bytes) {
            Err(Inspect::Incomplete) => {}
            Ok(hello) => return hello.len,
            Err(other) => panic!("{other:?}"),
        }
    }
    unreachable!()
}

fn reassembly(c: &mut Criterion) {
    let mut group = c.benchmark_group("reassembly");
    group.sample_size(20);
    for cap in [16 * 1024, 256 * 1024] {
        let whole = hello::stream("bench.example.com", cap, 16 * 1024);
        let trickle = hello::stream("bench.example.com", cap, 1);
        let cases: [(&str, &[u8], Vec<usize>); 3] = [
            ("whole", &whole, vec![READ_CHUNK]),
            ("segments", &whole, hello::segment_sizes(whole.len())),
            ("one_byte_records", &trickle, vec![6]),
        ];
        for (name, stream, reads) in cases {
            assert_eq!(inspect(stream, &reads, cap), stream.len(), "{name}");
            group.throughput(Throughput::Bytes(stream.len() as u64));
            group.bench_with_input(
                BenchmarkId::new(name, format!("{}KiB", cap / 1024)),
                &(stream, reads),
                |b, (stream, reads)| b.iter(|| inspect(black_box(stream), reads, cap)),
            );
        }
    }
    group.finish();
}

criterion_group!(benches, reassembly);
criterion_main!(benches);
