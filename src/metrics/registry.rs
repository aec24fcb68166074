//! The one process-wide registry: [`Metrics`] holds every metric family
//! snirelay exports, each created and registered (name, help text) once at
//! start-up, and [`metrics()`] hands it out. The family list here is the
//! list of exported metric names. The fields are visible to the sibling
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

use super::labels::{
    AddressStateLabels, BackendAddressLabels, BackendLabels, BackendStateLabels, CacheShareLabels,
    CloseLabels, ControlLabels, HelloLabels, LimitLabels, ListenerLabels, LogDropLabels,
    LogTargetLabels, LookupLabels, LookupLimitLabels, OutcomeLabels, ReasonLabels, SourceLabels,
    TableLabels, ThrottleLabels, TrafficLabels, VersionLabels,
};

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn connect_histogram() -> Histogram {
    // 0.5 ms .. ~8 s: loopback and LAN backends up to a black-holed address.
    Histogram::new(exponential_buckets(0.0005, 2.0, 15))
}

/// Every metric snirelay exports. Get it with [`metrics()`].
pub(crate) struct Metrics {
    pub(super) registry: Registry,
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
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The process-wide metrics.
pub(crate) fn metrics() -> &'static Metrics {
    &METRICS
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
            "snirelay_proxy_datagrams_too_large",
            "Client datagrams of QUIC flows dropped because even the minimal PROXY v2 header would make them larger than the backend's max_datagram_size",
            m.proxy_datagrams_too_large.clone(),
        );
        r.register(
            "snirelay_quic_unvalidated_flows",
            "Open QUIC flows whose client has not yet shown it receives at its address (they hold no connection permit)",
            m.quic_unvalidated.clone(),
        );
        r.register(
            "snirelay_quic_unvalidated_closed",
            "Open QUIC flows closed before they validated: evicted for a new flow, unvalidated (their lifetime passed) or max_connections (validated with no permit free)",
            m.quic_unvalidated_closed.clone(),
        );
        r.register(
            "snirelay_quic_amplification_dropped",
            "Backend datagrams toward an unvalidated QUIC client dropped: past 3 times the bytes received from it (RFC 9000 section 8)",
            m.quic_amplification_dropped.clone(),
        );
        r.register(
            "snirelay_source_address_exhausted",
            "Backend connects (or QUIC flow sockets) whose `source` address had no free local port; the next source was tried",
            m.source_exhausted.clone(),
        );
        r.register(
            "snirelay_admission_sources",
            "Sources a listener's admission tables (its own and its routes') remember now, at most max_sources each without an open connection",
            m.admission_sources.clone(),
        );
        r.register(
            "snirelay_admission_sources_evicted",
            "Sources forgotten before their time because a table was at max_sources (least recently used first)",
            m.admission_evicted.clone(),
        );
        r.register(
            "snirelay_cluster_cache_evicted",
            "Names a cluster backend's cache dropped to make room in a full share (answered: 10,000, unanswered: 2,500), by backend and share",
            m.cluster_cache_evicted.clone(),
        );
        r.register(
            "snirelay_cluster_lookups_limited",
            "Cluster lookups not made because the backend's max_lookups_in_flight or new_names_per_second was reached, by backend and limit (the connection closed lookup_limited, or was served its stale answer)",
            m.lookups_limited.clone(),
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
}
