//! Hostile clients against the real relay process: slow-loris connections,
//! oversized hellos, and descriptor exhaustion (at accept, and at a backend
//! connect, which must not count against the backend's health).

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn served(pki: &Pki, relay: SocketAddr) {
    let stream = TcpStream::connect(relay).await.unwrap();
    let mut tls = tls_connect(pki.client_config(), "app.example.com", stream)
        .await
        .expect("mutual TLS handshake through the relay");
    tls.write_all(b"ping").await.unwrap();
    let mut back = [0u8; 4];
    tls.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"ping");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_slow_loris_connections_do_not_stop_a_real_client() {
    const LORISES: usize = 500;
    let pki = Pki::new(&["app.example.com"]);
    let backend = tls_echo_backend(&pki).await;
    let relay = Relay::start(&simple_config(
        &["app.example.com"],
        backend,
        // One source plays every loris and the real client: per-source
        // limits (on by default) would refuse them before the hello stage.
        &format!("client_hello_timeout = \"3s\"\n{NO_SOURCE_LIMIT}"),
    ))
    .await;

    let mut lorises = Vec::new();
    for _ in 0..LORISES {
        let mut stream = TcpStream::connect(relay.addr()).await.unwrap();
        // A TLS record header's first three bytes, then nothing.
        stream.write_all(&[0x16, 0x03, 0x01]).await.unwrap();
        lorises.push(stream);
    }
    wait_until("the relay to accept every loris", || {
        accept_queue_len(relay.addr()) == 0
    })
    .await;

    served(&pki, relay.addr()).await;
    assert!(
        !relay
            .closed_lines()
            .iter()
            .any(|l| l["close"] == "hello_timeout"),
        "the real client was served while all lorises were still held"
    );

    // Each loris is closed at the hello timeout, not before and not never.
    let timeouts = relay
        .wait_matching(LORISES, |l| {
            l["message"] == "connection closed" && l["close"] == "hello_timeout"
        })
        .await;
    assert_eq!(timeouts.len(), LORISES);
    for line in &timeouts {
        let ms = line["duration_ms"].as_u64().unwrap();
        assert!((3000..8000).contains(&ms), "closed after {ms} ms");
    }
    for mut loris in lorises {
        let mut buf = [0u8; 8];
        let n = tokio::time::timeout(WAIT, loris.read(&mut buf))
            .await
            .unwrap();
        assert!(matches!(n, Ok(0) | Err(_)), "loris got bytes: {n:?}");
    }
}

/// A ClientHello whose handshake header announces a 400-byte body, sent one
/// handshake byte per TLS record, so it cannot complete within 512 bytes.
fn one_byte_records(total: usize) -> Vec<u8> {
    let message = [0x01, 0x00, 0x01, 0x90]
        .into_iter()
        .chain(std::iter::repeat(0x42));
    let mut bytes = Vec::new();
    for byte in message {
        bytes.extend_from_slice(&[0x16, 0x03, 0x01, 0x00, 0x01, byte]);
        if bytes.len() >= total {
            break;
        }
    }
    bytes.truncate(total);
    bytes
}

