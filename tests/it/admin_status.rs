//! The status page (`GET /` on the admin listener) through the real binary
//! and a real headless browser (Debian's chromium): the page loads while
//! traffic flows, and every number it tags with a series (`data-metric`)
//! agrees with `/metrics`: between a scrape before and one after while
//! connections come and go, and exactly once only long-lived connections
//! remain open. A phone-sized screenshot is kept as an artifact
//! (`target/tmp/status-page.png`). Also: addresses hidden with `[admin]
//! address_labels = false` (and server names without `expose_config`), the
//! generation counting reloads, and HEAD.

use crate::common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::browser::chromium;
use common::*;
use tokio_util::sync::CancellationToken;

const NAME: &str = "app.localhost";

/// Listener `tls` (no per-source cap: the load comes from one address),
/// route `app` for [`NAME`] to backend `b` at `backend`, the admin
/// listener on loopback with `admin_extra`.
fn config(backend: SocketAddr, admin_extra: &str) -> String {
    format!(
        "[admin]\nlisten = \"127.0.0.1:0\"\n{admin_extra}\n\
         [[listener]]\nname = \"tls\"\nlisten = [\"127.0.0.1:0\"]\n\n{NO_SOURCE_LIMIT}\n\
         [[route]]\nname = \"app\"\nsni = [\"{NAME}\"]\nbackend = \"b\"\n\n\
         [backend.b]\naddresses = [\"{backend}\"]\nconnect_timeout = \"2s\"\n"
    )
}

/// The DOM chromium rendered from `url`.
async fn rendered_dom(url: &str) -> String {
    chromium(&["--dump-dom".to_owned(), url.to_owned()]).await
}

/// Every `data-metric="SERIES">VALUE<` of a DOM: the series (attribute
/// entities decoded) and the number shown.
fn tagged_numbers(dom: &str) -> Vec<(String, f64)> {
    let mut found = Vec::new();
    let mut rest = dom;
    while let Some(at) = rest.find("data-metric=\"") {
        rest = &rest[at + "data-metric=\"".len()..];
        let end = rest.find('"').unwrap();
        let series = rest[..end]
            .replace("&quot;", "\"")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&amp;", "&");
        let tag_end = rest.find('>').unwrap();
        let text_end = rest[tag_end..].find('<').unwrap() + tag_end;
        let shown = rest[tag_end + 1..text_end].trim();
        let value = shown
            .parse()
            .unwrap_or_else(|_| panic!("{series} shows {shown:?}, not a number"));
        found.push((series, value));
    }
    found
}

/// The per-second rate the page shows for the counter `series`.
fn tagged_rate(dom: &str, series: &str) -> f64 {
    let key = format!("data-rate=\"{}\">", series.replace('"', "&quot;"));
    let at = dom
        .find(&key)
        .unwrap_or_else(|| panic!("no rate of {series}"))
        + key.len();
    let shown = &dom[at..at + dom[at..].find('<').unwrap()];
    shown
        .parse()
        .unwrap_or_else(|_| panic!("the rate of {series} is {shown:?}"))
}

/// The number in the cell marked `attr="name"`: `data-backend-open` (open
/// connections summed over a backend's addresses) or `data-route-open` (a
/// route's relaying connections).
fn open_cell(dom: &str, attr: &str, name: &str) -> u64 {
    let key = format!("{attr}=\"{name}\">");
    let at = dom.find(&key).unwrap_or_else(|| panic!("no {key} cell")) + key.len();
    dom[at..at + dom[at..].find('<').unwrap()].parse().unwrap()
}

