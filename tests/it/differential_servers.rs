//! Differential scripts for servers: an origin going down and up under
//! `check inter fall rise`, a `backup` server taking over and giving
//! back, a PROXY header read on accept (`accept-proxy`), and the PROXY headers `send-proxy` and
//! `send-proxy-v2` give a server (the fields each recorder parses). The
//! harness and its tolerances: [`crate::differential`].

use crate::differential::compare;

use crate::common::differential::*;
use crate::common::differential_check::Decision::{Alert, Closed, To};
use crate::common::differential_check::{Timing, check};

/// The PROXY-header scripts: the shortest timer is the 1 s inspect delay.
const HEADERS: Timing = Timing::new(1000, 200);

/// The health-checked scripts: the shortest timer is the checks' 200 ms
/// interval (a hello is played once both proxies have logged the change).
const CHECKED: Timing = Timing::new(200, 90);

/// `send-proxy-v2` and `send-proxy`: the same server gets the same
/// header fields (version, client and listener addresses) from both; a
/// name neither routes is refused by both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_headers_carry_the_same_fields_as_haproxys() {
    let (v2, v1) = ("192.0.2.101:443", "192.0.2.102:443");
    let script = vec![
        Conn::hello("example.com").differs("proxy-v2-tlvs", To(v2)),
        Conn::hello("app.example.com")
            .from(2)
            .differs("proxy-v2-tlvs", To(v2)),
        Conn::hello("legacy.example.net").from(3),
        Conn::hello("LEGACY.example.net").from(4),
        Conn::hello("other.example.net").differs("alert-on-unmatched", Alert(112)),
    ];
    for (version, results) in compare(
        "proxy-protocol.cfg",
        |t| t,
        &[(v2, Mode::Answer), (v1, Mode::Answer)],
        HEADERS,
        &script,
    )
    .await
    {
        let header = |i: usize| results[i].0.relayed.clone().unwrap();
        assert_eq!(
            header(0),
            (v2.into(), Some("V2 client -> listener".into())),
            "HAProxy {version}"
        );
        assert_eq!(
            header(2),
            (v1.into(), Some("V1 client -> listener".into())),
            "HAProxy {version}"
        );
    }
}

/// The origin goes down (its port refuses connections), both proxies'
/// checks notice (each logs it), a hello is refused by both; it comes up
/// again, both notice, and a hello is relayed by both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_going_down_and_up_is_followed_as_haproxy_follows_it() {
    let home = "192.0.2.71:443";
    let text = std::fs::read_to_string(fixture("health-checked.cfg")).unwrap();
    for haproxy in haproxies() {
        let mut both = both_ways(&haproxy, &text, &[(home, Mode::Answer)]).await;
        let hello = [Conn::hello("www.example.com")];
        let before = run(&both, &hello).await;
        let what = format!("up, {}", haproxy.line);
        check(&what, haproxy.version, &CHECKED, &hello, &before);
        assert!(before[0].0.relayed.is_some());

        for up in [false, true] {
            let results = flip(&mut both, "home/home", home, up, &hello).await;
            assert_eq!(
                results[0].0.relayed.is_some(),
                up,
                "HAProxy {}: {}",
                haproxy.version,
                results[0].0
            );
        }
    }
}

/// `accept-proxy`: a hello behind a PROXY v1 or v2 header is routed on its
/// name by both, and the origin's send-proxy-v2 header names the claimed
/// client (203.0.113.7:5555); a hello without a header is refused by both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_header_on_accept_is_read_as_haproxy_reads_it() {
    let origin = "192.0.2.111:443";
    let script = vec![
        Conn::proxied(1, "app.example.com").differs("proxy-v2-tlvs", To(origin)),
        Conn::proxied(2, "app.example.com").differs("proxy-v2-tlvs", To(origin)),
        Conn::hello("app.example.com").labelled("no PROXY header"),
        Conn::proxied(2, "other.example.com").differs("alert-on-unmatched", Alert(112)),
    ];
    for (version, results) in compare(
        "accept-proxy.cfg",
        |t| t,
        &[(origin, Mode::Answer)],
        HEADERS,
        &script,
    )
    .await
    {
        let (server, header) = results[0].0.relayed.clone().unwrap();
        assert_eq!(server, origin, "HAProxy {version}");
        assert_eq!(
            header.as_deref(),
            Some("V2 203.0.113.7:5555 -> 192.0.2.1:443"),
            "HAProxy {version}"
        );
        assert!(results[2].0.relayed.is_none(), "HAProxy {version}");
    }
}
/// `expect-proxy layer4 if { src LB }`: the load balancer's hellos behind
/// a v1 or v2 header are routed and the origin's header names the client
/// it claims; its hello without a header is refused by both; a direct
/// client's hello is routed with its own address in the origin's header;
/// a direct client that sends a PROXY header is refused by both (HAProxy
/// once its inspect delay ends, as bytes that are no ClientHello; snirelay
/// at once, `proxy_untrusted`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_header_from_the_trusted_peer_only_is_read_as_haproxy_reads_it() {
    let origin = "192.0.2.131:443";
    let script = vec![
        Conn::proxied(2, "app.example.com")
            .from(2)
            .differs("proxy-v2-tlvs", To(origin)),
        Conn::proxied(1, "app.example.com")
            .from(2)
            .differs("proxy-v2-tlvs", To(origin)),
        Conn::hello("app.example.com")
            .from(2)
            .labelled("the peer without a header"),
        Conn::hello("app.example.com")
            .from(3)
            .labelled("a direct client")
            .differs("proxy-v2-tlvs", To(origin)),
        Conn::proxied(2, "app.example.com")
            .from(3)
            .labelled("a direct client's PROXY header")
            .differs("not-tls-refused-at-once", Closed),
        Conn::hello("other.example.com")
            .from(3)
            .differs("alert-on-unmatched", Alert(112)),
    ];
    for (version, results) in compare(
        "expect-proxy-trusted.cfg",
        |t| t,
        &[(origin, Mode::Answer)],
        HEADERS,
        &script,
    )
    .await
    {
        let header = |i: usize| results[i].0.relayed.clone().unwrap().1;
        assert_eq!(
            header(0).as_deref(),
            Some("V2 203.0.113.7:5555 -> 192.0.2.1:443"),
            "HAProxy {version}"
        );
        assert!(
            header(3).as_deref() == Some("V2 client -> listener"),
            "HAProxy {version}: {:?}",
            header(3)
        );
        for i in [2, 4, 5] {
            assert!(results[i].0.relayed.is_none() && results[i].1.relayed.is_none());
        }
    }
}

