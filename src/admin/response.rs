//! The responses every admin endpoint builds its answers from: plain text
//! ([`text`]) and pretty JSON ([`json_response`]), each with its
//! `Content-Type`.
//!
//! Not here: what any endpoint answers ([`super::router`],
//! [`super::control`], [`super::forward`]).

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Response, StatusCode};
use serde_json::Value;

/// `body` as plain text (UTF-8), with `status`.
pub(crate) fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// `value` as pretty JSON (and a newline), with `status`.
pub(crate) fn json_response(status: StatusCode, value: &Value) -> Response<Full<Bytes>> {
    let body = serde_json::to_string_pretty(value).expect("a JSON value always serializes");
    let mut response = text(status, body + "\n");
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}
