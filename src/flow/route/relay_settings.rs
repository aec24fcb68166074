//! What the route table hands the byte pump: a route's relay timeouts and
//! bandwidth limits, copied from its settings into the pump's own plain
//! values ([`crate::pump::relay::RelayTimeouts`],
//! [`crate::pump::throttle::Limits`]), and each limited route's throttle
//! with its throttled-time counters, so that the pump reads neither the
//! configuration nor the metrics registry.
//!
//! Not here: which route a connection takes ([`super`]), or the buckets'
//! arithmetic ([`crate::pump::throttle`]).

use std::sync::Arc;

use crate::config::{Bandwidth, ByteRate, Timeouts};
use crate::pump::relay::RelayTimeouts;
use crate::pump::throttle::{Limits, ListenerBuckets, Quota, RouteThrottle};

/// A route's (or listener's) timeouts, as the relay takes them.
pub(super) fn relay_timeouts(settings: Timeouts) -> RelayTimeouts {
    RelayTimeouts {
        idle: settings.idle,
        half_close: settings.half_close,
        lifetime: settings.lifetime,
    }
}

/// A route's (or listener's) bandwidth limits, as the throttle takes them.
pub(super) fn limits(bandwidth: &Bandwidth) -> Limits {
    let quota = |rate: Option<ByteRate>| {
        rate.map(|rate| Quota {
            bytes_per_second: rate.bytes_per_second,
            burst: rate.burst,
        })
    };
    Limits {
        up: quota(bandwidth.up),
        down: quota(bandwidth.down),
        per_source_up: quota(bandwidth.per_source_up),
        per_source_down: quota(bandwidth.per_source_down),
        own_per_source: bandwidth.own_per_source,
    }
}

/// The throttle of route `route` (or `no_sni`) on `listener`, or `None`
/// when its `bandwidth` sets no limit (no counter series is made then).
pub(super) fn throttle(
    listener: &str,
    route: &str,
    bandwidth: &Bandwidth,
    shared: &ListenerBuckets,
) -> Option<Arc<RouteThrottle>> {
    let limits = limits(bandwidth);
    if !limits.is_limited() {
        return None;
    }
    let metrics = crate::metrics::metrics();
    Some(RouteThrottle::new(
        &limits,
        shared,
        metrics.throttled(listener, route, "up"),
        metrics.throttled(listener, route, "down"),
    ))
}
