//! The relay process's own CPU per ClientHello, over real loopback sockets,
//! for the ways a client can cut a cap-filling hello:
//!
//! - `whole`: full-size records, written at once;
//! - `segments`: full-size records, written 1 to 64 bytes per write;
//! - `one_byte_records`: one handshake byte per record, each record its
//!   own write (and so its own segment: TCP_NODELAY), as fast as the
//!   client can;
//! - `one_byte_paced`: the same, with a 100 µs pause after each write, so
//!   that a relay which keeps up reads every segment on its own (the worst
//!   case for a relay that re-parses what it holds at every read);
//!
//! at the default cap (`max_client_hello_bytes` = 16 KiB) and the largest
//! (256 KiB). Each connection sends its hello to a relay (one worker
//! thread) routing it to an in-process backend, which answers one byte once
//! the whole hello has been replayed to it; the client reads that byte and
//! closes. The relay's CPU is the sum of its threads' run time
//! (/proc/PID/task/*/schedstat, nanoseconds) over a batch of connections,
//! divided by the batch; each case is measured `runs` times and the median
//! printed, with its ratio to `whole` at the same cap. Connection set-up,
//! routing, connecting and the replay are in every case alike, so the
//! differences are the hello's reading.
//!
//! Run: `cargo bench --bench hello_cpu`. Environment: `SNIRELAY_BIN` (a
//! relay binary to measure instead of this checkout's, e.g. an older
//! build, for a before/after), `HELLO_CPU_RUNS` (default 5),
//! `HELLO_CPU_SCALE` (multiplies the connections per batch, default 1).

// The integration tests' harness: the relay as a child process on port 0.
#[path = "../tests/it/common/mod.rs"]
mod common;
#[path = "support/hello.rs"]
mod hello;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const NAME: &str = "bench.example.com";

/// The relay's CPU time so far: the sum over its threads.
fn cpu(pid: u32) -> Duration {
    let mut total = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let path = task.unwrap().path().join("schedstat");
        // A thread may have ended since the listing.
        if let Ok(stat) = std::fs::read_to_string(path) {
            total += stat
                .split_whitespace()
                .next()
                .unwrap()
                .parse::<u64>()
                .unwrap();
        }
    }
    Duration::from_nanos(total)
}

struct Case {
    name: &'static str,
    stream: Vec<u8>,
    writes: Vec<usize>,
    /// Connections per measured batch.
    batch: usize,
    /// A pause after each write.
    pace: Option<Duration>,
}

fn cases(cap: usize, scale: usize) -> Vec<Case> {
    let whole = hello::stream(NAME, cap, 16 * 1024);
    let trickle = hello::stream(NAME, cap, 1);
    let small = cap <= 16 * 1024;
    vec![
        Case {
            name: "whole",
            writes: vec![whole.len()],
            stream: whole.clone(),
            batch: scale * if small { 200 } else { 50 },
            pace: None,
        },
        Case {
            name: "segments",
            writes: hello::segment_sizes(whole.len()),
            stream: whole,
            batch: scale * if small { 50 } else { 8 },
            pace: None,
        },
        Case {
            name: "one_byte_records",
            writes: vec![6; trickle.len().div_ceil(6)],
            stream: trickle.clone(),
            batch: scale * if small { 20 } else { 3 },
            pace: None,
        },
        Case {
            name: "one_byte_paced",
            writes: vec![6; trickle.len().div_ceil(6)],
            stream: trickle,
            batch: scale * if small { 3 } else { 1 },
            pace: Some(Duration::from_micros(100)),
        },
    ]
}

/// One connection: the hello written as `case` says, then the backend's
/// one-byte answer read (so the relay has read, routed and replayed all).
async fn one(relay: std::net::SocketAddr, case: &Case) {
    let mut client = TcpStream::connect(relay).await.unwrap();
    client.set_nodelay(true).unwrap();
    let mut at = 0;
    for &n in &case.writes {
        client.write_all(&case.stream[at..at + n]).await.unwrap();
        at += n;
        if let Some(pace) = case.pace {
            // A blocking sleep: tokio's timer is 1 ms coarse, and nothing
            // else in this process has work until the hello is through.
            std::thread::sleep(pace);
        }
    }
    let mut answer = [0u8; 1];
    client.read_exact(&mut answer).await.unwrap();
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    // `cargo bench` passes `--bench`; a filter is not supported.
    let runs: usize = std::env::var("HELLO_CPU_RUNS").map_or(5, |v| v.parse().unwrap());
    let scale: usize = std::env::var("HELLO_CPU_SCALE").map_or(1, |v| v.parse().unwrap());
    let binary =
        std::env::var("SNIRELAY_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_snirelay").to_owned());

    // The backend reads the replayed hello (`expected` bytes), answers one
    // byte, then waits for the client to close.
    let expected = Arc::new(AtomicUsize::new(0));
    let want = expected.clone();
    let backend = common::raw_backend(move |mut stream| {
        let want = want.load(Ordering::SeqCst);
        async move {
            let mut buf = vec![0u8; 64 * 1024];
            let mut got = 0;
            while got < want {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => got += n,
                }
            }
            let _ = stream.write_all(b"k").await;
            while let Ok(n) = stream.read(&mut buf).await {
                if n == 0 {
                    break;
                }
            }
        }
    })
    .await;

    println!("relay: {binary}");
    println!(
        "{:>7} {:<17} {:>9} {:>6} {:>13} {:>10} {:>9} {:>10}",
        "cap", "case", "bytes", "conns", "CPU/hello", "vs whole", "µs/KiB", "wall/hello"
    );
    for cap in [16 * 1024, 256 * 1024] {
        let config = format!(
            "[global]\nthreads = 1\n{}",
            common::simple_config(
                &[NAME],
                backend,
                &format!("max_client_hello_bytes = {cap}\nclient_hello_timeout = \"120s\""),
            )
        );
        let relay = common::Relay::launch(&config, |path| {
            let mut command = std::process::Command::new(&binary);
            command.arg("run").arg("--config").arg(path).args([
                "--log-format",
                "json",
                "--log-level",
                "info,snirelay::access=off",
            ]);
            command
        })
        .await;
        let addr = relay.addr();
        let mut whole_cpu = None;
        for case in cases(cap, scale) {
            expected.store(case.stream.len(), Ordering::SeqCst);
            // One connection first, unmeasured: the relay's first accept
            // allocates what later ones reuse.
            one(addr, &case).await;
            let mut per_hello = Vec::new();
            let mut wall = Vec::new();
            for _ in 0..runs {
                let before = cpu(relay.pid());
                let started = Instant::now();
                for _ in 0..case.batch {
                    one(addr, &case).await;
                }
                wall.push(started.elapsed() / case.batch as u32);
                per_hello.push((cpu(relay.pid()) - before) / case.batch as u32);
            }
            per_hello.sort();
            wall.sort();
            let median = per_hello[per_hello.len() / 2];
            let whole = *whole_cpu.get_or_insert(median);
            println!(
                "{:>6}K {:<17} {:>9} {:>6} {:>10.3} ms {:>9.1}x {:>9.2} {:>7.1} ms",
                cap / 1024,
                case.name,
                case.stream.len(),
                case.batch * runs,
                median.as_secs_f64() * 1e3,
                median.as_secs_f64() / whole.as_secs_f64(),
                median.as_secs_f64() * 1e6 / (case.stream.len() as f64 / 1024.0),
                wall[wall.len() / 2].as_secs_f64() * 1e3,
            );
        }
    }
}
