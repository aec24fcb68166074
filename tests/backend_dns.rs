//! DNS-resolved backends (`resolve = "host:port"`): the query function
//! against the test DNS server, then the relay following a changing A set,
//! serving stale, closing `no_address`, clamping TTLs, and the system
//! resolver path.

mod common;

use std::net::IpAddr;
use std::time::Duration;

use common::dns::{DnsServer, Mode, NEGATIVE_TTL};
use hickory_proto::op::ResponseCode;
use snirelay::backend::dns::{self, Answer, DnsError};

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
        Answer {
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
        Answer {
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
