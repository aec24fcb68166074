//! Per-route admission end to end (issue 15, point 6): `max_connections`
//! and `[route.limits]` on a `[[route]]`, decided once the ClientHello names
//! the route; `rate_counts_refused`; and per-source counts kept across a
//! reload (SIGHUP) that lowers the limits. Clients replay captured hellos
//! (`curl.bin` names curl.example.com, `openssl_sni.bin` www.example.com)
//! from distinct loopback sources to the real relay, whose tagged backends
//! count what reached them.

use crate::common;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;

use common::*;
use serde_json::Value;
use tokio::net::TcpStream;

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

const CURL: &str = "curl.bin";
const WWW: &str = "openssl_sni.bin";

/// Listener `tls` with route `curl` (curl.example.com → backend `a`, with
/// `curl_extra` in its table) and route `www` (www.example.com → `b`, with
/// `www_extra`); `listener_extra` goes in the listener's table.
fn config(
    a: SocketAddr,
    b: SocketAddr,
    listener_extra: &str,
    curl_extra: &str,
    www_extra: &str,
) -> String {
    format!(
        r#"
[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]
{listener_extra}

[[route]]
name = "curl"
sni = ["curl.example.com"]
backend = "a"
{curl_extra}

[[route]]
name = "www"
sni = ["www.example.com"]
backend = "b"
{www_extra}

[backend.a]
addresses = ["{a}"]

[backend.b]
addresses = ["{b}"]
"#
    )
}

struct Setup {
    relay: Relay,
    reached_a: Arc<AtomicUsize>,
    reached_b: Arc<AtomicUsize>,
}

async fn setup(listener_extra: &str, curl_extra: &str, www_extra: &str) -> Setup {
    let (a, reached_a) = tagged_backend("A").await;
    let (b, reached_b) = tagged_backend("B").await;
    let relay = Relay::start(&config(a, b, listener_extra, curl_extra, www_extra)).await;
    Setup {
        relay,
        reached_a,
        reached_b,
    }
}

/// A hello from `from` that the relay must forward (the backend's tag comes back).
async fn relayed(relay: &Relay, from: &str, hello: &str, tag: &[u8]) -> TcpStream {
    let (stream, back) = replay_hello_from(ip(from), relay.addr(), hello).await;
    assert_eq!(back.as_deref(), Some(tag), "{hello} from {from} is relayed");
    stream
}

/// A hello from `from` that the relay must refuse with `reason` on `route`:
/// the connection is closed without a byte (no alert), and the log line
/// names the reason, the route and the SNI the hello carried.
async fn refused(relay: &Relay, from: &str, hello: &str, reason: &str, route: &str) -> Value {
    let (stream, back) = replay_hello_from(ip(from), relay.addr(), hello).await;
    assert_eq!(
        back, None,
        "{hello} from {from} is refused, without an alert"
    );
    let line = relay.closed_line(stream.local_addr().unwrap()).await;
    assert_eq!(line["close"], reason, "{line}");
    assert_eq!(line["route"], route, "{line}");
    assert!(line["sni"].is_string(), "the hello was read: {line}");
    assert!(
        line["backend.addr"].is_null(),
        "no backend was dialled: {line}"
    );
    assert_eq!(line["bytes.up"], 0, "nothing forwarded: {line}");
    line
}

