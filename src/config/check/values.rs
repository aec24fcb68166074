//! The value checks every section shares: durations, ranged counts,
//! addresses, networks and TCP keepalive, each reporting a bad value
//! under its key.
//!
//! Not here: what any key means (its section's file, and `keys`).

use super::*;

impl Checker {
    pub(super) fn duration(
        &mut self,
        key: &str,
        value: &Option<String>,
        default: Duration,
    ) -> Option<Duration> {
        let Some(text) = value else {
            return Some(default);
        };
        match humantime::parse_duration(text) {
            Ok(d) if d.is_zero() => {
                self.problem(key, format!("{text:?} must be longer than zero"));
                None
            }
            Ok(d) => Some(d),
            Err(e) => {
                self.problem(
                    key,
                    format!(
                        "{text:?} is not a duration ({e}); write e.g. \"250ms\", \"5s\", \"10m\""
                    ),
                );
                None
            }
        }
    }

    /// A duration, or `false` for none; unset gives `default`.
    pub(super) fn duration_or_off(
        &mut self,
        key: &str,
        value: &Option<DurationOrOff>,
        default: Option<Duration>,
    ) -> Option<Option<Duration>> {
        match value {
            None => Some(default),
            Some(DurationOrOff::Switch(false)) => Some(None),
            Some(DurationOrOff::Switch(true)) => {
                self.problem(
                    key,
                    "true names no duration: give one (e.g. \"24h\"), or false for no limit",
                );
                None
            }
            Some(DurationOrOff::Duration(text)) => self
                .duration(key, &Some(text.clone()), Duration::ZERO)
                .map(Some),
        }
    }

    pub(super) fn ranged(
        &mut self,
        key: &str,
        value: Option<i64>,
        range: std::ops::RangeInclusive<i64>,
        default: i64,
    ) -> Option<i64> {
        match value {
            None => Some(default),
            Some(v) if range.contains(&v) => Some(v),
            Some(v) => {
                self.problem(
                    key,
                    format!("{v} is out of range ({}..={})", range.start(), range.end()),
                );
                None
            }
        }
    }

    pub(super) fn socket_addr(&mut self, key: &str, text: &str) -> Option<SocketAddr> {
        match text.parse::<SocketAddr>() {
            Ok(addr) => Some(addr),
            Err(_) => {
                let mut message = format!(
                    "{text:?} is not an IP:port address (IPv6 goes in brackets: \"[::1]:443\")"
                );
                let host_and_port = text
                    .rsplit_once(':')
                    .is_some_and(|(host, port)| port.parse::<u16>().is_ok() && !host.is_empty());
                if key.starts_with("backend.") && key.contains(".addresses") && host_and_port {
                    message.push_str(&format!(
                        "; a host name is looked up at run time: write `resolve = {text:?}` \
                         in the backend instead of `addresses`"
                    ));
                }
                self.problem(key, message);
                None
            }
        }
    }

    /// An optional positive count: unset is `None` (unlimited).
    pub(super) fn optional_nonzero(
        &mut self,
        key: &str,
        value: Option<i64>,
        range: std::ops::RangeInclusive<i64>,
    ) -> Option<NonZeroU32> {
        let v = value?;
        let v = self.ranged(key, Some(v), range, 0)?;
        u32::try_from(v).ok().and_then(NonZeroU32::new)
    }

    pub(super) fn cidrs(&mut self, key: &str, texts: &[String]) -> CidrSet {
        let mut set = CidrSet::default();
        for (i, text) in texts.iter().enumerate() {
            match text.parse::<Cidr>() {
                Ok(cidr) => set.insert(cidr),
                Err(e) => self.problem(format!("{key}[{i}]"), format!("{text:?}: {e}")),
            }
        }
        set
    }

    /// `tcp_keepalive`: unset or `true` is [`DEFAULT_TCP_KEEPALIVE`],
    /// `false` is off (`Some(None)`), a table overrides the default's
    /// timings one by one. Timings are whole seconds within the kernel's
    /// bounds: a sub-second value would be rounded by the kernel, so it is
    /// refused rather than silently changed.
    pub(super) fn keepalive(
        &mut self,
        key: &str,
        setting: Option<&KeepaliveSetting>,
    ) -> Option<Option<Keepalive>> {
        let section = match setting {
            None | Some(KeepaliveSetting::Switch(true)) => {
                return Some(Some(DEFAULT_TCP_KEEPALIVE));
            }
            Some(KeepaliveSetting::Switch(false)) => return Some(None),
            Some(KeepaliveSetting::Probes(section)) => section,
        };
        let KeepaliveSection {
            idle,
            interval,
            count,
        } = section;
        let idle = self.keepalive_seconds(&format!("{key}.idle"), idle, DEFAULT_TCP_KEEPALIVE.idle);
        let interval = self.keepalive_seconds(
            &format!("{key}.interval"),
            interval,
            DEFAULT_TCP_KEEPALIVE.interval,
        );
        let count = self.ranged(
            &format!("{key}.count"),
            *count,
            KEEPALIVE_COUNT_RANGE,
            i64::from(DEFAULT_TCP_KEEPALIVE.count),
        );
        Some(Some(Keepalive {
            idle: idle?,
            interval: interval?,
            count: count? as u32,
        }))
    }

    /// A keepalive timing: a duration of whole seconds, 1s..=32767s.
    pub(super) fn keepalive_seconds(
        &mut self,
        key: &str,
        value: &Option<String>,
        default: Duration,
    ) -> Option<Duration> {
        let d = self.duration(key, value, default)?;
        let text = value.as_deref().unwrap_or_default();
        if d.subsec_nanos() != 0 {
            self.problem(
                key,
                format!("{text:?} is not a whole number of seconds (the kernel counts keepalive time in seconds)"),
            );
            return None;
        }
        let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
        if !KEEPALIVE_SECS_RANGE.contains(&secs) {
            self.problem(
                key,
                format!(
                    "{text:?} is out of range ({}s..={}s)",
                    KEEPALIVE_SECS_RANGE.start(),
                    KEEPALIVE_SECS_RANGE.end()
                ),
            );
            return None;
        }
        Some(d)
    }
}
