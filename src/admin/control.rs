//! The control endpoints of the admin listener:
//!
//! - `GET /backends`: every backend with its addresses, each with the
//!   operator's state, health, open connections and the age of its last
//!   failure. A control endpoint (it names origin addresses).
//! - `POST /backends/{backend}/addresses/{addr}/state` with `{"state":
//!   "ready" | "drain" | "maint"}`: sets the operator's state of one
//!   address (`addr` as `IP:port`, IPv6 in brackets, which may be
//!   percent-encoded). The answer holds the previous and the new state.
//!
//! - `GET /connections`: the open relaying connections, by ascending id,
//!   a page at a time (`limit`, default 100, at most 1,000; `after=ID` for
//!   the next page), filtered by `listener`, `protocol` (`tcp` or `quic`:
//!   QUIC flows are listed too), `route`, `sni` (exact, lowercase),
//!   `backend`, `client` (an IP or CIDR prefix, matching the measured or
//!   the claimed client) and `id`. `DELETE /connections` with
//!   at least one filter closes the matching ones with reason `admin` and
//!   answers how many. See [`crate::flow::registry`].
//! - `POST /routes/{route}/drain` with `{"window": "30s"}` (optional;
//!   default and longest: `drain_timeout`): closes the route's open
//!   connections at moments spread over the window (reason `drained`); the
//!   route keeps taking new ones.
//!
//! - `POST /update-local-snis` with `{"fullDomains": ["name", ...]}` (the
//!   path and body Pangolin pushes to Gerbil): replaces the pushed local
//!   names ([`crate::backend::local_names`]), which cluster backends send to their
//!   `local_backend` without a lookup; saves them to `[admin]
//!   local_names_file` first when set (a write that fails changes nothing:
//!   500); drops the cached cluster answers of every name that changed;
//!   closes the connections of names no longer local that were relaying
//!   to a `local_backend` at moments spread over `[admin]
//!   moved_close_window` (reason `moved`). Names that are not host names
//!   are ignored and listed in the answer. Its body may be up to
//!   [`MAX_LOCAL_NAMES_BODY_BYTES`]. Answers `{"status": "Local SNIs
//!   updated successfully", ...}` as Gerbil does, with counts.
//!
//! - `GET /sources` and `DELETE /sources/{key}`: the per-source admission
//!   tables (`super::sources`).
//!
//! Every request is authorized first (`super::auth`; a push of local
//! names from a source in `[admin] push_unauthenticated_from` needs no
//! token, and every push, refused or not, is logged at info with its
//! source, `admin.peer`, and `authenticated`: `true`, `allowlisted` or
//! `false`), counted in
//! `snirelay_admin_control_actions_total{kind,outcome}`, and every change
//! is logged at info with `who` (the token's name or the Unix peer's
//! credentials). Bad input is a 4xx naming what was wrong, and changes
//! nothing. Bodies are JSON, at most [`MAX_BODY_BYTES`] (but for the
//! local names), unknown fields refused.
//!
//! Adding an endpoint: one arm in `route` (its kind, its method and a
//! `Handler` given a [`Call`], returning its JSON answer or a
//! [`Refused`]); authorization, counting, the method check and the body
//! bound come with it.
//!
//! Not here: what a state does to connections ([`crate::backend::plan`] leaves
//! drained and maintained addresses out of new plans).

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};

use super::auth::{self, AuthRefusal, Authorized};
use super::sources;
use super::{AdminState, Peer, text};
use crate::backend::{AddressSource, AddressState, BackendRuntime, local_names};
use crate::config::DEFAULT_MOVED_CLOSE_WINDOW;
use crate::wire::cidr::Cidr;
use crate::{flow::registry, metrics};
use std::str::FromStr;

/// Largest request body a control endpoint reads; past it, 413.
pub(crate) const MAX_BODY_BYTES: usize = 4 * 1024;
/// Largest body of `POST /update-local-snis`: a control plane pushes every
/// name this node serves at once (about 20,000 names of 40 bytes). Read
/// within the same `REQUEST_TIMEOUT` as any request, so it costs at most
/// this much memory per admin connection for two seconds.
pub(crate) const MAX_LOCAL_NAMES_BODY_BYTES: usize = 1024 * 1024;

