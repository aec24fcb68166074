//! Zero-copy relaying with splice(2): socket → pipe → socket, in the kernel.
//!
//! One direction of a relay moves data in *bursts* (see
//! [`super::direction`]): it waits
//! for the source socket to be readable while holding nothing, then leases a
//! pipe from the process-wide [`PipePool`], splices source → pipe and pipe →
//! destination until the source has no more data, and gives the pipe back.
//! So an idle relayed connection holds exactly its two sockets: no pipe, no
//! buffer. This is what HAProxy does with its pipe pool.
//!
//! Descriptors and flags:
//! - Each [`Pipe`] owns its two ends as `OwnedFd`s; they are closed when the
//!   pipe is dropped, never anywhere else. The sockets are borrowed
//!   (`AsFd`) from the caller's tokio `TcpStream`s and never closed here.
//! - Pipes are made with `pipe2(O_NONBLOCK | O_CLOEXEC)`: non-blocking so a
//!   splice can never park a runtime thread (tokio sockets are O_NONBLOCK
//!   already, and `SPLICE_F_NONBLOCK` is passed too), close-on-exec so no
//!   child process inherits them.
//! - A pipe is only ever filled when it is empty. EAGAIN from "socket →
//!   pipe" can then only mean "the socket has no data", and EAGAIN from
//!   "pipe → socket" (pipe not empty) only "the socket's send buffer is
//!   full", so tokio readiness is cleared for the right socket (`try_io`).
//! - A pipe that still holds bytes (the destination failed, or the relay was
//!   cancelled mid-burst) can't be reused: its bytes belong to another
//!   connection. Such a pipe is closed instead of being returned.
//!
//! The pool is bounded (`global.max_pipes`): when every pipe is in use, a
//! burst copies through userspace instead (`copy`, the fallback), so a
//! full pool costs throughput, never correctness. Pipes are sized with
//! F_SETPIPE_SZ (`global.pipe_size`); if the kernel refuses the size (over
//! `fs.pipe-max-size`, or the user's pipe page budget), the pipe keeps the
//! size it got. Both values are passed in by [`configure`] (the binary
//! does so at startup, from the validated configuration); this module reads
//! no configuration, and until [`configure`] is called there is no pool and
//! every burst is copied.
//!
//! Cost: a lease is one uncontended mutex on a per-thread shard (no global
//! lock); a burst is two syscalls per pipe-full. Nothing is allocated per
//! connection or per burst once the pool is warm.
//!
//! Not here: the relay's loop or idle accounting (see [`super::relay`]),
//! half-close (see [`super::half_close`]), or the types it shares with them
//! (see [`super::ready`]). Everything goes through
//! nix's safe wrappers; this module has no `unsafe`, and the crate's
//! `#![deny(unsafe_code)]` holds here.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use nix::fcntl::{FcntlArg, OFlag, SpliceFFlags, fcntl, splice};
use tokio::io::Interest;
use tokio::net::TcpStream;

use crate::pump::ready::{Activity, Burst, BurstError, Side, readable, writable};
use crate::pump::throttle::Throttle;

const FLAGS: SpliceFFlags = SpliceFFlags::SPLICE_F_MOVE.union(SpliceFFlags::SPLICE_F_NONBLOCK);

/// Pool shards; each runtime thread uses one, so leases rarely contend.
const SHARDS: usize = 16;

/// A kernel pipe used as the zero-copy buffer of one burst.
#[derive(Debug)]
pub(crate) struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    /// What the kernel granted (F_SETPIPE_SZ rounds up; may refuse).
    capacity: usize,
    /// Bytes spliced in but not yet out.
    pending: usize,
}

impl Pipe {
    fn new(size: usize) -> io::Result<Pipe> {
        let (read, write) = nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC)?;
        let size = i32::try_from(size).unwrap_or(i32::MAX);
        let capacity = match fcntl(&write, FcntlArg::F_SETPIPE_SZ(size)) {
            Ok(granted) => granted,
            Err(_) => fcntl(&write, FcntlArg::F_GETPIPE_SZ)?,
        };
        Ok(Pipe {
            read,
            write,
            capacity: usize::try_from(capacity).unwrap_or(4096).max(4096),
            pending: 0,
        })
    }

    #[cfg(test)]
    /// Bytes the kernel lets this pipe hold.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    #[cfg(test)]
    /// Bytes still in the pipe.
    pub(crate) fn pending(&self) -> usize {
        self.pending
    }
}

#[cfg(test)]
/// Pool sizes, for tests and diagnostics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PoolStats {
    /// Pipes open: leased plus idle.
    pub open: usize,
    /// Pipes waiting in the pool.
    pub idle: usize,
}

