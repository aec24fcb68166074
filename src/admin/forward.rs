//! `[admin] forward_unmatched_to`: a request for a path the admin listener
//! does not serve goes to an upstream HTTP/1.1 server, and its answer comes
//! back. On a Pangolin node this lets snirelay take the base address Gerbil
//! registered (`reachableAt`): Pangolin posts `/update-local-snis` there,
//! which snirelay serves, and `/peer`, `/update-proxy-mapping`,
//! `/update-destinations`, … there too, which go on to Gerbil, moved to a
//! loopback port behind it.
//!
//! **Unchanged**, as far as HTTP lets a gateway: the method, the path and
//! query (sent in origin form), every end-to-end header in its order
//! (`Host` and `Authorization` included), and the body, streamed as it
//! arrives; back come the status, the end-to-end headers and the body,
//! streamed too. Changed, as RFC 9110 §7.6 has a gateway do:
//!
//! - hop-by-hop headers are dropped both ways: `Connection` and every
//!   header it lists, `Keep-Alive`, `Proxy-Connection`, `TE`,
//!   `Transfer-Encoding` (each hop frames the body itself: hyper sends it
//!   with its length, or chunked when the length is not known), `Upgrade`
//!   (nothing is upgraded through here), `Proxy-Authorization` and
//!   `Proxy-Authenticate`;
//! - the request gets `Via: 1.1 snirelay` (appended to any `Via`): §7.6.3
//!   requires it of an HTTP-to-HTTP gateway, and it is how a forwarding
//!   loop (an upstream that is this listener again) is caught: a request
//!   that already names `snirelay` in `Via` is answered 508 and not sent
//!   on. No `X-Forwarded-For`: Gerbil reads none, and the source is in
//!   this listener's own log line;
//! - the request goes out as HTTP/1.1 whatever the client spoke.
//!
//! **Bounded** by the admin listener's own limits: the request head as
//! hyper reads it ([`MAX_REQUEST_HEAD_BYTES`], [`MAX_REQUEST_HEADERS`]), the
//! answer's head by the same two; a body of at most [`MAX_BODY_BYTES`], the
//! largest the listener takes anywhere (the pushed local names), with 413
//! past it: before anything is sent when the declared length says so, and
//! mid-stream otherwise (the upstream's request is then cut, never
//! completed); and time: the whole exchange lives within the admin
//! connection's own deadline ([`REQUEST_TIMEOUT`], 2 s from the request's
//! first byte). Connecting, sending and receiving the answer's head must
//! end a quarter second before it (504 past that, still in time to be
//! written), and the answer's body must be through by it (the connection
//! is cut past it). An upstream that cannot be reached or fails is 502.
//! Every failure is logged at warn naming the key, and every request is
//! counted in `snirelay_admin_forwarded_total{outcome}`.
//!
//! One upstream connection per forwarded request, closed with it: the
//! upstream is on the node, and Pangolin's calls are a few per minute.
//! Its host is resolved on every request (the system resolver:
//! `/etc/hosts`, then DNS).
//!
//! Not here: which paths the admin listener serves itself
//! ([`super::router`]), or its bounds ([`super::limits`]).

use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{Either, Full, Limited};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{CONNECTION, CONTENT_LENGTH, HeaderMap, HeaderName, HeaderValue, VIA};
use hyper::{Method, Request, Response, StatusCode, Uri, Version};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use super::call;
use super::limits::{MAX_REQUEST_HEAD_BYTES, MAX_REQUEST_HEADERS, REQUEST_TIMEOUT};
use super::peer::AdminPeer;
use super::response::text;
use crate::config::ForwardTo;
use crate::{metrics, sockopt};

/// Largest request body forwarded: the largest the admin listener takes for
/// itself (`POST /update-local-snis`). Streamed, never held whole.
pub(crate) const MAX_BODY_BYTES: usize = call::MAX_LOCAL_NAMES_BODY_BYTES;

/// The key, as failures name it.
const KEY: &str = "admin.forward_unmatched_to";

/// What `Via` says this hop is.
const VIA_NAME: &str = "snirelay";

/// Headers that concern one connection only (RFC 9110 §7.6.1), never
/// forwarded; `Connection` may list more.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "transfer-encoding",
    "upgrade",
    "proxy-authorization",
    "proxy-authenticate",
];

/// An admin answer's body: made here, or streamed from the upstream.
pub(crate) type AdminBody = Either<Full<Bytes>, Streamed>;

/// How long before the connection's deadline a forwarded request gives up
/// waiting for the upstream's answer, so that its 504 can still be written.
const ANSWER_MARGIN: Duration = Duration::from_millis(250);

