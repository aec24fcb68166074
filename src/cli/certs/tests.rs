//! Unit tests of [`super`]: the plan of names (TCP and QUIC), the
//! coalescing pairs (h2 and h3), the table and the dates it prints, from
//! configurations and rows written here (no I/O).

use std::path::Path;

use crate::cli::certs::*;

fn config(text: &str) -> Config {
    Config::from_toml(text, Path::new("test.toml")).unwrap()
}

#[test]
fn the_plan_sends_exact_names_and_a_name_below_each_wildcard() {
    let config = config(
        r#"
[[listener]]
name = "tls"
listen = ["127.0.0.1:443"]
[[route]]
listener = "tls"
sni = ["a.example.test", "*.b.example.test"]
backend = "one"
[[route]]
listener = "tls"
name = "rest"
sni = ["*"]
backend = "one"

[[listener]]
name = "h3"
listen = ["127.0.0.1:4433"]
protocol = "quic"
[[route]]
listener = "h3"
name = "quic-a"
sni = ["a.example.test", "*.c.example.test"]
backend = "one"
[[route]]
listener = "h3"
name = "quic-proxied"
sni = ["p.example.test"]
backend = "proxied"

[backend.one]
addresses = ["127.0.0.1:8443"]
[backend.proxied]
addresses = ["127.0.0.1:9443"]
proxy_protocol = "v2"
quic_reads_proxy_protocol = true
"#,
    );
    let plan = plan(&config, 50);
    let names: Vec<(Protocol, &str, &str)> = plan
        .targets
        .iter()
        .map(|t| (t.transport, t.route.as_str(), t.name.as_str()))
        .collect();
    // a.example.test over TCP and again over QUIC: two handshakes, one
    // name of backend one.
    assert_eq!(
        names,
        [
            (Protocol::Tcp, "a.example.test", "a.example.test"),
            (
                Protocol::Tcp,
                "a.example.test",
                "snirelay-check.b.example.test"
            ),
            (Protocol::Quic, "quic-a", "a.example.test"),
            (Protocol::Quic, "quic-a", "snirelay-check.c.example.test"),
        ]
    );
    let reasons: Vec<(&str, &str)> = plan
        .not_checked
        .iter()
        .map(|n| (n.route.as_str(), n.reason.as_str()))
        .collect();
    assert_eq!(
        reasons,
        [
            ("rest", "default route (*): no name to send"),
            (
                "quic-proxied",
                "quic: the relay sends this backend a PROXY v2 header over UDP \
                 (proxy_protocol = \"v2\"), which a QUIC handshake here does not send"
            ),
        ]
    );
    assert!(plan.skipped.is_empty());
}

#[test]
fn names_past_the_cap_are_counted_per_backend() {
    let config = config(
        r#"
[[listener]]
name = "tls"
listen = ["127.0.0.1:443"]
[[route]]
sni = ["a.test", "b.test", "c.test"]
backend = "one"
[[route]]
sni = ["d.test"]
backend = "two"

[backend.one]
addresses = ["127.0.0.1:8443"]
[backend.two]
addresses = ["127.0.0.1:9443"]
"#,
    );
    let plan = plan(&config, 2);
    let names: Vec<&str> = plan.targets.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a.test", "b.test", "d.test"]);
    assert_eq!(plan.skipped, BTreeMap::from([("one".to_owned(), 1)]));
}

#[test]
fn the_cap_counts_names_not_listeners() {
    let config = config(
        r#"
[[listener]]
name = "tls"
listen = ["127.0.0.1:443"]
[[listener]]
name = "h3"
protocol = "quic"
listen = ["127.0.0.1:443"]
[[route]]
listener = ["tls", "h3"]
sni = ["a.test", "b.test", "c.test"]
backend = "one"

[backend.one]
addresses = ["127.0.0.1:8443"]
"#,
    );
    let plan = plan(&config, 2);
    let checked: Vec<(&str, &str)> = plan
        .targets
        .iter()
        .map(|t| (t.listener.as_str(), t.name.as_str()))
        .collect();
    assert_eq!(
        checked,
        [
            ("tls", "a.test"),
            ("tls", "b.test"),
            ("h3", "a.test"),
            ("h3", "b.test"),
        ]
    );
    // c.test, past the cap on both listeners: one name skipped.
    assert_eq!(plan.skipped, BTreeMap::from([("one".to_owned(), 1)]));
}

