//! The `snirelay` binary: parses the command line and hands over to the library.
//!
//! Exit codes: 0 after a clean stop or a valid `check`; 1 when the
//! configuration is invalid or the relay cannot start (a bind fails);
//! 2 for command-line usage errors.

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use snirelay::cli::{Cli, Command};
use snirelay::config::Config;
use snirelay::{logging, server, signals};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command.unwrap_or(Command::Run) {
        Command::Check => check(&cli),
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
        Ok(_) => {
            println!("ok");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(1)
        }
    }
}

fn run(cli: &Cli) -> anyhow::Result<()> {
    logging::init(cli.log_format, &cli.log_level)?;
    let config = Config::load(&cli.config)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let intents = signals::intents().context("cannot install signal handlers")?;
        server::serve(config, intents).await?;
        anyhow::Ok(())
    })?;
    Ok(())
}
