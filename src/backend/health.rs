//! Active health checks (`[backend.*.health]`): every `interval`, a probe
//! of every address of the backend's current set, in parallel, each
//! bounded by `timeout`. `fall` consecutive failures mark an up address down,
//! `rise` consecutive successes mark a down address up; each change is
//! logged once (warn down, info up) and published as the
//! `backend_address_up` gauge.
//!
//! A check is a connect, then — when the backend speaks PROXY — the LOCAL
//! header ([`crate::proxy::outbound::local_header`]: v2 LOCAL, v1 `PROXY UNKNOWN`), then a
//! clean close (FIN). With `kind = "tls"` the header is followed by a real
//! ClientHello for the check's `sni` (built by rustls), and the check passes
//! only when the first record back is a Handshake record whose first
//! message is a ServerHello (type 2, which a HelloRetryRequest also is); an
//! alert, other bytes, a close or the timeout fail it. The relay then sends
//! a `user_canceled` and a `close_notify` alert and closes: the check holds
//! no keys and never completes the handshake (the certificate watch does,
//! on connections of its own).
//! This is what catches a forwarder whose own downstream is dead: it still
//! accepts TCP, but nothing answers the hello. The same [`Probe`] and
//! [`round`] measure latency for `policy = "fastest"` (`super::fastest`:
//! the connect time, or with `fastest_measure = "tls"` the time until the
//! ServerHello), so a backend sees one kind of probe whoever sends it.
//! Probes leave from the backend's (or the address entry's) `source`
//! addresses, as its connections do (`egress`), so an origin that admits
//! only those admits its checks; with `source = "client"` they leave from
//! the host's own address (there is no client), as HAProxy's checks leave
//! `usesrc` out.
//!
//! With `kind = "tls"` the backend's addresses are also asked for their
//! certificates, by a task of its own ([`super::certificate_watch`]) that
//! never changes an address's health. The check itself still stops at the
//! ServerHello: completing every check's handshake would cost the relay a
//! signature verification and a certificate parse per address per
//! `interval` to learn something that changes every few weeks.
//!
//! The checker follows the set (a new DNS answer): addresses it has not seen
//! start up (unknown is up), removed ones are forgotten, and a changed set
//! is checked at once. The verdict only orders addresses ([`crate::backend::plan`]): health
//! never refuses a client, and down addresses are still tried after the up
//! ones.
//!
//! Not here: passive health (consecutive failed client connects, in
//! `endpoint`), choosing among addresses ([`crate::backend::plan`]). Cost: per round one
//! short-lived task and one socket per address (and for `tls` one
//! ClientHello, key shares included); a closed probe leaves one TIME_WAIT
//! socket on the relay's side.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, RootCertStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::BackendRuntime;
use crate::config::settings::{Backend, FastestMeasure, HealthCheck, HealthKind};
use crate::metrics;
use crate::proxy::outbound::local_header;

/// Why a probe of one address failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CheckError {
    #[error("connect failed: {0}")]
    Connect(io::Error),
    #[error("no connection within {0:?}")]
    TimedOut(Duration),
    #[error("sending the PROXY LOCAL header failed: {0}")]
    Announce(io::Error),
    #[error("the probe task ended abnormally")]
    Aborted,
    #[error("sending the ClientHello failed: {0}")]
    Hello(io::Error),
    #[error("no ServerHello: {0}")]
    NoServerHello(String),
}

/// The alerts that end a TLS check: `user_canceled` then `close_notify`,
/// both at warning level, in one plaintext record (the handshake never got
/// to encryption).
const FAREWELL_ALERTS: [u8; 9] = [21, 3, 3, 0, 4, 1, 90, 1, 0];
/// TLS record content types and the ServerHello message type.
const HANDSHAKE: u8 = 22;
const ALERT: u8 = 21;
const SERVER_HELLO: u8 = 2;

/// What a `kind = "tls"` check sends: its client setup and server name.
#[derive(Debug, Clone)]
struct TlsHello {
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
}

