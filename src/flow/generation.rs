//! A listener's generation: everything one accept reads, published as one
//! value.
//!
//! A reload used to publish a listener's settings and routes, its admission
//! state, the backends' run-time state and the accept pacing on four
//! separate channels, one after another, so an accept on another worker
//! could pair a new route table with the old backends (a route whose
//! backend the reload added then found no backend and closed with
//! `no_address`). A [`Generation`] holds all four; the server builds the
//! whole value and publishes it with one `watch::Sender::send_replace`, and
//! an accept loop reads exactly one generation per accepted connection,
//! which the connection keeps for life.
//!
//! [`Generation::first`] and [`Generation::next`] build one from the
//! validated listener and the previous generation, the way
//! `Backends::start` carries backend state over: the route table keeps the
//! drain signals of unchanged identities, the admission state stays unless
//! the limits changed, and when they changed the per-source counts of
//! connections still open carry over (`Admission::next`), so a lowered
//! cap holds at once. Each route's admission (`[route.limits]`,
//! `max_connections`) is carried the same way, by route name.
//!
//! Not here: building the parts ([`crate::config`], [`crate::flow::route`],
//! [`crate::admission`], [`crate::backend`]), the reload's diff for the log
//! ([`crate::run::reload`]), or publishing ([`crate::run::listener_set`]).
//!
//! Cost: one `Arc` clone per accept (the loop re-reads the generation only
//! when a reload has published a new one: an atomic version check).

use std::collections::HashMap;
use std::sync::Arc;

use governor::clock::DefaultClock;

use crate::admission::{Admission, RouteGate};
use crate::backend::Backends;
use crate::close_reason::CloseReason;
use crate::config::{Limits, Listener, NoSni};
use crate::flow::route::RouteTable;

/// Process-wide accept pacing (`global.max_connection_rate`, see
/// [`crate::admission::pace`]), shared by every listener's generations.
pub(crate) type SharedPace = Arc<crate::admission::pace::Pace>;

/// One listener's state as of one reload (or the start).
pub(crate) struct Generation {
    /// The listener's validated settings.
    pub listener: Arc<Listener>,
    /// Its routes: each pattern (and the no-SNI fallback) with its backend
    /// and drain signal, carried over from the previous generation where
    /// the identity is unchanged.
    pub routes: RouteTable,
    /// Its admission state: carried over from the previous generation
    /// unless the reload changed `[listener.limits]`, and even then built
    /// on the same per-source counts (`Admission::next`).
    pub admission: Arc<Admission>,
    /// Per-route admission, by route name; only routes with
    /// `[route.limits]` or `max_connections` have a gate.
    pub route_gates: RouteGates,
    /// Every backend's run-time state (shared by all listeners).
    pub backends: Arc<Backends>,
    /// Accept pacing, shared by every listener; `None` when unpaced.
    pub pace: Option<SharedPace>,
}

impl Generation {
    /// A listener's first generation: fresh admission tables and drain
    /// signals.
    pub(crate) fn first(
        listener: Arc<Listener>,
        backends: &Arc<Backends>,
        pace: &Option<SharedPace>,
    ) -> Generation {
        Generation {
            routes: RouteTable::build(&listener, None),
            admission: Arc::new(Admission::new(&listener.limits)),
            route_gates: RouteGates::build(&listener, None),
            listener,
            backends: backends.clone(),
            pace: pace.clone(),
        }
    }

    /// Creates at zero every per-listener series this generation's
    /// configuration implies (see
    /// [`Metrics::listener_series`](crate::metrics::registry::Metrics::listener_series)):
    /// bytes for each route and the backend it sends to (an ECH
    /// diversion's too), `no_sni` and the fallback backend, and a refusal
    /// series for each configured limit, the listener's and its routes'.
    /// Called when a listener starts and at each reload.
    pub(crate) fn create_series(&self) {
        let listener = &*self.listener;
        let mut traffic: Vec<(&str, &str)> = Vec::new();
        for route in &listener.routes {
            traffic.push((&route.name, &route.backend.name));
            if let Some(ech) = crate::flow::route::ech_backend(Some(route), listener) {
                traffic.push((&route.name, &ech.name));
            }
        }
        if let NoSni::Backend(backend) = &listener.no_sni {
            traffic.push(("no_sni", &backend.name));
        }
        traffic.sort_unstable();
        traffic.dedup();
        let mut limits = limit_refusals(
            &listener.limits,
            [
                CloseReason::Denied,
                CloseReason::LimitConcurrent,
                CloseReason::LimitRate,
            ],
        );
        for route in &listener.routes {
            if let Some(route_limits) = &route.limits {
                limits.extend(limit_refusals(
                    route_limits,
                    [
                        CloseReason::RouteDenied,
                        CloseReason::RouteLimitConcurrent,
                        CloseReason::RouteLimitRate,
                    ],
                ));
            }
            if route.max_connections.is_some() {
                limits.push(CloseReason::RouteFull);
            }
        }
        limits.sort_unstable_by_key(|r| *r as usize);
        limits.dedup();
        crate::metrics::metrics().listener_series(
            &listener.name,
            listener.protocol.as_str(),
            &traffic,
            &limits,
        );
    }

