//! The command line carried out: `run`, `check`, `probe`, `certs`, `ctl`
//! and `import-haproxy`, each from its parsed arguments to an exit code. The
//! binary (`src/main.rs`, which documents the exit codes) only installs the
//! allocator and calls [`main`]; the argument definitions are in the parent
//! module, the commands' own work in `probe`, `certs`, `ctl` and `haproxy_import`,
//! and serving in `crate::run`.

use std::process::ExitCode;

use super::{
    CertsArgs, CheckArgs, Cli, Command, CtlAction, CtlArgs, ImportHaproxyArgs, ProbeArgs, RunArgs,
};
use super::{certs, probe};
use crate::config::Config;
use crate::pump::splice;
use crate::run::descriptors::DescriptorBudget;
use crate::run::notify::Notifier;
use crate::run::server::ServeOptions;
use crate::{
    logging,
    run::{server, signals, takeover},
    sockopt,
};
use anyhow::Context;
use clap::Parser;

/// Runs the command line: what the `snirelay` binary does (its exit codes
/// are in `src/main.rs`).
pub fn main() -> ExitCode {
    match Cli::parse().into_command() {
        Command::Check(args) => check(&args),
        Command::Probe(args) => run_probe(&args),
        Command::Certs(args) => run_certs(&args),
        Command::Ctl(args) => ctl(&args),
        Command::ImportHaproxy(args) => import_haproxy(&args),
        Command::Run(args) => match run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("snirelay: {e:#}");
                ExitCode::from(1)
            }
        },
    }
}

fn check(args: &CheckArgs) -> ExitCode {
    // As `run` does: the heap `check` builds is the one a start builds,
    // and faulting it in 2 MiB pages is most of a large list's time.
    // `check` prints nothing of it; a failure only leaves the pages large.
    let _ = sockopt::keep_heap_in_base_pages();
    match Config::load(&args.config) {
        Ok(config) => {
            println!("ok");
            for line in super::check_summary(&config) {
                println!("{line}");
            }
            // On stderr, as the descriptor warning: the file is valid.
            for warning in &config.warnings {
                eprintln!("warning: {warning}");
            }
            // On stderr, and not an error: the limit is this shell's (or
            // the unit's, under ExecStartPre=), not necessarily the one
            // `run` will have.
            if let Ok((_soft, hard)) = sockopt::nofile_limit() {
                if let Some(short) = DescriptorBudget::of(&config).shortfall(hard) {
                    eprintln!("{}", short.check_warning());
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(1)
        }
    }
}

fn import_haproxy(args: &ImportHaproxyArgs) -> ExitCode {
    let text = match std::fs::read_to_string(&args.file) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("snirelay import-haproxy: {}: {e}", args.file.display());
            return ExitCode::from(2);
        }
    };
    let source = args.file.display().to_string();
    let read = |file: &str| std::fs::read_to_string(file).map_err(|e| e.to_string());
    match super::haproxy_import::translate(&text, &source, &read) {
        Ok(translation) => {
            if args.check {
                print!("{}", translation.check);
            } else {
                print!("{}", translation.toml);
            }
            if translation.not_translated.is_empty() {
                ExitCode::SUCCESS
            } else {
                eprintln!(
                    "snirelay import-haproxy: {} line(s) not translated (listed in the output):",
                    translation.not_translated.len()
                );
                for (line, text, why) in &translation.not_translated {
                    eprintln!("  line {line}: `{text}`: {why}");
                }
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("snirelay import-haproxy: {source}: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(args: &RunArgs) -> anyhow::Result<()> {
    // Before any thread exists: this edits the environment.
    let activated = sockopt::take_activated_fds().context("socket activation")?;
    // Before the configuration is read: the heap it builds in base pages.
    let base_pages = sockopt::keep_heap_in_base_pages();
    logging::init(args.log_format, &args.log_level)?;
    let config = Config::load(&args.config)?;
    // Source addresses this host lacks, or `source = "client"` without the
    // capability: a start error naming the key, not failed connects later.
    crate::backend::egress::probe(&config)?;
    // `[log]`: from here on lines may go to journald or syslog.
    logging::start_output(&config.log).context("cannot start the log target")?;
    // The default (huge pages off) needs no line; the exceptions do.
    match base_pages {
        Ok(true) => {}
        Ok(false) => tracing::info!("transparent huge pages allowed (MIMALLOC_ALLOW_THP)"),
        Err(error) => tracing::warn!(%error, "cannot turn transparent huge pages off"),
    }
    match sockopt::raise_nofile_limit() {
        Ok(limit) => tracing::info!(
            soft_before = limit.soft_before,
            soft = limit.soft,
            hard = limit.hard,
            "descriptor limit (RLIMIT_NOFILE)"
        ),
        Err(error) => tracing::warn!(%error, "cannot raise the descriptor limit"),
    }
    splice::configure(config.global.pipe_size, config.global.max_pipes);
    let mut options = ServeOptions::new(args.config.clone());
    options.activated = activated;
    options.notifier = Notifier::from_env();
    if let Some(path) = &args.takeover {
        options.takeover_from = takeover::receive(path)?;
        options.takeover_path = Some(path.clone());
    }
    // One thread: a single-threaded runtime, so no second thread shares the
    // descriptor table (each fd syscall then skips a refcount) or the run
    // queue. A reload cannot change the thread count; a restart can.
    let mut builder = if config.global.threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(config.global.threads);
        b
    };
    let runtime = builder
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let intents = signals::intents().context("cannot install signal handlers")?;
        server::serve(config, options, intents).await?;
        anyhow::Ok(())
    })?;
    // The last lines (the stop) to a live socket target; a dead one is
    // not waited for past this.
    logging::flush(std::time::Duration::from_secs(2));
    Ok(())
}

fn run_probe(args: &ProbeArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("snirelay probe: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let report = match runtime.block_on(probe::run(args)) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("snirelay probe: {e}");
            return ExitCode::from(2);
        }
    };
    if args.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.to_text());
    }
    if let Some(path) = &args.textfile {
        let text = report.to_prometheus(std::time::SystemTime::now());
        if let Err(e) = probe::write_textfile(path, &text) {
            eprintln!("snirelay probe: {e}");
            return ExitCode::from(2);
        }
    }
    ExitCode::from(report.exit_code)
}

