//! The key reference (docs/config-keys.md, generated from
//! `snirelay::config::keys::KEYS`) says true things about every key: its
//! "applies" column is `process` for the keys of `[global]`, `[admin]`
//! and `[log]` and names listener kinds for every other key, and a key
//! whose doc text names some of its accepted values names them all. That
//! the committed file is what the declarations generate is
//! `config::the_generated_reference_and_man_page_are_current`.

use std::path::PathBuf;

use snirelay::config::keys::{Applies, KEYS, Kind, PROCESS_TABLES};

#[test]
fn process_keys_apply_to_the_process_and_the_rest_to_listeners() {
    for key in KEYS {
        let table = key.name.split('.').next().unwrap();
        assert_eq!(
            key.applies == Applies::Process,
            PROCESS_TABLES.contains(&table),
            "{} applies to {:?}",
            key.name,
            key.applies
        );
    }
    // And the committed reference says so, row by row.
    let reference = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/config-keys.md"),
    )
    .unwrap();
    let mut table = "";
    let mut rows = 0;
    for line in reference.lines() {
        if let Some(heading) = line.strip_prefix("## `") {
            table = heading
                .trim_start_matches('[')
                .split(['`', '.', ' ', ']'])
                .next()
                .unwrap();
            continue;
        }
        let cells: Vec<&str> = line.split(" | ").collect();
        if !line.starts_with("| `") || cells.len() < 6 {
            continue;
        }
        rows += 1;
        let applies = cells[4];
        if PROCESS_TABLES.contains(&table) {
            assert_eq!(applies, "process", "[{table}]: {line}");
        } else {
            assert!(
                ["tcp, quic", "tcp", "quic"].contains(&applies),
                "[{table}]: {line}"
            );
        }
    }
    assert!(rows > 150, "only {rows} rows: is the scan broken?");
}

/// A key of one of several strings whose doc names some of them in code
/// (`` `ja4` ``) names every one: `proxy_protocol_tlvs.value` took `ja4`
/// and `ja3` while its text named only ALPN and SNI.
#[test]
fn a_doc_that_names_some_accepted_values_names_them_all() {
    let (mut checked, mut wrong) = (0, Vec::new());
    for key in KEYS {
        let values = match key.kind {
            Kind::Choice(values) | Kind::ChoiceOrBackend(values) => values,
            _ => continue,
        };
        // The code spans of the doc, quotes taken off.
        let words: Vec<&str> = key
            .doc
            .split('`')
            .skip(1)
            .step_by(2)
            .map(|span| span.trim_matches('"'))
            .collect();
        let named: Vec<&&str> = values.iter().filter(|v| words.contains(v)).collect();
        if named.is_empty() {
            continue;
        }
        checked += 1;
        let missing: Vec<&&str> = values.iter().filter(|v| !words.contains(v)).collect();
        if !missing.is_empty() {
            wrong.push(format!(
                "{}: its doc names {named:?} but not {missing:?}: {}",
                key.name, key.doc
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(
        checked >= 5,
        "only {checked} keys name their values: is the scan broken?"
    );
}
