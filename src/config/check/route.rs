//! Checks `[[route]]` and attaches each route to its listeners, adding its
//! patterns to each listener's [`NameIndex`] (`Listener::names`, kept with
//! the configuration and shared by the route tables compiled from it);
//! two routes that would take the same hello on one listener are an error.
//!
//! A route names one listener, a list, or `"*"` (every listener), and each
//! listener it names gets a copy of its own: its own limits, counters and
//! metric series, labelled by that listener, so that nothing past the
//! configuration knows a route was written once. Each copy is checked for
//! its listener: a TCP-only key is an error on a quic listener's copy
//! (never kept for the tcp copies and ignored on the quic one), and a
//! name is taken once per listener (the same name on a tcp and a quic
//! listener is two copies, not a clash). A route's names are stored once
//! per copy.
//!
//! A route's names are its `sni` list and the lines of its `sni_file`
//! ([`super::sni_file`]); both are checked alike, and a duplicate across
//! them is the same error as within either.
//!
//! Not here: routing a connection (`route`).

use super::sni_file::{Parsed, PatternOrigin};
use super::*;
use crate::config::keys::ALL_LISTENERS;
use crate::config::shape::nearest;

impl Checker {
    /// Attaches every `[[route]]` to its listeners, a copy to each, and
    /// compiles the matchers.
    pub(super) fn routes(
        &mut self,
        file: &FileConfig,
        listeners: &mut [Listener],
        backends: &BTreeMap<String, Arc<Backend>>,
    ) {
        // Each listener's patterns, every route's in turn: a pattern's id
        // tells its route (`route_of`), so no list of route ids is kept.
        let mut indexes: Vec<NameIndex> = listeners.iter().map(|_| NameIndex::new()).collect();
        for (index, section) in file.routes.iter().enumerate() {
            let key = format!("route[{index}]");
            let backend = backends.get(&section.backend).cloned();
            if backend.is_none() && !file.backends.contains_key(&section.backend) {
                self.problem(
                    format!("{key}.backend"),
                    format!("{:?} names no [backend.*] section", section.backend),
                );
            }
            let targets = self.route_listeners(&key, section, file, listeners);
            let mut patterns = Parsed::default();
            for (i, text) in section.sni.iter().enumerate() {
                match Pattern::parse(text) {
                    Ok(pattern) => patterns.push(&pattern, PatternOrigin::Inline(i)),
                    Err(e) => self.problem(format!("{key}.sni[{i}]"), format!("{text:?}: {e}")),
                }
            }
            let inline_patterns = patterns.len();
            let sni_file = match section.sni_file.as_deref() {
                None => Some(None),
                Some(written) => self.sni_file(&key, written, &mut patterns).map(Some),
            };
            match (&section.sni_file, &sni_file) {
                (None, _) if section.sni.is_empty() => self.problem(
                    format!("{key}.sni"),
                    "at least one name or pattern is required (in `sni` or `sni_file`)",
                ),
                (Some(written), Some(_)) if patterns.is_empty() => self.problem(
                    format!("{key}.sni_file"),
                    format!(
                        "{written} lists no name, and `sni` none either; a route needs at least one"
                    ),
                ),
                _ => {}
            }
            // Per-route admission: the listener's limit keys, no default cap.
            let limits = match &section.limits {
                None => Some(None),
                Some(limits) => self
                    .limits(&format!("{key}.limits"), limits, None)
                    .map(Some),
            };
            let max_connections = self.optional_nonzero(
                &format!("{key}.max_connections"),
                section.max_connections,
                MAX_CONNECTIONS_RANGE,
            );
            // The route's relay timeouts, checked even when the route is
            // unusable, so that every problem is reported.
            let overrides = self.route_timeouts(&key, section);
            let bandwidth = self.route_bandwidth(&key, section);
            let alpn = self.alpn(&key, section.alpn.as_deref());
            let ech = match section.ech.as_deref() {
                None => Some(None),
                Some(text) => self
                    .ech_policy(&format!("{key}.ech"), text, backends)
                    .map(Some),
            };
            let hello_match = self.hello_match(&key, section.r#match.as_ref());
            // QUIC listeners: keys their flows cannot honour, for each
            // quic listener the route names.
            let tcp_targets: Vec<&str> = targets
                .iter()
                .map(|&i| &listeners[i])
                .filter(|l| l.protocol == Protocol::Tcp)
                .map(|l| l.name.as_str())
                .collect();
            for &i in &targets {
                self.quic_route(&key, section, &listeners[i], &tcp_targets);
            }
            let (Some(backend), Some(limits), Some(alpn), Some(ech)) = (backend, limits, alpn, ech)
            else {
                continue;
            };
            let Some(sni_file) = sni_file else {
                continue;
            };
            let (Some(overrides), Some(hello_match), Some(bandwidth)) =
                (overrides, hello_match, bandwidth)
            else {
                continue;
            };
            let name = section
                .name
                .clone()
                .or_else(|| patterns.first().map(|p| p.to_string()))
                .unwrap_or_else(|| key.clone());
            // One copy per listener, each with its own limits, counters and
            // metric series; problems within the route's own names are
            // said once, with its first copy.
            for (copy, &i) in targets.iter().enumerate() {
                let (listener, matcher) = (&mut listeners[i], &mut indexes[i]);
                // QUIC listeners (issue 18).
                let reached = format!("route {name:?}");
                self.quic_backend(
                    &format!("{key}.backend"),
                    &reached,
                    listener,
                    &backend,
                    backends,
                );
                if let Some(EchPolicy::Backend(diverted)) = &ech {
                    let reached = format!("route {name:?}'s ech");
                    self.quic_backend(
                        &format!("{key}.ech"),
                        &reached,
                        listener,
                        diverted,
                        backends,
                    );
                }
                let timeouts = overrides(listener.timeouts());
                let bandwidth = bandwidth(listener.bandwidth);
                let route_id = listener.routes.len();
                let start = matcher.len() as u32;
                matcher.reserve(patterns.len(), patterns.text_len());
                // The route a pattern id belongs to: this one's ids come last.
                let route_of = |id: u32| {
                    if id >= start {
                        route_id
                    } else {
                        listener.route_index(id)
                    }
                };
                let mut full = false;
                for (pattern, origin) in patterns.iter() {
                    // Where a problem with this pattern is reported: written
                    // only for a problem, not for each of 100,000 good names.
                    let place = || match origin {
                        PatternOrigin::Inline(i) => (format!("{key}.sni[{i}]"), String::new()),
                        PatternOrigin::Line(n) => (
                            format!("{key}.sni_file"),
                            format!("{}:{n}: ", section.sni_file.as_deref().unwrap_or_default()),
                        ),
                    };
                    let taken = matcher
                        .ids(pattern)
                        .map(route_of)
                        .find(|&id| id == route_id || overlap(&listener.routes[id].alpn, &alpn));
                    // A refused pattern keeps its place (the route's ids stay
                    // one range) but no lookup finds it.
                    let pushed = match taken {
                        None => matcher.push(pattern),
                        Some(_) => matcher.push_unlisted(pattern),
                    };
                    if let Err(e) = pushed {
                        if !full {
                            let (at, line) = place();
                            self.problem(at, format!("{line}{e}"));
                        }
                        full = true;
                    }
                    match taken {
                        None => {}
                        // Said once, with the route's first copy.
                        Some(id) if id == route_id && copy > 0 => {}
                        Some(id) if id == route_id => {
                            let (at, line) = place();
                            self.problem(
                                at,
                                format!("{line}pattern `{pattern}` is listed twice in this route"),
                            )
                        }
                        // Two routes of one pattern that would both take the
                        // same hello: which one wins would be an accident.
                        Some(id) => {
                            let (at, line) = place();
                            let other = &listener.routes[id];
                            let why = if alpn.is_empty() {
                                "; give one of them an `alpn` list".to_owned()
                            } else {
                                format!(
                                    " with an overlapping alpn ({:?} and {:?})",
                                    other.alpn, alpn
                                )
                            };
                            self.problem(
                                at,
                                format!(
                                    "{line}pattern `{pattern}` is already taken by another route on listener {:?} (route {:?}{why})",
                                    listener.name, other.name
                                ),
                            );
                        }
                    }
                }
                // Per-route admission state is kept across reloads by route
                // name, so a route with limits needs a name of its own.
                let gated = |limits: &Option<Limits>, max: &Option<NonZeroU32>| {
                    limits.is_some() || max.is_some()
                };
                if listener.routes.iter().any(|r| {
                    r.name == name
                        && (gated(&r.limits, &r.max_connections)
                            || gated(&limits, &max_connections))
                }) {
                    self.problem(
                        format!("{key}.name"),
                        format!(
                            "{name:?} is also the name of another route on listener {:?}; a route with limits or max_connections needs a name of its own",
                            listener.name
                        ),
                    );
                }
                listener.routes.push(Route {
                    name: name.clone(),
                    patterns: start..matcher.len() as u32,
                    sni_file: sni_file.clone(),
                    inline_patterns,
                    backend: backend.clone(),
                    limits: limits.clone(),
                    max_connections,
                    timeouts,
                    names: NameRules {
                        case_sensitive: section.case_sensitive_names.unwrap_or(false),
                        ldh: section.ldh_names.unwrap_or(false),
                    },
                    alpn: alpn.clone(),
                    ech: ech.clone(),
                    hello_match: hello_match.clone(),
                    bandwidth,
                });
            }
        }
        // Held as long as the configuration: without the growth slack.
        for (listener, mut index) in listeners.iter_mut().zip(indexes) {
            index.shrink_to_fit();
            listener.names = Arc::new(index);
        }
    }

    /// The listeners a route's `listener` names, as indices into
    /// `listeners` (those built; one whose own problems dropped it is left
    /// out silently). Unset: the only listener, and a problem when there
    /// are several; `"*"`: every listener; else each name once.
    fn route_listeners(
        &mut self,
        key: &str,
        section: &file::RouteSection,
        file: &FileConfig,
        listeners: &[Listener],
    ) -> Vec<usize> {
        let key = format!("{key}.listener");
        let declared: Vec<&str> = file.listeners.iter().map(|l| l.name.as_str()).collect();
        let choices = || quoted(&declared);
        let built = |name: &str| listeners.iter().position(|l| l.name == name);
        let Some(written) = &section.listener else {
            if declared.len() > 1 {
                self.problem(
                    key,
                    format!(
                        "required when there is more than one [[listener]]: name one (`listener = {:?}`), a list (`listener = [{}]`), or write `listener = \"*\"` for every listener (the listeners: {})",
                        declared[0],
                        choices(),
                        choices()
                    ),
                );
                return Vec::new();
            }
            return (0..listeners.len().min(1)).collect();
        };
        let names = written.as_slice();
        if names.is_empty() {
            self.problem(
                key,
                format!(
                    "[] names no listener; name at least one (the listeners: {})",
                    choices()
                ),
            );
            return Vec::new();
        }
        if names.iter().any(|n| n == ALL_LISTENERS) {
            if names.len() > 1 {
                self.problem(
                    key,
                    "\"*\" already means every listener: write `listener = \"*\"` alone, or list the names without it",
                );
                return Vec::new();
            }
            return (0..listeners.len()).collect();
        }
        let mut targets = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let at = match written {
                file::OneOrMany::One(_) => key.clone(),
                file::OneOrMany::Many(_) => format!("{key}[{i}]"),
            };
            if names[..i].contains(name) {
                self.problem(at, format!("{name:?} is listed twice"));
            } else if !declared.contains(&name.as_str()) {
                let hint = match nearest(name, declared.iter().copied()) {
                    Some(near) => format!("did you mean {near:?}? "),
                    None => String::new(),
                };
                self.problem(
                    at,
                    format!(
                        "{name:?} names no [[listener]]; {hint}the listeners: {}",
                        choices()
                    ),
                );
            } else if let Some(built) = built(name) {
                targets.push(built);
            }
        }
        targets
    }

