//! Checks the bandwidth keys of a listener and of a route (`rate_up`,
//! `rate_down`, `rate_per_source_up`, `rate_per_source_down`, `burst`)
//! and lays a route's over its listener's.
//!
//! Not here: the buckets ([`crate::pump::throttle`]), or refusing the keys on a
//! QUIC listener (`protocol` and `quic_route`, from `keys::Applies::Tcp`).

use super::*;

/// The four rate keys, as written, in the order they are checked.
const RATE_KEYS: [&str; 4] = [
    "rate_up",
    "rate_down",
    "rate_per_source_up",
    "rate_per_source_down",
];

impl Checker {
    /// A listener's bandwidth keys: unset rates are no limit.
    pub(super) fn listener_bandwidth(
        &mut self,
        key: &str,
        section: &ListenerSection,
    ) -> Option<Bandwidth> {
        let written = [
            section.rate_up,
            section.rate_down,
            section.rate_per_source_up,
            section.rate_per_source_down,
        ];
        let problems = self.problems.len();
        let mut rates = [None; 4];
        for ((name, value), rate) in RATE_KEYS.iter().zip(written).zip(&mut rates) {
            *rate =
                value.and_then(|v| self.byte_count(&format!("{key}.{name}"), v, BANDWIDTH_RANGE));
        }
        let burst = section
            .burst
            .and_then(|v| self.byte_count(&format!("{key}.burst"), v, BURST_RANGE));
        if section.burst.is_some() && rates.iter().all(Option::is_none) {
            self.problem(
                format!("{key}.burst"),
                "is set without a rate (rate_up, rate_down, rate_per_source_up or rate_per_source_down)",
            );
        }
        if self.problems.len() > problems {
            return None;
        }
        let bucket = |rate: Option<NonZeroU64>| {
            rate.map(|bytes_per_second| ByteRate {
                bytes_per_second,
                burst: burst.unwrap_or(bytes_per_second),
            })
        };
        Some(Bandwidth {
            up: bucket(rates[0]),
            down: bucket(rates[1]),
            per_source_up: bucket(rates[2]),
            per_source_down: bucket(rates[3]),
            burst,
            own_per_source: false,
        })
    }

    /// A route's bandwidth keys over its listener's: each rate the route
    /// sets replaces the listener's (`false` removes it), and its `burst`
    /// (else the listener's, else one second's worth) sizes every bucket
    /// of the route.
    pub(super) fn route_bandwidth(
        &mut self,
        key: &str,
        section: &file::RouteSection,
    ) -> Option<impl Fn(Bandwidth) -> Bandwidth + use<>> {
        let written = [
            section.rate_up,
            section.rate_down,
            section.rate_per_source_up,
            section.rate_per_source_down,
        ];
        let problems = self.problems.len();
        // Per key: None = the listener's, Some(None) = off, Some(Some(r)).
        let mut rates: [Option<Option<NonZeroU64>>; 4] = [None; 4];
        for ((name, value), rate) in RATE_KEYS.iter().zip(written).zip(&mut rates) {
            let full = format!("{key}.{name}");
            *rate = match value {
                None => None,
                Some(CountOrOff::Switch(false)) => Some(None),
                Some(CountOrOff::Switch(true)) => {
                    self.problem(
                        full,
                        "true names no rate: give bytes per second, or false for no limit on this route",
                    );
                    None
                }
                Some(CountOrOff::Count(v)) => self.byte_count(&full, v, BANDWIDTH_RANGE).map(Some),
            };
        }
        let burst = section
            .burst
            .and_then(|v| self.byte_count(&format!("{key}.burst"), v, BURST_RANGE));
        if self.problems.len() > problems {
            return None;
        }
        let own_per_source = rates[2].is_some() || rates[3].is_some();
        Some(move |listener: Bandwidth| {
            let burst = burst.or(listener.burst);
            let pick = |own: Option<Option<NonZeroU64>>, inherited: Option<ByteRate>| {
                let rate = match own {
                    None => inherited.map(|r| r.bytes_per_second),
                    Some(own) => own,
                };
                rate.map(|bytes_per_second| ByteRate {
                    bytes_per_second,
                    burst: burst.unwrap_or(bytes_per_second),
                })
            };
            Bandwidth {
                up: pick(rates[0], listener.up),
                down: pick(rates[1], listener.down),
                per_source_up: pick(rates[2], listener.per_source_up),
                per_source_down: pick(rates[3], listener.per_source_down),
                burst,
                own_per_source,
            }
        })
    }

    /// A positive byte count within `range`; else a problem naming `key`.
    fn byte_count(
        &mut self,
        key: &str,
        value: i64,
        range: std::ops::RangeInclusive<i64>,
    ) -> Option<NonZeroU64> {
        if value <= 0 {
            self.problem(
                key,
                format!("{value} is not a positive number of bytes; leave the key out (or write false on a route) for no limit"),
            );
            return None;
        }
        let value = self.ranged(key, Some(value), range, 0)?;
        u64::try_from(value).ok().and_then(NonZeroU64::new)
    }
}
