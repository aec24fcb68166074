//! The one process-wide registry: [`Metrics`] holds every metric family
//! snirelay exports, each created and registered (name, help text) once at
//! start-up, and [`metrics()`] hands it out. Each is registered under its
//! row of [`super::families::FAMILIES`], which holds names, types, labels
//! and help texts. The fields are visible to the sibling
//! files that record into them; [`AddressBook`], the state behind the
//! address health series, is a field here too, kept by
//! [`super::backends`].
//!
//! Not here: what records into the families: a listener's handles
//! ([`super::listener`]), a backend's series and its addresses' health
//! ([`super::backends`]), the hooks of other stages ([`super::hooks`]);
//! the label sets ([`super::labels`]); the text exposition and the process
//! gauges read at scrape time ([`super::exposition`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{LazyLock, Mutex};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::families::{Family as Declared, family};
use super::labels::{
    AddressStateLabels, BackendAddressLabels, BackendLabels, BackendStateLabels, CacheShareLabels,
    CloseLabels, ControlLabels, HelloLabels, LimitLabels, ListenerLabels, LogDropLabels,
    LogTargetLabels, LookupLabels, LookupLimitLabels, OutcomeLabels, ReasonLabels, SourceLabels,
    TableLabels, ThrottleLabels, TrafficLabels, VersionLabels,
};

/// The registry being filled, and the declared families registered so far.
#[derive(Default)]
struct Registration {
    registry: Registry,
    registered: Vec<&'static Declared>,
}

