//! Routes from outcomes: given what HAProxy's rules decide for one name of
//! every kind they tell apart, the `[[route]]` name lists that make
//! snirelay's most-specific match decide the same, or why none can. Reads
//! no configuration text.

use std::collections::{BTreeMap, BTreeSet};

use super::acl::NamePattern;

/// The routes that make snirelay decide as HAProxy does.
#[derive(Debug, Default)]
pub(super) struct Routing {
    /// Backend → its patterns, in the order first seen.
    pub(super) routes: Vec<(String, Vec<String>)>,
    /// Why each route has its names.
    pub(super) why: BTreeMap<String, String>,
    pub(super) no_sni: Option<String>,
    /// Backend → how its route compares the client's spelling (set by the
    /// frontend, which knows the tests).
    pub(super) spelling: BTreeMap<String, super::acl::Spelling>,
}

/// The backend snirelay's matcher picks among `routes` for `name`: exact,
/// then the longest suffix, then `*`.
pub(super) fn snirelay_pick(
    routes: &[(NamePattern, String)],
    default: Option<&String>,
    name: &str,
) -> Option<String> {
    if let Some((_, b)) = routes
        .iter()
        .find(|(p, _)| *p == NamePattern::Exact(name.to_owned()))
    {
        return Some(b.clone());
    }
    routes
        .iter()
        .filter(|(p, _)| matches!(p, NamePattern::Below(_)) && p.matches(name))
        .max_by_key(|(p, _)| match p {
            NamePattern::Below(d) => d.len(),
            NamePattern::Exact(_) => 0,
        })
        .map(|(_, b)| b.clone())
        .or_else(|| default.cloned())
}

pub(super) fn build_routes(
    patterns: &[NamePattern],
    decide: &dyn Fn(Option<&str>) -> Option<String>,
) -> Result<Routing, String> {
    let exacts: BTreeSet<&str> = patterns
        .iter()
        .filter_map(|p| match p {
            NamePattern::Exact(e) => Some(e.as_str()),
            NamePattern::Below(_) => None,
        })
        .collect();
    let suffixes: Vec<&str> = patterns
        .iter()
        .filter_map(|p| match p {
            NamePattern::Below(d) => Some(d.as_str()),
            NamePattern::Exact(_) => None,
        })
        .collect();
    // A fresh label below each suffix that is no exact name and no suffix.
    let fresh = |d: &str| {
        let mut label = "zz-import".to_owned();
        while exacts.contains(format!("{label}.{d}").as_str())
            || suffixes.contains(&format!("{label}.{d}").as_str())
        {
            label.push('z');
        }
        format!("{label}.{d}")
    };
    let other = "zz-import-other.invalid".to_owned();
    // Representatives, in the order the patterns came.
    let mut samples: Vec<(String, NamePattern)> = Vec::new();
    for p in patterns {
        match p {
            NamePattern::Exact(e) => samples.push((e.clone(), p.clone())),
            NamePattern::Below(d) => {
                samples.push((d.to_owned(), NamePattern::Exact(d.to_owned())));
                samples.push((fresh(d), p.clone()));
            }
        }
    }
    let mut routing = Routing::default();
    let default = decide(Some(&other));
    routing.no_sni = decide(None);
    let mut chosen: Vec<(NamePattern, String)> = Vec::new();
    // Suffixes first (their fresh names), then exact names where the
    // suffixes and default would decide otherwise.
    for (name, p) in &samples {
        if let NamePattern::Below(_) = p {
            if let Some(b) = decide(Some(name)) {
                if !chosen.iter().any(|(q, _)| q == p) {
                    chosen.push((p.clone(), b));
                }
            }
        }
    }
    for (name, p) in &samples {
        if let NamePattern::Exact(_) = p {
            let want = decide(Some(name));
            if let Some(b) = &want {
                let have = snirelay_pick(&chosen, default.as_ref(), name);
                let needed = have.as_ref() != Some(b) || patterns.contains(p);
                if needed && !chosen.iter().any(|(q, _)| q == p) {
                    chosen.push((p.clone(), b.clone()));
                }
            }
        }
    }
    let mut wrong = Vec::new();
    for (name, _) in samples.iter().chain(std::iter::once(&(
        other.clone(),
        NamePattern::Exact(other.clone()),
    ))) {
        let want = decide(Some(name));
        let have = snirelay_pick(&chosen, default.as_ref(), name);
        if want != have {
            wrong.push(format!(
                "`{name}` goes to {} in HAProxy but would go to {} (snirelay picks the most specific name, and cannot refuse a name below an accepted suffix)",
                want.as_deref().map_or("no backend (refused)".to_owned(), |b| format!("`{b}`")),
                have.as_deref().map_or("no backend (refused)".to_owned(), |b| format!("`{b}`")),
            ));
        }
    }
    if !wrong.is_empty() {
        return Err(wrong.join("; "));
    }
    // Order: by the first pattern of each backend, exact before suffix of
    // the same domain.
    let mut order: Vec<(NamePattern, String)> = Vec::new();
    for p in patterns {
        let group: Vec<NamePattern> = match p {
            NamePattern::Below(d) => vec![NamePattern::Exact(d.clone()), p.clone()],
            NamePattern::Exact(_) => vec![p.clone()],
        };
        for q in group {
            if let Some((_, b)) = chosen.iter().find(|(c, _)| *c == q) {
                if !order.iter().any(|(o, _)| *o == q) {
                    order.push((q, b.clone()));
                }
            }
        }
    }
    if let Some(b) = &default {
        order.push((NamePattern::Exact("*".into()), b.clone()));
    }
    for (p, b) in order {
        let text = match &p {
            NamePattern::Exact(e) if e == "*" => "*".to_owned(),
            p => p.as_snirelay(),
        };
        match routing.routes.iter_mut().find(|(rb, _)| *rb == b) {
            Some((_, names)) => names.push(text),
            None => routing.routes.push((b.clone(), vec![text])),
        }
        if default.as_ref() == Some(&b) {
            routing.why.insert(
                b.clone(),
                "names no rule refuses or sends elsewhere reach it (HAProxy's default_backend)"
                    .into(),
            );
        }
    }
    for (b, _) in &routing.routes {
        routing
            .why
            .entry(b.clone())
            .or_insert_with(|| "the names HAProxy's rules accept and send here".into());
    }
    Ok(routing)
}
