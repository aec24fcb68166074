//! Bandwidth limits end to end (issue 33, point 3): `rate_down` per
//! connection and `rate_per_source_down` shared by one source's
//! connections, through the real relay on loopback, with the throttled
//! time counted in `snirelay_throttled_seconds_total`. No speed claims: a
//! limited transfer is only held to its correctness bound (N bytes at R
//! bytes per second with a burst B take at least (N − B) / R), and an
//! unlimited route beside it to getting every byte with no throttled time.

use crate::common;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Clock slack allowed against the bound: the relay and the test read
/// different clocks, and a timer may fire a tick early in the test's view.
const SLACK: Duration = Duration::from_millis(100);

/// A backend that sends `bytes` bytes as soon as a client connects, then
/// FIN, and reads whatever comes.
async fn sending_backend(bytes: usize) -> SocketAddr {
    raw_backend(move |mut stream| async move {
        let payload = vec![0x5a; bytes];
        let _ = stream.write_all(&payload).await;
        let _ = stream.shutdown().await;
        let mut sink = Vec::new();
        let _ = stream.read_to_end(&mut sink).await;
    })
    .await
}

/// Listener `tls` with an admin listener; route `slow` (www.example.com)
/// with `slow` keys, route `fast` (curl.example.com) with none.
fn config(slow_backend: SocketAddr, fast_backend: SocketAddr, slow: &str) -> String {
    format!(
        r#"
[admin]
listen = "127.0.0.1:0"

[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]
[listener.limits]
connections_per_source = false

[[route]]
name = "slow"
sni = ["www.example.com"]
backend = "slow"
{slow}

[[route]]
name = "fast"
sni = ["curl.example.com"]
backend = "fast"

[backend.slow]
addresses = ["{slow_backend}"]

[backend.fast]
addresses = ["{fast_backend}"]
"#
    )
}

