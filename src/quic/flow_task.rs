//! An open QUIC flow's own task ([`relay_back`]): it sends the backend's
//! datagrams to the client from the listening socket (the first one, or
//! an ICMP port unreachable before it, is the address's passive health
//! verdict; the first one also ends the flow's PROXY headers), tells the
//! socket task the connection IDs the backend chose (NAT rebinding,
//! [`super::cid`]), holds what it sends to an unvalidated client to 3x
//! what the client sent ([`super::flows::may_send`]; the rest dropped and
//! counted), and ends the flow at its bounds ([`super::flows::Expiry`]),
//! on its route's drain, on shutdown, on an operator's close or when the
//! flow table ends it unvalidated ([`Stop`]), writing its access line.
//!
//! Not here: the socket task that opens flows and sends their client
//! datagrams ([`super::socket_task`]), or what becomes of a flow
//! ([`super::flows`]).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use tokio::io::Interest;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::cid::{self, FlowCids, Path};
use super::flows::stages::FlowSlots;
use super::flows::{Expiry, FlowRecord, MIN_VALIDATING_CID_LEN, Stats, may_send};
use super::initial::ConnectionId;
use super::io::{Gather, Offload, with_scratch};
use crate::backend::InFlight;
use crate::drain::DrainGuard;
use crate::flow::access::CloseReason;
use crate::flow::registry::Registered;
use crate::proxy::datagram::DatagramHeaders;
use crate::pump::ready::{Activity, Side};
use crate::quic::backend_address::Health;

/// Backend batches a flow relays in a row before it looks at its bounds
/// (stop, drain, idle and lifetime) without waiting for the backend to
/// go quiet.
const STREAK: u32 = 32;

/// Counts `len` bytes toward `side` in a registry entry's activity.
pub(super) fn moved(activity: &Activity, side: Side, len: usize) {
    activity.add(side, len);
    activity.touch();
}

/// An open flow's task: what it holds for its life.
pub(super) struct FlowTask {
    pub(super) record: FlowRecord,
    pub(super) backend: Arc<UdpSocket>,
    pub(super) socket: Arc<UdpSocket>,
    pub(super) offload: Arc<Offload>,
    /// Where its datagrams to the client are gathered with other flows'.
    pub(super) down: Arc<Gather>,
    /// The client's address, which moves with NAT rebinding.
    pub(super) path: Arc<Path>,
    /// Its idle and lifetime bounds.
    pub(super) expiry: Expiry,
    /// Its registry entry: removed when the flow ends; its stop fires on
    /// this socket's close or an operator's `DELETE /connections`.
    pub(super) registered: Registered,
    /// Its own stop: a child of this socket's `close_flows` (which stops
    /// the flow with the entry), or the table's [`Event::Stop`](super::flows::Event::Stop).
    pub(super) stop: Arc<Stop>,
    pub(super) ended: mpsc::UnboundedSender<(Arc<Path>, u64)>,
    pub(super) learned: mpsc::UnboundedSender<(Arc<Path>, u64, ConnectionId)>,
    pub(super) drain: DrainGuard,
    /// What the flow tells its address's passive health.
    pub(super) health: Health,
    /// Counts the flow on its backend address (caps, `least_connections`).
    pub(super) in_flight: InFlight,
    /// Its PROXY headers, if any: the first answer stops them.
    pub(super) headers: Option<Arc<DatagramHeaders>>,
    /// The listener's and route's admission slots, released when the flow
    /// ends (its connection permit, once validated, is the table's).
    pub(super) _held: FlowSlots,
}

/// An open flow's stop, which the socket task fires for the flow table
/// (an unvalidated flow evicted, expired, or validated with no permit
/// free) with the reason its access line gives.
#[derive(Debug)]
pub(super) struct Stop {
    token: CancellationToken,
    reason: OnceLock<CloseReason>,
}

impl Stop {
    /// A stop that also fires with `token` (a child of the socket's).
    pub(super) fn new(token: CancellationToken) -> Stop {
        Stop {
            token,
            reason: OnceLock::new(),
        }
    }

    /// Ends the flow with `reason`.
    pub(super) fn stop(&self, reason: CloseReason) {
        let _ = self.reason.set(reason);
        self.token.cancel();
    }
}

