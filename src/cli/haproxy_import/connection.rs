//! A frontend's `tcp-request connection` rules and its stick table, into
//! `[listener.limits]`: the per-source limits (`connections_per_source`,
//! `attempts_per_source` over `attempts_period`) and the `deny` and `allow`
//! lists; and `expect-proxy layer4 if { src … }`, the peers whose PROXY
//! header is read, into `proxy_protocol.trusted`.
//!
//! HAProxy runs these rules right after accept, before a PROXY header is
//! read (`session_accept_fd` starts the handshake only once they passed),
//! so their `src` is the peer's own address, as snirelay's `deny`,
//! `allow` and `trusted` are.
//!
//! Translated by evaluating, as the routes are: HAProxy runs the
//! connection rules in order and the first `accept` or `reject` that
//! matches decides (a connection no rule decides is accepted); snirelay
//! refuses a `deny` source, then one outside a non-empty `allow`, then one
//! over a limit. The lists are taken from the rules' `src` networks and
//! both are run for one address at the start of every stretch of addresses
//! the networks tell apart (the first address of each network and the one
//! after its last, and `0.0.0.0` and `::`), each with every combination of
//! the limits exceeded; any difference is reported with the address, never
//! approximated. An `accept` that lets some sources skip a later limit is
//! such a difference.
//!
//! Not here: the content rules and routing ([`super::frontend`]).

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::acl::{Atom, Guard, guard, network};
use super::map::pattern_lines;
use super::parse::{HaproxyLine, millis};
use super::toml::{TomlTable, duration, quoted, quoted_list};
use super::translator::Translator;
use crate::wire::cidr::Cidr;

/// A frontend's stick table and connection rules, as read.
#[derive(Debug, Default)]
pub(super) struct ConnectionRules<'a> {
    /// The line, `conn_cur` stored, `conn_rate(PERIOD)` stored, type ipv6.
    table: Option<(&'a HaproxyLine, bool, Option<u64>, bool)>,
    rules: Vec<(&'a HaproxyLine, Rule)>,
}

#[derive(Debug)]
enum Rule {
    /// `track-scN src`.
    Track(u8),
    Decide {
        accept: bool,
        guard: Guard,
    },
    /// `expect-proxy layer4 [if|unless COND]`.
    ExpectProxy(Guard),
}

/// What a frontend's connection rules decide beside its limits.
#[derive(Debug, Default)]
pub(super) struct ConnectionOutcome {
    /// The peers `expect-proxy layer4` reads a PROXY header from, and the
    /// rule's text.
    pub(super) expect_proxy: Option<(Vec<Cidr>, String)>,
    /// Whether a per-source limit (open connections or attempts) was
    /// translated.
    pub(super) per_source: bool,
}

/// A per-source limit a rule became.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Limit {
    Open(u64),
    Attempts(u64, u64),
}

impl<'a> ConnectionRules<'a> {
    /// `stick-table …`: only tables keyed by source address count.
    pub(super) fn stick_table(&mut self, l: &'a HaproxyLine) -> Result<(), String> {
        let word_after = |key: &str| l.words.iter().position(|w| w == key).map(|i| l.word(i + 1));
        let store = word_after("store").unwrap_or("");
        let conn_cur = store.split(',').any(|x| x == "conn_cur");
        let period = store.split(',').find_map(|x| {
            x.strip_prefix("conn_rate(")
                .and_then(|p| p.strip_suffix(')'))
                .and_then(millis)
        });
        let v6 = match word_after("type") {
            Some("ip") => false,
            Some("ipv6") => true,
            _ => {
                return Err(
                    "only tables of `type ip` or `type ipv6` (per source address) are translated"
                        .into(),
                );
            }
        };
        self.table = Some((l, conn_cur, period, v6));
        Ok(())
    }

