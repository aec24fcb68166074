//! One client connection, from accept to its single log line.
//!
//! [`handle`] reads top to bottom as the stages of DESIGN.md: preface →
//! inspect → route → connect → announce → splice → close. Each stage returns
//! its own error type, folded here into one [`CloseReason`]; the
//! [`ConnRecord`] collects the log fields as stages learn them and is written
//! exactly once, at close. Admission (limits) happens before this, in the
//! accept loop; for a trusted peer relay it must key on the claimed address,
//! known only after the preface ([`ConnRecord::source`]; the budget decision
//! is in `preface`).
//!
//! Not here: socket options, parsing, or policy; only the order of stages.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::addr::{ClaimedAddr, PeerAddr};
use crate::admit::{self, Admission, Admitted};
use crate::backend::Backends;
use crate::close::CloseReason;
use crate::config::{Backend, Listener};
use crate::metrics::ListenerMetrics;
use crate::preface::{self, Source};
use crate::relay::Transferred;
use crate::{announce, connect, inspect, metrics, relay, route, sockopt};

static NEXT_CONN_ID: AtomicU64 = AtomicU64::new(1);

/// A freshly accepted client connection.
#[derive(Debug)]
pub struct Accepted {
    pub stream: TcpStream,
    pub peer: PeerAddr,
    pub at: Instant,
    /// The listener's pre-resolved metric series.
    pub metrics: Arc<ListenerMetrics>,
}

/// What the connection's log line says; filled in stage by stage. Names
/// are borrowed from the connection's snapshot (`'l`) or shared with it
/// (`Arc`), never copied per connection.
#[derive(Debug)]
pub struct ConnRecord<'l> {
    pub id: u64,
    pub listener: &'l Listener,
    pub peer: PeerAddr,
    pub started: Instant,
    pub sni: Option<String>,
    pub alpn: Option<String>,
    pub ech: bool,
    pub route: Option<&'l str>,
    pub backend: Option<Arc<Backend>>,
    pub backend_addr: Option<std::net::SocketAddr>,
    pub moved: Transferred,
    /// The client address a trusted peer's PROXY header claims (`client.claimed`).
    pub claimed: Option<ClaimedAddr>,
    /// Who the connection is from for per-source limits: the peer, a
    /// claimed client behind a trusted peer, or the trusted peer itself.
    pub source: Source,
    /// The listener's metric series (see `metrics::ListenerMetrics`).
    pub metrics: Arc<ListenerMetrics>,
}

impl<'l> ConnRecord<'l> {
    fn new(listener: &'l Listener, accepted: &Accepted) -> Self {
        ConnRecord {
            id: NEXT_CONN_ID.fetch_add(1, Ordering::Relaxed),
            listener,
            peer: accepted.peer,
            started: accepted.at,
            sni: None,
            alpn: None,
            ech: false,
            route: None,
            backend: None,
            backend_addr: None,
            moved: Transferred::default(),
            claimed: None,
            source: Source::Direct(accepted.peer),
            metrics: accepted.metrics.clone(),
        }
    }

    fn backend_name(&self) -> Option<&str> {
        self.backend.as_ref().map(|b| b.name.as_str())
    }

    /// Writes the connection's one log line (none for a silent connection).
    fn close(&self, reason: CloseReason) {
        self.metrics.closed(&metrics::Closed {
            listener: &self.listener.name,
            route: self.route,
            backend: self.backend_name(),
            reason,
            sni: self.sni.is_some(),
            ech: self.ech,
            bytes_up: self.moved.up,
            bytes_down: self.moved.down,
        });
        if reason == CloseReason::Silent {
            return;
        }
        macro_rules! line {
            ($level:expr) => {
                tracing::event!(
                    target: "snirelay::access",
                    $level,
                    conn_id = self.id,
                    listener = %self.listener.name,
                    client.peer = %self.peer,
                    client.claimed = self.claimed.map(tracing::field::display),
                    sni = self.sni.as_deref(),
                    alpn = self.alpn.as_deref(),
                    ech = self.ech,
                    route = self.route,
                    backend = self.backend_name(),
                    backend.addr = self.backend_addr.map(tracing::field::display),
                    bytes.up = self.moved.up,
                    bytes.down = self.moved.down,
                    duration_ms = self.started.elapsed().as_millis() as u64,
                    close = reason.as_str(),
                    "connection closed"
                )
            };
        }
        if reason.is_admission_refusal() {
            line!(tracing::Level::DEBUG);
        } else if reason.is_our_fault() {
            line!(tracing::Level::WARN);
        } else {
            line!(tracing::Level::INFO);
        }
    }
}

/// Serves one accepted connection to its end and logs it.
pub async fn handle(
    mut accepted: Accepted,
    listener: Arc<Listener>,
    admission: Arc<Admission>,
    backends: Arc<Backends>,
    cancel: CancellationToken,
) {
    let mut record = ConnRecord::new(&listener, &accepted);
    let reason = match serve(&mut accepted, &mut record, &admission, &backends, &cancel).await {
        Ok(reason) | Err(reason) => reason,
    };
    // Both sockets are closed before the line is written, so a log line
    // means the connection's descriptors are gone.
    drop(accepted);
    record.close(reason);
}

