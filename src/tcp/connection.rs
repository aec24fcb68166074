//! One client connection, from accept to its single log line.
//!
//! [`handle`] reads top to bottom as the stages of docs/design.md: `setup`
//! (one boxed future, freed once the hello is replayed) calls each stage
//! in turn, preface → inspect → the decision carried out
//! ([`crate::flow::carry_out`], the same call a QUIC flow makes) →
//! connect → announce; then the byte pump ([`crate::pump::relay::Relay`])
//! → close. Each stage returns its own error type, folded here into one
//! [`CloseReason`]; the [`TcpRecord`] (in [`crate::flow::access`], with the
//! log line and the metrics it feeds) collects the log fields as stages
//! learn them and is written exactly once, at close. Admission (limits)
//! happens before this, in the accept loop; for a trusted peer relay it
//! must key on the claimed address, known only after the preface
//! ([`crate::flow::gate::after_preface`]; its slot is kept in [`Slots`]).
//! A route's own admission (`[route.limits]`, `max_connections`) is part
//! of the decision, and its slot is held with the relay's sockets.
//!
//! Memory: an open connection holds its task (896 bytes with tokio's
//! header: this module's state, what the log record keeps while relaying,
//! [`access::RelayingRecord`], and the relay's state),
//! tokio's two per-socket readiness slots and its two sockets, nothing else.
//! Allocations per connection: the task, the setup future, the hello's
//! bytes and the SNI kept for the log line; all but the task are freed
//! before relaying begins (the SNI too: while it relays, the registry's
//! copy is the only one, and the log line takes it back). A relaying
//! connection is listed in the `registry` (its entry, holding the relay's
//! byte counts and the stop, shutdown's or an operator's, plus one
//! allocation with the route name and SNI). On a route with limits, one more: the
//! route's slot, held for the connection's life; on a route with bandwidth
//! limits, its buckets ([`crate::pump::throttle`]), likewise.
//!
//! Not here: socket options, parsing, policy, or what a close records
//! ([`crate::flow::access`]); only the order of stages.

use std::sync::Arc;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;

use std::net::SocketAddr;

use tokio::time::Instant;

use crate::addr::ClaimedAddr;
use crate::admission::{RouteAdmitted, SourceGuard};
use crate::backend::candidates::Pick;
use crate::backend::{BackendRuntime, InFlight};
use crate::drain::DrainGuard;
use crate::flow::access::{self, Arrival, CloseReason, TcpRecord};
use crate::flow::carry_out::{HeaderInputs, Proceed, carry_out};
use crate::flow::gate;
use crate::flow::generation::Generation;
use crate::proxy::{inbound, outbound};
use crate::pump::relay;
use crate::pump::relay::RelayTimeouts;
use crate::pump::throttle::Throttle;
use crate::wire::proxy::Header;
use crate::wire::proxy_tlv::PassedTlvs;
use crate::{
    flow::registry,
    sockopt,
    tcp::{dial, inspect, refuse},
};

/// A freshly accepted client connection.
#[derive(Debug)]
pub(crate) struct Accepted {
    pub(crate) stream: TcpStream,
    /// Who, when, and the listener's metric series: its record borrows it.
    pub(crate) arrival: Arrival,
}

/// What a connection holds from admission to its end: its place under
/// `max_connections` and its per-source slot (a direct client's from the
/// accept loop; a claimed client's, behind a trusted peer, from `setup`).
#[derive(Debug)]
pub(crate) struct Slots {
    /// Held, never read: dropping it frees the place.
    pub _permit: OwnedSemaphorePermit,
    /// Its slot under its source's limits: the admission's guard alone
    /// (the rest of the decision is read at once, not kept in the task).
    pub per_source: Option<SourceGuard>,
}

