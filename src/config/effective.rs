//! The effective configuration: a validated [`Config`] turned back into the
//! file model ([`FileConfig`]) with every key set to the value in force,
//! defaults filled in. `/config` serves it as JSON, and a round trip
//! (parse → validate → write back → parse) gives the same configuration
//! (`tests/it/config.rs`).
//!
//! **It cannot forget a key.** Every validated struct is destructured
//! without `..`, so a field added to [`Config`] that is not written here
//! is a compile error, and the file model is the one serde model of the
//! TOML, so a key added to the file is a field here too. A key is `None`
//! (absent in TOML, `null` in JSON) only where setting it would mean
//! something else or be refused: a `connect_attempts` left to its
//! automatic min(addresses, 3), a rate limit that is off, a connection cap
//! that is off (`max_connections_per_address`), a health check's `sni` of
//! `kind = "tcp"`, a `min_tls_version` that is off, an `alpn`,
//! `ech_config_ids` or route `ech` that is not set, and the keys of an
//! alternative not taken (`resolve_interval` with `resolver`,
//! `fastest_interval` and `fastest_measure` without `policy = "fastest"`,
//! `addresses` of a resolved backend, ...). An address with weight 1 and
//! no cap of its own is written as a plain `"IP:port"`, any other as a
//! table with `weight` and `max_connections`. Durations are written in the file's notation
//! (`"5m"`, `"1s 500ms"`); CIDR lists as their distinct blocks.
//!
//! It also names the keys a reload cannot apply ([`pending_restart`]): the
//! values fixed when the process started.
//!
//! Secrets: the file model holds no secret. A key that names one must name
//! a file (its path is shown, never its contents).
//!
//! Not here: validation (`config`), serving `/config` (`admin`), or
//! deciding what a reload drains (`reload`). Cost: a few allocations per
//! key, only when `/config` is requested or a reload is applied.

use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use super::file::{AddressEntry, AddressTable};
use super::file::{
    AdminSection, BackendSection, ClusterSection, CountOrOff, DurationOrOff, FileConfig,
    GlobalSection, HealthSection, LimitsSection, ListenerSection, OneOrMany, ProxyProtocolSection,
    RouteSection,
};
use super::file::{KeepaliveSection, KeepaliveSetting};
// Pangolin lookups (issue 17).
use super::ClusterProtocol;
use super::Protocol;
use super::file::MatchSection;
use super::file::{HeaderFile, HeaderValueSetting};
use super::{
    AddressSource, Admin, Backend, Cluster, ClusterLookup, Config, DnsSource, Global, HealthCheck,
    Listener, NoSni, Policy, Route, Timeouts,
};
use super::{ByteRate, Inbound, Keepalive, Limits, Mode, Outbound, Rate};
use super::{HealthKind, HelloMatch, Member};
// PROXY v2 TLVs.
use super::file::ProxyTlvEntry;
use super::{Log, file::LogSection};
use super::{ProxyTlv, TlvValue};
// Egress source addresses (issue 33).
use super::file::{EgressSourceTable, SourceSetting};
use super::{Egress, SourceAddresses};

impl Config {
    /// This configuration as the file model, every key set to its value in
    /// force (see the module header for the few left unset).
    pub fn to_file(&self) -> FileConfig {
        let Config {
            global,
            listeners,
            backends,
            admin,
            log,
            // Said by `check` and logged, not settings.
            warnings: _,
        } = self;
        FileConfig {
            global: global_section(global),
            listeners: listeners.iter().map(|l| listener_section(l)).collect(),
            routes: listeners
                .iter()
                .flat_map(|l| l.routes.iter().map(|r| route_section(l, r)))
                .collect(),
            backends: backends
                .iter()
                .map(|(name, b)| (name.clone(), backend_section(b)))
                .collect(),
            admin: admin.as_ref().map(admin_section),
            log: log_section(log),
        }
    }
}

