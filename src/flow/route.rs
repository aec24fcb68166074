//! Routing: from the ClientHello's server name (and ALPN, TLS version and
//! ECH) to a route and its backend, or to a refusal the client can
//! understand.
//!
//! A listener generation holds one compiled [`RouteTable`]: one
//! [`RouteEntry`] per route (its name, backend, relay timeouts, hello
//! rules and bandwidth limits), the no-SNI fallback's, and a drain slot
//! per identity: (listener, pattern, alpn set → backend), one per pattern
//! of each route; a route whose `ech` sends ECH hellos elsewhere owns a
//! second entry for them and a second slot per pattern, identity
//! (listener, pattern, alpn set, ECH → backend). The patterns themselves
//! are the listener's [`NameIndex`], built by the configuration's checker
//! and shared (an `Arc`), not copied: a pattern's id is its place in the
//! listener's list, its route the one whose ids hold it, and its slot the
//! table's slot of that id. [`RouteTable::build`] compiles the table from
//! the validated listener and the previous generation's table: an
//! identity that leads to an equal backend keeps its drain slot (so
//! connections started under any earlier generation stay reachable), the
//! others get fresh ones, and [`RouteTable::retired_by`] names the signals
//! a reload must fire. A signal is made only when a connection first
//! takes its identity ([`DrainSlot`]). The slots a build makes fresh are
//! one allocation ([`SlotBlock`]), shared with the next table while it
//! carries enough of them ([`slots::KEEP_BLOCK_FRACTION`]), so a reload of
//! other names frees the old block whole (the slots and their blocks are
//! [`slots`]'s). The validated configuration holds
//! no run-time state.
//!
//! Per connection the name is normalised into an [`Sni`] once and looked up
//! once ([`RouteTable::decide`]); the same parse gives the name for the log
//! line. The rules, in order:
//! 1. `min_tls_version`: a hello whose highest offered version is older is
//!    refused with a fatal `protocol_version` alert (`tls_version`).
//! 2. No SNI: the listener's `no_sni` policy; the default route (`*`) does
//!    not apply.
//! 3. A name that is not a valid host name is refused, default route or
//!    not (`unmatched`): garbage is not "any other name".
//! 4. The matching patterns, most specific first (exact, longest
//!    wildcard, `*`): within a pattern, the route whose `alpn` shares a
//!    protocol with the hello wins, else the pattern's route without
//!    `alpn`; a pattern with neither is passed over for the next one, so a
//!    TLS-ALPN-01 route never swallows the name's other traffic. A route
//!    with `case_sensitive_names` takes a name only if the labels its
//!    pattern names were sent in lower case, one with `ldh_names` only a
//!    name without `_`; otherwise it is passed over the same way (as an
//!    HAProxy ACL without `-i`, or a `[a-z0-9-]` regex, does not match and
//!    the next rule decides). No pattern
//!    left: `unmatched`, with a fatal `unrecognized_name` alert (RFC 6066
//!    §3), which TLS clients report as such instead of a bare reset.
//! 5. ECH: the route's `ech` (else the listener's) applies to a hello whose
//!    outer ECH is real (its config id is in `ech_config_ids`) or, without
//!    configured ids, to every outer ECH; GREASE and an inner hello in the
//!    clear pass. `reject` answers a fatal `handshake_failure` alert
//!    (`ech_rejected`); a backend name relays the hello there.
//! 6. JA4 ([`RouteTable::decide_with`]): the listener's `[listener.match]`
//!    and then the chosen route's `[route.match]` (`ja4`: one must match;
//!    `ja4_deny`: none may) refuse a hello they exclude with a fatal
//!    `handshake_failure` alert (`ja4_refused`). The rules filter the route
//!    the name chose; they never choose another one. The caller computes
//!    the fingerprint only when [`RouteTable::wants_fingerprints`] says.
//!
//! Memory, per pattern: its share of the listener's [`NameIndex`] (the
//! text, a 4-byte end and a table slot) and a drain slot (an `Arc`'s
//! pointer and its 32-byte allocation); nothing else grows with the names.
//!
//! Not here: connecting, or any per-source policy; what else a reload
//! changed (`reload`).

