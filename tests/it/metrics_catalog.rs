//! The relay's metrics against what an operator reads and queries.
//!
//! - From the first scrape after `ready`, every series the configuration
//!   implies is there at zero: per listener (each close reason its kind can
//!   produce, each hello outcome, each configured limit's refusals), per
//!   route and backend (bytes both ways), per backend (connects, address
//!   health and counts); a reload adds the series of what it adds.
//! - Every family the relay can export ([`FAMILIES`], the list the
//!   registry registers from) is in docs/operations.md's metrics table with
//!   its type and labels, and plotted by packaging/grafana-dashboard.json;
//!   the dashboard is valid JSON whose panels do not overlap.
//! - The alert rules shipped in packaging/prometheus-alerts.yaml are the
//!   ones docs/operations.md shows, name only exported metrics, and pass
//!   `promtool check rules` (Debian package `prometheus`; the test fails
//!   without it).

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

use common::*;
use snirelay::flow::access::CloseReason;
use snirelay::metrics::families::{FAMILIES, Kind};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every sample of a text exposition: series (`name{labels}`) → value.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("series value");
            (series.to_owned(), value.parse().expect("a number"))
        })
        .collect()
}

/// Two listeners (TCP `edge` with listener and route limits and a no-SNI
/// fallback; QUIC `h3`), three routes, four backends; `extra` appended.
fn config(extra: &str) -> String {
    format!(
        r#"
[admin]
listen = "127.0.0.1:0"

[[listener]]
name = "edge"
listen = ["127.0.0.1:0"]
no_sni = "fallback"
[listener.limits]
connection_rate_per_source = 100
deny = ["192.0.2.0/24"]

[[listener]]
name = "h3"
protocol = "quic"
listen = ["127.0.0.1:0"]

[[route]]
name = "app"
listener = "edge"
sni = ["app.example.com"]
backend = "web"

[[route]]
name = "api"
listener = "edge"
sni = ["api.example.com"]
backend = "api"
max_connections = 10
[route.limits]
connections_per_source = 2

[[route]]
name = "app3"
listener = "h3"
sni = ["app.example.com"]
backend = "web"

[backend.web]
addresses = ["198.51.100.1:443", "198.51.100.2:443"]

[backend.api]
addresses = ["198.51.100.3:443"]

[backend.fallback]
addresses = ["198.51.100.4:443"]
{extra}
"#
    )
}

/// The series a listener of `protocol` shows at zero whatever its routes.
fn listener_series(listener: &str, protocol: &str) -> Vec<String> {
    let l = format!("listener=\"{listener}\",protocol=\"{protocol}\"");
    let mut series = vec![
        format!("snirelay_connections_accepted_total{{{l}}}"),
        format!("snirelay_connections_active{{{l}}}"),
        format!("snirelay_client_hellos_ech_total{{{l}}}"),
        format!("snirelay_client_hellos_total{{{l},outcome=\"sni\"}}"),
        format!("snirelay_client_hellos_total{{{l},outcome=\"no_sni\"}}"),
        format!("snirelay_client_hellos_total{{{l},outcome=\"incomplete\"}}"),
        format!("snirelay_admission_sources{{listener=\"{listener}\"}}"),
        format!("snirelay_admission_sources_evicted_total{{listener=\"{listener}\"}}"),
    ];
    for reason in CloseReason::ALL {
        if reason.transport().includes(protocol) {
            series.push(format!(
                "snirelay_connections_closed_total{{{l},reason=\"{reason}\"}}"
            ));
        }
    }
    series
}

fn bytes_series(listener: &str, protocol: &str, route: &str, backend: &str) -> [String; 2] {
    let labels = format!(
        "{{listener=\"{listener}\",protocol=\"{protocol}\",route=\"{route}\",backend=\"{backend}\"}}"
    );
    [
        format!("snirelay_bytes_up_total{labels}"),
        format!("snirelay_bytes_down_total{labels}"),
    ]
}

