//! The source table's bounds: `max_sources`, least-recently-used eviction
//! that never touches a source with an open connection, incremental
//! expiry, and what a reload does to a shared table; through the gate, on
//! a fake clock.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::FakeRelativeClock;

use super::gate::*;
use super::key::*;
use super::table::{EXPIRY_SCAN, SHARDS};
use crate::addr::PeerAddr;
use crate::admission::*;
use crate::config::Attempts;

fn source(i: u32) -> Source {
    let ip = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i));
    Source::Peer(PeerAddr(SocketAddr::new(ip, 40_000)))
}

fn bounded(max_sources: u32) -> Limits {
    Limits {
        connections_per_source: NonZeroU32::new(2),
        rate_per_source: Some(Rate {
            per_second: NonZeroU32::new(1).unwrap(),
            burst: NonZeroU32::new(1).unwrap(),
        }),
        max_sources: NonZeroU32::new(max_sources).unwrap(),
        ..Limits::unlimited()
    }
}

#[test]
fn a_full_table_forgets_its_least_recently_used_source_and_never_a_held_one() {
    let clock = FakeRelativeClock::default();
    let gate = Admission::with_clock(&bounded(100), clock.clone());
    // Source 0 holds a connection; 1..=100 come and go.
    let held = gate.admit(source(0)).unwrap();
    for i in 1..=100 {
        clock.advance(Duration::from_millis(1));
        drop(gate.admit(source(i)).unwrap());
    }
    let tracked = gate.tracked();
    assert_eq!((tracked.sources, tracked.evicted), (101, 0), "{tracked:?}");
    // Source 1 is seen again: it is now the most recent.
    assert_eq!(gate.admit(source(1)).unwrap_err(), Refusal::Rate);
    // 50 new sources push out the 50 least recently used idle ones (2..=51);
    // the held source 0 and the refreshed source 1 stay.
    for i in 101..151 {
        clock.advance(Duration::from_millis(1));
        drop(gate.admit(source(i)).unwrap());
    }
    let tracked = gate.tracked();
    assert_eq!((tracked.sources, tracked.evicted), (101, 50), "{tracked:?}");
    let keys: Vec<String> = gate.sources().iter().map(|r| r.key.to_string()).collect();
    for kept in [0, 1, 52, 150] {
        assert!(keys.contains(&key_text(kept)), "{kept} kept: {keys:?}");
    }
    for gone in [2, 51] {
        assert!(!keys.contains(&key_text(gone)), "{gone} evicted");
    }
    // Source 1's rate state survived: it is still over its rate. An evicted
    // source starts afresh (its bucket full again): that is what eviction
    // costs, and why the least recently used go first.
    assert_eq!(gate.admit(source(1)).unwrap_err(), Refusal::Rate);
    assert!(gate.admit(source(2)).is_ok());
    // The held source keeps its count: one more is its cap of 2.
    clock.advance(Duration::from_secs(2));
    let second = gate.admit(source(0)).unwrap();
    clock.advance(Duration::from_secs(2));
    assert_eq!(gate.admit(source(0)).unwrap_err(), Refusal::Concurrent);
    drop((held, second));
}

fn key_text(i: u32) -> String {
    Ipv4Addr::from(0x0a00_0000 + i).to_string()
}

#[test]
fn a_flood_at_the_bound_keeps_a_large_table_within_it() {
    let clock = FakeRelativeClock::default();
    let gate = Admission::with_clock(&bounded(20_000), clock.clone());
    for i in 0..200_000 {
        drop(gate.admit(source(i)));
    }
    let tracked = gate.tracked();
    // Split over the shards, each at its share (rounded up).
    let bound = 20_000usize.div_ceil(SHARDS) * SHARDS;
    assert!(tracked.sources <= bound, "{tracked:?}");
    assert!(tracked.sources >= 19_000, "{tracked:?}");
    assert_eq!(tracked.sources as u64 + tracked.evicted, 200_000);
}

