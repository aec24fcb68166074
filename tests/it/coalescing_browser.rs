//! HTTP/2 and HTTP/3 connection coalescing through the relay, shown with a
//! real browser and predicted by `snirelay certs`.
//!
//! Two Caddy servers (Debian `caddy`) are backends `one` and `two`; the
//! relay routes `a.example.test` to `one` and `b.example.test` to `two`.
//! Headless chromium (Debian `chromium`), with both names mapped to the
//! relay (`--host-resolver-rules`), loads `https://a.example.test:PORT/`,
//! whose page loads a script from `https://b.example.test:PORT/who.js`;
//! each Caddy's `who.js` writes its own name into the page.
//!
//! - Both backends present one `*.example.test` certificate: chromium
//!   reuses its connection to `a` for `b` (HTTP/2: RFC 9113 §9.1.1; HTTP/3:
//!   RFC 9114 §3.3), the relay sees one hello (`a.example.test`), and
//!   `b`'s script comes from backend `one` (the page says so, and `one`'s
//!   access log has the request with Host `b.example.test`). `snirelay
//!   certs` on the same configuration predicts exactly that pair
//!   (route-a's certificate covers route-b's name, and the reverse).
//! - Each backend presents its own certificate: `b`'s script comes from
//!   backend `two` over a connection of its own, and `certs` is clean.
//!
//! Each case twice: over HTTP/2 through a TCP listener (Caddy serving
//! HTTP/1.1 and HTTP/2), and over HTTP/3 through a quic listener (Caddy
//! serving HTTP/3 too, chromium forced onto QUIC for both origins with
//! `--origin-to-force-quic-on`, the relay with no TCP listener, so nothing
//! but QUIC could carry a request; `certs` makes QUIC handshakes offering
//! `h3`). Chromium trusts the certificates made here by their key pins
//! (`--ignore-certificate-errors-spki-list`). A missing chromium or caddy
//! fails the test.

use crate::common;

use std::net::SocketAddr;
use std::path::Path;

use common::browser::chromium_run;
use common::{
    Pki, Relay, Tool, free_tcp_udp_port, pem, scratch_dir, wait_accepting, wait_udp_bound,
};
use serde_json::Value;

use crate::backend_certs::{QUIC_LISTENER, coalescing_message_for, config, config_on};

const A: &str = "a.example.test";
const B: &str = "b.example.test";

/// How chromium reaches the backends in a case.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Over {
    /// HTTP/2 through a TCP listener; Caddy serves HTTP/1.1 and HTTP/2.
    Http2,
    /// HTTP/3 through a quic listener (the relay has no TCP listener);
    /// Caddy serves HTTP/3 too, and chromium is forced onto QUIC.
    Http3,
}

impl Over {
    /// Caddy's `protocols`.
    fn caddy_protocols(self) -> &'static [&'static str] {
        match self {
            Over::Http2 => &["h1", "h2"],
            Over::Http3 => &["h1", "h2", "h3"],
        }
    }

    /// The relay's configuration, `a` to `one` and `b` to `two`.
    fn relay_config(self, one: SocketAddr, two: SocketAddr) -> String {
        match self {
            Over::Http2 => config(one, two, "", ""),
            Over::Http3 => config_on(QUIC_LISTENER, one, two, "", ""),
        }
    }

    /// The request's protocol in Caddy's access lines.
    fn http(self) -> &'static str {
        match self {
            Over::Http2 => "HTTP/2.0",
            Over::Http3 => "HTTP/3.0",
        }
    }

    /// The protocol of the relay's lines, and of `certs`'s rows.
    fn transport(self) -> &'static str {
        match self {
            Over::Http2 => "tcp",
            Over::Http3 => "quic",
        }
    }

    /// What the backends select, as `certs` reports it.
    fn alpn(self) -> &'static str {
        match self {
            Over::Http2 => "h2",
            Over::Http3 => "h3",
        }
    }
}

