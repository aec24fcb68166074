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

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use crate::config::{Backend, Config, Listener, NoSni, Route};
use crate::flow::route;
use crate::wire::matcher::NameIndex;
use crate::wire::sni::PatternRef;

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
    /// Counts one identity; names it (`listener:identity`) while fewer
    /// than [`ROUTES_LISTED`] are named, so the other 100,000 cost no
    /// string.
    fn push(&mut self, listener: &str, identity: impl FnOnce() -> String) {
        if self.first.len() < ROUTES_LISTED {
            self.first.push(format!("{listener}:{}", identity()));
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

    // Added and changed in the new file's order, removed in the old
    // file's: each identity looked up in the other file's listener of the
    // same name by its name index, as a route table finds the identities
    // it carries. No identity is written out unless the line names it.
    for listener in &new.listeners {
        let was = old.listeners.iter().find(|l| l.name == listener.name);
        for_each_identity(listener, |identity| {
            match was.and_then(|w| identity.find_in(w)) {
                None => diff
                    .routes_added
                    .push(&listener.name, || identity.to_string()),
                Some(was) if **was != **identity.backend => diff
                    .routes_changed
                    .push(&listener.name, || identity.to_string()),
                Some(_) => {}
            }
        });
    }
    for listener in &old.listeners {
        let now = new.listeners.iter().find(|l| l.name == listener.name);
        for_each_identity(listener, |identity| {
            if now.and_then(|n| identity.find_in(n)).is_none() {
                diff.routes_removed
                    .push(&listener.name, || identity.to_string());
            }
        });
    }
    diff
}

/// One route identity of a listener: a pattern of a route (with the
/// route's `alpn` set), or the no-SNI fallback; perhaps its ECH half; and
/// the backend it leads to.
struct Identity<'a> {
    /// The route, and the pattern with its id in `names` (the
    /// listener's); `None` for the fallback.
    pattern: Option<(&'a Route, u32, PatternRef<'a>)>,
    names: &'a Arc<NameIndex>,
    ech: bool,
    backend: &'a Arc<Backend>,
}

impl Identity<'_> {
    /// The backend the same identity leads to on `listener`, if it has it.
    fn find_in<'b>(&self, listener: &'b Listener) -> Option<&'b Arc<Backend>> {
        match self.pattern {
            Some((route, id, _)) => {
                let route = listener.route_of_id(self.names, id, &route.alpn)?;
                if self.ech {
                    route::ech_backend(Some(route), listener)
                } else {
                    Some(&route.backend)
                }
            }
            // The fallback's identities exist where it names a backend.
            None => match &listener.no_sni {
                NoSni::Backend(_) if self.ech => route::ech_backend(None, listener),
                NoSni::Backend(backend) => Some(backend),
                _ => None,
            },
        }
    }
}

impl fmt::Display for Identity<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.pattern {
            Some((route, _, pattern)) => f.write_str(&route::identity(pattern, route))?,
            None => f.write_str("<no sni>")?,
        }
        if self.ech {
            f.write_str("[ech]")?;
        }
        Ok(())
    }
}