/// Sends the backend's datagrams to the client until the flow ends, then
/// closes it.
pub(super) async fn relay_back(flow: FlowTask) {
    let FlowTask {
        record,
        backend,
        socket,
        offload,
        down,
        path,
        expiry,
        registered,
        stop,
        ended,
        learned,
        drain,
        mut health,
        in_flight,
        headers,
        _held,
    } = flow;
    let mut client = path.client();
    let mut rebinds = 0;
    // The connection IDs reported to the socket task, so each goes once.
    let mut taught = FlowCids::default();
    let started = record.part.started();
    let id = record.id;
    let closing = drain.closing(id);
    tokio::pin!(closing);
    // One timer for the flow's life, re-armed only when it fires: activity
    // only moves the deadline later, so an early wake-up looks again
    // (rather than a new timer entry per wake-up).
    let expires = tokio::time::sleep_until(expiry.deadline(record.part.stats.last()).into());
    tokio::pin!(expires);
    let reason = {
        // Shutdown, or an operator's close or drain (told apart by the
        // entry, as for TCP): one future for the flow's life, so that a
        // wake-up for a datagram registers no waiter.
        let stopped = registered.stopped(&stop.token);
        tokio::pin!(stopped);
        // Backend batches relayed in a row without a look at the flow's
        // bounds (the backend branch goes first).
        let mut streak = 0;
        loop {
            // Biased, the backend first: its datagrams are what wakes a
            // flow; the bounds are polled only when it has none, so a
            // datagram costs no poll of them. A backend readable at every
            // turn must not keep the flow past its bounds: after STREAK
            // batches in a row the backend sits out one turn, in which
            // the bounds are looked at without waiting (the last branch).
            tokio::select! {
                biased;
                // ERROR too: an ICMP port unreachable alone makes the
                // socket report an error, not readability.
                ready = backend.ready(Interest::READABLE | Interest::ERROR), if streak < STREAK => match ready.and_then(|ready| {
                    if ready.is_readable() {
                        if path.rebinds() != rebinds {
                            rebinds = path.rebinds();
                            client = path.client();
                        }
                        relay_down(&offload, &down, &backend, &socket, client, &path, &record.part.stats, started, |datagram| {
                            // The backend holds the flow: no more
                            // headers (marked before its answer is sent
                            // on, so a client that has it sends no more).
                            if let Some(headers) = &headers {
                                headers.answered();
                            }
                            if let Some(cid) = cid::backend_scid_of(datagram, MIN_VALIDATING_CID_LEN)
                                && taught.add(cid)
                            {
                                let _ = learned.send((path.clone(), id, cid));
                            }
                        })
                    } else {
                        pending_error(&backend)
                    }
                }) {
                    Ok(0) => streak = 0,
                    Ok(bytes) => {
                        streak += 1;
                        health.answered(&in_flight, started.into());
                        moved(registered.activity(), Side::Down, bytes);
                    }
                    // An ICMP port unreachable for an earlier datagram: a
                    // failed connect for passive health if the backend
                    // never answered; UDP has no connection to lose, so
                    // the flow goes on until it idles out (the backend
                    // restarting, say).
                    Err(error) if error.kind() == std::io::ErrorKind::ConnectionRefused => {
                        health.refused(&in_flight);
                        tracing::debug!(%error, "QUIC backend refused a datagram");
                    }
                    Err(error) => {
                        tracing::debug!(%error, "QUIC backend socket receive error");
                        break CloseReason::BackendReset;
                    }
                },
                () = &mut stopped => break match stop.reason.get() {
                    Some(&reason) => reason,
                    None => registered.reason(CloseReason::Shutdown),
                },
                // Its route drained by a reload, or its address put in
                // `maint`.
                () = &mut closing => break drain.reason(),
                () = &mut expires => {
                    streak = 0;
                    if let Some(reason) = expiry.expired(Instant::now(), record.part.stats.last()) {
                        break reason;
                    }
                    expires.as_mut().reset(expiry.deadline(record.part.stats.last()).into());
                }
                () = std::future::ready(()), if streak >= STREAK => streak = 0,
            }
        }
    };
    drop(in_flight);
    drop(registered);
    record.close(reason);
    let _ = ended.send((path, id));
}

/// Takes the error a backend socket reports (SO_ERROR: an ICMP error of an
/// earlier send), as the `Err` of a receive; once none is left, clears the
/// socket's error readiness and reports nothing relayed.
fn pending_error(backend: &UdpSocket) -> std::io::Result<usize> {
    match backend.try_io(Interest::ERROR, || {
        backend
            .take_error()?
            .ok_or_else(|| std::io::ErrorKind::WouldBlock.into())
    }) {
        Ok(error) => Err(error),
        Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => Ok(0),
        Err(error) => Err(error),
    }
}

/// Sends what the backend socket holds now to the client, one receive
/// batch gathered into GSO sends, in this thread's scratch buffers (no
/// await in between, so a flow holds no buffer while it waits). A datagram
/// the listening socket cannot take now is dropped, as the network would;
/// so is one past 3x what an unvalidated client sent ([`may_send`],
/// counted). Returns the bytes it read (0: the socket was empty).
#[allow(clippy::too_many_arguments)]
fn relay_down(
    offload: &Offload,
    down: &Gather,
    backend: &UdpSocket,
    socket: &UdpSocket,
    client: SocketAddr,
    path: &Path,
    stats: &Stats,
    started: Instant,
    mut learn: impl FnMut(&[u8]),
) -> std::io::Result<usize> {
    with_scratch(|recv, send| {
        offload.try_recv(backend, recv)?;
        let max_segments = offload.max_segments();
        let now = Instant::now();
        let mut bytes = 0;
        // Until the client is validated, every datagram is weighed (one
        // atomic load each); after, nothing.
        let mut validated = path.validated();
        for (_, _, datagram) in recv.datagrams() {
            bytes += datagram.len();
            learn(datagram);
            if !validated {
                validated = path.validated();
                let received = stats.bytes_up.load(Ordering::Relaxed);
                let sent = stats.bytes_down.load(Ordering::Relaxed);
                if !validated && !may_send(received, sent, datagram.len()) {
                    crate::metrics::metrics().quic_amplification_dropped();
                    continue;
                }
            }
            stats.down(datagram.len(), started, now);
            send.push(client, datagram, max_segments, |to, contents, segment| {
                down.send(offload, socket, to, contents, segment);
            });
        }
        send.flush(|to, contents, segment| down.send(offload, socket, to, contents, segment));
        Ok(bytes)
    })
}
