//! Differential scripts for caps: HAProxy's per-source `sc0_conn_cur`
//! limit, its process-wide `maxconn` and `maxconnrate`, and a stick table
//! at its `size` (`max_sources`), against snirelay's translation,
//! with several loopback sources (127.0.0.2, .3, …) at once. The rates
//! are `differential_rates`; the harness and its tolerances:
//! [`crate::differential`].

use crate::common;
use crate::differential::compare;

use common::differential::*;
use common::differential_check::Decision::{Alert, To};
use common::differential_check::Timing;

/// The caps' scripts: refusals come at accept, and the shortest timer they
/// exercise is the 1 s inspect delay (a held connection is watched 1 s).
const CAPS: Timing = Timing::new(1000, 200);

/// `maxconnrate 2` paces accepting one connection per 500 ms once the
/// first two are taken: the shortest timer that script exercises (the
/// configuration's `maxconnrate 10`, 100 ms apart, is slowed: HAProxy 3.0's
/// own pace wanders by up to 100 ms from one accept to the next on a loaded
/// machine, which a 250 ms pace could not absorb).
const PACED: Timing = Timing::new(500, 200);

/// How many of `results[range]` HAProxy relayed.
pub(crate) fn relayed(results: &[(Outcome, Outcome)], range: std::ops::Range<usize>) -> usize {
    results[range]
        .iter()
        .filter(|(h, _)| h.relayed.is_some())
        .count()
}

/// `sc0_conn_cur gt 3`: from one source five held connections at once,
/// three are relayed and two refused; another source's three are all
/// relayed; a name outside the allowed domain is refused either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_source_cap_refuses_the_same_connections_as_haproxy() {
    let mut script = Vec::new();
    for i in 0..5u64 {
        script.push(
            Conn::hello("a.example.com")
                .from(2)
                .at_ms(i * 50)
                .watch_ms(1000)
                .labelled(format!(".2 #{i}")),
        );
    }
    for i in 0..3u64 {
        script.push(
            Conn::hello("example.com")
                .from(3)
                .at_ms(i * 50)
                .watch_ms(1000)
                .labelled(format!(".3 #{i}")),
        );
    }
    script.push(
        Conn::hello("example.org")
            .from(4)
            .differs("alert-on-unmatched", Alert(112)),
    );
    for (version, results) in compare(
        "per-source-concurrency.cfg",
        |t| t,
        &[("192.0.2.51:443", Mode::Hold)],
        CAPS,
        &script,
    )
    .await
    {
        assert_eq!(relayed(&results, 0..5), 3, "HAProxy {version}");
        assert_eq!(relayed(&results, 5..8), 3, "HAProxy {version}");
    }
}

/// The seed's per-source cap (`sc0_conn_cur gt 100`, scaled down to
/// `gt 2` so the test opens few connections; its rate limit raised out of
/// the way): both let 2 connections from one source be open and refuse
/// the third, and admit one again once one has ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_per_source_cap_refuses_the_same_connection_as_haproxy() {
    let text = std::fs::read_to_string(fixture("tls-edge-failover.cfg"))
        .unwrap()
        .replace("sc0_conn_cur gt 100", "sc0_conn_cur gt 2")
        .replace("sc0_conn_rate gt 30", "sc0_conn_rate gt 1000");
    for version in haproxies() {
        let mut both = both_ways(&version, &text, &[("203.0.113.10:443", Mode::Hold)]).await;
        one_ends_and_another_is_admitted(&mut both).await;
    }
}

/// Two open, the third refused, and once the first has ended and its
/// proxy logged it, a new one admitted: on each side of `both`.
async fn one_ends_and_another_is_admitted(both: &mut Both) {
    let conn = Conn::hello("www.example.com").watch_ms(300);
    let home = Some("203.0.113.10:443".to_owned());
    let version = both.version;
    for haproxy in [true, false] {
        let (first, one) = both.play_on(haproxy, &conn).await;
        let (second, _two) = both.play_on(haproxy, &conn).await;
        let (third, _) = both.play_on(haproxy, &conn).await;
        let servers = [&first, &second, &third].map(|o| o.relayed.as_ref().map(|r| r.0.clone()));
        assert_eq!(
            servers,
            [home.clone(), home.clone(), None],
            "HAProxy {version}: {haproxy}: two open, the third refused"
        );
        // The first ends (a reset, so neither proxy waits on the held
        // backend side); once its proxy has logged its end, a new one is
        // admitted.
        let one = one.expect("the first stays open");
        let peer = one.local_addr().unwrap().to_string();
        common::reset(one);
        if haproxy {
            both.haproxy_tool.wait_line(|l| l.starts_with(&peer)).await;
        } else {
            both.relay.closed_line(peer.parse().unwrap()).await;
        }
        // HAProxy may log the end just before it releases the connection's
        // stick-table count: a refusal in that window is retried, bounded.
        // snirelay releases the source's slot before it writes the line, so
        // its first attempt must be admitted.
        let mut again = None;
        let mut attempts = 0;
        let bound = if haproxy { 1000 } else { 1 };
        while again.is_none() && attempts < bound {
            attempts += 1;
            again = both.play_on(haproxy, &conn).await.0.relayed.map(|r| r.0);
        }
        assert_eq!(
            again, home,
            "HAProxy {version}: {haproxy}: admitted again once one has ended ({attempts} attempts)"
        );
    }
}

