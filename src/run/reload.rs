//! What a reload changes: the diff between the running snapshot and a newly
//! validated one, for the `reload applied` log line.
//!
//! A route's identity is (listener, pattern, `alpn` set; see
//! `route::identity`) and its meaning is the backend
//! definition it leads to (name, addresses, timeouts: the whole
//! [`Backend`]). A listener's no-SNI fallback is the identity (listener, no
//! SNI). Where `ech` names a backend, the ECH hellos of an identity are an
//! identity of their own (`…[ech]`). An identity is added, removed, or changed (same identity, another
//! backend definition); the same rule decides which identities keep their
//! drain signal when the listener's next route table is built
//! (`route::RouteTable::build`), so what this diff calls changed or removed
//! is exactly what drains.
//!
//! Deliberately not part of a route's meaning: listener settings such as
//! timeouts (connections keep the generation they started with; new ones
//! get the new values), and precedence shifts between patterns (a new exact
//! route for `a.example.com` does not drain connections that reached
//! `a.example.com` through an unchanged `*.example.com` route).
//!
//! Not here: binding or closing listeners (see [`crate::run::listener_set`]), drain signals
//! (`route`, `drain`), or I/O of any kind. Cost: proportional to the number
//! of patterns, once per reload.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use crate::config::{Backend, Config, NoSni};
use crate::flow::route;

/// (listener name, pattern), or (listener name, no SNI) when `pattern` is `None`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct RouteKey<'a> {
    listener: &'a str,
    pattern: Option<String>,
}

impl fmt::Display for RouteKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.pattern {
            Some(p) => write!(f, "{}:{p}", self.listener),
            None => write!(f, "{}:<no sni>", self.listener),
        }
    }
}

/// How many route identities of each kind a [`Diff`] names; the rest are
/// only counted. The log line shows at most this many in all.
pub(crate) const ROUTES_LISTED: usize = 20;

/// Route identities of one kind (added, removed or changed): how many, and
/// the first [`ROUTES_LISTED`] of them by name. A reload between two files
/// of 100,000 different names adds and removes 100,000 identities each;
/// naming every one would hold 200,000 strings for the length of the
/// reload, only for the log line to show twenty.
#[derive(Debug, Default)]
pub(crate) struct Routes {
    pub count: usize,
    pub first: Vec<String>,
}

impl Routes {
    fn push(&mut self, key: &RouteKey<'_>) {
        if self.first.len() < ROUTES_LISTED {
            self.first.push(key.to_string());
        }
        self.count += 1;
    }
}

/// What changed between two snapshots.
#[derive(Debug, Default)]
pub(crate) struct Diff {
    pub listeners_added: Vec<String>,
    pub listeners_removed: Vec<String>,
    /// Route identities (`listener:pattern`) new in this snapshot.
    pub routes_added: Routes,
    /// Route identities gone from this snapshot.
    pub routes_removed: Routes,
    /// Route identities whose backend definition changed.
    pub routes_changed: Routes,
    pub backends_added: Vec<String>,
    pub backends_removed: Vec<String>,
    pub backends_changed: Vec<String>,
}

/// What changed from `old` to `new`.
pub(crate) fn diff(old: &Config, new: &Config) -> Diff {
    let mut diff = Diff::default();
    let old_names: BTreeSet<&String> = old.listeners.iter().map(|l| &l.name).collect();
    let new_names: BTreeSet<&String> = new.listeners.iter().map(|l| &l.name).collect();
    diff.listeners_added = new_names
        .difference(&old_names)
        .map(|n| (*n).clone())
        .collect();
    diff.listeners_removed = old_names
        .difference(&new_names)
        .map(|n| (*n).clone())
        .collect();

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

    // Added and changed in the new file's order; removed in identity order.
    // Each old identity's backend, and whether the new file has it too.
    let mut old_routes: BTreeMap<RouteKey<'_>, (&Arc<Backend>, bool)> = identities(old)
        .into_iter()
        .map(|(key, backend)| (key, (backend, false)))
        .collect();
    for (key, backend) in identities(new) {
        match old_routes.get_mut(&key) {
            None => diff.routes_added.push(&key),
            Some((was, kept)) => {
                *kept = true;
                if ***was != **backend {
                    diff.routes_changed.push(&key);
                }
            }
        }
    }
    for (key, (_, kept)) in &old_routes {
        if !kept {
            diff.routes_removed.push(key);
        }
    }
    diff
}