/// Registers `metric` as the declared family `name` (see [`super::families`]).
fn register(r: &mut Registration, name: &str, metric: impl prometheus_client::registry::Metric) {
    let declared = family(name);
    r.registry
        .register(declared.registered_name(), declared.help, metric);
    r.registered.push(declared);
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn connect_histogram() -> Histogram {
    // 0.5 ms .. ~8 s: loopback and LAN backends up to a black-holed address.
    Histogram::new(exponential_buckets(0.0005, 2.0, 15))
}

/// Every metric snirelay exports. Get it with [`metrics()`].
pub(crate) struct Metrics {
    pub(super) registry: Registry,
    /// The declared families registered, in registration order (the
    /// exposition leaves out a family without series, so this is how a test
    /// sees that every declared one is registered).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(super) registered: Vec<&'static Declared>,
    pub(super) accepted: Family<ListenerLabels, Counter>,
    pub(super) active: Family<ListenerLabels, Gauge>,
    pub(super) closed: Family<CloseLabels, Counter>,
    pub(super) bytes_up: Family<TrafficLabels, Counter>,
    pub(super) bytes_down: Family<TrafficLabels, Counter>,
    pub(super) hello: Family<HelloLabels, Counter>,
    pub(super) hello_ech: Family<ListenerLabels, Counter>,
    pub(super) connect_attempts: Family<BackendLabels, Counter>,
    pub(super) connect_failures: Family<BackendLabels, Counter>,
    pub(super) connect_duration: HistogramFamily<BackendLabels>,
    pub(super) backend_address_up: Family<BackendAddressLabels, Gauge>,
    pub(super) backend_addresses: Family<BackendStateLabels, Gauge>,
    pub(super) address_series_replaced: Family<BackendLabels, Counter>,
    // Backend certificates (issue 52).
    pub(super) certificate_not_after: Family<BackendAddressLabels, Gauge>,
    pub(super) certificate_covers: Family<BackendAddressLabels, Gauge>,
    /// What the address health series say, and whether they carry the address.
    pub(super) addresses: Mutex<AddressBook>,
    pub(super) admin_open: Gauge,
    pub(super) admin_closed: Family<ReasonLabels, Counter>,
    // Run-time control (issue 16).
    pub(super) control_actions: Family<ControlLabels, Counter>,
    pub(super) address_state: Family<AddressStateLabels, Gauge>,
    /// Backend → the addresses whose operator state is exported, oldest
    /// first (at most [`super::backends::MAX_ADDRESS_SERIES_PER_BACKEND`]
    /// each).
    pub(super) address_states: Mutex<HashMap<String, Vec<(SocketAddr, &'static str)>>>,
    pub(super) limit_refusals: Family<LimitLabels, Counter>,
    pub(super) reloads: Family<OutcomeLabels, Counter>,
    pub(super) draining: Gauge,
    pub(super) lookups: Family<LookupLabels, Counter>,
    pub(super) open_fds: Gauge,
    pub(super) max_fds: Gauge,
    pub(super) resident_memory: Gauge,
    // Pushed local names (issue 17).
    pub(super) local_name_pushes: Family<OutcomeLabels, Counter>,
    pub(super) local_names: Gauge,
    // One base address for a Pangolin node (issue 30).
    pub(super) admin_forwarded: Family<OutcomeLabels, Counter>,
    // Log lines sent to and dropped before syslog or journald.
    pub(super) log_sent: Family<LogTargetLabels, Counter>,
    pub(super) log_dropped: Family<LogDropLabels, Counter>,
    // Egress source addresses (issue 33).
    pub(super) source_exhausted: Family<SourceLabels, Counter>,
    pub(super) throttled: Family<ThrottleLabels, Counter<f64, AtomicU64>>,
    // PROXY v2 over UDP (issue 43).
    pub(super) proxy_datagrams_too_large: Counter,
    // The bounded source tables (issue 49).
    pub(super) admission_sources: Family<TableLabels, Gauge>,
    pub(super) admission_evicted: Family<TableLabels, Counter>,
    // QUIC address validation (issue 49).
    pub(super) quic_unvalidated: Gauge,
    pub(super) quic_unvalidated_closed: Family<ReasonLabels, Counter>,
    pub(super) quic_amplification_dropped: Counter,
    // Lookup floods (issue 49).
    pub(super) lookups_limited: Family<LookupLimitLabels, Counter>,
    pub(super) cluster_cache_evicted: Family<CacheShareLabels, Counter>,
}

/// Backend → address → (up, when last reported): the state behind the
/// address health series, kept so that they can be dropped, counted and
/// re-created when `address_labels` changes.
#[derive(Debug)]
pub(super) struct AddressBook {
    pub(super) labels: bool,
    pub(super) reports: u64,
    pub(super) backends: HashMap<String, HashMap<SocketAddr, (bool, u64)>>,
    /// (backend, address) → (not-after, covers) of the certificates the
    /// TLS health checks learned, for addresses in `backends` only.
    pub(super) certificates: HashMap<(String, SocketAddr), (i64, bool)>,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The series are many and read through the exposition: a holder's
/// `Debug` names them only.
impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics { .. }")
    }
}

/// The process-wide metrics.
pub(crate) fn metrics() -> &'static Metrics {
    &METRICS
}

