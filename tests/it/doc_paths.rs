//! The code paths the documentation names still exist.
//!
//! Every inline code span in the prose of README.md and docs/*.md that
//! looks like a path is resolved against the tree:
//!
//! - a file or folder (a span ending in `.rs` or `/`, or starting with one
//!   of [`ROOT_FOLDERS`]: `tcp/dial.rs`, `src/quic/initial.rs`,
//!   `run/listener_set.rs`, `tests/it/transparent.rs`): relative to the repository
//!   root when it starts with one of those, else to `src/` (docs/design.md's
//!   convention); a bare name (`keys.rs`, `check/`) must exist somewhere
//!   under `src/`;
//! - a `module::item` path (`flow::route`, `tcp::dial::candidates`,
//!   `quic::initial::Verdict`, `Admission::after_preface`): the first
//!   module is any module file of that name under `src/`, each further
//!   lower-case segment a child module file or the item, which must be
//!   defined there (`fn`, `struct`, `enum`, `mod`, `const`, `static`,
//!   `type`, `trait`, or a `pub use` of it); a `Type::item` needs the type defined and the item a
//!   method of one of its `impl` blocks' files or a variant of the enum.
//!
//! Not checked: spans with spaces or punctuation (commands, keys, log
//! fields), URLs, absolute paths (files on an installed host), other
//! projects' files (`proxy/proxy.go`), addresses and CIDRs, log targets
//! (`snirelay::access`) and the few other crates' items the docs name
//! ([`OTHER_CRATES`]). docs/design.md's count of `pub fn`s is held to
//! the code's within a tenth, and the shipped configurations' comments
//! that send a reader to `docs/PAGE.md, "Section"` name a page and heading
//! that exist. Reading files only; no process runs.

use std::path::{Path, PathBuf};

/// Types the documentation names that belong to other crates, with whose.
const OTHER_CRATES: [(&str, &str); 1] = [("Endpoint", "quinn-proto's and quinn's endpoint")];