/// Whether `path` is served by this module (and so needs authorization).
pub(crate) fn is_control(path: &str) -> bool {
    route(&segments(path), &Method::GET).is_some()
}

fn segments(path: &str) -> Vec<&str> {
    path.trim_matches('/').split('/').collect()
}

/// What a control handler is given: the request, its caller's name (for
/// the log), and the run-time state to act on.
pub(crate) struct Call<'a> {
    pub state: &'a AdminState,
    /// The path's segments (`["backends", NAME, ...]`).
    pub segments: &'a [&'a str],
    /// The query string, if any (undecoded).
    pub query: Option<&'a str>,
    /// The body (empty for GET), at most [`MAX_BODY_BYTES`].
    pub body: Bytes,
    /// The token's name or the Unix peer's credentials.
    pub who: &'a str,
}

/// A control endpoint: its answer (200 with JSON), or why not.
type Handler = fn(&Call<'_>) -> Result<Value, Refused>;

/// The control endpoints: the `kind` they are counted under, the method
/// they take, and the handler. Authorization, counting, the method check
/// and the bounded body come with every entry.
fn route(segments: &[&str], method: &Method) -> Option<(&'static str, Method, Handler)> {
    Some(match segments {
        ["backends"] => ("backends", Method::GET, backends),
        ["backends", _, "addresses", _, "state"] => {
            ("address_state", Method::POST, set_address_state)
        }
        // Connections (issue 16, point 3).
        // One path, two methods: the method picks the entry.
        ["connections"] if method == Method::DELETE => {
            ("close_connections", Method::DELETE, close_connections)
        }
        ["connections"] => ("connections", Method::GET, list_connections),
        // Names that moved (issue 16, point 4).
        ["routes", _, "drain"] => ("route_drain", Method::POST, drain_route),
        // Pushed local names (issue 17), at the path Gerbil serves them on.
        ["update-local-snis"] => ("update_local_snis", Method::POST, update_local_snis),
        // The source table.
        ["sources"] => ("sources", Method::GET, list_sources),
        ["sources", _] => ("clear_source", Method::DELETE, clear_source),
        _ => return None,
    })
}

/// A request refused after authorization: its status, a message, and the
/// `outcome` it is counted under.
pub(crate) struct Refused {
    status: StatusCode,
    outcome: &'static str,
    message: String,
}

impl Refused {
    pub(crate) fn new(
        status: StatusCode,
        outcome: &'static str,
        message: impl Into<String>,
    ) -> Refused {
        Refused {
            status,
            outcome,
            message: message.into(),
        }
    }

    pub(crate) fn bad(message: impl Into<String>) -> Refused {
        Refused::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub(crate) fn not_found(message: impl Into<String>) -> Refused {
        Refused::new(StatusCode::NOT_FOUND, "not_found", message)
    }
}

/// Answers a control request from `peer`.
pub(crate) async fn respond(
    req: Request<Incoming>,
    state: &AdminState,
    peer: &Peer,
) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_owned();
    let query = req.uri().query().map(str::to_owned);
    let segments = segments(&path);
    let Some((kind, method, handler)) = route(&segments, req.method()) else {
        return text(StatusCode::NOT_FOUND, "not found\n");
    };
    let config = state.config().0;
    let admin = config.admin.as_ref();
    let tokens = admin.and_then(|a| a.token_file.as_ref());
    let push = kind == "update_local_snis";
    let authorized = if push {
        let listed = admin.map_or(&[][..], |a| &a.push_unauthenticated_from);
        auth::authorize_push(req.headers(), peer, tokens, listed)
    } else {
        auth::authorize(req.headers(), peer, tokens).map(|who| (who, Authorized::Authenticated))
    };
    let (who, admitted) = match authorized {
        Ok(authorized) => authorized,
        Err(refusal) => {
            metrics::metrics().control_action(kind, refusal.outcome());
            if push {
                // Every push is logged with its source and how it came in.
                tracing::info!(
                    admin.peer = %peer,
                    authenticated = "false",
                    outcome = refusal.outcome(),
                    "local names push refused"
                );
            } else {
                tracing::info!(admin.peer = %peer, kind, outcome = refusal.outcome(), "control request refused");
            }
            return refused(refusal);
        }
    };
    if req.method() != method {
        metrics::metrics().control_action(kind, "bad_method");
        let mut response = text(StatusCode::METHOD_NOT_ALLOWED, format!("use {method}\n"));
        response.headers_mut().insert(
            hyper::header::ALLOW,
            HeaderValue::from_str(method.as_str()).expect("a method is a header value"),
        );
        return response;
    }
    let body = if method == Method::GET {
        Ok(Bytes::new())
    } else {
        let limit = if kind == "update_local_snis" {
            MAX_LOCAL_NAMES_BODY_BYTES
        } else {
            MAX_BODY_BYTES
        };
        body(req, limit).await
    };
    if kind == "connections" {
        return match listing(query).await {
            Ok(text) => {
                metrics::metrics().control_action(kind, "ok");
                let mut response = super::text(StatusCode::OK, text);
                response
                    .headers_mut()
                    .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                response
            }
            Err(refused) => {
                metrics::metrics().control_action(kind, refused.outcome);
                json_response(refused.status, &json!({ "error": refused.message }))
            }
        };
    }
    let answer = if push {
        match body {
            Ok(body) => push_local_names(body, state, &who, peer, admitted).await,
            Err(refused) => Err(refused),
        }
    } else {
        body.and_then(|body| {
            handler(&Call {
                state,
                segments: &segments,
                query: query.as_deref(),
                body,
                who: &who,
            })
        })
    };
    if push {
        metrics::metrics().local_name_push(match &answer {
            Ok(_) => "ok",
            Err(refused) => refused.outcome,
        });
        if let Err(refused) = &answer {
            tracing::info!(
                admin.peer = %peer,
                authenticated = admitted.as_str(),
                who,
                outcome = refused.outcome,
                error = %refused.message,
                "local names push refused"
            );
        }
    }
    match answer {
        Ok(value) => {
            metrics::metrics().control_action(kind, "ok");
            json_response(StatusCode::OK, &value)
        }
        Err(refused) => {
            metrics::metrics().control_action(kind, refused.outcome);
            let mut response = json_response(refused.status, &json!({ "error": refused.message }));
            if refused.status == StatusCode::REQUEST_TIMEOUT {
                // The deadline has passed: nothing more is read from it.
                response
                    .headers_mut()
                    .insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
            }
            response
        }
    }
}

fn refused(refusal: AuthRefusal) -> Response<Full<Bytes>> {
    match refusal {
        AuthRefusal::NoTokenFile => text(
            StatusCode::FORBIDDEN,
            "control needs [admin] token_file or a unix socket\n",
        ),
        AuthRefusal::BadToken => {
            let mut response = text(
                StatusCode::UNAUTHORIZED,
                "a valid `Authorization: Bearer <token>` is required\n",
            );
            response
                .headers_mut()
                .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            response
        }
    }
}

fn json_response(status: StatusCode, value: &Value) -> Response<Full<Bytes>> {
    let body = serde_json::to_string_pretty(value).expect("a JSON value always serializes");
    let mut response = text(status, body + "\n");
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// A body over `limit` bytes: 413.
fn too_large(limit: usize) -> Refused {
    Refused::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "too_large",
        format!("the body is larger than {limit} bytes"),
    )
}

/// The answer to a body over `limit` bytes, as a control endpoint gives it
/// (for requests the admin listener forwards).
pub(crate) fn too_large_answer(limit: usize) -> Response<Full<Bytes>> {
    let refused = too_large(limit);
    json_response(refused.status, &json!({ "error": refused.message }))
}

/// The request body, at most `limit` bytes (413 past it; a declared
/// length past it is refused before a byte is read).
async fn body(req: Request<Incoming>, limit: usize) -> Result<Bytes, Refused> {
    let too_large = || too_large(limit);
    let declared = req
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    match Limited::new(req.into_body(), limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Err(error) if timed_out(&*error) => Err(Refused::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            "the body did not arrive in time",
        )),
        Err(error) => Err(Refused::bad(format!("reading the body failed: {error}"))),
    }
}

