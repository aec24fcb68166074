//! `[global] max_connections` held against the descriptor limit
//! (RLIMIT_NOFILE): a relay started under `prlimit --nofile=256:256` warns,
//! at start and after each applied reload, when its cap needs more
//! descriptors than that, naming the cap, the limit and the fix; a cap
//! that fits says nothing; `check` says the same on stderr. Needs `prlimit`
//! (util-linux) and fails loudly without it.

use std::net::SocketAddr;
use std::process::Command;

use serde_json::Value;

use crate::common::{Relay, closed_port, scratch_dir, simple_config};

/// The limit every relay here starts under.
const LIMIT: u64 = 256;

/// 50 connections, 16 pipes: 100 + 32 + 65 reserved descriptors, under 256.
const FITS: &str = "[global]\nmax_connections = 50\nmax_pipes = 16\n";
/// 50,000 connections need 100,000 descriptors and more.
const TOO_MANY: &str = "[global]\nmax_connections = 50000\nmax_pipes = 16\n";

fn config(global: &str, backend: SocketAddr) -> String {
    format!(
        "{global}{}",
        simple_config(&["app.example.com"], backend, "")
    )
}

/// The relay, started through `prlimit` (which execs it, so the pid is
/// the relay's).
async fn start_limited(config: &str) -> Relay {
    assert!(
        Command::new("prlimit").arg("--version").output().is_ok(),
        "prlimit (util-linux) is required for this test"
    );
    Relay::launch(config, |path| {
        let relay = Relay::command(path);
        let mut command = Command::new("prlimit");
        command
            .arg(format!("--nofile={LIMIT}:{LIMIT}"))
            .arg("--")
            .arg(relay.get_program())
            .args(relay.get_args());
        command
    })
    .await
}

fn is_warning(line: &Value) -> bool {
    line["message"] == "the descriptor limit (RLIMIT_NOFILE) cannot keep max_connections"
}

fn assert_names_the_numbers_and_the_fix(line: &Value, max_connections: u64) {
    assert_eq!(line["level"], "WARN", "{line}");
    assert_eq!(line["max_connections"], max_connections, "{line}");
    assert_eq!(line["descriptors.limit"], LIMIT, "{line}");
    let needed = max_connections * 2 + 32 + 65;
    assert_eq!(line["descriptors.needed"], needed, "{line}");
    assert_eq!(line["connections.fit"], (LIMIT - 32 - 65) / 2, "{line}");
    let fix = line["fix"].as_str().unwrap_or_default();
    for part in [
        format!("LimitNOFILE={needed}"),
        format!("--ulimit nofile={needed}:{needed}"),
        format!("ulimit -n {needed}"),
    ] {
        assert!(fix.contains(&part), "the fix lacks {part}: {line}");
    }
}

#[tokio::test]
async fn a_cap_the_limit_cannot_keep_is_a_warning_at_start() {
    let relay = start_limited(&config(TOO_MANY, closed_port())).await;
    let lines = relay.log_lines();
    let warning = lines
        .iter()
        .find(|l| is_warning(l))
        .unwrap_or_else(|| panic!("no warning before ready: {lines:#?}"));
    assert_names_the_numbers_and_the_fix(warning, 50_000);
    // Said before `ready`, so whoever waits for `ready` has seen it.
    let at = |pred: &dyn Fn(&Value) -> bool| lines.iter().position(pred).unwrap();
    assert!(at(&is_warning) < at(&|l: &Value| l["message"] == "ready"));
}

#[tokio::test]
async fn a_cap_that_fits_says_nothing_and_a_reload_that_raises_it_warns() {
    let backend = closed_port();
    let relay = start_limited(&config(FITS, backend)).await;
    let reload = relay.reload(&config(FITS, backend), 1).await;
    assert_eq!(reload["message"], "reload applied", "{reload}");
    assert!(
        !relay.log_lines().iter().any(is_warning),
        "a cap that fits warned: {:#?}",
        relay.log_lines()
    );
    let reload = relay.reload(&config(TOO_MANY, backend), 2).await;
    assert_eq!(reload["message"], "reload applied", "{reload}");
    let warning = relay.wait_log(is_warning).await;
    assert_names_the_numbers_and_the_fix(&warning, 50_000);
}

#[test]
fn check_warns_on_stderr_and_still_passes() {
    let dir = scratch_dir("nofile-check");
    let backend = closed_port();
    let run_check = |global: &str| {
        let path = dir.join("snirelay.toml");
        std::fs::write(&path, config(global, backend)).unwrap();
        let out = Command::new("prlimit")
            .arg(format!("--nofile={LIMIT}:{LIMIT}"))
            .arg("--")
            .arg(env!("CARGO_BIN_EXE_snirelay"))
            .args(["check", "--config"])
            .arg(&path)
            .output()
            .expect("prlimit (util-linux) is required for this test");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stdout, stderr) = run_check(TOO_MANY);
    assert_eq!((code, stdout.as_str()), (Some(0), "ok\n"), "{stderr}");
    for part in [
        "max_connections = 50000",
        "is 256",
        "LimitNOFILE=100097",
        "--ulimit nofile=100097:100097",
    ] {
        assert!(stderr.contains(part), "`check` lacks {part}: {stderr}");
    }
    let (code, stdout, stderr) = run_check(FITS);
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (Some(0), "ok\n", "")
    );
}
