//! Checks `[backend.NAME.cluster]`: the lookup (DNS or HTTP, Pangolin's
//! too), its TLS client, headers, targets and local overrides.
//!
//! Not here: the lookups themselves (`backend`).

use super::*;
use crate::system_roots::add_system_roots;

impl Checker {
    pub(super) fn cluster(&mut self, key: &str, section: &ClusterSection) -> Option<Cluster> {
        if section.resolver.is_some() && section.lookup_url.is_none() {
            self.problem(
                format!("{key}.resolver"),
                "only applies with `lookup_url` (it resolves host names in the answers)",
            );
        }
        let lookup = match (&section.dns_server, &section.lookup_url) {
            (Some(server), None) => {
                let server = self.socket_addr(&format!("{key}.dns_server"), server);
                let port = self.ranged(
                    &format!("{key}.port"),
                    section.port,
                    PORT_RANGE,
                    i64::from(DEFAULT_CLUSTER_PORT),
                );
                server.zip(port).map(|(server, port)| ClusterLookup::Dns {
                    server,
                    port: port as u16,
                })
            }
            (None, Some(url)) => {
                if section.port.is_some() {
                    self.problem(
                        format!("{key}.port"),
                        "only applies with `dns_server` (lookup answers carry ip:port)",
                    );
                }
                let valid = url.parse::<hyper::Uri>().ok().filter(|uri| {
                    matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some()
                });
                let resolver = match &section.resolver {
                    None => Some(None),
                    Some(text) => self.socket_addr(&format!("{key}.resolver"), text).map(Some),
                };
                match (valid, resolver) {
                    (Some(_), Some(resolver)) => Some(ClusterLookup::Http {
                        url: url.clone(),
                        resolver,
                    }),
                    // The resolver's problem is already reported.
                    (Some(_), None) => None,
                    (None, _) => {
                        self.problem(
                            format!("{key}.lookup_url"),
                            format!("{url:?} is not an http:// or https:// URL"),
                        );
                        None
                    }
                }
            }
            _ => {
                self.problem(key, "needs exactly one of `dns_server` and `lookup_url`");
                None
            }
        };
        if let Some(local) = &section.local_backend
            && !self.declared_backends.contains(local)
        {
            self.problem(
                format!("{key}.local_backend"),
                format!("{local:?} names no [backend.*] section"),
            );
        }
        let positive_ttl = self.duration(
            &format!("{key}.positive_ttl"),
            &section.positive_ttl,
            DEFAULT_POSITIVE_TTL,
        );
        let negative_ttl = self.duration(
            &format!("{key}.negative_ttl"),
            &section.negative_ttl,
            DEFAULT_NEGATIVE_TTL,
        );
        let lookup_timeout = self.duration(
            &format!("{key}.lookup_timeout"),
            &section.lookup_timeout,
            DEFAULT_LOOKUP_TIMEOUT,
        );
        // Lookup floods (issue 49).
        let max_lookups_in_flight = self.ranged(
            &format!("{key}.max_lookups_in_flight"),
            section.max_lookups_in_flight,
            LOOKUPS_IN_FLIGHT_RANGE,
            DEFAULT_MAX_LOOKUPS_IN_FLIGHT as i64,
        );
        let new_names_per_second = self.ranged(
            &format!("{key}.new_names_per_second"),
            section.new_names_per_second,
            NEW_NAMES_RANGE,
            i64::from(DEFAULT_NEW_NAMES_PER_SECOND),
        );
        let texts = section.allowed_targets.as_deref().unwrap_or_default();
        if texts.is_empty() {
            self.problem(
                format!("{key}.allowed_targets"),
                "at least one network is required: answers steer traffic, so say where it may go",
            );
        }
        let mut allowed_targets = Vec::new();
        for (i, text) in texts.iter().enumerate() {
            match text.parse::<Cidr>() {
                Ok(cidr) => allowed_targets.push(cidr),
                Err(e) => self.problem(
                    format!("{key}.allowed_targets[{i}]"),
                    format!("{text:?}: {e}"),
                ),
            }
        }
        // Pangolin lookups and Gerbil's node choice (issue 17).
        let http = section.lookup_url.as_deref();
        let protocol = self.cluster_protocol(key, section, http.is_some());
        let headers = self.lookup_headers(key, section, http.is_some());
        let tls = self.lookup_tls(key, section, http);
        let node_choice = match section.node_choice.as_deref() {
            None => Some(NodeChoice::default()),
            Some(name) => NodeChoice::parse(name)
                .map_err(|e| self.problem(format!("{key}.node_choice"), e))
                .ok(),
        };
        // Pangolin nodes (issue 17).
        let mut local_overrides = Vec::new();
        let override_texts = section.local_overrides.as_deref().unwrap_or_default();
        for (i, text) in override_texts.iter().enumerate() {
            match Pattern::parse(text) {
                Ok(Pattern::Any) => self.problem(
                    format!("{key}.local_overrides[{i}]"),
                    "\"*\" would send every name to local_backend; name the sites (exact or *.domain)",
                ),
                Ok(pattern) => local_overrides.push(pattern),
                Err(e) => self.problem(
                    format!("{key}.local_overrides[{i}]"),
                    format!("{text:?}: {e}"),
                ),
            }
        }
        if !override_texts.is_empty() && section.local_backend.is_none() {
            self.problem(
                format!("{key}.local_overrides"),
                "needs `local_backend`: the names are sent there",
            );
        }
        let hop_proxy_protocol = match section.hop_proxy_protocol.as_deref() {
            None => Some(DEFAULT_HOP_PROXY_PROTOCOL),
            Some("v2") => Some(Outbound::V2),
            Some("v1") => Some(Outbound::V1),
            Some(other) => {
                self.problem(
                    format!("{key}.hop_proxy_protocol"),
                    format!("{other:?} is not one of \"v2\", \"v1\""),
                );
                None
            }
        };
        let this_node = self.this_node(key, section);
        if allowed_targets.len() != texts.len()
            || texts.is_empty()
            || local_overrides.len() != override_texts.len()
        {
            return None;
        }
        Some(Cluster {
            lookup: lookup?,
            local_backend: section.local_backend.clone(),
            positive_ttl: positive_ttl?,
            negative_ttl: negative_ttl?,
            lookup_timeout: lookup_timeout?,
            allowed_targets,
            max_lookups_in_flight: max_lookups_in_flight? as usize,
            new_names_per_second: new_names_per_second? as u32,
            protocol: protocol?,
            headers: headers?,
            tls: tls?,
            node_choice: node_choice?,
            local_overrides,
            hop_proxy_protocol: hop_proxy_protocol?,
            this_node: this_node?,
        })
    }

