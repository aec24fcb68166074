//! A listener's series, resolved ahead of its connections: [`ListenerMetrics`]
//! (accepted, active, ECH hellos; close reasons, hello outcomes and limit
//! refusals on first use; bytes by route and backend), what a closed
//! connection contributes ([`Closed`]), and [`Metrics::listener`], which
//! makes the handle once per accept loop.
//!
//! Not here: the families these series belong to ([`super::registry`]), a
//! backend's connect series ([`super::backends`]), the close stage that
//! builds a [`Closed`] ([`crate::flow::access`]).

use std::sync::{Arc, OnceLock, RwLock};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

use super::labels::{
    CloseLabels, HelloLabels, LimitLabels, ListenerLabels, ReasonLabels, TableLabels, TrafficLabels,
};
use super::registry::{Metrics, metrics};
use crate::close_reason::{CloseReason, HelloOutcome};

/// What a closed connection contributes to the metrics; built by
/// [`crate::flow::access::ConnRecord::close`] from what the stages learned.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Closed<'a> {
    pub route: Option<&'a str>,
    pub backend: Option<&'a str>,
    pub reason: CloseReason,
    /// The ClientHello carried an SNI (valid or not).
    pub sni: bool,
    pub ech: bool,
    pub bytes_up: u64,
    pub bytes_down: u64,
}

impl Closed<'_> {
    /// The ClientHello's outcome (see [`CloseReason::hello_outcome`]).
    pub(crate) fn hello(&self) -> HelloOutcome {
        self.reason.hello_outcome(self.route.is_some(), self.sni)
    }

    #[cfg(test)]
    /// The ClientHello's outcome, a fixed word: `sni` and `no_sni` for a
    /// complete hello, otherwise why none was read.
    pub(crate) fn hello_outcome(&self) -> &'static str {
        self.hello().as_str()
    }
}

/// Slots for per-close-reason series: more than [`CloseReason`] has
/// variants (a reason past the last slot still counts, through the family).
const REASON_SLOTS: usize = 48;
const _: () = assert!(CloseReason::ALL.len() <= REASON_SLOTS);

/// Route → backend → (bytes up, bytes down) counters.
/// foldhash: looked up at every connection's close (see [`crate::wire::matcher`]).
type TrafficSeries = foldhash::HashMap<Box<str>, foldhash::HashMap<Box<str>, (Counter, Counter)>>;

/// One listener's series, resolved ahead of its connections (see the
/// module header): recording a connection is atomic adds, no allocation
/// and no lock on the metric families once each word has been seen.
pub struct ListenerMetrics {
    name: Box<str>,
    /// The `protocol` label of every series (see [`Metrics::listener`]).
    protocol: &'static str,
    accepted: Counter,
    active: Gauge,
    /// Made on the first ECH hello, like the family's other series.
    hello_ech: OnceLock<Counter>,
    /// By `CloseReason as usize`.
    closed: [OnceLock<Counter>; REASON_SLOTS],
    /// Admission refusals, by `CloseReason as usize`.
    refused: [OnceLock<Counter>; REASON_SLOTS],
    /// By `HelloOutcome as usize`.
    hello: [OnceLock<Counter>; HelloOutcome::ALL.len()],
    /// Route → backend → (bytes up, bytes down).
    traffic: RwLock<TrafficSeries>,
}

impl std::fmt::Debug for ListenerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenerMetrics")
            .field("listener", &self.name)
            .finish_non_exhaustive()
    }
}

impl ListenerMetrics {
    /// A connection was accepted (it is now active).
    pub(crate) fn accepted(&self) {
        self.accepted.inc();
        self.active.inc();
    }

    /// A connection ended: its close reason, hello outcome, bytes; it is no
    /// longer active. Called exactly once per accepted connection.
    pub(crate) fn closed(&self, c: &Closed<'_>) {
        let m = metrics();
        self.active.dec();
        let reason = c.reason;
        self.count(&self.closed, reason, |listener| {
            m.closed.get_or_create_owned(&CloseLabels {
                listener,
                protocol: self.protocol,
                reason: reason.as_str(),
            })
        });
        let outcome = c.hello();
        self.hello[outcome as usize]
            .get_or_init(|| {
                m.hello.get_or_create_owned(&HelloLabels {
                    listener: self.name.to_string(),
                    protocol: self.protocol,
                    outcome: outcome.as_str(),
                })
            })
            .inc();
        if c.ech {
            self.hello_ech
                .get_or_init(|| {
                    m.hello_ech.get_or_create_owned(&ListenerLabels {
                        listener: self.name.to_string(),
                        protocol: self.protocol,
                    })
                })
                .inc();
        }
        if c.bytes_up > 0 || c.bytes_down > 0 {
            let (route, backend) = (c.route.unwrap_or(""), c.backend.unwrap_or(""));
            let add = |(up, down): &(Counter, Counter)| {
                up.inc_by(c.bytes_up);
                down.inc_by(c.bytes_down);
            };
            let known = self.traffic.read().unwrap_or_else(|e| e.into_inner());
            if let Some(series) = known.get(route).and_then(|b| b.get(backend)) {
                return add(series);
            }
            drop(known);
            let labels = TrafficLabels {
                listener: self.name.to_string(),
                protocol: self.protocol,
                route: route.to_owned(),
                backend: backend.to_owned(),
            };
            let mut known = self.traffic.write().unwrap_or_else(|e| e.into_inner());
            let series = known
                .entry(route.into())
                .or_default()
                .entry(backend.into())
                .or_insert_with(|| {
                    (
                        m.bytes_up.get_or_create_owned(&labels),
                        m.bytes_down.get_or_create_owned(&labels),
                    )
                });
            add(series);
        }
    }

