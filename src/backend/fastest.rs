//! Latency ranking (`policy = "fastest"`): rounds that measure the connect
//! time (or, with `fastest_measure = "tls"`, the time until the TLS health
//! check's ServerHello) to every address of the backend at once, each probe with its own
//! budget (`connect_timeout`), and a [`Chooser`] that turns them into the
//! address connections try first
//! ([`crate::backend::policy_state::Ranking::preferred`], read by `policy`).
//!
//! The rules (all in [`Chooser::round`], a pure function of the samples):
//! - the first round chooses the fastest address that answered;
//! - afterwards the choice moves only to an address faster by both
//!   [`MARGIN`] and [`MARGIN_PERCENT`] in [`ROUNDS_TO_SWITCH`] consecutive
//!   rounds, so noise between two near-equal addresses never flaps;
//! - a failed probe of the current choice counts as infinitely slow: the
//!   choice moves at once to the fastest address that has not failed within
//!   [`RECENT_FAILURE`];
//! - an address that failed (a probe, a health check or a client's connect)
//!   within [`RECENT_FAILURE`] is not returned to while another will do.
//!
//! Rounds repeat after a random moment within `fastest_interval` (full
//! jitter, so a fleet of relays does not probe in step). A new address set
//! drops the ranking and is measured at once. With fewer than two addresses
//! there is nothing to rank: no probes, no preference.
//!
//! Probes are health checks' (`super::health::Probe`): a connect, the PROXY
//! LOCAL header for a backend that speaks PROXY, the ClientHello of a
//! `kind = "tls"` check, a clean close.
//!
//! Not here: ordering a connection's attempts (`policy`, and [`crate::backend::plan`],
//! which also puts healthy addresses first); starting this task (the
//! policy's start hook). Cost: one round is one connect per address every
//! `fastest_interval / 2` on average; connections pay one uncontended lock to
//! read the choice.

use std::hash::{BuildHasher, Hasher, RandomState};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::BackendRuntime;
use super::health::{Probe, round};

/// Another address must be faster than the current choice by at least this…
pub(crate) const MARGIN: Duration = Duration::from_millis(20);
/// …and by at least this share of the current choice's connect time…
pub(crate) const MARGIN_PERCENT: u32 = 25;
/// …in this many consecutive rounds before the choice moves.
pub(crate) const ROUNDS_TO_SWITCH: u32 = 2;
/// An address that failed this recently is not chosen while another will do.
pub(crate) const RECENT_FAILURE: Duration = Duration::from_secs(60);

/// One address measured in one round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LatencySample {
    pub addr: SocketAddr,
    /// The connect time; `None` when the probe failed.
    pub latency: Option<Duration>,
    /// Whether the address failed within [`RECENT_FAILURE`] (this round's
    /// failure included).
    pub failed_recently: bool,
}

/// What a round decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RoundDecision {
    /// No address answered and nothing was chosen before: no preference.
    Nothing,
    /// The choice stays.
    Keep(SocketAddr),
    /// The first choice (of this address set).
    First { to: SocketAddr, latency: Duration },
    /// The choice moves; `from_latency` is `None` when its probe failed.
    Switch {
        from: SocketAddr,
        from_latency: Option<Duration>,
        to: SocketAddr,
        to_latency: Duration,
    },
}

/// Whether `candidate` is faster than `current` by both margins.
pub(crate) fn clearly_faster(candidate: Duration, current: Duration) -> bool {
    let percent = u128::from(MARGIN_PERCENT);
    candidate + MARGIN <= current
        && candidate.as_nanos() * 100 <= current.as_nanos() * (100 - percent)
}

/// The choice and the streaks of the addresses beating it.
#[derive(Debug, Default, Clone)]
pub(crate) struct Chooser {
    current: Option<SocketAddr>,
    /// Consecutive rounds in which each address beat the choice by both
    /// margins; an address missing from here did not beat it last round.
    wins: Vec<(SocketAddr, u32)>,
}

impl Chooser {
    pub(crate) fn current(&self) -> Option<SocketAddr> {
        self.current
    }

