//! A backend's series: its connect series ([`BackendSeries`], resolved
//! once per backend runtime), the health of its addresses
//! (`snirelay_backend_address_up`, `snirelay_backend_addresses`), the
//! certificates TLS health checks learned at them
//! (`snirelay_backend_certificate_not_after_seconds`,
//! `snirelay_backend_certificate_covers`) and the operator's state of them
//! (`snirelay_backend_address_state`), all bounded at
//! [`MAX_ADDRESS_SERIES_PER_BACKEND`] addresses per backend and switched by
//! `[admin] address_labels` ([`Metrics::set_address_labels`]).
//!
//! Not here: the families and the address book's fields
//! ([`super::registry`]); the backend lookups' and `source` addresses'
//! counters ([`super::hooks`]); health checking itself
//! ([`crate::backend::health`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;

use super::labels::{AddressStateLabels, BackendAddressLabels, BackendLabels, BackendStateLabels};
use super::registry::Metrics;

/// One backend's connect series (clones share the family's atomics),
/// resolved once per backend runtime so a connect attempt costs atomic adds
/// only: no label, no lock.
#[derive(Clone, Debug)]
pub struct BackendSeries {
    attempts: Counter,
    failures: Counter,
    duration: Histogram,
}

impl BackendSeries {
    /// One connect attempt: `Ok(time to connect)` or `Err(())` for a
    /// failure or timeout.
    pub(crate) fn connect_attempt(&self, outcome: Result<Duration, ()>) {
        self.attempts.inc();
        match outcome {
            Ok(took) => self.duration.observe(took.as_secs_f64()),
            Err(()) => {
                self.failures.inc();
            }
        }
    }
}

/// Addresses per backend whose health is exported with an `address`
/// label. Fixed address lists are far shorter; DNS and cluster answers can
/// churn through many over weeks, and the series of an address that left
/// must not stay forever. Memory: one map entry (about 50 bytes) and one
/// series per address, so at most this many per backend; cost: a report
/// for a new address when the backend is at the cap scans its entries.
pub(crate) const MAX_ADDRESS_SERIES_PER_BACKEND: usize = 64;

impl Metrics {
    /// The connect series of `backend` (created at zero if new), with its
    /// address counts (`up`, `down`) and replaced-series counter.
    pub(crate) fn backend_series(&self, backend: &str) -> BackendSeries {
        let labels = BackendLabels {
            backend: backend.to_owned(),
        };
        // The address counts and replacements exist at zero from the start
        // (an alert on "no address up" needs them before the first report).
        for state in ["up", "down"] {
            let _ = self.backend_addresses.get_or_create(&BackendStateLabels {
                backend: backend.to_owned(),
                state,
            });
        }
        let _ = self.address_series_replaced.get_or_create(&labels);
        BackendSeries {
            attempts: self.connect_attempts.get_or_create_owned(&labels),
            failures: self.connect_failures.get_or_create_owned(&labels),
            duration: self.connect_duration.get_or_create_owned(&labels),
        }
    }

    /// The health of one address of `backend`. At most
    /// [`MAX_ADDRESS_SERIES_PER_BACKEND`] addresses per backend are kept:
    /// a new one past that replaces the address reported least recently.
    pub(crate) fn backend_address_health(&self, backend: &str, address: SocketAddr, up: bool) {
        let mut book = self.addresses.lock().unwrap_or_else(|e| e.into_inner());
        let book = &mut *book;
        book.reports += 1;
        let now = book.reports;
        if !book.backends.contains_key(backend) {
            book.backends.insert(backend.to_owned(), HashMap::new());
        }
        let known = book.backends.get_mut(backend).expect("inserted above");
        if !known.contains_key(&address) && known.len() >= MAX_ADDRESS_SERIES_PER_BACKEND {
            let oldest = known.iter().min_by_key(|(_, (_, at))| *at).map(|(a, _)| *a);
            if let Some(oldest) = oldest {
                known.remove(&oldest);
                book.certificates.remove(&(backend.to_owned(), oldest));
                if book.labels {
                    let labels = BackendAddressLabels {
                        backend: backend.to_owned(),
                        address: oldest.to_string(),
                    };
                    self.backend_address_up.remove(&labels);
                    self.certificate_not_after.remove(&labels);
                    self.certificate_covers.remove(&labels);
                }
                self.address_series_replaced
                    .get_or_create(&BackendLabels {
                        backend: backend.to_owned(),
                    })
                    .inc();
            }
        }
        known.insert(address, (up, now));
        if book.labels {
            self.backend_address_up
                .get_or_create(&BackendAddressLabels {
                    backend: backend.to_owned(),
                    address: address.to_string(),
                })
                .set(i64::from(up));
        }
        let ups = known.values().filter(|(up, _)| *up).count();
        for (state, count) in [("up", ups), ("down", known.len() - ups)] {
            self.backend_addresses
                .get_or_create(&BackendStateLabels {
                    backend: backend.to_owned(),
                    state,
                })
                .set(count as i64);
        }
    }

