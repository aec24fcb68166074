//! A decided hello carried out, once for both transports: [`carry_out`]
//! takes a TCP connection's or a QUIC flow's record and its parsed hello
//! through everything that follows the decision and is not I/O, and
//! returns what the transport must do next ([`Proceed`] or [`Refused`]).
//!
//! In order:
//! 1. the decision ([`crate::flow::decision::decide`]: admit on the hello,
//!    route, admit on the route, with its dry-run lines);
//! 2. the record's fields the hello gave (SNI, ECH, ALPN, fingerprints)
//!    and the route taken, refused or not;
//! 3. a refusal counted ([`crate::flow::decision::HelloRefused::count`]),
//!    with the TLS alert to send, if any;
//! 4. routed: the slot the hello's admission counted joined to the one
//!    the arrival holds, and the backend choice as one owned
//!    [`Pick`] (with the address the client dialled, read only for a
//!    cluster backend).
//!
//! The PROXY header's inputs ([`HeaderInputs`], from the record and the
//! hello) and the registry entry ([`crate::flow::registry::Meta::of`]) are
//! made from the record the same way on both transports too.
//!
//! Not here: reading the hello or sending anything (the refusal's bytes
//! are TCP's alert record, [`crate::tcp::refuse`], or QUIC's
//! CONNECTION_CLOSE, [`crate::quic::refusal`]), dialling or opening a
//! socket, nor the decision's rules ([`crate::flow::decision`]).

use std::net::SocketAddr;
use std::sync::Arc;

use crate::admission::{RouteAdmitted, Source, SourceGuard};
use crate::backend::BackendRuntime;
use crate::backend::candidates::Pick;
use crate::close_reason::CloseReason;
use crate::drain::DrainGuard;
use crate::flow::access::{ConnRecord, RecordPart};
use crate::flow::decision::{self, Arrived};
use crate::flow::generation::Generation;
use crate::flow::route::RouteEntry;
use crate::proxy::outbound::{AddedTlvs, Announcement, Learnt, ProxyTlv};
use crate::wire::client_hello::ClientHello;
use crate::wire::fingerprint::Fingerprints;
use crate::wire::proxy::Header;
use crate::wire::proxy_tlv::PassedTlvs;

/// A routed hello: what the transport connects to and holds meanwhile.
#[derive(Debug)]
pub(crate) struct Proceed<'g> {
    /// The route taken (its backend, timeouts and bandwidth limits).
    pub route: &'g RouteEntry,
    /// The route's backend's runtime in the generation.
    pub runtime: &'g BackendRuntime,
    /// What the backend choice needs to know ([`crate::backend::candidates`]).
    pub pick: Pick,
    /// Whom per-source limits counted ([`Arrived::source`]).
    pub source: Option<Source>,
    /// The arrival's per-source slot, joined with the one the hello's
    /// admission counted (a `limit_key` with the JA4): held for the
    /// connection's life.
    pub source_slot: Option<SourceGuard>,
    /// Its place under the route's limits, if the route has any.
    pub route_slot: Option<RouteAdmitted>,
    /// Registered with the route's drain signal until dropped.
    pub drain: DrainGuard,
    /// The address the client dialled, when it was asked (a cluster
    /// backend), for the PROXY header to reuse.
    pub dialled: Option<SocketAddr>,
}

/// A refused hello: why, and the TLS alert description the client is
/// told in its transport's form ([`crate::wire::alert`]); `None`: closed
/// at once, nothing sent. Counted already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refused {
    pub reason: CloseReason,
    pub alert: Option<u8>,
}

