//! The documentation's shell examples, run as a reader would run them.
//!
//! Each example is read out of its Markdown section at test time, so the
//! page stays what a reader copies and the test fails when the page's
//! commands stop doing what the page says. The only rewrites are the ones a
//! reader's machine makes for them: `cargo run --release --` and a leading
//! `snirelay` become the binary under test, `/tmp/` becomes a scratch
//! folder, and every command runs through `sh -c` from the repository's
//! root (where `config/snirelay.toml` is). Examples that listen on the
//! shipped config's fixed ports (127.0.0.1:8443 and 9443) run in a network
//! namespace of their own (`common::netns::NetNs`), so the ports are free
//! whatever the rest of the suite does. Servers run in the background and
//! are waited for on what they print when ready (`ACCEPT`, the relay's
//! `ready` line), never slept for. A comment line `#   ... text ... text`
//! right after a command is what the page says the command shows: each
//! piece between the `...` must appear in its output.
//!
//! Run:
//! - README.md "A worked example with openssl": the certificate, the
//!   backend (`openssl s_server`), the relay on the shipped config, a
//!   verified client whose typed line must reach the backend, a client with
//!   an unlisted name that must get alert 112 as the comment shows; then
//!   the two access lines of the section's log block, field by field (the
//!   connection id, port, byte counts and duration are shape-checked only).
//!   README's "Set-up" step 1 must be the same relay command (checked).
//! - docs/configuration.md "Configure and check": `snirelay check` on the
//!   shipped config (installed at /etc/snirelay/snirelay.toml by the
//!   package) prints `ok`.
//! - docs/operations.md "Transparent source", the relay's side: the `ip
//!   rule` / `ip route` commands run in a fresh namespace, and the nftables
//!   block both loads there (`nft -f`) and is the rule set
//!   `tests/it/transparent.rs` builds (`common::netns::TPROXY_RULES`).
//!
//! Not run, and why:
//! - README "Set-up" step 2 (`.ci/install-deps && cargo test`): it is this
//!   suite.
//! - docs/operations.md "Install" (cargo-deb, apt-get): run word for word
//!   by `tests/it/packaging.rs` and `scripts/package-check.sh`.
//! - docs/operations.md's `snirelay-upgrade`, `journalctl`, `ctl`, `curl`
//!   to `/update-local-snis`, `probe` and the backend's `ip route add
//!   default via 10.0.1.1`: they need an installed unit, a journal,
//!   backends at the addresses shown (10.0.0.5, edge.example.net) or a
//!   second host; their behaviour is tested by `tests/it/upgrade.rs`,
//!   `admin_control.rs`, `pangolin_local.rs`, `probe.rs` and
//!   `transparent.rs` on addresses of their own.
//! - docs/admission.md's fuzzing commands: minutes of cargo-fuzz each.
//! - docs/quic.md and docs/proxy-protocol.md have no shell examples.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use common::netns::NetNs;
use common::{WAIT, scratch_dir};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

// ----------------------------------------------------- reading the pages

