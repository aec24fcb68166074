//! The control endpoints of the admin listener: which there are, and the
//! way every control request goes.
//!
//! - `GET /backends`, `POST /backends/{backend}/addresses/{addr}/state`:
//!   the backends' addresses and their operator's state
//!   ([`super::backends`]).
//! - `GET /connections`, `DELETE /connections`, `POST
//!   /routes/{route}/drain`: the open connections, listed, closed or
//!   drained ([`super::connections`]).
//! - `POST /update-local-snis`: the pushed local names, at the path and
//!   with the body Pangolin pushes to Gerbil ([`super::push`]).
//! - `GET /sources` and `DELETE /sources/{key}`: the per-source admission
//!   tables ([`super::sources`]).
//!
//! Every request is authorized first ([`super::auth`]; a push of local
//! names from a source in `[admin] push_unauthenticated_from` needs no
//! token, and every push, refused or not, is logged at info with its
//! source, `admin.peer`, and `authenticated`: `true`, `allowlisted` or
//! `false`), counted in
//! `snirelay_admin_control_actions_total{kind,outcome}`, and every change
//! is logged at info with `who` (the token's name or the Unix peer's
//! credentials). Bad input is a 4xx naming what was wrong, and changes
//! nothing. Bodies are JSON, at most [`super::call::MAX_BODY_BYTES`] (but
//! for the local names, [`super::call::MAX_LOCAL_NAMES_BODY_BYTES`]),
//! unknown fields refused.
//!
//! Adding an endpoint: one arm in [`route`] (its kind, its method and a
//! [`Handler`] given a [`Call`], returning its JSON answer or a
//! [`super::call::Refused`]); authorization, counting, the method check
//! and the body bound come with it.
//!
//! Not here: what each endpoint does (the modules above), what a handler
//! is given and the body's bounds ([`super::call`]), or what a state does
//! to connections ([`crate::backend::plan`] leaves drained and maintained
//! addresses out of new plans).

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::json;

use super::auth::{self, AuthRefusal, Authorized};
use super::call::{self, Call, Handler, MAX_BODY_BYTES, MAX_LOCAL_NAMES_BODY_BYTES};
use super::peer::AdminPeer;
use super::response::{json_response, text};
use super::state::AdminState;
use super::{backends, connections, push, sources};
use crate::metrics;

/// Whether `path` is served by this module (and so needs authorization).
pub(crate) fn is_control(path: &str) -> bool {
    route(&segments(path), &Method::GET).is_some()
}

fn segments(path: &str) -> Vec<&str> {
    path.trim_matches('/').split('/').collect()
}

/// The control endpoints: the `kind` they are counted under, the method
/// they take, and the handler. Authorization, counting, the method check
/// and the bounded body come with every entry.
fn route(segments: &[&str], method: &Method) -> Option<(&'static str, Method, Handler)> {
    Some(match segments {
        ["backends"] => ("backends", Method::GET, backends::backends),
        ["backends", _, "addresses", _, "state"] => {
            ("address_state", Method::POST, backends::set_address_state)
        }
        // Connections (issue 16, point 3).
        // One path, two methods: the method picks the entry.
        ["connections"] if method == Method::DELETE => (
            "close_connections",
            Method::DELETE,
            connections::close_connections,
        ),
        ["connections"] => ("connections", Method::GET, connections::list_connections),
        // Names that moved (issue 16, point 4).
        ["routes", _, "drain"] => ("route_drain", Method::POST, connections::drain_route),
        // Pushed local names (issue 17), at the path Gerbil serves them on.
        ["update-local-snis"] => ("update_local_snis", Method::POST, push::update_local_snis),
        // The source table.
        ["sources"] => ("sources", Method::GET, sources::list_sources),
        ["sources", _] => ("clear_source", Method::DELETE, sources::clear_source),
        _ => return None,
    })
}

/// Answers a control request from `peer`.
pub(crate) async fn respond(
    req: Request<Incoming>,
    state: &AdminState,
    peer: &AdminPeer,
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
        call::body(req, limit).await
    };
    if kind == "connections" {
        return match connections::listing(query).await {
            Ok(text) => {
                metrics::metrics().control_action(kind, "ok");
                let mut response = super::response::text(StatusCode::OK, text);
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
            Ok(body) => push::push_local_names(body, state, &who, peer, admitted).await,
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