use std::ops::Deref;
use std::sync::Arc;

use crate::close_reason::CloseReason;
use crate::config::{
    Backend, EchPolicy, HelloMatch, Listener, NameRules, NoSni, Route, TlsVersion, TlvSource,
    TlvValue,
};
use crate::pump::relay::RelayTimeouts;
use crate::pump::throttle::{ListenerBuckets, RouteThrottle};
use crate::wire::alert;
use crate::wire::client_hello::{ClientHello, Ech};
use crate::wire::matcher::NameIndex;
use crate::wire::sni::{PatternRef, Sni};

/// Where a routed connection goes: a route of a generation's route table
/// (or the listener's no-SNI fallback), shared by the route's patterns.
#[derive(Debug)]
pub(crate) struct RouteEntry {
    /// The route's name, or `no_sni` for the listener's fallback.
    pub route: Box<str>,
    pub backend: Arc<Backend>,
    /// The relay timeouts of connections on this route (the listener's for
    /// `no_sni`). Not part of the identity: a reload that changes only them
    /// applies them to new connections and drains none.
    pub timeouts: RelayTimeouts,
    /// Which spellings of a name the route's patterns take
    /// (`case_sensitive_names`, `ldh_names`); a name they refuse passes to
    /// the next pattern.
    pub names: NameRules,
    // Hello rules (ALPN, ECH).
    /// The protocols of which a hello must offer one; empty: any hello.
    pub alpn: Box<[Box<[u8]>]>,
    /// What an ECH hello the policy concerns does here.
    pub ech: EchAction,
    /// The route's `[route.match]` JA4 rules (the listener's are the
    /// table's).
    pub hello_match: HelloMatch,
    /// The route's bandwidth limits (the listener's for `no_sni`), shared
    /// by the route's entries; `None` without any. Not part of the
    /// identity: a reload that changes them applies them to new
    /// connections, and open ones keep theirs.
    pub throttle: Option<Arc<RouteThrottle>>,
}

/// What a hello was routed to: its route's entry, and the drain slot of
/// the identity it took (the pattern that matched, on that route).
/// Derefs to the entry.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RoutedTo<'a> {
    pub entry: &'a RouteEntry,
    /// The drain slot of this identity: a connection enters it
    /// ([`DrainSlot::enter`]).
    pub drain: &'a DrainSlot,
}

impl Deref for RoutedTo<'_> {
    type Target = RouteEntry;

    fn deref(&self) -> &RouteEntry {
        self.entry
    }
}

/// A route's `ech` policy, compiled.
#[derive(Debug)]
pub(crate) enum EchAction {
    Pass,
    Reject,
    /// Relay to this entry's backend, under the identity's second drain
    /// slot (`[ech]`).
    Divert(Box<RouteEntry>),
}

/// What an `encrypted_client_hello` extension was, as far as the relay can
/// tell: the `ech_kind` log field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EchKind {
    /// An outer ECH whose config id is one of `ech_config_ids`. A GREASE
    /// one picks its id at random, so it lands here with odds of one in
    /// 256 per configured id.
    Real,
    /// An outer ECH whose config id is none of `ech_config_ids`.
    Grease,
    /// An outer ECH on a listener without `ech_config_ids`.
    Unknown,
    /// An inner hello in the clear (a client-facing server in front has
    /// decrypted it); its SNI is the true name.
    Inner,
}

impl EchKind {
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            EchKind::Real => "real",
            EchKind::Grease => "grease",
            EchKind::Unknown => "unknown",
            EchKind::Inner => "inner",
        }
    }

    /// Whether the ECH policy concerns a hello of this kind: real ECH, or
    /// any outer ECH when real cannot be told from GREASE.
    const fn concerned(self) -> bool {
        matches!(self, EchKind::Real | EchKind::Unknown)
    }
}

