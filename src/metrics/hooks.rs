//! The recording calls of stages built elsewhere: reloads, drain, backend
//! lookups, `source` addresses that ran out of ports, bandwidth throttles,
//! local name pushes, QUIC flows' address validation (unvalidated flows,
//! their closes, datagrams held back at the 3x limit), the admin
//! listener's connections, control requests
//! and forwards, the socket log targets' lines. Each is a counter or gauge
//! of fixed words (hence `&'static str`), or a counter handed to the
//! stage to hold.
//!
//! Not here: a listener's and a backend's own series
//! ([`super::listener`], [`super::backends`]); the families
//! ([`super::registry`]).

use std::net::IpAddr;
use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;

use super::labels::{
    CacheShareLabels, ControlLabels, LogDropLabels, LogTargetLabels, LookupLabels,
    LookupLimitLabels, OutcomeLabels, ReasonLabels, SourceLabels, TableLabels, ThrottleLabels,
};
use super::registry::Metrics;

impl Metrics {
    // Hooks for stages built elsewhere. Label values must stay bounded:
    // `kind` and `outcome` are fixed words (hence `&'static str`).

    /// `listener`'s admission tables hold `sources` now, and evicted
    /// `evicted` more at their bound since the last report.
    pub(crate) fn admission_tables(&self, listener: &str, sources: usize, evicted: u64) {
        let labels = TableLabels {
            listener: listener.to_owned(),
        };
        self.admission_sources
            .get_or_create(&labels)
            .set(i64::try_from(sources).unwrap_or(i64::MAX));
        self.admission_evicted
            .get_or_create(&labels)
            .inc_by(evicted);
    }

    /// A configuration reload finished; `outcome` is `ok` or `failed`.
    pub(crate) fn reload(&self, outcome: &'static str) {
        self.reloads.get_or_create(&OutcomeLabels { outcome }).inc();
    }

