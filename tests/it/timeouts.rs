//! The relay's timeouts and how a relayed connection ends (issue 15, points
//! 2 and 9), through the real binary on loopback: `half_close_timeout`,
//! `max_connection_lifetime`, per-route overrides, and a reset after a
//! peer's FIN that ends as `done` while a reset that cuts data stays
//! `backend_reset`. Each test asserts the close reason and what reached the
//! backend.

use crate::common;

use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// Reads until the relay closes the connection (EOF or reset), within
/// [`WAIT`]; returns what arrived.
async fn read_until_closed(stream: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(WAIT, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return got,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => panic!("connection still open after {WAIT:?}"),
        }
    }
}

/// A backend that reads to EOF, reports what it read, and then keeps its
/// side open and silent: it never closes.
async fn never_closing_backend() -> (std::net::SocketAddr, mpsc::UnboundedReceiver<Vec<u8>>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let addr = raw_backend(move |mut stream| {
        let tx = tx.clone();
        async move {
            let mut got = Vec::new();
            let _ = stream.read_to_end(&mut got).await;
            let _ = tx.send(got);
            // Holds the socket open, sending nothing, until the test ends.
            std::future::pending::<()>().await;
        }
    })
    .await;
    (addr, rx)
}

/// A backend that records what it reads per connection until the
/// connection ends (EOF or reset), sending nothing.
async fn recording_backend() -> (std::net::SocketAddr, mpsc::UnboundedReceiver<Vec<u8>>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let addr = raw_backend(move |mut stream| {
        let tx = tx.clone();
        async move {
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while let Ok(n) = stream.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
            let _ = tx.send(got);
        }
    })
    .await;
    (addr, rx)
}