    /// A route's own `idle_timeout`, `half_close_timeout` and
    /// `max_connection_lifetime`, as a function that lays them over its
    /// listener's timeouts.
    pub(super) fn route_timeouts(
        &mut self,
        key: &str,
        section: &file::RouteSection,
    ) -> Option<impl Fn(Timeouts) -> Timeouts + use<>> {
        let mut duration = |name: &str, value: &Option<String>| match value {
            None => Some(None),
            Some(_) => self
                .duration(&format!("{key}.{name}"), value, Duration::ZERO)
                .map(Some),
        };
        let idle = duration("idle_timeout", &section.idle_timeout);
        let half_close = duration("half_close_timeout", &section.half_close_timeout);
        let lifetime = match &section.max_connection_lifetime {
            None => Some(None),
            Some(_) => self
                .duration_or_off(
                    &format!("{key}.max_connection_lifetime"),
                    &section.max_connection_lifetime,
                    None,
                )
                .map(Some),
        };
        let (idle, half_close, lifetime) = (idle?, half_close?, lifetime?);
        Some(move |listener: Timeouts| Timeouts {
            idle: idle.unwrap_or(listener.idle),
            half_close: half_close.unwrap_or(listener.half_close),
            lifetime: lifetime.unwrap_or(listener.lifetime),
        })
    }

