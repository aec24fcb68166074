//! Unit tests of the flow table ([`super::FlowTable`]), without sockets:
//! hellos across datagrams, routing and its refusals, per-source and
//! pending-table limits, open flows following their client, expiry and
//! drain.

use std::cell::Cell;
use std::rc::Rc;

use super::*;
use crate::quic::initial::ConnectionId;

use rustls::pki_types::ServerName;

use crate::backend::Backends;
use crate::config::Config;
use crate::pump::relay::lifetime_end;
use crate::quic::Version;
use crate::quic::backend_address::pick_now;
use crate::quic::initial_keys;
use crate::quic::seal::seal_initial;

const DCID: &[u8] = &[0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08];
const SCID: &[u8] = &[0x11, 0x22, 0x33, 0x44];
/// The connection ID the backend chooses (long enough to be followed).
const BACKEND_CID: &[u8] = &[0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8];

/// A quic listener `h3` with `limits` (a `[listener.limits]` body), a
/// route for example.com to `origin` (fixed, nothing listening) and one
/// for `*.nowhere.test` to `empty`, a DNS backend never resolved.
fn generation(limits: &str) -> Arc<Generation> {
    let config = Config::from_toml(
        &format!(
            r#"
            [[listener]]
            name = "h3"
            protocol = "quic"
            listen = ["127.0.0.1:0"]
            client_hello_timeout = "5s"
            [listener.limits]
            {limits}
            [[route]]
            sni = ["example.com"]
            backend = "origin"
            idle_timeout = "30s"
            max_connection_lifetime = "100s"
            [backend.origin]
            addresses = ["127.0.0.1:9"]
            "#
        ),
        std::path::Path::new("flows.toml"),
    )
    .expect("the test configuration is valid");
    let backends = Arc::new(Backends::start(&config.backends, None));
    Arc::new(Generation::first(
        config.listeners[0].clone(),
        &backends,
        &None,
    ))
}

/// A ClientHello as rustls' QUIC client sends it, with SNI unless
/// `name` is an IP address.
fn client_hello(name: &str) -> Vec<u8> {
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let name = ServerName::try_from(name.to_owned()).unwrap();
    let params = vec![0x04, 0x01, 0x00];
    let mut conn = rustls::quic::ClientConnection::new(
        Arc::new(config),
        rustls::quic::Version::V1,
        name,
        params,
    )
    .unwrap();
    let mut hello = Vec::new();
    conn.write_hs(&mut hello);
    hello
}

fn varint(value: u64, out: &mut Vec<u8>) {
    match value {
        0..0x40 => out.push(value as u8),
        0x40..0x4000 => out.extend_from_slice(&(value as u16 | 0x4000).to_be_bytes()),
        _ => out.extend_from_slice(&(value as u32 | 0x8000_0000).to_be_bytes()),
    }
}

/// The client's first flight for `name`, its hello cut into `pieces`
/// Initial datagrams of 1,200 bytes.
fn initials(name: &str, pieces: usize) -> Vec<Vec<u8>> {
    let hello = client_hello(name);
    let keys = initial_keys(Version::V1, DCID, rustls::Side::Client);
    let size = hello.len().div_ceil(pieces);
    hello
        .chunks(size)
        .enumerate()
        .map(|(i, chunk)| {
            let mut frame = vec![0x06];
            varint((i * size) as u64, &mut frame);
            varint(chunk.len() as u64, &mut frame);
            frame.extend_from_slice(chunk);
            seal_initial(Version::V1, &keys.local, DCID, SCID, i as u32, &frame, 1200).unwrap()
        })
        .collect()
}