/// Caddy serving `dir/site` (any host) over `protocols` (Caddy's names)
/// with `pki`'s server certificate, its access lines as JSON on stderr;
/// `who.js` writes `served by NAME` into the page's `#b`. Returns once it
/// accepts (and, with `h3`, once its UDP socket is bound).
async fn start_caddy(
    name: &str,
    pki: &Pki,
    protocols: &[&str],
) -> (Tool, SocketAddr, std::path::PathBuf) {
    let dir = scratch_dir(&format!("caddy-{name}"));
    let site = dir.join("site");
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(
        site.join("who.js"),
        format!("document.getElementById('b').textContent = 'served by {name}';\n"),
    )
    .unwrap();
    let (cert, key) = pki.write_server_pem(&dir);
    let port = free_tcp_udp_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let config = serde_json::json!({
        "admin": { "disabled": true, "config": { "persist": false } },
        "storage": { "module": "file_system", "root": dir.join("storage") },
        "apps": {
            "http": { "servers": { "s": {
                "listen": [addr.to_string()],
                "protocols": protocols,
                "automatic_https": { "disable": true },
                "tls_connection_policies": [{}],
                "logs": {},
                "routes": [{ "handle": [{ "handler": "file_server", "root": site }] }]
            }}},
            "tls": { "certificates": { "load_files": [
                { "certificate": cert, "key": key }
            ]}}
        }
    });
    let path = dir.join("caddy.json");
    std::fs::write(&path, config.to_string()).unwrap();
    let mut caddy = Tool::spawn(
        "caddy",
        &["run", "--config", path.to_str().unwrap()],
        dir,
        "caddy",
    );
    if protocols.contains(&"h3") {
        wait_udp_bound(port, &mut caddy).await;
    }
    wait_accepting(addr, &mut caddy).await;
    (caddy, addr, site)
}

/// The page at `a`: loads `b`'s script.
fn write_page(site: &Path, port: u16) {
    let page = format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"></head><body>\n\
         <p id=\"b\">pending</p>\n\
         <script src=\"https://{B}:{port}/who.js\"></script>\n</body></html>\n"
    );
    std::fs::write(site.join("index.html"), page).unwrap();
}

/// `snirelay certs --format json` on `config`, trusting the CAs of `pkis`.
async fn certs(config: &str, pkis: &[&Pki]) -> (Option<i32>, Value) {
    let bundle: String = pkis.iter().map(|p| pem("CERTIFICATE", &p.ca)).collect();
    let (code, report, _) = crate::backend_certs::certs("coalescing-certs", config, &bundle).await;
    (code, report)
}

/// Chromium loads `https://a:PORT/` with both names at the relay (over
/// HTTP/3, forced onto QUIC for both origins); the rendered page.
async fn browse(port: u16, pins: &[String], over: Over) -> String {
    let mut args = vec![
        format!("--host-resolver-rules=MAP {A} 127.0.0.1, MAP {B} 127.0.0.1"),
        format!("--ignore-certificate-errors-spki-list={}", pins.join(",")),
        "--virtual-time-budget=10000".to_owned(),
        "--dump-dom".to_owned(),
    ];
    if over == Over::Http3 {
        args.push(format!("--origin-to-force-quic-on={A}:{port},{B}:{port}"));
    }
    args.push(format!("https://{A}:{port}/"));
    let run = chromium_run(&args).await;
    assert!(
        !run.stdout.contains(">pending<"),
        "the script did not run: {}\n{}",
        run.stdout,
        run.stderr
    );
    run.stdout
}

/// The Host headers of the requests for `uri` in `caddy`'s access lines.
fn hosts_of(caddy: &Tool, uri: &str) -> Vec<String> {
    caddy
        .lines()
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["logger"] == "http.log.access" && l["request"]["uri"] == uri)
        .map(|l| {
            let proto = l["request"]["proto"].as_str().unwrap_or("").to_owned();
            format!("{} {proto}", l["request"]["host"].as_str().unwrap_or(""))
        })
        .collect()
}

/// The server names of the relay's closed connections (and QUIC flows)
/// so far, with the protocol of each.
fn relayed_names(relay: &Relay) -> Vec<(String, String)> {
    relay
        .log_lines()
        .iter()
        .filter(|l| l["message"] == "connection closed")
        .filter_map(|l| {
            let sni = l["sni"].as_str()?.to_owned();
            Some((sni, l["protocol"].as_str().unwrap_or("tcp").to_owned()))
        })
        .collect()
}

/// The coalescing pairs of a `certs` report: (route, backend, covered
/// name, other backend, alpn).
fn risk_pairs(report: &Value) -> Vec<(&str, &str, &str, &str, &str)> {
    report["coalescing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["route"].as_str().unwrap(),
                c["backend"].as_str().unwrap(),
                c["covered_name"].as_str().unwrap(),
                c["other_backend"].as_str().unwrap(),
                c["alpn"].as_str().unwrap(),
            )
        })
        .collect()
}

