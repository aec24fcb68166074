//! Checks `[listener.limits]` and `[route.limits]`: per-source admission.
//!
//! Not here: admission itself ([`crate::admission`]).

use super::*;

impl Checker {
    /// `[listener.limits]` or `[route.limits]`; an unset concurrency limit
    /// takes `default_per_source`, unset rate limits are off.
    pub(super) fn limits(
        &mut self,
        key: &str,
        section: &LimitsSection,
        default_per_source: Option<NonZeroU32>,
    ) -> Option<Limits> {
        let problems = self.problems.len();
        let connections_key = format!("{key}.connections_per_source");
        let connections_per_source = match section.connections_per_source {
            None => default_per_source,
            Some(CountOrOff::Switch(false)) => None,
            Some(CountOrOff::Switch(true)) => {
                self.problem(
                    connections_key,
                    "true names no count: give a number, or false to turn the limit off",
                );
                None
            }
            Some(CountOrOff::Count(n)) => {
                self.optional_nonzero(&connections_key, Some(n), MAX_CONNECTIONS_RANGE)
            }
        };
        let rate = self.optional_nonzero(
            &format!("{key}.connection_rate_per_source"),
            section.connection_rate_per_source,
            RATE_RANGE,
        );
        let burst = self.optional_nonzero(
            &format!("{key}.connection_burst_per_source"),
            section.connection_burst_per_source,
            RATE_RANGE,
        );
        if let (None, Some(b)) = (section.connection_rate_per_source, burst) {
            self.problem(
                format!("{key}.connection_burst_per_source"),
                format!("{b} is set without connection_rate_per_source"),
            );
        }
        let prefix_v4 = self.ranged(
            &format!("{key}.source_prefix_v4"),
            section.source_prefix_v4,
            PREFIX_V4_RANGE,
            i64::from(DEFAULT_SOURCE_PREFIX_V4),
        );
        let prefix_v6 = self.ranged(
            &format!("{key}.source_prefix_v6"),
            section.source_prefix_v6,
            PREFIX_V6_RANGE,
            i64::from(DEFAULT_SOURCE_PREFIX_V6),
        );
        let limit_key = match section.limit_key.as_deref() {
            None => Some(LimitKey::Source),
            Some(text) => {
                let found = LimitKey::ALL.into_iter().find(|k| k.as_str() == text);
                if found.is_none() {
                    self.problem(
                        format!("{key}.limit_key"),
                        format!("{text:?} is none of \"source\", \"ja4\", \"source+ja4\""),
                    );
                }
                found
            }
        };
        let attempts = self.attempts(key, section);
        let max_sources = self.ranged(
            &format!("{key}.max_sources"),
            section.max_sources,
            MAX_SOURCES_RANGE,
            i64::from(DEFAULT_MAX_SOURCES.get()),
        );
        let ja4_source_multiple = self.ranged(
            &format!("{key}.ja4_source_multiple"),
            section.ja4_source_multiple,
            JA4_SOURCE_MULTIPLE_RANGE,
            i64::from(DEFAULT_JA4_SOURCE_MULTIPLE.get()),
        );
        if let (Some(m), Some(LimitKey::Source)) = (section.ja4_source_multiple, limit_key) {
            self.problem(
                format!("{key}.ja4_source_multiple"),
                format!("{m} is set without a JA4 limit_key (\"ja4\" or \"source+ja4\"), where it means nothing"),
            );
        }
        let nonzero = |n: Option<i64>| {
            n.and_then(|n| u32::try_from(n).ok())
                .and_then(NonZeroU32::new)
        };
        let allow = self.cidrs(&format!("{key}.allow"), &section.allow);
        let deny = self.cidrs(&format!("{key}.deny"), &section.deny);
        if self.problems.len() > problems {
            return None;
        }
        Some(Limits {
            connections_per_source,
            rate_per_source: rate.map(|per_second| Rate {
                per_second,
                burst: burst.unwrap_or(per_second),
            }),
            source_prefix_v4: prefix_v4? as u8,
            source_prefix_v6: prefix_v6? as u8,
            dry_run: section.dry_run.unwrap_or(false),
            allow,
            deny,
            rate_counts_refused: section.rate_counts_refused.unwrap_or(false),
            limit_key: limit_key?,
            attempts_per_source: attempts?,
            max_sources: nonzero(max_sources)?,
            ja4_source_multiple: nonzero(ja4_source_multiple)?,
        })
    }

    /// `attempts_per_source` and `attempts_period`, and what they exclude:
    /// the GCRA rate (two counts of one thing would disagree) and
    /// `rate_counts_refused` (the attempts count refused ones always).
    fn attempts(&mut self, key: &str, section: &LimitsSection) -> Option<Option<Attempts>> {
        let attempts_key = format!("{key}.attempts_per_source");
        let period_key = format!("{key}.attempts_period");
        let Some(count) = section.attempts_per_source else {
            if let Some(period) = &section.attempts_period {
                self.problem(
                    period_key,
                    format!("{period:?} is set without attempts_per_source"),
                );
                return None;
            }
            return Some(None);
        };
        let mut fine = true;
        if section.connection_rate_per_source.is_some() {
            self.problem(
                attempts_key.clone(),
                "is set with connection_rate_per_source: choose one (attempts_per_source counts \
                 every attempt over a sliding period, as HAProxy's conn_rate; the rate is a token bucket)",
            );
            fine = false;
        }
        if section.rate_counts_refused == Some(true) {
            self.problem(
                format!("{key}.rate_counts_refused"),
                "true is set with attempts_per_source, which always counts refused attempts: remove it",
            );
            fine = false;
        }
        let count = self.optional_nonzero(&attempts_key, Some(count), RATE_RANGE);
        let period = self.duration(
            &period_key,
            &section.attempts_period,
            DEFAULT_ATTEMPTS_PERIOD,
        );
        let period = period.and_then(|period| {
            let text = section.attempts_period.as_deref().unwrap_or_default();
            if period.subsec_nanos() % 1_000_000 != 0 {
                self.problem(
                    period_key.clone(),
                    format!("{text:?} is not a whole number of milliseconds (periods are counted in milliseconds, as HAProxy's)"),
                );
                return None;
            }
            let ms = i64::try_from(period.as_millis()).unwrap_or(i64::MAX);
            if !ATTEMPTS_PERIOD_MS_RANGE.contains(&ms) {
                self.problem(
                    period_key.clone(),
                    format!(
                        "{text:?} is out of range ({}ms..={}ms)",
                        ATTEMPTS_PERIOD_MS_RANGE.start(),
                        ATTEMPTS_PERIOD_MS_RANGE.end()
                    ),
                );
                return None;
            }
            Some(period)
        });
        let (count, period) = (count?, period?);
        fine.then_some(Some(Attempts { count, period }))
    }
}
