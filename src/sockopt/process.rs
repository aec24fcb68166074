//! Process-wide settings and readings, not of one socket: the descriptor
//! limit raised at start-up ([`raise_nofile_limit`], through nix's safe
//! wrapper) and read at each reload ([`nofile_limit`]), the heap kept in base pages ([`keep_heap_in_base_pages`]) and
//! CLOCK_MONOTONIC as systemd's MONOTONIC_USEC wants it
//! ([`monotonic_usec`]).
//!
//! Not here: the start-up that raises the limit ([`crate::cli`], before
//! the server starts) and the sd_notify messages that carry the clock
//! ([`crate::run::notify`]).

use std::io;

/// Keeps the process's memory in base pages (4 KiB on x86-64): turns
/// transparent huge pages off for this process (prctl(2)
/// PR_SET_THP_DISABLE, which also covers the ranges mimalloc asks huge
/// pages for with MADV_HUGEPAGE), unless the environment sets
/// `MIMALLOC_ALLOW_THP` to something other than `0` (mimalloc's own
/// option, whose process-wide form this is). Returns whether it did.
///
/// Why: with huge pages the relay's resident memory moves in 2 MiB steps
/// (262 bytes per connection at 8,000 connections), so the same heap shows
/// one step more or less from run to run, and a small edge VM sees memory
/// it cannot plan for; in base pages it is what the heap holds. What a
/// connection's state costs is its memory and its two sockets' kernel
/// buffers, not a large working set that huge pages would speed up
/// (benches/README.md, "Idle memory from outside").
pub fn keep_heap_in_base_pages() -> io::Result<bool> {
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_some_and(|v| v != "0") {
        return Ok(false);
    }
    nix::sys::prctl::set_thp_disable(true).map_err(io::Error::from)?;
    Ok(true)
}

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

/// The descriptor limit now, as (soft, hard): what a reload and `check`
/// hold `max_connections` against ([`crate::run::descriptors`]).
pub fn nofile_limit() -> io::Result<(u64, u64)> {
    use nix::sys::resource::{Resource, getrlimit};
    getrlimit(Resource::RLIMIT_NOFILE).map_err(io::Error::from)
}

/// CLOCK_MONOTONIC in microseconds, as systemd's MONOTONIC_USEC wants it.
pub(crate) fn monotonic_usec() -> u64 {
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC) {
        Ok(ts) => ts.tv_sec() as u64 * 1_000_000 + ts.tv_nsec() as u64 / 1_000,
        Err(_) => 0,
    }
}
