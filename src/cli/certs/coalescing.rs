//! The coalescing risk `snirelay certs` names ([`coalescing()`]): a
//! certificate presented for a name of one route that also covers a name
//! the same listener routes elsewhere (another backend, or another place a
//! cluster's lookup sends it), where the backend selected a protocol whose
//! connections browsers reuse across names (`h2`, `h3`); and the line that
//! says so, with the fixes.
//!
//! Not here: learning the certificates, or the rows and report
//! ([`super`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;

use serde::Serialize;

use super::{Row, WILDCARD_PROBE_LABEL, san_covers};
use crate::config::{CoalescingRisk, Config, Listener};
use crate::wire::sni::{PatternRef, Sni};

/// A certificate presented for a name of one route that also covers a
/// name the same listener routes to another backend, where the backend
/// selected a protocol whose connections browsers reuse across names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Coalescing {
    /// `[global] coalescing_risk`: a warning or an error.
    #[serde(serialize_with = "level_name")]
    pub level: CoalescingRisk,
    pub listener: String,
    /// The route, backend and name whose certificate covers too much.
    pub route: String,
    pub backend: String,
    pub name: String,
    /// What that backend selected (`h2`, or over QUIC `h3`).
    pub alpn: String,
    /// The route and backend the covered names belong to.
    pub other_route: String,
    pub other_backend: String,
    /// The first covered name (for a `*.suffix` route, the name below it).
    pub covered_name: String,
    /// How many names of `other_route` the certificate covers.
    pub covered_names: usize,
    /// The line printed: the risk and its fixes.
    pub message: String,
}

fn level_name<S: serde::Serializer>(level: &CoalescingRisk, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(match level {
        CoalescingRisk::Warn => "warning",
        CoalescingRisk::Error => "error",
    })
}

/// The protocols whose connections a browser reuses for another name the
/// certificate covers: HTTP/2 (RFC 9113 §9.1.1) and HTTP/3 (RFC 9114
/// §3.3), learnt over TCP and over QUIC.
const REUSED_ALPN: [&str; 2] = ["h2", "h3"];

/// Every coalescing risk `rows` show, one per (route, other route) pair,
/// in row order. Pure: reads the listeners' name tables only.
pub(crate) fn coalescing(config: &Config, rows: &[Row]) -> Vec<Coalescing> {
    type Pair<'a> = (&'a str, &'a str, String, String, String);
    let mut found: BTreeMap<Pair<'_>, (usize, &Row, &str, BTreeSet<String>)> = BTreeMap::new();
    let mut below: HashMap<&str, HashMap<&str, Vec<&str>>> = HashMap::new();
    for (order, row) in rows.iter().enumerate() {
        let (Some(certificate), Some(alpn)) = (&row.certificate, &row.alpn) else {
            continue;
        };
        if !REUSED_ALPN.contains(&alpn.as_str()) {
            continue;
        }
        let Some(listener) = config.listener(&row.listener) else {
            continue;
        };
        let exact_below = below
            .entry(listener.name.as_str())
            .or_insert_with(|| exact_names_by_parent(listener));
        for san in &certificate.names {
            // (name, whether it is made up to stand for "any name below").
            let candidates: Vec<(String, bool)> = match san.strip_prefix("*.") {
                Some(suffix) => exact_below
                    .get(suffix)
                    .into_iter()
                    .flatten()
                    .map(|n| ((*n).to_owned(), false))
                    .chain([(format!("{WILDCARD_PROBE_LABEL}.{suffix}"), true)])
                    .collect(),
                None => vec![(san.clone(), false)],
            };
            for (candidate, synthetic) in candidates {
                if !san_covers(san, &candidate) {
                    continue;
                }
                for other in routes_of(listener, &candidate, synthetic) {
                    // One backend: a risk only where it is a cluster whose
                    // lookup sends the two names to different places.
                    let (backend, other_backend) = if other.backend.name == row.backend {
                        match cluster_split(config, rows, row, &candidate) {
                            Some(split) => split,
                            None => continue,
                        }
                    } else {
                        (row.backend.clone(), other.backend.name.clone())
                    };
                    let key = (
                        row.listener.as_str(),
                        row.route.as_str(),
                        backend,
                        other.name.clone(),
                        other_backend,
                    );
                    let entry = found
                        .entry(key)
                        .or_insert_with(|| (order, row, alpn.as_str(), BTreeSet::new()));
                    entry.3.insert(candidate.clone());
                }
            }
        }
    }
    let mut risks: Vec<(usize, Coalescing)> = found
        .into_iter()
        .map(
            |((_, _, backend, other_route, other_backend), (order, row, alpn, covered))| {
                let covered_name = covered.first().cloned().unwrap_or_default();
                let risk = Coalescing {
                    level: config.global.coalescing_risk,
                    listener: row.listener.clone(),
                    route: row.route.clone(),
                    backend,
                    name: row.name.clone(),
                    alpn: alpn.to_owned(),
                    other_route,
                    other_backend,
                    covered_name,
                    covered_names: covered.len(),
                    message: String::new(),
                };
                (
                    order,
                    Coalescing {
                        message: risk_message(&risk),
                        ..risk
                    },
                )
            },
        )
        .collect();
    risks.sort_by_key(|(order, _)| *order);
    risks.into_iter().map(|(_, risk)| risk).collect()
}

