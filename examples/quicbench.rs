//! QUIC load benchmark: datagrams through snirelay's `protocol = "quic"`
//! listener against the same traffic sent straight to the backend, on
//! loopback.
//!
//! Starts a UDP echo backend in this process, writes a configuration with
//! one quic listener routing every name to it, starts the relay as a child
//! process and drives it with QUIC-looking flows. A flow is one client UDP
//! socket: it first sends a real captured Initial (ngtcp2's one-datagram
//! first flight from tests/data/quic, SNI `localhost`), which the relay
//! parses and routes, and waits for its echo; then it sends short-header
//! datagrams (first byte `0x40`, an 8-byte connection ID, a sequence
//! number, filler) that the relay passes unread, and counts their echoes.
//!
//! - `rate`: with 1 flow and with `--flows` flows (256 by default), each at
//!   datagram sizes 1,200 and 1,350 bytes, for `--seconds`: relayed
//!   datagrams and bytes per second (each echo crossed the relay twice, so
//!   both directions are counted), through the relay and direct (same
//!   flows, same window, to the backend), and the ratio; the relay's CPU
//!   (utime + stime from /proc/PID/stat) per GB relayed. At most
//!   [`IN_FLIGHT`] datagrams are unanswered at once over all flows (each
//!   flow at most its share), so the kernel's default socket buffers never
//!   overflow on loopback; a datagram not echoed within [`LOSS_WAIT`] is
//!   counted lost and its slot freed.
//! - `idle`: `--idle` flows (8,000 by default) opened (hello echoed) and
//!   left quiet; the relay's RSS and descriptor deltas per flow (each flow
//!   costs the relay a backend socket: keep `--idle` within the hard
//!   descriptor limit).
//!
//! Prints one table of medians over `--runs` runs (3 by default), relay and
//! direct alternating order run by run. Everything stays on 127.0.0.1 and
//! every phase is bounded in time.
//!
//! With `--baseline nginx` the rate phase runs through nginx's stream UDP
//! proxy (`listen ... udp; proxy_pass ...`, one process, Debian's nginx
//! and libnginx-mod-stream) instead of straight to the backend, on the same
//! flows, alternating with snirelay run by run, and reports both relays'
//! datagrams/s and CPU per GB and their ratios.
//!
//! Usage (a release build: `cargo build --release --examples --bins`):
//! `quicbench --relay target/release/snirelay [--runs 3] [--seconds 5]
//!  [--flows 256] [--idle 8000] [--threads 1] [--only rate,idle]
//!  [--baseline nginx]`;
//! `quicbench --help` lists every option with its default.

#[path = "support/proc.rs"]
mod proc;

use proc::{cpu_seconds, fd_count, median, rss_kib};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::net::UdpSocket;
use tokio::sync::Semaphore;

/// Unanswered datagrams at once, over all flows of a rate phase.
const IN_FLIGHT: usize = 64;
/// A datagram not echoed within this is counted lost.
const LOSS_WAIT: Duration = Duration::from_millis(200);
/// Flows opened at once in the idle phase (below the relay's pending
/// bound of 1,024 per socket).
const OPENING: usize = 128;
const SIZES: [usize; 2] = [1200, 1350];

/// QUIC load benchmark: datagrams through snirelay's `protocol = "quic"`
/// listener against the same traffic sent straight to the backend, on
/// loopback.
#[derive(clap::Parser)]
#[command(name = "quicbench", args_override_self = true)]
struct Args {
    /// The snirelay binary to run.
    #[arg(long, value_name = "PATH", default_value = "target/release/snirelay")]
    relay: PathBuf,
    /// Runs, relay and direct alternating order; the table gives medians.
    #[arg(long, value_name = "N", default_value_t = 3)]
    runs: usize,
    /// Length of each rate case, in seconds.
    #[arg(long, value_name = "S", default_value_t = 5)]
    seconds: u64,
    /// Flows of the many-flows rate cases (the others use 1).
    #[arg(long, value_name = "N", default_value_t = 256)]
    flows: usize,
    /// Quiet flows opened in the `idle` phase (each costs the relay a descriptor).
    #[arg(long, value_name = "N", default_value_t = 8000)]
    idle: usize,
    /// The relay's worker threads (`threads`).
    #[arg(long, value_name = "N", default_value_t = 1)]
    threads: usize,
    /// Phases to run, comma-separated: rate, idle.
    #[arg(
        long,
        value_name = "PHASE,...",
        value_delimiter = ',',
        action = clap::ArgAction::Set,
        default_value = "rate,idle"
    )]
    only: Vec<String>,
    /// Another UDP relay to run the rate phase through as well, alternating
    /// with snirelay run by run, instead of sending straight to the
    /// backend: `nginx` (its stream UDP proxy, one worker).
    #[arg(long, value_name = "NAME", value_parser = ["nginx"])]
    baseline: Option<String>,
    /// The nginx binary for `--baseline nginx`.
    #[arg(long, value_name = "PATH", default_value = "/usr/sbin/nginx")]
    nginx: PathBuf,
    /// nginx's stream module (Debian's libnginx-mod-stream).
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/usr/lib/nginx/modules/ngx_stream_module.so"
    )]
    nginx_stream_module: PathBuf,
}

