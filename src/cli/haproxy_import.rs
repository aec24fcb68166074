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
//! wildcards are evaluated; others (`-m dom`, `-m end example.com`,
//! arbitrary regexes, ACLs on the source address) make their rule
//! untranslated.
//!
//! Pure: text in, text out; no file or network I/O, and it does not
//! validate the result (the binary's `check` does, and the tests load every
//! translation they make).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

/// HAProxy's default check interval (`inter`), rise and fall.
const HAPROXY_DEFAULT_INTER_MS: u64 = 2000;
const HAPROXY_DEFAULT_RISE: u64 = 2;
const HAPROXY_DEFAULT_FALL: u64 = 3;

/// The translated configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Translation {
    /// The TOML, with its comments.
    pub toml: String,
    /// The lines that were not translated: (line number, line, why).
    pub not_translated: Vec<(usize, String, String)>,
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
pub(crate) fn translate(text: &str, source: &str) -> Result<Translation, ImportError> {
    let sections = parse_sections(text);
    let mut t = Translator::default();
    t.run(&sections)?;
    Ok(t.finish(text, source))
}

// ---------------------------------------------------------------------
// Reading: lines, words, sections.

#[derive(Debug, Clone)]
struct Line {
    no: usize,
    text: String,
    words: Vec<String>,
}

impl Line {
    fn word(&self, i: usize) -> &str {
        self.words.get(i).map_or("", String::as_str)
    }