    /// `tcp-request connection …` (the words after `connection`).
    pub(super) fn rule(
        &mut self,
        l: &'a HaproxyLine,
        acls: &BTreeMap<String, Result<Vec<Atom>, String>>,
    ) -> Result<(), String> {
        let words = l.words_from(2);
        let action = words.first().map_or("", String::as_str);
        let rule = match action {
            "track-sc0" | "track-sc1" | "track-sc2" => {
                if words[1..] != ["src".to_owned()] {
                    return Err(format!(
                        "only `{action} src` is translated (snirelay's limits key on the source address, in this listener's table)"
                    ));
                }
                Rule::Track(action.as_bytes()[8] - b'0')
            }
            "accept" | "reject" => Rule::Decide {
                accept: action == "accept",
                guard: guard(&words[1..], acls)?,
            },
            "expect-proxy" if words.get(1).map(String::as_str) == Some("layer4") => {
                Rule::ExpectProxy(guard(&words[2..], acls)?)
            }
            other => {
                return Err(format!(
                    "the connection action `{other}` is not translated (only track-sc0/1/2 src, accept, reject and expect-proxy layer4)"
                ));
            }
        };
        self.rules.push((l, rule));
        Ok(())
    }
}

impl Translator {
    /// The frontend's connection rules into `limits`; what they decide
    /// beside.
    pub(super) fn connection_limits(
        &mut self,
        rules: ConnectionRules<'_>,
        limits: &mut TomlTable,
    ) -> ConnectionOutcome {
        let ConnectionRules { table, rules } = rules;
        let mut outcome = ConnectionOutcome::default();
        // HAProxy's order, with each rule's meaning for snirelay.
        let mut tracked: Vec<u8> = Vec::new();
        let mut track_text = String::new();
        let mut track_lines: Vec<usize> = Vec::new();
        let mut decided: Vec<(&HaproxyLine, bool, Guard)> = Vec::new();
        let mut open: Option<(u64, &HaproxyLine)> = None;
        let mut attempts: Option<(u64, u64, &HaproxyLine)> = None;
        for (l, rule) in rules {
            match rule {
                Rule::Track(n) => match table {
                    Some(_) => {
                        tracked.push(n);
                        track_lines.push(l.no);
                        if track_text.is_empty() {
                            track_text = l.words_from(2).join(" ");
                        }
                        self.key(l);
                    }
                    None => self.not(
                        l,
                        "no `stick-table` in this frontend to track the source in",
                    ),
                },
                Rule::ExpectProxy(mut guard) => {
                    if let Some(why) = self.read_src_files(&mut guard) {
                        self.not(l, why);
                        continue;
                    }
                    if decided.iter().any(|(_, accept, _)| *accept) {
                        self.not(l, "an `accept` rule before it ends HAProxy's rules for its sources, which then send no PROXY header: write the peers' networks without that rule first");
                        continue;
                    }
                    match proxy_peers(&guard) {
                        Some(nets) if outcome.expect_proxy.is_none() => {
                            outcome.expect_proxy = Some((nets, l.text.clone()));
                            self.key(l);
                        }
                        Some(_) => self.not(l, "a second `expect-proxy` rule: write one with every peer's network"),
                        None => self.not(l, "only `expect-proxy layer4` alone (every peer) or `if` source networks (`src`, `-f`) are translated: snirelay reads headers from a list of trusted networks"),
                    }
                }
                Rule::Decide { accept, mut guard } => {
                    if let Some(why) = self.read_src_files(&mut guard) {
                        self.not(l, why);
                        continue;
                    }
                    match limit(&guard, accept, table, &tracked) {
                        Some(Ok(Limit::Open(n))) if open.is_none() => {
                            open = Some((n, l));
                            decided.push((l, false, guard));
                        }
                        Some(Ok(Limit::Attempts(n, p))) if attempts.is_none() => {
                            attempts = Some((n, p, l));
                            decided.push((l, false, guard));
                        }
                        Some(Ok(_)) => self.not(l, "a second limit of the same kind: snirelay has one per listener"),
                        Some(Err(why)) => self.not(l, why),
                        None if only_sources(&guard) => decided.push((l, accept, guard)),
                        None => self.not(l, "conditions mixing the source with other tests are not translated (only `src` networks, or one per-source counter `gt`/`ge` N)"),
                    }
                }
            }
        }
        // The lists the rules' networks become.
        let mut deny: Vec<Cidr> = Vec::new();
        let mut allow: Vec<Cidr> = Vec::new();
        for (i, (_, accept, g)) in decided.iter().enumerate() {
            if is_limit(g) {
                continue;
            }
            // An accepted network is an allow list only when a catch-all
            // reject follows it.
            let rejects_the_rest = decided[i..]
                .iter()
                .any(|(_, a, g)| !a && *g == Guard::Always);
            let (nets, positive) = guard_networks(g);
            match (accept, positive) {
                (false, true) => deny.extend(nets),
                (true, true) if rejects_the_rest => allow.extend(nets),
                (false, false) => allow.extend(nets),
                _ => {}
            }
        }
        // Both run for every stretch of addresses and every limit state.
        let limit_count = usize::from(open.is_some()) + usize::from(attempts.is_some());
        let mut wrong = None;
        'samples: for ip in samples(decided.iter().flat_map(|(_, _, g)| guard_networks(g).0)) {
            for over in 0u8..(1 << limit_count) {
                let over_open = open.is_some() && over & 1 != 0;
                let over_attempts =
                    attempts.is_some() && over & (1 << usize::from(open.is_some())) != 0;
                let haproxy = haproxy_admits(&decided, ip, over_open, over_attempts);
                let snirelay = !deny.iter().any(|c| c.contains(ip))
                    && (allow.is_empty() || allow.iter().any(|c| c.contains(ip)))
                    && !over_open
                    && !over_attempts;
                if haproxy != snirelay {
                    let state = match (over_open, over_attempts) {
                        (false, false) => "",
                        (true, false) => " over its open-connection limit",
                        (false, true) => " over its attempt limit",
                        (true, true) => " over both limits",
                    };
                    wrong = Some(format!(
                        "a connection from {ip}{state} is {} by HAProxy's rules (in order, the first match decides) but would be {} by snirelay's deny, allow and limits (applied to every source alike)",
                        if haproxy { "admitted" } else { "refused" },
                        if snirelay { "admitted" } else { "refused" },
                    ));
                    break 'samples;
                }
            }
        }
        if let Some(why) = wrong {
            let table_line = table.map(|t| t.0);
            for l in decided.iter().map(|d| d.0).chain(table_line) {
                self.not(l, format!("the connection rules together: {why}"));
            }
            return outcome;
        }
        for (l, _, _) in &decided {
            self.key(l);
        }
        let lines_of = |want: &dyn Fn(bool, &Guard) -> bool| -> String {
            decided
                .iter()
                .filter(|(_, a, g)| !is_limit(g) && want(*a, g))
                .map(|(l, _, _)| l.text.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        };
        outcome.per_source = open.is_some() || attempts.is_some();
        match open {
            Some((n, l)) => {
                limits.row(
                    "connections_per_source",
                    n.to_string(),
                    format!(
                        "{track_text}; {}: {n} may be open, the next is refused",
                        l.text
                    ),
                );
                limits.at(track_lines.iter().copied());
            }
            None => limits.row(
                "connections_per_source",
                "false".into(),
                "no conn_cur limit: HAProxy has none per source (snirelay's default would be 256)",
            ),
        }
        if let Some((n, period, l)) = attempts {
            limits.row(
                "attempts_per_source",
                n.to_string(),
                format!(
                    "{track_text}; {}: refused past {n} attempts from one source, refused ones included, counted over {} as HAProxy's conn_rate counts them (this period plus the last one's share: an estimate, not a bound over every sliding window)",
                    l.text,
                    duration(period)
                ),
            );
            limits.at(track_lines.iter().copied());
            limits.row(
                "attempts_period",
                quoted(&duration(period)),
                format!("conn_rate({})", duration(period)),
            );
            limits.at(track_lines.iter().copied().chain([l.no]));
        }
        let texts = |nets: &[Cidr]| nets.iter().map(Cidr::to_string).collect::<Vec<_>>();
        if !deny.is_empty() {
            limits.row(
                "deny",
                quoted_list(&texts(&deny)),
                lines_of(&|accept, g| !accept && guard_networks(g).1),
            );
            limits.at(decided.iter().map(|d| d.0.no));
        }
        if !allow.is_empty() {
            limits.row(
                "allow",
                quoted_list(&texts(&allow)),
                lines_of(&|accept, g| accept || !guard_networks(g).1 || *g == Guard::Always),
            );
            limits.at(decided.iter().map(|d| d.0.no));
        }
        if let Some((l, _, period, v6)) = table {
            if tracked.is_empty() {
                self.not(l, "a table that no `track-sc0 src` fills");
            } else {
                if v6 {
                    // HAProxy keys such a table by the full address: one
                    // holder of a /64 could be as many sources as it
                    // likes. snirelay's default (one source per /64) is
                    // kept.
                    self.notes.push(format!("line {}: `stick-table type ipv6` counts each full IPv6 address as a source; snirelay keeps its default, one source per /64 (`source_prefix_v6 = 64`), since a host holding a /64 can use as many addresses as it likes: set `source_prefix_v6 = 128` only if your clients share /64s (a carrier's NAT64, a hosting provider's /64)", l.no));
                }
                let word_after =
                    |key: &str| l.words.iter().position(|w| w == key).map(|i| l.word(i + 1));
                if let Some(size) = word_after("size") {
                    match table_size(size) {
                        Some(n) => {
                            limits.row(
                                "max_sources",
                                n.to_string(),
                                format!("{}: its size; at it the least recently used source without an open connection goes, as HAProxy's least recently used unreferenced entry", l.text.trim()),
                            );
                            limits.at([l.no]);
                            self.key(l);
                        }
                        None => self.not(
                            l,
                            format!("size {size}: not a count of 1 to 10,000,000 (HAProxy's k, m and g are 2^10, 2^20 and 2^30)"),
                        ),
                    }
                }
                // A source's counts are kept while they can still decide
                // something: two periods of `conn_rate`, while a connection
                // is open for `conn_cur`. An `expire` at least that long
                // decides the same; a shorter one forgets counts HAProxy
                // would still read, and snirelay keeps them (stricter).
                let kept = period.map_or(0, |p| 2 * p);
                match word_after("expire").map(|e| (e, millis(e))) {
                    Some((e, Some(ms))) if ms < kept => self.no_key(
                        l,
                        format!("expire {e}: snirelay keeps a source's conn_rate count until it reads 0 ({}), so it refuses where HAProxy, having forgotten the source, would admit: stricter", duration(kept)),
                    ),
                    Some((e, None)) => self.not(l, format!("expire {e}: not a duration")),
                    _ => {}
                }
            }
        }
        outcome
    }

