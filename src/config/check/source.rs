//! Checks `source` (a backend's, or an address entry's own): `"client"`,
//! or a table of local addresses (IPv4 and IPv6, each once) with an
//! optional `ports = "LOW-HIGH"`; and that each fixed address has a
//! source of its family.
//!
//! Not here: whether this host has the addresses or the capability
//! `"client"` needs ([`crate::backend::egress::probe`], at start: `check` may run
//! elsewhere, unprivileged), or binding.

use super::*;
use crate::config::file::{EgressSourceTable, SourceSetting};

impl Checker {
    /// `source` at `key`: `None` after a problem, `Some(None)` when unset.
    pub(super) fn egress(
        &mut self,
        key: &str,
        setting: Option<&SourceSetting>,
    ) -> Option<Option<Egress>> {
        let Some(setting) = setting else {
            return Some(None);
        };
        let table = match setting {
            SourceSetting::Word(word) if word == "client" => return Some(Some(Egress::Client)),
            SourceSetting::Word(word) => {
                self.problem(
                    key,
                    format!("{word:?} is not \"client\" or a table {{ addresses, ports }}"),
                );
                return None;
            }
            SourceSetting::Table(table) => table,
        };
        let EgressSourceTable { addresses, ports } = table;
        let Some(texts) = addresses else {
            self.problem(
                format!("{key}.addresses"),
                "is required in the table form (the local addresses to connect from)",
            );
            return None;
        };
        if texts.is_empty() {
            self.problem(
                format!("{key}.addresses"),
                "at least one address is required",
            );
            return None;
        }
        let mut ok = true;
        let mut ips: Vec<IpAddr> = Vec::with_capacity(texts.len());
        for (i, text) in texts.iter().enumerate() {
            let at = format!("{key}.addresses[{i}]");
            match text.parse::<IpAddr>() {
                Ok(ip) if ip.is_unspecified() || ip.is_multicast() => {
                    self.problem(
                        at,
                        format!("{text:?} is not one local address (unspecified or multicast)"),
                    );
                    ok = false;
                }
                Ok(ip) if ips.contains(&ip) => {
                    self.problem(at, format!("{text:?} is listed twice"));
                    ok = false;
                }
                Ok(ip) => ips.push(ip),
                Err(_) => {
                    self.problem(
                        at,
                        format!("{text:?} is not an IP address (no port: `ports` sets the range)"),
                    );
                    ok = false;
                }
            }
        }
        let ports = match ports.as_deref().map(|text| (text, port_range(text))) {
            None => None,
            Some((_, Ok(range))) => Some(range),
            Some((text, Err(why))) => {
                self.problem(format!("{key}.ports"), format!("{text:?} {why}"));
                ok = false;
                None
            }
        };
        ok.then_some(Some(Egress::Addresses(SourceAddresses {
            addresses: ips,
            ports,
        })))
    }

    /// Each fixed address must have a source of its family (`key` is the
    /// backend's).
    pub(super) fn egress_families(&mut self, key: &str, egress: &Egress, members: &[Member]) {
        for (i, member) in members.iter().enumerate() {
            let (own, source_key) = match &member.source {
                Some(own) => (own, format!("{key}.addresses[{i}].source")),
                None => (egress, format!("{key}.source")),
            };
            if !own.can_reach(&member.addr) {
                self.problem(
                    source_key,
                    format!(
                        "has no {} address, so {} could never be reached",
                        if member.addr.is_ipv4() {
                            "IPv4"
                        } else {
                            "IPv6"
                        },
                        member.addr
                    ),
                );
            }
        }
    }
}

/// `"LOW-HIGH"`, 1 ≤ LOW ≤ HIGH ≤ 65535.
fn port_range(text: &str) -> Result<(u16, u16), &'static str> {
    let (low, high) = text
        .split_once('-')
        .ok_or("is not a port range \"LOW-HIGH\" (e.g. \"1024-65535\")")?;
    let port = |p: &str| p.trim().parse::<u16>().ok().filter(|&p| p != 0);
    match (port(low), port(high)) {
        (Some(low), Some(high)) if low <= high => Ok((low, high)),
        (Some(_), Some(_)) => Err("is reversed: LOW must not be above HIGH"),
        _ => Err("is not a port range \"LOW-HIGH\" of ports 1 to 65535"),
    }
}
