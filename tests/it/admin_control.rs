//! Run-time control through the real binary: the control endpoints refused
//! unless the caller can be named (a bearer token on TCP, or a Unix
//! socket), bad input refused with a clear 4xx and nothing changed, drain
//! and maint against live relayed connections, the state across SIGHUP
//! (kept or changed backend; lost on restart, as docs/operations.md says),
//! `snirelay ctl`, and relaying undisturbed by a thousand slow admin
//! clients.

use crate::common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const NAME: &str = "app.localhost";
const TOKEN: &str = "0123456789abcdef0123456789abcdef";
const TOKENS: &str = "# operators\nops:0123456789abcdef0123456789abcdef\nci:another-token-for-ci\n";

/// A relay whose route `NAME` goes to backend `b` with `addrs` (ordered
/// policy, so a new connection takes the first address it may), with
/// `[admin]` holding `admin` (its `listen` included) and `drain_timeout`.
fn config(admin: &str, addrs: &[SocketAddr], drain_timeout: &str, extra_route: &str) -> String {
    let list = addrs
        .iter()
        .map(|a| format!("\"{a}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "[global]\ndrain_timeout = \"{drain_timeout}\"\n\n[admin]\n{admin}\n\n\
         [[listener]]\nname = \"tls\"\nlisten = [\"127.0.0.1:0\"]\n\n\
         [[route]]\nsni = [\"{NAME}\"{extra_route}]\nbackend = \"b\"\n\n\
         [backend.b]\naddresses = [{list}]\nconnect_timeout = \"2s\"\n"
    )
}

/// `listen` on a free loopback port with the token file at `tokens`.
fn tcp_admin(tokens: Option<&Path>) -> String {
    let mut admin = "listen = \"127.0.0.1:0\"\n".to_owned();
    if let Some(path) = tokens {
        admin.push_str(&format!("token_file = \"{}\"\n", path.display()));
    }
    admin
}

fn bearer(token: &str) -> String {
    format!("Authorization: Bearer {token}")
}

fn set_state(backend: &str, addr: &str, body: &str, token: Option<&str>) -> String {
    let auth = token.map(bearer);
    let headers: Vec<&str> = auth.iter().map(String::as_str).collect();
    http_request_text(
        "POST",
        &format!("/backends/{backend}/addresses/{addr}/state"),
        &headers,
        body,
    )
}

fn list(token: Option<&str>) -> String {
    let auth = token.map(bearer);
    let headers: Vec<&str> = auth.iter().map(String::as_str).collect();
    http_request_text("GET", "/backends", &headers, "")
}

/// The operator state of `addr` in a `GET /backends` answer.
fn state_of(backends: &Value, addr: SocketAddr) -> String {
    backends["backends"][0]["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["address"] == addr.to_string().as_str())
        .unwrap_or_else(|| panic!("{addr} not listed: {backends}"))["state"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn metrics(admin: SocketAddr) -> String {
    http_get(admin, "/metrics").await.1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_opens_control_and_anything_else_is_refused_without_changing_a_thing() {
    let pki = Pki::new(&[NAME]);
    let (a, b) = (tls_echo_backend(&pki).await, tls_echo_backend(&pki).await);
    let tokens = token_file(TOKENS);
    let relay = Relay::start(&config(&tcp_admin(Some(&tokens)), &[a, b], "10s", "")).await;
    let admin = relay.admin_addr().await;

    // Listing: with a token; 401 and the challenge without one or with a wrong one.
    let listed = http_tcp(admin, &list(Some(TOKEN))).await;
    assert_eq!(listed.status, 200, "{listed:?}");
    let backends = listed.json();
    assert_eq!(backends["backends"][0]["name"], "b");
    assert_eq!(state_of(&backends, a), "ready");
    assert_eq!(backends["backends"][0]["addresses"][0]["health"], "up");
    for token in [None, Some("wrong"), Some(&TOKEN[..TOKEN.len() - 1])] {
        let refused = http_tcp(admin, &list(token)).await;
        assert_eq!(refused.status, 401, "{token:?}: {refused:?}");
        assert!(
            refused.head.contains("www-authenticate: Bearer"),
            "{}",
            refused.head
        );
    }
    // Read-only endpoints need nothing.
    assert_eq!(http_get(admin, "/healthz").await.0, 200);

    // A change, named by the token's name in the log.
    let set = http_tcp(
        admin,
        &set_state(
            "b",
            &a.to_string(),
            r#"{"state": "drain"}"#,
            Some("another-token-for-ci"),
        ),
    )
    .await;
    assert_eq!(set.status, 200, "{set:?}");
    assert_eq!(set.json()["previous"], "ready");
    assert_eq!(set.json()["state"], "drain");
    let line = relay
        .wait_log(|l| l["message"] == "backend address state set")
        .await;
    assert_eq!(line["who"], "token:ci");
    assert_eq!(line["address"], a.to_string().as_str());
    assert!(!line.to_string().contains("another-token-for-ci"), "{line}");

    // Bad input: a clear 4xx, and the state stays as it was.
    let bad: Vec<(String, u16, &str)> = vec![
        (
            set_state("b", &a.to_string(), r#"{"state": "maint"}"#, None),
            401,
            "Bearer",
        ),
        (
            set_state("b", &a.to_string(), r#"{"state": "maint"}"#, Some("nope")),
            401,
            "Bearer",
        ),
        (
            set_state("b", "not-an-address", r#"{"state": "maint"}"#, Some(TOKEN)),
            400,
            "is not an IP:port",
        ),
        (
            set_state(
                "nobackend",
                &a.to_string(),
                r#"{"state": "maint"}"#,
                Some(TOKEN),
            ),
            404,
            "no backend \\\"nobackend\\\"",
        ),
        (
            set_state("b", "127.0.0.1:1", r#"{"state": "maint"}"#, Some(TOKEN)),
            404,
            "has no address 127.0.0.1:1",
        ),
        (
            set_state("b", &a.to_string(), r#"{"state": "off"}"#, Some(TOKEN)),
            400,
            "unknown variant `off`",
        ),
        (
            set_state(
                "b",
                &a.to_string(),
                r#"{"state": "maint", "force": true}"#,
                Some(TOKEN),
            ),
            400,
            "unknown field `force`",
        ),
        (
            set_state("b", &a.to_string(), "not json", Some(TOKEN)),
            400,
            "the body must be",
        ),
        (
            set_state(
                "b",
                &a.to_string(),
                &format!(r#"{{"state": "maint", "x": "{}"}}"#, "y".repeat(5000)),
                Some(TOKEN),
            ),
            413,
            "larger than 4096 bytes",
        ),
        (
            http_request_text(
                "GET",
                &format!("/backends/b/addresses/{a}/state"),
                &[&bearer(TOKEN)],
                "",
            ),
            405,
            "use POST",
        ),
    ];
    for (request, status, says) in &bad {
        let answer = http_tcp(admin, request).await;
        assert_eq!(answer.status, *status, "{request}: {answer:?}");
        assert!(
            answer.body.contains(says) || answer.head.contains(says),
            "{request}: {answer:?} does not say {says:?}"
        );
    }
    let backends = http_tcp(admin, &list(Some(TOKEN))).await.json();
    assert_eq!(state_of(&backends, a), "drain", "bad input changed nothing");
    assert_eq!(state_of(&backends, b), "ready");

    // IPv6-style percent-encoding decodes (and an IPv4 address parses the same).
    let encoded = a.to_string().replace(':', "%3A");
    let set = http_tcp(
        admin,
        &set_state("b", &encoded, r#"{"state": "ready"}"#, Some(TOKEN)),
    )
    .await;
    assert_eq!(
        (set.status, set.json()["previous"].as_str()),
        (200, Some("drain"))
    );

    // Counted by kind and outcome; the state gauge follows the address.
    let text = metrics(admin).await;
    let action = |kind: &str, outcome: &str| {
        metric(
            &text,
            &format!(
                "snirelay_admin_control_actions_total{{kind=\"{kind}\",outcome=\"{outcome}\"}}"
            ),
        )
    };
    assert_eq!(action("address_state", "ok"), 2.0, "{text}");
    assert_eq!(action("address_state", "unauthorized"), 2.0, "{text}");
    assert_eq!(action("address_state", "bad_request"), 4.0, "{text}");
    assert_eq!(action("address_state", "not_found"), 2.0, "{text}");
    assert_eq!(action("address_state", "too_large"), 1.0, "{text}");
    assert_eq!(action("backends", "unauthorized"), 3.0, "{text}");
    let gauge = |state: &str| {
        metric(
            &text,
            &format!(
                "snirelay_backend_address_state{{backend=\"b\",address=\"{a}\",state=\"{state}\"}}"
            ),
        )
    };
    assert_eq!(
        (gauge("ready"), gauge("drain"), gauge("maint")),
        (1.0, 0.0, 0.0),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_file_tcp_control_is_forbidden_and_read_only_stays_open() {
    let backend = closed_port();
    let relay = Relay::start(&config(&tcp_admin(None), &[backend], "10s", "")).await;
    let admin = relay.admin_addr().await;
    for request in [
        list(Some(TOKEN)),
        set_state(
            "b",
            &backend.to_string(),
            r#"{"state": "drain"}"#,
            Some(TOKEN),
        ),
    ] {
        let answer = http_tcp(admin, &request).await;
        assert_eq!(answer.status, 403, "{answer:?}");
        assert_eq!(
            answer.body,
            "control needs [admin] token_file or a unix socket\n"
        );
    }
    assert_eq!(http_get(admin, "/healthz").await.0, 200);
    assert_eq!(http_get(admin, "/readyz").await.0, 200);
    let text = metrics(admin).await;
    assert_eq!(
        metric(
            &text,
            "snirelay_admin_control_actions_total{kind=\"address_state\",outcome=\"forbidden\"}"
        ),
        1.0,
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unix_socket_admin_is_mode_0660_and_names_its_caller() {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let backend = closed_port();
    let dir = scratch_dir("admin-unix");
    let socket = dir.join("admin.sock");
    // A stale socket from an earlier run is replaced.
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    let admin = format!("listen = \"unix:{}\"\n", socket.display());
    let relay = Relay::start(&config(&admin, &[backend], "10s", "")).await;
    let line = relay.wait_log(|l| l["message"] == "admin listening").await;
    assert_eq!(line["addr"], format!("unix:{}", socket.display()).as_str());
    let meta = std::fs::metadata(&socket).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);

    // No token needed; the change is logged with the peer's credentials.
    let answer = http_unix(
        &socket,
        &set_state("b", &backend.to_string(), r#"{"state": "maint"}"#, None),
    )
    .await;
    assert_eq!(answer.status, 200, "{answer:?}");
    let line = relay
        .wait_log(|l| l["message"] == "backend address state set")
        .await;
    let who = line["who"].as_str().unwrap();
    let uid = std::fs::metadata("/proc/self").unwrap();
    use std::os::unix::fs::MetadataExt;
    assert!(who.starts_with(&format!("uid={},pid=", uid.uid())), "{who}");
    assert!(!who.ends_with("pid=?"), "{who}");
    let listed = http_unix(&socket, &list(None)).await;
    assert_eq!(state_of(&listed.json(), backend), "maint");
    // Read-only endpoints answer there too.
    let health = http_unix(&socket, &http_request_text("GET", "/healthz", &[], "")).await;
    assert_eq!((health.status, health.body.as_str()), (200, "ok\n"));
    // Bad input is refused the same way.
    let bad = http_unix(
        &socket,
        &set_state("b", &backend.to_string(), r#"{"state": 1}"#, None),
    )
    .await;
    assert_eq!(bad.status, 400, "{bad:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// An echo session through the relay, kept open; returns it and its
/// client-side address (to find its `connection closed` line).
async fn open_session(
    pki: &Pki,
    relay: &Relay,
) -> (tokio_rustls::client::TlsStream<TcpStream>, SocketAddr) {
    let tls = echo_session(pki, relay.addr(), NAME).await.unwrap();
    let local = tls.get_ref().0.local_addr().unwrap();
    (tls, local)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_keeps_open_connections_and_maint_closes_them_within_drain_timeout() {
    let pki = Pki::new(&[NAME]);
    let (a, b) = (tls_echo_backend(&pki).await, tls_echo_backend(&pki).await);
    let tokens = token_file(TOKENS);
    let relay = Relay::start(&config(&tcp_admin(Some(&tokens)), &[a, b], "2s", "")).await;
    let admin = relay.admin_addr().await;
    // Ordered: everything goes to `a` while it may.
    let (mut on_a, on_a_local) = open_session(&pki, &relay).await;
    assert_eq!(
        relayed_backend_addr(&relay, &pki, NAME).await,
        a.to_string()
    );

    // drain: the open one continues, new ones go to `b`.
    let set = http_tcp(
        admin,
        &set_state("b", &a.to_string(), r#"{"state": "drain"}"#, Some(TOKEN)),
    )
    .await;
    assert_eq!(set.status, 200, "{set:?}");
    assert_eq!(set.json()["open_connections"], 1);
    for _ in 0..3 {
        assert_eq!(
            relayed_backend_addr(&relay, &pki, NAME).await,
            b.to_string()
        );
    }
    let (mut on_b, on_b_local) = open_session(&pki, &relay).await;
    // Past the drain window: a drained address's connections are never closed for it.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    echo_once(&mut on_a, b"still here").await.unwrap();

    // maint: the open one on `a` is closed within drain_timeout with a
    // reason of its own; the one on `b` is not touched.
    let started = std::time::Instant::now();
    let set = http_tcp(
        admin,
        &set_state("b", &a.to_string(), r#"{"state": "maint"}"#, Some(TOKEN)),
    )
    .await;
    assert_eq!(set.status, 200, "{set:?}");
    let line = relay.closed_line(on_a_local).await;
    assert_eq!(line["close"], "address_maint", "{line}");
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "{:?}",
        started.elapsed()
    );
    let set_line = relay
        .wait_nth(2, |l| l["message"] == "backend address state set")
        .await;
    assert_eq!(set_line["closing"], 1, "{set_line}");
    let mut rest = Vec::new();
    let read = tokio::time::timeout(WAIT, on_a.read_to_end(&mut rest))
        .await
        .unwrap();
    assert!(read.is_ok() || read.is_err(), "the client sees the close");
    echo_once(&mut on_b, b"untouched").await.unwrap();
    assert!(
        !relay
            .closed_lines()
            .iter()
            .any(|l| l["client.peer"] == on_b_local.to_string().as_str()),
        "the connection on b was closed"
    );
    // Back to ready: `a` takes new connections again.
    let set = http_tcp(
        admin,
        &set_state("b", &a.to_string(), r#"{"state": "ready"}"#, Some(TOKEN)),
    )
    .await;
    assert_eq!(set.json()["previous"], "maint");
    assert_eq!(
        relayed_backend_addr(&relay, &pki, NAME).await,
        a.to_string()
    );
    let text = metrics(admin).await;
    assert_eq!(
        metric(
            &text,
            "snirelay_connections_closed_total{listener=\"tls\",protocol=\"tcp\",reason=\"address_maint\"}"
        ),
        1.0,
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_state_survives_a_reload_that_keeps_the_address() {
    let pki = Pki::new(&[NAME, "other.localhost"]);
    let (a, b) = (tls_echo_backend(&pki).await, tls_echo_backend(&pki).await);
    let tokens = token_file(TOKENS);
    let admin_keys = tcp_admin(Some(&tokens));
    let relay = Relay::start(&config(&admin_keys, &[a, b], "10s", "")).await;
    let admin = relay.admin_addr().await;
    let set = http_tcp(
        admin,
        &set_state("b", &a.to_string(), r#"{"state": "drain"}"#, Some(TOKEN)),
    )
    .await;
    assert_eq!(set.status, 200, "{set:?}");
    // A reload that changes the route, not the backend.
    let line = relay
        .reload(
            &config(&admin_keys, &[a, b], "10s", ", \"other.localhost\""),
            1,
        )
        .await;
    assert_eq!(line["message"], "reload applied", "{line}");
    let backends = http_tcp(admin, &list(Some(TOKEN))).await.json();
    assert_eq!(state_of(&backends, a), "drain");
    assert_eq!(
        relayed_backend_addr(&relay, &pki, "other.localhost").await,
        b.to_string()
    );
    // A reload that changes the backend itself (a new runtime) keeps the
    // state of the addresses it still has.
    let changed = config(&admin_keys, &[a, b], "10s", "")
        .replace("connect_timeout = \"2s\"", "connect_timeout = \"3s\"");
    let line = relay.reload(&changed, 2).await;
    assert_eq!(line["message"], "reload applied", "{line}");
    assert_eq!(line["backends.changed"], "b", "{line}");
    let backends = http_tcp(admin, &list(Some(TOKEN))).await.json();
    assert_eq!(state_of(&backends, a), "drain");
    assert_eq!(state_of(&backends, b), "ready");
    assert_eq!(
        relayed_backend_addr(&relay, &pki, NAME).await,
        b.to_string()
    );
}

/// Runs `snirelay ctl ARGS --config CONFIG`; returns the exit code, stdout
/// and stderr.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctl_lists_and_sets_states_from_the_configuration_file() {
    let (a, b) = (closed_port(), free_addr());
    let tokens = token_file(TOKENS);
    let relay = Relay::start(&config(&tcp_admin(Some(&tokens)), &[a, b], "10s", "")).await;
    let admin = relay.admin_addr().await;
    // ctl reads the address from the file: the one the relay bound.
    let file: PathBuf = scratch_dir("ctl").join("ctl.toml");
    std::fs::write(
        &file,
        config(
            &format!(
                "listen = \"{admin}\"\ntoken_file = \"{}\"\n",
                tokens.display()
            ),
            &[a, b],
            "10s",
            "",
        ),
    )
    .unwrap();
    let (code, out, err) = ctl(&file, &["drain", &a.to_string()]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(out, format!("b {a}: drain (was ready), 0 open\n"));
    let (code, out, _) = ctl(&file, &["addresses"]).await;
    assert_eq!(code, Some(0));
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0], ["BACKEND", "ADDRESS", "STATE", "HEALTH", "OPEN"]);
    assert_eq!(rows[1][..3], ["b", &a.to_string(), "drain"]);
    assert_eq!(rows[2][..3], ["b", &b.to_string(), "ready"]);
    let (code, out, _) = ctl(
        &file,
        &["--json", "maint", &b.to_string(), "--backend", "b"],
    )
    .await;
    assert_eq!(code, Some(0));
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["state"].as_str(), v["previous"].as_str()),
        (Some("maint"), Some("ready"))
    );
    // Refusals: an address no backend has (2: not asked), a backend that
    // does not have it (1: the relay refused).
    let (code, _, err) = ctl(&file, &["ready", "127.0.0.1:1"]).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("no backend has the address 127.0.0.1:1"),
        "{err}"
    );
    let (code, _, err) = ctl(&file, &["ready", "127.0.0.1:1", "--backend", "b"]).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("404"), "{err}");
    // A wrong token: refused by the relay.
    let wrong = token_file("intruder:not-a-token\n");
    std::fs::write(
        &file,
        config(
            &format!(
                "listen = \"{admin}\"\ntoken_file = \"{}\"\n",
                wrong.display()
            ),
            &[a, b],
            "10s",
            "",
        ),
    )
    .unwrap();
    let (code, _, err) = ctl(&file, &["addresses"]).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("401"), "{err}");
}

/// An address nothing listens on that is not `closed_port()`'s.
fn free_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_slow_admin_clients_do_not_disturb_relaying() {
    const SLOW: usize = 1000;
    const RUN: Duration = Duration::from_secs(4);
    let _heavy = HEAVY.lock().await;
    // A thousand client sockets here (and as many in the relay, which
    // raises its own limit): the soft limit up to the hard one.
    snirelay::sockopt::raise_nofile_limit().expect("RLIMIT_NOFILE");
    let pki = Pki::new(&[NAME]);
    let backend = tls_echo_backend(&pki).await;
    let tokens = token_file(TOKENS);
    let relay = Relay::start(&config(&tcp_admin(Some(&tokens)), &[backend], "10s", "")).await;
    let admin = relay.admin_addr().await;

    // A relayed session, timed before the slow clients come.
    let (mut session, _) = open_session(&pki, &relay).await;
    let mut baseline = Vec::new();
    for _ in 0..50 {
        let t = std::time::Instant::now();
        echo_once(&mut session, b"ping").await.unwrap();
        baseline.push(t.elapsed());
    }

    // A thousand control clients, each sending its POST head and then one
    // body byte per second (a body that never completes), until the relay
    // closes it (request_timeout) or RUN is over.
    let head = format!(
        "POST /backends/b/addresses/{backend}/state HTTP/1.1\r\nHost: a\r\n{}\r\nContent-Length: 1000\r\n\r\n",
        bearer(TOKEN)
    );
    let mut slow = Vec::with_capacity(SLOW);
    for _ in 0..SLOW {
        let mut stream = TcpStream::connect(admin).await.unwrap();
        let head = head.clone();
        slow.push(tokio::spawn(async move {
            if stream.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            for _ in 0..RUN.as_secs() {
                tokio::time::sleep(Duration::from_secs(1)).await;
                if stream.write_all(b"{").await.is_err() {
                    return;
                }
            }
        }));
    }

    // Relaying continues meanwhile, and probes still answer.
    let started = std::time::Instant::now();
    let mut during = Vec::new();
    let mut probes = 0;
    while started.elapsed() < RUN {
        let t = std::time::Instant::now();
        echo_once(&mut session, b"ping").await.unwrap();
        during.push(t.elapsed());
        if during.len() % 100 == 0 {
            assert_eq!(http_get(admin, "/healthz").await.0, 200);
            probes += 1;
        }
    }
    for task in slow {
        task.await.unwrap();
    }
    baseline.sort();
    during.sort();
    let median = |v: &[Duration]| v[v.len() / 2];
    eprintln!(
        "{} round trips in {RUN:?} beside {SLOW} slow admin clients; median {:?} (before: {:?}), max {:?}; {probes} probes",
        during.len(),
        median(&during),
        median(&baseline),
        during[during.len() - 1]
    );
    assert!(during.len() >= 200, "only {} round trips", during.len());
    assert!(probes >= 1);
    // None of the slow requests changed anything, and they were closed by
    // the request deadline, not served.
    let backends = http_tcp(admin, &list(Some(TOKEN))).await.json();
    assert_eq!(state_of(&backends, backend), "ready");
    let text = metrics(admin).await;
    assert!(
        metric(
            &text,
            "snirelay_admin_connections_closed_total{reason=\"request_timeout\"}"
        ) >= SLOW as f64 * 0.9,
        "{text}"
    );
    assert_eq!(
        metric(
            &text,
            "snirelay_admin_control_actions_total{kind=\"address_state\",outcome=\"ok\"}"
        ),
        0.0
    );
    assert!(
        metric(
            &text,
            "snirelay_admin_control_actions_total{kind=\"address_state\",outcome=\"request_timeout\"}"
        ) >= SLOW as f64 * 0.9,
        "{text}"
    );
}

/// Polls `GET /backends` until `done` holds for the entry of `addr`;
/// returns that entry.
async fn wait_address(admin: SocketAddr, addr: SocketAddr, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let backends = http_tcp(admin, &list(Some(TOKEN))).await.json();
        let entry = backends["backends"][0]["addresses"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["address"] == addr.to_string().as_str())
            .cloned()
            .unwrap();
        if done(&entry) {
            return entry;
        }
        assert!(tokio::time::Instant::now() < deadline, "{entry}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_are_reported_but_never_undo_an_operators_state() {
    let up = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let c = up.local_addr().unwrap();
    let tokens = token_file(TOKENS);
    let text = config(&tcp_admin(Some(&tokens)), &[c], "10s", "").replace(
        "connect_timeout = \"2s\"\n",
        "connect_timeout = \"2s\"\nmax_fails = 0\n\n[backend.b.health]\ninterval = \"100ms\"\ntimeout = \"500ms\"\nrise = 1\nfall = 1\n",
    );
    let relay = Relay::start(&text).await;
    let admin = relay.admin_addr().await;
    let set = http_tcp(
        admin,
        &set_state("b", &c.to_string(), r#"{"state": "drain"}"#, Some(TOKEN)),
    )
    .await;
    assert_eq!(set.status, 200, "{set:?}");
    // Down: reported, still drained.
    drop(up);
    let entry = wait_address(admin, c, |e| e["health"] == "down").await;
    assert_eq!(entry["state"], "drain", "{entry}");
    relay
        .wait_log(|l| l["message"] == "backend address marked down (health check)")
        .await;
    // Up again: reported, still drained (only an operator puts it back).
    let _again = std::net::TcpListener::bind(c).unwrap();
    let entry = wait_address(admin, c, |e| e["health"] == "up").await;
    assert_eq!(entry["state"], "drain", "{entry}");
}
