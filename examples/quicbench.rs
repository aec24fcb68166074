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
//! - `header`: what a PROXY v2 header on every datagram costs
//!   ([`quic_oneway`]): the same cases as `rate` (plain endpoints) through
//!   two relays, one whose backend sets `proxy_protocol = "v2"` and one
//!   without, alternating; the backend strips the header with the `ppp`
//!   crate's parser and echoes straight to the client, so the relay never
//!   sees an answer (which would end the headers) and carries one
//!   direction: its datagrams/s and CPU per GB of that direction, and the
//!   ratios with / without.
//! - `idle`: `--idle` flows (8,000 by default) opened (hello echoed) and
//!   left quiet; the relay's RSS and descriptor deltas per flow (each flow
//!   costs the relay a backend socket: keep `--idle` within the hard
//!   descriptor limit).
//!
//! Prints one table of medians over `--runs` runs (3 by default), relay and
//! direct alternating order run by run. Everything stays on 127.0.0.1 and
//! every phase is bounded in time.
//!
//! `--endpoints` says how the bench's clients and echo backend move their
//! datagrams, one set of rate cases per kind: `plain` (the default: one
//! `send` and one `recv` per datagram, as a simple UDP program does) and
//! `batched` (as quinn, and curl with ngtcp2, do: a flow's datagrams that
//! may go now, up to [`GSO_SEGMENTS`], in one GSO send; receives with GRO,
//! a slot of consecutive datagrams of one sender at a time). With
//! `batched` endpoints a run of one flow's datagrams reaches the relay as
//! one GRO slot, and what the relay forwards as one GSO send stays one
//! through the backend's echo and back; a relay that sends datagram by
//! datagram turns each run back into single datagrams.
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
//!  [--baseline nginx] [--endpoints plain,batched]`;
//! `quicbench --help` lists every option with its default.

#[path = "support/proc.rs"]
mod proc;
#[path = "support/quic_oneway.rs"]
mod quic_oneway;

use proc::{cpu_seconds, fd_count, median, rss_kib};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use std::io::IoSliceMut;

use quinn_udp::{RecvMeta, Transmit, UdpSocketState};
use tokio::io::Interest;
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
/// The most datagrams a `batched` endpoint sends in one GSO call: quinn
/// 0.11's `MAX_TRANSMIT_SEGMENTS`.
const GSO_SEGMENTS: usize = 10;
/// Receive slots of a `batched` endpoint (quinn-udp's `recvmmsg` batch).
const RECV_SLOTS: usize = quinn_udp::BATCH_SIZE;
/// One receive slot: a GRO slot holds up to 64 KiB.
const SLOT: usize = 65_536;
/// Receive slots of a `batched` client: its own echoes only, at most
/// [`IN_FLIGHT`] at once.
const CLIENT_SLOTS: usize = 8;

/// How the bench's clients and echo backend move datagrams.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Endpoints {
    /// One datagram per system call each way.
    Plain,
    /// As quinn does: a flow's queued datagrams (up to [`GSO_SEGMENTS`])
    /// in one GSO send, GRO and `recvmmsg` on receive.
    Batched,
}

impl Endpoints {
    fn parse(name: &str) -> Endpoints {
        match name {
            "batched" => Endpoints::Batched,
            _ => Endpoints::Plain,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Endpoints::Plain => "plain",
            Endpoints::Batched => "batched",
        }
    }
}

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
    /// Phases to run, comma-separated: rate, header, idle.
    #[arg(
        long,
        value_name = "PHASE,...",
        value_delimiter = ',',
        action = clap::ArgAction::Set,
        default_value = "rate,idle"
    )]
    only: Vec<String>,
    /// How the bench's clients and echo backend move datagrams, one rate
    /// phase per value, comma-separated: `plain` (one datagram per system
    /// call, as a simple UDP client or server) and `batched` (as quinn and
    /// curl's ngtcp2 do: up to 10 queued datagrams of a flow
    /// in one GSO send, receives with GRO and `recvmmsg`).
    #[arg(
        long,
        value_name = "KIND,...",
        value_delimiter = ',',
        action = clap::ArgAction::Set,
        default_value = "plain",
        value_parser = ["plain", "batched"]
    )]
    endpoints: Vec<String>,
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

