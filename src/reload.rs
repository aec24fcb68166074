//! What a reload changes: the diff between the running snapshot and a newly
//! validated one, and the hand-over of drain signals between them.
//!
//! A route's identity is (listener, pattern) and its meaning is the backend
//! definition it leads to (name, addresses, timeouts: the whole
//! [`Backend`]). A listener's no-SNI fallback is the
//! identity (listener, no SNI). [`carry_over`] gives every identity that
//! survives the reload with an equal backend the *same* drain signal it had,
//! so connections started under any earlier snapshot stay reachable, and
//! returns the signals of identities that changed or disappeared: firing
//! them drains exactly the affected connections and nothing else.
//!
//! Deliberately not part of a route's meaning: listener settings such as
//! timeouts (connections keep the snapshot they started with; new ones get
//! the new values), and precedence shifts between patterns (a new exact
//! route for `a.example.com` does not drain connections that reached
//! `a.example.com` through an unchanged `*.example.com` route).
//!
//! Not here: binding or closing listeners (see `server`), or I/O of any kind.
//! Cost: proportional to the number of patterns, once per reload.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use crate::config::{Backend, Config, Listener, NoSni};
use crate::drain::DrainSignal;
use crate::matcher::SniMatcher;

/// (listener name, pattern), or (listener name, no SNI) when `pattern` is `None`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct RouteKey {
    listener: String,
    pattern: Option<String>,
}

impl fmt::Display for RouteKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.pattern {
            Some(p) => write!(f, "{}:{p}", self.listener),
            None => write!(f, "{}:<no sni>", self.listener),
        }
    }
}

/// What changed between two snapshots.
#[derive(Debug, Default)]
pub struct Diff {
    pub listeners_added: Vec<String>,
    pub listeners_removed: Vec<String>,
    /// Route identities (`listener:pattern`) new in this snapshot.
    pub routes_added: Vec<String>,
    /// Route identities gone from this snapshot.
    pub routes_removed: Vec<String>,
    /// Route identities whose backend definition changed.
    pub routes_changed: Vec<String>,
    pub backends_added: Vec<String>,
    pub backends_removed: Vec<String>,
    pub backends_changed: Vec<String>,
    /// The signals to fire: their connections must drain.
    pub to_drain: Vec<Arc<DrainSignal>>,
}

/// Moves the drain signals of unchanged identities from `old` into `new`
/// (which must be freshly built, so its listeners are not shared yet) and
/// says what changed.
pub fn carry_over(old: &Config, new: &mut Config) -> Diff {
    let mut diff = Diff::default();
    let old_routes = identities(old);

    let old_names: BTreeSet<String> = old.listeners.iter().map(|l| l.name.clone()).collect();
    let new_names: BTreeSet<String> = new.listeners.iter().map(|l| l.name.clone()).collect();
    diff.listeners_added = new_names.difference(&old_names).cloned().collect();
    diff.listeners_removed = old_names.difference(&new_names).cloned().collect();

    for (name, backend) in &new.backends {
        match old.backends.get(name) {
            None => diff.backends_added.push(name.clone()),
            Some(was) if **was != **backend => diff.backends_changed.push(name.clone()),
            Some(_) => {}
        }
    }
    for name in old.backends.keys() {
        if !new.backends.contains_key(name) {
            diff.backends_removed.push(name.clone());
        }
    }

    let mut kept = BTreeSet::new();
    for listener in &mut new.listeners {
        let listener = Arc::get_mut(listener)
            .expect("carry_over runs on a fresh snapshot whose listeners are not shared");
        let mut drains = SniMatcher::new();
        for route in &listener.routes {
            for pattern in &route.patterns {
                let key = RouteKey {
                    listener: listener.name.clone(),
                    pattern: Some(pattern.to_string()),
                };
                let signal = inherit(&old_routes, &key, &route.backend, &mut diff, &mut kept);
                // Patterns were checked unique per listener by validation.
                let _ = drains.insert(pattern, signal);
            }
        }
        listener.drains = drains;
        if let NoSni::Backend(backend) = &listener.no_sni {
            let key = RouteKey {
                listener: listener.name.clone(),
                pattern: None,
            };
            listener.no_sni_drain = inherit(&old_routes, &key, backend, &mut diff, &mut kept);
        }
    }
    for (key, (_, signal)) in old_routes {
        if !kept.contains(&key) {
            if !new_names.contains(&key.listener)
                || !new_has(new, &key.listener, key.pattern.as_deref())
            {
                diff.routes_removed.push(key.to_string());
            }
            diff.to_drain.push(signal);
        }
    }
    diff
}

/// The old signal when `key` leads to an equal backend; a fresh one otherwise.
fn inherit(
    old: &BTreeMap<RouteKey, (Arc<Backend>, Arc<DrainSignal>)>,
    key: &RouteKey,
    backend: &Backend,
    diff: &mut Diff,
    kept: &mut BTreeSet<RouteKey>,
) -> Arc<DrainSignal> {
    match old.get(key) {
        Some((was, signal)) if **was == *backend && !signal.is_fired() => {
            kept.insert(key.clone());
            signal.clone()
        }
        Some(_) => {
            diff.routes_changed.push(key.to_string());
            DrainSignal::new()
        }
        None => {
            diff.routes_added.push(key.to_string());
            DrainSignal::new()
        }
    }
}

