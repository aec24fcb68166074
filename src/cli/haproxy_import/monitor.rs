//! HAProxy's health endpoint for load balancers: `monitor-uri` in a
//! frontend of its own (mode http, no backend) and `monitor fail if {
//! nbsrv(BACKEND) lt 1 }`, into the admin listener's `/readyz`: `[admin]
//! ready_requires = ["backend:NAME"]` (503 while that backend has no usable
//! address) and, when nothing else set it, `[admin] listen` on the
//! monitor's bind address.
//!
//! Only a failure condition that is "one of these backends has no usable
//! server" is translated; any other count or test is reported. An HTTP
//! frontend that routes traffic is not a monitor frontend and stays
//! reported as HTTP.

use std::net::SocketAddr;

use super::acl::{Atom, Guard, guard};
use super::parse::{HaproxyLine, HaproxySection};
use super::toml::{TomlTable, quoted};
use super::translator::Translator;

/// Whether an HTTP frontend only answers `monitor-uri` (no backend).
pub(super) fn is_monitor_frontend(s: &HaproxySection) -> bool {
    s.kind == super::parse::SectionKind::Frontend
        && s.lines.iter().any(|l| l.word(0) == "monitor-uri")
        && !s
            .lines
            .iter()
            .any(|l| matches!(l.word(0), "use_backend" | "default_backend"))
}

impl Translator {
    /// A monitor frontend, line by line.
    pub(super) fn read_monitor_frontend(&mut self, s: &HaproxySection) {
        self.key(&s.header);
        let uri = s
            .lines
            .iter()
            .find(|l| l.word(0) == "monitor-uri")
            .map_or("/", |l| l.word(1))
            .to_owned();
        for l in &s.lines {
            match l.word(0) {
                "mode" | "log" | "maxconn" => self.no_key(l, "the admin listener's own"),
                "option" if matches!(l.word(1), "httplog" | "dontlognull" | "tcplog") => {
                    self.no_key(l, "the admin listener logs its failures at debug")
                }
                "timeout" if matches!(l.word(1), "client" | "http-request") => {
                    self.no_key(l, "the admin listener bounds each request with its own time limits")
                }
                "monitor-uri" => self.no_key(l, format!("snirelay answers GET /readyz on the admin listener (200, or 503 while a ready_requires backend has no usable address): point the health check at /readyz instead of {uri}")),
                "monitor" => self.monitor_fail(l, &Default::default()),
                "bind" => self.monitor_bind(l, &uri),
                other => self.not(l, format!("the keyword `{other}` in a monitor frontend is not translated")),
            }
        }
    }

    /// `bind` of a monitor frontend: the admin listener, unless `stats
    /// socket` already placed it.
    fn monitor_bind(&mut self, l: &HaproxyLine, uri: &str) {
        let addr = l.word(1);
        let parsed = addr
            .trim_start_matches("ipv4@")
            .replacen('*', "0.0.0.0", 1)
            .parse::<SocketAddr>()
            .or_else(|_| format!("0.0.0.0{addr}").parse::<SocketAddr>());
        let Ok(addr) = parsed else {
            self.not(l, format!("`{addr}` is not IP:port"));
            return;
        };
        if let Some(admin) = &self.admin {
            let at = admin
                .rows
                .first()
                .map(|r| r.value.clone())
                .unwrap_or_default();
            self.not(l, format!("the admin listener, which serves /readyz, is already {at} (from `stats socket`): point the health check there, or move `[admin] listen` to {addr}"));
            return;
        }
        let mut admin = TomlTable::new("[admin]");
        admin.row(
            "listen",
            quoted(&addr.to_string()),
            format!("{}; monitor-uri {uri}: probe /readyz here", l.text),
        );
        if !addr.ip().is_loopback() {
            admin.row(
                "allow_public",
                "true".into(),
                "the monitor answers on this address; control still needs token_file",
            );
        }
        self.admin = Some(admin);
        self.key(l);
    }

    /// `monitor fail if|unless COND`: the backends whose lack of a usable
    /// server fails the monitor, into `ready_requires`.
    pub(super) fn monitor_fail(
        &mut self,
        l: &HaproxyLine,
        acls: &std::collections::BTreeMap<String, Result<Vec<Atom>, String>>,
    ) {
        if l.word(1) != "fail" {
            self.not(l, format!("`monitor {}` is not translated", l.word(1)));
            return;
        }
        let g = match guard(l.words_from(2), acls) {
            Ok(g) => g,
            Err(why) => {
                self.not(l, why);
                return;
            }
        };
        match failing_backends(&g) {
            Some(backends) => {
                for b in backends {
                    self.ready_requires.push((b.to_owned(), l.clone()));
                }
                self.key(l);
            }
            None => self.not(l, "only a failure when a backend has no usable server (`{ nbsrv(NAME) lt 1 }`, or several with `or`) is translated: snirelay's /readyz fails while one ready_requires backend has none"),
        }
    }

    /// `[admin] ready_requires`, once every monitor and backend has been
    /// read: a backend that no translated route uses is not in the output,
    /// so `check` would refuse an entry naming it; its line is reported.
    pub(super) fn finish_monitor(&mut self) {
        let mut names: Vec<String> = Vec::new();
        let mut texts: Vec<String> = Vec::new();
        for (backend, line) in std::mem::take(&mut self.ready_requires) {
            if !self.backends.contains_key(&backend) {
                self.not(&line, format!("backend {backend} is not in the translated configuration (no translated route uses it), so /readyz cannot require it"));
                continue;
            }
            let name = format!("backend:{backend}");
            if !names.contains(&name) {
                names.push(name);
            }
            if !texts.contains(&line.text) {
                texts.push(line.text);
            }
        }
        if names.is_empty() {
            return;
        }
        let admin = self.admin.get_or_insert_with(|| TomlTable::new("[admin]"));
        admin.row(
            "ready_requires",
            super::toml::quoted_list(&names),
            format!(
                "{}: /readyz answers 503 while one has no usable address",
                texts.join("; ")
            ),
        );
    }
}

/// The backends of a failure condition that means "one of them has no
/// usable server", or None.
fn failing_backends(g: &Guard) -> Option<Vec<String>> {
    // A term that is true when `backend` has no usable server.
    let none_of = |negated: bool, atom: &Atom| match atom {
        Atom::NoServer { backend, none } if *none != negated => Some(backend.clone()),
        _ => None,
    };
    let some_of = |negated: bool, atom: &Atom| match atom {
        Atom::NoServer { backend, none } if *none == negated => Some(backend.clone()),
        _ => None,
    };
    match g {
        // Fails if any group holds: each group one "B has none" term.
        Guard::If(c) => c
            .iter()
            .map(|all| match all.as_slice() {
                [t] => none_of(t.negated, &t.atom),
                _ => None,
            })
            .collect(),
        // Fails unless every term holds: one group of "B has some".
        Guard::Unless(c) => match c.as_slice() {
            [all] => all.iter().map(|t| some_of(t.negated, &t.atom)).collect(),
            _ => None,
        },
        Guard::Always => None,
    }
}
