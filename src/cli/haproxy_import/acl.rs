//! ACLs and rule conditions over the ClientHello: the SNI patterns a
//! condition means (exact names and `*.suffix`), and a guard evaluated
//! for one name as HAProxy evaluates it. Conditions on anything else
//! (other fetches) are refused with why; conditions on the source, its
//! counters and `nbsrv` are read for the connection rules and `monitor`
//! (evaluated by their readers). Turning
//! guards into routes is [`super::routes`]' job.

use std::collections::{BTreeMap, BTreeSet};

use crate::wire::cidr::{Cidr, CidrError};

/// A name an SNI condition can match: exact, or every name below a suffix.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum NamePattern {
    Exact(String),
    Below(String),
}

impl NamePattern {
    pub(super) fn matches(&self, name: &str) -> bool {
        match self {
            NamePattern::Exact(e) => name == e,
            NamePattern::Below(d) => name.len() > d.len() + 1 && name.ends_with(&format!(".{d}")),
        }
    }

    pub(super) fn as_snirelay(&self) -> String {
        match self {
            NamePattern::Exact(e) => e.clone(),
            NamePattern::Below(d) => format!("*.{d}"),
        }
    }
}

/// How an SNI test compares the client's spelling: the route keys
/// `case_sensitive_names` and `ldh_names` of the routes its names make.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Spelling {
    /// No `-i` (or a map looked up without `,lower`): the labels the
    /// pattern names must be in lower case, as written.
    pub(super) cased: bool,
    /// A regex whose label class has no `_`.
    pub(super) ldh: bool,
}