    /// Takes one round's samples and decides.
    pub(crate) fn round(&mut self, samples: &[LatencySample]) -> RoundDecision {
        let current = self
            .current
            .and_then(|c| samples.iter().find(|s| s.addr == c));
        let Some(current) = current else {
            // The first round, or the choice left the set.
            self.wins.clear();
            let pick =
                fastest(samples, |s| !s.failed_recently).or_else(|| fastest(samples, |_| true));
            return match pick {
                Some((to, latency)) => {
                    self.current = Some(to);
                    RoundDecision::First { to, latency }
                }
                None => {
                    self.current = None;
                    RoundDecision::Nothing
                }
            };
        };
        let from = current.addr;
        let Some(from_latency) = current.latency else {
            // Infinitely slow: move at once, preferably to an address that
            // has not failed lately.
            self.wins.clear();
            let others = |s: &LatencySample| s.addr != from;
            let pick = fastest(samples, |s| others(s) && !s.failed_recently)
                .or_else(|| fastest(samples, others));
            return match pick {
                Some((to, to_latency)) => {
                    self.current = Some(to);
                    RoundDecision::Switch {
                        from,
                        from_latency: None,
                        to,
                        to_latency,
                    }
                }
                // Nothing answered: no address is known to be better.
                None => RoundDecision::Keep(from),
            };
        };
        let previous = std::mem::take(&mut self.wins);
        for s in samples {
            let beats = s.addr != from
                && !s.failed_recently
                && s.latency.is_some_and(|l| clearly_faster(l, from_latency));
            if beats {
                let before = previous
                    .iter()
                    .find(|(a, _)| *a == s.addr)
                    .map_or(0, |&(_, n)| n);
                self.wins.push((s.addr, before + 1));
            }
        }
        let ready = |s: &LatencySample| {
            self.wins
                .iter()
                .any(|&(a, n)| a == s.addr && n >= ROUNDS_TO_SWITCH)
        };
        match fastest(samples, ready) {
            Some((to, to_latency)) => {
                self.wins.clear();
                self.current = Some(to);
                RoundDecision::Switch {
                    from,
                    from_latency: Some(from_latency),
                    to,
                    to_latency,
                }
            }
            None => RoundDecision::Keep(from),
        }
    }
}

/// The fastest address among the answering samples that pass `filter`
/// (the earlier one on a tie).
fn fastest(
    samples: &[LatencySample],
    filter: impl Fn(&LatencySample) -> bool,
) -> Option<(SocketAddr, Duration)> {
    samples
        .iter()
        .filter(|s| filter(s))
        .filter_map(|s| Some((s.addr, s.latency?)))
        .min_by_key(|&(_, latency)| latency)
}

/// A uniformly random moment in `[0, max)` (full jitter). The randomness
/// comes from std's per-process random hash keys.
pub(crate) fn full_jitter(max: Duration) -> Duration {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    let draw = u128::from(hasher.finish());
    let nanos = max.as_nanos().saturating_mul(draw) >> 64;
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// Milliseconds with a fraction, for log fields.
fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Ranks `runtime`'s addresses until `cancel` fires.
pub(crate) async fn run(runtime: Arc<BackendRuntime>, cancel: CancellationToken) {
    let config = runtime.config.clone();
    let backend = config.name.as_str();
    let probe = Probe::new(&config, config.connect_timeout)
        .timing(config.fastest_measure)
        .with_source_of(&runtime);
    let mut set_changes = runtime.subscribe();
    let mut chooser = Chooser::default();
    loop {
        let set = set_changes.borrow_and_update().set.clone();
        let changed = if set.len() < 2 {
            tokio::select! {
                () = cancel.cancelled() => return,
                changed = set_changes.changed() => changed,
            }
        } else {
            let addrs: Vec<SocketAddr> = set.iter().map(|e| e.addr).collect();
            let results = tokio::select! {
                () = cancel.cancelled() => return,
                results = round(&probe, &addrs) => results,
            };
            if set_changes.has_changed().unwrap_or(true) {
                // Measured a set that is gone: start over on the new one.
                Ok(())
            } else {
                let mut samples = Vec::with_capacity(set.len());
                let mut report = Vec::with_capacity(set.len());
                for (endpoint, result) in set.iter().zip(&results) {
                    if result.is_err() {
                        endpoint.state.note_failure();
                    }
                    samples.push(LatencySample {
                        addr: endpoint.addr,
                        latency: result.as_ref().ok().copied(),
                        failed_recently: endpoint.state.failed_within(RECENT_FAILURE),
                    });
                    report.push(match result {
                        Ok(latency) => format!("{}={:.3}ms", endpoint.addr, ms(*latency)),
                        Err(error) => format!("{}=failed ({error})", endpoint.addr),
                    });
                }
                let decision = chooser.round(&samples);
                tracing::debug!(%backend, latencies = %report.join(", "), preferred = ?chooser.current(), "fastest round measured");
                // The choice first, then its log line: whoever reads the
                // line finds connections already following it.
                runtime.selection.ranking.set(chooser.current());
                announce(backend, &decision);
                let pause = full_jitter(config.fastest_interval);
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = tokio::time::sleep(pause) => continue,
                    changed = set_changes.changed() => changed,
                }
            }
        };
        if changed.is_err() {
            return;
        }
        // The set changed: drop the ranking and measure the new set at once.
        if chooser.current().is_some() {
            tracing::info!(%backend, "fastest ranking dropped (the address set changed)");
        }
        chooser = Chooser::default();
        runtime.selection.ranking.set(None);
    }
}

