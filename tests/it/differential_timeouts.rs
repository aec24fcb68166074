//! Differential scripts for timers: `tcp-request inspect-delay` against
//! slow, split, truncated and absent hellos (HAProxy's `reject if
//! WAIT_END` against snirelay's `client_hello_timeout`), and the idle and
//! half-close timers (`timeout client`/`server`, `client-fin`/`server-fin`
//! against `idle_timeout` and `half_close_timeout`). Every timer is 2 s or
//! less; each script's tolerance is below half its shortest timer
//! ([`INSPECT`], [`HALF_CLOSE`]), and a check without proxies shows the
//! half-close one tells 300 ms from at once and from 1 s. The harness:
//! [`crate::differential`].

use std::time::Duration;

use crate::differential::compare;

use crate::common::differential::*;
use crate::common::differential_check::Decision::{Alert, To};
use crate::common::differential_check::Timing;

/// The inspect-delay script: the shortest timer is the delay.
///
/// The configuration's 1 s delay is raised to 2 s here and the tolerance
/// is 400 ms: the relay (a debug build on the loaded two-core test
/// machine) has once answered a hello completed in segments 325 ms late.
const INSPECT: Timing = Timing::new(2000, 400);

/// The idle and half-close script: the shortest timer is `client-fin` /
/// `server-fin`, 300 ms.
const HALF_CLOSE: Timing = Timing::new(300, 120);

/// A hello in five segments 150 ms apart (complete at 600 ms) is relayed
/// by both; one in three segments 1.4 s apart is not complete when the
/// delay (the configuration's 1 s raised to 2 s) ends and is refused by
/// both then; a truncated hello and a
/// client that sends nothing are refused by both when the delay ends; a
/// name that is not allowed, as soon as the hello is complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inspect_delay_waits_for_and_refuses_the_same_hellos_as_haproxy() {
    let script = vec![
        Conn::hello("git.example.com"),
        Conn::hello("api.example.com")
            .split(5, 150)
            .labelled("api in 5 segments over 600 ms"),
        Conn::hello("api.example.com")
            .split(3, 1400)
            .labelled("api in 3 segments over 2.8 s"),
        Conn::truncated("git.example.com", 5),
        Conn::nothing(),
        Conn::hello("other.example.com")
            .split(2, 400)
            .differs("alert-on-unmatched", Alert(112)),
    ];
    for (version, results) in compare(
        "inspect-delay.cfg",
        |t| t.replace("inspect-delay 1s", "inspect-delay 2s"),
        &[("192.0.2.81:443", Mode::Answer)],
        INSPECT,
        &script,
    )
    .await
    {
        let forge = Some("192.0.2.81:443");
        let got: Vec<Option<&str>> = results
            .iter()
            .map(|(h, _)| h.relayed.as_ref().map(|r| r.0.as_str()))
            .collect();
        assert_eq!(
            got,
            [forge, forge, None, None, None, None],
            "HAProxy {version}"
        );
        // The truncated and the absent hello are refused when the delay ends.
        for (h, _) in &results[3..5] {
            assert!(
                h.after >= Duration::from_millis(1900),
                "HAProxy {version}: {h}"
            );
        }
    }
}

/// Idle: a relayed connection where nobody sends closes after `timeout
/// client`/`server` (1 s) in HAProxy 3.0 and snirelay; HAProxy 2.6 closes
/// it then or, in some runs, 300 ms later (the fin timer; listed). Half-closed by the client, it closes
/// after `client-fin` (300 ms) in both. Half-closed by the server, both
/// pass the FIN on to the client at once, and close toward the server at
/// the same moment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_half_closed_connections_end_when_haproxy_ends_them() {
    let script = [
        Conn::hello("idle.example.com")
            .labelled("idle")
            .differs("idle-close-without-fin-wait", To("192.0.2.91:443"))
            .only_on("2.6"),
        Conn::hello("client-fin.example.com")
            .half_close()
            .labelled("client half-closes"),
        Conn::hello("server-fin.example.com").labelled("server half-closes"),
    ];
    for (version, results) in compare(
        "half-close-timeouts.cfg",
        |t| t,
        &[("192.0.2.91:443", Mode::Hold)],
        HALF_CLOSE,
        &script[..2],
    )
    .await
    {
        for (h, _) in &results {
            assert!(
                h.relayed.is_some() && h.end != End::Open,
                "HAProxy {version}: {h}"
            );
        }
        // HAProxy's own timers, as the configuration sets them (2.6 closes
        // an idle connection at the idle timer or a fin timer after it).
        let (idle, client_fin) = (results[0].0.after, results[1].0.after);
        let at = |ms| HALF_CLOSE.same_time(idle, Duration::from_millis(ms));
        assert!(
            at(1000) || version == "2.6" && at(1300),
            "HAProxy {version}: idle {idle:?}"
        );
        assert!(
            HALF_CLOSE.same_time(client_fin, Duration::from_millis(300)),
            "HAProxy {version}: client-fin {client_fin:?}"
        );
    }
    for (version, results) in compare(
        "half-close-timeouts.cfg",
        |t| t,
        &[("192.0.2.91:443", Mode::HalfClose)],
        HALF_CLOSE,
        &script[2..],
    )
    .await
    {
        let (h, _) = &results[0];
        assert!(h.relayed.is_some(), "HAProxy {version}: {h}");
        assert!(h.server_closed.is_some(), "HAProxy {version}: {h}");
    }
}

/// The half-close script's tolerance tells its timer apart: against
/// HAProxy closing a client-half-closed connection 300 ms after the FIN,
/// a snirelay closing at once, at 1 s (the idle timer) or at 600 ms is a
/// difference; one closing within the tolerance of 300 ms is not. The
/// same for the idle timer at 1 s against 300 ms and 2 s.
#[test]
fn the_half_close_tolerance_tells_300_ms_from_at_once_and_from_1_s() {
    let closed_after = |ms: u64| Outcome {
        relayed: Some(("192.0.2.91:443".into(), None)),
        answered: Some(Duration::from_millis(5)),
        end: End::Close,
        server_closed: None,
        after: Duration::from_millis(ms),
    };
    let haproxy = closed_after(300);
    for (snirelay_ms, same) in [
        (0, false),
        (150, false),
        (1000, false),
        (600, false),
        (300, true),
        (250, true),
        (400, true),
    ] {
        assert_eq!(
            HALF_CLOSE.same(&haproxy, &closed_after(snirelay_ms)),
            same,
            "client-fin 300 ms against a close at {snirelay_ms} ms"
        );
    }
    let idle = closed_after(1000);
    for (snirelay_ms, same) in [(300, false), (2000, false), (1100, true)] {
        assert_eq!(
            HALF_CLOSE.same(&idle, &closed_after(snirelay_ms)),
            same,
            "idle 1 s against a close at {snirelay_ms} ms"
        );
    }
    assert!(2 * HALF_CLOSE.tolerance < HALF_CLOSE.shortest_timer);
}
