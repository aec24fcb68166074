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
//! [`NameIndex`] holds a list of patterns (a listener's, every route's in
//! turn) once: their text one after another in one string, each pattern
//! an id (its place in the list), and two open-addressing tables of ids
//! (`hashbrown::HashTable<u32>`), one keyed by the exact names and one by
//! the wildcards' suffixes, hashing the string's slices. A pattern listed
//! again (by another route, for another `alpn`) gets its own id, found
//! from the first. 100,000 names of 23 bytes cost about 34 bytes each
//! (the text, a 4-byte end, a table slot), where a `Box<str>` per name in
//! a `HashMap` cost about 85.
//!
//! [`SniMatcher`] is the same index with a value per pattern, for lists
//! that take a pattern once (a cluster's `local_overrides`).
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

use std::fmt;
use std::hash::BuildHasher;

use foldhash::HashMap;
use hashbrown::HashTable;

use crate::wire::sni::{Pattern, PatternRef, Sni};

/// A list of patterns, each stored once and known by its id (its place in
/// the list, from 0), looked up by name.
#[derive(Clone, Default)]
pub struct NameIndex {
    /// Every pattern's text, one after another, as `Display` writes it
    /// (`name`, `*.suffix`, `*`).
    text: String,
    /// Where each id's text ends in `text`; it starts where the previous
    /// one's ends.
    ends: Vec<u32>,
    /// The first id of each exact name.
    exact: HashTable<u32>,
    /// The first id of each wildcard, keyed by its suffix.
    below: HashTable<u32>,
    /// The first id of `*`.
    any: Option<u32>,
    /// The later ids of a pattern listed more than once, by its first id
    /// (in the order listed). Empty unless routes share a pattern.
    more: HashMap<u32, Vec<u32>>,
    hasher: foldhash::fast::RandomState,
}

/// Returned when a list would outgrow its `u32` ids or text offsets (4 GiB
/// of names).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("more than 4 GiB of names on one listener")]
pub struct TooManyNames;

impl fmt::Debug for NameIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NameIndex")
            .field("patterns", &self.len())
            .field("text_bytes", &self.text.len())
            .finish_non_exhaustive()
    }
}

impl NameIndex {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many patterns (ids) the list holds.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Room for `patterns` more patterns of `bytes` bytes of text in all
    /// (and in the exact names' table: a list of names, with a few
    /// wildcards, then fills its table once instead of growing it).
    pub fn reserve(&mut self, patterns: usize, bytes: usize) {
        self.text.reserve(bytes);
        self.ends.reserve(patterns);
        let NameIndex {
            text,
            ends,
            exact,
            hasher,
            ..
        } = self;
        exact.reserve(patterns, |&id| hasher.hash_one(text_of(text, ends, id)));
    }

    /// The text of `id` as written (`*.suffix` for a wildcard).
    fn text_of(&self, id: u32) -> &str {
        text_of(&self.text, &self.ends, id)
    }

