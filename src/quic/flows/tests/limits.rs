//! The flow table's limits: per source, per free permit, the pending
//! table's share, and what a source is.

use super::*;

#[test]
fn new_flows_stop_at_the_per_source_limit_and_at_the_free_permits() {
    // Per source, through the accept gate: one flow per address.
    let generation_1 = generation("connections_per_source = 1");
    let permits_10 = permits(10);
    let mut table = new_table();
    let now = Instant::now();
    let flight = initials("example.com", 2);
    assert!(table.start(
        now,
        addr("192.0.2.1:5000"),
        None,
        DatagramArrival::Direct(&flight[0]),
        &generation_1,
        &permits_10
    ));
    assert!(!table.start(
        now,
        addr("192.0.2.1:5001"),
        None,
        DatagramArrival::Direct(&flight[0]),
        &generation_1,
        &permits_10
    ));
    assert!(table.start(
        now,
        addr("192.0.2.2:5000"),
        None,
        DatagramArrival::Direct(&flight[0]),
        &generation_1,
        &permits_10
    ));
    // The refusal is closed at once, not held as a flow.
    assert_eq!(
        events(&mut table, &generation_1),
        [EventSummary::Close {
            peer: addr("192.0.2.1:5001"),
            reason: CloseReason::LimitConcurrent,
            answer_to: None
        }]
    );
    assert_eq!(table.len(), 2);
    // Pending flows hold no permit (only a validated open flow does).
    assert_eq!(permits_10.available_permits(), 10);

    // Globally: no more flows pending than there are free connection
    // permits (one that could never validate is not worth holding).
    let generation = generation("");
    let permits_2 = permits(2);
    let mut table = new_table();
    assert!(table.start(
        now,
        addr("192.0.2.1:5000"),
        None,
        DatagramArrival::Direct(&flight[0]),
        &generation,
        &permits_2
    ));
    assert!(table.start(
        now,
        addr("192.0.2.2:5000"),
        None,
        DatagramArrival::Direct(&flight[0]),
        &generation,
        &permits_2
    ));
    // A third takes the place of the oldest, within the same bound.
    assert!(table.start(
        now,
        addr("192.0.2.3:5000"),
        None,
        DatagramArrival::Direct(&flight[0]),
        &generation,
        &permits_2
    ));
    assert_eq!(table.pending(), (2, 2400));
    assert_eq!(permits_2.available_permits(), 2);
    assert_eq!(
        events(&mut table, &generation),
        [EventSummary::Close {
            peer: addr("192.0.2.1:5000"),
            reason: CloseReason::Evicted,
            answer_to: None
        }]
    );
    // No free permit at all: nothing pending to give one back, the
    // datagram is dropped, and the flow the gate counted is closed as one
    // that lost its place (every accepted flow closes once, so the
    // listener's `active` gauge comes back down).
    let none = permits(0);
    let mut table = new_table();
    assert!(!table.start(
        now,
        addr("192.0.2.4:5000"),
        None,
        DatagramArrival::Direct(&flight[0]),
        &generation,
        &none
    ));
    assert_eq!(table.pending(), (0, 0));
    assert_eq!(
        events(&mut table, &generation),
        [EventSummary::Close {
            peer: addr("192.0.2.4:5000"),
            reason: CloseReason::Evicted,
            answer_to: None
        }]
    );
}

