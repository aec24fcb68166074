//! The translation's ledger: what became of every line of the input
//! ([`Outcome`]: a key, no key needed, or not translated), kept by the
//! [`Translator`] that every section reader adds its tables to, with what
//! it keeps of each backend for the output ([`BackendInfo`]) and why an
//! `option` a frontend and a backend share needs no key
//! ([`option_no_key`]).
//!
//! Not here: the order sections are read in ([`super`]), reading any
//! section (`super::global`, `super::frontend`, `super::backend`, ...),
//! writing the file ([`super::output`]).

use std::collections::{BTreeMap, BTreeSet};

use super::parse::HaproxyLine;
use super::toml::TomlTable;

/// What became of one line of the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Became a key (the comment beside it names the line).
    Key,
    /// Needs no key: why.
    NoKey(String),
    /// Not translated: why.
    Not(String),
}

/// The translation in progress: the ledger of what became of every line,
/// and what the section readers have read so far.
#[derive(Debug, Default)]
pub(super) struct Translator {
    pub(super) ledger: BTreeMap<usize, (String, Outcome)>,
    pub(super) global: TomlTable,
    pub(super) admin: Option<TomlTable>,
    pub(super) log: Option<TomlTable>,
    /// The backends `monitor fail` requires, with their lines.
    pub(super) ready_requires: Vec<(String, HaproxyLine)>,
    pub(super) listeners: Vec<(TomlTable, TomlTable, Vec<TomlTable>)>,
    pub(super) backends: BTreeMap<String, (BackendInfo, Vec<TomlTable>)>,
    pub(super) used_backends: BTreeSet<String>,
    /// Every backend a `use_backend` or `default_backend` names.
    pub(super) named_backends: BTreeSet<String>,
    pub(super) global_maxconn: Option<(u64, String)>,
    pub(super) frontend_maxconns: Vec<(u64, usize, String)>,
    /// Per listener (by index): its `timeout client` and `client-fin`.
    pub(super) frontend_timeouts: BTreeMap<usize, FrontendTimeouts>,
    pub(super) notes: Vec<String>,
    /// Each `resolvers` section's `nameserver` addresses (IP:port), in
    /// order.
    pub(super) resolvers: BTreeMap<String, Vec<String>>,
    /// The `-f` pattern files the configuration names, read (or why not).
    pub(super) files: BTreeMap<String, Result<String, String>>,
}

pub(super) type FrontendTimeouts = (Option<(u64, String)>, Option<(u64, String)>);

impl Translator {
    pub(super) fn key(&mut self, line: &HaproxyLine) {
        self.ledger
            .entry(line.no)
            .or_insert_with(|| (line.text.clone(), Outcome::Key));
    }

    /// Whether the line already became a key (a `defaults` line is read
    /// once per section it applies to).
    pub(super) fn is_key(&self, line: &HaproxyLine) -> bool {
        self.ledger
            .get(&line.no)
            .is_some_and(|e| e.1 == Outcome::Key)
    }

    /// Whether the line was found untranslatable.
    pub(super) fn is_not(&self, line: &HaproxyLine) -> bool {
        self.ledger
            .get(&line.no)
            .is_some_and(|e| matches!(e.1, Outcome::Not(_)))
    }

    pub(super) fn no_key(&mut self, line: &HaproxyLine, why: impl Into<String>) {
        let why = why.into();
        let entry = self
            .ledger
            .entry(line.no)
            .or_insert_with(|| (line.text.clone(), Outcome::NoKey(why.clone())));
        if entry.1 == Outcome::Key {
            entry.1 = Outcome::NoKey(why);
        }
    }

    pub(super) fn not(&mut self, line: &HaproxyLine, why: impl Into<String>) {
        let why = why.into();
        let entry = self
            .ledger
            .entry(line.no)
            .or_insert_with(|| (line.text.clone(), Outcome::Not(why.clone())));
        if !matches!(entry.1, Outcome::Not(_)) {
            entry.1 = Outcome::Not(why);
        }
    }

    pub(super) fn mark_key(&mut self, no: usize, text: &str) {
        if let Some(e) = self.ledger.get_mut(&no) {
            if matches!(e.1, Outcome::NoKey(_)) {
                e.1 = Outcome::Key;
            }
            return;
        }
        self.ledger
            .insert(no, (text.trim().to_owned(), Outcome::Key));
    }

    /// Line `no` needs no key (unless it was already found untranslatable).
    pub(super) fn no_key_at(&mut self, no: usize, text: &str, why: &str) {
        let e = self
            .ledger
            .entry(no)
            .or_insert((text.trim().to_owned(), Outcome::Key));
        if !matches!(e.1, Outcome::Not(_)) {
            e.1 = Outcome::NoKey(why.to_owned());
        }
    }

    pub(super) fn mark_not(&mut self, no: usize, text: &str, why: &str) {
        let e = self
            .ledger
            .entry(no)
            .or_insert((text.trim().to_owned(), Outcome::Key));
        e.1 = Outcome::Not(why.to_owned());
    }
}

/// A backend, read: what the output needs of it (its timeouts).
#[derive(Debug, Clone, Default)]
pub(super) struct BackendInfo {
    pub(super) connect_ms: Option<(u64, String)>,
    pub(super) server_ms: Option<(u64, String)>,
    pub(super) tunnel_ms: Option<(u64, String)>,
    pub(super) server_fin_ms: Option<(u64, String)>,
}

/// Why an `option` needs no key (snirelay does the same without one), for
/// the options that need none in a frontend or a backend alike.
pub(super) fn option_no_key(option: &str) -> Option<&'static str> {
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
