//! Log output: human-readable text or one JSON object per line, on stderr
//! or stdout, or sent to journald or a syslog server (`[log] target`).
//!
//! Console lines go to stderr by default, where journald and container
//! runtimes collect them (`target = "stdout"` moves them). JSON lines put
//! every field at the top level (`conn_id`, `client.peer`, `sni`, `close`,
//! …) next to `timestamp`, `level`, `target` and `message`, so queries need
//! no nesting. Connection lines use the target `snirelay::access`, so they
//! can be filtered on their own (`--log-level info,snirelay::access=off`).
//!
//! With a socket target (`journald`, `syslog`) every line is formatted as
//! that JSON object and handed to `sink`'s bounded queue, which a thread
//! of its own writes out (`syslog` frames it); a logging thread never
//! waits for the socket. The console then carries only the sink's own
//! reports (dropped lines, an unreachable target), so they never go back
//! into a target that fails.
//!
//! Set-up is in two steps because the target is in the configuration
//! file: [`init`] installs the subscriber (console on stderr) before the
//! file is read, [`start_output`] applies `[log]` once it is. The target
//! is fixed for the process's life: a reload that changes `[log]` is
//! reported as needing a restart ([`crate::config::effective::RESTART_KEYS`]).

mod sink;
mod syslog;

use std::io;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, SystemTime};

use clap::ValueEnum;
use tracing::{Metadata, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::{Context, Filter, Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::{Log, LogTarget};
use sink::{Destination, SINK_TARGET, Sink};

/// Dependencies whose debug output is noise to an operator.
const QUIET_DEPENDENCIES: &str = "hickory_net=warn,hickory_proto=warn";

/// The target of connection lines.
const ACCESS_TARGET: &str = "snirelay::access";

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

/// Where console lines go: [`CONSOLE_STDERR`], [`CONSOLE_STDOUT`] or
/// [`CONSOLE_REPORTS`].
static CONSOLE: AtomicU8 = AtomicU8::new(CONSOLE_STDERR);
const CONSOLE_STDERR: u8 = 0;
const CONSOLE_STDOUT: u8 = 1;
/// A socket target is set: the console carries the sink's reports only.
const CONSOLE_REPORTS: u8 = 2;

/// The socket target's queue, once [`start_output`] set one.
static SINK: OnceLock<Sink> = OnceLock::new();

/// Installs the global subscriber, writing to stderr until
/// [`start_output`] says otherwise. `directives` uses `RUST_LOG` syntax
/// (`info`, `debug`, `info,snirelay::access=warn`).
pub(crate) fn init(format: LogFormat, directives: &str) -> Result<(), LogSetupError> {
    // The DNS client's own debug lines (every query) would drown ours at
    // `--log-level debug`; it speaks at warn unless the directives name it.
    let filter = EnvFilter::try_new(format!("{QUIET_DEPENDENCIES},{directives}"));
    let filter = filter.map_err(|e| LogSetupError {
        directives: directives.to_owned(),
        message: e.to_string(),
    })?;
    let text = (format == LogFormat::Text).then(|| {
        tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(ConsoleWriter)
            .with_filter(ConsoleFilter)
    });
    let json = (format == LogFormat::Json).then(|| {
        tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .with_writer(ConsoleWriter)
            .with_filter(ConsoleFilter)
    });
    // Always JSON: the fields are what a receiver parses.
    let socket = tracing_subscriber::fmt::layer()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .with_writer(SinkWriter)
        .with_filter(SinkFilter);
    tracing_subscriber::registry()
        .with(filter)
        .with(text)
        .with(json)
        .with(socket)
        .try_init()
        .map_err(|e| LogSetupError {
            directives: directives.to_owned(),
            message: e.to_string(),
        })
}

/// Applies `[log]`: moves console lines to stdout, or starts the queue
/// and writer thread of a journald or syslog target and sends every line
/// there from now on. Called once, after the configuration is read; a
/// second call changes nothing.
pub(crate) fn start_output(log: &Log) -> io::Result<()> {
    let (destination, name) = match log.target {
        LogTarget::Stderr => return Ok(()),
        LogTarget::Stdout => {
            CONSOLE.store(CONSOLE_STDOUT, Ordering::Relaxed);
            return Ok(());
        }
        LogTarget::Journald => (
            Destination::Journald(sink::JOURNAL_SOCKET.into()),
            "journald",
        ),
        LogTarget::Syslog => (
            Destination::Syslog {
                address: log.syslog.clone(),
                format: log.syslog_format,
            },
            "syslog",
        ),
    };
    if SINK.get().is_some() {
        return Ok(());
    }
    let metrics = crate::metrics::metrics();
    let sink = Sink::start(
        destination,
        syslog::Origin::here(log.facility),
        log.queue,
        |reason| metrics.log_lines_dropped(name, reason),
        metrics.log_lines_sent(name),
    )?;
    if SINK.set(sink).is_ok() {
        CONSOLE.store(CONSOLE_REPORTS, Ordering::Relaxed);
        match log.target {
            LogTarget::Syslog => tracing::info!(
                target: SINK_TARGET,
                syslog = %log.syslog,
                facility = log.facility.name(),
                format = log.syslog_format.name(),
                queue = log.queue,
                "log lines go to syslog from now on"
            ),
            _ => tracing::info!(
                target: SINK_TARGET,
                socket = sink::JOURNAL_SOCKET,
                facility = log.facility.name(),
                queue = log.queue,
                "log lines go to journald from now on"
            ),
        }
    }
    Ok(())
}

/// At exit: waits up to `within` for the socket target's queue to be
/// written out (lines to a dead target are dropped, not waited for past
/// that).
pub(crate) fn flush(within: Duration) {
    if let Some(sink) = SINK.get() {
        sink.flush(within);
    }
}

/// Console lines: all of them, or only the sink's reports once a socket
/// target is set. Asked per event (the answer changes once, at
/// [`start_output`]), at the cost of one atomic load.
struct ConsoleFilter;

impl<S: Subscriber> Filter<S> for ConsoleFilter {
    fn enabled(&self, meta: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        CONSOLE.load(Ordering::Relaxed) != CONSOLE_REPORTS || meta.target() == SINK_TARGET
    }
}

/// Socket lines: every line but the sink's own reports, once a socket
/// target is set.
struct SinkFilter;

impl<S: Subscriber> Filter<S> for SinkFilter {
    fn enabled(&self, meta: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        SINK.get().is_some() && meta.target() != SINK_TARGET
    }
}

/// stderr or stdout, as [`CONSOLE`] says.
struct ConsoleWriter;

enum ConsoleOut {
    Stderr(io::Stderr),
    Stdout(io::Stdout),
}

impl io::Write for ConsoleOut {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            ConsoleOut::Stderr(w) => w.write(buf),
            ConsoleOut::Stdout(w) => w.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            ConsoleOut::Stderr(w) => w.flush(),
            ConsoleOut::Stdout(w) => w.flush(),
        }
    }
}

