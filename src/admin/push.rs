//! `POST /update-local-snis` with `{"fullDomains": ["name", ...]}` (the
//! path and body Pangolin pushes to Gerbil): replaces the pushed local
//! names ([`crate::backend::local_names`]), which cluster backends send to
//! their `local_backend` without a lookup; saves them to `[admin]
//! local_names_file` first when set (a write that fails changes nothing:
//! 500); drops the cached cluster answers of every name that changed;
//! closes the connections of names no longer local that were relaying
//! to a `local_backend` at moments spread over `[admin]
//! moved_close_window` (reason `moved`). Names that are not host names
//! are ignored and listed in the answer. Its body may be up to
//! [`super::call::MAX_LOCAL_NAMES_BODY_BYTES`]. Answers `{"status": "Local
//! SNIs updated successfully", ...}` as Gerbil does, with counts. A push
//! that is applied is logged at info with its source (`admin.peer`) and how
//! it was let in (`authenticated`).
//!
//! Not here: who may push (a token, or a source in `[admin]
//! push_unauthenticated_from`: [`super::auth`]), the push's counting and
//! its refusals' log lines ([`super::control`]), or the set of names and
//! its file ([`crate::backend::local_names`]).

use bytes::Bytes;
use hyper::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::auth::Authorized;
use super::call::{Call, Refused};
use super::peer::AdminPeer;
use super::state::AdminState;
use crate::backend::local_names;
use crate::config::DEFAULT_MOVED_CLOSE_WINDOW;
use crate::flow::registry;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct LocalNamesBody {
    full_domains: Vec<String>,
}

/// `POST /update-local-snis`: never called (see [`push_local_names`]);
/// present so the route table names the endpoint like the others.
pub(super) fn update_local_snis(_call: &Call<'_>) -> Result<Value, Refused> {
    unreachable!("POST /update-local-snis is answered by `push_local_names`")
}

/// `POST /update-local-snis` (counted by [`super::control::respond`] in
/// `snirelay_local_name_pushes_total` too), run off the runtime's worker
/// threads: parsing and normalising 20,000 names and building the new set
/// takes about 13 ms (`cargo bench --bench local_names`), and the state
/// file is written and fsync'd; on a relay with `threads = 1` that would
/// be time no connection is served.
pub(super) async fn push_local_names(
    body: Bytes,
    state: &AdminState,
    who: &str,
    peer: &AdminPeer,
    admitted: Authorized,
) -> Result<Value, Refused> {
    let config = state.config().0;
    let backends = state.backends();
    let pusher = Pusher {
        who: who.to_owned(),
        peer: peer.to_string(),
        admitted,
    };
    tokio::task::spawn_blocking(move || apply_local_names(&body, &config, &backends, &pusher))
        .await
        .unwrap_or_else(|e| {
            Err(Refused::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "error",
                format!("the push failed: {e}"),
            ))
        })
}

/// Who pushed, for the push's log lines.
struct Pusher {
    /// The token's name, the Unix peer, or `allowlisted:IP`.
    who: String,
    /// The source address (or the Unix peer's credentials).
    peer: String,
    admitted: Authorized,
}

fn apply_local_names(
    body: &[u8],
    config: &crate::config::Config,
    backends: &crate::backend::Backends,
    pusher: &Pusher,
) -> Result<Value, Refused> {
    let who = pusher.who.as_str();
    let body: LocalNamesBody = serde_json::from_slice(body).map_err(|e| {
        Refused::bad(format!(
            "the body must be {{\"fullDomains\": [\"name\", ...]}}: {e}"
        ))
    })?;
    let (names, ignored) = local_names::normalise(&body.full_domains);
    let admin = config.admin.as_ref();
    let window = admin.map_or(DEFAULT_MOVED_CLOSE_WINDOW, |a| a.moved_close_window);
    let file = admin.and_then(|a| a.local_names_file.as_deref());
    // Written first: a push that cannot be kept must change nothing.
    let change = local_names::push(names, file).map_err(|e| {
        Refused::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "error",
            format!(
                "cannot write {}: {e}; nothing changed",
                file.map(|p| p.display().to_string()).unwrap_or_default()
            ),
        )
    })?;
    // Every changed name's cached answer goes: a name no longer local is
    // looked up afresh, and a name now local must not find an old answer
    // if it leaves again.
    let changed = || change.added.iter().chain(&change.removed).map(|n| &**n);
    let dropped: usize = backends
        .sorted()
        .iter()
        .filter_map(|(_, runtime)| runtime.cluster.as_ref())
        .map(|cache| cache.forget(changed()))
        .sum();
    // A name that left the pushed set but is in a `local_overrides` still
    // goes where it went: its connections stay.
    let closing = registry::move_out(&change.removed, window, |backend, sni| {
        backends
            .get(backend)
            .and_then(|runtime| runtime.cluster.as_ref())
            .is_some_and(|cache| cache.is_local_name(sni))
    });
    if !ignored.is_empty() {
        tracing::warn!(who, ignored = ?ignored, "pushed names that are not host names were ignored");
    }
    tracing::info!(
        who,
        admin.peer = %pusher.peer,
        authenticated = pusher.admitted.as_str(),
        local_names = change.len,
        added = change.added.len(),
        removed = change.removed.len(),
        cached_answers_dropped = dropped,
        closing,
        window = %humantime::format_duration(window),
        "local names pushed"
    );
    Ok(json!({
        "status": "Local SNIs updated successfully",
        "local_names": change.len,
        "added": change.added.len(),
        "removed": change.removed.len(),
        "cached_answers_dropped": dropped,
        "closing": closing,
        "ignored": ignored,
    }))
}
