//! One direction of a relayed connection ([`Direction`]: client to backend
//! or back), the slot the relay keeps for each: the bulk burst in
//! progress, if any, and how far the direction is ([`End`]).
//!
//! Each direction moves data in bursts: it waits for its source to be
//! readable while holding nothing, then makes one scratch read and write
//! ([`copy_once`]). A read that fills the scratch buffer means bulk
//! data: the rest of the burst then goes through a kernel pipe with
//! splice(2) (see [`super::splice`]), or, with `splice = false` or no pipe
//! free, through more scratch reads ([`copy_burst`], the fallback), in a
//! boxed future that lives only for the burst. When the source is drained
//! the burst ends and the pipe goes back to the pool. An idle direction
//! therefore holds nothing but its slot.
//!
//! A connection with bandwidth limits ([`super::throttle`]) runs each
//! direction as one boxed future for its whole life instead
//! ([`throttled`]): bursts as above, each read first waiting for the
//! buckets.
//!
//! Not here: how bytes are moved ([`super::copy`], [`super::splice`]),
//! what a failure means ([`super::failure`], [`super::half_close`]), or
//! both directions together, the timeouts and the FIN passed on
//! ([`super::relay`]).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::net::TcpStream;

use crate::pump::copy::{Copied, copy_burst, copy_once, write_rest};
use crate::pump::failure::{At, RelayFailure, RelayPeer};
use crate::pump::half_close::End;
use crate::pump::ready::{Activity, Burst, BurstError, Side, readable};
use crate::pump::splice;
use crate::pump::throttle::Throttle;

/// A boxed burst: what a direction holds while it moves bulk data.
pub(super) type BurstFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Burst, BurstError>> + Send + 'a>>;

/// One direction's slot in [`super::relay::Relay`].
pub(super) struct Direction<'a> {
    side: Side,
    /// The bulk burst in progress, if any.
    pub(super) burst: Option<BurstFuture<'a>>,
    pub(super) end: End,
}

impl<'a> Direction<'a> {
    pub(super) fn new(side: Side) -> Self {
        Direction {
            side,
            burst: None,
            end: End::Open,
        }
    }

    /// This direction's source and destination peers.
    pub(super) fn peers(&self) -> (RelayPeer, RelayPeer) {
        match self.side {
            Side::Up => (RelayPeer::Client, RelayPeer::Backend),
            Side::Down => (RelayPeer::Backend, RelayPeer::Client),
        }
    }

    /// Moves data until the source is drained (Pending) or sent FIN (Ready).
    pub(super) fn poll_move(
        &mut self,
        cx: &mut Context<'_>,
        (from, to): (&'a TcpStream, &'a TcpStream),
        activity: &'a Activity,
        pipes: Option<&'static splice::PipePool>,
    ) -> Poll<Result<(), RelayFailure>> {
        let (reader, writer) = self.peers();
        let side = self.side;
        loop {
            if let Some(burst) = &mut self.burst {
                let outcome = ready!(burst.as_mut().poll(cx));
                self.burst = None;
                match outcome {
                    Ok(Burst::Idle) => {}
                    // Half-close: the other direction keeps flowing.
                    Ok(Burst::Eof) => return Poll::Ready(Ok(())),
                    Err(BurstError::Read(e)) => {
                        return Poll::Ready(Err(RelayFailure::read(reader, &e)));
                    }
                    Err(BurstError::Write(e)) => {
                        return Poll::Ready(Err(RelayFailure::write(writer, At::Write, to, &e)));
                    }
                }
            }
            // Holding nothing while the source is quiet. This also spends
            // the task's cooperative budget, so a busy direction yields.
            if let Err(e) = ready!(from.poll_read_ready(cx)) {
                return Poll::Ready(Err(RelayFailure::read(reader, &e)));
            }
            match copy_once(from, to, side, activity) {
                // Bulk data: move the rest of the burst through a pipe.
                Ok(Copied::Full) => {
                    self.burst = Some(Box::pin(bulk(from, to, side, pipes, activity, None)));
                }
                Ok(Copied::Stuck(rest)) => {
                    self.burst = Some(Box::pin(async move {
                        write_rest(to, rest, side, activity).await?;
                        Ok(Burst::Idle)
                    }));
                }
                // A short read drained the source (readiness is cleared), so
                // the next `poll_read_ready` waits; after a stale wake-up it
                // also does.
                Ok(Copied::Partial | Copied::Idle) => {}
                // The last bytes are corked: the caller's FIN (shutdown
                // or close, in this same poll) sends them with it.
                Ok(Copied::Eof | Copied::Last) => return Poll::Ready(Ok(())),
                Err(BurstError::Read(e)) => {
                    return Poll::Ready(Err(RelayFailure::read(reader, &e)));
                }
                Err(BurstError::Write(e)) => {
                    return Poll::Ready(Err(RelayFailure::write(writer, At::Write, to, &e)));
                }
            }
        }
    }
}

/// A limited direction, from the relay's start to its source's FIN: a
/// burst whenever the source is readable and the buckets hold a chunk,
/// every read of it paced by `throttle` (see [`super::throttle`]). Waits
/// for tokens holding no pipe.
pub(super) async fn throttled(
    from: &TcpStream,
    to: &TcpStream,
    side: Side,
    pipes: Option<&splice::PipePool>,
    activity: &Activity,
    throttle: &Throttle,
) -> Result<Burst, BurstError> {
    loop {
        readable(from).await.map_err(BurstError::Read)?;
        throttle.until_ready(side).await;
        if let Burst::Eof = bulk(from, to, side, pipes, activity, Some(throttle)).await? {
            return Ok(Burst::Eof);
        }
    }
}

/// The rest of a bulk burst: spliced when a pipe is free, else copied.
async fn bulk(
    from: &TcpStream,
    to: &TcpStream,
    side: Side,
    pipes: Option<&splice::PipePool>,
    activity: &Activity,
    throttle: Option<&Throttle>,
) -> Result<Burst, BurstError> {
    match pipes.and_then(splice::PipePool::lease) {
        Some(mut lease) => splice::burst(from, to, &mut lease, side, activity, throttle).await,
        None => copy_burst(from, to, side, activity, throttle).await,
    }
}