fn args() -> Args {
    <Args as clap::Parser>::parse()
}

// ------------------------------------------------------------------ backend

/// A UDP echo backend: every datagram goes back to its sender.
async fn backend() -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        while let Ok((len, from)) = socket.recv_from(&mut buf).await {
            let _ = socket.send_to(&buf[..len], from).await;
        }
    });
    addr
}

// -------------------------------------------------------------------- relay

struct Relay {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Whether something is bound to UDP `port` on 127.0.0.1 (/proc/net/udp).
fn udp_bound(port: u16) -> bool {
    let table = std::fs::read_to_string("/proc/net/udp").unwrap_or_default();
    let needle = format!("0100007F:{port:04X}");
    table
        .lines()
        .skip(1)
        .any(|l| l.split_whitespace().nth(1) == Some(needle.as_str()))
}

fn start_relay(args: &Args, dir: &Path, backend: SocketAddr) -> Relay {
    let port = free_udp_port();
    let config = format!(
        r#"[global]
max_connections = {max}
threads = {threads}

[[listener]]
name = "bench"
protocol = "quic"
listen = ["127.0.0.1:{port}"]
client_hello_timeout = "5s"
idle_timeout = "5m"

# Every bench flow comes from 127.0.0.1.
[listener.limits]
connections_per_source = false

[[route]]
sni = ["*"]
backend = "b"

[backend.b]
addresses = ["{backend}"]
"#,
        max = args.idle + 1000,
        threads = args.threads,
    );
    let path = dir.join("snirelay.toml");
    std::fs::write(&path, config).unwrap();
    let log = std::fs::File::create(dir.join("snirelay.log")).unwrap();
    let child = Command::new(&args.relay)
        .args(["run", "--config"])
        .arg(&path)
        .args(["--log-level", "info,snirelay::access=off"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("cannot start snirelay");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !udp_bound(port) {
        assert!(Instant::now() < deadline, "snirelay did not bind {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
    Relay {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
    }
}

/// nginx's stream UDP proxy in front of `backend`: one process
/// (`master_process off`, so its pid is the one that works, for its CPU),
/// sessions kept for the whole run (`proxy_timeout 10m`; `proxy_responses`
/// and `proxy_requests` unset, so a session is not ended by datagram
/// counts and relays both ways until it idles out), everything in `dir`.
fn start_nginx(args: &Args, dir: &Path, backend: SocketAddr) -> Relay {
    let port = free_udp_port();
    let prefix = dir.join("nginx");
    std::fs::create_dir_all(&prefix).unwrap();
    let config = format!(
        r#"load_module {module};
daemon off;
master_process off;
worker_processes 1;
worker_rlimit_nofile 20000;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{
    worker_connections 16000;
}}
stream {{
    server {{
        listen 127.0.0.1:{port} udp;
        proxy_pass {backend};
        proxy_timeout 10m;
    }}
}}
"#,
        module = args.nginx_stream_module.display(),
        prefix = prefix.display(),
    );
    let path = prefix.join("nginx.conf");
    std::fs::write(&path, config).unwrap();
    let log = std::fs::File::create(prefix.join("stderr.log")).unwrap();
    let child = Command::new(&args.nginx)
        .arg("-p")
        .arg(&prefix)
        .arg("-e")
        .arg(prefix.join("error.log"))
        .arg("-c")
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("cannot start nginx (Debian nginx and libnginx-mod-stream)");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !udp_bound(port) {
        assert!(Instant::now() < deadline, "nginx did not bind {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
    Relay {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
    }
}

// -------------------------------------------------------------------- flows

include!("../tests/it/common/quic_capture.rs");

/// A flow's client socket, its hello sent and echoed (retransmitted every
/// [`LOSS_WAIT`], at most 25 times).
async fn open_flow(target: SocketAddr, hello: &[Vec<u8>]) -> UdpSocket {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket.connect(target).await.unwrap();
    let mut buf = vec![0u8; 65536];
    for _ in 0..25 {
        for datagram in hello {
            socket.send(datagram).await.unwrap();
        }
        let last = hello.last().unwrap();
        let echoed = tokio::time::timeout(LOSS_WAIT, async {
            loop {
                let len = socket.recv(&mut buf).await.unwrap();
                if buf[..len] == last[..] {
                    return;
                }
            }
        })
        .await;
        if echoed.is_ok() {
            return socket;
        }
    }
    panic!("the hello was not echoed through {target}");
}

/// A short-header-looking datagram of `size` bytes: form bit 0, fixed bit
/// 1, an 8-byte connection ID, the flow and sequence numbers, filler.
fn short_header(size: usize, flow: u64, seq: u64) -> Vec<u8> {
    let mut datagram = vec![0x5a; size];
    datagram[0] = 0x40 | (seq as u8 & 0x03);
    datagram[1..9].copy_from_slice(&flow.to_be_bytes());
    datagram[9..17].copy_from_slice(&seq.to_be_bytes());
    datagram
}

#[derive(Default)]
struct Counters {
    echoed: AtomicU64,
    lost: AtomicU64,
}

/// Sends short-header datagrams on `socket` until `until`, keeping at most
/// `window` of its own unanswered and taking a slot of `slots` for each.
async fn drive(
    socket: UdpSocket,
    flow: u64,
    size: usize,
    window: usize,
    slots: Arc<Semaphore>,
    measure: (Instant, Instant),
    counters: Arc<Counters>,
) {
    let (from, until) = measure;
    let mut buf = vec![0u8; 65536];
    let mut outstanding = 0usize;
    let mut seq = 0u64;
    let mut last_echo = Instant::now();
    let datagram = short_header(size, flow, 0);
    let mut datagram = datagram;
    loop {
        let now = Instant::now();
        if now >= until {
            break;
        }
        tokio::select! {
            received = socket.recv(&mut buf) => {
                if received.is_ok_and(|len| len == size) && outstanding > 0 {
                    outstanding -= 1;
                    slots.add_permits(1);
                    last_echo = Instant::now();
                    if last_echo >= from && last_echo < until {
                        counters.echoed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            permit = slots.acquire(), if outstanding < window => {
                permit.unwrap().forget();
                seq += 1;
                datagram[0] = 0x40 | (seq as u8 & 0x03);
                datagram[9..17].copy_from_slice(&seq.to_be_bytes());
                if socket.send(&datagram).await.is_ok() {
                    outstanding += 1;
                    if outstanding == 1 {
                        last_echo = Instant::now();
                    }
                } else {
                    slots.add_permits(1);
                }
            }
            () = tokio::time::sleep_until((last_echo + LOSS_WAIT).into()), if outstanding > 0 => {
                counters.lost.fetch_add(outstanding as u64, Ordering::Relaxed);
                slots.add_permits(outstanding);
                outstanding = 0;
            }
            () = tokio::time::sleep_until(until.into()) => break,
        }
    }
    slots.add_permits(outstanding);
}

struct RateFigures {
    datagrams_per_s: f64,
    bytes_per_s: f64,
    lost: u64,
    cpu_per_gb: Option<f64>,
}

/// Opens `flows` flows to `target` and drives them for `seconds`.
async fn rate(
    target: SocketAddr,
    pid: Option<u32>,
    flows: usize,
    size: usize,
    seconds: u64,
    hello: &Arc<Vec<Vec<u8>>>,
) -> RateFigures {
    let mut sockets = Vec::with_capacity(flows);
    for chunk in (0..flows).collect::<Vec<_>>().chunks(OPENING) {
        let opened = chunk.iter().map(|_| {
            let hello = hello.clone();
            tokio::spawn(async move { open_flow(target, &hello).await })
        });
        for task in opened.collect::<Vec<_>>() {
            sockets.push(task.await.unwrap());
        }
    }
    let window = (IN_FLIGHT / flows).max(1);
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let counters = Arc::new(Counters::default());
    // One second of warm-up, then the measured interval.
    let from = Instant::now() + Duration::from_secs(1);
    let until = from + Duration::from_secs(seconds);
    let tasks: Vec<_> = sockets
        .into_iter()
        .enumerate()
        .map(|(flow, socket)| {
            tokio::spawn(drive(
                socket,
                flow as u64,
                size,
                window,
                slots.clone(),
                (from, until),
                counters.clone(),
            ))
        })
        .collect();
    tokio::time::sleep_until(from.into()).await;
    let cpu0 = pid.map(cpu_seconds);
    tokio::time::sleep_until(until.into()).await;
    let cpu1 = pid.map(cpu_seconds);
    for task in tasks {
        task.await.unwrap();
    }
    let echoed = counters.echoed.load(Ordering::Relaxed) as f64;
    // Each echo crossed the path twice: client → backend and back.
    let datagrams = 2.0 * echoed;
    let bytes = datagrams * size as f64;
    RateFigures {
        datagrams_per_s: datagrams / seconds as f64,
        bytes_per_s: bytes / seconds as f64,
        lost: counters.lost.load(Ordering::Relaxed),
        cpu_per_gb: cpu0
            .zip(cpu1)
            .map(|(c0, c1)| (c1 - c0) / (bytes / 1e9).max(1e-9)),
    }
}

struct IdleFigures {
    rss_per_flow: f64,
    fds_per_flow: f64,
}

/// Opens `count` flows through the relay, leaves them quiet, measures.
async fn idle(relay: &Relay, hello: &Arc<Vec<Vec<u8>>>, count: usize) -> IdleFigures {
    let pid = relay.child.id();
    // One flow first so lazy one-time set-up is in the baseline.
    let warm = open_flow(relay.addr, hello).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (rss0, fds0) = (rss_kib(pid), fd_count(pid));
    let mut flows = Vec::with_capacity(count);
    let indices: Vec<usize> = (0..count).collect();
    for chunk in indices.chunks(OPENING) {
        let opened: Vec<_> = chunk
            .iter()
            .map(|_| {
                let hello = hello.clone();
                let target = relay.addr;
                tokio::spawn(async move { open_flow(target, &hello).await })
            })
            .collect();
        for task in opened {
            flows.push(task.await.unwrap());
        }
    }
    // Let the relay finish whatever it does after the hello.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (rss1, fds1) = (rss_kib(pid), fd_count(pid));
    drop(flows);
    drop(warm);
    let n = count as f64;
    IdleFigures {
        rss_per_flow: (rss1 as f64 - rss0 as f64) * 1024.0 / n,
        fds_per_flow: (fds1 as f64 - fds0 as f64) / n,
    }
}

// -------------------------------------------------------------------- table

type Samples = BTreeMap<String, Vec<f64>>;

fn main() {
    let args = args();
    // The bench holds a socket per flow: up to the hard limit.
    let _ = raise_nofile();
    // Clients and backend share this process: two threads.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(bench(args));
}

fn raise_nofile() -> nix::Result<()> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard)
}

async fn bench(args: Args) {
    let hello = Arc::new(capture("ngtcp2"));
    let dir = std::env::temp_dir().join(format!("quicbench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let backend = backend().await;
    let mut samples = Samples::new();
    let mut lost = 0u64;
    let cases: Vec<(usize, usize)> = [1, args.flows]
        .into_iter()
        .flat_map(|flows| SIZES.map(|size| (flows, size)))
        .collect();
    for run in 0..args.runs {
        if args.only.iter().any(|o| o == "rate") {
            for &(flows, size) in &cases {
                // A fresh relay per case: no flows left from the last one.
                let relay = start_relay(&args, &dir, backend);
                let order: [bool; 2] = if run % 2 == 0 {
                    [true, false]
                } else {
                    [false, true]
                };
                // The anchor: nginx in front of the same backend, or the
                // backend itself.
                let baseline = args
                    .baseline
                    .as_ref()
                    .map(|_| start_nginx(&args, &dir, backend));
                for through_relay in order {
                    let (target, pid, who) = match (through_relay, &baseline) {
                        (true, _) => (relay.addr, Some(relay.child.id()), "relay"),
                        (false, Some(nginx)) => (nginx.addr, Some(nginx.child.id()), "nginx"),
                        (false, None) => (backend, None, "direct"),
                    };
                    let f = rate(target, pid, flows, size, args.seconds, &hello).await;
                    let key = |what: &str| format!("{flows:>3} flows {size} B {who} {what}");
                    samples
                        .entry(key("datagrams/s"))
                        .or_default()
                        .push(f.datagrams_per_s);
                    samples
                        .entry(key("MB/s"))
                        .or_default()
                        .push(f.bytes_per_s / 1e6);
                    if let Some(cpu) = f.cpu_per_gb {
                        samples.entry(key("CPU s/GB")).or_default().push(cpu);
                    }
                    lost += f.lost;
                    eprintln!(
                        "run {run}: {flows} flows, {size} B, {who}: {:.0} datagrams/s, {:.1} MB/s, lost {}{}",
                        f.datagrams_per_s,
                        f.bytes_per_s / 1e6,
                        f.lost,
                        f.cpu_per_gb
                            .map(|c| format!(", CPU {c:.2} s/GB"))
                            .unwrap_or_default()
                    );
                }
            }
        }
        if args.only.iter().any(|o| o == "idle") {
            let relay = start_relay(&args, &dir, backend);
            let f = idle(&relay, &hello, args.idle).await;
            eprintln!(
                "run {run}: idle {} flows: {:.0} B RSS, {:.2} descriptors per flow",
                args.idle, f.rss_per_flow, f.fds_per_flow
            );
            samples
                .entry("idle RSS B/flow".into())
                .or_default()
                .push(f.rss_per_flow);
            samples
                .entry("idle fds/flow".into())
                .or_default()
                .push(f.fds_per_flow);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    print_table(&samples, &args, &cases, lost);
}

fn print_table(samples: &Samples, args: &Args, cases: &[(usize, usize)], lost: u64) {
    let m = |key: String| samples.get(&key).map(|v| median(v));
    println!(
        "medians of {} runs, {} s each, relay threads = {}, at most {IN_FLIGHT} datagrams in flight; datagrams lost: {lost}",
        args.runs, args.seconds, args.threads
    );
    if args.only.iter().any(|o| o == "rate")
        && let Some(name) = &args.baseline
    {
        println!(
            "| flows | size | relay datagrams/s | {name} datagrams/s | ratio | relay CPU s/GB | {name} CPU s/GB | CPU ratio |"
        );
        println!("|---|---|---|---|---|---|---|---|");
        for &(flows, size) in cases {
            let key = |who: &str, what: &str| format!("{flows:>3} flows {size} B {who} {what}");
            let get = |who: &str, what: &str| m(key(who, what)).unwrap_or(f64::NAN);
            let (rd, nd) = (get("relay", "datagrams/s"), get(name, "datagrams/s"));
            let (rc, nc) = (get("relay", "CPU s/GB"), get(name, "CPU s/GB"));
            println!(
                "| {flows} | {size} | {rd:.0} | {nd:.0} | {:.2} | {rc:.2} | {nc:.2} | {:.2} |",
                rd / nd,
                rc / nc
            );
        }
    } else if args.only.iter().any(|o| o == "rate") {
        println!(
            "| flows | size | relay datagrams/s | direct datagrams/s | ratio | relay MB/s | direct MB/s | relay CPU s/GB |"
        );
        println!("|---|---|---|---|---|---|---|---|");
        for &(flows, size) in cases {
            let key = |who: &str, what: &str| format!("{flows:>3} flows {size} B {who} {what}");
            let (rd, dd) = (
                m(key("relay", "datagrams/s")).unwrap_or(f64::NAN),
                m(key("direct", "datagrams/s")).unwrap_or(f64::NAN),
            );
            println!(
                "| {flows} | {size} | {rd:.0} | {dd:.0} | {:.2} | {:.1} | {:.1} | {:.2} |",
                rd / dd,
                m(key("relay", "MB/s")).unwrap_or(f64::NAN),
                m(key("direct", "MB/s")).unwrap_or(f64::NAN),
                m(key("relay", "CPU s/GB")).unwrap_or(f64::NAN),
            );
        }
    }
    if args.only.iter().any(|o| o == "idle") {
        println!(
            "idle flows: {}: relay RSS {:.0} B per flow, {:.2} descriptors per flow",
            args.idle,
            m("idle RSS B/flow".into()).unwrap_or(f64::NAN),
            m("idle fds/flow".into()).unwrap_or(f64::NAN),
        );
    }
}