    /// What a TLS health check's certificate fetch learned at `address` of
    /// `backend`: when the certificate expires (Unix seconds) and whether
    /// it covers the check's `sni`. Exported only for an address whose
    /// health is exported ([`Metrics::backend_address_health`] first), so
    /// the same bound holds, and dropped with it.
    pub(crate) fn backend_certificate(
        &self,
        backend: &str,
        address: SocketAddr,
        not_after: i64,
        covers: bool,
    ) {
        let mut book = self.addresses.lock().unwrap_or_else(|e| e.into_inner());
        let known = book
            .backends
            .get(backend)
            .is_some_and(|k| k.contains_key(&address));
        if !known {
            return;
        }
        book.certificates
            .insert((backend.to_owned(), address), (not_after, covers));
        if book.labels {
            let labels = BackendAddressLabels {
                backend: backend.to_owned(),
                address: address.to_string(),
            };
            self.certificate_not_after
                .get_or_create(&labels)
                .set(not_after);
            self.certificate_covers
                .get_or_create(&labels)
                .set(i64::from(covers));
        }
    }

    /// `[admin] address_labels`: whether `snirelay_backend_address_up` and
    /// the certificate series are exported (by address). Turned off, their
    /// series go at once; turned on, they come back with the last reported
    /// values.
    pub(crate) fn set_address_labels(&self, on: bool) {
        let mut book = self.addresses.lock().unwrap_or_else(|e| e.into_inner());
        if book.labels == on {
            return;
        }
        book.labels = on;
        self.backend_address_up.clear();
        self.certificate_not_after.clear();
        self.certificate_covers.clear();
        if !on {
            // The operator-state series name addresses too.
            self.address_state.clear();
        }
        if on {
            for (backend, known) in &book.backends {
                for (address, (up, _)) in known {
                    self.backend_address_up
                        .get_or_create(&BackendAddressLabels {
                            backend: backend.clone(),
                            address: address.to_string(),
                        })
                        .set(i64::from(*up));
                }
            }
            for ((backend, address), (not_after, covers)) in &book.certificates {
                let labels = BackendAddressLabels {
                    backend: backend.clone(),
                    address: address.to_string(),
                };
                self.certificate_not_after
                    .get_or_create(&labels)
                    .set(*not_after);
                self.certificate_covers
                    .get_or_create(&labels)
                    .set(i64::from(*covers));
            }
        }
    }

