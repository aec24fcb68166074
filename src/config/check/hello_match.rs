//! `[listener.match]` and `[route.match]`: JA4 patterns a hello must match
//! (`ja4`) or must not (`ja4_deny`), each an exact fingerprint or a prefix
//! ending in `*` ([`crate::wire::fingerprint::Ja4Pattern`]).
//!
//! Not here: computing a fingerprint or applying the rules ([`crate::flow::route`]).

use super::file::MatchSection;
use super::*;
use crate::wire::fingerprint::Ja4Pattern;

impl Checker {
    /// The rules of a `match` table at `key`; unset is no rule.
    pub(super) fn hello_match(
        &mut self,
        key: &str,
        section: Option<&MatchSection>,
    ) -> Option<HelloMatch> {
        let Some(section) = section else {
            return Some(HelloMatch::default());
        };
        let ja4 = self.ja4_patterns(&format!("{key}.match.ja4"), section.ja4.as_deref());
        let ja4_deny = self.ja4_patterns(
            &format!("{key}.match.ja4_deny"),
            section.ja4_deny.as_deref(),
        );
        Some(HelloMatch {
            ja4: ja4?,
            ja4_deny: ja4_deny?,
        })
    }

    fn ja4_patterns(&mut self, key: &str, patterns: Option<&[String]>) -> Option<Vec<Ja4Pattern>> {
        let Some(patterns) = patterns else {
            return Some(Vec::new());
        };
        if patterns.is_empty() {
            self.problem(
                key,
                "[] lists no fingerprint; leave the key out for no rule",
            );
            return None;
        }
        let problems = self.problems.len();
        let mut parsed = Vec::with_capacity(patterns.len());
        for (i, text) in patterns.iter().enumerate() {
            match Ja4Pattern::parse(text) {
                Ok(pattern) if parsed.contains(&pattern) => {
                    self.problem(format!("{key}[{i}]"), format!("{text:?} is listed twice"));
                }
                Ok(pattern) => parsed.push(pattern),
                Err(why) => self.problem(format!("{key}[{i}]"), why),
            }
        }
        (self.problems.len() == problems).then_some(parsed)
    }
}
