//! Config fixtures and the `check` command.
//!
//! Every file in tests/config/valid (and the shipped config/*.toml) must
//! load; every file in tests/config/invalid must fail, and its message must
//! contain each `# error: …` line the fixture declares (key and bad value).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use snirelay::config::Config;
use snirelay::config::file::FileConfig;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn toml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no fixtures in {}", dir.display());
    files
}

/// Token files must not be world-readable, and git checks files out
/// 0644: the fixtures' token files are made private before use.
fn private_token_files() {
    use std::os::unix::fs::PermissionsExt;
    let path = root().join("tests/config/valid/admin.tokens");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

#[test]
fn valid_fixtures_and_shipped_configs_load() {
    private_token_files();
    let mut files = toml_files(&root().join("tests/config/valid"));
    files.extend(toml_files(&root().join("config")));
    for file in files {
        if let Err(e) = Config::load(&file) {
            panic!("{} should load:\n{e}", file.display());
        }
    }
}

#[test]
fn invalid_fixtures_fail_naming_the_key_and_value() {
    for file in toml_files(&root().join("tests/config/invalid")) {
        let text = std::fs::read_to_string(&file).unwrap();
        let expected: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# error: "))
            .collect();
        assert!(
            !expected.is_empty(),
            "{} declares no `# error:` line",
            file.display()
        );
        let error = match Config::load(&file) {
            Ok(_) => panic!("{} should fail", file.display()),
            Err(e) => e.to_string(),
        };
        for want in expected {
            assert!(
                error.contains(want),
                "{}: error does not contain {want:?}:\n{error}",
                file.display()
            );
        }
        // Errors name the file they came from.
        assert!(error.contains(&*file.to_string_lossy()), "{error}");
    }
}

#[test]
fn the_shipped_example_is_what_the_readme_promises() {
    let config = Config::load(&root().join("config/snirelay.toml")).unwrap();
    let tls = config.listener("tls").unwrap();
    assert_eq!(tls.listen, ["127.0.0.1:8443".parse().unwrap()]);
    let backend = &tls.routes[0].backend;
    assert_eq!(backend.addresses, ["127.0.0.1:9443".parse().unwrap()]);
    let sni = |s: &str| snirelay::sni::Sni::parse(s.as_bytes()).unwrap();
    assert!(tls.matcher.find(&sni("localhost")).is_some());
    assert!(tls.matcher.find(&sni("app.localhost")).is_some());
    assert!(tls.matcher.find(&sni("example.com")).is_none());
}

/// README's "Migrating from HAProxy" section: its TOML block loads, and
/// says what the lines of the tls-edge-failover template it replaces say
/// (tests/data/haproxy/tls-edge-failover.cfg: maxconn 2048, maxconnrate
/// 400, backlog 2048, inspect-delay 5s, timeouts 5s / 5m / 15s,
/// hard-stop-after 10m, `sc0_conn_cur gt 100`, `sc0_conn_rate gt 30` over
/// `conn_rate(1s)`, `check inter 5s fall 3 rise 2`).
#[test]
fn the_readme_migration_example_loads() {
    use std::num::NonZeroU32;
    use std::time::Duration;
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let section = readme
        .split_once("\n## Migrating from HAProxy\n")
        .expect("README.md has a `## Migrating from HAProxy` section")
        .1;
    // The template as README shows it is the fixture, line for line.
    let shown = section
        .split_once("```haproxy\n")
        .and_then(|(_, rest)| rest.split_once("\n```"))
        .expect("the migration section has a ```haproxy block")
        .0;
    let fixture =
        std::fs::read_to_string(root().join("tests/data/haproxy/tls-edge-failover.cfg")).unwrap();
    let directives: Vec<&str> = fixture
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect();
    assert_eq!(shown.lines().collect::<Vec<_>>(), directives);
    // Every line of it is in the line-by-line table: the whole line, or a
    // part of it that starts or ends it (`reject if WAIT_END`), quoted.
    let table = section
        .split_once("\nLine by line")
        .expect("the migration section has a line-by-line table")
        .1
        .split_once("\n\n")
        .and_then(|(_, rest)| rest.split_once("\n\n"))
        .expect("the table ends with a blank line")
        .0;
    let quoted: Vec<&str> = table.split('`').skip(1).step_by(2).collect();
    for line in directives
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty())
    {
        assert!(
            quoted
                .iter()
                .any(|q| *q == line || q.len() >= 8 && (line.starts_with(q) || line.ends_with(q))),
            "README's line-by-line table does not translate `{line}`"
        );
    }
    let block = section
        .split_once("```toml\n")
        .and_then(|(_, rest)| rest.split_once("\n```"))
        .expect("the migration section has a ```toml block")
        .0;
    let config = Config::from_toml(block, Path::new("README.md#migrating-from-haproxy"))
        .unwrap_or_else(|e| panic!("the README's migration example does not load:\n{e}"));
    assert_eq!(config.global.max_connections, 2048);
    assert_eq!(config.global.max_connection_rate, NonZeroU32::new(400));
    assert_eq!(config.global.drain_timeout, Duration::from_secs(600));
    let tls = config.listener("home_https").unwrap();
    assert_eq!(tls.listen, ["0.0.0.0:443".parse().unwrap()]);
    assert_eq!(tls.backlog, 2048);
    assert_eq!(tls.client_hello_timeout, Duration::from_secs(5));
    assert_eq!(tls.idle_timeout, Duration::from_secs(300));
    assert_eq!(tls.half_close_timeout, Duration::from_secs(15));
    assert_eq!(tls.limits.connections_per_source, NonZeroU32::new(100));
    let rate = tls.limits.rate_per_source.expect("a per-source rate");
    assert_eq!(
        (rate.per_second.get(), rate.burst.get()),
        (30, 30),
        "sc0_conn_rate gt 30 over conn_rate(1s)"
    );
    assert!(tls.limits.rate_counts_refused);
    assert_eq!(tls.limits.source_prefix_v4, 32);
    let sni = |s: &str| snirelay::sni::Sni::parse(s.as_bytes()).unwrap();
    assert!(tls.matcher.find(&sni("example.com")).is_some());
    assert!(tls.matcher.find(&sni("a.b.example.com")).is_some());
    assert!(tls.matcher.find(&sni("badexample.com")).is_none());
    assert!(tls.matcher.find(&sni("evil-example.com")).is_none());
    let backend = &tls.routes[0].backend;
    assert_eq!(backend.name, "home_npm");
    assert_eq!(backend.addresses, ["203.0.113.10:443".parse().unwrap()]);
    assert_eq!(backend.connect_timeout, Duration::from_secs(5));
    let health = backend
        .health
        .as_ref()
        .expect("check inter 5s fall 3 rise 2");
    assert_eq!(
        (health.interval, health.timeout, health.fall, health.rise),
        (Duration::from_secs(5), Duration::from_secs(5), 3, 2)
    );
    assert_eq!(health.kind.as_str(), "tcp");
    assert!(config.admin.is_some(), "stats socket ... level admin");
}