    /// The words from `i` on (none past the end).
    fn words_from(&self, i: usize) -> &[String] {
        self.words.get(i..).unwrap_or(&[])
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Global,
    Defaults,
    Frontend,
    Backend,
    Listen,
    Other,
}

#[derive(Debug, Clone)]
struct Section {
    kind: Kind,
    name: String,
    header: Line,
    lines: Vec<Line>,
}

/// Splits a line into words as HAProxy does: whitespace separates, `"…"`
/// and `'…'` quote, a backslash escapes a space, `#`, a quote or itself
/// (any other backslash is kept, so regexes keep their `\.`), and an
/// unquoted `#` starts a comment.
fn words(line: &str) -> Vec<String> {
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

fn parse_sections(text: &str) -> Vec<Section> {
    let mut sections: Vec<Section> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let w = words(raw);
        if w.is_empty() {
            continue;
        }
        let line = Line {
            no: i + 1,
            text: raw.trim().to_owned(),
            words: w,
        };
        let kind = match line.word(0) {
            "global" => Some(Kind::Global),
            "defaults" => Some(Kind::Defaults),
            "frontend" => Some(Kind::Frontend),
            "backend" => Some(Kind::Backend),
            "listen" => Some(Kind::Listen),
            "userlist" | "peers" | "resolvers" | "mailers" | "program" | "http-errors" | "ring"
            | "cache" | "fcgi-app" | "crt-store" | "traces" => Some(Kind::Other),
            _ => None,
        };
        match kind {
            Some(kind) => sections.push(Section {
                kind,
                name: line.word(1).to_owned(),
                header: line,
                lines: Vec::new(),
            }),
            None => match sections.last_mut() {
                Some(s) => s.lines.push(line),
                // Before any section: HAProxy refuses it; so do we, by line.
                None => sections.push(Section {
                    kind: Kind::Other,
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
fn millis(text: &str) -> Option<u64> {
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

/// Milliseconds as a snirelay duration string, in the largest exact unit.
fn duration(ms: u64) -> String {
    match ms {
        0 => "0s".into(),
        ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        ms if ms % 1000 == 0 => format!("{}s", ms / 1000),
        ms => format!("{ms}ms"),
    }
}

fn quoted(s: &str) -> String {
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

fn quoted_list(items: &[String]) -> String {
    let inner: Vec<String> = items.iter().map(|s| quoted(s)).collect();
    format!("[{}]", inner.join(", "))
}

// ---------------------------------------------------------------------
// Server names and the conditions on them.

/// A name an SNI condition can match: exact, or every name below a suffix.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum NamePattern {
    Exact(String),
    Below(String),
}

impl NamePattern {
    fn matches(&self, name: &str) -> bool {
        match self {
            NamePattern::Exact(e) => name == e,
            NamePattern::Below(d) => name.len() > d.len() + 1 && name.ends_with(&format!(".{d}")),
        }
    }

    fn as_snirelay(&self) -> String {
        match self {
            NamePattern::Exact(e) => e.clone(),
            NamePattern::Below(d) => format!("*.{d}"),
        }
    }
}

/// What one ACL test means for a ClientHello.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Atom {
    /// `req.ssl_hello_type 1`: true for every ClientHello.
    Hello,
    /// `WAIT_END`: false while the hello arrives in time.
    WaitEnd,
    Constant(bool),
    /// The SNI is one of these names (false without SNI).
    Sni(Vec<NamePattern>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Term {
    negated: bool,
    atom: Atom,
}

/// OR of ANDs.
type Condition = Vec<Vec<Term>>;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Guard {
    Always,
    If(Condition),
    Unless(Condition),
}

impl Guard {
    /// Whether the guard holds for a complete ClientHello naming `name`
    /// (`hello`), or for bytes that are no ClientHello once the inspect
    /// delay has ended (`!hello`: no SNI, `WAIT_END` true).
    fn holds(&self, hello: bool, name: Option<&str>) -> bool {
        let eval = |c: &Condition| {
            c.iter().any(|all| {
                all.iter().all(|t| {
                    let v = match &t.atom {
                        Atom::Hello => hello,
                        Atom::WaitEnd => !hello,
                        Atom::Constant(b) => *b,
                        Atom::Sni(set) => name.is_some_and(|n| set.iter().any(|p| p.matches(n))),
                    };
                    v != t.negated
                })
            })
        };
        match self {
            Guard::Always => true,
            Guard::If(c) => eval(c),
            Guard::Unless(c) => !eval(c),
        }
    }

    fn patterns(&self) -> Vec<NamePattern> {
        let c = match self {
            Guard::Always => return Vec::new(),
            Guard::If(c) | Guard::Unless(c) => c,
        };
        c.iter()
            .flatten()
            .filter_map(|t| match &t.atom {
                Atom::Sni(set) => Some(set.clone()),
                _ => None,
            })
            .flatten()
            .collect()
    }
}

/// A label character class of a label-suffix regex: letters, digits and
/// `-` (optionally `_`), in any order and case forms.
fn is_label_class(class: &str) -> bool {
    let mut rest = class;
    let mut seen = BTreeSet::new();
    while !rest.is_empty() {
        let piece = ["a-z", "A-Z", "0-9", "-", "_"]
            .into_iter()
            .find(|p| rest.starts_with(p));
        match piece {
            Some(p) => {
                seen.insert(p);
                rest = &rest[p.len()..];
            }
            None => return false,
        }
    }
    seen.contains("a-z") && seen.contains("0-9") && seen.contains("-")
}

/// `example\.com` → `example.com`, when the text is a host name with its
/// dots escaped and nothing else special.
fn escaped_domain(text: &str) -> Option<String> {
    if text.replace("\\.", "").contains('.') {
        return None; // an unescaped dot matches any character
    }
    let name = text.replace("\\.", ".");
    let labels_ok = name.split('.').all(|l| {
        !l.is_empty() && l.len() <= 63 && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    });
    (labels_ok && !name.contains('\\') && name.len() <= 253).then_some(name)
}

/// The names a `-m reg` SNI pattern means, when it is a label-suffix
/// pattern: `^([a-z0-9-]+\.)*D$` (D and below), `^([a-z0-9-]+\.)+D$`
/// (below D), `^D$` (D); `(?:` groups too.
fn label_suffix_regex(re: &str) -> Option<Vec<NamePattern>> {
    let body = re.strip_prefix('^')?.strip_suffix('$')?;
    if let Some(name) = escaped_domain(body) {
        return Some(vec![NamePattern::Exact(name)]);
    }
    let group = body
        .strip_prefix("(?:")
        .or_else(|| body.strip_prefix('('))?;
    let group = group.strip_prefix('[')?;
    let (class, rest) = group.split_once(']')?;
    if !is_label_class(class) {
        return None;
    }
    let rest = rest.strip_prefix("+\\.)")?;
    let (apex, rest) = match rest.chars().next()? {
        '*' => (true, &rest[1..]),
        '+' => (false, &rest[1..]),
        _ => return None,
    };
    let name = escaped_domain(rest)?;
    let mut out = Vec::new();
    if apex {
        out.push(NamePattern::Exact(name.clone()));
    }
    out.push(NamePattern::Below(name));
    Some(out)
}

/// Reads `FETCH [flags] VALUES…` for an SNI fetch into the names it
/// matches, or why it cannot be.
fn sni_atom(words: &[String]) -> Result<Atom, String> {
    let mut i = 1;
    let mut method = "str".to_owned();
    let mut ignore_case = false;
    while i < words.len() && words[i].starts_with('-') {
        match words[i].as_str() {
            "-i" => ignore_case = true,
            "-m" => {
                i += 1;
                method = words.get(i).cloned().unwrap_or_default();
            }
            "--" => {
                i += 1;
                break;
            }
            "-f" | "-M" => return Err("patterns from a file (`-f`) are not read".into()),
            flag => return Err(format!("the flag `{flag}` is not read")),
        }
        i += 1;
    }
    let values = words.get(i..).unwrap_or(&[]);
    if values.is_empty() {
        return Err("no pattern".into());
    }
    let mut names = Vec::new();
    for v in values {
        let lower = v.to_ascii_lowercase();
        if !ignore_case && *v != lower && method != "reg" {
            return Err(format!(
                "`{v}` has capitals and no `-i`: HAProxy would compare it case-sensitively; snirelay compares names lowercased"
            ));
        }
        match method.as_str() {
            "str" => match escaped_domain(&lower.replace('.', "\\.")) {
                Some(n) => names.push(NamePattern::Exact(n)),
                None => return Err(format!("`{v}` is not a host name")),
            },
            "end" => match lower
                .strip_prefix('.')
                .and_then(|d| escaped_domain(&d.replace('.', "\\.")))
            {
                Some(d) => names.push(NamePattern::Below(d)),
                None => {
                    return Err(format!(
                        "`-m end {v}` is a plain suffix, not a domain: it also matches names such as `bad{v}`; write `-m end .{}` (names below it) and the name itself with `-m str`",
                        v.trim_start_matches('.')
                    ));
                }
            },
            "reg" => match label_suffix_regex(if ignore_case { &lower } else { v }) {
                Some(set) => names.extend(set),
                None => {
                    return Err(format!(
                        "the regex `{v}` is not a label-suffix pattern such as `^([a-z0-9-]+\\.)*example\\.com$`"
                    ));
                }
            },
            "dom" => {
                return Err(format!(
                    "`-m dom {v}` matches `{v}` as whole labels anywhere in the name (also `{v}.evil.net`), not a suffix; snirelay routes only exact names and `*.suffix`: use `-m end .{v}` and `-m str {v}`",
                    v = v.trim_matches('.')
                ));
            }
            other => {
                return Err(format!(
                    "the match method `-m {other}` has no snirelay equivalent (only exact names and `*.suffix`)"
                ));
            }
        }
    }
    Ok(Atom::Sni(names))
}

/// Reads an ACL's criterion (`FETCH [flags] VALUES…`).
fn atom(words: &[String]) -> Result<Atom, String> {
    let fetch = words.first().map_or("", String::as_str);
    match fetch {
        "req.ssl_sni" | "req_ssl_sni" => sni_atom(words),
        "req.ssl_hello_type" | "req_ssl_hello_type" => {
            if words[1..] == ["1".to_owned()] {
                Ok(Atom::Hello)
            } else {
                Err("only `req.ssl_hello_type 1` (a ClientHello) is read".into())
            }
        }
        "WAIT_END" if words.len() == 1 => Ok(Atom::WaitEnd),
        "TRUE" if words.len() == 1 => Ok(Atom::Constant(true)),
        "FALSE" if words.len() == 1 => Ok(Atom::Constant(false)),
        "ssl_fc_sni" | "ssl_fc_sni_end" | "ssl_fc_sni_reg" => Err(format!(
            "`{fetch}` is the SNI of a TLS connection HAProxy terminates; snirelay never terminates TLS"
        )),
        other => Err(format!(
            "conditions on `{other}` are not translated (only the ClientHello and its SNI)"
        )),
    }
}

/// Reads `COND` (after `if`/`unless`): terms, `!`, `or`/`||`, `{ … }`.
fn condition(
    words: &[String],
    acls: &BTreeMap<String, Result<Vec<Atom>, String>>,
) -> Result<Condition, String> {
    let mut groups: Condition = vec![Vec::new()];
    let mut i = 0;
    while i < words.len() {
        let mut w = words[i].as_str();
        if w == "or" || w == "||" {
            groups.push(Vec::new());
            i += 1;
            continue;
        }
        let mut negated = false;
        if w == "!" {
            negated = true;
            i += 1;
            w = words.get(i).map_or("", String::as_str);
        } else if let Some(rest) = w.strip_prefix('!') {
            negated = true;
            w = rest;
        }
        let term_atoms: Vec<Atom> = if w == "{" {
            let end = words[i..]
                .iter()
                .position(|x| x == "}")
                .map(|n| i + n)
                .ok_or("an anonymous ACL `{` without its `}`")?;
            let a = atom(&words[i + 1..end])?;
            i = end;
            vec![a]
        } else if matches!(w, "WAIT_END" | "TRUE" | "FALSE") && !acls.contains_key(w) {
            vec![atom(&[w.to_owned()])?]
        } else {
            match acls.get(w) {
                Some(Ok(atoms)) => atoms.clone(),
                Some(Err(why)) => return Err(format!("the ACL `{w}` is not translated: {why}")),
                None => return Err(format!("the ACL `{w}` is not defined here")),
            }
        };
        // An ACL defined on several lines is their OR; its negation is
        // the AND of the negations, which only works for one line.
        let term = match term_atoms.as_slice() {
            [one] => Term {
                negated,
                atom: one.clone(),
            },
            many => {
                let mut names = Vec::new();
                for a in many {
                    match a {
                        Atom::Sni(set) => names.extend(set.iter().cloned()),
                        _ => return Err(format!("the ACL `{w}` mixes tests over several lines")),
                    }
                }
                Term {
                    negated,
                    atom: Atom::Sni(names),
                }
            }
        };
        groups.last_mut().unwrap().push(term);
        i += 1;
    }
    if groups.iter().any(Vec::is_empty) {
        return Err("an empty condition".into());
    }
    Ok(groups)
}

/// `[if|unless COND]` at the end of a rule's words.
fn guard(
    words: &[String],
    acls: &BTreeMap<String, Result<Vec<Atom>, String>>,
) -> Result<Guard, String> {
    match words.first().map(String::as_str) {
        None => Ok(Guard::Always),
        Some("if") => condition(&words[1..], acls).map(Guard::If),
        Some("unless") => condition(&words[1..], acls).map(Guard::Unless),
        Some(other) => Err(format!("`{other}` where `if` or `unless` was expected")),
    }
}

// ---------------------------------------------------------------------
// The ledger: what became of every line.

#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// Became a key (the comment beside it names the line).
    Key,
    /// Needs no key: why.
    NoKey(String),
    /// Not translated: why.
    Not(String),
}

/// One TOML table: its header and `key = value  # comment` rows.
#[derive(Debug, Default, Clone)]
struct Table {
    header: String,
    rows: Vec<(String, String, String)>,
}

impl Table {
    fn new(header: &str) -> Table {
        Table {
            header: header.to_owned(),
            rows: Vec::new(),
        }
    }

    fn row(&mut self, key: &str, value: String, comment: impl Into<String>) {
        self.rows.push((key.to_owned(), value, comment.into()));
    }
}

/// A server line, read.
#[derive(Debug, Clone, Default)]
struct Server {
    address: String,
    weight: Option<u64>,
    check: bool,
    inter_ms: Option<u64>,
    rise: Option<u64>,
    fall: Option<u64>,
    proxy: Option<&'static str>,
    /// Its own `source`, as the TOML value of the address entry's key.
    source: Option<String>,
    text: String,
}

/// A backend, read.
#[derive(Debug, Clone, Default)]
struct BackendInfo {
    connect_ms: Option<(u64, String)>,
    server_ms: Option<(u64, String)>,
    tunnel_ms: Option<(u64, String)>,
    server_fin_ms: Option<(u64, String)>,
}

#[derive(Debug, Default)]
struct Translator {
    ledger: BTreeMap<usize, (String, Outcome)>,
    global: Table,
    admin: Option<Table>,
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
}

type FrontendTimeouts = (Option<(u64, String)>, Option<(u64, String)>);

/// The last `defaults` section before `section`.
fn defaults_before<'a>(sections: &'a [Section], section: &Section) -> Option<&'a Section> {
    sections
        .iter()
        .take_while(|s| s.header.no != section.header.no)
        .filter(|s| s.kind == Kind::Defaults)
        .last()
}

impl Translator {
    fn key(&mut self, line: &Line) {
        self.ledger
            .entry(line.no)
            .or_insert_with(|| (line.text.clone(), Outcome::Key));
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

    fn read_global(&mut self, s: &Section) {
        for l in &s.lines {
            match l.word(0) {
                "maxconn" => match l.word(1).parse::<u64>() {
                    Ok(n) => {
                        self.global_maxconn = Some((n, l.text.clone()));
                        self.key(l);
                    }
                    Err(_) => self.not(l, "not a number"),
                },
                "maxconnrate" => match l.word(1).parse::<u64>() {
                    Ok(n) if n > 0 => {
                        self.global.row("max_connection_rate", n.to_string(), &l.text);
                        self.key(l);
                    }
                    _ => self.not(l, "not a positive number"),
                },
                "hard-stop-after" => match millis(l.word(1)) {
                    Some(ms) => {
                        self.global.row("drain_timeout", quoted(&duration(ms)), &l.text);
                        self.key(l);
                    }
                    None => self.not(l, "not a time"),
                },
                "nbthread" => match l.word(1).parse::<u64>() {
                    Ok(n) if n > 0 => {
                        self.global.row("threads", n.to_string(), &l.text);
                        self.key(l);
                    }
                    _ => self.not(l, "not a positive number"),
                },
                "log" => self.no_key(l, "snirelay writes its log lines to stderr, which journald keeps under systemd; to send them to syslog as this line does, add [log] target = \"syslog\" with syslog = \"unix:/dev/log\" and its facility"),
                "user" | "group" | "uid" | "gid" => self.no_key(l, "the packaged systemd unit runs snirelay as its own unprivileged user"),
                "daemon" | "master-worker" | "pidfile" => self.no_key(l, "snirelay stays in the foreground under systemd (Type=notify)"),
                "chroot" => self.no_key(l, "the packaged systemd unit sandboxes snirelay instead"),
                "ulimit-n" => self.no_key(l, "snirelay raises its descriptor limit to the hard limit itself (LimitNOFILE= in the unit)"),
                "stats" if l.word(1) == "socket" => self.read_stats_socket(l),
                "stats" if l.word(1) == "timeout" => self.no_key(l, "the admin listener bounds each request with its own time limits"),
                "ca-base" | "crt-base" | "ssl-default-bind-ciphers" | "ssl-default-bind-ciphersuites" | "ssl-default-bind-options" | "ssl-default-server-ciphers" | "ssl-default-server-ciphersuites" | "ssl-default-server-options" | "ssl-dh-param-file" => self.no_key(l, "TLS settings: snirelay never terminates TLS"),
                _ => self.not(l, format!("the global keyword `{}` is not translated", l.word(0))),
            }
        }
    }

    fn read_stats_socket(&mut self, l: &Line) {
        let at = l.word(2);
        let level = l
            .words
            .iter()
            .position(|w| w == "level")
            .map_or("operator", |i| l.word(i + 1));
        if level != "admin" {
            self.not(l, format!("`level {level}`: snirelay's admin socket gives control to whoever may connect (as `level admin`); add `[admin]` with a `token_file` instead"));
            return;
        }
        let listen = if at.starts_with('/') || at.starts_with("unix@") {
            "unix:/run/snirelay/admin.sock".to_owned()
        } else {
            match at.trim_start_matches("ipv4@").parse::<SocketAddr>() {
                Ok(a) if a.ip().is_loopback() => a.to_string(),
                _ => {
                    self.not(l, "a stats socket on a network address: snirelay's admin listener takes loopback or a Unix socket (`allow_public` for more)");
                    return;
                }
            }
        };
        let mut admin = Table::new("[admin]");
        admin.row(
            "listen",
            quoted(&listen),
            format!(
                "{}; HTTP endpoints and `snirelay ctl`, not HAProxy's CLI",
                l.text
            ),
        );
        self.admin = Some(admin);
        self.key(l);
    }

    fn finish_global(&mut self) {
        // The process's cap: the global maxconn, or with one frontend
        // whose own cap is lower, that one (it binds first).
        let one_frontend = self.listeners.len() == 1;
        let mut cap = self.global_maxconn.clone();
        let mut fes = std::mem::take(&mut self.frontend_maxconns);
        fes.sort();
        fes.dedup();
        for (n, no, text) in &fes {
            let line = Line {
                no: *no,
                text: text.clone(),
                words: Vec::new(),
            };
            if one_frontend {
                cap = match cap {
                    Some((g, gt)) if *n <= g => Some((*n, format!("global {gt}; frontend {text}"))),
                    Some(global) => Some(global),
                    None => Some((*n, format!("frontend {text}"))),
                };
                self.key(&line);
            } else {
                self.not(&line, "a frontend's own maxconn: snirelay has a process-wide cap only (a route's max_connections refuses instead of pausing)");
            }
        }
        let mut rows = Vec::new();
        if let Some((n, text)) = cap {
            rows.push(("max_connections".to_owned(), n.to_string(), text));
        }
        rows.append(&mut self.global.rows);
        self.global.rows = rows;
    }

    fn read_frontend(
        &mut self,
        s: &Section,
        defaults: Option<&Section>,
        backends: &BTreeMap<&str, &Section>,
    ) {
        self.key(&s.header);
        let (own, lines) = with_defaults(s, defaults);
        let is_listen = s.kind == Kind::Listen;
        let mut listener = Table::new("[[listener]]");
        listener.row(
            "name",
            quoted(&s.name),
            format!("{} {}", s.header.word(0), s.name),
        );
        let mut listen: Vec<(String, String)> = Vec::new();
        let mut backlog: Option<(u64, String)> = None;
        let mut client_ms: Option<(u64, String)> = None;
        let mut client_fin_ms: Option<(u64, String)> = None;
        let mut inspect: Option<(u64, String)> = None;
        let mut acls: BTreeMap<String, Result<Vec<Atom>, String>> = BTreeMap::new();
        let mut acl_lines: BTreeMap<String, Vec<&Line>> = BTreeMap::new();
        let mut content: Vec<(&Line, bool, Guard)> = Vec::new();
        let mut uses: Vec<(&Line, String, Guard)> = Vec::new();
        let mut default_backend: Option<(String, &Line)> = None;
        let mut limits = Table::new("[listener.limits]");
        let mut table: Option<(&Line, Option<u64>, bool)> = None; // line, rate period, ipv6
        let mut tracked = false;
        let mut conn_cur: Option<(u64, &Line)> = None;
        let mut conn_rate: Option<(u64, &Line)> = None;
        for l in lines {
            let mine = own.contains(&l.no);
            let w0 = l.word(0);
            match w0 {
                "mode" => self.no_key(l, "snirelay relays TCP"),
                "log" => self.no_key(l, "snirelay logs one line per connection at close"),
                "option" if matches!(l.word(1), "tcplog" | "dontlognull" | "httplog" | "logasap") => {
                    self.no_key(l, "snirelay logs one line per connection at close, none for a connection that sent nothing")
                }
                "option" if matches!(l.word(1), "clitcpka" | "srvtcpka" | "tcpka") => self.no_key(l, "snirelay keeps TCP keepalive on by default (60 s idle, 10 s interval, 6 probes) on both sides"),
                "bind" => {
                    let mut v6only = false;
                    let mut i = 2;
                    let mut bad = Vec::new();
                    while i < l.words.len() {
                        match l.word(i) {
                            "backlog" => {
                                match l.word(i + 1).parse::<u64>() {
                                    Ok(n) => backlog = Some((n, l.text.clone())),
                                    Err(_) => bad.push("backlog".to_owned()),
                                }
                                i += 1;
                            }
                            "v6only" => v6only = true,
                            "v4v6" => {}
                            "name" => i += 1,
                            other => bad.push(other.to_owned()),
                        }
                        i += 1;
                    }
                    let mut addrs = Vec::new();
                    for a in l.word(1).split(',') {
                        match bind_addresses(a, v6only) {
                            Some(list) => addrs.extend(list),
                            None => bad.push(a.to_owned()),
                        }
                    }
                    listen.extend(addrs.into_iter().map(|a| (a, l.text.clone())));
                    if bad.is_empty() {
                        self.key(l);
                    } else {
                        self.not(l, format!("not translated on this bind line: {} (snirelay binds `IP:port` addresses; TLS termination, PROXY on accept and socket options have no equivalent here)", bad.join(", ")));
                    }
                }
                "maxconn" => match l.word(1).parse::<u64>() {
                    Ok(n) => self.frontend_maxconns.push((n, l.no, l.text.clone())),
                    Err(_) => self.not(l, "not a number"),
                },
                "backlog" => match l.word(1).parse::<u64>() {
                    Ok(n) => {
                        backlog = Some((n, l.text.clone()));
                        self.key(l);
                    }
                    Err(_) => self.not(l, "not a number"),
                },
                "timeout" => {
                    let Some(ms) = millis(l.word(2)) else {
                        self.not(l, "not a time");
                        continue;
                    };
                    match l.word(1) {
                        "client" => client_ms = Some((ms, l.text.clone())),
                        "client-fin" => client_fin_ms = Some((ms, l.text.clone())),
                        "http-request" | "http-keep-alive" => self.no_key(l, "HTTP only"),
                        "connect" | "server" | "server-fin" | "tunnel" | "check" | "queue" if !mine || is_listen => {}
                        "connect" | "server" | "server-fin" | "tunnel" | "check" | "queue" => self.no_key(l, "a backend's timeout: HAProxy ignores it in a frontend"),
                        other => self.not(l, format!("`timeout {other}` is not translated")),
                    }
                }
                "tcp-request" => match l.word(1) {
                    "inspect-delay" => match millis(l.word(2)) {
                        Some(ms) => {
                            inspect = Some((ms, l.text.clone()));
                            self.key(l);
                        }
                        None => self.not(l, "not a time"),
                    },
                    "content" if !mine => self.not(l, "content rules in a defaults section are not translated"),
                    "content" => match l.word(2) {
                        action @ ("accept" | "reject") => match guard(l.words_from(3), &acls) {
                            Ok(g) => content.push((l, action == "accept", g)),
                            Err(why) => self.not(l, why),
                        },
                        other => self.not(l, format!("the content action `{other}` is not translated (only accept and reject)")),
                    },
                    "connection" if !mine => self.not(l, "connection rules in a defaults section are not translated"),
                    "connection" => {
                        let rest: Vec<&str> = l.words_from(2).iter().map(String::as_str).collect();
                        match rest.as_slice() {
                            ["track-sc0", "src"] => {
                                tracked = true;
                                self.key(l);
                            }
                            ["reject", "if", "{", fetch, op @ ("gt" | "ge"), n, "}"] if matches!(*fetch, "sc0_conn_cur" | "sc0_conn_rate") => {
                                match n.parse::<u64>() {
                                    Ok(n) => {
                                        let allowed = if *op == "gt" { n } else { n.saturating_sub(1) };
                                        if *fetch == "sc0_conn_cur" {
                                            conn_cur = Some((allowed, l));
                                        } else {
                                            conn_rate = Some((allowed, l));
                                        }
                                    }
                                    Err(_) => self.not(l, "not a number"),
                                }
                            }
                            _ => self.not(l, "only `track-sc0 src` and `reject if { sc0_conn_cur|sc0_conn_rate gt N }` are translated"),
                        }
                    }
                    other => self.not(l, format!("`tcp-request {other}` is not translated")),
                },
                "stick-table" if mine => {
                    let ty = l.words.iter().position(|w| w == "type").map(|i| l.word(i + 1));
                    let store = l.words.iter().position(|w| w == "store").map(|i| l.word(i + 1).to_owned());
                    let period = store.as_deref().and_then(|s| {
                        s.split(',')
                            .find_map(|x| x.strip_prefix("conn_rate(").and_then(|p| p.strip_suffix(')')))
                            .and_then(millis)
                    });
                    match ty {
                        Some("ip") => table = Some((l, period, false)),
                        Some("ipv6") => table = Some((l, period, true)),
                        _ => self.not(l, "only tables of `type ip` or `type ipv6` (per source address) are translated"),
                    }
                }
                "acl" if mine => {
                    let name = l.word(1).to_owned();
                    let a = atom(l.words_from(2));
                    let by_regex = l.words.windows(2).any(|w| w[0] == "-m" && w[1] == "reg");
                    if by_regex && matches!(a, Ok(Atom::Sni(_))) {
                        self.notes.push(format!(
                            "line {}: the regex admits labels of its class only; snirelay's `*.suffix` also admits `_` in labels and one trailing dot (names no certificate is issued for)",
                            l.no
                        ));
                    }
                    acl_lines.entry(name.clone()).or_default().push(l);
                    let entry = acls.entry(name).or_insert(Ok(Vec::new()));
                    match (a, entry.is_ok()) {
                        (Ok(a), true) => {
                            if let Ok(list) = entry {
                                list.push(a);
                            }
                        }
                        (Err(why), _) => {
                            self.not(l, why.clone());
                            *entry = Err(why);
                        }
                        (Ok(_), false) => {}
                    }
                }
                "use_backend" if mine => {
                    let name = l.word(1).to_owned();
                    self.named_backends.insert(name.clone());
                    if name.contains('%') {
                        self.not(l, "a backend name built at run time is not translated");
                        continue;
                    }
                    match guard(l.words_from(2), &acls) {
                        Ok(g) => uses.push((l, name, g)),
                        Err(why) => self.not(l, why),
                    }
                }
                "default_backend" => {
                    self.named_backends.insert(l.word(1).to_owned());
                    default_backend = Some((l.word(1).to_owned(), l));
                }
                // A listen section's backend half, and backend keywords
                // from defaults, are read with the backend.
                "server" | "default-server" | "balance" | "retries" if is_listen || !mine => {}
                "option" if !mine || is_listen => {}
                "stats" | "description" | "id" | "enabled" if mine => self.no_key(l, "statistics and identification: snirelay has none per listener"),
                _ if !mine => {}
                "option" => self.not(l, format!("`option {}` is not translated", l.word(1))),
                _ => self.not(l, format!("the keyword `{w0}` is not translated")),
            }
        }
        // A listen section is its own default backend.
        if is_listen && default_backend.is_none() {
            default_backend = Some((s.name.clone(), &s.header));
        }

        if listen.is_empty() {
            self.notes.push(format!(
                "frontend {} has no translated bind line: add `listen`",
                s.name
            ));
        }
        let addrs: Vec<String> = listen.iter().map(|(a, _)| a.clone()).collect();
        let binds: BTreeSet<&str> = listen.iter().map(|(_, t)| t.as_str()).collect();
        let value = if addrs.len() == 1 {
            quoted(&addrs[0])
        } else {
            quoted_list(&addrs)
        };
        listener.row(
            "listen",
            value,
            binds.into_iter().collect::<Vec<_>>().join("; "),
        );
        if let Some((n, text)) = backlog {
            listener.row("backlog", n.to_string(), text);
        }
        match &inspect {
            Some((ms, text)) => listener.row("client_hello_timeout", quoted(&duration(*ms)), text),
            None => self.notes.push(format!(
                "frontend {} has no `tcp-request inspect-delay`: HAProxy then decides on whatever the first segment carried; snirelay waits for the whole hello (client_hello_timeout, 5s by default)",
                s.name
            )),
        }

        // Per-source limits.
        let tracked_ok = tracked && table.is_some();
        match conn_cur {
            Some((n, l)) if tracked_ok && n > 0 => {
                limits.row("connections_per_source", n.to_string(), format!("track-sc0 src; {}: {n} may be open, the next is refused", l.text));
                self.key(l);
            }
            Some((_, l)) => self.not(l, "needs `stick-table type ip` and `tcp-request connection track-sc0 src` in the same frontend, and a limit above 0"),
            None => limits.row("connections_per_source", "false".into(), "no sc0_conn_cur limit: HAProxy has none per source (snirelay's default would be 256)"),
        }
        if let Some((n, l)) = conn_rate {
            match table.and_then(|(_, p, _)| p) {
                Some(period_ms) if tracked_ok && n > 0 && (n * 1000) % period_ms == 0 => {
                    let per_second = n * 1000 / period_ms;
                    let what = format!("{} over conn_rate({})", l.text, duration(period_ms));
                    limits.row("connection_rate_per_source", per_second.to_string(), what);
                    limits.row("connection_burst_per_source", n.to_string(), format!("{n} within any {}", duration(period_ms)));
                    limits.row("rate_counts_refused", "true".into(), "conn_rate counts refused attempts too");
                    self.key(l);
                }
                Some(period_ms) if tracked_ok && n > 0 => self.not(l, format!(
                    "{n} per {} is not a whole number of connections per second: set connection_rate_per_source and connection_burst_per_source = {n} by hand",
                    duration(period_ms)
                )),
                _ => self.not(l, "needs a stick-table storing conn_rate(PERIOD), `track-sc0 src`, and a limit above 0"),
            }
        }
        if let Some((l, _, v6)) = table {
            if tracked_ok {
                if v6 {
                    limits.row(
                        "source_prefix_v6",
                        "128".into(),
                        "stick-table type ipv6: one source per address",
                    );
                }
                self.key(l);
                self.no_key(l, "the table's size and expiry: snirelay's tables hold only sources with open connections or a recent rate, swept every 10 s");
            } else {
                self.not(l, "a table that no `track-sc0 src` fills");
            }
        }

        // Routing: evaluate the rules as HAProxy would, per kind of name.
        let mut patterns: Vec<NamePattern> = Vec::new();
        for g in content
            .iter()
            .map(|c| &c.2)
            .chain(uses.iter().map(|u| &u.2))
        {
            for p in g.patterns() {
                if !patterns.contains(&p) {
                    patterns.push(p);
                }
            }
        }
        let decide_for = |hello: bool, name: Option<&str>| -> Option<String> {
            for (_, accept, g) in &content {
                if g.holds(hello, name) {
                    if !*accept {
                        return None;
                    }
                    break;
                }
            }
            for (_, backend, g) in &uses {
                if g.holds(hello, name) {
                    return Some(backend.clone());
                }
            }
            default_backend.as_ref().map(|(b, _)| b.clone())
        };
        let decide = |name: Option<&str>| decide_for(true, name);
        if let Some(b) = decide_for(false, None) {
            self.notes.push(format!(
                "frontend {}: HAProxy relays bytes that are no ClientHello to `{b}` once the inspect delay ends (no rule rejects them); snirelay refuses them (not_tls)",
                s.name
            ));
        }
        let routing = build_routes(&patterns, &decide);
        let route_lines: Vec<&Line> = content
            .iter()
            .map(|c| c.0)
            .chain(uses.iter().map(|u| u.0))
            .chain(default_backend.iter().map(|d| d.1))
            .chain(acl_lines.values().flatten().copied())
            .collect();
        match routing {
            Ok(r) => {
                for l in &route_lines {
                    self.key(l);
                }
                // Rules on the hello alone: snirelay's inspect stage.
                let hello_only = |g: &Guard| g.patterns().is_empty();
                for (l, _, g) in &content {
                    if hello_only(g) {
                        self.no_key(l, "snirelay refuses anything that is not a complete ClientHello within client_hello_timeout (not_tls, malformed, hello_timeout)");
                    }
                }
                for (name, ls) in &acl_lines {
                    if let Some(Ok(atoms)) = acls.get(name) {
                        if atoms.iter().all(|a| !matches!(a, Atom::Sni(_))) {
                            for l in ls {
                                self.no_key(l, "every connection snirelay relays is a ClientHello");
                            }
                        }
                    }
                }
                // Backends must exist.
                let mut routes = Vec::new();
                for (backend, names) in &r.routes {
                    if !backends.contains_key(backend.as_str()) {
                        self.notes.push(format!(
                            "frontend {} routes to `{backend}`, which is not defined",
                            s.name
                        ));
                    }
                    let mut t = Table::new("[[route]]");
                    t.row("name", quoted(backend), "");
                    t.row(
                        "sni",
                        quoted_list(names),
                        r.why.get(backend).cloned().unwrap_or_default(),
                    );
                    let naming: Vec<&str> = uses
                        .iter()
                        .filter(|u| u.1 == *backend)
                        .map(|u| u.0.text.as_str())
                        .chain(
                            default_backend
                                .iter()
                                .filter(|d| d.0 == *backend)
                                .map(|d| d.1.text.as_str()),
                        )
                        .collect();
                    t.row("backend", quoted(backend), naming.join("; "));
                    routes.push((backend.clone(), t));
                    self.used_backends.insert(backend.clone());
                }
                if let Some(b) = &r.no_sni {
                    listener.row(
                        "no_sni",
                        quoted(b),
                        "a hello without SNI reaches this backend in HAProxy",
                    );
                    self.used_backends.insert(b.clone());
                }
                let tables: Vec<Table> = routes.into_iter().map(|(_, t)| t).collect();
                self.listeners.push((listener, limits, tables));
                self.pending_timeouts(client_ms, client_fin_ms);
            }
            Err(why) => {
                for l in &route_lines {
                    self.not(l, format!("the rules together: {why}"));
                }
                self.listeners.push((listener, limits, Vec::new()));
                self.pending_timeouts(client_ms, client_fin_ms);
            }
        }
    }

    /// Remembers the frontend-side timeouts; they are combined with the
    /// backend's once it is read.
    fn pending_timeouts(
        &mut self,
        client: Option<(u64, String)>,
        client_fin: Option<(u64, String)>,
    ) {
        let last = self.listeners.len() - 1;
        self.frontend_timeouts.insert(last, (client, client_fin));
    }

    fn read_backend(&mut self, s: &Section, defaults: Option<&Section>) {
        self.key(&s.header);
        let (own, lines) = with_defaults(s, defaults);
        let is_listen = s.kind == Kind::Listen;
        let mut info = BackendInfo::default();
        let mut check_ms: Option<(u64, String)> = None;
        let mut queue_lines: Vec<&Line> = Vec::new();
        let mut servers: Vec<(Server, &Line)> = Vec::new();
        let mut default_server: Vec<String> = Vec::new();
        let mut balance: Option<(String, &Line)> = None;
        let mut source: Option<(String, &Line)> = None;
        for l in lines {
            let mine = own.contains(&l.no);
            match l.word(0) {
                "timeout" => {
                    let Some(ms) = millis(l.word(2)) else {
                        continue;
                    };
                    let v = Some((ms, l.text.clone()));
                    match l.word(1) {
                        "connect" => info.connect_ms = v,
                        "server" => info.server_ms = v,
                        "tunnel" => info.tunnel_ms = v,
                        "server-fin" => info.server_fin_ms = v,
                        "check" => check_ms = v,
                        "queue" => queue_lines.push(l),
                        _ => {}
                    }
                }
                "default-server" => {
                    default_server = l.words_from(1).to_vec();
                    self.key(l);
                }
                "server" => {
                    let mut words = vec![l.word(0).to_owned(), l.word(1).to_owned(), l.word(2).to_owned()];
                    words.extend(default_server.iter().cloned());
                    words.extend(l.words.iter().skip(3).cloned());
                    match server(&words) {
                        Ok(sv) => {
                            servers.push((sv, l));
                            self.key(l);
                        }
                        Err(why) => self.not(l, why),
                    }
                }
                "balance" => balance = Some((l.word(1).to_owned(), l)),
                "source" => match source_value(l.words_from(1)) {
                    Ok((Some(value), used)) if used == l.words_from(1).len() => {
                        source = Some((value, l));
                    }
                    Ok((None, used)) if used == l.words_from(1).len() => {
                        source = None;
                        self.no_key(l, "any local address: the host's own choice, snirelay's default");
                    }
                    Ok(_) => self.not(l, "words after `source ADDR [usesrc …]` are not translated"),
                    Err(why) => self.not(l, why),
                },
                "retries" if mine => self.not(l, "snirelay tries each address once per connection, up to `connect_attempts` addresses; it never retries the same one"),
                "option" if matches!(l.word(1), "tcplog" | "dontlognull" | "clitcpka" | "srvtcpka" | "tcpka" | "httplog") => {}
                "option" if mine => self.not(l, format!("`option {}` is not translated", l.word(1))),
                "mode" | "log" => {}
                _ if !mine || is_listen => {}
                other => self.not(l, format!("the keyword `{other}` is not translated")),
            }
        }
        let mut table = Table::new(&format!("[backend.{}]", toml_key(&s.name)));
        let plain = servers.iter().all(|(sv, _)| sv.weight.unwrap_or(1) == 1);
        let entries: Vec<String> = servers
            .iter()
            .map(|(sv, _)| {
                let mut keys = vec![format!("address = {}", quoted(&sv.address))];
                if !plain {
                    keys.push(format!("weight = {}", sv.weight.unwrap_or(1)));
                }
                if let Some(own) = &sv.source {
                    keys.push(format!("source = {own}"));
                }
                match keys.len() {
                    1 => quoted(&sv.address),
                    _ => format!("{{ {} }}", keys.join(", ")),
                }
            })
            .collect();
        let texts: Vec<String> = servers.iter().map(|(sv, _)| sv.text.clone()).collect();
        if servers.is_empty() {
            self.notes.push(format!(
                "backend {} has no translated server: add `addresses`",
                s.name
            ));
        }
        table.row(
            "addresses",
            format!("[{}]", entries.join(", ")),
            texts.join("; "),
        );
        if let Some((value, l)) = source {
            table.row("source", value, &l.text);
            self.key(l);
        }
        if servers.len() > 1 {
            let policy = match balance.as_ref().map(|(b, _)| b.as_str()) {
                None | Some("roundrobin" | "static-rr") => Some("round_robin"),
                Some("leastconn") => Some("least_connections"),
                Some("source") => Some("source_hash"),
                Some(_) => None,
            };
            match (policy, balance) {
                (Some(p), Some((_, l))) => {
                    table.row("policy", quoted(p), &l.text);
                    self.key(l);
                }
                (Some(p), None) => table.row("policy", quoted(p), "HAProxy's default balance is roundrobin"),
                (None, Some((b, l))) => self.not(l, format!("`balance {b}` has no snirelay policy (round_robin, least_connections, source_hash, ordered, fastest)")),
                (None, None) => {}
            }
        } else if let Some((_, l)) = balance {
            self.no_key(l, "one server: nothing to balance");
        }
        match &info.connect_ms {
            Some((ms, text)) => table.row("connect_timeout", quoted(&duration(*ms)), text),
            None => self.notes.push(format!("backend {}: no `timeout connect` (HAProxy waits forever); snirelay's connect_timeout defaults to 5s", s.name)),
        }
        for l in lines_with(&s.lines, defaults, &["timeout", "connect"]) {
            if info.connect_ms.is_some() {
                self.key(l);
            }
        }
        let proxies: BTreeSet<Option<&str>> = servers.iter().map(|(sv, _)| sv.proxy).collect();
        if proxies.len() > 1 {
            for (_, l) in &servers {
                self.not(l, "servers of one backend disagree on send-proxy: snirelay sends one PROXY version per backend");
            }
        } else if let Some(Some(v)) = proxies.into_iter().next() {
            table.row("proxy_protocol", quoted(v), "send-proxy / send-proxy-v2");
        }
        let mut tables = vec![table];
        // Health: HAProxy checks only servers with `check`; snirelay checks
        // every address of a backend with [health].
        let checked: Vec<&(Server, &Line)> = servers.iter().filter(|(sv, _)| sv.check).collect();
        if !checked.is_empty() {
            let params: BTreeSet<(u64, u64, u64)> = checked
                .iter()
                .map(|(sv, _)| {
                    (
                        sv.inter_ms.unwrap_or(HAPROXY_DEFAULT_INTER_MS),
                        sv.rise.unwrap_or(HAPROXY_DEFAULT_RISE),
                        sv.fall.unwrap_or(HAPROXY_DEFAULT_FALL),
                    )
                })
                .collect();
            if checked.len() != servers.len() || params.len() > 1 {
                for (_, l) in &servers {
                    self.not(l, "snirelay checks every address of a backend alike: its servers must all have `check` with the same inter, rise and fall");
                }
            } else {
                let (inter, rise, fall) = params.into_iter().next().unwrap();
                // HAProxy: min(timeout connect, inter) for the connect when
                // `timeout check` is set, else inter for the whole check.
                let timeout = match (&check_ms, &info.connect_ms) {
                    (Some(_), Some((c, _))) => inter.min(*c),
                    _ => inter,
                };
                let mut h = Table::new(&format!("[backend.{}.health]", toml_key(&s.name)));
                h.row(
                    "kind",
                    quoted("tcp"),
                    "HAProxy's default check: a TCP connect",
                );
                h.row("interval", quoted(&duration(inter)), "inter");
                let why = match &check_ms {
                    Some((_, t)) => format!("min(timeout connect, inter); {t}"),
                    None => "inter: HAProxy's whole check without timeout check".into(),
                };
                h.row("timeout", quoted(&duration(timeout)), why);
                h.row("rise", rise.to_string(), "rise");
                h.row("fall", fall.to_string(), "fall");
                tables.push(h);
            }
        }
        for l in lines_with(&s.lines, defaults, &["timeout", "check"]) {
            if checked.is_empty() {
                self.no_key(l, "no server has `check`");
            } else {
                self.key(l);
            }
        }
        for l in queue_lines {
            self.no_key(
                l,
                "nothing queues: no server has a maxconn (snirelay has no queue)",
            );
        }
        self.backends.insert(s.name.clone(), (info, tables));
    }

    fn finish(mut self, text: &str, source: &str) -> Translation {
        // Relay timeouts: per listener, from the frontend's client side and
        // the backends its routes use.
        let mut listeners = std::mem::take(&mut self.listeners);
        let fts = std::mem::take(&mut self.frontend_timeouts);
        let source_lines: Vec<&str> = text.lines().collect();
        for (i, (listener, _, routes)) in listeners.iter_mut().enumerate() {
            if routes.is_empty() {
                continue;
            }
            let (client, client_fin) = fts.get(&i).cloned().unwrap_or_default();
            let backends: Vec<String> = routes
                .iter()
                .filter_map(|r| {
                    r.rows
                        .iter()
                        .find(|x| x.0 == "backend")
                        .map(|x| x.1.trim_matches('"').to_owned())
                })
                .collect();
            let mut infos: Vec<BackendInfo> = backends
                .iter()
                .filter_map(|b| self.backends.get(b).map(|x| x.0.clone()))
                .collect();
            if infos.is_empty() {
                infos.push(BackendInfo::default());
            }
            let idle = |info: &BackendInfo| -> Result<(u64, String), String> {
                match (&info.tunnel_ms, &client, &info.server_ms) {
                    (Some((t, tt)), _, _) => Ok((*t, format!("{tt}: replaces timeout client/server while relaying"))),
                    (None, Some((c, ct)), Some((sv, st))) if c == sv => Ok((*c, format!("{ct}, {st}"))),
                    (None, Some((_, ct)), Some((_, st))) => Err(format!("`{ct}` and `{st}` differ: snirelay has one idle timer for both directions (idle_timeout); set timeout tunnel, or choose one")),
                    (None, Some((c, ct)), None) => Ok((*c, format!("{ct} (no timeout server)"))),
                    (None, None, Some((sv, st))) => Ok((*sv, format!("{st} (no timeout client)"))),
                    (None, None, None) => Err("no timeout client, server or tunnel: HAProxy never times out an idle connection; snirelay's idle_timeout defaults to 5m".into()),
                }
            };
            let mut idles = BTreeSet::new();
            let mut idle_row = None;
            let mut idle_problem = None;
            for info in &infos {
                match idle(info) {
                    Ok((ms, why)) => {
                        idles.insert(ms);
                        idle_row.get_or_insert((ms, why));
                    }
                    Err(why) => idle_problem = Some(why),
                }
            }
            let timeout_lines = |word: &str| -> Vec<usize> {
                text.lines()
                    .enumerate()
                    .filter(|(_, l)| {
                        let w = words(l);
                        w.len() >= 2 && w[0] == "timeout" && w[1] == word
                    })
                    .map(|(n, _)| n + 1)
                    .collect()
            };
            if idles.len() > 1 {
                for w in ["server", "tunnel"] {
                    for n in timeout_lines(w) {
                        self.mark_not(n, source_lines[n - 1], "the backends of one frontend have different idle timeouts: the listener takes the first; set each route's idle_timeout by hand");
                    }
                }
            }
            let mut idle_ms = None;
            if let Some(why) = idle_problem {
                let mut any = false;
                for w in ["client", "server"] {
                    for n in timeout_lines(w) {
                        self.mark_not(n, source_lines[n - 1], &why);
                        any = true;
                    }
                }
                if !any {
                    self.notes.push(why);
                }
            } else if let Some((ms, why)) = idle_row {
                listener.row("idle_timeout", quoted(&duration(ms)), why);
                idle_ms = Some(ms);
                for w in ["client", "server", "tunnel"] {
                    for n in timeout_lines(w) {
                        self.mark_key(n, source_lines[n - 1]);
                    }
                }
            }
            // Half-close: client-fin here, server-fin from the backends.
            let server_fins: BTreeSet<Option<u64>> = infos
                .iter()
                .map(|i| i.server_fin_ms.as_ref().map(|x| x.0))
                .collect();
            let server_fin = if server_fins.len() == 1 {
                server_fins.into_iter().next().unwrap()
            } else {
                None
            };
            let sf_text = infos
                .iter()
                .find_map(|i| i.server_fin_ms.as_ref().map(|x| x.1.clone()));
            match (client_fin.as_ref(), server_fin) {
                (Some((c, ct)), Some(sv)) if *c == sv => {
                    listener.row(
                        "half_close_timeout",
                        quoted(&duration(*c)),
                        format!("{ct}, {}", sf_text.unwrap_or_default()),
                    );
                    for w in ["client-fin", "server-fin"] {
                        for n in timeout_lines(w) {
                            self.mark_key(n, source_lines[n - 1]);
                        }
                    }
                }
                (None, None) => {
                    if let Some(ms) = idle_ms {
                        listener.row("half_close_timeout", quoted(&duration(ms)), "no client-fin/server-fin: HAProxy keeps a half-closed connection as long as an open one");
                    }
                }
                _ => {
                    for w in ["client-fin", "server-fin"] {
                        for n in timeout_lines(w) {
                            self.mark_not(n, source_lines[n - 1], "snirelay has one half_close_timeout for whichever side closed first: set client-fin and server-fin alike");
                        }
                    }
                }
            }
        }
        // Anything left unread is reported.
        for (i, raw) in text.lines().enumerate() {
            if !words(raw).is_empty() && !self.ledger.contains_key(&(i + 1)) {
                self.ledger.insert(
                    i + 1,
                    (
                        raw.trim().to_owned(),
                        Outcome::Not(
                            "not read by import-haproxy, or used by nothing it translated".into(),
                        ),
                    ),
                );
            }
        }

        let mut out = String::new();
        let _ = writeln!(
            out,
            "# snirelay configuration translated from {source} by `snirelay import-haproxy`."
        );
        let _ = writeln!(
            out,
            "# Check it with `snirelay check --config FILE` before use."
        );
        let not: Vec<(usize, String, String)> = self
            .ledger
            .iter()
            .filter_map(|(n, (t, o))| match o {
                Outcome::Not(why) => Some((*n, t.clone(), why.clone())),
                _ => None,
            })
            .collect();
        if !not.is_empty() {
            let _ = writeln!(
                out,
                "#\n# NOT TRANSLATED: these lines' meaning is missing below."
            );
            for (n, t, why) in &not {
                let _ = writeln!(out, "#   line {n}: `{t}`: {why}");
            }
        }
        let no_key: Vec<_> = self
            .ledger
            .iter()
            .filter_map(|(n, (t, o))| match o {
                Outcome::NoKey(why) => Some((n, t, why)),
                _ => None,
            })
            .collect();
        if !no_key.is_empty() {
            let _ = writeln!(out, "#\n# No key needed:");
            for (n, t, why) in no_key {
                let _ = writeln!(out, "#   line {n}: `{t}`: {why}");
            }
        }
        if !self.notes.is_empty() {
            let _ = writeln!(out, "#\n# Notes:");
            for note in &self.notes {
                let _ = writeln!(out, "#   {note}");
            }
        }
        out.push('\n');
        let mut tables: Vec<Table> = Vec::new();
        if !self.global.rows.is_empty() {
            tables.push(self.global.clone());
        }
        if let Some(a) = self.admin.take() {
            tables.push(a);
        }
        let several = listeners.len() > 1;
        let mut route_tables = Vec::new();
        for (listener, limits, routes) in listeners {
            let name = listener.rows[0].1.clone();
            tables.push(listener);
            tables.push(limits);
            for mut r in routes {
                if several {
                    r.rows
                        .insert(1, ("listener".into(), name.clone(), String::new()));
                }
                route_tables.push(r);
            }
        }
        tables.extend(route_tables);
        for (_, (_, ts)) in std::mem::take(&mut self.backends) {
            tables.extend(ts);
        }
        for t in &tables {
            let _ = writeln!(out, "{}", t.header);
            for (k, v, c) in &t.rows {
                let kv = format!("{k} = {v}");
                if c.is_empty() {
                    let _ = writeln!(out, "{kv}");
                } else {
                    let _ = writeln!(out, "{kv:<32} # {c}");
                }
            }
            out.push('\n');
        }
        let toml = out.trim_end().to_owned() + "\n";
        Translation {
            toml,
            not_translated: not,
        }
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

/// The lines of a section (or, failing that, its defaults) that start with
/// these words.
fn lines_with<'a>(own: &'a [Line], defaults: Option<&'a Section>, start: &[&str]) -> Vec<&'a Line> {
    let starts = |l: &&Line| start.iter().enumerate().all(|(i, w)| l.word(i) == *w);
    let mine: Vec<&Line> = own.iter().filter(starts).collect();
    if !mine.is_empty() {
        return mine;
    }
    defaults
        .map(|d| d.lines.iter().filter(starts).collect())
        .unwrap_or_default()
}

/// A TOML bare key, or a quoted one.
fn toml_key(name: &str) -> String {
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

/// `bind` addresses: `IP:PORT`, `:PORT` and `*:PORT` (every IPv4 address),
/// `:::PORT` (every IPv6 address, and IPv4 unless v6only), `ipv4@`/`ipv6@`.
fn bind_addresses(text: &str, v6only: bool) -> Option<Vec<String>> {
    let text = text.trim_start_matches("ipv4@");
    let (v6_prefix, text) = match text.strip_prefix("ipv6@") {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (host, port) = text.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    if port == 0 {
        return None;
    }
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match host {
        "" | "*" if !v6_prefix => Some(vec![format!("0.0.0.0:{port}")]),
        "::" | "" => {
            let mut out = vec![format!("[::]:{port}")];
            if !v6only {
                out.insert(0, format!("0.0.0.0:{port}"));
            }
            Some(out)
        }
        h => match h.parse::<IpAddr>().ok()? {
            IpAddr::V4(a) => Some(vec![format!("{a}:{port}")]),
            IpAddr::V6(a) => Some(vec![format!("[{a}]:{port}")]),
        },
    }
}

/// HAProxy's `source ADDR[:PORT[-PORT]] [usesrc client|clientip]` (after
/// the keyword, on a server or a backend): the TOML value of snirelay's
/// `source` (`None`: any address, the default) and how many words it
/// took. `usesrc client` and `usesrc clientip` are `"client"` (snirelay
/// binds the client's port too, as `usesrc client` does); a port range is
/// `ports`, which snirelay applies per destination (HAProxy binds each
/// port once across destinations), and one fixed port, which serves one
/// connection at a time, has no equivalent; `usesrc ADDR`, `hdr_ip` and
/// `interface` are not translated.
fn source_value(words: &[String]) -> Result<(Option<String>, usize), String> {
    let spec = words.first().map_or("", String::as_str);
    let bare = spec.trim_start_matches("ipv4@").trim_start_matches("ipv6@");
    let not_an_address = || format!("`source {spec}` is not an address");
    // As HAProxy reads it: `[IPv6]` or `[IPv6]:PORTS`; otherwise the text
    // after the last colon is the port (`ipv6@2001:db8::9:0` is 2001:db8::9,
    // port 0, and a bare `2001:db8::9` is refused by HAProxy).
    let (host, ports) = match bare.strip_prefix('[') {
        Some(rest) => {
            let (host, after) = rest.split_once(']').ok_or_else(not_an_address)?;
            (host, after.strip_prefix(':').map(str::to_owned))
        }
        None => match bare.rsplit_once(':') {
            Some((host, port)) => (host, Some(port.to_owned())),
            None => (bare, None),
        },
    };
    let ip = host.parse::<IpAddr>().map_err(|_| not_an_address())?;
    let ports = match ports.as_deref() {
        None | Some("0") => None,
        Some(range) => match range.split_once('-') {
            Some((lo, hi)) if lo.parse::<u16>().is_ok() && hi.parse::<u16>().is_ok() => {
                Some(format!("{lo}-{hi}"))
            }
            _ => {
                return Err(format!(
                    "`source {spec}`: one fixed source port has no equivalent (snirelay takes a range, `ports = \"LOW-HIGH\"`)"
                ));
            }
        },
    };
    let mut used = 1;
    let transparent = match words.get(1).map(String::as_str) {
        Some("usesrc") => {
            used = 3;
            match words.get(2).map(String::as_str) {
                Some("client" | "clientip") => true,
                Some(other) => {
                    return Err(format!(
                        "`usesrc {other}` is not translated (snirelay has `source = \"client\"`, HAProxy's `usesrc client`)"
                    ));
                }
                None => return Err("`usesrc` without its argument".to_owned()),
            }
        }
        Some("interface") => {
            return Err(
                "`source … interface` is not translated (snirelay binds addresses, not interfaces)"
                    .to_owned(),
            );
        }
        _ => false,
    };
    if transparent {
        return Ok((Some("\"client\"".to_owned()), used));
    }
    if ip.is_unspecified() && ports.is_none() {
        return Ok((None, used));
    }
    if ip.is_unspecified() {
        return Err(format!(
            "`source {spec}`: a port range on any address has no equivalent (snirelay's `ports` goes with `addresses`)"
        ));
    }
    let ports = ports
        .map(|r| format!(", ports = {}", quoted(&r)))
        .unwrap_or_default();
    Ok((
        Some(format!(
            "{{ addresses = [{}]{ports} }}",
            quoted(&ip.to_string())
        )),
        used,
    ))
}

/// A `server NAME ADDR [options]` line (default-server options first).
fn server(words: &[String]) -> Result<Server, String> {
    let addr = words.get(2).map_or("", String::as_str);
    let bare = addr.trim_start_matches("ipv4@").trim_start_matches("ipv6@");
    let address = match bare.parse::<SocketAddr>() {
        Ok(a) => a.to_string(),
        Err(_) => match bare.rsplit_once(':') {
            Some((h, p))
                if h.parse::<IpAddr>().is_ok() && p.parse::<u16>().is_ok_and(|p| p > 0) =>
            {
                SocketAddr::new(h.parse().unwrap(), p.parse().unwrap()).to_string()
            }
            Some((h, _)) if h.parse::<IpAddr>().is_err() => {
                return Err(format!(
                    "`{addr}` is a host name: use `resolve = \"{bare}\"` in a backend of its own (snirelay follows its DNS answers)"
                ));
            }
            _ => {
                return Err(format!(
                    "`{addr}` is not IP:port (a server without a port, or with a port offset, has no equivalent)"
                ));
            }
        },
    };
    let mut sv = Server {
        address,
        text: words.join(" "),
        ..Server::default()
    };
    let mut i = 3;
    let mut bad = Vec::new();
    let number = |w: Option<&String>| w.and_then(|w| w.parse::<u64>().ok());
    while i < words.len() {
        match words[i].as_str() {
            "check" => sv.check = true,
            "no-check" => sv.check = false,
            "inter" => {
                sv.inter_ms = words.get(i + 1).and_then(|w| millis(w));
                i += 1;
            }
            "rise" => {
                sv.rise = number(words.get(i + 1));
                i += 1;
            }
            "fall" => {
                sv.fall = number(words.get(i + 1));
                i += 1;
            }
            "weight" => {
                sv.weight = number(words.get(i + 1));
                if !sv.weight.is_some_and(|w| (1..=256).contains(&w)) {
                    bad.push("weight (snirelay takes 1 to 256)".to_owned());
                }
                i += 1;
            }
            "source" => {
                let args = &words[i + 1..];
                match source_value(args) {
                    Ok((value, used)) => {
                        sv.source = value;
                        i += used;
                    }
                    Err(why) => {
                        bad.push(why);
                        i = words.len();
                    }
                }
            }
            "send-proxy" => sv.proxy = Some("v1"),
            "send-proxy-v2" => sv.proxy = Some("v2"),
            "no-send-proxy" | "no-send-proxy-v2" => sv.proxy = None,
            other => bad.push(format!("`{other}`")),
        }
        i += 1;
    }
    if sv.inter_ms == Some(0) || sv.rise == Some(0) || sv.fall == Some(0) {
        bad.push("inter, rise and fall must be above 0".into());
    }
    if bad.is_empty() {
        Ok(sv)
    } else {
        Err(format!(
            "server options not translated: {} (backup, maxconn, port, addr, ssl… have no equivalent)",
            bad.join(", ")
        ))
    }
}

/// The routes that make snirelay decide as HAProxy does.
#[derive(Debug, Default)]
struct Routing {
    /// Backend → its patterns, in the order first seen.
    routes: Vec<(String, Vec<String>)>,
    /// Why each route has its names.
    why: BTreeMap<String, String>,
    no_sni: Option<String>,
}

/// The backend snirelay's matcher picks among `routes` for `name`: exact,
/// then the longest suffix, then `*`.
fn snirelay_pick(
    routes: &[(NamePattern, String)],
    default: Option<&String>,
    name: &str,
) -> Option<String> {
    if let Some((_, b)) = routes
        .iter()
        .find(|(p, _)| *p == NamePattern::Exact(name.to_owned()))
    {
        return Some(b.clone());
    }
    routes
        .iter()
        .filter(|(p, _)| matches!(p, NamePattern::Below(_)) && p.matches(name))
        .max_by_key(|(p, _)| match p {
            NamePattern::Below(d) => d.len(),
            NamePattern::Exact(_) => 0,
        })
        .map(|(_, b)| b.clone())
        .or_else(|| default.cloned())
}

fn build_routes(
    patterns: &[NamePattern],
    decide: &dyn Fn(Option<&str>) -> Option<String>,
) -> Result<Routing, String> {
    let exacts: BTreeSet<&str> = patterns
        .iter()
        .filter_map(|p| match p {
            NamePattern::Exact(e) => Some(e.as_str()),
            NamePattern::Below(_) => None,
        })
        .collect();
    let suffixes: Vec<&str> = patterns
        .iter()
        .filter_map(|p| match p {
            NamePattern::Below(d) => Some(d.as_str()),
            NamePattern::Exact(_) => None,
        })
        .collect();
    // A fresh label below each suffix that is no exact name and no suffix.
    let fresh = |d: &str| {
        let mut label = "zz-import".to_owned();
        while exacts.contains(format!("{label}.{d}").as_str())
            || suffixes.contains(&format!("{label}.{d}").as_str())
        {
            label.push('z');
        }
        format!("{label}.{d}")
    };
    let other = "zz-import-other.invalid".to_owned();
    // Representatives, in the order the patterns came.
    let mut samples: Vec<(String, NamePattern)> = Vec::new();
    for p in patterns {
        match p {
            NamePattern::Exact(e) => samples.push((e.clone(), p.clone())),
            NamePattern::Below(d) => {
                samples.push((d.to_owned(), NamePattern::Exact(d.to_owned())));
                samples.push((fresh(d), p.clone()));
            }
        }
    }
    let mut routing = Routing::default();
    let default = decide(Some(&other));
    routing.no_sni = decide(None);
    let mut chosen: Vec<(NamePattern, String)> = Vec::new();
    // Suffixes first (their fresh names), then exact names where the
    // suffixes and default would decide otherwise.
    for (name, p) in &samples {
        if let NamePattern::Below(_) = p {
            if let Some(b) = decide(Some(name)) {
                if !chosen.iter().any(|(q, _)| q == p) {
                    chosen.push((p.clone(), b));
                }
            }
        }
    }
    for (name, p) in &samples {
        if let NamePattern::Exact(_) = p {
            let want = decide(Some(name));
            if let Some(b) = &want {
                let have = snirelay_pick(&chosen, default.as_ref(), name);
                let needed = have.as_ref() != Some(b) || patterns.contains(p);
                if needed && !chosen.iter().any(|(q, _)| q == p) {
                    chosen.push((p.clone(), b.clone()));
                }
            }
        }
    }
    let mut wrong = Vec::new();
    for (name, _) in samples.iter().chain(std::iter::once(&(
        other.clone(),
        NamePattern::Exact(other.clone()),
    ))) {
        let want = decide(Some(name));
        let have = snirelay_pick(&chosen, default.as_ref(), name);
        if want != have {
            wrong.push(format!(
                "`{name}` goes to {} in HAProxy but would go to {} (snirelay picks the most specific name, and cannot refuse a name below an accepted suffix)",
                want.as_deref().map_or("no backend (refused)".to_owned(), |b| format!("`{b}`")),
                have.as_deref().map_or("no backend (refused)".to_owned(), |b| format!("`{b}`")),
            ));
        }
    }
    if !wrong.is_empty() {
        return Err(wrong.join("; "));
    }
    // Order: by the first pattern of each backend, exact before suffix of
    // the same domain.
    let mut order: Vec<(NamePattern, String)> = Vec::new();
    for p in patterns {
        let group: Vec<NamePattern> = match p {
            NamePattern::Below(d) => vec![NamePattern::Exact(d.clone()), p.clone()],
            NamePattern::Exact(_) => vec![p.clone()],
        };
        for q in group {
            if let Some((_, b)) = chosen.iter().find(|(c, _)| *c == q) {
                if !order.iter().any(|(o, _)| *o == q) {
                    order.push((q, b.clone()));
                }
            }
        }
    }
    if let Some(b) = &default {
        order.push((NamePattern::Exact("*".into()), b.clone()));
    }
    for (p, b) in order {
        let text = match &p {
            NamePattern::Exact(e) if e == "*" => "*".to_owned(),
            p => p.as_snirelay(),
        };
        match routing.routes.iter_mut().find(|(rb, _)| *rb == b) {
            Some((_, names)) => names.push(text),
            None => routing.routes.push((b.clone(), vec![text])),
        }
        if default.as_ref() == Some(&b) {
            routing.why.insert(
                b.clone(),
                "names no rule refuses or sends elsewhere reach it (HAProxy's default_backend)"
                    .into(),
            );
        }
    }
    for (b, _) in &routing.routes {
        routing
            .why
            .entry(b.clone())
            .or_insert_with(|| "the names HAProxy's rules accept and send here".into());
    }
    Ok(routing)
}

/// A section's lines with its `defaults` section's lines before them, and
/// the line numbers that are the section's own.
fn with_defaults<'a>(
    s: &'a Section,
    defaults: Option<&'a Section>,
) -> (BTreeSet<usize>, Vec<&'a Line>) {
    let own = s.lines.iter().map(|l| l.no).collect();
    let lines = defaults
        .map(|d| d.lines.iter().collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain(&s.lines)
        .collect();
    (own, lines)
}

#[cfg(test)]
mod tests {
    use crate::cli::haproxy_import::*;
    use crate::config::Config;

    fn load(toml: &str) -> Config {
        Config::from_toml(toml, std::path::Path::new("imported.toml"))
            .unwrap_or_else(|e| panic!("the translation does not load:\n{e}\n{toml}"))
    }

    fn not_lines(t: &Translation) -> Vec<usize> {
        t.not_translated.iter().map(|n| n.0).collect()
    }

    const EDGE: &str = "defaults\n    mode tcp\n    timeout connect 5s\n    timeout client 1m\n    timeout server 1m\n    timeout client-fin 10s\n    timeout server-fin 10s\nfrontend fe\n    bind 127.0.0.1:8443\n    tcp-request inspect-delay 5s\n";
    const BACKEND: &str = "backend be\n    server s 192.0.2.1:443\n";

    fn edge(frontend: &str) -> Translation {
        translate(&format!("{EDGE}{frontend}{BACKEND}"), "t.cfg").unwrap()
    }

    #[test]
    fn words_keep_regex_escapes_and_drop_comments() {
        assert_eq!(
            words(r"acl a req.ssl_sni -m reg -i ^([a-z0-9-]+\.)*example\.com$ # the domain"),
            [
                "acl",
                "a",
                "req.ssl_sni",
                "-m",
                "reg",
                "-i",
                r"^([a-z0-9-]+\.)*example\.com$"
            ]
        );
        assert_eq!(
            words(r#"log-format "a b" c\ d"#),
            ["log-format", "a b", "c d"]
        );
        assert!(words("   # only a comment").is_empty());
    }

    #[test]
    fn times_convert_to_the_largest_exact_unit() {
        assert_eq!(millis("5s"), Some(5000));
        assert_eq!(millis("1500"), Some(1500));
        assert_eq!(millis("10m"), Some(600_000));
        assert_eq!(millis("5x"), None);
        assert_eq!(duration(600_000), "10m");
        assert_eq!(duration(1500), "1500ms");
        assert_eq!(duration(86_400_000), "24h");
    }

    #[test]
    fn label_suffix_regexes_become_a_name_and_its_wildcard() {
        let apex_and_below = vec![
            NamePattern::Exact("example.com".into()),
            NamePattern::Below("example.com".into()),
        ];
        assert_eq!(
            label_suffix_regex(r"^([a-z0-9-]+\.)*example\.com$"),
            Some(apex_and_below.clone())
        );
        assert_eq!(
            label_suffix_regex(r"^(?:[-a-z0-9]+\.)*example\.com$"),
            Some(apex_and_below.clone())
        );
        assert_eq!(
            label_suffix_regex(r"^(?:[a-zA-Z0-9-]+\.)*example\.com$"),
            Some(apex_and_below)
        );
        assert_eq!(
            label_suffix_regex(r"^([a-z0-9-]+\.)+example\.com$"),
            Some(vec![NamePattern::Below("example.com".into())])
        );
        assert_eq!(
            label_suffix_regex(r"^example\.com$"),
            Some(vec![NamePattern::Exact("example.com".into())])
        );
        // Unescaped dots match any character: not a name.
        assert_eq!(label_suffix_regex(r"^([a-z0-9-]+\.)*example.com$"), None);
        assert_eq!(label_suffix_regex(r"^(.+\.)?example\.com$"), None);
        assert_eq!(
            label_suffix_regex(r"([a-z0-9-]+\.)*example\.com$"),
            None,
            "unanchored"
        );
    }

    #[test]
    fn only_suffix_matches_on_label_boundaries_are_translated() {
        let w = |s: &str| words(s);
        assert_eq!(
            sni_atom(&w("req.ssl_sni -i -m end .example.com")),
            Ok(Atom::Sni(vec![NamePattern::Below("example.com".into())]))
        );
        assert_eq!(
            sni_atom(&w("req_ssl_sni -i www.example.com api.example.com")),
            Ok(Atom::Sni(vec![
                NamePattern::Exact("www.example.com".into()),
                NamePattern::Exact("api.example.com".into())
            ]))
        );
        let dom = sni_atom(&w("req.ssl_sni -m dom example.com")).unwrap_err();
        assert!(dom.contains("example.com.evil.net"), "{dom}");
        let end = sni_atom(&w("req.ssl_sni -m end example.com")).unwrap_err();
        assert!(end.contains("badexample.com"), "{end}");
        assert!(sni_atom(&w("req.ssl_sni -m beg www.")).is_err());
        assert!(sni_atom(&w("req.ssl_sni -f /etc/haproxy/sites.lst")).is_err());
        assert!(
            sni_atom(&w("req.ssl_sni WWW.example.com")).is_err(),
            "case-sensitive without -i"
        );
    }

    #[test]
    fn the_seed_template_translates_completely() {
        let text = include_str!("../../tests/data/haproxy/tls-edge-failover.cfg");
        let t = translate(text, "tls-edge-failover.cfg").unwrap();
        assert_eq!(t.not_translated, Vec::new(), "{}", t.toml);
        let config = load(&t.toml);
        assert_eq!(config.global.max_connections, 2048);
        let l = config.listener("home_https").unwrap();
        assert_eq!(l.limits.connections_per_source.map(|n| n.get()), Some(100));
        let rate = l.limits.rate_per_source.unwrap();
        assert_eq!((rate.per_second.get(), rate.burst.get()), (30, 30));
        assert_eq!(l.half_close_timeout, std::time::Duration::from_secs(15));
        // Every line of the template is accounted for in a comment.
        for (no, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || ["global", "defaults"].contains(&line) {
                continue;
            }
            // Named by what they are: the rules by the route they became.
            if line.starts_with("tcp-request connection track-sc0") {
                assert!(t.toml.contains("track-sc0 src;"));
                continue;
            }
            if line.starts_with("tcp-request content") || line.starts_with("acl allowed_sni") {
                assert!(
                    t.toml
                        .contains("sni = [\"example.com\", \"*.example.com\"]")
                );
                continue;
            }
            assert!(
                t.toml.contains(line) || t.toml.contains(&format!("line {}:", no + 1)),
                "line {} `{line}` is not named in:\n{}",
                no + 1,
                t.toml
            );
        }
    }

    #[test]
    fn conn_rate_periods_become_a_rate_per_second_with_the_count_as_burst() {
        let t = edge(
            "    stick-table type ip size 1m expire 1m store conn_cur,conn_rate(10s)\n    tcp-request connection track-sc0 src\n    tcp-request connection reject if { sc0_conn_rate gt 60 }\n    tcp-request connection reject if { sc0_conn_cur ge 21 }\n    default_backend be\n",
        );
        assert_eq!(not_lines(&t), Vec::<usize>::new(), "{}", t.toml);
        let config = load(&t.toml);
        let limits = &config.listener("fe").unwrap().limits;
        let rate = limits.rate_per_source.unwrap();
        assert_eq!((rate.per_second.get(), rate.burst.get()), (6, 60));
        assert_eq!(
            limits.connections_per_source.map(|n| n.get()),
            Some(20),
            "ge 21: 20 allowed"
        );
        assert!(limits.rate_counts_refused);
        // 25 per 10 s is 2.5 per second: not expressible, so reported.
        let t = edge(
            "    stick-table type ip size 1m expire 1m store conn_rate(10s)\n    tcp-request connection track-sc0 src\n    tcp-request connection reject if { sc0_conn_rate gt 25 }\n    default_backend be\n",
        );
        assert_eq!(not_lines(&t), vec![13], "{}", t.toml);
        assert!(
            t.not_translated[0].2.contains("not a whole number"),
            "{:?}",
            t.not_translated
        );
    }

    #[test]
    fn without_a_per_source_limit_the_default_limit_is_turned_off() {
        let t = edge("    default_backend be\n");
        let config = load(&t.toml);
        assert_eq!(
            config.listener("fe").unwrap().limits.connections_per_source,
            None
        );
    }

    #[test]
    fn a_refused_name_below_an_accepted_suffix_is_reported_not_approximated() {
        let t = edge(
            "    tcp-request content reject if { req.ssl_sni -i admin.example.com }\n    tcp-request content accept if { req.ssl_sni -m end .example.com }\n    tcp-request content reject\n    default_backend be\n",
        );
        let not = not_lines(&t);
        for line in 11..=14 {
            assert!(
                not.contains(&line),
                "line {line} should be reported: {}",
                t.toml
            );
        }
        let why = &t.not_translated.iter().find(|n| n.0 == 11).unwrap().2;
        assert!(
            why.contains("`admin.example.com` goes to no backend (refused) in HAProxy"),
            "{why}"
        );
    }

    #[test]
    fn use_backend_rules_become_routes_with_the_default_as_star() {
        let t = translate(
            &format!("{EDGE}    tcp-request content accept if {{ req.ssl_hello_type 1 }}\n    use_backend api if {{ req.ssl_sni -i api.example.com }}\n    default_backend be\nbackend api\n    server a 192.0.2.2:443 send-proxy\n{BACKEND}"),
            "t.cfg",
        )
        .unwrap();
        assert_eq!(not_lines(&t), Vec::<usize>::new(), "{}", t.toml);
        let config = load(&t.toml);
        let l = config.listener("fe").unwrap();
        let sni = |s: &str| crate::wire::sni::Sni::parse(s.as_bytes()).unwrap();
        let backend_of = |s: &str| {
            l.routes[l.matcher.find(&sni(s)).unwrap()[0]]
                .backend
                .name
                .clone()
        };
        assert_eq!(backend_of("api.example.com"), "api");
        assert_eq!(backend_of("www.example.com"), "be");
        assert!(t.toml.contains("no_sni = \"be\""), "{}", t.toml);
        assert!(t.toml.contains("proxy_protocol = \"v1\""), "{}", t.toml);
    }

    #[test]
    fn source_on_a_backend_and_a_server_becomes_source_and_usesrc_client() {
        let t = translate(
            &format!(
                "{EDGE}    tcp-request content accept if {{ req.ssl_hello_type 1 }}\n    \
                 use_backend legacy if {{ req.ssl_sni -i legacy.example.com }}\n    \
                 use_backend plain if {{ req.ssl_sni -i plain.example.com }}\n    \
                 default_backend be\nbackend be\n    source 192.0.2.10\n    \
                 server s 192.0.2.1:443\n    server t 192.0.2.2:443 source 192.0.2.11:1024-65535\n    \
                 server u [2001:db8::1]:443 source ipv6@2001:db8::9:0\n\
                 backend legacy\n    source 0.0.0.0 usesrc clientip\n    server l 192.0.2.3:443\n\
                 backend plain\n    source 0.0.0.0\n    server p 192.0.2.4:443\n"
            ),
            "t.cfg",
        )
        .unwrap();
        assert_eq!(not_lines(&t), Vec::<usize>::new(), "{}", t.toml);
        let config = load(&t.toml);
        let source = |b: &str| format!("{:?}", config.backends[b].egress);
        assert!(
            t.toml.contains("source = { addresses = [\"192.0.2.10\"] }"),
            "{}",
            t.toml
        );
        assert!(
            t.toml.contains(
                "{ address = \"192.0.2.2:443\", source = { addresses = [\"192.0.2.11\"], ports = \"1024-65535\" } }"
            ),
            "{}",
            t.toml
        );
        assert!(
            t.toml
                .contains("source = { addresses = [\"2001:db8::9\"] }"),
            "{}",
            t.toml
        );
        assert!(source("legacy").contains("Client"), "{}", source("legacy"));
        assert!(source("plain").contains("Host"), "{}", source("plain"));
        // What has no equivalent is reported, not approximated.
        for (line, why) in [
            ("source 192.0.2.10:1024", "one fixed source port"),
            ("source 192.0.2.10 usesrc 192.0.2.99", "usesrc 192.0.2.99"),
            ("source 192.0.2.10 interface eth0", "interface"),
        ] {
            let t = translate(
                &format!("{EDGE}    default_backend be\nbackend be\n    {line}\n    server s 192.0.2.1:443\n"),
                "t.cfg",
            )
            .unwrap();
            let reported = t.not_translated.iter().find(|n| n.1.contains(line));
            assert!(
                reported.is_some_and(|n| n.2.contains(why)),
                "{line}: {:?}",
                t.not_translated
            );
        }
    }

    #[test]
    fn http_mode_and_empty_files_have_nothing_to_translate() {
        assert_eq!(
            translate("defaults\n    mode http\nfrontend f\n    bind :80\n", "x").unwrap_err(),
            ImportError::NoTcpFrontend
        );
        assert_eq!(translate("", "x").unwrap_err(), ImportError::NoTcpFrontend);
    }

    #[test]
    fn differing_client_and_server_timeouts_are_reported() {
        let t = translate(
            "defaults\n    mode tcp\n    timeout client 30s\n    timeout server 60s\nfrontend fe\n    bind 127.0.0.1:1\n    tcp-request inspect-delay 5s\n    default_backend be\nbackend be\n    server s 192.0.2.1:443\n",
            "t.cfg",
        )
        .unwrap();
        assert_eq!(not_lines(&t), vec![3, 4], "{}", t.toml);
        // With timeout tunnel, HAProxy uses it while relaying: translated.
        let t = translate(
            "defaults\n    mode tcp\n    timeout connect 5s\n    timeout client 30s\n    timeout server 60s\n    timeout tunnel 1h\nfrontend fe\n    bind 127.0.0.1:1\n    tcp-request inspect-delay 5s\n    default_backend be\nbackend be\n    server s 192.0.2.1:443\n",
            "t.cfg",
        )
        .unwrap();
        assert_eq!(not_lines(&t), Vec::<usize>::new(), "{}", t.toml);
        assert_eq!(
            load(&t.toml).listener("fe").unwrap().idle_timeout,
            std::time::Duration::from_secs(3600)
        );
    }

    #[test]
    fn a_listen_section_is_a_listener_and_its_backend() {
        let t = translate(
            "global\n    nbthread 2\ndefaults\n    mode tcp\n    timeout connect 2s\n    timeout client 30s\n    timeout server 30s\nlisten tls\n    bind :::443\n    tcp-request inspect-delay 2s\n    tcp-request content reject unless { req.ssl_sni -i -m end .example.net }\n    balance leastconn\n    default-server check inter 3s\n    server a 192.0.2.1:443 weight 3\n    server b [2001:db8::1]:443\n",
            "t.cfg",
        )
        .unwrap();
        assert_eq!(not_lines(&t), Vec::<usize>::new(), "{}", t.toml);
        let config = load(&t.toml);
        assert_eq!(config.global.threads, 2);
        let l = config.listener("tls").unwrap();
        assert_eq!(l.listen.len(), 2, "IPv4 and IPv6: {:?}", l.listen);
        let backend = &l.routes[0].backend;
        assert_eq!(backend.name, "tls");
        assert_eq!(backend.policy.as_str(), "least_connections");
        assert_eq!(backend.members[0].weight, 3);
        assert_eq!(
            backend.health.as_ref().unwrap().interval,
            std::time::Duration::from_secs(3)
        );
        assert!(t.toml.contains("sni = [\"*.example.net\"]"), "{}", t.toml);
    }

    /// Every line of the fixtures, cut after each of its words, in the
    /// seed's frontend and backend: the translator answers, never panics.
    #[test]
    fn truncated_lines_never_panic() {
        let seed = include_str!("../../tests/data/haproxy/tls-edge-failover.cfg");
        let all = [
            seed,
            include_str!("../../tests/data/haproxy/documentation-sni-routing.cfg"),
            include_str!("../../tests/data/haproxy/unsupported.cfg"),
        ]
        .concat();
        let mut tried = 0;
        for line in all.lines() {
            let w = words(line);
            for n in 1..=w.len() {
                let cut = w[..n].join(" ");
                for at in ["default_backend home_npm", "server home 203.0.113.10:443"] {
                    let text = seed.replace(at, &format!("{at}\n    {cut}"));
                    let _ = translate(&text, "cut.cfg");
                    tried += 1;
                }
            }
        }
        assert!(tried > 500, "{tried}");
    }
}