/// Calls `each` with every identity of `listener`, in the file's order.
fn for_each_identity<'a>(listener: &'a Listener, mut each: impl FnMut(&Identity<'a>)) {
    let identity = |pattern, ech, backend| Identity {
        pattern,
        names: &listener.names,
        ech,
        backend,
    };
    for route in &listener.routes {
        let diverted = route::ech_backend(Some(route), listener);
        for (id, pattern) in route.patterns.clone().zip(listener.patterns(route)) {
            let at = Some((route, id, pattern));
            if let Some(diverted) = diverted {
                each(&identity(at, true, diverted));
            }
            each(&identity(at, false, &route.backend));
        }
    }
    if let NoSni::Backend(backend) = &listener.no_sni {
        if let Some(diverted) = route::ech_backend(None, listener) {
            each(&identity(None, true, diverted));
        }
        each(&identity(None, false, backend));
    }
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

    /// [`apply_as_given`], as the server applies a reload: with the
    /// listeners whose names did not change keeping the running list
    /// ([`Config::share_unchanged_names`]). Checks that the reload
    /// decides the same without it (each name found by lookup).
    fn apply(old: &Config, new: &Config) -> AppliedTables {
        let mut shared = new.clone();
        shared.listeners = new
            .listeners
            .iter()
            .map(|l| Arc::new((**l).clone()))
            .collect();
        shared.share_unchanged_names(old);
        let by_lookup = apply_as_given(old, new);
        let by_id = apply_as_given(old, &shared);
        let summary = |a: &AppliedTables| {
            let d = &a.diff;
            [&d.routes_added, &d.routes_removed, &d.routes_changed]
                .map(|r| (r.count, r.first.clone()))
        };
        assert_eq!(summary(&by_lookup), summary(&by_id));
        assert_eq!(by_lookup.to_drain.len(), by_id.to_drain.len());
        by_id
    }

    fn apply_as_given(old: &Config, new: &Config) -> AppliedTables {
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
    fn a_reload_of_unchanged_names_keeps_the_running_list_and_other_names_get_their_own() {
        let old = config(BASE);
        let mut same = config(BASE);
        same.share_unchanged_names(&old);
        assert!(Arc::ptr_eq(
            &old.listeners[0].names,
            &same.listeners[0].names
        ));
        // Another backend for the same names: the list is still the same.
        let mut moved = config(&BASE.replace("127.0.0.1:1002", "127.0.0.1:2002"));
        moved.share_unchanged_names(&old);
        assert!(Arc::ptr_eq(
            &old.listeners[0].names,
            &moved.listeners[0].names
        ));
        let mut other = config(&BASE.replace("*.s.example.com", "*.t.example.com"));
        other.share_unchanged_names(&old);
        assert!(!Arc::ptr_eq(
            &old.listeners[0].names,
            &other.listeners[0].names
        ));
    }

    #[test]
    fn a_name_moved_to_another_route_under_the_same_list_changes_that_name_only() {
        // The list reads the same (r, s, *.s), but s.example.com now
        // belongs to route r: found by its id in the kept list.
        let old = config(BASE);
        let new = config(
            &BASE
                .replace(
                    r#"["r.example.com"]"#,
                    r#"["r.example.com", "s.example.com"]"#,
                )
                .replace(
                    r#"["s.example.com", "*.s.example.com"]"#,
                    r#"["*.s.example.com"]"#,
                ),
        );
        let a = apply(&old, &new);
        assert_eq!(a.diff.routes_changed.first, ["tls:s.example.com"]);
        assert_eq!(a.diff.routes_added.count + a.diff.routes_removed.count, 0);
        assert_eq!(a.to_drain.len(), 1);
        assert!(Arc::ptr_eq(
            &a.to_drain[0],
            &signal(&a.old[0], "s.example.com")
        ));
    }

    #[test]
    fn swapped_alpn_routes_of_one_name_change_nothing() {
        // Same list (a, a); the id of each now has the other alpn set, so
        // each identity is found by name, in the other route.
        let routes = |first_alpn: bool| {
            let alpn = |on: bool| {
                if on {
                    "alpn = [\"acme-tls/1\"]\nbackend = \"s\""
                } else {
                    "backend = \"r\""
                }
            };
            format!(
                "{BASE}\n[[route]]\nsni = [\"a.example.com\"]\n{}\n\n[[route]]\nsni = [\"a.example.com\"]\n{}\n",
                alpn(first_alpn),
                alpn(!first_alpn)
            )
        };
        let a = apply(&config(&routes(true)), &config(&routes(false)));
        let d = &a.diff;
        assert_eq!(
            (
                d.routes_added.count,
                d.routes_removed.count,
                d.routes_changed.count
            ),
            (0, 0, 0),
            "{d:?}"
        );
        assert!(a.to_drain.is_empty());
    }

    #[test]
    fn the_fallback_and_its_ech_half_are_identities_by_name() {
        let old = config(BASE);
        let moved = config(&BASE.replace("127.0.0.1:1003", "127.0.0.1:2003"));
        let a = apply(&old, &moved);
        assert_eq!(a.diff.routes_changed.first, ["tls:<no sni>"]);
        assert_eq!(a.to_drain.len(), 1);
        // The listener's `ech` diverts every identity's ECH hellos, the
        // fallback's included: each gains an `[ech]` half, drained when
        // the diversion moves.
        let with_ech = |to: &str| {
            config(&BASE.replace(
                "no_sni = \"fallback\"",
                &format!("no_sni = \"fallback\"\nech = \"{to}\""),
            ))
        };
        let a = apply(&old, &with_ech("r"));
        assert_eq!(a.diff.routes_added.count, 4, "{:?}", a.diff);
        assert!(
            a.diff
                .routes_added
                .first
                .contains(&"tls:<no sni>[ech]".to_owned())
        );
        let a = apply(&with_ech("r"), &with_ech("s"));
        assert_eq!(a.diff.routes_changed.count, 4, "{:?}", a.diff);
        assert_eq!(a.to_drain.len(), 4);
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
