//! The shipped man pages stand alone: each command's page has its options,
//! EXIT STATUS, SIGNALS (for `run`, and `snirelay`, which runs by
//! default), FILES, ENVIRONMENT, EXAMPLES and SEE ALSO; no page in
//! packaging/ names a snirelay page that is not shipped; the run page
//! lists every environment variable the binary reads; docs/operations.md's
//! "Exit codes and signals" names what the run page does; and each
//! command's `--help` lists only what it takes (`--takeover` and the log
//! options are `run`'s, `--config` is theirs that read the file).
//! That the committed pages are what the generator writes is
//! `packaging::committed_man_pages_match_the_cli`.

use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every man page in packaging/, as (file name, text).
fn shipped_pages() -> Vec<(String, String)> {
    let mut pages: Vec<(String, String)> = std::fs::read_dir(root().join("packaging"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension()
                .is_some_and(|e| e == "1" || e == "5" || e == "8")
        })
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect();
    pages.sort();
    pages
}

/// The `.SH` headings of a page.
fn sections(page: &str) -> Vec<String> {
    page.lines()
        .filter_map(|l| l.strip_prefix(".SH "))
        .map(|s| s.trim_matches('"').to_owned())
        .collect()
}

/// The text of section `title` of a page.
fn section<'a>(page: &'a str, title: &str) -> &'a str {
    let start = page
        .find(&format!(".SH {title}\n"))
        .unwrap_or_else(|| panic!("no section {title}"));
    let rest = &page[start + 4 + title.len()..];
    &rest[..rest.find("\n.SH ").unwrap_or(rest.len())]
}

#[test]
fn every_command_page_has_every_section() {
    let pages: Vec<(String, String)> = shipped_pages()
        .into_iter()
        .filter(|(name, _)| name.ends_with(".1"))
        .collect();
    assert!(pages.len() >= 6, "only {} command pages", pages.len());
    for (name, page) in &pages {
        let have = sections(page);
        let mut want = vec![
            "NAME",
            "SYNOPSIS",
            "DESCRIPTION",
            "OPTIONS",
            "EXIT STATUS",
            "FILES",
            "ENVIRONMENT",
            "EXAMPLES",
            "SEE ALSO",
        ];
        if name == "snirelay.1" || name == "snirelay-run.1" {
            want.push("SIGNALS");
        }
        for title in want {
            assert!(
                have.iter().any(|h| h == title),
                "{name} has no {title} section (has {have:?})"
            );
        }
        assert!(
            section(page, "EXAMPLES").contains("snirelay"),
            "{name}: an example that runs nothing"
        );
    }
    let run = &pages.iter().find(|(n, _)| n == "snirelay-run.1").unwrap().1;
    let signals = section(run, "SIGNALS");
    for signal in ["SIGHUP", "SIGTERM", "SIGINT"] {
        assert!(signals.contains(signal), "snirelay-run.1 lacks {signal}");
    }
    assert!(
        section(run, "OPTIONS").contains("takeover"),
        "snirelay-run.1 lacks --takeover"
    );
}

/// Every `snirelay…(N)` a page names (`snirelay\-check(1)`, `.BR
/// snirelay\-run (1)`) is a page in packaging/.
#[test]
fn no_page_names_a_page_that_is_not_shipped() {
    let pages = shipped_pages();
    let shipped: Vec<&str> = pages.iter().map(|(n, _)| n.as_str()).collect();
    let mut named = 0;
    let mut dangling = Vec::new();
    for (name, page) in &pages {
        let text = page
            .replace("\\-", "-")
            .replace("\\fB", "")
            .replace("\\fR", "");
        let mut rest = text.as_str();
        while let Some(at) = rest.find("snirelay") {
            rest = &rest[at..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '.'))
                .unwrap_or(rest.len());
            let page_name = &rest[..end];
            let after = rest[end..].trim_start_matches(' ');
            rest = &rest[end..];
            let Some(section) = after
                .strip_prefix('(')
                .and_then(|a| a.split_once(')'))
                .map(|(s, _)| s)
                .filter(|s| s.len() == 1 && s.chars().all(|c| c.is_ascii_digit()))
            else {
                continue;
            };
            named += 1;
            let file = format!("{page_name}.{section}");
            if !shipped.contains(&file.as_str()) {
                dangling.push(format!("{name} names {page_name}({section})"));
            }
        }
    }
    assert!(
        dangling.is_empty(),
        "pages not shipped:\n{}",
        dangling.join("\n")
    );
    assert!(
        named >= 40,
        "only {named} references found: is the scan broken?"
    );
}