/// Where a route's pattern ids and drain slots are in its table.
#[derive(Debug, Clone, Copy)]
struct RouteIds {
    /// The route's ids: `first..end` in the listener's [`NameIndex`]; the
    /// slot of id `i` is `slots[i]`.
    first: u32,
    end: u32,
    /// For a route whose ECH hellos are diverted, where the slots of that
    /// second identity start (the slot of id `i` is `slots[diverted + i -
    /// first]`); [`RouteIds::NONE`] otherwise.
    diverted: u32,
}

impl RouteIds {
    const NONE: u32 = u32::MAX;
}

/// The listener's no-SNI fallback: its entry and its identities' slots.
#[derive(Debug)]
struct Fallback {
    entry: RouteEntry,
    drain: Arc<DrainSlot>,
    /// Its ECH identity's slot, when the listener's `ech` diverts.
    diverted: Option<Arc<DrainSlot>>,
}

/// A listener's routes as one generation runs them.
#[derive(Debug, Default)]
pub(crate) struct RouteTable {
    /// The listener's patterns, every route's in turn (its
    /// configuration's, shared).
    names: Arc<NameIndex>,
    /// One per route, in the listener's order.
    entries: Box<[RouteEntry]>,
    /// Each route's ids and slots, in the same order (so ascending).
    spans: Box<[RouteIds]>,
    /// One per pattern id (its identity's), then the diverted identities'
    /// slots of each route that has them (see [`RouteIds`]).
    slots: Box<[SlotAt]>,
    /// The blocks `slots` point into: carried ones first, the fresh one
    /// last.
    blocks: Box<[SlotBlock]>,
    no_sni: Option<Fallback>,
    // Hello rules (TLS version, ECH).
    min_tls_version: Option<TlsVersion>,
    /// `ech_config_ids`, ascending.
    ech_config_ids: Box<[u8]>,
    // Client fingerprints.
    /// `[listener.match]`.
    hello_match: HelloMatch,
    /// Whether a hello's fingerprints are read here or logged: the
    /// listener's `fingerprints`, or any `match` rule.
    fingerprints: bool,
    /// Every limited route's throttle once (for the sweep).
    throttles: Vec<Arc<RouteThrottle>>,
}

/// What routing decided for one hello.
#[derive(Debug)]
pub(crate) struct Decision<'a> {
    /// The server name as it should be logged: normalised when valid,
    /// otherwise the raw bytes escaped so that a hostile name cannot forge
    /// log lines; `None` without SNI.
    pub sni: Option<Box<str>>,
    /// What the hello's ECH extension was; `None` without one.
    pub ech: Option<EchKind>,
    pub target: Result<RoutedTo<'a>, NoRoute>,
}

/// An identity found before the ECH rule: the route's entry, its slot,
/// and its ECH identity's slot if the route diverts.
#[derive(Clone, Copy)]
struct PreEchMatch<'a> {
    entry: &'a RouteEntry,
    drain: &'a DrainSlot,
    diverted: Option<&'a DrainSlot>,
}

/// Whether `backend`'s PROXY v2 header carries a fingerprint TLV
/// (`value = "ja4"` or `"ja3"`), so its connections need the hello's.
fn sends_fingerprint_tlv(backend: &Backend) -> bool {
    backend
        .proxy_protocol_tlvs
        .iter()
        .any(|tlv| matches!(tlv.value, TlvValue::From(TlvSource::Ja4 | TlvSource::Ja3)))
}