/// A 1-RTT (short header) datagram to the backend's connection ID.
fn short_to_backend() -> Vec<u8> {
    let mut datagram = vec![0x40];
    datagram.extend_from_slice(BACKEND_CID);
    datagram.extend_from_slice(&[0; 40]);
    datagram
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// What an event says, in short.
#[derive(Debug, PartialEq, Eq)]
enum EventSummary {
    Pick {
        from: SocketAddr,
        backend: String,
    },
    Open {
        from: SocketAddr,
        held: usize,
    },
    Close {
        peer: SocketAddr,
        reason: CloseReason,
        answer_to: Option<SocketAddr>,
    },
    /// An open flow's task is to end (the handle given to `opened`).
    Stop {
        io: u32,
        reason: CloseReason,
    },
}

/// An empty table counting in the test listener's series (handed in,
/// as the socket task hands its listener's).
fn new_table() -> FlowTable<u32, Taken> {
    let series = crate::metrics::metrics().listener("h3", "quic");
    FlowTable::new(None, series, crate::metrics::metrics(), FlowStages)
}

/// Drains the table's events; picks are answered at once, as the
/// socket task answers them for fixed addresses.
fn events(table: &mut FlowTable<u32, Taken>, generation: &Generation) -> Vec<EventSummary> {
    let mut seen = Vec::new();
    while let Some(event) = table.poll_event() {
        seen.push(match event {
            Event::Pick(pick) => {
                let PickFor {
                    from,
                    id,
                    choose:
                        stages::ToChoose {
                            backend,
                            pick,
                            drain,
                        },
                } = *pick;
                let backends = &generation.backends;
                let picked = pick_now(backends, backends.get(&backend).unwrap(), &pick)
                    .expect("fixed addresses are chosen at once")
                    .map(|picked| (picked, drain))
                    .map_err(CloseReason::from);
                table.chosen(from, id, picked);
                EventSummary::Pick { from, backend }
            }
            Event::Open(opening) => EventSummary::Open {
                from: opening.from,
                held: opening.held.len(),
            },
            Event::Close {
                record,
                reason,
                answer,
            } => EventSummary::Close {
                peer: record.part.peer(),
                reason,
                answer_to: answer.map(|(to, _)| to),
            },
            Event::Stop { io, reason } => EventSummary::Stop { io, reason },
        });
    }
    seen
}

/// `n` connection permits, as a plain counter ([`Permits`]).
fn permits(n: usize) -> Free {
    Free(Rc::new(Cell::new(n)))
}

/// Free permits, shared with those taken.
#[derive(Debug)]
struct Free(Rc<Cell<usize>>);

/// A permit taken; given back when dropped.
#[derive(Debug)]
struct Taken(Rc<Cell<usize>>);

impl Drop for Taken {
    fn drop(&mut self) {
        self.0.set(self.0.get() + 1);
    }
}

impl Free {
    fn available_permits(&self) -> usize {
        self.0.get()
    }
}

impl Permits for Free {
    type Permit = Taken;

    fn available(&self) -> usize {
        self.0.get()
    }

    fn try_take(&self) -> Option<Taken> {
        let free = self.0.get().checked_sub(1)?;
        self.0.set(free);
        Some(Taken(self.0.clone()))
    }
}

/// Feeds `datagrams` from `from` the way the socket task does: a new
/// address starts a flow.
fn feed(
    table: &mut FlowTable<u32, Taken>,
    now: Instant,
    from: SocketAddr,
    datagrams: &[Vec<u8>],
    generation: &Generation,
    permits: &Free,
) {
    for datagram in datagrams {
        if table.handle(now, from, datagram, generation) == Datagram::Unknown {
            table.start(
                now,
                from,
                None,
                DatagramArrival::Direct(datagram),
                generation,
                permits,
            );
        }
    }
}

#[test]
fn a_hello_across_datagrams_is_held_until_complete_then_routed_and_opened() {
    let generation = generation("");
    let permits = permits(10);
    let mut table = new_table();
    let now = Instant::now();
    let client = addr("192.0.2.1:5000");
    let flight = initials("example.com", 3);
    assert!(table.start(
        now,
        client,
        None,
        DatagramArrival::Direct(&flight[0]),
        &generation,
        &permits
    ));
    assert_eq!(table.pending(), (1, 1200));
    assert!(matches!(
        table.handle(now, client, &flight[1], &generation),
        Datagram::Taken
    ));
    assert_eq!(events(&mut table, &generation), []);
    assert_eq!(table.pending(), (1, 2400));
    assert!(matches!(
        table.handle(now, client, &flight[2], &generation),
        Datagram::Taken
    ));
    // Routed, its address chosen at once, then handed over to open
    // with its three datagrams, in order.
    assert_eq!(
        events(&mut table, &generation),
        [
            EventSummary::Pick {
                from: client,
                backend: "origin".into()
            },
            EventSummary::Open {
                from: client,
                held: 3
            },
        ]
    );
    assert_eq!(table.pending(), (0, 0));
    assert!(table.is_empty());
    // The flow's permit went with the Open event, dropped here.
    assert_eq!(permits.available_permits(), 10);
}

#[test]
fn routing_refuses_an_unknown_name_and_a_missing_sni_with_an_answer() {
    let generation = generation("");
    let permits = permits(10);
    let mut table = new_table();
    let now = Instant::now();
    let (other, no_name, allowed) = (
        addr("192.0.2.1:5000"),
        addr("192.0.2.2:5000"),
        addr("192.0.2.3:5000"),
    );
    feed(
        &mut table,
        now,
        other,
        &initials("other.test", 1),
        &generation,
        &permits,
    );
    feed(
        &mut table,
        now,
        no_name,
        &initials("192.0.2.9", 1),
        &generation,
        &permits,
    );
    feed(
        &mut table,
        now,
        allowed,
        &initials("example.com", 2),
        &generation,
        &permits,
    );
    assert_eq!(
        events(&mut table, &generation),
        [
            EventSummary::Close {
                peer: other,
                reason: CloseReason::Unmatched,
                answer_to: Some(other)
            },
            EventSummary::Close {
                peer: no_name,
                reason: CloseReason::NoSni,
                answer_to: Some(no_name)
            },
            EventSummary::Pick {
                from: allowed,
                backend: "origin".into()
            },
            EventSummary::Open {
                from: allowed,
                held: 2
            },
        ]
    );
    // The refused flows gave back their permits.
    assert_eq!(permits.available_permits(), 10);
}

#[test]
fn an_address_that_cannot_be_chosen_closes_the_flow_unanswered() {
    let generation = generation("");
    let permits = permits(10);
    let mut table = new_table();
    let now = Instant::now();
    let client = addr("192.0.2.1:5000");
    let flight = initials("example.com", 1);
    feed(&mut table, now, client, &flight, &generation, &permits);
    let Some(Event::Pick(pick)) = table.poll_event() else {
        panic!("a routed hello asks for its address");
    };
    assert_eq!(
        table.pending(),
        (1, flight[0].len()),
        "held while connecting"
    );
    table.chosen(pick.from, pick.id, Err(CloseReason::NoAddress));
    assert_eq!(
        events(&mut table, &generation),
        [EventSummary::Close {
            peer: client,
            reason: CloseReason::NoAddress,
            answer_to: None
        }]
    );
    assert_eq!(table.pending(), (0, 0));
    assert_eq!(permits.available_permits(), 10);
}

#[test]
fn not_quic_ends_at_once_and_an_incomplete_hello_at_its_timeout() {
    let generation = generation("");
    let permits = permits(10);
    let mut table = new_table();
    let start = Instant::now();
    let (noise, slow) = (addr("192.0.2.1:5000"), addr("192.0.2.2:5000"));
    feed(
        &mut table,
        start,
        noise,
        &[b"GET / HTTP/1.1\r\n".to_vec()],
        &generation,
        &permits,
    );
    feed(
        &mut table,
        start,
        slow,
        &initials("example.com", 2)[..1],
        &generation,
        &permits,
    );
    assert_eq!(
        events(&mut table, &generation),
        [EventSummary::Close {
            peer: noise,
            reason: CloseReason::NotQuic,
            answer_to: None
        }]
    );
    let timeout = generation.listener.client_hello_timeout;
    table.sweep(start + timeout - Duration::from_millis(1), timeout);
    assert_eq!(events(&mut table, &generation), []);
    table.sweep(start + timeout, timeout);
    assert_eq!(
        events(&mut table, &generation),
        [EventSummary::Close {
            peer: slow,
            reason: CloseReason::HelloTimeout,
            answer_to: None
        }]
    );
    assert!(table.is_empty());
    assert_eq!(table.pending(), (0, 0));
}

#[test]
fn a_ja4_limit_key_counts_flows_by_fingerprint_once_the_hello_is_read() {
    // One open flow per JA4: a second client of the same TLS stack is
    // refused once its hello is complete, whatever its address, with no
    // answer (as at the gate); the first flow keeps its slot.
    let generation = generation("connections_per_source = 1\nlimit_key = \"ja4\"");
    assert!(generation.routes.wants_fingerprints());
    let permits = permits(10);
    let mut table = new_table();
    let now = Instant::now();
    let (first, second) = (addr("192.0.2.1:5000"), addr("198.51.100.2:5000"));
    let flight = initials("example.com", 1);
    // The first flow waits for its address (its events are not
    // drained yet: an opened flow's slots go to its task).
    feed(&mut table, now, first, &flight, &generation, &permits);
    feed(&mut table, now, second, &flight, &generation, &permits);
    let seen = events(&mut table, &generation);
    assert!(
        seen.contains(&EventSummary::Close {
            peer: second,
            reason: CloseReason::LimitConcurrent,
            answer_to: None
        }),
        "{seen:?}"
    );
    assert!(
        seen.contains(&EventSummary::Open {
            from: first,
            held: 1
        }),
        "{seen:?}"
    );
}

#[test]
fn attempts_per_source_counts_a_quic_listener_s_new_flows_as_a_tcp_listener_s() {
    // The accept gate is the listener's one `Admission`: with
    // `attempts_per_source = 3` a source's fourth new flow within the
    // period is refused as `limit_rate`, closed before it is held.
    let generation = generation("connections_per_source = false\nattempts_per_source = 3");
    let permits = permits(10);
    let mut table = new_table();
    let now = Instant::now();
    let flight = initials("example.com", 1);
    let started: Vec<bool> = (0..5)
        .map(|port| {
            let from = addr(&format!("192.0.2.1:{}", 5000 + port));
            table.start(
                now,
                from,
                None,
                DatagramArrival::Direct(&flight[0]),
                &generation,
                &permits,
            )
        })
        .collect();
    assert_eq!(started, [true, true, true, false, false]);
    assert!(table.start(
        now,
        addr("192.0.2.2:5000"),
        None,
        DatagramArrival::Direct(&flight[0]),
        &generation,
        &permits
    ));
    let counts = generation.admission.counters.snapshot();
    assert_eq!((counts.admitted, counts.limit_rate), (4, 2));
}

mod limits;
mod opened;
mod plain;
mod validation;
