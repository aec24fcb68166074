//! Log output: human-readable text or one JSON object per line.
//!
//! Logs go to stderr, where journald and container runtimes collect them.
//! JSON lines put every field at the top level (`conn_id`, `client.peer`,
//! `sni`, `close`, …) next to `timestamp`, `level`, `target` and `message`,
//! so queries need no nesting. Connection lines use the target
//! `snirelay::access`, so they can be filtered on their own
//! (`--log-level info,snirelay::access=off`).

use clap::ValueEnum;
use tracing_subscriber::EnvFilter;

/// Dependencies whose debug output is noise to an operator.
const QUIET_DEPENDENCIES: &str = "hickory_net=warn,hickory_proto=warn";

#[allow(missing_docs)] // clap would print doc comments as help text
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, thiserror::Error)]
#[error("--log-level {directives:?}: {message}")]
/// `--log-level` directives that do not parse.
pub(crate) struct LogSetupError {
    directives: String,
    message: String,
}

/// Installs the global subscriber. `directives` uses `RUST_LOG` syntax
/// (`info`, `debug`, `info,snirelay::access=warn`).
pub(crate) fn init(format: LogFormat, directives: &str) -> Result<(), LogSetupError> {
    // The DNS client's own debug lines (every query) would drown ours at
    // `--log-level debug`; it speaks at warn unless the directives name it.
    let filter = EnvFilter::try_new(format!("{QUIET_DEPENDENCIES},{directives}"));
    let filter = filter.map_err(|e| LogSetupError {
        directives: directives.to_owned(),
        message: e.to_string(),
    })?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Text => builder.with_ansi(false).try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
    };
    result.map_err(|e| LogSetupError {
        directives: directives.to_owned(),
        message: e.to_string(),
    })
}
