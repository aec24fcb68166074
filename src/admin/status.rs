//! The status page (`GET /` on the admin listener): one server-rendered
//! HTML page with every listener, route and backend (with its addresses),
//! admission refusals and close reasons, drains in progress, and the
//! configuration's generation and load time, in the spirit of HAProxy's
//! stats page.
//!
//! Where the numbers come from: every counter and gauge is read from the
//! same exposition `/metrics` serves ([`crate::metrics::registry::Metrics::render`],
//! parsed back by [`super::exposition`]), so the page and a scrape taken
//! at the same moment agree by construction; each such number carries
//! `data-metric` with its exact series text
//! (`snirelay_connections_accepted_total{listener="tls",protocol="tcp"}`)
//! so a reader (or a test) can compare the two. What `/metrics` does not
//! carry per address comes from the backends' run-time state
//! ([`crate::backend::EndpointState`]: operator state, health, open connections, the
//! last active check (its outcome and age), and the age of the last failed
//! connect or check), and the layout from the
//! configuration in force. Connection rates are the difference between the
//! accepted counters of this render and of the previous one taken at least
//! [`MIN_RATE_INTERVAL`] earlier (kept in [`super::rates::Rates`], in the
//! admin state).
//!
//! Cost: nothing on the relay path. The page is built only when requested,
//! on the admin connection's task, from what a scrape reads (the registry's
//! atomics, under its families' read locks) plus relaxed loads of the
//! per-address atomics, and one pass over the connection registry
//! (`registry::per_route`: each shard locked in turn, counted, released)
//! for the routes' open counts;
//! nothing is sampled in the background. It refreshes
//! itself with `<meta http-equiv="refresh">`, i.e. one scrape's worth of
//! work per viewer every [`REFRESH_SECONDS`].
//!
//! Self-contained: no script, no external stylesheet, font or image, so it
//! works on an air-gapped machine; a viewport meta and tables that scroll
//! sideways inside their own box keep it legible on a phone. Every string
//! from the configuration or the metrics is HTML-escaped. No SNI appears.
//! With `[admin] address_labels = false`, backend addresses are shown as
//! `#1`, `#2`, ... (their position in the set), as the metrics drop them;
//! a route's server names only with `expose_config = true`, like `/config`.
//!
//! Not here: the endpoints that change anything ([`super::control`]),
//! per-connection listings (the connection registry,
//! [`crate::flow::registry`]), reading the exposition back
//! ([`super::exposition`]) or keeping the rates' samples
//! ([`super::rates`]).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use crate::backend::{AddressSource, AddressState};
use crate::metrics;

use super::exposition::{ExpositionSample, Samples, parse_exposition, series};
use super::rates::MIN_RATE_INTERVAL;
use super::state::AdminState;

/// The overview's `ready` cell: `yes`, or `no` and why (`/readyz`'s
/// verdict: not listening, or each requirement that is down).
fn ready_text(verdict: &super::ready::ReadyVerdict) -> String {
    if verdict.ready() {
        return "yes".to_owned();
    }
    let mut why: Vec<String> = Vec::new();
    if !verdict.listening {
        why.push("not listening".to_owned());
    }
    for down in &verdict.down {
        why.push(match &down.backend {
            Some(backend) => format!("{}: backend {backend} {}", down.requirement, down.why),
            None => format!("{}: {}", down.requirement, down.why),
        });
    }
    format!("no <small>({})</small>", escape(&why.join("; ")))
}

/// The page reloads itself this often.
pub(crate) const REFRESH_SECONDS: u32 = 5;

/// `text` safe inside an HTML element or a double-quoted attribute.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A number as `/metrics` would let a reader compare it: integers without
/// a fraction.
fn number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        format!("{value:.3}")
    }
}

/// A table cell holding the value of `series`, tagged with it.
fn metric_cell(samples: &Samples, series: &str) -> String {
    format!(
        "<td class=\"n\" data-metric=\"{}\">{}</td>",
        escape(series),
        number(samples.value(series))
    )
}

fn age(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{}s", s / 60, s % 60),
        3600..86400 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{}h", s / 86400, (s % 86400) / 3600),
    }
}

const STYLE: &str = "\
body{font:14px/1.4 system-ui,sans-serif;margin:0 auto;padding:8px;max-width:1200px;color:#111;background:#fafafa}\
h1{font-size:1.3em;margin:.2em 0}h2{font-size:1.1em;margin:1em 0 .3em}\
.scroll{overflow-x:auto;-webkit-overflow-scrolling:touch;border:1px solid #ccc;background:#fff}\
table{border-collapse:collapse;width:100%;white-space:nowrap}\
th,td{padding:3px 8px;border-bottom:1px solid #e4e4e4;text-align:left}\
th{background:#eef;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}\
tr.addr td:first-child{padding-left:1.5em}\
.up{color:#060}.down{color:#b00;font-weight:600}.drain,.maint{color:#a60;font-weight:600}\
dl{display:grid;grid-template-columns:max-content auto;gap:2px 12px;margin:0}dt{color:#555}dd{margin:0}\
small{color:#666}";

