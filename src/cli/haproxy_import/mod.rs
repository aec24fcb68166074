//! `snirelay import-haproxy`: an HAProxy configuration (the `mode tcp`
//! subset an SNI edge uses) translated into snirelay's TOML, as text.
//!
//! Every line of the input is accounted for: it becomes a key (named in a
//! comment beside it), or it needs no key (snirelay does the same without
//! one; listed with what it does instead), or it is **not translated**
//! (listed with its line number and why). [`Translation::not_translated`]
//! is what the command's exit code reports.
//!
//! Routing is translated by evaluating, not by pattern-matching the rules:
//! the `tcp-request content` and `use_backend` rules are run in order, as
//! HAProxy runs them on a complete ClientHello, for one name of every kind
//! the rules can tell apart (each exact name, each suffix, a name below
//! each suffix, a name matching nothing, no SNI); the routes are built from
//! those outcomes and checked against them under snirelay's
//! most-specific-match. An outcome snirelay cannot express (a refused name
//! below an accepted suffix) is reported, never approximated. Only SNI
//! conditions that mean exactly a set of exact names and `*.suffix`
//! wildcards are evaluated (and `-m dom D`, read as `D` and `*.D`, with a
//! note); others (`-m end example.com`, arbitrary regexes, other fetches)
//! make their rule untranslated. The
//! `tcp-request connection` rules are evaluated the same way, per stretch
//! of source addresses ([`connection`]).
//!
//! Text in, text out: the only files read are the `-f FILE` pattern
//! files and the `map(FILE)` map files the configuration names
//! ([`map`]), through the reader the caller passes
//! (the command reads them as HAProxy would, from the working directory);
//! no network I/O, and it does not validate the result (the binary's `check` does, and the tests load every
//! translation they make).
//!
//! The work is split by job: [`parse`] reads sections and words, [`acl`]
//! conditions and SNI patterns, [`routes`] turns rule outcomes into
//! routes, [`global`], [`frontend`] and [`backend`] read their sections
//! into tables ([`toml`]), and [`output`] combines what needs both sides
//! and writes the file. This module holds the ledger of what became of
//! every line and the order sections are read in.

mod acl;
mod backend;
mod check;
mod connection;
mod frontend;
mod global;
mod map;
mod monitor;
mod output;
mod parse;
mod routes;
mod toml;

use std::collections::{BTreeMap, BTreeSet};

use backend::BackendInfo;
use parse::{Kind, Line, Section, defaults_before, parse_sections};
use toml::Table;

/// The translated configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Translation {
    /// The TOML, with its comments.
    pub toml: String,
    /// The lines that were not translated: (line number, line, why).
    pub not_translated: Vec<(usize, String, String)>,
    /// `--check`: each decision of the input beside the key that makes it.
    pub check: String,
}

/// Why nothing could be translated at all.
#[allow(missing_docs)] // each variant's #[error] text documents it
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ImportError {
    #[error("no frontend or listen section in mode tcp: nothing for an SNI relay to take over")]
    NoTcpFrontend,
}

/// Translates an HAProxy configuration's text; `source` names it in the
/// output's first comment.
pub(crate) fn translate(
    text: &str,
    source: &str,
    read: &dyn Fn(&str) -> Result<String, String>,
) -> Result<Translation, ImportError> {
    let sections = parse_sections(text);
    let mut t = Translator::default();
    // The pattern files of `-f FILE` tests and the map files of
    // `use_backend %[…,map(FILE)]`: the only files read.
    for s in &sections {
        for l in &s.lines {
            for w in l.words.windows(2).filter(|w| w[0] == "-f") {
                t.files.entry(w[1].clone()).or_insert_with(|| read(&w[1]));
            }
            if l.word(0) == "use_backend" {
                if let Some(file) = map::map_file(l.word(1)) {
                    t.files.entry(file.clone()).or_insert_with(|| read(&file));
                }
            }
        }
    }
    t.run(&sections)?;
    Ok(t.finish(text, source))
}