/// Whether `error` comes from the connection's deadline (a body trickled
/// past `REQUEST_TIMEOUT`); also read by `forward` for a forwarded body.
pub(super) fn timed_out(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        next = e.source();
    }
    false
}

/// `GET /backends`.
fn backends(call: &Call<'_>) -> Result<Value, Refused> {
    let backends = call.state.backends();
    let list: Vec<Value> = backends
        .sorted()
        .into_iter()
        .map(|(name, runtime)| {
            let source = match &runtime.config.source {
                AddressSource::Fixed => "fixed",
                AddressSource::Dns(_) => "dns",
                AddressSource::Cluster(_) => "cluster",
            };
            let addresses: Vec<Value> = runtime
                .current()
                .set
                .iter()
                .map(|e| {
                    json!({
                        "address": e.addr.to_string(),
                        "state": e.state.operator().as_str(),
                        "health": if e.state.is_up() { "up" } else { "down" },
                        "open_connections": e.state.active(),
                        "last_failure_seconds_ago": e.state.last_failure_age().map(|d| d.as_secs_f64()),
                    })
                })
                .collect();
            json!({ "name": name, "source": source, "addresses": addresses })
        })
        .collect();
    Ok(json!({ "backends": list }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StateBody {
    state: AddressState,
}

/// `POST /backends/{backend}/addresses/{addr}/state`.
fn set_address_state(call: &Call<'_>) -> Result<Value, Refused> {
    let (state, body, who) = (call.state, &call.body, call.who);
    let (name, addr_text) = (call.segments[1], percent_decode(call.segments[3]));
    let addr: SocketAddr = addr_text.parse().map_err(|_| {
        Refused::bad(format!(
            "{addr_text:?} is not an IP:port address (IPv6 in brackets: [::1]:443)"
        ))
    })?;
    let wanted: StateBody = serde_json::from_slice(body).map_err(|e| {
        Refused::bad(format!(
            "the body must be {{\"state\": \"ready\" | \"drain\" | \"maint\"}}: {e}"
        ))
    })?;
    let backends = state.backends();
    let runtime: &BackendRuntime = backends
        .get(name)
        .ok_or_else(|| Refused::not_found(format!("no backend {name:?}")))?;
    if runtime.cluster.is_some() {
        return Err(Refused::bad(format!(
            "backend {name:?} is cluster-resolved: its addresses are per site and have no state"
        )));
    }
    let set = runtime.current().set;
    let endpoint = set
        .iter()
        .find(|e| e.addr == addr)
        .ok_or_else(|| Refused::not_found(format!("backend {name:?} has no address {addr}")))?;
    let previous = endpoint.state.set_operator(wanted.state);
    // Set first, so no new connection lands on the address after the
    // parts are taken.
    let closing = if wanted.state == AddressState::Maint {
        endpoint.state.maint(state.config().0.global.drain_timeout)
    } else {
        0
    };
    metrics::metrics().backend_address_state(
        name,
        addr,
        wanted.state.as_str(),
        &AddressState::ALL.map(AddressState::as_str),
    );
    tracing::info!(
        who,
        backend = name,
        address = %addr,
        state = wanted.state.as_str(),
        previous = previous.as_str(),
        open = endpoint.state.active(),
        closing,
        "backend address state set"
    );
    Ok(json!({
        "backend": name,
        "address": addr.to_string(),
        "state": wanted.state.as_str(),
        "previous": previous.as_str(),
        "open_connections": endpoint.state.active(),
    }))
}

/// Default and largest page of `GET /connections`.
const PAGE_DEFAULT: usize = 100;
const PAGE_MAX: usize = 1000;

/// A `/connections` query: its filter, and for a listing its page.
struct ConnQuery {
    filter: registry::Filter,
    after: u64,
    limit: usize,
}

fn conn_query(query: Option<&str>, listing: bool) -> Result<ConnQuery, Refused> {
    let mut q = ConnQuery {
        filter: registry::Filter::default(),
        after: 0,
        limit: PAGE_DEFAULT,
    };
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, raw) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_decode(&raw.replace('+', " "));
        let number = |what: &str| {
            value
                .parse::<u64>()
                .map_err(|_| Refused::bad(format!("{key}={value:?} is not {what}")))
        };
        let f = &mut q.filter;
        match key {
            "listener" => f.listener = Some(value),
            "route" => f.route = Some(value),
            "sni" => f.sni = Some(value.to_ascii_lowercase()),
            "backend" => f.backend = Some(value),
            "protocol" => {
                f.protocol = Some(match value.as_str() {
                    "tcp" => crate::config::Protocol::Tcp,
                    "quic" => crate::config::Protocol::Quic,
                    _ => {
                        return Err(Refused::bad(format!(
                            "protocol={value:?} is not tcp or quic"
                        )));
                    }
                })
            }
            "client" => {
                let cidr = value.parse::<Cidr>().or_else(|_| {
                    value
                        .parse::<std::net::IpAddr>()
                        .map(|ip| {
                            Cidr::from_str(&format!("{ip}/{}", if ip.is_ipv4() { 32 } else { 128 }))
                                .expect("a host prefix")
                        })
                        .map_err(|_| {
                            Refused::bad(format!(
                                "client={value:?} is not an IP address or CIDR prefix"
                            ))
                        })
                })?;
                f.client = Some(cidr);
            }
            "id" => f.id = Some(number("a connection id")?),
            "after" if listing => q.after = number("a connection id")?,
            "limit" if listing => {
                let n = number("a number")?;
                if n == 0 || n > PAGE_MAX as u64 {
                    return Err(Refused::bad(format!(
                        "limit={n} is out of range (1 to {PAGE_MAX})"
                    )));
                }
                q.limit = n as usize;
            }
            _ => {
                let known = if listing {
                    "listener, protocol, route, sni, backend, client, id, after, limit"
                } else {
                    "listener, protocol, route, sni, backend, client, id"
                };
                return Err(Refused::bad(format!(
                    "unknown parameter {key:?} (known: {known})"
                )));
            }
        }
    }
    Ok(q)
}

/// `GET /connections`: never called (see [`listing`]); present so the
/// route table names the endpoint like the others.
fn list_connections(_call: &Call<'_>) -> Result<Value, Refused> {
    unreachable!("GET /connections is answered by `listing`")
}

/// One connection as listed.
#[derive(serde::Serialize)]
struct ConnView<'a> {
    id: u64,
    listener: &'a str,
    /// `tcp` for a connection, `quic` for a QUIC flow.
    protocol: &'static str,
    route: &'a str,
    sni: Option<&'a str>,
    backend: &'a str,
    backend_address: SocketAddr,
    client: SocketAddr,
    claimed_client: Option<SocketAddr>,
    age_seconds: f64,
    idle_seconds: f64,
    bytes_up: u64,
    bytes_down: u64,
}