impl Metrics {
    fn new() -> Metrics {
        let m = Metrics {
            registry: Registry::default(),
            registered: Vec::new(),
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
            certificate_not_after: Family::default(),
            certificate_covers: Family::default(),
            addresses: Mutex::new(AddressBook {
                labels: true,
                reports: 0,
                backends: HashMap::new(),
                certificates: HashMap::new(),
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
            lookups_limited: Family::default(),
            cluster_cache_evicted: Family::default(),
            throttled: Family::default(),
            proxy_datagrams_too_large: Counter::default(),
            admission_sources: Family::default(),
            admission_evicted: Family::default(),
            quic_unvalidated: Gauge::default(),
            quic_unvalidated_closed: Family::default(),
            quic_amplification_dropped: Counter::default(),
        };
        let mut registration = Registration::default();
        let r = &mut registration;
        register(r, "snirelay_connections_accepted_total", m.accepted.clone());
        register(r, "snirelay_connections_active", m.active.clone());
        register(r, "snirelay_connections_closed_total", m.closed.clone());
        register(r, "snirelay_bytes_up_total", m.bytes_up.clone());
        register(r, "snirelay_bytes_down_total", m.bytes_down.clone());
        register(r, "snirelay_client_hellos_total", m.hello.clone());
        register(r, "snirelay_client_hellos_ech_total", m.hello_ech.clone());
        register(
            r,
            "snirelay_backend_connect_attempts_total",
            m.connect_attempts.clone(),
        );
        register(
            r,
            "snirelay_backend_connect_failures_total",
            m.connect_failures.clone(),
        );
        register(
            r,
            "snirelay_backend_connect_duration_seconds",
            m.connect_duration.clone(),
        );
        register(
            r,
            "snirelay_backend_address_up",
            m.backend_address_up.clone(),
        );
        register(r, "snirelay_backend_addresses", m.backend_addresses.clone());
        register(
            r,
            "snirelay_backend_address_series_replaced_total",
            m.address_series_replaced.clone(),
        );
        register(
            r,
            "snirelay_backend_certificate_not_after_seconds",
            m.certificate_not_after.clone(),
        );
        register(
            r,
            "snirelay_backend_certificate_covers",
            m.certificate_covers.clone(),
        );
        register(r, "snirelay_admin_connections_open", m.admin_open.clone());
        register(
            r,
            "snirelay_admin_connections_closed_total",
            m.admin_closed.clone(),
        );
        register(
            r,
            "snirelay_admin_control_actions_total",
            m.control_actions.clone(),
        );
        register(r, "snirelay_backend_address_state", m.address_state.clone());
        register(r, "snirelay_limit_refusals_total", m.limit_refusals.clone());
        register(r, "snirelay_reloads_total", m.reloads.clone());
        register(r, "snirelay_connections_draining", m.draining.clone());
        register(r, "snirelay_lookups_total", m.lookups.clone());
        register(r, "snirelay_process_open_fds", m.open_fds.clone());
        register(r, "snirelay_process_max_fds", m.max_fds.clone());
        register(
            r,
            "snirelay_process_resident_memory_bytes",
            m.resident_memory.clone(),
        );
        // Pushed local names (issue 17).
        register(
            r,
            "snirelay_local_name_pushes_total",
            m.local_name_pushes.clone(),
        );
        register(
            r,
            "snirelay_admin_forwarded_total",
            m.admin_forwarded.clone(),
        );
        register(r, "snirelay_log_lines_sent_total", m.log_sent.clone());
        register(r, "snirelay_log_lines_dropped_total", m.log_dropped.clone());
        // Bandwidth limits (issue 33).
        register(r, "snirelay_throttled_seconds_total", m.throttled.clone());
        register(
            r,
            "snirelay_proxy_datagrams_too_large_total",
            m.proxy_datagrams_too_large.clone(),
        );
        register(
            r,
            "snirelay_quic_unvalidated_flows",
            m.quic_unvalidated.clone(),
        );
        register(
            r,
            "snirelay_quic_unvalidated_closed_total",
            m.quic_unvalidated_closed.clone(),
        );
        register(
            r,
            "snirelay_quic_amplification_dropped_total",
            m.quic_amplification_dropped.clone(),
        );
        register(
            r,
            "snirelay_source_address_exhausted_total",
            m.source_exhausted.clone(),
        );
        register(r, "snirelay_admission_sources", m.admission_sources.clone());
        register(
            r,
            "snirelay_admission_sources_evicted_total",
            m.admission_evicted.clone(),
        );
        register(
            r,
            "snirelay_cluster_cache_evicted_total",
            m.cluster_cache_evicted.clone(),
        );
        register(
            r,
            "snirelay_cluster_lookups_limited_total",
            m.lookups_limited.clone(),
        );
        register(r, "snirelay_local_names", m.local_names.clone());
        let build_info = Family::<VersionLabels, Gauge>::default();
        build_info
            .get_or_create(&VersionLabels {
                version: crate::VERSION,
            })
            .set(1);
        register(r, "snirelay_build_info", build_info);
        // Reloads can happen wherever the relay runs: both outcomes from the start.
        for outcome in ["ok", "failed"] {
            let _ = m.reloads.get_or_create(&OutcomeLabels { outcome });
        }
        Metrics {
            registry: registration.registry,
            registered: registration.registered,
            ..m
        }
    }
}
