//! `/readyz` that follows the backends (`[admin] ready_requires`): a
//! backend killed goes 503 within its health check's `fall`, with a JSON
//! body naming it; restarted on the same port, 200 within `rise`; an
//! address in maintenance counts as down; the status page and `snirelay
//! ctl status` say the same. Without the key, `/readyz` is as before (the
//! `admin` area holds that).

use crate::common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

const TOKEN: &str = "0123456789abcdef0123456789abcdef";

/// A TCP backend that accepts and drops connections (a health check is a
/// connect), on `addr` (port 0 for a new one).
async fn backend_on(addr: SocketAddr) -> (JoinHandle<()>, SocketAddr) {
    let listener = TcpListener::bind(addr).await.unwrap();
    let bound = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            drop(stream);
        }
    });
    (task, bound)
}

async fn stop(task: JoinHandle<()>) {
    task.abort();
    let _ = task.await;
}

fn config(admin: &str, backend: SocketAddr, spare: SocketAddr) -> String {
    format!(
        r#"
[admin]
{admin}
ready_requires = ["backend:b", "route:web", "any_backend"]

[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]

[[route]]
name = "web"
sni = ["app.localhost"]
backend = "b"

[[route]]
name = "other"
sni = ["other.localhost"]
backend = "spare"

[backend.b]
addresses = ["{backend}"]
max_fails = 0

[backend.b.health]
interval = "100ms"
timeout = "500ms"
fall = 3
rise = 2

[backend.spare]
addresses = ["{spare}"]
max_fails = 0

[backend.spare.health]
interval = "100ms"
timeout = "500ms"
fall = 3
rise = 2
"#
    )
}

