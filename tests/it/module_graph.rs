//! The module graph of `src/` has no import cycle: no two top-level modules
//! depend on each other, directly or through others, and neither do two
//! submodules of one folder (`pump::relay` and `pump::splice`, say).
//!
//! The graph is read from the source text, the way a reader sees it: every
//! `crate::…` path (in `use` lines or inline, `crate::{a, b::c}` groups
//! included) and every `super::…` path is an edge from the file it is in to
//! the deepest module it names. Comments, string and character literals and
//! `#[cfg(test)]` items are skipped first: a doc comment that says "see
//! `crate::relay`" is no dependency, and tests may reach anywhere. A
//! folder's `mod.rs` is its facade, so the graph between one folder's
//! submodules leaves it out. `main.rs` is the binary, another crate.
//!
//! A cycle is reported by name with the file and path that make each edge,
//! e.g. `pump -> close (src/pump/relay.rs: crate::close::CloseReason)`.
//!
//! Top-level modules also sit in layers ([`LAYERS`], docs/design.md
//! "Structure"): an import may go to its own layer or a lower one, never
//! up; [`KNOWN_UPWARD`] lists the imports that still go up, and shrinks.
//!
//! [`KNOWN`] lists the edges of the cycles that were in `src/` before this
//! check existed and are not broken yet; they are left out of the graph, and
//! each must still exist (the test fails when one is gone, so the list can
//! only shrink).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Edges that close cycles still present in `src/`, each with what it is
/// waiting for. Do not add to this list: break the cycle instead.
const KNOWN: &[(&str, &str)] = &[];

type Module = Vec<String>;

/// An edge `from → to` and the first place that makes it.
type Edges = BTreeMap<(String, String), String>;

#[test]
fn src_has_no_import_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = read_modules(&root);
    let graph = Graph::of(&files);

    let mut problems = Vec::new();
    for &(from, to) in KNOWN {
        if !graph.top.contains_key(&(from.to_string(), to.to_string())) {
            problems.push(format!(
                "known edge {from} -> {to} is gone: remove it from KNOWN"
            ));
        }
    }
    let mut top = graph.top.clone();
    for &(from, to) in KNOWN {
        top.remove(&(from.to_string(), to.to_string()));
    }
    problems.extend(
        cycles(&top)
            .iter()
            .map(|c| describe("top-level modules", c, &top)),
    );
    for (folder, edges) in &graph.folders {
        problems.extend(
            cycles(edges)
                .iter()
                .map(|c| describe(&format!("submodules of {folder}"), c, edges)),
        );
    }
    assert!(
        problems.is_empty(),
        "import cycles in src/:\n{}",
        problems.join("\n")
    );
    // The check sees the graph at all: the byte pump's one-way layering.
    assert!(graph.folders["pump"].contains_key(&("relay".into(), "splice".into())));
    assert!(graph.folders["pump"].contains_key(&("splice".into(), "ready".into())));
    assert!(graph.top.contains_key(&("tcp".into(), "pump".into())));
}

/// The modules the configuration may reach, directly or through others:
/// pure helpers (`wire`: networks, names and patterns, the SNI matcher;
/// the system's CA store). The validated settings are plain data
/// in `config::settings`; the runtime (`backend`, `pump`, `admission`, `proxy`,
/// `sockopt`, ...) imports them from `config`, never the reverse.
const CONFIG_MAY_REACH: &[&str] = &["system_roots", "wire"];

#[test]
fn config_imports_no_runtime_module() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = Graph::of(&read_modules(&root));
    let mut reached = BTreeSet::from(["config".to_owned()]);
    let mut queue = vec!["config".to_owned()];
    while let Some(from) = queue.pop() {
        for (edge_from, to) in graph.top.keys() {
            if *edge_from == from && reached.insert(to.clone()) {
                queue.push(to.clone());
            }
        }
    }
    reached.remove("config");
    let runtime: Vec<String> = reached
        .iter()
        .filter(|m| !CONFIG_MAY_REACH.contains(&m.as_str()))
        .map(|m| {
            let path = graph
                .top
                .iter()
                .find(|((from, to), _)| to == m && (reached.contains(from) || from == "config"))
                .map_or("", |(_, at)| at.as_str());
            format!("{m} ({path})")
        })
        .collect();
    assert!(
        runtime.is_empty(),
        "config reaches runtime modules: {runtime:?}"
    );
    // The check sees the graph at all: the runtime reads its settings here.
    assert!(
        graph
            .top
            .contains_key(&("admission".into(), "config".into()))
    );
}