/// The repository's folders a path may start from; any other path is under
/// `src/` (so `config/mod.rs` is `src/config/mod.rs`, not the shipped
/// `config/` folder).
const ROOT_FOLDERS: [&str; 8] = [
    "src",
    "tests",
    "benches",
    "fuzz",
    "examples",
    "docs",
    "scripts",
    "packaging",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file and folder under `dir`, recursively.
fn walk(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            into.push(path.clone());
            walk(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

struct Tree {
    /// Every file and folder under src/.
    entries: Vec<PathBuf>,
}

impl Tree {
    fn new() -> Tree {
        let mut entries = Vec::new();
        walk(&root().join("src"), &mut entries);
        Tree { entries }
    }

    fn read(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap()
    }

    /// The files of the modules named `name` anywhere under src/.
    fn modules_named(&self, name: &str) -> Vec<PathBuf> {
        let file = format!("{name}.rs");
        self.entries
            .iter()
            .filter(|p| {
                let own = p.file_name().unwrap().to_str().unwrap();
                own == file || (p.ends_with("mod.rs") && p.parent().unwrap().ends_with(name))
            })
            .cloned()
            .collect()
    }

    /// The child module `name` of the module in `file`.
    fn child(file: &Path, name: &str) -> Option<PathBuf> {
        let dir = if file.ends_with("mod.rs") || file.ends_with("lib.rs") {
            file.parent().unwrap().to_owned()
        } else {
            file.with_extension("")
        };
        [
            dir.join(format!("{name}.rs")),
            dir.join(name).join("mod.rs"),
        ]
        .into_iter()
        .find(|p| p.exists())
    }

    /// The files that define type `name`.
    fn type_files(&self, name: &str) -> Vec<PathBuf> {
        self.entries
            .iter()
            .filter(|p| p.is_file() && defines(&Tree::read(p), name))
            .cloned()
            .collect()
    }

    /// Whether `item` is a method of type `ty` (any file with an `impl` of
    /// it) or a variant of it (its defining file).
    fn has_member(&self, ty: &str, defining: &[PathBuf], item: &str) -> bool {
        let method = |text: &str| defines(text, item);
        let variant = |text: &str| {
            text.lines().any(|l| {
                let l = l.trim_start();
                l.strip_prefix(item)
                    .is_some_and(|rest| rest.starts_with([',', '(', ' ', '{']) || rest.is_empty())
            })
        };
        if defining.iter().any(|f| {
            let text = Tree::read(f);
            method(&text) || variant(&text)
        }) {
            return true;
        }
        self.entries.iter().filter(|p| p.is_file()).any(|p| {
            let text = Tree::read(p);
            impls(&text, ty) && method(&text)
        })
    }

    /// Why the span `path` (a `::` path) names nothing, if it does not.
    fn item_path(&self, path: &str) -> Result<(), String> {
        let segments: Vec<&str> = path.split("::").collect();
        let upper = |s: &str| s.starts_with(|c: char| c.is_ascii_uppercase());
        if upper(segments[0]) {
            let ty = segments[0];
            if OTHER_CRATES.iter().any(|(t, _)| *t == ty) {
                return Ok(());
            }
            let files = self.type_files(ty);
            if files.is_empty() {
                return Err(format!("no type `{ty}` is defined under src/"));
            }
            return match segments.get(1) {
                Some(item) if !self.has_member(ty, &files, item) => {
                    Err(format!("`{ty}` has no method or variant `{item}`"))
                }
                _ => Ok(()),
            };
        }
        let starts = self.modules_named(segments[0]);
        if starts.is_empty() {
            return Err(format!("no module `{}` under src/", segments[0]));
        }
        let mut last_error = String::new();
        'start: for start in starts {
            let mut file = start;
            for (i, segment) in segments.iter().enumerate().skip(1) {
                if let Some(child) = Tree::child(&file, segment) {
                    file = child;
                    continue;
                }
                let text = Tree::read(&file);
                if !defines(&text, segment) {
                    last_error = format!("{} does not define `{segment}`", self.show(&file));
                    continue 'start;
                }
                if let Some(member) = segments.get(i + 1) {
                    if !upper(segment) || !self.has_member(segment, &[file.clone()], member) {
                        last_error = format!("`{segment}` has no `{member}`");
                        continue 'start;
                    }
                }
                return Ok(());
            }
            return Ok(());
        }
        Err(last_error)
    }

    fn show(&self, path: &Path) -> String {
        path.strip_prefix(root()).unwrap().display().to_string()
    }

    /// Why the span `path` (a file or folder) names nothing, if it does not.
    fn file_path(&self, path: &str) -> Result<(), String> {
        let root = root();
        let first = path.split('/').next().unwrap();
        let at_root = ROOT_FOLDERS.contains(&first) && path.contains('/');
        let target = if at_root {
            root.join(path)
        } else {
            root.join("src").join(path)
        };
        if target.exists() {
            return Ok(());
        }
        let name = path.trim_end_matches('/');
        if !name.contains('/') && self.entries.iter().any(|p| p.ends_with(name)) {
            return Ok(());
        }
        Err(format!("no such file or folder ({})", target.display()))
    }
}

/// Whether `text` (Rust source) defines an item called `name`.
fn defines(text: &str, name: &str) -> bool {
    const KINDS: [&str; 9] = [
        "fn", "struct", "enum", "mod", "const", "static", "type", "trait", "union",
    ];
    text.lines().any(|line| {
        let mut rest = line.trim_start();
        if let Some(after) = rest.strip_prefix("pub") {
            rest = match after.strip_prefix('(') {
                Some(inner) => inner.split_once(')').map_or("", |(_, r)| r),
                None => after,
            }
            .trim_start();
        }
        for qualifier in ["async ", "const ", "unsafe "] {
            if let Some(after) = rest.strip_prefix(qualifier) {
                if after.starts_with("fn ") {
                    rest = after;
                }
            }
        }
        if let Some(used) = rest.strip_prefix("use ") {
            // A re-export names the item here too (`pub use commands::main;`).
            return line.trim_start().starts_with("pub")
                && used
                    .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .any(|w| w == name);
        }
        KINDS.iter().any(|kind| {
            rest.strip_prefix(kind)
                .and_then(|r| r.strip_prefix(' '))
                .and_then(|r| r.strip_prefix(name))
                .is_some_and(|r| !r.starts_with(|c: char| c.is_alphanumeric() || c == '_'))
        })
    })
}

/// Whether `text` has an `impl` block for type `ty` (inherent or of a trait).
fn impls(text: &str, ty: &str) -> bool {
    text.lines().any(|line| {
        let line = line.trim_start();
        line.starts_with("impl")
            && line
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .any(|w| w == ty)
    })
}

/// The inline code spans of a Markdown file's prose, with their line numbers.
fn code_spans(text: &str) -> Vec<(usize, String)> {
    let mut spans = Vec::new();
    let mut fenced = false;
    for (at, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut parts = line.split('`');
        parts.next();
        while let (Some(span), Some(_)) = (parts.next(), parts.next()) {
            spans.push((at + 1, span.to_owned()));
        }
    }
    spans
}

enum Named {
    File,
    Item,
}

/// What a span names, if it looks like a path at all.
fn classify(span: &str) -> Option<(Named, &str)> {
    let span = span.trim_end_matches("()");
    let path_chars =
        |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '/' | '.' | ':' | '-');
    if span.is_empty()
        || !span.chars().all(path_chars)
        || span.starts_with(['/', '.', ':'])
        || span.contains("://")
        || span.starts_with("snirelay::")
    {
        return None;
    }
    if span.contains("::") {
        let ok = span
            .split("::")
            .all(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        return ok.then_some((Named::Item, span));
    }
    if span.contains(':') || span.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let first = span.split('/').next().unwrap();
    if span.ends_with(".rs")
        || span.ends_with('/')
        || ROOT_FOLDERS.contains(&first) && span.contains('/')
    {
        return Some((Named::File, span));
    }
    None
}

/// Every path-like span of `file` that names nothing, as `file:line: span: why`.
fn stale_paths(tree: &Tree, file: &Path, checked: &mut usize) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let name = file.strip_prefix(root()).unwrap().display().to_string();
    let mut stale = Vec::new();
    for (line, span) in code_spans(&text) {
        let Some((kind, path)) = classify(&span) else {
            continue;
        };
        *checked += 1;
        let verdict = match kind {
            Named::File => tree.file_path(path),
            Named::Item => tree.item_path(path),
        };
        if let Err(why) = verdict {
            stale.push(format!("{name}:{line}: `{span}`: {why}"));
        }
    }
    stale
}

#[test]
fn every_path_docs_design_names_exists() {
    let tree = Tree::new();
    let mut checked = 0;
    let stale = stale_paths(&tree, &root().join("docs/design.md"), &mut checked);
    assert!(stale.is_empty(), "stale paths:\n{}", stale.join("\n"));
    assert!(
        checked > 150,
        "only {checked} paths in docs/design.md: is the scan broken?"
    );
}

#[test]
fn every_path_the_other_documentation_names_exists() {
    let tree = Tree::new();
    let root = root();
    let mut files = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") && !path.ends_with("design.md") {
            files.push(path);
        }
    }
    let (mut checked, mut stale) = (0, Vec::new());
    for file in files {
        stale.extend(stale_paths(&tree, &file, &mut checked));
    }
    assert!(stale.is_empty(), "stale paths:\n{}", stale.join("\n"));
    assert!(
        checked > 30,
        "only {checked} paths found: is the scan broken?"
    );
}