/// Why an `option` needs no key (snirelay does the same without one), for
/// the options that need none in a frontend or a backend alike.
fn option_no_key(option: &str) -> Option<&'static str> {
    Some(match option {
        "tcplog" | "dontlognull" | "httplog" | "logasap" => {
            "snirelay logs one line per connection at close, none for a connection that sent nothing"
        }
        "clitcpka" | "srvtcpka" | "tcpka" => {
            "snirelay keeps TCP keepalive on by default (60 s idle, 10 s interval, 6 probes) on both sides"
        }
        "splice-auto" | "splice-request" | "splice-response" => {
            "snirelay splices between the sockets by default (splice(2), both directions)"
        }
        "tcp-smart-accept" => {
            "snirelay reads the ClientHello as soon as it arrives; the kernel's delayed ACK is its own"
        }
        "tcp-smart-connect" => {
            "snirelay writes the held ClientHello to the backend right after connecting"
        }
        "redispatch" => {
            "snirelay moves to the next address when one fails to connect (connect_attempts)"
        }
        _ => return None,
    })
}

/// What became of one line of the input.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// Became a key (the comment beside it names the line).
    Key,
    /// Needs no key: why.
    NoKey(String),
    /// Not translated: why.
    Not(String),
}

#[derive(Debug, Default)]
struct Translator {
    ledger: BTreeMap<usize, (String, Outcome)>,
    global: Table,
    admin: Option<Table>,
    log: Option<Table>,
    /// The backends `monitor fail` requires, with their lines.
    ready_requires: Vec<(String, Line)>,
    listeners: Vec<(Table, Table, Vec<Table>)>,
    backends: BTreeMap<String, (BackendInfo, Vec<Table>)>,
    used_backends: BTreeSet<String>,
    /// Every backend a `use_backend` or `default_backend` names.
    named_backends: BTreeSet<String>,
    global_maxconn: Option<(u64, String)>,
    frontend_maxconns: Vec<(u64, usize, String)>,
    /// Per listener (by index): its `timeout client` and `client-fin`.
    frontend_timeouts: BTreeMap<usize, FrontendTimeouts>,
    notes: Vec<String>,
    /// The `-f` pattern files the configuration names, read (or why not).
    files: BTreeMap<String, Result<String, String>>,
}

type FrontendTimeouts = (Option<(u64, String)>, Option<(u64, String)>);

impl Translator {
    fn key(&mut self, line: &Line) {
        self.ledger
            .entry(line.no)
            .or_insert_with(|| (line.text.clone(), Outcome::Key));
    }

    /// Whether the line already became a key (a `defaults` line is read
    /// once per section it applies to).
    fn is_key(&self, line: &Line) -> bool {
        self.ledger
            .get(&line.no)
            .is_some_and(|e| e.1 == Outcome::Key)
    }

    /// Whether the line was found untranslatable.
    fn is_not(&self, line: &Line) -> bool {
        self.ledger
            .get(&line.no)
            .is_some_and(|e| matches!(e.1, Outcome::Not(_)))
    }

    fn no_key(&mut self, line: &Line, why: impl Into<String>) {
        let why = why.into();
        let entry = self
            .ledger
            .entry(line.no)
            .or_insert_with(|| (line.text.clone(), Outcome::NoKey(why.clone())));
        if entry.1 == Outcome::Key {
            entry.1 = Outcome::NoKey(why);
        }
    }

    fn not(&mut self, line: &Line, why: impl Into<String>) {
        let why = why.into();
        let entry = self
            .ledger
            .entry(line.no)
            .or_insert_with(|| (line.text.clone(), Outcome::Not(why.clone())));
        if !matches!(entry.1, Outcome::Not(_)) {
            entry.1 = Outcome::Not(why);
        }
    }

