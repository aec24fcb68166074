//! One HTTP cluster lookup (`[backend.*.cluster] lookup_url`): the request,
//! the transport (plain TCP, or TLS with the configured roots and optional
//! client certificate) and the reply, for either protocol:
//!
//! - `snirelay`: POST `{"hostname": SNI}` to `lookup_url` itself; the reply
//!   is `{"endpoints": ["ip:port", "host:port", ...]}`.
//! - `pangolin`: Pangolin's route for Gerbil, POST
//!   `{"hostname": SNI, "publicKey": KEY}` to
//!   `{lookup_url}/gerbil/get-resolved-hostname` (`lookup_url` is the base
//!   Gerbil is given as `remoteConfig`, e.g. `https://pangolin:3001/api/v1`);
//!   the reply's endpoints are the exit nodes' `endpoint`s, which Pangolin
//!   fills from its `gerbil.base_endpoint`: usually a host name, sometimes
//!   an address, usually without a port. `default_port` is added to those
//!   (`host`, `ip`, `[ipv6]` or a bare IPv6 address); `ip:port` and
//!   `host:port` keep theirs.
//!
//! An endpoint is a [`Target`]: an address, or a host name and port that
//! `super::cluster` resolves (and checks against `allowed_targets`). Both
//! kinds may be mixed in one answer.
//!
//! Both: 200 is an answer (an empty list: this node holds the site), 404
//! means no node for the name, any other status is a failed lookup, as is
//! a body over [`MAX_REPLY_BYTES`], bad JSON or an endpoint that is
//! neither an address nor a host name.
//!
//! Redirects: a 301, 302, 307 or 308 whose `Location` is on the same origin
//! (scheme, host and port of `lookup_url`) is followed, at most
//! [`MAX_REDIRECTS`] times, repeating the POST with its body and headers
//! (Gerbil's Go client follows redirects too; on a 301 or 302 it turns the
//! POST into a bodiless GET, which Pangolin's route refuses, so repeating
//! the POST is the only useful reading). A redirect to another origin is
//! a failed lookup whose error names both origins: the request carries the
//! configured headers, which may be secrets.
//! The configured `headers` go on every request (their values are never
//! logged). Each lookup opens its own connection: lookups are rare (one
//! per name per TTL, single-flight), and a timeout then drops its socket.
//!
//! Not here: the cache, single flight, serve-stale and `allowed_targets`
//! (`super::cluster`, which also bounds a lookup by `lookup_timeout`).

use std::io;
use std::net::{IpAddr, SocketAddr};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{CONTENT_TYPE, HOST, HeaderName, HeaderValue, LOCATION};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::config::is_host_name;
use crate::config::settings::{Cluster, ClusterProtocol};
use crate::sockopt;

/// The largest lookup reply read (an answer is a short list of endpoints).
pub(crate) const MAX_REPLY_BYTES: usize = 64 * 1024;

/// Pangolin's route, appended to `lookup_url` with protocol `pangolin`.
pub(crate) const PANGOLIN_PATH: &str = "/gerbil/get-resolved-hostname";

/// Same-origin redirects followed by one lookup; one more fails it.
pub(crate) const MAX_REDIRECTS: usize = 5;

/// One endpoint of an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// An address, taken as it is.
    Addr(SocketAddr),
    /// A host name (lowercase, without a trailing dot) and the port to
    /// connect to on each of its addresses.
    Name { host: String, port: u16 },
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Addr(addr) => write!(f, "{addr}"),
            Target::Name { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

/// What one lookup said.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    /// Node endpoints, in answer order.
    Nodes(Vec<Target>),
    /// An empty endpoint list: this node.
    Here,
    /// HTTP 404: the cluster knows no node for the name.
    Nowhere,
}