    /// Reads the `-f` pattern files of a guard's `src` tests into their
    /// networks; why one cannot be, if so.
    fn read_src_files(&self, g: &mut Guard) -> Option<String> {
        for atom in g.atoms_mut() {
            if let Atom::Src { nets, files } = atom {
                for file in std::mem::take(files) {
                    let text = match self.files.get(&file) {
                        Some(Ok(text)) => text,
                        Some(Err(why)) => return Some(format!("the pattern file `{file}`: {why}")),
                        None => return Some(format!("the pattern file `{file}` was not read")),
                    };
                    for (n, line) in pattern_lines(text) {
                        match network(line) {
                            Ok(c) => nets.push(c),
                            Err(why) => return Some(format!("{file} line {n}: {why}")),
                        }
                    }
                }
            }
        }
        None
    }
}

/// What a `reject if { FETCH gt N }` rule limits, if it is one; why it
/// cannot be translated, if so.
fn limit(
    g: &Guard,
    accept: bool,
    table: Option<(&HaproxyLine, bool, Option<u64>, bool)>,
    tracked: &[u8],
) -> Option<Result<Limit, String>> {
    let Guard::If(c) = g else { return None };
    let [all] = c.as_slice() else { return None };
    let [term] = all.as_slice() else { return None };
    let Atom::Over { fetch, allowed } = &term.atom else {
        return None;
    };
    if accept || term.negated {
        return Some(Err(format!(
            "only `reject if {{ {fetch} gt N }}` is translated"
        )));
    }
    let Some((_, conn_cur, period, _)) = table else {
        return Some(Err(format!(
            "`{fetch}` needs a stick-table in this frontend"
        )));
    };
    let counter = fetch.as_bytes()[2];
    let is_tracked = match fetch.as_bytes()[0] {
        b's' if fetch.starts_with("src_") => !tracked.is_empty(),
        _ => tracked.contains(&(counter - b'0')),
    };
    if !is_tracked {
        return Some(Err(format!(
            "`{fetch}` before the source is tracked (`tcp-request connection track-sc… src` must come first): HAProxy never matches it"
        )));
    }
    if *allowed == 0 {
        return Some(Err("a limit of 0 refuses every connection".into()));
    }
    if fetch.ends_with("_conn_cur") {
        return Some(if conn_cur {
            Ok(Limit::Open(*allowed))
        } else {
            Err("the table does not store conn_cur".into())
        });
    }
    Some(match period {
        Some(p) => Ok(Limit::Attempts(*allowed, p)),
        None => Err("the table does not store conn_rate(PERIOD)".into()),
    })
}

