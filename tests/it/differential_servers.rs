//! Differential scripts for servers: an origin going down and up under
//! `check inter fall rise`, and the PROXY headers `send-proxy` and
//! `send-proxy-v2` give a server (the fields each recorder parses). The
//! harness and its tolerances: [`crate::differential`].

use crate::differential::compare;

use crate::common::differential::*;

/// `send-proxy-v2` and `send-proxy`: the same server gets the same
/// header fields (version, client and listener addresses) from both; a
/// name neither routes is refused by both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_headers_carry_the_same_fields_as_haproxys() {
    let script = vec![
        Conn::hello("example.com").differs("proxy-v2-tlvs"),
        Conn::hello("app.example.com")
            .from(2)
            .differs("proxy-v2-tlvs"),
        Conn::hello("legacy.example.net").from(3),
        Conn::hello("LEGACY.example.net").from(4),
        Conn::hello("other.example.net").differs("alert-on-unmatched"),
    ];
    let results = compare(
        "proxy-protocol.cfg",
        |t| t,
        &[
            ("192.0.2.101:443", Mode::Answer),
            ("192.0.2.102:443", Mode::Answer),
        ],
        &script,
    )
    .await;
    let header = |i: usize| results[i].0.relayed.clone().unwrap();
    assert_eq!(
        header(0),
        (
            "192.0.2.101:443".into(),
            Some("V2 client -> listener".into())
        )
    );
    assert_eq!(
        header(2),
        (
            "192.0.2.102:443".into(),
            Some("V1 client -> listener".into())
        )
    );
}

/// The origin goes down (its port refuses connections), both proxies'
/// checks notice (each logs it), a hello is refused by both; it comes up
/// again, both notice, and a hello is relayed by both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_going_down_and_up_is_followed_as_haproxy_follows_it() {
    let home = "192.0.2.71:443";
    let text = std::fs::read_to_string(fixture("health-checked.cfg")).unwrap();
    let mut both = both_ways(&text, &[(home, Mode::Answer)]).await;
    let hello = [Conn::hello("www.example.com")];
    let before = run(&both, &hello).await;
    crate::common::differential_check::check("up", &hello, &before);
    assert!(before[0].0.relayed.is_some());

    for (up, what) in [(false, "DOWN"), (true, "UP")] {
        both.set_up(home, up).await;
        both.haproxy_tool
            .wait_line(|l| l.contains(&format!("home/home is {what}")))
            .await;
        let state = if up { "up" } else { "down" };
        let message = format!("backend address marked {state} (health check)");
        both.relay
            .wait_log(|l| l["message"] == message.as_str())
            .await;
        let results = run(&both, &hello).await;
        crate::common::differential_check::check(what, &hello, &results);
        assert_eq!(results[0].0.relayed.is_some(), up, "{}", results[0].0);
    }
}

/// `accept-proxy`: a hello behind a PROXY v1 or v2 header is routed on its
/// name by both, and the origin's send-proxy-v2 header names the claimed
/// client (203.0.113.7:5555); a hello without a header is refused by both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_header_on_accept_is_read_as_haproxy_reads_it() {
    let origin = "192.0.2.111:443";
    let script = vec![
        Conn::proxied(1, "app.example.com").differs("proxy-v2-tlvs"),
        Conn::proxied(2, "app.example.com").differs("proxy-v2-tlvs"),
        Conn::hello("app.example.com").labelled("no PROXY header"),
        Conn::proxied(2, "other.example.com").differs("alert-on-unmatched"),
    ];
    let results = compare(
        "accept-proxy.cfg",
        |t| t,
        &[(origin, Mode::Answer)],
        &script,
    )
    .await;
    let (server, header) = results[0].0.relayed.clone().unwrap();
    assert_eq!(server, origin);
    assert_eq!(
        header.as_deref(),
        Some("V2 203.0.113.7:5555 -> 192.0.2.1:443")
    );
    assert!(results[2].0.relayed.is_none());
}
