//! A test Pangolin control plane, written from Pangolin's published route
//! for Gerbil (`POST /gerbil/get-resolved-hostname` under the API base
//! `/api/v1`), on 127.0.0.1:0, over plain HTTP or TLS with a client
//! certificate required ([`Pangolin::start_tls`]).
//!
//! The request is checked as Pangolin's stack checks it: Express's JSON
//! body parser reads only a `Content-Type` of `application/json` (other
//! types leave the body empty) and refuses bad JSON or a top-level value
//! that is not an object or array; then the zod schema
//! `z.object({hostname: z.string(), publicKey: z.string()})` wants both
//! fields as strings and ignores any other. Whatever fails is answered 400
//! (and counted as malformed). Headers the test requires
//! ([`Pangolin::require_header`]) answer 401 when missing or different.
//!
//! Answers per hostname come from a table ([`Pangolin::set`]); a name not
//! in it gets what Pangolin answers for a name no exit node serves,
//! `200 {"endpoints": []}`. Every request is logged ([`Pangolin::log`]).
//!
//! Endpoints are what Pangolin answers: each exit node's `endpoint`, which
//! it fills from `gerbil.base_endpoint`, a host name in a real deployment.
//! The double therefore comes with a test DNS server ([`Pangolin::dns`],
//! the relay's `resolver`): [`Pangolin::exit_node`] names a node there and
//! returns the name to answer with. A test that wants IP literals answers
//! them with [`Reply::endpoints`] as before.
//!
//! Redirects, as a proxy in front of Pangolin may send them
//! ([`Pangolin::redirect`]): a request to a given path gets a status and a
//! `Location`, whatever its method and body.
//!
//! It also speaks the other direction of Pangolin's protocol:
//! [`Pangolin::push_local_snis`] sends `POST /update-local-snis` with
//! `{"fullDomains": [...]}`, as Pangolin does to Gerbil's API.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::Notify;

use super::dns::DnsServer;
use super::{Answer, Pki, WAIT, http_request_text, http_tcp};

/// The TTL, seconds, of the exit nodes' names in the double's DNS.
pub(crate) const NODE_TTL: u32 = 300;

/// The API base Gerbil is given as `remoteConfig`.
pub(crate) const BASE: &str = "/api/v1";
/// The route under [`BASE`].
pub(crate) const ROUTE: &str = "/gerbil/get-resolved-hostname";

/// What the control plane answers for one hostname.
#[derive(Debug, Clone)]
pub(crate) enum Reply {
    /// 200 with `{"endpoints": [...]}` (as Pangolin writes them: host
    /// addresses without a port).
    Endpoints(Vec<String>),
    /// This status with a JSON error body.
    Status(u16),
}

impl Reply {
    pub(crate) fn endpoints<T: ToString>(hosts: &[T]) -> Reply {
        Reply::Endpoints(hosts.iter().map(ToString::to_string).collect())
    }
}

/// One request as received.
#[derive(Debug, Clone)]
pub(crate) struct Logged {
    pub method: String,
    pub path: String,
    pub headers: HashMap<String, String>,
    pub body: String,
    /// The status it was answered with.
    pub status: u16,
}

#[derive(Default)]
struct State {
    answers: HashMap<String, Reply>,
    /// When set, every well-formed request gets this instead.
    failure: Option<Reply>,
    required: Vec<(String, String)>,
    /// Path → (status, Location).
    redirects: HashMap<String, (u16, String)>,
    requests: HashMap<String, usize>,
    malformed: usize,
    log: Vec<Logged>,
}

