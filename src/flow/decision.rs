//! The one decision after the hello, for a TCP connection and a QUIC flow
//! alike ([`decide`]): no socket, no await, no clock, but it counts the
//! admission slots it takes and enters the route's drain guard. Its
//! inputs are the listener's [`Generation`], who the arrival is
//! ([`Arrived`]) and its parsed ClientHello with its JA4; its answer is
//! carried out once, for both transports, by [`crate::flow::carry_out`].
//!
//! In order, each step ending the decision when it refuses:
//! 1. admit on the hello: a `limit_key` with the JA4 counts now
//!    ([`crate::admission::Admission::after_hello`]; the lists were judged
//!    at the gate, [`crate::flow::gate`]); refused: no alert;
//! 2. route: the name, ALPN, TLS version, ECH and JA4 rules
//!    ([`crate::flow::route::RouteTable::decide_with`]); refused: the TLS
//!    alert of the one table ([`crate::wire::alert`]);
//! 3. admit on the route (`[route.limits]`, `max_connections`,
//!    [`crate::admission::RouteGate`]); refused: no alert;
//! 4. the backend's runtime in the generation; missing: `no_address`.
//!
//! Routed ([`Routed`]), the answer holds what the connection keeps: its
//! route entry and backend runtime, the admission slots counted here and
//! the route's drain guard, entered. HelloRefused ([`HelloRefused`]), it holds the
//! close reason and the alert to send, if any. Either way the log fields
//! the hello gave (SNI, ECH, ALPN) and what a dry run would have refused
//! ([`DryRun`], logged here) come with it; [`HelloRefused::count`] counts
//! a refusal after the hello on either transport (the gate counts its own
//! in the same series, [`crate::flow::gate`]).
//!
//! Not here: reading the hello, the admission before it (the gate, the
//! preface), connecting, or writing the log line ([`crate::flow::access`]).

use crate::addr::{ClaimedAddr, PeerAddr};
use crate::admission::{self, Admitted, Refusal, RouteAdmitted, Source};
use crate::backend::BackendRuntime;
use crate::close_reason::CloseReason;
use crate::config::Listener;
use crate::drain::DrainGuard;
use crate::flow::access::Heard;
use crate::flow::gate::{DryRun, is_trusted_peer};
use crate::flow::generation::Generation;
use crate::flow::route::{RouteEntry, RoutedTo};
use crate::metrics::ListenerMetrics;
use crate::wire::client_hello::ClientHello;

use tracing::Level;

/// Who arrived: the measured peer and, behind a trusted peer relay, the
/// client its PROXY header claims (a QUIC flow claims nothing).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Arrived {
    pub peer: PeerAddr,
    pub claimed: Option<ClaimedAddr>,
}

impl Arrived {
    /// Whom per-source limits count after the hello: the claimed client,
    /// the measured peer of a direct client, or nobody for a trusted
    /// peer's own connection ([`admission::route_source`]).
    pub(crate) fn source(self, listener: &Listener) -> Option<Source> {
        let trusted_peer = is_trusted_peer(listener, self.peer);
        admission::route_source(self.peer, trusted_peer, self.claimed)
    }
}

/// What was decided after one hello.
#[derive(Debug)]
pub(crate) struct AfterHello<'g> {
    /// The log fields the route decision read off the hello; `None` when
    /// the hello was refused before routing (at its admission).
    pub heard: Option<Heard>,
    /// What dry runs would have refused: the hello's admission, then the
    /// route's.
    pub dry_runs: [Option<DryRun<'g>>; 2],
    pub outcome: Result<Routed<'g>, HelloRefused<'g>>,
}

/// A routed hello: where it goes and what it holds meanwhile.
#[derive(Debug)]
pub(crate) struct Routed<'g> {
    /// The route (name, backend, timeouts, bandwidth limits) and the
    /// drain slot of the identity it took.
    pub entry: RoutedTo<'g>,
    /// The backend's runtime in the generation.
    pub runtime: &'g BackendRuntime,
    /// Whom per-source limits counted ([`Arrived::source`]).
    pub source: Option<Source>,
    /// The slot the hello's admission counted (a `limit_key` with the
    /// JA4), which replaces the one taken at the gate.
    pub admitted: Option<Admitted>,
    /// Its place under the route's limits, if the route has any.
    pub route_slot: Option<RouteAdmitted>,
    /// Registered with the route's drain signal until dropped.
    pub drain: DrainGuard,
}

/// A refused hello: why, and what the client is told.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HelloRefused<'g> {
    pub reason: CloseReason,
    /// The TLS alert description to send ([`crate::wire::alert`]), or
    /// `None`: closed at once, nothing sent.
    pub alert: Option<u8>,
    /// The route the hello took before its limits refused it (logged).
    pub route: Option<&'g RouteEntry>,
    /// HelloRefused by admission limits (counted as such).
    limit: bool,
}

