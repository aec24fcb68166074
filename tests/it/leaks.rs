//! Descriptor and memory hygiene: after many refused and completed
//! connections the relay holds exactly the descriptors it held before, and
//! its heap is kept in base pages unless the operator allows huge pages.

use crate::common;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const EACH: usize = 1000;
const CONCURRENCY: usize = 50;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn descriptors_return_to_baseline_after_2000_connections() {
    let backend = raw_backend(|mut stream| async move {
        let mut hello = vec![0u8; capture("openssl_sni.bin").len()];
        if stream.read_exact(&mut hello).await.is_ok() {
            let _ = stream.write_all(b"served").await;
        }
    })
    .await;
    let relay = Relay::start(&simple_config(&["www.example.com"], backend, "")).await;
    let baseline = relay.open_fds();
    let addr = relay.addr();
    let allowed = capture("openssl_sni.bin");
    let refused = capture("curl.bin"); // curl.example.com: not on the list

    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..CONCURRENCY {
        let (allowed, refused) = (allowed.clone(), refused.clone());
        tasks.spawn(async move {
            let mut outcomes = (0, 0);
            for i in (worker..2 * EACH).step_by(CONCURRENCY) {
                let mut client = TcpStream::connect(addr).await.unwrap();
                let hello = if i % 2 == 0 { &allowed } else { &refused };
                client.write_all(hello).await.unwrap();
                let mut got = Vec::new();
                let _ = client.read_to_end(&mut got).await;
                if got == b"served" {
                    outcomes.0 += 1;
                } else if got == [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x70] {
                    outcomes.1 += 1;
                }
            }
            outcomes
        });
    }
    let (mut served, mut alerted) = (0, 0);
    while let Some(outcome) = tasks.join_next().await {
        let (s, a) = outcome.unwrap();
        served += s;
        alerted += a;
    }
    assert_eq!((served, alerted), (EACH, EACH));

    // Each connection's line is written after its sockets are closed.
    relay
        .wait_count(2 * EACH, |l| l["message"] == "connection closed")
        .await;
    let closed = relay.closed_lines();
    assert_eq!(closed.iter().filter(|l| l["close"] == "done").count(), EACH);
    assert_eq!(
        closed.iter().filter(|l| l["close"] == "unmatched").count(),
        EACH
    );
    assert_eq!(relay.open_fds(), baseline, "descriptors leaked");
}

/// `THP_enabled` from /proc/PID/status: 0 when the process has turned
/// transparent huge pages off for itself (prctl PR_SET_THP_DISABLE).
fn thp_enabled(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("THP_enabled:"))
        .expect("THP_enabled in /proc/PID/status (Linux 5.0 or later)")
        .trim()
        .to_string()
}

#[tokio::test]
async fn the_heap_stays_in_base_pages_unless_mimalloc_allow_thp_is_set() {
    let backend = raw_backend(|_stream| async {}).await;
    let config = simple_config(&["www.example.com"], backend, "");
    // This test process itself runs with huge pages allowed: the 0 below
    // is the relay's own doing.
    assert_eq!(thp_enabled(std::process::id()), "1");

    let relay = Relay::start(&config).await;
    assert_eq!(thp_enabled(relay.pid()), "0");

    let allowed = Relay::launch(&config, |path| {
        let mut command = Relay::command(path);
        command.env("MIMALLOC_ALLOW_THP", "1");
        command
    })
    .await;
    assert_eq!(thp_enabled(allowed.pid()), "1");
    allowed
        .wait_log(|l| l["message"] == "transparent huge pages allowed (MIMALLOC_ALLOW_THP)")
        .await;
}