/// A row of `route` on listener `edge` whose backend presented `names`
/// and selected `alpn`.
fn row(route: &str, backend: &str, name: &str, names: &[&str], alpn: &str) -> Row {
    row_on(("edge", Protocol::Tcp), route, backend, name, names, alpn)
}

/// A row as [`row`]'s, on `listener` of `transport`.
fn row_on(
    (listener, transport): (&str, Protocol),
    route: &str,
    backend: &str,
    name: &str,
    names: &[&str],
    alpn: &str,
) -> Row {
    let target = Target {
        listener: listener.into(),
        transport,
        route: route.into(),
        backend: backend.into(),
        pattern: name.into(),
        name: name.into(),
    };
    let mut row = Row::new(&target, Some(SocketAddr::from(([127, 0, 0, 1], 8443))));
    row.status = Status::Ok;
    row.certificate = Some(CertificateSummary {
        names: names.iter().map(|n| n.to_string()).collect(),
        issuer: "CN=test CA".into(),
        not_after: 4_000_000_000,
    });
    row.days_left = Some(9000);
    row.covers = Some(true);
    row.verified = Some("ok".into());
    row.alpn = Some(alpn.into());
    row
}

const EDGE: &str = r#"
[[listener]]
name = "edge"
listen = ["127.0.0.1:443"]
[[route]]
name = "a"
sni = ["a.example.test"]
backend = "one"
[[route]]
name = "b"
sni = ["b.example.test", "c.example.test"]
backend = "two"
[[route]]
name = "deep"
sni = ["*.deep.example.test"]
backend = "three"
[[route]]
name = "rest"
sni = ["*"]
backend = "three"

[backend.one]
addresses = ["127.0.0.1:8443"]
[backend.two]
addresses = ["127.0.0.1:9443"]
[backend.three]
addresses = ["127.0.0.1:10443"]
"#;

#[test]
fn a_wildcard_over_names_of_another_backend_is_one_risk_per_route_pair() {
    let config = config(EDGE);
    let rows = [row("a", "one", "a.example.test", &["*.example.test"], "h2")];
    let risks = coalescing(&config, &rows);
    let pairs: Vec<(&str, &str, &str, usize)> = risks
        .iter()
        .map(|r| {
            let to = (r.other_route.as_str(), r.other_backend.as_str());
            (to.0, to.1, r.covered_name.as_str(), r.covered_names)
        })
        .collect();
    // Not `deep` (a wildcard covers one label), not the default route
    // (no one serves the name made up for "any name below").
    assert_eq!(pairs, [("b", "two", "b.example.test", 2)]);
    assert_eq!(risks[0].level, CoalescingRisk::Warn);
    assert!(
        risks[0].message.starts_with(
            "warning: coalescing risk on listener edge: the certificate backend one \
                 presents for a.example.test (route a) also covers b.example.test and 1 more \
                 name(s) of route b (backend two), and backend one selects h2:"
        ),
        "{}",
        risks[0].message
    );
}

#[test]
fn an_exact_name_under_a_wildcard_route_and_the_default_route_are_risks() {
    let config = config(EDGE);
    let names = ["a.example.test", "x.deep.example.test", "elsewhere.test"];
    let rows = [row("a", "one", "a.example.test", &names, "h2")];
    let covered: Vec<(String, String)> = coalescing(&config, &rows)
        .into_iter()
        .map(|r| (r.other_route, r.covered_name))
        .collect();
    assert_eq!(
        covered,
        [
            ("deep".to_owned(), "x.deep.example.test".to_owned()),
            ("rest".to_owned(), "elsewhere.test".to_owned()),
        ]
    );
}

/// [`EDGE`]'s names also on a quic listener `h3`, `a` and `b` to
/// backends one and two.
const EDGE_AND_H3: &str = r#"
[[listener]]
name = "h3"
listen = ["127.0.0.1:443"]
protocol = "quic"
[[route]]
listener = "h3"
name = "a3"
sni = ["a.example.test"]
backend = "one"
[[route]]
listener = "h3"
name = "b3"
sni = ["b.example.test"]
backend = "two"
"#;

