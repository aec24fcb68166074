//! Fuzzes SNI normalisation and route matching against a naive reference.
//!
//! The input is split on `\n`: every line but the last is a config pattern,
//! the last is a client's raw SNI bytes. The compiled matcher must agree with
//! a plain string-compare model of docs/design.md's "route" rules (exact
//! beats wildcard, `*.d` matches strictly below `d` on label boundaries,
//! longest suffix wins, `*` alone matches any name and comes last), both for
//! the best match and for the whole most-specific-first walk (`matches`),
//! and normalising must be idempotent and produce lowercase, dot-free ends.

#![no_main]

use libfuzzer_sys::fuzz_target;
use snirelay::wire::matcher::SniMatcher;
use snirelay::wire::sni::{Pattern, Sni};

fuzz_target!(|data: &[u8]| {
    let mut parts: Vec<&[u8]> = data.split(|b| *b == b'\n').collect();
    let Some(raw_sni) = parts.pop() else { return };

    let mut matcher = SniMatcher::new();
    let mut accepted: Vec<(Pattern, usize)> = Vec::new();
    for (id, raw) in parts.iter().enumerate().take(64) {
        let Ok(text) = std::str::from_utf8(raw) else {
            continue;
        };
        let Ok(pattern) = Pattern::parse(text) else {
            continue;
        };
        let duplicate = accepted.iter().any(|(p, _)| *p == pattern);
        assert_eq!(matcher.insert(&pattern, id).is_err(), duplicate);
        if !duplicate {
            accepted.push((pattern, id));
        }
    }

    let Ok(sni) = Sni::parse(raw_sni) else { return };
    let name = sni.as_str();
    assert!(!name.is_empty() && !name.ends_with('.'));
    assert!(!name.bytes().any(|b| b.is_ascii_uppercase()));
    assert_eq!(
        Sni::parse(name.as_bytes()).as_ref(),
        Ok(&sni),
        "not idempotent"
    );

    let exact = accepted.iter().find_map(|(p, id)| match p {
        Pattern::Exact(n) if n == name => Some(*id),
        _ => None,
    });
    let mut below: Vec<(usize, usize)> = accepted
        .iter()
        .filter_map(|(p, id)| match p {
            Pattern::Below(suffix)
                if name.len() > suffix.len() + 1
                    && name.ends_with(suffix.as_str())
                    && name.as_bytes()[name.len() - suffix.len() - 1] == b'.' =>
            {
                Some((suffix.len(), *id))
            }
            _ => None,
        })
        .collect();
    // Longest suffix first (suffixes of one name differ in length).
    below.sort_by(|a, b| b.0.cmp(&a.0));
    let any = accepted.iter().find_map(|(p, id)| match p {
        Pattern::Any => Some(*id),
        _ => None,
    });
    let walk: Vec<usize> = exact
        .into_iter()
        .chain(below.iter().map(|(_, id)| *id))
        .chain(any)
        .collect();
    assert_eq!(matcher.find(&sni).copied(), walk.first().copied());
    assert_eq!(matcher.matches(&sni).copied().collect::<Vec<_>>(), walk);
});