impl RouteTable {
    /// Compiles `listener`'s routes. An identity `previous` also has,
    /// leading to an equal backend and not yet drained, keeps its drain
    /// slot; every other one gets a fresh slot.
    pub(crate) fn build(listener: &Listener, previous: Option<&RouteTable>) -> RouteTable {
        let mut table = RouteTable {
            names: listener.names.clone(),
            min_tls_version: listener.min_tls_version,
            ech_config_ids: listener.ech_config_ids.as_slice().into(),
            hello_match: listener.hello_match.clone(),
            fingerprints: listener.fingerprints
                || listener.limits.limit_key.needs_ja4()
                || listener
                    .routes
                    .iter()
                    .any(|r| r.limits.as_ref().is_some_and(|l| l.limit_key.needs_ja4()))
                || !listener.hello_match.is_empty()
                || listener.routes.iter().any(|r| !r.hello_match.is_empty())
                || listener
                    .routes
                    .iter()
                    .any(|r| sends_fingerprint_tlv(&r.backend)),
            ..RouteTable::default()
        };
        // The listener's per-source buckets, shared by its routes that
        // have none of their own.
        let shared = ListenerBuckets::new(&relay_settings::limits(&listener.bandwidth));
        fn policy<'a>(listener: &'a Listener, route: &'a Route) -> &'a EchPolicy {
            route.ech.as_ref().unwrap_or(&listener.ech)
        }
        // Held for the generation's life: allocated to the exact size.
        let diverted_len: usize = listener
            .routes
            .iter()
            .filter(|r| matches!(policy(listener, r), EchPolicy::Backend(_)))
            .map(|r| r.patterns.len())
            .sum();
        let mut slots = Vec::with_capacity(table.names.len() + diverted_len);
        let mut diverted = Vec::with_capacity(diverted_len);
        let mut entries = Vec::with_capacity(listener.routes.len());
        let mut spans = Vec::with_capacity(listener.routes.len());
        for route in &listener.routes {
            let throttle =
                relay_settings::throttle(&listener.name, &route.name, &route.bandwidth, &shared);
            table.throttles.extend(throttle.clone());
            let alpn: Box<[Box<[u8]>]> = route.alpn.iter().map(|p| p.as_bytes().into()).collect();
            let entry = RouteEntry {
                hello_match: route.hello_match.clone(),
                names: route.names,
                ..entry(
                    route.name.as_str(),
                    &route.backend,
                    alpn,
                    policy(listener, route),
                    relay_settings::relay_timeouts(route.timeouts),
                    throttle,
                )
            };
            let to = match &entry.ech {
                EchAction::Divert(to) => Some(&to.backend),
                _ => None,
            };
            let span = RouteIds {
                first: route.patterns.start,
                end: route.patterns.end,
                diverted: match to {
                    Some(_) => (table.names.len() + diverted.len()) as u32,
                    None => RouteIds::NONE,
                },
            };
            debug_assert_eq!(span.first as usize, slots.len(), "ids follow the routes");
            for id in route.patterns.clone() {
                let kept = previous.and_then(|p| p.identity(&listener.names, id, &entry.alpn));
                slots.push(carried_at(
                    previous,
                    kept.map(|k| (k.entry, k.drain)),
                    &route.backend,
                ));
                if let Some(to) = to {
                    let kept = kept.and_then(|k| match (&k.entry.ech, k.diverted) {
                        (EchAction::Divert(was), Some(slot)) => Some((&**was, slot)),
                        _ => None,
                    });
                    diverted.push(carried_at(previous, kept, to));
                }
            }
            entries.push(entry);
            spans.push(span);
        }
        slots.append(&mut diverted);
        (table.slots, table.blocks) = place_slots(previous, slots);
        table.entries = entries.into_boxed_slice();
        table.spans = spans.into_boxed_slice();
        if let NoSni::Backend(backend) = &listener.no_sni {
            let kept = previous.and_then(|p| p.no_sni.as_ref());
            let throttle =
                relay_settings::throttle(&listener.name, "no_sni", &listener.bandwidth, &shared);
            table.throttles.extend(throttle.clone());
            let entry = entry(
                "no_sni",
                backend,
                Box::default(),
                &listener.ech,
                relay_settings::relay_timeouts(listener.timeouts()),
                throttle,
            );
            let drain = carried(kept.map(|k| (&k.entry, &k.drain)), backend);
            let diverted = match &entry.ech {
                EchAction::Divert(to) => {
                    let kept = kept.and_then(|k| match (&k.entry.ech, &k.diverted) {
                        (EchAction::Divert(was), Some(slot)) => Some((&**was, slot)),
                        _ => None,
                    });
                    Some(carried(kept, &to.backend))
                }
                _ => None,
            };
            table.no_sni = Some(Fallback {
                entry,
                drain,
                diverted,
            });
        }
        table
    }

