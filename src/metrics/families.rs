//! The declared list of every metric family snirelay exports: [`FAMILIES`],
//! each with its name as a query writes it (a counter's ends in `_total`),
//! its type, its label names and its help text. The registry
//! ([`super::registry`]) registers each family through [`family`], so a
//! family cannot be exported without a row here, and a unit test renders the
//! registry and holds the two together (every row exported, with its type
//! and labels). The integration tests check docs/operations.md's metrics
//! table, the Grafana dashboard and the shipped alert rules against this
//! list, which is why it is public.
//!
//! Not here: the families themselves and their registration
//! ([`super::registry`]); label values ([`super::labels`]); the metrics
//! `snirelay probe` writes for a textfile collector (its own, in
//! [`crate::cli`]).

/// A family's Prometheus type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up; its name ends in `_total`.
    Counter,
    /// Goes up and down.
    Gauge,
    /// Buckets, a sum and a count.
    Histogram,
}

impl Kind {
    /// The word of the exposition's `# TYPE` line.
    pub const fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One exported metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Family {
    /// The name a query uses: `snirelay_…`, `_total` for a counter (a
    /// histogram's series add `_bucket`, `_sum` and `_count`).
    pub name: &'static str,
    /// Its Prometheus type.
    pub kind: Kind,
    /// The label names of every series, in exposition order.
    pub labels: &'static [&'static str],
    /// The `# HELP` text.
    pub help: &'static str,
}

impl Family {
    /// The name the registry takes: a counter's without `_total`, which
    /// the exposition appends.
    pub(crate) fn registered_name(&self) -> &'static str {
        match self.kind {
            Kind::Counter => self
                .name
                .strip_suffix("_total")
                .expect("a counter's name ends in _total"),
            Kind::Gauge | Kind::Histogram => self.name,
        }
    }
}

/// The declared family called `name`.
///
/// # Panics
///
/// When no family of [`FAMILIES`] has that name: registering an undeclared
/// family is a bug caught by the first test that touches the metrics.
pub(crate) fn family(name: &str) -> &'static Family {
    FAMILIES
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("metric family {name} is not declared in FAMILIES"))
}

