//! A Pangolin node's one base address, through the real binary on loopback.
//!
//! Tokenless pushes, deliberately: Pangolin's push of local names exactly as
//! its `sendToExitNode` sends it (axios over Node's http: `Content-Type`,
//! no `Authorization`) is taken from a source in `[admin]
//! push_unauthenticated_from`, twice on one keep-alive connection as axios
//! keeps it; from any other source it is 401 and changes nothing; a wrong
//! token is refused even from a listed source; the list opens the push
//! only; every push is logged with its source and `authenticated`.
//!
//! One base address: with `[admin] forward_unmatched_to`, a double of
//! Gerbil's HTTP API (which records what reaches it) sits behind the admin
//! address. `POST /peer`, `DELETE /peer?public_key=…` and `POST
//! /update-destinations` reach it unchanged (method, path, query, body,
//! end-to-end headers; hop-by-hop ones dropped, `Via` added) and its
//! answers come back unchanged (status, headers, body, a chunked one
//! streamed), while `/update-local-snis` and `/healthz` on the same address
//! are snirelay's own. A body of the admin listener's largest bound (1 MiB)
//! streams through; one larger is 413, before anything is sent when its
//! length is declared, and cut mid-stream when chunked. An unreachable
//! upstream is 502, a silent one 504, each logged naming the key; a
//! forwarding loop is 508. Without the key, unknown paths stay 404.

use crate::common;

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use common::*;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

const TOKEN: &str = "pangolin-push-token";
/// The axios fosrl/pangolin pins (package.json), as its User-Agent says.
const AXIOS: &str = "axios/1.13.5";
/// The admin listener's largest body (`POST /update-local-snis`).
const MAX_BODY: usize = 1024 * 1024;

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

/// A relay with `[admin]` on a free loopback port (unless `admin_extra`
/// names `listen`), the token file at `tokens`, and `admin_extra`.
fn config(tokens: &Path, admin_extra: &str) -> String {
    let listen = if admin_extra.contains("listen") {
        String::new()
    } else {
        "listen = \"127.0.0.1:0\"\n".to_owned()
    };
    format!(
        "[admin]\n{listen}token_file = \"{}\"\n{admin_extra}\n{}",
        tokens.display(),
        simple_config(&["app.example.com"], closed_port(), "")
    )
}

/// `POST path` with a JSON body as fosrl/pangolin's `sendToExitNode` sends
/// it: `axios.post(url, data, {headers: {"Content-Type":
/// "application/json"}})` with Node's http adapter, which adds axios'
/// default `Accept`, its `User-Agent`, the length and `Accept-Encoding`,
/// then Node's `Host` and (Node's keep-alive agent) `Connection:
/// keep-alive`; `extra` headers go before `Host`.
fn pangolin_post(host: SocketAddr, path: &str, body: &str, extra: &[&str]) -> String {
    let mut text = format!(
        "POST {path} HTTP/1.1\r\n\
         Accept: application/json, text/plain, */*\r\n\
         Content-Type: application/json\r\n\
         User-Agent: {AXIOS}\r\n\
         Content-Length: {}\r\n\
         Accept-Encoding: gzip, compress, deflate, br\r\n",
        body.len()
    );
    for header in extra {
        text.push_str(header);
        text.push_str("\r\n");
    }
    text.push_str(&format!(
        "Host: {host}\r\nConnection: keep-alive\r\n\r\n{body}"
    ));
    text
}

/// Reads one answer with a `Content-Length` from a connection that stays
/// open (keep-alive).
async fn one_answer(stream: &mut TcpStream) -> Answer {
    let read = async {
        let mut raw = Vec::new();
        let mut chunk = [0u8; 16 * 1024];
        loop {
            if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8(raw[..end].to_vec()).unwrap();
                let length: usize = head
                    .lines()
                    .find_map(|l| {
                        let (name, value) = l.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse().unwrap())
                    })
                    .unwrap_or_else(|| panic!("an answer without a length: {head}"));
                if raw.len() >= end + 4 + length {
                    let body = String::from_utf8(raw[end + 4..end + 4 + length].to_vec()).unwrap();
                    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
                    return Answer { status, head, body };
                }
            }
            let n = stream.read(&mut chunk).await.unwrap();
            assert!(
                n > 0,
                "closed before the answer was whole: {:?}",
                String::from_utf8_lossy(&raw)
            );
            raw.extend_from_slice(&chunk[..n]);
        }
    };
    tokio::time::timeout(WAIT, read)
        .await
        .expect("no answer in time")
}

