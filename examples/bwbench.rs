//! Bandwidth-limit benchmark: how close a limited transfer keeps to its
//! limit, and what the relay's CPU costs per GB at the limit and unlimited.
//!
//! Starts one in-process backend that streams zeros to whoever connects
//! (after reading its hello), writes a snirelay configuration with three
//! listeners (each routing any name, `sni = ["*"]`, to that backend) and
//! starts the relay as a child process:
//!
//! - `limited`: `rate_down = --rate` per connection;
//! - `shared`: `rate_per_source_down = --rate`, one bucket for all of a
//!   source's connections;
//! - `free`: no limit.
//!
//! Phases, per run (the order alternates run by run):
//! - `one`: 1 connection on `limited`;
//! - `many`: `--connections` (32) connections of one source on `shared`;
//! - `free`: 1 connection on `free` (the unlimited comparison).
//!
//! Each phase first lets the connections run for `--warmup` seconds (so
//! the buckets' burst is spent), then counts the bytes the clients read
//! over `--seconds` and the relay's CPU time over the same window. It
//! reports the achieved rate, its ratio to the limit, and the relay's CPU
//! seconds per GB moved; medians over `--runs`. Everything stays on
//! 127.0.0.1 and every phase is bounded in time.
//!
//! Usage (see benches/README.md, "Bandwidth limits"):
//! `cargo build --release --bin snirelay --example bwbench &&
//!  target/release/examples/bwbench --relay target/release/snirelay
//!  [--rate 50000000] [--connections 32] [--seconds 10] [--runs 3]
//!  [--splice true]`

// Shared with loadbench and quicbench; this one reads only CPU time.
#[allow(dead_code)]
#[path = "support/proc.rs"]
mod proc;

use proc::{cpu_seconds, free_port, median};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(clap::Parser)]
#[command(about = "Bandwidth limits: achieved rate against the limit, and CPU per GB")]
struct Args {
    /// The snirelay binary.
    #[arg(long)]
    relay: PathBuf,
    /// The limit, in bytes per second (`rate_down` and
    /// `rate_per_source_down`).
    #[arg(long, default_value_t = 50_000_000)]
    rate: u64,
    /// The bucket's burst, in bytes.
    #[arg(long, default_value_t = 1_000_000)]
    burst: u64,
    /// Connections of one source in the `many` phase.
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// Seconds measured per phase.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Seconds run before measuring, to spend the burst.
    #[arg(long, default_value_t = 1)]
    warmup: u64,
    /// Runs; medians are reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// The relay's `global.splice`.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    splice: bool,
    /// The relay's `global.threads`.
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

fn main() {
    let args = <Args as clap::Parser>::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(bench(args));
}

/// Streams zeros to every connection until it closes.
async fn backend() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let mut hello = [0u8; 4096];
                if stream.read(&mut hello).await.unwrap_or(0) == 0 {
                    return;
                }
                let chunk = vec![0u8; 256 * 1024];
                while stream.write_all(&chunk).await.is_ok() {}
            });
        }
    });
    addr
}

