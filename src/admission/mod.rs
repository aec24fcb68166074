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
//!    `table::Gcra` for the bound that keeps this from locking a source out
//!    for long). Or, instead of the rate, `attempts_per_source` within
//!    `attempts_period` ([`attempts`]): every attempt past the lists is
//!    counted first, admitted or refused (at step 2 or 3), over a sliding
//!    period with HAProxy's `conn_rate` arithmetic, and the attempt that
//!    makes the count exceed the limit is refused as [`Refusal::Rate`].
//!
//! `limit_key` chooses what steps 2 and 3 count by: the source key (the
//! default), the hello's JA4, or both. With the JA4 the key cannot be
//! known before a byte is read: the door at accept (or after the preface)
//! applies the lists and counts the source alone, held to
//! `ja4_source_multiple` times the limits (a client chooses its JA4, so a
//! new one per connection must not buy it a new share), and
//! `Admission::after_hello` counts right after inspection, before routing,
//! on the key the hello completes; the connection holds both counts
//! ([`Admitted::joined`]). A refusal there closes the connection as at
//! accept, with nothing forwarded and no alert. A JA4 is keyed by 48 bits
//! of a SipHash of it ([`Ja4Key`]), 6 bytes beside the address: a
//! `SourceKey` grows from 17 to 23 bytes, which every connection's held
//! slot absorbs in padding (the 36 bytes of a JA4 inline, or 8 of a 64-bit
//! hash, took the connection task past its 896-byte allocation step, see
//! [`crate::tcp::connection`]).
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
//! Memory: one source table per listener (and per route with limits),
//! present when a counting limit is set, holding every counter of a source
//! in one entry (about 160 bytes): its open connections (released by the
//! RAII [`SourceGuard`]), its rate and attempt state, and what the admin
//! listener's `GET /sources` shows (`Admission::sources`,
//! `Admission::clear_source`), so that listing is the limiter's own state.
//! It is bounded by `max_sources` sources without an open connection
//! (least recently used evicted first) plus those with one, and swept
//! incrementally by [`Admission::sweep`], which the server runs every
//! `SWEEP_INTERVAL`: see [`table`] for the bound, the policy at it and
//! the cost of a sweep.
//!
//! Hot path: one keyed SipHash of a key of at most 23 bytes to pick a
//! shard, one short mutex hold in which every limit is decided and counted,
//! no allocation except when a new key enters the table. Measured in
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
//! on the table of the previous one while its keys mean the same thing
//! (same source prefixes), forgetting the rate state when the rate changed
//! and the attempt counters when their count or period did, so the
//! per-source counts of connections still open carry over and a lowered
//! cap holds at once; `RouteGate::next` does the same for a route, its
//! open count included. The table therefore keeps no limit of its own,
//! only its bound.
//!
//! The files, by job: [`key`] (whom it counts), [`gate`] (a listener's
//! [`Admission`] and its doors), [`route`] (a route's gate), [`table`]
//! (the bounded source table, the GCRA and the decision on one entry),
//! [`sources`] (a source's entry, its `/sources` row and its guard),
//! [`attempts`] (`attempts_per_source`'s counter), [`sweep`] (the sweeper
//! task) and [`pace`] (`[global] max_connection_rate`).
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
mod route;
mod sources;
mod sweep;
mod table;
#[cfg(test)]
mod table_tests;

use std::time::Duration;

pub use gate::{Admission, Admitted, AtAccept, Counters, Counts, Tracked};
pub use key::{Ja4Key, Source, SourceKey};
pub(crate) use route::{RouteAdmitted, RouteGate, RouteRefusal, route_source};
pub use sources::{RATE_WINDOW, REFUSAL_REASONS, REFUSED_SOURCE_MEMORY, Refusal, SourceRow};
pub(crate) use sweep::spawn_sweeper;
pub use table::SourceGuard;

/// How often the per-source tables are swept.
pub(crate) const SWEEP_INTERVAL: Duration = Duration::from_secs(10);

/// A listener's admission settings: plain settings, defined with the rest.
pub use crate::config::settings::{LimitKey, Limits, Rate};

#[cfg(test)]
mod tests;
