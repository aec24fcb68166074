//! The source table of the control API (in the manner of HAProxy's `show
//! table` and `clear table`):
//!
//! - `GET /sources?sort=open|rate|refused&limit=N&listener=NAME&route=NAME`:
//!   every listener's per-source admission table, and every route's with
//!   `[route.limits]` ([`crate::admission::SourceRow`]), one row per source key with
//!   its listener (and route, or `null`), open connections, attempts per
//!   second over the last [`crate::admission::RATE_WINDOW`], admitted attempts,
//!   refusals by reason and in all, and the age of its last attempt;
//!   highest first by `sort` (default `refused`), at most `limit` rows
//!   (default 100, at most [`MAX_LIMIT`]). `total` counts the rows before
//!   the limit.
//! - `DELETE /sources/{key}?listener=NAME&route=NAME`: clears that
//!   source's counters and its rate limiter's cell in every table (or the
//!   listener's, or the route's), so a
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
//! Not here: the tables themselves ([`crate::admission`]), authorization
//! ([`super::auth`]), the request's decoding ([`super::call`]) and
//! counting ([`super::control`]).

use std::cmp::Ordering;

use serde_json::{Value, json};

use std::sync::Arc;

use super::call::{Call, Refused, percent_decode, query_pairs};
use crate::admission::{Admission, REFUSAL_REASONS, SourceRow};
use crate::flow::generation::Generation;

/// A request this module refuses: bad parameters (400), or nothing by
/// that name (404).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum InvalidQuery {
    Bad(String),
    NotFound(String),
}

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
    /// `Some("")` never matches: a route is named.
    route: Option<String>,
}

/// One per-source table: its listener, its route (`None`: the listener's
/// own), and the admission state that holds it.
type PerSourceTable<'a> = (&'a str, Option<&'a str>, &'a Admission);

impl Query {
    fn selects(&self, (listener, route, _): &PerSourceTable<'_>) -> bool {
        self.listener.as_deref().is_none_or(|l| l == *listener)
            && self.route.as_deref().is_none_or(|r| Some(r) == *route)
    }
}

/// Every per-source table of `generations`, listeners first.
fn tables(
    generations: &[(String, std::sync::Arc<crate::flow::generation::Generation>)],
) -> Vec<PerSourceTable<'_>> {
    let mut tables: Vec<PerSourceTable<'_>> = Vec::new();
    for (listener, generation) in generations {
        tables.push((listener, None, &generation.admission));
        let mut routes: Vec<(&str, &Admission)> = generation.route_gates.sources().collect();
        routes.sort_by_key(|(name, _)| *name);
        tables.extend(
            routes
                .into_iter()
                .map(|(route, a)| (listener.as_str(), Some(route), a)),
        );
    }
    tables
}

