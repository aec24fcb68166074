//! The backends' control endpoints:
//!
//! - `GET /backends`: every backend with its addresses, each with the
//!   operator's state, health, open connections and the age of its last
//!   failure. A control endpoint (it names origin addresses).
//! - `POST /backends/{backend}/addresses/{addr}/state` with `{"state":
//!   "ready" | "drain" | "maint"}`: sets the operator's state of one
//!   address (`addr` as `IP:port`, IPv6 in brackets, which may be
//!   percent-encoded). The answer holds the previous and the new state;
//!   `maint` also closes the address's open connections over
//!   `drain_timeout`. Every change is logged at info with `who`.
//!
//! Not here: authorization, the method check and counting
//! ([`super::control`]); what a state does to connections
//! ([`crate::backend::plan`] leaves drained and maintained addresses out
//! of new plans).

use std::net::SocketAddr;

use serde::Deserialize;
use serde_json::{Value, json};

use super::call::{Call, Refused, percent_decode};
use crate::backend::{AddressSource, AddressState, BackendRuntime};
use crate::flow::registry;
use crate::metrics;

/// `GET /backends`.
pub(super) fn backends(call: &Call<'_>) -> Result<Value, Refused> {
    let backends = call.state.backends();
    let list: Vec<Value> = backends
        .sorted()
        .into_iter()
        .map(|(name, runtime)| {
            let source = match &runtime.config.source {
                AddressSource::Fixed => "fixed",
                AddressSource::Dns(_) => "dns",
                AddressSource::Cluster(_) => "cluster",
            };
            let addresses: Vec<Value> = runtime
                .current()
                .set
                .iter()
                .map(|e| {
                    json!({
                        "address": e.addr.to_string(),
                        "state": e.state.operator().as_str(),
                        "health": if e.state.is_up() { "up" } else { "down" },
                        "open_connections": e.state.active(),
                        "last_failure_seconds_ago": e.state.last_failure_age().map(|d| d.as_secs_f64()),
                    })
                })
                .collect();
            json!({ "name": name, "source": source, "addresses": addresses })
        })
        .collect();
    Ok(json!({ "backends": list }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StateBody {
    state: AddressState,
}

/// `POST /backends/{backend}/addresses/{addr}/state`.
pub(super) fn set_address_state(call: &Call<'_>) -> Result<Value, Refused> {
    let (state, body, who) = (call.state, &call.body, call.who);
    let (name, addr_text) = (call.segments[1], percent_decode(call.segments[3]));
    let addr: SocketAddr = addr_text.parse().map_err(|_| {
        Refused::bad(format!(
            "{addr_text:?} is not an IP:port address (IPv6 in brackets: [::1]:443)"
        ))
    })?;
    let wanted: StateBody = serde_json::from_slice(body).map_err(|e| {
        Refused::bad(format!(
            "the body must be {{\"state\": \"ready\" | \"drain\" | \"maint\"}}: {e}"
        ))
    })?;
    let backends = state.backends();
    let runtime: &BackendRuntime = backends
        .get(name)
        .ok_or_else(|| Refused::not_found(format!("no backend {name:?}")))?;
    if runtime.cluster.is_some() {
        return Err(Refused::bad(format!(
            "backend {name:?} is cluster-resolved: its addresses are per site and have no state"
        )));
    }
    let set = runtime.current().set;
    let endpoint = set
        .iter()
        .find(|e| e.addr == addr)
        .ok_or_else(|| Refused::not_found(format!("backend {name:?} has no address {addr}")))?;
    let previous = endpoint.state.set_operator(wanted.state);
    // Set first, so no new connection lands on the address after the
    // parts are taken.
    let closing = if wanted.state == AddressState::Maint {
        endpoint.state.maint(state.config().0.global.drain_timeout)
    } else {
        0
    };
    if closing > 0 {
        // The relays read their fired parts when woken.
        registry::drains_fired();
    }
    metrics::metrics().backend_address_state(
        name,
        addr,
        wanted.state.as_str(),
        &AddressState::ALL.map(AddressState::as_str),
    );
    tracing::info!(
        who,
        backend = name,
        address = %addr,
        state = wanted.state.as_str(),
        previous = previous.as_str(),
        open = endpoint.state.active(),
        closing,
        "backend address state set"
    );
    Ok(json!({
        "backend": name,
        "address": addr.to_string(),
        "state": wanted.state.as_str(),
        "previous": previous.as_str(),
        "open_connections": endpoint.state.active(),
    }))
}