/// Every identity of `config` and the backend it leads to, in the file's
/// order.
fn identities(config: &Config) -> Vec<(RouteKey<'_>, &Arc<Backend>)> {
    let mut out = Vec::new();
    for listener in &config.listeners {
        let name = listener.name.as_str();
        for route in &listener.routes {
            for pattern in listener.patterns(route) {
                let pattern = route::identity(pattern, route);
                if let Some(diverted) = route::ech_backend(Some(route), listener) {
                    out.push((
                        RouteKey {
                            listener: name,
                            pattern: Some(format!("{pattern}[ech]")),
                        },
                        diverted,
                    ));
                }
                out.push((
                    RouteKey {
                        listener: name,
                        pattern: Some(pattern),
                    },
                    &route.backend,
                ));
            }
        }
        if let NoSni::Backend(backend) = &listener.no_sni {
            if let Some(diverted) = route::ech_backend(None, listener) {
                out.push((
                    RouteKey {
                        listener: name,
                        pattern: Some("<no sni>[ech]".to_owned()),
                    },
                    diverted,
                ));
            }
            out.push((
                RouteKey {
                    listener: name,
                    pattern: None,
                },
                backend,
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::drain::DrainSignal;
    use crate::flow::route::RouteTable;
    use crate::run::reload::*;

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

    /// A reload from `old` to `new` as the listeners apply it: each
    /// listener's next table built from its previous one (by name).
    struct AppliedTables {
        diff: Diff,
        old: Vec<RouteTable>,
        new: Vec<RouteTable>,
        to_drain: Vec<Arc<DrainSignal>>,
    }

    fn apply(old: &Config, new: &Config) -> AppliedTables {
        let old_tables: Vec<RouteTable> = old
            .listeners
            .iter()
            .map(|l| RouteTable::build(l, None))
            .collect();
        let previous = |name: &str| {
            old.listeners
                .iter()
                .position(|l| l.name == name)
                .map(|i| &old_tables[i])
        };
        let new_tables: Vec<RouteTable> = new
            .listeners
            .iter()
            .map(|l| RouteTable::build(l, previous(&l.name)))
            .collect();
        let next = |name: &str| {
            new.listeners
                .iter()
                .position(|l| l.name == name)
                .map(|i| &new_tables[i])
        };
        let to_drain = old
            .listeners
            .iter()
            .zip(&old_tables)
            .flat_map(|(l, t)| t.retired_by(next(&l.name)))
            .collect();
        AppliedTables {
            diff: diff(old, new),
            old: old_tables,
            new: new_tables,
            to_drain,
        }
    }

    fn signal(table: &RouteTable, name: &str) -> Arc<DrainSignal> {
        let hello = crate::wire::client_hello::ClientHello {
            server_name: Some(name.as_bytes().to_vec()),
            alpn: Vec::new(),
            ech: None,
            version: Some(0x0304),
            len: 0,
        };
        table.decide(&hello).target.unwrap().drain.signal().clone()
    }

    fn no_sni_signal(table: &RouteTable) -> Arc<DrainSignal> {
        let hello = crate::wire::client_hello::ClientHello {
            server_name: None,
            alpn: Vec::new(),
            ech: None,
            version: Some(0x0304),
            len: 0,
        };
        table.decide(&hello).target.unwrap().drain.signal().clone()
    }

    #[test]
    fn a_diff_names_at_most_twenty_routes_of_each_kind_and_counts_all() {
        let names = |set: &str| {
            (0..50)
                .map(|i| format!("\"n{i}.{set}.example.com\""))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let file = |set: &str| BASE.replace(r#"["r.example.com"]"#, &format!("[{}]", names(set)));
        let d = diff(&config(&file("a")), &config(&file("b")));
        assert_eq!(d.routes_added.count, 50);
        assert_eq!(d.routes_removed.count, 50);
        assert_eq!(d.routes_added.first.len(), ROUTES_LISTED);
        assert_eq!(d.routes_added.first[0], "tls:n0.b.example.com");
        assert_eq!(d.routes_removed.first.len(), ROUTES_LISTED);
        assert_eq!(d.routes_changed.count, 0);
    }

    #[test]
    fn an_identical_file_changes_nothing() {
        let (old, new) = (config(BASE), config(BASE));
        let a = apply(&old, &new);
        assert!(a.to_drain.is_empty(), "{:?}", a.diff);
        assert!(a.diff.routes_added.count == 0 && a.diff.routes_changed.count == 0);
        assert!(Arc::ptr_eq(
            &signal(&a.old[0], "r.example.com"),
            &signal(&a.new[0], "r.example.com")
        ));
        assert!(Arc::ptr_eq(
            &no_sni_signal(&a.old[0]),
            &no_sni_signal(&a.new[0])
        ));
    }

    #[test]
    fn changing_route_s_drains_only_s() {
        let old = config(BASE);
        let new = config(&BASE.replace("127.0.0.1:1002", "127.0.0.1:2002"));
        let a = apply(&old, &new);
        assert_eq!(a.diff.backends_changed, ["s"]);
        assert_eq!(
            a.diff.routes_changed.first,
            ["tls:s.example.com", "tls:*.s.example.com"]
        );
        assert_eq!(a.diff.routes_changed.count, 2);
        assert_eq!(a.to_drain.len(), 2);
        assert!(
            a.to_drain
                .iter()
                .all(|d| !Arc::ptr_eq(d, &signal(&a.old[0], "r.example.com")))
        );
        assert!(Arc::ptr_eq(
            &signal(&a.old[0], "r.example.com"),
            &signal(&a.new[0], "r.example.com")
        ));
    }

    #[test]
    fn removing_a_pattern_drains_that_pattern_only() {
        let old = config(BASE);
        let new = config(&BASE.replace(
            r#""s.example.com", "*.s.example.com""#,
            r#""s.example.com""#,
        ));
        let a = apply(&old, &new);
        assert_eq!(a.diff.routes_removed.first, ["tls:*.s.example.com"]);
        assert_eq!(a.diff.routes_removed.count, 1);
        assert_eq!(a.to_drain.len(), 1);
        assert!(Arc::ptr_eq(
            &a.to_drain[0],
            &signal(&a.old[0], "x.s.example.com")
        ));
    }

    #[test]
    fn renaming_the_listener_drains_everything_on_it() {
        let old = config(BASE);
        let new = config(&BASE.replace(r#"name = "tls""#, r#"name = "edge""#));
        let a = apply(&old, &new);
        assert_eq!(a.diff.listeners_added, ["edge"]);
        assert_eq!(a.diff.listeners_removed, ["tls"]);
        assert_eq!(a.to_drain.len(), 4);
    }

    #[test]
    fn alpn_routes_and_ech_backends_are_identities_of_their_own() {
        let routes = r#"
[[route]]
sni = ["r.example.com"]
alpn = ["acme-tls/1"]
backend = "s"

[[route]]
sni = ["e.example.com"]
ech = "s"
backend = "r"
"#;
        let old = config(&format!("{BASE}{routes}"));
        // The acme route moves to r, the ECH backend of e.example.com to
        // fallback: exactly those two identities change, and drain.
        let new = config(&format!(
            "{BASE}{}",
            routes
                .replace(
                    "alpn = [\"acme-tls/1\"]\nbackend = \"s\"",
                    "alpn = [\"acme-tls/1\"]\nbackend = \"r\""
                )
                .replace("ech = \"s\"", "ech = \"fallback\"")
        ));
        let a = apply(&old, &new);
        assert_eq!(
            a.diff.routes_changed.first,
            [
                "tls:r.example.com[alpn=acme-tls/1]",
                "tls:e.example.com[ech]"
            ]
        );
        assert!(a.diff.routes_added.count == 0 && a.diff.routes_removed.count == 0);
        assert_eq!(a.to_drain.len(), 2);
        assert!(Arc::ptr_eq(
            &signal(&a.old[0], "r.example.com"),
            &signal(&a.new[0], "r.example.com")
        ));
    }
}
