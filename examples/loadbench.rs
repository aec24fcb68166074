//! Load benchmark: snirelay against HAProxy (and no proxy at all), side by
//! side, on loopback.
//!
//! Starts one in-process backend, writes equivalent configurations for
//! snirelay and HAProxy (tcp mode, SNI routing after `inspect-delay` and
//! `accept if { req.ssl_hello_type 1 }`, same timeouts, same thread count),
//! starts both as child processes, and drives each in turn with the same
//! client, alternating the order run by run:
//!
//! - `rate`: 64 concurrent clients, each sends a real ClientHello
//!   (tests/data/openssl_sni.bin), reads a 1 KiB reply, closes; repeated
//!   for `--seconds`.
//! - `up` / `down`: 8 connections streaming for `--seconds`, client →
//!   backend, then backend → client (also measured with no proxy).
//! - `ping`: p50/p99 round trip of a 1-byte ping-pong on one established
//!   connection.
//! - `idle`: 8,000 (`--idle`) connections opened and left quiet; the proxy's
//!   RSS and descriptor deltas, and /proc/meminfo Slab and MemAvailable.
//! - `listing` (snirelay only, not run unless named in `--only`): with
//!   `--idle` connections held open, the `rate` phase without and with a
//!   client fetching the full `GET /connections` listing (pages of 1,000)
//!   in a loop on the admin listener, in alternating order; reports both
//!   rates and the time of one full listing.
//! - `ceiling` (snirelay only, run alone, not run unless named): the
//!   new-connection ceiling toward one backend address set by ephemeral
//!   ports, with one egress source address (127.0.0.2) and with four
//!   (127.0.0.2-5, `source = { addresses = [...] }`). Needs a network
//!   namespace where a port in TIME_WAIT is held for the kernel's 60 s, as
//!   on a real network (`tcp_tw_reuse = 0`) and the default port range:
//!   scripts/loadbench.sh makes one when `--only ceiling` is given. Clients
//!   come from 32 addresses of their own, so only the relay's backend-side
//!   ports can run out; each set runs 60 s, during which no port is freed,
//!   and what was relayed over 60 s is the sustained ceiling (it is one
//!   only if connections then failed: the relay used up the ports).
//!
//! With `--sozu PATH`, sozu (its TCP listener prereads the SNI and routes
//! on it without terminating TLS; see [`sozu`]) runs the `rate`, `up`,
//! `down`, `ping` and `idle` phases too, in the alternating order (the
//! direct figures stay snirelay's backend's), and a second table
//! gives snirelay/sozu ratios; without it nothing changes.
//!
//! With `--slices N` the rate phase runs instead as N pairs of short
//! `--seconds` slices, the two proxies taking turns in ABBA order, and the
//! summary gives, per figure, the median of the per-pair ratios with a
//! 95 % confidence interval: on a shared machine whose speed drifts by
//! more than the difference measured, this is the figure to read.
//!
//! Every connection starts with the same captured hello followed by one
//! mode byte (R, U, D, E, I) that tells the backend what to do; both
//! proxies pass it through untouched. Prints one table of medians with
//! snirelay/HAProxy ratios. Everything stays on 127.0.0.1 and every phase
//! is bounded in time.
//!
//! Usage (see scripts/loadbench.sh, which builds and runs it):
//! `loadbench --relay target/release/snirelay [--haproxy /usr/sbin/haproxy]
//!  [--runs 3] [--seconds 10] [--threads 1] [--idle 8000] [--only rate,up,...]
//!  [--sozu /opt/sozu/bin/sozu] [--anchor haproxy-3.0=PATH ...] [--pin P,L] [--slices N]
//!  [--closer client|backend] [--proxy-v2] [--stream-census]`;
//! `loadbench --help` lists every option with its default.

#[path = "support/anchors.rs"]
mod anchors;
#[path = "support/nginx.rs"]
mod nginx;
#[path = "support/proc.rs"]
mod proc;
#[path = "support/sozu.rs"]
mod sozu;

use proc::{
    CoreTicks, context_switches, cpu_seconds, fd_count, free_port, ipis, median, meminfo_kib,
    rss_kib,
};
use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const REPLY: usize = 1024;
const RATE_CLIENTS: usize = 64;
const STREAMS: usize = 8;
const CHUNK: usize = 64 * 1024;

struct Args {
    relay: PathBuf,
    haproxy: Option<PathBuf>,
    /// `--anchor NAME=PATH`: more HAProxy and nginx builds beside it.
    anchors: Vec<anchors::Anchor>,
    /// `--sozu PATH`: sozu joins the `rate`, `up`, `down`, `ping` and `idle`
    /// phases.
    sozu: Option<PathBuf>,
    runs: usize,
    seconds: u64,
    threads: usize,
    idle: usize,
    only: Vec<String>,
    splice: bool,
    /// Pipe size for both proxies (`pipe_size`, `tune.pipesize`).
    pipe_size: usize,
    /// `--pin P,L`: each proxy on CPU P alone, this process (clients and
    /// backend) on CPU L; adds the census after each rate phase.
    pin: Option<(usize, usize)>,
    /// Who closes first in the rate phase: the client after reading the
    /// reply (`R`), or the backend right after writing it (`C`: its last
    /// bytes and its FIN arrive at the proxy together).
    rate_mode: u8,
    /// `--proxy-v2`: both proxies send a PROXY v2 header to the backend.
    proxy_v2: bool,
    /// `--slices N`: the rate phase as N pairs of `--seconds` slices, the
    /// two proxies taking turns (see `sliced_rate`).
    slices: usize,
    /// `--no-keepalive`: snirelay with `tcp_keepalive = false` on both
    /// sides, as HAProxy runs here (no `clitcpka`/`srvtcpka`).
    keepalive: bool,
    /// `--stream-census`: count the proxy's system calls and wake-ups
    /// during `up` and `down` (see `StreamCensus`).
    stream_census: bool,
    /// Where `listing` finds snirelay's admin listener, and its token.
    admin: Option<(SocketAddr, &'static str)>,
    /// The backend's egress `source` addresses (the `ceiling` phase).
    sources: Vec<&'static str>,
}

/// Load benchmark: snirelay against HAProxy (and no proxy at all), side by
/// side, on loopback.
#[derive(clap::Parser)]
#[command(name = "loadbench", args_override_self = true)]
struct Cli {
    /// The snirelay binary to run.
    #[arg(long, value_name = "PATH", default_value = "target/release/snirelay")]
    relay: PathBuf,
    /// The HAProxy binary to compare with, or `none` to measure snirelay alone.
    #[arg(long, value_name = "PATH|none", default_value = "/usr/sbin/haproxy")]
    haproxy: String,
    /// More anchors, `NAME=PATH`, NAME starting with `haproxy` or `nginx`
    /// (`haproxy-3.0=/opt/snirelay-tools/bin/haproxy-3.0`,
    /// `nginx-1.22=/usr/sbin/nginx`): each runs the rate, up, down, ping
    /// and idle phases too, in a table of its own. Repeatable.
    #[arg(long, value_name = "NAME=PATH", value_parser = anchors::parse)]
    anchor: Vec<anchors::Anchor>,
    /// A sozu binary (2.3 or later: SNI preread on a TCP listener) to run in
    /// the `rate`, `up`, `down`, `ping` and `idle` phases too, with a table
    /// of its own.
    #[arg(long, value_name = "PATH")]
    sozu: Option<PathBuf>,
    /// Runs, alternating which proxy goes first; the table gives medians.
    #[arg(long, value_name = "N", default_value_t = 3)]
    runs: usize,
    /// Length of each phase (of each slice with `--slices`), in seconds.
    #[arg(long, value_name = "S", default_value_t = 10)]
    seconds: u64,
    /// Worker threads of each proxy (`threads`, `nbthread`).
    #[arg(long, value_name = "N", default_value_t = 1)]
    threads: usize,
    /// Quiet connections held open in the `idle` and `listing` phases.
    #[arg(long, value_name = "N", default_value_t = 8000)]
    idle: usize,
    /// Phases to run, comma-separated: rate, up, down, ping, idle, listing, ceiling.
    #[arg(
        long,
        value_name = "PHASE,...",
        value_delimiter = ',',
        action = clap::ArgAction::Set,
        default_value = "rate,up,down,ping,idle"
    )]
    only: Vec<String>,
    /// Turn splicing off on both proxies.
    #[arg(long)]
    no_splice: bool,
    /// Pipe size for both proxies in bytes (`pipe_size`, `tune.pipesize`).
    #[arg(long, value_name = "BYTES", default_value_t = 64 * 1024)]
    pipe_size: usize,
    /// Each proxy alone on CPU P, the load on CPU L; adds a census after each rate phase.
    #[arg(long, value_name = "P,L", value_parser = cpu_pair)]
    pin: Option<(usize, usize)>,
    /// Who closes first in the rate phase: the client after the reply, or the backend.
    #[arg(long, value_enum, default_value_t = Closer::Client)]
    closer: Closer,
    /// Both proxies send a PROXY v2 header to the backend.
    #[arg(long)]
    proxy_v2: bool,
    /// Run snirelay with `tcp_keepalive = false` on both sides, as HAProxy runs here.
    #[arg(long)]
    no_keepalive: bool,
    /// Count the proxy's system calls and wake-ups per MB in `up` and `down`
    /// (perf), and its core's idle share with `--pin`: where the bytes wait.
    #[arg(long)]
    stream_census: bool,
    /// Run the rate phase as N ABBA pairs of `--seconds` slices (0: off).
    #[arg(long, value_name = "N", default_value_t = 0)]
    slices: usize,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Closer {
    Client,
    Backend,
}

