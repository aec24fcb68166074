//! The admission gate with `attempts_per_source`: what HAProxy 2.6's
//! `conn_rate` with `reject if { sc0_conn_rate gt N }` decides on the same
//! schedule, on a fake clock.

use std::net::SocketAddr;

use governor::clock::FakeRelativeClock;

use crate::admission::*;
use std::num::NonZeroU32;
use std::time::Duration;

use super::gate::*;
use super::key::*;
use super::route::*;
use crate::addr::PeerAddr;
use crate::close_reason::CloseReason;
use crate::config::Attempts;

fn peer(text: &str) -> Source {
    Source::Peer(PeerAddr(text.parse::<SocketAddr>().unwrap()))
}

fn attempts(count: u32, period: Duration) -> Limits {
    Limits {
        attempts_per_source: Some(Attempts {
            count: NonZeroU32::new(count).unwrap(),
            period,
        }),
        ..Limits::unlimited()
    }
}

/// Which of `schedule` (offsets from now, increasing) `gate` admits from
/// `source`, by index.
fn admitted_at(
    gate: &Admission<FakeRelativeClock>,
    clock: &FakeRelativeClock,
    source: &str,
    schedule: &[Duration],
) -> Vec<usize> {
    let mut at = Duration::ZERO;
    let mut admitted = Vec::new();
    for (i, &t) in schedule.iter().enumerate() {
        clock.advance(t - at);
        at = t;
        if gate.admit(peer(&format!("{source}:{}", 1000 + i))).is_ok() {
            admitted.push(i);
        }
    }
    admitted
}

fn every(step: Duration, n: u32) -> Vec<Duration> {
    (0..n).map(|i| step * i).collect()
}

#[test]
fn sixty_attempts_within_a_second_admit_exactly_the_first_thirty() {
    let clock = FakeRelativeClock::default();
    let gate = Admission::with_clock(&attempts(30, Duration::from_secs(1)), clock.clone());
    // 60 attempts spread evenly over 0.93 s (the GCRA at 30/s, burst 30,
    // lets 54 of them through: it refills while drained).
    let schedule: Vec<Duration> = (0..60u32)
        .map(|i| Duration::from_millis(930) * i / 59)
        .collect();
    let admitted = admitted_at(&gate, &clock, "192.0.2.1", &schedule);
    assert_eq!(admitted, (0..30).collect::<Vec<_>>());
    let counts = gate.counters.snapshot();
    assert_eq!((counts.admitted, counts.limit_rate), (30, 30));
    assert_eq!(gate.sources()[0].refused[2], 30, "limit_rate in /sources");
}

#[test]
fn a_source_retrying_above_the_limit_stays_refused_until_it_stops() {
    let clock = FakeRelativeClock::default();
    let gate = Admission::with_clock(&attempts(30, Duration::from_secs(1)), clock.clone());
    // 50 attempts a second for 3 s, at 0, 20, ..., 2980 ms. First period:
    // the k-th reads k, 30 pass. Every later attempt, j into a period
    // (at 1000·p + 20·j ms), reads (j + 1) + ⌊50 · (1000 − 20·j) / 1000⌋
    // = 51 > 30.
    let flood = every(Duration::from_millis(20), 150);
    let admitted = admitted_at(&gate, &clock, "192.0.2.1", &flood);
    assert_eq!(admitted, (0..30).collect::<Vec<_>>());
    // It stops after the attempt at 2980 ms (the period from 2000 ms holds
    // 50). At 3400 ms the period rotates: 1 + ⌊50 · 600 / 1000⌋ = 31,
    // refused; at 3500 ms: 2 + ⌊50 · 500 / 1000⌋ = 27, admitted.
    clock.advance(Duration::from_millis(3400 - 2980));
    assert_eq!(
        gate.admit(peer("192.0.2.1:5000")).unwrap_err(),
        Refusal::Rate
    );
    clock.advance(Duration::from_millis(100));
    assert!(gate.admit(peer("192.0.2.1:5001")).is_ok());
}

#[test]
fn once_quiet_a_source_is_admitted_when_the_estimate_falls_to_the_limit() {
    let clock = FakeRelativeClock::default();
    let gate = Admission::with_clock(&attempts(30, Duration::from_secs(1)), clock.clone());
    // 50 attempts in the first 980 ms, then one probe at 1000 + x ms,
    // reading 1 + ⌊50 · (1000 − x) / 1000⌋: 31 at x = 400, 30 at x = 401.
    admitted_at(
        &gate,
        &clock,
        "192.0.2.1",
        &every(Duration::from_millis(20), 50),
    );
    let key = gate.key(peer("192.0.2.1:1"));
    clock.advance(Duration::from_millis(1401 - 980));
    // The estimate before the probe counts itself: the period rotated
    // on read only, 0 + ⌊50 · 599 / 1000⌋ = 29.
    assert_eq!(gate.attempt_estimate(&key), 29);
    assert!(gate.admit(peer("192.0.2.1:2")).is_ok(), "reads exactly 30");
    assert_eq!(gate.attempt_estimate(&key), 30);
}

#[test]
fn sources_are_counted_apart() {
    let clock = FakeRelativeClock::default();
    let gate = Admission::with_clock(&attempts(30, Duration::from_secs(1)), clock.clone());
    let schedule = every(Duration::from_millis(5), 40);
    assert_eq!(admitted_at(&gate, &clock, "192.0.2.1", &schedule).len(), 30);
    clock.advance(Duration::from_millis(5));
    assert_eq!(admitted_at(&gate, &clock, "192.0.2.2", &schedule).len(), 30);
    assert_eq!(gate.tracked().sources, 2);
}

