//! HTTP/3 from a real browser through the relay: headless chromium (Debian
//! `chromium`), forced onto QUIC for one origin, fetches a page from Caddy
//! (Debian `caddy`) serving HTTP/3, once through the relay's quic listener
//! and once directly. The page's script fetches a 1 MiB body and writes its
//! SHA-256 and length into the page; the two rendered pages must be equal
//! and carry the digest of the bytes Caddy serves. The path is shown to be
//! QUIC from both ends: the relay's access line for the flow (`protocol =
//! "quic"`, the route, bytes and datagrams both ways) and Caddy's JSON
//! access log (`"proto":"HTTP/3.0"`, with the relay's port in the Host and
//! the flow's backend socket, as the relay logs it in `backend.local`, as
//! the remote address). The relay has no TCP
//! listener, so nothing but the quic listener could have carried it. Then a
//! name no route lists, through the same relay, fails at once with the QUIC
//! refusal (chromium: `ERR_QUIC_PROTOCOL_ERROR`; the relay: `unmatched`,
//! one datagram back) and reaches nothing.
//!
//! Chromium resolves the test name to 127.0.0.1 (`--host-resolver-rules`)
//! and trusts the certificate made at test time by its key pin
//! (`--ignore-certificate-errors-spki-list`); Caddy runs from a JSON config
//! with no admin endpoint, no automatic HTTPS (so no ACME) and its storage
//! in the test's directory. A missing chromium or caddy fails the test.

use crate::common;

use std::net::SocketAddr;

use common::browser::{BrowserRun, caddy_config, chromium_run, hex, sha256};
use common::{
    Pki, Relay, Tool, WAIT, free_tcp_udp_port, scratch_dir, wait_accepting, wait_udp_bound,
};
use serde_json::Value;

/// The name routed to Caddy.
const NAME: &str = "h3.snirelay.test";
/// A name no route lists.
const UNLISTED: &str = "other.snirelay.test";
/// The body the page fetches: large enough for hundreds of datagrams.
const BLOB_LEN: usize = 1 << 20;

/// The page: fetches `/blob.bin` and writes its SHA-256 and length
/// (`sha256=HEX bytes=N`), or the error, into `#out`.
const PAGE: &str = r#"<!doctype html>
<html><head><meta charset="utf-8"><title>h3 through snirelay</title></head>
<body><pre id="out">pending</pre>
<script>
const out = document.getElementById('out');
fetch('/blob.bin')
  .then(r => r.arrayBuffer())
  .then(b => crypto.subtle.digest('SHA-256', b).then(d => {
    const hex = Array.from(new Uint8Array(d), x => x.toString(16).padStart(2, '0')).join('');
    out.textContent = 'sha256=' + hex + ' bytes=' + b.byteLength;
  }))
  .catch(e => { out.textContent = 'error ' + e; });
</script>
</body></html>
"#;

/// Known bytes that no layer could compress away (xorshift64).
fn blob() -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut bytes = Vec::with_capacity(BLOB_LEN);
    while bytes.len() < BLOB_LEN {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        bytes.extend_from_slice(&x.to_le_bytes());
    }
    bytes.truncate(BLOB_LEN);
    bytes
}

/// Caddy serving [`PAGE`] and `blob` for [`NAME`] over HTTP/1.1, HTTP/2 and
/// HTTP/3 on one loopback port (TCP and UDP), with the certificate of
/// `pki` and its access log as JSON on stderr. Returns once both sockets
/// are bound.
async fn start_caddy(pki: &Pki, blob: &[u8]) -> (Tool, SocketAddr) {
    let dir = scratch_dir("caddy");
    let site = dir.join("site");
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(site.join("index.html"), PAGE).unwrap();
    std::fs::write(site.join("blob.bin"), blob).unwrap();
    let port = free_tcp_udp_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let config_path = caddy_config(&dir, addr, NAME, &site, pki);
    let mut caddy = Tool::spawn(
        "caddy",
        &["run", "--config", config_path.to_str().unwrap()],
        dir,
        "caddy",
    );
    wait_udp_bound(port, &mut caddy).await;
    wait_accepting(addr, &mut caddy).await;
    (caddy, addr)
}