/// docs/design.md's "about N `pub fn`" is within a tenth of the `pub`
/// functions in src/ today.
#[test]
fn docs_design_counts_the_pub_fns_there_are() {
    let design = std::fs::read_to_string(root().join("docs/design.md")).unwrap();
    let said: usize = design
        .split_once(" `pub fn`")
        .and_then(|(before, _)| before.rsplit_once("about "))
        .and_then(|(_, n)| n.parse().ok())
        .expect("docs/design.md says \"about N `pub fn`\"");
    let tree = Tree::new();
    let counted = tree
        .entries
        .iter()
        .filter(|p| p.is_file())
        .map(|p| {
            Tree::read(p)
                .lines()
                .filter(|l| {
                    let l = l.trim_start();
                    [
                        "pub fn ",
                        "pub async fn ",
                        "pub const fn ",
                        "pub unsafe fn ",
                    ]
                    .iter()
                    .any(|p| l.starts_with(p))
                })
                .count()
        })
        .sum::<usize>();
    assert!(
        said.abs_diff(counted) * 10 <= counted,
        "docs/design.md says about {said} `pub fn`; src/ has {counted}"
    );
}

/// The shipped configurations' comments point at pages and sections that
/// exist: every `docs/NAME.md` they name is a file, and a quoted title
/// right after it (`docs/operations.md, "Transparent source"`, or several
/// joined by `and`) is a heading of that page.
#[test]
fn the_shipped_configurations_point_at_sections_that_exist() {
    let root = root();
    let mut files = vec![
        root.join("config/snirelay.toml"),
        root.join("packaging/snirelay.toml"),
    ];
    for entry in std::fs::read_dir(root.join("examples")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            files.push(path);
        }
    }
    let (mut checked, mut stale) = (0, Vec::new());
    for file in files {
        let name = file.strip_prefix(&root).unwrap().display().to_string();
        // Comments only, joined, so a reference may wrap across lines.
        let comments: String = std::fs::read_to_string(&file)
            .unwrap()
            .lines()
            .filter_map(|l| l.split_once('#').map(|(_, c)| c.trim().to_owned() + " "))
            .collect();
        let mut rest = comments.as_str();
        while let Some(at) = rest.find("docs/") {
            rest = &rest[at..];
            let end = rest.find(".md").map_or(0, |e| e + 3);
            let page = &rest[..end];
            rest = &rest[end.max(5)..];
            if page.is_empty() || page.contains(' ') {
                continue;
            }
            checked += 1;
            let Ok(text) = std::fs::read_to_string(root.join(page)) else {
                stale.push(format!("{name}: {page}: no such page"));
                continue;
            };
            let headings: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with('#'))
                .map(|l| l.trim_start_matches('#').trim())
                .collect();
            let mut titles = rest.strip_prefix(", ").unwrap_or("");
            while let Some(quoted) = titles.strip_prefix('"') {
                let (title, after) = quoted.split_once('"').unwrap();
                if !headings.contains(&title) {
                    stale.push(format!("{name}: {page} has no heading \"{title}\""));
                }
                titles = after.trim_start().strip_prefix("and ").unwrap_or("");
            }
        }
    }
    assert!(stale.is_empty(), "stale references:\n{}", stale.join("\n"));
    assert!(
        checked >= 10,
        "only {checked} references found: is the scan broken?"
    );
}

