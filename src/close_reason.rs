//! Why a connection ended: [`CloseReason`] and its one table.
//!
//! Each reason has one row in [the table](CloseReason::row): its name (the
//! `close` log field and the `reason` metric label, a contract with log
//! queries and dashboards: add new ones, never rename), whose [`Fault`] it
//! is and the [`Stage`] it belongs to. The log level follows from the fault
//! ([`Fault::level`]) and the `snirelay_client_hellos_total` outcome from
//! the stage ([`CloseReason::hello_outcome`]); no match on reasons has a
//! wildcard arm, so a new reason does not compile until its row is written.
//! docs/operations.md's list of close reasons is checked against [`CloseReason::ALL`]
//! by `tests/it/close_reasons.rs`.
//!
//! A leaf: it imports nothing from the crate, so every stage can name the
//! reason it ends a connection with while the close stage ([`crate::flow::access`]), which
//! needs what those stages produce, depends on them and not the reverse.
//! The `const fn` lookups cost a match each.
//!
//! Not here: the connection's record, log line and metrics
//! ([`crate::flow::access`]).

use std::fmt;

use tracing::Level;

/// Whose fault a close is; it sets the level of the connection's log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Normal life: both sides finished, the connection idled out, or the
    /// relay stopped or drained it.
    Normal,
    /// The connecting side: a client, or a peer relay in front of us, broke
    /// a rule or went away.
    Client,
    /// Refused at admission by a per-source limit or the deny list.
    Admission,
    /// The relay, its backends or its fleet.
    Ours,
    /// Nobody's: the client sent nothing (a health check, a port scan).
    Nobody,
}

impl Fault {
    /// The level of the log line; `None` writes none (the close is still
    /// counted). Admission refusals are at debug, one line each, since a
    /// flood makes many; the server logs a per-interval summary of them at
    /// warn.
    pub const fn level(self) -> Option<Level> {
        match self {
            Fault::Normal | Fault::Client => Some(Level::INFO),
            Fault::Admission => Some(Level::DEBUG),
            Fault::Ours => Some(Level::WARN),
            Fault::Nobody => None,
        }
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            Fault::Normal => "normal",
            Fault::Client => "client",
            Fault::Admission => "admission",
            Fault::Ours => "ours",
            Fault::Nobody => "nobody",
        }
    }
}

/// The stage of a connection's life (docs/design.md) a close reason belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Refused by the per-source limits before a byte is read.
    Admit,
    /// The PROXY protocol header from a peer relay.
    Preface,
    /// Reading the ClientHello (the preface shares its deadline), which
    /// ended with this outcome.
    Inspect(HelloOutcome),
    /// Matching the SNI against the routes.
    Route,
    /// Finding and connecting to a backend address.
    Connect,
    /// Relaying (the hello's replay included) until the end.
    Relay,
    /// Whichever stage the connection was in: the relay is stopping.
    Any,
}

impl Stage {
    pub const fn as_str(self) -> &'static str {
        match self {
            Stage::Admit => "admit",
            Stage::Preface => "preface",
            Stage::Inspect(_) => "inspect",
            Stage::Route => "route",
            Stage::Connect => "connect",
            Stage::Relay => "relay",
            Stage::Any => "any",
        }
    }
}

/// The outcome of a connection's ClientHello: the `outcome` label of
/// `snirelay_client_hellos_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HelloOutcome {
    /// A complete hello with an SNI (valid or not).
    Sni,
    /// A complete hello without an SNI.
    NoSni,
    /// Not a byte before the client closed.
    Empty,
    Timeout,
    NotTls,
    Malformed,
    TooLarge,
    /// Refused at the PROXY protocol preface, before any hello.
    PrefaceRefused,
    /// The client went away, the relay shut down, or admission refused the
    /// connection before a complete hello.
    Incomplete,
    // QUIC listeners (issue 18).
    /// A QUIC flow whose first datagram is not a QUIC long header.
    NotQuic,
    /// A QUIC flow of a version the relay cannot read.
    UnknownVersion,
}

impl HelloOutcome {
    /// Every outcome, in declaration order (`outcome as usize` indexes it).
    pub const ALL: [HelloOutcome; 11] = [
        HelloOutcome::Sni,
        HelloOutcome::NoSni,
        HelloOutcome::Empty,
        HelloOutcome::Timeout,
        HelloOutcome::NotTls,
        HelloOutcome::Malformed,
        HelloOutcome::TooLarge,
        HelloOutcome::PrefaceRefused,
        HelloOutcome::Incomplete,
        HelloOutcome::NotQuic,
        HelloOutcome::UnknownVersion,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            HelloOutcome::Sni => "sni",
            HelloOutcome::NoSni => "no_sni",
            HelloOutcome::Empty => "empty",
            HelloOutcome::Timeout => "timeout",
            HelloOutcome::NotTls => "not_tls",
            HelloOutcome::Malformed => "malformed",
            HelloOutcome::TooLarge => "too_large",
            HelloOutcome::PrefaceRefused => "preface_refused",
            HelloOutcome::Incomplete => "incomplete",
            HelloOutcome::NotQuic => "not_quic",
            HelloOutcome::UnknownVersion => "unknown_version",
        }
    }
}