/// Sends `request` from `from` and reads one answer, keeping the
/// connection; returns it with the client's address.
async fn send_from(
    admin: SocketAddr,
    from: &str,
    request: &str,
) -> (TcpStream, SocketAddr, Answer) {
    let mut stream = connect_from(ip(from), admin).await.unwrap();
    let client = stream.local_addr().unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let answer = one_answer(&mut stream).await;
    (stream, client, answer)
}

fn domains(names: &[&str]) -> String {
    // As JSON.stringify writes it: no spaces.
    serde_json::json!({ "fullDomains": names }).to_string()
}

/// The relay's log line about the push from `client`.
async fn push_line(relay: &Relay, client: SocketAddr) -> serde_json::Value {
    let client = client.to_string();
    relay
        .wait_log(|l| {
            l["admin.peer"] == client.as_str()
                && (l["message"] == "local names pushed"
                    || l["message"] == "local names push refused")
        })
        .await
}

async fn local_names_gauge(relay: &Relay) -> f64 {
    metric(
        &http_get(relay.admin_addr().await, "/metrics").await.1,
        "snirelay_local_names",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pangolins_own_push_is_taken_without_a_token_from_a_listed_source_only() {
    let tokens = token_file(&format!("pangolin:{TOKEN}\n"));
    let relay = Relay::start(&config(
        &tokens,
        "push_unauthenticated_from = [\"127.0.0.2/32\", \"192.0.2.0/24\"]\n",
    ))
    .await;
    let admin = relay.admin_addr().await;
    let two = domains(&["a.example.com", "b.example.com"]);

    // From the listed source, exactly as Pangolin sends it.
    let (mut stream, client, answer) = send_from(
        admin,
        "127.0.0.2",
        &pangolin_post(admin, "/update-local-snis", &two, &[]),
    )
    .await;
    assert_eq!(answer.status, 200, "{} {}", answer.head, answer.body);
    let json = answer.json();
    assert_eq!(json["status"], "Local SNIs updated successfully");
    assert_eq!(
        (json["local_names"].as_u64(), json["added"].as_u64()),
        (Some(2), Some(2))
    );
    let line = push_line(&relay, client).await;
    assert_eq!(line["message"], "local names pushed");
    assert_eq!(line["authenticated"], "allowlisted");
    assert_eq!(line["who"], "allowlisted:127.0.0.2");
    // axios keeps the connection for the next push.
    let one = domains(&["a.example.com"]);
    stream
        .write_all(pangolin_post(admin, "/update-local-snis", &one, &[]).as_bytes())
        .await
        .unwrap();
    let answer = one_answer(&mut stream).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["removed"], 1);
    assert_eq!(local_names_gauge(&relay).await, 1.0);

    // From any other source: 401, logged, and nothing changes.
    let empty = domains(&[]);
    let (_, client, answer) = send_from(
        admin,
        "127.0.0.3",
        &pangolin_post(admin, "/update-local-snis", &empty, &[]),
    )
    .await;
    assert_eq!(answer.status, 401, "{}", answer.body);
    assert!(
        answer
            .head
            .to_lowercase()
            .contains("www-authenticate: bearer"),
        "{}",
        answer.head
    );
    let line = push_line(&relay, client).await;
    assert_eq!(line["message"], "local names push refused");
    assert_eq!(line["authenticated"], "false");
    assert_eq!(line["outcome"], "unauthorized");

    // A wrong token is refused even from the listed source.
    let wrong = pangolin_post(
        admin,
        "/update-local-snis",
        &empty,
        &["Authorization: Bearer not-the-token"],
    );
    let (_, client, answer) = send_from(admin, "127.0.0.2", &wrong).await;
    assert_eq!(answer.status, 401, "{}", answer.body);
    assert_eq!(push_line(&relay, client).await["authenticated"], "false");

    // The list opens the push only, not the other control endpoints.
    let (_, _, answer) = send_from(
        admin,
        "127.0.0.2",
        "GET /backends HTTP/1.1\r\nHost: admin\r\n\r\n",
    )
    .await;
    assert_eq!(answer.status, 401, "{}", answer.body);

    // Nothing changed: the gauge, and a push of the same set changes no name.
    assert_eq!(local_names_gauge(&relay).await, 1.0);
    let bearer = format!("Authorization: Bearer {TOKEN}");
    let with_token = pangolin_post(admin, "/update-local-snis", &one, &[&bearer]);
    let (_, client, answer) = send_from(admin, "127.0.0.3", &with_token).await;
    assert_eq!(
        answer.status, 200,
        "a token is taken from anywhere: {}",
        answer.body
    );
    let json = answer.json();
    assert_eq!(
        (json["added"].as_u64(), json["removed"].as_u64()),
        (Some(0), Some(0))
    );
    let line = push_line(&relay, client).await;
    assert_eq!(line["authenticated"], "true");
    assert_eq!(line["who"], "token:pangolin");
}

// ------------------------------------------------------------ Gerbil's API

/// What reached the Gerbil double.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    /// Path and query as they arrived.
    target: String,
    /// Lowercase names, in arrival order.
    headers: Vec<(String, String)>,
    /// The whole body, or why it did not arrive whole.
    body: Result<Vec<u8>, String>,
}