/// Closes `stream` and waits for its `done` line: its slots are free.
async fn close(relay: &Relay, stream: TcpStream) {
    let peer = stream.local_addr().unwrap();
    drop(stream);
    let line = relay.closed_line(peer).await;
    assert_eq!(line["close"], "done", "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_route_refuses_with_route_full_and_forwards_nothing() {
    let s = setup("", "max_connections = 2", "").await;
    let relay = &s.relay;
    let one = relayed(relay, "127.0.0.2", CURL, b"A").await;
    let _two = relayed(relay, "127.0.0.3", CURL, b"A").await;
    // Any source: the cap is the route's total.
    refused(relay, "127.0.0.4", CURL, "route_full", "curl").await;
    refused(relay, "127.0.0.2", CURL, "route_full", "curl").await;
    assert_eq!(s.reached_a.load(Ordering::SeqCst), 2);
    // Another route of the listener is not affected.
    let _www = relayed(relay, "127.0.0.4", WWW, b"B").await;
    assert_eq!(s.reached_b.load(Ordering::SeqCst), 1);
    // A connection that ends frees its place.
    close(relay, one).await;
    let _three = relayed(relay, "127.0.0.4", CURL, b"A").await;
    refused(relay, "127.0.0.5", CURL, "route_full", "curl").await;
    assert_eq!(s.reached_a.load(Ordering::SeqCst), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_limits_apply_per_source_within_the_route() {
    let s = setup(
        "",
        "[route.limits]\nconnections_per_source = 1\ndeny = [\"127.0.0.9\"]",
        "",
    )
    .await;
    let relay = &s.relay;
    let held = relayed(relay, "127.0.0.2", CURL, b"A").await;
    refused(relay, "127.0.0.2", CURL, "route_limit_concurrent", "curl").await;
    // Another source has a budget of its own on the route...
    let _other = relayed(relay, "127.0.0.3", CURL, b"A").await;
    // ...and the same source is not limited on another route.
    let _www = relayed(relay, "127.0.0.2", WWW, b"B").await;
    // The route's deny list: refused after the hello, on this route only.
    refused(relay, "127.0.0.9", CURL, "route_denied", "curl").await;
    let _www9 = relayed(relay, "127.0.0.9", WWW, b"B").await;
    assert_eq!(s.reached_a.load(Ordering::SeqCst), 2);
    assert_eq!(s.reached_b.load(Ordering::SeqCst), 2);
    close(relay, held).await;
    let _again = relayed(relay, "127.0.0.2", CURL, b"A").await;
    assert_eq!(s.reached_a.load(Ordering::SeqCst), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_rate_refuses_past_its_burst_with_route_limit_rate() {
    let s = setup(
        "",
        "[route.limits]\nconnection_rate_per_source = 1\nconnection_burst_per_source = 2",
        "",
    )
    .await;
    let relay = &s.relay;
    // Stopped while the clients connect and send, so all three reach the
    // route within milliseconds of each other however slow this machine is.
    relay.signal("STOP");
    let mut sent = Vec::new();
    for _ in 0..3 {
        let mut stream = connect_from(ip("127.0.0.6"), relay.addr()).await.unwrap();
        stream.write_all(&capture(CURL)).await.unwrap();
        sent.push(stream);
    }
    relay.signal("CONT");
    let mut refused = Vec::new();
    for stream in &mut sent {
        if relay_outcome(stream).await.is_none() {
            refused.push(relay.closed_line(stream.local_addr().unwrap()).await);
        }
    }
    assert_eq!(
        refused.len(),
        1,
        "two of three within the burst: {refused:?}"
    );
    assert_eq!(refused[0]["close"], "route_limit_rate");
    assert_eq!(refused[0]["route"], "curl");
    assert_eq!(refused[0]["bytes.up"], 0);
    assert_eq!(s.reached_a.load(Ordering::SeqCst), 2);
}

/// `rate_counts_refused`: a client retrying faster than the rate. Both
/// routes allow 1 new connection per second per source, burst 1; only
/// `curl` counts refused attempts. Attempts at about 0 s (admitted on
/// both), 0.6 s (refused on both) and 1.2 s: the plain route admits the
/// third (a second has passed since the first), the counting one refuses
/// it (less than a second since the refused second). A run whose timing
/// this machine stretched out of those windows is played again from
/// another source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_counts_refused_keeps_a_source_that_retries_too_fast_refused() {
    let rate = "[route.limits]\nconnection_rate_per_source = 1\nconnection_burst_per_source = 1";
    let s = setup("", &format!("{rate}\nrate_counts_refused = true"), rate).await;
    let relay = &s.relay;
    for source in ["127.0.0.7", "127.0.0.8", "127.0.0.10"] {
        let first = Instant::now();
        let _a = relayed(relay, source, CURL, b"A").await;
        let _b = relayed(relay, source, WWW, b"B").await;
        tokio::time::sleep(Duration::from_millis(600)).await;
        let second = Instant::now();
        refused(relay, source, CURL, "route_limit_rate", "curl").await;
        refused(relay, source, WWW, "route_limit_rate", "www").await;
        tokio::time::sleep(Duration::from_millis(600)).await;
        let third = Instant::now();
        let (mut curl, curl_back) = replay_hello_from(ip(source), relay.addr(), CURL).await;
        let (_www, www_back) = replay_hello_from(ip(source), relay.addr(), WWW).await;
        let done = Instant::now();
        let in_windows = second - first < Duration::from_millis(900)
            && third - first > Duration::from_millis(1100)
            && done - second < Duration::from_millis(900);
        if !in_windows {
            eprintln!("timing out of its windows from {source}; again");
            continue;
        }
        assert_eq!(www_back.as_deref(), Some(&b"B"[..]), "plain GCRA admits");
        assert_eq!(curl_back, None, "refused attempts counted");
        let line = relay.closed_line(curl.local_addr().unwrap()).await;
        assert_eq!(line["close"], "route_limit_rate");
        let _ = curl.shutdown().await;
        return;
    }
    panic!("three runs out of their timing windows");
}

// ------------------------------------------------------------- reloads

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_lowers_the_listener_limit_keeps_open_connections_counted() {
    let (a, reached_a) = tagged_backend("A").await;
    let (b, _) = tagged_backend("B").await;
    let text = |cap: u32| {
        config(
            a,
            b,
            &format!("[listener.limits]\nconnections_per_source = {cap}"),
            "",
            "",
        )
    };
    let relay = Relay::start(&text(5)).await;
    let mut held = Vec::new();
    for _ in 0..5 {
        held.push(relayed(&relay, "127.0.0.2", CURL, b"A").await);
    }
    let reload = relay.reload(&text(3), 1).await;
    assert_eq!(reload["message"], "reload applied", "{reload}");
    // 5 open, cap 3: refused, as before the reload, not admitted afresh.
    let (stream, back) = replay_hello_from(ip("127.0.0.2"), relay.addr(), CURL).await;
    assert_eq!(back, None);
    let line = relay.closed_line(stream.local_addr().unwrap()).await;
    assert_eq!(line["close"], "limit_concurrent", "{line}");
    let _other = relayed(&relay, "127.0.0.3", CURL, b"A").await;
    // Down to 2 open: one more fits under 3, and no more.
    for stream in held.drain(..3) {
        close(&relay, stream).await;
    }
    let _third = relayed(&relay, "127.0.0.2", CURL, b"A").await;
    let (stream, back) = replay_hello_from(ip("127.0.0.2"), relay.addr(), CURL).await;
    assert_eq!(back, None);
    let line = relay.closed_line(stream.local_addr().unwrap()).await;
    assert_eq!(line["close"], "limit_concurrent", "{line}");
    assert_eq!(reached_a.load(Ordering::SeqCst), 7);
    // The connections open across the reload were never drained.
    assert!(relay.closed_lines().iter().all(|l| l["close"] != "drained"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_lowers_route_limits_keeps_open_connections_counted() {
    let (a, reached_a) = tagged_backend("A").await;
    let (b, _) = tagged_backend("B").await;
    let text = |max: u32, per_source: u32| {
        config(
            a,
            b,
            "",
            &format!(
                "max_connections = {max}\n[route.limits]\nconnections_per_source = {per_source}"
            ),
            "",
        )
    };
    let relay = Relay::start(&text(3, 3)).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(relayed(&relay, "127.0.0.2", CURL, b"A").await);
    }
    let reload = relay.reload(&text(2, 1), 1).await;
    assert_eq!(reload["message"], "reload applied", "{reload}");
    // The source's 3 still count against its new cap of 1, and the
    // route's 3 against its new total of 2.
    refused(&relay, "127.0.0.2", CURL, "route_limit_concurrent", "curl").await;
    refused(&relay, "127.0.0.3", CURL, "route_full", "curl").await;
    for stream in held.drain(..2) {
        close(&relay, stream).await;
    }
    // 1 open: the route has room for one more, from another source.
    refused(&relay, "127.0.0.2", CURL, "route_limit_concurrent", "curl").await;
    let _other = relayed(&relay, "127.0.0.3", CURL, b"A").await;
    refused(&relay, "127.0.0.4", CURL, "route_full", "curl").await;
    assert_eq!(reached_a.load(Ordering::SeqCst), 4);
    assert!(relay.closed_lines().iter().all(|l| l["close"] != "drained"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_dry_run_logs_what_it_would_refuse_and_relays_it() {
    let s = setup(
        "",
        "[route.limits]\nconnections_per_source = 1\ndry_run = true",
        "",
    )
    .await;
    let relay = &s.relay;
    let _one = relayed(relay, "127.0.0.2", CURL, b"A").await;
    let _two = relayed(relay, "127.0.0.2", CURL, b"A").await;
    let line = relay
        .wait_log(|l| l["message"] == "dry run: admission would refuse this connection")
        .await;
    assert_eq!(line["would_refuse"], "route_limit_concurrent", "{line}");
    assert_eq!(line["route"], "curl", "{line}");
    assert_eq!(s.reached_a.load(Ordering::SeqCst), 2);
}

/// Behind a trusted peer relay, a route's per-source limits count the
/// client each PROXY header claims, not the peer (as the listener's do).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_trusted_peer_route_limits_count_the_claimed_client() {
    use snirelay::proxy::outbound::{self, Announcement, Outbound};
    let s = setup(
        "[listener.proxy_protocol]\ntrusted = [\"127.0.0.0/8\"]\nmode = \"require\"",
        "[route.limits]\nconnections_per_source = 1",
        "",
    )
    .await;
    let relay = &s.relay;
    let from_peer = |client: &'static str| async move {
        let announcement = Announcement::new(
            client.parse().unwrap(),
            "192.0.2.1:443".parse().unwrap(),
            None,
            None,
            1,
        );
        let mut bytes = outbound::header(Outbound::V2, false, &announcement).unwrap();
        bytes.extend(capture(CURL));
        let mut stream = connect_from(ip("127.0.0.2"), relay.addr()).await.unwrap();
        stream.write_all(&bytes).await.unwrap();
        let back = relay_outcome(&mut stream).await;
        (stream, back)
    };
    let (_one, back) = from_peer("203.0.113.9:5000").await;
    assert_eq!(back.as_deref(), Some(&b"A"[..]));
    let (_two, back) = from_peer("203.0.113.10:5000").await;
    assert_eq!(
        back.as_deref(),
        Some(&b"A"[..]),
        "another client, same peer"
    );
    let (three, back) = from_peer("203.0.113.9:5001").await;
    assert_eq!(back, None);
    let line = relay.closed_line(three.local_addr().unwrap()).await;
    assert_eq!(line["close"], "route_limit_concurrent", "{line}");
    assert_eq!(line["client.claimed"], "203.0.113.9:5001", "{line}");
    assert_eq!(s.reached_a.load(Ordering::SeqCst), 2);
}

/// `rate_counts_refused` on `[listener.limits]`: the same client retrying
/// too fast (about 0 s, 0.6 s, 1.2 s) at two listeners allowing 1 new
/// connection per second per source, burst 1; only `counting` counts
/// refused attempts, so only it refuses the third (closed unread, as
/// `limit_rate`). Replayed from another source when this machine
/// stretched the timing out of its windows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_rate_counts_refused_keeps_a_source_that_retries_too_fast_refused() {
    let (a, reached) = tagged_backend("A").await;
    let listener = |name: &str, counts: bool| {
        format!(
            "[[listener]]\nname = {name:?}\nlisten = [\"127.0.0.1:0\"]\n\
             [listener.limits]\nconnection_rate_per_source = 1\n\
             connection_burst_per_source = 1\nrate_counts_refused = {counts}\n\
             [[route]]\nlistener = {name:?}\nsni = [\"curl.example.com\"]\nbackend = \"a\"\n"
        )
    };
    let text = format!(
        "{}{}[backend.a]\naddresses = [\"{a}\"]\n",
        listener("tls", false),
        listener("counting", true)
    );
    let relay = Relay::start(&text).await;
    let (plain, counting) = (relay.addr_of("tls"), relay.addr_of("counting"));
    let attempt = |source: &'static str, to: SocketAddr| async move {
        replay_hello_from(ip(source), to, CURL).await
    };
    for source in ["127.0.0.11", "127.0.0.12", "127.0.0.13"] {
        let before = reached.load(Ordering::SeqCst);
        let first = Instant::now();
        assert!(attempt(source, plain).await.1.is_some());
        assert!(attempt(source, counting).await.1.is_some());
        tokio::time::sleep(Duration::from_millis(600)).await;
        let second = Instant::now();
        assert!(attempt(source, plain).await.1.is_none());
        assert!(attempt(source, counting).await.1.is_none());
        tokio::time::sleep(Duration::from_millis(600)).await;
        let third = Instant::now();
        let (_plain, plain_back) = attempt(source, plain).await;
        let (counted, counted_back) = attempt(source, counting).await;
        let done = Instant::now();
        if second - first >= Duration::from_millis(900)
            || third - first <= Duration::from_millis(1100)
            || done - second >= Duration::from_millis(900)
        {
            eprintln!("timing out of its windows from {source}; again");
            continue;
        }
        assert_eq!(plain_back.as_deref(), Some(&b"A"[..]), "plain GCRA admits");
        assert_eq!(counted_back, None, "refused attempts counted");
        let line = relay.closed_line(counted.local_addr().unwrap()).await;
        assert_eq!(line["close"], "limit_rate", "{line}");
        assert_eq!(line["listener"], "counting", "{line}");
        assert!(line["sni"].is_null(), "closed unread: {line}");
        assert_eq!(
            reached.load(Ordering::SeqCst),
            before + 3,
            "the two first attempts and the plain third reached the backend"
        );
        return;
    }
    panic!("three runs out of their timing windows");
}
