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
//! into tables ([`toml`]), [`translator`] keeps the ledger of what became
//! of every line, and [`output`] combines what needs both sides and writes
//! the file. This module holds the order sections are read in.

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
mod translator;

use std::collections::BTreeMap;

use parse::{HaproxySection, SectionKind, defaults_before, parse_sections};
use toml::TomlTable;
use translator::Translator;

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

// The order sections are read in; each kind's reader is a method in its
// own file (`global`, `frontend`, `backend`, `monitor`).
impl Translator {
    fn run(&mut self, sections: &[HaproxySection]) -> Result<(), ImportError> {
        self.global = TomlTable::new("[global]");
        let mut defaults: Option<&HaproxySection> = None;
        let backends_by_name: BTreeMap<&str, &HaproxySection> = sections
            .iter()
            .filter(|s| matches!(s.kind, SectionKind::Backend | SectionKind::Listen))
            .map(|s| (s.name.as_str(), s))
            .collect();
        let frontends: Vec<&HaproxySection> = sections
            .iter()
            .filter(|s| matches!(s.kind, SectionKind::Frontend | SectionKind::Listen))
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
                SectionKind::Global => {
                    self.key(&section.header);
                    self.read_global(section);
                }
                SectionKind::Defaults => {
                    self.key(&section.header);
                    defaults = Some(section);
                }
                SectionKind::Frontend | SectionKind::Listen => {
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
                SectionKind::Backend => {}
                SectionKind::Other if section.header.word(0) == "resolvers" => {
                    self.read_resolvers(section);
                }
                SectionKind::Other => {
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
        let mut defaults: Option<&HaproxySection> = None;
        for section in sections {
            match section.kind {
                SectionKind::Defaults => defaults = Some(section),
                SectionKind::Backend | SectionKind::Listen => {
                    if self.used_backends.contains(&section.name) {
                        self.read_backend(section, defaults);
                    } else if section.kind == SectionKind::Backend {
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
    fn mode_of(&self, section: &HaproxySection, defaults: Option<&HaproxySection>) -> String {
        let find = |s: &HaproxySection| {
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
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_spelling;
