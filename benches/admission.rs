//! The admission decision per new connection: allow/deny lists, the
//! per-source concurrency table and the keyed GCRA, all switched on.
//!
//! Run: `cargo bench --bench admission`. The number to read is the time per
//! `admit` call (guard dropped in the same iteration, as a short connection
//! would), over a rotating set of sources so hashing and table lookups are
//! not all served from one hot entry.
//!
//! Before timing, it floods one `Admission` with 1,000,000 distinct sources
//! and prints the live heap (counted by a wrapping global allocator) before,
//! at the peak, and after the sources went quiet and one sweep ran; it
//! panics if the tables do not empty or the heap does not come back to
//! within 1 MiB of where it started.
//!
//! Then a real client's decision while the table is full: one thread admits
//! and releases one source again and again, timing each decision, while
//! another floods new sources as fast as it can (every one evicts the least
//! recently used at `max_sources`) and a third sweeps every 10 ms (the
//! relay sweeps every 10 s); printed as p50 / p99 / p99.9 beside the same
//! client on an empty table, at the default `max_sources` (100,000) and at
//! 1,000,000.

#![allow(missing_docs)] // criterion_group! defines an undocumented pub fn

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::num::NonZeroU32;

use std::alloc::{GlobalAlloc, Layout, System};
use std::net::Ipv6Addr;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use criterion::{Criterion, criterion_group};
use governor::clock::FakeRelativeClock;
use snirelay::addr::PeerAddr;
use snirelay::admission::{Admission, Limits, Rate, Source};
use snirelay::wire::cidr::CidrSet;

/// The system allocator, counting live bytes.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the
// only addition is a relaxed counter update.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn mib(bytes: isize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// 1,000,000 distinct sources (half IPv4, half IPv6 /64s), each opening one
/// connection, 1,000 of them open at any moment.
fn flood_memory() {
    const SOURCES: u32 = 1_000_000;
    let limits = Limits {
        connections_per_source: NonZeroU32::new(10),
        rate_per_source: Some(Rate {
            per_second: NonZeroU32::new(10).unwrap(),
            burst: NonZeroU32::new(20).unwrap(),
        }),
        ..Limits::unlimited()
    };
    let clock = FakeRelativeClock::default();
    let start = LIVE.load(Ordering::Relaxed);
    let admission = Admission::with_clock(&limits, clock.clone());
    let mut held = Vec::with_capacity(1001);
    for i in 0..SOURCES {
        let ip = if i % 2 == 0 {
            IpAddr::V4(Ipv4Addr::from(0x0b00_0000 + i))
        } else {
            IpAddr::V6(Ipv6Addr::from(0x2001_0db8_u128 << 96 | u128::from(i) << 64))
        };
        held.push(
            admission
                .admit(Source::Peer(PeerAddr(SocketAddr::new(ip, 443))))
                .unwrap(),
        );
        if held.len() > 1000 {
            held.drain(..500);
        }
    }
    let peak = LIVE.load(Ordering::Relaxed);
    let during = admission.tracked();
    drop(held);
    clock.advance(Duration::from_secs(3));
    admission.sweep();
    let after = LIVE.load(Ordering::Relaxed);
    let swept = admission.tracked();
    println!(
        "flood of {SOURCES} sources: heap +{:.1} MiB at the peak ({:?}), +{:.3} MiB after one sweep ({:?}); {:.0} bytes per tracked source at the peak",
        mib(peak - start),
        during,
        mib(after - start),
        swept,
        (peak - start) as f64 / during.sources as f64,
    );
    assert_eq!(swept.sources, 0);
    assert_eq!(swept.concurrent_keys, 0);
    assert!(after - start < 1 << 20, "{} bytes left", after - start);
}

/// A real client's admission decision times (ns, sorted) on `admission`
/// while `flood` new sources a second arrive and a sweeper runs.
fn client_times(admission: &Admission, flood: bool) -> Vec<u64> {
    use std::sync::atomic::AtomicBool;
    use std::time::Instant;
    const SAMPLES: usize = 200_000;
    let done = AtomicBool::new(false);
    let client = Source::Peer(PeerAddr("192.0.2.1:40000".parse().unwrap()));
    std::thread::scope(|scope| {
        if flood {
            scope.spawn(|| {
                let mut i = 0u32;
                while !done.load(Ordering::Relaxed) {
                    let ip = IpAddr::V4(Ipv4Addr::from(0x0b00_0000 + i));
                    let _ = admission.admit(Source::Peer(PeerAddr(SocketAddr::new(ip, 443))));
                    i = i.wrapping_add(1);
                }
            });
            scope.spawn(|| {
                while !done.load(Ordering::Relaxed) {
                    admission.sweep();
                    std::thread::sleep(Duration::from_millis(10));
                }
            });
        }
        let mut times = Vec::with_capacity(SAMPLES);
        for _ in 0..SAMPLES {
            let start = Instant::now();
            let admitted = admission.admit(client);
            times.push(start.elapsed().as_nanos() as u64);
            drop(std::hint::black_box(admitted));
        }
        done.store(true, Ordering::Relaxed);
        times.sort_unstable();
        times
    })
}