/// Why one HTTP lookup failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HttpError {
    #[error("cannot connect to the lookup service: {0}")]
    Connect(io::Error),
    #[error("TLS handshake with the lookup service failed: {0}")]
    Tls(io::Error),
    #[error("HTTP exchange failed: {0}")]
    Http(#[from] hyper::Error),
    #[error("the lookup service answered HTTP {0}")]
    Status(StatusCode),
    #[error("the reply body is unreadable or over {MAX_REPLY_BYTES} bytes")]
    Body,
    #[error("the reply is not {{\"endpoints\": [...]}}: {0}")]
    Json(serde_json::Error),
    #[error("the reply endpoint {0:?} is neither an address nor a host name")]
    Endpoint(String),
    #[error("the lookup service redirected (HTTP {status}) to {location:?}, {why}; not followed")]
    Redirect {
        status: StatusCode,
        location: String,
        why: String,
    },
    #[error("the lookup service redirected more than {MAX_REDIRECTS} times")]
    TooManyRedirects,
}

/// Where and how to ask, taken apart once per cluster backend.
pub(crate) struct HttpTarget {
    host: String,
    port: u16,
    /// The `Host` header.
    authority: HeaderValue,
    /// The request target (origin form).
    path: String,
    headers: Vec<(HeaderName, HeaderValue)>,
    /// An `https://` URL: never downgraded to plain HTTP, even if its TLS
    /// client could not be made (then every lookup fails).
    https: bool,
    tls: Option<(TlsConnector, ServerName<'static>)>,
    protocol: ClusterProtocol,
}

impl std::fmt::Debug for HttpTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Header values stay out: they may be secrets.
        let names: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("HttpTarget")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("path", &self.path)
            .field("headers", &names)
            .field("tls", &self.tls.is_some())
            .field("protocol", &self.protocol.as_str())
            .finish()
    }
}

