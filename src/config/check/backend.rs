//! Checks `[backend.NAME]` and its `[health]`: the address source
//! (`addresses`, `resolve` or `[cluster]`), policy, passive and active
//! health, PROXY headers and caps.
//!
//! Not here: the `[cluster]` table (`check::cluster`), or connecting.

use super::*;

impl Checker {
    pub(super) fn backend(&mut self, name: &str, section: &BackendSection) -> Option<Backend> {
        let key = format!("backend.{name}");
        let sources = [
            section.addresses.is_some(),
            section.resolve.is_some(),
            section.cluster.is_some(),
        ];
        match sources.iter().filter(|&&set| set).count() {
            1 => {}
            0 => {
                self.problem(
                    &key,
                    "needs one of `addresses`, `resolve` or a [cluster] section",
                );
                return None;
            }
            _ => {
                self.problem(
                    &key,
                    "`addresses`, `resolve` and [cluster] are alternatives; set only one",
                );
                return None;
            }
        }
        let texts = section.addresses.as_deref().unwrap_or_default();
        if section.addresses.is_some() && texts.is_empty() {
            self.problem(
                format!("{key}.addresses"),
                "at least one address is required",
            );
        }
        let members: Vec<Member> = texts
            .iter()
            .enumerate()
            .filter_map(|(i, entry)| self.member(&format!("{key}.addresses[{i}]"), entry))
            .collect();
        let addresses: Vec<SocketAddr> = members.iter().map(|m| m.addr).collect();
        let max_connections_per_address = self.address_cap(
            &format!("{key}.max_connections_per_address"),
            section.max_connections_per_address,
        );
        let connect_timeout = self.duration(
            &format!("{key}.connect_timeout"),
            &section.connect_timeout,
            DEFAULT_CONNECT_TIMEOUT,
        );
        // A cluster backend's header towards other nodes is its
        // `hop_proxy_protocol` (checked with the [cluster] section).
        let hop = section
            .cluster
            .as_ref()
            .map(|c| match c.hop_proxy_protocol.as_deref() {
                Some("v1") => Outbound::V1,
                _ => DEFAULT_HOP_PROXY_PROTOCOL,
            });
        let proxy_default = hop.unwrap_or(DEFAULT_PROXY_PROTOCOL);
        let proxy_protocol = match section.proxy_protocol.as_deref() {
            None => Some(proxy_default),
            Some("none") => Some(Outbound::None),
            Some("v1") => Some(Outbound::V1),
            Some("v2") => Some(Outbound::V2),
            Some(other) => {
                self.problem(
                    format!("{key}.proxy_protocol"),
                    format!("{other:?} is not one of \"v2\", \"v1\", \"none\""),
                );
                None
            }
        };
        let proxy_protocol_crc32c = section
            .proxy_protocol_crc32c
            .unwrap_or(DEFAULT_PROXY_PROTOCOL_CRC32C);
        if proxy_protocol_crc32c && proxy_protocol.is_some_and(|p| p != Outbound::V2) {
            self.problem(
                format!("{key}.proxy_protocol_crc32c"),
                "true needs proxy_protocol = \"v2\" (only v2 headers carry a checksum)",
            );
        }
        // Unset stays unset (the default is the sender's), so the
        // effective configuration shows what the file said.
        let max_datagram_size = match section.max_datagram_size {
            None => Some(None),
            Some(_) => self
                .ranged(
                    &format!("{key}.max_datagram_size"),
                    section.max_datagram_size,
                    MAX_DATAGRAM_SIZE_RANGE,
                    0,
                )
                .map(|n| Some(n as usize)),
        };
        if section.max_datagram_size.is_some() && proxy_protocol.is_some_and(|p| p != Outbound::V2)
        {
            self.problem(
                format!("{key}.max_datagram_size"),
                "bounds the PROXY v2 header a QUIC flow's datagrams carry: it needs proxy_protocol = \"v2\" (v1 has no UDP form)",
            );
        }
        let quic_reads_proxy_protocol = section
            .quic_reads_proxy_protocol
            .unwrap_or(DEFAULT_QUIC_READS_PROXY_PROTOCOL);
        if quic_reads_proxy_protocol
            && (hop.is_some() || proxy_protocol.is_some_and(|p| p != Outbound::V2))
        {
            self.problem(
                format!("{key}.quic_reads_proxy_protocol"),
                if hop.is_some() {
                    "a [cluster] backend's hops go to other snirelay nodes, which read them; \
                     leave it out (set it on the cluster's local_backend if that one sends v2)"
                } else {
                    "true says the QUIC server reads the PROXY v2 header a quic listener sends: \
                     it needs proxy_protocol = \"v2\""
                },
            );
        }
        if let Some(hop) = hop
            && proxy_protocol.is_some_and(|p| p != hop)
        {
            self.problem(
                format!("{key}.proxy_protocol"),
                "a [cluster] backend forwards to other nodes with PROXY v2 (it carries the \
                 client and the hop count) or, with `hop_proxy_protocol = \"v1\"`, v1; \
                 leave it unset or set the same version",
            );
        }
        let proxy_protocol_tlvs =
            self.proxy_tlvs(&key, section.proxy_protocol_tlvs.as_deref(), proxy_protocol);
        let policy = self.policy(&key, section);
        let connect_attempts = match section.connect_attempts {
            None => Some(None),
            Some(v) => self
                .ranged(
                    &format!("{key}.connect_attempts"),
                    Some(v),
                    CONNECT_ATTEMPTS_RANGE,
                    0,
                )
                .map(|n| Some(n as usize)),
        };
        let max_fails = self.ranged(
            &format!("{key}.max_fails"),
            section.max_fails,
            MAX_FAILS_RANGE,
            i64::from(DEFAULT_MAX_FAILS),
        );
        let fail_backoff = self.duration(
            &format!("{key}.fail_backoff"),
            &section.fail_backoff,
            DEFAULT_FAIL_BACKOFF,
        );
        let fastest_interval = self.duration(
            &format!("{key}.fastest_interval"),
            &section.fastest_interval,
            DEFAULT_FASTEST_INTERVAL,
        );
        // Which keys the table sets, by name, for the policies' own keys.
        let written = toml::Value::try_from(section).ok();
        let is_set = |name: &str| written.as_ref().and_then(|t| t.get(name)).is_some();
        for (own, problem) in Policy::misplaced_keys(policy, is_set) {
            self.problem(format!("{key}.{own}"), problem);
        }
        let health = match &section.health {
            None => Some(None),
            Some(health) => self.health(&format!("{key}.health"), health).map(Some),
        };
        let fastest_measure = match section.fastest_measure.as_deref() {
            None => Some(DEFAULT_FASTEST_MEASURE),
            Some("connect") => Some(FastestMeasure::Connect),
            Some("tls") => {
                let tls_check = section
                    .health
                    .as_ref()
                    .is_some_and(|h| h.kind.as_deref() == Some("tls"));
                if !tls_check {
                    self.problem(
                        format!("{key}.fastest_measure"),
                        "\"tls\" times the TLS health check's ClientHello; it needs \
                         [backend.*.health] kind = \"tls\" (with its sni)",
                    );
                }
                Some(FastestMeasure::Tls)
            }
            Some(other) => {
                self.problem(
                    format!("{key}.fastest_measure"),
                    format!("{other:?} is not one of \"connect\", \"tls\""),
                );
                None
            }
        };
        let source = self.address_source(&key, section);
        if section.cluster.is_some() {
            // Its endpoint state is kept per site, so a cap would count
            // connections per (site, node), not per node.
            if section.max_connections_per_address.is_some() {
                self.problem(
                    format!("{key}.max_connections_per_address"),
                    "a [cluster] backend's nodes are tracked per SNI; cap its local_backend instead",
                );
            }
            if section.health.is_some() {
                self.problem(
                    format!("{key}.health"),
                    "a [cluster] backend's nodes change per SNI; check the local backend instead",
                );
            }
            if section.policy.is_some() && policy.is_some_and(|p| p != Policy::CLUSTER) {
                self.problem(
                    format!("{key}.policy"),
                    format!(
                        "a [cluster] backend chooses among a site's nodes by {:?}",
                        Policy::CLUSTER.as_str()
                    ),
                );
            }
        }
        let tcp_keepalive = self.keepalive(
            &format!("{key}.tcp_keepalive"),
            section.tcp_keepalive.as_ref(),
        );
        let egress = self
            .egress(&format!("{key}.source"), section.source.as_ref())
            .map(Option::unwrap_or_default);
        if addresses.len() != texts.len() {
            return None;
        }
        let egress = egress?;
        self.egress_families(&key, &egress, &members);
        let backup_policy = self.backup_policy(&key, section, &members);
        let policy = match (&source, policy) {
            (Some(AddressSource::Cluster(_)), _) => Policy::CLUSTER,
            (_, policy) => policy?,
        };
        Some(Backend {
            name: name.to_owned(),
            addresses,
            connect_timeout: connect_timeout?,
            proxy_protocol: proxy_protocol?,
            proxy_protocol_crc32c,
            max_datagram_size: max_datagram_size?,
            quic_reads_proxy_protocol,
            proxy_protocol_tlvs: proxy_protocol_tlvs?,
            source: source?,
            policy,
            connect_attempts: connect_attempts?,
            max_fails: max_fails? as u32,
            fail_backoff: fail_backoff?,
            health: health?,
            fastest_interval: fastest_interval?,
            tcp_keepalive: tcp_keepalive?,
            members,
            backup_policy: backup_policy?,
            max_connections_per_address: max_connections_per_address?,
            fastest_measure: fastest_measure?,
            egress,
        })
    }

