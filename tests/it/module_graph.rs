//! The module graph of `src/` has no import cycle: no two top-level modules
//! depend on each other, directly or through others, and neither do two
//! submodules of one folder (`pump::relay` and `pump::splice`, say).
//! A folder's `mod.rs` is one of its nodes too (`mod`): a child that uses
//! an item the parent defines is an edge to it, and the parent's use of a
//! child an edge back, so a parent and a child that lean on each other are
//! a cycle; a parent that declares and re-exports its children (`pub use
//! child::Item`) makes no edge, and a child naming an item through such a
//! re-export depends on the sibling that defines it.
//!
//! The graph is read from the source text, the way a reader sees it: every
//! `crate::…` path (in `use` lines or inline, `crate::{a, b::c}` groups
//! included) and every `super::…` path is an edge from the file it is in to
//! the deepest module it names. Comments, string and character literals and
//! `#[cfg(test)]` items are skipped first: a doc comment that says "see
//! `crate::relay`" is no dependency, and tests may reach anywhere. In a
//! `mod.rs`, a child's name used as a path (`endpoint::carry`) is an edge
//! too. `main.rs` is the binary, another crate.
//!
//! A cycle is reported by name with the file and path that make each edge,
//! e.g. `pump -> close (src/pump/relay.rs: crate::close::CloseReason)`.
//!
//! Top-level modules also sit in layers ([`LAYERS`], docs/design.md
//! "Structure"): an import may go to its own layer or a lower one, never
//! up; [`KNOWN_UPWARD`] lists the imports that still go up, and shrinks.
//! The two transports share what they share through the layers below
//! them (`flow`, `backend`, `admission`): `quic` never imports `tcp`, nor
//! `tcp` `quic` ([`APART`]).
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

/// Parent/child cycles (a folder's `mod.rs` and one of its children using
/// each other) still present, as (folder, child): the folder's `mod.rs`
/// defines what the child uses and uses the child. Do not add to this
/// list: move the parent's logic into a child of its own (as
/// `backend::candidates` holds the backend choice) and leave `mod.rs` a
/// front that declares and re-exports. The test fails when one is gone.
const KNOWN_PARENT: &[(&str, &str)] = &[];

/// The name of a folder's `mod.rs` among its children's nodes.
const PARENT: &str = "mod";

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
    for &(folder, child) in KNOWN_PARENT {
        let edge = (PARENT.to_string(), child.to_string());
        if !graph
            .folders
            .get(folder)
            .is_some_and(|e| e.contains_key(&edge))
        {
            problems.push(format!(
                "known parent/child cycle {folder}/{child} is gone: remove it from KNOWN_PARENT"
            ));
        }
    }
    for (folder, edges) in &graph.folders {
        let mut edges = edges.clone();
        for &(known, child) in KNOWN_PARENT {
            if known == folder {
                edges.remove(&(PARENT.to_string(), child.to_string()));
            }
        }
        problems.extend(
            cycles(&edges)
                .iter()
                .map(|c| describe(&format!("submodules of {folder}"), c, &edges)),
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
    // ... and sees a folder's mod.rs: backend's front uses its children,
    // and a child names the runtime types it defines.
    assert!(graph.folders["backend"].contains_key(&(PARENT.into(), "resolve".into())));
    assert!(graph.folders["backend"].contains_key(&("candidates".into(), PARENT.into())));
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
        // What each folder's mod.rs re-exports, by item name: the child
        // that defines it.
        let mut reexports: BTreeMap<Module, BTreeMap<String, String>> = BTreeMap::new();
        for (module, path, code) in files {
            if path.file_name().is_some_and(|n| n == "mod.rs") {
                reexports.insert(module.clone(), reexported(module, &known, code));
            }
        }
        for (module, path, code) in files {
            let is_mod_rs = path.file_name().is_some_and(|n| n == "mod.rs");
            let shown = path
                .strip_prefix(Path::new(env!("CARGO_MANIFEST_DIR")))
                .unwrap()
                .display()
                .to_string();
            let code = if is_mod_rs {
                without_reexports(code)
            } else {
                code.clone()
            };
            if is_mod_rs {
                // The front's own uses of its children, by their names.
                for (child, text) in child_uses(module, &known, &code) {
                    graph
                        .folders
                        .entry(module.join("::"))
                        .or_default()
                        .entry((PARENT.to_string(), child))
                        .or_insert(format!("{shown}: {text}"));
                }
            }
            for (target, text) in references(module, &code) {
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
                        .or_insert(at.clone());
                }
                // A child naming what its parent's mod.rs defines (or,
                // through a re-export, what a sibling defines); a mod.rs
                // naming its own child by a `crate::` or `self` path.
                let own = module.last().unwrap();
                if !is_mod_rs && !parent.is_empty() && to == *parent {
                    let item = target.get(parent.len());
                    let through = item.and_then(|i| reexports.get(parent)?.get(i));
                    let node = through.map_or(PARENT, String::as_str);
                    if node != own {
                        graph
                            .folders
                            .entry(parent.join("::"))
                            .or_default()
                            .entry((own.clone(), node.to_string()))
                            .or_insert(at);
                    }
                } else if is_mod_rs
                    && to.len() == module.len() + 1
                    && to[..module.len()] == **module
                {
                    graph
                        .folders
                        .entry(module.join("::"))
                        .or_default()
                        .entry((PARENT.to_string(), to.last().unwrap().clone()))
                        .or_insert(at);
                }
            }
        }
        graph
    }
}

