//! DNS-resolved backends (`resolve = "host:port"`): the query function
//! against the test DNS server, then the relay following a changing A set,
//! serving stale, closing `no_address`, clamping TTLs, and the system
//! resolver path.

use crate::common;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use common::dns::{DnsServer, Mode, NEGATIVE_TTL};
use common::{
    Pki, Relay, http_get, metric, one_route_config, relayed_backend_addr, serve_tls_echo,
    tls_connect, tls_echo_backend,
};
use hickory_proto::op::ResponseCode;
use serde_json::Value;
use snirelay::backend::dns::{self, DnsAnswer, DnsError};
use tokio::net::{TcpListener, TcpStream};

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

const QUERY_TIMEOUT: Duration = Duration::from_millis(500);

// ------------------------------------------------------ the query function

#[tokio::test]
async fn query_returns_a_and_aaaa_with_the_smallest_ttl() {
    let server = DnsServer::start().await;
    server.set(
        "Origin.Example.NET.",
        vec![ip("192.0.2.1"), ip("2001:db8::1"), ip("192.0.2.2")],
        60,
    );
    server.set("other.example.net", vec![ip("192.0.2.9")], 7);
    let answer = dns::query(server.addr, "origin.example.net", QUERY_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(
        answer,
        DnsAnswer {
            addrs: vec![ip("192.0.2.1"), ip("192.0.2.2"), ip("2001:db8::1")],
            ttl: Duration::from_secs(60),
        }
    );
    assert_eq!(server.lookups("origin.example.net"), 1);
    assert_eq!(server.queries("origin.example.net"), 2, "one A, one AAAA");
    assert_eq!(server.queries("other.example.net"), 0);

    server.set("origin.example.net", vec![ip("192.0.2.3")], 0);
    let answer = dns::query(server.addr, "origin.example.net.", QUERY_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(answer.addrs, vec![ip("192.0.2.3")]);
    assert_eq!(answer.ttl, Duration::ZERO);
}

#[tokio::test]
async fn query_tells_a_negative_answer_from_a_failure() {
    let server = DnsServer::start().await;
    // NXDOMAIN: an answer, with no address and the zone's negative TTL.
    let answer = dns::query(server.addr, "gone.example.net", QUERY_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(
        answer,
        DnsAnswer {
            addrs: vec![],
            ttl: Duration::from_secs(NEGATIVE_TTL.into()),
        }
    );
    // The name exists with no address record: an answer too.
    server.set("empty.example.net", vec![], 30);
    let answer = dns::query(server.addr, "empty.example.net", QUERY_TIMEOUT)
        .await
        .unwrap();
    assert!(answer.addrs.is_empty());

    server.set("origin.example.net", vec![ip("192.0.2.1")], 30);
    server.set_mode(Mode::ServFail);
    let error = dns::query(server.addr, "origin.example.net", QUERY_TIMEOUT)
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            DnsError::Response {
                code: ResponseCode::ServFail,
                ..
            }
        ),
        "{error:?}"
    );

    server.set_mode(Mode::Silent);
    let started = tokio::time::Instant::now();
    let error = dns::query(server.addr, "origin.example.net", QUERY_TIMEOUT)
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(error, DnsError::Timeout { server: s, timeout } if s == server.addr && timeout == QUERY_TIMEOUT),
        "{error:?}"
    );
    assert!(took >= QUERY_TIMEOUT, "gave up after {took:?}");
    assert!(
        took < QUERY_TIMEOUT + Duration::from_secs(1),
        "took {took:?}"
    );

    server.set_mode(Mode::Answer);
    let answer = dns::query(server.addr, "origin.example.net", QUERY_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(answer.addrs, vec![ip("192.0.2.1")]);

    let error = dns::query(server.addr, "bad..name", QUERY_TIMEOUT)
        .await
        .unwrap_err();
    assert!(matches!(error, DnsError::InvalidName { .. }), "{error:?}");
}

#[tokio::test]
async fn a_truncated_answer_is_asked_again_over_tcp() {
    let server = DnsServer::start().await;
    server.set(
        "origin.example.net",
        vec![ip("192.0.2.1"), ip("2001:db8::1")],
        30,
    );
    server.set_mode(Mode::Truncate);
    let answer = dns::query(server.addr, "origin.example.net", QUERY_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(answer.addrs, vec![ip("192.0.2.1"), ip("2001:db8::1")]);
    assert_eq!(answer.ttl, Duration::from_secs(30));
    // Each question twice: over UDP (truncated), then over TCP.
    assert_eq!(server.queries("origin.example.net"), 4);
}

#[tokio::test]
async fn query_to_a_closed_port_fails_within_the_timeout() {
    // Nothing listens: ICMP port unreachable or a timeout, never an answer.
    let closed = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let started = tokio::time::Instant::now();
    let result = dns::query(addr, "origin.example.net", QUERY_TIMEOUT).await;
    assert!(result.is_err(), "{result:?}");
    assert!(started.elapsed() < QUERY_TIMEOUT + Duration::from_secs(1));
}

// ------------------------------------------------------------- the relay

/// Two echo backends on 127.0.0.2 and 127.0.0.3 sharing one port (a
/// resolved set shares the port of `resolve = "name:PORT"`).
async fn echo_pair(pki: &Pki) -> (SocketAddr, SocketAddr) {
    for _ in 0..50 {
        let first = TcpListener::bind("127.0.0.2:0").await.unwrap();
        let port = first.local_addr().unwrap().port();
        // The port is free on 127.0.0.2; on 127.0.0.3 it usually is too.
        let Ok(second) = TcpListener::bind(("127.0.0.3", port)).await else {
            continue;
        };
        let pair = (first.local_addr().unwrap(), second.local_addr().unwrap());
        serve_tls_echo(pki, Arc::new(first));
        serve_tls_echo(pki, Arc::new(second));
        return pair;
    }
    panic!("no port free on both 127.0.0.2 and 127.0.0.3");
}

/// A relay routing `app.example.com` to backend `b` resolved from `name`
/// on `port` through `dns`; `extra` goes into `[backend.b]`.
fn dns_config(name: &str, port: u16, dns: &DnsServer, extra: &str) -> String {
    one_route_config(
        &["app.example.com"],
        "",
        &format!(
            "resolve = \"{name}:{port}\"\nresolver = \"{}\"\nconnect_timeout = \"2s\"\n{extra}",
            dns.addr
        ),
    )
}

fn message(line: &Value, text: &str) -> bool {
    line["message"] == text && line["backend"] == "b"
}

#[tokio::test]
async fn the_relay_follows_the_a_set() {
    let pki = Pki::new(&["app.example.com"]);
    let (two, three) = echo_pair(&pki).await;
    let dns = DnsServer::start().await;
    dns.set("origin.test", vec![two.ip()], 0);
    let relay = Relay::start(&dns_config(
        "origin.test",
        two.port(),
        &dns,
        r#"min_ttl = "200ms""#,
    ))
    .await;
    let resolved = relay
        .wait_log(|l| message(l, "backend addresses resolved"))
        .await;
    assert_eq!(resolved["addresses"], two.to_string());
    assert_eq!(
        relayed_backend_addr(&relay, &pki, "app.example.com").await,
        two.to_string()
    );

    dns.set("origin.test", vec![three.ip()], 0);
    let changed = relay
        .wait_log(|l| message(l, "backend addresses changed"))
        .await;
    assert_eq!(changed["addresses"], three.to_string());
    for _ in 0..3 {
        assert_eq!(
            relayed_backend_addr(&relay, &pki, "app.example.com").await,
            three.to_string()
        );
    }

    // Both: `ordered` takes them in the answer's order.
    dns.set("origin.test", vec![two.ip(), three.ip()], 0);
    let both = format!("{two},{three}");
    relay
        .wait_log(|l| message(l, "backend addresses changed") && l["addresses"] == both)
        .await;
    assert_eq!(
        relayed_backend_addr(&relay, &pki, "app.example.com").await,
        two.to_string()
    );
}

#[tokio::test]
async fn a_failing_server_leaves_the_last_set_serving() {
    let pki = Pki::new(&["app.example.com"]);
    let (two, _) = echo_pair(&pki).await;
    let dns = DnsServer::start().await;
    dns.set("origin.test", vec![two.ip()], 0);
    let config = dns_config(
        "origin.test",
        two.port(),
        &dns,
        r#"min_ttl = "200ms"
max_ttl = "200ms""#,
    );
    let relay = Relay::start(&format!("[admin]\nlisten = \"127.0.0.1:0\"\n{config}")).await;
    let admin: SocketAddr = relay.wait_log(|l| l["message"] == "admin listening").await["addr"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    relay
        .wait_log(|l| message(l, "backend addresses resolved"))
        .await;

    // A negative answer does not empty a working backend.
    dns.remove("origin.test");
    let stale = relay
        .wait_log(|l| message(l, "DNS resolution failed; serving stale"))
        .await;
    assert_eq!(stale["addresses"], two.to_string());
    assert!(stale["level"] == "WARN", "{stale}");
    assert_eq!(
        relayed_backend_addr(&relay, &pki, "app.example.com").await,
        two.to_string()
    );
    dns.set("origin.test", vec![two.ip()], 0);
    relay
        .wait_log(|l| message(l, "DNS resolution recovered"))
        .await;

    // A server that stops answering: the last set keeps serving.
    dns.set_mode(Mode::Silent);
    let stale = relay
        .wait_nth(2, |l| message(l, "DNS resolution failed; serving stale"))
        .await;
    assert!(
        stale["error"].as_str().unwrap().contains("no answer"),
        "{stale}"
    );
    for _ in 0..3 {
        assert_eq!(
            relayed_backend_addr(&relay, &pki, "app.example.com").await,
            two.to_string()
        );
    }
    dns.set_mode(Mode::Answer);
    relay
        .wait_nth(2, |l| message(l, "DNS resolution recovered"))
        .await;
    assert_eq!(
        relayed_backend_addr(&relay, &pki, "app.example.com").await,
        two.to_string()
    );

    // Every outcome was counted.
    let (_, text) = http_get(admin, "/metrics").await;
    for outcome in ["ok", "empty", "error"] {
        let series = format!("snirelay_lookups_total{{kind=\"dns\",outcome=\"{outcome}\"}}");
        assert!(metric(&text, &series) >= 1.0, "{series} in\n{text}");
    }
}

#[tokio::test]
async fn a_backend_that_never_resolved_closes_no_address() {
    let pki = Pki::new(&["app.example.com", "s.example.com"]);
    let echo = tls_echo_backend(&pki).await;
    let dns = DnsServer::start().await;
    let connect_timeout = Duration::from_millis(500);
    let config = format!(
        r#"
[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]

[[route]]
sni = ["app.example.com"]
backend = "fixed"

[[route]]
sni = ["s.example.com"]
backend = "b"

[backend.fixed]
addresses = ["{echo}"]

[backend.b]
resolve = "never.test:443"
resolver = "{}"
connect_timeout = "{}ms"
min_ttl = "200ms"
"#,
        dns.addr,
        connect_timeout.as_millis()
    );
    let relay = Relay::start(&config).await;
    let warned = relay
        .wait_log(|l| {
            message(
                l,
                "DNS resolution failed; the backend has no address yet (connections close no_address)",
            )
        })
        .await;
    assert!(
        warned["error"].as_str().unwrap().contains("negative"),
        "{warned}"
    );

    let tcp = TcpStream::connect(relay.addr()).await.unwrap();
    let peer = tcp.local_addr().unwrap();
    let started = tokio::time::Instant::now();
    let result = tls_connect(pki.client_config(), "s.example.com", tcp).await;
    assert!(result.is_err(), "no backend, no handshake");
    let line = relay.closed_line(peer).await;
    let took = started.elapsed();
    assert_eq!(line["close"], "no_address", "{line}");
    // It waited connect_timeout for a first answer, then gave up.
    assert!(took >= connect_timeout, "closed after {took:?}");
    assert!(
        took < connect_timeout + Duration::from_millis(1500),
        "closed after {took:?}"
    );
    // The other route is not held up.
    assert_eq!(
        relayed_backend_addr(&relay, &pki, "app.example.com").await,
        echo.to_string()
    );
}

#[tokio::test]
async fn min_ttl_clamps_a_zero_ttl_and_max_ttl_a_long_one() {
    let pki = Pki::new(&["app.example.com"]);
    let (two, _) = echo_pair(&pki).await;
    let dns = DnsServer::start().await;
    dns.set("origin.test", vec![two.ip()], 0);
    let relay = Relay::start(&dns_config(
        "origin.test",
        two.port(),
        &dns,
        r#"min_ttl = "200ms"
max_ttl = "300ms""#,
    ))
    .await;
    relay
        .wait_log(|l| message(l, "backend addresses resolved"))
        .await;

    // A TTL of 0 is re-asked every min_ttl, not in a loop: over one second
    // at most 1000/200 lookups (+1 for the window's edges).
    let before = dns.lookups("origin.test");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let within = dns.lookups("origin.test") - before;
    assert!(within <= 6, "{within} lookups in 1s with min_ttl = 200ms");
    assert!(within >= 2, "{within} lookups in 1s: not re-resolving");

    // A TTL of a day is re-asked at max_ttl.
    dns.set("origin.test", vec![two.ip()], 86_400);
    let now = dns.lookups("origin.test");
    dns.wait_lookups("origin.test", now + 3).await;
    assert_eq!(
        relayed_backend_addr(&relay, &pki, "app.example.com").await,
        two.to_string()
    );
}

#[tokio::test]
async fn the_system_resolver_reads_localhost() {
    let pki = Pki::new(&["app.example.com"]);
    let echo = tls_echo_backend(&pki).await;
    let config = one_route_config(
        &["app.example.com"],
        "",
        &format!(
            "resolve = \"localhost:{}\"\nresolve_interval = \"200ms\"\nconnect_timeout = \"2s\"",
            echo.port()
        ),
    );
    let relay = Relay::start(&config).await;
    let resolved = relay
        .wait_log(|l| message(l, "backend addresses resolved"))
        .await;
    let addresses = resolved["addresses"].as_str().unwrap().to_owned();
    assert!(
        addresses.split(',').any(|a| a == echo.to_string()),
        "{addresses}"
    );
    assert_eq!(
        relayed_backend_addr(&relay, &pki, "app.example.com").await,
        echo.to_string()
    );
    // It is asked again every resolve_interval; the same set is no change.
    relay
        .wait_nth(2, |l| message(l, "backend addresses unchanged"))
        .await;
    assert!(
        !relay
            .log_lines()
            .iter()
            .any(|l| message(l, "backend addresses changed")),
        "an unchanged set was logged as a change"
    );
}