    /// Sweeps the per-source bandwidth buckets of every limited route
    /// (see `throttle::SourceBuckets::sweep`).
    pub(crate) fn sweep_throttles(&self) {
        for throttle in &self.throttles {
            throttle.sweep();
        }
    }

    /// Whether connections of this table need their hello's fingerprints:
    /// for the log (`fingerprints = true`) or for `match` rules.
    pub(crate) fn wants_fingerprints(&self) -> bool {
        self.fingerprints
    }

    /// [`RouteTable::decide`], then the JA4 rules (rule 6): `ja4` is the
    /// hello's fingerprint, `None` when none was computed (which only rules
    /// that say nothing let pass).
    pub(crate) fn decide_with(&self, hello: &ClientHello, ja4: Option<&str>) -> Decision<'_> {
        let mut decision = self.decide(hello);
        if let Ok(target) = decision.target {
            if !(self.hello_match.allows(ja4) && target.hello_match.allows(ja4)) {
                decision.target = Err(NoRoute::Ja4Refused);
            }
        }
        decision
    }

    /// Routes one hello: parses its name once, looks it up once (see the
    /// module header for the order of the rules; JA4 rules are
    /// [`RouteTable::decide_with`]'s).
    pub(crate) fn decide(&self, hello: &ClientHello) -> Decision<'_> {
        let ech = hello.ech.map(|ech| self.ech_kind(ech));
        let (sni, found) = match hello.server_name.as_deref() {
            None => (None, self.fallback().ok_or(NoRoute::NoSni)),
            Some(raw) => match Sni::parse(raw) {
                Ok(sni) => {
                    let found = self.find(&sni, &hello.alpn).ok_or(NoRoute::Unmatched);
                    (Some(sni.into_boxed_str()), found)
                }
                Err(_) => (
                    Some(
                        String::from_utf8_lossy(raw)
                            .escape_debug()
                            .to_string()
                            .into_boxed_str(),
                    ),
                    Err(NoRoute::Unmatched),
                ),
            },
        };
        let too_old = self
            .min_tls_version
            .is_some_and(|min| hello.version.is_none_or(|offered| offered < min.wire()));
        let target = if too_old {
            Err(NoRoute::TlsVersion)
        } else {
            found.and_then(|found| match (&found.entry.ech, ech, found.diverted) {
                (EchAction::Reject, Some(kind), _) if kind.concerned() => Err(NoRoute::EchRejected),
                (EchAction::Divert(to), Some(kind), Some(drain)) if kind.concerned() => {
                    Ok(RoutedTo { entry: to, drain })
                }
                _ => Ok(RoutedTo {
                    entry: found.entry,
                    drain: found.drain,
                }),
            })
        };
        Decision { sni, ech, target }
    }

    /// The identity of the most specific pattern that has a route for
    /// `alpn`.
    fn find(&self, sni: &Sni, alpn: &[Vec<u8>]) -> Option<PreEchMatch<'_>> {
        let takes = |entry: &RouteEntry| {
            entry.alpn.is_empty()
                || entry
                    .alpn
                    .iter()
                    .any(|wanted| alpn.iter().any(|offered| **wanted == **offered))
        };
        self.names.matches(sni).find_map(|first| {
            // The bytes of the name the pattern names (a case-sensitive
            // route's must be in lower case).
            let named = match self.names.pattern(first) {
                PatternRef::Exact(name) => name.len(),
                PatternRef::Below(suffix) => suffix.len(),
                PatternRef::Any => 0,
            };
            let spelled = |entry: &RouteEntry| {
                (!entry.names.case_sensitive || sni.lower_case_from(named))
                    && (!entry.names.ldh || sni.ldh())
            };
            // Within a pattern, the routes with `alpn` come first, the
            // later in the file before the earlier; then the one without
            // (validation leaves at most one).
            let mut without = None;
            for id in self.names.group(first).rev() {
                let route = self.route_of(id);
                let entry = &self.entries[route];
                if !spelled(entry) {
                    continue;
                }
                if entry.alpn.is_empty() {
                    without = Some((route, id));
                } else if takes(entry) {
                    return Some(self.found(route, id));
                }
            }
            without.map(|(route, id)| self.found(route, id))
        })
    }

    /// The route holding pattern id `id`.
    fn route_of(&self, id: u32) -> usize {
        match &*self.spans {
            // One route: no search.
            [_] => 0,
            spans => spans.partition_point(|span| span.end <= id),
        }
    }

    /// Route `route`'s identity of pattern id `id`.
    fn found(&self, route: usize, id: u32) -> PreEchMatch<'_> {
        let at = self.identity_at(route, id);
        PreEchMatch {
            entry: at.entry,
            drain: self.slot(at.drain),
            diverted: at.diverted.map(|diverted| self.slot(diverted)),
        }
    }

    /// Route `route`'s identity of pattern id `id`, with where its slots
    /// are.
    fn identity_at(&self, route: usize, id: u32) -> IdentityAt<'_> {
        let span = self.spans[route];
        IdentityAt {
            entry: &self.entries[route],
            drain: self.slots[id as usize],
            diverted: (span.diverted != RouteIds::NONE)
                .then(|| self.slots[(span.diverted + (id - span.first)) as usize]),
        }
    }

    /// The no-SNI fallback's identity, if the listener has one.
    fn fallback(&self) -> Option<PreEchMatch<'_>> {
        self.no_sni.as_ref().map(|fallback| PreEchMatch {
            entry: &fallback.entry,
            drain: &fallback.drain,
            diverted: fallback.diverted.as_deref(),
        })
    }

    fn ech_kind(&self, ech: Ech) -> EchKind {
        match ech {
            Ech::Inner => EchKind::Inner,
            Ech::Outer { .. } if self.ech_config_ids.is_empty() => EchKind::Unknown,
            Ech::Outer { config_id } if self.ech_config_ids.contains(&config_id) => EchKind::Real,
            Ech::Outer { .. } => EchKind::Grease,
        }
    }

    /// The identity stored for exactly this pattern and alpn set, with
    /// where its slots are (to carry them).
    ///
    /// The pattern is id `id` of `names`, the next table's list: where
    /// that is this table's list too (unchanged names, kept across the
    /// reload), the id finds the identity without a lookup by name.
    fn identity(
        &self,
        names: &Arc<NameIndex>,
        id: u32,
        alpn: &[Box<[u8]>],
    ) -> Option<IdentityAt<'_>> {
        let kept = |id: u32| {
            let route = self.route_of(id);
            (*self.entries[route].alpn == *alpn).then(|| self.identity_at(route, id))
        };
        if Arc::ptr_eq(names, &self.names) {
            if let Some(found) = kept(id) {
                return Some(found);
            }
        }
        self.names.ids(names.pattern(id)).find_map(kept)
    }
}