impl TlsHello {
    fn new(sni: &str) -> Option<TlsHello> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        // No roots: the check stops at the ServerHello, before any
        // certificate, so nothing is ever verified (or needs to be).
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .ok()?
            .with_root_certificates(RootCertStore::empty())
            .with_no_client_auth();
        Some(TlsHello {
            config: Arc::new(config),
            name: ServerName::try_from(sni.to_owned()).ok()?,
        })
    }

    /// Sends a ClientHello on `stream` and reads the first record back;
    /// Ok when it is a ServerHello (or HelloRetryRequest).
    async fn exchange(&self, stream: &mut TcpStream) -> Result<(), CheckError> {
        let mut conn = ClientConnection::new(self.config.clone(), self.name.clone())
            .map_err(|e| CheckError::NoServerHello(format!("cannot build a ClientHello: {e}")))?;
        let mut hello = Vec::with_capacity(2048);
        while conn.wants_write() {
            conn.write_tls(&mut hello).map_err(CheckError::Hello)?;
        }
        stream.write_all(&hello).await.map_err(CheckError::Hello)?;
        // The record header and the first byte of its body.
        let mut head = [0u8; 6];
        if let Err(e) = stream.read_exact(&mut head).await {
            return Err(CheckError::NoServerHello(match e.kind() {
                io::ErrorKind::UnexpectedEof => "the backend closed the connection".to_owned(),
                io::ErrorKind::ConnectionReset => "the backend reset the connection".to_owned(),
                _ => e.to_string(),
            }));
        }
        let length = u16::from_be_bytes([head[3], head[4]]);
        match (head[0], head[5]) {
            _ if length == 0 => Err(CheckError::NoServerHello("an empty record".to_owned())),
            (HANDSHAKE, SERVER_HELLO) => Ok(()),
            (HANDSHAKE, other) => Err(CheckError::NoServerHello(format!(
                "a handshake message of type {other} instead"
            ))),
            (ALERT, _) => {
                let mut description = [0u8; 1];
                let _ = stream.read_exact(&mut description).await;
                Err(CheckError::NoServerHello(format!(
                    "alert {} instead",
                    description[0]
                )))
            }
            (other, _) => Err(CheckError::NoServerHello(format!(
                "a record of content type {other} instead"
            ))),
        }
    }
}

/// How one backend's addresses are probed: the budget of one probe and the
/// bytes sent once connected.
#[derive(Debug, Clone)]
pub(crate) struct Probe {
    budget: Duration,
    /// The LOCAL header of a backend that speaks PROXY.
    header: Option<Arc<[u8]>>,
    /// `kind = "tls"`: the ClientHello that must be answered.
    tls: Option<TlsHello>,
    /// What [`Probe::run`] returns: the connect time, or the time until
    /// the ServerHello.
    measure: FastestMeasure,
    /// The backend whose `source` the probes bind to (see
    /// [`with_source_of`](Self::with_source_of)); `None`: the host's.
    runtime: Option<Arc<BackendRuntime>>,
}

impl Probe {
    /// Probes for `backend` (a TLS check when its health check is one),
    /// each bounded by `budget`; they time the connect.
    pub(crate) fn new(backend: &Backend, budget: Duration) -> Probe {
        let tls = backend
            .health
            .as_ref()
            .and_then(|h| match &h.kind {
                HealthKind::Tcp => None,
                HealthKind::Tls { sni } => Some(sni.as_str()),
            })
            .and_then(TlsHello::new);
        Probe {
            budget,
            header: local_header(backend.proxy_protocol, backend.proxy_protocol_crc32c)
                .map(Arc::from),
            tls,
            measure: FastestMeasure::Connect,
            runtime: None,
        }
    }

    /// The same probes, timing what `measure` says (`tls`: until the
    /// ServerHello; without a TLS check that is the connect time).
    pub(crate) fn timing(mut self, measure: FastestMeasure) -> Probe {
        self.measure = measure;
        self
    }

    /// Probes bound as `runtime`'s connections are: from its (or the
    /// address entry's) `source` addresses, so an origin that admits only
    /// those sees its checks too; the host's address for `source =
    /// "client"` (`EgressChoice::for_checks`).
    pub(crate) fn with_source_of(mut self, runtime: &Arc<BackendRuntime>) -> Probe {
        self.runtime = Some(runtime.clone());
        self
    }

