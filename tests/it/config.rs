//! Config fixtures and the `check` command.
//!
//! Every file in tests/config/valid (and the shipped config/*.toml) must
//! load; every file in tests/config/invalid must fail, and its message must
//! contain each `# error: …` line the fixture declares (key and bad value).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use snirelay::config::Config;
use snirelay::config::FileConfig;

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
    let sni = |s: &str| snirelay::wire::sni::Sni::parse(s.as_bytes()).unwrap();
    assert!(tls.matcher().find(&sni("localhost")).is_some());
    assert!(tls.matcher().find(&sni("app.localhost")).is_some());
    assert!(tls.matcher().find(&sni("example.com")).is_none());
}

/// docs/migrating-from-haproxy.md: its TOML block loads, and
/// says what the lines of the tls-edge-failover template it replaces say
/// (tests/data/haproxy/tls-edge-failover.cfg: maxconn 2048, maxconnrate
/// 400, backlog 2048, inspect-delay 5s, timeouts 5s / 5m / 15s,
/// hard-stop-after 10m, `sc0_conn_cur gt 100`, `sc0_conn_rate gt 30` over
/// `conn_rate(1s)`, `check inter 5s fall 3 rise 2`).
#[test]
fn the_readme_migration_example_loads() {
    use std::num::NonZeroU32;
    use std::time::Duration;
    let readme = std::fs::read_to_string(root().join("docs/migrating-from-haproxy.md")).unwrap();
    let section = readme
        .split_once("# Migrating from HAProxy\n")
        .expect("docs/migrating-from-haproxy.md has a `# Migrating from HAProxy` heading")
        .1;
    // The template as the guide shows it is the fixture, line for line.
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
            "the guide's line-by-line table does not translate `{line}`"
        );
    }
    let block = section
        .split_once("```toml\n")
        .and_then(|(_, rest)| rest.split_once("\n```"))
        .expect("the migration section has a ```toml block")
        .0;
    let config = Config::from_toml(block, Path::new("docs/migrating-from-haproxy.md"))
        .unwrap_or_else(|e| panic!("the guide's migration example does not load:\n{e}"));
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
    let attempts = tls
        .limits
        .attempts_per_source
        .expect("a per-source count of attempts");
    assert_eq!(
        (attempts.count.get(), attempts.period),
        (30, Duration::from_secs(1)),
        "sc0_conn_rate gt 30 over conn_rate(1s)"
    );
    assert_eq!(tls.limits.rate_per_source, None);
    assert_eq!(tls.limits.source_prefix_v4, 32);
    let sni = |s: &str| snirelay::wire::sni::Sni::parse(s.as_bytes()).unwrap();
    assert!(tls.matcher().find(&sni("example.com")).is_some());
    assert!(tls.matcher().find(&sni("a.b.example.com")).is_some());
    assert!(tls.matcher().find(&sni("badexample.com")).is_none());
    assert!(tls.matcher().find(&sni("evil-example.com")).is_none());
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

