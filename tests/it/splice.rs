//! The splice relay path and its footprint, through the real binary:
//! idle connections hold exactly their two sockets (no pipe, no buffer),
//! pipes go back to the pool after a burst, a full pool and `splice = false`
//! fall back to the userspace copy with the same contract, and the new
//! settings are validated by name.

use crate::common;

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use common::*;
use snirelay::config::Config;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The relay's open descriptors by kind: sockets, and pipes other than its
/// stderr (which the harness reads through a pipe).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fds {
    sockets: usize,
    pipes: HashSet<String>,
}

fn fds(pid: u32) -> Fds {
    let mut sockets = 0;
    let mut pipes = HashSet::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name() == "2" {
            continue;
        }
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue; // closed while we looked
        };
        let target = target.to_string_lossy().into_owned();
        if target.starts_with("socket:") {
            sockets += 1;
        } else if target.starts_with("pipe:") {
            pipes.insert(target);
        }
    }
    Fds { sockets, pipes }
}

/// Polls `probe` until `done` holds, up to `WAIT`. Pipes go back to the pool
/// a moment after the last byte is delivered (when the relay next sees
/// EAGAIN), and nothing in the relay's output marks that moment.
async fn eventually<T: std::fmt::Debug>(probe: impl Fn() -> T, done: impl Fn(&T) -> bool) -> T {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let value = probe();
        if done(&value) || tokio::time::Instant::now() >= deadline {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A plain TCP backend that echoes everything back.
async fn echo_backend() -> std::net::SocketAddr {
    raw_backend(|mut stream| async move {
        let (mut read, mut write) = stream.split();
        let _ = tokio::io::copy(&mut read, &mut write).await;
        let _ = write.shutdown().await;
    })
    .await
}

fn with_global(global: &str, config: String) -> String {
    format!("[global]\n{global}\n{config}")
}

async fn echo_once(stream: &mut TcpStream, message: &[u8]) {
    stream.write_all(message).await.unwrap();
    let mut back = vec![0u8; message.len()];
    stream.read_exact(&mut back).await.unwrap();
    assert!(back == message, "echo corrupted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_hold_two_descriptors_and_pipes_return_to_the_pool() {
    const CONNECTIONS: usize = 200;
    let backend = echo_backend().await;
    let relay = Relay::start(&with_global(
        "threads = 1",
        simple_config(&["www.example.com"], backend, ""),
    ))
    .await;
    // Pipes the process had before any traffic (inherited ones, the
    // runtime's own) are not the pool's.
    let before = fds(relay.pid());
    let pool_pipes =
        |f: &Fds| -> HashSet<String> { f.pipes.difference(&before.pipes).cloned().collect() };

    let hello = capture("openssl_sni.bin");
    let payload = vec![0x5a; 64 * 1024];
    let mut clients = Vec::new();
    for _ in 0..CONNECTIONS {
        let mut client = TcpStream::connect(relay.addr()).await.unwrap();
        echo_once(&mut client, &hello).await;
        echo_once(&mut client, &payload).await;
        clients.push(client);
    }
    // Every connection moved 64 KiB each way through a pipe; now all are
    // quiet. Each holds its client and backend socket and nothing else.
    let idle = eventually(
        || fds(relay.pid()),
        |f| f.sockets == before.sockets + 2 * CONNECTIONS && pool_pipes(f).len() <= 4,
    )
    .await;
    let idle_pipes = pool_pipes(&idle);
    assert_eq!(idle.sockets, before.sockets + 2 * CONNECTIONS, "{idle:?}");
    // One worker thread moved the bursts one connection at a time, so only a
    // couple of pipes (counted by inode; each is two descriptors) were ever
    // leased at once, however many connections used them.
    assert!(
        !idle_pipes.is_empty() && idle_pipes.len() <= 4,
        "pipe descriptors after traffic on {CONNECTIONS} connections: {idle_pipes:?}"
    );

    // A second round on every connection reuses the pooled pipes: the very
    // same pipe inodes, no new ones.
    for client in &mut clients {
        echo_once(client, &payload).await;
    }
    let again = eventually(
        || fds(relay.pid()),
        |f| f.sockets == idle.sockets && pool_pipes(f).is_subset(&idle_pipes),
    )
    .await;
    assert_eq!(again.sockets, idle.sockets);
    let again_pipes = pool_pipes(&again);
    assert!(
        again_pipes.is_subset(&idle_pipes),
        "new pipes were opened: before {idle_pipes:?}, after {again_pipes:?}"
    );

    drop(clients);
    let closed = eventually(|| fds(relay.pid()), |f| f.sockets == before.sockets).await;
    assert_eq!(closed.sockets, before.sockets, "sockets leaked");
}

/// Uploads 1 MiB and half-closes; the backend reads to EOF, answers with
/// 1 MiB and closes. Checks the bytes and the log line's counts.
async fn bulk_with_half_close(relay: &Relay) {
    const SIZE: usize = 1 << 20;
    let mut client = TcpStream::connect(relay.addr()).await.unwrap();
    let local = client.local_addr().unwrap();
    let hello = capture("openssl_sni.bin");
    let upload: Vec<u8> = (0..SIZE).map(|i| (i * 7 % 251) as u8).collect();
    client.write_all(&hello).await.unwrap();
    let (mut read, mut write) = client.split();
    let send = async {
        write.write_all(&upload).await.unwrap();
        write.shutdown().await.unwrap();
    };
    let receive = async {
        let mut got = Vec::new();
        read.read_to_end(&mut got).await.unwrap();
        got
    };
    let ((), got) = tokio::join!(send, receive);
    let expected: Vec<u8> = (0..SIZE).map(|i| (i * 13 % 253) as u8).collect();
    assert!(got == expected, "download corrupted ({} bytes)", got.len());
    let line = relay.closed_line(local).await;
    assert_eq!(line["close"], "done");
    assert_eq!(line["bytes.up"], (hello.len() + SIZE) as u64);
    assert_eq!(line["bytes.down"], SIZE as u64);
}

/// Reads to EOF (the client's FIN), checks the upload, answers, closes.
async fn bulk_backend() -> std::net::SocketAddr {
    raw_backend(|mut stream| async move {
        const SIZE: usize = 1 << 20;
        let hello_len = capture("openssl_sni.bin").len();
        let mut got = Vec::new();
        stream.read_to_end(&mut got).await.unwrap();
        let upload: Vec<u8> = (0..SIZE).map(|i| (i * 7 % 251) as u8).collect();
        assert!(got[hello_len..] == upload[..], "upload corrupted");
        let answer: Vec<u8> = (0..SIZE).map(|i| (i * 13 % 253) as u8).collect();
        stream.write_all(&answer).await.unwrap();
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn userspace_copy_keeps_the_relay_contract_when_splice_is_off() {
    let backend = bulk_backend().await;
    let relay = Relay::start(&simple_config(
        &["www.example.com"],
        backend,
        "splice = false",
    ))
    .await;
    bulk_with_half_close(&relay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn splice_keeps_the_relay_contract_and_a_full_pool_falls_back() {
    let backend = bulk_backend().await;
    // One pipe for the whole process: concurrent bursts must copy through
    // userspace instead of waiting for it.
    let relay = Relay::start(&with_global(
        "max_pipes = 1\npipe_size = 16384",
        simple_config(&["www.example.com"], backend, "splice = true"),
    ))
    .await;
    let inherited = fds(relay.pid()).pipes;
    for _ in 0..3 {
        bulk_with_half_close(&relay).await;
    }
    tokio::join!(
        bulk_with_half_close(&relay),
        bulk_with_half_close(&relay),
        bulk_with_half_close(&relay),
        bulk_with_half_close(&relay),
    );
    let pool = || -> HashSet<String> {
        fds(relay.pid())
            .pipes
            .difference(&inherited)
            .cloned()
            .collect()
    };
    let pipes = eventually(pool, |p| p.len() == 1).await;
    assert_eq!(pipes.len(), 1, "max_pipes = 1, yet: {pipes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_setting_serves_and_the_descriptor_limit_is_raised() {
    let backend = echo_backend().await;
    let relay = Relay::start(&with_global(
        "threads = 3",
        simple_config(&["www.example.com"], backend, ""),
    ))
    .await;
    let limit = relay
        .wait_log(|l| l["message"] == "descriptor limit (RLIMIT_NOFILE)")
        .await;
    assert_eq!(limit["soft"], limit["hard"]);
    let hello = capture("openssl_sni.bin");
    for _ in 0..30 {
        let mut client = TcpStream::connect(relay.addr()).await.unwrap();
        echo_once(&mut client, &hello).await;
    }
}

#[test]
fn relay_settings_are_validated_by_name() {
    let base = simple_config(&["a.example"], "127.0.0.1:1".parse().unwrap(), "");
    let problems = |global: &str| -> String {
        match Config::from_toml(&with_global(global, base.clone()), Path::new("t.toml")) {
            Ok(_) => panic!("{global:?} was accepted"),
            Err(e) => e.to_string(),
        }
    };
    let e = problems("pipe_size = 100");
    assert!(e.contains("global.pipe_size: 100 is out of range"), "{e}");
    let e = problems("threads = 0");
    assert!(e.contains("global.threads: 0 is out of range"), "{e}");
    let e = problems("max_pipes = 0");
    assert!(e.contains("global.max_pipes: 0 is out of range"), "{e}");
    let e = problems("splice = \"yes\"");
    assert!(e.contains("splice"), "{e}");

    let config = Config::from_toml(&base, Path::new("t.toml")).unwrap();
    assert!(config.listeners[0].splice, "splice is the default");
    assert_eq!(config.global.pipe_size, snirelay::config::DEFAULT_PIPE_SIZE);
    assert_eq!(config.global.threads, snirelay::config::default_threads());
    let off = with_global(
        "splice = false",
        simple_config(
            &["a.example"],
            "127.0.0.1:1".parse().unwrap(),
            "splice = true",
        ),
    );
    let config = Config::from_toml(&off, Path::new("t.toml")).unwrap();
    assert!(config.listeners[0].splice, "the listener's setting wins");
}