/// Forwards `req` from `peer` to `to` and answers with the upstream's
/// answer, or with why not, before `deadline`: the connection's own (the
/// admin listener's `REQUEST_TIMEOUT` from the request's first byte).
pub(crate) async fn forward(
    req: Request<Incoming>,
    to: &ForwardTo,
    peer: &AdminPeer,
    deadline: Instant,
) -> Response<AdminBody> {
    let answer_by = deadline
        .checked_sub(ANSWER_MARGIN)
        .unwrap_or(deadline)
        .max(Instant::now());
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let refuse = |status: StatusCode, outcome: &'static str, message: &str| {
        metrics::metrics().admin_forwarded(outcome);
        tracing::warn!(
            key = KEY,
            upstream = %to.url,
            admin.peer = %peer,
            method = %method,
            path = %path,
            outcome,
            error = message,
            "admin request not forwarded"
        );
        text(status, format!("{message}\n")).map(Either::Left)
    };
    if method == Method::CONNECT {
        return refuse(
            StatusCode::METHOD_NOT_ALLOWED,
            "bad_method",
            "CONNECT is not forwarded",
        );
    }
    if names_this_hop(req.headers()) {
        return refuse(
            StatusCode::LOOP_DETECTED,
            "loop",
            "the request has been through snirelay already: forward_unmatched_to leads back to it",
        );
    }
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return too_large(&method, &path, peer);
    }
    let request = outbound(req);
    let exchange = tokio::time::timeout_at(answer_by, exchange(request, to, deadline));
    let response = match exchange.await {
        Ok(Ok(response)) => response,
        Ok(Err(ForwardFailure::TooLarge)) => return too_large(&method, &path, peer),
        Ok(Err(ForwardFailure::ClientTimedOut)) => {
            metrics::metrics().admin_forwarded("request_timeout");
            let mut response = text(
                StatusCode::REQUEST_TIMEOUT,
                "the body did not arrive in time\n",
            );
            response
                .headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
            return response.map(Either::Left);
        }
        Ok(Err(ForwardFailure::Connect(error))) => {
            let message = format!("bad gateway: cannot connect to {}: {error}", to.url);
            return refuse(StatusCode::BAD_GATEWAY, "unreachable", &message);
        }
        Ok(Err(ForwardFailure::Upstream(error))) => {
            let message = format!("bad gateway: {} failed: {error}", to.url);
            return refuse(StatusCode::BAD_GATEWAY, "upstream_error", &message);
        }
        Err(_) => {
            let message = format!(
                "gateway timeout: {} did not answer within the admin listener's {} per request",
                to.url,
                humantime::format_duration(REQUEST_TIMEOUT)
            );
            return refuse(StatusCode::GATEWAY_TIMEOUT, "timeout", &message);
        }
    };
    metrics::metrics().admin_forwarded("ok");
    tracing::debug!(
        admin.peer = %peer,
        method = %method,
        path = %path,
        status = response.status().as_u16(),
        upstream = %to.url,
        "admin request forwarded"
    );
    let (mut parts, body) = response.into_parts();
    parts.headers = without_hop_by_hop(std::mem::take(&mut parts.headers));
    Response::from_parts(
        parts,
        Either::Right(Streamed {
            inner: body,
            deadline: Box::pin(tokio::time::sleep_until(deadline)),
        }),
    )
}

/// 413, as the admin listener answers any body over its bound.
fn too_large(method: &Method, path: &str, peer: &AdminPeer) -> Response<AdminBody> {
    metrics::metrics().admin_forwarded("too_large");
    tracing::info!(
        key = KEY,
        admin.peer = %peer,
        method = %method,
        path,
        outcome = "too_large",
        "admin request not forwarded"
    );
    call::too_large_answer(MAX_BODY_BYTES).map(Either::Left)
}

/// The request as it goes upstream: origin form, hop-by-hop headers gone,
/// `Via` added, HTTP/1.1, the body bounded.
fn outbound(req: Request<Incoming>) -> Request<Limited<Incoming>> {
    let (mut parts, body) = req.into_parts();
    parts.headers = without_hop_by_hop(std::mem::take(&mut parts.headers));
    let received = match parts.version {
        Version::HTTP_10 => "1.0",
        _ => "1.1",
    };
    parts.headers.append(
        VIA,
        HeaderValue::from_str(&format!("{received} {VIA_NAME}")).expect("a valid header value"),
    );
    let origin_form = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    parts.uri = origin_form
        .parse::<Uri>()
        .unwrap_or_else(|_| Uri::from_static("/"));
    parts.version = Version::HTTP_11;
    Request::from_parts(parts, Limited::new(body, MAX_BODY_BYTES))
}

/// Why a forwarded request got no answer.
#[derive(Debug)]
enum ForwardFailure {
    /// The upstream could not be resolved or connected to.
    Connect(std::io::Error),
    /// The client's body passed [`MAX_BODY_BYTES`].
    TooLarge,
    /// The client's body did not arrive within the listener's deadline.
    ClientTimedOut,
    /// The upstream broke the exchange.
    Upstream(hyper::Error),
}

