//! What the status page (`GET /` on the admin listener) costs the relay
//! path: relayed connections per second and their latency, with and
//! without viewers hammering the page.
//!
//! A relay (its default threads) routes to an in-process mutual-TLS echo
//! backend. A client runs closed-loop relayed sessions one after another
//! (TCP connect, TLS handshake through the relay, one echo, close) for a
//! fixed count per phase. Phases alternate `quiet` (nobody reads the page)
//! and `viewed` (`STATUS_VIEWERS` clients each fetching `/` every
//! `STATUS_EVERY_MS`, by default 4 every 100 ms: 40 renders a second, 200
//! times what one browser tab on its 5 s refresh asks). Each phase is run
//! `STATUS_RUNS` times (default 5); printed: the median connections per
//! second and median session latency of each kind, the renders made, and
//! the median time to fetch the page.
//!
//! Run: `cargo bench --bench status_page` (or with `--profile dev` for a
//! quicker, relative reading). Environment: `STATUS_CONNS` (sessions per
//! phase, default 300), `STATUS_RUNS`, `STATUS_VIEWERS`, `STATUS_EVERY_MS`.

// The integration tests' harness: the relay as a child process on port 0.
#[path = "../tests/it/common/mod.rs"]
mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const NAME: &str = "bench.example.com";

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).map_or(default, |v| v.parse().unwrap())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// `conns` sessions one after another: connections per second and the
/// median session time (ms).
async fn phase(pki: &common::Pki, relay: SocketAddr, conns: u64) -> (f64, f64) {
    let mut times = Vec::with_capacity(conns as usize);
    let started = Instant::now();
    for _ in 0..conns {
        let t = Instant::now();
        let tls = common::echo_session(pki, relay, NAME)
            .await
            .expect("relayed session");
        drop(tls);
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let rate = conns as f64 / started.elapsed().as_secs_f64();
    (rate, median(&mut times))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let conns = env("STATUS_CONNS", 300);
    let runs = env("STATUS_RUNS", 5);
    let viewers = env("STATUS_VIEWERS", 4);
    let every = Duration::from_millis(env("STATUS_EVERY_MS", 100));

    let pki = common::Pki::new(&[NAME]);
    let backend = common::tls_echo_backend(&pki).await;
    let config = format!(
        "[admin]\nlisten = \"127.0.0.1:0\"\n\n{}",
        common::simple_config(&[NAME], backend, common::NO_SOURCE_LIMIT)
    );
    let relay = common::Relay::start(&config).await;
    let admin: SocketAddr = relay.wait_log(|l| l["message"] == "admin listening").await["addr"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    // Warm-up, unmeasured.
    phase(&pki, relay.addr(), 50).await;

    let viewing = Arc::new(AtomicBool::new(false));
    let renders = Arc::new(AtomicU64::new(0));
    let fetch_us = Arc::new(std::sync::Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..viewers {
        let (viewing, renders, fetch_us, stop) = (
            viewing.clone(),
            renders.clone(),
            fetch_us.clone(),
            stop.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                if viewing.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    let (status, _) = common::http_get(admin, "/").await;
                    assert_eq!(status, 200);
                    fetch_us
                        .lock()
                        .unwrap()
                        .push(t.elapsed().as_secs_f64() * 1e6);
                    renders.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }

    let (mut quiet_rate, mut quiet_ms, mut viewed_rate, mut viewed_ms) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let (r, ms) = phase(&pki, relay.addr(), conns).await;
        quiet_rate.push(r);
        quiet_ms.push(ms);
        viewing.store(true, Ordering::Relaxed);
        let (r, ms) = phase(&pki, relay.addr(), conns).await;
        viewing.store(false, Ordering::Relaxed);
        viewed_rate.push(r);
        viewed_ms.push(ms);
    }
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    let mut fetches = fetch_us.lock().unwrap().clone();
    println!(
        "{runs} runs of {conns} sessions each; viewed: {viewers} viewers every {every:?}, {} renders",
        renders.load(Ordering::Relaxed)
    );
    println!(
        "quiet : {:>8.1} conn/s, median session {:.2} ms",
        median(&mut quiet_rate),
        median(&mut quiet_ms)
    );
    println!(
        "viewed: {:>8.1} conn/s, median session {:.2} ms",
        median(&mut viewed_rate),
        median(&mut viewed_ms)
    );
    println!(
        "page fetch (GET /, loopback): median {:.0} µs",
        median(&mut fetches)
    );
    println!(
        "spread of quiet runs (conn/s): {:.1} .. {:.1}",
        quiet_rate[0],
        quiet_rate[quiet_rate.len() - 1]
    );
    println!(
        "spread of viewed runs (conn/s): {:.1} .. {:.1}",
        viewed_rate[0],
        viewed_rate[viewed_rate.len() - 1]
    );
}