struct Relay {
    child: Child,
    limited: SocketAddr,
    shared: SocketAddr,
    free: SocketAddr,
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start_relay(args: &Args, backend: SocketAddr) -> Relay {
    let dir = std::env::temp_dir().join(format!("snirelay-bwbench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ports = [free_port(), free_port(), free_port()];
    let listener = |name: &str, port: u16, keys: &str| {
        format!(
            r#"
[[listener]]
name = "{name}"
listen = ["127.0.0.1:{port}"]
{keys}
[listener.limits]
connections_per_source = false

[[route]]
listener = "{name}"
sni = ["*"]
backend = "b"
"#
        )
    };
    let (rate, burst) = (args.rate, args.burst);
    let config = format!(
        "[global]\nthreads = {}\nsplice = {}\n{}{}{}\n[backend.b]\naddresses = [\"{backend}\"]\n",
        args.threads,
        args.splice,
        listener(
            "limited",
            ports[0],
            &format!("rate_down = {rate}\nburst = {burst}")
        ),
        listener(
            "shared",
            ports[1],
            &format!("rate_per_source_down = {rate}\nburst = {burst}")
        ),
        listener("free", ports[2], ""),
    );
    let path = dir.join("snirelay.toml");
    std::fs::write(&path, config).unwrap();
    let log = std::fs::File::create(dir.join("snirelay.log")).unwrap();
    let child = Command::new(&args.relay)
        .args(["run", "--config"])
        .arg(&path)
        .args(["--log-level", "warn"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("cannot start snirelay");
    let addr = |port| SocketAddr::from(([127, 0, 0, 1], port));
    for port in ports {
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(addr(port)).await.is_err() {
            assert!(Instant::now() < deadline, "snirelay is not listening");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    Relay {
        child,
        limited: addr(ports[0]),
        shared: addr(ports[1]),
        free: addr(ports[2]),
    }
}

/// What one phase measured.
struct Figures {
    /// Bytes per second the clients read over the window.
    rate: f64,
    /// Relay CPU seconds per GB moved.
    cpu_per_gb: f64,
}

/// `connections` clients on `to`, each sending `hello` and reading until
/// stopped; after `warmup`, bytes and relay CPU are counted for `window`.
async fn phase(
    relay: &Relay,
    to: SocketAddr,
    hello: &Arc<Vec<u8>>,
    connections: usize,
    warmup: Duration,
    window: Duration,
) -> Figures {
    let read = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for _ in 0..connections {
        let (read, stop, hello) = (read.clone(), stop.clone(), hello.clone());
        clients.push(tokio::spawn(async move {
            let mut stream = TcpStream::connect(to).await.unwrap();
            stream.write_all(&hello).await.unwrap();
            let mut buffer = vec![0u8; 256 * 1024];
            while !stop.load(Ordering::Relaxed) {
                match tokio::time::timeout(Duration::from_millis(100), stream.read(&mut buffer))
                    .await
                {
                    Ok(Ok(0)) | Ok(Err(_)) => break,
                    Ok(Ok(n)) => {
                        read.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    Err(_) => {}
                }
            }
        }));
    }
    tokio::time::sleep(warmup).await;
    let (bytes0, cpu0, t0) = (
        read.load(Ordering::Relaxed),
        cpu_seconds(relay.child.id()),
        Instant::now(),
    );
    tokio::time::sleep(window).await;
    let (bytes1, cpu1, elapsed) = (
        read.load(Ordering::Relaxed),
        cpu_seconds(relay.child.id()),
        t0.elapsed(),
    );
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        let _ = client.await;
    }
    let moved = (bytes1 - bytes0) as f64;
    Figures {
        rate: moved / elapsed.as_secs_f64(),
        cpu_per_gb: (cpu1 - cpu0) / (moved / 1e9),
    }
}

async fn bench(args: Args) {
    let hello_path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/openssl_sni.bin");
    let hello = Arc::new(std::fs::read(&hello_path).unwrap());
    let backend = backend().await;
    let (warmup, window) = (
        Duration::from_secs(args.warmup),
        Duration::from_secs(args.seconds),
    );
    let limit = args.rate as f64;
    eprintln!(
        "bwbench: {} run(s), rate {} B/s, burst {} B, {} connections, {} s windows after {} s, splice = {}, threads = {}",
        args.runs,
        args.rate,
        args.burst,
        args.connections,
        args.seconds,
        args.warmup,
        args.splice,
        args.threads
    );
    let mut one = Vec::new();
    let mut many = Vec::new();
    let mut free = Vec::new();
    for run in 0..args.runs {
        let relay = start_relay(&args, backend).await;
        let mut order = ["one", "many", "free"];
        if run % 2 == 1 {
            order.reverse();
        }
        for name in order {
            let (to, n, into) = match name {
                "one" => (relay.limited, 1, &mut one),
                "many" => (relay.shared, args.connections, &mut many),
                _ => (relay.free, 1, &mut free),
            };
            let f = phase(&relay, to, &hello, n, warmup, window).await;
            eprintln!(
                "run {run} {name:5} {:12.0} B/s  ratio {:.4}  {:.3} CPU s/GB",
                f.rate,
                f.rate / limit,
                f.cpu_per_gb
            );
            into.push(f);
        }
    }
    let med =
        |v: &[Figures], f: &dyn Fn(&Figures) -> f64| median(&v.iter().map(f).collect::<Vec<_>>());
    println!("| phase | achieved B/s | achieved / limit | relay CPU s/GB |");
    println!("|---|---|---|---|");
    for (name, v) in [
        ("1 connection, rate_down", &one),
        ("connections of one source, rate_per_source_down", &many),
        ("1 connection, unlimited", &free),
    ] {
        let rate = med(v, &|f| f.rate);
        let ratio = if std::ptr::eq(v, &free) {
            "-".to_owned()
        } else {
            format!("{:.4}", med(v, &|f| f.rate / limit))
        };
        println!(
            "| {name} | {rate:.0} | {ratio} | {:.3} |",
            med(v, &|f| f.cpu_per_gb)
        );
    }
}