    /// The pattern of `id`. Panics if there is no such id.
    pub fn pattern(&self, id: u32) -> PatternRef<'_> {
        PatternRef::from_written(self.text_of(id))
    }

    /// The patterns of the ids in `ids`, in order.
    pub fn patterns(
        &self,
        ids: std::ops::Range<u32>,
    ) -> impl ExactSizeIterator<Item = PatternRef<'_>> + '_ {
        ids.map(|id| self.pattern(id))
    }

    /// The first id of `pattern`, if it is listed.
    pub fn first(&self, pattern: PatternRef<'_>) -> Option<u32> {
        match pattern {
            PatternRef::Exact(name) => self.find_exact(name),
            PatternRef::Below(suffix) => self.find_below(suffix),
            PatternRef::Any => self.any,
        }
    }

    fn find_exact(&self, name: &str) -> Option<u32> {
        self.exact
            .find(self.hasher.hash_one(name), |&id| self.text_of(id) == name)
            .copied()
    }

    fn find_below(&self, suffix: &str) -> Option<u32> {
        self.below
            .find(self.hasher.hash_one(suffix), |&id| {
                &self.text_of(id)[2..] == suffix
            })
            .copied()
    }

    /// Every id of the pattern whose first id is `first`, in the order
    /// listed.
    pub fn group(&self, first: u32) -> impl DoubleEndedIterator<Item = u32> + Clone + '_ {
        let more = self.more.get(&first).map_or(&[][..], Vec::as_slice);
        std::iter::once(first).chain(more.iter().copied())
    }

    /// Every id of `pattern`, in the order listed.
    pub fn ids(&self, pattern: PatternRef<'_>) -> impl Iterator<Item = u32> + '_ {
        self.first(pattern)
            .into_iter()
            .flat_map(move |first| self.group(first))
    }

    /// Appends `pattern` and returns its id; a pattern already listed is
    /// listed again, under a new id that [`group`](Self::group) finds
    /// from the first.
    pub fn push(&mut self, pattern: PatternRef<'_>) -> Result<u32, TooManyNames> {
        self.append(pattern, true)
    }

    /// Appends `pattern` under an id that no lookup finds (one a checker
    /// refused, kept so that a route's ids stay one range).
    pub(crate) fn push_unlisted(&mut self, pattern: PatternRef<'_>) -> Result<u32, TooManyNames> {
        self.append(pattern, false)
    }

    fn append(&mut self, pattern: PatternRef<'_>, listed: bool) -> Result<u32, TooManyNames> {
        let id = u32::try_from(self.ends.len()).map_err(|_| TooManyNames)?;
        let first = self.first(pattern);
        match pattern {
            PatternRef::Exact(name) => self.text.push_str(name),
            PatternRef::Below(suffix) => {
                self.text.push_str("*.");
                self.text.push_str(suffix);
            }
            PatternRef::Any => self.text.push('*'),
        }
        let Ok(end) = u32::try_from(self.text.len()) else {
            let start = self.ends.last().map_or(0, |&e| e as usize);
            self.text.truncate(start);
            return Err(TooManyNames);
        };
        self.ends.push(end);
        if !listed {
            return Ok(id);
        }
        if let Some(first) = first {
            self.more.entry(first).or_default().push(id);
            return Ok(id);
        }
        let NameIndex {
            text,
            ends,
            exact,
            below,
            any,
            hasher,
            ..
        } = self;
        match pattern {
            PatternRef::Exact(name) => {
                exact.insert_unique(hasher.hash_one(name), id, |&id| {
                    hasher.hash_one(text_of(text, ends, id))
                });
            }
            PatternRef::Below(suffix) => {
                below.insert_unique(hasher.hash_one(suffix), id, |&id| {
                    hasher.hash_one(&text_of(text, ends, id)[2..])
                });
            }
            PatternRef::Any => *any = Some(id),
        }
        Ok(id)
    }

    /// Whether `other` lists the same patterns under the same ids: then
    /// either serves for the other (a reload of unchanged names keeps the
    /// running list). Compares the text, not the hash tables built from
    /// it: a few milliseconds for 100,000 names.
    pub fn same_patterns(&self, other: &NameIndex) -> bool {
        self.ends == other.ends
            && self.text == other.text
            && self.more == other.more
            && self.any == other.any
            && self.exact.len() == other.exact.len()
            && self.below.len() == other.below.len()
    }

    /// Gives back the room reserved or grown for patterns that never came:
    /// for a list kept as long as its configuration.
    pub fn shrink_to_fit(&mut self) {
        let NameIndex {
            text,
            ends,
            exact,
            below,
            more,
            hasher,
            ..
        } = self;
        text.shrink_to_fit();
        ends.shrink_to_fit();
        exact.shrink_to_fit(|&id| hasher.hash_one(text_of(text, ends, id)));
        below.shrink_to_fit(|&id| hasher.hash_one(&text_of(text, ends, id)[2..]));
        more.shrink_to_fit();
    }

    /// The first id of every pattern that matches `sni`, most specific
    /// first: the exact name, then wildcards from the longest suffix to
    /// the shortest, then `*`. Lazy: stopping at the first costs one
    /// lookup per label at most.
    pub fn matches<'a, 's>(&'a self, sni: &'s Sni) -> impl Iterator<Item = u32> + use<'a, 's> {
        let name = sni.as_str();
        let exact = self.find_exact(name);
        // Strip one leftmost label at a time: suffixes come longest first,
        // and the full name itself is never a wildcard match.
        let below = std::iter::successors(Some(name), |rest| {
            rest.find('.').map(|dot| &rest[dot + 1..])
        })
        .skip(1)
        .filter_map(|suffix| self.find_below(suffix));
        exact.into_iter().chain(below).chain(self.any)
    }

    /// Bytes on the heap, for the memory tests and benches.
    pub fn heap_bytes(&self) -> usize {
        self.text.capacity()
            + self.ends.capacity() * 4
            + self.exact.allocation_size()
            + self.below.allocation_size()
            + self.more.capacity() * 32
            + self.more.values().map(|v| v.capacity() * 4).sum::<usize>()
    }
}

fn text_of<'t>(text: &'t str, ends: &[u32], id: u32) -> &'t str {
    let id = id as usize;
    let start = match id {
        0 => 0,
        _ => ends[id - 1] as usize,
    };
    &text[start..ends[id] as usize]
}

