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
        (peak - start) as f64 / during.rate_keys as f64,
    );
    assert_eq!(swept.rate_keys, 0);
    assert_eq!(swept.concurrent_keys, 0);
    assert!(after - start < 1 << 20, "{} bytes left", after - start);
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
    benches();
    Criterion::default().configure_from_args().final_summary();
}
