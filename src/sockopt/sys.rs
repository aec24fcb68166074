//! The only file in the crate with `unsafe` code. The crate root denies
//! `unsafe_code` (`#![deny(unsafe_code)]`); each function here allows it on
//! itself alone (`#[allow(unsafe_code)]`), and each `unsafe` block carries
//! its SAFETY argument. Four jobs need it, none of which nix, socket2 or
//! the `mimalloc` crate wraps safely:
//!
//! - [`take_activated_fds`]: systemd's socket activation hands descriptors
//!   over by number (3.., SD_LISTEN_FDS_START), and the LISTEN_* variables
//!   that say so are removed from the environment, which is `unsafe` in
//!   Rust 2024.
//! - [`recv_fds`]: a takeover's descriptors arrive as numbers in an
//!   SCM_RIGHTS message, each wrapped once as an owned descriptor.
//! - [`set_local_port_range`]: IP_LOCAL_PORT_RANGE, the one setsockopt(2)
//!   libc has no name for, is called through the raw function.
//! - [`release_freed_memory`]: mimalloc's `mi_collect`, a C function, so
//!   that the memory a reload freed goes back to the system at once
//!   instead of when mimalloc next purges (benches/README.md, "Names").
//!
//! Keep it so: code that needs `unsafe` goes here, with its argument, and
//! the safe rest stays in the sibling files. [`ActivatedFd`] and
//! [`MAX_PASSED_FDS`], safe themselves, sit here beside the functions that
//! make them and size their buffer.
//!
//! Not here: when memory is handed back (after a reload, and once at
//! start: [`crate::run::server`]); checking and preparing the descriptors taken here, and sending
//! descriptors ([`super::inherit`]); the source bind that sets the port
//! range ([`super::connect`]); the takeover's message exchange
//! ([`crate::run::takeover`]).

use std::io;

use socket2::Socket;

/// A descriptor passed in by systemd, with its LISTEN_FDNAMES name.
#[derive(Debug)]
pub(crate) struct ActivatedFd {
    pub name: String,
    pub fd: std::os::fd::OwnedFd,
}

/// The first descriptor systemd passes (SD_LISTEN_FDS_START).
const LISTEN_FDS_START: i32 = 3;

/// Takes the sockets systemd passed with socket activation, if any were
/// passed to this process, and removes LISTEN_* from the environment so
/// they are taken once only. An fd without a name in LISTEN_FDNAMES gets
/// systemd's default name, `unknown`.
///
/// Must be called before any thread is started (the environment is changed).
#[allow(unsafe_code)]
pub(crate) fn take_activated_fds() -> io::Result<Vec<ActivatedFd>> {
    let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidInput, what);
    let Ok(pid) = std::env::var("LISTEN_PID") else {
        return Ok(Vec::new());
    };
    let count = std::env::var("LISTEN_FDS").unwrap_or_default();
    let names = std::env::var("LISTEN_FDNAMES").unwrap_or_default();
    // SAFETY: called from `main` before the async runtime or any other
    // thread exists, so nothing reads the environment concurrently.
    unsafe {
        std::env::remove_var("LISTEN_PID");
        std::env::remove_var("LISTEN_FDS");
        std::env::remove_var("LISTEN_FDNAMES");
    }
    if pid.parse::<u32>().ok() != Some(std::process::id()) {
        // Meant for another process (e.g. our parent); not ours to take.
        return Ok(Vec::new());
    }
    let count: i32 = count
        .parse()
        .map_err(|_| invalid(format!("LISTEN_FDS={count:?} is not a number")))?;
    if !(0..=1024).contains(&count) {
        return Err(invalid(format!("LISTEN_FDS={count} is out of range")));
    }
    let mut names = names.split(':');
    let mut fds = Vec::new();
    for raw in LISTEN_FDS_START..LISTEN_FDS_START + count {
        // SAFETY: LISTEN_PID names this process, so by the sd_listen_fds
        // protocol descriptors 3..3+LISTEN_FDS are open and were handed to
        // us; we remove LISTEN_* above, so each is wrapped exactly once and
        // nothing else in the process owns it.
        let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) };
        let name = names
            .next()
            .filter(|n| !n.is_empty())
            .unwrap_or("unknown")
            .to_owned();
        fds.push(ActivatedFd { name, fd });
    }
    Ok(fds)
}

