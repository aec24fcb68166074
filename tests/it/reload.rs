//! Live reload (SIGHUP) through a real relay process: what changes is
//! drained over `drain_timeout`, what does not is never touched, and no
//! connection is refused while reloading.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use tokio::io::AsyncReadExt;

/// When the relay wrote a log line, by its own clock.
fn log_time(line: &serde_json::Value) -> std::time::SystemTime {
    humantime::parse_rfc3339(line["timestamp"].as_str().unwrap()).unwrap()
}

/// Reads until the relay closes the session; returns when it did.
async fn closed_at<S: tokio::io::AsyncRead + Unpin>(mut stream: S) -> Instant {
    let mut sink = [0u8; 1024];
    loop {
        match stream.read(&mut sink).await {
            Ok(0) | Err(_) => return Instant::now(),
            Ok(_) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_file_is_rejected_by_name_and_routing_goes_on() {
    let pki = Pki::new(NAMES);
    let r = tls_echo_backend(&pki).await;
    let s = tls_echo_backend(&pki).await;
    let good = two_routes(r, s, "");
    let relay = Relay::start(&good).await;
    let mut session = echo_session(&pki, relay.addr(), "r.example.com")
        .await
        .unwrap();

    let bad = good.replace("drain_timeout = \"2s\"", "drain_timeout = \"soon\"");
    let line = relay.reload(&bad, 1).await;
    assert_eq!(
        line["message"],
        "reload rejected; still serving the previous configuration"
    );
    let error = line["error"].as_str().unwrap();
    assert!(error.contains("global.drain_timeout"), "{error}");
    assert!(error.contains("\"soon\""), "{error}");
    assert_eq!(line["reloads.failed"], 1);

    // A bind that fails rejects the whole reload, including its other changes.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_addr = taken.local_addr().unwrap();
    let binds_taken = two_routes(r, s, "")
        .replace("drain_timeout = \"2s\"", "drain_timeout = \"3s\"")
        + &format!(
            "[[listener]]\nname = \"extra\"\nlisten = [\"{taken_addr}\"]\n\n[[route]]\nlistener = \"extra\"\nsni = [\"r.example.com\"]\nbackend = \"r\"\n"
        );
    let line = relay.reload(&binds_taken, 2).await;
    let error = line["error"].as_str().unwrap();
    assert!(
        error.contains("\"extra\"") && error.contains(&taken_addr.to_string()),
        "{error}"
    );
    assert_eq!(line["reloads.failed"], 2);

    // Still routing, old sessions and new ones alike.
    echo_once(&mut session, b"after two rejected reloads")
        .await
        .unwrap();
    echo_session(&pki, relay.addr(), "s.example.com")
        .await
        .unwrap();
    // And a valid file after that applies.
    let line = relay.reload(&good, 3).await;
    assert_eq!(line["message"], "reload applied");
    assert_eq!(line["reloads.failed"], 2);
    assert_eq!(line["connections.drained"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_changed_route_drains_and_its_closes_are_spread_over_drain_timeout() {
    let _heavy = common::HEAVY.lock().await;
    let pki = Pki::new(NAMES);
    let r = tls_echo_backend(&pki).await;
    let s1 = tls_echo_backend(&pki).await;
    let s2 = tls_echo_backend(&pki).await;
    let relay = Relay::start(&two_routes(r, s1, "")).await;

    let mut on_r = echo_session(&pki, relay.addr(), "r.example.com")
        .await
        .unwrap();
    let on_r_peer = on_r.get_ref().0.local_addr().unwrap();
    let on_s = echo_session(&pki, relay.addr(), "s.example.com")
        .await
        .unwrap();
    let on_s_peer = on_s.get_ref().0.local_addr().unwrap();

    // Change only route s (its backend's address).
    let started = Instant::now();
    let line = relay.reload(&two_routes(r, s2, ""), 1).await;
    assert_eq!(line["message"], "reload applied");
    assert_eq!(line["routes.changed"], 1);
    assert_eq!(line["backends.changed"], "s");
    assert_eq!(line["connections.drained"], 1);
    let s_closed = closed_at(on_s).await;
    assert!(s_closed - started < Duration::from_millis(2500));
    assert_eq!(relay.closed_line(on_s_peer).await["close"], "drained");
    // New connections to s reach the new backend.
    echo_session(&pki, relay.addr(), "s.example.com")
        .await
        .unwrap();
    // R is untouched: still relaying, never closed.
    echo_once(&mut on_r, b"r lives on").await.unwrap();
    assert!(
        !relay
            .closed_lines()
            .iter()
            .any(|l| l["client.peer"] == on_r_peer.to_string().as_str())
    );

    // Now remove route r: all of its 51 sessions drain within 2 s, spread out.
    let mut sessions = vec![on_r];
    for _ in 0..50 {
        sessions.push(
            echo_session(&pki, relay.addr(), "r.example.com")
                .await
                .unwrap(),
        );
    }
    let peers: Vec<String> = sessions
        .iter()
        .map(|s| s.get_ref().0.local_addr().unwrap().to_string())
        .collect();
    let watchers: Vec<_> = sessions
        .into_iter()
        .map(|s| tokio::spawn(closed_at(s)))
        .collect();
    let without_r = two_routes(r, s2, "").replace(
        "[[route]]\nname = \"r\"\nlistener = \"tls\"\nsni = [\"r.example.com\", \"app.example.com\"]\nbackend = \"r\"\n",
        "",
    );
    assert!(!without_r.contains("name = \"r\""));
    let started = Instant::now();
    let line = relay.reload(&without_r, 2).await;
    assert_eq!(line["message"], "reload applied");
    assert_eq!(line["routes.removed"], 2, "{line}");
    let list = line["routes.list"].as_str().unwrap();
    assert!(
        list.contains("-tls:r.example.com") && list.contains("-tls:app.example.com"),
        "{list}"
    );
    assert_eq!(line["connections.drained"], 51);
    // Client side: each session ends, within the window (the margin covers
    // signal delivery and scheduling on a busy machine).
    for watcher in watchers {
        let closed = watcher.await.unwrap() - started;
        assert!(closed < Duration::from_secs(3), "closed after {closed:?}");
    }
    // Relay side, from its own clock: the drain fired just before `reload
    // applied` was logged, so every close is within 2 s of that line, and
    // the closes are spread, not bunched.
    let applied = log_time(&line);
    let mut offsets = Vec::new();
    for peer in &peers {
        let closed = relay.closed_line(peer.parse().unwrap()).await;
        assert_eq!(closed["close"], "drained");
        assert_eq!(closed["route"], "r");
        let at = log_time(&closed);
        offsets.push(at.duration_since(applied).unwrap_or_default());
    }
    let first = *offsets.iter().min().unwrap();
    let last = *offsets.iter().max().unwrap();
    eprintln!("drain closes from {first:?} to {last:?} after the reload");
    assert!(last < Duration::from_secs(2), "last close after {last:?}");
    assert!(
        last - first > Duration::from_millis(100),
        "all 51 closed within {:?}",
        last - first
    );
    // The name is now unrouted.
    let tcp = tokio::net::TcpStream::connect(relay.addr()).await.unwrap();
    assert!(
        tls_connect(pki.client_config(), "r.example.com", tcp)
            .await
            .is_err()
    );
}

/// Replaces the relay's config file with a FIFO that nobody writes to:
/// opening it blocks until a writer comes, which here is never.
fn config_becomes_a_fifo(relay: &Relay) {
    std::fs::remove_file(&relay.config_path).unwrap();
    let status = std::process::Command::new("mkfifo")
        .arg(&relay.config_path)
        .status()
        .expect("mkfifo (coreutils) is required for this test");
    assert!(status.success());
}

fn rejected(line: &serde_json::Value) -> bool {
    line["message"] == "reload rejected; still serving the previous configuration"
}

/// A reload whose file never answers is refused after the read timeout,
/// with a message that says why; the relay relays throughout (on one
/// thread, where a blocking read would stop everything), refuses a second
/// reload while the first read is stuck instead of stranding another
/// thread, and still stops at once on SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_file_that_never_answers_cannot_stall_the_relay() {
    let pki = Pki::new(NAMES);
    let r = tls_echo_backend(&pki).await;
    let s = tls_echo_backend(&pki).await;
    let one_thread = two_routes(r, s, "").replacen("[global]\n", "[global]\nthreads = 1\n", 1);
    let relay = Relay::start(&one_thread).await;
    config_becomes_a_fifo(&relay);

    relay.signal("HUP");
    // The read is blocked in the kernel; the event loop is not.
    echo_session(&pki, relay.addr(), "r.example.com")
        .await
        .expect("relayed while the reload's read is blocked");
    let line = relay.wait_nth(1, rejected).await;
    let error = line["error"].as_str().unwrap();
    assert!(
        error.contains("reading did not finish within 5s") && error.contains("FIFO"),
        "{error}"
    );

    // The first read is still stuck: a second reload does not start another.
    relay.signal("HUP");
    let line = relay.wait_nth(2, rejected).await;
    let error = line["error"].as_str().unwrap();
    assert!(
        error.contains("an earlier read of the file has not finished"),
        "{error}"
    );
    echo_session(&pki, relay.addr(), "s.example.com")
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_blocked_reload_read_stops_the_relay() {
    let pki = Pki::new(NAMES);
    let r = tls_echo_backend(&pki).await;
    let s = tls_echo_backend(&pki).await;
    let mut relay = Relay::start(&two_routes(r, s, "")).await;
    config_becomes_a_fifo(&relay);
    relay.signal("HUP");
    relay.signal("TERM");
    assert_eq!(relay.wait_exit().await, Some(0));
    let lines = relay.log_lines();
    assert!(
        lines.iter().any(|l| l["message"] == "stopped"),
        "{lines:#?}"
    );
    assert!(
        !lines.iter().any(rejected),
        "the read had not timed out yet"
    );
}