/// The line that names a risk and its fixes.
fn risk_message(risk: &Coalescing) -> String {
    let Coalescing {
        level,
        listener,
        route,
        backend,
        name,
        alpn,
        other_route,
        other_backend,
        covered_name,
        covered_names,
        ..
    } = risk;
    let level = match level {
        CoalescingRisk::Warn => "warning",
        CoalescingRisk::Error => "error",
    };
    let more = match covered_names - 1 {
        0 => String::new(),
        n => format!(" and {n} more name(s)"),
    };
    format!(
        "{level}: coalescing risk on listener {listener}: the certificate backend {backend} \
         presents for {name} (route {route}) also covers {covered_name}{more} of route \
         {other_route} (backend {other_backend}), and backend {backend} selects {alpn}: a \
         browser may reuse its connection to {name} for {covered_name}, and the relay, which \
         routes by the hello alone, never sees that name, so those requests reach backend \
         {backend}, not {other_backend}. Fixes: distinct certificates per backend; backend \
         {backend} answering 421 Misdirected Request for hosts it does not serve; or an ORIGIN \
         frame (RFC 8336) from backend {backend} that leaves {covered_name} out."
    )
}

/// The listener's exact names, by the name one label up
/// (`a.example.com` under `example.com`).
fn exact_names_by_parent(listener: &Listener) -> HashMap<&str, Vec<&str>> {
    let mut by_parent: HashMap<&str, Vec<&str>> = HashMap::new();
    for route in &listener.routes {
        for pattern in listener.patterns(route) {
            if let PatternRef::Exact(name) = pattern {
                if let Some((_, parent)) = name.split_once('.') {
                    by_parent.entry(parent).or_default().push(name);
                }
            }
        }
    }
    by_parent
}

/// The routes `name` takes on `listener` (several where routes of one
/// pattern differ in `alpn`); none for a `synthetic` name only a default
/// route takes, which stands for no name anyone serves.
fn routes_of<'l>(
    listener: &'l Listener,
    name: &str,
    synthetic: bool,
) -> impl Iterator<Item = &'l crate::config::Route> + 'l {
    let first = Sni::parse_written(name.as_bytes())
        .ok()
        .and_then(|sni| listener.names.matches(&sni).next())
        .filter(|&id| !(synthetic && listener.names.pattern(id) == PatternRef::Any));
    first
        .into_iter()
        .flat_map(move |id| listener.names.group(id))
        .map(move |id| &listener.routes[listener.route_index(id)])
}

/// Where a cluster backend's lookup sent `row`'s name and `candidate`
/// (the rows' addresses for each, on the same listener), when both were
/// checked and the places differ: another node and this node's
/// `local_backend`, or two nodes. Named for a risk as "BACKEND at
/// ADDRESSES", this name's first.
fn cluster_split(
    config: &Config,
    rows: &[Row],
    row: &Row,
    candidate: &str,
) -> Option<(String, String)> {
    config.backends.get(&row.backend)?.cluster()?;
    let at = |name: &str| -> BTreeSet<SocketAddr> {
        rows.iter()
            .filter(|r| r.listener == row.listener && r.backend == row.backend && r.name == name)
            .filter_map(|r| r.address)
            .collect()
    };
    let (here, there) = (at(&row.name), at(candidate));
    if here.is_empty() || there.is_empty() || here == there {
        return None;
    }
    let named = |set: &BTreeSet<SocketAddr>| {
        let addresses: Vec<String> = set.iter().map(ToString::to_string).collect();
        format!("{} at {}", row.backend, addresses.join(", "))
    };
    Some((named(&here), named(&there)))
}