/// A bounded, sharded pool of empty pipes.
#[derive(Debug)]
pub(crate) struct PipePool {
    shards: Box<[Mutex<Vec<Pipe>>]>,
    open: AtomicUsize,
    max: usize,
    size: usize,
}

impl PipePool {
    /// A pool of at most `max` pipes of `size` bytes each; none is made yet.
    pub(crate) fn new(size: usize, max: usize) -> PipePool {
        PipePool {
            shards: (0..SHARDS).map(|_| Mutex::new(Vec::new())).collect(),
            open: AtomicUsize::new(0),
            max,
            size,
        }
    }

    fn shard(&self) -> &Mutex<Vec<Pipe>> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        thread_local! {
            static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed);
        }
        &self.shards[SHARD.with(|s| *s) % self.shards.len()]
    }

    /// An empty pipe, or `None` when `max` pipes are open (or the kernel
    /// refuses another): the caller copies through userspace instead.
    pub(crate) fn lease(&self) -> Option<Lease<'_>> {
        let pooled = self.shard().lock().unwrap_or_else(|e| e.into_inner()).pop();
        let pipe = match pooled {
            Some(pipe) => pipe,
            None => self.open_pipe()?,
        };
        Some(Lease {
            pool: self,
            pipe: Some(pipe),
        })
    }

    fn open_pipe(&self) -> Option<Pipe> {
        let reserved = self
            .open
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.max).then_some(n + 1)
            })
            .is_ok();
        if !reserved {
            return None;
        }
        match Pipe::new(self.size) {
            Ok(pipe) => Some(pipe),
            Err(error) => {
                self.open.fetch_sub(1, Ordering::Relaxed);
                tracing::debug!(%error, "cannot open a pipe; copying through userspace");
                None
            }
        }
    }

    fn give_back(&self, pipe: Pipe) {
        if pipe.pending == 0 {
            self.shard()
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(pipe);
        } else {
            // Another connection's bytes are still in it: close it.
            drop(pipe);
            self.open.fetch_sub(1, Ordering::Relaxed);
        }
    }

    #[cfg(test)]
    pub(crate) fn stats(&self) -> PoolStats {
        let idle = self
            .shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum();
        PoolStats {
            open: self.open.load(Ordering::Relaxed),
            idle,
        }
    }
}

/// A pipe on loan; goes back to its pool on drop if it is empty, else is
/// closed.
#[derive(Debug)]
pub(crate) struct Lease<'a> {
    pool: &'a PipePool,
    pipe: Option<Pipe>,
}

impl Lease<'_> {
    #[cfg(test)]
    pub(crate) fn pipe(&self) -> &Pipe {
        self.pipe
            .as_ref()
            .expect("a lease holds its pipe until dropped")
    }

    fn pipe_mut(&mut self) -> &mut Pipe {
        self.pipe
            .as_mut()
            .expect("a lease holds its pipe until dropped")
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let Some(pipe) = self.pipe.take() {
            self.pool.give_back(pipe);
        }
    }
}

static POOL: OnceLock<PipePool> = OnceLock::new();

/// Makes the process-wide pool, with pipes of `size` bytes and at most
/// `max` of them; call once at startup, before the first connection.
/// Returns false if the pool already exists.
pub(crate) fn configure(size: usize, max: usize) -> bool {
    POOL.set(PipePool::new(size, max)).is_ok()
}

/// The process-wide pool (pipes are a process resource, like descriptors),
/// or `None` before [`configure`]: the relay then copies every burst.
pub(crate) fn pool() -> Option<&'static PipePool> {
    POOL.get()
}

