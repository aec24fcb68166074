//! docs/operations.md's table of close reasons against the code's
//! (`CloseReason::ALL` and each reason's row): every reason in one is in the
//! other, with the same stage, fault and log level. An operator reads that
//! table to write log queries and alerts, so a reason missing there, or one
//! the code no longer has, is a bug. The same page's table of the access
//! line's fields is held to the fields the code writes.

use std::collections::BTreeMap;
use std::path::PathBuf;

use snirelay::flow::access::CloseReason;

/// The heading of the docs/operations.md section that lists the close reasons.
const HEADING: &str = "### Close reasons";

/// (stage, fault, level) by reason name, as the docs' table states them.
type Rows = BTreeMap<String, (String, String, String)>;

fn readme_rows() -> Rows {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/operations.md");
    let readme = std::fs::read_to_string(&path).unwrap();
    let section = readme
        .split_once(&format!("\n{HEADING}\n"))
        .unwrap_or_else(|| panic!("docs/operations.md has no `{HEADING}` section"))
        .1;
    let section = section.split("\n#").next().unwrap();
    let mut rows = Rows::new();
    // Table rows that name a reason: | `name` | stage | fault | level | meaning |
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        assert!(
            cells.len() >= 6,
            "a short row in docs/operations.md: {line}"
        );
        let name = cells[1].trim_matches('`').to_owned();
        let row = (cells[2].into(), cells[3].into(), cells[4].into());
        assert!(
            rows.insert(name.clone(), row).is_none(),
            "`{name}` is listed twice in docs/operations.md"
        );
    }
    assert!(!rows.is_empty(), "no reasons found under `{HEADING}`");
    rows
}

fn code_rows() -> Rows {
    CloseReason::ALL
        .iter()
        .map(|reason| {
            let row = reason.row();
            let level = reason.level().map_or("none", |level| level.as_str());
            (
                row.name.to_owned(),
                (
                    row.stage.as_str().to_owned(),
                    row.fault.as_str().to_owned(),
                    level.to_owned(),
                ),
            )
        })
        .collect()
}

#[test]
fn the_readme_lists_every_close_reason_as_the_code_defines_it() {
    let (readme, code) = (readme_rows(), code_rows());
    let only_in_code: Vec<_> = code.keys().filter(|n| !readme.contains_key(*n)).collect();
    let only_in_readme: Vec<_> = readme.keys().filter(|n| !code.contains_key(*n)).collect();
    let differ: Vec<String> = code
        .iter()
        .filter_map(|(name, row)| {
            let listed = readme.get(name)?;
            (listed != row).then(|| {
                format!("{name}: the docs say (stage, fault, level) = {listed:?}, the code {row:?}")
            })
        })
        .collect();
    assert!(
        only_in_code.is_empty() && only_in_readme.is_empty() && differ.is_empty(),
        "docs/operations.md's close reasons and the code's disagree:\n\
         missing from docs/operations.md: {only_in_code:?}\n\
         in docs/operations.md but not in the code: {only_in_readme:?}\n\
         {}",
        differ.join("\n")
    );
}

/// Every field the access line can carry (the names in `flow/access.rs`'s
/// one `tracing::event!` of `snirelay::access`) has a row in
/// docs/operations.md's Logs table, and every row names a field there.
#[test]
fn the_logs_table_lists_every_access_line_field() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let source = std::fs::read_to_string(root.join("src/flow/access.rs")).unwrap();
    let event = source
        .split_once("target: \"snirelay::access\",")
        .and_then(|(_, rest)| rest.split_once("\"connection closed\""))
        .expect("src/flow/access.rs writes the access line with one tracing::event!")
        .0;
    let in_code: std::collections::BTreeSet<String> = event
        .lines()
        .filter_map(|line| line.trim().split_once(" = "))
        .map(|(name, _)| name.to_owned())
        .collect();
    let docs = std::fs::read_to_string(root.join("docs/operations.md")).unwrap();
    let table = docs
        .split_once("\n## Logs\n")
        .and_then(|(_, rest)| rest.split_once("\n### "))
        .expect("docs/operations.md has a Logs section")
        .0;
    let in_docs: std::collections::BTreeSet<String> = table
        .lines()
        .filter_map(|row| row.strip_prefix("| "))
        .filter_map(|row| row.split_once(" |"))
        .flat_map(|(fields, _)| fields.split(", "))
        .filter_map(|field| field.strip_prefix('`')?.strip_suffix('`'))
        .map(str::to_owned)
        .collect();
    assert!(in_code.len() > 20, "only {in_code:?} read from the code");
    assert_eq!(
        in_code, in_docs,
        "the access line's fields (left) and docs/operations.md's Logs table (right) differ"
    );
}
