//! `attempts_per_source` end to end, beside the real HAProxy: 60
//! connections from one source spread evenly over 0.93 s, each sending a
//! captured ClientHello, to a snirelay TCP listener with
//! `attempts_per_source = 30` and to HAProxy 2.6 with
//! `stick-table ... store conn_rate(1s)`, `track-sc0 src` and
//! `reject if { sc0_conn_rate gt 30 }`. Both relay exactly the first 30 and
//! close the rest unread (snirelay's close reason `limit_rate`); the token
//! bucket (`connection_rate_per_source = 30`, burst 30,
//! `rate_counts_refused`) on the same traffic lets 50 or more through.

use crate::common;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use tokio::io::AsyncWriteExt;

const ATTEMPTS: u32 = 60;
const SPREAD: Duration = Duration::from_millis(930);

/// Sends the 60 attempts from `source` to `to`, evenly over [`SPREAD`]:
/// for each, whether it was relayed (the backend's tag came back), and
/// the local address of the first refused one. `None` when this machine
/// stretched the run past one period (the figure is then another).
async fn sixty_over_093s(
    source: IpAddr,
    to: SocketAddr,
) -> Option<(Vec<bool>, Option<SocketAddr>)> {
    let start = Instant::now();
    let mut relayed = Vec::new();
    let mut first_refused = None;
    for i in 0..ATTEMPTS {
        tokio::time::sleep_until((start + SPREAD * i / (ATTEMPTS - 1)).into()).await;
        // A refused connection may be reset before the connect returns or
        // the hello is written (HAProxy's reject): that is a refusal too.
        let (back, local) = match connect_from(source, to).await {
            Err(_) => (None, None),
            Ok(mut stream) => {
                let local = stream.local_addr().ok();
                match stream.write_all(&capture("curl.bin")).await {
                    Ok(()) => (relay_outcome(&mut stream).await, local),
                    Err(_) => (None, local),
                }
            }
        };
        if back.is_none() && first_refused.is_none() {
            first_refused = local;
        }
        relayed.push(back.is_some());
    }
    (start.elapsed() < Duration::from_millis(990)).then_some((relayed, first_refused))
}

/// [`sixty_over_093s`] to `to` from the next of `sources`, again from the
/// one after when a run stretched past the period.
async fn within_a_period(
    sources: &mut impl Iterator<Item = IpAddr>,
    to: SocketAddr,
) -> (Vec<bool>, Option<SocketAddr>) {
    for source in sources.by_ref().take(3) {
        if let Some(run) = sixty_over_093s(source, to).await {
            return run;
        }
        eprintln!("the run from {source} took longer than 1 s; again");
    }
    panic!("three runs stretched past 1 s");
}

fn haproxy_config(port: u16, backend: SocketAddr) -> String {
    format!(
        "global\n    maxconn 1000\n\
         defaults\n    mode tcp\n    timeout connect 5s\n    timeout client 30s\n    timeout server 30s\n\
         frontend edge\n    bind 127.0.0.1:{port}\n\
         \x20   stick-table type ip size 100k expire 30s store conn_cur,conn_rate(1s)\n\
         \x20   tcp-request connection track-sc0 src\n\
         \x20   tcp-request connection reject if {{ sc0_conn_rate gt 30 }}\n\
         \x20   default_backend origin\n\
         backend origin\n    server a {backend}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_connections_in_093s_relay_the_first_30_as_haproxy_conn_rate_does() {
    let (backend, reached) = tagged_backend("A").await;
    let relay = Relay::start(&format!(
        "[[listener]]\nname = \"tls\"\nlisten = [\"127.0.0.1:0\"]\n\
         [listener.limits]\nattempts_per_source = 30\nattempts_period = \"1s\"\n\
         [[route]]\nlistener = \"tls\"\nsni = [\"curl.example.com\"]\nbackend = \"a\"\n\
         [[listener]]\nname = \"bucket\"\nlisten = [\"127.0.0.1:0\"]\n\
         [listener.limits]\nconnection_rate_per_source = 30\n\
         connection_burst_per_source = 30\nrate_counts_refused = true\n\
         [[route]]\nlistener = \"bucket\"\nsni = [\"curl.example.com\"]\nbackend = \"a\"\n\
         [backend.a]\naddresses = [\"{backend}\"]\n"
    ))
    .await;
    let port = free_port();
    let dir = scratch_dir("attempts-haproxy");
    std::fs::write(dir.join("haproxy.cfg"), haproxy_config(port, backend)).unwrap();
    let mut haproxy = Tool::spawn("haproxy", &["-f", "haproxy.cfg", "-db"], dir, "haproxy");
    wait_listening(port, &mut haproxy).await;
    let haproxy_addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let first_30: Vec<bool> = (0..ATTEMPTS).map(|i| i < 30).collect();

    // Each run from a source of its own (a fresh count).
    let mut sources = (21..=29).map(|n| IpAddr::from([127, 0, 0, n]));
    let before = reached.load(Ordering::SeqCst);
    let by_snirelay = within_a_period(&mut sources, relay.addr_of("tls")).await;
    assert_eq!(by_snirelay.0, first_30, "snirelay relays the first 30");
    // (A run retried from another source relayed its own 30 too.)
    assert!(
        reached.load(Ordering::SeqCst) - before >= 30,
        "they reached the backend"
    );
    let line = relay.closed_line(by_snirelay.1.unwrap()).await;
    assert_eq!(line["close"], "limit_rate", "{line}");
    assert!(line["sni"].is_null(), "closed unread: {line}");

    let by_haproxy = within_a_period(&mut sources, haproxy_addr).await;
    assert_eq!(by_haproxy.0, by_snirelay.0, "HAProxy decides the same");

    // The token bucket on the same traffic refills while drained.
    let by_bucket = within_a_period(&mut sources, relay.addr_of("bucket")).await;
    let through = by_bucket.0.iter().filter(|r| **r).count();
    eprintln!("the bucket let {through} of {ATTEMPTS} through");
    assert!(through >= 50, "the bucket let {through} through");
}