/// Serves one accepted connection to its end and logs it.
///
/// The returned future is the connection's task, and its size is what every
/// open connection costs in memory for its whole life, so it holds little
/// more than the two sockets, the log record and the relay's state:
/// - while it relays, the record is reduced to what its registry entry
///   does not hold ([`access::RelayingRecord`]), and the whole record
///   lives in a block that ends before the relay starts, so the two share
///   room in the task's state;
/// - the stages before the relay (preface, inspect, route, connect,
///   announce) run in one boxed future that is freed before relaying
///   begins, so their timers and buffers are not carried by an idle
///   connection;
/// - it is an `async` block, not an `async fn`, which would store its
///   arguments twice (rust-lang/rust#62958).
#[allow(clippy::manual_async_fn)]
pub(crate) fn handle(
    mut accepted: Accepted,
    generation: Arc<Generation>,
    cancel: CancellationToken,
    mut slots: Slots,
) -> impl Future<Output = ()> + Send + 'static {
    async move {
        // The whole record lives in this block only: across the relay's
        // await the task keeps its reduced form (the registry entry holds
        // the rest), so the two never take room in the task's state at
        // once.
        let (established, registered, relaying) = {
            let listener = &generation.listener;
            // The record borrows the arrival (peer, time, metric series):
            // the task holds them once.
            let mut record = TcpRecord::new(listener, &accepted.arrival);
            let established = Box::pin(setup(
                &mut accepted.stream,
                &mut record,
                &generation,
                &mut slots.per_source,
                &cancel,
            ))
            .await;
            match established {
                Ok(established) => {
                    // Listed (and closable) by the admin listener while it
                    // relays; the entry holds the relay's byte counts, and
                    // the SNI, the backend's address and the claimed client
                    // for the line at close.
                    let registered =
                        registry::register(registry::Meta::of(&record, established.local));
                    (established, registered, record.relaying())
                }
                Err(reason) => {
                    // Both sockets are closed and the connection's places
                    // under `max_connections` and its source's limit are
                    // released before the line is written (as below).
                    drop(accepted.stream);
                    drop(slots);
                    record.close(reason);
                    return;
                }
            }
        };
        // From here the shutdown reaches it through the registry.
        registered.stop_if_shut_down(&cancel);
        // Taken apart so that what only starts the relay (the timeouts, the
        // keepalive, `local`) is not kept in the task's state beside it.
        let Established {
            backend,
            local: _,
            timeouts,
            in_flight,
            keepalive,
            drain,
            route_held,
        } = established;
        let throttle = route_held.as_deref().and_then(RouteHeld::throttle);
        let reason = relay::relay(
            &accepted.stream,
            &backend,
            registered.activity(),
            timeouts,
            accepted.arrival.at,
            &drain,
            relaying.id(),
            generation.listener.splice,
            keepalive,
            throttle,
        )
        .await;
        let reason = registered.reason(reason);
        let entry = registered.entry();
        let record = relaying.close_record(
            &generation.listener,
            &accepted.arrival,
            access::FromEntry {
                sni: entry.sni().map(Box::from),
                backend_addr: entry.backend_addr(),
                claimed: entry.claimed().map(ClaimedAddr),
                relayed: entry.activity.moved(),
            },
        );
        drop(registered);
        let throttled = route_held
            .as_deref()
            .and_then(RouteHeld::throttle)
            .map(|t| {
                let (up, down) = t.waited();
                access::Throttled {
                    up_ms: up.as_millis() as u64,
                    down_ms: down.as_millis() as u64,
                }
            });
        // Both sockets are closed and the connection's places under
        // `max_connections` and its source's limit are released before the
        // line is written, so a log line means the connection's descriptors
        // are gone and its source may connect again.
        drop((backend, in_flight, drain, route_held));
        drop(accepted.stream);
        drop(slots);
        match throttled {
            None => record.close(reason),
            Some(throttled) => record.close_throttled(reason, throttled),
        }
    }
}

/// A connection through its setup stages, ready to relay: the hello (and
/// any PROXY header) is already written to the backend.
struct Established<'g> {
    backend: TcpStream,
    /// Sent to a cluster's `local_backend` (for the registry).
    local: bool,
    /// Its route's relay timeouts, borrowed from the generation.
    timeouts: &'g RelayTimeouts,
    /// Counts this connection on its backend address until dropped.
    in_flight: InFlight,
    /// The backend's keepalive, for the relay to set (see [`crate::tcp::dial`]).
    keepalive: Option<sockopt::KeepaliveSecs>,
    /// Registered with the route's drain signal until the connection ends.
    drain: DrainGuard,
    /// Its place under the route's limits and its bandwidth buckets, if
    /// the route has either. Boxed: one pointer in every connection's task,
    /// the rest only on routes with limits.
    route_held: Option<Box<RouteHeld>>,
}

/// What a connection holds of its route's limits (see `Established`).
struct RouteHeld {
    /// Its place under `[route.limits]` / `max_connections`. Held, not read.
    _slot: Option<RouteAdmitted>,
    /// Its buckets, on a route with bandwidth limits ([`crate::pump::throttle`]).
    throttle: Option<Throttle>,
}

impl RouteHeld {
    /// The connection's bandwidth buckets, if its route limits it.
    fn throttle(&self) -> Option<&Throttle> {
        self.throttle.as_ref()
    }
}