// `ALL` is in declaration order, so an outcome is its own index.
const _: () = {
    let mut i = 0;
    while i < HelloOutcome::ALL.len() {
        assert!(HelloOutcome::ALL[i] as usize == i);
        i += 1;
    }
};

/// A close reason's row in the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    pub name: &'static str,
    pub fault: Fault,
    pub stage: Stage,
}

/// Declares [`CloseReason`], [`CloseReason::ALL`] and the table
/// ([`CloseReason::row`]) from one list, so that a reason cannot exist
/// without its row nor be missing from `ALL`.
macro_rules! close_reasons {
    ($(
        $(#[doc = $doc:literal])*
        $reason:ident => $name:literal, $fault:expr, $stage:expr;
    )*) => {
        /// Why a connection ended; see the module header.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum CloseReason {
            $( $(#[doc = $doc])* $reason, )*
        }

        impl CloseReason {
            /// Every reason, in declaration order.
            pub const ALL: &'static [CloseReason] = &[$(CloseReason::$reason),*];

            /// The reason's row: its name, whose fault and which stage.
            pub const fn row(self) -> Row {
                match self {
                    $( CloseReason::$reason => Row {
                        name: $name,
                        fault: $fault,
                        stage: $stage,
                    }, )*
                }
            }
        }
    };
}

close_reasons! {
    /// Both directions ended normally (FIN from each side), or with a reset
    /// that cut nothing (after the resetting side's FIN, or after the other
    /// side had finished; see [`crate::pump::half_close`]).
    Done => "done", Fault::Normal, Stage::Relay;
    /// The client closed before sending a byte: a health check or port scan.
    /// Such connections are counted but never logged.
    Silent => "silent", Fault::Nobody, Stage::Inspect(HelloOutcome::Empty);
    /// The client closed, or reset, before its ClientHello was complete.
    ClientClosed => "client_closed", Fault::Client, Stage::Inspect(HelloOutcome::Incomplete);
    /// No complete ClientHello within `client_hello_timeout` of accept.
    HelloTimeout => "hello_timeout", Fault::Client, Stage::Inspect(HelloOutcome::Timeout);
    /// The first bytes are not a TLS handshake record.
    NotTls => "not_tls", Fault::Client, Stage::Inspect(HelloOutcome::NotTls);
    /// A TLS handshake record, but not a well-formed ClientHello.
    Malformed => "malformed", Fault::Client, Stage::Inspect(HelloOutcome::Malformed);
    /// The ClientHello needs more than `max_client_hello_bytes`.
    TooLarge => "too_large", Fault::Client, Stage::Inspect(HelloOutcome::TooLarge);
    /// No SNI and the listener's `no_sni` policy is `reject`.
    NoSni => "no_sni", Fault::Client, Stage::Route;
    /// The SNI matches no route on this listener (or is not a host name).
    Unmatched => "unmatched", Fault::Client, Stage::Route;
    /// The hello offers no TLS version as new as the listener's
    /// `min_tls_version` (a `protocol_version` alert was sent).
    TlsVersion => "tls_version", Fault::Client, Stage::Route;
    /// The hello carries ECH and its route's `ech` is `reject` (a
    /// `handshake_failure` alert was sent).
    EchRejected => "ech_rejected", Fault::Client, Stage::Route;
    /// The hello's JA4 fingerprint is refused by its listener's or route's
    /// `match` rules (a `handshake_failure` alert was sent).
    Ja4Refused => "ja4_refused", Fault::Client, Stage::Route;
    /// No backend address accepted a connection within its budget.
    ConnectFailed => "connect_failed", Fault::Ours, Stage::Connect;
    /// No byte moved in either direction for `idle_timeout`.
    IdleTimeout => "idle_timeout", Fault::Normal, Stage::Relay;
    /// The client side failed mid-relay (reset, or a write to it failed).
    ClientReset => "client_reset", Fault::Client, Stage::Relay;
    /// The backend side failed mid-relay (or refused the hello's replay).
    BackendReset => "backend_reset", Fault::Ours, Stage::Relay;
    /// The relay closed the connection because it is shutting down.
    Shutdown => "shutdown", Fault::Normal, Stage::Any;
    /// A trusted source on a `require` listener sent no complete PROXY
    /// header before `client_hello_timeout`.
    ProxyMissing => "proxy_missing", Fault::Client, Stage::Preface;
    /// A trusted source sent a PROXY header that breaks the spec.
    ProxyInvalid => "proxy_invalid", Fault::Client, Stage::Preface;
    /// A PROXY signature from a source outside `trusted`.
    ProxyUntrusted => "proxy_untrusted", Fault::Client, Stage::Preface;
    /// The PROXY hop count exceeds `max_hops`: a routing loop between
    /// relays, so in our own fleet.
    HopLimit => "hop_limit", Fault::Ours, Stage::Preface;
    /// A reload changed or removed this connection's route or backend, and
    /// its jittered moment within `drain_timeout` came (while relaying, or
    /// still connecting).
    Drained => "drained", Fault::Normal, Stage::Relay;
    /// Closed at its jittered moment within `drain_timeout` after an
    /// operator put its backend address in maintenance (`maint`).
    AddressMaint => "address_maint", Fault::Normal, Stage::Relay;
    /// Closed by an operator (`DELETE /connections`).
    Admin => "admin", Fault::Normal, Stage::Relay;
    /// Closed at its jittered moment within `[admin] moved_close_window`
    /// after a push to `POST /update-local-snis` no longer listed its name
    /// as local (it was relaying to a cluster backend's `local_backend`).
    Moved => "moved", Fault::Normal, Stage::Relay;
    /// A QUIC flow whose hello was not complete yet, ended to make room for
    /// a new flow: its socket's pending flows (or its source's share of
    /// them) were at their bound. Nothing was forwarded. Or an open QUIC
    /// flow not validated yet, ended for a new flow at the bound of
    /// unvalidated flows (issue 49).
    Evicted => "evicted", Fault::Admission, Stage::Inspect(HelloOutcome::Incomplete);
    /// Refused at admission: the source already has
    /// `connections_per_source` connections open. Nothing was read.
    LimitConcurrent => "limit_concurrent", Fault::Admission, Stage::Admit;
    /// Refused at admission: the source exceeded
    /// `connection_rate_per_source` / `connection_burst_per_source`.
    LimitRate => "limit_rate", Fault::Admission, Stage::Admit;
    /// Refused at admission: the source is on the listener's `deny` list or
    /// off its `allow` list.
    Denied => "denied", Fault::Admission, Stage::Admit;
    /// The backend has no address: its name never resolved, or a cluster
    /// lookup found no node (and this node has no `local_backend`).
    NoAddress => "no_address", Fault::Ours, Stage::Connect;
    /// A cluster answer pointed outside the backend's `allowed_targets`.
    TargetNotAllowed => "target_not_allowed", Fault::Ours, Stage::Connect;
    // Per-route admission: decided after the ClientHello named the route;
    // closed without an alert and nothing forwarded.
    /// Refused by the route: the source is on its `[route.limits]` `deny`
    /// list or off its `allow` list.
    RouteDenied => "route_denied", Fault::Admission, Stage::Route;
    /// Refused by the route: the source already has the route's
    /// `connections_per_source` connections open on it.
    RouteLimitConcurrent => "route_limit_concurrent", Fault::Admission, Stage::Route;
    /// Refused by the route: the source exceeded the route's
    /// `connection_rate_per_source` / `connection_burst_per_source`.
    RouteLimitRate => "route_limit_rate", Fault::Admission, Stage::Route;
    /// Refused by the route: it has `max_connections` connections open.
    RouteFull => "route_full", Fault::Admission, Stage::Route;
    // Relay timeouts (issue 15, point 2): policy, not faults.
    /// One side had sent FIN, and no byte moved for `half_close_timeout`.
    HalfCloseTimeout => "half_close_timeout", Fault::Normal, Stage::Relay;
    /// The connection reached its moment within the last tenth of
    /// `max_connection_lifetime`.
    MaxLifetime => "max_lifetime", Fault::Normal, Stage::Relay;
    // TCP keepalive (issue 15).
    /// The client stopped answering mid-relay: keepalive probes, or
    /// retransmissions of data sent to it, went unanswered (ETIMEDOUT, or
    /// the ICMP unreachable error that came with them). Its network went
    /// away without a FIN or a reset.
    ClientKeepalive => "client_keepalive", Fault::Client, Stage::Relay;
    /// The backend stopped answering mid-relay, as for `client_keepalive`.
    BackendKeepalive => "backend_keepalive", Fault::Ours, Stage::Relay;
    // QUIC listeners (issue 18).
    /// A QUIC listener's flow whose first datagram is not a QUIC long
    /// header (or is a Version Negotiation packet). Nothing was forwarded.
    NotQuic => "not_quic", Fault::Client, Stage::Inspect(HelloOutcome::NotQuic);
    /// A QUIC listener's flow of a QUIC version other than v1 and v2, whose
    /// Initials the relay cannot read. Nothing was forwarded.
    UnknownVersion => "unknown_version", Fault::Client, Stage::Inspect(HelloOutcome::UnknownVersion);
    /// Every address of the backend has its `max_connections` open; no
    /// connect was attempted.
    BackendFull => "backend_full", Fault::Ours, Stage::Connect;
    // QUIC address validation (issue 49).
    /// A QUIC flow whose client never showed it receives at its address
    /// (no datagram to a connection ID its backend chose) within 5 s of
    /// opening: a forged or lost handshake. It held no connection permit.
    Unvalidated => "unvalidated", Fault::Client, Stage::Relay;
    /// A QUIC flow that validated while every `[global] max_connections`
    /// permit was held: closed, as a full process drops a new flow.
    MaxConnections => "max_connections", Fault::Admission, Stage::Relay;
    // Lookup floods (issue 49).
    /// The name has no cached answer to serve, and a lookup for it would
    /// pass its cluster backend's `max_lookups_in_flight` or
    /// `new_names_per_second`: closed at once, without a lookup. Refused
    /// like an admission limit (a flood of random names makes many), so
    /// logged at debug and counted.
    LookupLimited => "lookup_limited", Fault::Admission, Stage::Connect;
}

impl CloseReason {
    /// The reason's name, as log lines (`close`) and metrics show it.
    pub const fn as_str(self) -> &'static str {
        self.row().name
    }

    pub(crate) const fn fault(self) -> Fault {
        self.row().fault
    }

    pub(crate) const fn stage(self) -> Stage {
        self.row().stage
    }

    /// The level of the connection's log line; `None`: no line.
    pub const fn level(self) -> Option<Level> {
        self.fault().level()
    }

    /// The hello's outcome for a connection closed for this reason:
    /// `routed` when a route was chosen, `sni` when the hello carried one.
    /// A routed hello, or one refused by the routes, was complete; before
    /// that, the stage says how far the hello got.
    pub(crate) const fn hello_outcome(self, routed: bool, sni: bool) -> HelloOutcome {
        let complete = if sni {
            HelloOutcome::Sni
        } else {
            HelloOutcome::NoSni
        };
        if routed {
            return complete;
        }
        match self.stage() {
            Stage::Route => complete,
            Stage::Inspect(outcome) => outcome,
            Stage::Preface => HelloOutcome::PrefaceRefused,
            // Refused before a byte was read; counted `incomplete`, as it
            // always was (no label of its own).
            Stage::Admit => HelloOutcome::Incomplete,
            // Unrouted, so the client went away or the relay stopped
            // mid-hello.
            Stage::Connect | Stage::Relay | Stage::Any => HelloOutcome::Incomplete,
        }
    }
}

/// The listener kinds a close reason can end a connection on: a QUIC flow
/// has no FIN, no half-close and no TCP keepalive, and a TCP connection
/// no QUIC version or address validation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// TCP and QUIC listeners.
    Both,
    /// TCP listeners only.
    Tcp,
    /// QUIC listeners only.
    Quic,
}