/// The items a folder's `mod.rs` (`code`, of `folder`) re-exports from its
/// children (`pub use child::Item`, `pub(crate) use child::{A, B}`), each
/// with the child it comes from.
fn reexported(folder: &[String], known: &BTreeSet<Module>, code: &str) -> BTreeMap<String, String> {
    let mut found = BTreeMap::new();
    for statement in reexport_statements(code) {
        let text = &code[statement.clone()];
        let tree_at = text.find("use ").unwrap() + "use ".len();
        let mut paths = Vec::new();
        tree(text.as_bytes(), tree_at, Vec::new(), &mut paths);
        for mut path in paths {
            if path.first().is_some_and(|s| s == "crate") {
                path.remove(0);
            } else if path.first().is_some_and(|s| s == "self") {
                path.remove(0);
                path.splice(0..0, folder.iter().cloned());
            } else {
                path.splice(0..0, folder.iter().cloned());
            }
            let child = path.get(folder.len());
            let is_child = path.len() > folder.len() + 1
                && path[..folder.len()] == *folder
                && known.contains(&path[..=folder.len()].to_vec());
            if let (true, Some(child), Some(item)) = (is_child, child, path.last()) {
                found.insert(item.clone(), child.clone());
            }
        }
    }
    found
}

/// The byte ranges of `code`'s re-exports: `pub use ...;` and
/// `pub(...) use ...;` statements.
fn reexport_statements(code: &str) -> Vec<std::ops::Range<usize>> {
    let mut ranges = Vec::new();
    let mut from = 0;
    while let Some(n) = code[from..].find("pub") {
        let start = from + n;
        from = start + 3;
        if start > 0 && is_ident(code.as_bytes()[start - 1]) {
            continue;
        }
        let mut rest = &code[start + 3..];
        if rest.starts_with('(') {
            let Some(close) = rest.find(')') else {
                continue;
            };
            rest = &rest[close + 1..];
        }
        let trimmed = rest.trim_start();
        if !trimmed.starts_with("use ") {
            continue;
        }
        let Some(end) = code[start..].find(';') else {
            continue;
        };
        ranges.push(start..start + end + 1);
        from = start + end + 1;
    }
    ranges
}

/// `code` with its re-exports blanked out (see [`reexport_statements`]).
fn without_reexports(code: &str) -> String {
    let mut out = code.as_bytes().to_vec();
    for range in reexport_statements(code) {
        for c in &mut out[range] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    }
    String::from_utf8(out).unwrap()
}

