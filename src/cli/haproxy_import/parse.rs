//! Reading an HAProxy configuration: lines split into words as HAProxy
//! splits them, grouped into sections, and HAProxy's time values. No
//! keyword is interpreted here (the section readers do that).

use std::collections::BTreeSet;

#[derive(Debug, Clone)]
pub(super) struct HaproxyLine {
    pub(super) no: usize,
    pub(super) text: String,
    pub(super) words: Vec<String>,
}

impl HaproxyLine {
    pub(super) fn word(&self, i: usize) -> &str {
        self.words.get(i).map_or("", String::as_str)
    }

    /// The words from `i` on (none past the end).
    pub(super) fn words_from(&self, i: usize) -> &[String] {
        self.words.get(i..).unwrap_or(&[])
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SectionKind {
    Global,
    Defaults,
    Frontend,
    Backend,
    Listen,
    Other,
}

#[derive(Debug, Clone)]
pub(super) struct HaproxySection {
    pub(super) kind: SectionKind,
    pub(super) name: String,
    pub(super) header: HaproxyLine,
    pub(super) lines: Vec<HaproxyLine>,
}

/// Splits a line into words as HAProxy does: whitespace separates, `"…"`
/// and `'…'` quote, a backslash escapes a space, `#`, a quote or itself
/// (any other backslash is kept, so regexes keep their `\.`), and an
/// unquoted `#` starts a comment.
pub(super) fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), '\\') if chars.peek() == Some(&'"') => word.push(chars.next().unwrap()),
            (Some(_), c) => word.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                in_word = true;
            }
            (None, '\\') => {
                in_word = true;
                match chars.peek() {
                    Some(&n @ (' ' | '#' | '\\' | '"' | '\'')) => {
                        word.push(n);
                        chars.next();
                    }
                    _ => word.push('\\'),
                }
            }
            (None, '#') => break,
            (None, c) if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (None, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        out.push(word);
    }
    out
}

pub(super) fn parse_sections(text: &str) -> Vec<HaproxySection> {
    let mut sections: Vec<HaproxySection> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let w = words(raw);
        if w.is_empty() {
            continue;
        }
        let line = HaproxyLine {
            no: i + 1,
            text: raw.trim().to_owned(),
            words: w,
        };
        let kind = match line.word(0) {
            "global" => Some(SectionKind::Global),
            "defaults" => Some(SectionKind::Defaults),
            "frontend" => Some(SectionKind::Frontend),
            "backend" => Some(SectionKind::Backend),
            "listen" => Some(SectionKind::Listen),
            "userlist" | "peers" | "resolvers" | "mailers" | "program" | "http-errors" | "ring"
            | "cache" | "fcgi-app" | "crt-store" | "traces" => Some(SectionKind::Other),
            _ => None,
        };
        match kind {
            Some(kind) => sections.push(HaproxySection {
                kind,
                name: line.word(1).to_owned(),
                header: line,
                lines: Vec::new(),
            }),
            None => match sections.last_mut() {
                Some(s) => s.lines.push(line),
                // Before any section: HAProxy refuses it; so do we, by line.
                None => sections.push(HaproxySection {
                    kind: SectionKind::Other,
                    name: String::new(),
                    header: line,
                    lines: Vec::new(),
                }),
            },
        }
    }
    sections
}

/// An HAProxy time (`5s`, `500ms`, `10m`, `1h`, `1d`; bare: milliseconds)
/// in milliseconds.
pub(super) fn millis(text: &str) -> Option<u64> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (n, unit) = text.split_at(split);
    let n: u64 = n.parse().ok()?;
    let ms = match unit {
        "" | "ms" => n,
        "us" if n % 1000 == 0 => n / 1000,
        "s" => n * 1000,
        "m" => n * 60_000,
        "h" => n * 3_600_000,
        "d" => n * 86_400_000,
        _ => return None,
    };
    Some(ms)
}

/// The last `defaults` section before `section`.
pub(super) fn defaults_before<'a>(
    sections: &'a [HaproxySection],
    section: &HaproxySection,
) -> Option<&'a HaproxySection> {
    sections
        .iter()
        .take_while(|s| s.header.no != section.header.no)
        .filter(|s| s.kind == SectionKind::Defaults)
        .last()
}

/// The lines of a section (or, failing that, its defaults) that start with
/// these words.
pub(super) fn lines_with<'a>(
    own: &'a [HaproxyLine],
    defaults: Option<&'a HaproxySection>,
    start: &[&str],
) -> Vec<&'a HaproxyLine> {
    let starts = |l: &&HaproxyLine| start.iter().enumerate().all(|(i, w)| l.word(i) == *w);
    let mine: Vec<&HaproxyLine> = own.iter().filter(starts).collect();
    if !mine.is_empty() {
        return mine;
    }
    defaults
        .map(|d| d.lines.iter().filter(starts).collect())
        .unwrap_or_default()
}

/// A section's lines with its `defaults` section's lines before them, and
/// the line numbers that are the section's own.
pub(super) fn with_defaults<'a>(
    s: &'a HaproxySection,
    defaults: Option<&'a HaproxySection>,
) -> (BTreeSet<usize>, Vec<&'a HaproxyLine>) {
    let own = s.lines.iter().map(|l| l.no).collect();
    let lines = defaults
        .map(|d| d.lines.iter().collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain(&s.lines)
        .collect();
    (own, lines)
}
