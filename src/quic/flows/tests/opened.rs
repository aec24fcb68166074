//! Open flows: following a client by the backend's connection ID, expiry,
//! and drain.

use super::*;

/// Opens a flow for example.com from `client`; returns its id.
pub(super) fn open(
    table: &mut FlowTable<u32, Taken>,
    now: Instant,
    client: SocketAddr,
    generation: &Generation,
    permits: &Free,
    io: u32,
) -> u64 {
    feed(
        table,
        now,
        client,
        &initials("example.com", 1),
        generation,
        permits,
    );
    let Some(Event::Pick(pick)) = table.poll_event() else {
        panic!("a routed hello asks for its address");
    };
    let backends = &generation.backends;
    let picked = pick_now(
        backends,
        backends.get(&pick.choose.backend).unwrap(),
        &pick.choose.pick,
    )
    .unwrap()
    .unwrap();
    table.chosen(pick.from, pick.id, Ok((picked, pick.choose.drain)));
    let Some(Event::Open(opening)) = table.poll_event() else {
        panic!("a chosen address opens the flow");
    };
    let id = opening.record.id;
    table.opened(now, client, id, bounds::source_key(client), io);
    id
}

#[test]
fn an_open_flow_follows_its_client_by_the_backend_s_connection_id() {
    let generation = generation("");
    let permits = permits(10);
    let mut table = new_table();
    let now = Instant::now();
    let (first, moved, stranger) = (
        addr("192.0.2.1:5000"),
        addr("198.51.100.7:6000"),
        addr("203.0.113.5:7000"),
    );
    let id = open(&mut table, now, first, &generation, &permits, 7);
    let datagram = short_to_backend();
    assert_eq!(
        table.handle(now, first, &datagram, &generation),
        Datagram::Open
    );
    assert_eq!(table.open_at(first), Some(&7));
    // Not learned yet: from a new address it is a new source.
    assert!(matches!(
        table.handle(now, moved, &datagram, &generation),
        Datagram::Unknown
    ));
    table.learned(first, id, ConnectionId::new(BACKEND_CID).unwrap());
    assert!(matches!(
        table.handle(now, moved, &datagram, &generation),
        Datagram::Moved
    ));
    let (previous, io) = table.rebind(moved, &datagram, &permits).unwrap();
    assert_eq!((previous, *io), (first, 7));
    assert_eq!(table.open_at(moved), Some(&7));
    // The old address is free; a report from the old address is not
    // this flow's.
    assert!(table.open_at(first).is_none());
    assert_eq!(table.ended(first, id), None);
    assert_eq!(table.len(), 1);
    // Its end frees the address and forgets the connection ID.
    assert_eq!(table.ended(moved, id), Some(7));
    assert!(table.is_empty());
    assert!(matches!(
        table.handle(now, stranger, &datagram, &generation),
        Datagram::Unknown
    ));
    assert_eq!(events(&mut table, &generation), []);
}

#[test]
fn an_open_flow_expires_idle_or_at_its_lifetime_moment() {
    let start = Instant::now();
    let idle = Duration::from_secs(30);
    let expiry = Expiry::new(start, idle, None, 1);
    assert_eq!(expiry.deadline(Duration::ZERO), start + idle);
    assert_eq!(
        expiry.expired(start + idle - Duration::from_millis(1), Duration::ZERO),
        None
    );
    assert_eq!(
        expiry.expired(start + idle, Duration::ZERO),
        Some(CloseReason::IdleTimeout)
    );
    // A datagram 20 s in moves the idle deadline.
    let last = Duration::from_secs(20);
    assert_eq!(expiry.deadline(last), start + last + idle);
    assert_eq!(expiry.expired(start + idle, last), None);

    // With a lifetime of 100 s, the end comes in its last tenth (the
    // moment a TCP connection with this id draws), before the idle
    // deadline of a busy flow.
    let lifetime = Duration::from_secs(100);
    let expiry = Expiry::new(start, idle, Some(lifetime), 1);
    let end = lifetime_end(start.into(), Some(lifetime), 1)
        .unwrap()
        .into_std();
    assert!(end >= start + lifetime.mul_f64(0.9) && end <= start + lifetime);
    let busy = end - start;
    assert_eq!(expiry.deadline(busy), end);
    assert_eq!(expiry.expired(end - Duration::from_millis(1), busy), None);
    assert_eq!(expiry.expired(end, busy), Some(CloseReason::MaxLifetime));
}

#[test]
fn a_draining_table_starts_no_flow_and_closes_what_is_left_at_the_end() {
    let generation = generation("");
    let permits = permits(10);
    let mut table = new_table();
    let now = Instant::now();
    let (open_client, pending_client, late) = (
        addr("192.0.2.1:5000"),
        addr("192.0.2.2:5000"),
        addr("192.0.2.3:5000"),
    );
    let id = open(&mut table, now, open_client, &generation, &permits, 1);
    let flight = initials("example.com", 2);
    feed(
        &mut table,
        now,
        pending_client,
        &flight[..1],
        &generation,
        &permits,
    );
    table.drain();
    assert!(!table.start(
        now,
        late,
        None,
        DatagramArrival::Direct(&flight[0]),
        &generation,
        &permits
    ));
    // Flows already there go on: the pending one completes its hello.
    feed(
        &mut table,
        now,
        pending_client,
        &flight[1..],
        &generation,
        &permits,
    );
    let Some(Event::Pick(pick)) = table.poll_event() else {
        panic!("a draining table still routes its flows");
    };
    assert_eq!(pick.from, pending_client);
    assert_eq!(
        table.handle(now, open_client, &flight[0], &generation),
        Datagram::Open
    );
    assert_eq!(table.open_at(open_client), Some(&1));
    // At the end, what is not open closes here; open flows through
    // their tasks.
    table.close_all(CloseReason::Shutdown);
    assert_eq!(
        events(&mut table, &generation),
        [EventSummary::Close {
            peer: pending_client,
            reason: CloseReason::Shutdown,
            answer_to: None
        }]
    );
    assert!(table.is_empty());
    assert_eq!(table.pending(), (0, 0));
    assert_eq!(table.ended(open_client, id), None);
}