async fn next<T>(rx: &mut mpsc::UnboundedReceiver<T>) -> T {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("the backend reported nothing in time")
        .expect("the backend is gone")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_closed_connection_is_closed_at_the_half_close_timeout() {
    let (backend, mut seen) = never_closing_backend().await;
    let relay = Relay::start(&simple_config(
        &["www.example.com"],
        backend,
        "idle_timeout = \"1h\"\nhalf_close_timeout = \"1s\"",
    ))
    .await;
    let hello = capture("openssl_sni.bin");
    let mut client = TcpStream::connect(relay.addr()).await.unwrap();
    let local = client.local_addr().unwrap();
    client.write_all(&hello).await.unwrap();
    client.write_all(b"request").await.unwrap();
    client.shutdown().await.unwrap();

    // The client's FIN reached the backend after all its bytes...
    let mut expected = hello.clone();
    expected.extend_from_slice(b"request");
    assert_eq!(next(&mut seen).await, expected);
    // ...and the backend, which never answers nor closes, is given
    // half_close_timeout, not the hour of idle_timeout.
    assert!(read_until_closed(&mut client).await.is_empty());
    let line = relay.closed_line(local).await;
    assert_eq!(line["close"], "half_close_timeout");
    assert_eq!(line["level"], "INFO");
    assert_eq!(line["bytes.up"], expected.len() as u64);
    assert_eq!(line["bytes.down"], 0);
    assert!(line["duration_ms"].as_u64().unwrap() >= 1000, "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_idle_timeout_applies_to_that_route_only() {
    let (backend, mut seen) = recording_backend().await;
    let config = format!(
        r#"
[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]
idle_timeout = "1h"

[[route]]
name = "short"
sni = ["short.example.com"]
backend = "b"
idle_timeout = "1s"

[[route]]
name = "long"
sni = ["long.example.com"]
backend = "b"

[backend.b]
addresses = ["{backend}"]
"#
    );
    let relay = Relay::start(&config).await;
    // A hello is random per call: each is made once and compared as sent.
    let (long_hello, short_hello) = (
        hello_for("long.example.com"),
        hello_for("short.example.com"),
    );
    let mut long = TcpStream::connect(relay.addr()).await.unwrap();
    let long_local = long.local_addr().unwrap();
    let mut short = TcpStream::connect(relay.addr()).await.unwrap();
    let short_local = short.local_addr().unwrap();
    long.write_all(&long_hello).await.unwrap();
    short.write_all(&short_hello).await.unwrap();

    // The short route's connection idles out at its own 1 s.
    assert!(read_until_closed(&mut short).await.is_empty());
    let line = relay.closed_line(short_local).await;
    assert_eq!(line["close"], "idle_timeout");
    assert_eq!(line["route"], "short");
    assert_eq!(next(&mut seen).await, short_hello);

    // The long route's connection, as quiet for as long, is still relayed.
    long.write_all(b"still here").await.unwrap();
    long.shutdown().await.unwrap();
    assert!(read_until_closed(&mut long).await.is_empty());
    let mut expected = long_hello;
    expected.extend_from_slice(b"still here");
    assert_eq!(next(&mut seen).await, expected);
    let line = relay.closed_line(long_local).await;
    assert_eq!(line["close"], "done");
    assert_eq!(line["route"], "long");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chatty_connection_is_closed_at_its_lifetime_and_a_route_may_turn_it_off() {
    let (backend, mut seen) = recording_backend().await;
    let config = format!(
        r#"
[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]
max_connection_lifetime = "1s"

[[route]]
name = "limited"
sni = ["limited.example.com"]
backend = "b"

[[route]]
name = "unlimited"
sni = ["unlimited.example.com"]
backend = "b"
max_connection_lifetime = false

[backend.b]
addresses = ["{backend}"]
"#
    );
    let relay = Relay::start(&config).await;
    // A hello is random per call: each is made once and compared as sent.
    let (free_hello, chatty_hello) = (
        hello_for("unlimited.example.com"),
        hello_for("limited.example.com"),
    );
    let mut free = TcpStream::connect(relay.addr()).await.unwrap();
    let free_local = free.local_addr().unwrap();
    free.write_all(&free_hello).await.unwrap();
    let mut chatty = TcpStream::connect(relay.addr()).await.unwrap();
    let local = chatty.local_addr().unwrap();
    chatty.write_all(&chatty_hello).await.unwrap();

    // Never idle: a few bytes every 50 ms until the relay closes it.
    let mut sent = 0u64;
    let mut ticks = tokio::time::interval(Duration::from_millis(50));
    for _ in 0..(WAIT.as_millis() / 50) {
        ticks.tick().await;
        if chatty.write_all(b"tick").await.is_err() {
            break;
        }
        sent += 4;
        let mut probe = [0u8; 1];
        match tokio::time::timeout(Duration::ZERO, chatty.read(&mut probe)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            _ => {}
        }
    }
    let line = relay.closed_line(local).await;
    assert_eq!(line["close"], "max_lifetime");
    assert_eq!(line["level"], "INFO");
    assert_eq!(line["route"], "limited");
    // Closed within its jitter window: never before 90 % of the lifetime.
    assert!(line["duration_ms"].as_u64().unwrap() >= 900, "{line}");
    let got = next(&mut seen).await;
    assert!(got.starts_with(&chatty_hello));
    assert!(got.ends_with(b"tick"));
    assert!(got.len() as u64 <= chatty_hello.len() as u64 + sent);

    // The route that turns the lifetime off keeps its connection past it.
    free.write_all(b"after the lifetime").await.unwrap();
    free.shutdown().await.unwrap();
    assert!(read_until_closed(&mut free).await.is_empty());
    let mut expected = free_hello;
    expected.extend_from_slice(b"after the lifetime");
    assert_eq!(next(&mut seen).await, expected);
    let line = relay.closed_line(free_local).await;
    assert_eq!(line["close"], "done");
    assert!(line["duration_ms"].as_u64().unwrap() >= 900, "{line}");
}

/// Point 9: a backend that sends its response and FIN, and resets when the
/// client's late bytes (its TLS close_notify) reach its closed socket. The
/// exchange was complete, so every such connection ends as `done` at INFO.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_after_the_backends_fin_and_full_delivery_ends_as_done() {
    const ROUNDS: usize = 10;
    let hello = capture("openssl_sni.bin");
    let (tx, mut reset_sent) = mpsc::unbounded_channel();
    let (seen_tx, mut seen) = mpsc::unbounded_channel();
    let hello_len = hello.len();
    let backend = raw_backend(move |mut stream| {
        let (tx, seen_tx) = (tx.clone(), seen_tx.clone());
        async move {
            let mut got = vec![0u8; hello_len];
            stream.read_exact(&mut got).await.unwrap();
            stream.write_all(b"response").await.unwrap();
            stream.shutdown().await.unwrap();
            // The client's first late bytes: then the socket goes away
            // with a reset, as a closed socket's kernel answers more data.
            let mut late = [0u8; 64];
            let n = stream.read(&mut late).await.unwrap();
            got.extend_from_slice(&late[..n]);
            reset(stream);
            seen_tx.send(got).unwrap();
            tx.send(()).unwrap();
        }
    })
    .await;
    let relay = Relay::start(&simple_config(&["www.example.com"], backend, "")).await;

    for _ in 0..ROUNDS {
        let mut client = TcpStream::connect(relay.addr()).await.unwrap();
        let local = client.local_addr().unwrap();
        client.write_all(&hello).await.unwrap();
        let mut answer = Vec::new();
        tokio::time::timeout(WAIT, client.read_to_end(&mut answer))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(answer, b"response");
        client.write_all(b"close_notify").await.unwrap();
        tokio::time::timeout(WAIT, reset_sent.recv())
            .await
            .unwrap()
            .unwrap();
        // Written by the relay to a socket that has reset.
        client.write_all(b"more").await.unwrap();
        let _ = client.shutdown().await;

        let line = relay.closed_line(local).await;
        assert_eq!(line["close"], "done", "{line}");
        assert_eq!(line["level"], "INFO");
        assert_eq!(line["bytes.down"], 8);
        let mut expected = hello.clone();
        expected.extend_from_slice(b"close_notify");
        assert_eq!(next(&mut seen).await, expected);
    }
    assert!(
        relay
            .closed_lines()
            .iter()
            .all(|l| l["close"] == "done" && l["level"] == "INFO"),
        "{:?}",
        relay.closed_lines()
    );
}

/// Point 9, as seen with nginx: the client's close_notify (and FIN) reach
/// the backend before it closes its socket, so it closes with them unread
/// and its kernel sends a reset instead of a FIN. The client had finished
/// and everything the backend sent was delivered: `done` at INFO.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_closing_with_the_clients_last_bytes_unread_ends_as_done() {
    use tokio::io::Interest;
    const ROUNDS: usize = 10;
    let hello = capture("openssl_sni.bin");
    let hello_len = hello.len();
    let backend = raw_backend(move |mut stream| async move {
        let mut got = vec![0u8; hello_len];
        stream.read_exact(&mut got).await.unwrap();
        stream.write_all(b"response").await.unwrap();
        // Waits, reading nothing, until the client's FIN has arrived behind
        // its last bytes; then closes with those bytes unread.
        for _ in 0..100 {
            let ready = stream.ready(Interest::READABLE).await.unwrap();
            if ready.is_read_closed() {
                break;
            }
            // Clears readiness without reading, to wait for the next event.
            let _ = stream.try_io(Interest::READABLE, || {
                Err::<(), _>(std::io::ErrorKind::WouldBlock.into())
            });
        }
        drop(stream);
    })
    .await;
    let relay = Relay::start(&simple_config(&["www.example.com"], backend, "")).await;

    for _ in 0..ROUNDS {
        let mut client = TcpStream::connect(relay.addr()).await.unwrap();
        let local = client.local_addr().unwrap();
        client.write_all(&hello).await.unwrap();
        let mut answer = [0u8; 8];
        tokio::time::timeout(WAIT, client.read_exact(&mut answer))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&answer, b"response");
        client.write_all(b"close_notify").await.unwrap();
        client.shutdown().await.unwrap();
        assert!(read_until_closed(&mut client).await.is_empty());

        let line = relay.closed_line(local).await;
        assert_eq!(line["close"], "done", "{line}");
        assert_eq!(line["level"], "INFO");
        assert_eq!(line["bytes.down"], 8);
        assert_eq!(line["bytes.up"], (hello_len + 12) as u64);
    }
}