/// The page, as of now.
pub(crate) fn render(state: &AdminState) -> String {
    let samples = Samples(parse_exposition(&metrics::metrics().render()));
    let (config, pending) = state.config();
    let (generation, loaded_at) = state.loaded();
    let backends = state.backends();
    let show_addresses = config.admin.as_ref().is_none_or(|a| a.address_labels);
    // A route's server names are shown where `/config` is: the page is as
    // open as `/metrics`, which names routes but not what they serve.
    let show_names = state.expose_config();

    // The counters behind the rates.
    let mut counts = HashMap::new();
    for listener in &config.listeners {
        let s = series(
            "snirelay_connections_accepted_total",
            &[
                ("listener", &listener.name),
                ("protocol", listener.protocol.as_str()),
            ],
        );
        counts.insert(s.clone(), samples.value(&s));
    }
    for (name, _) in backends.sorted() {
        let s = series(
            "snirelay_backend_connect_attempts_total",
            &[("backend", name)],
        );
        counts.insert(s.clone(), samples.value(&s));
    }
    let rates = state.rates.update(counts);
    // A rate cell names the counter it is the rate of.
    let rate = |series: &str| {
        let shown = rates
            .get(series)
            .map_or_else(|| "–".to_owned(), |r| format!("{r:.1}"));
        format!(
            "<td class=\"n\" data-rate=\"{}\">{shown}</td>",
            escape(series)
        )
    };

    let mut h = String::with_capacity(16 * 1024);
    let _ = write!(
        h,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\">\
         <title>snirelay status</title><style>{STYLE}</style></head><body>"
    );

    // Overview.
    let loaded_age = SystemTime::now()
        .duration_since(loaded_at)
        .unwrap_or_default();
    let _ = write!(
        h,
        "<h1>snirelay {version}</h1><dl>\
         <dt>ready</dt><dd id=\"ready\">{ready}</dd>\
         <dt>configuration generation</dt><dd id=\"generation\">{generation}</dd>\
         <dt>loaded at</dt><dd><span id=\"loaded-at\">{loaded}</span> <small>({ago} ago)</small></dd>\
         <dt>reloads ok / failed</dt><dd><span data-metric=\"{ok_s}\">{ok}</span> / <span data-metric=\"{failed_s}\">{failed}</span></dd>\
         <dt>waiting for a restart</dt><dd id=\"pending-restart\">{pending}</dd>\
         <dt>connections draining</dt><dd data-metric=\"snirelay_connections_draining\">{draining}</dd>\
         <dt>page</dt><dd><small>rendered {now}, refreshed every {REFRESH_SECONDS}s; rates over the last ≥{min}s</small></dd>\
         </dl>",
        version = escape(crate::VERSION),
        ready = ready_text(&state.ready()),
        loaded = humantime::format_rfc3339_seconds(loaded_at),
        ago = age(loaded_age),
        ok_s = escape(&series("snirelay_reloads_total", &[("outcome", "ok")])),
        ok = number(samples.value(&series("snirelay_reloads_total", &[("outcome", "ok")]))),
        failed_s = escape(&series("snirelay_reloads_total", &[("outcome", "failed")])),
        failed = number(samples.value(&series("snirelay_reloads_total", &[("outcome", "failed")]))),
        pending = if pending.is_empty() {
            "nothing".to_owned()
        } else {
            escape(
                &pending
                    .iter()
                    .map(|p| p.key.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            )
        },
        draining = number(samples.value("snirelay_connections_draining")),
        now = humantime::format_rfc3339_seconds(SystemTime::now()),
        min = MIN_RATE_INTERVAL.as_secs(),
    );

    // Listeners.
    h.push_str(
        "<h2>Listeners</h2><div class=\"scroll\"><table id=\"listeners\"><tr><th>listener</th>\
         <th>protocol</th><th>addresses</th><th>open</th><th>accepted</th><th>conn/s</th><th>routes</th></tr>",
    );
    for listener in &config.listeners {
        let l = [
            ("listener", listener.name.as_str()),
            ("protocol", listener.protocol.as_str()),
        ];
        let accepted = series("snirelay_connections_accepted_total", &l);
        let listen: Vec<String> = listener.listen.iter().map(|a| a.to_string()).collect();
        let _ = write!(
            h,
            "<tr><td>{name}</td><td>{protocol}</td><td>{listen}</td>{open}{acc}{rate}<td class=\"n\">{routes}</td></tr>",
            name = escape(&listener.name),
            protocol = listener.protocol.as_str(),
            listen = escape(&listen.join(" ")),
            open = metric_cell(&samples, &series("snirelay_connections_active", &l)),
            acc = metric_cell(&samples, &accepted),
            rate = rate(&accepted),
            routes = listener.routes.len(),
        );
    }
    h.push_str("</table></div>");

    // Routes, with their bytes by backend (a route's ECH backend is a
    // second row).
    // Open connections per route come from the connection registry (those
    // relaying, not those still connecting), counted once per render.
    let open_by_route = crate::flow::registry::per_route();
    h.push_str(
        "<h2>Routes</h2><div class=\"scroll\"><table id=\"routes\"><tr><th>listener</th><th>route</th>\
         <th>names</th><th>open</th><th>backend</th><th>bytes up</th><th>bytes down</th></tr>",
    );
    for listener in &config.listeners {
        for route in &listener.routes {
            let open = open_by_route.get(route.name.as_str()).copied().unwrap_or(0);
            let names: Vec<String> = listener.patterns(route).map(|p| p.to_string()).collect();
            let with = [
                ("listener", listener.name.as_str()),
                ("route", route.name.as_str()),
            ];
            let mut used: Vec<String> = samples
                .matching("snirelay_bytes_up_total", &with)
                .filter_map(|s| s.label("backend").map(str::to_owned))
                .collect();
            if !used.contains(&route.backend.name) {
                used.insert(0, route.backend.name.clone());
            }
            for (row, backend) in used.into_iter().enumerate() {
                // The route's open count on its first row only.
                let open = if row == 0 {
                    format!(
                        "<td class=\"n\" data-route-open=\"{}\">{open}</td>",
                        escape(&route.name)
                    )
                } else {
                    "<td></td>".to_owned()
                };
                let l = [
                    ("listener", listener.name.as_str()),
                    ("protocol", listener.protocol.as_str()),
                    ("route", route.name.as_str()),
                    ("backend", backend.as_str()),
                ];
                let _ = write!(
                    h,
                    "<tr><td>{listener}</td><td>{route}</td><td>{names}</td>{open}<td>{backend}</td>{up}{down}</tr>",
                    listener = escape(&listener.name),
                    route = escape(&route.name),
                    names = if show_names {
                        escape(&names.join(" "))
                    } else {
                        "<small>(expose_config)</small>".to_owned()
                    },
                    backend = escape(&backend),
                    up = metric_cell(&samples, &series("snirelay_bytes_up_total", &l)),
                    down = metric_cell(&samples, &series("snirelay_bytes_down_total", &l)),
                );
            }
        }
    }
    h.push_str("</table></div>");

    // Backends and their addresses.
    h.push_str(
        "<h2>Backends</h2><div class=\"scroll\"><table id=\"backends\"><tr><th>backend / address</th>\
         <th>state</th><th>health</th><th>open</th><th>connects</th><th>conn/s</th><th>failed</th>\
         <th>last check</th><th>last failure</th><th>checks</th></tr>",
    );
    let mut drained = Vec::new();
    for (name, runtime) in backends.sorted() {
        let b = [("backend", name)];
        let attempts = series("snirelay_backend_connect_attempts_total", &b);
        let resolved = runtime.current();
        let source = match &runtime.config.source {
            AddressSource::Fixed => "fixed".to_owned(),
            AddressSource::Dns(dns) => format!("dns {}:{}", dns.host, dns.port),
            AddressSource::Cluster(_) => "cluster".to_owned(),
        };
        let checks = runtime.config.health.as_ref().map_or_else(
            || "passive".to_owned(),
            |c| {
                format!(
                    "{} every {}",
                    c.kind.as_str(),
                    humantime::format_duration(c.interval)
                )
            },
        );
        let open: usize = resolved.set.iter().map(|e| e.state.active()).sum();
        let _ = write!(
            h,
            "<tr class=\"backend\"><td><b>{name_e}</b> <small>{source} · {policy}</small></td>\
             <td></td><td>{up} up / {down} down</td><td class=\"n\" data-backend-open=\"{name_e}\">{open}</td>\
             {acc}{rate}{fail}<td></td><td></td><td>{checks}</td></tr>",
            name_e = escape(name),
            source = escape(&source),
            policy = runtime.config.policy.as_str(),
            up = resolved.set.iter().filter(|e| e.state.is_up()).count(),
            down = resolved.set.iter().filter(|e| !e.state.is_up()).count(),
            acc = metric_cell(&samples, &attempts),
            rate = rate(&attempts),
            fail = metric_cell(
                &samples,
                &series("snirelay_backend_connect_failures_total", &b)
            ),
            checks = escape(&checks),
        );
        for (i, endpoint) in resolved.set.iter().enumerate() {
            let addr = endpoint.addr.to_string();
            let shown = if show_addresses {
                escape(&addr)
            } else {
                format!("#{}", i + 1)
            };
            let operator = endpoint.state.operator();
            if operator != AddressState::Ready {
                drained.push((name, shown.clone(), operator, endpoint.state.active()));
            }
            let (health, class) = if endpoint.state.is_up() {
                ("up", "up")
            } else {
                ("down", "down")
            };
            // The gauge of this address's health, when it is exported: named
            // in `data-series`, not `data-metric`, since the cell shows a
            // word (from the run-time state), not the gauge's number.
            let up_series = series(
                "snirelay_backend_address_up",
                &[("backend", name), ("address", &addr)],
            );
            let health_attr = if show_addresses && samples.0.iter().any(|s| s.series == up_series) {
                format!(" data-series=\"{}\"", escape(&up_series))
            } else {
                String::new()
            };
            let _ = write!(
                h,
                "<tr class=\"addr\"><td>{shown}</td><td class=\"{state}\">{state}</td>\
                 <td class=\"{class}\"{health_attr} data-health=\"{up}\">{health}</td>\
                 <td class=\"n\">{open}</td><td></td><td></td><td></td>{check}<td>{last}</td><td></td></tr>",
                state = operator.as_str(),
                up = u8::from(endpoint.state.is_up()),
                open = endpoint.state.active(),
                check = match endpoint.state.last_check() {
                    None => "<td>none</td>".to_owned(),
                    Some((ago, passed)) => {
                        let (word, class) = if passed {
                            ("passed", "up")
                        } else {
                            ("failed", "down")
                        };
                        format!(
                            "<td class=\"{class}\" data-check=\"{word}\">{word} {} ago</td>",
                            age(ago)
                        )
                    }
                },
                last = endpoint
                    .state
                    .last_failure_age()
                    .map_or_else(|| "never".to_owned(), |d| format!("{} ago", age(d))),
            );
        }
        if !resolved.known {
            h.push_str(
                "<tr class=\"addr\"><td colspan=\"10\"><small>not resolved yet</small></td></tr>",
            );
        }
    }
    h.push_str("</table></div>");

    // Admission refusals and close reasons.
    h.push_str(
        "<h2>Refusals and closes</h2><div class=\"scroll\"><table id=\"refusals\"><tr><th>listener</th>\
         <th>kind</th><th>reason</th><th>count</th></tr>",
    );
    let mut rows = 0;
    for (metric, kind, key) in [
        (
            "snirelay_limit_refusals_total",
            "refused by a limit",
            "kind",
        ),
        ("snirelay_connections_closed_total", "closed", "reason"),
    ] {
        let mut by: BTreeMap<(String, String), &ExpositionSample> = BTreeMap::new();
        for s in samples.matching(metric, &[]) {
            let listener = s.label("listener").unwrap_or_default().to_owned();
            let reason = s.label(key).unwrap_or_default().to_owned();
            by.insert((listener, reason), s);
        }
        for ((listener, reason), s) in by {
            rows += 1;
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{kind}</td><td>{}</td><td class=\"n\" data-metric=\"{}\">{}</td></tr>",
                escape(&listener),
                escape(&reason),
                escape(&s.series),
                number(s.value),
            );
        }
    }
    if rows == 0 {
        h.push_str("<tr><td colspan=\"4\"><small>none yet</small></td></tr>");
    }
    h.push_str("</table></div>");

    // Drains in progress.
    h.push_str("<h2>Drains</h2><div class=\"scroll\"><table id=\"drains\"><tr><th>what</th><th>state</th><th>open</th></tr>");
    let _ = write!(
        h,
        "<tr><td>connections of a stop or reload</td><td>draining</td>{}</tr>",
        metric_cell(&samples, "snirelay_connections_draining")
    );
    for (backend, shown, operator, open) in drained {
        let _ = write!(
            h,
            "<tr><td>{} {}</td><td class=\"{s}\">{s}</td><td class=\"n\">{open}</td></tr>",
            escape(backend),
            shown,
            s = operator.as_str(),
        );
    }
    h.push_str("</table></div>");

    h.push_str(
        "<p><small>Numbers tagged with a series are read from <a href=\"/metrics\">/metrics</a> \
         as it was when this page was rendered.</small></p></body></html>",
    );
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_in_names_is_escaped() {
        assert_eq!(
            escape("<script>\"a\" & 'b'</script>"),
            "&lt;script&gt;&quot;a&quot; &amp; &#39;b&#39;&lt;/script&gt;"
        );
    }
}
