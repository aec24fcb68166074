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
//! Cost: this userspace path holds one 16 KiB buffer per direction while the
//! relay runs. It is the portable path; a zero-copy path can replace
//! [`relay`] without changing its contract.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use crate::close::CloseReason;

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
struct Activity {
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

    fn touch(&self) {
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

/// Writes `replay` (the buffered hello) to the backend, then relays both ways.
pub async fn relay(
    client: &mut TcpStream,
    backend: &mut TcpStream,
    replay: Vec<u8>,
    idle: Duration,
    cancel: &CancellationToken,
    moved: &mut Transferred,
) -> CloseReason {
    if backend.write_all(&replay).await.is_err() {
        return CloseReason::BackendReset;
    }
    moved.up += replay.len() as u64;
    // The hello buffer is not needed past this point; a long-lived
    // connection must not keep it.
    drop(replay);

    let activity = Activity::new();
    let (mut client_read, mut client_write) = client.split();
    let (mut backend_read, mut backend_write) = backend.split();
    let up = pump(
        &mut client_read,
        &mut backend_write,
        (Failure::Client, Failure::Backend),
        &activity,
        &mut moved.up,
    );
    let down = pump(
        &mut backend_read,
        &mut client_write,
        (Failure::Backend, Failure::Client),
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

/// Copies one direction until EOF, then passes the FIN on.
async fn pump<R, W>(
    from: &mut R,
    to: &mut W,
    (reader, writer): (Failure, Failure),
    activity: &Activity,
    count: &mut u64,
) -> Result<(), Failure>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buffer = vec![0u8; COPY_BUFFER];
    loop {
        let n = from.read(&mut buffer).await.map_err(|_| reader)?;
        if n == 0 {
            // Half-close: the other direction keeps flowing.
            return to.shutdown().await.map_err(|_| writer);
        }
        activity.touch();
        to.write_all(&buffer[..n]).await.map_err(|_| writer)?;
        *count += n as u64;
        activity.touch();
    }
}
