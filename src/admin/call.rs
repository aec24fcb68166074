//! What every control endpoint shares: what a handler is given ([`Call`])
//! and how it refuses ([`Refused`], with the status and the `outcome` it
//! is counted under), the request body read within its bound
//! ([`MAX_BODY_BYTES`], [`MAX_LOCAL_NAMES_BODY_BYTES`]; 413 past it, 408
//! when it does not arrive within the connection's deadline), and the
//! query and path decoding ([`query_pairs`], [`percent_decode`]).
//!
//! Not here: which endpoints there are and the order a request goes
//! through (authorization, the method check, counting: [`super::control`]),
//! or any endpoint's own work ([`super::backends`],
//! [`super::connections`], [`super::push`], [`super::sources`]).

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use serde_json::{Value, json};

use super::response::json_response;
use super::state::AdminState;

/// Largest request body a control endpoint reads; past it, 413.
pub(crate) const MAX_BODY_BYTES: usize = 4 * 1024;
/// Largest body of `POST /update-local-snis`: a control plane pushes every
/// name this node serves at once (about 20,000 names of 40 bytes). Read
/// within the same `REQUEST_TIMEOUT` as any request, so it costs at most
/// this much memory per admin connection for two seconds.
pub(crate) const MAX_LOCAL_NAMES_BODY_BYTES: usize = 1024 * 1024;

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
pub(super) type Handler = fn(&Call<'_>) -> Result<Value, Refused>;

/// A request refused after authorization: its status, a message, and the
/// `outcome` it is counted under.
pub(crate) struct Refused {
    pub(super) status: StatusCode,
    pub(super) outcome: &'static str,
    pub(super) message: String,
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
pub(super) async fn body(req: Request<Incoming>, limit: usize) -> Result<Bytes, Refused> {
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
/// past [`super::limits::REQUEST_TIMEOUT`]); also read by
/// [`super::forward`] for a forwarded body.
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

/// The query's `key=value` pairs, `+` and `%XX` decoded.
pub(super) fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
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

/// `%XX` escapes decoded (for `[`, `]` and `:` in an IPv6 address);
/// anything malformed is kept as it is, and fails to parse as an address.
pub(super) fn percent_decode(text: &str) -> String {
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