fn full_table_latency() {
    let at = |times: &[u64], q: f64| times[((times.len() - 1) as f64 * q) as usize];
    for max_sources in [100_000u32, 1_000_000] {
        let limits = Limits {
            connections_per_source: NonZeroU32::new(50),
            attempts_per_source: Some(snirelay::config::Attempts {
                count: NonZeroU32::new(1_000_000_000).unwrap(),
                period: Duration::from_secs(3600),
            }),
            max_sources: NonZeroU32::new(max_sources).unwrap(),
            ..Limits::unlimited()
        };
        let empty = client_times(&Admission::new(&limits), false);
        let admission = Admission::new(&limits);
        // Fill the table to its bound first.
        for i in 0..max_sources + max_sources / 8 {
            let ip = IpAddr::V4(Ipv4Addr::from(0x0c00_0000 + i));
            let _ = admission.admit(Source::Peer(PeerAddr(SocketAddr::new(ip, 443))));
        }
        let full = client_times(&admission, true);
        let tracked = admission.tracked();
        println!(
            "a real client's decision, max_sources {max_sources}: empty table p50 {} / p99 {} / p99.9 {} ns; full table under a flood ({} tracked, {} evicted) p50 {} / p99 {} / p99.9 {} ns: p99 {:.2}x",
            at(&empty, 0.5),
            at(&empty, 0.99),
            at(&empty, 0.999),
            tracked.sources,
            tracked.evicted,
            at(&full, 0.5),
            at(&full, 0.99),
            at(&full, 0.999),
            at(&full, 0.99) as f64 / at(&empty, 0.99) as f64,
        );
    }
}

fn limits() -> Limits {
    let mut allow = CidrSet::default();
    allow.insert("10.0.0.0/8".parse().unwrap());
    let mut deny = CidrSet::default();
    for i in 0..100u32 {
        deny.insert(
            format!("10.{}.{}.0/24", 200 + i / 256, i % 256)
                .parse()
                .unwrap(),
        );
    }
    deny.insert("10.255.255.255".parse().unwrap());
    Limits {
        connections_per_source: NonZeroU32::new(100),
        rate_per_source: Some(Rate {
            per_second: NonZeroU32::new(1_000_000_000).unwrap(),
            burst: NonZeroU32::new(1_000_000_000).unwrap(),
        }),
        dry_run: false,
        allow,
        deny,
        ..Limits::unlimited()
    }
}

fn sources(n: u32) -> Vec<Source> {
    (0..n)
        .map(|i| {
            let ip = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i));
            Source::Peer(PeerAddr(SocketAddr::new(ip, 40_000)))
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let admission = Admission::new(&limits());
    let sources = sources(4096);
    let mut i = 0;
    c.bench_function("admit: allow/deny + concurrent + rate", |b| {
        b.iter(|| {
            i = (i + 1) % sources.len();
            let admitted = admission.admit(sources[i]).unwrap();
            std::hint::black_box(&admitted);
        })
    });

    // Each counting limit alone: with a rate only, the source table is
    // kept too (it is what `/sources` lists), so this is the case it costs.
    let rate_only = Admission::new(&Limits {
        connections_per_source: None,
        allow: CidrSet::default(),
        deny: CidrSet::default(),
        ..limits()
    });
    c.bench_function("admit: rate only", |b| {
        b.iter(|| {
            i = (i + 1) % sources.len();
            std::hint::black_box(rate_only.admit(sources[i]).unwrap());
        })
    });
    let concurrent_only = Admission::new(&Limits {
        rate_per_source: None,
        allow: CidrSet::default(),
        deny: CidrSet::default(),
        ..limits()
    });
    c.bench_function("admit: concurrent only", |b| {
        b.iter(|| {
            i = (i + 1) % sources.len();
            std::hint::black_box(concurrent_only.admit(sources[i]).unwrap());
        })
    });

    let unlimited = Admission::new(&Limits::unlimited());
    c.bench_function("admit: no limits configured", |b| {
        b.iter(|| {
            i = (i + 1) % sources.len();
            std::hint::black_box(unlimited.admit(sources[i]).unwrap());
        })
    });
}

criterion_group!(benches, bench);

fn main() {
    flood_memory();
    full_table_latency();
    benches();
    Criterion::default().configure_from_args().final_summary();
}