/// `--pin P,L`: two CPU numbers.
fn cpu_pair(v: &str) -> Result<(usize, usize), String> {
    let (p, l) = v.split_once(',').ok_or("expected PROXY_CPU,LOAD_CPU")?;
    let cpu = |s: &str| s.parse::<usize>().map_err(|e| format!("{s}: {e}"));
    Ok((cpu(p)?, cpu(l)?))
}

fn args() -> Args {
    let cli = <Cli as clap::Parser>::parse();
    Args {
        relay: cli.relay,
        haproxy: (cli.haproxy != "none").then(|| cli.haproxy.into()),
        anchors: cli.anchor,
        sozu: cli.sozu,
        runs: cli.runs,
        seconds: cli.seconds,
        threads: cli.threads,
        idle: cli.idle,
        only: cli.only,
        splice: !cli.no_splice,
        pipe_size: cli.pipe_size,
        pin: cli.pin,
        rate_mode: match cli.closer {
            Closer::Client => b'R',
            Closer::Backend => b'C',
        },
        proxy_v2: cli.proxy_v2,
        keepalive: !cli.no_keepalive,
        stream_census: cli.stream_census,
        slices: cli.slices,
        admin: None,
        sources: Vec::new(),
    }
}

// ------------------------------------------------------------------ backend

#[derive(Default)]
struct BackendStats {
    upload_bytes: AtomicU64,
    idle_open: AtomicUsize,
}

/// Reads the TLS record of the hello and the mode byte, then serves the mode.
async fn backend(stats: Arc<BackendStats>, stop: Arc<AtomicBool>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let stats = stats.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let _ = stream.set_nodelay(true);
                let mut header = [0u8; 5];
                if stream.read_exact(&mut header).await.is_err() {
                    return;
                }
                // A PROXY v2 header (`--proxy-v2`): 16 bytes, the last two
                // its length, then the addresses and TLVs; skipped.
                if header[0] == b'\r' {
                    let mut fixed = [0u8; 11];
                    if stream.read_exact(&mut fixed).await.is_err() {
                        return;
                    }
                    let len = u16::from_be_bytes([fixed[9], fixed[10]]) as usize;
                    let mut skip = vec![0u8; len];
                    if stream.read_exact(&mut skip).await.is_err()
                        || stream.read_exact(&mut header).await.is_err()
                    {
                        return;
                    }
                }
                let len = u16::from_be_bytes([header[3], header[4]]) as usize;
                let mut rest = vec![0u8; len + 1];
                if stream.read_exact(&mut rest).await.is_err() {
                    return;
                }
                match rest[len] {
                    b'R' => {
                        let _ = stream.write_all(&[0x42; REPLY]).await;
                        let mut sink = [0u8; 64];
                        let _ = stream.read(&mut sink).await;
                    }
                    // Replies and closes at once, like a server that ends
                    // its response with close_notify and FIN.
                    b'C' => {
                        let _ = stream.write_all(&[0x42; REPLY]).await;
                    }
                    b'U' => {
                        let mut buf = vec![0u8; CHUNK];
                        while let Ok(n @ 1..) = stream.read(&mut buf).await {
                            stats.upload_bytes.fetch_add(n as u64, Ordering::Relaxed);
                        }
                    }
                    b'D' => {
                        let buf = vec![0x44u8; CHUNK];
                        while !stop.load(Ordering::Relaxed) {
                            if stream.write_all(&buf).await.is_err() {
                                break;
                            }
                        }
                    }
                    b'E' => {
                        let mut byte = [0u8; 1];
                        while let Ok(1) = stream.read(&mut byte).await {
                            if stream.write_all(&byte).await.is_err() {
                                break;
                            }
                        }
                    }
                    b'I' => {
                        stats.idle_open.fetch_add(1, Ordering::Relaxed);
                        let mut byte = [0u8; 1];
                        let _ = stream.read(&mut byte).await;
                        stats.idle_open.fetch_sub(1, Ordering::Relaxed);
                    }
                    _ => {}
                }
            });
        }
    });
    addr
}

// ------------------------------------------------------------------ proxies