#[derive(serde::Serialize)]
struct Page<'a> {
    connections: Vec<ConnView<'a>>,
    next_after: Option<u64>,
}

/// `GET /connections`, answered off the runtime's worker threads: a page of
/// a thousand connections takes milliseconds to format, and on a relay with
/// `threads = 1` that would be milliseconds no connection is served. The
/// shard locks are released before any JSON is built.
async fn listing(query: Option<String>) -> Result<String, Refused> {
    let work = move || {
        let q = conn_query(query.as_deref(), true)?;
        let (page, more) = registry::list(&q.filter, q.after, q.limit);
        let next_after = if more {
            page.last().map(|e| e.id)
        } else {
            None
        };
        let connections = page
            .iter()
            .map(|e| {
                let moved = e.activity.moved();
                ConnView {
                    id: e.id,
                    listener: &e.listener.name,
                    protocol: e.listener.protocol.as_str(),
                    route: e.route(),
                    sni: e.sni(),
                    backend: &e.backend.name,
                    backend_address: e.backend_addr(),
                    client: e.client(),
                    claimed_client: e.claimed(),
                    age_seconds: e.age().as_secs_f64(),
                    idle_seconds: e.idle().as_secs_f64(),
                    bytes_up: moved.up,
                    bytes_down: moved.down,
                }
            })
            .collect();
        let page = Page {
            connections,
            next_after,
        };
        Ok(serde_json::to_string(&page).expect("a page always serializes") + "\n")
    };
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|e| Err(Refused::bad(format!("the listing failed: {e}"))))
}

