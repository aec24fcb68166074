//! Unit tests of the admission gate ([`super::Admission`]) on a fake
//! clock: lists, concurrency, the rate table, dry runs, claimed clients,
//! reloads, the source table, JA4 keys and the route gate. The attempt
//! table's are in `attempts_tests`.

use crate::admission::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::DefaultClock;

use super::gate::*;
use super::key::*;
use super::route::*;
use crate::addr::{ClaimedAddr, PeerAddr};
use crate::config::DEFAULT_MAX_SOURCES;
use crate::wire::cidr::CidrSet;
use governor::clock::FakeRelativeClock;
use std::net::SocketAddr;

fn peer(text: &str) -> Source {
    Source::Peer(PeerAddr(text.parse::<SocketAddr>().unwrap()))
}

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

fn set(blocks: &[&str]) -> CidrSet {
    let mut set = CidrSet::default();
    for b in blocks {
        set.insert(b.parse().unwrap());
    }
    set
}

#[test]
fn keys_cut_sources_to_their_prefix_and_fold_mapped_ipv4() {
    let key = |s, v4, v6| SourceKey::new(peer(s), v4, v6);
    assert_eq!(key("192.0.2.77:1", 32, 64), SourceKey::V4([192, 0, 2, 77]));
    assert_eq!(key("192.0.2.77:1", 24, 64), SourceKey::V4([192, 0, 2, 0]));
    assert_eq!(
        key("[::ffff:192.0.2.77]:1", 32, 64),
        key("192.0.2.77:9", 32, 64),
        "IPv4-mapped IPv6 is the same source as IPv4"
    );
    assert_eq!(
        key("[2001:db8:1:2:aaaa::1]:1", 32, 64),
        key("[2001:db8:1:2:bbbb::9]:1", 32, 64),
        "one /64 is one source"
    );
    assert_ne!(
        key("[2001:db8:1:2::1]:1", 32, 64),
        key("[2001:db8:1:3::1]:1", 32, 64)
    );
    let claimed = Source::Claimed(ClaimedAddr("198.51.100.1:5".parse().unwrap()));
    assert_eq!(
        SourceKey::new(claimed, 32, 64),
        SourceKey::V4([198, 51, 100, 1])
    );
}

#[test]
fn deny_beats_allow_and_allow_excludes_the_rest() {
    let mut limits = Limits::unlimited();
    limits.allow = set(&["127.0.0.0/8"]);
    limits.deny = set(&["127.0.0.3"]);
    let a = Admission::new(&limits);
    assert!(a.admit(peer("127.0.0.2:1")).is_ok());
    assert_eq!(a.admit(peer("127.0.0.3:1")).unwrap_err(), Refusal::Denied);
    assert_eq!(a.admit(peer("10.0.0.1:1")).unwrap_err(), Refusal::Denied);
    assert_eq!(a.counters.snapshot().denied, 2);
}

#[test]
fn concurrency_is_per_key_and_released_on_drop() {
    let mut limits = Limits::unlimited();
    limits.connections_per_source = Some(nz(2));
    let a = Admission::new(&limits);
    let one = a.admit(peer("127.0.0.2:1")).unwrap();
    let _two = a.admit(peer("127.0.0.2:2")).unwrap();
    assert_eq!(
        a.admit(peer("127.0.0.2:3")).unwrap_err(),
        Refusal::Concurrent
    );
    let _other = a.admit(peer("127.0.0.3:1")).unwrap();
    drop(one);
    let _three = a.admit(peer("127.0.0.2:4")).unwrap();
    assert_eq!(a.counters.snapshot().limit_concurrent, 1);
    assert_eq!(a.tracked().concurrent_keys, 2);
}