/// A UDP echo backend: every datagram goes back to its sender. `Plain`:
/// one `recvfrom` and one `sendto` per datagram. `Batched`: as a quinn
/// server reads and writes (quinn-udp: `recvmmsg` with GRO, so a slot may
/// hold a run of one sender's datagrams, and each slot goes back in one
/// GSO send, cut at the same size).
async fn backend(endpoints: Endpoints) -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    match endpoints {
        Endpoints::Plain => {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                while let Ok((len, from)) = socket.recv_from(&mut buf).await {
                    let _ = socket.send_to(&buf[..len], from).await;
                }
            });
        }
        Endpoints::Batched => {
            let state = UdpSocketState::new((&socket).into()).unwrap();
            tokio::spawn(async move {
                let mut buf = vec![0u8; SLOT * RECV_SLOTS];
                let mut meta = [RecvMeta::default(); RECV_SLOTS];
                loop {
                    let Ok(n) = recv_batch(&socket, &state, &mut buf, &mut meta).await else {
                        return;
                    };
                    for (m, slot) in meta[..n].iter().zip(buf.chunks(SLOT)) {
                        let contents = &slot[..m.len];
                        let segment = (m.stride > 0 && m.len > m.stride).then_some(m.stride);
                        send_batch(&socket, &state, m.addr, contents, segment).await;
                    }
                }
            });
        }
    }
    addr
}

/// One `recvmmsg` (with GRO) on `socket` once it is readable: the number
/// of slots filled.
async fn recv_batch(
    socket: &UdpSocket,
    state: &UdpSocketState,
    buf: &mut [u8],
    meta: &mut [RecvMeta],
) -> std::io::Result<usize> {
    loop {
        socket.readable().await?;
        let mut bufs: Vec<IoSliceMut<'_>> = buf
            .chunks_mut(SLOT)
            .take(meta.len())
            .map(IoSliceMut::new)
            .collect();
        match socket.try_io(Interest::READABLE, || {
            state.recv(socket.into(), &mut bufs, meta)
        }) {
            Ok(n) => return Ok(n),
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(error) => return Err(error),
        }
    }
}

