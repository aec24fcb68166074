//! Checks `[global]`: process-wide limits, threads, the pipe pool and
//! what `snirelay certs` makes of a coalescing risk.
//!
//! Not here: applying them (`server`, `pump`).

use super::*;

impl Checker {
    pub(super) fn global(&mut self, section: &GlobalSection) -> Global {
        Global {
            max_connections: self
                .ranged(
                    "global.max_connections",
                    section.max_connections,
                    MAX_CONNECTIONS_RANGE,
                    DEFAULT_MAX_CONNECTIONS as i64,
                )
                .unwrap_or(0) as usize,
            drain_timeout: self
                .duration(
                    "global.drain_timeout",
                    &section.drain_timeout,
                    DEFAULT_DRAIN_TIMEOUT,
                )
                .unwrap_or_default(),
            threads: self
                .ranged(
                    "global.threads",
                    section.threads,
                    THREADS_RANGE,
                    default_threads() as i64,
                )
                .unwrap_or(1) as usize,
            splice: section.splice.unwrap_or(DEFAULT_SPLICE),
            pipe_size: self
                .ranged(
                    "global.pipe_size",
                    section.pipe_size,
                    PIPE_SIZE_RANGE,
                    DEFAULT_PIPE_SIZE as i64,
                )
                .unwrap_or(0) as usize,
            max_pipes: self
                .ranged(
                    "global.max_pipes",
                    section.max_pipes,
                    MAX_PIPES_RANGE,
                    DEFAULT_MAX_PIPES as i64,
                )
                .unwrap_or(0) as usize,
            max_connection_rate: self.optional_nonzero(
                "global.max_connection_rate",
                section.max_connection_rate,
                RATE_RANGE,
            ),
            coalescing_risk: self.coalescing_risk(section.coalescing_risk.as_deref()),
        }
    }

    /// `coalescing_risk`: `"warn"` (the default) or `"error"`.
    fn coalescing_risk(&mut self, written: Option<&str>) -> CoalescingRisk {
        let Some(written) = written else {
            return CoalescingRisk::default();
        };
        match CoalescingRisk::ALL
            .into_iter()
            .find(|c| c.as_str() == written)
        {
            Some(choice) => choice,
            None => {
                self.problem(
                    "global.coalescing_risk",
                    format!("{written:?} is neither \"warn\" nor \"error\""),
                );
                CoalescingRisk::default()
            }
        }
    }
}