async fn serve(
    accepted: &mut Accepted,
    record: &mut ConnRecord<'_>,
    admission: &Admission,
    backends: &Backends,
    cancel: &CancellationToken,
) -> Result<CloseReason, CloseReason> {
    let listener = record.listener;
    // Held for the connection's life: its slot in the per-source tables.
    let mut _claim_slot: Option<Admitted> = None;
    let client = &mut accepted.stream;
    let _ = sockopt::set_nodelay(client);

    // preface (only on listeners with [listener.proxy_protocol])
    let deadline = accepted.at + listener.client_hello_timeout;
    let (inbound, buffered) = match &listener.proxy_protocol {
        None => (None, Vec::new()),
        Some(config) => {
            let preface = tokio::select! {
                preface = preface::read(client, accepted.peer, config, deadline) => preface,
                () = cancel.cancelled() => return Err(CloseReason::Shutdown),
            };
            let preface = preface.inspect_err(|e| record.claimed = e.claimed())?;
            record.source = preface.source;
            record.claimed = preface.source.claimed();
            // admit, for a client behind a trusted peer: on its claim
            if let Some(claimed) = record.claimed {
                let admitted =
                    admission
                        .admit(admit::Source::Claimed(claimed))
                        .map_err(|refusal| {
                            let reason = CloseReason::from(refusal);
                            record.metrics.limit_refused(reason);
                            reason
                        })?;
                log_dry_run(listener, accepted.peer, &admitted);
                _claim_slot = Some(admitted);
            }
            (preface.header, preface.buffered)
        }
    };

    // inspect
    let limit = listener.max_client_hello_bytes;
    let hello = tokio::select! {
        hello = inspect::read_hello_after(client, buffered, limit, deadline) => hello?,
        () = cancel.cancelled() => return Err(CloseReason::Shutdown),
    };
    record.sni = route::loggable_name(&hello.info);
    record.ech = hello.info.ech;
    // Formatting ALPN costs allocations; skip it when no access line can be
    // written (WARN is the most verbose level `close` logs at).
    if !hello.info.alpn.is_empty()
        && tracing::enabled!(target: "snirelay::access", tracing::Level::WARN)
    {
        let names: Vec<_> = hello
            .info
            .alpn
            .iter()
            .map(|p| String::from_utf8_lossy(p))
            .collect();
        record.alpn = Some(names.join(",").escape_debug().to_string());
    }

    // route
    let target = match route::choose(listener, &hello.info) {
        Ok(target) => target,
        Err(refusal) => {
            route::refuse(client).await;
            return Err(refusal.into());
        }
    };
    record.route = Some(target.route);
    record.backend = Some(target.backend.clone());
    // What the hello said is in the record now; its allocations must not
    // stay pinned for the connection's life (the bytes go out below).
    drop(hello.info);
    // Registered until the connection ends; a reload that changes this
    // route or backend makes `closing` resolve at a jittered moment.
    let drain = target.drain.enter();
    let drained = drain.closing(record.id);
    tokio::pin!(drained);

    // connect
    let runtime = backends
        .get(&target.backend.name)
        .ok_or(CloseReason::NoAddress)?;
    let local = client.local_addr().map_err(|_| CloseReason::ClientReset)?;
    let pick = connect::Pick {
        client: record.claimed.map_or(accepted.peer.0.ip(), |c| c.0.ip()),
        sni: record.sni.as_deref(),
        local: local.ip(),
    };
    let mut backend = tokio::select! {
        backend = connect::connect(backends, runtime, &pick) => backend?,
        () = &mut drained => return Err(CloseReason::Drained),
        () = cancel.cancelled() => return Err(CloseReason::Shutdown),
    };
    record.backend_addr = Some(backend.addr);

    // announce: the PROXY header goes out in the same write as the hello
    let header = match backend.proxy_protocol {
        announce::Outbound::None => None,
        version => {
            let announcement = announce::Announcement::new(
                accepted.peer.0,
                local,
                inbound.as_ref(),
                record.sni.as_deref(),
                record.id,
            );
            announce::header(version, backend.proxy_protocol_crc32c, &announcement)
        }
    };
    let (replay, header_len) = announce::prepend(header, hello.bytes);

    // splice
    let idle = listener.idle_timeout;
    let reason = tokio::select! {
        reason = relay::relay(
            client,
            &mut backend.stream,
            replay,
            idle,
            cancel,
            &mut record.moved,
            listener.splice,
        ) => reason,
        () = &mut drained => CloseReason::Drained,
    };
    // `bytes.up` counts the client's bytes, not our header.
    record.moved.up = record.moved.up.saturating_sub(header_len as u64);
    Ok(reason)
}

/// Under `dry_run`, logs the refusal admission would have made.
pub fn log_dry_run(listener: &Listener, peer: PeerAddr, admitted: &Admitted) {
    if let Some(would) = admitted.would_refuse {
        tracing::debug!(
            listener = %listener.name,
            client.peer = %peer,
            source = %admitted.key,
            would_refuse = CloseReason::from(would).as_str(),
            "dry run: admission would refuse this connection"
        );
    }
}

/// Logs a connection refused at admission; the caller closes the socket
/// without reading from it (so there is no TLS alert to send).
pub fn refused(accepted: &Accepted, listener: &Listener, reason: CloseReason) {
    accepted.metrics.limit_refused(reason);
    ConnRecord::new(listener, accepted).close(reason);
}
