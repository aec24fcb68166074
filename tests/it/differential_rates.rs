//! Differential scripts for rate limits: HAProxy's per-source
//! `conn_rate` table (`sc0_conn_rate gt N`) against snirelay's translation
//! (`attempts_per_source`), with several loopback sources at once. The
//! harness and its tolerances: [`crate::differential`].

use crate::differential::compare;
use crate::differential_limits::relayed;

use crate::common::differential::*;
use crate::common::differential_check::Timing;

/// The rates' script: refusals come at accept; the shortest timer it
/// exercises is the rate's 1 s period. Its 300 connections in 4.4 s have
/// made the (debug-built) relay on the loaded two-core test machine answer
/// up to about 350 ms late, so the tolerance is 400 ms, still below half
/// the period: a period counted as none or as two is a difference.
const RATES: Timing = Timing::new(1000, 400);

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
/// bursts' attempts are 5 ms apart; which of a burst's connections are the 30 taken
/// is compared as a count (HAProxy accepts on several threads, and under
/// load takes them slightly out of order).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_source_rates_admit_and_refuse_the_same_connections_as_haproxy() {
    // The even series too is compared as a count with its moments: under
    // load HAProxy (3.0 accepts on two threads by default) has taken two
    // attempts 15.5 ms apart in the opposite order.
    let mut script: Vec<Conn> = attempts("even", 2, 60, 0, 15_500)
        .into_iter()
        .map(|c| c.in_burst(2))
        .collect();
    // Each source has its own count, so the bursts are spread over the
    // script (the even series until 0.93 s, the burst at 1.1 s, the three
    // sources from 3.6 s) rather than stacked in its first 300 ms, where
    // 220 connections made the debug-built relay answer 200-300 ms late.
    script.extend(
        attempts("burst", 3, 40, 1100, 5_000)
            .into_iter()
            .map(|c| c.in_burst(3)),
    );
    script.extend(attempts("retrying", 4, 100, 0, 20_000));
    for (from, start_ms) in [(5, 3600), (6, 3900), (7, 4200)] {
        let burst = attempts(&format!("source .{from}"), from, 35, start_ms, 5_000);
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
    for (version, results) in compare(
        "per-source-rate.cfg",
        |t| t,
        &[("192.0.2.41:443", Mode::Answer)],
        RATES,
        &script,
    )
    .await
    {
        let v = format!("HAProxy {version}");
        assert_eq!(relayed(&results, 0..60), 30, "{v}: evenly spaced");
        assert_eq!(relayed(&results, 60..100), 30, "{v}: burst");
        assert_eq!(relayed(&results, 100..200), 30, "{v}: retrying");
        for s in 0..3 {
            let at = 200 + 35 * s;
            assert_eq!(relayed(&results, at..at + 35), 30, "{v}: source {s}");
        }
        let stopped: Vec<bool> = results[305..]
            .iter()
            .map(|(h, _)| h.relayed.is_some())
            .collect();
        assert_eq!(stopped, [false, true, true], "{v}");
    }
}
