//! What `/readyz` says beyond "listening": with `[admin] ready_requires`,
//! whether each listed backend (or the backend of each listed route, or,
//! for `any_backend`, at least one backend) has a usable address now.
//!
//! A backend has a usable address when one address of its current set is
//! up (neither active nor passive health has it down) and selectable (the
//! operator has not drained it or put it in maintenance). It has none
//! when its DNS name has not resolved yet (a failed re-resolution keeps
//! the last good set, which still counts), or, for a cluster backend,
//! when its lookups fail with no answer left to serve
//! ([`crate::backend::cluster::Cache::failing`]). Each down backend is named with
//! why: `unresolved`, `no_address`, `health_down`, `drained` or
//! `lookup_failing`.
//!
//! Judged on request from the backends' atomics (no task, no cache), so
//! `/readyz` follows a health change at the next probe: a backend goes
//! down within its `fall` checks and comes back within `rise`. The status
//! page and `GET /status` show the same verdict.
//!
//! Not here: health checking ([`crate::backend::health`]), or the listening flag
//! ([`super::state::Readiness`], flipped by the server).

use serde_json::{Value, json};

use crate::backend::{AddressSource, BackendRuntime, Backends};
use crate::config::{Config, ReadyRequirement};

/// One requirement that is not met: what was required, and which backend
/// has no usable address, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Down {
    /// The requirement as written (`backend:b`, `route:web`, `any_backend`).
    pub requirement: String,
    /// The backend without a usable address (`None` for `any_backend`
    /// when no backend is configured at all).
    pub backend: Option<String>,
    /// Why, one word (see the module header).
    pub why: &'static str,
}

/// `/readyz`'s verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReadyVerdict {
    /// The listeners are bound and the relay is not draining.
    pub listening: bool,
    /// The requirements not met (empty when every one is, or none is set).
    pub down: Vec<Down>,
}

impl ReadyVerdict {
    pub(crate) fn ready(&self) -> bool {
        self.listening && self.down.is_empty()
    }

    /// The JSON body of `/readyz` and the `ready` part of `/status`.
    pub(crate) fn to_json(&self, requires: &[ReadyRequirement]) -> Value {
        let down: Vec<Value> = self
            .down
            .iter()
            .map(|d| json!({ "requirement": d.requirement, "backend": d.backend, "why": d.why }))
            .collect();
        json!({
            "ready": self.ready(),
            "listening": self.listening,
            "requires": requires.iter().map(|r| r.to_string()).collect::<Vec<_>>(),
            "down": down,
        })
    }
}

/// Judges `requires` against the backends in force.
pub(crate) fn judge(listening: bool, config: &Config, backends: &Backends) -> ReadyVerdict {
    let requires = config
        .admin
        .as_ref()
        .map_or(&[][..], |a| &a.ready_requires[..]);
    let mut down = Vec::new();
    for requirement in requires {
        let text = requirement.to_string();
        let mut named = |name: &str| {
            let why = match backends.get(name) {
                Some(runtime) => why_down(runtime),
                // Checked at load; a backend a reload removed is down.
                None => Some("no_address"),
            };
            if let Some(why) = why {
                down.push(Down {
                    requirement: text.clone(),
                    backend: Some(name.to_owned()),
                    why,
                });
            }
        };
        match requirement {
            ReadyRequirement::Backend(name) => named(name),
            ReadyRequirement::Route(route) => {
                let mut seen: Vec<&str> = Vec::new();
                for listener in &config.listeners {
                    for r in listener.routes.iter().filter(|r| &r.name == route) {
                        if !seen.contains(&r.backend.name.as_str()) {
                            seen.push(&r.backend.name);
                            named(&r.backend.name);
                        }
                    }
                }
            }
            ReadyRequirement::AnyBackend => {
                let all = backends.sorted();
                if !all.iter().any(|(_, runtime)| why_down(runtime).is_none()) {
                    down.push(Down {
                        requirement: text,
                        backend: None,
                        why: "no_usable_backend",
                    });
                }
            }
        }
    }
    ReadyVerdict { listening, down }
}

/// Why `runtime` has no usable address now; `None` when it has one.
pub(crate) fn why_down(runtime: &BackendRuntime) -> Option<&'static str> {
    if let AddressSource::Cluster(_) = &runtime.config.source {
        // Addresses come per name; only failing lookups say it is down.
        return runtime
            .cluster
            .as_ref()
            .is_some_and(|c| c.failing())
            .then_some("lookup_failing");
    }
    let resolved = runtime.current();
    if !resolved.known {
        return Some("unresolved");
    }
    if resolved.set.is_empty() {
        return Some("no_address");
    }
    let selectable = resolved.set.iter().any(|e| e.state.selectable());
    if !selectable {
        return Some("drained");
    }
    let usable = resolved
        .set
        .iter()
        .any(|e| e.state.selectable() && e.state.is_up());
    (!usable).then_some("health_down")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backends;

    fn config(requires: &str) -> Config {
        Config::from_toml(
            &format!(
                r#"
[admin]
listen = "127.0.0.1:0"
ready_requires = [{requires}]

[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]

[[route]]
name = "web"
sni = ["web.example.com"]
backend = "fixed"

[[route]]
name = "named"
sni = ["named.example.com"]
backend = "named"

[backend.fixed]
addresses = ["127.0.0.1:9", "127.0.0.1:10"]

[backend.named]
resolve = "origin.invalid:443"
"#
            ),
            std::path::Path::new("ready.toml"),
        )
        .unwrap()
    }

    fn verdict(
        config: &Config,
        backends: &Backends,
    ) -> Vec<(String, Option<String>, &'static str)> {
        judge(true, config, backends)
            .down
            .into_iter()
            .map(|d| (d.requirement, d.backend, d.why))
            .collect()
    }

    #[tokio::test]
    async fn each_requirement_names_its_backend_and_why() {
        let config = config(r#""route:web", "backend:named", "any_backend""#);
        // The DNS backend has no answer yet (`.invalid` never resolves).
        let backends = Backends::start(&config.backends, None);
        let named = Some("named".to_owned());
        assert_eq!(
            verdict(&config, &backends),
            [("backend:named".to_owned(), named.clone(), "unresolved")],
            "route:web holds, and so does any_backend"
        );
        let fixed = backends.get("fixed").unwrap().current().set;
        fixed[0].state.set_checked_down(true);
        assert!(
            why_down(backends.get("fixed").unwrap()).is_none(),
            "one address is up"
        );
        fixed[1]
            .state
            .set_operator(crate::backend::AddressState::Drain);
        let web = Some("fixed".to_owned());
        assert_eq!(
            verdict(&config, &backends),
            [
                ("route:web".to_owned(), web.clone(), "health_down"),
                ("backend:named".to_owned(), named.clone(), "unresolved"),
                ("any_backend".to_owned(), None, "no_usable_backend"),
            ]
        );
        fixed[0]
            .state
            .set_operator(crate::backend::AddressState::Maint);
        assert_eq!(verdict(&config, &backends)[0].2, "drained");
        // An answer for the DNS name: it is usable.
        backends
            .get("named")
            .unwrap()
            .publish(&["127.0.0.1:443".parse().unwrap()]);
        assert_eq!(verdict(&config, &backends).len(), 1);
        assert!(!judge(false, &config, &backends).ready(), "not listening");
        backends.stop();
    }
}