/// Polls `/readyz` until its status is `want` (bounded by `WAIT`); returns
/// the body as JSON and how long it took.
async fn readyz_until(admin: SocketAddr, want: u16) -> (Value, Duration) {
    let start = Instant::now();
    loop {
        let (status, body) = http_get(admin, "/readyz").await;
        if status == want {
            let json = serde_json::from_str(&body)
                .unwrap_or_else(|e| panic!("/readyz is not JSON ({e}): {body}"));
            return (json, start.elapsed());
        }
        assert!(
            start.elapsed() < WAIT,
            "/readyz still {status} after {WAIT:?}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn down(verdict: &Value) -> Vec<(String, String, String)> {
    verdict["down"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["requirement"].as_str().unwrap().to_owned(),
                d["backend"].as_str().unwrap_or("-").to_owned(),
                d["why"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn row(requirement: &str, backend: &str, why: &str) -> (String, String, String) {
    (requirement.to_owned(), backend.to_owned(), why.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_goes_503_within_fall_when_the_backend_dies_and_200_within_rise_when_it_returns() {
    let (task, a) = backend_on("127.0.0.1:0".parse().unwrap()).await;
    let (spare_task, spare) = backend_on("127.0.0.1:0".parse().unwrap()).await;
    let tokens = token_file(&format!("ops:{TOKEN}\n"));
    let admin_keys = format!(
        "listen = \"127.0.0.1:0\"\ntoken_file = \"{}\"",
        tokens.display()
    );
    let relay = Relay::start(&config(&admin_keys, a, spare)).await;
    let admin = relay.admin_addr().await;
    relay.wait_log(|l| l["message"] == "ready").await;
    let (verdict, _) = readyz_until(admin, 200).await;
    assert_eq!(verdict["ready"], true, "{verdict}");
    assert_eq!(
        verdict["requires"],
        serde_json::json!(["backend:b", "route:web", "any_backend"])
    );
    assert!(down(&verdict).is_empty());

    // The backend dies: three failed checks 100 ms apart mark it down.
    stop(task).await;
    let (verdict, took) = readyz_until(admin, 503).await;
    assert_eq!(verdict["ready"], false);
    assert_eq!(verdict["listening"], true);
    assert_eq!(
        down(&verdict),
        [
            row("backend:b", "b", "health_down"),
            row("route:web", "b", "health_down")
        ],
        "any_backend holds: spare is up"
    );
    assert!(
        took < Duration::from_secs(3),
        "503 {took:?} after the kill; fall is 3 x 100 ms"
    );
    relay
        .wait_log(|l| l["message"] == "backend address marked down (health check)")
        .await;

    // The status page and `ctl status` say the same.
    let (_, page) = http_get(admin, "/").await;
    assert!(
        page.contains(
            "no <small>(backend:b: backend b health_down; route:web: backend b health_down)</small>"
        ),
        "{page}"
    );
    let file = scratch_dir("ready").join("ctl.toml");
    std::fs::write(
        &file,
        config(
            &format!(
                "listen = \"{admin}\"\ntoken_file = \"{}\"",
                tokens.display()
            ),
            a,
            spare,
        ),
    )
    .unwrap();
    let (code, out, err) = ctl(&file, &["status"]).await;
    assert_eq!(code, Some(1), "{out}{err}");
    assert_eq!(
        out,
        "not ready\n  backend:b: backend b health_down\n  route:web: backend b health_down\n"
    );

    // `snirelay probe --readyz` carries the edge's answer; an edge that is
    // not ready makes the exit code 2.
    let probe = |url: String| {
        run_snirelay(
            [
                "probe",
                "127.0.0.1",
                "--port",
                &relay.addr().port().to_string(),
                "--sni",
                "app.localhost",
                "--insecure",
                "--timeout",
                "2s",
                "--json",
                "--readyz",
                &url,
            ]
            .map(str::to_owned)
            .to_vec(),
        )
    };
    let (code, out, err) = probe(format!("http://{admin}/readyz")).await;
    assert_eq!(code, Some(2), "{out}{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["readyz"]["status"], 503, "{report}");
    assert_eq!(report["readyz"]["ready"], false);
    assert_eq!(
        report["readyz"]["down"],
        serde_json::json!(["backend:b: b health_down", "route:web: b health_down"])
    );

    // Restarted on the same port: two good checks, and ready again.
    let (task, _) = backend_on(a).await;
    let (verdict, took) = readyz_until(admin, 200).await;
    assert!(down(&verdict).is_empty(), "{verdict}");
    assert!(
        took < Duration::from_secs(3),
        "200 {took:?} after the restart; rise is 2 x 100 ms"
    );
    let (code, out, _) = ctl(&file, &["status"]).await;
    assert_eq!((code, out.as_str()), (Some(0), "ready\n"));
    let (_, out, err) = probe(format!("http://{admin}")).await;
    let report: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    assert_eq!(report["readyz"]["status"], 200, "{report}");
    assert_eq!(report["readyz"]["ready"], true);

    // Every address of spare in maintenance: any_backend still holds (b
    // is up), and spare is not required by name.
    let maint = http_request_text(
        "POST",
        &format!("/backends/spare/addresses/{spare}/state"),
        &[&format!("Authorization: Bearer {TOKEN}")],
        r#"{"state": "maint"}"#,
    );
    assert_eq!(http_tcp(admin, &maint).await.status, 200);
    assert_eq!(http_get(admin, "/readyz").await.0, 200);
    // b's only address too: now nothing is usable.
    let maint = http_request_text(
        "POST",
        &format!("/backends/b/addresses/{a}/state"),
        &[&format!("Authorization: Bearer {TOKEN}")],
        r#"{"state": "maint"}"#,
    );
    assert_eq!(http_tcp(admin, &maint).await.status, 200);
    let (verdict, _) = readyz_until(admin, 503).await;
    assert_eq!(
        down(&verdict),
        [
            row("backend:b", "b", "drained"),
            row("route:web", "b", "drained"),
            row("any_backend", "-", "no_usable_backend"),
        ]
    );
    stop(task).await;
    stop(spare_task).await;
}