/// A running Pangolin double; stops when dropped.
pub(crate) struct Pangolin {
    pub addr: SocketAddr,
    /// Where the exit nodes' names resolve (`resolver` in the relay's
    /// cluster section).
    pub dns: DnsServer,
    tls: bool,
    state: Arc<Mutex<State>>,
    changed: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Pangolin {
    /// Plain HTTP.
    pub(crate) async fn start() -> Pangolin {
        Pangolin::serve(None).await
    }

    /// HTTPS with `pki`'s server certificate, requiring a client
    /// certificate signed by `pki`'s CA (rustls `WebPkiClientVerifier`).
    pub(crate) async fn start_tls(pki: &Pki) -> Pangolin {
        Pangolin::serve(Some(pki.server_config())).await
    }

    /// Plain HTTP on a listener the caller bound (another address, or
    /// another network namespace: the `pangolin` container's).
    pub(crate) async fn start_on(listener: TcpListener) -> Pangolin {
        Pangolin::serve_on(listener, None).await
    }

    async fn serve(tls: Option<Arc<rustls::ServerConfig>>) -> Pangolin {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Pangolin::serve_on(listener, tls).await
    }

    async fn serve_on(listener: TcpListener, tls: Option<Arc<rustls::ServerConfig>>) -> Pangolin {
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State::default()));
        let changed = Arc::new(Notify::new());
        let shared = (state.clone(), changed.clone());
        let https = tls.is_some();
        let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (state, changed) = shared.clone();
                let service = hyper::service::service_fn(move |req| {
                    answer(req, state.clone(), changed.clone())
                });
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let http = hyper::server::conn::http1::Builder::new();
                    match acceptor {
                        None => {
                            let _ = http.serve_connection(TokioIo::new(stream), service).await;
                        }
                        Some(acceptor) => {
                            // A failed handshake (wrong CA, no client
                            // certificate) just closes the connection.
                            if let Ok(stream) = acceptor.accept(stream).await {
                                let _ = http.serve_connection(TokioIo::new(stream), service).await;
                            }
                        }
                    }
                });
            }
        });
        Pangolin {
            addr,
            dns: DnsServer::start().await,
            tls: https,
            state,
            changed,
            task,
        }
    }

    /// The `lookup_url` to configure (the API base, as Gerbil's
    /// `remoteConfig`).
    pub(crate) fn base_url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}{BASE}", self.addr)
    }

    /// The `resolver` to configure: the double's DNS server.
    pub(crate) fn resolver(&self) -> SocketAddr {
        self.dns.addr
    }

    /// An exit node whose `endpoint` is `name`, at `addrs` (A and AAAA
    /// records, in that order, TTL [`NODE_TTL`]); returns `name`, to
    /// answer with.
    pub(crate) fn exit_node(&self, name: &str, addrs: &[IpAddr]) -> String {
        self.dns.set(name, addrs.to_vec(), NODE_TTL);
        name.to_owned()
    }

    /// Answers every request for `path` with `status` and `Location:
    /// location` from now on.
    pub(crate) fn redirect(&self, path: &str, status: u16, location: &str) {
        let mut state = self.state.lock().unwrap();
        state
            .redirects
            .insert(path.to_owned(), (status, location.to_owned()));
    }

    /// Answers `hostname` with `reply` from now on.
    pub(crate) fn set(&self, hostname: &str, reply: Reply) {
        let mut state = self.state.lock().unwrap();
        state.answers.insert(hostname.to_owned(), reply);
    }

    /// Answers every well-formed request with `reply` (`None`: back to the
    /// table).
    pub(crate) fn fail(&self, reply: Option<Reply>) {
        self.state.lock().unwrap().failure = reply;
    }

    /// Requires header `name` with `value` on every lookup (401 otherwise),
    /// in place of any value required for `name` before.
    pub(crate) fn require_header(&self, name: &str, value: &str) {
        let name = name.to_ascii_lowercase();
        let mut state = self.state.lock().unwrap();
        state.required.retain(|(n, _)| *n != name);
        state.required.push((name, value.to_owned()));
    }

    /// Well-formed lookups received for `hostname` so far.
    pub(crate) fn requests(&self, hostname: &str) -> usize {
        let state = self.state.lock().unwrap();
        state.requests.get(hostname).copied().unwrap_or(0)
    }

    /// Requests answered 400.
    pub(crate) fn malformed(&self) -> usize {
        self.state.lock().unwrap().malformed
    }

    /// Every request so far, in arrival order.
    pub(crate) fn log(&self) -> Vec<Logged> {
        self.state.lock().unwrap().log.clone()
    }

    /// Waits (bounded by [`WAIT`]) until `hostname` got at least `n` lookups.
    pub(crate) async fn wait_requests(&self, hostname: &str, n: usize) {
        let waited = super::wait_notified(&self.changed, || self.requests(hostname) >= n).await;
        assert!(
            waited,
            "{hostname}: {} lookup(s), expected {n} within {WAIT:?}",
            self.requests(hostname)
        );
    }

    /// Sends what Pangolin sends a Gerbil node when the names tunnelled to
    /// it change: `POST /update-local-snis` `{"fullDomains": [...]}` to
    /// `to` (plain HTTP), with `Authorization: Bearer token` when given.
    pub(crate) async fn push_local_snis(
        to: SocketAddr,
        token: Option<&str>,
        domains: &[&str],
    ) -> Answer {
        let body = serde_json::json!({ "fullDomains": domains }).to_string();
        let auth = token.map(|t| format!("Authorization: Bearer {t}"));
        let mut headers = vec!["Content-Type: application/json"];
        if let Some(auth) = &auth {
            headers.push(auth);
        }
        http_tcp(
            to,
            &http_request_text("POST", "/update-local-snis", &headers, &body),
        )
        .await
    }
}

