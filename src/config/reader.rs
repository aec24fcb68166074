//! Reading the configuration file on a thread of its own, within
//! [`CONFIG_READ_TIMEOUT`] and [`MAX_CONFIG_BYTES`]: the path may name a
//! FIFO with no writer or sit on a hung mount, and neither may stop the
//! event loop from handling SIGTERM.
//!
//! Not here: parsing or checking what was read ([`super::Config::from_toml`]).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use super::ConfigError;

/// How long reading the configuration file may take before the load (or
/// reload) is refused. The file is read on a thread of its own, so a file
/// that never answers holds that thread, never the event loop.
pub(crate) const CONFIG_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest configuration file read; a real one is a few kilobytes.
pub(crate) const MAX_CONFIG_BYTES: u64 = 4 * 1024 * 1024;

/// Reads of the configuration file that timed out and are still blocked;
/// while one is, no new read starts (each would strand another thread).
static STUCK_READS: AtomicUsize = AtomicUsize::new(0);

/// Reads the configuration file on a thread of its own and hands the
/// outcome to `deliver`. Opening a FIFO with no writer, or reading from a
/// hung network mount, blocks in the kernel where no timeout reaches, so the
/// read runs where blocking costs one parked thread: the caller waits for
/// [`CONFIG_READ_TIMEOUT`] at most, and gives up with
/// [`ConfigError::ReadTimeout`]. A read that outlives its timeout is counted
/// in `STUCK_READS` until it ends; while one is stuck, later reads are
/// refused with [`ConfigError::ReadStuck`] instead of stranding a thread each.
pub(crate) fn read_file(
    path: &Path,
    deliver: impl FnOnce(Result<String, ConfigError>) + Send + 'static,
) -> Result<ReadTicket, ConfigError> {
    if STUCK_READS.load(Ordering::Acquire) > 0 {
        return Err(ConfigError::ReadStuck {
            path: path.to_owned(),
        });
    }
    let ticket = ReadTicket(Arc::new(AtomicBool::new(false)));
    let abandoned = ticket.0.clone();
    let owned = path.to_owned();
    std::thread::Builder::new()
        .name("config-read".into())
        .spawn(move || {
            let read = read_capped(&owned);
            // Swap under the flag: the waiter either sees the result or
            // has already counted this read as stuck, never both.
            if abandoned.swap(true, Ordering::AcqRel) {
                STUCK_READS.fetch_sub(1, Ordering::AcqRel);
            }
            deliver(read);
        })
        .map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
    Ok(ticket)
}

/// Held by whoever waits for a [`read_file`]; [`ReadTicket::abandon`] when
/// the wait times out.
pub(crate) struct ReadTicket(Arc<AtomicBool>);

impl ReadTicket {
    /// Marks the read as given up on: it counts as stuck until it returns.
    pub(crate) fn abandon(self) {
        if !self.0.swap(true, Ordering::AcqRel) {
            STUCK_READS.fetch_add(1, Ordering::AcqRel);
        }
    }
}

fn read_capped(path: &Path) -> Result<String, ConfigError> {
    use std::io::Read;
    let failed = |source| ConfigError::Read {
        path: path.to_owned(),
        source,
    };
    let mut text = String::new();
    std::fs::File::open(path)
        .map_err(failed)?
        .take(MAX_CONFIG_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(failed)?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(ConfigError::TooLarge {
            path: path.to_owned(),
        });
    }
    Ok(text)
}