fn screenshot_path() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("status-page.png")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_in_a_browser_shows_what_metrics_says_while_traffic_flows() {
    let _heavy = common::HEAVY.lock().await;
    let pki = Pki::new(&[NAME]);
    let backend = tls_echo_backend(&pki).await;
    let relay = Relay::start(&config(backend, "expose_config = true\n")).await;
    let admin = relay.admin_addr().await;
    let url = format!("http://{admin}/");

    // The page's first sample of the counters its rates come from.
    let (status, _) = http_get(admin, "/").await;
    assert_eq!(status, 200);
    let first_sample = tokio::time::Instant::now();
    let accepted = "snirelay_connections_accepted_total{listener=\"tls\",protocol=\"tcp\"}";

    // Long-lived sessions that stay open throughout, and a load of short
    // ones beside them.
    const HELD: usize = 3;
    let mut held = Vec::new();
    for _ in 0..HELD {
        held.push(echo_session(&pki, relay.addr(), NAME).await.unwrap());
    }
    let stop = CancellationToken::new();
    let load = load(
        &pki,
        Arc::new(Mutex::new(relay.addr())),
        NAME,
        50,
        stop.clone(),
    );
    // Traffic is flowing before the page is read.
    wait_metric(admin, accepted, 20.0).await;
    // Not a readiness wait: a rate needs its interval (at least a second
    // after the previous sample) to have passed.
    tokio::time::sleep_until(first_sample + Duration::from_millis(1100)).await;

    // While connections come and go: every counter the page shows lies
    // between a scrape just before and one just after.
    let (_, before) = http_get(admin, "/metrics").await;
    let dom = rendered_dom(&url).await;
    let (_, after) = http_get(admin, "/metrics").await;
    let shown = tagged_numbers(&dom);
    assert!(shown.len() >= 8, "too few tagged numbers: {shown:?}");
    let mut counters = 0;
    for (series, value) in &shown {
        if series.contains("_total") {
            counters += 1;
            let (lo, hi) = (metric(&before, series), metric(&after, series));
            assert!(
                lo <= *value && *value <= hi,
                "{series}: page shows {value}, /metrics said {lo} then {hi}"
            );
        }
    }
    assert!(counters >= 6, "{shown:?}");
    for series in [
        "snirelay_connections_accepted_total{listener=\"tls\",protocol=\"tcp\"}",
        "snirelay_connections_active{listener=\"tls\",protocol=\"tcp\"}",
        "snirelay_bytes_up_total{listener=\"tls\",protocol=\"tcp\",route=\"app\",backend=\"b\"}",
        "snirelay_bytes_down_total{listener=\"tls\",protocol=\"tcp\",route=\"app\",backend=\"b\"}",
        "snirelay_backend_connect_attempts_total{backend=\"b\"}",
        "snirelay_backend_connect_failures_total{backend=\"b\"}",
        "snirelay_connections_draining",
        "snirelay_reloads_total{outcome=\"ok\"}",
    ] {
        assert!(
            shown.iter().any(|(s, _)| s == series),
            "the page does not show {series}"
        );
    }
    // The connection rate: over at least a second since the first sample
    // (which saw no more than the held sessions), so at most what was
    // accepted meanwhile, and above zero while the load runs.
    let rate = tagged_rate(&dom, accepted);
    assert!(
        rate > 0.0 && rate <= metric(&after, accepted),
        "rate {rate}, accepted {}",
        metric(&after, accepted)
    );
    assert!(dom.contains("<title>snirelay status</title>"));
    assert!(dom.contains("http-equiv=\"refresh\""));
    assert!(dom.contains("name=\"viewport\""));

    // Once the load has stopped and only the held sessions remain open,
    // the page and /metrics agree exactly, series by series.
    stop.cancel();
    let report = load.await.unwrap();
    assert!(report.succeeded > 20, "{report:?}");
    assert!(report.failures.is_empty(), "{report:?}");
    let closed =
        "snirelay_connections_closed_total{listener=\"tls\",protocol=\"tcp\",reason=\"done\"}";
    wait_metric(admin, closed, report.succeeded as f64).await;
    let dom = rendered_dom(&url).await;
    let (_, now) = http_get(admin, "/metrics").await;
    for (series, value) in tagged_numbers(&dom) {
        assert_eq!(value, metric(&now, &series), "{series}");
    }
    let shown = tagged_numbers(&dom);
    let value_of = |series: &str| shown.iter().find(|(s, _)| s == series).map(|(_, v)| *v);
    assert_eq!(
        value_of("snirelay_connections_active{listener=\"tls\",protocol=\"tcp\"}"),
        Some(HELD as f64)
    );
    assert_eq!(value_of(closed), Some(report.succeeded as f64));
    assert_eq!(open_cell(&dom, "data-backend-open", "b"), HELD as u64);
    assert_eq!(open_cell(&dom, "data-route-open", "app"), HELD as u64);
    assert!(dom.contains(&backend.to_string()), "the address is shown");
    assert!(
        dom.contains(&format!("<td>{NAME}</td>")),
        "names with expose_config"
    );
    assert!(dom.contains("id=\"generation\">1<"), "first generation");
    assert!(dom.contains("<td>none</td>"), "no active check, none shown");

    // The artifact: the page as a phone shows it.
    let png = screenshot_path();
    let _ = std::fs::remove_file(&png);
    chromium(&[
        format!("--screenshot={}", png.display()),
        "--window-size=412,915".to_owned(),
        "--hide-scrollbars".to_owned(),
        url.clone(),
    ])
    .await;
    let bytes = std::fs::read(&png).expect("the screenshot was written");
    assert!(bytes.starts_with(b"\x89PNG"), "a PNG");
    drop(held);
}

