//! The compiled allowlist: which route, if any, a server name belongs to.
//!
//! Rules (DESIGN.md "route"): an exact name beats any wildcard; `*.example.com`
//! matches every name below `example.com` at any depth but not `example.com`
//! itself; among wildcards the longest suffix wins; comparisons are on label
//! boundaries, so `badexample.com` never matches `example.com` or
//! `*.example.com`. Case and the trailing dot are already normalised away by
//! [`Sni`] and [`Pattern`].
//!
//! Cost: one hash lookup for the exact table, then one per label of the name
//! for the wildcard table, starting at the longest suffix; no allocation and
//! no regex. Built once per config snapshot and never mutated.
//!
//! Not here: choosing a backend, or what to do with an unmatched name.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use crate::sni::{Pattern, Sni};

/// Maps allowlist patterns to values of `T` (a route id, in practice).
#[derive(Debug, Clone)]
pub struct SniMatcher<T> {
    exact: HashMap<Box<str>, T>,
    below: HashMap<Box<str>, T>,
}

/// Returned when the same pattern is inserted twice.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pattern `{0}` is already taken by another route")]
pub struct DuplicatePattern(pub String);

impl<T> Default for SniMatcher<T> {
    fn default() -> Self {
        SniMatcher {
            exact: HashMap::new(),
            below: HashMap::new(),
        }
    }
}

impl<T> SniMatcher<T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a pattern; the same pattern may appear only once per matcher.
    pub fn insert(&mut self, pattern: &Pattern, value: T) -> Result<(), DuplicatePattern> {
        let (table, key) = match pattern {
            Pattern::Exact(name) => (&mut self.exact, name),
            Pattern::Below(suffix) => (&mut self.below, suffix),
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
        let name = sni.as_str();
        if let Some(value) = self.exact.get(name) {
            return Some(value);
        }
        // Strip one leftmost label at a time: the first suffix found is the
        // longest one, and the full name itself is never a wildcard match.
        let mut rest = name;
        while let Some(dot) = rest.find('.') {
            rest = &rest[dot + 1..];
            if let Some(value) = self.below.get(rest) {
                return Some(value);
            }
        }
        None
    }

    /// The value stored for exactly this pattern (not a match: a lookup).
    pub fn get(&self, pattern: &Pattern) -> Option<&T> {
        match pattern {
            Pattern::Exact(name) => self.exact.get(name.as_str()),
            Pattern::Below(suffix) => self.below.get(suffix.as_str()),
        }
    }

    /// How many patterns the matcher holds.
    pub fn len(&self) -> usize {
        self.exact.len() + self.below.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