/// Carries out the decision on `hello` (with its `fingerprints`, if
/// computed) for the connection or flow `record` describes, which holds
/// `arrival_slot` (its source's, from the gate or the preface). `dialled`
/// says which address the client reached; it is asked only for a cluster
/// backend, whose answer may name this node. See the module header.
pub(crate) fn carry_out<'g, P: RecordPart<'g>>(
    generation: &'g Generation,
    record: &mut ConnRecord<P>,
    hello: &ClientHello,
    fingerprints: Option<Arc<Fingerprints>>,
    arrival_slot: Option<SourceGuard>,
    dialled: impl FnOnce() -> Result<SocketAddr, CloseReason>,
) -> Result<Proceed<'g>, Refused> {
    let peer = record.part.arrival().peer;
    let arrived = Arrived {
        peer,
        claimed: record.claimed,
    };
    let ja4 = fingerprints.as_deref().map(Fingerprints::ja4);
    let decision = decision::decide(generation, arrived, hello, ja4);
    record.fingerprints = fingerprints;
    if let Some(heard) = decision.heard {
        record.heard(heard);
    }
    let routed = match decision.outcome {
        Ok(routed) => routed,
        Err(refused) => {
            refused.count(&record.part.arrival().metrics);
            if let Some(entry) = refused.route {
                record.routed(entry);
            }
            return Err(Refused {
                reason: refused.reason,
                alert: refused.alert,
            });
        }
    };
    let route = routed.entry.entry;
    record.routed(route);
    let source_slot = match routed.admitted {
        Some(counted) => SourceGuard::join(counted.guard, arrival_slot),
        None => arrival_slot,
    };
    let cluster = routed.runtime.cluster.is_some();
    let dialled = match cluster {
        true => Some(dialled().map_err(|reason| Refused {
            reason,
            alert: None,
        })?),
        false => None,
    };
    let pick = Pick {
        client: record.claimed.map_or(peer.0, |c| c.0),
        claimed: record.claimed.is_some(),
        // Copied only for a cluster: a clone filtered away would still
        // allocate on every connection.
        sni: if cluster { record.sni.clone() } else { None },
        local: dialled.map(|dialled| dialled.ip()),
    };
    Ok(Proceed {
        route,
        runtime: routed.runtime,
        pick,
        source: routed.source,
        source_slot,
        route_slot: routed.route_slot,
        drain: routed.drain,
        dialled,
    })
}

/// The TLVs a connection that came through no trusted peer passes on.
static NO_TLVS: PassedTlvs = PassedTlvs::NONE;

/// What a PROXY header toward the backend says of a connection or flow,
/// as read off its record and hello: the addresses (the client's, or
/// those a trusted peer's header announced) and the TLVs learnt and
/// passed on. The header itself depends on the backend the address was
/// chosen in ([`HeaderInputs::added`]).
#[derive(Debug)]
pub(crate) struct HeaderInputs<'r> {
    pub announcement: Announcement,
    learnt: Learnt<'r>,
    passed: &'r PassedTlvs,
}

impl<'r> HeaderInputs<'r> {
    /// The inputs for `record`'s connection, which reached `dialled` (the
    /// relay's address the client sent to), through `relayed` (the
    /// trusted peer's header and the TLVs its `pass_through_tlvs` kept) if
    /// it came through one, offering `alpn` first.
    pub(crate) fn of<'l, P: RecordPart<'l>>(
        record: &'r ConnRecord<P>,
        dialled: SocketAddr,
        relayed: Option<(&Header, &'r PassedTlvs)>,
        alpn: Option<&'r [u8]>,
    ) -> HeaderInputs<'r> {
        let sni = record.sni.as_deref();
        let fingerprints = record.fingerprints.as_deref();
        HeaderInputs {
            announcement: Announcement::new(
                record.part.arrival().peer.0,
                dialled,
                relayed.map(|(header, _)| header),
                sni,
                record.id,
            ),
            learnt: Learnt {
                sni,
                alpn,
                ja4: fingerprints.map(Fingerprints::ja4),
                ja3: fingerprints.map(Fingerprints::ja3_hash),
            },
            passed: relayed.map_or(&NO_TLVS, |(_, passed)| passed),
        }
    }

    /// The TLVs a backend whose `proxy_protocol_tlvs` are `configured`
    /// gets.
    pub(crate) fn added<'a>(&'a self, configured: &'a [ProxyTlv]) -> AddedTlvs<'a> {
        AddedTlvs {
            configured,
            learnt: self.learnt,
            passed: self.passed,
        }
    }
}
