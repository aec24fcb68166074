//! The source table of the control API (in the manner of HAProxy's `show
//! table` and `clear table`):
//!
//! - `GET /sources?sort=open|rate|refused&limit=N&listener=NAME`: every
//!   listener's per-source admission table (`admission::SourceRow`), one
//!   row per source key with its listener, open connections, attempts per
//!   second over the last `admission::RATE_WINDOW`, admitted attempts,
//!   refusals by reason and in all, and the age of its last attempt;
//!   highest first by `sort` (default `refused`), at most `limit` rows
//!   (default 100, at most [`MAX_LIMIT`]). `total` counts the rows before
//!   the limit.
//! - `DELETE /sources/{key}?listener=NAME`: clears that source's counters
//!   and its rate limiter's cell in every listener's table (or one), so a
//!   rate-limited source is let in again at once; its open connections stay
//!   counted. 404 when no table holds the key.
//!
//! The key is the string a row shows (`key`): today the source address cut
//! to the listener's prefix; a row never says what kind of key it is
//! beyond that string.
//!
//! Cost: the table is read under its own lock (the lock every accept on
//! that listener takes), one row copied per source, so a listing holds
//! the lock for about a microsecond per thousand sources; nothing is kept
//! between requests. A listener without per-source counting limits keeps
//! no table and lists nothing.
//!
//! Not here: the tables themselves (`admission`), authorization
//! (`control`, `auth`).

use std::cmp::Ordering;

use serde_json::{Value, json};

use super::control::{Call, Refused, percent_decode};
use crate::admission::{REFUSAL_REASONS, SourceRow};

/// Most rows one listing returns.
pub(crate) const MAX_LIMIT: usize = 10_000;
/// Rows a listing returns without `limit`.
pub(crate) const DEFAULT_LIMIT: usize = 100;

/// What `GET /sources` orders by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sort {
    Open,
    Rate,
    Refused,
}

struct Query {
    sort: Sort,
    limit: usize,
    listener: Option<String>,
}

fn query(text: Option<&str>) -> Result<Query, Refused> {
    let mut q = Query {
        sort: Sort::Refused,
        limit: DEFAULT_LIMIT,
        listener: None,
    };
    for pair in text.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, raw) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_decode(&raw.replace('+', " "));
        match key {
            "sort" => {
                q.sort = match value.as_str() {
                    "open" => Sort::Open,
                    "rate" => Sort::Rate,
                    "refused" => Sort::Refused,
                    _ => {
                        return Err(Refused::bad(format!(
                            "sort={value:?}: use open, rate or refused"
                        )));
                    }
                };
            }
            "limit" => {
                q.limit = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| {
                        Refused::bad(format!("limit={value:?}: a number from 1 to {MAX_LIMIT}"))
                    })?;
            }
            "listener" => q.listener = Some(value),
            _ => {
                return Err(Refused::bad(format!(
                    "unknown parameter {key:?}: use sort, limit, listener"
                )));
            }
        }
    }
    Ok(q)
}

/// Highest first by `sort`, then most recently seen, then by key.
fn order(sort: Sort, a: &SourceRow, b: &SourceRow) -> Ordering {
    let by = match sort {
        Sort::Open => b.open.cmp(&a.open),
        Sort::Rate => b.rate_per_second.total_cmp(&a.rate_per_second),
        Sort::Refused => b.refused_total().cmp(&a.refused_total()),
    };
    by.then(a.last_seen_ago.cmp(&b.last_seen_ago))
        .then_with(|| a.key.to_string().cmp(&b.key.to_string()))
}

fn row_json(listener: &str, row: &SourceRow) -> Value {
    let refused: serde_json::Map<String, Value> = REFUSAL_REASONS
        .iter()
        .zip(row.refused)
        .map(|(reason, n)| ((*reason).to_owned(), json!(n)))
        .collect();
    json!({
        "listener": listener,
        "key": row.key.to_string(),
        "open": row.open,
        "rate_per_second": (row.rate_per_second * 100.0).round() / 100.0,
        "admitted": row.admitted,
        "refused": refused,
        "refused_total": row.refused_total(),
        "last_seen_seconds_ago": row.last_seen_ago.as_secs_f64(),
    })
}

/// `GET /sources`.
pub(crate) fn list(call: &Call<'_>) -> Result<Value, Refused> {
    let q = query(call.query)?;
    let listeners = call.state.admissions();
    if let Some(name) = &q.listener
        && !listeners.iter().any(|(l, _)| l == name)
    {
        return Err(Refused::not_found(format!("no listener is named {name:?}")));
    }
    let mut rows: Vec<(String, SourceRow)> = Vec::new();
    for (listener, admission) in &listeners {
        if q.listener.as_ref().is_some_and(|name| name != listener) {
            continue;
        }
        rows.extend(
            admission
                .sources()
                .into_iter()
                .map(|row| (listener.clone(), row)),
        );
    }
    let total = rows.len();
    rows.sort_by(|(la, a), (lb, b)| order(q.sort, a, b).then_with(|| la.cmp(lb)));
    rows.truncate(q.limit);
    let sources: Vec<Value> = rows.iter().map(|(l, row)| row_json(l, row)).collect();
    Ok(json!({ "total": total, "sources": sources }))
}

/// `DELETE /sources/{key}`.
pub(crate) fn clear(call: &Call<'_>) -> Result<Value, Refused> {
    let key = percent_decode(call.segments[1]);
    let q = query(call.query)?;
    let mut cleared = Vec::new();
    for (listener, admission) in call.state.admissions() {
        if q.listener.as_ref().is_some_and(|name| name != &listener) {
            continue;
        }
        if admission.clear_source(&key) {
            cleared.push(listener);
        }
    }
    if cleared.is_empty() {
        return Err(Refused::not_found(format!("no source table holds {key:?}")));
    }
    tracing::info!(who = call.who, key = %key, listeners = %cleared.join(","), "source counters cleared");
    Ok(json!({ "key": key, "cleared": cleared.len(), "listeners": cleared }))
}