/// `global maxconn 4`: six held connections, the first four relayed and
/// the other two left waiting in the kernel's backlog (timed out for the
/// client) by both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_global_cap_holds_back_the_same_connections_as_haproxy() {
    let script: Vec<Conn> = (0..6u64)
        .map(|i| {
            Conn::hello("kubernetes.default.svc")
                .at_ms(i * 60)
                .watch_ms(1500)
                .labelled(format!("#{i}"))
        })
        .collect();
    for (version, results) in compare(
        "global-limits.cfg",
        |t| t.replace("maxconnrate 10", "maxconnrate 1000"),
        &[("192.0.2.61:6443", Mode::Hold)],
        CAPS,
        &script,
    )
    .await
    {
        assert_eq!(relayed(&results, 0..6), 4, "HAProxy {version}");
        assert!(results[4..].iter().all(|(h, _)| h.end == End::Open));
    }
}

/// `maxconnrate 2` (the configuration's 10, slowed so its pace is a
/// timer the tolerance can tell apart): 8 connections 5 ms apart are all
/// relayed by both, at the same moments: 2 at once, none until the first
/// second is over, then one every 500 ms (a token bucket of 2 would have
/// taken 3 in the first second).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_global_rate_paces_accepting_as_haproxy_does() {
    let master = "192.0.2.61:6443";
    let script: Vec<Conn> = (0..8u64)
        .map(|i| {
            let conn = Conn::hello("kubernetes.default.svc")
                .at_ms(i * 5)
                .watch_ms(5000)
                .labelled(format!("#{i}"));
            // Past the first second HAProxy's estimate may take one a pace
            // step early; snirelay never does.
            if i >= 3 {
                conn.differs("paced-accept-not-earlier", To(master))
            } else {
                conn
            }
        })
        .collect();
    for (version, results) in compare(
        "global-limits.cfg",
        |t| {
            t.replace("maxconn 4", "maxconn 100")
                .replace("maxconnrate 10", "maxconnrate 2")
        },
        &[(master, Mode::Answer)],
        PACED,
        &script,
    )
    .await
    {
        assert_eq!(relayed(&results, 0..8), 8, "HAProxy {version}");
        let late = results
            .iter()
            .filter(|(h, _)| h.answered.unwrap() > std::time::Duration::from_millis(800))
            .count();
        assert_eq!(late, 6, "HAProxy {version}: paced past the first second");
    }
}

/// A stick table at its `size` (3, imported as `max_sources = 3`) with
/// `sc0_conn_rate gt 1` over 10 s: a source's second attempt is refused;
/// three other sources then fill the table, the fourth pushes out the
/// least recently used entry (the first source's, its connections
/// closed), so that source's next attempt starts a fresh count and is
/// relayed by both. At size 10 it is remembered, reads 3 and is refused
/// by both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_at_its_size_forgets_the_same_source_as_haproxy() {
    let mut script = vec![
        Conn::hello("a.example.com")
            .from(2)
            .at_ms(0)
            .labelled(".2 #1"),
        Conn::hello("a.example.com")
            .from(2)
            .at_ms(300)
            .labelled(".2 #2"),
    ];
    for (i, octet) in [3u8, 4, 5].into_iter().enumerate() {
        script.push(
            Conn::hello("a.example.com")
                .from(octet)
                .at_ms(600 + 300 * i as u64)
                .labelled(format!(".{octet}")),
        );
    }
    script.push(
        Conn::hello("a.example.com")
            .from(2)
            .at_ms(1500)
            .labelled(".2 #3, forgotten"),
    );
    // At size 3 the first source is forgotten; at size 10 it is not, and
    // both refuse its third attempt.
    for (size, last) in [(3, true), (10, false)] {
        let runs = compare(
            "per-source-concurrency.cfg",
            |text| {
                text.replace(
                    "size 100k expire 30s store conn_cur,conn_rate(10s)",
                    &format!("size {size} expire 30s store conn_rate(10s)"),
                )
                .replace(
                    "    tcp-request connection reject if { sc0_conn_cur gt 3 }\n",
                    "",
                )
                .replace("sc0_conn_rate gt 100", "sc0_conn_rate gt 1")
            },
            &[("192.0.2.51:443", Mode::Answer)],
            CAPS,
            &script,
        )
        .await;
        for (version, results) in runs {
            let relayed: Vec<bool> = results.iter().map(|(h, _)| h.relayed.is_some()).collect();
            assert_eq!(
                relayed,
                [true, false, true, true, true, last],
                "HAProxy {version}, size {size}"
            );
        }
    }
}
