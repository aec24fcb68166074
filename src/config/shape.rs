//! The shape of the file before its values: every key's TOML type is held
//! against its declaration in [`super::keys::KEYS`], and every key that is
//! not declared is named, all in one pass, each problem with what to write
//! instead. The keys found wanting are then taken out of the table, so that
//! the serde model ([`super::file::FileConfig`]) reads the rest and the
//! checker ([`super::check`]) reports its own problems in the same run: one
//! `snirelay check` shows everything wrong with a file.
//!
//! Not here: TOML syntax (the parser stops at its first error, as it must),
//! values' ranges and meanings (the checker), or which strings a choice
//! accepts (the checker again, which names them).

use toml::{Table, Value};

use super::keys::{KEYS, Key, KeyDefault, Kind};

/// A key found wanting: its TOML path (`listener[0].idle_timeout`) and what
/// is wrong, with what to write.
#[derive(Debug)]
pub(super) struct Problem {
    pub(super) key: String,
    pub(super) message: String,
}

/// Checks `table` (the whole file) against the declared keys, removes every
/// key of the wrong type or of no declared name, and returns a problem for
/// each, table by table (a table's keys in the order of their names).
pub(super) fn take_misshapen(table: &mut Table) -> Vec<Problem> {
    let mut problems = Vec::new();
    walk(table, "", "", &mut problems);
    problems
}

/// Walks one table whose keys are declared under `declared` (`listener`,
/// `backend.*`), shown in problems under `shown` (`listener[0]`,
/// `backend.home`).
fn walk(table: &mut Table, declared: &str, shown: &str, problems: &mut Vec<Problem>) {
    let names: Vec<String> = table.keys().cloned().collect();
    for name in names {
        let declared_name = join(declared, &name);
        let shown_name = join(shown, &name);
        let Some(key) = find(&declared_name) else {
            if let Some(named) = find(&format!("{declared_name}.*")) {
                if named_tables(table, &name, named, &shown_name, problems) {
                    continue;
                }
            } else {
                problems.push(Problem {
                    key: shown_name,
                    message: unknown(&name, declared),
                });
            }
            table.remove(&name);
            continue;
        };
        let value = table.get_mut(&name).expect("a key of the table");
        if !fits(key, value, &shown_name, problems) {
            problems.push(Problem {
                key: shown_name,
                message: wrong_type(key, &name, value),
            });
            table.remove(&name);
        }
    }
}

/// `[backend.NAME]`: a table of tables, each walked under `named`'s name.
/// False (after saying why) when the value is not a table of tables.
fn named_tables(
    table: &mut Table,
    name: &str,
    named: &Key,
    shown: &str,
    problems: &mut Vec<Problem>,
) -> bool {
    let Some(Value::Table(each)) = table.get_mut(name) else {
        problems.push(Problem {
            key: shown.to_owned(),
            message: format!(
                "found {}; expected a table per name: write `[{name}.NAME]` and its keys below it",
                found(&table[name])
            ),
        });
        return false;
    };
    let inner: Vec<String> = each.keys().cloned().collect();
    for one in inner {
        let shown_one = join(shown, &one);
        match each.get_mut(&one) {
            Some(Value::Table(keys)) => walk(keys, named.name, &shown_one, problems),
            Some(other) => {
                problems.push(Problem {
                    message: format!(
                        "found {}; expected a table: write `[{shown_one}]` and its keys below it",
                        found(other)
                    ),
                    key: shown_one,
                });
                each.remove(&one);
            }
            None => {}
        }
    }
    true
}