    /// `this_node`: addresses as written, host names resolved now (as
    /// `trusted` names are); it needs `local_backend`, where an answer
    /// naming this node goes.
    fn this_node(&mut self, key: &str, section: &ClusterSection) -> Option<Vec<NodeAddress>> {
        let Some(texts) = &section.this_node else {
            return Some(Vec::new());
        };
        let at = format!("{key}.this_node");
        if texts.is_empty() {
            self.problem(
                at,
                "lists nothing; leave it out to take the address a client dialled as this node",
            );
            return None;
        }
        if section.local_backend.is_none() {
            self.problem(
                at,
                "needs `local_backend`: an answer naming this node goes there",
            );
            return None;
        }
        let mut found = Vec::with_capacity(texts.len());
        for (i, text) in texts.iter().enumerate() {
            let entry = format!("{at}[{i}]");
            if let Ok(ip) = text.parse::<IpAddr>() {
                found.push(NodeAddress::Ip(crate::wire::cidr::canonical(ip)));
            } else if is_host_name(text) {
                match super::listener::resolve_name_now(text, "this_node") {
                    Ok(name) => found.push(NodeAddress::Name(name)),
                    Err(why) => self.problem(entry, why),
                }
            } else {
                self.problem(
                    entry,
                    format!(
                        "{text:?} is neither an address nor a host name (a network is not a node)"
                    ),
                );
            }
        }
        (found.len() == texts.len()).then_some(found)
    }