/// A double of Gerbil's HTTP API (fosrl/gerbil main.go): `POST /peer`
/// (201), `DELETE /peer?public_key=` (200), `POST /update-destinations`
/// (200, its JSON shape), plus `POST /size` (the body's length) and `GET
/// /stream` (an answer of unknown length, chunked), `404 page not found`
/// else, as Go's mux answers. Every answer carries `X-Gerbil: double` and a
/// hop-by-hop `Proxy-Authenticate`.
#[derive(Clone)]
struct Gerbil {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    changed: Arc<Notify>,
    connections: Arc<AtomicUsize>,
}

/// The four 64 KiB chunks of `GET /stream`.
fn stream_chunks() -> Vec<Bytes> {
    (0..4u8)
        .map(|i| Bytes::from(vec![b'a' + i; 64 * 1024]))
        .collect()
}

impl Gerbil {
    async fn start() -> Gerbil {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let gerbil = Gerbil {
            addr: listener.local_addr().unwrap(),
            seen: Arc::default(),
            changed: Arc::default(),
            connections: Arc::default(),
        };
        let serving = gerbil.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                serving.connections.fetch_add(1, Ordering::SeqCst);
                let gerbil = serving.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let gerbil = gerbil.clone();
                        async move { Ok::<_, Infallible>(gerbil.answer(req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        gerbil
    }

    async fn answer(&self, req: Request<Incoming>) -> Response<Chunks> {
        let method = req.method().to_string();
        let target = req.uri().to_string();
        let path = req.uri().path().to_owned();
        let headers = req
            .headers()
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned()))
            .collect();
        let body = req
            .into_body()
            .collect()
            .await
            .map(|c| c.to_bytes().to_vec())
            .map_err(|e| e.to_string());
        let length = body.as_ref().map_or(0, Vec::len);
        let json: serde_json::Value = body
            .as_ref()
            .ok()
            .and_then(|b| serde_json::from_slice(b).ok())
            .unwrap_or_default();
        self.seen.lock().unwrap().push(Seen {
            method: method.clone(),
            target,
            headers,
            body,
        });
        self.changed.notify_waiters();
        let (status, chunks) = match (method.as_str(), path.as_str()) {
            ("POST", "/peer") => (
                201,
                vec![r#"{"status":"Peer added successfully"}"#.to_owned() + "\n"],
            ),
            ("DELETE", "/peer") => (
                200,
                vec![r#"{"status":"Peer removed successfully"}"#.to_owned() + "\n"],
            ),
            ("POST", "/update-destinations") => {
                let answer = serde_json::json!({
                    "status": "Destinations updated successfully",
                    "sourceIP": json["sourceIp"],
                    "sourcePort": json["sourcePort"],
                    "destinationCount": json["destinations"].as_array().map_or(0, Vec::len),
                    "destinations": json["destinations"],
                });
                (200, vec![answer.to_string() + "\n"])
            }
            ("POST", "/size") => (200, vec![format!("{{\"bytes\":{length}}}\n")]),
            ("GET", "/stream") => {
                let mut response = Response::new(Chunks::streamed(stream_chunks()));
                response
                    .headers_mut()
                    .insert("x-gerbil", "double".parse().unwrap());
                return response;
            }
            _ => (404, vec!["404 page not found\n".to_owned()]),
        };
        let mut response = Response::new(Chunks::whole(Bytes::from(chunks.concat())));
        *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
        let headers = response.headers_mut();
        headers.insert("content-type", "application/json".parse().unwrap());
        headers.insert("x-gerbil", "double".parse().unwrap());
        headers.insert(
            "proxy-authenticate",
            "Basic realm=\"gerbil\"".parse().unwrap(),
        );
        response
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Waits until `n` requests have reached the double; returns them.
    async fn wait_seen(&self, n: usize) -> Vec<Seen> {
        tokio::time::timeout(WAIT, async {
            loop {
                let changed = self.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                let seen = self.seen();
                if seen.len() >= n {
                    return seen;
                }
                changed.await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{n} requests did not reach Gerbil: {:?}", self.seen()))
    }
}

/// A body given in chunks: of known length when whole (`Content-Length`),
/// unknown when streamed (chunked).
struct Chunks {
    chunks: VecDeque<Bytes>,
    exact: bool,
}

impl Chunks {
    fn whole(body: Bytes) -> Chunks {
        Chunks {
            chunks: VecDeque::from([body]),
            exact: true,
        }
    }

    fn streamed(chunks: Vec<Bytes>) -> Chunks {
        Chunks {
            chunks: chunks.into(),
            exact: false,
        }
    }
}

impl Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.chunks.pop_front().map(|c| Ok(Frame::data(c))))
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        if self.exact {
            SizeHint::with_exact(self.chunks.iter().map(|c| c.len() as u64).sum())
        } else {
            SizeHint::default()
        }
    }
}

/// The header lines of `request` as (lowercase name, value), in order.
fn header_lines(request: &str) -> Vec<(String, String)> {
    let head = request.split_once("\r\n\r\n").unwrap().0;
    head.lines()
        .skip(1)
        .map(|l| {
            let (n, v) = l.split_once(':').unwrap();
            (n.trim().to_lowercase(), v.trim().to_owned())
        })
        .collect()
}

/// What a gateway sends on for `sent`: the end-to-end headers in their
/// order, and `Via` appended.
fn forwarded_headers(sent: &[(String, String)], hop_by_hop: &[&str]) -> Vec<(String, String)> {
    let mut expected: Vec<(String, String)> = sent
        .iter()
        .filter(|(n, _)| !hop_by_hop.contains(&n.as_str()))
        .cloned()
        .collect();
    expected.push(("via".into(), "1.1 snirelay".into()));
    expected
}

/// `snirelay_admin_forwarded_total{outcome}` in a metrics text.
fn forwarded(metrics: &str, outcome: &str) -> f64 {
    metric(
        metrics,
        &format!("snirelay_admin_forwarded_total{{outcome=\"{outcome}\"}}"),
    )
}

/// A chunked body's data, de-chunked.
fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = body.windows(2).position(|w| w == b"\r\n").unwrap();
        let size =
            usize::from_str_radix(std::str::from_utf8(&body[..line_end]).unwrap(), 16).unwrap();
        body = &body[line_end + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
}

/// A chunked request head for `path` (no body yet).
fn chunked_head(path: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: gerbil\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
}

/// `body` as 64 KiB chunks.
fn chunked(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for piece in body.chunks(64 * 1024) {
        out.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        out.extend_from_slice(piece);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Deterministic, not compressible to a pattern that hides an offset bug.
fn payload(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 131 % 251) as u8).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gerbils_api_is_served_behind_the_same_base_address_unchanged() {
    let gerbil = Gerbil::start().await;
    let tokens = token_file(&format!("pangolin:{TOKEN}\n"));
    // A host name, resolved by the system resolver (/etc/hosts).
    let relay = Relay::start(&config(
        &tokens,
        &format!(
            "push_unauthenticated_from = [\"127.0.0.1\"]\nforward_unmatched_to = \"http://localhost:{}\"\n",
            gerbil.addr.port()
        ),
    ))
    .await;
    let admin = relay.admin_addr().await;

    // Pangolin's calls on one keep-alive connection, as axios makes them:
    // the push is snirelay's, the others Gerbil's.
    let push = pangolin_post(
        admin,
        "/update-local-snis",
        &domains(&["site.example.com"]),
        &[],
    );
    let (mut stream, _, answer) = send_from(admin, "127.0.0.1", &push).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["local_names"], 1);
    assert!(gerbil.seen().is_empty(), "the push went to Gerbil");

    let peer = r#"{"publicKey":"kTSvKGHNNzpDE0Gxly2oRF4G4FXyyBJHcAYeKcDpWAI=","allowedIps":["100.89.128.4/32"]}"#;
    let add_peer = pangolin_post(admin, "/peer", peer, &[]);
    stream.write_all(add_peer.as_bytes()).await.unwrap();
    let answer = one_answer(&mut stream).await;
    assert_eq!(answer.status, 201, "{} {}", answer.head, answer.body);
    assert_eq!(answer.body, "{\"status\":\"Peer added successfully\"}\n");
    let head = answer.head.to_lowercase();
    assert!(head.contains("x-gerbil: double"), "{head}");
    assert!(head.contains("content-type: application/json"), "{head}");
    assert!(
        !head.contains("proxy-authenticate"),
        "a hop-by-hop header came back: {head}"
    );
    let seen = gerbil.wait_seen(1).await;
    assert_eq!(
        (seen[0].method.as_str(), seen[0].target.as_str()),
        ("POST", "/peer")
    );
    assert_eq!(seen[0].body.as_deref(), Ok(peer.as_bytes()));
    assert_eq!(
        seen[0].headers,
        forwarded_headers(&header_lines(&add_peer), &["connection"]),
        "the end-to-end headers, in order"
    );

    let destinations = r#"{"sourceIp":"203.0.113.7","sourcePort":51820,"destinations":[{"destinationIP":"100.89.128.1","destinationPort":21820}]}"#;
    stream
        .write_all(pangolin_post(admin, "/update-destinations", destinations, &[]).as_bytes())
        .await
        .unwrap();
    let answer = one_answer(&mut stream).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let json = answer.json();
    assert_eq!(json["status"], "Destinations updated successfully");
    assert_eq!(json["destinationCount"], 1);
    let seen = gerbil.wait_seen(2).await;
    assert_eq!(seen[1].target, "/update-destinations");
    assert_eq!(seen[1].body.as_deref(), Ok(destinations.as_bytes()));
    drop(stream);

    // Query, method and end-to-end headers unchanged; hop-by-hop ones gone.
    let remove = http_request_text(
        "DELETE",
        "/peer?public_key=kTSvKGHNNzpDE0Gxly2oRF4G4FXyyBJHcAYeKcDpWAI%3D&x=a%2Bb",
        &[
            "Authorization: Bearer gerbil-sees-this",
            "X-Custom: one",
            "X-Custom: two",
            "Connection: X-Hop",
            "X-Hop: 1",
            "Keep-Alive: timeout=5",
            "TE: trailers",
            "Proxy-Authorization: Basic cHJveHk6eA==",
        ],
        "",
    );
    let answer = http_tcp(admin, &remove).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.body, "{\"status\":\"Peer removed successfully\"}\n");
    let seen = gerbil.wait_seen(3).await;
    assert_eq!(seen[2].method, "DELETE");
    assert_eq!(
        seen[2].target,
        "/peer?public_key=kTSvKGHNNzpDE0Gxly2oRF4G4FXyyBJHcAYeKcDpWAI%3D&x=a%2Bb"
    );
    let hop_by_hop = [
        "connection",
        "x-hop",
        "keep-alive",
        "te",
        "proxy-authorization",
    ];
    assert_eq!(
        seen[2].headers,
        forwarded_headers(&header_lines(&remove), &hop_by_hop)
    );

    // The admin listener's own paths stay its own.
    let (status, body) = http_get(admin, "/healthz").await;
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    assert_eq!(http_get(admin, "/metrics").await.0, 200);
    // An unknown path is Gerbil's answer, 404 included.
    let (status, body) = http_get(admin, "/nothing-here").await;
    assert_eq!((status, body.as_str()), (404, "404 page not found\n"));
    assert_eq!(
        gerbil.wait_seen(4).await.len(),
        4,
        "only /nothing-here was added"
    );

    // An answer of unknown length streams back chunked, whole.
    let answer = http_exchange(
        TcpStream::connect(admin).await.unwrap(),
        "GET /stream HTTP/1.1\r\nHost: gerbil\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(answer.status, 200);
    assert!(
        answer
            .head
            .to_lowercase()
            .contains("transfer-encoding: chunked"),
        "{}",
        answer.head
    );
    assert_eq!(dechunk(answer.body.as_bytes()), stream_chunks().concat());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_stream_through_within_the_admin_bound_and_larger_ones_are_413() {
    let gerbil = Gerbil::start().await;
    let tokens = token_file(&format!("pangolin:{TOKEN}\n"));
    let relay = Relay::start(&config(
        &tokens,
        &format!("forward_unmatched_to = \"http://{}\"\n", gerbil.addr),
    ))
    .await;
    let admin = relay.admin_addr().await;

    // 1 MiB, chunked, streamed through.
    let body = payload(MAX_BODY);
    let mut stream = TcpStream::connect(admin).await.unwrap();
    stream
        .write_all(chunked_head("/size").as_bytes())
        .await
        .unwrap();
    stream.write_all(&chunked(&body)).await.unwrap();
    stream.write_all(b"0\r\n\r\n").await.unwrap();
    let answer = one_answer(&mut stream).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.body, format!("{{\"bytes\":{MAX_BODY}}}\n"));
    let seen = gerbil.wait_seen(1).await;
    assert!(
        seen[0].body.as_ref().is_ok_and(|b| *b == body),
        "the body changed"
    );
    drop(stream);

    // A declared length past the bound: 413 before Gerbil is even asked.
    let before = gerbil.connections.load(Ordering::SeqCst);
    let mut stream = TcpStream::connect(admin).await.unwrap();
    let head = format!(
        "POST /size HTTP/1.1\r\nHost: gerbil\r\nContent-Length: {}\r\n\r\n",
        MAX_BODY + 1
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let answer = one_answer(&mut stream).await;
    assert_eq!(answer.status, 413, "{}", answer.body);
    assert_eq!(
        answer.json()["error"],
        format!("the body is larger than {MAX_BODY} bytes")
    );
    assert_eq!(
        gerbil.connections.load(Ordering::SeqCst),
        before,
        "Gerbil was asked"
    );
    drop(stream);

    // A chunked body that runs past it: 413, and Gerbil's request is cut,
    // never completed.
    let mut stream = TcpStream::connect(admin).await.unwrap();
    stream
        .write_all(chunked_head("/size").as_bytes())
        .await
        .unwrap();
    stream
        .write_all(&chunked(&payload(MAX_BODY)))
        .await
        .unwrap();
    // Ten bytes over, and no last chunk: the relay has read every byte sent.
    stream.write_all(b"a\r\n0123456789\r\n").await.unwrap();
    let answer = one_answer(&mut stream).await;
    assert_eq!(answer.status, 413, "{}", answer.body);
    let seen = gerbil.wait_seen(2).await;
    assert_eq!(seen[1].target, "/size");
    assert!(
        seen[1].body.is_err(),
        "Gerbil got a whole request: {:?}",
        seen[1].body.as_ref().map(Vec::len)
    );
    assert_eq!(gerbil.seen().len(), 2);
    let text = http_get(admin, "/metrics").await.1;
    assert_eq!(
        (forwarded(&text, "ok"), forwarded(&text, "too_large")),
        (1.0, 2.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_or_silent_upstream_is_502_or_504_naming_the_key_and_a_loop_is_508() {
    let tokens = token_file(&format!("pangolin:{TOKEN}\n"));
    let down = closed_port();
    let relay = Relay::start(&config(
        &tokens,
        &format!("forward_unmatched_to = \"http://{down}\"\n"),
    ))
    .await;
    let admin = relay.admin_addr().await;
    let request = pangolin_post(admin, "/peer", "{}", &[]);
    let (_, client, answer) = send_from(admin, "127.0.0.1", &request).await;
    assert_eq!(answer.status, 502, "{}", answer.body);
    let client = client.to_string();
    let line = relay
        .wait_log(|l| {
            l["message"] == "admin request not forwarded" && l["admin.peer"] == client.as_str()
        })
        .await;
    assert_eq!(line["key"], "admin.forward_unmatched_to");
    assert_eq!(line["outcome"], "unreachable");
    assert_eq!(line["level"], "WARN");

    // A reload points it at an upstream that accepts and never answers.
    let silent = raw_backend(|mut stream| async move {
        let mut sink = Vec::new();
        let _ = stream.read_to_end(&mut sink).await;
    })
    .await;
    let config2 = config(
        &tokens,
        &format!("forward_unmatched_to = \"http://{silent}\"\n"),
    );
    assert_eq!(relay.reload(&config2, 1).await["message"], "reload applied");
    let started = std::time::Instant::now();
    let (_, client, answer) = send_from(admin, "127.0.0.1", &request).await;
    assert_eq!(answer.status, 504, "{}", answer.body);
    // Within the admin listener's 2 s per request, a quarter second before
    // its end so the answer can still be written.
    let waited = started.elapsed();
    assert!(
        waited >= std::time::Duration::from_millis(1700),
        "{waited:?}"
    );
    let client = client.to_string();
    let line = relay
        .wait_log(|l| {
            l["message"] == "admin request not forwarded" && l["admin.peer"] == client.as_str()
        })
        .await;
    assert_eq!(
        (line["key"].as_str(), line["outcome"].as_str()),
        (Some("admin.forward_unmatched_to"), Some("timeout"))
    );
    let text = http_get(admin, "/metrics").await.1;
    let counts = ["unreachable", "timeout", "ok"].map(|o| forwarded(&text, o));
    assert_eq!(counts, [1.0, 1.0, 0.0]);

    // Forwarding to itself: the second pass sees its own `Via`.
    let port = free_port();
    let looped = Relay::start(&config(
        &tokens,
        &format!(
            "listen = \"127.0.0.1:{port}\"\nforward_unmatched_to = \"http://127.0.0.1:{port}\"\n"
        ),
    ))
    .await;
    let answer = http_tcp(
        looped.admin_addr().await,
        &http_request_text("GET", "/peer", &[], ""),
    )
    .await;
    assert_eq!(answer.status, 508, "{}", answer.body);
    looped
        .wait_log(|l| l["message"] == "admin request not forwarded" && l["outcome"] == "loop")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_key_unknown_paths_stay_404() {
    let tokens = token_file(&format!("pangolin:{TOKEN}\n"));
    let relay = Relay::start(&config(&tokens, "")).await;
    let admin = relay.admin_addr().await;
    let (status, body) = http_get(admin, "/peer").await;
    assert_eq!(status, 404, "{body}");
    assert!(body.starts_with("not found"), "{body}");
    // Other methods on them are refused as before.
    let answer = http_tcp(admin, &http_request_text("POST", "/peer", &[], "{}")).await;
    assert_eq!(answer.status, 405, "{}", answer.body);
    // And a tokenless push is refused from everywhere (the list is empty).
    let push = pangolin_post(
        admin,
        "/update-local-snis",
        &domains(&["a.example.com"]),
        &[],
    );
    let (_, _, answer) = send_from(admin, "127.0.0.1", &push).await;
    assert_eq!(answer.status, 401, "{}", answer.body);
}