#[test]
fn rate_refusal_gives_back_the_concurrency_slot() {
    let mut limits = Limits::unlimited();
    limits.connections_per_source = Some(nz(5));
    limits.rate_per_source = Some(Rate {
        per_second: nz(1),
        burst: nz(1),
    });
    let clock = FakeRelativeClock::default();
    let a = Admission::with_clock(&limits, clock.clone());
    let first = a.admit(peer("127.0.0.2:1")).unwrap();
    assert_eq!(a.admit(peer("127.0.0.2:2")).unwrap_err(), Refusal::Rate);
    drop(first);
    assert_eq!(a.tracked().concurrent_keys, 0);
    clock.advance(Duration::from_secs(1));
    assert!(a.admit(peer("127.0.0.2:3")).is_ok());
}

#[test]
fn rate_admits_the_burst_then_refills() {
    let mut limits = Limits::unlimited();
    limits.rate_per_source = Some(Rate {
        per_second: nz(20),
        burst: nz(20),
    });
    let clock = FakeRelativeClock::default();
    let a = Admission::with_clock(&limits, clock.clone());
    let admitted = (0..100)
        .filter(|i| a.admit(peer(&format!("127.0.0.2:{}", 1000 + i))).is_ok())
        .count();
    assert_eq!(admitted, 20);
    assert!(
        a.admit(peer("127.0.0.3:1")).is_ok(),
        "other sources unaffected"
    );
    clock.advance(Duration::from_secs(1));
    let again = (0..100)
        .filter(|i| a.admit(peer(&format!("127.0.0.2:{}", 2000 + i))).is_ok())
        .count();
    assert_eq!(again, 20);
}

#[test]
fn dry_run_counts_but_refuses_nothing_except_deny() {
    let mut limits = Limits::unlimited();
    limits.connections_per_source = Some(nz(1));
    limits.rate_per_source = Some(Rate {
        per_second: nz(1),
        burst: nz(2),
    });
    limits.deny = set(&["127.0.0.9"]);
    limits.dry_run = true;
    let a = Admission::with_clock(&limits, FakeRelativeClock::default());
    let first = a.admit(peer("127.0.0.2:1")).unwrap();
    assert_eq!(first.would_refuse, None);
    let second = a.admit(peer("127.0.0.2:2")).unwrap();
    assert_eq!(second.would_refuse, Some(Refusal::Concurrent));
    let third = a.admit(peer("127.0.0.2:3")).unwrap();
    assert_eq!(third.would_refuse, Some(Refusal::Concurrent));
    assert_eq!(a.tracked().concurrent_keys, 1);
    assert_eq!(a.admit(peer("127.0.0.9:1")).unwrap_err(), Refusal::Denied);
    let counts = a.counters.snapshot();
    assert_eq!(counts.dry_run_concurrent, 2);
    assert_eq!(counts.dry_run_rate, 1);
    assert_eq!((counts.limit_concurrent, counts.limit_rate), (0, 0));
    drop((first, second, third));
    assert_eq!(
        a.tracked().concurrent_keys,
        0,
        "dry-run slots are released too"
    );
}

/// A flood from many distinct sources (IPv4 and IPv6 /64s): while it
/// lasts the tables grow with it; once the sources are gone and one
/// sweep has run, both tables are empty and give their space back.
/// (`benches/admission.rs` runs the same flood with 1,000,000 sources in
/// a release build and reports the memory.)
#[test]
fn a_flood_of_distinct_sources_leaves_the_tables_empty_after_a_sweep() {
    flood(100_000);
}