fn describe(scope: &str, (members, cycle): &(Vec<String>, Vec<String>), edges: &Edges) -> String {
    let mut steps = Vec::new();
    for (i, from) in cycle.iter().enumerate() {
        let to = &cycle[(i + 1) % cycle.len()];
        let at = &edges[&(from.clone(), to.clone())];
        steps.push(format!("  {from} -> {to} ({at})"));
    }
    format!(
        "cycle between {scope} (all of {} reach each other), for one:\n{}",
        members.join(", "),
        steps.join("\n")
    )
}

/// Every `.rs` file under `root` but the crate roots, with its module path
/// and its text reduced to code.
fn read_modules(root: &Path) -> Vec<(Module, PathBuf, String)> {
    let mut files = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(root).unwrap().with_extension("");
            let mut module: Module = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if module.last().is_some_and(|m| m == "mod") {
                module.pop();
            }
            if module == ["lib"] || module == ["main"] {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            files.push((module, path, without_tests(&code_only(&text))));
        }
    }
    files.sort();
    files
}

struct Graph {
    /// Between top-level modules (a folder is one).
    top: Edges,
    /// Between the submodules of each folder, by folder.
    folders: BTreeMap<String, Edges>,
}

impl Graph {
    fn of(files: &[(Module, PathBuf, String)]) -> Graph {
        let known: BTreeSet<Module> = files.iter().map(|(m, ..)| m.clone()).collect();
        let mut graph = Graph {
            top: Edges::new(),
            folders: BTreeMap::new(),
        };
        for (module, path, code) in files {
            let is_mod_rs = path.file_name().is_some_and(|n| n == "mod.rs");
            let shown = path
                .strip_prefix(Path::new(env!("CARGO_MANIFEST_DIR")))
                .unwrap()
                .display()
                .to_string();
            for (target, text) in references(module, code) {
                let Some(to) = deepest(&known, &target) else {
                    continue;
                };
                let at = format!("{shown}: {text}");
                if module[0] != to[0] {
                    graph
                        .top
                        .entry((module[0].clone(), to[0].clone()))
                        .or_insert(at.clone());
                }
                // Siblings in one folder, the folder's facade left out.
                let parent = &module[..module.len() - 1];
                if !is_mod_rs
                    && !parent.is_empty()
                    && to.len() == module.len()
                    && to[..to.len() - 1] == *parent
                    && to != *module
                {
                    graph
                        .folders
                        .entry(parent.join("::"))
                        .or_default()
                        .entry((module.last().unwrap().clone(), to.last().unwrap().clone()))
                        .or_insert(at);
                }
            }
        }
        graph
    }
}

/// The longest prefix of `path` that is a module.
fn deepest(known: &BTreeSet<Module>, path: &[String]) -> Option<Module> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|m| known.contains(m))
}

/// Every `crate::…` and `super::…` path in `code`, as segments from the
/// crate root (groups expanded), with the text that named it.
fn references(module: &[String], code: &str) -> Vec<(Vec<String>, String)> {
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let boundary = i == 0 || !is_ident(bytes[i - 1]) && bytes[i - 1] != b':';
        let base_is_super = boundary && code[i..].starts_with("super::");
        let base: Option<Vec<String>> = if !boundary {
            None
        } else if code[i..].starts_with("crate::") {
            i += "crate::".len();
            Some(Vec::new())
        } else if code[i..].starts_with("super::") {
            // `super` of `a::b` (in a/b.rs) is `a`; of `a` (in a/mod.rs or
            // a.rs) it is the root.
            let mut base = module.to_vec();
            base.pop();
            i += "super::".len();
            Some(base)
        } else {
            None
        };
        let Some(base) = base else {
            i += 1;
            continue;
        };
        let at = i - if base_is_super {
            "super::".len()
        } else {
            "crate::".len()
        };
        let start = i;
        let mut paths = Vec::new();
        i = tree(bytes, i, base, &mut paths);
        let text = format!(
            "{}{}",
            &code[at..start],
            code[start..i].split_whitespace().collect::<String>()
        );
        for path in paths {
            found.push((path, text.clone()));
        }
    }
    found
}

