//! Address validation of open flows ([`super::validation`]): a flow takes
//! its connection permit once its client sends to an ID its backend
//! chose; before that it lives in the socket's small budget (eviction of
//! the oldest, the per-source share, the lifetime) and is sent at most 3x
//! what it sent.

use super::opened::open;
use super::*;
use crate::quic::flows::validation::{
    AMPLIFICATION_FACTOR, MAX_UNVALIDATED_FLOWS, MAX_UNVALIDATED_PER_SOURCE, UNVALIDATED_LIFETIME,
};

/// Whether `up` relayed the datagram, and whether it validated the flow.
fn up(
    table: &mut FlowTable<u32, Taken>,
    now: Instant,
    from: SocketAddr,
    datagram: &[u8],
    generation: &Generation,
    permits: &Free,
) -> Option<bool> {
    match table.up(now, from, datagram, generation, permits) {
        Up::Open { validated, .. } => Some(validated),
        Up::NotOpen | Up::Closed => None,
    }
}

/// The `n`th client, each from its own source.
fn client(n: usize) -> SocketAddr {
    SocketAddr::from(([10, (n >> 16) as u8, (n >> 8) as u8, n as u8], 4433))
}

#[test]
fn a_flow_takes_its_permit_when_its_client_sends_to_a_learned_id() {
    let generation = generation("");
    let permits = permits(10);
    let mut table = new_table();
    let now = Instant::now();
    let from = addr("192.0.2.1:5000");
    let id = open(&mut table, now, from, &generation, &permits, 7);
    // Open, unvalidated: no permit held.
    assert_eq!(table.unvalidated(), (1, 0));
    assert_eq!(permits.available_permits(), 10);
    // The client's Initials (to its own DCID) and a datagram to an ID
    // the backend never showed are relayed, and validate nothing.
    let retransmit = &initials("example.com", 1)[0];
    assert_eq!(
        up(&mut table, now, from, retransmit, &generation, &permits),
        Some(false)
    );
    assert_eq!(
        up(
            &mut table,
            now,
            from,
            &short_to_backend(),
            &generation,
            &permits
        ),
        Some(false)
    );
    assert_eq!(permits.available_permits(), 10);
    // The backend's answer showed its ID: the next datagram to it
    // validates the flow, which takes a permit; once.
    table.learned(from, id, ConnectionId::new(BACKEND_CID).unwrap());
    assert_eq!(
        up(
            &mut table,
            now,
            from,
            &short_to_backend(),
            &generation,
            &permits
        ),
        Some(true)
    );
    assert_eq!(
        up(
            &mut table,
            now,
            from,
            &short_to_backend(),
            &generation,
            &permits
        ),
        Some(false)
    );
    assert_eq!(table.unvalidated(), (0, 0));
    assert_eq!(permits.available_permits(), 9);
    // A validated flow outlives the unvalidated lifetime; its end gives
    // the permit back.
    table.sweep(now + 2 * UNVALIDATED_LIFETIME, Duration::from_secs(5));
    assert_eq!(events(&mut table, &generation), []);
    assert_eq!(table.ended(from, id), Some(7));
    assert_eq!(permits.available_permits(), 10);
}

#[test]
fn a_short_backend_id_validates_but_is_not_followed() {
    // quic-go's 4-byte IDs: enough to validate, too short to follow.
    let generation = generation("");
    let permits = permits(10);
    let mut table = new_table();
    let now = Instant::now();
    let from = addr("192.0.2.1:5000");
    let id = open(&mut table, now, from, &generation, &permits, 7);
    table.learned(from, id, ConnectionId::new(&BACKEND_CID[..4]).unwrap());
    let datagram = short_to_backend();
    assert_eq!(
        table.handle(now, addr("198.51.100.1:9"), &datagram, &generation),
        Datagram::Unknown
    );
    assert_eq!(
        up(&mut table, now, from, &datagram, &generation, &permits),
        Some(true)
    );
    assert_eq!(permits.available_permits(), 9);
}

#[test]
fn a_flow_that_validates_with_no_permit_free_closes_max_connections() {
    let generation = generation("");
    let permits = permits(1);
    let mut table = new_table();
    let now = Instant::now();
    let from = addr("192.0.2.1:5000");
    let id = open(&mut table, now, from, &generation, &permits, 7);
    table.learned(from, id, ConnectionId::new(BACKEND_CID).unwrap());
    // A TCP connection took the last permit meanwhile.
    let tcp = permits.try_take().unwrap();
    assert!(matches!(
        table.up(now, from, &short_to_backend(), &generation, &permits),
        Up::Closed
    ));
    assert_eq!(
        events(&mut table, &generation),
        [EventSummary::Stop {
            io: 7,
            reason: CloseReason::MaxConnections
        }]
    );
    assert!(table.is_empty());
    assert_eq!(table.unvalidated(), (0, 0));
    drop(tcp);
    assert_eq!(permits.available_permits(), 1);
}

