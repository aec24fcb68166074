//! Differential scripts for rate limits: HAProxy's per-source
//! `conn_rate` table (`sc0_conn_rate gt N`) against snirelay's translation
//! (`attempts_per_source`), with several loopback sources at once. The
//! harness and its tolerances: [`crate::differential`].

use crate::differential::compare;
use crate::differential_limits::relayed;

use crate::common::differential::*;

/// `n` hellos from 127.0.0.`from`, `every_us` microseconds apart from
/// `start_ms`.
fn attempts(label: &str, from: u8, n: usize, start_ms: u64, every_us: u64) -> Vec<Conn> {
    (0..n)
        .map(|i| {
            let at = start_ms * 1000 + every_us * i as u64;
            Conn::hello("www.example.com")
                .from(from)
                .labelled(format!("{label} #{i} at {:.1} ms", at as f64 / 1000.0))
                .at_us(at)
        })
        .collect()
}

/// `conn_rate(1s)` with `gt 30`, per source: 60 attempts evenly over
/// 0.93 s (HAProxy admits exactly 30), a burst of 40 (30), a source
/// retrying every 20 ms for 2 s, well above the rate (HAProxy counts the
/// refused attempts, so after its first 30 it stays refused), and three
/// more sources with 35 each (30 each), then the retrying source once it
/// has stopped: every connection's outcome the same in snirelay. The
/// bursts are 5 ms apart; which of a burst's connections are the 30 taken
/// is compared as a count (HAProxy accepts on several threads, and under
/// load takes them slightly out of order).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_source_rates_admit_and_refuse_the_same_connections_as_haproxy() {
    let mut script = attempts("even", 2, 60, 0, 15_500);
    script.extend(
        attempts("burst", 3, 40, 0, 5_000)
            .into_iter()
            .map(|c| c.in_burst(3)),
    );
    script.extend(attempts("retrying", 4, 100, 0, 20_000));
    for from in [5, 6, 7] {
        let burst = attempts(&format!("source .{from}"), from, 35, 100, 5_000);
        script.extend(burst.into_iter().map(|c| c.in_burst(u32::from(from))));
    }
    // The retrying source after it stopped (its last attempt at 1.98 s):
    // at 2.2 s its last full second still weighs about 40, refused; at
    // 2.8 s about 10, admitted; at 3.3 s it is admitted again.
    for at in [2200, 2800, 3300] {
        script.push(
            Conn::hello("www.example.com")
                .from(4)
                .at_ms(at)
                .labelled(format!("retrying, stopped, at {at} ms")),
        );
    }
    let results = compare(
        "per-source-rate.cfg",
        |t| t,
        &[("192.0.2.41:443", Mode::Answer)],
        &script,
    )
    .await;
    assert_eq!(relayed(&results, 0..60), 30, "evenly spaced");
    assert_eq!(relayed(&results, 60..100), 30, "burst");
    assert_eq!(relayed(&results, 100..200), 30, "retrying");
    for s in 0..3 {
        let at = 200 + 35 * s;
        assert_eq!(relayed(&results, at..at + 35), 30, "source {s}");
    }
    let stopped: Vec<bool> = results[305..]
        .iter()
        .map(|(h, _)| h.relayed.is_some())
        .collect();
    assert_eq!(stopped, [false, true, true]);
}
