//! Reading the ClientHello off the socket: the I/O side of `client_hello`.
//!
//! Reads into one buffer, re-parses after every read, and stops at the first
//! verdict. Two bounds hold throughout: the buffer never grows past
//! `max_client_hello_bytes`, and the whole inspection ends at the deadline
//! (accept time + `client_hello_timeout`), however the client trickles bytes.
//! Every byte read is kept in [`Hello::bytes`] to be replayed to the backend,
//! including any bytes the client sent after the hello.
//!
//! Cost: one buffer per connection, starting at [`INITIAL_BUFFER`] bytes of
//! capacity and doubling up to the cap; reads go into its spare capacity, so
//! it is never zeroed (a malloc of 4 KiB touches no page the read does not
//! fill). It is dropped once replayed. Re-parsing is linear in the bytes
//! held, and a hello takes few reads, so it stays cheap.
//!
//! Not here: deciding where the name may go (see `route`).

use std::io;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout_at};

use crate::client_hello::{self, ClientHello, Inspect};
use crate::close::CloseReason;

/// Most hellos fit, post-quantum ones (about 1.2–1.9 KB) included.
pub const INITIAL_BUFFER: usize = 4096;

/// A complete ClientHello and every byte that came with it.
#[derive(Debug)]
pub struct Hello {
    pub info: ClientHello,
    /// All bytes read from the client so far, to be replayed first.
    pub bytes: Vec<u8>,
}

/// Why no usable ClientHello was read.
#[derive(Debug, thiserror::Error)]
pub enum HelloError {
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

/// Reads from `client` until a ClientHello is complete or a bound is hit.
pub async fn read_hello(
    client: &mut TcpStream,
    limit: usize,
    deadline: Instant,
) -> Result<Hello, HelloError> {
    read_hello_after(client, Vec::new(), limit, deadline).await
}

/// Like [`read_hello`], starting from bytes an earlier stage already read
/// (the `preface` sniffer): they are parsed first and kept for the replay.
pub async fn read_hello_after(
    client: &mut TcpStream,
    already: Vec<u8>,
    limit: usize,
    deadline: Instant,
) -> Result<Hello, HelloError> {
    // `bytes.len()` is what was read; reads land in the spare capacity,
    // which never grows past `limit` (nor past what was already read).
    let mut bytes = already;
    if !bytes.is_empty() {
        match client_hello::parse(&bytes, limit) {
            Ok(info) => return Ok(Hello { info, bytes }),
            Err(Inspect::Incomplete) => {}
            Err(verdict) => return Err(HelloError::Invalid(verdict)),
        }
    }
    bytes.reserve_exact(INITIAL_BUFFER.min(limit).saturating_sub(bytes.len()));
    loop {
        if bytes.len() == bytes.capacity() {
            let grown = (bytes.capacity() * 2).min(limit).max(bytes.len() + 1);
            bytes.reserve_exact(grown - bytes.len());
        }
        // `read_buf` fills at most the spare capacity (it only reserves when
        // there is none, which the line above rules out).
        let read = timeout_at(deadline, client.read_buf(&mut bytes)).await;
        let n = match read {
            Err(_elapsed) => return Err(HelloError::Timeout),
            Ok(Ok(0)) | Ok(Err(_)) if bytes.is_empty() => return Err(HelloError::Silent),
            Ok(Ok(0)) => return Err(HelloError::Closed),
            Ok(Err(e)) => return Err(closed_or(e)),
            Ok(Ok(n)) => n,
        };
        debug_assert!(n > 0);
        match client_hello::parse(&bytes, limit) {
            Ok(info) => return Ok(Hello { info, bytes }),
            Err(Inspect::Incomplete) => continue,
            Err(verdict) => return Err(HelloError::Invalid(verdict)),
        }
    }
}

fn closed_or(_error: io::Error) -> HelloError {
    // A reset mid-hello is the client going away; the kind adds nothing an
    // operator can act on.
    HelloError::Closed
}