impl HttpTarget {
    /// `url` was validated by the config as an `http://` or `https://` URL
    /// with a host, and the headers as HTTP names and values.
    pub(crate) fn new(url: &str, config: &Cluster) -> HttpTarget {
        let uri: hyper::Uri = url.parse().unwrap_or_default();
        let https = uri.scheme_str() == Some("https");
        let host = uri
            .host()
            .unwrap_or("localhost")
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let authority = uri.authority().map_or(host.as_str(), |a| a.as_str());
        let authority =
            HeaderValue::from_str(authority).unwrap_or(HeaderValue::from_static("localhost"));
        let path = match &config.protocol {
            ClusterProtocol::Snirelay => uri
                .path_and_query()
                .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned()),
            // Gerbil appends the route to the base as text; so does this
            // (without doubling a trailing slash).
            ClusterProtocol::Pangolin { .. } => {
                format!("{}{PANGOLIN_PATH}", uri.path().trim_end_matches('/'))
            }
        };
        let headers = config
            .headers
            .iter()
            .filter_map(|h| {
                let name = HeaderName::from_bytes(h.name.as_bytes()).ok()?;
                let mut value = HeaderValue::from_str(&h.value).ok()?;
                value.set_sensitive(true);
                Some((name, value))
            })
            .collect();
        let tls = match (&config.tls, https) {
            (Some(tls), true) => ServerName::try_from(host.clone())
                .ok()
                .map(|name| (TlsConnector::from(tls.client.clone()), name)),
            _ => None,
        };
        HttpTarget {
            https,
            port: uri.port_u16().unwrap_or(if https { 443 } else { 80 }),
            host,
            authority,
            path,
            headers,
            tls,
            protocol: config.protocol.clone(),
        }
    }

    /// Asks once for `sni` (unbounded: the caller bounds it), following
    /// same-origin redirects.
    pub(crate) async fn lookup(&self, sni: &str) -> Result<Reply, HttpError> {
        let mut path = self.path.clone();
        let mut redirects = 0;
        loop {
            let (status, location, body) = self.ask(sni, &path).await?;
            match status {
                StatusCode::OK => {
                    let endpoints = parse_reply(&body, self.default_port())?;
                    return Ok(if endpoints.is_empty() {
                        Reply::Here
                    } else {
                        Reply::Nodes(endpoints)
                    });
                }
                StatusCode::NOT_FOUND => return Ok(Reply::Nowhere),
                StatusCode::MOVED_PERMANENTLY
                | StatusCode::FOUND
                | StatusCode::TEMPORARY_REDIRECT
                | StatusCode::PERMANENT_REDIRECT => {
                    if redirects == MAX_REDIRECTS {
                        return Err(HttpError::TooManyRedirects);
                    }
                    redirects += 1;
                    let next = self.redirect_target(status, location.as_deref(), &path)?;
                    tracing::debug!(%sni, from = %path, to = %next, status = status.as_u16(), "cluster lookup redirected; following (same origin)");
                    path = next;
                }
                _ => return Err(HttpError::Status(status)),
            }
        }
    }

    /// The request target a redirect from `path` leads to, if it stays on
    /// this target's origin.
    fn redirect_target(
        &self,
        status: StatusCode,
        location: Option<&str>,
        path: &str,
    ) -> Result<String, HttpError> {
        let refuse = |location: &str, why: String| HttpError::Redirect {
            status,
            location: location.to_owned(),
            why,
        };
        let Some(location) = location else {
            return Err(refuse("", "without a Location header".to_owned()));
        };
        let origin = self.origin();
        if location.starts_with("//") || location.contains("://") {
            let uri: hyper::Uri = location
                .parse()
                .map_err(|_| refuse(location, "which is not a URL".to_owned()))?;
            let scheme = uri
                .scheme_str()
                .unwrap_or(if self.https { "https" } else { "http" });
            let https = scheme.eq_ignore_ascii_case("https");
            let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
            let host = uri
                .host()
                .unwrap_or_default()
                .trim_start_matches('[')
                .trim_end_matches(']');
            let same = matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https")
                && https == self.https
                && host.eq_ignore_ascii_case(&self.host)
                && port == self.port;
            if !same {
                let to = format!("{scheme}://{}", uri.authority().map_or("", |a| a.as_str()));
                return Err(refuse(
                    location,
                    format!("another origin ({to}) than the lookup_url's ({origin})"),
                ));
            }
            return Ok(uri
                .path_and_query()
                .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned()));
        }
        let joined = if location.starts_with('/') {
            location.to_owned()
        } else {
            // A relative reference: beside the current path's last segment.
            let path = path.split('?').next().unwrap_or("/");
            let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
            format!("{dir}{location}")
        };
        joined
            .parse::<hyper::Uri>()
            .ok()
            .filter(|uri| uri.host().is_none())
            .map(|_| joined.clone())
            .ok_or_else(|| refuse(location, "which is not a URL".to_owned()))
    }

    /// `scheme://host:port` of this target, for messages.
    fn origin(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        match self.host.parse::<IpAddr>() {
            Ok(IpAddr::V6(_)) => format!("{scheme}://[{}]:{}", self.host, self.port),
            _ => format!("{scheme}://{}:{}", self.host, self.port),
        }
    }

    /// One request for `sni` to `path` on a connection of its own: the
    /// status, the `Location` header and the body.
    async fn ask(
        &self,
        sni: &str,
        path: &str,
    ) -> Result<(StatusCode, Option<String>, Bytes), HttpError> {
        let stream = TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(HttpError::Connect)?;
        let _ = sockopt::set_nodelay(&stream);
        let request = self.request(sni, path);
        match &self.tls {
            None if self.https => {
                let why = "no TLS client for this URL's host";
                Err(HttpError::Tls(io::Error::other(why)))
            }
            None => exchange(stream, request).await,
            Some((connector, name)) => {
                let stream = connector
                    .connect(name.clone(), stream)
                    .await
                    .map_err(HttpError::Tls)?;
                exchange(stream, request).await
            }
        }
    }

    fn default_port(&self) -> Option<u16> {
        match &self.protocol {
            ClusterProtocol::Snirelay => None,
            ClusterProtocol::Pangolin { default_port, .. } => Some(*default_port),
        }
    }

    fn request(&self, sni: &str, path: &str) -> Request<Full<Bytes>> {
        let body = match &self.protocol {
            ClusterProtocol::Snirelay => serde_json::json!({ "hostname": sni }),
            ClusterProtocol::Pangolin { public_key, .. } => {
                serde_json::json!({ "hostname": sni, "publicKey": public_key })
            }
        };
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(path)
            .header(HOST, self.authority.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        request
            .body(Full::new(Bytes::from(body.to_string())))
            .expect("a request from validated parts")
    }
}

