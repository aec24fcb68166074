//! Names from files: `use_backend %[req.ssl_sni,lower,map(FILE)]` (a map
//! file of `name backend` lines) turned into one rule per name, as HAProxy
//! decides them, and `req.ssl_sni -f FILE` (a pattern file) turned into
//! the names it lists. The files are read by the caller
//! ([`super::translate`]'s reader); this module only reads their text.
//!
//! HAProxy's map lookup is an exact string compare; a name the map lacks
//! (with no default in `map(FILE,DEFAULT)`), a hello without SNI, or a
//! value that names no backend ends the `use_backend` rules at once and
//! takes `default_backend` (stream.c: a dynamic backend name that does
//! not resolve breaks out of the switching rules). Not read: `map_dom`,
//! `map_end`, `map_beg`, `map_reg` and other match kinds (partial
//! matches snirelay's exact and `*.suffix` names cannot always express),
//! and a condition on a map rule.

use std::collections::BTreeMap;

use super::acl::{Atom, Guard, NamePattern, Spelling, Term, escaped_domain};

/// A map rule's meaning: for each name, where HAProxy sends it (`None`:
/// to `default_backend`); then where every other name with SNI goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct MapRule {
    pub(super) file: String,
    pub(super) names: Vec<(String, Option<String>)>,
    pub(super) other: Option<String>,
    /// Whether the name is lowercased before the lookup (`,lower`).
    pub(super) lower: bool,
}

impl MapRule {
    /// The rule as ordered `use_backend` rules with plain guards: one per
    /// name, then one for every other name with SNI.
    pub(super) fn as_rules(&self) -> Vec<(Option<String>, Guard)> {
        let sni = |atom| {
            Guard::If(vec![vec![Term {
                negated: false,
                atom,
            }]])
        };
        let mut out: Vec<(Option<String>, Guard)> = self
            .names
            .iter()
            .map(|(n, b)| {
                (
                    b.clone(),
                    sni(Atom::Sni(
                        vec![NamePattern::Exact(n.clone())],
                        Spelling {
                            cased: !self.lower,
                            ldh: false,
                        },
                    )),
                )
            })
            .collect();
        out.push((self.other.clone(), sni(Atom::AnySni)));
        out
    }
}

/// The map file a `use_backend` name expression reads, if it is one, so
/// the caller can read it before translating.
pub(super) fn map_file(expr: &str) -> Option<String> {
    let (_, conv) = parts(expr).ok()?;
    let args = conv.iter().find_map(|c| {
        c.strip_prefix("map")
            .and_then(|r| r.split_once('('))
            .map(|(_, a)| a)
    })?;
    let args = args.strip_suffix(')')?;
    Some(args.split(',').next()?.to_owned())
}

/// `%[FETCH,CONV,…]` → the fetch and its converters (commas inside
/// parentheses kept).
fn parts(expr: &str) -> Result<(String, Vec<String>), String> {
    let body = expr
        .strip_prefix("%[")
        .and_then(|b| b.strip_suffix(']'))
        .ok_or("a backend name built at run time is translated only as `%[req.ssl_sni,lower,map(FILE)]`")?;
    let mut pieces = Vec::new();
    let mut depth = 0usize;
    let mut piece = String::new();
    for c in body.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                pieces.push(std::mem::take(&mut piece));
                continue;
            }
            _ => {}
        }
        piece.push(c);
    }
    pieces.push(piece);
    let fetch = pieces.remove(0);
    Ok((fetch, pieces))
}

/// Reads `%[req.ssl_sni,lower,map(FILE[,DEFAULT])]` against the map
/// file's text; `exists` says whether a backend of that name exists.
pub(super) fn map_rule(
    expr: &str,
    read: &dyn Fn(&str) -> Result<String, String>,
    exists: &dyn Fn(&str) -> bool,
) -> Result<MapRule, String> {
    let (fetch, conv) = parts(expr)?;
    if !matches!(fetch.as_str(), "req.ssl_sni" | "req_ssl_sni") {
        return Err(format!(
            "a backend name built from `{fetch}` is not translated (only from `req.ssl_sni`)"
        ));
    }
    let (lower, map) = match conv.as_slice() {
        [l, m] if l == "lower" => (true, m),
        [m] => (false, m),
        _ => {
            return Err(format!(
                "the converters `{}` are not translated (only `lower` and one `map`)",
                conv.join(",")
            ));
        }
    };
    let (kind, args) = map
        .split_once('(')
        .and_then(|(k, a)| Some((k, a.strip_suffix(')')?)))
        .ok_or_else(|| format!("`{map}` is not a map converter"))?;
    match kind {
        "map" | "map_str" => {}
        "map_dom" | "map_end" | "map_beg" | "map_sub" | "map_reg" | "map_regm" => {
            return Err(format!(
                "`{kind}` matches parts of a name; only exact maps (`map`, `map_str`) are translated"
            ));
        }
        other => return Err(format!("the converter `{other}` is not translated")),
    }
    let (file, default) = match args.split_once(',') {
        Some((f, d)) => (f.to_owned(), Some(d.to_owned())),
        None => (args.to_owned(), None),
    };
    let text = read(&file).map_err(|why| format!("the map file `{file}`: {why}"))?;
    let resolve = |b: &str| exists(b).then(|| b.to_owned());
    let mut names: Vec<(String, Option<String>)> = Vec::new();
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for (n, line) in pattern_lines(&text) {
        let (key, value) = match line.split_once([' ', '\t']) {
            Some((k, v)) => (k, v.trim()),
            None => (line, ""),
        };
        let at = || format!("{file} line {n}");
        if let Some(first) = seen.get(key) {
            if first != value {
                return Err(format!(
                    "{}: `{key}` is mapped twice, to `{first}` and `{value}`",
                    at()
                ));
            }
            continue;
        }
        seen.insert(key.to_owned(), value.to_owned());
        if lower && key != key.to_ascii_lowercase() {
            // The lowercased name never equals it: HAProxy never uses it.
            continue;
        }
        match escaped_domain(&key.to_ascii_lowercase().replace('.', "\\.")) {
            Some(name) => names.push((name, resolve(value))),
            None => return Err(format!("{}: `{key}` is not a host name", at())),
        }
    }
    Ok(MapRule {
        file,
        names,
        other: default.as_deref().and_then(resolve),
        lower,
    })
}

