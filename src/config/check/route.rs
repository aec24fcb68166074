//! Checks `[[route]]` and attaches each route to its listener, adding its
//! patterns to the listener's [`NameIndex`] (`Listener::names`, kept with
//! the configuration and shared by the route tables compiled from it);
//! two routes that would take the same hello are an error.
//!
//! A route's names are its `sni` list and the lines of its `sni_file`
//! ([`super::sni_file`]); both are checked alike, and a duplicate across
//! them is the same error as within either.
//!
//! Not here: routing a connection (`route`).

use super::sni_file::{Parsed, PatternOrigin};
use super::*;

impl Checker {
    /// Attaches every `[[route]]` to its listener and compiles the matchers.
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
            let at = match (&section.listener, file.listeners.len()) {
                (Some(name), _) => {
                    if !file.listeners.iter().any(|l| &l.name == name) {
                        self.problem(
                            format!("{key}.listener"),
                            format!("{name:?} names no [[listener]]"),
                        );
                    }
                    listeners.iter().position(|l| &l.name == name)
                }
                (None, 1) => (!listeners.is_empty()).then_some(0),
                (None, _) => {
                    self.problem(
                        format!("{key}.listener"),
                        "required when there is more than one [[listener]]",
                    );
                    None
                }
            };
            let (listener, matcher) = match at {
                Some(i) => (Some(&mut listeners[i]), Some(&mut indexes[i])),
                None => (None, None),
            };
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
            // QUIC listeners: keys their flows cannot honour.
            if let Some(listener) = &listener {
                self.quic_route(&key, section, listener);
            }
            let (Some(listener), Some(matcher), Some(backend), Some(limits), Some(alpn), Some(ech)) =
                (listener, matcher, backend, limits, alpn, ech)
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
            // QUIC listeners (issue 18).
            self.quic_backend(&format!("{key}.backend"), listener, &backend, backends);
            if let Some(EchPolicy::Backend(diverted)) = &ech {
                self.quic_backend(&format!("{key}.ech"), listener, diverted, backends);
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
            let name = section
                .name
                .clone()
                .or_else(|| patterns.first().map(|p| p.to_string()))
                .unwrap_or_else(|| key.clone());
            // Per-route admission state is kept across reloads by route
            // name, so a route with limits needs a name of its own.
            let gated = |limits: &Option<Limits>, max: &Option<NonZeroU32>| {
                limits.is_some() || max.is_some()
            };
            if listener.routes.iter().any(|r| {
                r.name == name
                    && (gated(&r.limits, &r.max_connections) || gated(&limits, &max_connections))
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
                name,
                patterns: start..matcher.len() as u32,
                sni_file,
                inline_patterns,
                backend,
                limits,
                max_connections,
                timeouts,
                names: NameRules {
                    case_sensitive: section.case_sensitive_names.unwrap_or(false),
                    ldh: section.ldh_names.unwrap_or(false),
                },
                alpn,
                ech,
                hello_match,
                bandwidth,
            });
        }
        // Held as long as the configuration: without the growth slack.
        for (listener, mut index) in listeners.iter_mut().zip(indexes) {
            index.shrink_to_fit();
            listener.names = Arc::new(index);
        }
    }

    /// A route's own `idle_timeout`, `half_close_timeout` and
    /// `max_connection_lifetime`, as a function that lays them over its
    /// listener's timeouts.
    pub(super) fn route_timeouts(
        &mut self,
        key: &str,
        section: &file::RouteSection,
    ) -> Option<impl FnOnce(Timeouts) -> Timeouts + use<>> {
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

    /// A route of a QUIC listener: its keys that only mean something for
    /// TCP are refused, as the listener's are. `half_close_timeout` counts
    /// from a FIN, which a flow of datagrams never sees; every other route
    /// key is read by the QUIC path (docs/quic.md, "QUIC listener").
    pub(super) fn quic_route(
        &mut self,
        key: &str,
        section: &file::RouteSection,
        listener: &Listener,
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
            let message = if name == "half_close_timeout" {
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
            self.problem(format!("{key}.{name}"), message);
        }
    }
}

/// Whether two routes' `alpn` lists would both take some hello: both empty
/// (any hello), or a protocol in common.
fn overlap(a: &[String], b: &[String]) -> bool {
    (a.is_empty() && b.is_empty()) || a.iter().any(|p| b.contains(p))
}