/// [`EDGE`], its routes on `edge` only, and [`EDGE_AND_H3`].
fn edge_and_h3() -> Config {
    let edge = EDGE.replace("[[route]]\n", "[[route]]\nlistener = \"edge\"\n");
    config(&format!("{edge}{EDGE_AND_H3}"))
}

#[test]
fn an_h3_certificate_over_names_of_another_backend_is_a_risk_as_h2_is() {
    let config = edge_and_h3();
    let over_quic = ("h3", Protocol::Quic);
    let rows = [row_on(
        over_quic,
        "a3",
        "one",
        "a.example.test",
        &["*.example.test"],
        "h3",
    )];
    let risks = coalescing(&config, &rows);
    let pairs: Vec<(&str, &str, &str, &str, &str, usize)> = risks
        .iter()
        .map(|r| {
            (
                r.listener.as_str(),
                r.route.as_str(),
                r.alpn.as_str(),
                r.other_route.as_str(),
                r.covered_name.as_str(),
                r.covered_names,
            )
        })
        .collect();
    // The quic listener's own routes only: c.example.test is routed to
    // two over TCP, not through this listener.
    assert_eq!(pairs, [("h3", "a3", "h3", "b3", "b.example.test", 1)]);
    assert_eq!(
        risks[0].message,
        "warning: coalescing risk on listener h3: the certificate backend one presents for \
         a.example.test (route a3) also covers b.example.test of route b3 (backend two), and \
         backend one selects h3: a browser may reuse its connection to a.example.test for \
         b.example.test, and the relay, which routes by the hello alone, never sees that name, \
         so those requests reach backend one, not two. Fixes: distinct certificates per \
         backend; backend one answering 421 Misdirected Request for hosts it does not serve; \
         or an ORIGIN frame (RFC 8336) from backend one that leaves b.example.test out."
    );
    let report = Report::new(rows.to_vec(), plan(&config, 50), risks);
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    assert_eq!(json["checks"][0]["transport"], "quic");
    assert_eq!(json["coalescing"][0]["alpn"], "h3");
    assert_eq!(report.exit_code, 1);
    // The same certificate over TCP, where the backend chose http/1.1:
    // that listener's names are no risk.
    let http1 = [row(
        "a",
        "one",
        "a.example.test",
        &["*.example.test"],
        "http/1.1",
    )];
    assert!(coalescing(&config, &http1).is_empty());
}

#[test]
fn a_quic_backend_selecting_another_protocol_is_no_risk() {
    let config = edge_and_h3();
    let rows = [row_on(
        ("h3", Protocol::Quic),
        "a3",
        "one",
        "a.example.test",
        &["*.example.test"],
        "doq",
    )];
    assert!(coalescing(&config, &rows).is_empty());
}

#[test]
fn http1_and_names_of_the_same_backend_are_no_risk() {
    let config = config(EDGE);
    let http1 = [row(
        "a",
        "one",
        "a.example.test",
        &["*.example.test"],
        "http/1.1",
    )];
    assert!(coalescing(&config, &http1).is_empty());
    let own = [row(
        "b",
        "two",
        "b.example.test",
        &["b.example.test", "c.example.test"],
        "h2",
    )];
    assert!(coalescing(&config, &own).is_empty());
}

#[test]
fn the_table_has_a_line_per_row_then_the_risks() {
    let config = config(EDGE);
    let rows = vec![row("a", "one", "a.example.test", &["*.example.test"], "h2")];
    let risks = coalescing(&config, &rows);
    let report = Report::new(rows, plan(&config, 50), risks);
    assert_eq!(report.exit_code, 1);
    let text = report.to_text();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("STATUS  ROUTE   BACKEND  NAME"),
        "{text}"
    );
    assert!(
        lines[1].starts_with("ok      edge/a  one      a.example.test  127.0.0.1:8443  yes"),
        "{text}"
    );
    assert!(lines[1].ends_with("CN=test CA  *.example.test"), "{text}");
    assert_eq!(
        lines[2],
        "not checked: edge/rest -> backend three: default route (*): no name to send"
    );
    assert!(lines[3].starts_with("warning: coalescing risk"), "{text}");
}

#[test]
fn a_date_is_the_utc_day() {
    assert_eq!(utc_date(0), "1970-01-01");
    assert_eq!(utc_date(1_767_225_599), "2025-12-31");
}