/// Moves data `from` → `to` through the leased pipe until `from` has nothing
/// more to read now (`Burst::Idle`) or has sent FIN (`Burst::Eof`).
/// Touches `activity` whenever bytes move and counts bytes written to `to`
/// on `side`.
///
/// With a `throttle` (a bandwidth limit), each splice from `from` first
/// takes what `side` may move now and moves at most that (the splice
/// length): still zero-copy. What it did not move is given back. When the
/// buckets hold too little, the burst ends (`Burst::Idle`, the pipe empty)
/// rather than wait holding a pipe: the caller waits for tokens
/// (`Throttle::until_ready`) and starts another.
pub(crate) async fn burst(
    from: &TcpStream,
    to: &TcpStream,
    lease: &mut Lease<'_>,
    side: Side,
    activity: &Activity,
    throttle: Option<&Throttle>,
) -> Result<Burst, BurstError> {
    let pipe = lease.pipe_mut();
    debug_assert_eq!(pipe.pending, 0, "pooled pipes are empty");
    let mut first = true;
    loop {
        if !first {
            // Readiness is still set (we have not seen EAGAIN), so this only
            // yields when the task's cooperative budget is spent.
            readable(from).await.map_err(BurstError::Read)?;
        }
        first = false;
        let reserved = match throttle {
            None => None,
            Some(throttle) => match throttle.try_take(side, pipe.capacity) {
                Some(reserved) => Some(reserved),
                None => return Ok(Burst::Idle),
            },
        };
        let length = reserved.map_or(pipe.capacity, |r| r.bytes);
        let filled = from.try_io(Interest::READABLE, || {
            splice(from.as_fd(), None, pipe.write.as_fd(), None, length, FLAGS)
                .map_err(io::Error::from)
        });
        if let (Some(throttle), Some(reserved)) = (throttle, reserved) {
            let moved = *filled.as_ref().unwrap_or(&0);
            throttle.settle(side, reserved, moved);
        }
        match filled {
            Ok(0) => return Ok(Burst::Eof),
            Ok(n) => pipe.pending = n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Burst::Idle),
            Err(e) => return Err(BurstError::Read(e)),
        }
        activity.touch();
        while pipe.pending > 0 {
            let drained = to.try_io(Interest::WRITABLE, || {
                splice(
                    pipe.read.as_fd(),
                    None,
                    to.as_fd(),
                    None,
                    pipe.pending,
                    FLAGS,
                )
                .map_err(io::Error::from)
            });
            match drained {
                Ok(n) => {
                    pipe.pending -= n;
                    activity.add(side, n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    writable(to).await.map_err(BurstError::Write)?;
                }
                Err(e) => return Err(BurstError::Write(e)),
            }
        }
        activity.touch();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    async fn socket_pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (client, server)
    }

    #[test]
    fn pipes_are_sized_nonblocking_and_close_on_exec() {
        let pipe = Pipe::new(256 * 1024).unwrap();
        assert_eq!(pipe.capacity(), 256 * 1024);
        for fd in [&pipe.read, &pipe.write] {
            let fl = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL).unwrap());
            assert!(fl.contains(OFlag::O_NONBLOCK));
            let fd_flags = fcntl(fd, FcntlArg::F_GETFD).unwrap();
            assert_ne!(fd_flags & libc_fd_cloexec(), 0);
        }
    }

    fn libc_fd_cloexec() -> i32 {
        nix::fcntl::FdFlag::FD_CLOEXEC.bits()
    }

    #[tokio::test]
    async fn an_emptied_pipe_returns_to_the_pool_and_is_reused() {
        let pool = PipePool::new(64 * 1024, 4);
        let (mut a, a_relay) = socket_pair().await;
        let (b_relay, mut b) = socket_pair().await;
        let activity = Activity::new();
        for round in 0..3u8 {
            a.write_all(&[round; 1000]).await.unwrap();
            a_relay.readable().await.unwrap();
            let mut lease = pool.lease().unwrap();
            let outcome = burst(&a_relay, &b_relay, &mut lease, Side::Up, &activity, None).await;
            assert!(matches!(outcome, Ok(Burst::Idle)), "{outcome:?}");
            assert_eq!(lease.pipe().pending(), 0);
            drop(lease);
            assert_eq!(pool.stats(), PoolStats { open: 1, idle: 1 });
            let mut got = [0u8; 1000];
            b.read_exact(&mut got).await.unwrap();
            assert_eq!(got, [round; 1000]);
        }
        assert_eq!(activity.moved().up, 3000);
        // FIN comes through as Eof, and the pipe still goes back.
        a.shutdown().await.unwrap();
        a_relay.readable().await.unwrap();
        let mut lease = pool.lease().unwrap();
        let outcome = burst(&a_relay, &b_relay, &mut lease, Side::Up, &activity, None).await;
        assert!(matches!(outcome, Ok(Burst::Eof)), "{outcome:?}");
        drop(lease);
        assert_eq!(pool.stats(), PoolStats { open: 1, idle: 1 });
    }

    #[tokio::test]
    async fn a_pipe_with_bytes_left_is_closed_not_pooled() {
        let pool = PipePool::new(64 * 1024, 4);
        let mut lease = pool.lease().unwrap();
        lease.pipe_mut().pending = 10;
        drop(lease);
        assert_eq!(pool.stats(), PoolStats { open: 0, idle: 0 });
    }

    #[tokio::test]
    async fn the_pool_is_bounded() {
        let pool = PipePool::new(4096, 2);
        let first = pool.lease().unwrap();
        let second = pool.lease().unwrap();
        assert!(pool.lease().is_none());
        drop(first);
        assert!(pool.lease().is_some());
        drop(second);
        assert_eq!(pool.stats().open, 2);
    }
}
