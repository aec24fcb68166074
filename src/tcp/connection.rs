//! One client connection, from accept to its single log line.
//!
//! [`handle`] reads top to bottom as the stages of docs/design.md: preface →
//! inspect → route → connect → announce (in `setup`, one boxed future that
//! is freed once the hello is replayed) → the byte pump
//! ([`crate::pump::relay::Relay`]) → close.
//! Each stage returns its own error type, folded here into one
//! [`CloseReason`]; the [`TcpRecord`] (in [`crate::flow::access`], with the log line and
//! the metrics it feeds) collects the log fields as stages learn them and
//! is written exactly once, at close. Admission (limits) happens before
//! this, in the accept loop; for a trusted peer relay it must key on the
//! claimed address, known only after the preface
//! ([`access::ConnRecord::claimed`]; its slot is kept in [`Slots`]). A route's own
//! admission (`[route.limits]`, `max_connections`) runs in `setup` right
//! after routing, and its slot is held with the relay's sockets.
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

use crate::addr::ClaimedAddr;
use crate::admission::{RouteAdmitted, SourceGuard};
use crate::backend::InFlight;
use crate::backend::candidates::Pick;
use crate::drain::DrainGuard;
use crate::flow::access::{self, Arrival, CloseReason, TcpRecord};
use crate::flow::decision::{self, Arrived, DryRun, HelloRefused};
use crate::flow::generation::Generation;
use crate::proxy::{inbound, outbound};
use crate::pump::relay;
use crate::pump::relay::RelayTimeouts;
use crate::pump::throttle::Throttle;
use crate::wire::fingerprint::Fingerprints;
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
                    let registered = registry::register(registry::Meta {
                        id: record.id,
                        listener,
                        route: record.route().unwrap_or_default(),
                        sni: record.sni.as_deref(),
                        backend: record.backend.as_ref().expect("routed"),
                        backend_addr: record.backend_addr.expect("connected"),
                        client: accepted.arrival.peer.0,
                        claimed: record.claimed.map(|c| c.0),
                        accepted: accepted.arrival.at,
                        local: established.local,
                    });
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

