//! The configuration reference, written from the key declarations
//! ([`super::keys::KEYS`]): as Markdown (`docs/config-keys.md`) and as the
//! `snirelay.toml(5)` man page (`packaging/snirelay.toml.5`).
//!
//! `cargo run --example docgen` writes both files; `tests/it/config.rs` fails
//! when a committed one differs from what these functions write, so the
//! reference cannot drift from the declarations.
//!
//! Not here: the declarations themselves, or anything a running relay
//! reads. Pure string building, run only by the generator and the tests.

use super::keys::{Applies, KEYS, Key, KeyDefault};

/// Where a regenerated file goes, relative to the repository root, and
/// its text.
pub fn generated_files() -> [(&'static str, String); 2] {
    [
        ("docs/config-keys.md", markdown()),
        ("packaging/snirelay.toml.5", man_page()),
    ]
}

/// A section of the reference: a declared table and the keys below it
/// that no deeper table declares.
struct Section {
    table: &'static Key,
    keys: Vec<&'static Key>,
}

fn sections() -> Vec<Section> {
    let mut sections: Vec<Section> = KEYS
        .iter()
        .filter(|k| k.kind.is_table())
        .map(|table| Section {
            table,
            keys: Vec::new(),
        })
        .collect();
    for key in KEYS.iter().filter(|k| !k.kind.is_table()) {
        // The deepest declared table the key sits in.
        let owner = sections
            .iter_mut()
            .filter(|s| key.name.starts_with(&format!("{}.", s.table.name)))
            .max_by_key(|s| s.table.name.len());
        if let Some(section) = owner {
            section.keys.push(key);
        }
    }
    sections
}

/// `[global]`, `[[listener]]`, `[backend.NAME.health]`.
fn heading(table: &Key) -> String {
    let name = table.name.replace('*', "NAME");
    match table.kind {
        super::keys::Kind::Tables => format!("[[{name}]]"),
        super::keys::Kind::NamedTables => format!("[{}]", name),
        _ => format!("[{name}]"),
    }
}

/// A key's name within its section: `tcp_keepalive.idle` in `[[listener]]`.
fn short_name<'a>(section: &Section, key: &'a Key) -> &'a str {
    &key.name[section.table.name.len() + 1..]
}

/// Range and unit: `1–65535 connections`, `seconds`, or nothing.
fn bounds(key: &Key) -> String {
    let range = key.range.map(|(low, high)| format!("{low}–{high}"));
    match (range, key.unit) {
        (Some(range), Some(unit)) => format!("{range} {unit}"),
        (Some(range), None) => range,
        (None, Some(unit)) => unit.to_owned(),
        (None, None) => String::new(),
    }
}

fn default_words(default: KeyDefault) -> String {
    match default {
        KeyDefault::Inherit(key) => format!("{} (`{key}`)", inherited(key)),
        other => other.describe(),
    }
}

/// "the listener's", "the global one's": where an inherited value comes from.
fn inherited(key: &str) -> &'static str {
    if key.starts_with("listener.") {
        "the listener's"
    } else {
        "the global one"
    }
}

const INTRO: &str = "One TOML file; unknown keys are errors; durations are strings such as \
`\"250ms\"`, `\"5s\"`, `\"5m\"`, `\"1h\"`. `snirelay check` reports every problem at once, \
each naming its key and the bad value. A value set in a section wins over the global one, \
which wins over the default; a route's timeouts over its listener's. The applies column says \
which listeners a key means something on: `tcp`, `quic`, both, or `process` for the keys of \
`[global]`, `[admin]` and `[log]`, which belong to no listener. Keys that apply to tcp only \
are an error on a `protocol = \"quic\"` listener and its routes.";

