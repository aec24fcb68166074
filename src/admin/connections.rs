//! The open connections' control endpoints:
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
//! Not here: authorization, the method check and counting
//! ([`super::control`]); the registry the connections are found in and
//! closed through ([`crate::flow::registry`]).

use std::net::SocketAddr;
use std::str::FromStr;

use serde::Deserialize;
use serde_json::{Value, json};

use super::call::{Call, Refused, percent_decode};
use crate::flow::registry;
use crate::wire::cidr::Cidr;

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
pub(super) fn list_connections(_call: &Call<'_>) -> Result<Value, Refused> {
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
pub(super) async fn listing(query: Option<String>) -> Result<String, Refused> {
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
pub(super) fn close_connections(call: &Call<'_>) -> Result<Value, Refused> {
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
pub(super) fn drain_route(call: &Call<'_>) -> Result<Value, Refused> {
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