/// `contents` to `to` in one send: one datagram, or with `segment` a GSO
/// run of datagrams of that size (the last may be shorter). Waits while
/// the socket's buffer is full; a refused send is dropped (counted lost
/// by the sender's timeout).
async fn send_batch(
    socket: &UdpSocket,
    state: &UdpSocketState,
    to: SocketAddr,
    contents: &[u8],
    segment: Option<usize>,
) {
    let transmit = Transmit {
        destination: to,
        ecn: None,
        contents,
        segment_size: segment,
        src_ip: None,
    };
    loop {
        if socket.writable().await.is_err() {
            return;
        }
        match socket.try_io(Interest::WRITABLE, || {
            state.try_send(socket.into(), &transmit)
        }) {
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => continue,
            _ => return,
        }
    }
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

/// snirelay in front of `backend`; `backend_extra` is added to the
/// backend's table (`proxy_protocol = "v2"` for the `header` phase).
fn start_relay(args: &Args, dir: &Path, backend: SocketAddr, backend_extra: &str) -> Relay {
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
{backend_extra}
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

/// `count` short-header-looking datagrams of `size` bytes each, one after
/// another in `train`, numbered from `first`: form bit 0, fixed bit 1, an
/// 8-byte connection ID (the flow number), the sequence number, the
/// client's port (for the `header` phase's backend), filler.
fn short_headers(train: &mut Vec<u8>, size: usize, flow: u64, first: u64, count: usize, port: u16) {
    train.clear();
    train.resize(size * count, 0x5a);
    for (datagram, seq) in train.chunks_mut(size).zip(first..) {
        datagram[0] = 0x40 | (seq as u8 & 0x03);
        datagram[1..9].copy_from_slice(&flow.to_be_bytes());
        datagram[9..17].copy_from_slice(&seq.to_be_bytes());
        datagram[quic_oneway::PORT_AT].copy_from_slice(&port.to_be_bytes());
    }
}

#[derive(Default)]
struct Counters {
    echoed: AtomicU64,
    lost: AtomicU64,
}

/// What every flow of a rate case shares: how it moves datagrams, their
/// size, its window, the slots of the whole case, the measured interval
/// and the counters.
#[derive(Clone)]
struct Load {
    endpoints: Endpoints,
    size: usize,
    window: usize,
    slots: Arc<Semaphore>,
    from: Instant,
    until: Instant,
    counters: Arc<Counters>,
    /// Where an unconnected client socket sends (the `header` phase's,
    /// whose echoes come from the backend); `None`: the socket's peer.
    send_to: Option<SocketAddr>,
}

/// Sends short-header datagrams on `socket` until `until`, keeping at most
/// `window` of its own unanswered and taking a slot of `slots` for each.
/// `plain` endpoints send and read one datagram per call; `batched` ones
/// send what the flow may send at once (its window, the free slots, at
/// most [`GSO_SEGMENTS`]) in one GSO send of consecutive sequence numbers
/// and read echoes with GRO, a slot of `k` datagrams counting `k` echoes.
async fn drive(socket: UdpSocket, flow: u64, load: Load) {
    let Load {
        endpoints,
        size,
        window,
        slots,
        from,
        until,
        counters,
        send_to,
    } = load;
    let port = socket.local_addr().unwrap().port();
    // Only a batched endpoint turns GRO on: a plain one reads datagram by
    // datagram.
    let batched = (endpoints == Endpoints::Batched).then(|| {
        (
            UdpSocketState::new((&socket).into()).unwrap(),
            socket.peer_addr().unwrap(),
        )
    });
    let most = if batched.is_some() { GSO_SEGMENTS } else { 1 };
    let mut buf = vec![0u8; SLOT * CLIENT_SLOTS];
    let mut meta = [RecvMeta::default(); CLIENT_SLOTS];
    let mut train = Vec::with_capacity(size * most);
    let mut outstanding = 0usize;
    let mut seq = 0u64;
    let mut last_echo = Instant::now();
    loop {
        let now = Instant::now();
        if now >= until {
            break;
        }
        let receive = async {
            match &batched {
                None => socket
                    .recv(&mut buf)
                    .await
                    .map_or(0, |len| usize::from(len == size)),
                Some((state, _)) => match recv_batch(&socket, state, &mut buf, &mut meta).await {
                    Ok(n) => meta[..n]
                        .iter()
                        .filter(|m| m.stride == size)
                        .map(|m| m.len.div_ceil(size))
                        .sum(),
                    Err(_) => 0,
                },
            }
        };
        tokio::select! {
            echoes = receive => {
                let echoes = echoes.min(outstanding);
                if echoes > 0 {
                    outstanding -= echoes;
                    slots.add_permits(echoes);
                    last_echo = Instant::now();
                    if last_echo >= from && last_echo < until {
                        counters.echoed.fetch_add(echoes as u64, Ordering::Relaxed);
                    }
                }
            }
            permit = slots.acquire(), if outstanding < window => {
                permit.unwrap().forget();
                let mut count = 1;
                while count < most && outstanding + count < window {
                    match slots.try_acquire() {
                        Ok(permit) => permit.forget(),
                        Err(_) => break,
                    }
                    count += 1;
                }
                short_headers(&mut train, size, flow, seq + 1, count, port);
                seq += count as u64;
                let sent = match &batched {
                    None => match send_to {
                        Some(to) => socket.send_to(&train, to).await.is_ok(),
                        None => socket.send(&train).await.is_ok(),
                    },
                    Some((state, to)) => {
                        let segment = (count > 1).then_some(size);
                        send_batch(&socket, state, *to, &train, segment).await;
                        true
                    }
                };
                if !sent {
                    slots.add_permits(count);
                    continue;
                }
                if outstanding == 0 {
                    last_echo = Instant::now();
                }
                outstanding += count;
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

/// How a rate case's echoes come back.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Echoes {
    /// Back the way they went (the `rate` phase): each echo crosses the
    /// path twice.
    ThroughRelay,
    /// From the backend straight to the client (the `header` phase): the
    /// relay carries one direction.
    Direct,
}

/// Opens `flows` flows to `target` and drives them for `seconds`.
#[allow(clippy::too_many_arguments)]
async fn rate(
    endpoints: Endpoints,
    echoes: Echoes,
    target: SocketAddr,
    pid: Option<u32>,
    flows: usize,
    size: usize,
    seconds: u64,
    hello: &Arc<Vec<Vec<u8>>>,
) -> RateFigures {
    let mut sockets = Vec::with_capacity(flows);
    for chunk in (0..flows).collect::<Vec<_>>().chunks(OPENING) {
        let opened = chunk.iter().map(|&flow| {
            let hello = hello.clone();
            tokio::spawn(async move {
                match echoes {
                    Echoes::ThroughRelay => open_flow(target, &hello).await,
                    Echoes::Direct => {
                        quic_oneway::open_oneway_flow(target, &hello, flow as u64).await
                    }
                }
            })
        });
        for task in opened.collect::<Vec<_>>() {
            sockets.push(task.await.unwrap());
        }
    }
    let window = (IN_FLIGHT / flows).max(1);
    // One second of warm-up, then the measured interval.
    let from = Instant::now() + Duration::from_secs(1);
    let until = from + Duration::from_secs(seconds);
    let load = Load {
        endpoints,
        size,
        window,
        slots: Arc::new(Semaphore::new(IN_FLIGHT)),
        from,
        until,
        counters: Arc::new(Counters::default()),
        send_to: (echoes == Echoes::Direct).then_some(target),
    };
    let tasks: Vec<_> = sockets
        .into_iter()
        .enumerate()
        .map(|(flow, socket)| tokio::spawn(drive(socket, flow as u64, load.clone())))
        .collect();
    tokio::time::sleep_until(from.into()).await;
    let cpu0 = pid.map(cpu_seconds);
    tokio::time::sleep_until(until.into()).await;
    let cpu1 = pid.map(cpu_seconds);
    for task in tasks {
        task.await.unwrap();
    }
    let echoed = load.counters.echoed.load(Ordering::Relaxed) as f64;
    // An echo crossed the path twice (client → backend and back), or, on
    // the one-way path, the relay once.
    let crossings = if echoes == Echoes::ThroughRelay {
        2.0
    } else {
        1.0
    };
    let datagrams = crossings * echoed;
    let bytes = datagrams * size as f64;
    RateFigures {
        datagrams_per_s: datagrams / seconds as f64,
        bytes_per_s: bytes / seconds as f64,
        lost: load.counters.lost.load(Ordering::Relaxed),
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

/// One rate case: how the endpoints move datagrams, flows, datagram size.
type Case = (Endpoints, usize, usize);

/// The sample key of one figure of one case through `who`.
fn sample_key(case: Case, who: &str, what: &str) -> String {
    let (endpoints, flows, size) = case;
    format!(
        "{} {flows:>3} flows {size} B {who} {what}",
        endpoints.name()
    )
}

async fn bench(args: Args) {
    let hello = Arc::new(capture("ngtcp2"));
    let dir = std::env::temp_dir().join(format!("quicbench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kinds: Vec<Endpoints> = args.endpoints.iter().map(|e| Endpoints::parse(e)).collect();
    let mut backends = BTreeMap::new();
    for kind in [Endpoints::Plain].into_iter().chain(kinds.iter().copied()) {
        if let std::collections::btree_map::Entry::Vacant(slot) = backends.entry(kind.name()) {
            slot.insert(backend(kind).await);
        }
    }
    let direct = Arc::new(quic_oneway::HeaderCounts::default());
    let direct_backend = quic_oneway::direct_return_backend(direct.clone()).await;
    let direct = (direct_backend, direct);
    let mut samples = Samples::new();
    let mut lost = 0u64;
    let cases: Vec<Case> = kinds
        .iter()
        .flat_map(|&kind| [1, args.flows].map(|flows| (kind, flows)))
        .flat_map(|(kind, flows)| SIZES.map(|size| (kind, flows, size)))
        .collect();
    for run in 0..args.runs {
        if args.only.iter().any(|o| o == "rate") {
            for &case in &cases {
                let (endpoints, flows, size) = case;
                let backend = backends[endpoints.name()];
                // A fresh relay per case: no flows left from the last one.
                let relay = start_relay(&args, &dir, backend, "");
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
                    let f = rate(
                        endpoints,
                        Echoes::ThroughRelay,
                        target,
                        pid,
                        flows,
                        size,
                        args.seconds,
                        &hello,
                    )
                    .await;
                    let key = |what: &str| sample_key(case, who, what);
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
                        "run {run}: {} endpoints, {flows} flows, {size} B, {who}: {:.0} datagrams/s, {:.1} MB/s, lost {}{}",
                        endpoints.name(),
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
        if args.only.iter().any(|o| o == "header") {
            header_run(&args, &dir, run, &hello, &direct, &mut samples, &mut lost).await;
        }
        if args.only.iter().any(|o| o == "idle") {
            let relay = start_relay(&args, &dir, backends["plain"], "");
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
    if args.only.iter().any(|o| o == "header") {
        print_header_table(&samples, &args, &direct.1);
    }
}

/// The header phase's cases: plain endpoints, 1 and `--flows` flows, each
/// size.
fn header_cases(args: &Args) -> Vec<Case> {
    [1, args.flows]
        .into_iter()
        .flat_map(|flows| SIZES.map(|size| (Endpoints::Plain, flows, size)))
        .collect()
}

const WITHOUT: &str = "no header";
const WITH: &str = "v2 header";

/// One run of the `header` phase: each case through a relay whose backend
/// takes no header and one whose backend takes PROXY v2, the order
/// alternating run by run, echoes straight from the backend.
async fn header_run(
    args: &Args,
    dir: &Path,
    run: usize,
    hello: &Arc<Vec<Vec<u8>>>,
    (backend, _): &(SocketAddr, Arc<quic_oneway::HeaderCounts>),
    samples: &mut Samples,
    lost: &mut u64,
) {
    for case in header_cases(args) {
        let (endpoints, flows, size) = case;
        let mut order = [(WITHOUT, ""), (WITH, "proxy_protocol = \"v2\"")];
        if run % 2 == 1 {
            order.reverse();
        }
        for (who, extra) in order {
            let relay = start_relay(args, dir, *backend, extra);
            let f = rate(
                endpoints,
                Echoes::Direct,
                relay.addr,
                Some(relay.child.id()),
                flows,
                size,
                args.seconds,
                hello,
            )
            .await;
            let key = |what: &str| sample_key(case, who, what);
            samples
                .entry(key("datagrams/s"))
                .or_default()
                .push(f.datagrams_per_s);
            if let Some(cpu) = f.cpu_per_gb {
                samples.entry(key("CPU s/GB")).or_default().push(cpu);
            }
            *lost += f.lost;
            eprintln!(
                "run {run}: header phase, {flows} flows, {size} B, {who}: {:.0} datagrams/s one way, lost {}{}",
                f.datagrams_per_s,
                f.lost,
                f.cpu_per_gb
                    .map(|c| format!(", CPU {c:.2} s/GB"))
                    .unwrap_or_default()
            );
        }
    }
}

fn print_header_table(samples: &Samples, args: &Args, counts: &quic_oneway::HeaderCounts) {
    let m = |key: String| samples.get(&key).map(|v| median(v)).unwrap_or(f64::NAN);
    println!(
        "header phase (one way through the relay, echoes straight from the backend): {} datagrams with a header read by ppp ({} bytes each), {} naming another client port",
        counts.with_header.load(Ordering::Relaxed),
        counts.header_bytes.load(Ordering::Relaxed),
        counts.mismatched.load(Ordering::Relaxed)
    );
    println!(
        "| flows | size | no header datagrams/s | v2 header datagrams/s | ratio | no header CPU s/GB | v2 header CPU s/GB | CPU ratio |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for case in header_cases(args) {
        let (_, flows, size) = case;
        let (nd, hd) = (
            m(sample_key(case, WITHOUT, "datagrams/s")),
            m(sample_key(case, WITH, "datagrams/s")),
        );
        let (nc, hc) = (
            m(sample_key(case, WITHOUT, "CPU s/GB")),
            m(sample_key(case, WITH, "CPU s/GB")),
        );
        println!(
            "| {flows} | {size} | {nd:.0} | {hd:.0} | {:.2} | {nc:.2} | {hc:.2} | {:.2} |",
            hd / nd,
            hc / nc
        );
    }
}

fn print_table(samples: &Samples, args: &Args, cases: &[Case], lost: u64) {
    let m = |key: String| samples.get(&key).map(|v| median(v));
    println!(
        "medians of {} runs, {} s each, relay threads = {}, at most {IN_FLIGHT} datagrams in flight; datagrams lost: {lost}",
        args.runs, args.seconds, args.threads
    );
    if args.only.iter().any(|o| o == "rate")
        && let Some(name) = &args.baseline
    {
        println!(
            "| endpoints | flows | size | relay datagrams/s | {name} datagrams/s | ratio | relay CPU s/GB | {name} CPU s/GB | CPU ratio |"
        );
        println!("|---|---|---|---|---|---|---|---|---|");
        for &case in cases {
            let (endpoints, flows, size) = case;
            let get = |who: &str, what: &str| m(sample_key(case, who, what)).unwrap_or(f64::NAN);
            let (rd, nd) = (get("relay", "datagrams/s"), get(name, "datagrams/s"));
            let (rc, nc) = (get("relay", "CPU s/GB"), get(name, "CPU s/GB"));
            println!(
                "| {} | {flows} | {size} | {rd:.0} | {nd:.0} | {:.2} | {rc:.2} | {nc:.2} | {:.2} |",
                endpoints.name(),
                rd / nd,
                rc / nc
            );
        }
    } else if args.only.iter().any(|o| o == "rate") {
        println!(
            "| endpoints | flows | size | relay datagrams/s | direct datagrams/s | ratio | relay MB/s | direct MB/s | relay CPU s/GB |"
        );
        println!("|---|---|---|---|---|---|---|---|---|");
        for &case in cases {
            let (endpoints, flows, size) = case;
            let get = |who: &str, what: &str| m(sample_key(case, who, what)).unwrap_or(f64::NAN);
            let (rd, dd) = (get("relay", "datagrams/s"), get("direct", "datagrams/s"));
            println!(
                "| {} | {flows} | {size} | {rd:.0} | {dd:.0} | {:.2} | {:.1} | {:.1} | {:.2} |",
                endpoints.name(),
                rd / dd,
                get("relay", "MB/s"),
                get("direct", "MB/s"),
                get("relay", "CPU s/GB"),
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