fn is_limit(g: &Guard) -> bool {
    let Guard::If(c) = g else { return false };
    matches!(c.as_slice(), [all] if matches!(all.as_slice(), [t] if matches!(t.atom, Atom::Over { .. })))
}

/// The peers an `expect-proxy layer4` guard names: every peer without a
/// condition, else the networks of `if` terms that are each one `src`
/// test (joined by `or`); `None` for any other condition.
fn proxy_peers(g: &Guard) -> Option<Vec<Cidr>> {
    let c = match g {
        Guard::Always => return Some(vec![Cidr::ANY_V4, Cidr::ANY_V6]),
        Guard::If(c) => c,
        Guard::Unless(_) => return None,
    };
    let mut nets = Vec::new();
    for all in c {
        let [term] = all.as_slice() else { return None };
        match &term.atom {
            Atom::Src { nets: n, .. } if !term.negated => nets.extend(n.iter().copied()),
            _ => return None,
        }
    }
    Some(nets)
}

/// Whether every test of the guard is on the source address.
fn only_sources(g: &Guard) -> bool {
    let mut g = g.clone();
    g.atoms_mut()
        .all(|a| matches!(a, Atom::Src { .. } | Atom::Constant(_)))
}

/// The networks a guard tests, and whether it holds for them (`if { src
/// … }`) rather than for every other source (`if !{ src … }`, `unless`).
fn guard_networks(g: &Guard) -> (Vec<Cidr>, bool) {
    let (c, unless) = match g {
        Guard::Always => return (Vec::new(), true),
        Guard::If(c) => (c, false),
        Guard::Unless(c) => (c, true),
    };
    let mut nets = Vec::new();
    let mut negated = false;
    for t in c.iter().flatten() {
        if let Atom::Src { nets: n, .. } = &t.atom {
            nets.extend(n.iter().copied());
            negated |= t.negated;
        }
    }
    (nets, negated == unless)
}