/// The stages before the relay: preface → inspect → route → connect →
/// announce, ending with the hello replayed to the backend.
async fn setup<'g>(
    client: &mut TcpStream,
    record: &mut TcpRecord<'g>,
    generation: &'g Generation,
    per_source: &mut Option<SourceGuard>,
    cancel: &CancellationToken,
) -> Result<Established<'g>, CloseReason> {
    let Generation {
        listener,
        routes,
        admission,
        backends,
        ..
    } = generation;
    // TCP_NODELAY is inherited from the listening socket (see `sockopt`).
    let arrival = record.arrival_borrowed();

    // preface (only on listeners with [listener.proxy_protocol])
    let deadline = arrival.at + listener.client_hello_timeout;
    let (inbound, buffered, passed) = match &listener.proxy_protocol {
        None => (None, Vec::new(), PassedTlvs::NONE),
        Some(config) => {
            let preface = tokio::select! {
                biased;
                preface = inbound::read(client, arrival.peer, config, deadline) => preface,
                () = cancel.cancelled() => return Err(CloseReason::Shutdown),
            };
            let preface = preface.inspect_err(|e| record.claimed = e.claimed())?;
            record.claimed = preface.sender.claimed();
            // admit, for a connection from a trusted peer: on its claim
            let admitted = admission.after_preface(record.claimed).map_err(|refusal| {
                let refused = HelloRefused::by_admission(refusal);
                refused.count(&arrival.metrics);
                refused.reason
            })?;
            if let Some(admitted) = admitted {
                if let Some(dry) = DryRun::of(None, &admitted) {
                    dry.log(listener, arrival.peer);
                }
                // Held for the connection's life, like a direct client's.
                *per_source = admitted.guard;
            }
            (preface.header, preface.buffered, preface.passed_tlvs)
        }
    };

    // inspect
    let limit = listener.max_client_hello_bytes;
    // `biased`: the stage first, so a hello read at once (the common case)
    // never registers a waiter on the shared shutdown token; a stage that
    // completes always makes way for the next select, which sees a stop.
    let hello = tokio::select! {
        biased;
        hello = inspect::read_hello(client, buffered, limit, deadline, routes.wants_fingerprints()) => hello?,
        () = cancel.cancelled() => return Err(CloseReason::Shutdown),
    };
    // admit on the hello, route, admit on the route: one decision, as a
    // QUIC flow's (the name is parsed and matched once; the same parse
    // names it in the log line, whatever the outcome). Refused: the alert,
    // if the refusal has one, else closed at once; nothing forwarded.
    record.fingerprints = hello.fingerprints.clone();
    let arrived = Arrived {
        peer: arrival.peer,
        claimed: record.claimed,
    };
    let decision = decision::decide(generation, arrived, &hello.info, hello.ja4());
    decision.log_dry_runs(listener, arrival.peer);
    if let Some(heard) = decision.heard {
        record.heard(heard);
    }
    let routed = match decision.outcome {
        Ok(routed) => routed,
        Err(refused) => {
            refused.count(&arrival.metrics);
            if let Some(entry) = refused.route {
                record.routed(entry);
            }
            if let Some(alert) = refused.alert {
                // Boxed: the alert-and-linger future is larger than the
                // rest of setup, and only refusals need it.
                Box::pin(refuse::refuse(client, alert)).await;
            }
            return Err(refused.reason);
        }
    };
    let target = routed.entry.entry;
    record.routed(target);
    if let Some(admitted) = routed.admitted {
        // Counted by the hello: held for the connection's life beside the
        // source's slot taken at accept (see `Admitted::joined`).
        *per_source = SourceGuard::join(admitted.guard, per_source.take());
    }
    let route_slot = routed.route_slot;
    // Its bandwidth buckets, keyed for `rate_per_source_*` on the same
    // source as the connection limits.
    let throttle = target
        .throttle
        .as_ref()
        .map(|route| route.connection(routed.source.map(|s| admission.key(s))));
    // Registered until the connection ends; a reload that changes this
    // route or backend makes `closing` resolve at a jittered moment.
    let drain = routed.drain;

    // connect
    let runtime = routed.runtime;
    // The address the client dialled costs a getsockname(2); only a
    // cluster lookup (to recognise this node) and a PROXY header need it.
    let local_addr = || client.local_addr().map_err(|_| CloseReason::ClientReset);
    let local = match runtime.cluster {
        Some(_) => Some(local_addr()?),
        None => None,
    };
    let client_addr = record.claimed.map_or(arrival.peer.0, |c| c.0);
    let pick = Pick {
        client: client_addr.ip(),
        sni: record.sni.as_deref(),
        local: local.map(|a| a.ip()),
        client_addr,
        claimed: record.claimed.is_some(),
    };
    let mut backend = tokio::select! {
        biased;
        backend = dial::connect(backends, runtime, &pick) => backend?,
        () = drain.closing(record.id) => return Err(CloseReason::Drained),
        () = cancel.cancelled() => return Err(CloseReason::Shutdown),
    };
    record.backend_addr = Some(backend.addr);
    // From now on the connection drains with its route or with its
    // address (an operator's `maint`): the guard moves to their part.
    let drain = backend.in_flight.state().drain_part(drain.signal()).enter();

    // announce: the PROXY header goes out in the same write as the hello
    let header = match backend.proxy_protocol {
        outbound::Outbound::None => None,
        version => {
            let local = match local {
                Some(local) => local,
                None => local_addr()?,
            };
            let announcement = outbound::Announcement::new(
                arrival.peer.0,
                local,
                inbound.as_ref(),
                record.sni.as_deref(),
                record.id,
            );
            let added = outbound::AddedTlvs {
                configured: backend.proxy_protocol_tlvs.as_deref().unwrap_or_default(),
                learnt: outbound::Learnt {
                    sni: record.sni.as_deref(),
                    alpn: hello.info.alpn.first().map(Vec::as_slice),
                    ja4: record.fingerprints.as_deref().map(Fingerprints::ja4),
                    ja3: record.fingerprints.as_deref().map(Fingerprints::ja3_hash),
                },
                passed: &passed,
            };
            outbound::header_with(
                version,
                backend.proxy_protocol_crc32c,
                &announcement,
                &added,
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
    // `bytes.up` counts the client's bytes, not our header.
    record.moved.up += (replay.len() - header_len) as u64;
    Ok(Established {
        backend: backend.stream,
        local: backend.local,
        timeouts: &target.timeouts,
        in_flight: backend.in_flight,
        keepalive: backend.keepalive,
        drain,
        route_held: (route_slot.is_some() || throttle.is_some()).then(|| {
            Box::new(RouteHeld {
                _slot: route_slot,
                throttle,
            })
        }),
    })
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
