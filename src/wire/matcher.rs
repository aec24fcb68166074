//! The compiled allowlist: which route, if any, a server name belongs to.
//!
//! Rules (docs/design.md "route"): an exact name beats any wildcard;
//! `*.example.com` matches every name below `example.com` at any depth but
//! not `example.com` itself; among wildcards the longest suffix wins;
//! comparisons are on label boundaries, so `badexample.com` never matches
//! `example.com` or `*.example.com`; `*` alone (the default route) matches
//! every name and is the least specific of all. Case and the trailing dot
//! are already normalised away by [`Sni`] and [`Pattern`].
//!
//! [`SniMatcher::find`] answers the most specific pattern;
//! [`SniMatcher::matches`] walks every matching pattern from the most
//! specific down, for routing rules that may pass a pattern over (a route
//! whose ALPN does not match falls back to the next pattern, see `route`).
//!
//! Cost: one hash lookup for the exact table, then one per label of the name
//! for the wildcard table, starting at the longest suffix; no allocation and
//! no regex. Built once per config snapshot and never mutated.
//!
//! Not here: choosing a backend, or what to do with an unmatched name.

use std::collections::hash_map::Entry;

use foldhash::HashMap;

use crate::wire::sni::{Pattern, Sni};

/// Maps allowlist patterns to values of `T` (a route id, in practice).
#[derive(Debug, Clone)]
pub struct SniMatcher<T> {
    exact: HashMap<Box<str>, T>,
    below: HashMap<Box<str>, T>,
    /// The default route's value (`*`).
    any: Option<T>,
}

/// Returned when the same pattern is inserted twice.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pattern `{0}` is already taken by another route")]
pub struct DuplicatePattern(pub String);

impl<T> Default for SniMatcher<T> {
    fn default() -> Self {
        SniMatcher {
            exact: HashMap::default(),
            below: HashMap::default(),
            any: None,
        }
    }
}

impl<T> SniMatcher<T> {
    /// An empty matcher: no name matches.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a pattern; the same pattern may appear only once per matcher.
    pub fn insert(&mut self, pattern: &Pattern, value: T) -> Result<(), DuplicatePattern> {
        let (table, key) = match pattern {
            Pattern::Exact(name) => (&mut self.exact, name),
            Pattern::Below(suffix) => (&mut self.below, suffix),
            Pattern::Any => {
                if self.any.is_some() {
                    return Err(DuplicatePattern(pattern.to_string()));
                }
                self.any = Some(value);
                return Ok(());
            }
        };
        match table.entry(key.as_str().into()) {
            Entry::Occupied(_) => Err(DuplicatePattern(pattern.to_string())),
            Entry::Vacant(slot) => {
                slot.insert(value);
                Ok(())
            }
        }
    }

    /// The value of the most specific pattern that matches `sni`.
    pub fn find(&self, sni: &Sni) -> Option<&T> {
        self.matches(sni).next()
    }

    /// The values of every pattern that matches `sni`, most specific first:
    /// the exact name, then wildcards from the longest suffix to the
    /// shortest, then the default route. Lazy: stopping at the first costs
    /// what [`find`](Self::find) costs.
    pub fn matches<'a, 's>(&'a self, sni: &'s Sni) -> impl Iterator<Item = &'a T> + use<'a, 's, T> {
        let name = sni.as_str();
        let exact = self.exact.get(name);
        // Strip one leftmost label at a time: suffixes come longest first,
        // and the full name itself is never a wildcard match.
        let below = std::iter::successors(Some(name), |rest| {
            rest.find('.').map(|dot| &rest[dot + 1..])
        })
        .skip(1)
        .filter_map(|suffix| self.below.get(suffix));
        exact.into_iter().chain(below).chain(self.any.as_ref())
    }

    /// The value stored for exactly this pattern (not a match: a lookup).
    pub(crate) fn get(&self, pattern: &Pattern) -> Option<&T> {
        match pattern {
            Pattern::Exact(name) => self.exact.get(name.as_str()),
            Pattern::Below(suffix) => self.below.get(suffix.as_str()),
            Pattern::Any => self.any.as_ref(),
        }
    }

    /// The value stored for exactly this pattern, to change it.
    pub(crate) fn get_mut(&mut self, pattern: &Pattern) -> Option<&mut T> {
        match pattern {
            Pattern::Exact(name) => self.exact.get_mut(name.as_str()),
            Pattern::Below(suffix) => self.below.get_mut(suffix.as_str()),
            Pattern::Any => self.any.as_mut(),
        }
    }

    /// How many patterns the matcher holds.
    pub fn len(&self) -> usize {
        self.exact.len() + self.below.len() + usize::from(self.any.is_some())
    }

    /// Whether no pattern was inserted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