/// The control: a backend that resets in the middle of its response, before
/// any FIN, cuts data, and that stays `backend_reset` at WARN.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_before_the_backends_fin_stays_backend_reset() {
    let hello = capture("openssl_sni.bin");
    let (seen_tx, mut seen) = mpsc::unbounded_channel();
    let hello_len = hello.len();
    let backend = raw_backend(move |mut stream| {
        let seen_tx = seen_tx.clone();
        async move {
            let mut got = vec![0u8; hello_len];
            stream.read_exact(&mut got).await.unwrap();
            stream.write_all(b"half a resp").await.unwrap();
            reset(stream);
            seen_tx.send(got).unwrap();
        }
    })
    .await;
    let relay = Relay::start(&simple_config(&["www.example.com"], backend, "")).await;
    let mut client = TcpStream::connect(relay.addr()).await.unwrap();
    let local = client.local_addr().unwrap();
    client.write_all(&hello).await.unwrap();
    let got = read_until_closed(&mut client).await;
    assert!(b"half a resp".starts_with(&got), "{got:?}");

    let line = relay.closed_line(local).await;
    assert_eq!(line["close"], "backend_reset");
    assert_eq!(line["level"], "WARN");
    assert_eq!(next(&mut seen).await, hello);
}

/// A reload that changes only a route's timeouts drains nothing: open
/// connections keep the timeouts they started with, new ones get the new.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_of_route_timeouts_applies_to_new_connections_only() {
    let hello = capture("openssl_sni.bin");
    let hello_len = hello.len();
    // Reports each connection's hello as it arrives, then all it read.
    let (tx, mut seen) = mpsc::unbounded_channel();
    let backend = raw_backend(move |mut stream| {
        let tx = tx.clone();
        async move {
            let mut got = vec![0u8; hello_len];
            stream.read_exact(&mut got).await.unwrap();
            tx.send(got.clone()).unwrap();
            let _ = stream.read_to_end(&mut got).await;
            tx.send(got).unwrap();
        }
    })
    .await;
    let config = |route_idle: &str| {
        format!(
            r#"
[global]
drain_timeout = "1s"

[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]

[[route]]
name = "r"
sni = ["www.example.com"]
backend = "b"
idle_timeout = "{route_idle}"

[backend.b]
addresses = ["{backend}"]
"#
        )
    };
    let relay = Relay::start(&config("1h")).await;
    let mut before = TcpStream::connect(relay.addr()).await.unwrap();
    let before_local = before.local_addr().unwrap();
    before.write_all(&hello).await.unwrap();
    // Its hello reached the backend: it runs on the first generation.
    assert_eq!(next(&mut seen).await, hello);

    let line = relay.reload(&config("1s"), 1).await;
    assert_eq!(line["message"], "reload applied", "{line}");
    let mut after = TcpStream::connect(relay.addr()).await.unwrap();
    let after_local = after.local_addr().unwrap();
    after.write_all(&hello).await.unwrap();
    assert_eq!(next(&mut seen).await, hello);
    assert!(read_until_closed(&mut after).await.is_empty());
    assert_eq!(next(&mut seen).await, hello);
    let line = relay.closed_line(after_local).await;
    assert_eq!(line["close"], "idle_timeout");
    assert!(line["duration_ms"].as_u64().unwrap() >= 1000, "{line}");

    // Quiet as long and past the drain window, the older connection is
    // still relayed: it was neither drained nor given the new timeout.
    before.write_all(b"still here").await.unwrap();
    before.shutdown().await.unwrap();
    assert!(read_until_closed(&mut before).await.is_empty());
    let line = relay.closed_line(before_local).await;
    assert_eq!(line["close"], "done");
    let mut expected = hello;
    expected.extend_from_slice(b"still here");
    assert_eq!(next(&mut seen).await, expected);
}