/// Both backends present one `*.example.test` certificate: `b`'s request
/// reaches backend one, the relay sees `a` only, and `certs` names the
/// pair.
async fn shared_wildcard(over: Over) {
    let _heavy = common::HEAVY.lock().await;
    let wildcard = Pki::new(&["*.example.test"]);
    let (one, one_addr, one_site) = start_caddy("one", &wildcard, over.caddy_protocols()).await;
    let (two, two_addr, _) = start_caddy("two", &wildcard, over.caddy_protocols()).await;
    let config = over.relay_config(one_addr, two_addr);
    let relay = Relay::start(&config).await;
    let port = relay.addr_of("edge").port();
    write_page(&one_site, port);

    let page = browse(port, &[wildcard.server_spki_pin()], over).await;
    assert!(page.contains("<p id=\"b\">served by one</p>"), "{page}");
    // Backend one answered a's page and b's request, over the protocol
    // of the case; two saw nothing.
    let http = over.http();
    assert_eq!(hosts_of(&one, "/"), [format!("{A}:{port} {http}")]);
    assert_eq!(hosts_of(&one, "/who.js"), [format!("{B}:{port} {http}")]);
    assert!(hosts_of(&two, "/who.js").is_empty());
    // The relay saw hellos for a only: b's name never reached it.
    relay
        .wait_log(|l| l["message"] == "connection closed")
        .await;
    let names = relayed_names(&relay);
    let only_a = |(name, transport): &(String, String)| name == A && transport == over.transport();
    assert!(names.iter().all(only_a), "{names:?}");
    eprintln!("{http}: the relay's connections {names:?}");

    // The check predicts exactly this pair.
    let (code, report) = certs(&config, &[&wildcard]).await;
    assert_eq!(code, Some(1), "{report:#}");
    let alpn = over.alpn();
    assert_eq!(
        risk_pairs(&report),
        [
            ("route-a", "one", B, "two", alpn),
            ("route-b", "two", A, "one", alpn)
        ]
    );
    assert_eq!(
        report["coalescing"][0]["message"],
        coalescing_message_for(
            alpn,
            "warning",
            ("route-a", "one", A),
            ("route-b", "two", B)
        )
    );
    assert_eq!(
        checked(&report),
        [(A, over.transport(), alpn), (B, over.transport(), alpn)]
    );
}

/// Each backend presents its own certificate: `b`'s request reaches
/// backend two over a connection of its own, and `certs` is clean.
async fn certificate_per_backend(over: Over) {
    let _heavy = common::HEAVY.lock().await;
    let (pki_a, pki_b) = (Pki::new(&[A]), Pki::new(&[B]));
    let (one, one_addr, one_site) = start_caddy("one", &pki_a, over.caddy_protocols()).await;
    let (two, two_addr, _) = start_caddy("two", &pki_b, over.caddy_protocols()).await;
    let config = over.relay_config(one_addr, two_addr);
    let relay = Relay::start(&config).await;
    let port = relay.addr_of("edge").port();
    write_page(&one_site, port);

    let pins = [pki_a.server_spki_pin(), pki_b.server_spki_pin()];
    let page = browse(port, &pins, over).await;
    assert!(page.contains("<p id=\"b\">served by two</p>"), "{page}");
    let http = over.http();
    assert_eq!(hosts_of(&one, "/"), [format!("{A}:{port} {http}")]);
    assert_eq!(hosts_of(&two, "/who.js"), [format!("{B}:{port} {http}")]);
    assert!(hosts_of(&one, "/who.js").is_empty());
    relay
        .wait_lines(|lines| {
            let names: Vec<&str> = lines
                .iter()
                .filter(|l| l["message"] == "connection closed")
                .filter_map(|l| l["sni"].as_str())
                .collect();
            (names.contains(&A) && names.contains(&B)).then_some(())
        })
        .await;

    let (code, report) = certs(&config, &[&pki_a, &pki_b]).await;
    assert_eq!(code, Some(0), "{report:#}");
    assert_eq!(report["coalescing"], serde_json::json!([]));
    let (transport, alpn) = (over.transport(), over.alpn());
    assert_eq!(
        checked(&report),
        [(A, transport, alpn), (B, transport, alpn)]
    );
}

/// The rows of a `certs` report: (name, transport, alpn).
fn checked(report: &Value) -> Vec<(&str, &str, &str)> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap(),
                r["transport"].as_str().unwrap(),
                r["alpn"].as_str().unwrap(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_wildcard_certificate_sends_b_to_a_backend_and_certs_says_so() {
    shared_wildcard(Over::Http2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_per_backend_sends_b_to_its_own_backend_and_certs_is_clean() {
    certificate_per_backend(Over::Http2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http3_a_shared_wildcard_certificate_sends_b_to_a_backend_and_certs_says_so() {
    shared_wildcard(Over::Http3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http3_a_certificate_per_backend_sends_b_to_its_own_backend_and_certs_is_clean() {
    certificate_per_backend(Over::Http3).await;
}