/// HAProxy's decision: the first rule whose guard holds decides.
fn haproxy_admits(
    rules: &[(&HaproxyLine, bool, Guard)],
    ip: IpAddr,
    over_open: bool,
    over_attempts: bool,
) -> bool {
    for (_, accept, g) in rules {
        let holds = g.holds_by(&|atom| match atom {
            Atom::Src { nets, .. } => nets.iter().any(|c| c.contains(ip)),
            Atom::Constant(b) => *b,
            Atom::Over { fetch, .. } if fetch.ends_with("_conn_cur") => over_open,
            Atom::Over { .. } => over_attempts,
            _ => false,
        });
        if holds {
            return *accept;
        }
    }
    true
}

/// One address at the start of every stretch the networks tell apart.
fn samples(nets: impl Iterator<Item = Cidr>) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = vec![[0, 0, 0, 0].into(), std::net::Ipv6Addr::UNSPECIFIED.into()];
    for c in nets {
        out.push(c.first());
        if let Some(after) = c.after_last() {
            out.push(after);
        }
    }
    out.sort();
    out.dedup();
    out
}

/// A stick-table `size`: a count with HAProxy's suffixes `k`, `m` and `g`
/// (2^10, 2^20, 2^30), within what `max_sources` takes.
fn table_size(text: &str) -> Option<u64> {
    let (digits, factor) = match text.as_bytes().last()? {
        b'k' | b'K' => (&text[..text.len() - 1], 1 << 10),
        b'm' | b'M' => (&text[..text.len() - 1], 1 << 20),
        b'g' | b'G' => (&text[..text.len() - 1], 1 << 30),
        _ => (text, 1),
    };
    let n = digits.parse::<u64>().ok()?.checked_mul(factor)?;
    (1..=10_000_000).contains(&n).then_some(n)
}