    /// For unit tests: listener `edge` on 127.0.0.1:0 with one route,
    /// `example.com`, to backend `origin` at 127.0.0.1:9 (nothing there).
    #[cfg(test)]
    pub(crate) fn for_tests() -> Arc<Generation> {
        let config = crate::config::Config::from_toml(
            r#"
            [[listener]]
            name = "edge"
            listen = ["127.0.0.1:0"]
            [[route]]
            sni = ["example.com"]
            backend = "origin"
            [backend.origin]
            addresses = ["127.0.0.1:9"]
            "#,
            std::path::Path::new("tests.toml"),
        )
        .expect("the test configuration is valid");
        let backends = Arc::new(Backends::start(&config.backends, None));
        Arc::new(Generation::first(
            config.listeners[0].clone(),
            &backends,
            &None,
        ))
    }

    /// The generation after `self` for a reloaded `listener` of the same
    /// name: route identities that are unchanged keep their drain signals,
    /// the admission state carries over unless `[listener.limits]`
    /// changed, and then its per-source counts still carry over.
    pub(crate) fn next(
        &self,
        listener: Arc<Listener>,
        backends: &Arc<Backends>,
        pace: &Option<SharedPace>,
    ) -> Generation {
        let admission = if self.admission.limits() == &listener.limits {
            self.admission.clone()
        } else {
            tracing::info!(listener = %listener.name, "admission limits changed; open connections stay counted");
            Arc::new(
                self.admission
                    .next(&listener.limits, DefaultClock::default()),
            )
        };
        Generation {
            routes: RouteTable::build(&listener, Some(&self.routes)),
            admission,
            route_gates: RouteGates::build(&listener, Some(&self.route_gates)),
            listener,
            backends: backends.clone(),
            pace: pace.clone(),
        }
    }
}

/// The refusals `limits` can make, from `[denied, concurrent, rate]`:
/// `denied` with an `allow` or `deny` list, `concurrent` with
/// `connections_per_source`, `rate` with a connection or attempt rate.
fn limit_refusals(
    limits: &Limits,
    [denied, concurrent, rate]: [CloseReason; 3],
) -> Vec<CloseReason> {
    let mut kinds = Vec::new();
    if !limits.allow.is_empty() || !limits.deny.is_empty() {
        kinds.push(denied);
    }
    if limits.connections_per_source.is_some() {
        kinds.push(concurrent);
    }
    if limits.rate_per_source.is_some() || limits.attempts_per_source.is_some() {
        kinds.push(rate);
    }
    kinds
}

/// A listener's route gates, by route name (route names are unique per
/// listener among routes with limits; validation sees to it).
#[derive(Debug, Default)]
pub(crate) struct RouteGates {
    gates: HashMap<Box<str>, Arc<GateFor>>,
}

/// A gate and the settings it was built from, to tell whether a reload
/// changed them.
#[derive(Debug)]
struct GateFor {
    limits: Option<crate::admission::Limits>,
    max_connections: Option<std::num::NonZeroU32>,
    gate: RouteGate,
}

impl RouteGates {
    /// The gates of `listener`'s routes: a route whose settings are
    /// unchanged from `previous` keeps its gate; a changed one gets a new
    /// gate that keeps the counts of open connections.
    pub(crate) fn build(listener: &Listener, previous: Option<&RouteGates>) -> RouteGates {
        let mut gates = HashMap::new();
        for route in &listener.routes {
            let was = previous.and_then(|p| p.gates.get(route.name.as_str()));
            let kept = was.filter(|was| {
                was.limits == route.limits && was.max_connections == route.max_connections
            });
            let gate = match kept {
                Some(kept) => kept.clone(),
                None => {
                    let next = RouteGate::next(
                        was.map(|w| &w.gate),
                        route.limits.as_ref(),
                        route.max_connections,
                    );
                    let Some(gate) = next else { continue };
                    Arc::new(GateFor {
                        limits: route.limits.clone(),
                        max_connections: route.max_connections,
                        gate,
                    })
                }
            };
            gates.insert(route.name.as_str().into(), gate);
        }
        RouteGates { gates }
    }

    /// The gate of the route named `route`, if it has one. Costs a hash of
    /// the name, and nothing when no route of the listener has a gate.
    pub(crate) fn get(&self, route: &str) -> Option<&RouteGate> {
        if self.gates.is_empty() {
            return None;
        }
        self.gates.get(route).map(|g| &g.gate)
    }

    /// The routes whose `[route.limits]` keep a per-source table, each
    /// with its admission state (for `/sources`).
    pub(crate) fn sources(&self) -> impl Iterator<Item = (&str, &crate::admission::Admission)> {
        self.gates
            .iter()
            .filter_map(|(name, g)| Some((&**name, g.gate.sources()?)))
    }

    /// Sweeps every gate's per-source tables; returns their sources and
    /// evictions in all.
    pub(crate) fn sweep(&self) -> (usize, u64) {
        self.gates
            .values()
            .fold((0, 0), |(sources, evicted), gate| {
                gate.gate.sweep();
                let tracked = gate.gate.sources().map(|a| a.tracked());
                (
                    sources + tracked.map_or(0, |t| t.sources),
                    evicted + tracked.map_or(0, |t| t.evicted),
                )
            })
    }
}
