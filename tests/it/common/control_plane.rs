//! A test control plane for cluster-resolved backends: answers
//! `POST /resolve {"hostname": NAME}` on 127.0.0.1:0 with what the test set
//! for NAME (`{"endpoints": [...]}`, HTTP 404 when nothing is set), counts
//! requests per hostname, can fail every request (a status, a bad body, or
//! a hang), and can hold its answers until the test releases them or
//! delay each by a set time. It also counts every request and the most it
//! had in hand at once (from the request's arrival to its answer).
//!
//! Requests that are not a JSON POST to `/resolve` are counted as
//! malformed and answered 400, so a test sees a broken client.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};

use super::WAIT;

/// What the control plane answers.
#[derive(Debug, Clone)]
pub(crate) enum Reply {
    /// 200 with `{"endpoints": [...]}`; an empty list means "your node".
    Endpoints(Vec<String>),
    /// This status with an empty body.
    Status(u16),
    /// 200 with this body as it is.
    Body(String),
    /// Never answers (the connection stays open).
    Hang,
}

impl Reply {
    pub(crate) fn endpoints<T: ToString>(addrs: &[T]) -> Reply {
        Reply::Endpoints(addrs.iter().map(ToString::to_string).collect())
    }
}

#[derive(Default)]
struct State {
    answers: HashMap<String, Reply>,
    /// When set, every request gets this instead.
    failure: Option<Reply>,
    requests: HashMap<String, usize>,
    malformed: usize,
    /// How long each answer waits (zero: none).
    delay: std::time::Duration,
    /// Requests in hand now, and the most at once so far.
    in_hand: usize,
    max_in_hand: usize,
}

/// A request in hand until dropped (answered, or its connection gone).
struct InHand(Arc<Mutex<State>>);

impl InHand {
    fn new(state: &Arc<Mutex<State>>) -> InHand {
        let mut s = state.lock().unwrap();
        s.in_hand += 1;
        s.max_in_hand = s.max_in_hand.max(s.in_hand);
        InHand(state.clone())
    }
}

impl Drop for InHand {
    fn drop(&mut self) {
        self.0.lock().unwrap().in_hand -= 1;
    }
}

/// A running control plane; stops when dropped.
pub(crate) struct ControlPlane {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    changed: Arc<Notify>,
    hold: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl ControlPlane {
    pub(crate) async fn start() -> ControlPlane {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State::default()));
        let changed = Arc::new(Notify::new());
        let (hold, held) = watch::channel(false);
        let shared = (state.clone(), changed.clone(), held);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (state, changed, held) = shared.clone();
                let service = hyper::service::service_fn(move |req| {
                    answer(req, state.clone(), changed.clone(), held.clone())
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service),
                );
            }
        });
        ControlPlane {
            addr,
            state,
            changed,
            hold,
            task,
        }
    }

    /// The `lookup_url` to configure.
    pub(crate) fn url(&self) -> String {
        format!("http://{}/resolve", self.addr)
    }

    /// Answers `hostname` with `reply` from now on.
    pub(crate) fn set(&self, hostname: &str, reply: Reply) {
        let mut state = self.state.lock().unwrap();
        state.answers.insert(hostname.to_owned(), reply);
    }

    /// Answers every request with `reply` (`None`: back to normal).
    pub(crate) fn fail(&self, reply: Option<Reply>) {
        self.state.lock().unwrap().failure = reply;
    }

    /// Holds (true) or releases (false) every answer; requests are still
    /// counted as they arrive.
    pub(crate) fn hold(&self, held: bool) {
        self.hold.send_replace(held);
    }

    /// Delays every answer by `delay` from now on.
    pub(crate) fn delay(&self, delay: std::time::Duration) {
        self.state.lock().unwrap().delay = delay;
    }

    /// Well-formed requests received so far, for any name.
    pub(crate) fn total_requests(&self) -> usize {
        self.state.lock().unwrap().requests.values().sum()
    }

    /// The most requests in hand at once so far.
    pub(crate) fn max_in_hand(&self) -> usize {
        self.state.lock().unwrap().max_in_hand
    }

    /// Requests received for `hostname` so far.
    pub(crate) fn requests(&self, hostname: &str) -> usize {
        let state = self.state.lock().unwrap();
        state.requests.get(hostname).copied().unwrap_or(0)
    }

    /// Requests that were not a JSON POST to /resolve.
    pub(crate) fn malformed(&self) -> usize {
        self.state.lock().unwrap().malformed
    }

    /// Waits (bounded by [`WAIT`]) until `hostname` got at least `n` requests.
    pub(crate) async fn wait_requests(&self, hostname: &str, n: usize) {
        let waited = super::wait_notified(&self.changed, || self.requests(hostname) >= n).await;
        assert!(
            waited,
            "{hostname}: {} request(s), expected {n} within {WAIT:?}",
            self.requests(hostname)
        );
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn answer(
    req: Request<Incoming>,
    state: Arc<Mutex<State>>,
    changed: Arc<Notify>,
    mut held: watch::Receiver<bool>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let well_formed = req.method() == hyper::Method::POST
        && req.uri().path() == "/resolve"
        && req
            .headers()
            .get(hyper::header::CONTENT_TYPE)
            .is_some_and(|v| v == "application/json");
    let body = match req.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let hostname = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["hostname"].as_str().map(str::to_owned));
    let Some(hostname) = hostname.filter(|_| well_formed) else {
        state.lock().unwrap().malformed += 1;
        changed.notify_waiters();
        return Ok(status(StatusCode::BAD_REQUEST, Bytes::new()));
    };
    *state
        .lock()
        .unwrap()
        .requests
        .entry(hostname.clone())
        .or_default() += 1;
    let _in_hand = InHand::new(&state);
    changed.notify_waiters();
    let _ = held.wait_for(|held| !held).await;
    let delay = state.lock().unwrap().delay;
    if !delay.is_zero() {
        // The time a lookup takes (a control plane's own work), not a
        // wait for readiness.
        tokio::time::sleep(delay).await;
    }
    let reply = {
        let state = state.lock().unwrap();
        state
            .failure
            .clone()
            .or_else(|| state.answers.get(&hostname).cloned())
    };
    Ok(match reply {
        None => status(StatusCode::NOT_FOUND, Bytes::new()),
        Some(Reply::Endpoints(endpoints)) => {
            let body = serde_json::json!({ "endpoints": endpoints }).to_string();
            status(StatusCode::OK, Bytes::from(body))
        }
        Some(Reply::Status(code)) => status(StatusCode::from_u16(code).unwrap(), Bytes::new()),
        Some(Reply::Body(body)) => status(StatusCode::OK, Bytes::from(body)),
        Some(Reply::Hang) => std::future::pending().await,
    })
}

fn status(code: StatusCode, body: Bytes) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = code;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        "application/json".parse().unwrap(),
    );
    response
}

/// A relay config routing `*.example.com` to a cluster backend named
/// `cluster` that asks `url`: `top` goes before the listener,
/// `cluster_extra` into `[backend.cluster.cluster]`, `after` after it.
pub(crate) fn cluster_relay_config(
    url: &str,
    top: &str,
    cluster_extra: &str,
    after: &str,
) -> String {
    format!(
        r#"
{top}
[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]

[[route]]
sni = ["*.example.com"]
backend = "cluster"

[backend.cluster]
connect_timeout = "2s"

[backend.cluster.cluster]
lookup_url = "{url}"
allowed_targets = ["127.0.0.0/8"]
{cluster_extra}

{after}
"#
    )
}