/// A quic listener (and nothing on TCP) routing [`NAME`] to Caddy's port.
fn relay_config(caddy: SocketAddr) -> String {
    format!(
        r#"
[[listener]]
name = "h3"
protocol = "quic"
listen = ["127.0.0.1:0"]
# Long enough that a busy machine's pauses do not end the flow mid-page.
idle_timeout = "3s"

[[route]]
name = "h3"
sni = ["{NAME}"]
backend = "caddy"

[backend.caddy]
addresses = ["{caddy}"]
"#
    )
}

/// Chromium, forced onto QUIC for `https://name:port`, which resolves to
/// loopback, with the test certificate pinned: the rendered page.
async fn browse(name: &str, port: u16, pin: &str) -> BrowserRun {
    chromium_run(&[
        format!("--origin-to-force-quic-on={name}:{port}"),
        format!("--host-resolver-rules=MAP {name} 127.0.0.1"),
        format!("--ignore-certificate-errors-spki-list={pin}"),
        // Virtual time does not run while a fetch is pending: the DOM is
        // dumped once the page's script has written its answer.
        "--virtual-time-budget=10000".to_owned(),
        "--dump-dom".to_owned(),
        format!("https://{name}:{port}/"),
    ])
    .await
}

/// Caddy's access lines (JSON) so far.
fn access_lines(caddy: &Tool) -> Vec<Value> {
    caddy
        .lines()
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["logger"] == "http.log.access")
        .collect()
}

/// Waits (bounded) for Caddy's access line of `uri` requested with Host
/// `host`, and returns it.
async fn access_line(caddy: &mut Tool, host: &str, uri: &str) -> Value {
    let matches = |l: &Value| {
        l["logger"] == "http.log.access"
            && l["request"]["host"] == host
            && l["request"]["uri"] == uri
    };
    let line = caddy
        .wait_line(|l| serde_json::from_str::<Value>(l).is_ok_and(|l| matches(&l)))
        .await;
    serde_json::from_str(&line).unwrap()
}