/// Reads a use-tree at `i` (`a::b`, `a::{b, c::d}`, `a::*`), pushing every
/// path it names under `prefix`; returns where it ends.
fn tree(bytes: &[u8], mut i: usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix;
    loop {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if i < bytes.len() && bytes[i] == b'{' {
            i += 1;
            loop {
                while i < bytes.len() && (bytes[i].is_ascii_whitespace() || bytes[i] == b',') {
                    i += 1;
                }
                if i >= bytes.len() || bytes[i] == b'}' {
                    return i + 1;
                }
                i = tree(bytes, i, path.clone(), out);
            }
        }
        let start = i;
        while i < bytes.len() && is_ident(bytes[i]) {
            i += 1;
        }
        let segment = String::from_utf8_lossy(&bytes[start..i]).into_owned();
        if !segment.is_empty() && segment != "self" {
            path.push(segment);
        }
        if bytes[i..].starts_with(b"::") {
            i += 2;
        } else {
            out.push(path);
            return i;
        }
    }
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// `text` with comments, string literals and character literals blanked
/// out (lengths and line breaks kept, so nothing shifts).
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to.min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            let end = b[i..]
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |n| i + n);
            blank(&mut out, i, end);
            i = end;
        } else if b[i..].starts_with(b"/*") {
            let (mut depth, mut j) = (1, i + 2);
            while j < b.len() && depth > 0 {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if b[i] == b'r' && starts_token(b, i) && raw_string_at(b, i).is_some() {
            let end = raw_string_at(b, i).unwrap();
            blank(&mut out, i, end);
            i = end;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else if b[i] == b'\'' {
            // A character literal ('x', '\n', '\u{..}'), not a lifetime.
            let end = if b.get(i + 1) == Some(&b'\\') {
                b[i + 2..]
                    .iter()
                    .position(|&c| c == b'\'')
                    .map(|n| i + 2 + n + 1)
            } else {
                let len = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                (b.get(i + 1 + len) == Some(&b'\'')).then_some(i + 2 + len)
            };
            match end {
                Some(end) => {
                    blank(&mut out, i, end);
                    i = end;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

/// Whether `i` starts a token, or follows the `b` of a byte string.
fn starts_token(b: &[u8], i: usize) -> bool {
    let after = |j: usize| j == 0 || !is_ident(b[j - 1]);
    after(i) || b[i - 1] == b'b' && after(i - 1)
}

/// Where the raw string starting at `i` (`r"…"`, `r#"…"#`) ends, if one does.
fn raw_string_at(b: &[u8], i: usize) -> Option<usize> {
    let hashes = b.get(i + 1..)?.iter().take_while(|&&c| c == b'#').count();
    if b.get(i + 1 + hashes) != Some(&b'"') {
        return None;
    }
    let mut close = vec![b'"'];
    close.extend(std::iter::repeat_n(b'#', hashes));
    let body = i + 2 + hashes;
    let n = b[body..].windows(close.len()).position(|w| w == close)?;
    Some(body + n + close.len())
}

/// `code` without the items marked `#[cfg(test)]`.
fn without_tests(code: &str) -> String {
    let b = code.as_bytes();
    let mut out = b.to_vec();
    let mut from = 0;
    while let Some(n) = code[from..].find("#[cfg(test)]") {
        let start = from + n;
        let mut i = start + "#[cfg(test)]".len();
        // The item ends at its first `;` outside braces, or at the brace
        // that closes its first block.
        let mut depth = 0usize;
        while i < b.len() {
            match b[i] {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        i += 1;
                        break;
                    }
                }
                b';' if depth == 0 => {
                    i += 1;
                    break;
                }
                _ => {}
            }
            i += 1;
        }
        for c in &mut out[start..i] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
        from = i;
    }
    String::from_utf8(out).unwrap()
}

/// Each strongly connected component of more than one node (Tarjan), with
/// one cycle through it: the shortest way round from its smallest node.
fn cycles(edges: &Edges) -> Vec<(Vec<String>, Vec<String>)> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        next.entry(from).or_default().push(to);
        next.entry(to).or_default();
    }
    struct Tarjan<'a> {
        next: &'a BTreeMap<&'a str, Vec<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        components: Vec<Vec<&'a str>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            for &w in &self.next[v] {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.stack.contains(&w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let at = self.stack.iter().position(|&x| x == v).unwrap();
                let component = self.stack.split_off(at);
                if component.len() > 1 {
                    self.components.push(component);
                }
            }
        }
    }
    let mut t = Tarjan {
        next: &next,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        components: Vec::new(),
    };
    for &v in next.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.components
        .into_iter()
        .map(|component| {
            let inside: BTreeSet<&str> = component.iter().copied().collect();
            let start = *inside.iter().next().unwrap();
            // Breadth-first from `start` back to it, inside the component.
            let mut came: BTreeMap<&str, &str> = BTreeMap::new();
            let mut queue = std::collections::VecDeque::from([start]);
            'search: while let Some(v) = queue.pop_front() {
                for &w in &next[v] {
                    if !inside.contains(w) {
                        continue;
                    }
                    if w == start {
                        came.insert(start, v);
                        break 'search;
                    }
                    if !came.contains_key(w) {
                        came.insert(w, v);
                        queue.push_back(w);
                    }
                }
            }
            let mut cycle = vec![start.to_string()];
            let mut at = came[start];
            while at != start {
                cycle.push(at.to_string());
                at = came[at];
            }
            cycle[1..].reverse();
            (inside.iter().map(|m| m.to_string()).collect(), cycle)
        })
        .collect()
}