/// The lines of section `heading` (a whole heading line, `## ...`) of
/// `file`, up to the next heading of the same or a higher level.
fn section(file: &str, heading: &str) -> String {
    let text = std::fs::read_to_string(root().join(file)).unwrap();
    let level = heading.chars().take_while(|&c| c == '#').count();
    let mut lines = text.lines().skip_while(|l| *l != heading);
    assert!(lines.next().is_some(), "{file} has no `{heading}` section");
    let mut fenced = false;
    let mut out = String::new();
    for line in lines {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !fenced && (1..=level).contains(&hashes) && line[hashes..].starts_with(' ') {
            break;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The fenced blocks of `text` whose info string is `lang` (`""` for
/// none), in order.
fn blocks(text: &str, lang: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut open: Option<String> = None;
    for line in text.lines() {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut open, fence) {
            (Some(_), Some(_)) => found.push(open.take().unwrap()),
            (Some(body), None) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, Some(info)) if info.trim() == lang => open = Some(String::new()),
            (None, Some(_)) => open = Some(String::from("\u{0}")),
            (None, None) => {}
        }
    }
    found.retain(|b| !b.starts_with('\u{0}'));
    found
}

/// One command of a shell block and what its page says it shows.
#[derive(Debug)]
struct Step {
    command: String,
    /// The pieces of a `#   ... a ... b` comment right after the command.
    shows: Vec<String>,
}

/// The commands of a shell block: continuation lines joined, comments
/// dropped except a `#   ...` line right after a command.
fn steps(block: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut pending = String::new();
    let mut after_command = false;
    for line in block.lines() {
        let trimmed = line.trim();
        if let Some(comment) = trimmed.strip_prefix('#') {
            let comment = comment.trim();
            if after_command && comment.starts_with("...") {
                let step = steps.last_mut().unwrap();
                step.shows.extend(
                    comment
                        .split("...")
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned),
                );
            }
            after_command = false;
            continue;
        }
        if trimmed.is_empty() {
            after_command = false;
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(part) => {
                pending.push_str(part);
                pending.push(' ');
            }
            None => {
                pending.push_str(trimmed);
                steps.push(Step {
                    command: std::mem::take(&mut pending),
                    shows: Vec::new(),
                });
                after_command = true;
            }
        }
    }
    steps
}

/// A page's command with the reader's machine's paths put in.
fn localised(command: &str, scratch: &Path) -> String {
    // The page's `/tmp/` first: the binary may itself live under /tmp
    // (a checkout there), and its path must stay as it is.
    let command = command.replace("/tmp/", &format!("{}/", scratch.display()));
    let bin = env!("CARGO_BIN_EXE_snirelay");
    let command = command.replace("cargo run --release --", bin);
    match command.strip_prefix("snirelay ") {
        Some(rest) => format!("{bin} {rest}"),
        None => command,
    }
}

// ------------------------------------------------------- running them

/// Everything a child has printed so far (stdout and stderr together),
/// how many of the two pipes have closed, and a way to wait for more.
#[derive(Clone, Default)]
struct Output(Arc<(Mutex<(String, u8)>, Condvar)>);

impl Output {
    fn collect(&self, from: impl Read + Send + 'static) {
        let this = self.clone();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(from);
            let mut line = Vec::new();
            let (state, changed) = &*this.0;
            while reader.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
                state
                    .lock()
                    .unwrap()
                    .0
                    .push_str(&String::from_utf8_lossy(&line));
                changed.notify_all();
                line.clear();
            }
            state.lock().unwrap().1 += 1;
            changed.notify_all();
        });
    }

    /// Waits up to [`WAIT`] for `until` to hold of the output and the
    /// number of closed pipes; panics with the output (and `what`)
    /// otherwise.
    fn wait(&self, what: &str, until: impl Fn(&str, u8) -> bool) -> String {
        let deadline = Instant::now() + WAIT;
        let (state, changed) = &*self.0;
        let mut state = state.lock().unwrap();
        while !until(&state.0, state.1) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "no {what} within {WAIT:?}; output:\n{}",
                state.0
            );
            state = changed.wait_timeout(state, left).unwrap().0;
        }
        state.0.clone()
    }
}

/// A command of a page running in the namespace, killed on drop.
struct Running {
    command: String,
    child: Child,
    output: Output,
}

impl Running {
    /// `command` through `sh -c` in `ns`, from the repository's root.
    fn start(ns: &NetNs, command: &str) -> Running {
        let mut sh = Command::new("sh");
        sh.args(["-c", &format!("exec {command}")]);
        let mut child = ns
            .wrap(&sh)
            .current_dir(root())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {command}: {e}"));
        let output = Output::default();
        output.collect(child.stdout.take().unwrap());
        output.collect(child.stderr.take().unwrap());
        Running {
            command: command.to_owned(),
            child,
            output,
        }
    }

    /// Waits for `text` in the output (a server's readiness line).
    fn wait_for(&self, text: &str) -> String {
        let what = format!("`{text}` from `{}`", self.command);
        self.output.wait(&what, |out, _| out.contains(text))
    }

