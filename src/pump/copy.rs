//! The userspace copy path: one read into the worker thread's 16 KiB
//! scratch buffer, written straight on.
//!
//! Every burst starts here (`copy_once`): small messages (TLS handshakes,
//! interactive traffic) cost just that read and write, as with HAProxy's
//! `splice-auto`. A read that fills the buffer means bulk data, which
//! [`super::direction`] hands to [`super::splice`]; with `splice = false`
//! or no pipe free, the rest of the burst comes back here (`copy_burst`),
//! so this is also the fallback of the splice path.
//!
//! When the source's FIN is already queued as the read starts (tokio's
//! read-closed readiness, [`crate::sockopt::fin_queued`]: no syscall), a short read
//! holds the source's last bytes: they are written corked (MSG_MORE) and
//! reported as `Copied::Last`, so that the FIN the relay sends next rides
//! in the same segment, and the read that would only return 0 is skipped.
//!
//! Not here: pipes (see [`super::splice`]), or when a direction or the
//! connection ends (see [`super::half_close`] and [`super::relay`]).
//!
//! Cost: the scratch buffer is per thread and never held across an await.
//! Only bytes the destination could not take at once are copied into a heap
//! buffer (`Copied::Stuck`) until written.

use std::io;

use tokio::io::Interest;
use tokio::net::TcpStream;

use crate::pump::ready::{Activity, Burst, BurstError, Side, readable, writable};
use crate::pump::throttle::Throttle;
use crate::sockopt;

thread_local! {
    /// Per worker thread; borrowed only inside synchronous sections.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0; COPY_BUFFER]);
}

/// Bytes copied per read.
const COPY_BUFFER: usize = 16 * 1024;

/// What one scratch read found.
pub(super) enum Copied {
    /// It filled the scratch buffer: more is probably waiting.
    Full,
    /// Less than a buffer: the source is drained for now, and its readiness
    /// is cleared without another read (see [`copy_once`]).
    Partial,
    /// The destination took only part of what was read; the rest must be
    /// written before anything else is read.
    Stuck(Vec<u8>),
    /// Nothing to read (readiness is now cleared).
    Idle,
    Eof,
    /// The source's last bytes, all written, and its FIN already queued
    /// behind them: the direction has ended. They were written corked
    /// (MSG_MORE), so the caller must pass the FIN on now (shutdown(2), or
    /// close(2) when the other direction has ended too), which sends them
    /// and the FIN in one segment.
    Last,
}

/// One read into the thread's scratch buffer, written on at once. Whatever
/// the destination can't take now comes back as [`Copied::Stuck`].
///
/// A read shorter than the buffer means the socket's receive queue is
/// empty, so readiness is cleared with it, as HAProxy does, instead of
/// paying a read that would only return EAGAIN. This is race-free: tokio
/// clears only the readiness it had seen before the read, so data arriving
/// after it raises a new event, and a FIN or an error stays set.
// Called per read from the relay's poll in another module: `#[inline]`
// keeps it in that codegen unit, as when both lived in one file.
#[inline]
pub(super) fn copy_once(
    from: &TcpStream,
    to: &TcpStream,
    side: Side,
    activity: &Activity,
) -> Result<Copied, BurstError> {
    copy_up_to(from, to, side, activity, COPY_BUFFER)
}