/// Maps allowlist patterns to values of `T`, each pattern once.
#[derive(Clone)]
pub struct SniMatcher<T> {
    index: NameIndex,
    /// By id.
    values: Vec<T>,
}

/// Returned when the same pattern is inserted twice.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pattern `{0}` is already taken by another route")]
pub struct DuplicatePattern(pub String);

impl<T> Default for SniMatcher<T> {
    fn default() -> Self {
        SniMatcher {
            index: NameIndex::default(),
            values: Vec::new(),
        }
    }
}

impl<T> fmt::Debug for SniMatcher<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SniMatcher")
            .field("patterns", &self.len())
            .finish_non_exhaustive()
    }
}

impl<T> SniMatcher<T> {
    /// An empty matcher: no name matches.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a pattern; the same pattern may appear only once per matcher.
    pub fn insert(&mut self, pattern: &Pattern, value: T) -> Result<(), DuplicatePattern> {
        let pattern = pattern.as_pattern_ref();
        if self.index.first(pattern).is_some() {
            return Err(DuplicatePattern(pattern.to_string()));
        }
        // Only past 4 GiB of names, which no configuration reaches.
        self.index
            .push(pattern)
            .map_err(|_| DuplicatePattern(pattern.to_string()))?;
        self.values.push(value);
        Ok(())
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
        self.index.matches(sni).map(|id| &self.values[id as usize])
    }

    /// The value stored for exactly this pattern, to change it.
    pub(crate) fn get_mut(&mut self, pattern: &Pattern) -> Option<&mut T> {
        let id = self.index.first(pattern.as_pattern_ref())?;
        Some(&mut self.values[id as usize])
    }

    /// How many patterns the matcher holds.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether no pattern was inserted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(text: &str) -> Pattern {
        Pattern::parse(text).unwrap()
    }

    fn sni(text: &str) -> Sni {
        Sni::parse(text.as_bytes()).unwrap()
    }

    #[test]
    fn an_index_lists_a_pattern_again_under_a_new_id_and_finds_every_one() {
        let mut index = NameIndex::new();
        for text in [
            "a.example",
            "*.example",
            "*",
            "a.example",
            "b.example",
            "*.example",
        ] {
            index.push(pattern(text).as_pattern_ref()).unwrap();
        }
        assert_eq!(index.len(), 6);
        let ids = |index: &NameIndex, text: &str| {
            index
                .ids(pattern(text).as_pattern_ref())
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(&index, "a.example"), [0, 3]);
        assert_eq!(ids(&index, "*.example"), [1, 5]);
        assert_eq!(ids(&index, "*"), [2]);
        assert_eq!(ids(&index, "b.example"), [4]);
        assert_eq!(ids(&index, "c.example"), [] as [u32; 0]);
        assert_eq!(index.pattern(1), PatternRef::Below("example"));
        assert_eq!(index.pattern(1).to_string(), "*.example");
        assert_eq!(
            index
                .patterns(0..6)
                .map(|p| p.to_string())
                .collect::<Vec<_>>(),
            [
                "a.example",
                "*.example",
                "*",
                "a.example",
                "b.example",
                "*.example"
            ]
        );
        // Most specific first; first ids only.
        assert_eq!(
            index.matches(&sni("a.example")).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        assert_eq!(
            index.matches(&sni("x.a.example")).collect::<Vec<_>>(),
            [1, 2]
        );
        assert_eq!(index.matches(&sni("example")).collect::<Vec<_>>(), [2]);
        index.shrink_to_fit();
        assert_eq!(ids(&index, "*.example"), [1, 5]);
        assert_eq!(index.group(0).rev().collect::<Vec<_>>(), [3, 0]);
    }

    #[test]
    fn many_names_survive_the_tables_growing_and_shrinking() {
        let mut index = NameIndex::new();
        for i in 0..5_000 {
            index
                .push(pattern(&format!("site{i}.example.com")).as_pattern_ref())
                .unwrap();
            index
                .push(pattern(&format!("*.w{i}.example.net")).as_pattern_ref())
                .unwrap();
        }
        index.shrink_to_fit();
        for i in (0..5_000u32).step_by(37) {
            assert_eq!(
                index.matches(&sni(&format!("site{i}.example.com"))).next(),
                Some(2 * i)
            );
            assert_eq!(
                index.matches(&sni(&format!("a.b.w{i}.example.net"))).next(),
                Some(2 * i + 1)
            );
        }
        assert_eq!(index.matches(&sni("w1.example.net")).next(), None);
        // About the text, a 4-byte end and a table slot per name.
        let per_name = index.heap_bytes() / index.len();
        assert!(per_name < 40, "{per_name} bytes per name");
    }
}
