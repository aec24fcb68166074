//! sozu in the load benchmark: writes its configuration (a TCP listener
//! that prereads the ClientHello's SNI and routes on it without
//! terminating TLS, one frontend for the bench's name, one backend),
//! starts it with one worker, finds the worker's pid (the process that
//! carries the connections and whose CPU and memory are measured), and
//! prints sozu's figures beside snirelay's in a table of their own.
//!
//! Not here: the phases themselves and HAProxy's configuration (in
//! [`super`]); splicing and PROXY v2 toward the backend (this sozu
//! build has no splice, and `--proxy-v2` is refused with `--sozu`).

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::proc::sozu_worker;
use super::{Args, Proxy, Samples, free_port, median, pinned, wait_listening};

/// sozu's configuration: `worker_count = 1` (HAProxy runs `nbthread 1`),
/// timeouts as HAProxy's (connect 5 s, client and server 5 min), and
/// enough buffers and connections for `--idle` quiet connections (a
/// session takes two buffers).
pub(crate) fn config(dir: &Path, port: u16, backend: SocketAddr, idle: usize) -> String {
    let socket = dir.join("sozu.sock");
    let max_connections = idle + 1000;
    format!(
        r#"command_socket = "{socket}"
worker_count = 1
log_level = "error"
log_target = "stdout"
max_connections = {max_connections}
max_buffers = {max_buffers}

[[listeners]]
protocol = "tcp"
address = "127.0.0.1:{port}"
front_timeout = 300
back_timeout = 300
connect_timeout = 5

[clusters.bench]
protocol = "tcp"
frontends = [ {{ address = "127.0.0.1:{port}", hostname = "www.example.com" }} ]
backends = [ {{ address = "{backend}" }} ]
"#,
        socket = socket.display(),
        max_buffers = 2 * max_connections,
    )
}

/// Starts sozu from `bin` with [`config`] written into `dir`, waits until
/// it listens and its worker is up; the returned [`Proxy`] measures the
/// worker.
pub(crate) async fn start_sozu(bin: &Path, args: &Args, dir: &Path, backend: SocketAddr) -> Proxy {
    assert!(
        !args.proxy_v2,
        "--sozu runs without PROXY v2: drop --proxy-v2"
    );
    assert!(args.threads == 1, "--sozu runs one worker: drop --threads");
    let port = free_port();
    let path = dir.join("sozu.toml");
    std::fs::write(&path, config(dir, port, backend, args.idle)).unwrap();
    let log = std::fs::File::create(dir.join("sozu.log")).unwrap();
    let child = pinned(bin, args)
        .arg("start")
        .arg("-c")
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("cannot start sozu");
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    wait_listening(addr, "sozu").await;
    // `taskset` execs sozu in place, so the child's pid is sozu's main
    // process either way; the worker is its child.
    let main = child.id();
    let deadline = Instant::now() + Duration::from_secs(10);
    let worker = loop {
        if let Some(pid) = sozu_worker(main) {
            break pid;
        }
        assert!(Instant::now() < deadline, "sozu's worker did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    Proxy {
        name: "sozu",
        child,
        addr,
        pid: worker,
    }
}

/// snirelay against sozu, medians, for the figures both have.
pub(crate) fn print_table(samples: &Samples) {
    let get = |metric: &str, who: &str| {
        samples
            .iter()
            .find(|((m, w), _)| *m == metric && *w == who)
            .map(|(_, v)| median(v))
    };
    let rows: &[(&str, &str)] = &[
        ("rate", "connections/s"),
        ("rate_cpu", "proxy CPU per connection (us)"),
        ("rate_conn_per_cpu_s", "connections per proxy CPU-second"),
        ("rate_p50", "connect-to-reply p50 (ms)"),
        ("rate_p99", "connect-to-reply p99 (ms)"),
        ("up", "upload MB/s (8 streams)"),
        ("up_cpu", "proxy CPU ms per 100 MB up"),
        ("down", "download MB/s (8 streams)"),
        ("down_cpu", "proxy CPU ms per 100 MB down"),
        ("p50", "ping-pong p50 (us)"),
        ("p99", "ping-pong p99 (us)"),
        ("idle_rss", "idle RSS per connection (B)"),
        ("idle_slab", "idle kernel slab per connection (B)"),
        ("idle_avail", "idle MemAvailable drop per connection (B)"),
        ("idle_fds", "idle descriptors per connection"),
    ];
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "\nsnirelay against sozu (worker process measured)\n\n| figure | snirelay | sozu | snirelay/sozu |\n|---|---|---|---|"
    );
    for &(metric, label) in rows {
        if let (Some(s), Some(z)) = (get(metric, "snirelay"), get(metric, "sozu")) {
            let _ = writeln!(out, "| {label} | {s:.1} | {z:.1} | {:.2} |", s / z);
        }
    }
}