impl Transport {
    /// Whether a listener of `protocol` (`tcp` or `quic`, the config's
    /// word) can close a connection this way.
    pub fn includes(self, protocol: &str) -> bool {
        match self {
            Transport::Both => true,
            Transport::Tcp => protocol == "tcp",
            Transport::Quic => protocol == "quic",
        }
    }
}

impl CloseReason {
    /// The listener kinds that can close a connection for this reason (the
    /// series a listener shows at zero from its start).
    pub const fn transport(self) -> Transport {
        use CloseReason::*;
        match self {
            Done | Silent | ClientClosed | NotTls | ClientReset | HalfCloseTimeout
            | ClientKeepalive | BackendKeepalive => Transport::Tcp,
            NotQuic | UnknownVersion | Unvalidated | MaxConnections | Evicted => Transport::Quic,
            HelloTimeout | Malformed | TooLarge | NoSni | Unmatched | TlsVersion | EchRejected
            | Ja4Refused | ConnectFailed | IdleTimeout | BackendReset | Shutdown | ProxyMissing
            | ProxyInvalid | ProxyUntrusted | HopLimit | Drained | AddressMaint | Admin | Moved
            | LimitConcurrent | LimitRate | Denied | NoAddress | TargetNotAllowed | RouteDenied
            | RouteLimitConcurrent | RouteLimitRate | RouteFull | MaxLifetime | BackendFull
            | LookupLimited => Transport::Both,
        }
    }
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use crate::close_reason::*;

    #[test]
    fn names_are_unique_and_all_is_in_declaration_order() {
        for (i, reason) in CloseReason::ALL.iter().enumerate() {
            assert_eq!(*reason as usize, i);
            let twins: Vec<_> = CloseReason::ALL
                .iter()
                .filter(|r| r.as_str() == reason.as_str())
                .collect();
            assert_eq!(twins, [reason]);
        }
    }
}