    /// One `addresses` entry: a plain `"IP:port"` or a table.
    pub(super) fn member(&mut self, key: &str, entry: &AddressEntry) -> Option<Member> {
        let (text, weight, max_connections, source, backup) = match entry {
            AddressEntry::Plain(text) => (text, None, None, None, None),
            AddressEntry::Table(AddressTable {
                address,
                weight,
                max_connections,
                source,
                backup,
            }) => (address, *weight, *max_connections, source.as_ref(), *backup),
        };
        let addr_key = match entry {
            AddressEntry::Plain(_) => key.to_owned(),
            AddressEntry::Table(_) => format!("{key}.address"),
        };
        let addr = self.socket_addr(&addr_key, text);
        let weight = self.ranged(
            &format!("{key}.weight"),
            weight,
            WEIGHT_RANGE,
            i64::from(DEFAULT_WEIGHT),
        );
        let max_connections = self.address_cap(&format!("{key}.max_connections"), max_connections);
        let source = self.egress(&format!("{key}.source"), source);
        Some(Member {
            addr: addr?,
            weight: weight? as u32,
            max_connections: max_connections?,
            source: source?,
            backup: backup.unwrap_or(false),
        })
    }

    /// `backup_policy` (unset: `"first"`), and the `backup` addresses it
    /// is about: a backend whose every address is a backup has nothing for
    /// them to back up. `None` after a problem.
    pub(super) fn backup_policy(
        &mut self,
        key: &str,
        section: &BackendSection,
        members: &[Member],
    ) -> Option<BackupPolicy> {
        let backups = members.iter().filter(|m| m.backup).count();
        if backups > 0 && backups == members.len() {
            self.problem(
                format!("{key}.addresses"),
                "every address is a backup: a backup takes connections only while every \
                 non-backup address is down; leave backup off the addresses meant to serve",
            );
        }
        let Some(text) = section.backup_policy.as_deref() else {
            return Some(BackupPolicy::First);
        };
        let found = BackupPolicy::ALL.into_iter().find(|p| p.as_str() == text);
        match found {
            None => self.problem(
                format!("{key}.backup_policy"),
                format!("{text:?} is none of \"first\", \"all\""),
            ),
            Some(_) if backups == 0 => self.problem(
                format!("{key}.backup_policy"),
                format!("{text:?} is set but no address has backup = true"),
            ),
            Some(_) => return found,
        }
        None
    }