fn flood(sources: u32) {
    let n = sources;
    let mut limits = Limits::unlimited();
    limits.connections_per_source = Some(nz(10));
    limits.rate_per_source = Some(Rate {
        per_second: nz(10),
        burst: nz(20),
    });
    let clock = FakeRelativeClock::default();
    let a = Admission::with_clock(&limits, clock.clone());
    let mut held = Vec::new();
    for i in 0..n {
        let ip = if i % 2 == 0 {
            IpAddr::V4(Ipv4Addr::from(0x0b00_0000 + i))
        } else {
            IpAddr::V6(Ipv6Addr::from(0x2001_0db8_u128 << 96 | u128::from(i) << 64))
        };
        let admitted = a.admit(Source::Peer(PeerAddr(SocketAddr::new(ip, 443))));
        let admitted = admitted.expect("every new source is admitted");
        // Keep a slice of them open at any time, like real connections.
        held.push(admitted);
        if held.len() > 1000 {
            held.drain(..500);
        }
    }
    let during = a.tracked();
    // Every source was tracked: the ones still remembered and the least
    // recently used ones evicted at `max_sources`.
    assert_eq!(during.sources as u64 + during.evicted, u64::from(n));
    assert!(during.sources <= DEFAULT_MAX_SOURCES.get() as usize + held.len());
    assert!(during.concurrent_keys <= 1001);
    drop(held);
    clock.advance(Duration::from_secs(3)); // burst / rate = 2 s
    a.sweep();
    let after = a.tracked();
    assert_eq!(after.sources, 0);
    assert_eq!(after.concurrent_keys, 0);
    assert!(after.concurrent_capacity <= 64, "{after:?}");
    eprintln!("during the flood: {during:?}; after one sweep: {after:?}");
}

// ------------------------------------------- the gate's budget rule

fn sock(text: &str) -> SocketAddr {
    text.parse().unwrap()
}

/// One connection and one new connection per second per source.
fn tight_gate(clock: FakeRelativeClock) -> Admission<FakeRelativeClock> {
    let mut limits = Limits::unlimited();
    limits.connections_per_source = Some(nz(1));
    limits.rate_per_source = Some(Rate {
        per_second: nz(1),
        burst: nz(1),
    });
    Admission::with_clock(&limits, clock)
}

#[test]
fn a_direct_client_is_decided_at_accept_on_its_measured_address() {
    let gate = tight_gate(FakeRelativeClock::default());
    let client = PeerAddr(sock("198.51.100.7:40000"));
    let held = match gate.at_accept(client, false) {
        Ok(AtAccept::Admitted(admitted)) => admitted,
        other => panic!("{other:?}"),
    };
    assert_eq!(held.key.to_string(), "198.51.100.7");
    assert_eq!(
        gate.at_accept(PeerAddr(sock("198.51.100.7:40001")), false)
            .unwrap_err(),
        Refusal::Concurrent
    );
}

#[test]
fn a_trusted_peer_is_never_counted_on_its_own_address() {
    let gate = tight_gate(FakeRelativeClock::default());
    let relay = PeerAddr(sock("10.0.0.2:40000"));
    // Far past both limits on the peer's own address: all deferred.
    for _ in 0..100 {
        assert!(matches!(
            gate.at_accept(relay, true),
            Ok(AtAccept::AfterPreface)
        ));
        // And its own connections (LOCAL, UNKNOWN, no header) are not
        // counted after the preface either.
        assert!(gate.after_preface(None).unwrap().is_none());
    }
    assert_eq!(gate.tracked().concurrent_keys, 0);
    assert_eq!(gate.tracked().sources, 0);
}

#[test]
fn a_claimed_client_is_limited_as_if_it_had_connected_directly() {
    let clock = FakeRelativeClock::default();
    let gate = tight_gate(clock.clone());
    let claimed = ClaimedAddr(sock("203.0.113.9:5555"));
    let first = gate.after_preface(Some(claimed)).unwrap().unwrap();
    assert_eq!(first.key.to_string(), "203.0.113.9");
    // Its concurrency slot is taken...
    assert_eq!(
        gate.after_preface(Some(claimed)).unwrap_err(),
        Refusal::Concurrent
    );
    // ...and shared with the same client connecting directly.
    assert_eq!(
        gate.at_accept(PeerAddr(sock("203.0.113.9:6000")), false)
            .unwrap_err(),
        Refusal::Concurrent
    );
    drop(first);
    // Slot free, but the rate (1/s, burst 1) is spent until a second passes.
    assert_eq!(
        gate.after_preface(Some(claimed)).unwrap_err(),
        Refusal::Rate
    );
    clock.advance(Duration::from_secs(1));
    assert!(gate.after_preface(Some(claimed)).unwrap().is_some());
    // Another client behind the same peer has a budget of its own.
    assert!(
        gate.after_preface(Some(ClaimedAddr(sock("203.0.113.10:5555"))))
            .unwrap()
            .is_some()
    );
}