    /// Types `line`, closes standard input and waits (up to [`WAIT`]) for
    /// the command to close its output and exit: its status and output.
    fn finish(mut self, line: &str) -> (std::process::ExitStatus, String) {
        let mut stdin = self.child.stdin.take().unwrap();
        // A refused client may have exited already: a broken pipe is fine.
        let _ = stdin.write_all(line.as_bytes());
        drop(stdin);
        let what = format!("exit of `{}`", self.command);
        let output = self.output.wait(&what, |_, closed| closed == 2);
        (self.child.wait().unwrap(), output)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ------------------------------------------------------------- the tests

/// The `key=value` fields of a text log line, in order, and the words
/// before them (level, target, message).
fn fields(line: &str) -> (Vec<&str>, Vec<(&str, &str)>) {
    let words: Vec<&str> = line.split_whitespace().collect();
    let first = words
        .iter()
        .position(|w| w.contains('='))
        .unwrap_or(words.len());
    let pairs = words[first..]
        .iter()
        .map(|w| w.split_once('=').unwrap())
        .collect();
    (words[..first].to_vec(), pairs)
}

/// An access line the relay wrote against the page's `shown` line: the
/// same level, target and message, the same fields in the same order with
/// the same values, except the ones that differ from run to run (the
/// connection id, the client's port, byte counts, duration), which must be
/// numbers, the byte counts zero exactly where the page's are.
fn assert_like(shown: &str, written: &str) {
    let (shown_head, shown_fields) = fields(shown);
    let (written_head, written_fields) = fields(written);
    assert!(
        written_head.ends_with(&shown_head),
        "the page shows `{}`, the relay wrote `{}`",
        shown_head.join(" "),
        written_head.join(" ")
    );
    let keys = |f: &[(&str, &str)]| f.iter().map(|(k, _)| k.to_string()).collect::<Vec<_>>();
    assert_eq!(
        keys(&shown_fields),
        keys(&written_fields),
        "fields differ:\n page:  {shown}\n relay: {written}"
    );
    for ((key, shown), (_, written)) in shown_fields.iter().zip(&written_fields) {
        let number = |v: &str| -> u64 {
            v.parse()
                .unwrap_or_else(|_| panic!("{key}={v} is not a number: {written}"))
        };
        match *key {
            "conn_id" | "duration_ms" => {
                number(written);
            }
            "bytes.up" | "bytes.down" => assert_eq!(
                number(shown) == 0,
                number(written) == 0,
                "{key}: the page shows {shown}, the relay wrote {written}"
            ),
            "client.peer" => {
                let (shown_ip, _) = shown.rsplit_once(':').unwrap();
                let (written_ip, port) = written.rsplit_once(':').unwrap();
                assert_eq!(shown_ip, written_ip, "client.peer");
                number(port);
            }
            _ => assert_eq!(shown, written, "{key}:\n page:  {shown}\n relay: {written}"),
        }
    }
}

/// README's worked example, command by command, in a namespace of its own
/// (the shipped config's fixed ports), then its access lines.
#[test]
fn readme_worked_example_runs_as_the_page_says() {
    let text = section("README.md", "## A worked example with openssl");
    let shell = blocks(&text, "sh");
    let logs = blocks(&text, "");
    assert_eq!(
        (shell.len(), logs.len()),
        (1, 1),
        "one sh block, one log block:\n{text}"
    );
    let steps = steps(&shell[0]);
    assert_eq!(
        steps.len(),
        5,
        "certificate, backend, relay, two clients: {steps:?}"
    );

    let ns = NetNs::new();
    let scratch = scratch_dir("doc-readme");
    let (mut backend, mut relay) = (None, None);
    let typed = "a line typed into the client through the relay\n";
    let mut clients = 0;
    for step in &steps {
        let command = localised(&step.command, &scratch);
        if command.contains("openssl s_server") {
            let server = Running::start(&ns, &command);
            server.wait_for("ACCEPT");
            backend = Some(server);
        } else if command.starts_with(env!("CARGO_BIN_EXE_snirelay")) && command.contains(" run ") {
            let running = Running::start(&ns, &command);
            running.wait_for(" ready ");
            relay = Some(running);
        } else if command.contains("openssl s_client") {
            clients += 1;
            let (status, out) = Running::start(&ns, &command).finish(typed);
            if step.shows.is_empty() {
                assert!(status.success(), "`{command}` failed: {out}");
                assert!(out.contains("Verify return code: 0 (ok)"), "{out}");
                let backend = backend
                    .as_ref()
                    .expect("the backend starts before a client");
                backend.wait_for(typed.trim_end());
            }
            for piece in &step.shows {
                assert!(
                    out.contains(piece.as_str()),
                    "the page says `{command}` shows `{piece}`; it printed:\n{out}"
                );
            }
        } else {
            let (status, out) = Running::start(&ns, &command).finish("");
            assert!(status.success(), "`{command}` failed: {out}");
        }
    }
    assert_eq!(clients, 2);
    assert!(backend.is_some(), "no `openssl s_server` in the example");
    let relay = relay.expect("no relay in the example");
    // The Set-up section's first step is the relay command run here.
    let setup = self::steps(&blocks(&section("README.md", "## Set-up"), "sh")[0]);
    let runs_relay = |s: &Step| s.command.starts_with("cargo run") && s.command.contains(" run ");
    assert_eq!(
        setup.iter().find(|s| runs_relay(s)).map(|s| &s.command),
        steps.iter().find(|s| runs_relay(s)).map(|s| &s.command),
        "README's Set-up runs the relay differently from its worked example"
    );

    let shown: Vec<&str> = logs[0].lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(shown.len(), 2, "one line per client: {shown:?}");
    for line in shown {
        let sni = fields(line)
            .1
            .into_iter()
            .find(|(k, _)| *k == "sni")
            .unwrap()
            .1;
        let access =
            |l: &str| l.contains(" snirelay::access: ") && fields(l).1.contains(&("sni", sni));
        let out = relay
            .output
            .wait(&format!("access line for {sni}"), |out, _| {
                out.lines().any(access)
            });
        assert_like(line, out.lines().find(|l| access(l)).unwrap());
    }
    let _ = std::fs::remove_dir_all(&scratch);
}

/// docs/configuration.md's `snirelay check` on the packaged configuration
/// (which the package installs as /etc/snirelay/snirelay.toml) prints what
/// its comment says.
#[test]
fn configuration_check_example_prints_ok() {
    let text = section("docs/configuration.md", "## Configure and check");
    let shell = blocks(&text, "sh");
    assert_eq!(shell.len(), 1, "{text}");
    let steps = steps(&shell[0]);
    assert_eq!(steps.len(), 1, "{steps:?}");
    let (command, comment) = steps[0].command.split_once('#').unwrap();
    let said = comment
        .split('"')
        .nth(1)
        .expect("the comment quotes what it prints");
    let command = localised(command.trim(), &std::env::temp_dir())
        .replace("/etc/snirelay/snirelay.toml", "packaging/snirelay.toml");
    let out = Command::new("sh")
        .args(["-c", &command])
        .current_dir(root())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.lines().next() == Some(said),
        "`{command}`: {}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// docs/operations.md's transparent-source set-up on the relay: its `ip`
/// commands and its nftables rule set load in a fresh namespace, and the
/// rule set is the one tests/it/transparent.rs proves the set-up with.
#[test]
fn transparent_source_setup_loads_and_is_the_tested_one() {
    let text = section("docs/operations.md", "## Transparent source");
    let shell = blocks(&text, "sh");
    let plain = blocks(&text, "");
    assert_eq!((shell.len(), plain.len()), (2, 1), "{text}");
    let rules = &plain[0];
    let without_comments: String = rules
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        without_comments,
        common::netns::TPROXY_RULES,
        "docs/operations.md's nftables rules are not the ones tests/it/transparent.rs uses"
    );

    let ns = NetNs::new();
    let relay_side = steps(&shell[0]);
    assert_eq!(relay_side.len(), 4, "{relay_side:?}");
    for step in &relay_side {
        let (status, out) = Running::start(&ns, &step.command).finish("");
        assert!(status.success(), "`{}` failed: {out}", step.command);
    }
    let file = scratch_dir("doc-tproxy").join("snirelay-tproxy.nft");
    std::fs::write(&file, rules).unwrap();
    let load = format!("nft -f {}", file.display());
    let (status, out) = Running::start(&ns, &load).finish("");
    assert!(status.success(), "`{load}` failed: {out}");
    let rules_in_force = ns.exec(&["ip", "rule", "show"]) + &ns.exec(&["ip", "-6", "rule", "show"]);
    assert_eq!(
        rules_in_force.matches("fwmark 0x1 lookup 100").count(),
        2,
        "{rules_in_force}"
    );
    let table = ns.exec(&["nft", "list", "table", "inet", "snirelay_tproxy"]);
    assert!(
        table.contains("socket transparent 1 meta mark set 0x00000001"),
        "{table}"
    );
    let _ = std::fs::remove_dir_all(file.parent().unwrap());
}