/// The children of `folder` its `mod.rs` (`code`) names by a relative
/// path (`resolve::spawn`, `use endpoint::carry;`), each with the text.
fn child_uses(folder: &[String], known: &BTreeSet<Module>, code: &str) -> Vec<(String, String)> {
    let children: BTreeSet<&str> = known
        .iter()
        .filter(|m| m.len() == folder.len() + 1 && m[..folder.len()] == *folder)
        .map(|m| m.last().unwrap().as_str())
        .collect();
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if !is_ident(bytes[i]) || (i > 0 && (is_ident(bytes[i - 1]) || bytes[i - 1] == b':')) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && is_ident(bytes[i]) {
            i += 1;
        }
        let name = &code[start..i];
        if children.contains(name) && bytes[i..].starts_with(b"::") {
            let end = code[i..]
                .find(|c: char| !(c == ':' || c == '_' || c.is_ascii_alphanumeric()))
                .map_or(code.len(), |n| i + n);
            found.push((name.to_string(), code[start..end].to_string()));
        }
    }
    found
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

/// Modules that import, directly, only what they are given to work with
/// (docs/design.md, "Structure"), each with the modules it may name: `a`
/// is `a` and everything in it, `=a` the folder's own `mod.rs` only.
/// - The byte pump takes plain values: durations, byte quotas, counters
///   and the source key it is given (admission's), which the route table
///   builds (`flow::route::relay_settings`); it reads neither the
///   configuration nor the metrics registry nor the flow stages.
/// - The QUIC codec (Initial packets and their keys, the refusal) names
///   its own numbers or the wire's (the TLS alert numbers are
///   `wire::alert`'s), never a stage's nor the flow table's.
const IMPORTS_ONLY: &[(&str, &[&str])] = &[
    (
        "pump",
        &["pump", "admission", "close_reason", "drain", "sockopt"],
    ),
    ("quic::refusal", CODEC),
    ("quic::initial", CODEC),
    ("quic::seal", CODEC),
];

/// What the QUIC codec may name.
const CODEC: &[&str] = &[
    "wire",
    "=quic",
    "quic::initial",
    "quic::seal",
    "quic::refusal",
];