#[tokio::test]
async fn addresses_are_hidden_without_address_labels_and_reloads_count_generations() {
    let pki = Pki::new(&[NAME]);
    let backend = tls_echo_backend(&pki).await;
    // A second address on which nothing listens, and active checks: the
    // page shows each address's last check.
    let dead = closed_port();
    let text = config(backend, "address_labels = false\n").replace(
        &format!("[\"{backend}\"]"),
        &format!("[\"{backend}\", \"{dead}\"]"),
    ) + "\n[backend.b.health]\ninterval = \"100ms\"\ntimeout = \"500ms\"\n";
    let relay = Relay::start(&text).await;
    let admin = relay.admin_addr().await;
    drop(echo_session(&pki, relay.addr(), NAME).await.unwrap());

    // Polled (bounded): the first checks may not have ended yet.
    let deadline = tokio::time::Instant::now() + WAIT;
    let (status, page) = loop {
        let (status, page) = http_get(admin, "/").await;
        if page.matches("data-check=").count() == 2 {
            break (status, page);
        }
        assert!(tokio::time::Instant::now() < deadline, "{page}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(status, 200);
    let (first, second) = page.split_once("<td>#2</td>").unwrap();
    let first = &first[first.find("<td>#1</td>").unwrap()..];
    assert!(first.contains("data-check=\"passed\">passed "), "{page}");
    assert!(second.contains("data-check=\"failed\">failed "), "{page}");
    assert!(!page.contains(&dead.to_string()), "{page}");
    assert!(!page.contains(&backend.to_string()), "{page}");
    assert!(!page.contains("snirelay_backend_address_up"), "{page}");
    assert!(page.contains("<td>#1</td>"), "{page}");
    // Server names only where /config shows them (expose_config).
    assert!(!page.contains(NAME), "{page}");
    assert!(page.contains("id=\"generation\">1<"), "{page}");

    // A reload is a new generation (the page says which, and when).
    let line = relay.reload(&text.replace("2s", "3s"), 1).await;
    assert_eq!(line["message"], "reload applied");
    // The log line comes just before the admin state is updated: poll.
    let deadline = tokio::time::Instant::now() + WAIT;
    let page = loop {
        let (_, page) = http_get(admin, "/").await;
        if page.contains("id=\"generation\">2<") {
            break page;
        }
        assert!(tokio::time::Instant::now() < deadline, "{page}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        page.contains("data-metric=\"snirelay_reloads_total{outcome=&quot;ok&quot;}\">1<"),
        "{page}"
    );

    // HEAD: the headers, no body.
    let answer = http_tcp(admin, &http_request_text("HEAD", "/", &[], "")).await;
    assert!(answer.head.contains("text/html"), "{}", answer.head);
    assert!(answer.body.is_empty());
}
