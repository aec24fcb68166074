//! Turns the file model into the validated [`Config`], checking every
//! section and collecting *every* problem, each under its key, so that
//! `snirelay check` lists them all at once. One file per section:
//! [`global`], [`listener`] (with its PROXY protocol peers), [`limits`],
//! [`proxy_tlvs`] (the PROXY v2 TLV keys of backends and listeners),
//! [`route`] (its names file in [`sni_file`]), [`backend`], [`cluster`], [`admin`], [`log`]; [`values`] holds the
//! checks of values they share. Error messages name the key and the bad
//! value; tests pin them. What the file allows but is likely a mistake (a
//! backend sending PROXY headers to a QUIC server that may not read them)
//! is a warning instead ([`Config::warnings`]), which `check` prints and
//! the relay logs.
//!
//! Not here: the defaults and ranges (`config`, declared in [`crate::config::keys`])
//! or reading the file.

mod admin;
mod backend;
mod bandwidth;
mod cluster;
mod global;
mod hello_match;
mod limits;
mod listener;
mod log;
mod proxy_tlvs;
mod route;
mod sni_file;
mod source;
mod values;

use std::collections::HashSet;
use std::net::IpAddr;

use super::file::GlobalSection;
use super::file::{AddressEntry, AddressTable};
use super::file::{
    AdminSection, BackendSection, ClusterSection, CountOrOff, DurationOrOff, FileConfig,
    HealthSection, LimitsSection, ListenerSection, ProxyProtocolSection, ProxyTlvEntry,
};
use super::file::{HeaderFile, HeaderValueSetting};
use super::file::{KeepaliveSection, KeepaliveSetting};
use super::*;
use crate::wire::cidr::{Cidr, CidrSet};
use crate::wire::matcher::NameIndex;
use crate::wire::sni::{Pattern, PatternRef};

/// Collects problems while building the snapshot; each helper returns `None`
/// (after recording why) when its value is unusable.
#[derive(Default)]
pub(super) struct Checker {
    pub(super) problems: Vec<Problem>,
    /// What is allowed but likely wrong (`snirelay check` prints these;
    /// the relay logs them at start and at each reload).
    pub(super) warnings: Vec<Problem>,
    declared_backends: HashSet<String>,
    /// The backends a `protocol = "quic"` listener reaches (a route, its
    /// `no_sni` or `ech` fallback): where `max_datagram_size` means something.
    quic_backends: HashSet<String>,
    /// The configuration file's directory: a relative `token_file` is
    /// found from there.
    dir: PathBuf,
}

impl Checker {
    /// A checker for a file in `dir` (where relative paths are found).
    pub(super) fn new(dir: PathBuf) -> Checker {
        Checker {
            dir,
            ..Checker::default()
        }
    }

    pub(super) fn problem(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem {
            key: key.into(),
            message: message.into(),
        });
    }

    pub(super) fn warn(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.warnings.push(Problem {
            key: key.into(),
            message: message.into(),
        });
    }

    pub(super) fn config(&mut self, file: &FileConfig) -> Option<Config> {
        self.declared_backends = file.backends.keys().cloned().collect();
        let global = self.global(&file.global);

        let backends: BTreeMap<String, Arc<Backend>> = file
            .backends
            .iter()
            .filter_map(|(name, section)| {
                let backend = self.backend(name, section)?;
                Some((name.clone(), Arc::new(backend)))
            })
            .collect();
        for (name, section) in &file.backends {
            let local = section
                .cluster
                .as_ref()
                .and_then(|c| c.local_backend.as_ref());
            if let Some(local) = local
                && file
                    .backends
                    .get(local)
                    .is_some_and(|b| b.cluster.is_some())
            {
                self.problem(
                    format!("backend.{name}.cluster.local_backend"),
                    format!("{local:?} is itself a [cluster] backend; name one with fixed or resolved addresses"),
                );
            }
        }

        if file.listeners.is_empty() {
            self.problem("listener", "at least one [[listener]] is required");
        }
        let mut names = HashSet::new();
        let mut binds = HashSet::new();
        let mut listeners = Vec::new();
        for (index, section) in file.listeners.iter().enumerate() {
            let key = format!("listener[{index}]");
            if !names.insert(section.name.as_str()) {
                self.problem(
                    format!("{key}.name"),
                    format!("listener name {:?} is used twice", section.name),
                );
            }
            if section.name == keys::ALL_LISTENERS {
                self.problem(
                    format!("{key}.name"),
                    "\"*\" is not a listener name: a route's `listener = \"*\"` means every listener; choose another name",
                );
            }
            if let Some(mut listener) = self.listener(&key, section, &backends, &mut binds) {
                listener.splice = section.splice.unwrap_or(global.splice);
                // QUIC listeners (issue 18): their own fallbacks too.
                if let NoSni::Backend(backend) = &listener.no_sni {
                    self.quic_backend(
                        &format!("{key}.no_sni"),
                        "the listener's no_sni",
                        &listener,
                        &backend.clone(),
                        &backends,
                    );
                }
                if let EchPolicy::Backend(backend) = &listener.ech {
                    self.quic_backend(
                        &format!("{key}.ech"),
                        "the listener's ech",
                        &listener,
                        &backend.clone(),
                        &backends,
                    );
                }
                listeners.push(listener);
            }
        }
        self.routes(file, &mut listeners, &backends);
        for (name, backend) in &backends {
            if backend.max_datagram_size.is_some() && !self.quic_backends.contains(name) {
                self.problem(
                    format!("backend.{name}.max_datagram_size"),
                    "bounds the PROXY header over UDP, but no protocol = \"quic\" listener routes \
                     to this backend: a TCP connection's header has no datagram to fit",
                );
            }
            if backend.quic_reads_proxy_protocol && !self.quic_backends.contains(name) {
                self.problem(
                    format!("backend.{name}.quic_reads_proxy_protocol"),
                    "says the QUIC server reads PROXY headers over UDP, but no protocol = \"quic\" \
                     listener routes to this backend; leave it out",
                );
            }
        }
        for listener in &listeners {
            // A route dropped for its own problem (reported already) still names it.
            let named = file.routes.iter().any(|r| match &r.listener {
                Some(names) => names
                    .as_slice()
                    .iter()
                    .any(|n| n == &listener.name || n == keys::ALL_LISTENERS),
                None => file.listeners.len() == 1,
            });
            if !named && listener.routes.is_empty() && matches!(listener.no_sni, NoSni::Reject) {
                self.problem(
                    format!("listener {:?}", listener.name),
                    "no [[route]] names this listener, so it would refuse every connection",
                );
            }
        }
        let admin = match &file.admin {
            None => None,
            Some(section) => {
                // Named in the file, or given a name by the checker.
                let routes = file
                    .routes
                    .iter()
                    .filter_map(|r| r.name.as_deref())
                    .chain(
                        listeners
                            .iter()
                            .flat_map(|l| l.routes.iter().map(|r| r.name.as_str())),
                    )
                    .collect();
                Some(self.admin(section, &routes)?)
            }
        };
        let log = self.log(&file.log)?;
        Some(Config {
            global,
            listeners: listeners.into_iter().map(Arc::new).collect(),
            backends,
            admin,
            log,
            warnings: std::mem::take(&mut self.warnings),
        })
    }
}