fn log_section(log: &Log) -> LogSection {
    let Log {
        target,
        syslog,
        facility,
        syslog_format,
        queue,
    } = log;
    LogSection {
        target: Some(target.name().to_owned()),
        syslog: Some(syslog.to_string()),
        facility: Some(facility.name().to_owned()),
        syslog_format: Some(syslog_format.name().to_owned()),
        queue: count(*queue),
    }
}

fn duration(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// A limit that may be off: its duration, or `false`.
fn duration_or_off(d: Option<Duration>) -> Option<DurationOrOff> {
    Some(match d {
        Some(d) => DurationOrOff::Duration(duration(d)),
        None => DurationOrOff::Switch(false),
    })
}

fn count(n: impl TryInto<i64>) -> Option<i64> {
    // Every count was validated within an i64 range.
    Some(n.try_into().unwrap_or(i64::MAX))
}

fn global_section(global: &Global) -> GlobalSection {
    let Global {
        max_connections,
        drain_timeout,
        threads,
        splice,
        pipe_size,
        max_pipes,
        max_connection_rate,
        coalescing_risk,
    } = global;
    GlobalSection {
        max_connections: count(*max_connections),
        drain_timeout: Some(duration(*drain_timeout)),
        threads: count(*threads),
        splice: Some(*splice),
        pipe_size: count(*pipe_size),
        max_pipes: count(*max_pipes),
        max_connection_rate: max_connection_rate.map(|r| i64::from(r.get())),
        coalescing_risk: Some(coalescing_risk.as_str().to_owned()),
    }
}

fn admin_section(admin: &Admin) -> AdminSection {
    let Admin {
        listen,
        allow_public,
        expose_config,
        address_labels,
        token_file,
        local_names_file,
        moved_close_window,
        push_unauthenticated_from,
        forward_unmatched_to,
        ready_requires,
    } = admin;
    AdminSection {
        listen: Some(listen.to_string()),
        allow_public: Some(*allow_public),
        expose_config: Some(*expose_config),
        address_labels: Some(*address_labels),
        // The path only: the tokens never leave the file.
        token_file: token_file.as_ref().map(|t| t.path.display().to_string()),
        // Pushed local names (issue 17).
        local_names_file: local_names_file.as_ref().map(|p| p.display().to_string()),
        moved_close_window: Some(duration(*moved_close_window)),
        // One base address for a Pangolin node (issue 30).
        push_unauthenticated_from: Some(
            push_unauthenticated_from
                .iter()
                .map(|c| c.to_string())
                .collect(),
        ),
        forward_unmatched_to: forward_unmatched_to.as_ref().map(|f| f.url.clone()),
        ready_requires: Some(ready_requires.iter().map(|r| r.to_string()).collect()),
    }
}

fn listener_section(listener: &Listener) -> ListenerSection {
    let Listener {
        name,
        listen,
        backlog,
        client_hello_timeout,
        idle_timeout,
        max_client_hello_bytes,
        no_sni,
        // Written as `[[route]]` tables (see `route_section`).
        routes: _,
        // The routes' patterns, written with each route.
        names: _,
        // Compiled from the routes, not a setting of its own.
        proxy_protocol,
        reuse_port,
        splice,
        limits,
        half_close_timeout,
        max_connection_lifetime,
        tcp_keepalive,
        min_tls_version,
        ech,
        ech_config_ids,
        protocol,
        fingerprints,
        hello_match,
        bandwidth,
    } = listener;
    let mut section = ListenerSection {
        name: name.clone(),
        listen: OneOrMany::Many(listen.iter().map(|a| a.to_string()).collect()),
        backlog: count(*backlog),
        client_hello_timeout: Some(duration(*client_hello_timeout)),
        idle_timeout: Some(duration(*idle_timeout)),
        max_client_hello_bytes: count(*max_client_hello_bytes),
        no_sni: Some(match no_sni {
            NoSni::Reject => "reject".to_owned(),
            NoSni::Backend(backend) => backend.name.clone(),
        }),
        proxy_protocol: proxy_protocol.as_ref().map(proxy_protocol_section),
        reuse_port: Some(*reuse_port),
        splice: Some(*splice),
        limits: Some(limits_section(limits)),
        // Unset accepts every version, SSL 3.0 included, which no value
        // says.
        min_tls_version: min_tls_version.map(|v| v.as_str().to_owned()),
        ech: Some(ech.as_str().to_owned()),
        // Unset: no id is known (an empty list would be refused).
        ech_config_ids: (!ech_config_ids.is_empty())
            .then(|| ech_config_ids.iter().map(|&id| i64::from(id)).collect()),
        half_close_timeout: Some(duration(*half_close_timeout)),
        max_connection_lifetime: duration_or_off(*max_connection_lifetime),
        tcp_keepalive: Some(keepalive_setting(*tcp_keepalive)),
        protocol: Some(protocol.as_str().to_owned()),
        fingerprints: Some(*fingerprints),
        r#match: match_section(hello_match),
        rate_up: byte_rate(bandwidth.up),
        rate_down: byte_rate(bandwidth.down),
        rate_per_source_up: byte_rate(bandwidth.per_source_up),
        rate_per_source_down: byte_rate(bandwidth.per_source_down),
        burst: bandwidth.burst.map(|b| b.get() as i64),
    };
    // QUIC listeners (issue 18): the TCP-only keys are refused there, so
    // they are not written back either.
    if *protocol == Protocol::Quic {
        section.backlog = None;
        section.splice = None;
        section.tcp_keepalive = None;
        section.half_close_timeout = None;
    }
    section
}

/// `tcp_keepalive`: its three timings, or `false`.
fn keepalive_setting(keepalive: Option<Keepalive>) -> KeepaliveSetting {
    match keepalive {
        None => KeepaliveSetting::Switch(false),
        Some(Keepalive {
            idle,
            interval,
            count: probes,
        }) => KeepaliveSetting::Probes(KeepaliveSection {
            idle: Some(duration(idle)),
            interval: Some(duration(interval)),
            count: count(probes),
        }),
    }
}

fn proxy_protocol_section(inbound: &Inbound) -> ProxyProtocolSection {
    let Inbound {
        trusted,
        trusted_names,
        mode,
        max_hops,
        pass_through_tlvs,
    } = inbound;
    ProxyProtocolSection {
        // Names as configured (they are resolved again at every load).
        trusted: trusted
            .iter()
            .map(|c| c.to_string())
            .chain(trusted_names.iter().map(|n| n.name.clone()))
            .collect(),
        mode: Some(
            match mode {
                Mode::Require => "require",
                Mode::Optional => "optional",
            }
            .to_owned(),
        ),
        max_hops: count(*max_hops),
        pass_through_tlvs: Some(pass_through_tlvs.iter().map(i64::from).collect()),
    }
}

fn tlv_entry(tlv: &ProxyTlv) -> ProxyTlvEntry {
    let mut entry = ProxyTlvEntry {
        kind: i64::from(tlv.kind),
        value: None,
        text: None,
        bytes: None,
    };
    match &tlv.value {
        TlvValue::From(source) => entry.value = Some(source.as_str().to_owned()),
        TlvValue::Text(text) => entry.text = Some(text.clone()),
        TlvValue::Bytes(bytes) => {
            entry.bytes = Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
        }
    }
    entry
}

fn limits_section(limits: &Limits) -> LimitsSection {
    let Limits {
        connections_per_source,
        rate_per_source,
        source_prefix_v4,
        source_prefix_v6,
        dry_run,
        allow,
        deny,
        rate_counts_refused,
        limit_key,
        attempts_per_source,
        max_sources,
        ja4_source_multiple,
    } = limits;
    let (rate, burst) = match rate_per_source {
        Some(Rate { per_second, burst }) => (
            Some(i64::from(per_second.get())),
            Some(i64::from(burst.get())),
        ),
        None => (None, None),
    };
    LimitsSection {
        connections_per_source: Some(match connections_per_source {
            Some(n) => CountOrOff::Count(i64::from(n.get())),
            None => CountOrOff::Switch(false),
        }),
        connection_rate_per_source: rate,
        connection_burst_per_source: burst,
        source_prefix_v4: count(*source_prefix_v4),
        source_prefix_v6: count(*source_prefix_v6),
        dry_run: Some(*dry_run),
        allow: allow.blocks().iter().map(|c| c.to_string()).collect(),
        deny: deny.blocks().iter().map(|c| c.to_string()).collect(),
        rate_counts_refused: Some(*rate_counts_refused),
        limit_key: Some(limit_key.as_str().to_owned()),
        // Shown only when set: a period alone is a `check` error.
        attempts_per_source: attempts_per_source.map(|a| i64::from(a.count.get())),
        attempts_period: attempts_per_source.map(|a| duration(a.period)),
        max_sources: Some(i64::from(max_sources.get())),
        // Shown only under a JA4 key: elsewhere it is a `check` error.
        ja4_source_multiple: limit_key
            .needs_ja4()
            .then(|| i64::from(ja4_source_multiple.get())),
    }
}

fn route_section(listener: &Listener, route: &Route) -> RouteSection {
    let Route {
        name,
        patterns: _,
        sni_file,
        inline_patterns,
        backend,
        limits,
        max_connections,
        timeouts,
        names,
        alpn,
        ech,
        hello_match,
        bandwidth,
    } = route;
    // The route's timeouts in force, its listener's where it sets none.
    let Timeouts {
        idle,
        half_close,
        lifetime,
    } = timeouts;
    RouteSection {
        name: Some(name.clone()),
        // One block per listener the route runs on: a route written for
        // several is shown as its copies.
        listener: Some(OneOrMany::One(listener.name.clone())),
        // The names written inline; those of the file are the file's.
        sni: listener
            .patterns(route)
            .take(*inline_patterns)
            .map(|p| p.to_string())
            .collect(),
        sni_file: sni_file.as_ref().map(|p| p.display().to_string()),
        backend: backend.name.clone(),
        limits: limits.as_ref().map(limits_section),
        max_connections: max_connections.map(|n| i64::from(n.get())),
        idle_timeout: Some(duration(*idle)),
        // Refused on a QUIC listener's route, so not written back there.
        half_close_timeout: (listener.protocol == Protocol::Tcp).then(|| duration(*half_close)),
        max_connection_lifetime: duration_or_off(*lifetime),
        case_sensitive_names: Some(names.case_sensitive),
        ldh_names: Some(names.ldh),
        // Unset: any hello (an empty list would be refused).
        alpn: (!alpn.is_empty()).then(|| alpn.clone()),
        // Unset: the listener's, which may change without this route.
        ech: ech.as_ref().map(|e| e.as_str().to_owned()),
        r#match: match_section(hello_match),
        // The rates in force, the listener's where the route sets none;
        // `false` where there is none, so that the route does not take
        // the listener's when read back.
        // The rates in force; `false` where the route has none but its
        // listener has, unset where neither has (so a QUIC listener's
        // routes, which refuse the keys, never show them).
        rate_up: rate_or_off(bandwidth.up, listener.bandwidth.up),
        rate_down: rate_or_off(bandwidth.down, listener.bandwidth.down),
        rate_per_source_up: rate_or_off(bandwidth.per_source_up, listener.bandwidth.per_source_up),
        rate_per_source_down: rate_or_off(
            bandwidth.per_source_down,
            listener.bandwidth.per_source_down,
        ),
        burst: bandwidth.burst.map(|b| b.get() as i64),
    }
}

/// A listener's bandwidth rate as written: unset is none.
fn byte_rate(rate: Option<ByteRate>) -> Option<i64> {
    rate.map(|r| r.bytes_per_second.get() as i64)
}

/// A route's bandwidth rate as written: unset when neither it nor its
/// `listener` has one, `false` when only the listener has.
fn rate_or_off(rate: Option<ByteRate>, listener: Option<ByteRate>) -> Option<CountOrOff> {
    match (rate, listener) {
        (Some(r), _) => Some(CountOrOff::Count(r.bytes_per_second.get() as i64)),
        (None, Some(_)) => Some(CountOrOff::Switch(false)),
        (None, None) => None,
    }
}

/// A `match` table as written, always present so that `/config` shows its
/// keys; a list without a rule is unset (an empty one would be refused).
fn match_section(rules: &HelloMatch) -> Option<MatchSection> {
    let list = |patterns: &[crate::wire::fingerprint::Ja4Pattern]| {
        (!patterns.is_empty()).then(|| patterns.iter().map(ToString::to_string).collect())
    };
    Some(MatchSection {
        ja4: list(&rules.ja4),
        ja4_deny: list(&rules.ja4_deny),
    })
}

fn backend_section(backend: &Backend) -> BackendSection {
    let Backend {
        // The table's name (`[backend.NAME]`).
        name: _,
        // Written from `members`: the same addresses, with weights and caps.
        addresses: _,
        connect_timeout,
        proxy_protocol,
        proxy_protocol_crc32c,
        max_datagram_size,
        quic_reads_proxy_protocol,
        proxy_protocol_tlvs,
        source,
        policy,
        connect_attempts,
        max_fails,
        fail_backoff,
        health,
        fastest_interval,
        tcp_keepalive,
        members,
        backup_policy,
        max_connections_per_address,
        fastest_measure,
        egress,
    } = backend;
    let mut section = BackendSection {
        addresses: None,
        connect_timeout: Some(duration(*connect_timeout)),
        proxy_protocol: Some(
            match proxy_protocol {
                Outbound::None => "none",
                Outbound::V1 => "v1",
                Outbound::V2 => "v2",
            }
            .to_owned(),
        ),
        proxy_protocol_crc32c: Some(*proxy_protocol_crc32c),
        max_datagram_size: max_datagram_size.map(|n| n as i64),
        quic_reads_proxy_protocol: Some(*quic_reads_proxy_protocol),
        proxy_protocol_tlvs: Some(proxy_protocol_tlvs.iter().map(tlv_entry).collect()),
        policy: Some(policy.as_str().to_owned()),
        // Refused unless an address is a backup.
        backup_policy: members
            .iter()
            .any(|m| m.backup)
            .then(|| backup_policy.as_str().to_owned()),
        // None: min(addresses, 3), counted when connecting.
        connect_attempts: connect_attempts.and_then(count),
        max_fails: count(*max_fails),
        fail_backoff: Some(duration(*fail_backoff)),
        resolve: None,
        resolver: None,
        resolve_interval: None,
        min_ttl: None,
        max_ttl: None,
        // Refused unless the policy is fastest.
        fastest_interval: (*policy == Policy::Fastest).then(|| duration(*fastest_interval)),
        health: health.as_ref().map(health_section),
        cluster: None,
        tcp_keepalive: Some(keepalive_setting(*tcp_keepalive)),
        max_connections_per_address: max_connections_per_address.map(i64::from),
        // Refused unless the policy is fastest, like fastest_interval.
        fastest_measure: (*policy == Policy::Fastest).then(|| fastest_measure.as_str().to_owned()),
        source: source_setting(egress),
    };
    match source {
        AddressSource::Fixed => {
            // Each written as a plain string unless it has a weight or cap.
            section.addresses = Some(members.iter().map(address_entry).collect());
        }
        AddressSource::Dns(dns) => {
            let DnsSource {
                host,
                port,
                resolver,
                interval,
                min_ttl,
                max_ttl,
            } = dns;
            section.resolve = Some(format!("{host}:{port}"));
            section.resolver = resolver.map(|r| r.to_string());
            // With a resolver the record TTL decides, bounded by the TTL
            // keys; without one the interval does.
            if resolver.is_some() {
                section.min_ttl = Some(duration(*min_ttl));
                section.max_ttl = Some(duration(*max_ttl));
            } else {
                section.resolve_interval = Some(duration(*interval));
            }
        }
        AddressSource::Cluster(cluster) => section.cluster = Some(cluster_section(cluster)),
    }
    section
}

/// An address as written: `"IP:port"` with the default weight and no cap
/// of its own, otherwise a table with both keys.
fn address_entry(member: &Member) -> AddressEntry {
    let Member {
        addr,
        weight,
        max_connections,
        source,
        backup,
    } = member;
    if *weight == super::DEFAULT_WEIGHT && max_connections.is_none() && source.is_none() && !backup
    {
        AddressEntry::Plain(addr.to_string())
    } else {
        AddressEntry::Table(AddressTable {
            address: addr.to_string(),
            weight: Some(i64::from(*weight)),
            max_connections: max_connections.map(i64::from),
            source: source.as_ref().and_then(source_setting),
            backup: Some(*backup),
        })
    }
}

/// `source` as written; unset for the host's choice.
fn source_setting(egress: &Egress) -> Option<SourceSetting> {
    match egress {
        Egress::Host => None,
        Egress::Client => Some(SourceSetting::Word("client".to_owned())),
        Egress::Addresses(SourceAddresses { addresses, ports }) => {
            Some(SourceSetting::Table(EgressSourceTable {
                addresses: Some(addresses.iter().map(|a| a.to_string()).collect()),
                ports: ports.map(|(low, high)| format!("{low}-{high}")),
            }))
        }
    }
}

fn health_section(health: &HealthCheck) -> HealthSection {
    let HealthCheck {
        interval,
        timeout,
        rise,
        fall,
        kind,
    } = health;
    HealthSection {
        interval: Some(duration(*interval)),
        timeout: Some(duration(*timeout)),
        rise: count(*rise),
        fall: count(*fall),
        kind: Some(kind.as_str().to_owned()),
        sni: match kind {
            HealthKind::Tcp => None,
            HealthKind::Tls { sni } => Some(sni.clone()),
        },
    }
}

fn cluster_section(cluster: &Cluster) -> ClusterSection {
    let Cluster {
        lookup,
        local_backend,
        positive_ttl,
        negative_ttl,
        lookup_timeout,
        allowed_targets,
        max_lookups_in_flight,
        new_names_per_second,
        protocol,
        headers,
        tls,
        node_choice,
        local_overrides,
        hop_proxy_protocol,
        this_node,
    } = cluster;
    let (dns_server, port, lookup_url, resolver) = match lookup {
        ClusterLookup::Dns { server, port } => (Some(server.to_string()), count(*port), None, None),
        ClusterLookup::Http { url, resolver } => (
            None,
            None,
            Some(url.clone()),
            resolver.map(|r| r.to_string()),
        ),
    };
    // Pangolin lookups and Gerbil's node choice (issue 17): what came from
    // a file is shown as its path, never as its contents.
    let path = |p: &Option<std::path::PathBuf>| p.as_ref().map(|p| p.display().to_string());
    let (public_key, public_key_file, default_port) = match protocol {
        ClusterProtocol::Snirelay => (None, None, None),
        ClusterProtocol::Pangolin {
            public_key,
            public_key_file,
            default_port,
        } => match public_key_file {
            Some(file) => (None, path(&Some(file.clone())), count(*default_port)),
            None => (Some(public_key.clone()), None, count(*default_port)),
        },
    };
    let headers = (!headers.is_empty()).then(|| {
        headers
            .iter()
            .map(|h| {
                let value = match &h.file {
                    Some(file) => HeaderValueSetting::File(HeaderFile {
                        file: file.display().to_string(),
                    }),
                    None => HeaderValueSetting::Text(h.value.clone()),
                };
                (h.name.clone(), value)
            })
            .collect()
    });
    let (ca_file, client_cert_file, client_key_file) = match tls {
        Some(tls) => (
            path(&tls.ca_file),
            path(&tls.client_cert_file),
            path(&tls.client_key_file),
        ),
        None => (None, None, None),
    };
    ClusterSection {
        dns_server,
        port,
        lookup_url: lookup_url.clone(),
        resolver,
        local_backend: local_backend.clone(),
        positive_ttl: Some(duration(*positive_ttl)),
        negative_ttl: Some(duration(*negative_ttl)),
        lookup_timeout: Some(duration(*lookup_timeout)),
        allowed_targets: Some(allowed_targets.iter().map(|c| c.to_string()).collect()),
        max_lookups_in_flight: count(*max_lookups_in_flight),
        new_names_per_second: count(*new_names_per_second),
        protocol: lookup_url.is_some().then(|| protocol.as_str().to_owned()),
        public_key,
        public_key_file,
        default_port,
        headers,
        ca_file,
        client_cert_file,
        client_key_file,
        node_choice: Some(node_choice.as_str().to_owned()),
        // Pangolin nodes (issue 17).
        local_overrides: Some(local_overrides.iter().map(|p| p.to_string()).collect()),
        hop_proxy_protocol: Some(
            match hop_proxy_protocol {
                Outbound::V1 => "v1",
                _ => "v2",
            }
            .to_owned(),
        ),
        this_node: (!this_node.is_empty())
            .then(|| this_node.iter().map(|n| n.to_string()).collect()),
    }
}

/// A key whose value in the file differs from the value the process runs
/// with, and that only a restart applies.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct PendingRestart {
    /// The key in TOML path form (`global.threads`).
    pub key: &'static str,
    /// The value in force, as `/config` would show it (`null`: not set).
    pub running: Value,
    /// The value the file now gives it.
    pub file: Value,
}