#[test]
fn deny_lists_apply_to_claims_too() {
    let mut limits = Limits::unlimited();
    limits.deny = set(&["203.0.113.0/24"]);
    let gate = Admission::new(&limits);
    assert_eq!(
        gate.after_preface(Some(ClaimedAddr(sock("203.0.113.9:1"))))
            .unwrap_err(),
        Refusal::Denied
    );
    assert!(matches!(
        gate.at_accept(PeerAddr(sock("203.0.113.9:1")), true),
        Ok(AtAccept::AfterPreface)
    ));
}

// ------------------------------------ reloads, refused attempts, routes

#[test]
fn a_reload_that_lowers_the_cap_keeps_the_open_connections_counted() {
    let mut limits = Limits::unlimited();
    limits.connections_per_source = Some(nz(5));
    let before = Admission::new(&limits);
    let mut held: Vec<_> = (0..5)
        .map(|i| before.admit(peer(&format!("127.0.0.2:{i}"))).unwrap())
        .collect();
    limits.connections_per_source = Some(nz(3));
    let after = before.next(&limits, DefaultClock::default());
    assert_eq!(
        after.admit(peer("127.0.0.2:9")).unwrap_err(),
        Refusal::Concurrent
    );
    assert!(
        after.admit(peer("127.0.0.3:1")).is_ok(),
        "others unaffected"
    );
    held.truncate(2);
    // 2 still open under a cap of 3: one more fits.
    let _third = after.admit(peer("127.0.0.2:10")).unwrap();
    assert_eq!(
        after.admit(peer("127.0.0.2:11")).unwrap_err(),
        Refusal::Concurrent
    );
}

#[test]
fn new_source_prefixes_start_the_counts_afresh() {
    let mut limits = Limits::unlimited();
    limits.connections_per_source = Some(nz(1));
    let before = Admission::new(&limits);
    let _held = before.admit(peer("127.0.0.2:1")).unwrap();
    limits.source_prefix_v4 = 24;
    let after = before.next(&limits, DefaultClock::default());
    assert!(after.admit(peer("127.0.0.2:2")).is_ok());
}

/// A flooder at ten times its rate: plain GCRA lets the rate through,
/// `rate_counts_refused` lets nothing through until it slows down, and
/// then at most one burst window later.
#[test]
fn refused_attempts_spend_rate_only_with_rate_counts_refused() {
    let admitted_by = |counts_refused: bool| {
        let mut limits = Limits::unlimited();
        limits.rate_per_source = Some(Rate {
            per_second: nz(10),
            burst: nz(10),
        });
        limits.rate_counts_refused = counts_refused;
        let clock = FakeRelativeClock::default();
        let a = Admission::with_clock(&limits, clock.clone());
        // 100 attempts a second for 5 seconds.
        let mut admitted = 0;
        for i in 0..500 {
            if a.admit(peer(&format!("127.0.0.2:{i}"))).is_ok() {
                admitted += 1;
            }
            clock.advance(Duration::from_millis(10));
        }
        // The flood stops; one burst window (1 s) and one interval later
        // the source is admitted again either way.
        clock.advance(Duration::from_millis(1100));
        assert!(a.admit(peer("127.0.0.2:9999")).is_ok());
        admitted
    };
    let plain = admitted_by(false);
    assert!(
        (55..=62).contains(&plain),
        "GCRA lets the rate through: {plain}"
    );
    // The burst of 10, and the one token refilled during it (the 11th
    // attempt comes 100 ms in); every attempt after that is refused.
    assert_eq!(admitted_by(true), 11, "only the first burst");
}