    /// A connection refused at admission; `reason` is `limit_concurrent`,
    /// `limit_rate` or `denied` (the `kind` label).
    pub(crate) fn limit_refused(&self, reason: CloseReason) {
        self.count(&self.refused, reason, |listener| {
            metrics().limit_refusals.get_or_create_owned(&LimitLabels {
                listener,
                protocol: self.protocol,
                kind: reason.as_str(),
            })
        });
    }

    /// Counts one `reason` in `slots`; its counter is made by
    /// `make(listener name)` on first use.
    /// Admission refusals counted with `reason` so far.
    #[cfg(test)]
    pub(crate) fn limit_refusals(&self, reason: CloseReason) -> u64 {
        self.refused
            .get(reason as usize)
            .and_then(OnceLock::get)
            .map_or(0, Counter::get)
    }

    fn count(
        &self,
        slots: &[OnceLock<Counter>; REASON_SLOTS],
        reason: CloseReason,
        make: impl FnOnce(String) -> Counter,
    ) {
        match slots.get(reason as usize) {
            Some(slot) => slot.get_or_init(|| make(self.name.to_string())).inc(),
            None => make(self.name.to_string()).inc(),
        };
    }
}

impl Metrics {
    /// Every series `listener`'s configuration implies, created at zero
    /// where new (existing ones keep their values, so this is called at
    /// start and again at each reload): accepted, active and ECH hellos,
    /// each close reason and hello outcome a listener of `protocol` can
    /// produce, the limit refusals of the configured `limits` (the close
    /// reasons counted as refusals), bytes both ways for each (route,
    /// backend) of `traffic`, and its admission tables' gauges. Bounded by
    /// the configuration: about 60 series per listener plus two per
    /// (route, backend).
    pub(crate) fn listener_series(
        &self,
        listener: &str,
        protocol: &'static str,
        traffic: &[(&str, &str)],
        limits: &[CloseReason],
    ) {
        let labels = ListenerLabels {
            listener: listener.to_owned(),
            protocol,
        };
        let _ = self.accepted.get_or_create(&labels);
        let _ = self.active.get_or_create(&labels);
        let _ = self.hello_ech.get_or_create(&labels);
        let mut outcomes = vec![HelloOutcome::Sni];
        for &reason in CloseReason::ALL {
            if !reason.transport().includes(protocol) {
                continue;
            }
            let _ = self.closed.get_or_create(&CloseLabels {
                listener: listener.to_owned(),
                protocol,
                reason: reason.as_str(),
            });
            for sni in [true, false] {
                let outcome = reason.hello_outcome(false, sni);
                if !outcomes.contains(&outcome) {
                    outcomes.push(outcome);
                }
            }
        }
        for outcome in outcomes {
            let _ = self.hello.get_or_create(&HelloLabels {
                listener: listener.to_owned(),
                protocol,
                outcome: outcome.as_str(),
            });
        }
        for kind in limits {
            let _ = self.limit_refusals.get_or_create(&LimitLabels {
                listener: listener.to_owned(),
                protocol,
                kind: kind.as_str(),
            });
        }
        for &(route, backend) in traffic {
            let labels = TrafficLabels {
                listener: listener.to_owned(),
                protocol,
                route: route.to_owned(),
                backend: backend.to_owned(),
            };
            let _ = self.bytes_up.get_or_create(&labels);
            let _ = self.bytes_down.get_or_create(&labels);
        }
        if protocol == "quic" {
            // Process-wide: the same three series for every QUIC listener.
            for reason in [
                CloseReason::Evicted,
                CloseReason::Unvalidated,
                CloseReason::MaxConnections,
            ] {
                let _ = self.quic_unvalidated_closed.get_or_create(&ReasonLabels {
                    reason: reason.as_str(),
                });
            }
        }
        let table = TableLabels {
            listener: listener.to_owned(),
        };
        let _ = self.admission_sources.get_or_create(&table);
        let _ = self.admission_evicted.get_or_create(&table);
    }