/// The stages before the relay, each a call: preface → inspect → the
/// decision carried out → connect → announce, ending with the hello
/// replayed to the backend.
async fn setup<'g>(
    client: &mut TcpStream,
    record: &mut TcpRecord<'g>,
    generation: &'g Generation,
    per_source: &mut Option<SourceGuard>,
    cancel: &CancellationToken,
) -> Result<Established<'g>, CloseReason> {
    // TCP_NODELAY is inherited from the listening socket (see `sockopt`).
    let deadline = record.arrival_borrowed().at + generation.listener.client_hello_timeout;
    let preface = preface(client, record, generation, per_source, deadline, cancel).await?;
    let hello = inspect(client, preface.buffered, generation, deadline, cancel).await?;
    let proceed = decide(client, record, generation, per_source, &hello).await?;
    let route = proceed.route;
    // Its bandwidth buckets, keyed for `rate_per_source_*` on the same
    // source as the connection limits.
    let throttle = route
        .throttle
        .as_ref()
        .map(|limits| limits.connection(proceed.source.map(|s| generation.admission.key(s))));
    let (mut backend, drain) = connect(
        generation,
        proceed.runtime,
        &proceed.pick,
        proceed.drain,
        record,
        cancel,
    )
    .await?;
    let relayed = preface
        .relayed
        .as_ref()
        .map(|(header, passed)| (header, passed));
    announce(
        client,
        &mut backend,
        record,
        proceed.dialled,
        relayed,
        hello,
    )
    .await?;
    Ok(Established {
        backend: backend.stream,
        local: backend.local,
        timeouts: &route.timeouts,
        in_flight: backend.in_flight,
        keepalive: backend.keepalive,
        drain,
        route_held: (proceed.route_slot.is_some() || throttle.is_some()).then(|| {
            Box::new(RouteHeld {
                _slot: proceed.route_slot,
                throttle,
            })
        }),
    })
}

/// What the preface left: the trusted peer's header and the TLVs its
/// `pass_through_tlvs` kept, and the bytes read past the header.
struct AfterPreface {
    relayed: Option<(Header, PassedTlvs)>,
    buffered: Vec<u8>,
}

/// The preface, on a listener with `[listener.proxy_protocol]` only: the
/// header read, the claim recorded, and a trusted peer's connection
/// admitted on the client it claims ([`gate::after_preface`]), its slot
/// held like a direct client's.
async fn preface(
    client: &mut TcpStream,
    record: &mut TcpRecord<'_>,
    generation: &Generation,
    per_source: &mut Option<SourceGuard>,
    deadline: Instant,
    cancel: &CancellationToken,
) -> Result<AfterPreface, CloseReason> {
    let Some(config) = &generation.listener.proxy_protocol else {
        return Ok(AfterPreface {
            relayed: None,
            buffered: Vec::new(),
        });
    };
    let arrival = record.arrival_borrowed();
    let preface = tokio::select! {
        biased;
        preface = inbound::read(client, arrival.peer, config, deadline) => preface,
        () = cancel.cancelled() => return Err(CloseReason::Shutdown),
    };
    let preface = preface.inspect_err(|e| record.claimed = e.claimed())?;
    record.claimed = preface.sender.claimed();
    let admitted = gate::after_preface(generation, arrival.peer, record.claimed, &arrival.metrics)?;
    if let Some(admitted) = admitted {
        *per_source = admitted.guard;
    }
    Ok(AfterPreface {
        relayed: preface.header.map(|header| (header, preface.passed_tlvs)),
        buffered: preface.buffered,
    })
}

/// Reads the ClientHello (after what the preface read past its header),
/// within the hello's bounds.
async fn inspect(
    client: &mut TcpStream,
    buffered: Vec<u8>,
    generation: &Generation,
    deadline: Instant,
    cancel: &CancellationToken,
) -> Result<inspect::Hello, CloseReason> {
    let limit = generation.listener.max_client_hello_bytes;
    let fingerprints = generation.routes.wants_fingerprints();
    // `biased`: the stage first, so a hello read at once (the common case)
    // never registers a waiter on the shared shutdown token; a stage that
    // completes always makes way for the next select, which sees a stop.
    tokio::select! {
        biased;
        hello = inspect::read_hello(client, buffered, limit, deadline, fingerprints) => Ok(hello?),
        () = cancel.cancelled() => Err(CloseReason::Shutdown),
    }
}

/// The decision carried out ([`carry_out`], as a QUIC flow's is): routed,
/// the connection's per-source slot becomes the joined one; refused, the
/// alert, if the refusal has one, else closed at once; nothing forwarded.
async fn decide<'g>(
    client: &mut TcpStream,
    record: &mut TcpRecord<'g>,
    generation: &'g Generation,
    per_source: &mut Option<SourceGuard>,
    hello: &inspect::Hello,
) -> Result<Proceed<'g>, CloseReason> {
    // The address the client dialled costs a getsockname(2); only a
    // cluster lookup (to recognise this node) and a PROXY header need it.
    let dialled = || client.local_addr().map_err(|_| CloseReason::ClientReset);
    let fingerprints = hello.fingerprints.clone();
    match carry_out(
        generation,
        record,
        &hello.info,
        fingerprints,
        per_source.take(),
        dialled,
    ) {
        Ok(mut proceed) => {
            *per_source = proceed.source_slot.take();
            Ok(proceed)
        }
        Err(refused) => {
            if let Some(alert) = refused.alert {
                // Boxed: the alert-and-linger future is larger than the
                // rest of setup, and only refusals need it.
                Box::pin(refuse::refuse(client, alert)).await;
            }
            Err(refused.reason)
        }
    }
}