    /// `protocol`, and the keys only `pangolin` takes. `http`: the cluster
    /// asks a `lookup_url` (a DNS lookup has no protocol to choose).
    pub(super) fn cluster_protocol(
        &mut self,
        key: &str,
        section: &ClusterSection,
        http: bool,
    ) -> Option<ClusterProtocol> {
        let name = section.protocol.as_deref().unwrap_or("snirelay");
        if section.protocol.is_some() && !http {
            self.problem(format!("{key}.protocol"), "only applies with `lookup_url`");
            return None;
        }
        match name {
            "snirelay" => {
                let pangolin_only = [
                    ("public_key", section.public_key.is_some()),
                    ("public_key_file", section.public_key_file.is_some()),
                    ("default_port", section.default_port.is_some()),
                ];
                let mut ok = true;
                for (own, set) in pangolin_only {
                    if set {
                        self.problem(
                            format!("{key}.{own}"),
                            "only applies with protocol = \"pangolin\"",
                        );
                        ok = false;
                    }
                }
                ok.then_some(ClusterProtocol::Snirelay)
            }
            "pangolin" => {
                let default_port = self.ranged(
                    &format!("{key}.default_port"),
                    section.default_port,
                    PORT_RANGE,
                    i64::from(DEFAULT_CLUSTER_PORT),
                );
                let (public_key, public_key_file) =
                    match (&section.public_key, &section.public_key_file) {
                        (Some(text), None) => (text.trim().to_owned(), None),
                        (None, Some(path)) => {
                            let path = self.dir.join(path);
                            match std::fs::read_to_string(&path) {
                                Ok(text) => (text.trim().to_owned(), Some(path)),
                                Err(e) => {
                                    self.problem(
                                        format!("{key}.public_key_file"),
                                        format!("{}: {e}", path.display()),
                                    );
                                    return None;
                                }
                            }
                        }
                        _ => {
                            self.problem(
                                format!("{key}.public_key"),
                                "protocol = \"pangolin\" needs exactly one of `public_key` and \
                                 `public_key_file` (Pangolin refuses a lookup without the key)",
                            );
                            return None;
                        }
                    };
                if public_key.is_empty() {
                    let which = if public_key_file.is_some() {
                        "public_key_file"
                    } else {
                        "public_key"
                    };
                    self.problem(format!("{key}.{which}"), "the public key is empty");
                    return None;
                }
                Some(ClusterProtocol::Pangolin {
                    public_key,
                    public_key_file,
                    default_port: default_port? as u16,
                })
            }
            other => {
                self.problem(
                    format!("{key}.protocol"),
                    format!("{other:?} is not one of \"snirelay\", \"pangolin\""),
                );
                None
            }
        }
    }

    /// `[cluster.headers]`: each name an HTTP header the lookup does not
    /// set itself, each value valid in a header (a file's contents without
    /// the trailing newline). Errors never show a value.
    pub(super) fn lookup_headers(
        &mut self,
        key: &str,
        section: &ClusterSection,
        http: bool,
    ) -> Option<Vec<LookupHeader>> {
        let Some(table) = &section.headers else {
            return Some(Vec::new());
        };
        if !http {
            self.problem(format!("{key}.headers"), "only applies with `lookup_url`");
            return None;
        }
        let mut headers = Vec::new();
        let mut ok = true;
        for (name, setting) in table {
            let at = format!("{key}.headers.{name}");
            let parsed = hyper::header::HeaderName::from_bytes(name.as_bytes());
            let Ok(parsed) = parsed else {
                self.problem(at, "not a valid HTTP header name");
                ok = false;
                continue;
            };
            use hyper::header::{
                CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, HOST, TRANSFER_ENCODING,
            };
            if [
                HOST,
                CONTENT_TYPE,
                CONTENT_LENGTH,
                TRANSFER_ENCODING,
                CONNECTION,
            ]
            .contains(&parsed)
            {
                self.problem(at, "the lookup sets this header itself");
                ok = false;
                continue;
            }
            let (value, file) = match setting {
                HeaderValueSetting::Text(text) => (text.clone(), None),
                HeaderValueSetting::File(HeaderFile { file }) => {
                    let path = self.dir.join(file);
                    match std::fs::read_to_string(&path) {
                        Ok(text) => (text.trim_end_matches(['\n', '\r']).to_owned(), Some(path)),
                        Err(e) => {
                            self.problem(at, format!("{}: {e}", path.display()));
                            ok = false;
                            continue;
                        }
                    }
                }
            };
            if hyper::header::HeaderValue::from_str(&value).is_err() {
                let message = match &file {
                    Some(path) => format!(
                        "{}: the contents are not a valid header value (one line of visible ASCII)",
                        path.display()
                    ),
                    None => "not a valid header value (visible ASCII)".to_owned(),
                };
                self.problem(at, message);
                ok = false;
                continue;
            }
            headers.push(LookupHeader {
                name: name.clone(),
                value,
                file,
            });
        }
        ok.then_some(headers)
    }