fn run_certs(args: &CertsArgs) -> ExitCode {
    let config = match Config::load(&args.config) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("snirelay certs: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let report = match runtime.block_on(certs::run(&config, args)) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("snirelay certs: {e}");
            return ExitCode::from(2);
        }
    };
    if args.format == "json" {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.to_text());
    }
    ExitCode::from(report.exit_code)
}

fn ctl(args: &CtlArgs) -> ExitCode {
    match ctl_request(args) {
        Ok((status, body)) => {
            let ok = (200..300).contains(&status);
            let value: Option<serde_json::Value> = serde_json::from_str(&body).ok();
            if args.action == CtlAction::Status {
                // Ready or not, the answer is the report; without
                // `ready_requires` it is one word.
                match (&value, args.json) {
                    (Some(v), true) => println!("{v:#}"),
                    (Some(v), false) => print!("{}", ctl_text(&args.action, v)),
                    (None, _) => print!("{body}"),
                }
                return ExitCode::from(if ok { 0 } else { 1 });
            }
            match (&value, args.json, ok) {
                (Some(v), true, _) => println!("{v:#}"),
                (Some(v), false, true) => print!("{}", ctl_text(&args.action, v)),
                (Some(v), false, false) => eprintln!(
                    "snirelay ctl: {status}: {}",
                    v["error"].as_str().unwrap_or(&body)
                ),
                (None, _, _) => eprint!("snirelay ctl: {status}: {body}"),
            }
            ExitCode::from(if ok { 0 } else { 1 })
        }
        Err(e) => {
            eprintln!("snirelay ctl: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn ctl_request(args: &CtlArgs) -> anyhow::Result<(u16, String)> {
    use super::ctl;
    let config = Config::load(&args.config)?;
    let admin = config
        .admin
        .as_ref()
        .with_context(|| format!("{} has no [admin] section", args.config.display()))?;
    let (target, state) = match &args.action {
        CtlAction::Addresses => {
            return ctl::request(admin, "GET", "/backends", None).context("admin request");
        }
        CtlAction::Drain(a) => (a, "drain"),
        CtlAction::Maint(a) => (a, "maint"),
        CtlAction::Ready(a) => (a, "ready"),
        CtlAction::Connections(filter) => return ctl_connections(admin, &filter.query()),
        CtlAction::Close(filter) => {
            let path = format!("/connections?{}", filter.query());
            return ctl::request(admin, "DELETE", &path, None).context("admin request");
        }
        CtlAction::Status => {
            return ctl::request(admin, "GET", "/readyz", None).context("admin request");
        }
        CtlAction::Sources(sources) => {
            let path = format!("/sources?{}", sources.query());
            return ctl::request(admin, "GET", &path, None).context("admin request");
        }
        CtlAction::ClearSource(source) => {
            return ctl::request(admin, "DELETE", &source.path(), None).context("admin request");
        }
    };
    let backend = match &target.backend {
        Some(b) => b.clone(),
        None => {
            // The backends whose addresses include ADDR, as the relay sees them now.
            let (status, body) =
                ctl::request(admin, "GET", "/backends", None).context("admin request")?;
            if !(200..300).contains(&status) {
                return Ok((status, body));
            }
            let value: serde_json::Value = serde_json::from_str(&body)?;
            let owners: Vec<String> = value["backends"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|b| {
                    b["addresses"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|a| a["address"] == target.addr.as_str())
                })
                .filter_map(|b| b["name"].as_str().map(str::to_owned))
                .collect();
            match owners.as_slice() {
                [one] => one.clone(),
                [] => anyhow::bail!("no backend has the address {}", target.addr),
                many => anyhow::bail!(
                    "several backends have {}: {}; say which with --backend",
                    target.addr,
                    many.join(", ")
                ),
            }
        }
    };
    let path = format!("/backends/{backend}/addresses/{}/state", target.addr);
    let body = serde_json::json!({ "state": state }).to_string();
    ctl::request(admin, "POST", &path, Some(&body)).context("admin request")
}

/// Every page of `GET /connections?QUERY`, as one answer: `{"connections":
/// [...]}`, or the first refusal.
fn ctl_connections(admin: &crate::config::Admin, query: &str) -> anyhow::Result<(u16, String)> {
    use super::ctl;
    let mut all = Vec::new();
    let mut after: Option<u64> = None;
    // Bounded: a million connections at the largest page.
    for _ in 0..1000 {
        let mut path = format!("/connections?limit=1000&{query}");
        if let Some(id) = after {
            path.push_str(&format!("&after={id}"));
        }
        let (status, body) = ctl::request(admin, "GET", &path, None).context("admin request")?;
        if !(200..300).contains(&status) {
            return Ok((status, body));
        }
        let mut page: serde_json::Value = serde_json::from_str(&body)?;
        if let Some(list) = page["connections"].as_array_mut() {
            all.append(list);
        }
        after = page["next_after"].as_u64();
        if after.is_none() {
            break;
        }
    }
    let answer = serde_json::json!({ "connections": all });
    Ok((200, answer.to_string()))
}

/// The human form of an answer.
fn ctl_text(action: &CtlAction, v: &serde_json::Value) -> String {
    match action {
        CtlAction::Addresses => {
            let mut out = format!(
                "{:<16} {:<40} {:<6} {:<6} {:>6}\n",
                "BACKEND", "ADDRESS", "STATE", "HEALTH", "OPEN"
            );
            for b in v["backends"].as_array().into_iter().flatten() {
                for a in b["addresses"].as_array().into_iter().flatten() {
                    out.push_str(&format!(
                        "{:<16} {:<40} {:<6} {:<6} {:>6}\n",
                        b["name"].as_str().unwrap_or(""),
                        a["address"].as_str().unwrap_or(""),
                        a["state"].as_str().unwrap_or(""),
                        a["health"].as_str().unwrap_or(""),
                        a["open_connections"]
                    ));
                }
            }
            out
        }
        CtlAction::Connections(_) => {
            // Columns padded for a terminal; the last one is not.
            let row = |c: [&str; 10]| {
                format!(
                    "{:>8} {:<10} {:<12} {:<28} {:<10} {:<22} {:<22} {:>7} {:>7} {}\n",
                    c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9]
                )
            };
            let mut out = row([
                "ID", "LISTENER", "ROUTE", "SNI", "BACKEND", "CLIENT", "CLAIMED", "AGE", "IDLE",
                "UP/DOWN",
            ]);
            for c in v["connections"].as_array().into_iter().flatten() {
                let s = |key: &str| c[key].as_str().unwrap_or("-").to_owned();
                let secs = |key: &str| format!("{:.0}s", c[key].as_f64().unwrap_or(0.0));
                out.push_str(&row([
                    &c["id"].to_string(),
                    &s("listener"),
                    &s("route"),
                    &s("sni"),
                    &s("backend"),
                    &s("client"),
                    &s("claimed_client"),
                    &secs("age_seconds"),
                    &secs("idle_seconds"),
                    &format!("{}/{}", c["bytes_up"], c["bytes_down"]),
                ]));
            }
            out
        }
        CtlAction::Close(_) => format!("closed {}\n", v["closed"]),
        CtlAction::Status => {
            let mut out = format!(
                "{}\n",
                if v["ready"] == true {
                    "ready"
                } else {
                    "not ready"
                }
            );
            if v["listening"] == false {
                out.push_str("  not listening (starting or draining)\n");
            }
            for d in v["down"].as_array().into_iter().flatten() {
                out.push_str(&format!(
                    "  {}: backend {} {}\n",
                    d["requirement"].as_str().unwrap_or(""),
                    d["backend"].as_str().unwrap_or("-"),
                    d["why"].as_str().unwrap_or("")
                ));
            }
            out
        }
        CtlAction::Sources(_) => {
            let row = |c: [&str; 8]| {
                format!(
                    "{:<12} {:<40} {:>6} {:>8} {:>9} {:>9} {:>9} {}\n",
                    c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]
                )
            };
            let mut out = row([
                "LISTENER",
                "KEY",
                "OPEN",
                "RATE/S",
                "ADMITTED",
                "REFUSED",
                "LAST",
                "BY REASON",
            ]);
            for s in v["sources"].as_array().into_iter().flatten() {
                let reasons: Vec<String> = s["refused"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter(|(_, n)| n.as_u64().unwrap_or(0) > 0)
                    .map(|(reason, n)| format!("{reason}={n}"))
                    .collect();
                let table = match s["route"].as_str() {
                    Some(route) => format!("{}/{route}", s["listener"].as_str().unwrap_or("")),
                    None => s["listener"].as_str().unwrap_or("").to_owned(),
                };
                // A JA4 key keeps only a hash; the row carries the JA4 itself.
                let key = s["key"].as_str().unwrap_or("");
                let shown_key = match s["ja4"].as_str() {
                    Some(ja4) => format!("{}{ja4}", key.split("ja4#").next().unwrap_or("")),
                    None => key.to_owned(),
                };
                out.push_str(&row([
                    &table,
                    &shown_key,
                    &s["open"].to_string(),
                    &format!("{:.1}", s["rate_per_second"].as_f64().unwrap_or(0.0)),
                    &s["admitted"].to_string(),
                    &s["refused_total"].to_string(),
                    &format!("{:.0}s", s["last_seen_seconds_ago"].as_f64().unwrap_or(0.0)),
                    &reasons.join(" "),
                ]));
            }
            out
        }
        CtlAction::ClearSource(_) => format!("cleared {}\n", v["cleared"]),
        _ => format!(
            "{} {}: {} (was {}), {} open\n",
            v["backend"].as_str().unwrap_or(""),
            v["address"].as_str().unwrap_or(""),
            v["state"].as_str().unwrap_or(""),
            v["previous"].as_str().unwrap_or(""),
            v["open_connections"]
        ),
    }
}