/// Whether `value` has a shape `key` takes; tables below it are walked
/// (their own problems recorded) and kept.
fn fits(key: &Key, value: &mut Value, shown: &str, problems: &mut Vec<Problem>) -> bool {
    match (key.kind, value) {
        (Kind::Table, Value::Table(t)) => {
            walk(t, key.name, shown, problems);
            true
        }
        (Kind::Keepalive | Kind::Source, Value::Table(t)) => {
            walk(t, key.name, shown, problems);
            true
        }
        (Kind::Tables, Value::Array(items)) => {
            if !items.iter().all(Value::is_table) {
                return false;
            }
            for (index, item) in items.iter_mut().enumerate() {
                if let Value::Table(t) = item {
                    walk(t, key.name, &format!("{shown}[{index}]"), problems);
                }
            }
            true
        }
        // `addresses`: each an "IP:port" or `{ address, weight, ... }`.
        (Kind::Strings, Value::Array(items)) if key.name == "backend.*.addresses" => {
            if !items.iter().all(|i| i.is_str() || i.is_table()) {
                return false;
            }
            for (index, item) in items.iter_mut().enumerate() {
                if let Value::Table(t) = item {
                    walk(t, key.name, &format!("{shown}[{index}]"), problems);
                }
            }
            true
        }
        (Kind::Strings | Kind::Networks, Value::Array(items)) => items.iter().all(Value::is_str),
        (Kind::Integers, Value::Array(items)) => items.iter().all(Value::is_integer),
        (Kind::Addresses | Kind::Listeners, Value::Array(items)) => items.iter().all(Value::is_str),
        (Kind::Integer, Value::Integer(_)) | (Kind::Bool, Value::Boolean(_)) => true,
        (Kind::Keepalive, Value::Boolean(_)) => true,
        // `true` names no duration or count: the checker says so.
        (Kind::DurationOrOff | Kind::CountOrOff, Value::Boolean(_)) => true,
        (Kind::CountOrOff, Value::Integer(_)) => true,
        (
            Kind::Duration
            | Kind::DurationOrOff
            | Kind::String
            | Kind::Choice(_)
            | Kind::ChoiceOrBackend(_)
            | Kind::Backend
            | Kind::Address
            | Kind::Addresses
            | Kind::Listeners
            | Kind::Url
            | Kind::Path
            | Kind::Source,
            Value::String(_),
        ) => true,
        (Kind::Map, Value::Table(_)) => true,
        _ => false,
    }
}

/// What was found, what the key takes, and what to write.
fn wrong_type(key: &Key, name: &str, value: &Value) -> String {
    let takes = key.kind.describe();
    let write = |example: String| format!("write `{name} = {example}`");
    let hint = match (key.kind, value) {
        // An HAProxy habit: `send-proxy-v2` is the server's, `accept-proxy`
        // the bind's.
        (Kind::Table, _) if key.name == "listener.proxy_protocol" => {
            "for an outbound header set `proxy_protocol = \"v2\"` on the backend \
             (`[backend.NAME]`); to accept headers from peer relays use \
             `[listener.proxy_protocol] trusted = [\"10.0.0.0/8\"]`"
                .to_owned()
        }
        (Kind::Table, _) => format!("write `[{}]` and its keys below it", dotted_shown(key)),
        (Kind::Tables, _) => format!("write `[[{}]]` and its keys below it", dotted_shown(key)),
        (Kind::Duration | Kind::DurationOrOff, Value::Integer(n)) => format!(
            "a duration is a string with its unit: {} (seconds) or `\"{n}ms\"` (milliseconds)",
            write(format!("\"{n}s\""))
        ),
        (Kind::Duration | Kind::DurationOrOff, _) => write(example(key, "\"30s\"")),
        (Kind::Integer | Kind::CountOrOff, Value::String(text)) if text.parse::<i64>().is_ok() => {
            format!(
                "a number is written without quotes: {}",
                write(text.clone())
            )
        }
        (Kind::Integer | Kind::CountOrOff, _) => write(example(key, "100")),
        (Kind::Bool, Value::String(text)) => {
            let yes = matches!(
                text.to_ascii_lowercase().as_str(),
                "true" | "yes" | "on" | "1"
            );
            format!(
                "a boolean is written without quotes: {}",
                write(yes.to_string())
            )
        }
        (Kind::Bool, Value::Integer(n)) => write((*n != 0).to_string()),
        (Kind::Choice(names) | Kind::ChoiceOrBackend(names), Value::Integer(n))
            if names.contains(&format!("v{n}").as_str()) =>
        {
            write(format!("\"v{n}\""))
        }
        (Kind::Choice(names) | Kind::ChoiceOrBackend(names), _) => write(format!(
            "\"{}\"",
            names.first().copied().unwrap_or_default()
        )),
        (Kind::Strings | Kind::Networks, Value::String(text)) => {
            format!("a list, even of one: {}", write(format!("[{text:?}]")))
        }
        (Kind::Integers, Value::Integer(n)) => {
            format!("a list, even of one: {}", write(format!("[{n}]")))
        }
        (Kind::Address | Kind::Addresses, _) => write("\"127.0.0.1:443\"".into()),
        (Kind::Listeners, _) => format!(
            "{}, a list such as `{name} = [\"tls\", \"h3\"]`, or `{name} = \"*\"` for every listener",
            write("\"tls\"".into())
        ),
        (Kind::Keepalive, _) => format!(
            "{}, or `true` (these timings) or `false` (no keepalive)",
            write(example_table(key))
        ),
        (Kind::Source, _) => write("{ addresses = [\"192.0.2.1\"] }` or `\"client\"".into()),
        _ => write(example(key, "\"...\"")),
    };
    format!("found {}; expected {takes}: {hint}", found(value))
}

