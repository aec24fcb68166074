//! Listing and closing open connections through the real binary: `GET
//! /connections` (fields, filters, pages), `DELETE /connections` (closed
//! with reason `admin`, the rest untouched), refusals without a token, and
//! bad input refused with a clear 400 and nothing closed; `POST
//! /routes/{route}/drain`; `snirelay ctl connections` and `ctl close`.

use crate::common;

use std::net::SocketAddr;

use common::*;
use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

const APP: &str = "app.localhost";
const OTHER: &str = "other.localhost";
const TOKEN: &str = "0123456789abcdef0123456789abcdef";

/// Routes `app` (APP) and `other` (OTHER), both to one echo backend, and a
/// token-protected admin listener.
fn config(backend: SocketAddr, tokens: &std::path::Path) -> String {
    format!(
        "[global]\ndrain_timeout = \"2s\"\n\n[admin]\nlisten = \"127.0.0.1:0\"\ntoken_file = \"{}\"\n\n\
         [[listener]]\nname = \"tls\"\nlisten = [\"127.0.0.1:0\"]\n\n\
         [[route]]\nname = \"app\"\nsni = [\"{APP}\"]\nbackend = \"b\"\n\n\
         [[route]]\nname = \"other\"\nsni = [\"{OTHER}\"]\nbackend = \"b\"\n\n\
         [backend.b]\naddresses = [\"{backend}\"]\n",
        tokens.display()
    )
}

async fn call(admin: SocketAddr, method: &str, path: &str, token: Option<&str>) -> Answer {
    send(admin, method, path, token, "").await
}