#[test]
fn denied_sources_enter_only_a_table_with_room() {
    let clock = FakeRelativeClock::default();
    let mut limits = bounded(10);
    limits.deny.insert("10.0.0.0/8".parse().unwrap());
    let gate = Admission::with_clock(&limits, clock.clone());
    for i in 0..100 {
        assert_eq!(gate.admit(source(i)).unwrap_err(), Refusal::Denied);
    }
    let tracked = gate.tracked();
    assert_eq!((tracked.sources, tracked.evicted), (10, 0), "{tracked:?}");
    assert_eq!(gate.counters.snapshot().denied, 100);
}

#[test]
fn expiry_goes_in_bounded_steps_and_gives_the_memory_back() {
    let clock = FakeRelativeClock::default();
    let gate = Admission::with_clock(&bounded(100_000), clock.clone());
    let n = 10 * EXPIRY_SCAN as u32 * SHARDS as u32;
    for i in 0..n {
        drop(gate.admit(source(i)));
    }
    assert_eq!(gate.tracked().sources, n as usize);
    // Within one burst window (1 s at 1/s, burst 1) nothing goes.
    clock.advance(Duration::from_millis(500));
    gate.sweep();
    assert_eq!(gate.tracked().sources, n as usize);
    // A source seen again stays; the others go, in steps of EXPIRY_SCAN.
    clock.advance(Duration::from_millis(1000));
    let _ = gate.admit(source(7));
    gate.sweep();
    let after = gate.tracked();
    assert_eq!(after.sources, 1, "{after:?}");
    assert!(after.concurrent_capacity <= 64, "{after:?}");
}

#[test]
fn a_reload_keeps_the_table_and_forgets_only_what_changed_meaning() {
    let clock = FakeRelativeClock::default();
    let attempts = |count: u32| Limits {
        attempts_per_source: Some(Attempts {
            count: NonZeroU32::new(count).unwrap(),
            period: Duration::from_secs(1),
        }),
        ..bounded(100)
    };
    let limits = Limits {
        rate_per_source: None,
        ..attempts(2)
    };
    let gate = Admission::with_clock(&limits, clock.clone());
    let held = gate.admit(source(0)).unwrap();
    drop(gate.admit(source(0)).unwrap());
    assert_eq!(gate.admit(source(0)).unwrap_err(), Refusal::Rate);
    // The same attempts: the count carries over, the third is still over.
    let same = gate.next(&limits, clock.clone());
    assert_eq!(same.admit(source(0)).unwrap_err(), Refusal::Rate);
    // A new count starts afresh, the open connection still counted.
    let changed = Limits {
        rate_per_source: None,
        ..attempts(5)
    };
    let next = same.next(&changed, clock.clone());
    let second = next.admit(source(0)).unwrap();
    assert_eq!(next.admit(source(0)).unwrap_err(), Refusal::Concurrent);
    // A lower `max_sources` applies to the shared table at its next sweep.
    for i in 1..50 {
        drop(next.admit(source(i)));
    }
    let smaller = next.next(
        &Limits {
            max_sources: NonZeroU32::new(10).unwrap(),
            ..changed
        },
        clock.clone(),
    );
    smaller.sweep();
    let tracked = smaller.tracked();
    assert_eq!(tracked.concurrent_keys, 1, "{tracked:?}");
    assert_eq!(tracked.sources, 1 + 10, "{tracked:?}");
    drop((held, second));
    assert_eq!(smaller.tracked().concurrent_keys, 0);
}

#[test]
fn one_entry_per_source_whatever_the_limits() {
    // Every counter of a source lives in one entry: the rate, the
    // attempts and the open count together cost one key.
    let clock = FakeRelativeClock::default();
    let limits = Limits {
        attempts_per_source: Some(Attempts {
            count: NonZeroU32::new(10).unwrap(),
            period: Duration::from_secs(60),
        }),
        rate_per_source: None,
        ..bounded(1000)
    };
    let gate = Admission::with_clock(&limits, clock.clone());
    for i in 0..300 {
        drop(gate.admit(source(i)));
    }
    assert_eq!(gate.tracked().sources, 300);
    let key = gate.key(source(0));
    assert_eq!(gate.attempt_estimate(&key), 1);
    assert!(matches!(key, SourceKey::V4(_)));
}