#[test]
fn a_concurrency_refusal_spends_rate_with_rate_counts_refused() {
    let mut limits = Limits::unlimited();
    limits.connections_per_source = Some(nz(1));
    limits.rate_per_source = Some(Rate {
        per_second: nz(1),
        burst: nz(3),
    });
    limits.rate_counts_refused = true;
    let a = Admission::with_clock(&limits, FakeRelativeClock::default());
    let first = a.admit(peer("127.0.0.2:1")).unwrap();
    for i in 0..2 {
        assert_eq!(
            a.admit(peer(&format!("127.0.0.2:{}", 10 + i))).unwrap_err(),
            Refusal::Concurrent
        );
    }
    drop(first);
    // The burst of 3 went on one admitted and two refused attempts.
    assert_eq!(a.admit(peer("127.0.0.2:20")).unwrap_err(), Refusal::Rate);
}

#[test]
fn a_route_gate_counts_its_total_and_its_sources() {
    let mut limits = Limits::unlimited();
    limits.connections_per_source = Some(nz(2));
    limits.deny = set(&["127.0.0.9"]);
    let gate = RouteGate::new(Some(&limits), Some(nz(3))).unwrap();
    let a = gate.admit(Some(peer("127.0.0.2:1"))).unwrap();
    let _b = gate.admit(Some(peer("127.0.0.2:2"))).unwrap();
    assert_eq!(
        gate.admit(Some(peer("127.0.0.2:3"))).unwrap_err(),
        RouteRefusal::Source(Refusal::Concurrent)
    );
    assert_eq!(
        gate.admit(Some(peer("127.0.0.9:3"))).unwrap_err(),
        RouteRefusal::Source(Refusal::Denied)
    );
    let _c = gate.admit(Some(peer("127.0.0.3:1"))).unwrap();
    assert_eq!(
        gate.admit(Some(peer("127.0.0.4:1"))).unwrap_err(),
        RouteRefusal::Full
    );
    // A trusted peer's own connection: no source slot, still counted.
    drop(a);
    let own = gate.admit(None).unwrap();
    assert!(own.source.is_none());
    assert_eq!(gate.open(), 3);
    // A reload that lowers max_connections keeps the three counted.
    let lower = RouteGate::next(Some(&gate), Some(&limits), Some(nz(2))).unwrap();
    assert_eq!(lower.open(), 3);
    assert_eq!(
        lower.admit(Some(peer("127.0.0.5:1"))).unwrap_err(),
        RouteRefusal::Full
    );
    assert!(RouteGate::new(None, None).is_none(), "no settings, no gate");
}

// ------------------------------------------------------- source table

#[test]
fn the_source_table_shows_a_flooder_s_refusals_and_a_normal_source_s_connection() {
    let mut limits = Limits::unlimited();
    limits.connections_per_source = Some(nz(2));
    limits.rate_per_source = Some(Rate {
        per_second: nz(5),
        burst: nz(5),
    });
    let clock = FakeRelativeClock::default();
    let a = Admission::with_clock(&limits, clock.clone());
    let _normal = a.admit(peer("127.0.0.3:1")).unwrap();
    let mut held = Vec::new();
    for i in 0..50 {
        if let Ok(admitted) = a.admit(peer(&format!("127.0.0.2:{i}"))) {
            held.push(admitted);
        }
    }
    clock.advance(Duration::from_secs(1));
    let rows = a.sources();
    assert_eq!(rows.len(), 2);
    let row = |key: &str| rows.iter().find(|r| r.key.to_string() == key).unwrap();
    let flooder = row("127.0.0.2");
    assert_eq!((flooder.open, flooder.admitted), (2, 2));
    assert_eq!(flooder.refused, [0, 48, 0, 0, 0]);
    assert_eq!(flooder.refused_total(), 48);
    assert!(
        (4.9..=5.1).contains(&flooder.rate_per_second),
        "50 attempts over a 10 s window: {}",
        flooder.rate_per_second
    );
    assert_eq!(flooder.last_seen_ago, Duration::from_secs(1));
    let normal = row("127.0.0.3");
    assert_eq!(
        (normal.open, normal.admitted, normal.refused_total()),
        (1, 1, 0)
    );
    // Every refusal is in the listener's counters too.
    assert_eq!(a.counters.snapshot().limit_concurrent, 48);
}