    /// A per-address connection cap; unset is no cap.
    pub(super) fn address_cap(&mut self, key: &str, value: Option<i64>) -> Option<Option<u32>> {
        match value {
            None => Some(None),
            Some(v) => self
                .ranged(key, Some(v), ADDRESS_CONNECTIONS_RANGE, 0)
                .map(|n| Some(n as u32)),
        }
    }

    pub(super) fn policy(&mut self, key: &str, section: &BackendSection) -> Option<Policy> {
        match section.policy.as_deref() {
            None => Some(DEFAULT_POLICY),
            Some(name) => Policy::parse(name)
                .map_err(|problem| self.problem(format!("{key}.policy"), problem))
                .ok(),
        }
    }

    pub(super) fn health(&mut self, key: &str, section: &HealthSection) -> Option<HealthCheck> {
        let interval = self.duration(
            &format!("{key}.interval"),
            &section.interval,
            DEFAULT_HEALTH_INTERVAL,
        );
        let timeout = self.duration(
            &format!("{key}.timeout"),
            &section.timeout,
            DEFAULT_HEALTH_TIMEOUT,
        );
        let rise = self.ranged(
            &format!("{key}.rise"),
            section.rise,
            RISE_FALL_RANGE,
            i64::from(DEFAULT_HEALTH_RISE),
        );
        let fall = self.ranged(
            &format!("{key}.fall"),
            section.fall,
            RISE_FALL_RANGE,
            i64::from(DEFAULT_HEALTH_FALL),
        );
        let kind = match (
            section.kind.as_deref().unwrap_or(DEFAULT_HEALTH_KIND),
            &section.sni,
        ) {
            ("tcp", None) => Some(HealthKind::Tcp),
            ("tcp", Some(_)) => {
                self.problem(format!("{key}.sni"), "only applies with kind = \"tls\"");
                None
            }
            ("tls", None) => {
                self.problem(
                    format!("{key}.sni"),
                    "kind = \"tls\" needs the server name its ClientHello sends",
                );
                None
            }
            ("tls", Some(sni)) => match crate::wire::sni::Sni::parse_written(sni.as_bytes()) {
                Ok(name) => Some(HealthKind::Tls {
                    sni: name.as_str().to_owned(),
                }),
                Err(e) => {
                    self.problem(
                        format!("{key}.sni"),
                        format!("{sni:?} is not a host name ({e})"),
                    );
                    None
                }
            },
            (other, _) => {
                self.problem(
                    format!("{key}.kind"),
                    format!("{other:?} is not one of \"tcp\", \"tls\""),
                );
                None
            }
        };
        Some(HealthCheck {
            interval: interval?,
            timeout: timeout?,
            rise: rise? as u32,
            fall: fall? as u32,
            kind: kind?,
        })
    }