/// Where a relative path (`../packaging/x`) written in `file`
/// leads, resolved from the file's folder: an error when it leaves the
/// repository or names nothing there.
fn relative_path_target(file: &Path, path: &str) -> Result<(), String> {
    let root = root();
    let path = path.split('#').next().unwrap();
    let mut at: Vec<String> = file
        .parent()
        .unwrap()
        .strip_prefix(&root)
        .unwrap()
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if at.pop().is_none() {
                    return Err("leaves the repository".to_owned());
                }
            }
            name => at.push(name.to_owned()),
        }
    }
    let target = root.join(at.join("/"));
    if target.exists() {
        Ok(())
    } else {
        Err(format!("no such file or folder ({})", target.display()))
    }
}

/// The paths that climb (`../x`) in `text`: in links, code spans or prose,
/// each cut at the first character a path does not have. (A `./x` is a
/// command's, relative to where it runs, and cannot leave.)
fn relative_paths(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (at, line) in text.lines().enumerate() {
        let mut rest = line;
        while let Some(start) = rest.find("../") {
            // One after a path character is a file name's (`x../`), not a path.
            let before = rest[..start].chars().next_back();
            let tail = &rest[start..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || "._-/#".contains(c)))
                .unwrap_or(tail.len());
            let path = tail[..end].trim_end_matches(['.', '/']);
            if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
                && path.len() > 3
            {
                found.push((at + 1, path.to_owned()));
            }
            rest = &tail[end.max(1)..];
        }
    }
    found
}

/// No path that climbs (`../`), in a link or not, in README.md, docs/*.md, benches/README.md or
/// packaging/ leaves the repository or names nothing in it: a reader of
/// the repository has nothing else (a path to a sibling checkout, such as
/// `../shared/notes.txt`, is one they cannot follow).
#[test]
fn no_relative_path_in_the_documentation_leaves_the_repository() {
    let root = root();
    let mut files = vec![root.join("README.md"), root.join("benches/README.md")];
    for folder in ["docs", "packaging"] {
        for entry in std::fs::read_dir(root.join(folder)).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file()
                && (folder == "packaging" || path.extension().is_some_and(|e| e == "md"))
            {
                files.push(path);
            }
        }
    }
    let (mut checked, mut wrong) = (0, Vec::new());
    for file in files {
        // Binary or generated data files in packaging/ are not prose.
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let name = file.strip_prefix(&root).unwrap().display().to_string();
        for (line, path) in relative_paths(&text) {
            checked += 1;
            if let Err(why) = relative_path_target(&file, &path) {
                wrong.push(format!("{name}:{line}: `{path}`: {why}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "paths that lead nowhere in the repository:\n{}",
        wrong.join("\n")
    );
    assert!(
        checked >= 15,
        "only {checked} relative paths found: is the scan broken?"
    );
}

#[test]
fn a_path_to_a_sibling_checkout_is_caught() {
    let file = root().join("docs/migrating-from-haproxy.md");
    let found =
        relative_paths("The relay in `../../shared/seeds/x.txt` and [y](../packaging/Dockerfile).");
    assert_eq!(
        found,
        vec![
            (1, "../../shared/seeds/x.txt".to_owned()),
            (1, "../packaging/Dockerfile".to_owned())
        ]
    );
    assert_eq!(
        relative_path_target(&file, &found[0].1),
        Err("leaves the repository".to_owned())
    );
    assert!(relative_path_target(&file, "../shared/seeds/x.txt").is_err());
    assert_eq!(relative_path_target(&file, &found[1].1), Ok(()));
}
