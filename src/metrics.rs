//! Prometheus metrics: one process-wide registry and cheap recording calls.
//!
//! The registry is process-wide (like a log subscriber): a process serves one
//! set of listeners, and a global avoids threading a handle through every
//! stage signature. Recording happens in few places:
//! [`ListenerMetrics::accepted`] from the accept loop,
//! [`ListenerMetrics::closed`] once per connection from `access::ConnRecord::close`,
//! and [`BackendSeries::connect_attempt`] from [`crate::tcp::dial`].
//! Hooks for stages built elsewhere (limits, reload, drain, DNS/cluster
//! lookups, backend address health) are the documented methods at the end.
//!
//! Labels are bounded by the configuration, never by the traffic: listener,
//! route and backend names, close reasons and fixed outcome words. Every
//! per-listener family (accepted, active, closed, bytes, hello outcomes,
//! limit refusals) also carries `protocol` (`tcp` or `quic`, the listener's
//! kind): TCP connections and QUIC flows are counted in the same families,
//! told apart by that label. Never the
//! SNI, never a client address. The one label that names a backend
//! *address* (`snirelay_backend_address_up`) is bounded per backend: at
//! most [`MAX_ADDRESS_SERIES_PER_BACKEND`] addresses, a new one past that
//! replacing the series of the address reported least recently (with DNS
//! or cluster churn, one that has left the set). `[admin] address_labels =
//! false` ([`Metrics::set_address_labels`]) drops the label altogether;
//! `snirelay_backend_addresses{backend,state}` counts up and down addresses
//! either way.
//!
//! Cost: every metric family is created at start-up. The per-connection
//! events go through handles resolved ahead of the connection, so they cost
//! atomic adds and no allocation: a listener's [`ListenerMetrics`] is made
//! once when its accept loop starts (its series never change with a reload,
//! since they are keyed on the listener's name), and holds the `accepted`,
//! `active` and `ech` counters directly; its close-reason, hello-outcome and
//! limit series are resolved on their first use (a `OnceLock` per fixed
//! word, so the exported series are exactly those that happened); its
//! (route, backend) byte counters sit in a small map under a read lock,
//! looked up by `&str`. A backend's connect series ([`BackendSeries`]) are
//! resolved once per backend runtime (see `backend`), so a connect attempt
//! is atomic adds with no lookup. Nothing is recorded per byte: byte counts are added once,
//! at close. Process gauges (open fds, RSS) are read from /proc/self only
//! when /metrics is scraped.
//!
//! The operator's address states (`snirelay_backend_address_state`) are
//! exported only for addresses an operator has set, bounded the same way
//! and dropped with `address_labels = false`; control requests are counted
//! by kind and outcome (`snirelay_admin_control_actions_total`), pushes of
//! the local name set by outcome, with a gauge of the names in force
//! (`snirelay_local_name_pushes_total`, `snirelay_local_names`), and
//! requests the admin listener forwarded by outcome
//! (`snirelay_admin_forwarded_total`), and log lines written to or dropped
//! before a syslog or journald target (`snirelay_log_lines_sent_total`,
//! `snirelay_log_lines_dropped_total`, counters the log writer holds).
//!
//! Not here: the HTTP side (see `admin`), though its own connection counts
//! are recorded here ([`Metrics::admin_opened`], [`Metrics::admin_closed`]).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, LazyLock, Mutex, OnceLock, RwLock};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::close_reason::{CloseReason, HelloOutcome};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ListenerLabels {
    listener: String,
    /// The listener's `protocol` (`tcp` or `quic`): fixed per listener.
    protocol: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CloseLabels {
    listener: String,
    /// The listener's `protocol` (`tcp` or `quic`): fixed per listener.
    protocol: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TrafficLabels {
    listener: String,
    /// The listener's `protocol` (`tcp` or `quic`): fixed per listener.
    protocol: &'static str,
    route: String,
    backend: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HelloLabels {
    listener: String,
    /// The listener's `protocol` (`tcp` or `quic`): fixed per listener.
    protocol: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendLabels {
    backend: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendAddressLabels {
    backend: String,
    address: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendStateLabels {
    backend: String,
    state: &'static str,
}

// Run-time control (issue 16).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControlLabels {
    kind: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AddressStateLabels {
    backend: String,
    address: String,
    state: &'static str,
}

/// A socket log target's series (`target` is `syslog` or `journald`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LogTargetLabels {
    target: &'static str,
}

/// A backend's `source` address (bounded by the configuration).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabels {
    backend: String,
    source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ThrottleLabels {
    listener: String,
    route: String,
    /// `up` (client → backend) or `down`.
    direction: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LogDropLabels {
    target: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabels {
    listener: String,
    /// The listener's `protocol` (`tcp` or `quic`): fixed per listener.
    protocol: &'static str,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LookupLabels {
    kind: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabels {
    version: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn connect_histogram() -> Histogram {
    // 0.5 ms .. ~8 s: loopback and LAN backends up to a black-holed address.
    Histogram::new(exponential_buckets(0.0005, 2.0, 15))
}

/// Every metric snirelay exports. Get it with [`metrics()`].
pub(crate) struct Metrics {
    registry: Registry,
    accepted: Family<ListenerLabels, Counter>,
    active: Family<ListenerLabels, Gauge>,
    closed: Family<CloseLabels, Counter>,
    bytes_up: Family<TrafficLabels, Counter>,
    bytes_down: Family<TrafficLabels, Counter>,
    hello: Family<HelloLabels, Counter>,
    hello_ech: Family<ListenerLabels, Counter>,
    connect_attempts: Family<BackendLabels, Counter>,
    connect_failures: Family<BackendLabels, Counter>,
    connect_duration: HistogramFamily<BackendLabels>,
    backend_address_up: Family<BackendAddressLabels, Gauge>,
    backend_addresses: Family<BackendStateLabels, Gauge>,
    address_series_replaced: Family<BackendLabels, Counter>,
    /// What the address health series say, and whether they carry the address.
    addresses: Mutex<AddressBook>,
    admin_open: Gauge,
    admin_closed: Family<ReasonLabels, Counter>,
    // Run-time control (issue 16).
    control_actions: Family<ControlLabels, Counter>,
    address_state: Family<AddressStateLabels, Gauge>,
    /// Backend → the addresses whose operator state is exported, oldest
    /// first (at most [`MAX_ADDRESS_SERIES_PER_BACKEND`] each).
    address_states: Mutex<HashMap<String, Vec<(SocketAddr, &'static str)>>>,
    limit_refusals: Family<LimitLabels, Counter>,
    reloads: Family<OutcomeLabels, Counter>,
    draining: Gauge,
    lookups: Family<LookupLabels, Counter>,
    open_fds: Gauge,
    max_fds: Gauge,
    resident_memory: Gauge,
    // Pushed local names (issue 17).
    local_name_pushes: Family<OutcomeLabels, Counter>,
    local_names: Gauge,
    // One base address for a Pangolin node (issue 30).
    admin_forwarded: Family<OutcomeLabels, Counter>,
    // Log lines sent to and dropped before syslog or journald.
    log_sent: Family<LogTargetLabels, Counter>,
    log_dropped: Family<LogDropLabels, Counter>,
    // Egress source addresses (issue 33).
    source_exhausted: Family<SourceLabels, Counter>,
    throttled: Family<ThrottleLabels, Counter<f64, AtomicU64>>,
}

/// One backend's connect series (clones share the family's atomics),
/// resolved once per backend runtime so a connect attempt costs atomic adds
/// only: no label, no lock.
#[derive(Clone, Debug)]
pub struct BackendSeries {
    attempts: Counter,
    failures: Counter,
    duration: Histogram,
}

impl BackendSeries {
    /// One connect attempt: `Ok(time to connect)` or `Err(())` for a
    /// failure or timeout.
    pub(crate) fn connect_attempt(&self, outcome: Result<Duration, ()>) {
        self.attempts.inc();
        match outcome {
            Ok(took) => self.duration.observe(took.as_secs_f64()),
            Err(()) => {
                self.failures.inc();
            }
        }
    }
}

/// Addresses per backend whose health is exported with an `address`
/// label. Fixed address lists are far shorter; DNS and cluster answers can
/// churn through many over weeks, and the series of an address that left
/// must not stay forever. Memory: one map entry (about 50 bytes) and one
/// series per address, so at most this many per backend; cost: a report
/// for a new address when the backend is at the cap scans its entries.
pub(crate) const MAX_ADDRESS_SERIES_PER_BACKEND: usize = 64;

/// Backend → address → (up, when last reported): the state behind the
/// address health series, kept so that they can be dropped, counted and
/// re-created when `address_labels` changes.
#[derive(Debug)]
struct AddressBook {
    labels: bool,
    reports: u64,
    backends: HashMap<String, HashMap<SocketAddr, (bool, u64)>>,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The process-wide metrics.
pub(crate) fn metrics() -> &'static Metrics {
    &METRICS
}

/// What a closed connection contributes to the metrics; built by
/// `ConnRecord::close` from what the stages learned.
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
    /// The ClientHello's outcome (see `CloseReason::hello_outcome`).
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
/// foldhash: looked up at every connection's close (see `matcher`).
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
    fn new() -> Metrics {
        let m = Metrics {
            registry: Registry::default(),
            accepted: Family::default(),
            active: Family::default(),
            closed: Family::default(),
            bytes_up: Family::default(),
            bytes_down: Family::default(),
            hello: Family::default(),
            hello_ech: Family::default(),
            connect_attempts: Family::default(),
            connect_failures: Family::default(),
            connect_duration: Family::new_with_constructor(connect_histogram),
            backend_address_up: Family::default(),
            backend_addresses: Family::default(),
            address_series_replaced: Family::default(),
            addresses: Mutex::new(AddressBook {
                labels: true,
                reports: 0,
                backends: HashMap::new(),
            }),
            admin_open: Gauge::default(),
            admin_closed: Family::default(),
            control_actions: Family::default(),
            address_state: Family::default(),
            address_states: Mutex::default(),
            limit_refusals: Family::default(),
            reloads: Family::default(),
            draining: Gauge::default(),
            lookups: Family::default(),
            open_fds: Gauge::default(),
            max_fds: Gauge::default(),
            resident_memory: Gauge::default(),
            local_name_pushes: Family::default(),
            local_names: Gauge::default(),
            admin_forwarded: Family::default(),
            log_sent: Family::default(),
            log_dropped: Family::default(),
            source_exhausted: Family::default(),
            throttled: Family::default(),
        };
        let mut registry = Registry::default();
        let r = &mut registry;
        r.register(
            "snirelay_connections_accepted",
            "Client connections accepted",
            m.accepted.clone(),
        );
        r.register(
            "snirelay_connections_active",
            "Client connections open now",
            m.active.clone(),
        );
        r.register(
            "snirelay_connections_closed",
            "Client connections closed, by close reason (the `close` log field)",
            m.closed.clone(),
        );
        r.register(
            "snirelay_bytes_up",
            "Bytes relayed from clients to backends (ClientHello included), added at close",
            m.bytes_up.clone(),
        );
        r.register(
            "snirelay_bytes_down",
            "Bytes relayed from backends to clients, added at close",
            m.bytes_down.clone(),
        );
        r.register(
            "snirelay_client_hellos",
            "ClientHello outcomes: sni, no_sni, empty, timeout, not_tls, malformed, too_large, incomplete, preface_refused",
            m.hello.clone(),
        );
        r.register(
            "snirelay_client_hellos_ech",
            "Complete ClientHellos that carried an encrypted_client_hello extension",
            m.hello_ech.clone(),
        );
        r.register(
            "snirelay_backend_connect_attempts",
            "Connect attempts to backend addresses",
            m.connect_attempts.clone(),
        );
        r.register(
            "snirelay_backend_connect_failures",
            "Connect attempts to backend addresses that failed or timed out",
            m.connect_failures.clone(),
        );
        r.register(
            "snirelay_backend_connect_duration_seconds",
            "Time to a successful backend connect",
            m.connect_duration.clone(),
        );
        r.register(
            "snirelay_backend_address_up",
            "Whether a backend address is considered healthy (1) or not (0)",
            m.backend_address_up.clone(),
        );
        r.register(
            "snirelay_backend_addresses",
            "Backend addresses whose health was reported, by state (up or down)",
            m.backend_addresses.clone(),
        );
        r.register(
            "snirelay_backend_address_series_replaced",
            "Address health series dropped to keep a backend within its address cap",
            m.address_series_replaced.clone(),
        );
        r.register(
            "snirelay_admin_connections_open",
            "Connections to the admin listener open now",
            m.admin_open.clone(),
        );
        r.register(
            "snirelay_admin_connections_closed",
            "Connections to the admin listener closed, by reason",
            m.admin_closed.clone(),
        );
        r.register(
            "snirelay_admin_control_actions",
            "Control requests to the admin listener, by kind and outcome",
            m.control_actions.clone(),
        );
        r.register(
            "snirelay_backend_address_state",
            "The operator's state of a backend address (1 for the state in force), for addresses an operator has set",
            m.address_state.clone(),
        );
        r.register(
            "snirelay_limit_refusals",
            "Connections refused by a limit, by kind",
            m.limit_refusals.clone(),
        );
        r.register(
            "snirelay_reloads",
            "Configuration reloads, by outcome",
            m.reloads.clone(),
        );
        r.register(
            "snirelay_connections_draining",
            "Connections being drained (stop or reload)",
            m.draining.clone(),
        );
        r.register(
            "snirelay_lookups",
            "DNS and cluster lookups for backend addresses, by kind and outcome (cache_hit included)",
            m.lookups.clone(),
        );
        r.register(
            "snirelay_process_open_fds",
            "Open file descriptors of the process, read at scrape time",
            m.open_fds.clone(),
        );
        r.register(
            "snirelay_process_max_fds",
            "Soft limit on open file descriptors (RLIMIT_NOFILE), read at scrape time",
            m.max_fds.clone(),
        );
        r.register(
            "snirelay_process_resident_memory_bytes",
            "Resident set size of the process, read at scrape time",
            m.resident_memory.clone(),
        );
        // Pushed local names (issue 17).
        r.register(
            "snirelay_local_name_pushes",
            "Pushes of the local name set (POST /update-local-snis), by outcome",
            m.local_name_pushes.clone(),
        );
        r.register(
            "snirelay_admin_forwarded",
            "Requests the admin listener forwarded (forward_unmatched_to), by outcome",
            m.admin_forwarded.clone(),
        );
        r.register(
            "snirelay_log_lines_sent",
            "Log lines written to the syslog or journald target",
            m.log_sent.clone(),
        );
        r.register(
            "snirelay_log_lines_dropped",
            "Log lines dropped before the syslog or journald target: queue_full, send_failed",
            m.log_dropped.clone(),
        );
        // Bandwidth limits (issue 33).
        r.register(
            "snirelay_throttled_seconds",
            "Time a direction of a limited route's connections spent waiting for bandwidth tokens (rate_up, rate_down, rate_per_source_*), added per wait",
            m.throttled.clone(),
        );
        r.register(
            "snirelay_source_address_exhausted",
            "Backend connects (or QUIC flow sockets) whose `source` address had no free local port; the next source was tried",
            m.source_exhausted.clone(),
        );
        r.register(
            "snirelay_local_names",
            "Names pushed as served by this node's local backend, in force now",
            m.local_names.clone(),
        );
        let build_info = Family::<VersionLabels, Gauge>::default();
        build_info
            .get_or_create(&VersionLabels {
                version: crate::VERSION,
            })
            .set(1);
        r.register("snirelay_build_info", "Version of snirelay", build_info);
        Metrics { registry, ..m }
    }

    /// A listener's series exist (at zero) from start-up, so dashboards and
    /// `rate()` see them before the first connection.
    pub(crate) fn listener_started(&self, listener: &str, protocol: &'static str) {
        let labels = ListenerLabels {
            listener: listener.to_owned(),
            protocol,
        };
        let _ = self.accepted.get_or_create(&labels);
        let _ = self.active.get_or_create(&labels);
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

    /// The connect series of `backend` (created at zero if new).
    pub(crate) fn backend_series(&self, backend: &str) -> BackendSeries {
        let labels = BackendLabels {
            backend: backend.to_owned(),
        };
        BackendSeries {
            attempts: self.connect_attempts.get_or_create_owned(&labels),
            failures: self.connect_failures.get_or_create_owned(&labels),
            duration: self.connect_duration.get_or_create_owned(&labels),
        }
    }

    // ---------------------------------------------------------------
    // Hooks for stages built elsewhere. Label values must stay bounded:
    // `kind` and `outcome` are fixed words (hence `&'static str`).

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

    /// The health of one address of `backend`. At most
    /// [`MAX_ADDRESS_SERIES_PER_BACKEND`] addresses per backend are kept:
    /// a new one past that replaces the address reported least recently.
    pub(crate) fn backend_address_health(&self, backend: &str, address: SocketAddr, up: bool) {
        let mut book = self.addresses.lock().unwrap_or_else(|e| e.into_inner());
        let book = &mut *book;
        book.reports += 1;
        let now = book.reports;
        if !book.backends.contains_key(backend) {
            book.backends.insert(backend.to_owned(), HashMap::new());
        }
        let known = book.backends.get_mut(backend).expect("inserted above");
        if !known.contains_key(&address) && known.len() >= MAX_ADDRESS_SERIES_PER_BACKEND {
            let oldest = known.iter().min_by_key(|(_, (_, at))| *at).map(|(a, _)| *a);
            if let Some(oldest) = oldest {
                known.remove(&oldest);
                if book.labels {
                    self.backend_address_up.remove(&BackendAddressLabels {
                        backend: backend.to_owned(),
                        address: oldest.to_string(),
                    });
                }
                self.address_series_replaced
                    .get_or_create(&BackendLabels {
                        backend: backend.to_owned(),
                    })
                    .inc();
            }
        }
        known.insert(address, (up, now));
        if book.labels {
            self.backend_address_up
                .get_or_create(&BackendAddressLabels {
                    backend: backend.to_owned(),
                    address: address.to_string(),
                })
                .set(i64::from(up));
        }
        let ups = known.values().filter(|(up, _)| *up).count();
        for (state, count) in [("up", ups), ("down", known.len() - ups)] {
            self.backend_addresses
                .get_or_create(&BackendStateLabels {
                    backend: backend.to_owned(),
                    state,
                })
                .set(count as i64);
        }
    }

    /// `[admin] address_labels`: whether `snirelay_backend_address_up` is
    /// exported (by address). Turned off, its series go at once; turned on,
    /// they come back with the last reported states.
    pub(crate) fn set_address_labels(&self, on: bool) {
        let mut book = self.addresses.lock().unwrap_or_else(|e| e.into_inner());
        if book.labels == on {
            return;
        }
        book.labels = on;
        self.backend_address_up.clear();
        if !on {
            // The operator-state series name addresses too.
            self.address_state.clear();
        }
        if on {
            for (backend, known) in &book.backends {
                for (address, (up, _)) in known {
                    self.backend_address_up
                        .get_or_create(&BackendAddressLabels {
                            backend: backend.clone(),
                            address: address.to_string(),
                        })
                        .set(i64::from(*up));
                }
            }
        }
    }

    /// A connection to the admin listener was accepted.
    pub(crate) fn admin_opened(&self) {
        self.admin_open.inc();
    }

    /// A connection to the admin listener closed; `reason` is a fixed word
    /// of `admin`.
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

    /// The operator set `address` of `backend` to `state` (one of
    /// `states`): the gauge of `state` goes to 1, the others to 0. Bounded
    /// like the health series: an address is exported once an operator has
    /// set it, at most [`MAX_ADDRESS_SERIES_PER_BACKEND`] per backend (a
    /// new one past that drops the series of the one set longest ago);
    /// nothing is exported with `address_labels = false`.
    pub(crate) fn backend_address_state(
        &self,
        backend: &str,
        address: SocketAddr,
        state: &'static str,
        states: &[&'static str],
    ) {
        let labels_on = self
            .addresses
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .labels;
        let mut book = self
            .address_states
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let known = book.entry(backend.to_owned()).or_default();
        known.retain(|(a, _)| *a != address);
        if known.len() >= MAX_ADDRESS_SERIES_PER_BACKEND {
            let (gone, _) = known.remove(0);
            for &s in states {
                self.address_state.remove(&AddressStateLabels {
                    backend: backend.to_owned(),
                    address: gone.to_string(),
                    state: s,
                });
            }
        }
        known.push((address, state));
        if !labels_on {
            return;
        }
        for &s in states {
            self.address_state
                .get_or_create(&AddressStateLabels {
                    backend: backend.to_owned(),
                    address: address.to_string(),
                    state: s,
                })
                .set(i64::from(s == state));
        }
    }

    // ---------------------------------------------------------------

    /// The Prometheus text exposition, with process gauges read now.
    pub(crate) fn render(&self) -> String {
        self.sample_process();
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }

    fn sample_process(&self) {
        if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
            // Less the descriptor read_dir itself holds open.
            self.open_fds.set(dir.count().saturating_sub(1) as i64);
        }
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        if let Some(kb) = proc_field(&status, "VmRSS:") {
            self.resident_memory.set(kb * 1024);
        }
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
        if let Some(soft) = proc_field(&limits, "Max open files") {
            self.max_fds.set(soft);
        }
    }
}

/// The first number after `prefix` on the line starting with it.
fn proc_field(text: &str, prefix: &str) -> Option<i64> {
    text.lines()
        .find_map(|line| line.strip_prefix(prefix))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_fields_parse() {
        assert_eq!(
            proc_field("Name:\tx\nVmRSS:\t   5120 kB\n", "VmRSS:"),
            Some(5120)
        );
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \nMax open files            1024                 20000                files     \n";
        assert_eq!(proc_field(limits, "Max open files"), Some(1024));
    }

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
    fn address_series_are_capped_and_can_be_turned_off() {
        // The only test that touches the address book (it is process-wide).
        let m = metrics();
        let addr = |i: usize| SocketAddr::from(([192, 0, 2, 1], 1000 + i as u16));
        let series = |text: &str| {
            text.lines()
                .filter(|l| l.starts_with("snirelay_backend_address_up{backend=\"unit_cap\""))
                .count()
        };
        for i in 0..MAX_ADDRESS_SERIES_PER_BACKEND + 10 {
            m.backend_address_health("unit_cap", addr(i), i % 2 == 0);
        }
        // 0..=9 went. Address 10, reported again, is now the most recent,
        // so a new address replaces 11 instead.
        m.backend_address_health("unit_cap", addr(10), true);
        m.backend_address_health("unit_cap", addr(500), true);
        let text = m.render();
        assert_eq!(series(&text), MAX_ADDRESS_SERIES_PER_BACKEND, "{text}");
        let up = |i: usize| {
            format!(
                "snirelay_backend_address_up{{backend=\"unit_cap\",address=\"{}\"}} ",
                addr(i)
            )
        };
        assert!(!text.contains(&up(0)) && !text.contains(&up(11)));
        assert!(text.contains(&format!("{}1", up(10))));
        assert!(text.contains(&format!("{}1", up(MAX_ADDRESS_SERIES_PER_BACKEND + 8))));
        assert!(
            text.contains(
                "snirelay_backend_address_series_replaced_total{backend=\"unit_cap\"} 11"
            ),
            "{text}"
        );
        let half = MAX_ADDRESS_SERIES_PER_BACKEND / 2;
        assert!(
            text.contains(&format!(
                "snirelay_backend_addresses{{backend=\"unit_cap\",state=\"up\"}} {}",
                half + 1
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "snirelay_backend_addresses{{backend=\"unit_cap\",state=\"down\"}} {}",
                half - 1
            )),
            "{text}"
        );

        m.set_address_labels(false);
        m.backend_address_health("unit_cap", addr(200), false);
        let text = m.render();
        assert!(!text.contains("address="), "{text}");
        assert!(!text.contains("192.0.2.1"), "{text}");
        assert!(
            text.contains(&format!(
                "snirelay_backend_addresses{{backend=\"unit_cap\",state=\"down\"}} {half}"
            )),
            "{text}"
        );

        m.set_address_labels(true);
        let text = m.render();
        assert_eq!(series(&text), MAX_ADDRESS_SERIES_PER_BACKEND);
        assert!(text.contains(&format!("{}0", up(200))), "{text}");
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
