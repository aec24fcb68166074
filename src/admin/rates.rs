//! The status page's connection rates ([`Rates`]): the difference between
//! the accepted counters of this render and of the previous one taken at
//! least [`MIN_RATE_INTERVAL`] earlier, per second. Kept in the admin state
//! ([`super::state::AdminState`]), so every viewer of the page shares one
//! sample; nothing is sampled in the background.
//!
//! Not here: which counters are sampled, and the page that shows the rates
//! ([`super::status`]).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Renders closer together than this reuse the previous rates, so several
/// viewers (or a quick reload) do not divide by a tiny interval.
pub(crate) const MIN_RATE_INTERVAL: Duration = Duration::from_secs(1);

/// The counters the rates are computed from, as of the last render that
/// took a sample, and the rates it computed. Memory: one entry per
/// listener and per backend.
#[derive(Debug, Default)]
pub(crate) struct Rates(Mutex<Option<RateSample>>);

#[derive(Debug)]
struct RateSample {
    at: Instant,
    counts: HashMap<String, f64>,
    /// Per second, by series, over the interval that ended at `at`.
    rates: HashMap<String, f64>,
}

impl Rates {
    /// Per-second rates of the `counts` (series → value) since the previous
    /// sample; empty on the first call.
    pub(super) fn update(&self, counts: HashMap<String, f64>) -> HashMap<String, f64> {
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if let Some(previous) = slot.as_ref() {
            if now.duration_since(previous.at) < MIN_RATE_INTERVAL {
                return previous.rates.clone();
            }
        }
        let rates: HashMap<String, f64> = slot
            .as_ref()
            .map(|p| {
                let secs = now.duration_since(p.at).as_secs_f64();
                counts
                    .iter()
                    .map(|(series, value)| {
                        let before = p.counts.get(series).copied().unwrap_or(0.0);
                        (series.clone(), ((value - before) / secs).max(0.0))
                    })
                    .collect()
            })
            .unwrap_or_default();
        *slot = Some(RateSample {
            at: now,
            counts,
            rates: rates.clone(),
        });
        rates
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_need_two_samples_a_second_apart() {
        let rates = Rates::default();
        let first = rates.update(HashMap::from([("a".to_owned(), 10.0)]));
        assert!(first.is_empty());
        // Too soon: the previous (empty) rates, and the sample is kept.
        let soon = rates.update(HashMap::from([("a".to_owned(), 20.0)]));
        assert!(soon.is_empty());
        rates.0.lock().unwrap().as_mut().unwrap().at -= Duration::from_secs(2);
        let later = rates.update(HashMap::from([("a".to_owned(), 30.0)]));
        let r = later["a"];
        assert!((9.0..=10.0).contains(&r), "{r}");
    }
}
