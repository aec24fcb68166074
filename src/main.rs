//! The `snirelay` binary: parses the command line and hands over to the library.
//!
//! Exit codes:
//! - 0: a clean stop: after a drain (SIGTERM, or handing the sockets to a
//!   new binary), including one whose `drain_timeout` ran out and closed
//!   the remaining connections; after an immediate stop (SIGINT, or a second
//!   SIGTERM while draining); after a valid `check`.
//! - 1: the configuration is invalid, or the relay cannot start (a bind
//!   fails, an inherited socket is unusable, the takeover handshake fails).
//! - 2: command-line usage errors.
//!
//! Signals: SIGHUP reloads the configuration (a failed reload keeps the
//! running one and never exits), SIGTERM drains, SIGINT stops at once.
//!
//! `probe` has its own exit codes: 0 every address healthy, 1 some, 2 none
//! (or the probe could not run).

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use snirelay::cli::{Cli, Command, ProbeArgs};
use snirelay::config::Config;
use snirelay::notify::Notifier;
use snirelay::pump::splice;
use snirelay::server::ServeOptions;
use snirelay::{logging, probe, server, signals, sockopt, takeover};

/// mimalloc: tokio's task cells and per-socket readiness slots are
/// 128-byte aligned, and glibc's memalign leaves slack around each, which
/// every open connection pays (275 bytes per idle connection, measured with
/// `scripts/loadbench.sh --only idle`); mimalloc serves them from size
/// classes with none.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command.clone().unwrap_or(Command::Run) {
        Command::Check => check(&cli),
        Command::Probe(args) => run_probe(&args),
        Command::Run => match run(&cli) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("snirelay: {e:#}");
                ExitCode::from(1)
            }
        },
    }
}

fn check(cli: &Cli) -> ExitCode {
    match Config::load(&cli.config) {
        Ok(config) => {
            println!("ok");
            for line in snirelay::cli::check_summary(&config) {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(1)
        }
    }
}

fn run(cli: &Cli) -> anyhow::Result<()> {
    // Before any thread exists: this edits the environment.
    let activated = sockopt::take_activated_fds().context("socket activation")?;
    logging::init(cli.log_format, &cli.log_level)?;
    let config = Config::load(&cli.config)?;
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
    let mut options = ServeOptions::new(cli.config.clone());
    options.activated = activated;
    options.notifier = Notifier::from_env();
    if let Some(path) = &cli.takeover {
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