/// An identity's entry and where its slots are: what a new table
/// carries from the previous one, and what a lookup resolves to slots.
#[derive(Clone, Copy)]
struct IdentityAt<'a> {
    entry: &'a RouteEntry,
    drain: SlotAt,
    diverted: Option<SlotAt>,
}

/// A route's entry (or the no-SNI fallback's), with its ECH policy
/// compiled.
fn entry(
    route: &str,
    backend: &Arc<Backend>,
    alpn: Box<[Box<[u8]>]>,
    ech: &EchPolicy,
    timeouts: RelayTimeouts,
    throttle: Option<Arc<RouteThrottle>>,
) -> RouteEntry {
    let ech = match ech {
        EchPolicy::Pass => EchAction::Pass,
        EchPolicy::Reject => EchAction::Reject,
        EchPolicy::Backend(to) => EchAction::Divert(Box::new(RouteEntry {
            route: route.into(),
            backend: to.clone(),
            timeouts,
            names: NameRules::default(),
            alpn: alpn.clone(),
            ech: EchAction::Pass,
            hello_match: HelloMatch::default(),
            throttle: throttle.clone(),
        })),
    };
    RouteEntry {
        route: route.into(),
        backend: backend.clone(),
        timeouts,
        names: NameRules::default(),
        alpn,
        ech,
        hello_match: HelloMatch::default(),
        throttle,
    }
}