/// Sends `request` on `io` (HTTP/1.1) and reads the status, the
/// `Location` header (when it is text) and the body.
async fn exchange<IO>(
    io: IO,
    request: Request<Full<Bytes>>,
) -> Result<(StatusCode, Option<String>, Bytes), HttpError>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(io)).await?;
    let exchange = async move {
        let response = sender.send_request(request).await?;
        let status = response.status();
        let location = response
            .headers()
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = Limited::new(response.into_body(), MAX_REPLY_BYTES)
            .collect()
            .await
            .map_err(|_| HttpError::Body)?
            .to_bytes();
        Ok::<_, HttpError>((status, location, body))
    };
    // The connection is driven here, not spawned, so a timeout drops the
    // socket with the lookup.
    let mut conn = std::pin::pin!(conn);
    let mut exchange = std::pin::pin!(exchange);
    let mut conn_done = false;
    loop {
        tokio::select! {
            biased;
            result = &mut exchange => return result,
            result = &mut conn, if !conn_done => {
                conn_done = true;
                result?;
            }
        }
    }
}

/// The endpoints of a `{"endpoints": [...]}` reply; with `default_port`
/// (protocol `pangolin`), an endpoint without a port gets it.
pub(crate) fn parse_reply(
    body: &[u8],
    default_port: Option<u16>,
) -> Result<Vec<Target>, HttpError> {
    #[derive(serde::Deserialize)]
    struct EndpointsBody {
        endpoints: Vec<String>,
    }
    let reply: EndpointsBody = serde_json::from_slice(body).map_err(HttpError::Json)?;
    reply
        .endpoints
        .into_iter()
        .map(|text| endpoint(&text, default_port).ok_or(HttpError::Endpoint(text)))
        .collect()
}

