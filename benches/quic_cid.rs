//! NAT rebinding's per-datagram costs (`quic::cid`): what every backend
//! datagram of an open QUIC flow pays (`backend_scid` on a short header, the
//! bulk of a connection: one byte test; on a long header: a header read),
//! and what every datagram from an address no flow has pays before it may
//! start a flow (`lookup` in a socket's table of 8,000 flows with 8-byte
//! IDs: a short-header hit, a miss, and a client's first Initial, whose DCID
//! is its own random choice).

#![allow(missing_docs)] // criterion_group! defines an undocumented pub fn

use std::net::SocketAddr;

use criterion::{Criterion, criterion_group, criterion_main};
use snirelay::quic::cid::{CidTable, backend_scid};
use snirelay::quic::initial::ConnectionId;
use std::hint::black_box;

include!("../tests/it/common/quic_capture.rs");

const FLOWS: u64 = 8000;

fn id(n: u64) -> [u8; 8] {
    // Spread like random IDs (a multiplicative hash of n).
    n.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes()
}

fn short(dcid: &[u8]) -> Vec<u8> {
    let mut d = vec![0x41];
    d.extend_from_slice(dcid);
    d.resize(1200, 0x5a);
    d
}

fn quic_cid(c: &mut Criterion) {
    let mut table = CidTable::default();
    for n in 0..FLOWS {
        let addr = SocketAddr::from(([127, 0, 0, 1], (n % 60_000) as u16 + 1024));
        assert!(table.learn(ConnectionId::new(&id(n)).unwrap(), addr));
    }
    let hit = short(&id(FLOWS / 2));
    let miss = short(&id(FLOWS + 1));
    let initial = capture("chromium").remove(0);
    assert!(table.lookup(&hit).is_some());
    assert!(table.lookup(&miss).is_none() && table.lookup(&initial).is_none());
    // A backend's Initial: a long header with its SCID (the capture's
    // client Initial has the same layout).
    let mut long = initial.clone();
    let scid_len = 5 + 1 + usize::from(long[5]);
    long[scid_len] = 8;
    assert!(backend_scid(&long).is_some());

    let mut group = c.benchmark_group("quic_cid");
    group.bench_function("backend_scid/short_header", |b| {
        b.iter(|| backend_scid(black_box(&hit)))
    });
    group.bench_function("backend_scid/long_header", |b| {
        b.iter(|| backend_scid(black_box(&long)))
    });
    group.bench_function("lookup_8000/short_hit", |b| {
        b.iter(|| table.lookup(black_box(&hit)))
    });
    group.bench_function("lookup_8000/short_miss", |b| {
        b.iter(|| table.lookup(black_box(&miss)))
    });
    group.bench_function("lookup_8000/first_initial", |b| {
        b.iter(|| table.lookup(black_box(&initial)))
    });
    group.finish();
}

criterion_group!(benches, quic_cid);
criterion_main!(benches);
