//! The source table (`GET /sources`, `DELETE /sources/{key}`, `snirelay
//! ctl sources`) against the real relay: a flooding source (127.0.0.2)
//! tops it with its refusals while a normal one (127.0.0.3) shows its one
//! open connection; clearing resets the counters; both endpoints refuse a
//! caller without a token.

use crate::common;

use std::net::{IpAddr, SocketAddr};

use common::*;
use serde_json::Value;

pub(crate) const TOKEN: &str = "0123456789abcdef0123456789abcdef";

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn config(admin: &str, backend: SocketAddr) -> String {
    format!(
        r#"
[admin]
{admin}

[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]
client_hello_timeout = "30s"

[listener.limits]
connections_per_source = 1

[[route]]
sni = ["app.localhost"]
backend = "b"

[backend.b]
addresses = ["{backend}"]
"#
    )
}

pub(crate) async fn call(
    admin: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
) -> Answer {
    let auth = token.map(|t| format!("Authorization: Bearer {t}"));
    let headers: Vec<&str> = auth.iter().map(String::as_str).collect();
    http_tcp(admin, &http_request_text(method, path, &headers, "")).await
}

fn find<'a>(table: &'a Value, key: &str) -> &'a Value {
    table["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["key"] == key)
        .unwrap_or_else(|| panic!("{key} not listed: {table}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_source_tops_the_table_and_a_normal_one_shows_its_connection() {
    let backend = closed_port();
    let tokens = token_file(&format!("ops:{TOKEN}\n"));
    let admin_keys = format!(
        "listen = \"127.0.0.1:0\"\ntoken_file = \"{}\"",
        tokens.display()
    );
    let relay = Relay::start(&config(&admin_keys, backend)).await;
    let admin = relay.admin_addr().await;

    // One connection from the normal source, held open (waiting for its
    // hello), and thirty from the flooder: one admitted, 29 refused.
    let _normal = connect_from(ip("127.0.0.3"), relay.addr()).await.unwrap();
    let mut flood = Vec::new();
    for _ in 0..30 {
        flood.push(connect_from(ip("127.0.0.2"), relay.addr()).await.unwrap());
    }
    relay
        .wait_matching(29, |l| {
            l["message"] == "connection closed" && l["close"] == "limit_concurrent"
        })
        .await;

    let answer = call(admin, "GET", "/sources", Some(TOKEN)).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let table = answer.json();
    assert_eq!(table["total"], 2, "{table}");
    let top = &table["sources"][0];
    assert_eq!(
        top["key"], "127.0.0.2",
        "the flooder tops the table: {table}"
    );
    assert_eq!(top["listener"], "tls");
    assert_eq!(top["open"], 1);
    assert_eq!(top["admitted"], 1);
    assert_eq!(top["refused"]["limit_concurrent"], 29);
    assert_eq!(top["refused"]["limit_rate"], 0);
    assert_eq!(top["refused_total"], 29);
    assert!(top["rate_per_second"].as_f64().unwrap() > 0.0, "{top}");
    assert!(top["last_seen_seconds_ago"].as_f64().unwrap() < 10.0);
    let normal = find(&table, "127.0.0.3");
    assert_eq!(normal["open"], 1, "{normal}");
    assert_eq!(normal["admitted"], 1);
    assert_eq!(normal["refused_total"], 0);

    // Sorted by rate, the flooder still leads; limit cuts the rows.
    let by_rate = call(admin, "GET", "/sources?sort=rate&limit=1", Some(TOKEN))
        .await
        .json();
    assert_eq!(by_rate["sources"].as_array().unwrap().len(), 1);
    assert_eq!(by_rate["sources"][0]["key"], "127.0.0.2");
    assert_eq!(by_rate["total"], 2);
    let bad = call(admin, "GET", "/sources?sort=bytes", Some(TOKEN)).await;
    assert_eq!(bad.status, 400, "{}", bad.body);

    // `ctl sources`: the same table, the flooder's row first.
    let file = scratch_dir("sources").join("ctl.toml");
    std::fs::write(
        &file,
        config(
            &format!(
                "listen = \"{admin}\"\ntoken_file = \"{}\"",
                tokens.display()
            ),
            backend,
        ),
    )
    .unwrap();
    let (code, out, err) = ctl(&file, &["sources"]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0][..3], ["LISTENER", "KEY", "OPEN"]);
    assert_eq!(rows[1][..3], ["tls", "127.0.0.2", "1"], "{out}");
    assert_eq!(rows[1].last(), Some(&"limit_concurrent=29"), "{out}");
    assert_eq!(rows[2][..3], ["tls", "127.0.0.3", "1"], "{out}");

    // Guarded like every control endpoint.
    for (method, path) in [("GET", "/sources"), ("DELETE", "/sources/127.0.0.2")] {
        assert_eq!(call(admin, method, path, None).await.status, 401);
        assert_eq!(call(admin, method, path, Some("wrong")).await.status, 401);
    }

    // Clearing the flooder: its counters start again, its open
    // connection stays counted.
    let cleared = call(admin, "DELETE", "/sources/127.0.0.2", Some(TOKEN)).await;
    assert_eq!(cleared.status, 200, "{}", cleared.body);
    assert_eq!(cleared.json()["cleared"], 1);
    let table = call(admin, "GET", "/sources", Some(TOKEN)).await.json();
    let flooder = find(&table, "127.0.0.2");
    assert_eq!(flooder["refused_total"], 0, "{table}");
    assert_eq!(flooder["admitted"], 0);
    assert_eq!(flooder["open"], 1);
    let (code, out, err) = ctl(&file, &["clear-source", "127.0.0.3"]).await;
    assert_eq!((code, out.as_str()), (Some(0), "cleared 1\n"), "{err}");
    let missing = call(admin, "DELETE", "/sources/192.0.2.1", Some(TOKEN)).await;
    assert_eq!(missing.status, 404, "{}", missing.body);
    drop(flood);
}