/// The Markdown reference.
pub(crate) fn markdown() -> String {
    let mut out = String::new();
    out.push_str(
        "<!-- Generated from src/config/keys.rs by `cargo run --example docgen`: \
         do not edit by hand (tests/it/config.rs fails when this file is stale). -->\n\n",
    );
    out.push_str("# Configuration keys\n\n");
    out.push_str(INTRO);
    out.push_str("\n\n");
    let cell = |text: &str| text.replace('|', "\\|");
    for section in sections() {
        let table = section.table;
        out.push_str(&format!("## `{}`\n\n{}", heading(table), table.doc));
        if let KeyDefault::Unset(words) | KeyDefault::Required(words) = table.default {
            out.push_str(&format!(" Unset: {words}."));
        }
        if table.applies == Applies::Tcp {
            out.push_str(" TCP listeners only.");
        }
        out.push_str("\n\n");
        if section.keys.is_empty() {
            continue;
        }
        out.push_str("| key | type | default | range | applies | meaning |\n");
        out.push_str("|---|---|---|---|---|---|\n");
        for key in &section.keys {
            out.push_str(&format!(
                "| `{}` | {} | {} | {} | {} | {} |\n",
                short_name(&section, key),
                cell(&key.kind.describe()),
                cell(&default_words(key.default)),
                cell(&bounds(key)),
                key.applies.describe(),
                cell(key.doc),
            ));
        }
        out.push('\n');
    }
    out.pop();
    out
}

/// Text for roff: backslashes escaped, `code` in bold, no line starting
/// with a control character.
fn roff(text: &str) -> String {
    let mut out = String::new();
    for (i, part) in text.replace('\\', "\\e").split('`').enumerate() {
        if i % 2 == 1 {
            out.push_str(&format!("\\fB{part}\\fR"));
        } else {
            out.push_str(part);
        }
    }
    let out = out.replace('-', "\\-").replace('–', "\\(en");
    match out.chars().next() {
        Some('.' | '\'') => format!("\\&{out}"),
        _ => out,
    }
}

/// The `snirelay.toml(5)` man page.
pub(crate) fn man_page() -> String {
    let mut out = String::new();
    out.push_str(
        ".\\\" Generated from src/config/keys.rs by `cargo run --example docgen`: do not edit.\n",
    );
    out.push_str(&format!(
        ".TH SNIRELAY.TOML 5 \"\" \"snirelay {}\" \"File Formats\"\n",
        env!("CARGO_PKG_VERSION")
    ));
    out.push_str(".SH NAME\nsnirelay.toml \\- configuration file of snirelay(1)\n");
    out.push_str(".SH SYNOPSIS\n/etc/snirelay/snirelay.toml\n");
    out.push_str(&format!(".SH DESCRIPTION\n{}\n", roff(INTRO)));
    for section in sections() {
        let table = section.table;
        out.push_str(&format!(".SH \"{}\"\n{}", heading(table), roff(table.doc)));
        if let KeyDefault::Unset(words) | KeyDefault::Required(words) = table.default {
            out.push_str(&format!(" Unset: {}.", roff(words)));
        }
        if table.applies == Applies::Tcp {
            out.push_str(" TCP listeners only.");
        }
        out.push('\n');
        for key in &section.keys {
            let mut facts = vec![key.kind.describe()];
            match key.default {
                KeyDefault::Required(words) => facts.push(words.to_owned()),
                other => facts.push(format!("default {}", default_words(other))),
            }
            let bounds = bounds(key);
            if !bounds.is_empty() {
                facts.push(bounds);
            }
            match key.applies {
                Applies::Tcp => facts.push("tcp only".to_owned()),
                Applies::Quic => facts.push("quic only".to_owned()),
                Applies::Process => facts.push("process-wide".to_owned()),
                Applies::Both => {}
            }
            out.push_str(&format!(
                ".TP\n.B {}\n{}\n.br\n{}\n",
                roff(short_name(&section, key)),
                roff(&facts.join("; ")),
                roff(key.doc)
            ));
        }
    }
    out.push_str(".SH SEE ALSO\nsnirelay(1), snirelay\\-check(1)\n");
    out
}