#[test]
fn a_new_flow_gets_in_however_the_pending_table_is_filled() {
    // A half-hello flood: MAX_PENDING_FLOWS first datagrams of a
    // two-datagram hello, from 200 addresses, then more.
    let generation = generation("");
    let permits = permits(100_000);
    let mut table = new_table();
    let now = Instant::now();
    let half = &initials("example.com", 2)[..1];
    let flood = |i: usize| {
        SocketAddr::from((
            [203, 0, (i % 200 / 100) as u8, (i % 100) as u8],
            1000 + i as u16,
        ))
    };
    for i in 0..MAX_PENDING_FLOWS + 500 {
        feed(&mut table, now, flood(i), half, &generation, &permits);
    }
    assert_eq!(
        table.pending(),
        (MAX_PENDING_FLOWS, MAX_PENDING_FLOWS * 1200)
    );
    assert_eq!(table.evicted(), 500);
    // The oldest went first, as `evicted`, unanswered.
    let seen = events(&mut table, &generation);
    let expected: Vec<_> = (0..500)
        .map(|i| EventSummary::Close {
            peer: flood(i),
            reason: CloseReason::Evicted,
            answer_to: None,
        })
        .collect();
    assert_eq!(seen, expected);

    // New clients: a one-datagram hello is routed and opened at once,
    // a two-datagram one holds a place until its second datagram.
    let (one, two) = (addr("192.0.2.1:443"), addr("192.0.2.2:443"));
    feed(
        &mut table,
        now,
        one,
        &initials("example.com", 1),
        &generation,
        &permits,
    );
    let flight = initials("example.com", 2);
    feed(&mut table, now, two, &flight[..1], &generation, &permits);
    feed(&mut table, now, two, &flight[1..], &generation, &permits);
    let seen = events(&mut table, &generation);
    let evicted: Vec<_> = seen
        .iter()
        .filter(|s| {
            matches!(
                s,
                EventSummary::Close {
                    reason: CloseReason::Evicted,
                    ..
                }
            )
        })
        .collect();
    assert_eq!(evicted.len(), 2, "{seen:?}");
    for (from, held) in [(one, 1), (two, 2)] {
        assert!(
            seen.contains(&EventSummary::Open { from, held }),
            "{seen:?}"
        );
    }
    assert_eq!(table.evicted(), 502);
    // The bound held throughout; the openers' places are free again;
    // no pending flow holds a permit.
    assert_eq!(table.pending().0, MAX_PENDING_FLOWS - 2);
    assert_eq!(permits.available_permits(), 100_000);
}

#[test]
fn a_source_at_its_share_evicts_its_own_oldest_pending_flow() {
    let generation = generation("");
    let permits = permits(10_000);
    let mut table = new_table();
    let now = Instant::now();
    let flight = initials("example.com", 2);
    let half = &flight[..1];
    let other = addr("[2001:db8:0:1::7]:443");
    feed(&mut table, now, other, half, &generation, &permits);
    // One /64: its addresses count together.
    let source = |i: usize| SocketAddr::from(([0x2001, 0xdb8, 0, 0, 0, 0, 0, 1 + i as u16], 443));
    for i in 0..MAX_PENDING_PER_SOURCE {
        feed(&mut table, now, source(i), half, &generation, &permits);
    }
    assert_eq!(table.evicted(), 0);
    feed(
        &mut table,
        now,
        source(MAX_PENDING_PER_SOURCE),
        half,
        &generation,
        &permits,
    );
    assert_eq!(table.evicted(), 1);
    assert_eq!(
        events(&mut table, &generation),
        [EventSummary::Close {
            peer: source(0),
            reason: CloseReason::Evicted,
            answer_to: None
        }]
    );
    assert_eq!(table.pending().0, MAX_PENDING_PER_SOURCE + 1);
    // The other source's flow is still there: its hello completes.
    feed(&mut table, now, other, &flight[1..], &generation, &permits);
    let seen = events(&mut table, &generation);
    assert!(
        seen.contains(&EventSummary::Open {
            from: other,
            held: 2
        }),
        "{seen:?}"
    );
}

#[test]
fn a_source_is_an_ipv4_address_or_an_ipv6_64() {
    let key = |s: &str| source_key(addr(s));
    assert_eq!(key("192.0.2.1:1"), key("192.0.2.1:2"));
    assert_ne!(key("192.0.2.1:1"), key("192.0.2.2:1"));
    assert_eq!(key("[2001:db8::1]:1"), key("[2001:db8::ffff:1]:2"));
    assert_ne!(key("[2001:db8::1]:1"), key("[2001:db8:0:1::1]:1"));
    assert_eq!(key("[::ffff:192.0.2.1]:1"), key("192.0.2.1:1"));
}