/// Every variable the binary reads at run time (`env::var("X")`,
/// `var_os("X")` under src/) is in snirelay-run.1's ENVIRONMENT.
#[test]
fn the_run_page_lists_every_environment_variable_the_binary_reads() {
    fn walk(dir: &std::path::Path, into: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, into);
            } else if path.extension().is_some_and(|e| e == "rs") {
                into.push(std::fs::read_to_string(path).unwrap());
            }
        }
    }
    let mut sources = Vec::new();
    walk(&root().join("src"), &mut sources);
    let mut read = Vec::new();
    for text in &sources {
        for call in ["env::var(\"", "env::var_os(\""] {
            for (_, rest) in text
                .match_indices(call)
                .map(|(i, _)| ((), &text[i + call.len()..]))
            {
                read.push(rest.split('"').next().unwrap().to_owned());
            }
        }
    }
    read.sort();
    read.dedup();
    assert!(read.len() >= 5, "only {read:?}: is the scan broken?");
    let run = std::fs::read_to_string(root().join("packaging/snirelay-run.1")).unwrap();
    let environment = section(&run, "ENVIRONMENT").replace("\\-", "-");
    for name in read {
        assert!(
            environment.contains(&name),
            "snirelay-run.1's ENVIRONMENT lacks {name} (src/cli/manual.rs)"
        );
    }
}

/// docs/operations.md, "Exit codes and signals", says what the run page's
/// tables say: every exit code and every signal.
#[test]
fn operations_names_the_exit_codes_and_signals_of_the_run_page() {
    let docs = std::fs::read_to_string(root().join("docs/operations.md")).unwrap();
    let start = docs
        .find("## Exit codes and signals\n")
        .expect("docs/operations.md has \"Exit codes and signals\"");
    let rest = &docs[start + 3..];
    let text = &rest[..rest.find("\n## ").unwrap_or(rest.len())];
    let run = snirelay::cli::manual::manual("run").unwrap();
    for (code, _) in run.exit_status {
        assert!(text.contains(&format!("`{code}`")), "no exit code `{code}`");
    }
    for (signal, _) in run.signals {
        let signal = signal.split(' ').next().unwrap();
        assert!(text.contains(signal), "no {signal}");
    }
}

/// Each command takes, of the options that are not everyone's, exactly
/// what it uses: `run` (and `snirelay` with no command, which is `run`)
/// the configuration, the log options and `--takeover`; `check` and `ctl`
/// the configuration only; `probe` and `import-haproxy` none. Their help
/// lists nothing else, and the rest is a usage error (exit 2), as is an
/// option written before a command (`snirelay -c FILE check`), which
/// would otherwise check another file than the one named.
#[test]
fn each_command_takes_only_the_options_it_uses() {
    use clap::CommandFactory;
    const SHARED: [&str; 4] = ["config", "log-format", "log-level", "takeover"];
    let expected: &[(&str, &[&str])] = &[
        ("snirelay", &SHARED),
        ("run", &SHARED),
        ("check", &["config"]),
        ("probe", &[]),
        ("certs", &["config"]),
        ("ctl", &["config"]),
        ("import-haproxy", &[]),
        // clap's own `help` command.
        ("help", &[]),
    ];
    let mut command = snirelay::cli::Cli::command();
    command.build();
    let takes = |c: &clap::Command| -> Vec<String> {
        c.get_arguments()
            .filter_map(|a| a.get_long())
            .filter(|long| SHARED.contains(long))
            .map(str::to_owned)
            .collect()
    };
    let mut seen = vec![("snirelay".to_owned(), takes(&command))];
    seen.extend(
        command
            .get_subcommands()
            .map(|sub| (sub.get_name().to_owned(), takes(sub))),
    );
    let seen: Vec<(&str, Vec<&str>)> = seen
        .iter()
        .map(|(name, v)| (name.as_str(), v.iter().map(String::as_str).collect()))
        .collect();
    let expected: Vec<(&str, Vec<&str>)> = expected
        .iter()
        .map(|(name, v)| (*name, v.to_vec()))
        .collect();
    assert_eq!(seen, expected);

    let exit = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_snirelay"))
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for refused in [
        &[
            "check",
            "--takeover",
            "/nonexistent",
            "--config",
            "/nonexistent",
        ][..],
        &["check", "--log-level", "debug", "--config", "/nonexistent"],
        &["--config", "/nonexistent", "check"],
        &["import-haproxy", "--config", "/nonexistent", "/nonexistent"],
        &[
            "probe",
            "--log-format",
            "json",
            "localhost",
            "--sni",
            "a.example",
        ],
    ] {
        let (code, stderr) = exit(refused);
        assert_eq!(code, Some(2), "{refused:?}: {stderr}");
    }
    // The configuration given before no command is `run`'s: a missing
    // file is the start error (1) naming it, not a usage error.
    let (code, stderr) = exit(&["--config", "/nonexistent/top.toml"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("/nonexistent/top.toml"), "{stderr}");
    // `ctl`'s configuration may follow its action.
    let (code, stderr) = exit(&["ctl", "addresses", "--config", "/nonexistent/ctl.toml"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("/nonexistent/ctl.toml"), "{stderr}");
    for (name, options) in [("check", "--config"), ("import-haproxy", "--check")] {
        let help = Command::new(env!("CARGO_BIN_EXE_snirelay"))
            .args([name, "--help"])
            .output()
            .unwrap();
        let help = String::from_utf8_lossy(&help.stdout);
        assert!(help.contains(options), "{name}: {help}");
        for other in ["--takeover", "--log-level", "--log-format"] {
            assert!(!help.contains(other), "{name} lists {other}: {help}");
        }
    }
}