#[test]
fn refusals_by_the_concurrency_cap_are_attempts_too() {
    let clock = FakeRelativeClock::default();
    let mut limits = attempts(3, Duration::from_secs(1));
    limits.connections_per_source = NonZeroU32::new(1);
    let gate = Admission::with_clock(&limits, clock.clone());
    let held = gate.admit(peer("192.0.2.1:1")).unwrap();
    for port in 2..4 {
        let refused = gate.admit(peer(&format!("192.0.2.1:{port}")));
        assert_eq!(refused.unwrap_err(), Refusal::Concurrent);
    }
    drop(held);
    // The fourth attempt reads 4 > 3, though only one was ever admitted.
    assert_eq!(gate.admit(peer("192.0.2.1:4")).unwrap_err(), Refusal::Rate);
}

#[test]
fn dry_run_counts_and_reports_but_refuses_nothing() {
    let clock = FakeRelativeClock::default();
    let mut limits = attempts(30, Duration::from_secs(1));
    limits.dry_run = true;
    let gate = Admission::with_clock(&limits, clock.clone());
    let mut would = Vec::new();
    for i in 0..60 {
        clock.advance(Duration::from_millis(15));
        let admitted = gate
            .admit(peer(&format!("192.0.2.1:{}", 1000 + i)))
            .unwrap();
        would.push(admitted.would_refuse);
    }
    assert!(would[..30].iter().all(Option::is_none));
    assert!(would[30..].iter().all(|w| *w == Some(Refusal::Rate)));
    let counts = gate.counters.snapshot();
    assert_eq!(
        (counts.admitted, counts.dry_run_rate, counts.limit_rate),
        (60, 30, 0)
    );
}

#[test]
fn a_ja4_key_counts_every_source_of_one_fingerprint_together() {
    let clock = FakeRelativeClock::default();
    let mut limits = attempts(2, Duration::from_secs(1));
    limits.limit_key = LimitKey::Ja4;
    let gate = Admission::with_clock(&limits, clock.clone());
    let chromium = Some("t13d1517h2_8daaf6152771_cb7bf5808d99");
    for source in ["192.0.2.1:1", "198.51.100.2:1"] {
        // The lists at accept count nothing.
        gate.admit(peer(source)).unwrap();
        assert!(gate.after_hello(Some(peer(source)), chromium).is_ok());
    }
    assert_eq!(
        gate.after_hello(Some(peer("203.0.113.3:1")), chromium)
            .unwrap_err(),
        Refusal::Rate
    );
    let curl = Some("t13d3112h2_e8f1e7e78f70_b26ce05bbdd6");
    assert!(gate.after_hello(Some(peer("192.0.2.1:2")), curl).is_ok());
}

#[test]
fn a_reload_keeps_the_counts_while_the_limit_and_period_are_the_same() {
    let clock = FakeRelativeClock::default();
    let limits = attempts(3, Duration::from_secs(1));
    let gate = Admission::with_clock(&limits, clock.clone());
    for port in 1..4 {
        gate.admit(peer(&format!("192.0.2.1:{port}"))).unwrap();
    }
    let mut same = limits.clone();
    same.connections_per_source = NonZeroU32::new(100);
    let reloaded = gate.next(&same, clock.clone());
    assert_eq!(
        reloaded.admit(peer("192.0.2.1:4")).unwrap_err(),
        Refusal::Rate,
        "the count carried over"
    );
    let longer = attempts(3, Duration::from_secs(2));
    let fresh = reloaded.next(&longer, clock.clone());
    assert!(
        fresh.admit(peer("192.0.2.1:5")).is_ok(),
        "a new period counts afresh"
    );
}

#[test]
fn the_sweep_forgets_a_source_two_periods_after_it_stops_and_clearing_resets_it() {
    let clock = FakeRelativeClock::default();
    let gate = Admission::with_clock(&attempts(1, Duration::from_millis(500)), clock.clone());
    gate.admit(peer("192.0.2.1:1")).unwrap();
    assert!(gate.admit(peer("192.0.2.1:2")).is_err());
    assert!(gate.clear_source("192.0.2.1"));
    assert!(
        gate.admit(peer("192.0.2.1:3")).is_ok(),
        "cleared: counted afresh"
    );
    clock.advance(Duration::from_millis(999));
    gate.sweep();
    assert_eq!(gate.tracked().sources, 1);
    clock.advance(Duration::from_millis(1));
    gate.sweep();
    assert_eq!(gate.tracked().sources, 0);
    assert_eq!(gate.tracked().sources, 0, "the source table forgets it too");
}

#[test]
fn a_route_gate_counts_attempts_on_the_route() {
    let limits = attempts(2, Duration::from_secs(60));
    let gate = RouteGate::new(Some(&limits), None).unwrap();
    let client = Some(peer("192.0.2.1:1"));
    assert!(gate.admit(client).is_ok());
    assert!(gate.admit(client).is_ok());
    assert!(matches!(
        gate.admit(client).unwrap_err(),
        RouteRefusal::Source(Refusal::Rate)
    ));
    assert_eq!(
        CloseReason::from(RouteRefusal::Source(Refusal::Rate)),
        CloseReason::RouteLimitRate
    );
}