async fn close_reason(relay: &Relay, bytes: &[u8]) -> String {
    let mut client = TcpStream::connect(relay.addr()).await.unwrap();
    let peer = client.local_addr().unwrap();
    let _ = client.write_all(bytes).await;
    let line = relay.closed_line(peer).await;
    line["close"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_hellos_close_as_too_large_at_the_cap() {
    let relay = Relay::start(&simple_config(
        &["app.example.com"],
        closed_port(),
        "max_client_hello_bytes = 512\nclient_hello_timeout = \"1s\"",
    ))
    .await;

    // One record whose handshake header announces 100,000 bytes: refused on
    // the header, without waiting for the body.
    let announce = [0x16, 0x03, 0x01, 0x00, 0x04, 0x01, 0x01, 0x86, 0xa0];
    assert_eq!(close_reason(&relay, &announce).await, "too_large");

    // A record longer than the cap.
    let long_record = [0x16, 0x03, 0x01, 0x02, 0x01, 0x01, 0x00, 0x01, 0xfc];
    assert_eq!(close_reason(&relay, &long_record).await, "too_large");

    // Many small records: one byte short of the cap is still waiting (and
    // so times out); exactly the cap is refused, and so is far more.
    assert_eq!(
        close_reason(&relay, &one_byte_records(511)).await,
        "hello_timeout"
    );
    assert_eq!(
        close_reason(&relay, &one_byte_records(512)).await,
        "too_large"
    );
    assert_eq!(
        close_reason(&relay, &one_byte_records(64 * 1024)).await,
        "too_large"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_descriptors_the_relay_backs_off_without_spinning_and_recovers() {
    const CLIENTS: usize = 400;
    let pki = Pki::new(&["app.example.com"]);
    let backend = tls_echo_backend(&pki).await;
    let relay = Relay::start(&simple_config(
        &["app.example.com"],
        backend,
        &format!("client_hello_timeout = \"30s\"\n{NO_SOURCE_LIMIT}"),
    ))
    .await;
    set_nofile(relay.pid(), 256, 256);

    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(TcpStream::connect(relay.addr()).await.unwrap());
    }
    relay
        .wait_log(|l| l["message"] == "accept failed for lack of resources; backing off")
        .await;
    assert!(relay.open_fds() <= 256);

    // Held at the limit for two seconds, the relay must sit nearly idle: a
    // loop retrying accept at once would burn a whole core (200 ticks).
    let before = cpu_ticks(relay.pid());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let used = cpu_ticks(relay.pid()) - before;
    assert!(
        used <= 20,
        "relay used {used} ticks of CPU in 2 s while out of descriptors"
    );

    drop(clients);
    served(&pki, relay.addr()).await;
    relay.wait_log(|l| l["message"] == "accepting again").await;
}

/// The lowest descriptor limit that leaves `pid` exactly one free
/// descriptor number: an accept then takes it, and the next socket(2) fails
/// with EMFILE.
fn limit_leaving_one_descriptor(pid: u32) -> u64 {
    let used: std::collections::BTreeSet<u64> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_str().unwrap().parse().unwrap())
        .collect();
    // Descriptors are handed out lowest first: a limit just above the
    // lowest free number leaves that one alone.
    (0..).find(|fd| !used.contains(fd)).unwrap() + 1
}

fn set_nofile(pid: u32, soft: u64, hard: u64) {
    let status = std::process::Command::new("prlimit")
        .args([
            "--pid",
            &pid.to_string(),
            &format!("--nofile={soft}:{hard}"),
        ])
        .status()
        .expect("prlimit (util-linux) is required for this test");
    assert!(status.success());
}

/// A backend connect that fails on the relay's own host (here socket(2)
/// answering EMFILE; in the field, no free local port toward the address)
/// closes that connection `connect_failed`, but the backend was never
/// asked: with `max_fails = 1` it must not be marked down, and the next
/// connection is served as soon as the descriptor comes back.
#[tokio::test]
async fn a_connect_that_fails_on_the_relay_host_does_not_mark_the_backend_down() {
    let pki = Pki::new(&["app.example.com"]);
    let backend = tls_echo_backend(&pki).await;
    let relay = Relay::start(&one_route_config(
        &["app.example.com", "www.example.com"],
        NO_SOURCE_LIMIT,
        &format!(
            "addresses = [\"{backend}\"]\nconnect_timeout = \"2s\"\nmax_fails = 1\nfail_backoff = \"60s\""
        ),
    ))
    .await;
    // Served before, so every descriptor the relay keeps is open already;
    // its close line is written once both of its sockets are closed.
    served(&pki, relay.addr()).await;
    relay.wait_log(|l| l["close"].is_string()).await;
    let pid = relay.pid();
    let hard: u64 = std::fs::read_to_string(format!("/proc/{pid}/limits"))
        .unwrap()
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(4).map(|v| v.parse().unwrap()))
        .unwrap();
    set_nofile(pid, limit_leaving_one_descriptor(pid), hard);

    // The captured hello names www.example.com: accepted, read, routed,
    // and then the backend socket cannot be opened.
    assert_eq!(
        close_reason(&relay, &capture("openssl_sni.bin")).await,
        "connect_failed"
    );

    set_nofile(pid, hard, hard);
    served(&pki, relay.addr()).await;
    let marked = relay
        .log_lines()
        .into_iter()
        .filter(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("backend address marked down"))
        })
        .collect::<Vec<_>>();
    assert!(marked.is_empty(), "the backend was blamed: {marked:?}");
}
