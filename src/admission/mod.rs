//! Admission: whether a freshly accepted connection may go on, decided
//! before a single byte is read from it.
//!
//! Checks run cheapest first, each on the connection's [`SourceKey`] (the
//! source address cut to `source_prefix_v4` / `source_prefix_v6` bits, with
//! IPv4-mapped IPv6 counted as IPv4):
//! 1. the listener's `deny` list, then its `allow` list (deny wins) →
//!    [`Refusal::Denied`];
//! 2. `connections_per_source`, open connections per key → [`Refusal::Concurrent`];
//! 3. `connection_rate_per_source` / `connection_burst_per_source`, a keyed
//!    GCRA → [`Refusal::Rate`]. A connection refused at step 2 spends no
//!    rate token, so a client parked at its concurrency cap does not also
//!    burn its rate; with `rate_counts_refused` every refused attempt (at
//!    step 2 or 3) spends one, as HAProxy's `conn_rate` counts them (see
//!    `KeyedGcra` for the bound that keeps this from locking a source out
//!    for long). Or, instead of the rate, `attempts_per_source` within
//!    `attempts_period` (`attempts`): every attempt past the lists is
//!    counted first, admitted or refused (at step 2 or 3), over a sliding
//!    period with HAProxy's `conn_rate` arithmetic, and the attempt that
//!    makes the count exceed the limit is refused as [`Refusal::Rate`].
//!
//! `limit_key` chooses what steps 2 and 3 count by: the source key (the
//! default), the hello's JA4, or both. With the JA4 those steps cannot run
//! before a byte is read: the door at accept (or after the preface) then
//! applies the lists alone, and `Admission::after_hello` counts right
//! after inspection, before routing, on the key the hello completes; a
//! refusal there closes the connection as at accept, with nothing
//! forwarded and no alert. A JA4 is keyed by 48 bits of a SipHash of it
//! ([`Ja4Key`]), 6 bytes beside the address: a `SourceKey` grows from 17
//! to 23 bytes, which every connection's held slot absorbs in padding (the
//! 36 bytes of a JA4 inline, or 8 of a 64-bit hash, took the connection
//! task past its 896-byte allocation step, see [`crate::tcp::connection`]).
//!
//! With `dry_run` the counting limits (2 and 3) still count and report what
//! they would refuse, but refuse nothing; `deny`/`allow` are policy, not
//! sizing, and always apply. Unset limits cost nothing: no table exists.
//!
//! This is the one admission gate, with two doors. [`Admission::at_accept`]
//! decides a direct client on its measured [`PeerAddr`](crate::addr::PeerAddr) before a byte is
//! read, and defers a trusted peer relay (the budget rule: a peer's own
//! address is exempt, since one peer carries many clients).
//! [`Admission::after_preface`] decides the client such a peer claims, on
//! its [`ClaimedAddr`](crate::addr::ClaimedAddr), as if it had connected directly, and counts nothing
//! for a connection that claims nobody (LOCAL, UNKNOWN, a v2 fallback, no
//! header in `optional` mode). Either way the key is a typed value built
//! from a [`Source`].
//!
//! Memory (both tables are bounded and swept by [`Admission::sweep`], which
//! the server runs every `SWEEP_INTERVAL`):
//! - the source table (`SourceTable`, present when either counting limit
//!   is set) holds one entry (17-byte key + counters, ~100 bytes with
//!   hash-table overhead) per key with an open connection (the count is
//!   released by the RAII [`SourceGuard`]), plus the sources seen recently:
//!   one rate window (`burst / rate`; none without a rate) after their
//!   last attempt, or [`REFUSED_SOURCE_MEMORY`] if they were ever refused,
//!   and never more than [`MAX_REMEMBERED_SOURCES`] of those; the sweep
//!   forgets them and gives back spare capacity after a burst. The entry
//!   keeps what the admin listener's `GET /sources` shows of a source
//!   (attempts, refusals by reason, recent rate, last attempt:
//!   `Admission::sources`, `Admission::clear_source`), so that listing
//!   is the limiter's own state;
//! - the attempt table (`attempts_per_source`) holds one entry (~64 bytes)
//!   per key seen within the last two `attempts_period`s, dropped by the
//!   sweep once its count reads 0 (see `attempts`);
//! - the rate table holds one entry (~50 bytes in governor's sharded
//!   `DashMap` store) per key seen within the last `burst / rate` seconds
//!   plus up to one sweep interval; `retain_recent` drops keys whose bucket
//!   is full again, and `shrink_to_fit` returns the space.
//!
//! Hot path: one hash of a 17-byte key per table, one short mutex hold for
//! the source table and one sharded lock + CAS for the rate table; no
//! allocation except when a new key enters a table. A refusal takes the
//! source table's lock once more to count it. Measured in
//! `benches/admission.rs`.
//!
//! `spawn_sweeper` runs the sweep for one listener and logs a summary of
//! what was refused since the last one.
//!
//! Per route: a `RouteGate` applies a route's `[route.limits]` (the same
//! steps, on the same kind of [`Admission`]) and its `max_connections` once
//! the ClientHello has named the route, refusing with a `RouteRefusal`.
//!
//! Across reloads: `Admission::next` builds the state for changed limits
//! on the tables of the previous one where they mean the same thing (same
//! source prefixes; for the rate table, the same rate; for the attempt
//! table, the same count and period), so the per-source
//! counts of connections still open carry over and a lowered cap holds at
//! once; `RouteGate::next` does the same for a route, its open count
//! included. The concurrency table therefore keeps no cap of its own.
//!
//! The files, by job: [`key`] (whom it counts), [`gate`] (a listener's
//! [`Admission`] and its doors), [`route`] (a route's gate), [`sources`]
//! (the source table and its `/sources` rows), [`rate`] (the keyed GCRA),
//! [`attempts`] (`attempts_per_source`), [`sweep`] (the sweeper task) and
//! [`pace`] (`[global] max_connection_rate`).
//!
//! Not here: accepting ([`crate::tcp::accept_loop`]), reading the
//! connection, or routing ([`crate::flow::route`];
//! [`crate::flow::decision`] calls the route's gate once the route is
//! known, and [`crate::flow::generation`] keeps the gates by route name).

pub(crate) mod attempts;
#[cfg(test)]
mod attempts_tests;
mod gate;
mod key;
pub(crate) mod pace;
mod rate;
mod route;
mod sources;
mod sweep;

use std::time::Duration;

pub use gate::{Admission, Admitted, AtAccept, Counters, Counts, Refusal, Tracked};
pub use key::{Ja4Key, Source, SourceKey};
pub(crate) use route::{RouteAdmitted, RouteGate, RouteRefusal, route_source};
pub use sources::{
    MAX_REMEMBERED_SOURCES, RATE_WINDOW, REFUSAL_REASONS, REFUSED_SOURCE_MEMORY, SourceGuard,
    SourceRow,
};
pub(crate) use sweep::spawn_sweeper;

/// How often the per-source tables are swept.
pub(crate) const SWEEP_INTERVAL: Duration = Duration::from_secs(10);

/// A listener's admission settings: plain settings, defined with the rest.
pub use crate::config::settings::{LimitKey, Limits, Rate};

#[cfg(test)]
mod tests;