/// One endpoint: `ip:port`, `[ipv6]:port`, `host:port`, or (with
/// `default_port`) `ip`, `[ipv6]`, a bare IPv6 address or `host`.
fn endpoint(text: &str, default_port: Option<u16>) -> Option<Target> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Some(Target::Addr(addr));
    }
    let bare = text
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or(text);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Some(Target::Addr(SocketAddr::new(ip, default_port?)));
    }
    let (host, port) = match text.rsplit_once(':') {
        Some((host, port)) => (host, Some(port.parse::<u16>().ok().filter(|&p| p != 0)?)),
        None => (text, None),
    };
    let host = host.strip_suffix('.').unwrap_or(host);
    if !is_host_name(host) {
        return None;
    }
    Some(Target::Name {
        host: host.to_ascii_lowercase(),
        port: port.or(default_port)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(protocol: ClusterProtocol) -> Cluster {
        Cluster {
            lookup: super::super::ClusterLookup::Http {
                url: String::new(),
                resolver: None,
            },
            local_backend: None,
            positive_ttl: std::time::Duration::from_secs(30),
            negative_ttl: std::time::Duration::from_secs(2),
            lookup_timeout: std::time::Duration::from_secs(2),
            allowed_targets: vec![],
            max_lookups_in_flight: 16,
            new_names_per_second: 50,
            protocol,
            headers: vec![],
            tls: None,
            node_choice: Default::default(),
            local_overrides: Vec::new(),
            hop_proxy_protocol: crate::proxy::outbound::Outbound::V2,
            this_node: Vec::new(),
        }
    }

    #[test]
    fn replies_parse_to_endpoints_or_fail() {
        let ok = parse_reply(
            br#"{"endpoints": ["10.0.0.1:443", "[2001:db8::1]:8443"], "v": 1}"#,
            None,
        );
        assert_eq!(
            ok.unwrap(),
            vec![addr("10.0.0.1:443"), addr("[2001:db8::1]:8443")]
        );
        assert!(
            parse_reply(br#"{"endpoints": []}"#, None)
                .unwrap()
                .is_empty()
        );
        assert!(matches!(
            parse_reply(br#"{"endpoints": ["10.0.0.1"]}"#, None),
            Err(HttpError::Endpoint(e)) if e == "10.0.0.1"
        ));
        assert!(matches!(parse_reply(b"{}", None), Err(HttpError::Json(_))));
        assert!(matches!(
            parse_reply(b"<html>", None),
            Err(HttpError::Json(_))
        ));
    }

    fn addr(text: &str) -> Target {
        Target::Addr(text.parse().unwrap())
    }

    fn name(host: &str, port: u16) -> Target {
        Target::Name {
            host: host.into(),
            port,
        }
    }

    #[test]
    fn pangolin_endpoints_without_a_port_get_the_default_port() {
        let body =
            br#"{"endpoints": ["10.0.0.1", "2001:db8::1", "[2001:db8::2]", "10.0.0.2:8443"]}"#;
        assert_eq!(
            parse_reply(body, Some(443)).unwrap(),
            vec![
                addr("10.0.0.1:443"),
                addr("[2001:db8::1]:443"),
                addr("[2001:db8::2]:443"),
                addr("10.0.0.2:8443"),
            ]
        );
    }

    #[test]
    fn host_names_are_endpoints_mixed_with_addresses() {
        // What Pangolin answers when `gerbil.base_endpoint` is a name.
        let body = br#"{"endpoints": ["10.0.0.1", "10.0.0.2:8443", "Node-B.Example.NET",
            "node-c.example.net:8444", "node-d.example.net.", "edge_1.internal"]}"#;
        assert_eq!(
            parse_reply(body, Some(443)).unwrap(),
            vec![
                addr("10.0.0.1:443"),
                addr("10.0.0.2:8443"),
                name("node-b.example.net", 443),
                name("node-c.example.net", 8444),
                name("node-d.example.net", 443),
                name("edge_1.internal", 443),
            ]
        );
        // snirelay's protocol has no default port: a name needs one.
        assert_eq!(
            parse_reply(br#"{"endpoints": ["node-b.test:9443"]}"#, None).unwrap(),
            vec![name("node-b.test", 9443)]
        );
        for bad in [
            "node-b.test",
            "-bad.test:443",
            "a..b:443",
            "a b:443",
            "10.0.0.300:443",
            "node.test:0",
            "node.test:65536",
            "node.test:https",
            ":443",
            "",
        ] {
            let body = serde_json::json!({ "endpoints": ["10.0.0.1:443", bad] }).to_string();
            assert!(
                matches!(parse_reply(body.as_bytes(), None), Err(HttpError::Endpoint(e)) if e == bad),
                "{bad:?}"
            );
        }
        let long = format!("{}.test", "a".repeat(64));
        assert!(!is_host_name(&long), "a label over 63 bytes");
        let many = vec!["a"; 128].join(".");
        assert!(!is_host_name(&many), "over 253 bytes");
        assert!(is_host_name("localhost") && is_host_name("node.test."));
    }

    proptest::proptest! {
        /// Whatever the control plane sends, the reply parser answers
        /// (never panics), and endpoints written as Pangolin writes them
        /// (an address, with or without a port) read back exactly.
        #[test]
        fn any_reply_parses_or_fails_and_addresses_read_back(
            junk in proptest::collection::vec(proptest::num::u8::ANY, 0..256),
            hosts in proptest::collection::vec(
                (proptest::num::u128::ANY, proptest::bool::ANY, proptest::option::of(1u16..)),
                0..8,
            ),
        ) {
            let _ = parse_reply(&junk, Some(443));
            let addrs: Vec<SocketAddr> = hosts
                .iter()
                .map(|&(bits, v4, port)| {
                    let ip = if v4 {
                        IpAddr::from(std::net::Ipv4Addr::from(bits as u32))
                    } else {
                        IpAddr::from(std::net::Ipv6Addr::from(bits))
                    };
                    SocketAddr::new(ip, port.unwrap_or(443))
                })
                .collect();
            let texts: Vec<String> = hosts
                .iter()
                .zip(&addrs)
                .map(|(&(_, _, port), addr)| match port {
                    Some(_) => addr.to_string(),
                    None => addr.ip().to_string(),
                })
                .collect();
            let body = serde_json::json!({ "endpoints": texts }).to_string();
            let addrs: Vec<Target> = addrs.into_iter().map(Target::Addr).collect();
            proptest::prop_assert_eq!(parse_reply(body.as_bytes(), Some(443)).unwrap(), addrs);
        }
    }

    #[test]
    fn redirects_are_followed_on_the_same_origin_only() {
        let config = cluster(ClusterProtocol::Snirelay);
        let t = HttpTarget::new("http://cp.internal:8080/api/resolve?x=1", &config);
        let status = StatusCode::TEMPORARY_REDIRECT;
        let follow = |location: &str| {
            t.redirect_target(status, Some(location), "/api/resolve?x=1")
                .unwrap()
        };
        assert_eq!(follow("/v2/resolve"), "/v2/resolve");
        assert_eq!(follow("resolve2?y=2"), "/api/resolve2?y=2");
        assert_eq!(follow("http://CP.internal:8080/new?z"), "/new?z");
        for elsewhere in [
            "https://cp.internal:8080/new",
            "http://cp.internal/new",
            "http://other.internal:8080/new",
            "//other.internal:8080/new",
            "ftp://cp.internal:8080/new",
        ] {
            assert!(
                matches!(
                    t.redirect_target(status, Some(elsewhere), "/"),
                    Err(HttpError::Redirect { .. })
                ),
                "{elsewhere}"
            );
        }
        assert!(matches!(
            t.redirect_target(status, None, "/"),
            Err(HttpError::Redirect { .. })
        ));
        // An https URL's default port is 443, written or not.
        let t = HttpTarget::new("https://cp.internal/api", &config);
        assert_eq!(
            t.redirect_target(status, Some("https://cp.internal:443/x"), "/api")
                .unwrap(),
            "/x"
        );
    }

    #[test]
    fn lookup_urls_are_taken_apart_once() {
        let snirelay = cluster(ClusterProtocol::Snirelay);
        let t = HttpTarget::new("http://cp.internal/resolve?zone=eu", &snirelay);
        assert_eq!((t.host.as_str(), t.port), ("cp.internal", 80));
        assert_eq!(t.authority, "cp.internal");
        assert_eq!(t.path, "/resolve?zone=eu");
        let t = HttpTarget::new("http://[::1]:8080", &snirelay);
        assert_eq!((t.host.as_str(), t.port), ("::1", 8080));
        assert_eq!(t.authority, "[::1]:8080");
        assert_eq!(t.path, "/");
        let pangolin = cluster(ClusterProtocol::Pangolin {
            public_key: "k".into(),
            public_key_file: None,
            default_port: 443,
        });
        let t = HttpTarget::new("https://pangolin:3001/api/v1/", &pangolin);
        assert_eq!((t.host.as_str(), t.port), ("pangolin", 3001));
        assert_eq!(t.path, "/api/v1/gerbil/get-resolved-hostname");
        let t = HttpTarget::new("https://pangolin.example.net", &pangolin);
        assert_eq!(t.port, 443);
        assert_eq!(t.path, "/gerbil/get-resolved-hostname");
    }

    #[test]
    fn the_pangolin_request_carries_the_key_and_the_headers() {
        let mut config = cluster(ClusterProtocol::Pangolin {
            public_key: "pk=".into(),
            public_key_file: None,
            default_port: 443,
        });
        config.headers = vec![crate::config::settings::LookupHeader {
            name: "X-Token".into(),
            value: "s3cret".into(),
            file: None,
        }];
        let t = HttpTarget::new("http://cp:3001/api/v1", &config);
        let request = t.request("a.example.com", &t.path);
        assert_eq!(request.uri(), "/api/v1/gerbil/get-resolved-hostname");
        assert_eq!(request.headers()["x-token"], "s3cret");
        assert!(request.headers()["x-token"].is_sensitive());
        assert!(!format!("{t:?}").contains("s3cret"));
    }
}