    /// The operator set `address` of `backend` to `state` (one of
    /// `states`): the gauge of `state` goes to 1, the others to 0. Bounded
    /// like the health series: an address is exported once an operator has
    /// set it, at most [`MAX_ADDRESS_SERIES_PER_BACKEND`] per backend (a
    /// new one past that drops the series of the one set longest ago);
    /// nothing is exported with `address_labels = false`.
    pub(crate) fn backend_address_state(
        &self,
        backend: &str,
        address: SocketAddr,
        state: &'static str,
        states: &[&'static str],
    ) {
        let labels_on = self
            .addresses
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .labels;
        let mut book = self
            .address_states
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let known = book.entry(backend.to_owned()).or_default();
        known.retain(|(a, _)| *a != address);
        if known.len() >= MAX_ADDRESS_SERIES_PER_BACKEND {
            let (gone, _) = known.remove(0);
            for &s in states {
                self.address_state.remove(&AddressStateLabels {
                    backend: backend.to_owned(),
                    address: gone.to_string(),
                    state: s,
                });
            }
        }
        known.push((address, state));
        if !labels_on {
            return;
        }
        for &s in states {
            self.address_state
                .get_or_create(&AddressStateLabels {
                    backend: backend.to_owned(),
                    address: address.to_string(),
                    state: s,
                })
                .set(i64::from(s == state));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::metrics;

    #[test]
    fn address_series_are_capped_and_can_be_turned_off() {
        // The only test that touches the address book (it is process-wide).
        let m = metrics();
        let addr = |i: usize| SocketAddr::from(([192, 0, 2, 1], 1000 + i as u16));
        let series = |text: &str| {
            text.lines()
                .filter(|l| l.starts_with("snirelay_backend_address_up{backend=\"unit_cap\""))
                .count()
        };
        for i in 0..MAX_ADDRESS_SERIES_PER_BACKEND + 10 {
            m.backend_address_health("unit_cap", addr(i), i % 2 == 0);
        }
        // 0..=9 went. Address 10, reported again, is now the most recent,
        // so a new address replaces 11 instead.
        m.backend_address_health("unit_cap", addr(10), true);
        m.backend_address_health("unit_cap", addr(500), true);
        let text = m.render();
        assert_eq!(series(&text), MAX_ADDRESS_SERIES_PER_BACKEND, "{text}");
        let up = |i: usize| {
            format!(
                "snirelay_backend_address_up{{backend=\"unit_cap\",address=\"{}\"}} ",
                addr(i)
            )
        };
        assert!(!text.contains(&up(0)) && !text.contains(&up(11)));
        assert!(text.contains(&format!("{}1", up(10))));
        assert!(text.contains(&format!("{}1", up(MAX_ADDRESS_SERIES_PER_BACKEND + 8))));
        assert!(
            text.contains(
                "snirelay_backend_address_series_replaced_total{backend=\"unit_cap\"} 11"
            ),
            "{text}"
        );
        let half = MAX_ADDRESS_SERIES_PER_BACKEND / 2;
        assert!(
            text.contains(&format!(
                "snirelay_backend_addresses{{backend=\"unit_cap\",state=\"up\"}} {}",
                half + 1
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "snirelay_backend_addresses{{backend=\"unit_cap\",state=\"down\"}} {}",
                half - 1
            )),
            "{text}"
        );

        // A certificate is exported for an address whose health is, only.
        m.backend_certificate("unit_cap", addr(10), 1_900_000_000, false);
        m.backend_certificate("unit_cap", addr(0), 1_900_000_000, true);
        let cert = |family: &str, i: usize| {
            format!(
                "snirelay_backend_certificate_{family}{{backend=\"unit_cap\",address=\"{}\"}} ",
                addr(i)
            )
        };
        let text = m.render();
        let not_after = format!("{}1900000000", cert("not_after_seconds", 10));
        assert!(text.contains(&not_after), "{text}");
        assert!(text.contains(&format!("{}0", cert("covers", 10))), "{text}");
        assert!(!text.contains(&cert("covers", 0)), "{text}");

        m.set_address_labels(false);
        m.backend_address_health("unit_cap", addr(200), false);
        let text = m.render();
        assert!(!text.contains("address="), "{text}");
        assert!(!text.contains("192.0.2.1"), "{text}");
        assert!(
            text.contains(&format!(
                "snirelay_backend_addresses{{backend=\"unit_cap\",state=\"down\"}} {half}"
            )),
            "{text}"
        );

        m.set_address_labels(true);
        let text = m.render();
        assert_eq!(series(&text), MAX_ADDRESS_SERIES_PER_BACKEND);
        assert!(text.contains(&format!("{}0", up(200))), "{text}");
        assert!(text.contains(&not_after), "{text}");
    }
}