/// `DELETE /connections`: closes the matching connections (reason
/// `admin`); at least one filter.
fn close_connections(call: &Call<'_>) -> Result<Value, Refused> {
    let q = conn_query(call.query, false)?;
    if q.filter.is_empty() {
        return Err(Refused::bad(
            "name a filter (listener, protocol, route, sni, backend, client or id)",
        ));
    }
    let closed = registry::close(&q.filter);
    tracing::info!(
        who = call.who,
        query = call.query.unwrap_or(""),
        closed,
        "connections closed"
    );
    Ok(json!({ "closed": closed }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DrainBody {
    window: Option<String>,
}

/// `POST /routes/{route}/drain`.
fn drain_route(call: &Call<'_>) -> Result<Value, Refused> {
    let name = percent_decode(call.segments[1]);
    let config = call.state.config().0;
    let longest = config.global.drain_timeout;
    let body: DrainBody = if call.body.iter().all(u8::is_ascii_whitespace) {
        DrainBody { window: None }
    } else {
        serde_json::from_slice(&call.body).map_err(|e| {
            Refused::bad(format!(
                "the body must be {{\"window\": \"30s\"}} or empty: {e}"
            ))
        })?
    };
    let window = match &body.window {
        None => longest,
        Some(text) => {
            let window = humantime::parse_duration(text)
                .map_err(|e| Refused::bad(format!("window {text:?} is not a duration: {e}")))?;
            if window > longest {
                return Err(Refused::bad(format!(
                    "window {text:?} is longer than [global] drain_timeout ({})",
                    humantime::format_duration(longest)
                )));
            }
            window
        }
    };
    let known = config
        .listeners
        .iter()
        .any(|l| l.routes.iter().any(|r| r.name == name));
    if !known {
        return Err(Refused::not_found(format!("no route {name:?}")));
    }
    let filter = registry::Filter {
        route: Some(name.clone()),
        ..registry::Filter::default()
    };
    let closing = registry::drain(&filter, window);
    tracing::info!(
        who = call.who,
        route = %name,
        window = %humantime::format_duration(window),
        closing,
        "route drained"
    );
    Ok(json!({
        "route": name,
        "window_seconds": window.as_secs_f64(),
        "closing": closing,
    }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct LocalNamesBody {
    full_domains: Vec<String>,
}

/// `POST /update-local-snis`: never called (see [`push_local_names`]);
/// present so the route table names the endpoint like the others.
fn update_local_snis(_call: &Call<'_>) -> Result<Value, Refused> {
    unreachable!("POST /update-local-snis is answered by `push_local_names`")
}

/// `POST /update-local-snis` (counted by `respond` in
/// `snirelay_local_name_pushes_total` too), run off the runtime's worker
/// threads: parsing and normalising 20,000 names and building the new set
/// takes about 13 ms (`cargo bench --bench local_names`), and the state
/// file is written and fsync'd; on a relay with `threads = 1` that would
/// be time no connection is served.
async fn push_local_names(
    body: Bytes,
    state: &AdminState,
    who: &str,
    peer: &Peer,
    admitted: Authorized,
) -> Result<Value, Refused> {
    let config = state.config().0;
    let backends = state.backends();
    let pusher = Pusher {
        who: who.to_owned(),
        peer: peer.to_string(),
        admitted,
    };
    tokio::task::spawn_blocking(move || apply_local_names(&body, &config, &backends, &pusher))
        .await
        .unwrap_or_else(|e| {
            Err(Refused::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "error",
                format!("the push failed: {e}"),
            ))
        })
}

/// Who pushed, for the push's log lines.
struct Pusher {
    /// The token's name, the Unix peer, or `allowlisted:IP`.
    who: String,
    /// The source address (or the Unix peer's credentials).
    peer: String,
    admitted: Authorized,
}

fn apply_local_names(
    body: &[u8],
    config: &crate::config::Config,
    backends: &crate::backend::Backends,
    pusher: &Pusher,
) -> Result<Value, Refused> {
    let who = pusher.who.as_str();
    let body: LocalNamesBody = serde_json::from_slice(body).map_err(|e| {
        Refused::bad(format!(
            "the body must be {{\"fullDomains\": [\"name\", ...]}}: {e}"
        ))
    })?;
    let (names, ignored) = local_names::normalise(&body.full_domains);
    let admin = config.admin.as_ref();
    let window = admin.map_or(DEFAULT_MOVED_CLOSE_WINDOW, |a| a.moved_close_window);
    let file = admin.and_then(|a| a.local_names_file.as_deref());
    // Written first: a push that cannot be kept must change nothing.
    let change = local_names::push(names, file).map_err(|e| {
        Refused::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "error",
            format!(
                "cannot write {}: {e}; nothing changed",
                file.map(|p| p.display().to_string()).unwrap_or_default()
            ),
        )
    })?;
    // Every changed name's cached answer goes: a name no longer local is
    // looked up afresh, and a name now local must not find an old answer
    // if it leaves again.
    let changed = || change.added.iter().chain(&change.removed).map(|n| &**n);
    let dropped: usize = backends
        .sorted()
        .iter()
        .filter_map(|(_, runtime)| runtime.cluster.as_ref())
        .map(|cache| cache.forget(changed()))
        .sum();
    // A name that left the pushed set but is in a `local_overrides` still
    // goes where it went: its connections stay.
    let closing = registry::move_out(&change.removed, window, |backend, sni| {
        backends
            .get(backend)
            .and_then(|runtime| runtime.cluster.as_ref())
            .is_some_and(|cache| cache.is_local_name(sni))
    });
    if !ignored.is_empty() {
        tracing::warn!(who, ignored = ?ignored, "pushed names that are not host names were ignored");
    }
    tracing::info!(
        who,
        admin.peer = %pusher.peer,
        authenticated = pusher.admitted.as_str(),
        local_names = change.len,
        added = change.added.len(),
        removed = change.removed.len(),
        cached_answers_dropped = dropped,
        closing,
        window = %humantime::format_duration(window),
        "local names pushed"
    );
    Ok(json!({
        "status": "Local SNIs updated successfully",
        "local_names": change.len,
        "added": change.added.len(),
        "removed": change.removed.len(),
        "cached_answers_dropped": dropped,
        "closing": closing,
        "ignored": ignored,
    }))
}

/// The query's `key=value` pairs, `+` and `%XX` decoded.
fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (key, raw) = pair.split_once('=').unwrap_or((pair, ""));
            (key.to_owned(), percent_decode(&raw.replace('+', " ")))
        })
        .collect()
}

fn sources_refused(invalid: sources::InvalidQuery) -> Refused {
    match invalid {
        sources::InvalidQuery::Bad(message) => Refused::bad(message),
        sources::InvalidQuery::NotFound(message) => Refused::not_found(message),
    }
}

/// `GET /sources` (see `sources`).
fn list_sources(call: &Call<'_>) -> Result<Value, Refused> {
    sources::list(&call.state.generations(), &query_pairs(call.query)).map_err(sources_refused)
}

/// `DELETE /sources/{key}` (see `sources`).
fn clear_source(call: &Call<'_>) -> Result<Value, Refused> {
    let key = percent_decode(call.segments[1]);
    let (answer, cleared) =
        sources::clear(&call.state.generations(), &key, &query_pairs(call.query))
            .map_err(sources_refused)?;
    tracing::info!(who = call.who, key = %key, tables = %cleared.join(","), "source counters cleared");
    Ok(answer)
}

/// `%XX` escapes decoded (for `[`, `]` and `:` in an IPv6 address);
/// anything malformed is kept as it is, and fails to parse as an address.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding_recovers_ipv6_addresses() {
        assert_eq!(percent_decode("%5B%3A%3A1%5D%3A443"), "[::1]:443");
        assert_eq!(percent_decode("127.0.0.1:443"), "127.0.0.1:443");
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
    }
}