#[test]
fn the_reader_skips_comments_strings_and_tests_and_sees_cycles() {
    let code = without_tests(&code_only(
        r#"//! see `crate::b` and crate::c
use crate::{d, e::{f, self}};
/* crate::g */ let s = "crate::h"; let c = '"'; let l: &'static str = x;
fn f() { crate::i::call(); super::j::k(); }
#[cfg(test)]
mod tests { use crate::z; }
"#,
    ));
    let module = vec!["a".to_string(), "m".to_string()];
    let mut names: Vec<String> = references(&module, &code)
        .into_iter()
        .map(|(p, _)| p.join("::"))
        .collect();
    names.sort();
    assert_eq!(names, ["a::j::k", "d", "e", "e::f", "i::call"]);

    let edge = |a: &str, b: &str| ((a.to_string(), b.to_string()), format!("{a}.rs"));
    let edges: Edges = [
        edge("x", "y"),
        edge("y", "z"),
        edge("z", "x"),
        edge("z", "w"),
    ]
    .into_iter()
    .collect();
    let found = cycles(&edges);
    assert_eq!(found.len(), 1);
    assert_eq!(
        (found[0].0.clone(), found[0].1.clone()),
        (
            vec!["x", "y", "z"]
                .into_iter()
                .map(String::from)
                .collect::<Vec<_>>(),
            vec!["x".to_string(), "y".into(), "z".into()]
        )
    );
    assert!(cycles(&[edge("x", "y")].into_iter().collect()).is_empty());
}

/// The layers of `src/`, lowest first: a module may import its own layer
/// and those below, never one above (docs/design.md, "Structure"). Wire
/// formats and the configuration are the foundation and import no runtime
/// module; the flow stages and the transports sit above admission and
/// backends; the process (`run`) and the commands sit above all.
const LAYERS: &[&[&str]] = &[
    &["wire", "system_roots"],
    &["config"],
    &[
        "addr",
        "close_reason",
        "drain",
        "logging",
        "metrics",
        "sockopt",
    ],
    &["admission", "proxy", "pump"],
    &["backend"],
    &["flow"],
    &["tcp", "quic"],
    &["admin"],
    &["run"],
    &["cli"],
];

/// Imports that still run upward, each with what it waits for. Do not add
/// to this list: move the type down instead. The test fails when one is
/// gone, so the list can only shrink.
const KNOWN_UPWARD: &[(&str, &str)] = &[
    // None: the settings are plain data in config; keep it so.
];

#[test]
fn imports_run_down_the_layers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = Graph::of(&read_modules(&root));
    let layer = |m: &str| LAYERS.iter().position(|l| l.contains(&m));
    let mut problems = Vec::new();
    for ((from, to), at) in &graph.top {
        let (Some(f), Some(t)) = (layer(from), layer(to)) else {
            problems.push(format!(
                "{from} -> {to} ({at}): put every top-level module in LAYERS"
            ));
            continue;
        };
        let known = KNOWN_UPWARD.contains(&(from.as_str(), to.as_str()));
        if t > f && !known {
            problems.push(format!("{from} (layer {f}) imports {to} (layer {t}): {at}"));
        }
    }
    for &(from, to) in KNOWN_UPWARD {
        if !graph.top.contains_key(&(from.to_string(), to.to_string())) {
            problems.push(format!(
                "known upward import {from} -> {to} is gone: remove it from KNOWN_UPWARD"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The check sees the layers at all.
    assert!(graph.top.contains_key(&("tcp".into(), "flow".into())));
    assert!(graph.top.contains_key(&("run".into(), "tcp".into())));
}
