//! Prometheus metrics: one process-wide registry and cheap recording calls.
//!
//! The registry is process-wide (like a log subscriber): a process serves one
//! set of listeners, and a global avoids threading a handle through every
//! stage signature. Recording happens in few places:
//! [`ListenerMetrics::accepted`] from the accept loop,
//! [`ListenerMetrics::closed`] once per connection from
//! [`crate::flow::access::ConnRecord::close`],
//! and [`BackendSeries::connect_attempt`] from [`crate::tcp::dial`].
//! Hooks for stages built elsewhere (reload, drain, DNS/cluster lookups,
//! the admin listener, log targets) are the documented methods of
//! [`hooks`]; backend address health is in [`backends`].
//!
//! Labels are bounded by the configuration, never by the traffic: listener,
//! route and backend names, close reasons and fixed outcome words. Every
//! per-listener family (accepted, active, closed, bytes, hello outcomes,
//! limit refusals) also carries `protocol` (`tcp` or `quic`, the listener's
//! kind): TCP connections and QUIC flows are counted in the same families,
//! told apart by that label. Never the
//! SNI, never a client address. The one label that names a backend
//! *address* (`snirelay_backend_address_up`) is bounded per backend: at
//! most [`backends::MAX_ADDRESS_SERIES_PER_BACKEND`] addresses, a new one
//! past that replacing the series of the address reported least recently
//! (with DNS or cluster churn, one that has left the set). `[admin]
//! address_labels = false`
//! ([`Metrics::set_address_labels`](registry::Metrics::set_address_labels))
//! drops the label altogether; `snirelay_backend_addresses{backend,state}`
//! counts up and down addresses either way.
//!
//! Every series a configuration implies exists, at zero, from the start
//! (and from the reload that adds its listener, route or backend):
//! [`Metrics::listener_series`](registry::Metrics::listener_series) creates
//! a listener's (each close reason and hello outcome its kind can produce,
//! each configured limit's refusals, bytes per route and backend), called by
//! [`crate::flow::generation::Generation::create_series`];
//! [`Metrics::backend_series`](registry::Metrics::backend_series) a
//! backend's. Series of removed ones stay, frozen, until restart: bounded
//! by the names configured, never by traffic.
//!
//! Cost: every metric family is created at start-up. The per-connection
//! events go through handles resolved ahead of the connection, so they cost
//! atomic adds and no allocation: a listener's [`ListenerMetrics`] is made
//! once when its accept loop starts (its series never change with a reload,
//! since they are keyed on the listener's name), and holds the `accepted`,
//! `active` and `ech` counters directly; its close-reason, hello-outcome and
//! limit series are resolved on their first use (a `OnceLock` per fixed
//! word); its
//! (route, backend) byte counters sit in a small map under a read lock,
//! looked up by `&str`. A backend's connect series ([`BackendSeries`]) are
//! resolved once per backend runtime (see [`crate::backend`]), so a connect
//! attempt is atomic adds with no lookup. Nothing is recorded per byte: byte
//! counts are added once, at close. Process gauges (open fds, RSS) are read
//! from /proc/self only when /metrics is scraped.
//!
//! The operator's address states (`snirelay_backend_address_state`) are
//! exported only for addresses an operator has set, bounded the same way
//! and dropped with `address_labels = false`; control requests are counted
//! by kind and outcome (`snirelay_admin_control_actions_total`), pushes of
//! the local name set by outcome, with a gauge of the names in force
//! (`snirelay_local_name_pushes_total`, `snirelay_local_names`), and
//! requests the admin listener forwarded by outcome
//! (`snirelay_admin_forwarded_total`), and log lines written to or dropped
//! before a syslog or journald target (`snirelay_log_lines_sent_total`,
//! `snirelay_log_lines_dropped_total`, counters the log writer holds).
//!
//! The files, by job:
//!
//! - [`families`]: the declared list of every exported family (name, type,
//!   labels, help), public for the tests that check docs and dashboards.
//! - [`labels`]: the label set of every family, each value bounded.
//! - [`registry`]: [`Metrics`](registry::Metrics), every family, registered
//!   once at start-up, and the process-wide [`metrics()`].
//! - [`listener`]: a listener's handles ([`ListenerMetrics`]) and what a
//!   closed connection contributes ([`Closed`]).
//! - [`backends`]: a backend's connect series ([`BackendSeries`]) and its
//!   addresses' health and operator state, capped per backend.
//! - [`hooks`]: the recording calls of stages built elsewhere.
//! - [`exposition`]: the text `/metrics` serves and the process gauges.
//!
//! This file only declares and re-exports them: callers name
//! `crate::metrics::X` whichever file defines it, and reach the
//! [`Metrics`](registry::Metrics) methods through [`metrics()`] (no code
//! outside names the type; [`registry`] is visible to the crate so that
//! documentation can, as [`crate::metrics::registry::Metrics`]).
//!
//! Not here: the HTTP side (see [`crate::admin`]), though its own
//! connection counts are recorded here
//! ([`Metrics::admin_opened`](registry::Metrics::admin_opened),
//! [`Metrics::admin_closed`](registry::Metrics::admin_closed), in
//! [`hooks`]).

mod backends;
mod exposition;
pub mod families;
mod hooks;
mod labels;
mod listener;
pub(crate) mod registry;

pub(crate) use backends::BackendSeries;
pub(crate) use listener::Closed;
pub(crate) use listener::ListenerMetrics;
pub(crate) use registry::metrics;