    /// `ca_file`, `client_cert_file` and `client_key_file`: read and built
    /// into the TLS client of an `https://` `lookup_url` (`None` inside for
    /// any other lookup).
    pub(super) fn lookup_tls(
        &mut self,
        key: &str,
        section: &ClusterSection,
        url: Option<&str>,
    ) -> Option<Option<Arc<LookupTls>>> {
        let uri = url.and_then(|u| u.parse::<hyper::Uri>().ok());
        let https = uri
            .as_ref()
            .is_some_and(|u| u.scheme_str() == Some("https"));
        let keys = [
            ("ca_file", &section.ca_file),
            ("client_cert_file", &section.client_cert_file),
            ("client_key_file", &section.client_key_file),
        ];
        if !https {
            let mut ok = true;
            for (own, value) in keys {
                if value.is_some() {
                    self.problem(
                        format!("{key}.{own}"),
                        "only applies with an https:// `lookup_url`",
                    );
                    ok = false;
                }
            }
            return ok.then_some(None);
        }
        if section.client_cert_file.is_some() != section.client_key_file.is_some() {
            self.problem(
                format!("{key}.client_cert_file"),
                "`client_cert_file` and `client_key_file` go together",
            );
            return None;
        }
        // The name the control plane's certificate must carry.
        let host = uri.as_ref().and_then(|u| u.host()).unwrap_or_default();
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if rustls::pki_types::ServerName::try_from(host).is_err() {
            self.problem(
                format!("{key}.lookup_url"),
                format!("{host:?} is not a host name or address TLS can verify"),
            );
            return None;
        }
        let mut paths: [Option<PathBuf>; 3] = [None, None, None];
        let mut contents: [Arc<[u8]>; 3] = [Arc::from([]), Arc::from([]), Arc::from([])];
        for (i, (own, value)) in keys.iter().enumerate() {
            let Some(value) = value else { continue };
            let path = self.dir.join(value);
            match std::fs::read(&path) {
                Ok(bytes) => contents[i] = bytes.into(),
                Err(e) => {
                    self.problem(format!("{key}.{own}"), format!("{}: {e}", path.display()));
                    return None;
                }
            }
            paths[i] = Some(path);
        }
        let ca = paths[0].as_ref().map(|_| &contents[0][..]);
        let client = paths[1]
            .as_ref()
            .map(|_| (&contents[1][..], &contents[2][..]));
        match tls_client(ca, client) {
            Ok(client) => {
                let [ca_file, client_cert_file, client_key_file] = paths;
                Some(Some(Arc::new(LookupTls {
                    ca_file,
                    client_cert_file,
                    client_key_file,
                    contents,
                    client,
                })))
            }
            Err((own, message)) => {
                self.problem(format!("{key}.{own}"), message);
                None
            }
        }
    }
}

/// The TLS client of an `https://` lookup: `ca` (PEM) or, when `None`, the
/// system's roots; a client certificate chain and key (PEM) when given.
/// Errors are for the configuration to report, with the key they concern.
fn tls_client(
    ca: Option<&[u8]>,
    client: Option<(&[u8], &[u8])>,
) -> Result<Arc<rustls::ClientConfig>, (&'static str, String)> {
    use rustls::RootCertStore;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = |pem: &[u8]| {
        let certs = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        if certs.is_empty() {
            return Err("no PEM certificate in the file".to_owned());
        }
        Ok(certs)
    };
    let mut roots = RootCertStore::empty();
    match ca {
        Some(pem) => {
            for cert in certs(pem).map_err(|e| ("ca_file", e))? {
                roots
                    .add(cert)
                    .map_err(|e| ("ca_file", format!("not a usable CA certificate: {e}")))?;
            }
        }
        None => add_system_roots(&mut roots).map_err(|why| {
            (
                "ca_file",
                format!("no system CA certificates ({why}); set it"),
            )
        })?,
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ("ca_file", e.to_string()))?
        .with_root_certificates(roots);
    let config = match client {
        Some((chain, key)) => {
            let chain = certs(chain).map_err(|e| ("client_cert_file", e))?;
            let key = PrivateKeyDer::from_pem_slice(key)
                .map_err(|e| ("client_key_file", format!("no usable private key: {e}")))?;
            builder.with_client_auth_cert(chain, key).map_err(|e| {
                (
                    "client_key_file",
                    format!("does not go with client_cert_file: {e}"),
                )
            })?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}