/// Logs a decision that changes the choice.
fn announce(backend: &str, decision: &RoundDecision) {
    match *decision {
        RoundDecision::Nothing | RoundDecision::Keep(_) => {}
        RoundDecision::First { to, latency } => {
            tracing::info!(%backend, addr = %to, latency_ms = ms(latency), "fastest backend address chosen");
        }
        RoundDecision::Switch {
            from,
            from_latency,
            to,
            to_latency,
        } => {
            tracing::info!(
                %backend,
                from = %from,
                from.latency_ms = from_latency.map(ms),
                from.failed = from_latency.is_none(),
                to = %to,
                to.latency_ms = ms(to_latency),
                "fastest backend address changed"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    fn ms(n: u64) -> Option<Duration> {
        Some(Duration::from_millis(n))
    }

    /// A round where address `i + 1` took `latencies[i]` (None: failed) and
    /// the ports in `recent` failed lately.
    fn samples(latencies: &[Option<Duration>], recent: &[u16]) -> Vec<LatencySample> {
        latencies
            .iter()
            .enumerate()
            .map(|(i, &latency)| {
                let port = i as u16 + 1;
                LatencySample {
                    addr: addr(port),
                    latency,
                    failed_recently: latency.is_none() || recent.contains(&port),
                }
            })
            .collect()
    }

    fn chosen(port: u16, latency: u64) -> RoundDecision {
        RoundDecision::First {
            to: addr(port),
            latency: Duration::from_millis(latency),
        }
    }

    #[test]
    fn margins_are_both_20_ms_and_25_percent_inclusive() {
        let d = Duration::from_millis;
        // 20 ms and 25 %: both met exactly.
        assert!(clearly_faster(d(60), d(80)));
        // 20 ms but only 20 %.
        assert!(!clearly_faster(d(80), d(100)));
        // 60 % but only 6 ms.
        assert!(!clearly_faster(d(4), d(10)));
        // 19 ms and 95 %.
        assert!(!clearly_faster(d(1), d(20)));
        assert!(clearly_faster(d(1), d(1000)));
        assert!(!clearly_faster(d(100), d(100)));
    }

    #[test]
    fn the_first_round_chooses_the_fastest() {
        let mut c = Chooser::default();
        assert_eq!(
            c.round(&samples(&[ms(30), ms(10), ms(20)], &[])),
            chosen(2, 10)
        );
        assert_eq!(c.current(), Some(addr(2)));
    }

    #[test]
    fn a_switch_needs_both_margins_in_two_consecutive_rounds() {
        let mut c = Chooser::default();
        c.round(&samples(&[ms(100), ms(110)], &[]));
        assert_eq!(c.current(), Some(addr(1)));
        // Address 2 becomes 30 ms faster, but that is under 25 %: never.
        for _ in 0..5 {
            assert_eq!(
                c.round(&samples(&[ms(130), ms(100)], &[])),
                RoundDecision::Keep(addr(1))
            );
        }
        // 50 % but 5 ms faster: never.
        for _ in 0..5 {
            assert_eq!(
                c.round(&samples(&[ms(10), ms(5)], &[])),
                RoundDecision::Keep(addr(1))
            );
        }
        // Both margins, one round; then a round inside the margins resets it.
        assert_eq!(
            c.round(&samples(&[ms(200), ms(100)], &[])),
            RoundDecision::Keep(addr(1))
        );
        assert_eq!(
            c.round(&samples(&[ms(110), ms(100)], &[])),
            RoundDecision::Keep(addr(1))
        );
        assert_eq!(
            c.round(&samples(&[ms(200), ms(100)], &[])),
            RoundDecision::Keep(addr(1))
        );
        // Second consecutive round: the choice moves.
        assert_eq!(
            c.round(&samples(&[ms(200), ms(100)], &[])),
            RoundDecision::Switch {
                from: addr(1),
                from_latency: ms(200),
                to: addr(2),
                to_latency: Duration::from_millis(100),
            }
        );
        assert_eq!(c.current(), Some(addr(2)));
        // And stays while the old choice is not clearly faster.
        assert_eq!(
            c.round(&samples(&[ms(90), ms(100)], &[])),
            RoundDecision::Keep(addr(2))
        );
    }

    #[test]
    fn two_rounds_must_be_won_by_the_same_address() {
        let mut c = Chooser::default();
        c.round(&samples(&[ms(100), ms(100), ms(100)], &[]));
        assert_eq!(c.current(), Some(addr(1)));
        // Address 2 beats the choice, then address 3 (160 ms is 20 % faster
        // than 200 ms: inside the margins): no address won twice.
        assert_eq!(
            c.round(&samples(&[ms(200), ms(50), ms(160)], &[])),
            RoundDecision::Keep(addr(1))
        );
        assert_eq!(
            c.round(&samples(&[ms(200), ms(160), ms(50)], &[])),
            RoundDecision::Keep(addr(1))
        );
        // Address 3 wins its second round in a row.
        assert_eq!(
            c.round(&samples(&[ms(200), ms(160), ms(50)], &[])),
            RoundDecision::Switch {
                from: addr(1),
                from_latency: ms(200),
                to: addr(3),
                to_latency: Duration::from_millis(50),
            }
        );
    }

    #[test]
    fn a_failed_choice_moves_at_once_to_the_fastest_that_has_not_failed_lately() {
        let mut c = Chooser::default();
        c.round(&samples(&[ms(10), ms(50), ms(30)], &[]));
        assert_eq!(c.current(), Some(addr(1)));
        // Address 3 is faster but failed within the minute: address 2.
        assert_eq!(
            c.round(&samples(&[None, ms(50), ms(30)], &[3])),
            RoundDecision::Switch {
                from: addr(1),
                from_latency: None,
                to: addr(2),
                to_latency: Duration::from_millis(50),
            }
        );
        // The failed address is not returned to while it failed lately,
        // however fast it answers again.
        for _ in 0..4 {
            assert_eq!(
                c.round(&samples(&[ms(1), ms(50), ms(30)], &[1, 3])),
                RoundDecision::Keep(addr(2))
            );
        }
        // Once its failure is old, it wins back by the rules.
        assert_eq!(
            c.round(&samples(&[ms(1), ms(50), ms(30)], &[])),
            RoundDecision::Keep(addr(2))
        );
        assert!(matches!(
            c.round(&samples(&[ms(1), ms(50), ms(30)], &[])),
            RoundDecision::Switch { to, .. } if to == addr(1)
        ));
    }

    #[test]
    fn a_failed_choice_falls_back_to_a_recently_failed_address_when_nothing_else_answers() {
        let mut c = Chooser::default();
        c.round(&samples(&[ms(10), ms(50), ms(30)], &[]));
        assert!(matches!(
            c.round(&samples(&[None, None, ms(30)], &[3])),
            RoundDecision::Switch { to, from_latency: None, .. } if to == addr(3)
        ));
        // Nothing answers: the choice stays (no address is known better).
        assert_eq!(
            c.round(&samples(&[None, None, None], &[])),
            RoundDecision::Keep(addr(3))
        );
    }

    #[test]
    fn the_first_choice_avoids_recent_failures_and_nothing_answering_means_no_choice() {
        let mut c = Chooser::default();
        assert_eq!(c.round(&samples(&[ms(5), ms(40)], &[1])), chosen(2, 40));
        let mut c = Chooser::default();
        assert_eq!(c.round(&samples(&[ms(5), None], &[1])), chosen(1, 5));
        let mut c = Chooser::default();
        assert_eq!(
            c.round(&samples(&[None, None], &[])),
            RoundDecision::Nothing
        );
        assert_eq!(c.current(), None);
    }

    #[tokio::test]
    async fn fewer_than_two_addresses_are_not_probed_and_get_no_preference() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let only = listener.local_addr().unwrap();
        let backend = crate::backend::health::tests::backend(
            only,
            "policy = \"fastest\"\nfastest_interval = \"10ms\"",
        );
        let runtime = Arc::new(BackendRuntime::new(Arc::new(backend)));
        let cancel = CancellationToken::new();
        let task = tokio::spawn(run(runtime.clone(), cancel.clone()));
        // Some 60 rounds' worth of time, and no probe.
        let probed = tokio::time::timeout(Duration::from_millis(300), listener.accept()).await;
        assert!(probed.is_err(), "a lone address was probed");
        assert_eq!(runtime.selection.ranking.preferred(), None);
        cancel.cancel();
        task.await.unwrap();
    }

    #[test]
    fn full_jitter_stays_below_the_interval_and_varies() {
        let max = Duration::from_millis(200);
        let draws: Vec<Duration> = (0..64).map(|_| full_jitter(max)).collect();
        assert!(draws.iter().all(|d| *d < max));
        let distinct: std::collections::HashSet<_> = draws.iter().collect();
        assert!(distinct.len() > 32, "{draws:?}");
        assert!(draws.iter().any(|d| *d < max / 2) && draws.iter().any(|d| *d >= max / 2));
        assert_eq!(full_jitter(Duration::ZERO), Duration::ZERO);
    }
}
