//! What the admin listener answers a request: the control endpoints go to
//! [`super::control`]; the paths it serves itself are the read-only
//! endpoints below; any other path is 404, or, with `[admin]
//! forward_unmatched_to`, forwarded upstream ([`super::forward`]).
//!
//! - `/metrics`: the Prometheus/OpenMetrics text of [`crate::metrics`].
//! - `/healthz`: 200 while the process runs its event loop.
//! - `/readyz`: 200 once the listeners are bound and the configuration is
//!   loaded, 503 before that and while draining (the
//!   [`super::state::Readiness`] flag). With `[admin] ready_requires`,
//!   also 503 while a listed backend has no usable address, with a JSON
//!   body naming it ([`super::ready`]).
//! - `/config`: the effective configuration as JSON, in the shape of the
//!   TOML file with every key filled in ([`Config::to_file`], the one
//!   source: it cannot leave a key out), plus `pending_restart`: the keys
//!   a reload changed that only a restart applies. 404 unless
//!   `expose_config` is set, so whoever may scrape `/metrics` does not also
//!   read every route and backend.
//! - `/`: the status page ([`super::status`]), HTML for people, rendered
//!   on request from the metrics, the configuration and the backends'
//!   state.
//!
//! Only GET and HEAD, but for control endpoints. The paths above and the
//! control endpoints are never forwarded.
//!
//! Not here: the connection a request arrives on ([`super::server`]), the
//! control endpoints ([`super::control`]), forwarding ([`super::forward`]).

use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::control;
use super::forward::{self, AdminBody};
use super::peer::AdminPeer;
use super::response::text;
use super::state::AdminState;
use super::status;
use crate::config::Config;
use crate::config::effective::PendingRestart;
use crate::metrics;

/// Answers `req`; `deadline` is when the connection's deadline for it
/// passes.
pub(super) async fn respond(
    req: Request<Incoming>,
    state: &AdminState,
    peer: &AdminPeer,
    deadline: Instant,
) -> Response<AdminBody> {
    let path = req.uri().path();
    if control::is_control(path) {
        return control::respond(req, state, peer).await.map(Either::Left);
    }
    if !serves(path, state)
        && let Some(to) = state.forward_unmatched_to()
    {
        return forward::forward(req, &to, peer, deadline).await;
    }
    read_only(req, state).map(Either::Left)
}

/// Whether the admin listener serves `path` itself (but for the control
/// endpoints): these are never forwarded.
fn serves(path: &str, state: &AdminState) -> bool {
    match path {
        "/metrics" | "/" | "/healthz" | "/readyz" => true,
        "/config" => state.expose_config(),
        _ => false,
    }
}

/// The read-only endpoints, and 404 for any other path.
fn read_only(req: Request<Incoming>, state: &AdminState) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
        response
            .headers_mut()
            .insert(hyper::header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    let mut response = match req.uri().path() {
        "/metrics" => {
            let mut response = text(StatusCode::OK, metrics::metrics().render());
            response.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            );
            response
        }
        // The status page: read-only, open like /metrics (it shows no more
        // than /metrics and /backends do, addresses hidden the same way).
        "/" => {
            let mut response = text(StatusCode::OK, status::render(state));
            let headers = response.headers_mut();
            headers.insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            );
            headers.insert(
                hyper::header::CACHE_CONTROL,
                HeaderValue::from_static("no-store"),
            );
            response
        }
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/readyz" => readyz(state),
        // Not served unless configured: the routes and backends are not for
        // whoever may scrape /metrics. Answered like any unknown path.
        "/config" if state.expose_config() => {
            let (config, pending) = state.config();
            let body = serde_json::to_string_pretty(&config_view(&config, &pending))
                .expect("a JSON value always serializes");
            let mut response = text(StatusCode::OK, body + "\n");
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            response
        }
        _ => text(
            StatusCode::NOT_FOUND,
            "not found; try /, /metrics, /healthz, /readyz, /backends\n",
        ),
    };
    if req.method() == Method::HEAD {
        *response.body_mut() = Full::new(Bytes::new());
    }
    response
}

/// `/readyz`: plain text (`ready`, `not ready`) without `[admin]
/// ready_requires`, as before; with it, JSON naming what is down
/// ([`super::ready::ReadyVerdict::to_json`]), 200 or 503 alike.
fn readyz(state: &AdminState) -> Response<Full<Bytes>> {
    let verdict = state.ready();
    let status = if verdict.ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let (config, _) = state.config();
    let requires = config
        .admin
        .as_ref()
        .map_or(&[][..], |a| &a.ready_requires[..]);
    if requires.is_empty() {
        return text(
            status,
            if verdict.ready() {
                "ready\n"
            } else {
                "not ready\n"
            },
        );
    }
    let body = serde_json::to_string_pretty(&verdict.to_json(requires))
        .expect("a JSON value always serializes");
    let mut response = text(status, body + "\n");
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// The body of `/config`: the effective configuration
/// ([`Config::to_file`]: every key with its value in force, in the shape of
/// the TOML file), plus `pending_restart`, the keys whose new value waits
/// for a restart (see [`crate::config::effective::pending_restart`]).
pub(crate) fn config_view(config: &Config, pending: &[PendingRestart]) -> Value {
    let mut view = serde_json::to_value(config.to_file()).unwrap_or_else(|_| json!({}));
    if let Value::Object(map) = &mut view {
        map.insert("pending_restart".to_owned(), json!(pending));
    }
    view
}