impl Drop for Pangolin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What Express's `express.json()` and the zod schema make of a request:
/// the hostname, or why it is a 400.
pub(crate) fn validate(content_type: Option<&str>, body: &[u8]) -> Result<String, String> {
    // `type-is` matching of "application/json": the media type, parameters
    // (a charset) allowed. Any other type: the parser skips the body and
    // `req.body` is `{}`.
    let json = content_type.is_some_and(|t| {
        t.split(';')
            .next()
            .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
    });
    let value = if json && !body.is_empty() {
        let value: serde_json::Value =
            serde_json::from_slice(body).map_err(|e| format!("bad JSON: {e}"))?;
        // body-parser's strict mode: only objects and arrays.
        if !(value.is_object() || value.is_array()) {
            return Err("strict mode: not an object or array".into());
        }
        value
    } else {
        serde_json::json!({})
    };
    let Some(object) = value.as_object() else {
        return Err("expected object".into());
    };
    let hostname = object.get("hostname").and_then(|v| v.as_str());
    let public_key = object.get("publicKey").and_then(|v| v.as_str());
    match (hostname, public_key) {
        (Some(hostname), Some(_)) => Ok(hostname.to_owned()),
        (None, _) => Err("hostname: Required string".into()),
        (_, None) => Err("publicKey: Required string".into()),
    }
}

async fn answer(
    req: Request<Incoming>,
    state: Arc<Mutex<State>>,
    changed: Arc<Notify>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let method = req.method().to_string();
    let path = req.uri().path().to_owned();
    let headers: HashMap<String, String> = req
        .headers()
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_owned(),
                v.to_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let body = match req.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let routed = method == "POST" && path == format!("{BASE}{ROUTE}");
    let checked = validate(headers.get("content-type").map(String::as_str), &body);
    let mut state = state.lock().unwrap();
    let authorised = state
        .required
        .iter()
        .all(|(name, value)| headers.get(name) == Some(value));
    let redirect = state.redirects.get(&path).cloned();
    let response = match (routed, checked) {
        _ if redirect.is_some() => {
            let (code, location) = redirect.unwrap();
            let mut response = error(StatusCode::from_u16(code).unwrap(), "moved");
            response
                .headers_mut()
                .insert(hyper::header::LOCATION, location.parse().unwrap());
            response
        }
        (false, _) => error(StatusCode::NOT_FOUND, "Not Found"),
        (true, Err(why)) => {
            state.malformed += 1;
            error(StatusCode::BAD_REQUEST, &why)
        }
        (true, Ok(_)) if !authorised => error(StatusCode::UNAUTHORIZED, "Unauthorized"),
        (true, Ok(hostname)) => {
            *state.requests.entry(hostname.clone()).or_default() += 1;
            let reply = state
                .failure
                .clone()
                .or_else(|| state.answers.get(&hostname).cloned())
                .unwrap_or(Reply::Endpoints(vec![]));
            match reply {
                Reply::Endpoints(endpoints) => json(
                    StatusCode::OK,
                    serde_json::json!({ "endpoints": endpoints }),
                ),
                Reply::Status(code) => error(StatusCode::from_u16(code).unwrap(), "error"),
            }
        }
    };
    state.log.push(Logged {
        method,
        path,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
        status: response.status().as_u16(),
    });
    drop(state);
    changed.notify_waiters();
    Ok(response)
}

fn error(code: StatusCode, message: &str) -> Response<Full<Bytes>> {
    json(
        code,
        serde_json::json!({
            "data": null, "success": false, "error": true,
            "message": message, "status": code.as_u16()
        }),
    )
}

fn json(code: StatusCode, body: serde_json::Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = code;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        "application/json; charset=utf-8".parse().unwrap(),
    );
    response
}