/// A backup server: the primary's traffic moves to it once both proxies'
/// checks find the primary down, and back once they find it up again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_takes_over_and_gives_back_as_haproxys_does() {
    let (primary, standby) = ("192.0.2.121:443", "192.0.2.122:443");
    let text = std::fs::read_to_string(fixture("backup-failover.cfg")).unwrap();
    for haproxy in haproxies() {
        let servers = [(primary, Mode::Answer), (standby, Mode::Answer)];
        let mut both = both_ways(&haproxy, &text, &servers).await;
        let hello = [Conn::hello("www.example.com")];
        let first = run(&both, &hello).await;
        let what = format!("primary up, {}", haproxy.line);
        check(&what, haproxy.version, &CHECKED, &hello, &first);
        assert_eq!(first[0].0.relayed.as_ref().unwrap().0, primary);
        for (up, to) in [(false, standby), (true, primary)] {
            let results = flip(&mut both, "home/primary", primary, up, &hello).await;
            assert_eq!(
                results[0].0.relayed.as_ref().map(|r| r.0.as_str()),
                Some(to),
                "HAProxy {}",
                haproxy.version
            );
        }
    }
}

/// Takes `server` (HAProxy's `backend/server` name `named`) down or up,
/// waits until both proxies' checks have logged it, then plays `script`
/// and checks it.
async fn flip(
    both: &mut Both,
    named: &str,
    server: &str,
    up: bool,
    script: &[Conn],
) -> Vec<(Outcome, Outcome)> {
    both.set_up(server, up).await;
    let (what, state) = if up { ("UP", "up") } else { ("DOWN", "down") };
    let line = format!("{named} is {what}");
    both.haproxy_tool.wait_line(|l| l.contains(&line)).await;
    let message = format!("backend address marked {state} (health check)");
    both.relay
        .wait_log(|l| l["message"] == message.as_str())
        .await;
    let results = run(both, script).await;
    let what = format!("{what}, HAProxy {}", both.version);
    check(&what, both.version, &CHECKED, script, &results);
    results
}

/// A realistic edge's server lines (`check inter 2s fall 3 rise 2 maxconn
/// 500 weight 10 send-proxy-v2`, a `default-server`, `slowstart`,
/// `observe`, a `backup`): every server is relayed to by both, with the
/// same PROXY v2 fields, and the backup takes over when its primary's
/// checks fail in both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_server_of_a_real_edges_server_lines_is_relayed_to_as_by_haproxy() {
    let (api, web, standby) = ("10.0.0.11:443", "10.0.0.21:443", "10.0.0.22:443");
    let text = std::fs::read_to_string(fixture("edge-server-options.cfg"))
        .unwrap()
        .replace("inter 2s", "inter 200ms");
    for haproxy in haproxies() {
        let mut both = both_ways(
            &haproxy,
            &text,
            &[
                (api, Mode::Answer),
                (web, Mode::Answer),
                (standby, Mode::Answer),
            ],
        )
        .await;
        let script = [
            Conn::hello("api.example.com").differs("proxy-v2-tlvs", To(api)),
            Conn::hello("www.example.com"),
            Conn::hello("other.example.com"),
        ];
        let results = run(&both, &script).await;
        let what = format!("all up, {}", haproxy.line);
        check(&what, haproxy.version, &CHECKED, &script, &results);
        let to = |i: usize| results[i].0.relayed.clone().unwrap();
        assert_eq!(
            to(0),
            (api.into(), Some("V2 client -> listener".into())),
            "{}",
            haproxy.line
        );
        assert_eq!(to(1).0, web, "{}", haproxy.line);
        assert_eq!(to(2).0, web, "{}", haproxy.line);
        let hello = [Conn::hello("www.example.com")];
        let results = flip(&mut both, "web/web1", web, false, &hello).await;
        assert_eq!(
            results[0].0.relayed.as_ref().map(|r| r.0.as_str()),
            Some(standby),
            "{}",
            haproxy.line
        );
    }
}