    fn run(&mut self, sections: &[Section]) -> Result<(), ImportError> {
        self.global = Table::new("[global]");
        let mut defaults: Option<&Section> = None;
        let backends_by_name: BTreeMap<&str, &Section> = sections
            .iter()
            .filter(|s| matches!(s.kind, Kind::Backend | Kind::Listen))
            .map(|s| (s.name.as_str(), s))
            .collect();
        let frontends: Vec<&Section> = sections
            .iter()
            .filter(|s| matches!(s.kind, Kind::Frontend | Kind::Listen))
            .collect();
        let tcp_frontends = frontends
            .iter()
            .filter(|f| self.mode_of(f, defaults_before(sections, f)) == "tcp")
            .count();
        if tcp_frontends == 0 {
            return Err(ImportError::NoTcpFrontend);
        }
        for section in sections {
            match section.kind {
                Kind::Global => {
                    self.key(&section.header);
                    self.read_global(section);
                }
                Kind::Defaults => {
                    self.key(&section.header);
                    defaults = Some(section);
                }
                Kind::Frontend | Kind::Listen => {
                    if self.mode_of(section, defaults) == "http"
                        && monitor::is_monitor_frontend(section)
                    {
                        self.read_monitor_frontend(section);
                        continue;
                    }
                    if self.mode_of(section, defaults) != "tcp" {
                        for l in std::iter::once(&section.header).chain(&section.lines) {
                            self.not(
                                l,
                                format!(
                                    "`{}` {} is in mode http: snirelay relays TCP (TLS) only",
                                    section.header.word(0),
                                    section.name
                                ),
                            );
                        }
                        continue;
                    }
                    self.read_frontend(section, defaults, &backends_by_name);
                }
                Kind::Backend => {}
                Kind::Other => {
                    for l in std::iter::once(&section.header).chain(&section.lines) {
                        self.not(
                            l,
                            format!(
                                "a `{}` section has no snirelay equivalent",
                                section.header.word(0)
                            ),
                        );
                    }
                }
            }
        }
        // Backends, in the order of the file, once routes have named them.
        let mut defaults: Option<&Section> = None;
        for section in sections {
            match section.kind {
                Kind::Defaults => defaults = Some(section),
                Kind::Backend | Kind::Listen => {
                    if self.used_backends.contains(&section.name) {
                        self.read_backend(section, defaults);
                    } else if section.kind == Kind::Backend {
                        let named = self.named_backends.contains(&section.name);
                        for l in std::iter::once(&section.header).chain(&section.lines) {
                            if named {
                                self.not(l, format!("backend {} is named only by rules that were not translated", section.name));
                            } else {
                                self.no_key(
                                    l,
                                    format!("backend {} is used by no frontend", section.name),
                                );
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        self.finish_monitor();
        self.finish_global();
        Ok(())
    }

    /// `mode` of a proxy: its own line, else its defaults', else tcp.
    fn mode_of(&self, section: &Section, defaults: Option<&Section>) -> String {
        let find = |s: &Section| {
            s.lines
                .iter()
                .rev()
                .find(|l| l.word(0) == "mode")
                .map(|l| l.word(1).to_owned())
        };
        find(section)
            .or_else(|| defaults.and_then(find))
            .unwrap_or_else(|| "tcp".into())
    }

    fn mark_key(&mut self, no: usize, text: &str) {
        if let Some(e) = self.ledger.get_mut(&no) {
            if matches!(e.1, Outcome::NoKey(_)) {
                e.1 = Outcome::Key;
            }
            return;
        }
        self.ledger
            .insert(no, (text.trim().to_owned(), Outcome::Key));
    }

    fn mark_not(&mut self, no: usize, text: &str, why: &str) {
        let e = self
            .ledger
            .entry(no)
            .or_insert((text.trim().to_owned(), Outcome::Key));
        e.1 = Outcome::Not(why.to_owned());
    }
}

#[cfg(test)]
mod tests;
