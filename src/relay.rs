//! The relay: bytes both ways between client and backend until both sides
//! are done.
//!
//! Half-close is propagated, not turned into a teardown: when one side sends
//! FIN, the relay shuts down writing toward the other side and keeps the
//! opposite direction flowing until it ends too. The connection is closed
//! early only when a side fails (reset, write error), when no byte moved in
//! either direction for `idle_timeout`, or when the passed-in cancellation
//! token fires (drain or shutdown).
//!
//! Idle accounting is one atomic timestamp touched per transfer; the idle
//! watchdog sleeps until the earliest moment the connection could be idle and
//! re-arms itself, so no timer is reset per read.
//!
//! Each direction moves data in bursts: it waits for its source to be
//! readable while holding nothing, then takes a buffer (a kernel pipe for
//! splice(2), see `splice`, or a 16 KiB userspace buffer as the fallback),
//! moves everything the source has, and lets the buffer go. An idle
//! connection therefore pins its two sockets and its task, nothing more.
//! `splice = false` on a listener (or globally) selects the userspace copy;
//! splice is the default. Both paths share this loop, so byte counts,
//! half-close, idle timeout and cancellation behave the same.
//!
//! Cost: splice moves bytes without copying them through userspace; the
//! fallback allocates its buffer once per burst (a burst lasts until the
//! source would block), which is the price of not holding 16 KiB per idle
//! direction.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use std::io;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use crate::close::CloseReason;
use crate::{sockopt, splice};

/// Bytes copied per read.
const COPY_BUFFER: usize = 16 * 1024;

/// Bytes moved so far, by direction.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Transferred {
    /// Client → backend, including the replayed hello.
    pub up: u64,
    /// Backend → client.
    pub down: u64,
}

/// Which side of a direction failed.
#[derive(Debug, Clone, Copy)]
enum Failure {
    Client,
    Backend,
}

impl From<Failure> for CloseReason {
    fn from(f: Failure) -> Self {
        match f {
            Failure::Client => CloseReason::ClientReset,
            Failure::Backend => CloseReason::BackendReset,
        }
    }
}

/// When a byte last moved, in milliseconds since the relay started.
pub(crate) struct Activity {
    start: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Activity {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    pub(crate) fn touch(&self) {
        let now = self.start.elapsed().as_millis() as u64;
        self.last_ms.store(now, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }

    /// Resolves once nothing has moved for `idle`.
    async fn expired(&self, idle: Duration) {
        loop {
            let last = self.last();
            sleep_until(last + idle).await;
            if self.last() == last {
                return;
            }
        }
    }
}

/// How one burst of a direction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Burst {
    /// The source has nothing more to read for now.
    Idle,
    /// The source sent FIN; everything before it was delivered.
    Eof,
}

/// Which side of a burst failed.
#[derive(Debug, thiserror::Error)]
pub enum BurstError {
    #[error("reading the source failed: {0}")]
    Read(io::Error),
    #[error("writing the destination failed: {0}")]
    Write(io::Error),
}

/// Writes `replay` (the buffered hello) to the backend, then relays both
/// ways, with splice(2) when `use_splice` is set.
pub async fn relay(
    client: &mut TcpStream,
    backend: &mut TcpStream,
    replay: Vec<u8>,
    idle: Duration,
    cancel: &CancellationToken,
    moved: &mut Transferred,
    use_splice: bool,
) -> CloseReason {
    if backend.write_all(&replay).await.is_err() {
        return CloseReason::BackendReset;
    }
    moved.up += replay.len() as u64;
    // The hello buffer is not needed past this point; a long-lived
    // connection must not keep it.
    drop(replay);

    let activity = Activity::new();
    let pipes = use_splice.then(splice::pool);
    let (client, backend): (&TcpStream, &TcpStream) = (client, backend);
    let up = pump(
        client,
        backend,
        (Failure::Client, Failure::Backend),
        pipes,
        &activity,
        &mut moved.up,
    );
    let down = pump(
        backend,
        client,
        (Failure::Backend, Failure::Client),
        pipes,
        &activity,
        &mut moved.down,
    );
    let idle_expired = activity.expired(idle);
    tokio::pin!(up, down, idle_expired);
    let (mut up_done, mut down_done) = (false, false);
    while !(up_done && down_done) {
        tokio::select! {
            result = &mut up, if !up_done => match result {
                Ok(()) => up_done = true,
                Err(failure) => return failure.into(),
            },
            result = &mut down, if !down_done => match result {
                Ok(()) => down_done = true,
                Err(failure) => return failure.into(),
            },
            () = &mut idle_expired => return CloseReason::IdleTimeout,
            () = cancel.cancelled() => return CloseReason::Shutdown,
        }
    }
    CloseReason::Done
}

/// Moves one direction until EOF, then passes the FIN on.
async fn pump(
    from: &TcpStream,
    to: &TcpStream,
    (reader, writer): (Failure, Failure),
    pipes: Option<&splice::PipePool>,
    activity: &Activity,
    count: &mut u64,
) -> Result<(), Failure> {
    loop {
        // Holding nothing while the source is quiet.
        from.readable().await.map_err(|_| reader)?;
        let burst = match pipes.and_then(splice::PipePool::lease) {
            Some(mut lease) => {
                splice::burst(from, to, &mut lease, &|| activity.touch(), count).await
            }
            None => copy_burst(from, to, activity, count).await,
        };
        match burst {
            Ok(Burst::Idle) => {}
            // Half-close: the other direction keeps flowing.
            Ok(Burst::Eof) => return sockopt::shutdown_write(to).map_err(|_| writer),
            Err(BurstError::Read(_)) => return Err(reader),
            Err(BurstError::Write(_)) => return Err(writer),
        }
    }
}

/// The userspace fallback of `splice::burst`: the buffer exists only while
/// the source has data.
async fn copy_burst(
    from: &TcpStream,
    to: &TcpStream,
    activity: &Activity,
    count: &mut u64,
) -> Result<Burst, BurstError> {
    let mut buffer = vec![0u8; COPY_BUFFER];
    let mut first = true;
    loop {
        if !first {
            // Returns at once while readiness holds; yields when the task's
            // cooperative budget is spent.
            from.readable().await.map_err(BurstError::Read)?;
        }
        first = false;
        let n = match from.try_read(&mut buffer) {
            Ok(0) => return Ok(Burst::Eof),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Burst::Idle),
            Err(e) => return Err(BurstError::Read(e)),
        };
        activity.touch();
        let mut rest = &buffer[..n];
        while !rest.is_empty() {
            match to.try_write(rest) {
                Ok(written) => rest = &rest[written..],
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    to.writable().await.map_err(BurstError::Write)?;
                }
                Err(e) => return Err(BurstError::Write(e)),
            }
        }
        *count += n as u64;
        activity.touch();
    }
}
