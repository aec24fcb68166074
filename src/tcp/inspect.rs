//! Reading the ClientHello off the socket: the I/O side of `client_hello`.
//!
//! Reads into one buffer, feeds what each read added to the
//! [`client_hello::Reassembler`], and stops at the first verdict. Two bounds hold throughout: the buffer never grows past
//! `max_client_hello_bytes`, and the whole inspection ends at the deadline
//! (accept time + `client_hello_timeout`), however the client trickles bytes.
//! Every byte read is kept in [`Hello::bytes`] to be replayed to the backend,
//! including any bytes the client sent after the hello.
//!
//! The first read is made at once, before the event loop has reported the
//! socket readable ([`crate::sockopt::recv_now`]): a client sends its hello right
//! after the handshake, so it has usually arrived by the time the
//! connection's task first runs, and the connection then skips a turn of
//! the event loop (as HAProxy's speculative reads do). In the pinned load
//! benchmark this brought the connection latency p99 from 1.12× HAProxy's
//! to 0.99× (medians of six paired runs, benches/README.md). When nothing
//! has come yet, it costs one recv(2) that finds nothing.
//!
//! Cost: one buffer per connection holding exactly the bytes read: each
//! read goes into the worker thread's [`READ_CHUNK`] scratch buffer and
//! what came is appended (one allocation of the hello's size, typically
//! 0.3–2 KB, in the common one-read case; a copy of those bytes is far
//! cheaper than the zeroed 4 KiB buffer this replaced, whose freed holes
//! stayed resident between long-lived connections' allocations). It is
//! dropped once replayed. The reassembler walks only the bytes each read
//! added, so the whole inspection costs time linear in the bytes received
//! however the client cuts them (one-byte records, one per segment, used to
//! make every read re-parse all that was buffered: quadratic). Its own
//! state is a few words, plus a buffer of the message only when the hello
//! spans records; it lives in the connection's boxed setup future and is
//! freed with it.
//!
//! Once parsing is linear, what a trickling client (one-byte records, one
//! per segment) still costs is a wake-up and a read per segment. So past
//! `UNPACED_READS` reads that left the hello incomplete, each further
//! read waits `TRICKLE_PAUSE` first, and SO_RCVLOWAT is set to the bytes
//! the hello still needs at least ([`client_hello::Reassembler::needs`],
//! never more than the room left under the limit, so an oversized hello is
//! still read up to the limit and refused): the kernel then wakes the relay
//! only when that much has come. It is set back to 1 before the hello is
//! handed on, so relaying is never held back. The price: such a client's
//! malformed bytes may be noticed only at the hello deadline
//! (`hello_timeout` rather than `malformed`). Figures in benches/README.md.
//!
//! Not here: deciding where the name may go (see `route`).

use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::time::{Instant, sleep_until, timeout_at};

use crate::close_reason::CloseReason;
use crate::pump::ready;
use crate::sockopt;
use crate::wire::client_hello::{self, ClientHello, Inspect};
use crate::wire::fingerprint::{Fingerprints, Transport};

/// Bytes read at most per read; `max_client_hello_bytes` is at most this
/// by default, and a larger limit just takes more reads.
pub const READ_CHUNK: usize = 16 * 1024;

/// Reads that may leave the hello incomplete before the next ones are
/// paced. A real client's hello takes one to a few segments (a 16 KiB hello
/// at a 536-byte MSS: 31), so only a trickling client reaches this.
pub(crate) const UNPACED_READS: u32 = 32;

/// The pause before each read past [`UNPACED_READS`]: whatever the client
/// sent meanwhile is then taken in one read, so a client cutting its hello
/// into one-byte records, one per segment, costs at most one read per
/// pause instead of one per segment (a read and its wake-up cost far more
/// than the bytes they carry). SO_RCVLOWAT spares the wake-ups too.
pub(crate) const TRICKLE_PAUSE: Duration = Duration::from_millis(2);

thread_local! {
    /// Per worker thread; borrowed only inside synchronous sections.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0; READ_CHUNK]);
}

/// A complete ClientHello and every byte that came with it.
#[derive(Debug)]
pub struct Hello {
    pub(crate) info: ClientHello,
    /// All bytes read from the client so far, to be replayed first.
    pub bytes: Vec<u8>,
    /// Its JA4 and JA3, when `read_hello` was asked for them.
    pub fingerprints: Option<Arc<Fingerprints>>,
}

impl Hello {
    /// Its JA4, when its fingerprints were computed.
    pub fn ja4(&self) -> Option<&str> {
        self.fingerprints.as_deref().map(Fingerprints::ja4)
    }

    /// The hello `reader` answered from `bytes`, with its fingerprints when
    /// `fingerprints` asks: computed now, while the reassembled message
    /// (if the hello spanned records) is still held.
    fn read(
        info: ClientHello,
        bytes: Vec<u8>,
        reader: &client_hello::Reassembler,
        fingerprints: bool,
    ) -> Hello {
        let fingerprints = if fingerprints {
            reader.hello_message(&bytes).map(|(message, layout)| {
                Arc::new(Fingerprints::compute(message, &layout, Transport::Tcp))
            })
        } else {
            None
        };
        Hello {
            info,
            bytes,
            fingerprints,
        }
    }
}

/// Why no usable ClientHello was read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HelloError {
    #[error("closed without sending a byte")]
    Silent,
    #[error("closed before the ClientHello was complete")]
    Closed,
    #[error("no complete ClientHello before the deadline")]
    Timeout,
    #[error(transparent)]
    Invalid(Inspect),
}

