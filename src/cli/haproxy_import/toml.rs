//! The TOML side of the translation: a table of `key = value  # comment`
//! rows, and the value forms the importer writes (quoted strings, lists,
//! durations in their largest exact unit, table keys). It does not decide
//! what a key is (the section readers do) or lay out the whole file
//! ([`super::output`] does).
/// One TOML table: its header and `key = value  # comment` rows.
#[derive(Debug, Default, Clone)]
pub(super) struct TomlTable {
    pub(super) header: String,
    pub(super) rows: Vec<TomlRow>,
}

/// One `key = value  # comment` row, and the input lines it stands for
/// (besides those its comment quotes), for `--check`.
#[derive(Debug, Default, Clone)]
pub(super) struct TomlRow {
    pub(super) key: String,
    pub(super) value: String,
    pub(super) comment: String,
    pub(super) lines: Vec<usize>,
}

impl TomlTable {
    pub(super) fn new(header: &str) -> TomlTable {
        TomlTable {
            header: header.to_owned(),
            rows: Vec::new(),
        }
    }

    pub(super) fn row(&mut self, key: &str, value: String, comment: impl Into<String>) {
        self.rows.push(TomlRow {
            key: key.to_owned(),
            value,
            comment: comment.into(),
            lines: Vec::new(),
        });
    }

    /// Names more input lines the last row stands for.
    pub(super) fn at(&mut self, lines: impl IntoIterator<Item = usize>) {
        if let Some(row) = self.rows.last_mut() {
            row.lines.extend(lines);
        }
    }
}

/// Milliseconds as a snirelay duration string, in the largest exact unit.
pub(super) fn duration(ms: u64) -> String {
    match ms {
        0 => "0s".into(),
        ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        ms if ms % 1000 == 0 => format!("{}s", ms / 1000),
        ms => format!("{ms}ms"),
    }
}

pub(super) fn quoted(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

pub(super) fn quoted_list(items: &[String]) -> String {
    let inner: Vec<String> = items.iter().map(|s| quoted(s)).collect();
    format!("[{}]", inner.join(", "))
}

/// A TOML bare key, or a quoted one.
pub(super) fn toml_key(name: &str) -> String {
    if !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        name.to_owned()
    } else {
        quoted(name)
    }
}
