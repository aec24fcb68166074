//! Backend selection through the real relay: connect failover past refused
//! and black-holed addresses within attempts × connect_timeout, passive
//! health, failover under every policy, and the `round_robin`,
//! `least_connections` and `source_hash` policies, with weights, and the
//! per-address connection caps (`backend_full`). Backends are plain TCP
//! listeners that announce which one they are; clients send a captured
//! ClientHello.

use crate::common;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn config(addresses: &[SocketAddr], backend_extra: &str) -> String {
    let list = addresses
        .iter()
        .map(|a| format!("\"{a}\""))
        .collect::<Vec<_>>()
        .join(", ");
    one_route_config(
        &["www.example.com"],
        "",
        &format!("addresses = [{list}]\n{backend_extra}"),
    )
}

/// Sends a hello through the relay and returns the backend's tag (empty
/// when the relay closed without reaching one), the time until then, and
/// the client's address.
async fn tag_from(relay: &Relay, from: Option<std::net::IpAddr>) -> (String, Duration, SocketAddr) {
    let started = Instant::now();
    let mut client = match from {
        Some(ip) => connect_from(ip, relay.addr()).await.unwrap(),
        None => TcpStream::connect(relay.addr()).await.unwrap(),
    };
    let local = client.local_addr().unwrap();
    client.write_all(&capture("openssl_sni.bin")).await.unwrap();
    let mut tag = [0u8; 1];
    let got = tokio::time::timeout(Duration::from_secs(10), client.read(&mut tag))
        .await
        .expect("the relay neither relayed nor closed");
    let took = started.elapsed();
    let tag = match got {
        Ok(1) => String::from_utf8_lossy(&tag).into_owned(),
        _ => String::new(),
    };
    (tag, took, local)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordered_fails_over_past_a_refused_and_a_black_holed_address() {
    let refused = closed_port();
    let hole = BlackHole::new();
    let (good, reached) = tagged_backend("G").await;
    let timeout = Duration::from_millis(500);
    let relay = Relay::start(&config(
        &[refused, hole.addr, good],
        r#"connect_timeout = "500ms""#,
    ))
    .await;

    let (tag, took, local) = tag_from(&relay, None).await;
    assert_eq!(tag, "G");
    assert_eq!(reached.load(Ordering::SeqCst), 1);
    // One black hole costs one connect_timeout; the refused one costs ~0.
    assert!(took >= timeout - Duration::from_millis(50), "took {took:?}");
    assert!(
        took < 3 * timeout,
        "took {took:?}: beyond attempts × connect_timeout"
    );
    // Each failed attempt logged at debug, naming its address.
    for failed in [refused, hole.addr] {
        relay
            .wait_log(|l| {
                l["message"] == "backend connect attempt failed" && l["addr"] == failed.to_string()
            })
            .await;
    }
    let line = relay.closed_line(local).await;
    assert_eq!(line["backend.addr"], good.to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_attempts_bounds_the_addresses_tried_and_the_time_spent() {
    let refused = closed_port();
    let hole = BlackHole::new();
    let (good, reached) = tagged_backend("G").await;
    let relay = Relay::start(&config(
        &[refused, hole.addr, good],
        "connect_timeout = \"400ms\"\nconnect_attempts = 2",
    ))
    .await;
    let (tag, took, local) = tag_from(&relay, None).await;
    assert_eq!(tag, "", "the third address is beyond connect_attempts");
    assert_eq!(reached.load(Ordering::SeqCst), 0);
    assert!(
        took < 2 * Duration::from_millis(400) + Duration::from_millis(300),
        "took {took:?}"
    );
    let line = relay.closed_line(local).await;
    assert_eq!(line["close"], "connect_failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_address_black_holed_fails_within_attempts_times_connect_timeout() {
    let holes = [
        BlackHole::new(),
        BlackHole::new(),
        BlackHole::new(),
        BlackHole::new(),
    ];
    let addrs: Vec<SocketAddr> = holes.iter().map(|h| h.addr).collect();
    // Four addresses, default attempts min(4, 3) = 3.
    let relay = Relay::start(&config(&addrs, r#"connect_timeout = "300ms""#)).await;
    let (tag, took, local) = tag_from(&relay, None).await;
    assert_eq!(tag, "");
    assert!(took >= Duration::from_millis(3 * 300 - 50), "took {took:?}");
    assert!(took < Duration::from_millis(3 * 300 + 600), "took {took:?}");
    assert_eq!(relay.closed_line(local).await["close"], "connect_failed");
    let attempts = relay
        .log_lines()
        .iter()
        .filter(|l| l["message"] == "backend connect attempt failed")
        .count();
    assert_eq!(attempts, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passive_health_marks_a_failing_address_down_and_stops_trying_it_first() {
    let refused = closed_port();
    let (good, reached) = tagged_backend("G").await;
    let relay = Relay::start(&config(
        &[refused, good],
        "max_fails = 2\nfail_backoff = \"60s\"",
    ))
    .await;
    for _ in 0..5 {
        assert_eq!(tag_from(&relay, None).await.0, "G");
    }
    assert_eq!(reached.load(Ordering::SeqCst), 5);
    let down = relay
        .wait_log(|l| l["message"] == "backend address marked down (consecutive connect failures)")
        .await;
    assert_eq!(down["addr"], refused.to_string());
    relay
        .wait_count(5, |l| l["message"] == "connection closed")
        .await;
    // Two failures marked it down; the three later connections went to the
    // healthy address first and never tried it.
    let failed = relay
        .log_lines()
        .iter()
        .filter(|l| l["message"] == "backend connect attempt failed")
        .count();
    assert_eq!(failed, 2);
    let marked = relay
        .log_lines()
        .iter()
        .filter(|l| {
            l["message"]
                .as_str()
                .unwrap_or("")
                .starts_with("backend address marked down")
        })
        .count();
    assert_eq!(marked, 1, "the state change is logged once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_policy_is_accepted_and_fails_over_to_the_address_that_answers() {
    // Taken from the policy table, so a policy added there is covered here.
    for &policy in snirelay::config::Policy::ALL {
        let refused = closed_port();
        let (good, _) = tagged_backend("G").await;
        let relay = Relay::start(&config(
            &[refused, good],
            &format!("policy = {:?}", policy.as_str()),
        ))
        .await;
        for _ in 0..3 {
            let (tag, _, local) = tag_from(&relay, None).await;
            assert_eq!(tag, "G", "{policy:?}");
            let line = relay.closed_line(local).await;
            assert_eq!(line["backend.addr"], good.to_string(), "{policy:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_robin_spreads_connections_evenly() {
    let backends = [
        tagged_backend("A").await,
        tagged_backend("B").await,
        tagged_backend("C").await,
    ];
    let addrs: Vec<SocketAddr> = backends.iter().map(|b| b.0).collect();
    let relay = Relay::start(&config(&addrs, r#"policy = "round_robin""#)).await;
    let mut tags = String::new();
    for _ in 0..9 {
        tags.push_str(&tag_from(&relay, None).await.0);
    }
    for (_, count) in &backends {
        assert_eq!(count.load(Ordering::SeqCst), 3, "tags in order: {tags}");
    }
    // A rotation: no address twice in a row.
    assert!(tags.as_bytes().windows(2).all(|w| w[0] != w[1]), "{tags}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_connections_sends_new_connections_away_from_a_busy_address() {
    let (a, _) = tagged_backend("A").await;
    let (b, _) = tagged_backend("B").await;
    let relay = Relay::start(&config(&[a, b], r#"policy = "least_connections""#)).await;
    // One long-lived connection stays open on one address...
    let mut long = TcpStream::connect(relay.addr()).await.unwrap();
    long.write_all(&capture("openssl_sni.bin")).await.unwrap();
    let mut busy = [0u8; 1];
    long.read_exact(&mut busy).await.unwrap();
    let other = if &busy == b"A" { "B" } else { "A" };
    // ...so every short one, each closed before the next, goes to the other.
    for _ in 0..6 {
        let (tag, _, local) = tag_from(&relay, None).await;
        assert_eq!(tag, other);
        relay.closed_line(local).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_hash_keeps_a_client_ip_on_one_address_whatever_its_port() {
    let backends = [
        tagged_backend("A").await,
        tagged_backend("B").await,
        tagged_backend("C").await,
    ];
    let addrs: Vec<SocketAddr> = backends.iter().map(|b| b.0).collect();
    let relay = Relay::start(&config(&addrs, r#"policy = "source_hash""#)).await;
    let mut seen = std::collections::BTreeSet::new();
    // 60 client addresses: the chance that one backend gets none of them
    // is 3 × (2/3)^60, about 1e-10 (with 20 it was about 1e-3).
    for host in 2..=61u8 {
        let ip = std::net::IpAddr::from([127, 0, 0, host]);
        let (first, _, _) = tag_from(&relay, Some(ip)).await;
        for _ in 0..2 {
            // A new connection, so a new source port: same address.
            assert_eq!(tag_from(&relay, Some(ip)).await.0, first, "client {ip}");
        }
        seen.insert(first);
    }
    assert_eq!(
        seen.len(),
        3,
        "60 client addresses spread over all 3 backends: {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_what_is_known_about_unchanged_backends_and_forgets_changed_ones() {
    let refused = closed_port();
    let (good, _) = tagged_backend("G").await;
    let base = config(&[refused, good], "max_fails = 1\nfail_backoff = \"60s\"");
    let relay = Relay::start(&base).await;
    let failed = |relay: &Relay| {
        relay
            .log_lines()
            .iter()
            .filter(|l| l["message"] == "backend connect attempt failed")
            .count()
    };
    assert_eq!(tag_from(&relay, None).await.0, "G");
    relay
        .wait_log(|l| l["message"] == "backend address marked down (consecutive connect failures)")
        .await;
    assert_eq!(failed(&relay), 1);

    // Another route, same backend: its runtime (and the down mark) carries over.
    let more = format!("{base}\n[[route]]\nsni = [\"other.example.com\"]\nbackend = \"b\"\n");
    assert_eq!(relay.reload(&more, 1).await["message"], "reload applied");
    for _ in 0..3 {
        assert_eq!(tag_from(&relay, None).await.0, "G");
    }
    assert_eq!(failed(&relay), 1, "the down address was not tried again");

    // The backend itself changed: a fresh runtime tries every address again.
    let changed = more.replace("max_fails = 1", "max_fails = 2");
    assert_eq!(relay.reload(&changed, 2).await["message"], "reload applied");
    assert_eq!(tag_from(&relay, None).await.0, "G");
    relay
        .wait_count(2, |l| l["message"] == "backend connect attempt failed")
        .await;
    assert_eq!(failed(&relay), 2);
}

/// `[backend.b]` keys for `addresses` given as tables (`address` plus the
/// table's other keys, e.g. `weight = 3`).
fn table_config(addresses: &[(SocketAddr, &str)], backend_extra: &str) -> String {
    let list = addresses
        .iter()
        .map(|(a, keys)| format!("{{ address = \"{a}\", {keys} }}"))
        .collect::<Vec<_>>()
        .join(", ");
    one_route_config(
        &["www.example.com"],
        "",
        &format!("addresses = [{list}]\n{backend_extra}"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weighted_round_robin_is_smooth_and_in_proportion_to_the_weights() {
    let (a, a_count) = tagged_backend("A").await;
    let (b, b_count) = tagged_backend("B").await;
    let relay = Relay::start(&table_config(
        &[(a, "weight = 3"), (b, "weight = 1")],
        r#"policy = "round_robin""#,
    ))
    .await;
    let mut tags = String::new();
    for _ in 0..8 {
        let (tag, _, local) = tag_from(&relay, None).await;
        tags.push_str(&tag);
        relay.closed_line(local).await;
    }
    // Smooth weighted round-robin for 3:1, twice: A A B A.
    assert_eq!(tags, "AABAAABA");
    assert_eq!(a_count.load(Ordering::SeqCst), 6);
    assert_eq!(b_count.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_hash_is_the_specified_weighted_rendezvous_choice() {
    use snirelay::backend::balance::{affinity_hash, affinity_rank};
    let backends = [
        (tagged_backend("A").await, 1u32),
        (tagged_backend("B").await, 4u32),
        (tagged_backend("C").await, 2u32),
    ];
    let tables: Vec<(SocketAddr, String)> = backends
        .iter()
        .map(|((addr, _), w)| (*addr, format!("weight = {w}")))
        .collect();
    let tables: Vec<(SocketAddr, &str)> = tables.iter().map(|(a, k)| (*a, k.as_str())).collect();
    let relay = Relay::start(&table_config(&tables, r#"policy = "source_hash""#)).await;
    for host in 2..=31u8 {
        let ip = std::net::IpAddr::from([127, 0, 0, host]);
        // What every relay computes from the specification (SipHash-2-4 of
        // the addresses, weighted rendezvous in fixed point).
        let expected = ["A", "B", "C"][backends
            .iter()
            .enumerate()
            .min_by_key(|(_, ((addr, _), w))| affinity_rank(affinity_hash(ip, *addr), *w))
            .unwrap()
            .0];
        let (tag, _, _) = tag_from(&relay, Some(ip)).await;
        assert_eq!(tag, expected, "client {ip}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_at_its_cap_passes_connections_to_the_next_and_all_full_is_backend_full() {
    let (a, a_count) = tagged_backend("A").await;
    let (b, b_count) = tagged_backend("B").await;
    let relay = Relay::start(&table_config(
        &[(a, "max_connections = 1"), (b, "max_connections = 1")],
        r#"policy = "ordered""#,
    ))
    .await;
    // Held open: A is at its cap...
    let mut first = TcpStream::connect(relay.addr()).await.unwrap();
    first.write_all(&capture("openssl_sni.bin")).await.unwrap();
    let mut tag = [0u8; 1];
    first.read_exact(&mut tag).await.unwrap();
    assert_eq!(&tag, b"A");
    // ...so the next goes to B, though `ordered` prefers A...
    let mut second = TcpStream::connect(relay.addr()).await.unwrap();
    second.write_all(&capture("openssl_sni.bin")).await.unwrap();
    second.read_exact(&mut tag).await.unwrap();
    assert_eq!(&tag, b"B");
    // ...and with both full the third is refused without a connect.
    let (tag, _, local) = tag_from(&relay, None).await;
    assert_eq!(tag, "");
    let line = relay.closed_line(local).await;
    assert_eq!(line["close"], "backend_full");
    assert_eq!(line["level"], "WARN");
    assert_eq!(line["backend"], "b");
    assert_eq!(a_count.load(Ordering::SeqCst), 1);
    assert_eq!(b_count.load(Ordering::SeqCst), 1);
    assert!(
        !relay
            .log_lines()
            .iter()
            .any(|l| l["message"] == "backend connect attempt failed"),
        "a full address was tried"
    );
    // A closed connection frees its slot.
    let local = first.local_addr().unwrap();
    drop(first);
    relay.closed_line(local).await;
    assert_eq!(tag_from(&relay, None).await.0, "A");
    drop(second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_connections_per_address_caps_a_single_address() {
    let (a, a_count) = tagged_backend("A").await;
    let relay = Relay::start(&config(&[a], "max_connections_per_address = 1")).await;
    let mut held = TcpStream::connect(relay.addr()).await.unwrap();
    held.write_all(&capture("openssl_sni.bin")).await.unwrap();
    let mut tag = [0u8; 1];
    held.read_exact(&mut tag).await.unwrap();
    let (tag, _, local) = tag_from(&relay, None).await;
    assert_eq!(tag, "");
    assert_eq!(relay.closed_line(local).await["close"], "backend_full");
    assert_eq!(
        a_count.load(Ordering::SeqCst),
        1,
        "nothing reached the backend"
    );
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_changes_the_backend_still_counts_its_open_connections_against_the_cap() {
    let (a, a_count) = tagged_backend("A").await;
    // A day to drain: the held connection (drained by the reload at a
    // random moment within it) stays open for the test.
    let base = format!(
        "[global]\ndrain_timeout = \"24h\"\n{}",
        config(&[a], "max_connections_per_address = 1")
    );
    let relay = Relay::start(&base).await;
    let mut held = TcpStream::connect(relay.addr()).await.unwrap();
    held.write_all(&capture("openssl_sni.bin")).await.unwrap();
    let mut tag = [0u8; 1];
    held.read_exact(&mut tag).await.unwrap();

    // The backend changes (a new runtime, health forgotten)...
    let changed = base.replace(
        "max_connections_per_address = 1",
        "max_connections_per_address = 1\nconnect_timeout = \"3s\"",
    );
    assert_eq!(relay.reload(&changed, 1).await["message"], "reload applied");
    // ...but the connection still open on A counts against its cap.
    let (tag, _, local) = tag_from(&relay, None).await;
    assert_eq!(tag, "");
    assert_eq!(relay.closed_line(local).await["close"], "backend_full");
    assert_eq!(a_count.load(Ordering::SeqCst), 1);
    // Once it closes, A takes a connection again.
    let local = held.local_addr().unwrap();
    drop(held);
    relay.closed_line(local).await;
    assert_eq!(tag_from(&relay, None).await.0, "A");
}