/// Connects from `from`, replays `hello` and reads to the end: the bytes
/// read, how long from connect to the end, and the client's address.
async fn download(from: IpAddr, relay: SocketAddr, hello: &[u8]) -> (usize, Duration, SocketAddr) {
    let started = Instant::now();
    let mut client = connect_from(from, relay).await.unwrap();
    let local = client.local_addr().unwrap();
    client.write_all(hello).await.unwrap();
    let mut got = Vec::new();
    client.read_to_end(&mut got).await.unwrap();
    (got.len(), started.elapsed(), local)
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

/// (N − B) / R, less the slack.
fn bound(bytes: usize, burst: usize, rate: usize) -> Duration {
    Duration::from_secs_f64((bytes - burst) as f64 / rate as f64).saturating_sub(SLACK)
}

async fn throttled(admin: SocketAddr, route: &str, direction: &str) -> f64 {
    common::metric_now(
        admin,
        &format!(
            "snirelay_throttled_seconds_total{{listener=\"tls\",route=\"{route}\",direction=\"{direction}\"}}"
        ),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_connection_keeps_to_its_rate_and_an_unlimited_route_is_not_throttled() {
    const BYTES: usize = 300_000;
    const RATE: usize = 200_000;
    const BURST: usize = 20_000;
    let slow = sending_backend(BYTES).await;
    let fast = sending_backend(BYTES).await;
    let relay = Relay::start(&config(
        slow,
        fast,
        &format!("rate_down = {RATE}\nburst = {BURST}"),
    ))
    .await;
    let admin = relay.admin_addr().await;
    // Shown at zero before any traffic; the unlimited route has no series.
    assert_eq!(throttled(admin, "slow", "down").await, 0.0);

    let localhost = ip("127.0.0.1");
    let (got, took, client) = download(localhost, relay.addr(), &capture("openssl_sni.bin")).await;
    assert_eq!(got, BYTES);
    let floor = bound(BYTES, BURST, RATE);
    assert!(
        took >= floor,
        "{BYTES} bytes at {RATE} B/s in {took:?} (< {floor:?})"
    );
    let waited = throttled(admin, "slow", "down").await;
    assert!(waited > 0.0, "no throttled time counted");
    // The client → backend direction moved only the hello: never waited.
    assert_eq!(throttled(admin, "slow", "up").await, 0.0);
    // The access line says how long the download waited; not the upload.
    let line = relay.closed_line(client).await;
    assert!(line["throttled_ms.down"].as_u64().unwrap() > 0, "{line}");
    assert!(line.get("throttled_ms.up").is_none(), "{line}");

    // The unlimited route on the same relay: every byte, no bucket.
    let (got, _, client) = download(localhost, relay.addr(), &capture("curl.bin")).await;
    assert_eq!(got, BYTES);
    let line = relay.closed_line(client).await;
    assert_eq!(line["route"], "fast");
    assert!(line.get("throttled_ms.down").is_none(), "{line}");
    let (_, text) = http_get(admin, "/metrics").await;
    assert!(
        !text.contains("route=\"fast\",direction="),
        "the unlimited route has a throttle series"
    );
    // The slow route's count did not move with the fast transfer.
    assert_eq!(throttled(admin, "slow", "down").await, waited);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_sources_connections_share_its_bucket_and_another_source_has_its_own() {
    const BYTES: usize = 150_000;
    const RATE: usize = 200_000;
    const BURST: usize = 20_000;
    let slow = sending_backend(BYTES).await;
    let fast = sending_backend(BYTES).await;
    let relay = Relay::start(&config(
        slow,
        fast,
        &format!("rate_per_source_down = {RATE}\nburst = {BURST}"),
    ))
    .await;
    let admin = relay.admin_addr().await;
    let hello = capture("openssl_sni.bin");

    // Two connections of 127.0.0.2 and one of 127.0.0.3 at once.
    let started = Instant::now();
    let (a, b, other) = tokio::join!(
        download(ip("127.0.0.2"), relay.addr(), &hello),
        download(ip("127.0.0.2"), relay.addr(), &hello),
        download(ip("127.0.0.3"), relay.addr(), &hello),
    );
    assert_eq!((a.0, b.0, other.0), (BYTES, BYTES, BYTES));
    // Their sum went through one bucket: 2N bytes at R.
    let pair = a.1.max(b.1);
    let floor = bound(2 * BYTES, BURST, RATE);
    assert!(
        pair >= floor,
        "two connections of one source moved {} bytes in {pair:?} (< {floor:?})",
        2 * BYTES
    );
    // The other source had a bucket of its own (N bytes at R, not a
    // third of a shared one): it too keeps to its bound, and got all.
    let alone = bound(BYTES, BURST, RATE);
    assert!(other.1 >= alone, "{:?} < {alone:?}", other.1);
    assert!(started.elapsed() >= floor);
    assert!(throttled(admin, "slow", "down").await > 0.0);
}

#[tokio::test]
async fn bandwidth_keys_are_refused_on_a_quic_listener() {
    let text = r#"
[[listener]]
name = "quic"
listen = ["127.0.0.1:8443"]
protocol = "quic"
rate_down = 1000000

[[route]]
name = "app"
sni = ["example.com"]
backend = "b"
rate_per_source_up = 500000

[backend.b]
addresses = ["127.0.0.1:9443"]
"#;
    let error = snirelay::config::Config::from_toml(text, std::path::Path::new("quic.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("listener[0].rate_down: is a TCP setting"),
        "{error}"
    );
    assert!(
        error.contains(
            "route[0].rate_per_source_up: is a TCP setting (bandwidth limits pace a byte stream"
        ),
        "{error}"
    );
}

#[test]
fn a_routes_keys_replace_its_listeners_one_by_one() {
    let text = r#"
[[listener]]
name = "tls"
listen = ["127.0.0.1:8443"]
rate_up = 1000000
rate_down = 2000000
rate_per_source_down = 8000000
burst = 100000

[[route]]
name = "inherits"
sni = ["a.example.com"]
backend = "b"

[[route]]
name = "own"
sni = ["b.example.com"]
backend = "b"
rate_down = false
rate_per_source_down = 4000000
burst = 50000

[backend.b]
addresses = ["127.0.0.1:9443"]
"#;
    let config = snirelay::config::Config::from_toml(text, std::path::Path::new("bw.toml"))
        .unwrap_or_else(|e| panic!("{e}"));
    let listener = &config.listeners[0];
    let rate = |r: Option<snirelay::config::ByteRate>| {
        r.map(|r| (r.bytes_per_second.get(), r.burst.get()))
    };
    let inherits = &listener.routes[0].bandwidth;
    assert_eq!(rate(inherits.up), Some((1_000_000, 100_000)));
    assert_eq!(rate(inherits.down), Some((2_000_000, 100_000)));
    assert_eq!(rate(inherits.per_source_down), Some((8_000_000, 100_000)));
    assert_eq!(rate(inherits.per_source_up), None);
    assert!(!inherits.own_per_source);
    let own = &listener.routes[1].bandwidth;
    assert_eq!(rate(own.up), Some((1_000_000, 50_000)));
    assert_eq!(rate(own.down), None);
    assert_eq!(rate(own.per_source_down), Some((4_000_000, 50_000)));
    assert!(own.own_per_source);
    // Without `burst`, each bucket holds one second of its rate.
    let text = text
        .replace("burst = 100000\n", "")
        .replace("burst = 50000\n", "");
    let config = snirelay::config::Config::from_toml(&text, std::path::Path::new("bw.toml"))
        .unwrap_or_else(|e| panic!("{e}"));
    let inherits = &config.listeners[0].routes[0].bandwidth;
    assert_eq!(rate(inherits.down), Some((2_000_000, 2_000_000)));
}

/// A backend that reads everything, then sends how many bytes it read
/// (as text) and FIN.
async fn counting_backend() -> SocketAddr {
    raw_backend(|mut stream| async move {
        let mut got = Vec::new();
        let _ = stream.read_to_end(&mut got).await;
        let _ = stream.write_all(got.len().to_string().as_bytes()).await;
        let _ = stream.shutdown().await;
    })
    .await
}

// The userspace copy path (`splice = false`) and the client → backend
// direction keep to the same bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_through_the_copy_path_keeps_to_its_rate() {
    const BYTES: usize = 300_000;
    const RATE: usize = 200_000;
    const BURST: usize = 20_000;
    let slow = counting_backend().await;
    let fast = counting_backend().await;
    let relay = Relay::start(&format!(
        "[global]\nsplice = false\n{}",
        config(slow, fast, &format!("rate_up = {RATE}\nburst = {BURST}"))
    ))
    .await;
    let admin = relay.admin_addr().await;
    let hello = capture("openssl_sni.bin");
    let started = Instant::now();
    let mut client = connect_from(ip("127.0.0.1"), relay.addr()).await.unwrap();
    client.write_all(&hello).await.unwrap();
    client.write_all(&vec![0x5a; BYTES]).await.unwrap();
    client.shutdown().await.unwrap();
    let mut answer = String::new();
    client.read_to_string(&mut answer).await.unwrap();
    let took = started.elapsed();
    assert_eq!(answer, (hello.len() + BYTES).to_string());
    let floor = bound(BYTES, BURST, RATE);
    assert!(
        took >= floor,
        "{BYTES} bytes at {RATE} B/s in {took:?} (< {floor:?})"
    );
    assert!(throttled(admin, "slow", "up").await > 0.0);
    assert_eq!(throttled(admin, "slow", "down").await, 0.0);
}

// A reload that lifts the limit applies to new connections; an open one
// keeps the buckets it started with (as HAProxy's filters do).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_reload_open_connections_keep_their_limit_and_new_ones_take_the_new() {
    const BYTES: usize = 500_000;
    const RATE: usize = 200_000;
    const BURST: usize = 20_000;
    let slow = sending_backend(BYTES).await;
    let fast = sending_backend(BYTES).await;
    let relay = Relay::start(&config(
        slow,
        fast,
        &format!("rate_down = {RATE}\nburst = {BURST}"),
    ))
    .await;
    let admin = relay.admin_addr().await;
    let hello = capture("openssl_sni.bin");
    let relay_addr = relay.addr();
    let open = {
        let hello = hello.clone();
        tokio::spawn(async move { download(ip("127.0.0.1"), relay_addr, &hello).await })
    };
    // The open connection is relaying (it has waited for tokens) before
    // the reload.
    let deadline = Instant::now() + WAIT;
    while throttled(admin, "slow", "down").await == 0.0 {
        assert!(Instant::now() < deadline, "the download never waited");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let line = relay.reload(&config(slow, fast, ""), 1).await;
    assert_eq!(line["message"], "reload applied");

    // A new connection on the route: no limit now.
    let (got, _, client) = download(ip("127.0.0.1"), relay.addr(), &hello).await;
    assert_eq!(got, BYTES);
    let line = relay.closed_line(client).await;
    assert!(line.get("throttled_ms.down").is_none(), "{line}");

    // The open one kept its bucket to the end.
    let (got, took, client) = open.await.unwrap();
    assert_eq!(got, BYTES);
    let floor = bound(BYTES, BURST, RATE);
    assert!(
        took >= floor,
        "{BYTES} bytes at {RATE} B/s in {took:?} (< {floor:?})"
    );
    let line = relay.closed_line(client).await;
    assert!(line["throttled_ms.down"].as_u64().unwrap() > 0, "{line}");
}