    pub(super) fn address_source(
        &mut self,
        key: &str,
        section: &BackendSection,
    ) -> Option<AddressSource> {
        let dns_only = [
            ("resolver", section.resolver.is_some()),
            ("resolve_interval", section.resolve_interval.is_some()),
            ("min_ttl", section.min_ttl.is_some()),
            ("max_ttl", section.max_ttl.is_some()),
        ];
        if section.resolve.is_none() {
            for (name, set) in dns_only {
                if set {
                    self.problem(format!("{key}.{name}"), "only applies with `resolve`");
                }
            }
        }
        if let Some(cluster) = &section.cluster {
            return self
                .cluster(&format!("{key}.cluster"), cluster)
                .map(AddressSource::Cluster);
        }
        let Some(target) = &section.resolve else {
            return Some(AddressSource::Fixed);
        };
        let host_port = match target.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() => port
                .parse::<u16>()
                .ok()
                .filter(|&p| p != 0)
                .map(|p| (host.trim_start_matches('[').trim_end_matches(']'), p)),
            _ => None,
        };
        let Some((host, port)) = host_port else {
            self.problem(
                format!("{key}.resolve"),
                format!("{target:?} is not host:port (e.g. \"origin.example.net:443\")"),
            );
            return None;
        };
        if host.parse::<std::net::IpAddr>().is_ok() {
            self.problem(
                format!("{key}.resolve"),
                format!("{target:?} is an address, not a name; list it in `addresses`"),
            );
            return None;
        }
        let resolver = match &section.resolver {
            None => Some(None),
            Some(text) => self.socket_addr(&format!("{key}.resolver"), text).map(Some),
        };
        let interval = self.duration(
            &format!("{key}.resolve_interval"),
            &section.resolve_interval,
            DEFAULT_RESOLVE_INTERVAL,
        );
        if section.resolver.is_some() && section.resolve_interval.is_some() {
            self.problem(
                format!("{key}.resolve_interval"),
                "with `resolver` the record TTL decides (bounded by min_ttl and max_ttl)",
            );
        }
        if section.resolver.is_none() {
            for (name, set) in &dns_only[2..] {
                if *set {
                    self.problem(
                        format!("{key}.{name}"),
                        "only applies with `resolver` (the system resolver reports no TTL)",
                    );
                }
            }
        }
        let min_ttl = self.duration(&format!("{key}.min_ttl"), &section.min_ttl, DEFAULT_MIN_TTL);
        let max_ttl = self.duration(&format!("{key}.max_ttl"), &section.max_ttl, DEFAULT_MAX_TTL);
        if let (Some(min), Some(max)) = (min_ttl, max_ttl)
            && min > max
        {
            self.problem(
                format!("{key}.min_ttl"),
                format!(
                    "{:?} is longer than max_ttl ({:?})",
                    humantime::format_duration(min).to_string(),
                    humantime::format_duration(max).to_string()
                ),
            );
            return None;
        }
        Some(AddressSource::Dns(DnsSource {
            host: host.to_ascii_lowercase(),
            port,
            resolver: resolver?,
            interval: interval?,
            min_ttl: min_ttl?,
            max_ttl: max_ttl?,
        }))
    }
}