/// Connects to `to`, sends `request` and waits for the answer's head. The
/// connection is driven by its own task until the body is through or
/// `deadline` passes.
async fn exchange(
    request: Request<Limited<Incoming>>,
    to: &ForwardTo,
    deadline: Instant,
) -> Result<Response<Incoming>, ForwardFailure> {
    let stream = TcpStream::connect((to.host.as_str(), to.port))
        .await
        .map_err(ForwardFailure::Connect)?;
    let _ = sockopt::set_nodelay(&stream);
    let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
        .max_buf_size(MAX_REQUEST_HEAD_BYTES)
        .max_headers(MAX_REQUEST_HEADERS)
        .handshake(TokioIo::new(stream))
        .await
        .map_err(ForwardFailure::Upstream)?;
    tokio::spawn(async move {
        let _ = tokio::time::timeout_at(deadline, conn).await;
    });
    sender.send_request(request).await.map_err(|error| {
        if caused_by::<http_body_util::LengthLimitError>(&error) {
            ForwardFailure::TooLarge
        } else if call::timed_out(&error) {
            ForwardFailure::ClientTimedOut
        } else {
            ForwardFailure::Upstream(error)
        }
    })
}

fn caused_by<E: StdError + 'static>(error: &(dyn StdError + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        if e.is::<E>() {
            return true;
        }
        next = e.source();
    }
    false
}

/// Whether a `Via` element of `headers` names this hop (`1.1 snirelay`).
fn names_this_hop(headers: &HeaderMap) -> bool {
    headers
        .get_all(VIA)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|element| {
            element
                .split_whitespace()
                .nth(1)
                .is_some_and(|by| by.eq_ignore_ascii_case(VIA_NAME))
        })
}

/// The headers without the hop-by-hop ones ([`HOP_BY_HOP`] and those
/// `Connection` lists), the others in their order (a `HeaderMap` reorders
/// on removal, so a new one is built).
fn without_hop_by_hop(headers: HeaderMap) -> HeaderMap {
    let listed: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    let hop = |name: &HeaderName| HOP_BY_HOP.contains(&name.as_str()) || listed.contains(name);
    let mut kept = HeaderMap::with_capacity(headers.len());
    let mut current: Option<HeaderName> = None;
    for (name, value) in headers {
        // `None`: another value of the name before.
        if let Some(name) = name {
            current = Some(name);
        }
        if let Some(name) = current.as_ref().filter(|n| !hop(n)) {
            kept.append(name.clone(), value);
        }
    }
    kept
}

/// The upstream's answer body, passed on as it comes, cut when the
/// forwarded request's deadline passes.
pub(crate) struct Streamed {
    inner: Incoming,
    deadline: Pin<Box<Sleep>>,
}

impl Body for Streamed {
    type Data = Bytes;
    type Error = Box<dyn StdError + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(frame.map(|f| f.map_err(Into::into))),
            Poll::Pending => match self.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(format!(
                    "the upstream's answer took longer than {}",
                    humantime::format_duration(REQUEST_TIMEOUT)
                )
                .into()))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        h
    }

    #[test]
    fn hop_by_hop_headers_and_those_connection_lists_are_dropped() {
        let h = headers(&[
            ("Host", "gerbil"),
            ("Connection", "keep-alive, X-Hop"),
            ("Connection", "close"),
            ("X-Hop", "1"),
            ("Keep-Alive", "timeout=5"),
            ("Proxy-Connection", "keep-alive"),
            ("TE", "trailers"),
            ("Transfer-Encoding", "chunked"),
            ("Upgrade", "websocket"),
            ("Proxy-Authorization", "Basic x"),
            ("Proxy-Authenticate", "Basic"),
            ("Authorization", "Bearer t"),
            ("X-End", "a"),
            ("X-End", "b"),
        ]);
        let left: Vec<(String, String)> = without_hop_by_hop(h)
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned()))
            .collect();
        assert_eq!(
            left,
            [
                ("host", "gerbil"),
                ("authorization", "Bearer t"),
                ("x-end", "a"),
                ("x-end", "b"),
            ]
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
        );
    }

    #[test]
    fn a_request_that_came_through_here_is_recognised() {
        assert!(names_this_hop(&headers(&[("Via", "1.1 snirelay")])));
        assert!(names_this_hop(&headers(&[(
            "Via",
            "1.0 fred, 1.1 SNIRELAY (x)"
        )])));
        assert!(!names_this_hop(&headers(&[("Via", "1.1 traefik")])));
        assert!(!names_this_hop(&headers(&[("Via", "snirelay")])));
        assert!(!names_this_hop(&HeaderMap::new()));
    }
}
