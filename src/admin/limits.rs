//! The admin listener's bounds: how many sockets it keeps open, how long a
//! connection may stay silent, take over a request or idle between
//! requests, and how large a request head may be. The accept loop and the
//! connections ([`super::server`], [`super::stream`]) enforce them, and a
//! forwarded request ([`super::forward`]) lives within them too.
//!
//! Not here: the bounds of a control request's body
//! ([`super::call::MAX_BODY_BYTES`],
//! [`super::call::MAX_LOCAL_NAMES_BODY_BYTES`]), or what happens at each
//! bound ([`super::server`], [`super::table`]).

use std::time::Duration;

/// Admin sockets open at once. Past it, a new connection closes an older
/// one (see [`super::server`]) rather than waiting: accept never blocks.
/// Memory at the cap: a silent connection is a descriptor, its task (about
/// 1 KiB, hyper's connection state included) and a slot of a few hundred
/// bytes; one that has sent a byte adds hyper's read buffer (at most
/// `MAX_REQUEST_HEAD_BYTES`) and its response, so about 10 MiB for a full
/// table at worst. Cost: picking whom to evict scans the table (at most
/// this many entries, under one lock), only when it is full.
pub const MAX_ADMIN_CONNECTIONS: usize = 1024;
/// The admin socket's kernel queue of connections not yet accepted. The
/// accept loop empties it at once; it fills only while the process is not
/// scheduled, and then a probe's SYN dropped from a short queue (std's
/// 128) costs the probe a one-second retransmit. Cost: kernel memory for
/// pending connections only.
pub(crate) const ADMIN_BACKLOG: u32 = 1024;
/// A connection must send its first byte within this long, or it is closed
/// (`silent`). It holds no HTTP state meanwhile, and is the first evicted.
pub const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(1);
/// From a request's first byte until its response is flushed: a request
/// trickled in (or a response read) more slowly than this is closed
/// (`request_timeout`). Loopback scrapers and probes need milliseconds.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// A keep-alive connection that sends no new request for this long is
/// closed (`idle_timeout`). Scrapers that keep connections open between
/// scrapes (Prometheus, every 15 s by default) simply reconnect.
pub const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest request line plus headers (hyper's `max_buf_size`, and its
/// minimum): the read buffer a connection may hold. Larger heads get 431.
pub(crate) const MAX_REQUEST_HEAD_BYTES: usize = 8 * 1024;
/// Headers per request; more get 431. Parsed into a heap array of this
/// many entries per request.
pub(crate) const MAX_REQUEST_HEADERS: usize = 32;