#[test]
fn a_new_flow_evicts_the_oldest_unvalidated_one_at_the_bound() {
    let generation = generation("");
    let permits = permits(100_000);
    let mut table = new_table();
    let start = Instant::now();
    let at = |n: usize| start + Duration::from_millis(n as u64);
    let ids: Vec<u64> = (0..MAX_UNVALIDATED_FLOWS)
        .map(|n| {
            open(
                &mut table,
                at(n),
                client(n),
                &generation,
                &permits,
                n as u32,
            )
        })
        .collect();
    // The second one validates: it leaves the budget, and is never
    // evicted.
    table.learned(client(1), ids[1], ConnectionId::new(BACKEND_CID).unwrap());
    let validating = short_to_backend();
    assert_eq!(
        up(
            &mut table,
            at(1),
            client(1),
            &validating,
            &generation,
            &permits
        ),
        Some(true)
    );
    assert_eq!(table.unvalidated(), (MAX_UNVALIDATED_FLOWS - 1, 0));
    // Room for one more; the next takes the oldest one's place, then
    // the next oldest unvalidated (the validated one is passed over).
    let n = MAX_UNVALIDATED_FLOWS;
    let mut seen = Vec::new();
    for n in n..n + 3 {
        open(
            &mut table,
            at(n),
            client(n),
            &generation,
            &permits,
            n as u32,
        );
        seen.extend(events(&mut table, &generation));
    }
    assert_eq!(
        seen,
        [
            EventSummary::Stop {
                io: 0,
                reason: CloseReason::Evicted
            },
            EventSummary::Stop {
                io: 2,
                reason: CloseReason::Evicted
            },
        ]
    );
    assert_eq!(table.unvalidated(), (MAX_UNVALIDATED_FLOWS, 2));
    assert!(table.open_at(client(0)).is_none());
    assert_eq!(table.open_at(client(1)), Some(&1));
    assert_eq!(table.open_at(client(n + 2)), Some(&((n + 2) as u32)));
    // Only the validated one holds a permit.
    assert_eq!(permits.available_permits(), 100_000 - 1);
}

#[test]
fn a_source_at_its_share_evicts_its_own_oldest_unvalidated_flow() {
    let generation = generation("");
    let permits = permits(1_000);
    let mut table = new_table();
    let start = Instant::now();
    // Another source's flow, older than all of them.
    open(
        &mut table,
        start,
        addr("198.51.100.1:4433"),
        &generation,
        &permits,
        1_000,
    );
    let one = |port: usize| SocketAddr::from(([192, 0, 2, 1], 5000 + port as u16));
    for port in 0..MAX_UNVALIDATED_PER_SOURCE {
        open(
            &mut table,
            start,
            one(port),
            &generation,
            &permits,
            port as u32,
        );
    }
    assert_eq!(events(&mut table, &generation), []);
    // Its next flow takes the place of its own oldest, not of the other
    // source's.
    let port = MAX_UNVALIDATED_PER_SOURCE;
    open(
        &mut table,
        start,
        one(port),
        &generation,
        &permits,
        port as u32,
    );
    let seen = events(&mut table, &generation);
    assert_eq!(
        seen,
        [EventSummary::Stop {
            io: 0,
            reason: CloseReason::Evicted
        }]
    );
    assert_eq!(table.open_at(addr("198.51.100.1:4433")), Some(&1_000));
    assert_eq!(table.unvalidated(), (MAX_UNVALIDATED_PER_SOURCE + 1, 1));
}

#[test]
fn an_unvalidated_flow_closes_at_the_end_of_its_lifetime() {
    let generation = generation("");
    let permits = permits(10);
    let mut table = new_table();
    let start = Instant::now();
    let later = start + Duration::from_secs(1);
    let timeout = generation.listener.client_hello_timeout;
    open(&mut table, start, client(1), &generation, &permits, 1);
    open(&mut table, later, client(2), &generation, &permits, 2);
    table.sweep(
        start + UNVALIDATED_LIFETIME - Duration::from_millis(1),
        timeout,
    );
    assert_eq!(events(&mut table, &generation), []);
    table.sweep(start + UNVALIDATED_LIFETIME, timeout);
    assert_eq!(
        events(&mut table, &generation),
        [EventSummary::Stop {
            io: 1,
            reason: CloseReason::Unvalidated
        }]
    );
    assert_eq!(table.unvalidated(), (1, 0));
    table.sweep(later + UNVALIDATED_LIFETIME, timeout);
    assert_eq!(
        events(&mut table, &generation),
        [EventSummary::Stop {
            io: 2,
            reason: CloseReason::Unvalidated
        }]
    );
    assert!(table.is_empty());
    assert_eq!(table.unvalidated(), (0, 0));
    // Its task's late report of its end finds nothing.
    assert_eq!(table.ended(client(1), 1), None);
}

#[test]
fn an_unvalidated_client_is_sent_at_most_three_times_what_it_sent() {
    assert_eq!(AMPLIFICATION_FACTOR, 3);
    // One 1,200-byte Initial: 3,600 bytes may go back, not one more.
    assert!(may_send(1200, 0, 1200));
    assert!(may_send(1200, 2400, 1200));
    assert!(!may_send(1200, 2400, 1201));
    assert!(!may_send(1200, 3600, 1));
    // Nothing received, nothing sent; a second Initial makes room.
    assert!(!may_send(0, 0, 1));
    assert!(may_send(2400, 3600, 1200));
}
