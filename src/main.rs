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
//! (or the probe could not run). `ctl`: 0 done, 1 refused by the relay, 2
//! the relay could not be asked. `import-haproxy` (and with
//! `--check`): 0 no line left untranslated (lines that need no key do not
//! count), 1 some, 2 the file cannot be read or has no mode tcp frontend.

use std::process::ExitCode;

/// mimalloc: tokio's task cells and per-socket readiness slots are
/// 128-byte aligned, and glibc's memalign leaves slack around each, which
/// every open connection pays (275 bytes per idle connection, measured with
/// `scripts/loadbench.sh --only idle`); mimalloc serves them from size
/// classes with none.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    snirelay::cli::main()
}