fn snirelay(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_snirelay"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn check_prints_ok_for_a_valid_file() {
    let shipped = root().join("config/snirelay.toml");
    let (code, stdout, _) = snirelay(&["check", "--config", shipped.to_str().unwrap()]);
    assert_eq!((code, stdout.as_str()), (0, "ok\n"));
}

#[test]
fn check_lists_every_problem_and_exits_1() {
    let file = root().join("tests/config/invalid/several_problems.toml");
    let (code, stdout, stderr) = snirelay(&["check", "--config", file.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert_eq!(stdout, "");
    assert!(stderr.contains("5 problem(s)"), "{stderr}");
    assert!(stderr.contains("route[0].backend"), "{stderr}");
}

#[test]
fn run_refuses_an_invalid_file_and_a_missing_one() {
    let file = root().join("tests/config/invalid/bad_duration.toml");
    let (code, _, stderr) = snirelay(&["--config", file.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("listener[0].client_hello_timeout"),
        "{stderr}"
    );
    let (code, _, stderr) = snirelay(&["run", "--config", "/nonexistent/snirelay.toml"]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("/nonexistent/snirelay.toml: cannot read"),
        "{stderr}"
    );
}

#[test]
fn version_and_help() {
    let (code, stdout, _) = snirelay(&["--version"]);
    assert_eq!(code, 0);
    assert_eq!(
        stdout.trim(),
        format!("snirelay {}", env!("CARGO_PKG_VERSION"))
    );
    let (code, stdout, _) = snirelay(&["--help"]);
    assert_eq!(code, 0);
    assert!(stdout.contains("check"), "{stdout}");
    let (code, _, _) = snirelay(&["--no-such-flag"]);
    assert_eq!(code, 2);
}

#[test]
fn a_bind_failure_names_the_listener_and_address() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let dir = std::env::temp_dir().join(format!("snirelay-bind-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("c.toml");
    std::fs::write(
        &file,
        format!(
            "[[listener]]\nname = \"tls\"\nlisten = [\"{addr}\"]\n[[route]]\nsni = [\"a.example\"]\nbackend = \"b\"\n[backend.b]\naddresses = [\"127.0.0.1:9\"]\n"
        ),
    )
    .unwrap();
    let (code, _, stderr) = snirelay(&["run", "--config", file.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains(&format!("listener \"tls\": cannot listen on {addr}")),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

// ------------------------------------------------- the effective configuration

/// The files a round trip must hold for: every valid fixture and both
/// shipped configurations.
fn valid_and_shipped() -> Vec<PathBuf> {
    let mut files = toml_files(&root().join("tests/config/valid"));
    files.extend(toml_files(&root().join("config")));
    files.push(root().join("packaging/snirelay.toml"));
    files
}

#[test]
fn the_effective_config_round_trips() {
    private_token_files();
    for file in valid_and_shipped() {
        let first = Config::load(&file).unwrap().to_file();
        let text = toml::to_string(&first)
            .unwrap_or_else(|e| panic!("{}: cannot write back: {e}", file.display()));
        // What is written parses as the same model...
        let parsed: FileConfig = toml::from_str(&text).unwrap();
        assert_eq!(parsed, first, "{}:\n{text}", file.display());
        // ...and validates into the same configuration.
        let again = Config::from_toml(&text, &file)
            .unwrap_or_else(|e| {
                panic!(
                    "{}: written back, does not load:\n{e}\n{text}",
                    file.display()
                )
            })
            .to_file();
        assert_eq!(again, first, "{}:\n{text}", file.display());
    }
}

/// Every key path in `value`: tables are walked, arrays of tables too (as
/// `key[]`), the names of `[backend.NAME]` become `*`.
fn key_paths(value: &serde_json::Value, prefix: &str, into: &mut BTreeSet<String>) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                let key = if prefix == "backend" { "*" } else { key };
                let path = if prefix.is_empty() {
                    key.to_owned()
                } else {
                    format!("{prefix}.{key}")
                };
                into.insert(path.clone());
                key_paths(value, &path, into);
            }
        }
        Value::Array(items) if items.iter().any(|i| i.is_object()) => {
            for item in items {
                key_paths(item, &format!("{prefix}[]"), into);
            }
        }
        _ => {}
    }
}

#[test]
fn the_every_key_fixture_sets_every_key_of_the_file_model() {
    // The model's keys: the effective configuration shows every key of
    // every section present, `null` when unset.
    private_token_files();
    let file = root().join("tests/config/valid/every_key.toml");
    let effective = serde_json::to_value(Config::load(&file).unwrap().to_file()).unwrap();
    let mut model = BTreeSet::new();
    key_paths(&effective, "", &mut model);
    // The keys the fixture sets, read as plain TOML.
    let text = std::fs::read_to_string(&file).unwrap();
    let raw: toml::Table = toml::from_str(&text).unwrap();
    let mut set = BTreeSet::new();
    key_paths(&serde_json::to_value(raw).unwrap(), "", &mut set);
    let missing: Vec<_> = model.difference(&set).collect();
    assert!(
        missing.is_empty(),
        "every_key.toml does not set {missing:?}"
    );
    assert_eq!(set, model, "every key the fixture sets is in the model");
}

#[test]
fn token_files_hold_named_tokens_or_one_bare_token() {
    use snirelay::config::parse_tokens;
    let named = parse_tokens("# ops\nops:abc\n\nci: def \n").unwrap();
    assert_eq!(
        named,
        [("ops".into(), "abc".into()), ("ci".into(), "def".into())]
    );
    assert_eq!(
        parse_tokens("just-one-token\n").unwrap(),
        [("token".to_owned(), "just-one-token".to_owned())]
    );
    for (bad, says) in [
        ("", "holds no token"),
        ("# only a comment\n", "holds no token"),
        ("a:x\nb\n", "line 2: expected `name:token`"),
        ("a:x\na:y\n", "appears twice"),
        ("a:\n", "empty or not printable"),
        ("bad name:x\n", "is not [A-Za-z0-9-_.@]+"),
    ] {
        let error = parse_tokens(bad).unwrap_err();
        assert!(error.contains(says), "{bad:?}: {error}");
    }
}

/// The Markdown files a reader follows links through: README, docs/, the
/// benchmark log and the other READMEs in the tree.
fn documentation_files() -> Vec<PathBuf> {
    let root = root();
    let mut files = vec![root.join("README.md"), root.join("benches/README.md")];
    for dir in ["docs", "tests/data", "packaging/debian"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// A Markdown file's text outside fenced code blocks.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The anchors GitHub gives a file's headings: lowercased, punctuation
/// other than `-` and `_` dropped, spaces made `-`, a repeated heading
/// suffixed `-1`, `-2`, ...
fn heading_anchors(text: &str) -> BTreeSet<String> {
    let mut seen: std::collections::BTreeMap<String, usize> = Default::default();
    let mut anchors = BTreeSet::new();
    for line in prose(text).lines() {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let slug: String = line[hashes..]
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        anchors.insert(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    anchors
}

#[test]
fn every_relative_link_in_the_documentation_resolves() {
    let mut checked = 0;
    let mut broken = Vec::new();
    for file in documentation_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let body = prose(&text);
        let mut rest = body.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let Some(end) = rest.find(|c: char| c == ')' || c.is_whitespace()) else {
                break;
            };
            let link = &rest[..end];
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = link.split_once('#').unwrap_or((link, ""));
            let target = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            checked += 1;
            if !target.exists() {
                broken.push(format!("{}: {link}: no such file", file.display()));
            } else if !anchor.is_empty() && target.extension().is_some_and(|e| e == "md") {
                let anchors = heading_anchors(&std::fs::read_to_string(&target).unwrap());
                if !anchors.contains(anchor) {
                    broken.push(format!("{}: {link}: no such heading", file.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    assert!(
        checked > 50,
        "only {checked} links found: is the scan broken?"
    );
}
