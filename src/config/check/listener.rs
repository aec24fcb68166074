//! Checks `[[listener]]` and its `[listener.proxy_protocol]`: addresses,
//! hello rules, timeouts, the keys a QUIC listener refuses
//! (`keys::Applies::Tcp`), and the trusted peers (host names resolved now).
//!
//! Not here: `[listener.limits]` (`check::limits`), binding sockets.

use super::*;

impl Checker {
    pub(super) fn listener(
        &mut self,
        key: &str,
        section: &ListenerSection,
        backends: &BTreeMap<String, Arc<Backend>>,
        binds: &mut HashSet<(bool, SocketAddr)>,
    ) -> Option<Listener> {
        if section.name.is_empty() {
            self.problem(format!("{key}.name"), "must not be empty");
        }
        let raw_listen = section.listen.as_slice();
        if raw_listen.is_empty() {
            self.problem(format!("{key}.listen"), "at least one address is required");
        }
        let mut listen = Vec::new();
        for (i, text) in raw_listen.iter().enumerate() {
            let addr_key = format!("{key}.listen[{i}]");
            let Some(addr) = self.socket_addr(&addr_key, text) else {
                continue;
            };
            // Port 0 asks the kernel for a free port, so it never collides.
            // A UDP (quic) and a TCP listener may share an address.
            let udp = section.protocol.as_deref() == Some("quic");
            if addr.port() != 0 && !binds.insert((udp, addr)) {
                self.problem(addr_key, format!("{text:?} is listed more than once"));
                continue;
            }
            listen.push(addr);
        }
        let backlog = self.ranged(
            &format!("{key}.backlog"),
            section.backlog,
            BACKLOG_RANGE,
            i64::from(DEFAULT_BACKLOG),
        );
        let max_client_hello_bytes = self.ranged(
            &format!("{key}.max_client_hello_bytes"),
            section.max_client_hello_bytes,
            MAX_CLIENT_HELLO_BYTES_RANGE,
            DEFAULT_MAX_CLIENT_HELLO_BYTES as i64,
        );
        let client_hello_timeout = self.duration(
            &format!("{key}.client_hello_timeout"),
            &section.client_hello_timeout,
            DEFAULT_CLIENT_HELLO_TIMEOUT,
        );
        // QUIC listeners (issue 18): parsed first, since it sets defaults.
        let protocol = self.protocol(key, section);
        let idle_timeout = self.duration(
            &format!("{key}.idle_timeout"),
            &section.idle_timeout,
            match protocol {
                Some(Protocol::Quic) => DEFAULT_QUIC_IDLE_TIMEOUT,
                _ => DEFAULT_IDLE_TIMEOUT,
            },
        );
        let no_sni = match section.no_sni.as_deref() {
            None | Some("reject") => Some(NoSni::Reject),
            Some(name) => match backends.get(name) {
                Some(backend) => Some(NoSni::Backend(backend.clone())),
                // Declared but invalid: its own problems are reported already.
                None if self.declared_backends.contains(name) => None,
                None => {
                    self.problem(
                        format!("{key}.no_sni"),
                        format!("{name:?} is neither \"reject\" nor the name of a [backend.*]"),
                    );
                    None
                }
            },
        };
        let proxy_protocol = match &section.proxy_protocol {
            None => Some(None),
            Some(pp) => self.inbound(&format!("{key}.proxy_protocol"), pp).map(Some),
        };
        let half_close_timeout = self.duration(
            &format!("{key}.half_close_timeout"),
            &section.half_close_timeout,
            DEFAULT_HALF_CLOSE_TIMEOUT,
        );
        let max_connection_lifetime = self.duration_or_off(
            &format!("{key}.max_connection_lifetime"),
            &section.max_connection_lifetime,
            DEFAULT_MAX_CONNECTION_LIFETIME,
        );
        let default_limits = LimitsSection::default();
        let limits = self.limits(
            &format!("{key}.limits"),
            section.limits.as_ref().unwrap_or(&default_limits),
            Some(DEFAULT_CONNECTIONS_PER_SOURCE),
        );
        let tcp_keepalive = self.keepalive(
            &format!("{key}.tcp_keepalive"),
            section.tcp_keepalive.as_ref(),
        );
        let min_tls_version = self.min_tls_version(
            &format!("{key}.min_tls_version"),
            section.min_tls_version.as_deref(),
        );
        let ech = match section.ech.as_deref() {
            None => Some(DEFAULT_ECH),
            Some(text) => self.ech_policy(&format!("{key}.ech"), text, backends),
        };
        let ech_config_ids = self.ech_config_ids(
            &format!("{key}.ech_config_ids"),
            section.ech_config_ids.as_deref(),
        );
        let hello_match = self.hello_match(key, section.r#match.as_ref());
        let bandwidth = self.listener_bandwidth(key, section);
        Some(Listener {
            name: section.name.clone(),
            listen: (listen.len() == raw_listen.len()).then_some(listen)?,
            backlog: backlog? as u32,
            client_hello_timeout: client_hello_timeout?,
            idle_timeout: idle_timeout?,
            max_client_hello_bytes: max_client_hello_bytes? as usize,
            no_sni: no_sni?,
            routes: Vec::new(),
            names: Arc::default(),
            proxy_protocol: proxy_protocol?,
            reuse_port: section.reuse_port.unwrap_or(DEFAULT_REUSE_PORT),
            splice: DEFAULT_SPLICE,
            limits: limits?,
            half_close_timeout: half_close_timeout?,
            max_connection_lifetime: max_connection_lifetime?,
            // A QUIC listener has no TCP socket to keep alive.
            tcp_keepalive: tcp_keepalive?.filter(|_| protocol != Some(Protocol::Quic)),
            min_tls_version: min_tls_version?,
            ech: ech?,
            ech_config_ids: ech_config_ids?,
            protocol: protocol?,
            fingerprints: section.fingerprints.unwrap_or(DEFAULT_FINGERPRINTS),
            hello_match: hello_match?,
            bandwidth: bandwidth?,
        })
    }

    // QUIC listeners (issue 18).
    /// `protocol`: `"tcp"` or `"quic"`; on a QUIC listener, the keys that
    /// only mean something for TCP are refused, and a `no_sni` or `ech`
    /// backend must be one a QUIC flow can reach.
    pub(super) fn protocol(&mut self, key: &str, section: &ListenerSection) -> Option<Protocol> {
        let protocol = match section.protocol.as_deref() {
            None | Some("tcp") => Protocol::Tcp,
            Some("quic") => Protocol::Quic,
            Some(other) => {
                self.problem(
                    format!("{key}.protocol"),
                    format!("{other:?} is neither \"tcp\" nor \"quic\""),
                );
                return None;
            }
        };
        if protocol == Protocol::Quic {
            // The listener keys declared TCP-only (`keys::Applies::Tcp`).
            let written = toml::Value::try_from(section).ok();
            let is_set = |name: &str| written.as_ref().and_then(|t| t.get(name)).is_some();
            for name in keys::tcp_only("listener") {
                if is_set(name) {
                    self.problem(
                        format!("{key}.{name}"),
                        format!(
                            "is a TCP setting; a protocol = \"quic\" listener (UDP) has no use for it (listener {:?})",
                            section.name
                        ),
                    );
                }
            }
        }
        Some(protocol)
    }

    /// On a QUIC listener, `backend` (reached from `key`) may send a PROXY
    /// v2 header over UDP ([`crate::proxy::datagram`]) but not v1, which
    /// has no UDP form: a plain backend or a cluster's `local_backend`
    /// that sends v1 is refused; a cluster whose `hop_proxy_protocol` is
    /// v1 (nodes that still run Gerbil) sends its flows to other nodes
    /// with no header, as before hop counts went over UDP. A cluster that
    /// asks DNS (`dns_server`) needs the listener bound to its node's own
    /// addresses, since a flow knows the address it came to only from its
    /// socket and an answer naming this node must be recognised. A
    /// backend (or `local_backend`) that sends v2 is warned about
    /// (`proxy_over_quic`); `reached` says how the listener
    /// reaches it (`route "site"`, `no_sni`).
    pub(super) fn quic_backend(
        &mut self,
        key: &str,
        reached: &str,
        listener: &Listener,
        backend: &Backend,
        backends: &BTreeMap<String, Arc<Backend>>,
    ) {
        if listener.protocol != Protocol::Quic {
            return;
        }
        self.quic_backends.insert(backend.name.clone());
        let cluster = backend.cluster();
        if cluster.is_none() {
            self.proxy_over_quic(key, reached, listener, backend);
        }
        if cluster.is_none() && backend.proxy_protocol == Outbound::V1 {
            self.problem(
                key.to_owned(),
                format!(
                    "backend {:?} sends PROXY v1 headers, which have no UDP form; a protocol = \"quic\" \
                     listener sends proxy_protocol = \"v2\" over UDP (or none)",
                    backend.name
                ),
            );
        }
        let Some(cluster) = cluster else {
            return;
        };
        let local = cluster
            .local_backend
            .as_deref()
            .and_then(|name| backends.get(name));
        if let Some(local) = local {
            self.quic_backends.insert(local.name.clone());
            self.proxy_over_quic(key, reached, listener, local);
            if local.proxy_protocol == Outbound::V1 {
                self.problem(
                    key.to_owned(),
                    format!(
                        "backend {:?} sends this node's sites to local_backend {:?}, which sends PROXY \
                         v1 headers, which have no UDP form; a protocol = \"quic\" listener sends \
                         proxy_protocol = \"v2\" over UDP (or none)",
                        backend.name, local.name
                    ),
                );
            }
        }
        if matches!(cluster.lookup, ClusterLookup::Dns { .. })
            && let Some(wildcard) = listener.listen.iter().find(|a| a.ip().is_unspecified())
        {
            self.problem(
                key.to_owned(),
                format!(
                    "backend {:?} asks a dns_server, whose answer names this node by the address \
                     a client dialled; a protocol = \"quic\" listener knows only its socket's, \
                     and {wildcard} is a wildcard: listen on the node's own addresses",
                    backend.name
                ),
            );
        }
    }

    /// A warning, not an error, when `backend` gets PROXY v2 headers over
    /// UDP from quic `listener` and does not say its QUIC server reads
    /// them (`quic_reads_proxy_protocol`): a QUIC stack that does not strip
    /// the header drops every datagram that carries one, and most cannot
    /// (docs/quic.md, "PROXY v2 over UDP"). A warning because the header
    /// is what was asked for, and another snirelay (or a server that
    /// reads it) behind the backend's addresses is a sound setup. A
    /// `[cluster]` backend's own hops go to other snirelay nodes, which
    /// read them: not warned about (its `local_backend` is).
    fn proxy_over_quic(
        &mut self,
        key: &str,
        reached: &str,
        listener: &Listener,
        backend: &Backend,
    ) {
        if backend.proxy_protocol != Outbound::V2 || backend.quic_reads_proxy_protocol {
            return;
        }
        self.warn(
            key,
            format!(
                "backend {:?} sends PROXY v2 headers (proxy_protocol = \"v2\"), and {reached} \
                 reaches it from protocol = \"quic\" listener {:?}: each flow's first datagrams \
                 then carry the header over UDP, which most QUIC servers cannot strip (they drop \
                 those datagrams, and the handshake never completes); if the QUIC server at its \
                 addresses reads them (another snirelay with [listener.proxy_protocol], say), \
                 set `quic_reads_proxy_protocol = true` in [backend.{}], else send this \
                 listener's flows to a backend without proxy_protocol",
                backend.name, listener.name, backend.name
            ),
        );
    }

    /// `min_tls_version`: `"1.0"` … `"1.3"`.
    pub(super) fn min_tls_version(
        &mut self,
        key: &str,
        value: Option<&str>,
    ) -> Option<Option<TlsVersion>> {
        let Some(text) = value else {
            return Some(DEFAULT_MIN_TLS_VERSION);
        };
        match TlsVersion::ALL.iter().find(|v| v.as_str() == text) {
            Some(version) => Some(Some(*version)),
            None => {
                self.problem(
                    key,
                    format!("{text:?} is not one of \"1.0\", \"1.1\", \"1.2\", \"1.3\""),
                );
                None
            }
        }
    }

    /// `ech` (listener or route): `"pass"`, `"reject"` or a backend name.
    pub(super) fn ech_policy(
        &mut self,
        key: &str,
        text: &str,
        backends: &BTreeMap<String, Arc<Backend>>,
    ) -> Option<EchPolicy> {
        match text {
            "pass" => Some(EchPolicy::Pass),
            "reject" => Some(EchPolicy::Reject),
            name => match backends.get(name) {
                Some(backend) => Some(EchPolicy::Backend(backend.clone())),
                // Declared but invalid: its own problems are reported already.
                None if self.declared_backends.contains(name) => None,
                None => {
                    self.problem(
                        key,
                        format!(
                            "{name:?} is neither \"pass\", \"reject\" nor the name of a [backend.*]"
                        ),
                    );
                    None
                }
            },
        }
    }

    /// `ech_config_ids`: distinct ids, each 0–255; unset or empty is none.
    pub(super) fn ech_config_ids(&mut self, key: &str, ids: Option<&[i64]>) -> Option<Vec<u8>> {
        let Some(ids) = ids else {
            return Some(Vec::new());
        };
        if ids.is_empty() {
            self.problem(
                key,
                "[] lists no id; leave the key out when no ECH configuration is known",
            );
            return None;
        }
        let problems = self.problems.len();
        let mut valid = Vec::new();
        for (i, &id) in ids.iter().enumerate() {
            match u8::try_from(id) {
                Ok(id) if valid.contains(&id) => {
                    self.problem(format!("{key}[{i}]"), format!("{id} is listed twice"))
                }
                Ok(id) => valid.push(id),
                Err(_) => self.problem(
                    format!("{key}[{i}]"),
                    format!("{id} is out of range (0..=255: a config id is one byte)"),
                ),
            }
        }
        valid.sort_unstable();
        (self.problems.len() == problems).then_some(valid)
    }

    pub(super) fn inbound(&mut self, key: &str, section: &ProxyProtocolSection) -> Option<Inbound> {
        if section.trusted.is_empty() {
            self.problem(
                format!("{key}.trusted"),
                "at least one network is required (only trusted peers may send a header)",
            );
        }
        let mut trusted = Vec::new();
        let mut trusted_names = Vec::new();
        for (i, text) in section.trusted.iter().enumerate() {
            let entry_key = format!("{key}.trusted[{i}]");
            match text.parse::<Cidr>() {
                Ok(net) => trusted.push(net),
                Err(_) if is_host_name(text) => match resolve_name_now(text, "trusted") {
                    Ok(name) => trusted_names.push(name),
                    Err(why) => self.problem(entry_key, why),
                },
                Err(e) => self.problem(entry_key, format!("{text:?}: {e}")),
            }
        }
        let mode = match section.mode.as_deref() {
            None => Some(DEFAULT_PROXY_PROTOCOL_MODE),
            Some("require") => Some(Mode::Require),
            Some("optional") => Some(Mode::Optional),
            Some(other) => {
                self.problem(
                    format!("{key}.mode"),
                    format!("{other:?} is neither \"require\" nor \"optional\""),
                );
                None
            }
        };
        let max_hops = self.ranged(
            &format!("{key}.max_hops"),
            section.max_hops,
            MAX_HOPS_RANGE,
            i64::from(DEFAULT_MAX_HOPS),
        );
        let pass_through_tlvs = self.pass_through_tlvs(key, section.pass_through_tlvs.as_deref());
        (trusted.len() + trusted_names.len() == section.trusted.len()
            && !section.trusted.is_empty())
        .then_some(())?;
        Some(Inbound {
            trusted,
            trusted_names,
            mode: mode?,
            max_hops: max_hops? as u8,
            pass_through_tlvs: pass_through_tlvs?,
        })
    }
}

/// How long the system resolver may take for one host name in
/// `[listener.proxy_protocol] trusted`. The configuration is loaded on the
/// serving task at a reload, so a dead DNS server must not hold it for
/// glibc's own worst case (30 s); past this the name counts as not
/// resolving. The lookup runs on a thread of its own, left to finish.
pub(crate) const TRUSTED_NAME_TIMEOUT: Duration = Duration::from_secs(5);

/// A host name in `[listener.proxy_protocol] trusted` (or `[backend.*.cluster]
/// this_node`: `what` says which, `"trusted"` or `"this_node"`), resolved now
/// through the system resolver (getaddrinfo: /etc/hosts, then DNS), as Gerbil
/// resolves its `TRUSTED_UPSTREAMS` at start. A name that does not resolve
/// is an error naming it: trusting nobody by that name without a word
/// would refuse that peer's every header (`proxy_untrusted`), and a node
/// that does not know itself would relay to itself.
pub(super) fn resolve_name_now(text: &str, what: &str) -> Result<TrustedName, String> {
    use std::net::ToSocketAddrs;
    let name = text.strip_suffix('.').unwrap_or(text).to_ascii_lowercase();
    let (tx, rx) = std::sync::mpsc::channel();
    let asked = name.clone();
    std::thread::spawn(move || {
        let found = (asked.as_str(), 0)
            .to_socket_addrs()
            .map(|addrs| addrs.map(|a| a.ip()).collect::<Vec<IpAddr>>());
        let _ = tx.send(found);
    });
    let must = format!("a {what} name must resolve when the configuration is loaded");
    let found = match rx.recv_timeout(TRUSTED_NAME_TIMEOUT) {
        Ok(Ok(found)) => found,
        Ok(Err(e)) => return Err(format!("host name {name:?} does not resolve ({e}); {must}")),
        Err(_) => {
            return Err(format!(
                "host name {name:?} does not resolve (no answer from the system resolver within {TRUSTED_NAME_TIMEOUT:?}); {must}"
            ));
        }
    };
    let mut addrs: Vec<IpAddr> = Vec::new();
    for ip in found {
        let ip = crate::wire::cidr::canonical(ip);
        if !addrs.contains(&ip) {
            addrs.push(ip);
        }
    }
    if addrs.is_empty() {
        return Err(format!(
            "host name {name:?} does not resolve (no address); {must}"
        ));
    }
    Ok(TrustedName { name, addrs })
}