#[test]
fn clearing_a_source_resets_its_counters_and_its_rate_but_not_its_open_count() {
    let mut limits = Limits::unlimited();
    limits.rate_per_source = Some(Rate {
        per_second: nz(1),
        burst: nz(1),
    });
    let a = Admission::with_clock(&limits, FakeRelativeClock::default());
    let held = a.admit(peer("127.0.0.2:1")).unwrap();
    assert_eq!(a.admit(peer("127.0.0.2:2")).unwrap_err(), Refusal::Rate);
    assert!(!a.clear_source("127.0.0.9"), "unknown key");
    assert!(a.clear_source("127.0.0.2"));
    let rows = a.sources();
    assert_eq!(rows[0].open, 1, "its connection stays counted");
    assert_eq!((rows[0].admitted, rows[0].refused_total()), (0, 0));
    let again = a.admit(peer("127.0.0.2:3"));
    assert!(again.is_ok(), "its rate cell went with its counters");
    drop(held);
    assert_eq!(a.sources()[0].open, 1);
    assert_eq!(a.sources()[0].admitted, 1);
}

#[test]
fn quiet_sources_are_forgotten_refused_ones_later() {
    let mut limits = Limits::unlimited();
    limits.rate_per_source = Some(Rate {
        per_second: nz(10),
        burst: nz(10),
    });
    limits.deny = set(&["127.0.0.9"]);
    let clock = FakeRelativeClock::default();
    let a = Admission::with_clock(&limits, clock.clone());
    drop(a.admit(peer("127.0.0.2:1")).unwrap());
    assert_eq!(a.admit(peer("127.0.0.9:1")).unwrap_err(), Refusal::Denied);
    let held = a.admit(peer("127.0.0.3:1")).unwrap();
    assert_eq!(a.tracked().sources, 3);
    clock.advance(Duration::from_secs(2));
    a.sweep();
    let keys = |a: &Admission<FakeRelativeClock>| {
        let mut keys: Vec<String> = a.sources().iter().map(|r| r.key.to_string()).collect();
        keys.sort();
        keys
    };
    assert_eq!(
        keys(&a),
        ["127.0.0.3", "127.0.0.9"],
        "the admitted one went with its rate cell"
    );
    clock.advance(REFUSED_SOURCE_MEMORY);
    a.sweep();
    assert_eq!(keys(&a), ["127.0.0.3"], "open connections keep a source");
    drop(held);
    a.sweep();
    assert_eq!(a.tracked().sources, 0);
}

#[test]
fn a_route_counts_the_claimed_client_and_not_a_peers_own_connection() {
    let peer_addr = PeerAddr(sock("10.0.0.2:40000"));
    let claimed = ClaimedAddr(sock("203.0.113.9:5555"));
    assert_eq!(
        route_source(peer_addr, true, Some(claimed)),
        Some(Source::Claimed(claimed))
    );
    assert_eq!(route_source(peer_addr, true, None), None);
    assert_eq!(
        route_source(peer_addr, false, None),
        Some(Source::Peer(peer_addr))
    );
}