/// [`copy_once`], reading at most `max` bytes (a bandwidth limit's
/// allowance, see `throttle`); `Full` then means `max` bytes were read.
#[inline]
fn copy_up_to(
    from: &TcpStream,
    to: &TcpStream,
    side: Side,
    activity: &Activity,
    max: usize,
) -> Result<Copied, BurstError> {
    let mut outcome = None;
    // Looked at before the read: a FIN seen now is queued behind every byte
    // the read can return, so a short read then leaves nothing but the FIN.
    let fin_queued = sockopt::fin_queued(from);
    let read = from.try_io(Interest::READABLE, || {
        SCRATCH.with_borrow_mut(|buffer| {
            let buffer = &mut buffer[..max.min(COPY_BUFFER)];
            let n = match from.try_read(buffer) {
                Ok(0) => return Ok(Copied::Eof),
                Ok(n) => n,
                Err(e) => return Err(e),
            };
            activity.touch();
            // The source's last bytes: written corked, for the FIN that
            // the caller sends next to go in the same segment (as HAProxy
            // does when it knows a shutdown follows), and the read that
            // would only return 0 is skipped.
            let last = fin_queued && n < buffer.len();
            let mut written = 0;
            while written < n {
                let attempt = if last {
                    sockopt::try_write_before_fin(to, &buffer[written..n])
                } else {
                    to.try_write(&buffer[written..n])
                };
                match attempt {
                    Ok(w) => written += w,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        activity.add(side, written);
                        return Ok(Copied::Stuck(buffer[written..n].to_vec()));
                    }
                    Err(e) => {
                        outcome = Some(Err(BurstError::Write(e)));
                        return Err(io::ErrorKind::Other.into());
                    }
                }
            }
            // No second stamp: the writes ran in the same breath as the
            // read stamped above (a clock read saved per copy).
            activity.add(side, written);
            if last {
                Ok(Copied::Last)
            } else if n == buffer.len() {
                Ok(Copied::Full)
            } else {
                // Reported as WouldBlock so that `try_io` clears readiness.
                outcome = Some(Ok(Copied::Partial));
                Err(io::ErrorKind::WouldBlock.into())
            }
        })
    });
    match (read, outcome) {
        (_, Some(decided)) => decided,
        (Ok(copied), None) => Ok(copied),
        (Err(e), None) if e.kind() == io::ErrorKind::WouldBlock => Ok(Copied::Idle),
        (Err(e), None) => Err(BurstError::Read(e)),
    }
}

/// Writes what the destination could not take at once (rare: its send
/// buffer was full), waiting for it to drain.
pub(super) async fn write_rest(
    to: &TcpStream,
    rest: Vec<u8>,
    side: Side,
    activity: &Activity,
) -> Result<(), BurstError> {
    let mut unsent: &[u8] = &rest;
    while !unsent.is_empty() {
        writable(to).await.map_err(BurstError::Write)?;
        match to.try_write(unsent) {
            Ok(w) => {
                unsent = &unsent[w..];
                activity.add(side, w);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(BurstError::Write(e)),
        }
    }
    activity.touch();
    Ok(())
}

/// The userspace fallback of `splice::burst`: scratch reads until the
/// source is drained. With a `throttle`, each read first reserves what it
/// may move (see `throttle`), and gives back what it did not.
pub(super) async fn copy_burst(
    from: &TcpStream,
    to: &TcpStream,
    side: Side,
    activity: &Activity,
    throttle: Option<&Throttle>,
) -> Result<Burst, BurstError> {
    loop {
        // Returns at once while readiness holds; yields when the task's
        // cooperative budget is spent.
        readable(from).await.map_err(BurstError::Read)?;
        let copied = match throttle {
            None => copy_once(from, to, side, activity)?,
            Some(throttle) => throttled_copy(from, to, side, activity, throttle).await?,
        };
        match copied {
            Copied::Eof | Copied::Last => return Ok(Burst::Eof),
            Copied::Idle | Copied::Partial => return Ok(Burst::Idle),
            Copied::Stuck(rest) => write_rest(to, rest, side, activity).await?,
            Copied::Full => {}
        }
    }
}

/// One scratch read of at most what `throttle` allows `side` now (waiting
/// for it), the unused rest given back.
async fn throttled_copy(
    from: &TcpStream,
    to: &TcpStream,
    side: Side,
    activity: &Activity,
    throttle: &Throttle,
) -> Result<Copied, BurstError> {
    let reserved = throttle.reserve(side, COPY_BUFFER).await;
    let before = activity.on(side);
    let copied = copy_up_to(from, to, side, activity, reserved.bytes);
    // Read = written now + what is left to write.
    let mut moved = activity.on(side) - before;
    if let Ok(Copied::Stuck(rest)) = &copied {
        moved += rest.len() as u64;
    }
    throttle.settle(side, reserved, usize::try_from(moved).unwrap_or(usize::MAX));
    copied
}