async fn send(
    admin: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> Answer {
    let auth = token.map(|t| format!("Authorization: Bearer {t}"));
    let headers: Vec<&str> = auth.iter().map(String::as_str).collect();
    http_tcp(admin, &http_request_text(method, path, &headers, body)).await
}

async fn listing(admin: SocketAddr, query: &str) -> Value {
    let answer = call(admin, "GET", &format!("/connections{query}"), Some(TOKEN)).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    answer.json()
}

fn ids(list: &Value) -> Vec<u64> {
    list["connections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_u64().unwrap())
        .collect()
}

struct Session {
    tls: TlsStream<TcpStream>,
    local: SocketAddr,
}

async fn open(pki: &Pki, relay: &Relay, name: &str) -> Session {
    let tls = echo_session(pki, relay.addr(), name).await.unwrap();
    let local = tls.get_ref().0.local_addr().unwrap();
    Session { tls, local }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_listed_filtered_paged_and_closed_by_filter() {
    let pki = Pki::new(&[APP, OTHER]);
    let backend = tls_echo_backend(&pki).await;
    let tokens = token_file(&format!("ops:{TOKEN}\n"));
    let relay = Relay::start(&config(backend, &tokens)).await;
    let admin = relay.admin_addr().await;

    let mut apps = Vec::new();
    for _ in 0..3 {
        apps.push(open(&pki, &relay, APP).await);
    }
    let mut other = open(&pki, &relay, OTHER).await;

    // Everything, with its fields.
    let all = listing(admin, "").await;
    assert_eq!(ids(&all).len(), 4, "{all}");
    assert!(all["next_after"].is_null());
    let first = &all["connections"][0];
    assert_eq!(first["listener"], "tls");
    assert_eq!(first["route"], "app");
    assert_eq!(first["sni"], APP);
    assert_eq!(first["backend"], "b");
    assert_eq!(first["backend_address"], backend.to_string());
    assert_eq!(first["client"], apps[0].local.to_string());
    assert!(first["claimed_client"].is_null());
    // The hello and one echo each way have moved.
    assert!(first["bytes_up"].as_u64().unwrap() > 5, "{first}");
    assert!(first["bytes_down"].as_u64().unwrap() >= 5, "{first}");
    assert!(first["age_seconds"].as_f64().unwrap() >= 0.0);
    assert!(first["idle_seconds"].as_f64().unwrap() >= 0.0);

    // Filters.
    assert_eq!(
        ids(&listing(admin, &format!("?sni={OTHER}")).await).len(),
        1
    );
    // The SNI filter is exact and case-insensitive in the query.
    assert_eq!(ids(&listing(admin, "?sni=APP.localhost").await).len(), 3);
    assert_eq!(ids(&listing(admin, "?route=app").await).len(), 3);
    assert_eq!(
        ids(&listing(admin, "?backend=b&listener=tls").await).len(),
        4
    );
    assert_eq!(ids(&listing(admin, "?client=127.0.0.0/8").await).len(), 4);
    assert_eq!(ids(&listing(admin, "?client=10.0.0.0/8").await).len(), 0);
    assert_eq!(ids(&listing(admin, "?backend=nope").await).len(), 0);
    let one = ids(&all)[1];
    assert_eq!(ids(&listing(admin, &format!("?id={one}")).await), [one]);

    // Pages: two, then the rest.
    let page = listing(admin, "?limit=2").await;
    assert_eq!(ids(&page), ids(&all)[..2]);
    let next = page["next_after"].as_u64().unwrap();
    let rest = listing(admin, &format!("?limit=2&after={next}")).await;
    assert_eq!(ids(&rest), ids(&all)[2..]);
    assert!(rest["next_after"].is_null(), "{rest}");

    // Close the `other` route's one: reason admin, the rest untouched.
    let closed = call(
        admin,
        "DELETE",
        &format!("/connections?sni={OTHER}"),
        Some(TOKEN),
    )
    .await;
    assert_eq!(closed.status, 200, "{closed:?}");
    assert_eq!(closed.json()["closed"], 1);
    let line = relay.closed_line(other.local).await;
    assert_eq!(line["close"], "admin", "{line}");
    let logged = relay
        .wait_log(|l| l["message"] == "connections closed")
        .await;
    assert_eq!(logged["who"], "token:ops", "{logged}");
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(WAIT, other.tls.read_to_end(&mut rest))
        .await
        .expect("the client sees the close");
    for app in &mut apps {
        echo_once(&mut app.tls, b"untouched").await.unwrap();
    }
    assert_eq!(ids(&listing(admin, "").await).len(), 3);

    // By id.
    let target = ids(&listing(admin, "").await)[0];
    let closed = call(
        admin,
        "DELETE",
        &format!("/connections?id={target}"),
        Some(TOKEN),
    )
    .await;
    assert_eq!(closed.json()["closed"], 1);
    assert_eq!(relay.closed_line(apps[0].local).await["close"], "admin");
    assert_eq!(ids(&listing(admin, "").await).len(), 2);

    let metrics = http_get(admin, "/metrics").await.1;
    assert_eq!(
        metric(
            &metrics,
            "snirelay_connections_closed_total{listener=\"tls\",protocol=\"tcp\",reason=\"admin\"}"
        ),
        2.0,
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_and_bad_input_close_nothing() {
    let pki = Pki::new(&[APP]);
    let backend = tls_echo_backend(&pki).await;
    let tokens = token_file(&format!("ops:{TOKEN}\n"));
    let relay = Relay::start(&config(backend, &tokens)).await;
    let admin = relay.admin_addr().await;
    let mut session = open(&pki, &relay, APP).await;

    // No token, a wrong one: 401, nothing listed or closed.
    for token in [None, Some("wrong")] {
        let get = call(admin, "GET", "/connections", token).await;
        assert_eq!(get.status, 401, "{get:?}");
        assert!(!get.body.contains(APP));
        let delete = call(admin, "DELETE", &format!("/connections?sni={APP}"), token).await;
        assert_eq!(delete.status, 401, "{delete:?}");
    }
    // Bad input: 400 naming what was wrong.
    for (method, path, says) in [
        ("DELETE", "/connections", "name a filter"),
        (
            "DELETE",
            "/connections?limit=5",
            "unknown parameter \\\"limit\\\"",
        ),
        ("GET", "/connections?limit=0", "limit=0 is out of range"),
        (
            "GET",
            "/connections?limit=1001",
            "limit=1001 is out of range",
        ),
        (
            "GET",
            "/connections?after=x",
            "after=\\\"x\\\" is not a connection id",
        ),
        (
            "GET",
            "/connections?client=not-an-ip",
            "client=\\\"not-an-ip\\\"",
        ),
        (
            "DELETE",
            "/connections?id=-1",
            "id=\\\"-1\\\" is not a connection id",
        ),
        (
            "GET",
            "/connections?colour=red",
            "unknown parameter \\\"colour\\\"",
        ),
    ] {
        let answer = call(admin, method, path, Some(TOKEN)).await;
        assert_eq!(answer.status, 400, "{method} {path}: {answer:?}");
        assert!(
            answer.body.contains(says),
            "{method} {path}: {}",
            answer.body
        );
    }
    // Another method: 405.
    let post = call(admin, "POST", "/connections", Some(TOKEN)).await;
    assert_eq!(post.status, 405, "{post:?}");

    // Nothing was closed.
    echo_once(&mut session.tls, b"still here").await.unwrap();
    assert_eq!(ids(&listing(admin, "").await).len(), 1);
    assert!(
        !relay
            .closed_lines()
            .iter()
            .any(|l| l["client.peer"] == session.local.to_string().as_str())
    );
}

/// Runs `snirelay ctl ARGS --config CONFIG`; returns the exit code, stdout
/// and stderr.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctl_lists_and_closes_connections_by_sni() {
    let pki = Pki::new(&[APP, OTHER]);
    let backend = tls_echo_backend(&pki).await;
    let tokens = token_file(&format!("ops:{TOKEN}\n"));
    let relay = Relay::start(&config(backend, &tokens)).await;
    let admin = relay.admin_addr().await;
    // ctl reads the admin address and the token from the file.
    let file = scratch_dir("ctl-connections").join("ctl.toml");
    std::fs::write(
        &file,
        config(backend, &tokens).replace(
            "127.0.0.1:0\"\ntoken_file",
            &format!("{admin}\"\ntoken_file"),
        ),
    )
    .unwrap();
    let mut app = open(&pki, &relay, APP).await;
    let other = open(&pki, &relay, OTHER).await;

    let (code, out, err) = ctl(&file, &["connections", "--sni", OTHER]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0][..6],
        ["ID", "LISTENER", "ROUTE", "SNI", "BACKEND", "CLIENT"]
    );
    assert_eq!(rows.len(), 2, "{out}");
    assert_eq!(
        rows[1][1..6],
        ["tls", "other", OTHER, "b", &other.local.to_string()]
    );

    let (code, out, _) = ctl(&file, &["--json", "connections"]).await;
    assert_eq!(code, Some(0));
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["connections"].as_array().unwrap().len(), 2, "{v}");

    // Without a filter: refused by the relay, nothing closed.
    let (code, _, err) = ctl(&file, &["close"]).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("400: name a filter"), "{err}");

    let (code, out, err) = ctl(&file, &["close", "--sni", OTHER]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(out, "closed 1\n");
    assert_eq!(relay.closed_line(other.local).await["close"], "admin");
    echo_once(&mut app.tls, b"untouched").await.unwrap();
    let (_, out, _) = ctl(&file, &["--json", "close", "--sni", OTHER]).await;
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap()["closed"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_drain_closes_its_connections_within_the_window_and_the_route_stays() {
    let pki = Pki::new(&[APP, OTHER]);
    let backend = tls_echo_backend(&pki).await;
    let tokens = token_file(&format!("ops:{TOKEN}\n"));
    let relay = Relay::start(&config(backend, &tokens)).await;
    let admin = relay.admin_addr().await;
    let apps = [open(&pki, &relay, APP).await, open(&pki, &relay, APP).await];
    let mut other = open(&pki, &relay, OTHER).await;

    // Refused, and nothing drained: no token, unknown route, bad bodies.
    let drain = "/routes/app/drain";
    let window = r#"{"window": "1s"}"#;
    for (path, token, body, status, says) in [
        (drain, None, window, 401, "Bearer"),
        (drain, Some("wrong"), window, 401, "Bearer"),
        (
            "/routes/nope/drain",
            Some(TOKEN),
            window,
            404,
            "no route \\\"nope\\\"",
        ),
        (
            drain,
            Some(TOKEN),
            r#"{"window": "5s"}"#,
            400,
            "longer than [global] drain_timeout (2s)",
        ),
        (
            drain,
            Some(TOKEN),
            r#"{"window": "soon"}"#,
            400,
            "is not a duration",
        ),
        (
            drain,
            Some(TOKEN),
            r#"{"windows": "1s"}"#,
            400,
            "unknown field `windows`",
        ),
        (drain, Some(TOKEN), "not json", 400, "the body must be"),
    ] {
        let answer = send(admin, "POST", path, token, body).await;
        assert_eq!(answer.status, status, "{path} {body}: {answer:?}");
        assert!(answer.body.contains(says), "{path} {body}: {}", answer.body);
    }
    assert_eq!(ids(&listing(admin, "").await).len(), 3);

    let started = std::time::Instant::now();
    let answer = send(admin, "POST", drain, Some(TOKEN), window).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    let v = answer.json();
    assert_eq!(
        (v["route"].as_str(), v["closing"].as_u64()),
        (Some("app"), Some(2))
    );
    assert_eq!(v["window_seconds"], 1.0);
    for app in &apps {
        let line = relay.closed_line(app.local).await;
        assert_eq!(line["close"], "drained", "{line}");
    }
    assert!(
        started.elapsed() < std::time::Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
    let logged = relay.wait_log(|l| l["message"] == "route drained").await;
    assert_eq!(
        (logged["who"].as_str(), logged["closing"].as_u64()),
        (Some("token:ops"), Some(2))
    );

    // The other route is untouched, and the drained one takes new connections.
    echo_once(&mut other.tls, b"untouched").await.unwrap();
    let mut fresh = open(&pki, &relay, APP).await;
    // Without a body: drain_timeout's window; nothing else open on `other`.
    let answer = send(admin, "POST", "/routes/other/drain", Some(TOKEN), "").await;
    assert_eq!(answer.json()["window_seconds"], 2.0, "{answer:?}");
    assert_eq!(relay.closed_line(other.local).await["close"], "drained");
    echo_once(&mut fresh.tls, b"still served").await.unwrap();
}

include!("common/quic_capture.rs");

/// A QUIC flow is listed beside a TCP connection, with protocol `quic`, its
/// SNI and route; `protocol` filters; `DELETE` ends it with reason `admin`
/// (the TCP one untouched) and a route drain with `drained`; the status page shows the listener's protocol
/// and counts the open flow on its route; the metrics count it under
/// `protocol="quic"`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_flows_are_listed_filtered_and_closed_like_connections() {
    let pki = Pki::new(&[APP]);
    let backend = tls_echo_backend(&pki).await;
    let udp_backend = udp_echo_backend().await;
    let tokens = token_file(&format!("ops:{TOKEN}\n"));
    let relay = Relay::start(&format!(
        "[admin]\nlisten = \"127.0.0.1:0\"\ntoken_file = \"{}\"\n\n\
         [[listener]]\nname = \"tls\"\nlisten = [\"127.0.0.1:0\"]\n\n\
         [[listener]]\nname = \"quic\"\nprotocol = \"quic\"\nlisten = [\"127.0.0.1:0\"]\n\n\
         [[route]]\nname = \"app\"\nlistener = \"tls\"\nsni = [\"{APP}\"]\nbackend = \"b\"\n\n\
         [[route]]\nname = \"h3\"\nlistener = \"quic\"\nsni = [\"localhost\"]\nbackend = \"u\"\n\n\
         [backend.b]\naddresses = [\"{backend}\"]\n\n\
         [backend.u]\naddresses = [\"{udp_backend}\"]\n",
        tokens.display()
    ))
    .await;
    let admin = relay.admin_addr().await;
    let mut tcp = open(&pki, &relay, APP).await;
    // ngtcp2's one-datagram hello names `localhost`.
    let hello = capture("ngtcp2").remove(0);
    let flow = open_quic_flow(relay.addr_of("quic"), &hello).await;
    let flow_addr = flow.local_addr().unwrap();
    udp_round_trip(&flow, relay.addr_of("quic"), b"after the hello").await;

    let all = listing(admin, "").await;
    assert_eq!(ids(&all).len(), 2, "{all}");
    let quic = listing(admin, "?protocol=quic").await;
    assert_eq!(ids(&quic).len(), 1, "{quic}");
    let listed = &quic["connections"][0];
    assert_eq!(listed["protocol"], "quic");
    assert_eq!(listed["listener"], "quic");
    assert_eq!(listed["route"], "h3");
    assert_eq!(listed["sni"], "localhost");
    assert_eq!(listed["backend"], "u");
    assert_eq!(listed["backend_address"], udp_backend.to_string());
    assert_eq!(listed["client"], flow_addr.to_string());
    // Counted from the held hello on, both ways.
    let up = listed["bytes_up"].as_u64().unwrap();
    assert!(
        up >= (hello.len() + "after the hello".len()) as u64,
        "{listed}"
    );
    assert!(
        listed["bytes_down"].as_u64().unwrap() >= hello.len() as u64,
        "{listed}"
    );
    let tcp_only = listing(admin, "?protocol=tcp").await;
    assert_eq!(ids(&tcp_only).len(), 1, "{tcp_only}");
    assert_eq!(tcp_only["connections"][0]["protocol"], "tcp");
    let bad = call(admin, "GET", "/connections?protocol=udp", Some(TOKEN)).await;
    assert_eq!(bad.status, 400, "{bad:?}");
    assert_eq!(bad.json()["error"], "protocol=\"udp\" is not tcp or quic");

    // The status page: the listener's protocol, and the open flow on its route.
    let (status, page) = http_get(admin, "/").await;
    assert_eq!(status, 200);
    assert!(page.contains("<tr><td>quic</td><td>quic</td>"), "{page}");
    assert!(page.contains("<tr><td>tls</td><td>tcp</td>"), "{page}");
    assert!(page.contains("data-route-open=\"h3\">1<"), "{page}");

    // Closed by filter: the flow ends as `admin`, the TCP connection stays.
    let closed = call(admin, "DELETE", "/connections?protocol=quic", Some(TOKEN)).await;
    assert_eq!(closed.status, 200, "{closed:?}");
    assert_eq!(closed.json()["closed"], 1);
    let line = relay.closed_line(flow_addr).await;
    assert_eq!(line["close"], "admin", "{line}");
    assert_eq!(line["protocol"], "quic");
    assert_eq!(line["route"], "h3");
    echo_once(&mut tcp.tls, b"untouched").await.unwrap();
    assert_eq!(ids(&listing(admin, "").await).len(), 1);

    // An operator's route drain ends a flow as `drained`.
    let drained_flow = open_quic_flow(relay.addr_of("quic"), &hello).await;
    let drain = send(
        admin,
        "POST",
        "/routes/h3/drain",
        Some(TOKEN),
        r#"{"window": "100ms"}"#,
    )
    .await;
    assert_eq!(drain.status, 200, "{drain:?}");
    let line = relay.closed_line(drained_flow.local_addr().unwrap()).await;
    assert_eq!(line["close"], "drained", "{line}");
    assert_eq!(line["protocol"], "quic");

    let metrics = http_get(admin, "/metrics").await.1;
    for (series, value) in [
        (
            "snirelay_connections_closed_total{listener=\"quic\",protocol=\"quic\",reason=\"admin\"}",
            1.0,
        ),
        (
            "snirelay_connections_accepted_total{listener=\"quic\",protocol=\"quic\"}",
            2.0,
        ),
        (
            "snirelay_connections_closed_total{listener=\"quic\",protocol=\"quic\",reason=\"drained\"}",
            1.0,
        ),
        (
            "snirelay_connections_active{listener=\"quic\",protocol=\"quic\"}",
            0.0,
        ),
        (
            "snirelay_connections_active{listener=\"tls\",protocol=\"tcp\"}",
            1.0,
        ),
    ] {
        assert_eq!(metric(&metrics, series), value, "{series}\n{metrics}");
    }
}