/// The words of a rule or ACL with each `req.ssl_sni … -f FILE` replaced
/// by the patterns FILE lists (one a line; blank lines and `#` comments
/// skipped), after the test's flags, as HAProxy reads them.
pub(super) fn inline_pattern_files(
    words: &[String],
    files: &BTreeMap<String, Result<String, String>>,
) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let w = &words[i];
        out.push(w.clone());
        i += 1;
        if !matches!(w.as_str(), "req.ssl_sni" | "req_ssl_sni") {
            continue;
        }
        let mut patterns: Vec<String> = Vec::new();
        let mut from_file = false;
        while i < words.len() && words[i].starts_with('-') {
            match words[i].as_str() {
                "-f" => {
                    let file = words.get(i + 1).ok_or("`-f` without its file")?;
                    let text = match files.get(file) {
                        Some(Ok(text)) => text,
                        Some(Err(why)) => return Err(format!("the pattern file `{file}`: {why}")),
                        None => return Err(format!("the pattern file `{file}` was not read")),
                    };
                    patterns.extend(pattern_lines(text).map(|(_, p)| p.to_owned()));
                    from_file = true;
                    i += 2;
                }
                "--" => {
                    i += 1;
                    break;
                }
                "-m" => {
                    out.extend(words[i..(i + 2).min(words.len())].iter().cloned());
                    i += 2;
                }
                _ => {
                    out.push(words[i].clone());
                    i += 1;
                }
            }
        }
        out.push("--".into());
        if from_file && patterns.is_empty() && words.get(i).is_none_or(|w| w == "}") {
            return Err("the pattern files list no name".into());
        }
        out.extend(patterns);
    }
    Ok(out)
}

/// The lines of a pattern or map file as HAProxy reads them, with their
/// numbers: trimmed, blank lines and `#` comments skipped.
pub(super) fn pattern_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(n, l)| (n + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
}

/// The pattern file a route can read at run time as its `sni_file`, and
/// the names left to write inline: among the files `lines` read with
/// `req.ssl_sni … -f FILE`, the one listing the most names of which every
/// line is an exact name or `*.suffix` written as snirelay writes it (so
/// the file means the same to both) and every one is among the route's
/// `names`. `None` when no file qualifies (the names stay inline).
pub(super) fn sni_file<'l>(
    names: &[String],
    lines: impl IntoIterator<Item = &'l super::parse::HaproxyLine>,
    files: &BTreeMap<String, Result<String, String>>,
) -> Option<(String, Vec<String>)> {
    use crate::wire::sni::Pattern;
    let mut best: Option<(String, Vec<&str>)> = None;
    for line in lines {
        if !line
            .words
            .iter()
            .any(|w| matches!(w.as_str(), "req.ssl_sni" | "req_ssl_sni"))
        {
            continue;
        }
        for file in line
            .words
            .windows(2)
            .filter(|w| w[0] == "-f")
            .map(|w| &w[1])
        {
            let Some(Ok(text)) = files.get(file) else {
                continue;
            };
            let listed: Vec<&str> = pattern_lines(text).map(|(_, p)| p).collect();
            let same = |p: &&str| {
                Pattern::parse(p).is_ok_and(|q| q != Pattern::Any && q.to_string() == *p)
            };
            if !listed.is_empty()
                && listed
                    .iter()
                    .all(|p| same(p) && names.iter().any(|n| n == p))
                && best.as_ref().is_none_or(|b| listed.len() > b.1.len())
            {
                best = Some((file.clone(), listed));
            }
        }
    }
    let (file, listed) = best?;
    let rest = names
        .iter()
        .filter(|n| !listed.contains(&n.as_str()))
        .cloned()
        .collect();
    Some((file, rest))
}