    /// The series of `listener`, for its accept loop and connections. Call
    /// once per accept loop, not per connection (it allocates). A listener
    /// has one `protocol` (`tcp` or `quic`, the config's word), so the
    /// label is fixed in the handle and costs nothing per connection.
    pub(crate) fn listener(&self, listener: &str, protocol: &'static str) -> Arc<ListenerMetrics> {
        let labels = ListenerLabels {
            listener: listener.to_owned(),
            protocol,
        };
        Arc::new(ListenerMetrics {
            name: listener.into(),
            protocol,
            accepted: self.accepted.get_or_create_owned(&labels),
            active: self.active.get_or_create_owned(&labels),
            hello_ech: OnceLock::new(),
            closed: [const { OnceLock::new() }; REASON_SLOTS],
            refused: [const { OnceLock::new() }; REASON_SLOTS],
            hello: [const { OnceLock::new() }; HelloOutcome::ALL.len()],
            traffic: RwLock::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn listener_handles_record_the_same_series_as_the_families() {
        let series = metrics().listener("unit_handles", "tcp");
        series.accepted();
        series.accepted();
        let closed = Closed {
            route: Some("r"),
            backend: Some("b"),
            reason: CloseReason::Done,
            sni: true,
            ech: true,
            bytes_up: 10,
            bytes_down: 20,
        };
        series.closed(&closed);
        series.closed(&Closed {
            bytes_up: 5,
            ..closed
        });
        series.limit_refused(CloseReason::LimitRate);
        let backend = metrics().backend_series("unit_handles_b");
        backend.connect_attempt(Ok(Duration::from_millis(1)));
        backend.connect_attempt(Err(()));
        let text = metrics().render();
        for line in [
            "snirelay_connections_accepted_total{listener=\"unit_handles\",protocol=\"tcp\"} 2",
            "snirelay_connections_active{listener=\"unit_handles\",protocol=\"tcp\"} 0",
            "snirelay_connections_closed_total{listener=\"unit_handles\",protocol=\"tcp\",reason=\"done\"} 2",
            "snirelay_client_hellos_total{listener=\"unit_handles\",protocol=\"tcp\",outcome=\"sni\"} 2",
            "snirelay_client_hellos_ech_total{listener=\"unit_handles\",protocol=\"tcp\"} 2",
            "snirelay_bytes_up_total{listener=\"unit_handles\",protocol=\"tcp\",route=\"r\",backend=\"b\"} 15",
            "snirelay_bytes_down_total{listener=\"unit_handles\",protocol=\"tcp\",route=\"r\",backend=\"b\"} 40",
            "snirelay_limit_refusals_total{listener=\"unit_handles\",protocol=\"tcp\",kind=\"limit_rate\"} 1",
            "snirelay_backend_connect_attempts_total{backend=\"unit_handles_b\"} 2",
            "snirelay_backend_connect_failures_total{backend=\"unit_handles_b\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line}");
        }
        // Series appear on first use only, as with the families.
        assert!(!text.contains("listener=\"unit_handles\",protocol=\"tcp\",reason=\"malformed\""));
    }

    #[test]
    fn every_close_reason_has_a_slot() {
        // The last variant; a new one past the slots still counts (through
        // the family) but loses the fast path.
        assert!((CloseReason::Denied as usize) < REASON_SLOTS);
    }

    #[test]
    fn hello_outcome_words() {
        let closed = |reason, route: Option<&'static str>, sni| Closed {
            route,
            backend: None,
            reason,
            sni,
            ech: false,
            bytes_up: 0,
            bytes_down: 0,
        };
        let outcome = |reason, route, sni| closed(reason, route, sni).hello_outcome();
        assert_eq!(outcome(CloseReason::Done, Some("r"), true), "sni");
        assert_eq!(outcome(CloseReason::Unmatched, None, true), "sni");
        assert_eq!(outcome(CloseReason::NoSni, None, false), "no_sni");
        assert_eq!(outcome(CloseReason::Silent, None, false), "empty");
        assert_eq!(outcome(CloseReason::NotTls, None, false), "not_tls");
        assert_eq!(outcome(CloseReason::Shutdown, None, false), "incomplete");
        assert_eq!(outcome(CloseReason::Shutdown, Some("r"), true), "sni");
        assert_eq!(
            outcome(CloseReason::ProxyUntrusted, None, false),
            "preface_refused"
        );
    }
}
