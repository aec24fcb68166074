//! Differential scripts for timers: `tcp-request inspect-delay` against
//! slow, split, truncated and absent hellos (HAProxy's `reject if
//! WAIT_END` against snirelay's `client_hello_timeout`), and the idle and
//! half-close timers (`timeout client`/`server`, `client-fin`/`server-fin`
//! against `idle_timeout` and `half_close_timeout`). Every timer is 1 s or
//! less; the harness and its tolerances: [`crate::differential`].

use crate::differential::compare;

use crate::common::differential::*;

/// A hello in five segments 150 ms apart (complete at 600 ms) is relayed
/// by both; one in three segments 700 ms apart is not complete when the
/// 1 s delay ends and is refused by both then; a truncated hello and a
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
            .split(3, 700)
            .labelled("api in 3 segments over 1.4 s"),
        Conn::truncated("git.example.com", 5),
        Conn::nothing(),
        Conn::hello("other.example.com")
            .split(2, 400)
            .differs("alert-on-unmatched"),
    ];
    let results = compare(
        "inspect-delay.cfg",
        |t| t,
        &[("192.0.2.81:443", Mode::Answer)],
        &script,
    )
    .await;
    let forge = Some("192.0.2.81:443");
    let got: Vec<Option<&str>> = results
        .iter()
        .map(|(h, _)| h.relayed.as_ref().map(|r| r.0.as_str()))
        .collect();
    assert_eq!(got, [forge, forge, None, None, None, None]);
    // The truncated and the absent hello are refused when the delay ends.
    for (h, _) in &results[3..5] {
        assert!(h.after >= std::time::Duration::from_millis(900), "{h}");
    }
}

/// Idle: a relayed connection where nobody sends closes after `timeout
/// client`/`server` (1 s) in both. Half-closed by the client, it closes
/// after `client-fin` (300 ms) in both. Half-closed by the server, both
/// pass the FIN on to the client at once, and close toward the server at
/// the same moment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_half_closed_connections_end_when_haproxy_ends_them() {
    let script = [
        Conn::hello("idle.example.com").labelled("idle"),
        Conn::hello("client-fin.example.com")
            .half_close()
            .labelled("client half-closes"),
        Conn::hello("server-fin.example.com").labelled("server half-closes"),
    ];
    let results = compare(
        "half-close-timeouts.cfg",
        |t| t,
        &[("192.0.2.91:443", Mode::Hold)],
        &script[..2],
    )
    .await;
    for (h, _) in &results {
        assert!(h.relayed.is_some() && h.end != End::Open, "{h}");
    }
    let results = compare(
        "half-close-timeouts.cfg",
        |t| t,
        &[("192.0.2.91:443", Mode::HalfClose)],
        &script[2..],
    )
    .await;
    let (h, _) = &results[0];
    assert!(h.relayed.is_some(), "{h}");
    assert!(h.server_closed.is_some(), "{h}");
}