/// Most descriptors one message may carry (Linux SCM_MAX_FD).
pub(crate) const MAX_PASSED_FDS: usize = 253;

/// Receives one message from a Unix stream socket: some payload bytes and
/// the descriptors that came with them (close-on-exec).
#[allow(unsafe_code)]
pub(crate) fn recv_fds(
    stream: &std::os::unix::net::UnixStream,
    buf: &mut [u8],
) -> io::Result<(usize, Vec<std::os::fd::OwnedFd>)> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let mut cmsg = nix::cmsg_space!([i32; MAX_PASSED_FDS]);
    let mut iov = [io::IoSliceMut::new(buf)];
    let msg = recvmsg::<()>(
        stream.as_raw_fd(),
        &mut iov,
        Some(&mut cmsg),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .map_err(io::Error::from)?;
    let mut fds = Vec::new();
    let cmsgs = msg.cmsgs().map_err(io::Error::from)?;
    for message in cmsgs {
        if let ControlMessageOwned::ScmRights(raw) = message {
            for fd in raw {
                // SAFETY: the kernel just installed this descriptor in our
                // table for this message (SCM_RIGHTS); nothing else refers
                // to it, so it is wrapped exactly once.
                fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
    }
    Ok((msg.bytes, fds))
}

/// IP_LOCAL_PORT_RANGE (Linux 6.3, `include/uapi/linux/in.h`): the local
/// port range of one socket, `low | high << 16`; libc does not name it.
const IP_LOCAL_PORT_RANGE: nix::libc::c_int = 51;

/// IP_LOCAL_PORT_RANGE on `socket`: ports the kernel picks from at bind or
/// connect time; ENOPROTOOPT before Linux 6.3.
#[allow(unsafe_code)]
pub(super) fn set_local_port_range(socket: &Socket, low: u16, high: u16) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let value: u32 = u32::from(low) | (u32::from(high) << 16);
    // SAFETY: `socket` is an open descriptor for the whole call; the value
    // pointer and its length describe one live `u32`, which the kernel
    // copies in and does not keep.
    let rc = unsafe {
        nix::libc::setsockopt(
            socket.as_raw_fd(),
            nix::libc::SOL_IP,
            IP_LOCAL_PORT_RANGE,
            (&raw const value).cast(),
            std::mem::size_of::<u32>() as nix::libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Hands the memory the allocator holds free back to the system: mimalloc's
/// `mi_collect(true)`, which frees this thread's empty pages and purges
/// (decommits, `MADV_DONTNEED`) every free span of the process's arenas,
/// including those still waiting out mimalloc's purge delay (1 s by
/// default, and only acted on when some thread next allocates, so an idle
/// relay would otherwise keep them resident). Costs a walk of this
/// thread's pages and of the arenas' bitmaps, and a madvise(2) per free
/// run: milliseconds at 100 MB of heap; meant for after a reload (and once
/// after start), not for a connection's path.
///
/// In a binary that does not use mimalloc as its allocator (the
/// `sysalloc` example, the tests) the call finds mimalloc's heap unused
/// and does nothing.
#[allow(unsafe_code)]
pub(crate) fn release_freed_memory() {
    // SAFETY: `mi_collect` takes a plain bool, returns nothing and touches
    // only mimalloc's own state, which it locks or keeps per thread; it is
    // documented as callable from any thread at any time, and frees only
    // blocks already freed by their owners, so no live allocation is
    // affected.
    unsafe { libmimalloc_sys::mi_collect(true) }
}