/// A route's identity for reload diffs, as [`RouteTable::build`] keys
/// drain signals: its pattern, with its `alpn` set when it has one
/// (`acme.example.com[alpn=acme-tls/1]`).
pub(crate) fn identity(pattern: PatternRef<'_>, route: &Route) -> String {
    if route.alpn.is_empty() {
        pattern.to_string()
    } else {
        format!("{pattern}[alpn={}]", route.alpn.join(","))
    }
}

/// The backend ECH hellos of `route` are diverted to, if any: the
/// identity (`identity` + `[ech]`) with a drain signal of its own.
pub(crate) fn ech_backend<'a>(
    route: Option<&'a Route>,
    listener: &'a Listener,
) -> Option<&'a Arc<Backend>> {
    match route.and_then(|r| r.ech.as_ref()).unwrap_or(&listener.ech) {
        EchPolicy::Backend(backend) => Some(backend),
        EchPolicy::Pass | EchPolicy::Reject => None,
    }
}

/// Why a connection may not go anywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NoRoute {
    #[error("no SNI, and the listener rejects hellos without one")]
    NoSni,
    #[error("the SNI matches no route")]
    Unmatched,
    #[error("the hello offers no TLS version as new as min_tls_version")]
    TlsVersion,
    #[error("the hello carries ECH and its route rejects ECH")]
    EchRejected,
    #[error("the hello's JA4 fingerprint is refused by its listener's or route's match rules")]
    Ja4Refused,
}

impl NoRoute {
    /// The description of the fatal alert the client is sent (see
    /// [`crate::wire::alert`]).
    pub(crate) const fn alert(self) -> u8 {
        match self {
            NoRoute::NoSni | NoRoute::Unmatched => alert::UNRECOGNIZED_NAME,
            NoRoute::TlsVersion => alert::PROTOCOL_VERSION,
            NoRoute::EchRejected | NoRoute::Ja4Refused => alert::HANDSHAKE_FAILURE,
        }
    }
}

impl From<NoRoute> for CloseReason {
    fn from(r: NoRoute) -> Self {
        match r {
            NoRoute::NoSni => CloseReason::NoSni,
            NoRoute::Unmatched => CloseReason::Unmatched,
            NoRoute::TlsVersion => CloseReason::TlsVersion,
            NoRoute::EchRejected => CloseReason::EchRejected,
            NoRoute::Ja4Refused => CloseReason::Ja4Refused,
        }
    }
}

mod relay_settings;
mod slots;
pub(crate) use slots::DrainSlot;
use slots::{SlotAt, SlotBlock, carried, carried_at, place_slots};

#[cfg(test)]
mod tests;