    /// Connects to `addr`, sends the LOCAL header if any (and for a TLS
    /// check the ClientHello, waiting for the ServerHello) and closes; the
    /// whole probe stays within the budget. Returns the connect time, or
    /// the time until the ServerHello when the probe times that.
    /// The LOCAL header sent first, for a backend that speaks PROXY.
    pub(crate) fn header(&self) -> Option<&[u8]> {
        self.header.as_deref()
    }

    /// How long one probe may take.
    pub(crate) fn budget(&self) -> Duration {
        self.budget
    }

    pub(crate) async fn run(&self, addr: SocketAddr) -> Result<Duration, CheckError> {
        let started = Instant::now();
        let deadline = started + self.budget;
        let mut stream = match tokio::time::timeout_at(deadline, self.connect(addr)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(error)) => return Err(CheckError::Connect(error)),
            Err(_) => return Err(CheckError::TimedOut(self.budget)),
        };
        let connected = started.elapsed();
        let exchange = async {
            if let Some(header) = &self.header {
                stream
                    .write_all(header)
                    .await
                    .map_err(CheckError::Announce)?;
            }
            let mut measured = connected;
            if let Some(tls) = &self.tls {
                tls.exchange(&mut stream).await?;
                if self.measure == FastestMeasure::Tls {
                    measured = started.elapsed();
                }
                // Best effort: the verdict is already in.
                let _ = stream.write_all(&FAREWELL_ALERTS).await;
            }
            stream.shutdown().await.map_err(CheckError::Announce)?;
            Ok(measured)
        };
        match tokio::time::timeout_at(deadline, exchange).await {
            Ok(result) => result,
            Err(_) => Err(CheckError::TimedOut(self.budget)),
        }
    }
}

impl Probe {
    /// A connection to `addr`, from the probes' source.
    pub(crate) async fn connect(&self, addr: SocketAddr) -> io::Result<TcpStream> {
        match &self.runtime {
            None => TcpStream::connect(addr).await,
            Some(runtime) => {
                let egress = runtime.egress.for_addr(addr).for_checks();
                let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
                egress.connect_tcp(addr, unspecified).await
            }
        }
    }
}

/// Probes every address of `addrs` at once; the results come in the same
/// order. Takes at most one probe budget.
pub(crate) async fn round(
    probe: &Probe,
    addrs: &[SocketAddr],
) -> Vec<Result<Duration, CheckError>> {
    let mut tasks = JoinSet::new();
    for (i, &addr) in addrs.iter().enumerate() {
        let probe = probe.clone();
        tasks.spawn(async move { (i, probe.run(addr).await) });
    }
    let mut results: Vec<Option<Result<Duration, CheckError>>> =
        addrs.iter().map(|_| None).collect();
    while let Some(joined) = tasks.join_next().await {
        if let Ok((i, result)) = joined {
            results[i] = Some(result);
        }
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or(Err(CheckError::Aborted)))
        .collect()
}

/// Consecutive check outcomes of one address.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Streak {
    successes: u32,
    failures: u32,
}

/// A change of an address's checked state, with the streak that caused it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HealthChange {
    Down { failures: u32 },
    Up { successes: u32 },
}

impl Streak {
    /// Counts one check of an address that is `down` now; returns the
    /// change it causes, if any.
    fn record(&mut self, ok: bool, down: bool, check: &HealthCheck) -> Option<HealthChange> {
        if ok {
            self.failures = 0;
            self.successes = self.successes.saturating_add(1);
            (down && self.successes >= check.rise).then_some(HealthChange::Up {
                successes: self.successes,
            })
        } else {
            self.successes = 0;
            self.failures = self.failures.saturating_add(1);
            (!down && self.failures >= check.fall).then_some(HealthChange::Down {
                failures: self.failures,
            })
        }
    }
}