/// Every metric family the relay exports on `/metrics`.
pub const FAMILIES: &[Family] = &[
    Family {
        name: "snirelay_connections_accepted_total",
        kind: Kind::Counter,
        labels: &["listener", "protocol"],
        help: "Client connections accepted",
    },
    Family {
        name: "snirelay_connections_active",
        kind: Kind::Gauge,
        labels: &["listener", "protocol"],
        help: "Client connections open now",
    },
    Family {
        name: "snirelay_connections_closed_total",
        kind: Kind::Counter,
        labels: &["listener", "protocol", "reason"],
        help: "Client connections closed, by close reason (the `close` log field)",
    },
    Family {
        name: "snirelay_bytes_up_total",
        kind: Kind::Counter,
        labels: &["listener", "protocol", "route", "backend"],
        help: "Bytes relayed from clients to backends (ClientHello included), added at close",
    },
    Family {
        name: "snirelay_bytes_down_total",
        kind: Kind::Counter,
        labels: &["listener", "protocol", "route", "backend"],
        help: "Bytes relayed from backends to clients, added at close",
    },
    Family {
        name: "snirelay_client_hellos_total",
        kind: Kind::Counter,
        labels: &["listener", "protocol", "outcome"],
        help: "ClientHello outcomes: sni, no_sni, empty, timeout, not_tls, malformed, too_large, incomplete, preface_refused",
    },
    Family {
        name: "snirelay_client_hellos_ech_total",
        kind: Kind::Counter,
        labels: &["listener", "protocol"],
        help: "Complete ClientHellos that carried an encrypted_client_hello extension",
    },
    Family {
        name: "snirelay_backend_connect_attempts_total",
        kind: Kind::Counter,
        labels: &["backend"],
        help: "Connect attempts to backend addresses",
    },
    Family {
        name: "snirelay_backend_connect_failures_total",
        kind: Kind::Counter,
        labels: &["backend"],
        help: "Connect attempts to backend addresses that failed or timed out",
    },
    Family {
        name: "snirelay_backend_connect_duration_seconds",
        kind: Kind::Histogram,
        labels: &["backend"],
        help: "Time to a successful backend connect",
    },
    Family {
        name: "snirelay_backend_address_up",
        kind: Kind::Gauge,
        labels: &["backend", "address"],
        help: "Whether a backend address is considered healthy (1) or not (0)",
    },
    Family {
        name: "snirelay_backend_addresses",
        kind: Kind::Gauge,
        labels: &["backend", "state"],
        help: "Backend addresses whose health was reported, by state (up or down)",
    },
    Family {
        name: "snirelay_backend_address_series_replaced_total",
        kind: Kind::Counter,
        labels: &["backend"],
        help: "Address health series dropped to keep a backend within its address cap",
    },
    Family {
        name: "snirelay_backend_certificate_not_after_seconds",
        kind: Kind::Gauge,
        labels: &["backend", "address"],
        help: "When the first of the certificates a TLS-checked backend address presents for the check's sni and the names routed to it expires (Unix time)",
    },
    Family {
        name: "snirelay_backend_certificate_covers",
        kind: Kind::Gauge,
        labels: &["backend", "address"],
        help: "Whether every certificate a TLS-checked backend address presents covers the name it was asked for, the check's sni and the names routed to it (1), or not (0)",
    },
    Family {
        name: "snirelay_admin_connections_open",
        kind: Kind::Gauge,
        labels: &[],
        help: "Connections to the admin listener open now",
    },
    Family {
        name: "snirelay_admin_connections_closed_total",
        kind: Kind::Counter,
        labels: &["reason"],
        help: "Connections to the admin listener closed, by reason",
    },
    Family {
        name: "snirelay_admin_control_actions_total",
        kind: Kind::Counter,
        labels: &["kind", "outcome"],
        help: "Control requests to the admin listener, by kind and outcome",
    },
    Family {
        name: "snirelay_backend_address_state",
        kind: Kind::Gauge,
        labels: &["backend", "address", "state"],
        help: "The operator's state of a backend address (1 for the state in force), for addresses an operator has set",
    },
    Family {
        name: "snirelay_limit_refusals_total",
        kind: Kind::Counter,
        labels: &["listener", "protocol", "kind"],
        help: "Connections refused by a limit, by kind",
    },
    Family {
        name: "snirelay_reloads_total",
        kind: Kind::Counter,
        labels: &["outcome"],
        help: "Configuration reloads, by outcome",
    },
    Family {
        name: "snirelay_connections_draining",
        kind: Kind::Gauge,
        labels: &[],
        help: "Connections being drained (stop or reload)",
    },
    Family {
        name: "snirelay_lookups_total",
        kind: Kind::Counter,
        labels: &["kind", "outcome"],
        help: "DNS and cluster lookups for backend addresses, by kind and outcome (cache_hit included)",
    },
    Family {
        name: "snirelay_process_open_fds",
        kind: Kind::Gauge,
        labels: &[],
        help: "Open file descriptors of the process, read at scrape time",
    },
    Family {
        name: "snirelay_process_max_fds",
        kind: Kind::Gauge,
        labels: &[],
        help: "Soft limit on open file descriptors (RLIMIT_NOFILE), read at scrape time",
    },
    Family {
        name: "snirelay_process_resident_memory_bytes",
        kind: Kind::Gauge,
        labels: &[],
        help: "Resident set size of the process, read at scrape time",
    },
    Family {
        name: "snirelay_local_name_pushes_total",
        kind: Kind::Counter,
        labels: &["outcome"],
        help: "Pushes of the local name set (POST /update-local-snis), by outcome",
    },
    Family {
        name: "snirelay_admin_forwarded_total",
        kind: Kind::Counter,
        labels: &["outcome"],
        help: "Requests the admin listener forwarded (forward_unmatched_to), by outcome",
    },
    Family {
        name: "snirelay_log_lines_sent_total",
        kind: Kind::Counter,
        labels: &["target"],
        help: "Log lines written to the syslog or journald target",
    },
    Family {
        name: "snirelay_log_lines_dropped_total",
        kind: Kind::Counter,
        labels: &["target", "reason"],
        help: "Log lines dropped before the syslog or journald target: queue_full, send_failed",
    },
    Family {
        name: "snirelay_throttled_seconds_total",
        kind: Kind::Counter,
        labels: &["listener", "route", "direction"],
        help: "Time a direction of a limited route's connections spent waiting for bandwidth tokens (rate_up, rate_down, rate_per_source_*), added per wait",
    },
    Family {
        name: "snirelay_proxy_datagrams_too_large_total",
        kind: Kind::Counter,
        labels: &[],
        help: "Client datagrams of QUIC flows dropped because even the minimal PROXY v2 header would make them larger than the backend's max_datagram_size",
    },
    Family {
        name: "snirelay_quic_unvalidated_flows",
        kind: Kind::Gauge,
        labels: &[],
        help: "Open QUIC flows whose client has not yet shown it receives at its address (they hold no connection permit)",
    },
    Family {
        name: "snirelay_quic_unvalidated_closed_total",
        kind: Kind::Counter,
        labels: &["reason"],
        help: "Open QUIC flows closed before they validated: evicted for a new flow, unvalidated (their lifetime passed) or max_connections (validated with no permit free)",
    },
    Family {
        name: "snirelay_quic_amplification_dropped_total",
        kind: Kind::Counter,
        labels: &[],
        help: "Backend datagrams toward an unvalidated QUIC client dropped: past 3 times the bytes received from it (RFC 9000 section 8)",
    },
    Family {
        name: "snirelay_source_address_exhausted_total",
        kind: Kind::Counter,
        labels: &["backend", "source"],
        help: "Backend connects (or QUIC flow sockets) whose `source` address had no free local port; the next source was tried",
    },
    Family {
        name: "snirelay_admission_sources",
        kind: Kind::Gauge,
        labels: &["listener"],
        help: "Sources a listener's admission tables (its own and its routes') remember now, at most max_sources each without an open connection",
    },
    Family {
        name: "snirelay_admission_sources_evicted_total",
        kind: Kind::Counter,
        labels: &["listener"],
        help: "Sources forgotten before their time because a table was at max_sources (least recently used first)",
    },
    Family {
        name: "snirelay_cluster_cache_evicted_total",
        kind: Kind::Counter,
        labels: &["backend", "share"],
        help: "Names a cluster backend's cache dropped to make room in a full share (answered: 10,000, unanswered: 2,500), by backend and share",
    },
    Family {
        name: "snirelay_cluster_lookups_limited_total",
        kind: Kind::Counter,
        labels: &["backend", "limit"],
        help: "Cluster lookups not made because the backend's max_lookups_in_flight or new_names_per_second was reached, by backend and limit (the connection closed lookup_limited, or was served its stale answer)",
    },
    Family {
        name: "snirelay_local_names",
        kind: Kind::Gauge,
        labels: &[],
        help: "Names pushed as served by this node's local backend, in force now",
    },
    Family {
        name: "snirelay_build_info",
        kind: Kind::Gauge,
        labels: &["version"],
        help: "Version of snirelay",
    },
];

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::metrics::metrics;

    /// The label names of a sample line's `{…}`, values skipped (they may
    /// hold escaped quotes).
    fn label_names(labels: &str) -> Vec<String> {
        let mut names = Vec::new();
        let mut rest = labels;
        while let Some((name, after)) = rest.split_once("=\"") {
            names.push(name.trim_start_matches(',').to_owned());
            let mut escaped = false;
            let end = after
                .char_indices()
                .find(|&(_, c)| {
                    let closes = c == '"' && !escaped;
                    escaped = c == '\\' && !escaped;
                    closes
                })
                .map(|(at, _)| at)
                .expect("a label value ends with a quote");
            rest = &after[end + 1..];
        }
        names
    }

    #[test]
    fn label_names_skip_quoted_values() {
        assert_eq!(label_names(r#"a="x\",b=\"y",b="",c="\\""#), ["a", "b", "c"]);
    }

    #[test]
    fn names_are_unique_and_say_their_type() {
        let mut seen = BTreeSet::new();
        for f in FAMILIES {
            assert!(seen.insert(f.name), "{} twice", f.name);
            assert!(f.name.starts_with("snirelay_"), "{}", f.name);
            assert_eq!(
                f.name.ends_with("_total"),
                f.kind == Kind::Counter,
                "{}: only counters end in _total",
                f.name
            );
        }
    }

    /// The registry registers exactly [`FAMILIES`]; what it exports has
    /// the declared types, and every series carries the declared labels.
    #[test]
    fn the_exposition_is_the_declared_list() {
        // Some series of most families, so that their labels are checked.
        let listener = metrics().listener("unit_families", "tcp");
        listener.limit_refused(crate::close_reason::CloseReason::LimitRate);
        metrics().backend_series("unit_families");
        let text = metrics().render();
        let registered: Vec<&str> = metrics().registered.iter().map(|f| f.name).collect();
        let declared: Vec<&str> = FAMILIES.iter().map(|f| f.name).collect();
        let mut sorted = registered.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(
            sorted.len(),
            registered.len(),
            "registered twice: {registered:?}"
        );
        let mut declared_sorted = declared.clone();
        declared_sorted.sort_unstable();
        assert_eq!(sorted, declared_sorted, "registered vs declared");
        // A family with series has a `# TYPE` line with its declared type
        // (the exposition leaves out families without series).
        let mut typed = 0;
        for line in text.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
            let (name, kind) = line.split_once(' ').expect("# TYPE name kind");
            let family = FAMILIES
                .iter()
                .find(|f| f.registered_name() == name)
                .unwrap_or_else(|| panic!("{name} is exported, not declared"));
            assert_eq!(kind, family.kind.as_str(), "{name}");
            typed += 1;
        }
        assert!(typed >= 10, "{text}");

        let mut checked = 0;
        for sample in text.lines().filter(|l| !l.starts_with('#')) {
            let (series, _value) = sample.rsplit_once(' ').expect("a sample has a value");
            let (name, labels) = match series.split_once('{') {
                Some((name, labels)) => (name, labels.trim_end_matches('}')),
                None => (series, ""),
            };
            let family = FAMILIES
                .iter()
                .find(|f| {
                    f.name == name
                        || (f.kind == Kind::Histogram
                            && ["_bucket", "_sum", "_count"]
                                .iter()
                                .any(|s| name.strip_suffix(s) == Some(f.name)))
                })
                .unwrap_or_else(|| panic!("{sample}: no declared family"));
            let mut names = label_names(labels);
            names.retain(|n| !(name.ends_with("_bucket") && n == "le"));
            assert_eq!(names, family.labels, "{sample}");
            checked += 1;
        }
        assert!(checked >= 10, "{text}");
    }
}
