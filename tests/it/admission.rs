//! Admission end to end: per-source concurrency and rate limits, allow/deny
//! lists, dry run, and the global connection cap and rate, with clients on
//! distinct loopback sources (127.0.0.2, 127.0.0.3, …) against the real
//! relay process.

use crate::common;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

/// A full mutual-TLS handshake through the relay from `from`, on `stream`
/// if given, and one echoed message.
async fn served(pki: &Pki, stream: TcpStream) {
    let mut tls = tls_connect(pki.client_config(), "app.example.com", stream)
        .await
        .expect("mutual TLS handshake through the relay");
    tls.write_all(b"ping").await.unwrap();
    let mut back = [0u8; 4];
    tls.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"ping");
}

fn closed_with(line: &Value, reason: &str) -> bool {
    line["message"] == "connection closed" && line["close"] == reason
}

fn from_source(line: &Value, source: &str) -> bool {
    line["client.peer"]
        .as_str()
        .is_some_and(|p| p.parse::<SocketAddr>().unwrap().ip() == ip(source))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_per_source_admits_exactly_ten_and_other_sources_are_served() {
    let pki = Pki::new(&["app.example.com"]);
    let backend = tls_echo_backend(&pki).await;
    let relay = Relay::start(&simple_config(
        &["app.example.com"],
        backend,
        "client_hello_timeout = \"30s\"\n[listener.limits]\nconnections_per_source = 10",
    ))
    .await;

    let mut attempts = Vec::new();
    for _ in 0..50 {
        attempts.push(connect_from(ip("127.0.0.2"), relay.addr()).await.unwrap());
    }
    let refused = relay
        .wait_matching(40, |l| closed_with(l, "limit_concurrent"))
        .await;
    assert!(refused.iter().all(|l| from_source(l, "127.0.0.2")));
    let refused_peers: Vec<String> = refused
        .iter()
        .map(|l| l["client.peer"].as_str().unwrap().to_owned())
        .collect();

    // Another source is not affected by 127.0.0.2 being at its cap.
    served(
        &pki,
        connect_from(ip("127.0.0.3"), relay.addr()).await.unwrap(),
    )
    .await;

    // The ten admitted connections are live: each completes a handshake.
    let admitted: Vec<TcpStream> = attempts
        .into_iter()
        .filter(|s| !refused_peers.contains(&s.local_addr().unwrap().to_string()))
        .collect();
    assert_eq!(admitted.len(), 10);
    for stream in admitted {
        served(&pki, stream).await;
    }
    let refusals = relay
        .closed_lines()
        .into_iter()
        .filter(|l| closed_with(l, "limit_concurrent"))
        .count();
    assert_eq!(refusals, 40, "exactly 40 of 50 refused");
}

/// Opens `n` connections from `source` at once; each sends one non-TLS
/// byte, so an admitted one closes as `not_tls` and a refused one as
/// `limit_rate`. Returns how many were admitted.
///
/// The relay is stopped (SIGSTOP) while the clients connect, so all `n`
/// wait in the backlog and reach admission within a few milliseconds of
/// each other however slowly this machine opens sockets.
async fn burst(relay: &Relay, source: &str, n: usize, already: usize) -> (usize, usize) {
    relay.signal("STOP");
    let mut streams = Vec::new();
    for _ in 0..n {
        streams.push(connect_from(ip(source), relay.addr()).await.unwrap());
    }
    relay.signal("CONT");
    for mut stream in streams {
        let _ = stream.write_all(b"x").await;
        tokio::spawn(async move {
            let mut sink = [0u8; 16];
            let _ = stream.read(&mut sink).await;
        });
    }
    let lines = relay
        .wait_matching(already + n, |l| {
            from_source(l, source) && (closed_with(l, "not_tls") || closed_with(l, "limit_rate"))
        })
        .await;
    let lines = &lines[already..];
    let admitted = lines.iter().filter(|l| closed_with(l, "not_tls")).count();
    (admitted, refill_allowance(lines))
}

/// Tokens a 20/s bucket may regain while the relay decides one burst: the
/// span between the first and the last `limit_rate` line (logged at the
/// moment of refusal), in 50 ms steps, plus one for the step in progress.
/// On an idle machine the decisions take a few ms and this is 1 (the ±1 of
/// the issue); on a loaded one it stays exact instead of flaking.
fn refill_allowance(lines: &[Value]) -> usize {
    let at = |l: &Value| -> f64 {
        // RFC 3339, e.g. 2026-11-29T16:47:04.123456Z: seconds of the day.
        let time = l["timestamp"].as_str().unwrap().split('T').nth(1).unwrap();
        let time = time.trim_end_matches('Z');
        let mut parts = time.split(':').map(|p| p.parse::<f64>().unwrap());
        let (h, m, s) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        h * 3600.0 + m * 60.0 + s
    };
    let refused: Vec<f64> = lines
        .iter()
        .filter(|l| closed_with(l, "limit_rate"))
        .map(at)
        .collect();
    let (Some(first), Some(last)) = (
        refused.iter().copied().reduce(f64::min),
        refused.iter().copied().reduce(f64::max),
    ) else {
        return 1;
    };
    1 + ((last - first) / 0.050).ceil() as usize
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_per_source_admits_the_burst_then_more_after_a_second() {
    let backend = closed_port();
    let relay = Relay::start(&simple_config(
        &["app.example.com"],
        backend,
        "[listener.limits]\nconnection_rate_per_source = 20\nconnection_burst_per_source = 20",
    ))
    .await;

    let (first, slack) = burst(&relay, "127.0.0.2", 100, 0).await;
    assert!(
        (20..=20 + slack).contains(&first),
        "{first} of 100 admitted (allowance {slack})"
    );

    // Another source has its own bucket.
    let (other, _) = burst(&relay, "127.0.0.3", 5, 0).await;
    assert_eq!(other, 5);

    // The bucket refills at 20/s: after a second, about 20 more get in.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (again, slack) = burst(&relay, "127.0.0.2", 100, 100).await;
    assert!(
        (19..=20 + slack).contains(&again),
        "{again} of 100 admitted after 1 s (allowance {slack})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_sources_are_closed_before_any_byte_is_read() {
    let reached = Arc::new(AtomicUsize::new(0));
    let count = reached.clone();
    let backend = raw_backend(move |_| {
        count.fetch_add(1, Ordering::SeqCst);
        async {}
    })
    .await;
    let relay = Relay::start(&simple_config(
        &["curl.example.com"],
        backend,
        "[listener.limits]\nallow = [\"127.0.0.0/29\"]\ndeny = [\"127.0.0.3\"]",
    ))
    .await;
    let hello = capture("curl.bin");

    for source in ["127.0.0.3", "127.0.0.9"] {
        let mut client = connect_from(ip(source), relay.addr()).await.unwrap();
        let peer = client.local_addr().unwrap();
        let _ = client.write_all(&hello).await;
        let mut got = Vec::new();
        let _ = client.read_to_end(&mut got).await;
        assert!(got.is_empty(), "no TLS alert for a refusal: {got:?}");
        let line = relay.closed_line(peer).await;
        assert_eq!(line["close"], "denied", "{source}");
        assert!(line["sni"].is_null(), "nothing was read");
    }
    assert_eq!(reached.load(Ordering::SeqCst), 0);

    // An allowed source is relayed.
    let mut client = connect_from(ip("127.0.0.2"), relay.addr()).await.unwrap();
    let peer = client.local_addr().unwrap();
    client.write_all(&hello).await.unwrap();
    client.shutdown().await.unwrap();
    let mut rest = Vec::new();
    let _ = client.read_to_end(&mut rest).await;
    let line = relay.closed_line(peer).await;
    assert_eq!(line["backend"], "b");
    assert_eq!(reached.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_reports_what_it_would_refuse_and_refuses_nothing() {
    let pki = Pki::new(&["app.example.com"]);
    let backend = tls_echo_backend(&pki).await;
    let relay = Relay::start(&simple_config(
        &["app.example.com"],
        backend,
        "[listener.limits]\nconnections_per_source = 1\ndry_run = true",
    ))
    .await;
    let first = connect_from(ip("127.0.0.2"), relay.addr()).await.unwrap();
    let second = connect_from(ip("127.0.0.2"), relay.addr()).await.unwrap();
    let peers = [&first, &second].map(|c| c.local_addr().unwrap().to_string());
    let (a, b) = tokio::join!(served(&pki, first), served(&pki, second));
    let ((), ()) = (a, b);
    let line = relay
        .wait_log(|l| l["message"] == "dry run: admission would refuse this connection")
        .await;
    assert_eq!(line["would_refuse"], "limit_concurrent");
    // Whichever of the two was admitted second: with one accept loop per
    // worker thread, two loops may take the two connections at once, and
    // either may reach admission first.
    assert!(
        peers.iter().any(|p| line["client.peer"] == p.as_str()),
        "{line:#} names neither {peers:?}"
    );
    assert_eq!(
        relay
            .log_lines()
            .iter()
            .filter(|l| l["message"] == "dry run: admission would refuse this connection")
            .count(),
        1,
        "one of the two was over the limit"
    );
    assert!(
        !relay
            .closed_lines()
            .iter()
            .any(|l| closed_with(l, "limit_concurrent")),
        "dry run refused a connection"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_max_connections_the_next_one_waits_in_the_backlog_and_is_then_served() {
    let pki = Pki::new(&["app.example.com"]);
    let backend = tls_echo_backend(&pki).await;
    let relay = Relay::start(&format!(
        "[global]\nmax_connections = 50\n{}",
        simple_config(
            &["app.example.com"],
            backend,
            "client_hello_timeout = \"30s\""
        )
    ))
    .await;

    let mut held = Vec::new();
    for _ in 0..50 {
        held.push(TcpStream::connect(relay.addr()).await.unwrap());
    }
    wait_until("the relay to accept all 50", || {
        accept_queue_len(relay.addr()) == 0
    })
    .await;

    let client = TcpStream::connect(relay.addr()).await.unwrap();
    let pki = Arc::new(pki);
    let handshake = tokio::spawn({
        let pki = pki.clone();
        async move { served(&pki, client).await }
    });
    wait_until("the 51st to wait in the accept queue", || {
        accept_queue_len(relay.addr()) == 1
    })
    .await;
    assert!(!handshake.is_finished());
    assert!(
        relay.closed_lines().is_empty(),
        "nothing refused or closed at the cap"
    );

    drop(held.pop());
    tokio::time::timeout(WAIT, handshake)
        .await
        .expect("served once a connection closed")
        .unwrap();
    assert_eq!(accept_queue_len(relay.addr()), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_connection_rate_paces_accepting_without_refusing() {
    let relay = Relay::start(&format!(
        "[global]\nmax_connection_rate = 5\n{}",
        simple_config(&["app.example.com"], closed_port(), "")
    ))
    .await;
    let started = Instant::now();
    let mut clients = Vec::new();
    for _ in 0..15 {
        let mut stream = TcpStream::connect(relay.addr()).await.unwrap();
        stream.write_all(b"x").await.unwrap();
        clients.push(stream);
    }
    let lines = relay
        .wait_matching(15, |l| l["message"] == "connection closed")
        .await;
    assert!(
        lines.iter().all(|l| l["close"] == "not_tls"),
        "none refused"
    );
    // A burst of 5, then 10 more at 5/s: pacing cannot finish sooner.
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "accepted 15 in {:?} at 5/s",
        started.elapsed()
    );
}

/// The shipped defaults protect a small edge from one source: with no
/// `[listener.limits]` at all, a source that opens as many connections as
/// the whole process may hold is stopped at 256, and another source is
/// still relayed at once. Without the default the first source would hold
/// every permit and the second would wait in the backlog until the first
/// let go (30 s here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_one_source_cannot_take_the_whole_connection_budget() {
    const BUDGET: usize = 300;
    let pki = Pki::new(&["app.example.com"]);
    let backend = tls_echo_backend(&pki).await;
    let relay = Relay::start(&format!(
        "[global]\nmax_connections = {BUDGET}\n{}",
        simple_config(
            &["app.example.com"],
            backend,
            "client_hello_timeout = \"30s\""
        )
    ))
    .await;

    let mut hogs = Vec::new();
    for _ in 0..BUDGET {
        hogs.push(connect_from(ip("127.0.0.2"), relay.addr()).await.unwrap());
    }
    let refused = relay
        .wait_matching(BUDGET - 256, |l| closed_with(l, "limit_concurrent"))
        .await;
    assert!(refused.iter().all(|l| from_source(l, "127.0.0.2")));

    let mut took = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        served(
            &pki,
            connect_from(ip("127.0.0.3"), relay.addr()).await.unwrap(),
        )
        .await;
        took.push(started.elapsed());
    }
    took.sort();
    println!("second source: handshake and echo, median {:?}", took[2]);
    let refusals = relay
        .closed_lines()
        .into_iter()
        .filter(|l| closed_with(l, "limit_concurrent"))
        .count();
    assert_eq!(
        refusals,
        BUDGET - 256,
        "exactly 256 admitted from the first source"
    );
    drop(hogs);
}