/// The keys read once, at start: what a reload leaves as it was, each with
/// how to read it from the file model. `admin.listen` also stands for the
/// `[admin]` section itself (`null` without it): the admin listener is
/// started, moved or removed only by a restart; so is every `[log]` key.
/// (A kept listener socket's
/// `backlog` and `reuse_port` are set when it is bound; see the reload
/// section of docs/operations.md.)
pub(crate) const RESTART_KEYS: [(&str, ReadKey); 9] = [
    ("global.threads", |f| json(f.global.threads)),
    ("global.pipe_size", |f| json(f.global.pipe_size)),
    ("global.max_pipes", |f| json(f.global.max_pipes)),
    ("admin.listen", |f| {
        json(f.admin.as_ref().and_then(|a| a.listen.as_deref()))
    }),
    // The log writer (and the subscriber in front of it) is set up once,
    // before the first line: a changed `[log]` takes a restart.
    ("log.target", |f| json(&f.log.target)),
    ("log.syslog", |f| json(&f.log.syslog)),
    ("log.facility", |f| json(&f.log.facility)),
    ("log.syslog_format", |f| json(&f.log.syslog_format)),
    ("log.queue", |f| json(f.log.queue)),
];

/// The part of `config`'s file model [`RESTART_KEYS`] read: `[global]`,
/// `[admin]` and `[log]`, built from those sections alone. Listeners,
/// routes and backends, which a reload applies, are left out, so that
/// keeping the started configuration, and comparing a reloaded one with
/// it, costs nothing per name, route or backend (a whole
/// [`Config::to_file`] of 100,000 names is a transient 100,000 strings).
pub(crate) fn restart_part(config: &Config) -> FileConfig {
    FileConfig {
        global: global_section(&config.global),
        admin: config.admin.as_ref().map(admin_section),
        log: log_section(&config.log),
        ..FileConfig::default()
    }
}

/// Reads one key's value from the file model, as `/config` shows it.
pub(crate) type ReadKey = fn(&FileConfig) -> Value;

fn json(value: impl Serialize) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// The [`RESTART_KEYS`] whose value in `file` differs from the one the
/// process started with (`running`, kept as the file model: data only, so
/// holding it keeps no compiled state of the first snapshot alive), in
/// that order.
pub(crate) fn pending_restart(running: &FileConfig, file: &FileConfig) -> Vec<PendingRestart> {
    RESTART_KEYS
        .into_iter()
        .filter_map(|(key, read)| {
            let (running, file) = (read(running), read(file));
            (running != file).then_some(PendingRestart { key, running, file })
        })
        .collect()
}

#[cfg(test)]
mod tests;
