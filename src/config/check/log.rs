//! Checks `[log]`: the target, the syslog address (its syntax only: a host
//! name is resolved when the relay connects, so `check` needs no DNS), the
//! facility, the framing and the queue size.
//!
//! Not here: writing log lines (`logging`).

use super::super::file::LogSection;
use super::*;

impl Checker {
    pub(super) fn log(&mut self, section: &LogSection) -> Option<Log> {
        let target = match section.target.as_deref() {
            None => Some(DEFAULT_LOG_TARGET),
            Some(text) => {
                let found = LogTarget::ALL.iter().find(|(n, _)| *n == text);
                if found.is_none() {
                    self.problem(
                        "log.target",
                        format!(
                            "{text:?} is not one of \"stderr\", \"stdout\", \"journald\", \"syslog\""
                        ),
                    );
                }
                found.map(|(_, t)| *t)
            }
        };
        let syslog = SyslogAddress::parse(section.syslog.as_deref().unwrap_or(DEFAULT_SYSLOG))
            .map_err(|message| self.problem("log.syslog", message))
            .ok();
        let facility_name = section.facility.as_deref().unwrap_or(DEFAULT_LOG_FACILITY);
        let facility = Facility::from_name(facility_name);
        if facility.is_none() {
            self.problem(
                "log.facility",
                format!(
                    "{facility_name:?} is not a syslog facility ({})",
                    Facility::NAMES.join(", ")
                ),
            );
        }
        let syslog_format = match section.syslog_format.as_deref() {
            None => Some(DEFAULT_SYSLOG_FORMAT),
            Some("rfc5424") => Some(SyslogFormat::Rfc5424),
            Some("rfc3164") => Some(SyslogFormat::Rfc3164),
            Some(other) => {
                self.problem(
                    "log.syslog_format",
                    format!("{other:?} is not one of \"rfc5424\", \"rfc3164\""),
                );
                None
            }
        };
        let queue = self.ranged(
            "log.queue",
            section.queue,
            LOG_QUEUE_RANGE,
            DEFAULT_LOG_QUEUE as i64,
        );
        Some(Log {
            target: target?,
            syslog: syslog?,
            facility: facility?,
            syslog_format: syslog_format?,
            queue: queue? as usize,
        })
    }
}
