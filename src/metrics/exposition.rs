//! The Prometheus text exposition `/metrics` serves
//! ([`Metrics::render`]), with the process gauges (open and maximum
//! descriptors, resident memory) read from /proc/self at that moment, and
//! only then.
//!
//! Not here: the HTTP side ([`crate::admin`]); the families and their
//! registration ([`super::registry`]).

use super::registry::Metrics;

impl Metrics {
    /// The Prometheus text exposition, with process gauges read now.
    pub(crate) fn render(&self) -> String {
        self.sample_process();
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }

    fn sample_process(&self) {
        if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
            // Less the descriptor read_dir itself holds open.
            self.open_fds.set(dir.count().saturating_sub(1) as i64);
        }
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        if let Some(kb) = proc_field(&status, "VmRSS:") {
            self.resident_memory.set(kb * 1024);
        }
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
        if let Some(soft) = proc_field(&limits, "Max open files") {
            self.max_fds.set(soft);
        }
    }
}

/// The first number after `prefix` on the line starting with it.
fn proc_field(text: &str, prefix: &str) -> Option<i64> {
    text.lines()
        .find_map(|line| line.strip_prefix(prefix))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_fields_parse() {
        assert_eq!(
            proc_field("Name:\tx\nVmRSS:\t   5120 kB\n", "VmRSS:"),
            Some(5120)
        );
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \nMax open files            1024                 20000                files     \n";
        assert_eq!(proc_field(limits, "Max open files"), Some(1024));
    }
}
