//! Every socket option the relay sets, and every socket it creates or
//! adopts, in one place: a file per job.
//!
//! Sockets are created close-on-exec (socket2's default on Linux). Relayed
//! sockets get TCP_NODELAY, since the relay forwards TLS records whose
//! latency matters more than segment count (set on listening sockets, whose
//! accepted sockets inherit it, and on each backend socket).
//!
//! - [`listen`]: listening sockets, TCP and a `protocol = "quic"`
//!   listener's UDP, with the options that must be set before
//!   `bind`/`listen` (SO_REUSEADDR, IPV6_V6ONLY, the backlog).
//! - [`inherit`]: sockets that come from outside (systemd socket
//!   activation, a takeover or binary upgrade from the process being
//!   replaced), checked and prepared before use; the SOCK_SEQPACKET pair
//!   that carries a QUIC listener's datagrams meanwhile (see
//!   [`crate::quic::handover`]); sending descriptors.
//! - [`connect`]: backend sockets, TCP and a QUIC flow's UDP (with UDP
//!   GRO), opened with their connect started, bound first to a `source`
//!   address or the client's ([`LocalBind`]).
//! - [`stream`]: the calls on a relayed TCP stream: TCP_NODELAY,
//!   SO_RCVLOWAT while a client trickles its hello, reads and writes that
//!   do not wait for the event loop, the one flagged write (MSG_MORE before
//!   a FIN), whether a peer's FIN is queued, a half close.
//! - [`keepalive`]: TCP keepalive with TCP_USER_TIMEOUT at the same
//!   horizon, on listening sockets (inherited by accepted ones) and on
//!   backend sockets once a connection has relayed for
//!   [`KEEPALIVE_ARM_DELAY`].
//! - [`errors`]: what a failed call's error means (the peer stopped
//!   answering, this host ran out of something, a `source` has no free
//!   port).
//! - [`process`]: the descriptor limit, raised at start-up (through nix's
//!   safe wrapper), and the monotonic clock sd_notify wants.
//! - [`sys`]: the only `unsafe` in the crate: the few functions that turn
//!   raw descriptor numbers into owned ones (systemd's, a takeover's), the
//!   one setsockopt(2) libc has no name for (IP_LOCAL_PORT_RANGE), and the
//!   call that hands the allocator's free memory back to the system after
//!   a reload (mimalloc's `mi_collect`), each allowed on that function
//!   alone, with its SAFETY argument.
//!
//! This file only declares and re-exports them: callers name
//! `crate::sockopt::X` whichever file defines it. [`sys`] is visible to
//! the crate so that documentation elsewhere can send a reader to it.
//!
//! Not here: anything that reads or writes data beyond one call (the
//! takeover's small message exchange is framed in [`crate::run::takeover`];
//! only the sendmsg/recvmsg calls are here); the options quinn-udp sets on
//! a QUIC listening socket for batched I/O (GRO, IP_PKTINFO, no
//! fragmentation), set inside that crate ([`crate::quic::io`]).

mod connect;
mod errors;
mod inherit;
mod keepalive;
mod listen;
mod process;
mod stream;
pub(crate) mod sys;

pub use connect::probe_source;
pub(crate) use connect::{
    LocalBind, enable_udp_gro, probe_transparent, start_connect, udp_connect,
};
pub(crate) use errors::{
    is_local_connect_failure, is_peer_timeout, is_resource_exhaustion, is_source_exhausted,
};
pub(crate) use inherit::{
    ActivatedSocket, adopt_activated, adopt_listener, adopt_seqpacket, adopt_udp, send_fds,
    seqpacket_pair,
};
pub(crate) use keepalive::KeepaliveSecs;
#[cfg(test)]
pub(crate) use keepalive::keepalive;
pub use keepalive::{KEEPALIVE_ARM_DELAY, Keepalive, set_keepalive};
pub(crate) use listen::{bind_listener_with, bind_udp_with};
pub(crate) use process::monotonic_usec;
pub use process::{NofileLimit, keep_heap_in_base_pages, nofile_limit, raise_nofile_limit};
pub(crate) use stream::{
    fin_queued, recv_now, send_now, set_nodelay, set_recv_lowat, shutdown_write,
    try_write_before_fin,
};
pub(crate) use sys::{
    ActivatedFd, MAX_PASSED_FDS, recv_fds, release_freed_memory, take_activated_fds,
};
