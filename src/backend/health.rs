//! Active health checks (`[backend.*.health]`): every `interval`, a TCP
//! connect to every address of the backend's current set, in parallel, each
//! bounded by `timeout`. `fall` consecutive failures mark an up address down,
//! `rise` consecutive successes mark a down address up; each change is
//! logged once (warn down, info up) and published as the
//! `backend_address_up` gauge.
//!
//! A check is a connect, then — when the backend speaks PROXY — the LOCAL
//! header (`proxy::outbound::local_header`: v2 LOCAL, v1 `PROXY UNKNOWN`), then a
//! clean close (FIN). The same [`Probe`] and [`round`] measure connect times
//! for `policy = "fastest"` (`super::fastest`), so a backend sees one kind of
//! probe whoever sends it.
//!
//! The checker follows the set (a new DNS answer): addresses it has not seen
//! start up (unknown is up), removed ones are forgotten, and a changed set
//! is checked at once. The verdict only orders addresses (`select`): health
//! never refuses a client, and down addresses are still tried after the up
//! ones.
//!
//! Not here: passive health (consecutive failed client connects, in
//! `endpoint`), choosing among addresses (`select`). Cost: per round one
//! short-lived task and one socket per address; a closed probe leaves one
//! TIME_WAIT socket on the relay's side.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::BackendRuntime;
use super::{Backend, HealthCheck};
use crate::metrics;
use crate::proxy::outbound::local_header;

/// Why a probe of one address failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("connect failed: {0}")]
    Connect(io::Error),
    #[error("no connection within {0:?}")]
    TimedOut(Duration),
    #[error("sending the PROXY LOCAL header failed: {0}")]
    Announce(io::Error),
    #[error("the probe task ended abnormally")]
    Aborted,
}

/// How one backend's addresses are probed: the budget of one probe and the
/// bytes sent once connected.
#[derive(Debug, Clone)]
pub struct Probe {
    budget: Duration,
    /// The LOCAL header of a backend that speaks PROXY.
    header: Option<Arc<[u8]>>,
}

impl Probe {
    /// Probes for `backend`, each bounded by `budget`.
    pub fn new(backend: &Backend, budget: Duration) -> Probe {
        Probe {
            budget,
            header: local_header(backend.proxy_protocol, backend.proxy_protocol_crc32c)
                .map(Arc::from),
        }
    }

    /// Connects to `addr`, sends the LOCAL header if any and closes; the
    /// whole probe stays within the budget. Returns the connect time.
    pub async fn run(&self, addr: SocketAddr) -> Result<Duration, ProbeError> {
        let started = Instant::now();
        let deadline = started + self.budget;
        let mut stream = match tokio::time::timeout_at(deadline, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(error)) => return Err(ProbeError::Connect(error)),
            Err(_) => return Err(ProbeError::TimedOut(self.budget)),
        };
        let connected = started.elapsed();
        let farewell = async {
            if let Some(header) = &self.header {
                stream.write_all(header).await?;
            }
            stream.shutdown().await
        };
        match tokio::time::timeout_at(deadline, farewell).await {
            Ok(Ok(())) => Ok(connected),
            Ok(Err(error)) => Err(ProbeError::Announce(error)),
            Err(_) => Err(ProbeError::TimedOut(self.budget)),
        }
    }
}

/// Probes every address of `addrs` at once; the results come in the same
/// order. Takes at most one probe budget.
pub async fn round(probe: &Probe, addrs: &[SocketAddr]) -> Vec<Result<Duration, ProbeError>> {
    let mut tasks = JoinSet::new();
    for (i, &addr) in addrs.iter().enumerate() {
        let probe = probe.clone();
        tasks.spawn(async move { (i, probe.run(addr).await) });
    }
    let mut results: Vec<Option<Result<Duration, ProbeError>>> =
        addrs.iter().map(|_| None).collect();
    while let Some(joined) = tasks.join_next().await {
        if let Ok((i, result)) = joined {
            results[i] = Some(result);
        }
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or(Err(ProbeError::Aborted)))
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
enum Change {
    Down { failures: u32 },
    Up { successes: u32 },
}

impl Streak {
    /// Counts one check of an address that is `down` now; returns the
    /// change it causes, if any.
    fn record(&mut self, ok: bool, down: bool, check: &HealthCheck) -> Option<Change> {
        if ok {
            self.failures = 0;
            self.successes = self.successes.saturating_add(1);
            (down && self.successes >= check.rise).then_some(Change::Up {
                successes: self.successes,
            })
        } else {
            self.successes = 0;
            self.failures = self.failures.saturating_add(1);
            (!down && self.failures >= check.fall).then_some(Change::Down {
                failures: self.failures,
            })
        }
    }
}

/// Checks `runtime`'s addresses until `cancel` fires.
pub async fn run(runtime: Arc<BackendRuntime>, check: HealthCheck, cancel: CancellationToken) {
    let backend = runtime.config.name.as_str();
    let probe = Probe::new(&runtime.config, check.timeout);
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
            if let Err(error) = &result {
                state.note_failure();
                tracing::debug!(%backend, %addr, %error, "health check failed");
            }
            match streak.record(result.is_ok(), state.checked_down(), &check) {
                None => {}
                Some(Change::Down { failures }) => {
                    // The gauge first: whoever reads the log line then
                    // finds the gauge already moved.
                    state.set_checked_down(true);
                    metrics::metrics().backend_address_health(backend, addr, false);
                    let error = result.err().map(|e| e.to_string()).unwrap_or_default();
                    tracing::warn!(%backend, %addr, failures, %error, "backend address marked down (health check)");
                }
                Some(Change::Up { successes }) => {
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
    fn replay(outcomes: &[bool]) -> Vec<Option<Change>> {
        let mut streak = Streak::default();
        let mut down = false;
        outcomes
            .iter()
            .map(|&ok| {
                let change = streak.record(ok, down, &CHECK);
                match change {
                    Some(Change::Down { .. }) => down = true,
                    Some(Change::Up { .. }) => down = false,
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
                Some(Change::Down { failures: 3 }),
                None,
                None,
                Some(Change::Up { successes: 2 }),
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
        assert_eq!(changes[2], Some(Change::Down { failures: 3 }));
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
        assert!(matches!(results[0], Err(ProbeError::Connect(_))));
        assert!(results[1].is_ok());
        assert!(matches!(results[2], Err(ProbeError::Connect(_))));
    }
}