impl<'a> MakeWriter<'a> for ConsoleWriter {
    type Writer = ConsoleOut;

    fn make_writer(&'a self) -> ConsoleOut {
        match CONSOLE.load(Ordering::Relaxed) {
            CONSOLE_STDOUT => ConsoleOut::Stdout(io::stdout()),
            _ => ConsoleOut::Stderr(io::stderr()),
        }
    }
}

/// One line on its way into the socket target's queue: collected while
/// the formatter writes it, offered to the queue when dropped.
struct SinkWriter;

struct SinkLine {
    severity: u8,
    access: bool,
    json: Vec<u8>,
}

impl<'a> MakeWriter<'a> for SinkWriter {
    type Writer = SinkLine;

    fn make_writer(&'a self) -> SinkLine {
        SinkLine {
            severity: syslog::severity(tracing::Level::INFO),
            access: false,
            json: Vec::new(),
        }
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> SinkLine {
        SinkLine {
            severity: syslog::severity(*meta.level()),
            access: meta.target() == ACCESS_TARGET,
            json: Vec::new(),
        }
    }
}

impl io::Write for SinkLine {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.json.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for SinkLine {
    fn drop(&mut self) {
        let (Some(sink), false) = (SINK.get(), self.json.is_empty()) else {
            return;
        };
        if self.json.last() == Some(&b'\n') {
            self.json.pop();
        }
        sink.offer(syslog::Line {
            severity: self.severity,
            access: self.access,
            at: SystemTime::now(),
            json: std::mem::take(&mut self.json),
        });
    }
}
