//! The command line: `snirelay [run] --config FILE`, `snirelay check --config FILE`.
//!
//! Kept in the library so that documentation (a man page) can be generated
//! from the same definition the binary parses.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::logging::LogFormat;

/// Where the packaged configuration lives.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/snirelay/snirelay.toml";

/// snirelay: a layer-4 relay that routes TLS connections by SNI without
/// terminating TLS.
#[derive(Debug, Parser)]
#[command(name = "snirelay", version, about, long_about = None)]
pub struct Cli {
    /// What to do; `run` when left out.
    #[command(subcommand)]
    pub command: Option<Command>,

    /// The configuration file.
    #[arg(long, short = 'c', global = true, default_value = DEFAULT_CONFIG_PATH)]
    pub config: PathBuf,

    /// Log line format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Log filter: a level (`info`, `debug`) or RUST_LOG-style directives.
    #[arg(long, global = true, default_value = "info")]
    pub log_level: String,

    /// Binary upgrade: take the listening sockets of the relay serving this
    /// Unix socket (if one does), tell it to drain once this one accepts,
    /// then serve the socket for the next upgrade.
    #[arg(long, global = true, value_name = "PATH")]
    pub takeover: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Subcommand)]
pub enum Command {
    /// Serve the configuration (the default).
    Run,
    /// Validate the configuration: prints `ok`, or every problem found; exits 1 on error.
    Check,
}