#[test]
fn a_ja4_limit_key_counts_the_source_at_accept_and_the_ja4_after_the_hello() {
    let mut deny = crate::wire::cidr::CidrSet::default();
    deny.insert("192.0.2.66/32".parse().unwrap());
    let limits = Limits {
        connections_per_source: NonZeroU32::new(1),
        limit_key: LimitKey::Ja4,
        deny,
        ..Limits::unlimited()
    };
    let gate = Admission::new(&limits);
    let client = Source::Peer(PeerAddr(sock("192.0.2.1:40000")));
    // At accept: the lists, and the source alone at `ja4_source_multiple`
    // (4) times the limits.
    let at_accept = gate.admit(client).unwrap();
    assert_eq!(
        at_accept.guard.as_ref().unwrap().key,
        SourceKey::V4([192, 0, 2, 1])
    );
    assert_eq!(
        gate.admit(Source::Peer(PeerAddr(sock("192.0.2.66:1"))))
            .unwrap_err(),
        Refusal::Denied
    );
    assert_eq!(gate.tracked().concurrent_keys, 1);
    drop(at_accept);
    // After the hello: one open connection per JA4, whatever the source.
    let chromium = "t13d1517h2_8daaf6152771_cb7bf5808d99";
    let held = gate
        .after_hello(Some(client), Some(chromium))
        .unwrap()
        .unwrap();
    assert_eq!(held.key, SourceKey::Ja4(Ja4Key::new(chromium)));
    let elsewhere = Source::Peer(PeerAddr(sock("198.51.100.9:1")));
    assert_eq!(
        gate.after_hello(Some(elsewhere), Some(chromium))
            .unwrap_err(),
        Refusal::Concurrent
    );
    let curl = "t13d3112h2_e8f1e7e78f70_b26ce05bbdd6";
    assert!(gate.after_hello(Some(client), Some(curl)).is_ok());
    drop(held);
    assert!(gate.after_hello(Some(elsewhere), Some(chromium)).is_ok());
    // A trusted peer's own connection counts nowhere.
    assert!(gate.after_hello(None, Some(chromium)).unwrap().is_none());
    // "source+ja4" keys the two together; "source" counts at accept.
    let both = SourceKey::new(client, 32, 64).with_ja4(chromium);
    assert!(matches!(both, SourceKey::V4Ja4([192, 0, 2, 1], _)));
    assert!(both.to_string().starts_with("192.0.2.1+ja4#"));
    let by_source = Admission::new(&Limits::unlimited());
    assert!(
        by_source
            .after_hello(Some(client), Some(chromium))
            .unwrap()
            .is_none()
    );
    // The key stays small enough for a held slot's padding.
    assert!(std::mem::size_of::<SourceKey>() <= 23);
}

/// A client that makes a new JA4 per connection (a new cipher list each)
/// gets no more than its source's share: `ja4_source_multiple` times the
/// per-key limit, for both JA4 keys, on the listener and on a route.
#[test]
fn a_new_ja4_per_connection_cannot_multiply_a_source_s_limits() {
    for limit_key in [LimitKey::Ja4, LimitKey::SourceJa4] {
        let limits = Limits {
            connections_per_source: NonZeroU32::new(10),
            limit_key,
            ..Limits::unlimited()
        };
        let gate = Admission::new(&limits);
        let route = RouteGate::new(Some(&limits), None).unwrap();
        let mut held = Vec::new();
        let (mut admitted, mut route_admitted) = (0, 0);
        for i in 0..1000 {
            let client = Source::Peer(PeerAddr(sock(&format!("192.0.2.1:{}", 20_000 + i))));
            let ja4 = format!("t13d1517h2_{i:012x}_cb7bf5808d99");
            // The listener: the source at accept, the JA4 after the hello,
            // both held for the connection's life.
            if let Ok(source) = gate.admit(client) {
                if let Ok(Some(by_ja4)) = gate.after_hello(Some(client), Some(&ja4)) {
                    admitted += 1;
                    held.push(by_ja4.joined(Some(source)));
                }
            }
            if let Ok(slot) = route.admit_with(Some(client), Some(&ja4)) {
                route_admitted += 1;
                held.push(slot.source.unwrap());
            }
        }
        assert_eq!((admitted, route_admitted), (40, 40), "{limit_key:?}");
        // Each admitted connection holds its source's count and its JA4's.
        assert_eq!(gate.tracked().concurrent_keys, 1 + 40, "{limit_key:?}");
        drop(held);
        assert_eq!(gate.tracked().concurrent_keys, 0, "{limit_key:?}");
    }
}
