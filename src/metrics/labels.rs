//! The label sets of every metric family: one struct per combination of
//! labels, each value bounded by the configuration (listener, route and
//! backend names, a backend's addresses under a cap) or a fixed word
//! (`&'static str`: close reasons, outcomes, kinds), never by the traffic.
//!
//! Not here: the families that use them and their registration
//! ([`super::registry`]), and the calls that fill them in (the other
//! children of [`crate::metrics`]).

use prometheus_client::encoding::EncodeLabelSet;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ListenerLabels {
    pub(super) listener: String,
    /// The listener's `protocol` (`tcp` or `quic`): fixed per listener.
    pub(super) protocol: &'static str,
}

/// A listener's source tables (its own and its routes').
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct TableLabels {
    pub(super) listener: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct CloseLabels {
    pub(super) listener: String,
    /// The listener's `protocol` (`tcp` or `quic`): fixed per listener.
    pub(super) protocol: &'static str,
    pub(super) reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct TrafficLabels {
    pub(super) listener: String,
    /// The listener's `protocol` (`tcp` or `quic`): fixed per listener.
    pub(super) protocol: &'static str,
    pub(super) route: String,
    pub(super) backend: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct HelloLabels {
    pub(super) listener: String,
    /// The listener's `protocol` (`tcp` or `quic`): fixed per listener.
    pub(super) protocol: &'static str,
    pub(super) outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct BackendLabels {
    pub(super) backend: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct BackendAddressLabels {
    pub(super) backend: String,
    pub(super) address: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct BackendStateLabels {
    pub(super) backend: String,
    pub(super) state: &'static str,
}

// Run-time control (issue 16).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ControlLabels {
    pub(super) kind: &'static str,
    pub(super) outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct AddressStateLabels {
    pub(super) backend: String,
    pub(super) address: String,
    pub(super) state: &'static str,
}

/// A socket log target's series (`target` is `syslog` or `journald`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct LogTargetLabels {
    pub(super) target: &'static str,
}

/// A backend's `source` address (bounded by the configuration).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct SourceLabels {
    pub(super) backend: String,
    pub(super) source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ThrottleLabels {
    pub(super) listener: String,
    pub(super) route: String,
    /// `up` (client → backend) or `down`.
    pub(super) direction: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct LogDropLabels {
    pub(super) target: &'static str,
    pub(super) reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ReasonLabels {
    pub(super) reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct LimitLabels {
    pub(super) listener: String,
    /// The listener's `protocol` (`tcp` or `quic`): fixed per listener.
    pub(super) protocol: &'static str,
    pub(super) kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct OutcomeLabels {
    pub(super) outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct LookupLabels {
    pub(super) kind: &'static str,
    pub(super) outcome: &'static str,
}

/// A cluster backend and the lookup bound that refused a lookup
/// (`in_flight` or `new_names`).
/// A cluster backend's cache share (`answered`, `unanswered`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct CacheShareLabels {
    pub(super) backend: String,
    pub(super) share: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct LookupLimitLabels {
    pub(super) backend: String,
    pub(super) limit: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct VersionLabels {
    pub(super) version: &'static str,
}
