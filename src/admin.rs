//! The admin listener (`[admin] listen`): `GET /metrics`, `/healthz`,
//! `/readyz` and `/config`, served with hyper (HTTP/1.1).
//!
//! - `/metrics`: the Prometheus/OpenMetrics text of [`crate::metrics`].
//! - `/healthz`: 200 while the process runs its event loop.
//! - `/readyz`: 200 once the listeners are bound and the configuration is
//!   loaded, 503 before that and while draining. The flag is a
//!   [`Readiness`] that the server (or anything else) flips.
//! - `/config`: the effective configuration (defaults filled in) as JSON.
//!
//! Loopback only unless `admin.allow_public = true` (enforced in config),
//! because `/config` shows every backend. At most [`MAX_ADMIN_CONNECTIONS`]
//! connections at once, each request's headers within
//! [`HEADER_READ_TIMEOUT`]; only GET and HEAD.
//!
//! Not here: the metrics themselves, or changing anything: the admin
//! listener is read-only.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::announce::Outbound;
use crate::config::{AddressSource, ClusterLookup, Config, NoSni};
use crate::metrics;
use crate::preface::Mode;

/// Admin connections served at once; more wait in the kernel backlog.
pub const MAX_ADMIN_CONNECTIONS: usize = 16;
/// A client must send a request's headers within this long.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether the relay should receive new connections: what `/readyz` says.
/// Starts not ready.
#[derive(Debug, Default)]
pub struct Readiness(AtomicBool);

impl Readiness {
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Release);
    }

    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// What the admin endpoints read.
pub struct AdminState {
    pub readiness: Arc<Readiness>,
    config: Mutex<Arc<Config>>,
}

impl AdminState {
    pub fn new(config: Arc<Config>, readiness: Arc<Readiness>) -> AdminState {
        AdminState {
            readiness,
            config: Mutex::new(config),
        }
    }

    /// Replaces the configuration `/config` shows (after a reload).
    pub fn set_config(&self, config: Arc<Config>) {
        *self.config.lock().unwrap_or_else(|e| e.into_inner()) = config;
    }

    fn config(&self) -> Arc<Config> {
        self.config
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Serves admin requests on `socket` until `shutdown` fires.
pub async fn serve(socket: TcpListener, state: Arc<AdminState>, shutdown: CancellationToken) {
    let permits = Arc::new(Semaphore::new(MAX_ADMIN_CONNECTIONS));
    let connections = TaskTracker::new();
    loop {
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            () = shutdown.cancelled() => break,
        };
        let stream = tokio::select! {
            accepted = socket.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::debug!(%error, "admin accept failed");
                    // Resource exhaustion must not spin this loop.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        let state = state.clone();
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(respond(&req, &state)) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(error) = result {
                        tracing::debug!(%error, "admin connection failed");
                    }
                }
                () = shutdown.cancelled() => {}
            }
            drop(permit);
        });
    }
    connections.close();
    let _ = tokio::time::timeout(Duration::from_secs(1), connections.wait()).await;
}

fn respond(req: &Request<Incoming>, state: &AdminState) -> Response<Full<Bytes>> {
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
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/readyz" => {
            if state.readiness.is_ready() {
                text(StatusCode::OK, "ready\n")
            } else {
                text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
            }
        }
        "/config" => {
            let body = serde_json::to_string_pretty(&config_view(&state.config()))
                .expect("a JSON value always serializes");
            let mut response = text(StatusCode::OK, body + "\n");
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            response
        }
        _ => text(
            StatusCode::NOT_FOUND,
            "not found; try /metrics, /healthz, /readyz, /config\n",
        ),
    };
    if req.method() == Method::HEAD {
        *response.body_mut() = Full::new(Bytes::new());
    }
    response
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

fn duration(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// The effective configuration as JSON: every value as the relay runs it,
/// defaults filled in, durations in the file's notation. A dedicated view
/// rather than `Serialize` on the snapshot, so compiled matchers and other
/// runtime state stay out of it and its shape is stable.
pub fn config_view(config: &Config) -> Value {
    let listeners: Vec<Value> = config
        .listeners
        .iter()
        .map(|l| {
            let routes: Vec<Value> = l
                .routes
                .iter()
                .map(|r| {
                    json!({
                        "name": r.name,
                        "sni": r.patterns.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
                        "backend": r.backend.name,
                    })
                })
                .collect();
            json!({
                "name": l.name,
                "listen": l.listen.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
                "backlog": l.backlog,
                "client_hello_timeout": duration(l.client_hello_timeout),
                "idle_timeout": duration(l.idle_timeout),
                "max_client_hello_bytes": l.max_client_hello_bytes,
                "no_sni": match &l.no_sni {
                    NoSni::Reject => "reject".to_owned(),
                    NoSni::Backend(b) => b.name.clone(),
                },
                "routes": routes,
                "proxy_protocol": l.proxy_protocol.as_ref().map(|p| json!({
                    "trusted": p.trusted.iter().map(|c| c.to_string()).collect::<Vec<_>>(),
                    "mode": match p.mode {
                        Mode::Require => "require",
                        Mode::Optional => "optional",
                    },
                    "max_hops": p.max_hops,
                })),
            })
        })
        .collect();
    let backends: serde_json::Map<String, Value> = config
        .backends
        .iter()
        .map(|(name, b)| {
            (
                name.clone(),
                json!({
                    "addresses": b.addresses.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
                    "connect_timeout": duration(b.connect_timeout),
                    "proxy_protocol": match b.proxy_protocol {
                        Outbound::None => "none",
                        Outbound::V1 => "v1",
                        Outbound::V2 => "v2",
                    },
                    "proxy_protocol_crc32c": b.proxy_protocol_crc32c,
                    "policy": b.policy.as_str(),
                    "connect_attempts": b.connect_attempts,
                    "max_fails": b.max_fails,
                    "fail_backoff": duration(b.fail_backoff),
                    "source": address_source(&b.source),
                    "health": b.health.map(|h| json!({
                        "interval": duration(h.interval),
                        "timeout": duration(h.timeout),
                        "rise": h.rise,
                        "fall": h.fall,
                    })),
                }),
            )
        })
        .collect();
    json!({
        "global": {
            "max_connections": config.global.max_connections,
            "drain_timeout": duration(config.global.drain_timeout),
        },
        "admin": config.admin.as_ref().map(|a| json!({ "listen": a.listen.to_string() })),
        "listener": listeners,
        "backend": backends,
    })
}

/// A backend's address source as `/config` shows it.
fn address_source(source: &AddressSource) -> Value {
    match source {
        AddressSource::Fixed => json!("addresses"),
        AddressSource::Dns(dns) => json!({
            "resolve": format!("{}:{}", dns.host, dns.port),
            "resolver": dns.resolver.map(|r| r.to_string()),
            "resolve_interval": duration(dns.interval),
            "min_ttl": duration(dns.min_ttl),
            "max_ttl": duration(dns.max_ttl),
        }),
        AddressSource::Cluster(cluster) => json!({
            "lookup": match &cluster.lookup {
                ClusterLookup::Dns { server, port } => json!({ "dns_server": server.to_string(), "port": port }),
                ClusterLookup::Http { url } => json!({ "lookup_url": url }),
            },
            "local_backend": cluster.local_backend,
            "positive_ttl": duration(cluster.positive_ttl),
            "negative_ttl": duration(cluster.negative_ttl),
            "lookup_timeout": duration(cluster.lookup_timeout),
            "allowed_targets": cluster.allowed_targets.iter().map(|c| c.to_string()).collect::<Vec<_>>(),
        }),
    }
}