/// The key's default as an example when it is a value of the key's own
/// kind, else `fallback`.
fn example(key: &Key, fallback: &str) -> String {
    match key.default {
        KeyDefault::Value(v) if !v.starts_with('{') && v != "false" && v != "true" => v.to_owned(),
        _ => fallback.to_owned(),
    }
}

/// The key's default when it is an inline table.
fn example_table(key: &Key) -> String {
    match key.default {
        KeyDefault::Value(v) if v.starts_with('{') => v.to_owned(),
        _ => "{ ... }".to_owned(),
    }
}

/// `listener.limits` as a table header: `[listener.limits]` (an array's
/// element is the last `[[listener]]`, so its name is written plainly).
fn dotted_shown(key: &Key) -> String {
    key.name.replace(".*", ".NAME")
}

/// A key not declared here: the nearest declared name among its siblings
/// when one is close, else every sibling.
fn unknown(name: &str, declared: &str) -> String {
    let prefix = if declared.is_empty() {
        String::new()
    } else {
        format!("{declared}.")
    };
    let siblings: Vec<&str> = KEYS
        .iter()
        .filter_map(|k| k.name.strip_prefix(&prefix))
        .map(|rest| rest.strip_suffix(".*").unwrap_or(rest))
        .filter(|rest| !rest.contains('.'))
        .collect();
    match nearest(name, siblings.iter().copied()) {
        Some(s) => format!("unknown key `{name}`: did you mean `{s}`?"),
        None => format!(
            "unknown key `{name}`; the keys here are {}",
            siblings.join(", ")
        ),
    }
}

/// The one of `names` closest to `name`, when it is close enough to be
/// what was meant (a few letters off): a misspelt key, a route's misspelt
/// listener.
pub(super) fn nearest<'a>(name: &str, names: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    names
        .map(|s| (strsim::damerau_levenshtein(name, s), s))
        .filter(|(distance, s)| *distance <= 2.max(s.len() / 4))
        .min()
        .map(|(_, s)| s)
}

/// The declared key of this dotted name.
fn find(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.name == name)
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_owned()
    } else {
        format!("{prefix}.{name}")
    }
}

/// A found value as a problem names it: `integer 300`, `string "v2"`.
fn found(value: &Value) -> String {
    match value {
        Value::String(s) => format!("string {s:?}"),
        Value::Integer(n) => format!("integer {n}"),
        Value::Float(x) => format!("number {x}"),
        Value::Boolean(b) => format!("boolean {b}"),
        Value::Datetime(d) => format!("date {d}"),
        Value::Array(_) => "a list".to_owned(),
        Value::Table(_) => "a table".to_owned(),
    }
}

#[cfg(test)]
#[path = "shape_tests.rs"]
mod tests;
