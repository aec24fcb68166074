//! One `[[route]]` for several listeners, through the real binary on
//! loopback: a block with `listener = ["tls", "h3"]` relays a TLS hello
//! over TCP and a QUIC Initial over UDP to its one backend (a TLS echo
//! server and a UDP echo socket on the same port), each connection's close
//! line names its own listener and the one route, and `/metrics` shows the
//! route's series under each listener. `snirelay check` warns (on
//! stderr, exit 0) when a backend that sends PROXY v2 is reached from a
//! quic listener, and stops once `quic_reads_proxy_protocol` says its QUIC
//! server reads the header; the relay logs the same warning at start.
//!
//! Not here: the checker's messages for each form of `listener` (unit
//! tests next to `config::check::route`).

use crate::common;

use std::sync::Arc;

use common::udp::{echoed_flow, next_seen, udp_and_tcp_port, udp_echo_on};
use common::{Pki, Relay, echo_session, http_get, serve_tls_echo};

include!("common/quic_capture.rs");

/// The name aioquic's captured Initial (tests/data/quic/aioquic_v1.hex)
/// carries.
const NAME: &str = "aioquic.example.com";

/// A tcp listener `tls` and a quic listener `h3`, one route block for
/// both, and `backend` (its table's keys).
fn config(backend: &str) -> String {
    format!(
        r#"
[admin]
listen = "127.0.0.1:0"

[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]

[[listener]]
name = "h3"
protocol = "quic"
listen = ["127.0.0.1:0"]
# A flow's bytes are counted when it ends: soon after its last datagram.
idle_timeout = "1s"

[[route]]
name = "site"
listener = ["tls", "h3"]
sni = ["{NAME}"]
backend = "origin"

[backend.origin]
{backend}
"#
    )
}

/// A metric's value in a Prometheus text page; `None` when the series is
/// not there.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.parse().expect("a number"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_route_block_relays_tcp_and_quic_to_its_backend() {
    let pki = Pki::new(&[NAME]);
    let (udp, tcp) = udp_and_tcp_port().await;
    let port = udp.local_addr().unwrap();
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    udp_echo_on(udp, seen_tx);
    let _tls = serve_tls_echo(&pki, Arc::new(tcp));
    let relay = Relay::start(&config(&format!("addresses = [\"{port}\"]"))).await;
    let admin = relay.admin_addr().await;

    // TCP: a TLS session through listener "tls", echoed by the backend.
    let session = echo_session(&pki, relay.addr_of("tls"), NAME)
        .await
        .expect("a TLS session through the tcp listener");
    let tcp_client = session.get_ref().0.local_addr().unwrap();
    drop(session);
    let tcp_line = relay.closed_line(tcp_client).await;
    assert_eq!(tcp_line["listener"], "tls", "{tcp_line}");
    assert_eq!(tcp_line["route"], "site", "{tcp_line}");
    assert_eq!(tcp_line["backend.addr"], port.to_string(), "{tcp_line}");

    // QUIC: the captured Initial through listener "h3", echoed by the
    // backend's UDP socket on the same port.
    let flow = echoed_flow(relay.addr_of("h3"), "127.0.0.1", &capture("aioquic_v1")).await;
    assert_eq!(next_seen(&mut seen).await, port);
    let quic_line = relay.closed_line(flow.local_addr().unwrap()).await;
    assert_eq!(quic_line["listener"], "h3", "{quic_line}");
    assert_eq!(quic_line["protocol"], "quic", "{quic_line}");
    assert_eq!(quic_line["route"], "site", "{quic_line}");
    assert_eq!(quic_line["backend.addr"], port.to_string(), "{quic_line}");

    // One route, two copies: each listener's series, labelled by it.
    let (status, text) = http_get(admin, "/metrics").await;
    assert_eq!(status, 200);
    let up = |listener: &str, protocol: &str| {
        format!(
            "snirelay_bytes_up_total{{listener=\"{listener}\",protocol=\"{protocol}\",route=\"site\",backend=\"origin\"}}"
        )
    };
    let tcp_up = sample(&text, &up("tls", "tcp"));
    assert!(tcp_up.is_some_and(|n| n > 0.0), "{tcp_up:?}\n{text}");
    let quic_up = sample(&text, &up("h3", "quic"));
    assert!(quic_up.is_some_and(|n| n > 0.0), "{quic_up:?}\n{text}");
    for (listener, protocol) in [("tls", "tcp"), ("h3", "quic")] {
        let accepted = format!(
            "snirelay_connections_accepted_total{{listener=\"{listener}\",protocol=\"{protocol}\"}}"
        );
        assert_eq!(sample(&text, &accepted), Some(1.0), "{accepted}\n{text}");
    }
}

/// `snirelay check` on `text`: exit code, stdout, stderr.
fn check(text: &str) -> (i32, String, String) {
    let dir = common::scratch_dir("route-listeners");
    let file = dir.join("snirelay.toml");
    std::fs::write(&file, text).unwrap();
    let out = crate::config::snirelay(&["check", "--config", file.to_str().unwrap()]);
    std::fs::remove_dir_all(&dir).unwrap();
    out
}

/// The warning's words, as `check` prints them.
const WARNING: &str = "warning: route[0].backend: backend \"origin\" sends PROXY v2 headers \
     (proxy_protocol = \"v2\"), and route \"site\" reaches it from protocol = \"quic\" listener \
     \"h3\": each flow's first datagrams then carry the header over UDP, which most QUIC \
     servers cannot strip";

#[test]
fn check_warns_of_proxy_headers_toward_a_quic_server_until_the_backend_says_it_reads_them() {
    let v2 = "addresses = [\"192.0.2.10:443\"]\nproxy_protocol = \"v2\"";
    let (code, stdout, stderr) = check(&config(v2));
    assert_eq!((code, stdout.as_str()), (0, "ok\n"), "{stderr}");
    assert!(stderr.contains(WARNING), "{stderr}");
    assert!(
        stderr.contains("set `quic_reads_proxy_protocol = true` in [backend.origin]"),
        "{stderr}"
    );
    // One warning: the tcp listener's copy reads PROXY headers fine.
    assert_eq!(stderr.matches("warning: route[").count(), 1, "{stderr}");

    let reads = format!("{v2}\nquic_reads_proxy_protocol = true");
    let (code, stdout, stderr) = check(&config(&reads));
    assert_eq!((code, stdout.as_str()), (0, "ok\n"), "{stderr}");
    assert!(!stderr.contains("PROXY"), "{stderr}");
}

#[tokio::test]
async fn the_relay_logs_the_warning_at_start() {
    let v2 = "addresses = [\"192.0.2.10:443\"]\nproxy_protocol = \"v2\"";
    let relay = Relay::start(&config(v2)).await;
    let line = relay
        .wait_log(|l| l["message"] == "configuration warning")
        .await;
    assert_eq!(line["level"], "WARN", "{line}");
    assert_eq!(line["key"], "route[0].backend", "{line}");
    let warning = line["warning"].as_str().unwrap();
    assert!(
        warning.contains("route \"site\" reaches it from protocol = \"quic\" listener \"h3\""),
        "{line}"
    );
}