/// The binary run with `args`: exit code, stdout, stderr.
pub(crate) fn snirelay(args: &[&str]) -> (i32, String, String) {
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

/// The configuration a documentation fragment is merged into: one listener,
/// one route and its backend.
const DOCS_BASE_CONFIG: &str = r#"
[[listener]]
name = "tls"
listen = "127.0.0.1:0"

[[route]]
sni = ["base.example"]
backend = "base"

[backend.base]
addresses = ["127.0.0.1:9"]
"#;

/// Files the documentation's examples read from /etc/snirelay, stood in for
/// by the fixtures of tests/config/valid.
const DOCS_FILES_FROM_FIXTURES: [(&str, &str); 7] = [
    ("/etc/snirelay/customers.lst", "every_key.names"),
    ("/etc/snirelay/wg.pub", "wireguard.pub"),
    ("/var/config/key.pub", "wireguard.pub"),
    ("/etc/snirelay/pangolin-ca.pem", "lookup-ca.pem"),
    ("/etc/snirelay/edge.pem", "lookup-client.pem"),
    ("/etc/snirelay/edge.key", "lookup-client.key"),
    ("/etc/snirelay/lookup.token", "lookup.token"),
];

/// The placeholders of Pangolin's HA reference deployment, which
/// docs/pangolin.md's block for it keeps, filled in as an operator would
/// (documentation addresses).
const DOCS_PLACEHOLDERS: [(&str, &str); 4] = [
    ("<THIS_NODE_EXTERNAL_IP>", "203.0.113.10"),
    ("<NODE1_EXTERNAL_IP>", "203.0.113.10"),
    ("<NODE2_EXTERNAL_IP>", "198.51.100.20"),
    ("<NODE1_INTERNAL_IP>", "192.0.2.10"),
];

/// The fenced ```toml blocks of a Markdown file, with the line of each
/// opening fence.
fn toml_blocks(text: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for (at, line) in text.lines().enumerate() {
        let fence = line.trim_start().starts_with("```");
        match &mut open {
            Some(_) if fence => blocks.push(open.take().unwrap()),
            Some((_, body)) => {
                body.push_str(line);
                body.push('\n');
            }
            None if line.trim() == "```toml" => open = Some((at + 1, String::new())),
            None => {}
        }
    }
    blocks
}

/// A fragment laid over [`DOCS_BASE_CONFIG`]: its `[[route]]` list replaces
/// the base's route; `[listener.KEY]` tables go into the base's listener;
/// `[global]`, `[admin]` and `[backend.NAME]` are added to the base's; then
/// every backend a route, listener or cluster names (`backend`, `no_sni`,
/// `ech`, `local_backend`) and nothing defines is added as one address.
fn merged_into_base(fragment: toml::Table) -> toml::Table {
    use toml::Value;
    let mut config: toml::Table = toml::from_str(DOCS_BASE_CONFIG).unwrap();
    for (key, value) in fragment {
        match (key.as_str(), value) {
            ("listener", Value::Table(keys)) => {
                let listener = config["listener"].as_array_mut().unwrap()[0]
                    .as_table_mut()
                    .unwrap();
                listener.extend(keys);
            }
            (_, Value::Table(keys)) => match config.get_mut(&key) {
                Some(Value::Table(base)) => base.extend(keys),
                _ => {
                    config.insert(key, Value::Table(keys));
                }
            },
            (_, value) => {
                config.insert(key, value);
            }
        }
    }
    let mut named = Vec::new();
    let tables = |key: &str| -> Vec<toml::Table> {
        match config.get(key) {
            Some(Value::Array(items)) => {
                items.iter().filter_map(|i| i.as_table().cloned()).collect()
            }
            Some(Value::Table(map)) => map.values().filter_map(|v| v.as_table().cloned()).collect(),
            _ => Vec::new(),
        }
    };
    for section in tables("route").iter().chain(&tables("listener")) {
        for key in ["backend", "no_sni", "ech"] {
            if let Some(name) = section.get(key).and_then(Value::as_str) {
                named.push(name.to_owned());
            }
        }
    }
    for backend in tables("backend") {
        let local = backend.get("cluster").and_then(|c| c.get("local_backend"));
        if let Some(name) = local.and_then(Value::as_str) {
            named.push(name.to_owned());
        }
    }
    let backends = config
        .entry("backend")
        .or_insert_with(|| Value::Table(Default::default()))
        .as_table_mut()
        .unwrap();
    for name in named {
        if !matches!(name.as_str(), "reject" | "pass") && !backends.contains_key(&name) {
            let stand_in: toml::Table = toml::from_str(r#"addresses = ["127.0.0.1:9"]"#).unwrap();
            backends.insert(name, Value::Table(stand_in));
        }
    }
    config
}

/// `snirelay check --config FILE` on `text` written to a scratch folder:
/// `Err` with its output unless it exits 0 and prints `ok` first.
fn binary_check(text: &str) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!(
        "snirelay-test-doc-check-{}-{:x}",
        std::process::id(),
        text.len()
            ^ text
                .bytes()
                .fold(0usize, |h, b| h.rotate_left(5) ^ usize::from(b))
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("snirelay.toml");
    std::fs::write(&file, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_snirelay"))
        .arg("check")
        .arg("--config")
        .arg(&file)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    if out.status.success() && stdout.lines().next() == Some("ok") {
        Ok(())
    } else {
        Err(format!(
            "{}: {stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Every fenced ```toml block in README.md and docs/*.md passes what
/// `snirelay check` runs (`Config::from_toml`). A block with a
/// `[[listener]]` is a whole configuration: it is checked as it stands,
/// and also by the binary's `snirelay check` on it as a file of its own,
/// as a reader would ([`binary_check`]). Any
/// other block is a fragment of one (a backend, a route, a section) and is
/// checked merged into a stated base, [`DOCS_BASE_CONFIG`], as
/// [`merged_into_base`] says; the paths under /etc/snirelay that examples
/// read are pointed at fixtures first ([`DOCS_FILES_FROM_FIXTURES`]), and
/// the placeholders of Pangolin's reference are filled in
/// ([`DOCS_PLACEHOLDERS`]). A block that does not pass fails the test
/// naming its file and line.
#[test]
fn every_toml_block_in_the_documentation_passes_check() {
    let root = root();
    let mut files = vec![root.join("README.md")];
    files.extend(
        documentation_files()
            .into_iter()
            .filter(|f| f.parent() == Some(&root.join("docs"))),
    );
    let (mut whole, mut fragments, mut failed) = (0, 0, Vec::new());
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.strip_prefix(&root).unwrap().display().to_string();
        for (line, block) in toml_blocks(&text) {
            let mut block = block;
            for (path, fixture) in DOCS_FILES_FROM_FIXTURES {
                let stand_in = root.join("tests/config/valid").join(fixture);
                block = block.replace(&format!("\"{path}\""), &format!("{:?}", stand_in));
            }
            for (placeholder, value) in DOCS_PLACEHOLDERS {
                block = block.replace(placeholder, value);
            }
            let where_ = format!("{name}:{line}");
            let parsed: toml::Table = match toml::from_str(&block) {
                Ok(table) => table,
                Err(e) => {
                    failed.push(format!("{where_}: not TOML: {e}"));
                    continue;
                }
            };
            let config = if parsed.get("listener").is_some_and(|l| l.is_array()) {
                whole += 1;
                if let Err(e) = binary_check(&block) {
                    failed.push(format!("{where_}: `snirelay check` refuses it:\n{e}"));
                }
                block
            } else {
                fragments += 1;
                toml::to_string(&merged_into_base(parsed)).unwrap()
            };
            if let Err(e) = Config::from_toml(&config, Path::new(&where_)) {
                failed.push(format!("{where_}: does not pass check:\n{e}\n{config}"));
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
    assert!(
        whole >= 2 && fragments >= 10,
        "only {whole} whole configurations and {fragments} fragments found: is the scan broken?"
    );
}

// ------------------------------------------------ the key declarations

use serde_json::Value;
use snirelay::config::keys::{KEYS, KeyDefault, Kind};

/// Every key path in `value`, named as the declarations name them: arrays
/// of tables without brackets (`listener.backlog`), the names of
/// `[backend.NAME]` as `*`, and a cluster's `headers` as one key (its names
/// are the operator's).
fn declared_style_paths(value: &Value, prefix: &str, into: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                let key = if prefix == "backend" { "*" } else { key };
                let path = if prefix.is_empty() {
                    key.to_owned()
                } else {
                    format!("{prefix}.{key}")
                };
                if path != "backend" {
                    into.insert(path.clone());
                }
                if !(prefix.ends_with(".cluster") && key == "headers") {
                    declared_style_paths(value, &path, into);
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                declared_style_paths(item, prefix, into);
            }
        }
        _ => {}
    }
}

fn declared_names() -> BTreeSet<String> {
    KEYS.iter().map(|k| k.name.to_owned()).collect()
}

fn every_key_file() -> PathBuf {
    root().join("tests/config/valid/every_key.toml")
}

fn every_key_raw() -> Value {
    let text = std::fs::read_to_string(every_key_file()).unwrap();
    serde_json::to_value(toml::from_str::<toml::Table>(&text).unwrap()).unwrap()
}

/// Compares two key sets, naming what is only on either side.
fn assert_same_keys(declared: &BTreeSet<String>, other: &BTreeSet<String>, what: &str) {
    let undeclared: Vec<_> = other.difference(declared).collect();
    let missing: Vec<_> = declared.difference(other).collect();
    assert!(
        undeclared.is_empty() && missing.is_empty(),
        "{what} and src/config/keys.rs disagree:\n  not declared: {undeclared:?}\n  declared but missing: {missing:?}"
    );
}

#[test]
fn each_key_is_declared_once_inside_a_declared_table() {
    let mut seen = BTreeSet::new();
    for key in KEYS {
        assert!(seen.insert(key.name), "{} is declared twice", key.name);
        if let Some((parent, _)) = key.name.rsplit_once('.') {
            assert!(
                seen.contains(parent) || parent == "backend",
                "{}: its table {parent} is not declared before it",
                key.name
            );
        }
        assert!(
            !key.doc.is_empty() && key.doc.ends_with('.'),
            "{}: one line of doc, a sentence",
            key.name
        );
    }
}

#[test]
fn the_every_key_fixture_sets_exactly_the_declared_keys() {
    let mut set = BTreeSet::new();
    declared_style_paths(&every_key_raw(), "", &mut set);
    assert_same_keys(&declared_names(), &set, "tests/config/valid/every_key.toml");
}

#[test]
fn the_effective_view_shows_exactly_the_declared_keys() {
    private_token_files();
    let effective = Config::load(&every_key_file()).unwrap().to_file();
    let mut shown = BTreeSet::new();
    declared_style_paths(&serde_json::to_value(effective).unwrap(), "", &mut shown);
    assert_same_keys(&declared_names(), &shown, "/config (the effective view)");
}

/// The first table at `path` (declared-style) in `value`.
fn first_table<'a>(
    value: &'a mut Value,
    path: &[&str],
) -> Option<&'a mut serde_json::Map<String, Value>> {
    match value {
        Value::Array(items) => items.iter_mut().find_map(|item| first_table(item, path)),
        Value::Object(map) => match path.split_first() {
            None => Some(map),
            Some((&"*", rest)) => map.values_mut().find_map(|v| first_table(v, rest)),
            Some((head, rest)) => map.get_mut(*head).and_then(|v| first_table(v, rest)),
        },
        _ => None,
    }
}

/// The serde model's keys of each table, read from what it answers to a
/// key it does not know ("unknown field `x`, expected one of `a`, `b`"),
/// against the keys declared in that table.
#[test]
fn the_file_model_accepts_exactly_the_declared_keys() {
    let mut tables: Vec<&str> = vec![""];
    tables.extend(
        KEYS.iter()
            .filter(|k| k.kind.is_table() || matches!(k.kind, Kind::Keepalive | Kind::Source))
            .map(|k| k.name),
    );
    // An `addresses` entry may be a table of its own keys.
    tables.push("backend.*.addresses");
    for table in tables {
        let mut probe = every_key_raw();
        let path: Vec<&str> = if table.is_empty() {
            Vec::new()
        } else {
            table.split('.').collect()
        };
        first_table(&mut probe, &path)
            .unwrap_or_else(|| panic!("every_key.toml has no table at {table:?}"))
            .insert("zz_undeclared".into(), Value::from(1));
        let error = serde_json::from_value::<FileConfig>(probe)
            .expect_err(&format!("{table:?} took an unknown key"))
            .to_string();
        assert!(error.contains("unknown field `zz_undeclared`"), "{error}");
        let expected = error.split_once("expected").map_or("", |(_, list)| list);
        let accepted: BTreeSet<String> = expected
            .split('`')
            .skip(1)
            .step_by(2)
            .map(|field| match (table, field) {
                ("", "backend") => "backend.*".to_owned(),
                ("", _) => field.to_owned(),
                _ => format!("{table}.{field}"),
            })
            .collect();
        let declared: BTreeSet<String> = KEYS
            .iter()
            .filter(|k| match table {
                "" => !k.name.contains('.') || k.name == "backend.*",
                _ => k.child_of(table).is_some(),
            })
            .map(|k| k.name.to_owned())
            .collect();
        assert_same_keys(
            &declared,
            &accepted,
            &format!("the serde model of {table:?}"),
        );
    }
}

/// Every value at `path` (declared-style) in `value`, one per table that
/// could hold it (`Null` where the table leaves it out).
fn values_at(value: &Value, path: &[&str], into: &mut Vec<Value>) {
    match value {
        Value::Array(items) => items.iter().for_each(|item| values_at(item, path, into)),
        Value::Object(map) => match path {
            [] => into.push(value.clone()),
            [last] => into.push(map.get(*last).cloned().unwrap_or(Value::Null)),
            [first, rest @ ..] if *first == "*" => {
                map.values().for_each(|v| values_at(v, rest, into))
            }
            [first, rest @ ..] => {
                if let Some(v) = map.get(*first) {
                    values_at(v, rest, into)
                }
            }
        },
        _ => {}
    }
}

/// A configuration that sets only what each section needs to exist, so
/// every other key takes its default.
const MINIMAL_SECTIONS: &str = r#"
[global]

[log]

[admin]

[[listener]]
name = "tcp"
listen = "127.0.0.1:0"
tcp_keepalive = {}
[listener.limits]

[[listener]]
name = "peers"
listen = "127.0.0.1:0"
[listener.proxy_protocol]
trusted = ["10.0.0.0/8"]

[[listener]]
name = "quic"
protocol = "quic"
listen = "127.0.0.1:0"

[[route]]
listener = "tcp"
sni = ["a.example"]
backend = "a_fixed"
[route.limits]

[[route]]
listener = "peers"
sni = ["a.example"]
backend = "a_fixed"

[[route]]
listener = "quic"
sni = ["a.example"]
backend = "a_fixed"

[backend.a_fixed]
addresses = [{ address = "127.0.0.1:9", max_connections = 5 }, { address = "127.0.0.1:10", weight = 2, source = { addresses = ["127.0.0.1"] } }]
tcp_keepalive = {}
source = { addresses = ["127.0.0.1"] }
[backend.a_fixed.health]

[backend.b_fastest]
addresses = ["127.0.0.1:9"]
policy = "fastest"

[backend.c_resolve]
resolve = "origin.example:443"

[backend.d_resolver]
resolve = "origin.example:443"
resolver = "127.0.0.1:53"

[backend.e_dns_cluster.cluster]
dns_server = "127.0.0.1:53"
allowed_targets = ["10.0.0.0/8"]

[backend.f_http_cluster.cluster]
lookup_url = "http://127.0.0.1:9/"
allowed_targets = ["10.0.0.0/8"]

[backend.g_pangolin_cluster.cluster]
lookup_url = "http://127.0.0.1:9/"
protocol = "pangolin"
public_key = "key"
allowed_targets = ["10.0.0.0/8"]

[backend.h_tlvs]
addresses = ["127.0.0.1:9"]
proxy_protocol = "v2"
proxy_protocol_tlvs = [{ type = 0xE1, value = "sni" }]
"#;

fn toml_value(text: &str) -> Value {
    let table: toml::Table = toml::from_str(&format!("v = {text}")).unwrap();
    serde_json::to_value(&table["v"]).unwrap()
}

#[test]
fn declared_defaults_are_the_defaults_the_parser_applies() {
    let config = Config::from_toml(MINIMAL_SECTIONS, Path::new("minimal-sections.toml"))
        .unwrap_or_else(|e| panic!("{e}"));
    let effective = serde_json::to_value(config.to_file()).unwrap();
    let at = |name: &str| {
        let mut found = Vec::new();
        values_at(&effective, &name.split('.').collect::<Vec<_>>(), &mut found);
        assert!(
            !found.is_empty(),
            "{name}: no table holds it in the minimal config"
        );
        found
    };
    let mut checked = 0;
    for key in KEYS.iter().filter(|k| !k.kind.is_table()) {
        let found = at(key.name);
        let holds = |want: &Value| found.contains(want);
        match key.default {
            KeyDefault::Value(text) => assert!(
                holds(&toml_value(text)),
                "{}: declared default {text}, the parser gives {found:?}",
                key.name
            ),
            KeyDefault::ByProtocol { tcp, quic } => assert!(
                holds(&toml_value(tcp)) && holds(&toml_value(quic)),
                "{}: declared defaults {tcp} (tcp) and {quic} (quic), the parser gives {found:?}",
                key.name
            ),
            KeyDefault::Unset(_) => assert!(
                holds(&Value::Null),
                "{}: declared unset by default, the parser gives {found:?}",
                key.name
            ),
            KeyDefault::Inherit(from) => assert!(
                at(from).iter().any(|v| !v.is_null() && holds(v)),
                "{}: declared to follow {from}, the parser gives {found:?} against {:?}",
                key.name,
                at(from)
            ),
            KeyDefault::Computed(_) | KeyDefault::Required(_) | KeyDefault::Table => continue,
        }
        checked += 1;
    }
    assert!(checked > 80, "only {checked} defaults compared");
}

#[test]
fn the_generated_reference_and_man_page_are_current() {
    for (name, text) in snirelay::config::reference::generated_files() {
        let committed = std::fs::read_to_string(root().join(name))
            .unwrap_or_else(|e| panic!("{name}: {e}; run `cargo run --example docgen`"));
        assert!(
            committed == text,
            "{name} is stale: run `cargo run --example docgen` and commit it"
        );
    }
    // Each key has its row in the reference (by its name in its section).
    let reference = std::fs::read_to_string(root().join("docs/config-keys.md")).unwrap();
    for key in KEYS.iter().filter(|k| !k.kind.is_table()) {
        let last = key.name.rsplit('.').next().unwrap();
        assert!(
            reference.contains(&format!("{last}` |")),
            "docs/config-keys.md has no row for {}",
            key.name
        );
    }
}

/// JSON pointers to every table at `path` (declared-style) in `value`.
fn table_pointers(value: &Value, path: &[&str], at: &str, into: &mut Vec<String>) {
    match value {
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                table_pointers(item, path, &format!("{at}/{i}"), into);
            }
        }
        Value::Object(map) => match path.split_first() {
            None => into.push(at.to_owned()),
            Some((&"*", rest)) => {
                for (name, v) in map {
                    table_pointers(v, rest, &format!("{at}/{name}"), into);
                }
            }
            Some((head, rest)) => {
                if let Some(v) = map.get(*head) {
                    table_pointers(v, rest, &format!("{at}/{head}"), into);
                }
            }
        },
        _ => {}
    }
}

/// Each declared integer range is the one the parser enforces: one past
/// either end is refused as out of that range, under the key's name, in
/// some table of the minimal configuration that holds the key.
#[test]
fn declared_ranges_are_the_ranges_the_parser_enforces() {
    let raw =
        serde_json::to_value(toml::from_str::<toml::Table>(MINIMAL_SECTIONS).unwrap()).unwrap();
    let mut checked = 0;
    for key in KEYS
        .iter()
        .filter(|k| matches!(k.kind, Kind::Integer | Kind::CountOrOff))
    {
        let Some((low, high)) = key.range else {
            continue;
        };
        let (table, last) = key.name.rsplit_once('.').unwrap();
        let mut pointers = Vec::new();
        table_pointers(
            &raw,
            &table.split('.').collect::<Vec<_>>(),
            "",
            &mut pointers,
        );
        assert!(
            !pointers.is_empty(),
            "{}: no table for it in the minimal config",
            key.name
        );
        for value in [low - 1, high + 1] {
            let want = format!("{last}: {value} is out of range ({low}..={high})");
            let refused = pointers.iter().any(|pointer| {
                let mut probe = raw.clone();
                probe
                    .pointer_mut(pointer)
                    .and_then(Value::as_object_mut)
                    .unwrap()
                    .insert(last.to_owned(), Value::from(value));
                let text = toml::to_string(&toml::Value::try_from(&probe).unwrap()).unwrap();
                match Config::from_toml(&text, Path::new("range.toml")) {
                    Ok(_) => false,
                    Err(e) => e.to_string().contains(&want),
                }
            });
            assert!(
                refused,
                "{}: {value} is not refused with `{want}`",
                key.name
            );
        }
        checked += 1;
    }
    assert!(checked >= 30, "only {checked} ranges compared");
}

/// The shipped example (config/snirelay.toml) shows every declared key,
/// set or commented out, as the reference says it does.
#[test]
fn the_shipped_example_shows_every_declared_key() {
    let text = std::fs::read_to_string(root().join("config/snirelay.toml")).unwrap();
    let missing: Vec<&str> = KEYS
        .iter()
        .filter(|k| k.name != "backend.*")
        .filter(|k| {
            let last = k.name.rsplit('.').next().unwrap();
            !text.contains(&format!("{last} =")) && !text.contains(&format!("{last}]"))
        })
        .map(|k| k.name)
        .collect();
    assert!(
        missing.is_empty(),
        "config/snirelay.toml does not show {missing:?}"
    );
}

/// `/config` leaves out, on a QUIC listener and its routes, exactly the
/// keys declared TCP-only: they are refused there, so a round trip must
/// not write them.
#[test]
fn the_effective_view_of_a_quic_listener_leaves_out_the_tcp_only_keys() {
    // Leaves out *exactly* those: every TCP-only key is shown on a TCP
    // listener of the same file.
    use snirelay::config::keys::tcp_only;
    private_token_files();
    let effective =
        serde_json::to_value(Config::load(&every_key_file()).unwrap().to_file()).unwrap();
    let listener = effective["listener"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["protocol"] == "quic")
        .expect("every_key.toml has a quic listener");
    let route = effective["route"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["listener"] == listener["name"])
        .expect("and a route on it");
    for (table, shown) in [("listener", listener), ("route", route)] {
        let tcp: BTreeSet<&str> = tcp_only(table).collect();
        assert!(!tcp.is_empty(), "{table}: no TCP-only key declared");
        for (key, value) in shown.as_object().unwrap() {
            if tcp.contains(key.as_str()) {
                assert!(
                    value.is_null(),
                    "{table}.{key} is TCP-only but shown: {value}"
                );
            }
        }
    }
    let tcp_listener = &effective["listener"][0];
    assert_eq!(tcp_listener["protocol"], "tcp");
    for key in tcp_only("listener") {
        assert!(
            !tcp_listener[key].is_null(),
            "listener.{key} on a TCP listener"
        );
    }
}