fn backend_series(backend: &str) -> Vec<String> {
    let b = format!("backend=\"{backend}\"");
    vec![
        format!("snirelay_backend_connect_attempts_total{{{b}}}"),
        format!("snirelay_backend_connect_failures_total{{{b}}}"),
        format!("snirelay_backend_connect_duration_seconds_count{{{b}}}"),
        format!("snirelay_backend_address_series_replaced_total{{{b}}}"),
        format!("snirelay_backend_addresses{{{b},state=\"down\"}}"),
    ]
}

fn refusal(listener: &str, protocol: &str, kind: &str) -> String {
    format!(
        "snirelay_limit_refusals_total{{listener=\"{listener}\",protocol=\"{protocol}\",kind=\"{kind}\"}}"
    )
}

/// Asserts each of `series` is in `got` with `value`.
fn assert_all(got: &BTreeMap<String, f64>, series: &[String], value: f64, text: &str) {
    let wrong: Vec<String> = series
        .iter()
        .filter(|s| got.get(*s) != Some(&value))
        .map(|s| format!("{s} = {:?}", got.get(s)))
        .collect();
    assert!(wrong.is_empty(), "not at {value}: {wrong:#?}\n{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_a_configuration_implies_are_at_zero_after_ready() {
    let relay = Relay::start(&config("")).await;
    let admin = relay.admin_addr().await;
    let (status, text) = http_get(admin, "/metrics").await;
    assert_eq!(status, 200);
    let got = samples(&text);

    let mut zero = Vec::new();
    zero.extend(listener_series("edge", "tcp"));
    zero.extend(listener_series("h3", "quic"));
    for (listener, protocol, route, backend) in [
        ("edge", "tcp", "app", "web"),
        ("edge", "tcp", "api", "api"),
        ("edge", "tcp", "no_sni", "fallback"),
        ("h3", "quic", "app3", "web"),
    ] {
        zero.extend(bytes_series(listener, protocol, route, backend));
    }
    // The listener's limits (`connections_per_source` by default), the
    // route's, and nothing for h3 but its default per-source cap.
    for kind in [
        "denied",
        "limit_concurrent",
        "limit_rate",
        "route_limit_concurrent",
        "route_full",
    ] {
        zero.push(refusal("edge", "tcp", kind));
    }
    zero.push(refusal("h3", "quic", "limit_concurrent"));
    for backend in ["web", "api", "fallback"] {
        zero.extend(backend_series(backend));
    }
    for outcome in ["ok", "failed"] {
        zero.push(format!("snirelay_reloads_total{{outcome=\"{outcome}\"}}"));
    }
    for reason in [
        "done",
        "silent",
        "request_timeout",
        "idle_timeout",
        "evicted",
        "error",
        "shutdown",
    ] {
        zero.push(format!(
            "snirelay_admin_connections_closed_total{{reason=\"{reason}\"}}"
        ));
    }
    for reason in ["evicted", "unvalidated", "max_connections"] {
        zero.push(format!(
            "snirelay_quic_unvalidated_closed_total{{reason=\"{reason}\"}}"
        ));
    }
    assert_all(&got, &zero, 0.0, &text);

    // Each kind's own close reasons and hello outcomes, and not the other's.
    let closed = |l: &str, p: &str, r: &str| {
        format!(
            "snirelay_connections_closed_total{{listener=\"{l}\",protocol=\"{p}\",reason=\"{r}\"}}"
        )
    };
    let hello = |l: &str, p: &str, o: &str| {
        format!("snirelay_client_hellos_total{{listener=\"{l}\",protocol=\"{p}\",outcome=\"{o}\"}}")
    };
    for present in [
        closed("edge", "tcp", "done"),
        closed("edge", "tcp", "not_tls"),
        closed("edge", "tcp", "connect_failed"),
        closed("h3", "quic", "not_quic"),
        closed("h3", "quic", "unvalidated"),
        closed("h3", "quic", "connect_failed"),
        hello("edge", "tcp", "not_tls"),
        hello("edge", "tcp", "empty"),
        hello("h3", "quic", "not_quic"),
        hello("h3", "quic", "unknown_version"),
    ] {
        assert_eq!(got.get(&present), Some(&0.0), "{present}\n{text}");
    }
    for absent in [
        closed("edge", "tcp", "not_quic"),
        closed("h3", "quic", "done"),
        closed("h3", "quic", "half_close_timeout"),
        hello("h3", "quic", "not_tls"),
        hello("edge", "tcp", "unknown_version"),
        refusal("h3", "quic", "denied"),
        refusal("edge", "tcp", "route_denied"),
    ] {
        assert!(!got.contains_key(&absent), "{absent}\n{text}");
    }

    // Fixed addresses are up until a check or a connect says otherwise.
    let mut up = Vec::new();
    for (backend, address) in [
        ("web", "198.51.100.1:443"),
        ("web", "198.51.100.2:443"),
        ("api", "198.51.100.3:443"),
    ] {
        up.push(format!(
            "snirelay_backend_address_up{{backend=\"{backend}\",address=\"{address}\"}}"
        ));
    }
    up.push("snirelay_backend_addresses{backend=\"api\",state=\"up\"}".to_owned());
    assert_all(&got, &up, 1.0, &text);
    assert_eq!(
        got.get("snirelay_backend_addresses{backend=\"web\",state=\"up\"}"),
        Some(&2.0),
        "{text}"
    );

    // Every label set is the configuration's: no series names anything
    // else (the relay has seen no traffic).
    for series in got.keys() {
        assert!(!series.contains("example.com"), "{series}");
    }

    // A reload adds a route to a new backend: their series appear at zero.
    // The removed route's and backend's stay, frozen (bounded by the names
    // configured over the process's life).
    let reloaded = config(
        r#"
[[route]]
name = "new"
listener = "edge"
sni = ["new.example.com"]
backend = "new"

[backend.new]
addresses = ["198.51.100.5:443"]
"#,
    )
    .replace("backend = \"api\"", "backend = \"web\"");
    let line = relay.reload(&reloaded, 1).await;
    assert_eq!(line["message"], "reload applied", "{line}");
    let (_, text) = http_get(admin, "/metrics").await;
    let got = samples(&text);
    let mut zero = Vec::new();
    zero.extend(bytes_series("edge", "tcp", "new", "new"));
    zero.extend(bytes_series("edge", "tcp", "api", "web"));
    zero.extend(bytes_series("edge", "tcp", "api", "api"));
    zero.extend(backend_series("new"));
    zero.push("snirelay_reloads_total{outcome=\"failed\"}".to_owned());
    assert_all(&got, &zero, 0.0, &text);
    assert_all(
        &got,
        &[
            "snirelay_backend_address_up{backend=\"new\",address=\"198.51.100.5:443\"}".to_owned(),
            "snirelay_reloads_total{outcome=\"ok\"}".to_owned(),
        ],
        1.0,
        &text,
    );
}

/// The `snirelay_*` names in `text`, a histogram's `_bucket`, `_sum` and
/// `_count` series named by their family.
fn names_in(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (start, _) in text.match_indices("snirelay_") {
        let name: String = text[start..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let histogram = FAMILIES.iter().any(|f| {
            f.kind == Kind::Histogram
                && ["_bucket", "_sum", "_count"]
                    .iter()
                    .any(|s| name.strip_suffix(s) == Some(f.name))
        });
        let name = if histogram {
            name.rsplit_once('_').unwrap().0.to_owned()
        } else {
            name
        };
        names.insert(name);
    }
    names
}

/// The families the relay exports (`snirelay probe` writes its own, for a
/// textfile collector: `snirelay_probe_*`, checked in tests/it/packaging.rs).
fn exported() -> BTreeSet<String> {
    FAMILIES.iter().map(|f| f.name.to_owned()).collect()
}

/// docs/operations.md's `## Metrics` section.
fn metrics_section() -> String {
    let docs = read("docs/operations.md");
    let start = docs
        .find("\n## Metrics\n")
        .expect("docs/operations.md has a `## Metrics` section");
    let rest = &docs[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |at| at + 3);
    rest[..end].to_owned()
}

#[test]
fn every_exported_metric_is_in_the_docs_table_with_its_type_and_labels() {
    let section = metrics_section();
    let mut documented = BTreeMap::new();
    for row in section.lines().filter(|l| l.starts_with("| `snirelay_")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        assert!(cells.len() >= 5, "a short row: {row}");
        let labels: BTreeSet<&str> = cells[3]
            .split(',')
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        for name in cells[1].split(',').map(|n| n.trim().trim_matches('`')) {
            let again = documented.insert(name.to_owned(), (cells[2].to_owned(), labels.clone()));
            assert!(again.is_none(), "{name} is in the table twice");
        }
    }
    let missing: Vec<_> = FAMILIES
        .iter()
        .filter(|f| !documented.contains_key(f.name))
        .map(|f| f.name)
        .collect();
    assert!(
        missing.is_empty(),
        "not in docs/operations.md's table: {missing:?}"
    );
    for (name, (kind, labels)) in &documented {
        let family = FAMILIES
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("docs/operations.md lists {name}, which is not exported"));
        assert_eq!(kind, family.kind.as_str(), "{name}'s type");
        let declared: BTreeSet<&str> = family.labels.iter().copied().collect();
        assert_eq!(labels, &declared, "{name}'s labels");
    }
    assert_eq!(documented.len(), FAMILIES.len());
}

#[test]
fn every_exported_metric_is_on_the_dashboard_and_its_panels_do_not_overlap() {
    let text = read("packaging/grafana-dashboard.json");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    assert_eq!(
        dashboard["templating"]["list"][0]["type"], "datasource",
        "the first variable picks the data source"
    );
    let panels = dashboard["panels"].as_array().expect("panels");
    let mut queried = String::new();
    let mut ids = BTreeSet::new();
    let mut cells: BTreeMap<(u64, u64), String> = BTreeMap::new();
    for panel in panels {
        let title = panel["title"].as_str().expect("a title").to_owned();
        assert!(
            ids.insert(panel["id"].as_u64().expect("an id")),
            "{title}: id twice"
        );
        let grid = &panel["gridPos"];
        let at = |k: &str| {
            grid[k]
                .as_u64()
                .unwrap_or_else(|| panic!("{title}: gridPos.{k}"))
        };
        let (x, y, w, h) = (at("x"), at("y"), at("w"), at("h"));
        assert!(x + w <= 24 && w > 0 && h > 0, "{title}: {grid}");
        for cy in y..y + h {
            for cx in x..x + w {
                if let Some(other) = cells.insert((cx, cy), title.clone()) {
                    panic!("{title} overlaps {other} at x={cx} y={cy}");
                }
            }
        }
        if panel["type"] == "row" {
            assert_eq!((x, w, h), (0, 24, 1), "{title}: a row spans the width");
            continue;
        }
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{title}");
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}: no query");
        for target in targets {
            assert_eq!(target["datasource"]["uid"], "${datasource}", "{title}");
            queried += target["expr"].as_str().expect("an expr");
            queried += "\n";
        }
    }
    let queried = names_in(&queried);
    let missing: Vec<_> = exported().difference(&queried).cloned().collect();
    assert!(missing.is_empty(), "no panel plots {missing:?}");
    let unknown: Vec<_> = queried
        .iter()
        .filter(|n| !n.starts_with("snirelay_probe_") && !exported().contains(*n))
        .collect();
    assert!(
        unknown.is_empty(),
        "panels query {unknown:?}, which nothing exports"
    );
}

#[test]
fn alert_rules_are_the_documented_ones_name_exported_metrics_and_pass_promtool() {
    let path = root().join("packaging/prometheus-alerts.yaml");
    let rules = std::fs::read_to_string(&path).unwrap();
    assert!(
        metrics_section().contains(&format!("```yaml\n{rules}```\n")),
        "docs/operations.md's Metrics section does not show packaging/prometheus-alerts.yaml as it is"
    );
    let named = names_in(&rules);
    assert!(named.len() >= 5, "{named:?}");
    let unknown: Vec<_> = named.difference(&exported()).cloned().collect();
    assert!(
        unknown.is_empty(),
        "the rules query {unknown:?}, which nothing exports"
    );
    let out = Command::new("promtool")
        .args(["check", "rules"])
        .arg(&path)
        .output()
        .expect("promtool is missing: apt-get install prometheus");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{report}");
    assert!(report.contains("SUCCESS"), "{report}");
}