fn new_has(new: &Config, listener: &str, pattern: Option<&str>) -> bool {
    let Some(l) = new.listener(listener) else {
        return false;
    };
    match pattern {
        None => matches!(l.no_sni, NoSni::Backend(_)),
        Some(p) => l
            .routes
            .iter()
            .any(|r| r.patterns.iter().any(|q| q.to_string() == p)),
    }
}

fn identities(config: &Config) -> BTreeMap<RouteKey, (Arc<Backend>, Arc<DrainSignal>)> {
    let mut out = BTreeMap::new();
    for listener in &config.listeners {
        add_listener(&mut out, listener);
    }
    out
}

fn add_listener(
    out: &mut BTreeMap<RouteKey, (Arc<Backend>, Arc<DrainSignal>)>,
    listener: &Listener,
) {
    for route in &listener.routes {
        for pattern in &route.patterns {
            if let Some(signal) = listener.drains.get(pattern) {
                out.insert(
                    RouteKey {
                        listener: listener.name.clone(),
                        pattern: Some(pattern.to_string()),
                    },
                    (route.backend.clone(), signal.clone()),
                );
            }
        }
    }
    if let NoSni::Backend(backend) = &listener.no_sni {
        out.insert(
            RouteKey {
                listener: listener.name.clone(),
                pattern: None,
            },
            (backend.clone(), listener.no_sni_drain.clone()),
        );
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::sni::Sni;

    fn config(text: &str) -> Config {
        Config::from_toml(text, Path::new("test.toml")).unwrap()
    }

    const BASE: &str = r#"
[[listener]]
name = "tls"
listen = "127.0.0.1:0"
no_sni = "fallback"

[[route]]
sni = ["r.example.com"]
backend = "r"

[[route]]
sni = ["s.example.com", "*.s.example.com"]
backend = "s"

[backend.r]
addresses = ["127.0.0.1:1001"]

[backend.s]
addresses = ["127.0.0.1:1002"]

[backend.fallback]
addresses = ["127.0.0.1:1003"]
"#;

    fn signal(config: &Config, name: &str) -> Arc<DrainSignal> {
        let sni = Sni::parse(name.as_bytes()).unwrap();
        config.listeners[0].drains.find(&sni).unwrap().clone()
    }

    #[test]
    fn an_identical_file_changes_nothing() {
        let old = config(BASE);
        let mut new = config(BASE);
        let diff = carry_over(&old, &mut new);
        assert!(diff.to_drain.is_empty(), "{diff:?}");
        assert!(diff.routes_added.is_empty() && diff.routes_changed.is_empty());
        assert!(Arc::ptr_eq(
            &signal(&old, "r.example.com"),
            &signal(&new, "r.example.com")
        ));
        assert!(Arc::ptr_eq(
            &old.listeners[0].no_sni_drain,
            &new.listeners[0].no_sni_drain
        ));
    }

    #[test]
    fn changing_route_s_drains_only_s() {
        let old = config(BASE);
        let mut new = config(&BASE.replace("127.0.0.1:1002", "127.0.0.1:2002"));
        let diff = carry_over(&old, &mut new);
        assert_eq!(diff.backends_changed, ["s"]);
        assert_eq!(
            diff.routes_changed,
            ["tls:s.example.com", "tls:*.s.example.com"]
        );
        assert_eq!(diff.to_drain.len(), 2);
        assert!(
            diff.to_drain
                .iter()
                .all(|d| !Arc::ptr_eq(d, &signal(&old, "r.example.com")))
        );
        assert!(Arc::ptr_eq(
            &signal(&old, "r.example.com"),
            &signal(&new, "r.example.com")
        ));
    }

    #[test]
    fn removing_a_pattern_drains_that_pattern_only() {
        let old = config(BASE);
        let mut new = config(&BASE.replace(
            r#""s.example.com", "*.s.example.com""#,
            r#""s.example.com""#,
        ));
        let diff = carry_over(&old, &mut new);
        assert_eq!(diff.routes_removed, ["tls:*.s.example.com"]);
        assert_eq!(diff.to_drain.len(), 1);
        assert!(Arc::ptr_eq(
            &diff.to_drain[0],
            &signal(&old, "x.s.example.com")
        ));
    }

    #[test]
    fn renaming_the_listener_drains_everything_on_it() {
        let old = config(BASE);
        let mut new = config(&BASE.replace(r#"name = "tls""#, r#"name = "edge""#));
        let diff = carry_over(&old, &mut new);
        assert_eq!(diff.listeners_added, ["edge"]);
        assert_eq!(diff.listeners_removed, ["tls"]);
        assert_eq!(diff.to_drain.len(), 4);
    }
}