/// The query's parameters, decoded ([`query_pairs`] decodes them).
fn query(params: &[(String, String)]) -> Result<Query, InvalidQuery> {
    let mut q = Query {
        sort: Sort::Refused,
        limit: DEFAULT_LIMIT,
        listener: None,
        route: None,
    };
    for (key, value) in params {
        let (key, value) = (key.as_str(), value.clone());
        match key {
            "sort" => {
                q.sort = match value.as_str() {
                    "open" => Sort::Open,
                    "rate" => Sort::Rate,
                    "refused" => Sort::Refused,
                    _ => {
                        return Err(InvalidQuery::Bad(format!(
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
                        InvalidQuery::Bad(format!(
                            "limit={value:?}: a number from 1 to {MAX_LIMIT}"
                        ))
                    })?;
            }
            "listener" => q.listener = Some(value),
            "route" => q.route = Some(value),
            _ => {
                return Err(InvalidQuery::Bad(format!(
                    "unknown parameter {key:?}: use sort, limit, listener, route"
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

fn row_json((listener, route): (&str, Option<&str>), row: &SourceRow) -> Value {
    let refused: serde_json::Map<String, Value> = REFUSAL_REASONS
        .iter()
        .zip(row.refused)
        .map(|(reason, n)| ((*reason).to_owned(), json!(n)))
        .collect();
    json!({
        "listener": listener,
        "route": route,
        "key": row.key.to_string(),
        "ja4": row.ja4,
        "open": row.open,
        "rate_per_second": (row.rate_per_second * 100.0).round() / 100.0,
        "admitted": row.admitted,
        "refused": refused,
        "refused_total": row.refused_total(),
        "last_seen_seconds_ago": row.last_seen_ago.as_secs_f64(),
    })
}

/// `GET /sources` over the listeners' `generations`, with the query's
/// `params`.
pub(crate) fn list(
    generations: &[(String, Arc<Generation>)],
    params: &[(String, String)],
) -> Result<Value, InvalidQuery> {
    let q = query(params)?;
    let tables = tables(generations);
    if let Some(name) = &q.listener
        && !tables.iter().any(|(l, _, _)| l == name)
    {
        return Err(InvalidQuery::NotFound(format!(
            "no listener is named {name:?}"
        )));
    }
    let mut rows: Vec<((&str, Option<&str>), SourceRow)> = Vec::new();
    for table in tables.iter().filter(|t| q.selects(t)) {
        let (listener, route, admission) = *table;
        rows.extend(
            admission
                .sources()
                .into_iter()
                .map(|row| ((listener, route), row)),
        );
    }
    let total = rows.len();
    rows.sort_by(|(wa, a), (wb, b)| order(q.sort, a, b).then_with(|| wa.cmp(wb)));
    rows.truncate(q.limit);
    let sources: Vec<Value> = rows.iter().map(|(w, row)| row_json(*w, row)).collect();
    Ok(json!({ "total": total, "sources": sources }))
}

/// `DELETE /sources/{key}` (`key` decoded) over the listeners'
/// `generations`; returns the answer and the tables cleared.
pub(crate) fn clear(
    generations: &[(String, Arc<Generation>)],
    key: &str,
    params: &[(String, String)],
) -> Result<(Value, Vec<String>), InvalidQuery> {
    let q = query(params)?;
    let mut cleared = Vec::new();
    for table in tables(generations).iter().filter(|t| q.selects(t)) {
        let (listener, route, admission) = *table;
        if admission.clear_source(key) {
            cleared.push(match route {
                Some(route) => format!("{listener}/{route}"),
                None => listener.to_owned(),
            });
        }
    }
    if cleared.is_empty() {
        return Err(InvalidQuery::NotFound(format!(
            "no source table holds {key:?}"
        )));
    }
    let answer = json!({ "key": key, "cleared": cleared.len(), "tables": cleared });
    Ok((answer, cleared))
}

fn sources_refused(invalid: InvalidQuery) -> Refused {
    match invalid {
        InvalidQuery::Bad(message) => Refused::bad(message),
        InvalidQuery::NotFound(message) => Refused::not_found(message),
    }
}

/// `GET /sources`, as a control handler.
pub(super) fn list_sources(call: &Call<'_>) -> Result<Value, Refused> {
    list(&call.state.generations(), &query_pairs(call.query)).map_err(sources_refused)
}

/// `DELETE /sources/{key}`, as a control handler.
pub(super) fn clear_source(call: &Call<'_>) -> Result<Value, Refused> {
    let key = percent_decode(call.segments[1]);
    let (answer, cleared) = clear(&call.state.generations(), &key, &query_pairs(call.query))
        .map_err(sources_refused)?;
    tracing::info!(who = call.who, key = %key, tables = %cleared.join(","), "source counters cleared");
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::PeerAddr;
    use crate::admission::Source;
    use crate::backend::Backends;
    use crate::config::Config;

    fn params(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[tokio::test]
    async fn a_route_s_table_is_listed_beside_its_listener_s_and_cleared_alone() {
        let config = Config::from_toml(
            r#"
[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]

[listener.limits]
connections_per_source = 5

[[route]]
name = "web"
sni = ["web.example.com"]
backend = "b"

[route.limits]
connections_per_source = 1

[backend.b]
addresses = ["127.0.0.1:9"]
"#,
            std::path::Path::new("sources.toml"),
        )
        .unwrap();
        let backends = Arc::new(Backends::start(&config.backends, None));
        let generation = Arc::new(Generation::first(
            config.listeners[0].clone(),
            &backends,
            &None,
        ));
        let source = Source::Peer(PeerAddr("127.0.0.2:1".parse().unwrap()));
        let _listener_slot = generation.admission.admit(source).unwrap();
        let gate = generation.route_gates.get("web").unwrap();
        let _route_slot = gate.admit(Some(source)).unwrap();
        assert!(
            gate.admit(Some(source)).is_err(),
            "one per source on the route"
        );
        let generations = vec![("tls".to_owned(), generation)];

        let all = list(&generations, &[]).unwrap();
        assert_eq!(all["total"], 2, "{all}");
        let first = &all["sources"][0];
        assert_eq!(
            (&first["route"], &first["key"]),
            (&json!("web"), &json!("127.0.0.2"))
        );
        assert_eq!(first["refused"]["limit_concurrent"], 1);
        assert_eq!(all["sources"][1]["route"], Value::Null);
        assert_eq!(all["sources"][1]["refused_total"], 0);

        let route_only = list(&generations, &params(&[("route", "web")])).unwrap();
        assert_eq!(route_only["total"], 1);
        assert_eq!(
            list(&generations, &params(&[("sort", "bytes")])).unwrap_err(),
            InvalidQuery::Bad("sort=\"bytes\": use open, rate or refused".to_owned())
        );
        assert!(matches!(
            list(&generations, &params(&[("listener", "nope")])),
            Err(InvalidQuery::NotFound(_))
        ));

        let (_, cleared) = clear(&generations, "127.0.0.2", &params(&[("route", "web")])).unwrap();
        assert_eq!(cleared, ["tls/web"]);
        let after = list(&generations, &params(&[("route", "web")])).unwrap();
        assert_eq!(after["sources"][0]["refused_total"], 0);
        assert_eq!(
            after["sources"][0]["open"], 1,
            "its connection stays counted"
        );
        assert!(matches!(
            clear(&generations, "192.0.2.1", &[]),
            Err(InvalidQuery::NotFound(_))
        ));
        backends.stop();
    }
}