    /// A route's `alpn`: distinct protocol names of 1–255 bytes; unset is
    /// none (the route takes any hello).
    pub(super) fn alpn(&mut self, key: &str, names: Option<&[String]>) -> Option<Vec<String>> {
        let key = format!("{key}.alpn");
        let Some(names) = names else {
            return Some(Vec::new());
        };
        if names.is_empty() {
            self.problem(
                key,
                "[] matches no hello; leave the key out for a route that takes any ALPN",
            );
            return None;
        }
        let problems = self.problems.len();
        for (i, name) in names.iter().enumerate() {
            if name.is_empty() || name.len() > 255 {
                self.problem(
                    format!("{key}[{i}]"),
                    format!("{name:?}: an ALPN protocol name is 1 to 255 bytes"),
                );
            } else if names[..i].contains(name) {
                self.problem(format!("{key}[{i}]"), format!("{name:?} is listed twice"));
            }
        }
        (self.problems.len() == problems).then(|| names.to_vec())
    }

    /// A route's copy on a QUIC listener: its keys that only mean
    /// something for TCP are refused, as the listener's are, never kept
    /// for the route's tcp listeners and ignored on this one. The problem
    /// says what to write: drop the key, or, where the route also names
    /// tcp listeners (`tcp_targets`), split it in two.
    /// `half_close_timeout` counts from a FIN, which a flow of datagrams
    /// never sees; every other route key is read by the QUIC path
    /// (docs/quic.md, "QUIC listener").
    pub(super) fn quic_route(
        &mut self,
        key: &str,
        section: &file::RouteSection,
        listener: &Listener,
        tcp_targets: &[&str],
    ) {
        if listener.protocol != Protocol::Quic {
            return;
        }
        // The route keys declared TCP-only (`keys::Applies::Tcp`).
        let written = toml::Value::try_from(section).ok();
        let is_set = |name: &str| written.as_ref().and_then(|t| t.get(name)).is_some();
        let route = section
            .name
            .as_deref()
            .unwrap_or_else(|| section.sni.first().map_or("", String::as_str));
        for name in keys::tcp_only("route").filter(|name| is_set(name)) {
            let why = if name == "half_close_timeout" {
                format!(
                    "is a TCP setting (it counts from a FIN); route {route:?} is on protocol = \"quic\" listener {:?}, whose flows have none",
                    listener.name
                )
            } else {
                // The bandwidth keys (docs/operations.md, "Bandwidth limits").
                format!(
                    "is a TCP setting (bandwidth limits pace a byte stream; QUIC flows are not throttled); route {route:?} is on protocol = \"quic\" listener {:?}",
                    listener.name
                )
            };
            let fix = if tcp_targets.is_empty() {
                format!("drop `{name}` from the route")
            } else {
                let tcp = quoted(tcp_targets);
                format!(
                    "split the route: one [[route]] with `listener = [{tcp}]` keeps `{name}`, another with `listener = {:?}` goes without it; or drop `{name}`",
                    listener.name
                )
            };
            self.problem(format!("{key}.{name}"), format!("{why}: {fix}"));
        }
    }
}

/// Names as a route's `listener` list writes them: `"tls", "h3"`.
fn quoted(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether two routes' `alpn` lists would both take some hello: both empty
/// (any hello), or a protocol in common.
fn overlap(a: &[String], b: &[String]) -> bool {
    (a.is_empty() && b.is_empty()) || a.iter().any(|p| b.contains(p))
}

#[cfg(test)]
#[path = "route_tests.rs"]
mod tests;