/// What one ACL test means for a ClientHello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Atom {
    /// `req.ssl_hello_type 1`: true for every ClientHello.
    Hello,
    /// `WAIT_END`: false while the hello arrives in time.
    WaitEnd,
    Constant(bool),
    /// The SNI is one of these names (false without SNI), spelled as the
    /// test requires.
    Sni(Vec<NamePattern>, Spelling),
    /// The hello has an SNI (what a map lookup needs to run at all).
    AnySni,
    /// `src`: the source address is in one of these networks or in the
    /// networks listed by one of these pattern files (`-f`; read by the
    /// frontend, which may read files).
    Src {
        nets: Vec<Cidr>,
        files: Vec<String>,
    },
    /// `FETCH gt|ge N` on a per-source counter (`sc0_conn_cur`,
    /// `src_conn_rate`, …): true past `allowed`.
    Over {
        fetch: String,
        allowed: u64,
    },
    /// `nbsrv(BACKEND) lt 1` (`eq 0`, `le 0`): the backend has no usable
    /// server; with `false`, `nbsrv(BACKEND) ge 1` (`gt 0`): it has one.
    NoServer {
        backend: String,
        none: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Term {
    pub(super) negated: bool,
    pub(super) atom: Atom,
}

/// OR of ANDs.
pub(super) type Condition = Vec<Vec<Term>>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Guard {
    Always,
    If(Condition),
    Unless(Condition),
}

impl Guard {
    /// Whether the guard holds for a complete ClientHello naming `name`
    /// (`hello`), or for bytes that are no ClientHello once the inspect
    /// delay has ended (`!hello`: no SNI, `WAIT_END` true).
    pub(super) fn holds(&self, hello: bool, name: Option<&str>) -> bool {
        self.holds_by(&|atom| match atom {
            Atom::Hello => hello,
            Atom::WaitEnd => !hello,
            Atom::Constant(b) => *b,
            Atom::Sni(set, _) => name.is_some_and(|n| set.iter().any(|p| p.matches(n))),
            Atom::AnySni => name.is_some(),
            // Not about the hello: the frontend refuses such guards on
            // content and use_backend rules.
            Atom::Src { .. } | Atom::Over { .. } | Atom::NoServer { .. } => false,
        })
    }

    /// Whether the guard holds when each atom is what `value` says.
    pub(super) fn holds_by(&self, value: &dyn Fn(&Atom) -> bool) -> bool {
        let eval = |c: &Condition| {
            c.iter()
                .any(|all| all.iter().all(|t| value(&t.atom) != t.negated))
        };
        match self {
            Guard::Always => true,
            Guard::If(c) => eval(c),
            Guard::Unless(c) => !eval(c),
        }
    }

    /// Every atom of the guard, for rewriting (pattern files read in).
    pub(super) fn atoms_mut(&mut self) -> impl Iterator<Item = &mut Atom> {
        match self {
            Guard::Always => None,
            Guard::If(c) | Guard::Unless(c) => Some(c.iter_mut().flatten().map(|t| &mut t.atom)),
        }
        .into_iter()
        .flatten()
    }

    /// Whether every atom is about the ClientHello (the hello, its SNI,
    /// WAIT_END, constants): what content and use_backend rules evaluate.
    pub(super) fn on_hello(&self) -> bool {
        self.terms().all(|t| {
            matches!(
                t.atom,
                Atom::Hello | Atom::WaitEnd | Atom::Constant(_) | Atom::Sni(..) | Atom::AnySni
            )
        })
    }

    fn terms(&self) -> impl Iterator<Item = &Term> {
        match self {
            Guard::Always => None,
            Guard::If(c) | Guard::Unless(c) => Some(c.iter().flatten()),
        }
        .into_iter()
        .flatten()
    }

    pub(super) fn patterns(&self) -> Vec<NamePattern> {
        self.spelled_patterns()
            .into_iter()
            .map(|(p, _)| p)
            .collect()
    }

    /// The SNI patterns, each with the spelling its test requires.
    pub(super) fn spelled_patterns(&self) -> Vec<(NamePattern, Spelling)> {
        let c = match self {
            Guard::Always => return Vec::new(),
            Guard::If(c) | Guard::Unless(c) => c,
        };
        c.iter()
            .flatten()
            .filter_map(|t| match &t.atom {
                Atom::Sni(set, spelling) => Some(
                    set.iter()
                        .map(|p| (p.clone(), *spelling))
                        .collect::<Vec<_>>(),
                ),
                _ => None,
            })
            .flatten()
            .collect()
    }
}

/// A label character class of a label-suffix regex: letters, digits and
/// `-` (optionally `_`), in any order and case forms.
pub(super) fn is_label_class(class: &str) -> bool {
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
pub(super) fn escaped_domain(text: &str) -> Option<String> {
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
pub(super) fn label_suffix_regex(re: &str) -> Option<Vec<NamePattern>> {
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
pub(super) fn sni_atom(words: &[String]) -> Result<Atom, String> {
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
            // Without `-i`, a class without `A-Z` refuses capitals in the
            // labels `*.` stands for too, which no route key says.
            "reg" if !ignore_case && !v.contains("A-Z") && v.contains('[') => {
                return Err(format!(
                    "the regex `{v}` without `-i` refuses capitals in every label; snirelay's `case_sensitive_names` looks only at the labels the pattern names: add `-i`, or `A-Z` to the class"
                ));
            }
            "reg" => match label_suffix_regex(if ignore_case { &lower } else { v }) {
                Some(set) => names.extend(set),
                None => {
                    return Err(format!(
                        "the regex `{v}` is not a label-suffix pattern such as `^([a-z0-9-]+\\.)*example\\.com$`"
                    ));
                }
            },
            // HAProxy's `dom` finds the value as whole labels anywhere in
            // the name (`example.com.other.net` too); the names a
            // certificate of the domain covers are the name and those
            // below it, which is what this means. The frontend notes the
            // difference (docs/migrating-from-haproxy.md, `dom-inner-labels`).
            "dom" => match escaped_domain(&lower.trim_matches('.').replace('.', "\\.")) {
                Some(d) => {
                    names.push(NamePattern::Exact(d.clone()));
                    names.push(NamePattern::Below(d));
                }
                None => return Err(format!("`{v}` is not a host name")),
            },
            other => {
                return Err(format!(
                    "the match method `-m {other}` has no snirelay equivalent (only exact names and `*.suffix`)"
                ));
            }
        }
    }
    let ldh = method == "reg" && values.iter().all(|v| !v.contains('_'));
    Ok(Atom::Sni(
        names,
        Spelling {
            cased: !ignore_case,
            ldh,
        },
    ))
}

/// Reads an ACL's criterion (`FETCH [flags] VALUES…`).
pub(super) fn atom(words: &[String]) -> Result<Atom, String> {
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
        "src" => src_atom(words),
        f if counter_fetch(f) => over_atom(words),
        f if f.starts_with("nbsrv(") => no_server_atom(words),
        "ssl_fc_sni" | "ssl_fc_sni_end" | "ssl_fc_sni_reg" => Err(format!(
            "`{fetch}` is the SNI of a TLS connection HAProxy terminates; snirelay never terminates TLS"
        )),
        other => Err(format!(
            "conditions on `{other}` are not translated (only the ClientHello and its SNI)"
        )),
    }
}

/// `src [-f FILE]… [NETWORK…]`: the networks, and the files to read.
fn src_atom(words: &[String]) -> Result<Atom, String> {
    let mut nets = Vec::new();
    let mut files = Vec::new();
    let mut i = 1;
    while i < words.len() {
        match words[i].as_str() {
            "-f" => {
                let file = words.get(i + 1).ok_or("`-f` without its file")?;
                files.push(file.clone());
                i += 1;
            }
            "-n" | "--" => {}
            flag if flag.starts_with('-') => {
                return Err(format!("the flag `{flag}` on `src` is not read"));
            }
            net => nets.push(network(net)?),
        }
        i += 1;
    }
    if nets.is_empty() && files.is_empty() {
        return Err("`src` without a network".into());
    }
    Ok(Atom::Src { nets, files })
}

/// One network of a `src` pattern as HAProxy reads it: `ADDR`,
/// `ADDR/BITS`, `ADDR/MASK` (dotted), host bits cleared.
pub(super) fn network(text: &str) -> Result<Cidr, String> {
    let bad = || format!("`{text}` is not an IP address or network");
    let text = match text.split_once('/') {
        Some((addr, mask)) if mask.contains('.') => {
            let mask: std::net::Ipv4Addr = mask.parse().map_err(|_| bad())?;
            let bits = u32::from(mask);
            if bits.leading_ones() + bits.trailing_zeros() != 32 {
                return Err(format!("`{text}`: the mask is not contiguous"));
            }
            format!("{addr}/{}", bits.leading_ones())
        }
        _ => text.to_owned(),
    };
    match text.parse::<Cidr>() {
        Ok(c) => Ok(c),
        Err(CidrError::HostBits(c)) => Ok(c),
        Err(_) => Err(bad()),
    }
}

/// The per-source counters a connection limit is read from.
fn counter_fetch(fetch: &str) -> bool {
    matches!(
        fetch,
        "sc0_conn_cur"
            | "sc1_conn_cur"
            | "sc2_conn_cur"
            | "src_conn_cur"
            | "sc0_conn_rate"
            | "sc1_conn_rate"
            | "sc2_conn_rate"
            | "src_conn_rate"
    )
}

/// `FETCH gt N` (`ge N`: N − 1 allowed) on a per-source counter.
fn over_atom(words: &[String]) -> Result<Atom, String> {
    let fetch = words[0].clone();
    let n = |w: &String| {
        w.parse::<u64>()
            .map_err(|_| format!("`{w}` is not a number"))
    };
    let allowed = match &words[1..] {
        [op, v] if op == "gt" => n(v)?,
        [op, v] if op == "ge" => n(v)?.saturating_sub(1),
        _ => return Err(format!("only `{fetch} gt N` and `{fetch} ge N` are read")),
    };
    Ok(Atom::Over { fetch, allowed })
}

/// `nbsrv(BACKEND) lt 1` and its equivalents.
fn no_server_atom(words: &[String]) -> Result<Atom, String> {
    let backend = words[0]
        .strip_prefix("nbsrv(")
        .and_then(|b| b.strip_suffix(')'))
        .filter(|b| !b.is_empty())
        .ok_or("`nbsrv` without a backend is not read")?
        .to_owned();
    let rest: Vec<&str> = words[1..].iter().map(String::as_str).collect();
    let none = match rest.as_slice() {
        ["lt", "1"] | ["eq", "0"] | ["le", "0"] => true,
        ["ge", "1"] | ["gt", "0"] => false,
        _ => {
            return Err(format!(
                "`nbsrv({backend}) {}`: snirelay's readiness tells a backend with no usable address from one with some, no other count",
                rest.join(" ")
            ));
        }
    };
    Ok(Atom::NoServer { backend, none })
}

/// Reads `COND` (after `if`/`unless`): terms, `!`, `or`/`||`, `{ … }`.
pub(super) fn condition(
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
            many => Term {
                negated,
                atom: merged(many)
                    .ok_or_else(|| format!("the ACL `{w}` mixes tests over several lines"))?,
            },
        };
        groups.last_mut().unwrap().push(term);
        i += 1;
    }
    if groups.iter().any(Vec::is_empty) {
        return Err("an empty condition".into());
    }
    Ok(groups)
}

/// The OR of an ACL's lines, when they test the same thing.
fn merged(atoms: &[Atom]) -> Option<Atom> {
    let mut names = Vec::new();
    let mut spellings = BTreeSet::new();
    let mut all_nets = Vec::new();
    let mut all_files = Vec::new();
    for a in atoms {
        match a {
            Atom::Sni(set, spelling) => {
                names.extend(set.iter().cloned());
                spellings.insert(*spelling);
            }
            Atom::Src { nets, files } => {
                all_nets.extend(nets.iter().copied());
                all_files.extend(files.iter().cloned());
            }
            _ => return None,
        }
    }
    match (
        names.is_empty(),
        all_nets.is_empty() && all_files.is_empty(),
    ) {
        (false, true) if spellings.len() == 1 => {
            Some(Atom::Sni(names, spellings.into_iter().next().unwrap()))
        }
        (true, false) => Some(Atom::Src {
            nets: all_nets,
            files: all_files,
        }),
        _ => None,
    }
}

/// `[if|unless COND]` at the end of a rule's words.
pub(super) fn guard(
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