    /// A push of the local name set: `outcome` is `ok`, `bad_request`,
    /// `unauthorized`, ... (as the control actions).
    /// A request for a path the admin listener does not serve was
    /// forwarded (`ok`: the upstream answered, whatever its status) or not
    /// (`too_large`, `request_timeout`, `unreachable`, `upstream_error`,
    /// `timeout`, `loop`, `bad_method`).
    pub(crate) fn admin_forwarded(&self, outcome: &'static str) {
        self.admin_forwarded
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// The counter of lines written to the socket log `target`
    /// (`syslog`, `journald`), for the writer thread to hold.
    pub(crate) fn log_lines_sent(&self, target: &'static str) -> Counter {
        self.log_sent
            .get_or_create(&LogTargetLabels { target })
            .clone()
    }

    /// The counter of lines dropped before the socket log `target`, for
    /// `reason` (`queue_full`, `send_failed`).
    /// A QUIC flow's client datagram was dropped: not even the minimal
    /// PROXY v2 header fits it under the backend's `max_datagram_size`.
    pub(crate) fn datagram_too_large(&self) {
        self.proxy_datagrams_too_large.inc();
    }

    /// Open QUIC flows not validated yet, by `delta` (process-wide).
    pub(crate) fn quic_unvalidated(&self, delta: i64) {
        self.quic_unvalidated.inc_by(delta);
    }

    /// An open QUIC flow closed before it validated, for `reason` (a close
    /// reason's fixed name: `evicted`, `unvalidated`, `max_connections`).
    pub(crate) fn quic_unvalidated_closed(&self, reason: &'static str) {
        self.quic_unvalidated_closed
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    /// A backend datagram toward an unvalidated QUIC client was dropped at
    /// the 3x anti-amplification limit.
    pub(crate) fn quic_amplification_dropped(&self) {
        self.quic_amplification_dropped.inc();
    }

    /// The counter of a backend `source` address that ran out of ports,
    /// resolved once per backend runtime.
    pub(crate) fn source_address_exhausted(&self, backend: &str, source: IpAddr) -> Counter {
        self.source_exhausted.get_or_create_owned(&SourceLabels {
            backend: backend.to_owned(),
            source: source.to_string(),
        })
    }

    pub(crate) fn log_lines_dropped(&self, target: &'static str, reason: &'static str) -> Counter {
        self.log_dropped
            .get_or_create(&LogDropLabels { target, reason })
            .clone()
    }

    /// The throttled-time counter of `direction` (`up`, `down`) on a
    /// limited route, for its connections' throttles to hold (made when
    /// the route table is built, so it shows at zero).
    pub(crate) fn throttled(
        &self,
        listener: &str,
        route: &str,
        direction: &'static str,
    ) -> Counter<f64, AtomicU64> {
        self.throttled
            .get_or_create(&ThrottleLabels {
                listener: listener.to_owned(),
                route: route.to_owned(),
                direction,
            })
            .clone()
    }

    pub(crate) fn local_name_push(&self, outcome: &'static str) {
        self.local_name_pushes
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// How many pushed local names are in force.
    pub(crate) fn set_local_names(&self, names: usize) {
        self.local_names.set(names as i64);
    }

    /// The number of connections being drained now (stop or reload).
    pub(crate) fn set_draining(&self, connections: i64) {
        self.draining.set(connections);
    }

    /// One backend address lookup: `kind` is `dns` or `cluster`, `outcome`
    /// is `ok`, `error`, `empty` or `cache_hit`.
    pub(crate) fn lookup(&self, kind: &'static str, outcome: &'static str) {
        self.lookups
            .get_or_create(&LookupLabels { kind, outcome })
            .inc();
    }

    /// The lookup series of `kind` (`dns` or `cluster`) at zero: `ok`,
    /// `empty`, `error`, and `cache_hit` for a cluster. Called when a
    /// backend of that kind starts.
    pub(crate) fn lookup_series(&self, kind: &'static str) {
        let cluster = kind == "cluster";
        for outcome in ["ok", "empty", "error", "cache_hit"] {
            if outcome != "cache_hit" || cluster {
                let _ = self.lookups.get_or_create(&LookupLabels { kind, outcome });
            }
        }
    }

    /// The counter of the names a cluster backend's cache share `share`
    /// (`answered`, `unanswered`) evicted, resolved once per cache.
    pub(crate) fn cluster_cache_evicted(&self, backend: &str, share: &'static str) -> Counter {
        self.cluster_cache_evicted
            .get_or_create_owned(&CacheShareLabels {
                backend: backend.to_owned(),
                share,
            })
    }

    /// The counter of a cluster backend's lookups refused by `limit`
    /// (`in_flight`, `new_names`), resolved once per backend runtime.
    pub(crate) fn lookups_limited(&self, backend: &str, limit: &'static str) -> Counter {
        self.lookups_limited
            .get_or_create_owned(&LookupLimitLabels {
                backend: backend.to_owned(),
                limit,
            })
    }

    /// A connection to the admin listener was accepted.
    pub(crate) fn admin_opened(&self) {
        self.admin_open.inc();
    }

    /// The admin listener's closed series for `reason` at zero (called for
    /// each reason when it starts).
    pub(crate) fn admin_close_series(&self, reason: &'static str) {
        let _ = self.admin_closed.get_or_create(&ReasonLabels { reason });
    }

    /// A connection to the admin listener closed; `reason` is a fixed word
    /// of [`crate::admin`].
    pub(crate) fn admin_closed(&self, reason: &'static str) {
        self.admin_open.dec();
        self.admin_closed
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    /// A control request: `kind` names the action (`address_state`, ...),
    /// `outcome` how it ended (`ok`, `unauthorized`, `forbidden`,
    /// `bad_request`, `not_found`, ...). Both are fixed words.
    pub(crate) fn control_action(&self, kind: &'static str, outcome: &'static str) {
        self.control_actions
            .get_or_create(&ControlLabels { kind, outcome })
            .inc();
    }
}