impl HelloRefused<'_> {
    /// A refusal by the listener's admission (at the gate, after a
    /// preface or after the hello).
    pub(crate) fn by_admission(refusal: Refusal) -> HelloRefused<'static> {
        HelloRefused {
            reason: refusal.into(),
            alert: None,
            route: None,
            limit: true,
        }
    }

    /// Counts the refusal in the listener's series, the one way either
    /// transport does: a refusal by limits in `limit_refusals` (the close
    /// itself is counted when its record closes).
    pub(crate) fn count(&self, metrics: &ListenerMetrics) {
        if self.limit {
            metrics.limit_refused(self.reason);
        }
    }
}

impl<'g> AfterHello<'g> {
    /// Logs what dry runs would have refused.
    fn log_dry_runs(&self, listener: &Listener, peer: PeerAddr) {
        for dry in self.dry_runs.iter().flatten() {
            dry.log(listener, peer);
        }
    }

    fn refused(
        refused: HelloRefused<'g>,
        heard: Option<Heard>,
        dry_runs: [Option<DryRun<'g>>; 2],
    ) -> Self {
        AfterHello {
            heard,
            dry_runs,
            outcome: Err(refused),
        }
    }
}

/// The `alpn` log field: the hello's ALPN protocols, comma-separated and
/// escaped (a hostile name cannot forge log lines); `None` when the hello
/// offered none or no access line can be written (formatting allocates,
/// and WARN is the most verbose level an access line is written at).
pub(crate) fn alpn_field(alpn: &[Vec<u8>]) -> Option<Box<str>> {
    if alpn.is_empty() || !tracing::enabled!(target: "snirelay::access", Level::WARN) {
        return None;
    }
    let names: Vec<_> = alpn.iter().map(|p| String::from_utf8_lossy(p)).collect();
    Some(names.join(",").escape_debug().to_string().into_boxed_str())
}

/// Decides what becomes of a hello from `arrived` under `generation`
/// (see the module header for the steps); `ja4` is the hello's
/// fingerprint, `None` when none was computed. What dry runs would have
/// refused is logged (at debug) before the answer is returned.
pub(crate) fn decide<'g>(
    generation: &'g Generation,
    arrived: Arrived,
    hello: &ClientHello,
    ja4: Option<&str>,
) -> AfterHello<'g> {
    let decided = decided(generation, arrived, hello, ja4);
    decided.log_dry_runs(&generation.listener, arrived.peer);
    decided
}

/// [`decide`]'s steps, before its dry runs are logged.
fn decided<'g>(
    generation: &'g Generation,
    arrived: Arrived,
    hello: &ClientHello,
    ja4: Option<&str>,
) -> AfterHello<'g> {
    let Generation {
        listener,
        routes,
        admission,
        route_gates,
        backends,
        ..
    } = generation;
    let source = arrived.source(listener);
    let mut dry_runs = [None, None];

    // admit on the hello
    let admitted = match admission.after_hello(source, ja4) {
        Ok(admitted) => admitted,
        Err(refusal) => {
            return AfterHello::refused(HelloRefused::by_admission(refusal), None, dry_runs);
        }
    };
    dry_runs[0] = admitted.as_ref().and_then(|a| DryRun::of(None, a));

    // route
    let decision = routes.decide_with(hello, ja4);
    let heard = Heard {
        sni: decision.sni,
        ech: decision.ech,
        alpn: alpn_field(&hello.alpn),
    };
    let target = match decision.target {
        Ok(target) => target,
        Err(no_route) => {
            let refused = HelloRefused {
                reason: no_route.into(),
                alert: Some(no_route.alert()),
                route: None,
                limit: false,
            };
            return AfterHello::refused(refused, Some(heard), dry_runs);
        }
    };

    let entry = target.entry;

    // admit on the route
    let route_slot = match route_gates.get(&entry.route) {
        None => None,
        Some(gate) => match gate.admit_with(source, ja4) {
            Ok(slot) => {
                dry_runs[1] = slot
                    .source
                    .as_ref()
                    .and_then(|a| DryRun::of(Some(&entry.route), a));
                Some(slot)
            }
            Err(refusal) => {
                let refused = HelloRefused {
                    reason: refusal.into(),
                    alert: None,
                    route: Some(entry),
                    limit: true,
                };
                return AfterHello::refused(refused, Some(heard), dry_runs);
            }
        },
    };

    // the backend's runtime
    let Some(runtime) = backends.get(&entry.backend.name) else {
        let refused = HelloRefused {
            reason: CloseReason::NoAddress,
            alert: None,
            route: Some(entry),
            limit: false,
        };
        return AfterHello::refused(refused, Some(heard), dry_runs);
    };
    AfterHello {
        heard: Some(heard),
        dry_runs,
        outcome: Ok(Routed {
            entry: target,
            runtime,
            source,
            admitted,
            route_slot,
            drain: target.drain.enter(),
        }),
    }
}

#[cfg(test)]
mod tests;