fn is_quic_close(line: &Value) -> bool {
    line["message"] == "connection closed" && line["protocol"] == "quic"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_fetches_over_http3_through_the_relay_from_caddy() {
    let _heavy = common::HEAVY.lock().await;
    let pki = Pki::new(&[NAME]);
    let pin = pki.server_spki_pin();
    let blob = blob();
    let expected = format!("sha256={} bytes={BLOB_LEN}", hex(&sha256(&blob)));
    let (mut caddy, caddy_addr) = start_caddy(&pki, &blob).await;
    let relay = Relay::start(&relay_config(caddy_addr)).await;
    let relay_port = relay.addr_of("h3").port();
    // Only UDP: nothing on the relay's port could carry the page but QUIC.
    let listening: Vec<Value> = relay
        .log_lines()
        .into_iter()
        .filter(|l| l["message"] == "listening")
        .collect();
    assert_eq!(listening.len(), 1, "{listening:#?}");
    assert_eq!(listening[0]["protocol"], "quic", "{listening:#?}");

    // Through the relay.
    let relayed = browse(NAME, relay_port, &pin).await;
    assert!(
        relayed.stdout.contains(&expected),
        "through the relay the page shows no {expected}: {}\n{}",
        relayed.stdout,
        relayed.stderr
    );
    // Directly from Caddy.
    let direct = browse(NAME, caddy_addr.port(), &pin).await;
    assert!(
        direct.stdout.contains(&expected),
        "directly the page shows no {expected}: {}\n{}",
        direct.stdout,
        direct.stderr
    );
    // The same page, byte for byte (the script's answer included).
    assert_eq!(relayed.stdout, direct.stdout);
    eprintln!(
        "page of {} bytes and {BLOB_LEN}-byte body equal through the relay ({:?}) and directly ({:?})",
        relayed.stdout.len(),
        relayed.took,
        direct.took
    );

    // Caddy answered both over HTTP/3; through the relay, the Host names
    // the relay's port and the request came from the relay's backend
    // socket, not from the browser's.
    let relayed_host = format!("{NAME}:{relay_port}");
    let direct_host = format!("{NAME}:{}", caddy_addr.port());
    let mut relayed_ports = Vec::new();
    for (host, uri) in [
        (&relayed_host, "/"),
        (&relayed_host, "/blob.bin"),
        (&direct_host, "/"),
        (&direct_host, "/blob.bin"),
    ] {
        let line = access_line(&mut caddy, host, uri).await;
        assert_eq!(line["request"]["proto"], "HTTP/3.0", "{line}");
        assert_eq!(line["status"], 200, "{line}");
        if uri == "/blob.bin" {
            assert_eq!(line["size"], BLOB_LEN, "{line}");
        }
        if host == &relayed_host {
            relayed_ports.push(line["request"]["remote_port"].as_str().unwrap().to_owned());
        }
    }

    // The relay's line for the flow: QUIC v1, routed to Caddy, the body
    // and more down, the requests up. One flow: the browser kept one QUIC
    // connection for the origin.
    let flow = relay
        .wait_log(|l| is_quic_close(l) && l["sni"] == NAME)
        .await;
    assert_eq!(flow["listener"], "h3", "{flow}");
    assert_eq!(flow["quic_version"], "v1", "{flow}");
    assert_eq!(flow["route"], "h3", "{flow}");
    assert_eq!(flow["backend"], "caddy", "{flow}");
    assert_eq!(flow["backend.addr"], caddy_addr.to_string(), "{flow}");
    // The browser's client went quiet (its CONNECTION_CLOSE is encrypted:
    // the relay cannot read it), so the flow idled out.
    assert_eq!(flow["close"], "idle_timeout", "{flow}");
    let up = flow["bytes.up"].as_u64().unwrap();
    let down = flow["bytes.down"].as_u64().unwrap();
    assert!(up >= 1200, "{flow}");
    assert!(down > BLOB_LEN as u64, "{flow}");
    assert!(flow["datagrams.up"].as_u64().unwrap() >= 2, "{flow}");
    assert!(
        flow["datagrams.down"].as_u64().unwrap() >= (BLOB_LEN / 1500) as u64,
        "{flow}"
    );
    // Caddy's client was the flow's backend socket, which the access line
    // names (`backend.local`): how a backend's lines are matched to the
    // relay's, there being no PROXY header on UDP.
    let port_of = |field: &str| {
        flow[field]
            .as_str()
            .unwrap_or_else(|| panic!("no {field}: {flow}"))
            .parse::<SocketAddr>()
            .unwrap()
            .port()
            .to_string()
    };
    let relay_side = port_of("backend.local");
    assert!(
        relayed_ports.iter().all(|p| *p == relay_side),
        "Caddy saw {relayed_ports:?}, the relay's backend socket is {}",
        flow["backend.local"]
    );
    assert_ne!(relay_side, port_of("client.peer"));
    eprintln!(
        "relayed flow: {up} bytes / {} datagrams up, {down} bytes / {} datagrams down, {} ms",
        flow["datagrams.up"], flow["datagrams.down"], flow["duration_ms"]
    );

    // A name no route lists, through the same relay: refused at once.
    let refused = browse(UNLISTED, relay_port, &pin).await;
    assert!(
        refused.stderr.contains("net::ERR_QUIC_PROTOCOL_ERROR"),
        "{}",
        refused.stderr
    );
    assert!(!refused.stdout.contains("sha256="), "{}", refused.stdout);
    // Well within the browser's own handshake timeout (10 s), which a
    // dropped Initial would have had to wait out.
    assert!(refused.took < WAIT, "{:?}", refused.took);
    relay
        .wait_log(|l| is_quic_close(l) && l["sni"] == UNLISTED)
        .await;
    let refusals: Vec<Value> = relay
        .log_lines()
        .into_iter()
        .filter(|l| is_quic_close(l) && l["sni"] == UNLISTED)
        .collect();
    for line in &refusals {
        assert_eq!(line["close"], "unmatched", "{line}");
        // The refusal: one server Initial with CONNECTION_CLOSE.
        assert_eq!(line["datagrams.down"], 1, "{line}");
        assert!(line["route"].is_null(), "{line}");
        assert!(line["backend"].is_null(), "{line}");
    }
    eprintln!(
        "{UNLISTED}: refused in {:?} ({} flows)",
        refused.took,
        refusals.len()
    );
    // Caddy logged nothing about it (the relay's lines above say that
    // nothing was forwarded: no route, no backend).
    assert!(
        !caddy.lines().iter().any(|l| l.contains(UNLISTED)),
        "{:#?}",
        caddy.lines()
    );
    // Still one flow for the routed name; every request Caddy logged
    // was HTTP/3.
    assert_eq!(
        relay
            .log_lines()
            .iter()
            .filter(|l| is_quic_close(l) && l["sni"] == NAME)
            .count(),
        1
    );
    assert!(
        access_lines(&caddy)
            .iter()
            .all(|l| l["request"]["proto"] == "HTTP/3.0"),
        "{:#?}",
        access_lines(&caddy)
    );
}