struct Proxy {
    name: &'static str,
    child: Child,
    addr: SocketAddr,
    /// The process that carries the connections, whose CPU and memory are
    /// measured: the child itself, or sozu's worker.
    pid: u32,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if self.pid != self.child.id() {
            let _ = Command::new("kill")
                .args(["-KILL", &self.pid.to_string()])
                .status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Warns when the ephemeral port range is too narrow for the rate phase.
///
/// Each relayed connection takes an ephemeral port on two legs (client to
/// proxy, proxy to backend), each leg toward one address, and on loopback
/// a port left in TIME_WAIT is reused only once it is a second old
/// (`tcp_tw_reuse` = 2). At 14,000 connections per second Linux's default
/// range (32768-60999: 28,232 ports) is used up about a second into a
/// phase; connect(2) then scans the whole range for a free port, and every
/// connection in flight through either proxy stalls for 30-60 ms at once
/// (p99.9 and max jump, p99 with them). The faster proxy uses the ports
/// up sooner, so the stall counts against it. scripts/loadbench.sh widens
/// the range for its run.
fn check_port_range() {
    let Ok(range) = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range") else {
        return;
    };
    let ports: Vec<u32> = range
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    if let [low, high] = ports[..] {
        let count = high.saturating_sub(low) + 1;
        eprintln!("loadbench: ephemeral ports {low}-{high} ({count})");
        if count < 60_000 {
            eprintln!(
                "loadbench: warning: {count} ephemeral ports run out about a second into a rate \
                 phase and then stall every connection in flight (latency tail); widen \
                 net.ipv4.ip_local_port_range (scripts/loadbench.sh sets 1024-65535 for its run)"
            );
        }
    }
}

/// Waits (bounded) until something accepts on `addr`.
async fn wait_listening(addr: SocketAddr, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(addr).await.is_err() {
        assert!(Instant::now() < deadline, "{name} did not start listening");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A command that runs `bin`, under `taskset` on the proxy's CPU with
/// `--pin`.
fn pinned(bin: &Path, args: &Args) -> Command {
    match args.pin {
        None => Command::new(bin),
        Some((cpu, _)) => {
            let mut command = Command::new("taskset");
            command.args(["-c", &cpu.to_string()]).arg(bin);
            command
        }
    }
}

async fn start_snirelay(args: &Args, dir: &Path, backend: SocketAddr) -> Proxy {
    let port = free_port();
    let config = format!(
        r#"[global]
max_connections = 9000
threads = {threads}
splice = {splice}
pipe_size = {pipe_size}

[[listener]]
name = "bench"
listen = ["127.0.0.1:{port}"]
backlog = 4096
client_hello_timeout = "5s"
idle_timeout = "5m"
{keepalive}

# Every bench client comes from 127.0.0.1, and HAProxy has no such limit.
[listener.limits]
connections_per_source = false

[[route]]
sni = ["www.example.com"]
backend = "b"

[backend.b]
addresses = ["{backend}"]
connect_timeout = "5s"
proxy_protocol = "{proxy_protocol}"
{keepalive}
{source}
"#,
        source = if args.sources.is_empty() {
            String::new()
        } else {
            format!("source = {{ addresses = {:?} }}", args.sources)
        },
        keepalive = if args.keepalive {
            ""
        } else {
            "tcp_keepalive = false"
        },
        proxy_protocol = if args.proxy_v2 { "v2" } else { "none" },
        threads = args.threads,
        splice = args.splice,
        pipe_size = args.pipe_size,
    );
    // The admin listener only when a phase asks it: the other phases
    // measure the relay as it ships.
    let config = match args.admin {
        None => config,
        Some((admin, token)) => {
            use std::os::unix::fs::PermissionsExt;
            let tokens = dir.join("admin.tokens");
            std::fs::write(&tokens, format!("bench:{token}\n")).unwrap();
            std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
            format!(
                "[admin]\nlisten = \"{admin}\"\ntoken_file = \"{}\"\n\n{config}",
                tokens.display()
            )
        }
    };
    let path = dir.join("snirelay.toml");
    std::fs::write(&path, config).unwrap();
    let log = std::fs::File::create(dir.join("snirelay.log")).unwrap();
    let child = pinned(&args.relay, args)
        .args(["run", "--config"])
        .arg(&path)
        .args(["--log-level", "info,snirelay::access=off"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("cannot start snirelay");
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    wait_listening(addr, "snirelay").await;
    let pid = child.id();
    Proxy {
        name: "snirelay",
        child,
        addr,
        pid,
    }
}

async fn start_haproxy(
    bin: &Path,
    name: &'static str,
    args: &Args,
    dir: &Path,
    backend: SocketAddr,
) -> Proxy {
    let port = free_port();
    let config = format!(
        r#"global
    nbthread {threads}
    maxconn 9000
    maxpipes 512
    tune.pipesize {pipe_size}

defaults
    mode tcp
    maxconn 9000
    timeout connect 5s
    timeout client 5m
    timeout server 5m
    {splice}

frontend bench
    bind 127.0.0.1:{port} backlog 4096
    tcp-request inspect-delay 5s
    tcp-request content accept if {{ req.ssl_hello_type 1 }}
    use_backend b if {{ req.ssl_sni -i www.example.com }}

backend b
    server s1 {backend}{send_proxy}
"#,
        send_proxy = if args.proxy_v2 { " send-proxy-v2" } else { "" },
        threads = args.threads,
        pipe_size = args.pipe_size,
        splice = if args.splice {
            "option splice-auto"
        } else {
            ""
        },
    );
    let path = dir.join(format!("{name}.cfg"));
    std::fs::write(&path, config).unwrap();
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    let child = pinned(bin, args)
        .arg("-db")
        .arg("-f")
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("cannot start haproxy");
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    wait_listening(addr, name).await;
    let pid = child.id();
    Proxy {
        name,
        child,
        addr,
        pid,
    }
}

// ---------------------------------------------------------------- scenarios

async fn open(addr: SocketAddr, hello: &[u8], mode: u8) -> std::io::Result<TcpStream> {
    send_hello(TcpStream::connect(addr).await?, hello, mode).await
}

/// Sends the captured hello and the mode byte on a connected `stream`.
async fn send_hello(mut stream: TcpStream, hello: &[u8], mode: u8) -> std::io::Result<TcpStream> {
    stream.set_nodelay(true)?;
    let mut first = Vec::with_capacity(hello.len() + 1);
    first.extend_from_slice(hello);
    first.push(mode);
    stream.write_all(&first).await?;
    Ok(stream)
}

/// What a rate phase measured.
struct RateFigures {
    per_second: f64,
    done: u64,
    /// The proxy's CPU microseconds per connection.
    proxy_cpu: f64,
    /// This process's (clients and backend) CPU microseconds per connection.
    load_cpu: f64,
    /// Busy shares of a core over the phase.
    proxy_busy: f64,
    load_busy: f64,
    /// Connection latency (connect to the reply's last byte), microseconds.
    p50: f64,
    p99: f64,
    /// The slowest connections: a stall that holds up every connection in
    /// flight shows here first (see `check_port_range`).
    p999: f64,
    max: f64,
    /// Pinned runs: the proxy's core and the load's core over the phase,
    /// whoever used them (the process, or the kernel's interrupt work on
    /// its behalf, which the process's own CPU time leaves out).
    cores: Option<(CoreTicks, CoreTicks)>,
    /// The proxy's voluntary context switches per connection: how often
    /// it blocked with nothing to do and had to be woken.
    proxy_sleeps: f64,
    /// Pinned runs: inter-processor interrupts received per connection by
    /// the proxy's core and by the load's core (wake-ups across cores).
    ipis: Option<(f64, f64)>,
}

impl RateFigures {
    /// A pinned core's busy microseconds per connection, its interrupt
    /// work included (CLK_TCK is 100: one tick is 10 ms).
    fn core_per_conn(&self, core: CoreTicks) -> f64 {
        (core.user + core.system + core.interrupts) as f64 * 1e4 / self.done.max(1) as f64
    }
}

/// Connections per second completed by 64 looping clients, the proxy's and
/// the load side's CPU per connection (figures that the other load on a
/// shared machine disturbs far less than the rate itself), and latency.
async fn rate_and_cost(
    proxy: &Proxy,
    hello: Arc<Vec<u8>>,
    seconds: u64,
    mode: u8,
    pin: Option<(usize, usize)>,
) -> RateFigures {
    let pid = proxy.pid;
    let me = std::process::id();
    let (cpu0, load0) = (cpu_seconds(pid), cpu_seconds(me));
    let cores0 = pin.map(|(p, l)| (CoreTicks::read(p), CoreTicks::read(l)));
    let ipis0 = pin.map(|(p, l)| (ipis(p), ipis(l)));
    let sleeps0 = context_switches(pid).0;
    let start = Instant::now();
    let (per_second, done, mut latencies) = rate(proxy.addr, hello, seconds, mode, u64::MAX).await;
    let wall = start.elapsed().as_secs_f64();
    let (cpu, load) = (cpu_seconds(pid) - cpu0, cpu_seconds(me) - load0);
    let cores = pin
        .zip(cores0)
        .map(|((p, l), (p0, l0))| (CoreTicks::read(p).since(p0), CoreTicks::read(l).since(l0)));
    let n = done.max(1) as f64;
    let ipis = pin
        .zip(ipis0)
        .map(|((p, l), (p0, l0))| ((ipis(p) - p0) as f64 / n, (ipis(l) - l0) as f64 / n));
    let proxy_sleeps = (context_switches(pid).0 - sleeps0) as f64 / n;
    latencies.sort_unstable();
    let pick = |q: f64| {
        latencies
            .get(((latencies.len().max(1) - 1) as f64 * q) as usize)
            .map_or(f64::NAN, |&us| us as f64)
    };
    RateFigures {
        per_second,
        done,
        proxy_cpu: cpu * 1e6 / n,
        load_cpu: load * 1e6 / n,
        proxy_busy: cpu / wall,
        load_busy: load / wall,
        p50: pick(0.50),
        p99: pick(0.99),
        p999: pick(0.999),
        max: pick(1.0),
        cores,
        proxy_sleeps,
        ipis,
    }
}

/// Prints one rate phase's figures (prefixed `label`, e.g. "run 0") and
/// adds them to the samples under `name`.
fn record_rate(samples: &mut Samples, label: &str, name: &'static str, f: &RateFigures) {
    eprintln!(
        "{label} {name:8} rate  {:10.0} conn/s  {:6.1} us CPU/conn  load {:6.1} us/conn  busy {:.0}%/{:.0}%  p50 {:.0} us  p99 {:.0} us  p99.9 {:.0} us  max {:.0} us  ({} conns)  sleeps/conn {:.3}{}",
        f.per_second,
        f.proxy_cpu,
        f.load_cpu,
        f.proxy_busy * 100.0,
        f.load_busy * 100.0,
        f.p50,
        f.p99,
        f.p999,
        f.max,
        f.done,
        f.proxy_sleeps,
        f.ipis.map_or(String::new(), |(p, l)| format!(
            "  IPIs/conn proxy core {p:.3} load core {l:.3}"
        )),
    );
    let mut push = |metric, v| samples.entry((metric, name)).or_default().push(v);
    push("rate", f.per_second);
    push("rate_cpu", f.proxy_cpu);
    push("rate_conn_per_cpu_s", 1e6 / f.proxy_cpu);
    push("rate_load_cpu", f.load_cpu);
    push("rate_busy", f.proxy_busy * 100.0);
    push("rate_load_busy", f.load_busy * 100.0);
    push("rate_p50", f.p50 / 1e3);
    push("rate_p99", f.p99 / 1e3);
    push("rate_sleeps", f.proxy_sleeps);
    if let Some((p, l)) = f.ipis {
        push("ipi_proxy", p);
        push("ipi_load", l);
    }
    if let Some((p, l)) = f.cores {
        eprintln!(
            "{label} {name:8} cores  proxy core: idle {:.0}% user {:.0}% system {:.0}% interrupts {:.0}% ({:.1} us/conn)  load core: idle {:.0}% interrupts {:.0}% ({:.1} us/conn)",
            p.share(p.idle) * 100.0,
            p.share(p.user) * 100.0,
            p.share(p.system) * 100.0,
            p.share(p.interrupts) * 100.0,
            f.core_per_conn(p),
            l.share(l.idle) * 100.0,
            l.share(l.interrupts) * 100.0,
            f.core_per_conn(l),
        );
        push("core_proxy_idle", p.share(p.idle) * 100.0);
        push("core_proxy_irq", p.share(p.interrupts) * 100.0);
        push("core_proxy_cpu", f.core_per_conn(p));
        push("core_load_idle", l.share(l.idle) * 100.0);
        push("core_load_cpu", f.core_per_conn(l));
    }
}

/// The rate phase as `--slices` pairs of `--seconds` slices, the two
/// proxies taking turns in ABBA order (the first of each pair alternates),
/// both processes kept running throughout. On a shared machine whose speed
/// drifts by more than the difference being measured, one long phase per
/// proxy compares two different machines; short alternating slices put the
/// drift on both, and each pair gives one snirelay/HAProxy ratio per
/// figure (`pair` in the samples), summarised by `print_pairs`.
async fn sliced_rate(
    relay: &Proxy,
    haproxy: &Proxy,
    args: &Args,
    hello: Arc<Vec<u8>>,
    run: usize,
    samples: &mut Samples,
) {
    for pair in 0..args.slices {
        let order = if pair % 2 == 0 { [0, 1] } else { [1, 0] };
        let mut figures: [Option<RateFigures>; 2] = [None, None];
        for i in order {
            let proxy = [relay, haproxy][i];
            let f =
                rate_and_cost(proxy, hello.clone(), args.seconds, args.rate_mode, args.pin).await;
            record_rate(samples, &format!("run {run} slice {pair}"), proxy.name, &f);
            figures[i] = Some(f);
        }
        let [Some(s), Some(h)] = figures else {
            unreachable!("both proxies ran")
        };
        let mut ratio = |metric, v: f64| samples.entry((metric, "pair")).or_default().push(v);
        ratio("rate", s.per_second / h.per_second);
        ratio("rate_conn_per_cpu_s", h.proxy_cpu / s.proxy_cpu);
        if let (Some((sp, _)), Some((hp, _))) = (s.cores, h.cores) {
            ratio("core_proxy_cpu", s.core_per_conn(sp) / h.core_per_conn(hp));
        }
        ratio("rate_p50", s.p50 / h.p50);
        ratio("rate_p99", s.p99 / h.p99);
    }
}

/// Connections per second completed by 64 looping clients (for `seconds`,
/// or until `limit` are done), how many, and each one's latency in µs.
async fn rate(
    addr: SocketAddr,
    hello: Arc<Vec<u8>>,
    seconds: u64,
    mode: u8,
    limit: u64,
) -> (f64, u64, Vec<u32>) {
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let end = start + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for _ in 0..RATE_CLIENTS {
        let (hello, done, errors) = (hello.clone(), done.clone(), errors.clone());
        tasks.push(tokio::spawn(async move {
            let mut reply = vec![0u8; REPLY];
            let mut latencies = Vec::with_capacity(4096);
            while Instant::now() < end && done.load(Ordering::Relaxed) < limit {
                let began = Instant::now();
                let result = async {
                    let mut stream = open(addr, &hello, mode).await?;
                    stream.read_exact(&mut reply).await?;
                    std::io::Result::Ok(())
                };
                match tokio::time::timeout(Duration::from_secs(5), result).await {
                    Ok(Ok(())) => {
                        latencies.push(began.elapsed().as_micros().min(u32::MAX as u128) as u32);
                        done.fetch_add(1, Ordering::Relaxed)
                    }
                    _ => errors.fetch_add(1, Ordering::Relaxed),
                };
            }
            latencies
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.unwrap());
    }
    let errors = errors.load(Ordering::Relaxed);
    if errors > 0 {
        eprintln!("  rate: {errors} failed connections");
    }
    let done = done.load(Ordering::Relaxed);
    (done as f64 / start.elapsed().as_secs_f64(), done, latencies)
}

// ------------------------------------------------------------------ census

/// Per connection, from a census of `CENSUS` connections after a pinned
/// rate phase: segments on the wire, system calls on each side, and where
/// each of the two TCP connections ends in TIME_WAIT.
struct Census {
    segments: f64,
    proxy_syscalls: f64,
    load_syscalls: f64,
    /// TIME_WAIT sockets per connection held by the client, the proxy's
    /// client-facing socket, the proxy's backend-facing socket, the backend.
    tw: [f64; 4],
    /// TIME_WAIT sockets the kernel could not keep (its bucket table was
    /// full), per connection: the `tw` figures are short by that much.
    tw_overflow: f64,
}

const CENSUS: u64 = 5000;

/// A counter from /proc/net/snmp or /proc/net/netstat (`Tcp:` `OutSegs`,
/// `TcpExt:` `TCPTimeWaitOverflow`): a header line names the fields, the
/// next line holds the values.
fn net_counter(file: &str, group: &str, field: &str) -> u64 {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let mut lines = text.lines().filter(|l| l.starts_with(group));
    while let (Some(names), Some(values)) = (lines.next(), lines.next()) {
        if let Some(i) = names.split_whitespace().position(|n| n == field) {
            return values
                .split_whitespace()
                .nth(i)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
        }
    }
    0
}

/// TIME_WAIT sockets on 127.0.0.1 whose local or remote port is `proxy` or
/// `backend`, entered in the last [`TW_FRESH`] seconds (from the time each
/// has left: TIME_WAIT lasts 60 s on Linux): [client (remote = proxy),
/// proxy front (local = proxy), proxy back (remote = backend), backend
/// (local = backend)]. Only fresh ones, because the rate phase just before
/// left tens of thousands on the same ports, and counting a difference
/// would not do: a new connection that reuses a port ends the old TIME_WAIT
/// on it (`tcp_tw_reuse`, and a SYN to a TIME_WAIT socket).
fn time_wait(proxy: u16, backend: u16) -> [u64; 4] {
    let out = Command::new("ss")
        .args(["-Htano", "state", "time-wait"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let port = |a: &str| a.rsplit(':').next().and_then(|p| p.parse::<u16>().ok());
    // `timer:(timewait,58sec,0)`, or `1min` for the first second.
    let left = |line: &str| {
        let timer = line.split("timewait,").nth(1)?.split(',').next()?;
        if timer.ends_with("min") {
            return Some(60);
        }
        timer.strip_suffix("sec")?.parse::<u64>().ok()
    };
    let mut counts = [0; 4];
    for line in out.lines() {
        if left(line).is_none_or(|left| left < 60 - TW_FRESH) {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(local), Some(remote)) = (
            fields.get(2).and_then(|a| port(a)),
            fields.get(3).and_then(|a| port(a)),
        ) else {
            continue;
        };
        match (local, remote) {
            (_, r) if r == proxy => counts[0] += 1,
            (l, _) if l == proxy => counts[1] += 1,
            (_, r) if r == backend => counts[2] += 1,
            (l, _) if l == backend => counts[3] += 1,
            _ => {}
        }
    }
    counts
}

/// TIME_WAIT sockets with at least `60 - TW_FRESH` seconds left are the
/// census's: it waits longer than that after the rate phase before it
/// starts, and lasts less (at 5,000 connections).
const TW_FRESH: u64 = 3;

/// Counts perf `events` in `pid` (all its threads) until the returned
/// child is interrupted ([`events_counted`]).
fn count_events(pid: u32, events: &[&str]) -> Option<Child> {
    Command::new("perf")
        .args(["stat", "-x,", "-e", &events.join(","), "-p"])
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .ok()
}

/// Stops a [`count_events`] child and reads each of `events`' counts
/// (NaN where perf is missing or did not count it).
fn events_counted(child: Option<Child>, events: &[&str]) -> Vec<f64> {
    let text = child
        .and_then(|child| {
            let _ = Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status();
            child.wait_with_output().ok()
        })
        .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
        .unwrap_or_default();
    events
        .iter()
        .map(|event| {
            text.lines()
                .find(|l| l.contains(event))
                .and_then(|l| l.split(',').next()?.parse().ok())
                .unwrap_or(f64::NAN)
        })
        .collect()
}

/// Every system call, for the census.
const SYSCALLS: &[&str] = &["raw_syscalls:sys_enter"];

/// The system calls a stream phase counts, by perf's tracepoint names.
const STREAM_EVENTS: [&str; 7] = [
    "syscalls:sys_enter_splice",
    "syscalls:sys_enter_read",
    "syscalls:sys_enter_recvfrom",
    "syscalls:sys_enter_write",
    "syscalls:sys_enter_sendto",
    "syscalls:sys_enter_epoll_wait",
    "raw_syscalls:sys_enter",
];

/// Where a stream phase's bytes wait (`--stream-census`): the proxy's
/// system calls by kind and its wake-ups (voluntary context switches:
/// it blocked with nothing to do and was woken), per MB moved, and with
/// `--pin` the share of its core left idle. A proxy that is fast enough
/// but whose core sits idle is waiting on the other side: the load
/// generator or the kernel's delivery.
struct StreamCensus {
    perf: Option<Child>,
    switches: (u64, u64),
    /// The proxy's core and the load's, with their counters at the start.
    core: Option<[(usize, CoreTicks); 2]>,
    pid: u32,
}

impl StreamCensus {
    async fn start(proxy: &Proxy, pin: Option<(usize, usize)>) -> StreamCensus {
        let perf = count_events(proxy.pid, &STREAM_EVENTS);
        // perf attaches asynchronously; a short pause keeps the phase
        // inside its count, as the rate census's does.
        tokio::time::sleep(Duration::from_millis(100)).await;
        StreamCensus {
            perf,
            switches: context_switches(proxy.pid),
            core: pin.map(|(proxy, load)| [proxy, load].map(|cpu| (cpu, CoreTicks::read(cpu)))),
            pid: proxy.pid,
        }
    }

    /// Stops counting; `mb` megabytes moved in the phase `phase`.
    fn finish(self, mb: f64, phase: &'static str, name: &'static str, samples: &mut Samples) {
        let (voluntary, involuntary) = context_switches(self.pid);
        let core = self
            .core
            .map(|cores| cores.map(|(cpu, before)| CoreTicks::read(cpu).since(before)));
        let counts = events_counted(self.perf, &STREAM_EVENTS);
        let per_mb = |v: f64| v / mb.max(1.0);
        let [splice, read, recv, write, send, epoll, all] = counts[..] else {
            unreachable!()
        };
        let data_calls = splice + read + recv + write + send;
        let wakeups = (voluntary - self.switches.0) as f64;
        let preempted = (involuntary - self.switches.1) as f64;
        // Each byte crosses two data calls (in, then out).
        let bytes_per_call = mb * 1e6 * 2.0 / data_calls.max(1.0);
        eprintln!(
            "      {name:8} {phase:4} census per MB: system calls {:.1} (splice {:.1}, read/recv {:.1}, write/send {:.1}, epoll_wait {:.1}), {:.0} bytes per data call, wake-ups {:.2}, preempted {:.2}{}",
            per_mb(all),
            per_mb(splice),
            per_mb(read + recv),
            per_mb(write + send),
            per_mb(epoll),
            bytes_per_call,
            per_mb(wakeups),
            per_mb(preempted),
            core.map_or(String::new(), |[p, l]| format!(
                "; proxy core idle {:.0}% interrupts {:.0}%, load core idle {:.0}% interrupts {:.0}%",
                p.share(p.idle) * 100.0,
                p.share(p.interrupts) * 100.0,
                l.share(l.idle) * 100.0,
                l.share(l.interrupts) * 100.0,
            )),
        );
        let mut push = |metric: &'static str, v: f64| {
            samples.entry((metric, name)).or_default().push(v);
        };
        let up = phase == "up";
        push(if up { "up_calls" } else { "down_calls" }, per_mb(all));
        push(
            if up {
                "up_bytes_per_call"
            } else {
                "down_bytes_per_call"
            },
            bytes_per_call,
        );
        push(
            if up { "up_wakeups" } else { "down_wakeups" },
            per_mb(wakeups),
        );
        if let Some([p, l]) = core {
            push(
                if up { "up_idle" } else { "down_idle" },
                p.share(p.idle) * 100.0,
            );
            push(
                if up { "up_load_idle" } else { "down_load_idle" },
                l.share(l.idle) * 100.0,
            );
        }
    }
}

async fn census(proxy: &Proxy, hello: Arc<Vec<u8>>, mode: u8, backend: SocketAddr) -> Census {
    let (proxy_port, backend_port) = (proxy.addr.port(), backend.port());
    // The rate phase's TIME_WAIT sockets age past `TW_FRESH` meanwhile.
    tokio::time::sleep(Duration::from_secs(TW_FRESH + 2)).await;
    let census_start = Instant::now();
    let segs0 = net_counter("/proc/net/snmp", "Tcp:", "OutSegs");
    let over0 = net_counter("/proc/net/netstat", "TcpExt:", "TCPTimeWaitOverflow");
    let perf_proxy = count_events(proxy.pid, SYSCALLS);
    let perf_load = count_events(std::process::id(), SYSCALLS);
    // perf attaches asynchronously; a short pause keeps the census inside.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, done, _) = rate(proxy.addr, hello, 30, mode, CENSUS).await;
    let segs = net_counter("/proc/net/snmp", "Tcp:", "OutSegs") - segs0;
    let (proxy_calls, load_calls) = (
        events_counted(perf_proxy, SYSCALLS)[0],
        events_counted(perf_load, SYSCALLS)[0],
    );
    // The last closes complete within a few round trips on loopback.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let counted = time_wait(proxy_port, backend_port);
    if census_start.elapsed() > Duration::from_secs(TW_FRESH - 1) {
        eprintln!(
            "  census: took over {} s, TIME_WAIT figures are short",
            TW_FRESH - 1
        );
    }
    let over = net_counter("/proc/net/netstat", "TcpExt:", "TCPTimeWaitOverflow") - over0;
    let n = done.max(1) as f64;
    let tw = counted.map(|c| c as f64 / n);
    Census {
        segments: segs as f64 / n,
        proxy_syscalls: proxy_calls / n,
        load_syscalls: load_calls / n,
        tw,
        tw_overflow: over as f64 / n,
    }
}

/// MB/s (10^6 bytes) client → backend over 8 streams.
async fn upload(addr: SocketAddr, hello: Arc<Vec<u8>>, seconds: u64, stats: &BackendStats) -> f64 {
    let end = Instant::now() + Duration::from_secs(seconds);
    let mut streams = Vec::new();
    for _ in 0..STREAMS {
        streams.push(open(addr, &hello, b'U').await.unwrap());
    }
    let before = stats.upload_bytes.load(Ordering::Relaxed);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for mut stream in streams {
        tasks.push(tokio::spawn(async move {
            let buf = vec![0x55u8; CHUNK];
            while Instant::now() < end {
                if stream.write_all(&buf).await.is_err() {
                    break;
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let moved = stats.upload_bytes.load(Ordering::Relaxed) - before;
    moved as f64 / start.elapsed().as_secs_f64() / 1e6
}

/// MB/s backend → client over 8 streams.
async fn download(addr: SocketAddr, hello: Arc<Vec<u8>>, seconds: u64) -> f64 {
    let end = Instant::now() + Duration::from_secs(seconds);
    let moved = Arc::new(AtomicU64::new(0));
    let mut streams = Vec::new();
    for _ in 0..STREAMS {
        streams.push(open(addr, &hello, b'D').await.unwrap());
    }
    let start = Instant::now();
    let mut tasks = Vec::new();
    for mut stream in streams {
        let moved = moved.clone();
        tasks.push(tokio::spawn(async move {
            let mut buf = vec![0u8; CHUNK];
            while Instant::now() < end {
                match stream.read(&mut buf).await {
                    Ok(n @ 1..) => moved.fetch_add(n as u64, Ordering::Relaxed),
                    _ => break,
                };
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    moved.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64() / 1e6
}

/// (p50, p99) of a 1-byte round trip, in microseconds.
async fn ping(addr: SocketAddr, hello: Arc<Vec<u8>>, seconds: u64) -> (f64, f64) {
    let mut stream = open(addr, &hello, b'E').await.unwrap();
    let end = Instant::now() + Duration::from_secs(seconds);
    let mut samples = Vec::with_capacity(200_000);
    let mut byte = [7u8; 1];
    // Warm-up: the first round trips include the backend connect.
    for _ in 0..100 {
        stream.write_all(&byte).await.unwrap();
        stream.read_exact(&mut byte).await.unwrap();
    }
    while Instant::now() < end {
        let t = Instant::now();
        stream.write_all(&byte).await.unwrap();
        stream.read_exact(&mut byte).await.unwrap();
        samples.push(t.elapsed());
    }
    samples.sort();
    let pick = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
    (pick(0.50), pick(0.99))
}

struct IdleFigures {
    rss_per_conn: f64,
    slab_per_conn: f64,
    avail_per_conn: f64,
    fds_per_conn: f64,
}

/// Opens `count` quiet connections through the proxy and measures deltas.
async fn idle(
    proxy: &Proxy,
    hello: Arc<Vec<u8>>,
    count: usize,
    stats: &BackendStats,
) -> IdleFigures {
    let pid = proxy.pid;
    // One connection first so lazy one-time setup is in the baseline.
    let warm = open(proxy.addr, &hello, b'I').await.unwrap();
    wait_for(|| stats.idle_open.load(Ordering::Relaxed) == 1, "warm-up").await;
    drop(warm);
    wait_for(
        || stats.idle_open.load(Ordering::Relaxed) == 0,
        "warm-up close",
    )
    .await;
    let (rss0, fds0) = (rss_kib(pid), fd_count(pid));
    let (slab0, avail0) = (meminfo_kib("Slab:"), meminfo_kib("MemAvailable:"));
    let mut conns = Vec::with_capacity(count);
    for _ in 0..count {
        conns.push(open(proxy.addr, &hello, b'I').await.unwrap());
    }
    wait_for(
        || stats.idle_open.load(Ordering::Relaxed) == count,
        "idle connections to reach the backend",
    )
    .await;
    // Let the proxy finish whatever it does after relaying the hello.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (rss1, fds1) = (rss_kib(pid), fd_count(pid));
    let (slab1, avail1) = (meminfo_kib("Slab:"), meminfo_kib("MemAvailable:"));
    drop(conns);
    wait_for(
        || stats.idle_open.load(Ordering::Relaxed) == 0,
        "idle connections to close",
    )
    .await;
    let n = count as f64;
    IdleFigures {
        rss_per_conn: (rss1 as f64 - rss0 as f64) * 1024.0 / n,
        slab_per_conn: (slab1 as f64 - slab0 as f64) * 1024.0 / n,
        avail_per_conn: (avail0 as f64 - avail1 as f64) * 1024.0 / n,
        fds_per_conn: (fds1 as f64 - fds0 as f64) / n,
    }
}

/// The kernel's TIME_WAIT length (`TCP_TIMEWAIT_LEN`), which no sysctl
/// changes: a port the relay closed first stays taken this long.
const TIME_WAIT_SECS: f64 = 60.0;

/// What the `ceiling` phase measured for one set of source addresses.
struct CeilingFigures {
    /// Connections relayed in the 60 s.
    relayed: u64,
    /// Connections relayed before the first one failed.
    before_first_failure: u64,
    /// Connections that failed.
    failed: u64,
}

/// Fails unless ports are held in TIME_WAIT for the full 60 s here, as on
/// a real network; on loopback Linux reuses them after a second
/// (`tcp_tw_reuse = 2`), which no deployment sees.
fn check_ceiling_namespace() {
    let reuse = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_tw_reuse").unwrap_or_default();
    assert_eq!(
        reuse.trim(),
        "0",
        "the ceiling phase needs tcp_tw_reuse = 0 in a network namespace of its own: \
         run it as `scripts/loadbench.sh --only ceiling` (as root), which makes one"
    );
}

/// Opens connections through `proxy` for `TIME_WAIT_SECS`, as fast as
/// `RATE_CLIENTS` clients can, each closing after the reply. The relay
/// passes the client's FIN on, so it closes its backend side first and
/// that port stays in TIME_WAIT (a client that reset instead would have the
/// relay reset the backend too, and no port would be held). No port is
/// freed within the window, so what it relays is what the ports allow
/// every 60 s, sustained, once the relay is fast enough to use them all;
/// the failures that follow show it was.
async fn ceiling(proxy: &Proxy, hello: Arc<Vec<u8>>) -> CeilingFigures {
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let first_failure = Arc::new(AtomicU64::new(u64::MAX));
    let end = Instant::now() + Duration::from_secs_f64(TIME_WAIT_SECS);
    let addr = proxy.addr;
    let mut tasks = Vec::new();
    for client in 0..RATE_CLIENTS {
        // Each client from an address of its own in 127.0.1.1-32: it closes
        // first and keeps its ports in TIME_WAIT too, and one source
        // address toward the relay would run out before the relay's four.
        // (Real clients are other hosts and take none of the relay's ports.)
        let from = SocketAddr::from(([127, 0, 1, 1 + (client % 32) as u8], 0));
        let (hello, done, failed, first_failure) = (
            hello.clone(),
            done.clone(),
            failed.clone(),
            first_failure.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut reply = vec![0u8; REPLY];
            while Instant::now() < end {
                let result = async {
                    let socket = tokio::net::TcpSocket::new_v4()?;
                    // The port is chosen at connect(2), per 4-tuple: a port
                    // bind(2) took would be barred to the relay's connects
                    // (the kernel skips ports bound without this option).
                    nix::sys::socket::setsockopt(
                        &socket,
                        nix::sys::socket::sockopt::IpBindAddressNoPort,
                        &true,
                    )?;
                    socket.bind(from)?;
                    let mut stream = send_hello(socket.connect(addr).await?, &hello, b'R').await?;
                    stream.read_exact(&mut reply).await?;
                    std::io::Result::Ok(())
                };
                match tokio::time::timeout_at(end.into(), result).await {
                    Ok(Ok(())) => {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(Err(_)) => {
                        first_failure.fetch_min(done.load(Ordering::Relaxed), Ordering::Relaxed);
                        failed.fetch_add(1, Ordering::Relaxed);
                        // A failed connection costs the relay no port: pace
                        // the retries so they do not take its CPU.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    Err(_) => {}
                }
            }
        }));
    }
    // Every 10 s, how many went through: the rate falls as the ports run
    // out, since connect(2) then searches longer for a free one.
    let progress = {
        let (done, failed) = (done.clone(), failed.clone());
        tokio::spawn(async move {
            for tenth in 1.. {
                tokio::time::sleep(Duration::from_secs(10)).await;
                eprintln!(
                    "  ceiling: {:3} s  {:6} relayed  {:6} failed",
                    tenth * 10,
                    done.load(Ordering::Relaxed),
                    failed.load(Ordering::Relaxed)
                );
            }
        })
    };
    for task in tasks {
        task.await.unwrap();
    }
    progress.abort();
    let done = done.load(Ordering::Relaxed);
    CeilingFigures {
        relayed: done,
        before_first_failure: first_failure.load(Ordering::Relaxed).min(done),
        failed: failed.load(Ordering::Relaxed),
    }
}

/// The `ceiling` phase: one and four egress source addresses, each toward
/// a backend address of its own, so neither inherits the other's ports.
async fn ceiling_phase(
    args: &mut Args,
    dir: &Path,
    hello: Arc<Vec<u8>>,
    run: usize,
    samples: &mut Samples,
) {
    let sets: [(&'static str, &[&'static str]); 2] = [
        ("ceiling_1", &["127.0.0.2"]),
        (
            "ceiling_4",
            &["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"],
        ),
    ];
    for (metric, sources) in sets {
        let stats = Arc::new(BackendStats::default());
        let backend_addr = backend(stats, Arc::new(AtomicBool::new(false))).await;
        args.sources = sources.to_vec();
        let relay = start_snirelay(args, dir, backend_addr).await;
        args.sources.clear();
        let f = ceiling(&relay, hello.clone()).await;
        let sustained = f.relayed as f64 / TIME_WAIT_SECS;
        eprintln!(
            "run {run} snirelay ceiling  {} source(s): {} relayed in {TIME_WAIT_SECS} s ({sustained:.0} conn/s sustained), {} before the first failure, {} failed",
            sources.len(),
            f.relayed,
            f.before_first_failure,
            f.failed
        );
        if f.failed == 0 {
            eprintln!(
                "  ceiling: no connection failed: the relay did not use up the ports, so the figure is its own rate, not the ceiling"
            );
        }
        samples
            .entry((metric, "snirelay"))
            .or_default()
            .push(sustained);
    }
}

/// One `GET` on the admin listener (`Connection: close`); the body.
async fn admin_get(admin: SocketAddr, token: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(admin).await.unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\nAuthorization: Bearer {token}\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8(raw).unwrap();
    assert!(
        text.starts_with("HTTP/1.1 200"),
        "{}",
        &text[..text.len().min(200)]
    );
    text.split_once("\r\n\r\n").unwrap().1.to_owned()
}

/// The whole `GET /connections` listing, page by page; how many listed.
async fn full_listing(admin: SocketAddr, token: &str) -> usize {
    let (mut listed, mut after) = (0, 0u64);
    // Bounded: a million connections.
    for _ in 0..1000 {
        let body = admin_get(
            admin,
            token,
            &format!("/connections?limit=1000&after={after}"),
        )
        .await;
        listed += body.matches("\"id\":").count();
        // The cursor, without parsing the page (the load side shares the
        // machine with the relay).
        let next = body
            .rsplit_once("\"next_after\":")
            .and_then(|(_, rest)| {
                rest.trim_start()
                    .split(|c: char| !c.is_ascii_digit())
                    .next()
            })
            .and_then(|n| n.parse().ok());
        match next {
            Some(n) => after = n,
            None => break,
        }
    }
    listed
}

/// The `listing` phase: rates without and with a looping full listing of
/// `count` open connections; (rate without, rate with, ms per listing,
/// listings done).
async fn listing(
    proxy: &Proxy,
    admin: (SocketAddr, &'static str),
    hello: Arc<Vec<u8>>,
    count: usize,
    seconds: u64,
    listing_first: bool,
    stats: &BackendStats,
) -> (f64, f64, f64, usize) {
    let mut conns = Vec::with_capacity(count);
    for _ in 0..count {
        conns.push(open(proxy.addr, &hello, b'I').await.unwrap());
    }
    wait_for(
        || stats.idle_open.load(Ordering::Relaxed) == count,
        "idle connections to reach the backend",
    )
    .await;
    let listed = full_listing(admin.0, admin.1).await;
    assert!(listed >= count, "listed {listed} of {count}");
    let (mut without, mut with, mut per_listing, mut listings) = (0.0, 0.0, 0.0, 0);
    for listing_now in [listing_first, !listing_first] {
        if !listing_now {
            without = rate(proxy.addr, hello.clone(), seconds, b'R', u64::MAX)
                .await
                .0;
            continue;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let lister = tokio::spawn({
            let stop = stop.clone();
            async move {
                let (start, mut done) = (Instant::now(), 0usize);
                while !stop.load(Ordering::Relaxed) {
                    full_listing(admin.0, admin.1).await;
                    done += 1;
                }
                (start.elapsed(), done)
            }
        });
        with = rate(proxy.addr, hello.clone(), seconds, b'R', u64::MAX)
            .await
            .0;
        stop.store(true, Ordering::Relaxed);
        let (spent, done) = lister.await.unwrap();
        per_listing = spent.as_secs_f64() * 1e3 / done.max(1) as f64;
        listings = done;
    }
    drop(conns);
    wait_for(
        || stats.idle_open.load(Ordering::Relaxed) == 0,
        "idle connections to close",
    )
    .await;
    (without, with, per_listing, listings)
}

async fn wait_for(done: impl Fn() -> bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// -------------------------------------------------------------------- table

type Samples = BTreeMap<(&'static str, &'static str), Vec<f64>>;

fn main() {
    let args = args();
    // Pinned before the runtime starts, so that its threads inherit it.
    if let Some((_, load)) = args.pin {
        let status = Command::new("taskset")
            .args([
                "-p",
                "-c",
                &load.to_string(),
                &std::process::id().to_string(),
            ])
            .stdout(Stdio::null())
            .status();
        assert!(status.is_ok_and(|s| s.success()), "taskset failed");
    }
    let hello_path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/openssl_sni.bin");
    let hello = Arc::new(std::fs::read(&hello_path).unwrap());
    // The client and the backend share this process: two threads, or one
    // when pinned (two threads on one core only take turns, and a client
    // whose thread waits out the other's time slice, milliseconds, shows
    // that as the proxy's latency).
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(if args.pin.is_some() { 1 } else { 2 })
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(bench(args, hello));
}

async fn bench(mut args: Args, hello: Arc<Vec<u8>>) {
    if args.only.iter().any(|o| o == "listing") {
        let admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
        args.admin = Some((admin, "0123456789abcdef0123456789abcdef"));
    }
    let stats = Arc::new(BackendStats::default());
    let stop_download = Arc::new(AtomicBool::new(false));
    let backend_addr = backend(stats.clone(), stop_download.clone()).await;
    // HAProxy gets a backend of its own, so that the census can tell each
    // proxy's TIME_WAIT sockets toward it by port.
    let haproxy_backend = backend(stats.clone(), stop_download.clone()).await;
    let sozu_backend = backend(stats.clone(), stop_download.clone()).await;
    let mut anchor_backends = Vec::new();
    for _ in &args.anchors {
        anchor_backends.push(backend(stats.clone(), stop_download.clone()).await);
    }
    let dir = std::env::temp_dir().join(format!("snirelay-loadbench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut samples: Samples = BTreeMap::new();
    if args.only.iter().any(|o| o == "ceiling") {
        assert!(
            args.only.len() == 1,
            "the ceiling phase runs alone (`--only ceiling`): it needs a network namespace \
             whose ports are held in TIME_WAIT, which would starve the other phases"
        );
        check_ceiling_namespace();
        for run in 0..args.runs {
            ceiling_phase(&mut args, &dir, hello.clone(), run, &mut samples).await;
        }
        print_table(&samples, &args);
        return;
    }
    let only = |s: &str| args.only.iter().any(|o| o == s);
    let secs = args.seconds;
    eprintln!(
        "loadbench: {} run(s), {secs} s phases, threads = {}, splice = {}, pipe_size = {}, idle = {}; logs in {}",
        args.runs,
        args.threads,
        args.splice,
        args.pipe_size,
        args.idle,
        dir.display()
    );
    check_port_range();

    for run in 0..args.runs {
        let relay = start_snirelay(&args, &dir, backend_addr).await;
        let haproxy = match &args.haproxy {
            Some(bin) => Some(start_haproxy(bin, "haproxy", &args, &dir, haproxy_backend).await),
            None => None,
        };
        let sozu = match (
            &args.sozu,
            ["rate", "up", "down", "ping"].iter().any(|p| only(p)),
        ) {
            (Some(bin), true) => Some(sozu::start_sozu(bin, &args, &dir, sozu_backend).await),
            _ => None,
        };
        if only("rate") && args.slices > 0 {
            let haproxy = haproxy
                .as_ref()
                .expect("--slices compares snirelay with HAProxy: drop --haproxy none");
            sliced_rate(&relay, haproxy, &args, hello.clone(), run, &mut samples).await;
        }
        let mut extra = Vec::new();
        if ["rate", "up", "down", "ping"].iter().any(|p| only(p)) {
            for (anchor, backend) in args.anchors.iter().zip(&anchor_backends) {
                extra.push(anchors::start(anchor, &args, &dir, *backend).await);
            }
        }
        // Alternate who goes first.
        let mut order: Vec<&Proxy> = std::iter::once(&relay)
            .chain(haproxy.as_ref())
            .chain(sozu.as_ref())
            .chain(extra.iter())
            .collect();
        if run % 2 == 1 {
            order.reverse();
        }
        for proxy in &order {
            let name = proxy.name;
            if only("rate") && args.slices == 0 {
                let f = rate_and_cost(proxy, hello.clone(), secs, args.rate_mode, args.pin).await;
                record_rate(&mut samples, &format!("run {run}"), name, &f);
                let mut push = |metric, v| samples.entry((metric, name)).or_default().push(v);
                if args.pin.is_some() {
                    let backend = match name {
                        "haproxy" => haproxy_backend,
                        "sozu" => sozu_backend,
                        "snirelay" => backend_addr,
                        anchor => {
                            anchor_backends
                                [args.anchors.iter().position(|a| a.name == anchor).unwrap()]
                        }
                    };
                    let c = census(proxy, hello.clone(), args.rate_mode, backend).await;
                    eprintln!(
                        "run {run} {name:8} census  {:.1} segments/conn  syscalls/conn proxy {:.1} load {:.1}  TIME_WAIT/conn client {:.2} proxy-front {:.2} proxy-back {:.2} backend {:.2} (overflow {:.2})",
                        c.segments,
                        c.proxy_syscalls,
                        c.load_syscalls,
                        c.tw[0],
                        c.tw[1],
                        c.tw[2],
                        c.tw[3],
                        c.tw_overflow
                    );
                    push("census_segments", c.segments);
                    push("census_proxy_syscalls", c.proxy_syscalls);
                    push("census_load_syscalls", c.load_syscalls);
                    push("census_tw_client", c.tw[0]);
                    push("census_tw_front", c.tw[1]);
                    push("census_tw_back", c.tw[2]);
                    push("census_tw_backend", c.tw[3]);
                    push("census_tw_overflow", c.tw_overflow);
                }
            }
            // Proxy CPU milliseconds per 100 MB moved (the phases move
            // `MB/s * seconds` MB).
            let cost = |cpu0: f64, mb_per_s: f64| {
                (cpu_seconds(proxy.pid) - cpu0) * 1e3 / (mb_per_s * secs as f64 / 100.0)
            };
            if only("up") {
                let census = match args.stream_census {
                    true => Some(StreamCensus::start(proxy, args.pin).await),
                    false => None,
                };
                let cpu0 = cpu_seconds(proxy.pid);
                let v = upload(proxy.addr, hello.clone(), secs, &stats).await;
                let c = cost(cpu0, v);
                eprintln!("run {run} {name:8} up    {v:10.0} MB/s  {c:6.1} ms CPU/100 MB");
                samples.entry(("up", name)).or_default().push(v);
                samples.entry(("up_cpu", name)).or_default().push(c);
                if let Some(census) = census {
                    census.finish(v * secs as f64, "up", name, &mut samples);
                }
            }
            if only("down") {
                stop_download.store(false, Ordering::Relaxed);
                let census = match args.stream_census {
                    true => Some(StreamCensus::start(proxy, args.pin).await),
                    false => None,
                };
                let cpu0 = cpu_seconds(proxy.pid);
                let v = download(proxy.addr, hello.clone(), secs).await;
                let c = cost(cpu0, v);
                stop_download.store(true, Ordering::Relaxed);
                eprintln!("run {run} {name:8} down  {v:10.0} MB/s  {c:6.1} ms CPU/100 MB");
                samples.entry(("down", name)).or_default().push(v);
                samples.entry(("down_cpu", name)).or_default().push(c);
                if let Some(census) = census {
                    census.finish(v * secs as f64, "down", name, &mut samples);
                }
            }
            if only("ping") {
                let (p50, p99) = ping(proxy.addr, hello.clone(), secs.min(5)).await;
                eprintln!("run {run} {name:8} ping  p50 {p50:.1} us  p99 {p99:.1} us");
                samples.entry(("p50", name)).or_default().push(p50);
                samples.entry(("p99", name)).or_default().push(p99);
            }
        }
        if only("up") || only("down") {
            if only("up") {
                let v = upload(backend_addr, hello.clone(), secs, &stats).await;
                eprintln!("run {run} direct   up    {v:10.0} MB/s");
                samples.entry(("up", "direct")).or_default().push(v);
            }
            if only("down") {
                stop_download.store(false, Ordering::Relaxed);
                let v = download(backend_addr, hello.clone(), secs).await;
                stop_download.store(true, Ordering::Relaxed);
                eprintln!("run {run} direct   down  {v:10.0} MB/s");
                samples.entry(("down", "direct")).or_default().push(v);
            }
        }
        if let (true, Some(admin)) = (only("listing"), args.admin) {
            let (without, with, ms, n) = listing(
                &relay,
                admin,
                hello.clone(),
                args.idle,
                secs,
                run % 2 == 1,
                &stats,
            )
            .await;
            eprintln!(
                "run {run} snirelay listing  rate {without:.0} conn/s without, {with:.0} with {n} full listings of {} ({ms:.1} ms each)",
                args.idle
            );
            samples
                .entry(("rate_idle", "snirelay"))
                .or_default()
                .push(without);
            samples
                .entry(("rate_listing", "snirelay"))
                .or_default()
                .push(with);
            samples
                .entry(("listing_ms", "snirelay"))
                .or_default()
                .push(ms);
        }
        drop(order);
        drop(relay);
        drop(haproxy);
        drop(sozu);
        drop(extra);
        if only("idle") {
            // Fresh processes, one at a time, so neither holds the other's
            // connections in the meminfo deltas.
            let mut names: Vec<&str> = vec!["snirelay", "haproxy"];
            if args.sozu.is_some() {
                names.push("sozu");
            }
            names.extend(args.anchors.iter().map(|a| a.name));
            if run % 2 == 1 {
                names.reverse();
            }
            for name in names {
                let proxy = match (name, &args.haproxy, &args.sozu) {
                    ("snirelay", _, _) => start_snirelay(&args, &dir, backend_addr).await,
                    ("sozu", _, Some(bin)) => {
                        sozu::start_sozu(bin, &args, &dir, backend_addr).await
                    }
                    ("haproxy", Some(bin), _) => {
                        start_haproxy(bin, "haproxy", &args, &dir, backend_addr).await
                    }
                    (anchor, _, _) => match args.anchors.iter().find(|a| a.name == anchor) {
                        Some(anchor) => anchors::start(anchor, &args, &dir, backend_addr).await,
                        None => continue,
                    },
                };
                let f = idle(&proxy, hello.clone(), args.idle, &stats).await;
                eprintln!(
                    "run {run} {name:8} idle  rss {:.0} B/conn  slab {:.0} B/conn  memavail -{:.0} B/conn  fds {:.2}/conn",
                    f.rss_per_conn, f.slab_per_conn, f.avail_per_conn, f.fds_per_conn
                );
                let name: &'static str = proxy.name;
                samples
                    .entry(("idle_rss", name))
                    .or_default()
                    .push(f.rss_per_conn);
                samples
                    .entry(("idle_slab", name))
                    .or_default()
                    .push(f.slab_per_conn);
                samples
                    .entry(("idle_avail", name))
                    .or_default()
                    .push(f.avail_per_conn);
                samples
                    .entry(("idle_fds", name))
                    .or_default()
                    .push(f.fds_per_conn);
            }
        }
    }
    print_table(&samples, &args);
    print_pairs(&samples, &args);
    if args.sozu.is_some() {
        sozu::print_table(&samples);
    }
    anchors::print_table(&samples, &args.anchors);
}

/// The paired-slice ratios of `--slices`: per figure, the median of the
/// per-pair snirelay/HAProxy ratios, a 95 % confidence interval for that
/// median (sign-test order statistics: no assumption about the noise's
/// distribution), and in how many pairs snirelay came out ahead.
fn print_pairs(samples: &Samples, args: &Args) {
    let rows: &[(&str, &str, bool, &str)] = &[
        ("rate", "connections/s", true, ">= 1.0"),
        (
            "rate_conn_per_cpu_s",
            "connections per proxy CPU-second",
            true,
            ">= 1.0",
        ),
        (
            "core_proxy_cpu",
            "proxy's core busy us per connection, interrupts included",
            false,
            "<= 1.0",
        ),
        ("rate_p50", "connection latency p50", false, ""),
        ("rate_p99", "connection latency p99", false, "<= 1.0"),
    ];
    let mut out = std::io::stdout().lock();
    let mut header = false;
    for &(metric, label, higher_is_better, target) in rows {
        let Some(v) = samples.get(&(metric, "pair")) else {
            continue;
        };
        let mut v = v.clone();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if !header {
            let _ = writeln!(
                out,
                "\npaired slices: {n} pairs of {} s (ABBA order over {} run(s)); per-pair snirelay/HAProxy ratios",
                args.seconds, args.runs
            );
            let _ = writeln!(
                out,
                "| ratio | median | 95% CI of the median | pairs snirelay ahead | target |"
            );
            let _ = writeln!(out, "|---|---|---|---|---|");
            header = true;
        }
        let ahead = v
            .iter()
            .filter(|&&r| if higher_is_better { r > 1.0 } else { r < 1.0 })
            .count();
        let interval = match sign_test_rank(n) {
            Some(k) => format!("{:.3} - {:.3}", v[k - 1], v[n - k]),
            None => "- (too few pairs)".to_owned(),
        };
        let _ = writeln!(
            out,
            "| {label} | {:.3} | {interval} | {ahead}/{n} | {target} |",
            median(&v)
        );
    }
}

/// The rank k (1-based) such that the k-th smallest and k-th largest of n
/// paired ratios bound their median with at least 95 % confidence: the
/// largest k with P(Binomial(n, 1/2) < k) <= 2.5 %. None when n is too
/// small for any (n < 6).
fn sign_test_rank(n: usize) -> Option<usize> {
    let mut below = 0.0; // P(X < k), growing with k
    let mut term = 0.5f64.powi(n as i32); // P(X = k - 1), starting at k = 1
    let mut best = None;
    for k in 1..=n / 2 {
        below += term;
        if below > 0.025 {
            break;
        }
        best = Some(k);
        term *= (n - (k - 1)) as f64 / k as f64;
    }
    best
}

fn print_table(samples: &Samples, args: &Args) {
    let get = |metric: &str, who: &str| {
        samples
            .iter()
            .find(|((m, w), _)| *m == metric && *w == who)
            .map(|(_, v)| median(v))
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "\nmedians of {} alternating run(s){}; threads = {}; splice = {}; pipe_size = {}; pin = {}; closer = {}; proxy_v2 = {}; snirelay tcp_keepalive = {}",
        args.runs,
        if args.slices > 0 {
            format!(" (rate: {} slice pairs each)", args.slices)
        } else {
            String::new()
        },
        args.threads,
        args.splice,
        args.pipe_size,
        args.pin.map_or("off".to_owned(), |(p, l)| format!(
            "proxy on CPU {p}, load on CPU {l}"
        )),
        if args.rate_mode == b'C' {
            "backend"
        } else {
            "client"
        },
        args.proxy_v2,
        args.keepalive
    );
    let _ = writeln!(
        out,
        "| metric | snirelay | HAProxy | snirelay/HAProxy | direct | snirelay/direct | target |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|");
    let rows: &[(&str, &str, &str)] = &[
        ("rate", "connections/s (64 clients)", ">= 1.0x HAProxy"),
        (
            "rate_cpu",
            "proxy CPU us per connection (rate phase)",
            "lower is better",
        ),
        (
            "rate_conn_per_cpu_s",
            "connections per proxy CPU-second",
            ">= 1.0x HAProxy",
        ),
        (
            "rate_load_cpu",
            "load side (clients + backend) CPU us per connection",
            "lower is better",
        ),
        ("rate_busy", "proxy core busy % (rate phase)", ""),
        ("rate_load_busy", "load side busy % of a core", ""),
        (
            "core_proxy_idle",
            "proxy's core idle % (pinned; /proc/stat)",
            "",
        ),
        (
            "core_proxy_irq",
            "proxy's core in interrupts % (softirq: loopback delivery)",
            "",
        ),
        (
            "core_proxy_cpu",
            "proxy's core busy us per connection, interrupts included",
            "lower is better",
        ),
        ("core_load_idle", "load's core idle % (pinned)", ""),
        (
            "core_load_cpu",
            "load's core busy us per connection, interrupts included",
            "lower is better",
        ),
        (
            "rate_sleeps",
            "proxy blocked and woken (voluntary context switches) per connection",
            "",
        ),
        (
            "ipi_proxy",
            "IPIs received per connection: proxy's core (pinned)",
            "",
        ),
        (
            "ipi_load",
            "IPIs received per connection: load's core (pinned)",
            "",
        ),
        ("rate_p50", "connection latency p50 ms", ""),
        ("rate_p99", "connection latency p99 ms", "<= 1.0x HAProxy"),
        (
            "census_segments",
            "TCP segments per connection (census)",
            "",
        ),
        (
            "census_proxy_syscalls",
            "proxy system calls per connection",
            "",
        ),
        (
            "census_load_syscalls",
            "load side system calls per connection",
            "",
        ),
        ("census_tw_client", "TIME_WAIT per connection: client", ""),
        (
            "census_tw_front",
            "TIME_WAIT per connection: proxy, client-facing",
            "",
        ),
        (
            "census_tw_back",
            "TIME_WAIT per connection: proxy, backend-facing",
            "",
        ),
        ("census_tw_backend", "TIME_WAIT per connection: backend", ""),
        (
            "census_tw_overflow",
            "TIME_WAIT not kept (bucket table full) per connection",
            "0",
        ),
        (
            "up",
            "upload MB/s (8 streams)",
            ">= 1.0x HAProxy, >= 0.7x direct",
        ),
        (
            "down",
            "download MB/s (8 streams)",
            ">= 1.0x HAProxy, >= 0.7x direct",
        ),
        ("up_cpu", "proxy CPU ms per 100 MB up", "lower is better"),
        (
            "down_cpu",
            "proxy CPU ms per 100 MB down",
            "lower is better",
        ),
        (
            "up_calls",
            "proxy system calls per MB up (--stream-census)",
            "",
        ),
        ("down_calls", "proxy system calls per MB down", ""),
        (
            "up_bytes_per_call",
            "bytes per data call up (in and out)",
            "",
        ),
        ("down_bytes_per_call", "bytes per data call down", ""),
        ("up_wakeups", "proxy wake-ups per MB up", ""),
        ("down_wakeups", "proxy wake-ups per MB down", ""),
        ("up_idle", "proxy's core idle % up (pinned)", ""),
        ("down_idle", "proxy's core idle % down (pinned)", ""),
        ("up_load_idle", "load's core idle % up (pinned)", ""),
        ("down_load_idle", "load's core idle % down (pinned)", ""),
        ("p50", "ping-pong p50 us", ""),
        ("p99", "ping-pong p99 us", "<= HAProxy"),
        (
            "idle_rss",
            "idle RSS bytes/conn",
            "<= 4096, <= 0.5x HAProxy",
        ),
        ("idle_slab", "idle Slab bytes/conn (system)", ""),
        (
            "idle_avail",
            "idle MemAvailable drop bytes/conn (system)",
            "",
        ),
        ("idle_fds", "idle fds/conn in proxy", "2"),
        (
            "rate_idle",
            "connections/s with --idle open (listing phase)",
            "",
        ),
        (
            "rate_listing",
            "connections/s with --idle open, listing them in a loop",
            "within noise of the one above",
        ),
        ("listing_ms", "ms per full GET /connections listing", ""),
        (
            "ceiling_1",
            "sustained new connections/s to one backend address, 1 source address (ports / 60 s)",
            "",
        ),
        ("ceiling_4", "same, 4 source addresses", "4x the line above"),
        ("", "", ""),
    ];
    for &(metric, label, target) in rows {
        if metric.is_empty() {
            continue;
        }
        let (Some(s), h, d) = (
            get(metric, "snirelay"),
            get(metric, "haproxy"),
            get(metric, "direct"),
        ) else {
            continue;
        };
        let fmt = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1}"));
        let ratio = |a: f64, b: Option<f64>| b.map_or("-".to_owned(), |b| format!("{:.2}", a / b));
        let _ = writeln!(
            out,
            "| {label} | {} | {} | {} | {} | {} | {target} |",
            fmt(Some(s)),
            fmt(h),
            ratio(s, h),
            fmt(d),
            ratio(s, d),
        );
    }
}
