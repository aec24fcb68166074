//! `snirelay import-haproxy --check`: the audit table. Each HAProxy line
//! that decides something about a connection (a rule, an ACL, a limit, a
//! timeout, a bind, a server and its options) beside the snirelay key and
//! value that make the same decision, or why none does: "no key" (snirelay
//! does the same without one) or "not translated". Lines that decide
//! nothing about a connection (section headers, `user`, `daemon`, …) are
//! left out; the translation's comments list them.
//!
//! It reads the finished translation (the ledger and the tables); it
//! decides nothing itself.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::parse::words;
use super::toml::TomlTable;
use super::translator::Outcome;

/// The first words of lines that need no key yet decide something, so the
/// table shows them with why.
const DECIDING: &[&str] = &[
    "acl",
    "tcp-request",
    "use_backend",
    "default_backend",
    "timeout",
    "server",
    "default-server",
    "balance",
    "source",
    "stick-table",
    "monitor",
    "monitor-uri",
    "maxconn",
    "maxconnrate",
    "bind",
    "backlog",
    "option",
];

/// The table, one entry per deciding line, in the file's order.
pub(super) fn check_table(
    source: &str,
    ledger: &BTreeMap<usize, (String, Outcome)>,
    tables: &[(String, TomlTable)],
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# {source}: each HAProxy decision and the snirelay key that makes it"
    );
    for (no, (text, outcome)) in ledger {
        let first = words(text).into_iter().next().unwrap_or_default();
        let header = matches!(
            first.as_str(),
            "global" | "defaults" | "frontend" | "backend" | "listen"
        );
        let shown = match outcome {
            Outcome::Key => !header,
            Outcome::Not(_) => true,
            Outcome::NoKey(_) => DECIDING.contains(&first.as_str()),
        };
        if !shown {
            continue;
        }
        let _ = writeln!(out, "line {no:>4}  {text}");
        match outcome {
            Outcome::Key => {
                let keys = keys_of(*no, text, tables);
                if keys.is_empty() {
                    let _ = writeln!(
                        out,
                        "           -> read with the lines around it (see the translation's comments)"
                    );
                }
                for key in keys {
                    let _ = writeln!(out, "           -> {key}");
                }
            }
            Outcome::NoKey(why) => {
                let _ = writeln!(out, "           -> no key: {why}");
            }
            Outcome::Not(why) => {
                let _ = writeln!(out, "           -> not translated: {why}");
            }
        }
    }
    out
}

/// `TABLE: key = value` for each row that stands for line `no` (it names
/// the line, or its comment quotes it).
fn keys_of(no: usize, text: &str, tables: &[(String, TomlTable)]) -> Vec<String> {
    let mut out = Vec::new();
    for (label, t) in tables {
        for row in &t.rows {
            if row.lines.contains(&no) || (!row.comment.is_empty() && row.comment.contains(text)) {
                let key = format!("{label}: {} = {}", row.key, row.value);
                if !out.contains(&key) {
                    out.push(key);
                }
            }
        }
    }
    out
}
