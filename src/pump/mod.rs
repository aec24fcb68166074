//! The byte pump: everything that moves a connection's bytes once it is
//! routed and connected, in modules whose dependencies run one way:
//!
//! - [`ready`]: what the others share: the direction ([`ready::Side`]), how
//!   a burst ends, the [`ready::Activity`] record, and the readiness helpers
//!   (also used by `inspect`). It imports nothing from the crate.
//! - [`copy`]: one scratch read written straight on, the start of every
//!   burst, and the userspace fallback for the rest of a bulk burst.
//! - [`splice`]: splice(2) through pipes from a bounded, process-wide pool.
//! - [`throttle`]: the token buckets of the bandwidth limits, which a
//!   limited connection's `copy` and `splice` ask before each read.
//! - [`failure`]: what failed on a relayed socket (which peer, in which
//!   operation, after its FIN or not, or timed out) and its close reason.
//! - [`half_close`]: how far each direction is, and whether a reset cuts
//!   data or is excused.
//! - [`direction`]: one direction's slot and bursts: a scratch read, then
//!   `splice` or `copy` for bulk data, or one paced future when limited.
//! - [`relay`]: the hand-written future a connection's task holds: both
//!   directions, half-close passed on, the idle and half-close timeouts,
//!   the lifetime, drain and shutdown. It drives the directions, which
//!   drive `copy` and `splice`; none of them calls back into it.
//!
//! `relay → direction → {copy, splice} → {throttle, ready}`, with `relay`
//! and `direction` both reading `failure` and `half_close` (and `relay`
//! the pipe pool in `splice`); no module here reads the
//! configuration (the pipe pool's size and bound are passed to
//! [`splice::configure`]; the route table builds each route's
//! [`relay::RelayTimeouts`] from its settings, and its
//! [`throttle::RouteThrottle`] from its plain [`crate::config::Bandwidth`]).
//! No module here uses `unsafe`: splice(2), pipe2(2) and fcntl(2) go
//! through nix's safe wrappers.
//!
//! Not here: reading the ClientHello (see `inspect`) or anything a PROXY
//! header says (see `proxy`); the caller writes the replayed hello first.

pub(crate) mod copy;
pub(crate) mod direction;
pub(crate) mod failure;
pub(crate) mod half_close;
pub(crate) mod ready;
pub(crate) mod relay;
pub(crate) mod splice;
pub(crate) mod throttle;
