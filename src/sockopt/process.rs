//! Process-wide settings and readings, not of one socket: the descriptor
//! limit raised at start-up ([`raise_nofile_limit`], through nix's safe
//! wrapper) and CLOCK_MONOTONIC as systemd's MONOTONIC_USEC wants it
//! ([`monotonic_usec`]).
//!
//! Not here: the start-up that raises the limit ([`crate::cli`], before
//! the server starts) and the sd_notify messages that carry the clock
//! ([`crate::run::notify`]).

use std::io;

/// The descriptor limit before and after [`raise_nofile_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NofileLimit {
    pub(crate) soft_before: u64,
    pub(crate) soft: u64,
    pub(crate) hard: u64,
}

/// Raises the soft RLIMIT_NOFILE to the hard limit: every relayed connection
/// needs two descriptors (and a pipe in flight two more), and the usual soft
/// default of 1024 would cap the relay at a few hundred connections.
pub fn raise_nofile_limit() -> io::Result<NofileLimit> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(io::Error::from)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).map_err(io::Error::from)?;
    }
    Ok(NofileLimit {
        soft_before: soft,
        soft: hard,
        hard,
    })
}

/// CLOCK_MONOTONIC in microseconds, as systemd's MONOTONIC_USEC wants it.
pub(crate) fn monotonic_usec() -> u64 {
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC) {
        Ok(ts) => ts.tv_sec() as u64 * 1_000_000 + ts.tv_nsec() as u64 / 1_000,
        Err(_) => 0,
    }
}