/// Checks `runtime`'s addresses until `cancel` fires.
pub(crate) async fn run(
    runtime: Arc<BackendRuntime>,
    check: HealthCheck,
    cancel: CancellationToken,
) {
    if let (HealthKind::Tls { sni }, None) = (&check.kind, check.kind.sni().and_then(TlsHello::new))
    {
        // Validation accepts only names rustls accepts; say so if not.
        tracing::error!(backend = %runtime.config.name, %sni, "TLS health check cannot be built; checking with TCP connects");
    }
    let backend = runtime.config.name.as_str();
    let probe = Probe::new(&runtime.config, check.timeout).with_source_of(&runtime);
    let mut set_changes = runtime.subscribe();
    let mut streaks: HashMap<SocketAddr, Streak> = HashMap::new();
    let mut ticks = tokio::time::interval(check.interval);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        // The first tick is immediate: the first round runs at start.
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = ticks.tick() => {}
            changed = set_changes.changed() => {
                if changed.is_err() {
                    return;
                }
                // Check a new set at once; the next round one interval later.
                ticks.reset();
            }
        }
        let set = set_changes.borrow_and_update().set.clone();
        streaks.retain(|addr, _| set.iter().any(|e| e.addr == *addr));
        for endpoint in set.iter() {
            streaks.entry(endpoint.addr).or_insert_with(|| {
                metrics::metrics().backend_address_health(
                    backend,
                    endpoint.addr,
                    endpoint.state.is_up(),
                );
                Streak::default()
            });
        }
        let addrs: Vec<SocketAddr> = set.iter().map(|e| e.addr).collect();
        let results = tokio::select! {
            () = cancel.cancelled() => return,
            results = round(&probe, &addrs) => results,
        };
        for (endpoint, result) in set.iter().zip(results) {
            let addr = endpoint.addr;
            let state = &endpoint.state;
            let streak = streaks.entry(addr).or_default();
            state.note_check(result.is_ok());
            if let Err(error) = &result {
                state.note_failure();
                tracing::debug!(%backend, %addr, %error, "health check failed");
            }
            match streak.record(result.is_ok(), state.checked_down(), &check) {
                None => {}
                Some(HealthChange::Down { failures }) => {
                    // The gauge first: whoever reads the log line then
                    // finds the gauge already moved.
                    state.set_checked_down(true);
                    metrics::metrics().backend_address_health(backend, addr, false);
                    let error = result.err().map(|e| e.to_string()).unwrap_or_default();
                    tracing::warn!(%backend, %addr, failures, %error, "backend address marked down (health check)");
                }
                Some(HealthChange::Up { successes }) => {
                    state.set_checked_down(false);
                    metrics::metrics().backend_address_health(backend, addr, state.is_up());
                    tracing::info!(%backend, %addr, successes, "backend address marked up (health check)");
                }
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    const CHECK: HealthCheck = HealthCheck {
        interval: Duration::from_secs(5),
        timeout: Duration::from_secs(2),
        rise: 2,
        fall: 3,
        kind: HealthKind::Tcp,
    };

    /// Backend `b` at `addr` with `extra` keys, as the config file makes it.
    pub(crate) fn backend(addr: SocketAddr, extra: &str) -> Backend {
        let text = format!(
            "[[listener]]\nname = \"tls\"\nlisten = [\"127.0.0.1:0\"]\n\n\
             [[route]]\nsni = [\"a.example\"]\nbackend = \"b\"\n\n\
             [backend.b]\naddresses = [\"{addr}\"]\n{extra}\n"
        );
        let config = crate::config::Config::from_toml(&text, std::path::Path::new("t.toml"))
            .unwrap_or_else(|e| panic!("{e}"));
        (*config.backends["b"]).clone()
    }

    /// Feeds `outcomes` to a streak, keeping the down state as its changes
    /// say; returns the changes.
    fn replay(outcomes: &[bool]) -> Vec<Option<HealthChange>> {
        let mut streak = Streak::default();
        let mut down = false;
        outcomes
            .iter()
            .map(|&ok| {
                let change = streak.record(ok, down, &CHECK);
                match change {
                    Some(HealthChange::Down { .. }) => down = true,
                    Some(HealthChange::Up { .. }) => down = false,
                    None => {}
                }
                change
            })
            .collect()
    }

    #[test]
    fn fall_failures_in_a_row_mark_down_once_and_rise_successes_mark_up_once() {
        let changes = replay(&[false, false, false, false, true, true, true, false]);
        assert_eq!(
            changes,
            [
                None,
                None,
                Some(HealthChange::Down { failures: 3 }),
                None,
                None,
                Some(HealthChange::Up { successes: 2 }),
                None,
                None,
            ]
        );
    }

    #[test]
    fn an_interrupted_streak_starts_over() {
        // Two failures, a success, two failures: never three in a row.
        assert!(
            replay(&[false, false, true, false, false])
                .iter()
                .all(Option::is_none)
        );
        // Down, then success, failure, success: never two successes in a row.
        let changes = replay(&[false, false, false, true, false, true]);
        assert_eq!(changes[2], Some(HealthChange::Down { failures: 3 }));
        assert!(changes[3..].iter().all(Option::is_none));
    }

    #[tokio::test]
    async fn a_probe_sends_the_local_header_then_closes_cleanly() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let backend = backend(addr, r#"proxy_protocol = "v2""#);
        let probe = Probe::new(&backend, Duration::from_secs(2));
        let (measured, accepted) = tokio::join!(probe.run(addr), listener.accept());
        assert!(measured.unwrap() < Duration::from_secs(2));
        let (mut stream, _) = accepted.unwrap();
        let mut got = Vec::new();
        // read_to_end returns only on a FIN; a reset would be an error.
        stream.read_to_end(&mut got).await.unwrap();
        assert_eq!(
            Some(got),
            local_header(crate::proxy::outbound::Outbound::V2, false)
        );
    }

    #[tokio::test]
    async fn a_round_reports_each_address_in_order() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let open = listener.local_addr().unwrap();
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let backend = backend(open, "");
        let probe = Probe::new(&backend, Duration::from_secs(2));
        let results = round(&probe, &[closed, open, closed]).await;
        assert!(matches!(results[0], Err(CheckError::Connect(_))));
        assert!(results[1].is_ok());
        assert!(matches!(results[2], Err(CheckError::Connect(_))));
    }

    /// The `random` of a HelloRetryRequest (RFC 8446, 4.1.3).
    const HRR_RANDOM: [u8; 32] = [
        0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8,
        0x91, 0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8,
        0x33, 0x9c,
    ];

    /// What a rustls server saw of one TLS check.
    struct SeenByServer {
        sni: Option<String>,
        /// Its first flight began with a HelloRetryRequest.
        retry: bool,
        /// What the check sent after the server's first flight.
        after: Vec<u8>,
    }

    /// A rustls server (self-signed for `a.example`) that answers one
    /// connection's ClientHello with its first flight, using only the key
    /// exchange `groups` (None: the defaults), then reads to the end.
    async fn rustls_server(
        groups: Option<Vec<&'static dyn rustls::crypto::SupportedKxGroup>>,
    ) -> (SocketAddr, tokio::task::JoinHandle<SeenByServer>) {
        let cert = rcgen::generate_simple_self_signed(vec!["a.example".to_owned()]).unwrap();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(
            rustls::pki_types::PrivatePkcs8KeyDer::from(cert.signing_key.serialize_der()),
        );
        let mut provider = rustls::crypto::aws_lc_rs::default_provider();
        if let Some(groups) = groups {
            provider.kx_groups = groups;
        }
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(provider))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.cert.der().clone()], key)
            .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let (mut tcp, _) = listener.accept().await.unwrap();
            let mut conn = rustls::ServerConnection::new(Arc::new(config)).unwrap();
            let mut buf = vec![0u8; 16 * 1024];
            while !conn.wants_write() {
                let n = tcp.read(&mut buf).await.unwrap();
                assert!(
                    n > 0,
                    "the check closed before its ClientHello was complete"
                );
                conn.read_tls(&mut &buf[..n]).unwrap();
                conn.process_new_packets().unwrap();
            }
            let mut flight = Vec::new();
            while conn.wants_write() {
                conn.write_tls(&mut flight).unwrap();
            }
            tcp.write_all(&flight).await.unwrap();
            let mut after = Vec::new();
            let _ = tcp.read_to_end(&mut after).await;
            SeenByServer {
                sni: conn.server_name().map(str::to_owned),
                retry: flight[5] == SERVER_HELLO && flight[11..43] == HRR_RANDOM,
                after,
            }
        });
        (addr, task)
    }

    fn tls_probe(addr: SocketAddr) -> Probe {
        let backend = backend(
            addr,
            "[backend.b.health]\nkind = \"tls\"\nsni = \"A.example.\"",
        );
        Probe::new(&backend, Duration::from_secs(2))
    }

    #[tokio::test]
    async fn a_tls_check_passes_on_a_server_hello_and_ends_with_alerts() {
        let (addr, server) = rustls_server(None).await;
        let measured = tls_probe(addr).run(addr).await;
        assert!(measured.is_ok(), "{measured:?}");
        let seen = server.await.unwrap();
        // The normalised health SNI, a ServerHello, then the two alerts.
        assert_eq!(seen.sni.as_deref(), Some("a.example"));
        assert!(!seen.retry);
        assert_eq!(seen.after, FAREWELL_ALERTS);
    }

    #[tokio::test]
    async fn a_tls_check_passes_on_a_hello_retry_request() {
        // The server only takes P-384, which the client offers but sends
        // no key share for: it asks again.
        let (addr, server) =
            rustls_server(Some(vec![rustls::crypto::aws_lc_rs::kx_group::SECP384R1])).await;
        let measured = tls_probe(addr).run(addr).await;
        assert!(measured.is_ok(), "{measured:?}");
        let seen = server.await.unwrap();
        assert!(seen.retry, "the server sent no HelloRetryRequest");
        assert_eq!(seen.after, FAREWELL_ALERTS);
    }

    /// A backend that reads the ClientHello record, answers `answer` and
    /// closes (with nothing unread, so with a FIN).
    async fn answering(answer: &'static [u8]) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut tcp, _) = listener.accept().await.unwrap();
            let mut header = [0u8; 5];
            tcp.read_exact(&mut header).await.unwrap();
            let mut body = vec![0u8; usize::from(u16::from_be_bytes([header[3], header[4]]))];
            tcp.read_exact(&mut body).await.unwrap();
            let _ = tcp.write_all(answer).await;
        });
        addr
    }

    #[tokio::test]
    async fn a_tls_check_fails_on_a_close_an_alert_or_other_bytes() {
        let failure = |r: Result<Duration, CheckError>| match r {
            Err(CheckError::NoServerHello(why)) => why,
            other => panic!("{other:?}"),
        };
        // Accepts TCP, closes: what a forwarder with a dead downstream does.
        let addr = answering(b"").await;
        assert_eq!(
            failure(tls_probe(addr).run(addr).await),
            "the backend closed the connection"
        );
        // A fatal handshake_failure alert.
        let addr = answering(&[21, 3, 3, 0, 2, 2, 40]).await;
        assert_eq!(failure(tls_probe(addr).run(addr).await), "alert 40 instead");
        // Not TLS at all.
        let addr = answering(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
        assert_eq!(
            failure(tls_probe(addr).run(addr).await),
            "a record of content type 72 instead"
        );
        // A handshake record that is not a ServerHello.
        let addr = answering(&[22, 3, 3, 0, 4, 11, 0, 0, 0]).await;
        assert_eq!(
            failure(tls_probe(addr).run(addr).await),
            "a handshake message of type 11 instead"
        );
    }

    #[tokio::test]
    async fn a_tls_check_that_gets_no_answer_times_out() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let backend = backend(
            addr,
            "[backend.b.health]\nkind = \"tls\"\nsni = \"a.example\"",
        );
        let probe = Probe::new(&backend, Duration::from_millis(200));
        // Accepted (by the kernel) and never answered.
        let (result, _held) = tokio::join!(probe.run(addr), listener.accept());
        assert!(matches!(result, Err(CheckError::TimedOut(_))), "{result:?}");
    }

    #[tokio::test]
    async fn fastest_tls_measures_until_the_server_hello() {
        // A server that waits 150 ms before its ServerHello: the connect
        // is quick, the hello is not.
        let (inner, _server) = rustls_server(None).await;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut client, _) = listener.accept().await.unwrap();
            let mut server = TcpStream::connect(inner).await.unwrap();
            let mut hello = vec![0u8; 16 * 1024];
            let n = client.read(&mut hello).await.unwrap();
            server.write_all(&hello[..n]).await.unwrap();
            tokio::time::sleep(Duration::from_millis(150)).await;
            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
        });
        let backend = backend(
            addr,
            "[backend.b.health]\nkind = \"tls\"\nsni = \"a.example\"",
        );
        let probe = Probe::new(&backend, Duration::from_secs(2)).timing(FastestMeasure::Tls);
        let measured = probe.run(addr).await.unwrap();
        assert!(measured >= Duration::from_millis(150), "{measured:?}");
    }
}
