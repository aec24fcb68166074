//! Why a connection ended: one [`CloseReason`] per connection.
//!
//! Every stage's error folds into exactly one reason, which the connection's
//! single log line carries in its `close` field. The names are a contract
//! with log queries and dashboards: add new ones, never rename.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CloseReason {
    /// Both directions ended normally (FIN from each side).
    Done,
    /// The client closed before sending a byte: a health check or port scan.
    /// Such connections are counted but never logged.
    Silent,
    /// The client closed, or reset, before its ClientHello was complete.
    ClientClosed,
    /// No complete ClientHello within `client_hello_timeout` of accept.
    HelloTimeout,
    /// The first bytes are not a TLS handshake record.
    NotTls,
    /// A TLS handshake record, but not a well-formed ClientHello.
    Malformed,
    /// The ClientHello needs more than `max_client_hello_bytes`.
    TooLarge,
    /// No SNI and the listener's `no_sni` policy is `reject`.
    NoSni,
    /// The SNI matches no route on this listener (or is not a host name).
    Unmatched,
    /// No backend address accepted a connection within its budget.
    ConnectFailed,
    /// No byte moved in either direction for `idle_timeout`.
    IdleTimeout,
    /// The client side failed mid-relay (reset, or a write to it failed).
    ClientReset,
    /// The backend side failed mid-relay.
    BackendReset,
    /// The relay closed the connection because it is shutting down.
    Shutdown,
    /// A trusted source on a `require` listener sent no complete PROXY
    /// header before `client_hello_timeout`.
    ProxyMissing,
    /// A trusted source sent a PROXY header that breaks the spec.
    ProxyInvalid,
    /// A PROXY signature from a source outside `trusted`.
    ProxyUntrusted,
    /// The PROXY hop count exceeds `max_hops`: a routing loop between relays.
    HopLimit,
    /// A reload changed or removed this connection's route or backend, and
    /// its jittered moment within `drain_timeout` came.
    Drained,
    /// Refused at admission: the source already has
    /// `connections_per_source` connections open. Nothing was read.
    LimitConcurrent,
    /// Refused at admission: the source exceeded
    /// `connection_rate_per_source` / `connection_burst_per_source`.
    LimitRate,
    /// Refused at admission: the source is on the listener's `deny` list or
    /// off its `allow` list.
    Denied,
    /// The backend has no address: its name never resolved, or a cluster
    /// lookup found no node (and this node has no `local_backend`).
    NoAddress,
    /// A cluster answer pointed outside the backend's `allowed_targets`.
    TargetNotAllowed,
}

impl CloseReason {
    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::Done => "done",
            CloseReason::Silent => "silent",
            CloseReason::ClientClosed => "client_closed",
            CloseReason::HelloTimeout => "hello_timeout",
            CloseReason::NotTls => "not_tls",
            CloseReason::Malformed => "malformed",
            CloseReason::TooLarge => "too_large",
            CloseReason::NoSni => "no_sni",
            CloseReason::Unmatched => "unmatched",
            CloseReason::ConnectFailed => "connect_failed",
            CloseReason::IdleTimeout => "idle_timeout",
            CloseReason::ClientReset => "client_reset",
            CloseReason::BackendReset => "backend_reset",
            CloseReason::Shutdown => "shutdown",
            CloseReason::ProxyMissing => "proxy_missing",
            CloseReason::ProxyInvalid => "proxy_invalid",
            CloseReason::ProxyUntrusted => "proxy_untrusted",
            CloseReason::HopLimit => "hop_limit",
            CloseReason::Drained => "drained",
            CloseReason::LimitConcurrent => "limit_concurrent",
            CloseReason::LimitRate => "limit_rate",
            CloseReason::Denied => "denied",
            CloseReason::NoAddress => "no_address",
            CloseReason::TargetNotAllowed => "target_not_allowed",
        }
    }

    /// Whether the relay or its backends are at fault (logged at warn),
    /// rather than the client or normal life (logged at info).
    pub fn is_our_fault(self) -> bool {
        // A hop-limit refusal is a routing loop in our own fleet.
        matches!(
            self,
            CloseReason::ConnectFailed
                | CloseReason::BackendReset
                | CloseReason::HopLimit
                | CloseReason::NoAddress
                | CloseReason::TargetNotAllowed
        )
    }
}

impl CloseReason {
    /// Whether the connection was refused at admission, before any read.
    /// Such closes are logged at debug, one line each, since a flood makes
    /// many; the server logs a per-interval summary of them at warn.
    pub fn is_admission_refusal(self) -> bool {
        matches!(
            self,
            CloseReason::LimitConcurrent | CloseReason::LimitRate | CloseReason::Denied
        )
    }
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