impl From<HelloError> for CloseReason {
    fn from(e: HelloError) -> Self {
        match e {
            HelloError::Silent => CloseReason::Silent,
            HelloError::Closed => CloseReason::ClientClosed,
            HelloError::Timeout => CloseReason::HelloTimeout,
            HelloError::Invalid(Inspect::NotTls) => CloseReason::NotTls,
            HelloError::Invalid(Inspect::TooLarge) => CloseReason::TooLarge,
            HelloError::Invalid(Inspect::Malformed | Inspect::Incomplete) => CloseReason::Malformed,
        }
    }
}

/// Reads from `client` until a ClientHello is complete or a bound is hit,
/// starting from bytes an earlier stage already read (the preface sniffer;
/// empty without one): they are parsed first and kept for the replay.
pub(crate) async fn read_hello(
    client: &mut TcpStream,
    already: Vec<u8>,
    limit: usize,
    deadline: Instant,
    fingerprints: bool,
) -> Result<Hello, HelloError> {
    // `bytes` holds exactly what was read: each read goes into the worker
    // thread's scratch buffer and only the bytes that came are appended.
    let mut bytes = already;
    let mut reader = client_hello::Reassembler::new(limit);
    if !bytes.is_empty() {
        match reader.feed(&bytes) {
            Ok(info) => return Ok(Hello::read(info, bytes, &reader, fingerprints)),
            Err(Inspect::Incomplete) => {}
            Err(verdict) => return Err(HelloError::Invalid(verdict)),
        }
    }
    let mut reads = 0u32;
    // SO_RCVLOWAT as last set: 1 (the default) until the client trickles.
    let mut lowat = 1;
    // A client sends its hello right after the handshake, so by the time
    // this task first runs it has usually arrived: read it now instead of
    // waiting a turn of the event loop for the readiness (as HAProxy's
    // speculative reads do). Nothing there yet: the loop waits as usual.
    if bytes.is_empty() {
        let first = SCRATCH.with_borrow_mut(|scratch| {
            let take = limit.min(scratch.len());
            let n = sockopt::recv_now(client, &mut scratch[..take])?;
            bytes.extend_from_slice(&scratch[..n]);
            Ok::<usize, io::Error>(n)
        });
        match first {
            Ok(0) => return Err(HelloError::Silent),
            Ok(_) => match reader.feed(&bytes) {
                Ok(info) => return Ok(Hello::read(info, bytes, &reader, fingerprints)),
                Err(Inspect::Incomplete) => reads += 1,
                Err(verdict) => return Err(HelloError::Invalid(verdict)),
            },
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return Err(HelloError::Silent),
        }
    }
    loop {
        if reads >= UNPACED_READS {
            // Let the kernel hold back wake-ups until the hello could be
            // complete, but never past the limit's room: a hello that
            // cannot fit must still be read up to it and refused.
            let wanted = reader.needs().min(limit).saturating_sub(bytes.len()).max(1);
            if wanted != lowat && sockopt::set_recv_lowat(client, wanted).is_ok() {
                lowat = wanted;
            }
            // Never past the deadline: the readiness wait below then
            // answers `Timeout` as it would have.
            sleep_until((Instant::now() + TRICKLE_PAUSE).min(deadline)).await;
        }
        let ready = timeout_at(deadline, ready::readable(client)).await;
        match ready {
            Err(_elapsed) => return Err(HelloError::Timeout),
            Ok(Err(_)) if bytes.is_empty() => return Err(HelloError::Silent),
            Ok(Err(e)) => return Err(closed_or(e)),
            Ok(Ok(())) => {}
        }
        // Never more than `limit` in all: `feed` has already answered
        // `TooLarge` for an incomplete hello of `limit` bytes.
        let room = limit.saturating_sub(bytes.len()).max(1);
        // A read shorter than asked for drained the socket: it is reported
        // to `try_io` as WouldBlock, which clears the readiness seen before
        // the read, so neither this loop nor the relay after it pays a read
        // that would only return EAGAIN (see `pump::copy::copy_once`).
        let mut drained = None;
        let read = client.try_io(Interest::READABLE, || {
            SCRATCH.with_borrow_mut(|scratch| {
                let take = room.min(scratch.len());
                let n = client.try_read(&mut scratch[..take])?;
                bytes.extend_from_slice(&scratch[..n]);
                if n > 0 && n < take {
                    drained = Some(n);
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                Ok(n)
            })
        });
        let read = drained.map_or(read, Ok);
        match read {
            Ok(0) if bytes.is_empty() => return Err(HelloError::Silent),
            Ok(0) => return Err(HelloError::Closed),
            Ok(_) => {}
            // Readiness was stale; `try_read` has cleared it.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(_) if bytes.is_empty() => return Err(HelloError::Silent),
            Err(e) => return Err(closed_or(e)),
        }
        match reader.feed(&bytes) {
            Ok(info) => {
                // The relay after this must see every byte at once.
                if lowat != 1 {
                    sockopt::set_recv_lowat(client, 1).map_err(closed_or)?;
                }
                return Ok(Hello::read(info, bytes, &reader, fingerprints));
            }
            Err(Inspect::Incomplete) => reads += 1,
            Err(verdict) => return Err(HelloError::Invalid(verdict)),
        }
    }
}

fn closed_or(_error: io::Error) -> HelloError {
    // A reset mid-hello is the client going away; the kind adds nothing an
    // operator can act on.
    HelloError::Closed
}