#[test]
fn some_modules_import_only_what_they_are_given() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = read_modules(&root);
    let known: BTreeSet<Module> = files.iter().map(|(m, ..)| m.clone()).collect();
    let within = |module: &str, entry: &str| match entry.strip_prefix('=') {
        Some(exact) => module == exact,
        None => module == entry || module.starts_with(&format!("{entry}::")),
    };
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for &(rule, allowed) in IMPORTS_ONLY {
        for (module, path, code) in &files {
            if !within(&module.join("::"), rule) {
                continue;
            }
            seen.insert(rule);
            for (target, text) in references(module, code) {
                let Some(to) = deepest(&known, &target) else {
                    continue;
                };
                let to = to.join("::");
                if !allowed.iter().any(|entry| within(&to, entry)) {
                    problems.push(format!("{} imports {to}: {text}", path.display()));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert_eq!(
        seen.len(),
        IMPORTS_ONLY.len(),
        "a module of IMPORTS_ONLY is gone"
    );
}

/// Modules a module never names: the transports carry out the decision
/// after the hello through `flow::carry_out`, once for both, and never
/// call into `flow::decision` themselves (so the decision's parts cannot
/// be carried out twice, one way per transport).
const NEVER_IMPORTS: &[(&str, &str)] = &[("tcp", "flow::decision"), ("quic", "flow::decision")];

#[test]
fn the_transports_carry_out_the_decision_through_one_call() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = read_modules(&root);
    let known: BTreeSet<Module> = files.iter().map(|(m, ..)| m.clone()).collect();
    let within =
        |module: &str, entry: &str| module == entry || module.starts_with(&format!("{entry}::"));
    let mut problems = Vec::new();
    for &(from, never) in NEVER_IMPORTS {
        assert!(
            known.iter().any(|m| m.join("::") == never),
            "{never} (in NEVER_IMPORTS) is gone"
        );
        for (module, path, code) in &files {
            if !within(&module.join("::"), from) {
                continue;
            }
            for (target, text) in references(module, code) {
                if deepest(&known, &target).is_some_and(|to| within(&to.join("::"), never)) {
                    problems.push(format!("{} imports {never}: {text}", path.display()));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Top-level modules that never import each other, either way: the two
/// transports share their stages through `flow`, `backend` and
/// `admission`, so a reader looking for QUIC's gate or backend choice is
/// never sent into `tcp/`.
const APART: &[(&str, &str)] = &[("quic", "tcp"), ("tcp", "quic")];

#[test]
fn the_transports_import_neither_each_other() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = Graph::of(&read_modules(&root));
    let problems: Vec<String> = APART
        .iter()
        .filter_map(|&(from, to)| {
            let at = graph.top.get(&(from.to_string(), to.to_string()))?;
            Some(format!("{from} imports {to}: {at}"))
        })
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The check sees both transports' imports at all.
    assert!(graph.top.contains_key(&("quic".into(), "flow".into())));
    assert!(graph.top.contains_key(&("tcp".into(), "flow".into())));
}

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

/// Where docs/design.md's generated part of "Structure" begins and ends.
const DESIGN_BEGIN: &str = "<!-- BEGIN generated from the module graph by tests/it/module_graph.rs; `SNIRELAY_WRITE_DOCS=1 cargo test --test it module_graph` rewrites it -->";
const DESIGN_END: &str = "<!-- END generated -->";

/// The layer table and what each transport imports, as the graph has them.
fn design_section(graph: &Graph) -> String {
    let imports = |from: &str| -> Vec<&str> {
        graph
            .top
            .keys()
            .filter(|(f, _)| f == from)
            .map(|(_, to)| to.as_str())
            .collect()
    };
    let list = |modules: &[&str]| -> String {
        if modules.is_empty() {
            "nothing".to_owned()
        } else {
            modules
                .iter()
                .map(|m| format!("`{m}`"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    let mut text = String::from(
        "The layers, lowest first, and what each module imports from the others \
         (`LAYERS` in the test):\n\n| layer | module | imports |\n|---|---|---|\n",
    );
    for (n, layer) in LAYERS.iter().enumerate() {
        for module in *layer {
            text.push_str(&format!(
                "| {n} | `{module}` | {} |\n",
                list(&imports(module))
            ));
        }
    }
    let (tcp, quic) = (imports("tcp"), imports("quic"));
    let both: Vec<&str> = tcp.iter().copied().filter(|m| quic.contains(m)).collect();
    fn only<'a>(a: &[&'a str], b: &[&str]) -> Vec<&'a str> {
        a.iter().copied().filter(|m| !b.contains(m)).collect()
    }
    text.push_str(&format!(
        "\nWhat the transports share: both `tcp` and `quic` import {}; only `tcp` {}; \
         only `quic` {}. Neither imports the other.\n",
        list(&both),
        list(&only(&tcp, &quic)),
        list(&only(&quic, &tcp)),
    ));
    text
}

/// docs/design.md's layer table and the transports' shared imports are
/// the graph's: the test fails when they differ, and with
/// `SNIRELAY_WRITE_DOCS=1` writes them.
#[test]
fn docs_design_has_the_graphs_layers_and_shared_imports() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let graph = Graph::of(&read_modules(&root.join("src")));
    let path = root.join("docs/design.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let (before, rest) = doc
        .split_once(DESIGN_BEGIN)
        .expect("docs/design.md lacks the generated section's first line");
    let (_, after) = rest
        .split_once(DESIGN_END)
        .expect("docs/design.md lacks the generated section's last line");
    let want = format!(
        "{before}{DESIGN_BEGIN}\n\n{}\n{DESIGN_END}{after}",
        design_section(&graph)
    );
    if std::env::var_os("SNIRELAY_WRITE_DOCS").is_some() {
        std::fs::write(&path, &want).unwrap();
        return;
    }
    assert!(
        doc == want,
        "docs/design.md's generated section is not the module graph's: run \
         SNIRELAY_WRITE_DOCS=1 cargo test --test it module_graph"
    );
}