/// Connects to the backend (a route's drain or the shutdown ends the
/// wait); from then on the connection drains with its route or with its
/// address (an operator's `maint`): the guard moves to their part.
async fn connect(
    generation: &Generation,
    runtime: &BackendRuntime,
    pick: &Pick,
    drain: DrainGuard,
    record: &mut TcpRecord<'_>,
    cancel: &CancellationToken,
) -> Result<(dial::Connected, DrainGuard), CloseReason> {
    let backend = tokio::select! {
        biased;
        backend = dial::connect(&generation.backends, runtime, pick) => backend?,
        () = drain.closing(record.id) => return Err(CloseReason::Drained),
        () = cancel.cancelled() => return Err(CloseReason::Shutdown),
    };
    record.backend_addr = Some(backend.addr);
    let drain = backend.in_flight.state().drain_part(drain.signal()).enter();
    Ok((backend, drain))
}

/// Replays the hello to the backend, with the PROXY header the backend
/// takes in the same write; `bytes.up` counts the client's bytes, not the
/// header.
async fn announce(
    client: &TcpStream,
    backend: &mut dial::Connected,
    record: &mut TcpRecord<'_>,
    dialled: Option<SocketAddr>,
    relayed: Option<(&Header, &PassedTlvs)>,
    hello: inspect::Hello,
) -> Result<(), CloseReason> {
    let header = match backend.proxy_protocol {
        outbound::Outbound::None => None,
        version => {
            let dialled = match dialled {
                Some(dialled) => dialled,
                None => client.local_addr().map_err(|_| CloseReason::ClientReset)?,
            };
            let alpn = hello.info.alpn.first().map(Vec::as_slice);
            let inputs = HeaderInputs::of(record, dialled, relayed, alpn);
            let configured = backend.proxy_protocol_tlvs.as_deref().unwrap_or_default();
            outbound::header_with(
                version,
                backend.proxy_protocol_crc32c,
                &inputs.announcement,
                &inputs.added(configured),
            )
        }
    };
    let (replay, header_len) = outbound::prepend(header, hello.bytes);
    // Sent at once: a backend found connected inside connect(2) has no
    // writable readiness yet, and a write through tokio would wait a turn
    // of the event loop for it. Whatever the socket cannot take now goes
    // the usual way.
    let sent = match sockopt::send_now(&backend.stream, &replay) {
        Ok(n) => n,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
        Err(_) => return Err(CloseReason::BackendReset),
    };
    if sent < replay.len() && backend.stream.write_all(&replay[sent..]).await.is_err() {
        return Err(CloseReason::BackendReset);
    }
    record.moved.up += (replay.len() - header_len) as u64;
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::tcp::connection::*;

    use tokio::time::Instant;

    use crate::addr::PeerAddr;
    use crate::metrics;

    /// An open connection's memory is mostly its task's state, which the
    /// accept loop boxes before spawning it; the allocator rounds the box
    /// up to its size class, 640 bytes for anything from 513 to 640, and
    /// past that to 768, a fifth more per idle connection. 608 bytes in a
    /// release build, 632 in a debug one; how it came down from 1,024 is in
    /// benches/README.md, "Where an idle connection's bytes are".
    #[tokio::test]
    async fn the_connection_task_fits_a_640_byte_allocation() {
        let generation = Generation::for_tests();
        let socket = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let stream = TcpStream::connect(socket.local_addr().unwrap())
            .await
            .unwrap();
        let listener = &generation.listener;
        let accepted = Accepted {
            arrival: Arrival {
                peer: PeerAddr(stream.local_addr().unwrap()),
                at: Instant::now(),
                metrics: metrics::metrics().listener(&listener.name, listener.protocol.as_str()),
            },
            stream,
        };
        let permit = Arc::new(tokio::sync::Semaphore::new(1))
            .acquire_owned()
            .await
            .unwrap();
        let task = handle(
            accepted,
            generation,
            CancellationToken::new(),
            Slots {
                _permit: permit,
                per_source: None,
            },
        );
        let size = std::mem::size_of_val(&task);
        assert!(size <= 640, "the connection task's state is {size} bytes");
    }
}
