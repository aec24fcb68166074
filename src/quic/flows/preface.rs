//! PROXY v2 over UDP read by a `protocol = "quic"` listener with a
//! `[listener.proxy_protocol]` section: what a datagram's first bytes say
//! ([`arrived`]), and what a flow's first datagram decides for the flow
//! ([`first`]), with the TCP preface's rules
//! ([`crate::proxy::inbound`]) and close reasons.
//!
//! Per datagram, before the flow table sees it:
//! - from a source outside `trusted`, a PROXY signature (v2's 12 bytes or
//!   v1's `"PROXY "`) is [`DatagramArrival::Refused`] with
//!   [`PrefaceError::Untrusted`] (`proxy_untrusted`); anything else is the
//!   client's own datagram;
//! - from a trusted peer, a valid v2 DGRAM header is stripped
//!   ([`DatagramArrival::Relayed`]); a header cut short by the datagram's end, a
//!   v1 header (no UDP form) or one that breaks the spec is
//!   [`PrefaceError::Invalid`] (`proxy_invalid`; a cut one becomes
//!   `proxy_missing` for a flow's first datagram, below); a datagram with no
//!   signature is [`DatagramArrival::TrustedPlain`].
//!
//! Per flow, on its first datagram ([`first`]), as the TCP preface decides
//! on its header: a trusted peer's plain datagram in mode `require` is
//! [`PrefaceError::Missing`] (`proxy_missing`), in mode `optional` a flow
//! of the peer's own (no claim); a header the datagram cuts short is
//! `proxy_missing` in either mode, as a TCP header started and never
//! finished is; a header's claim is checked as TCP checks
//! it ([`check_claim`], against the address the flow's datagram was sent
//! to), its hop count against `max_hops` ([`PrefaceError::HopLimit`],
//! `hop_limit`), and the TLVs `pass_through_tlvs` lists are kept for the
//! backend's header.
//!
//! A flow is its peer's address and port: a relay sends each flow from a
//! socket of its own (ours does: [`crate::quic::socket_task`]), so the
//! claim read on a flow's first datagram is the flow's claim for its whole
//! life. Later datagrams of the flow are stripped of their header (a
//! sender repeats it until the backend answers, [`crate::proxy::datagram`])
//! and their claim is not read again; one whose header is invalid cannot
//! be split into header and payload and is dropped
//! ([`DatagramArrival::payload`]). A later datagram from an untrusted source that
//! starts with a signature is the client's bytes, relayed as they came, as
//! a TCP connection's bytes after its hello are never sniffed.
//!
//! A trusted peer's flow is admitted on its claim ([`decide`], through
//! [`crate::flow::gate::after_preface`]), as a TCP connection from a
//! trusted peer is.
//!
//! Not here: the header grammar ([`crate::proxy::datagram::read`],
//! [`crate::wire::proxy`]), the limits themselves ([`crate::admission`]),
//! or the headers a flow sends on ([`super::announce`]).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use crate::addr::{ClaimedAddr, PeerAddr};
use crate::admission::SourceGuard;
use crate::flow::access::CloseReason;
use crate::flow::gate;
use crate::flow::generation::Generation;
use crate::metrics::ListenerMetrics;
use crate::proxy::datagram::{self, Read};
use crate::proxy::inbound::{Inbound, Mode, PrefaceError, Sender};
use crate::wire::proxy::{Announced, Header, Invalid, Sniff, check_claim, sniff};
use crate::wire::proxy_tlv::{PassedTlvs, passed_tlvs};

/// One datagram on a listener, as far as PROXY headers go.
#[derive(Debug)]
pub(crate) enum DatagramArrival<'d> {
    /// The client's own bytes: the listener reads no PROXY header, or an
    /// untrusted source sent no signature.
    Direct(&'d [u8]),
    /// A trusted peer's datagram without a signature.
    TrustedPlain(&'d [u8]),
    /// A trusted peer's datagram with a valid v2 header, stripped.
    Relayed {
        /// The header as read.
        header: Header,
        /// The datagram, header included (its TLVs are read from it).
        whole: &'d [u8],
        /// The bytes after the header.
        payload: &'d [u8],
    },
    /// A signature from an untrusted source, or an invalid header from a
    /// trusted one.
    Refused {
        /// Why, as the TCP preface says it.
        error: PrefaceError,
        /// The datagram as it came.
        whole: &'d [u8],
    },
}

impl<'d> DatagramArrival<'d> {
    /// The datagram's length as it came, header included.
    pub(crate) fn len(&self) -> usize {
        match self {
            DatagramArrival::Direct(bytes) | DatagramArrival::TrustedPlain(bytes) => bytes.len(),
            DatagramArrival::Relayed { whole, .. } | DatagramArrival::Refused { whole, .. } => {
                whole.len()
            }
        }
    }

    /// The bytes a flow that already exists relays or holds: the payload
    /// after a header, the datagram as it came from an untrusted source;
    /// `None` for an invalid header (dropped: no payload can be told apart).
    pub(crate) fn payload(&self) -> Option<&'d [u8]> {
        match self {
            DatagramArrival::Direct(bytes) | DatagramArrival::TrustedPlain(bytes) => Some(bytes),
            DatagramArrival::Relayed { payload, .. } => Some(payload),
            DatagramArrival::Refused {
                error: PrefaceError::Untrusted,
                whole,
            } => Some(whole),
            DatagramArrival::Refused { .. } => None,
        }
    }
}

/// What one datagram from `from` is, on a listener with `inbound` (its
/// `[listener.proxy_protocol]`, if any). Cost without a section: none;
/// with one, a signature compare (and a header parse while a peer still
/// sends headers).
pub(crate) fn arrived<'d>(
    inbound: Option<&Inbound>,
    from: SocketAddr,
    datagram: &'d [u8],
) -> DatagramArrival<'d> {
    let Some(inbound) = inbound else {
        return DatagramArrival::Direct(datagram);
    };
    if !inbound.trusts(from.ip()) {
        return match sniff(datagram) {
            Sniff::Signature(_) => DatagramArrival::Refused {
                error: PrefaceError::Untrusted,
                whole: datagram,
            },
            // A datagram is whole: a prefix of a signature is no header.
            Sniff::Incomplete | Sniff::NotProxy => DatagramArrival::Direct(datagram),
        };
    }
    match datagram::read(datagram) {
        Read::Plain(bytes) => DatagramArrival::TrustedPlain(bytes),
        Read::Header { header, payload } => DatagramArrival::Relayed {
            header,
            whole: datagram,
            payload,
        },
        Read::Invalid(invalid) => DatagramArrival::Refused {
            error: PrefaceError::Invalid(invalid),
            whole: datagram,
        },
    }
}

/// What a flow's first datagram decided: who sent the flow, and the
/// header that relays it (with the TLVs passed on).
#[derive(Debug)]
pub(crate) struct FlowPreface<'d> {
    pub(crate) sender: Sender,
    /// The trusted peer's header and the TLVs `pass_through_tlvs` keeps.
    pub(crate) relayed: Option<(Header, PassedTlvs)>,
    /// The client's bytes.
    pub(crate) payload: &'d [u8],
}

/// Decides a new flow from `from` on its first datagram `arrival`, sent to
/// `dialled` (the listening address the client's datagram reached, when
/// known), as the TCP preface decides a connection on its header.
pub(crate) fn first<'d>(
    inbound: Option<&Inbound>,
    from: SocketAddr,
    dialled: Option<SocketAddr>,
    arrival: DatagramArrival<'d>,
) -> Result<FlowPreface<'d>, PrefaceError> {
    let peer = PeerAddr(from);
    let (header, whole, payload) = match arrival {
        DatagramArrival::Direct(payload) => {
            return Ok(FlowPreface {
                sender: Sender::Direct(peer),
                relayed: None,
                payload,
            });
        }
        DatagramArrival::TrustedPlain(payload) => {
            if inbound.is_some_and(|i| i.mode == Mode::Require) {
                return Err(PrefaceError::Missing);
            }
            return Ok(FlowPreface {
                sender: Sender::TrustedPeer(peer),
                relayed: None,
                payload,
            });
        }
        // A header the datagram cuts short is one started and never
        // finished, which the TCP preface closes `proxy_missing` in
        // either mode: a header never spans datagrams.
        DatagramArrival::Refused {
            error: PrefaceError::Invalid(Invalid::Truncated),
            ..
        } => return Err(PrefaceError::Missing),
        DatagramArrival::Refused { error, .. } => return Err(error),
        DatagramArrival::Relayed {
            header,
            whole,
            payload,
        } => (header, whole, payload),
    };
    let sender = match header.addresses {
        Announced::Proxy { source, .. } => {
            // Without the address it reached, the claim is checked
            // against nothing but its own form.
            let local =
                dialled.unwrap_or_else(|| SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0));
            check_claim(source, local).map_err(PrefaceError::Invalid)?;
            Sender::Relayed {
                peer,
                claimed: ClaimedAddr(source),
            }
        }
        Announced::Local | Announced::Unknown => Sender::TrustedPeer(peer),
    };
    // A header is read only on a listener with the section: its bounds.
    let (max_hops, pass_through) = inbound.map_or((u8::MAX, None), |i| {
        (i.max_hops, Some(&i.pass_through_tlvs))
    });
    if header.hops > max_hops {
        return Err(PrefaceError::HopLimit {
            hops: header.hops,
            max: max_hops,
            claimed: sender.claimed(),
        });
    }
    let passed = match pass_through {
        Some(types) => passed_tlvs(whole, &header, types).tlvs,
        None => PassedTlvs::NONE,
    };
    Ok(FlowPreface {
        sender,
        relayed: Some((header, passed)),
        payload,
    })
}

/// A new flow's preface ([`first`]) and, when the accept gate left the
/// decision to it (`gated` is `None`: a trusted peer relay's datagram), the
/// admission on the client it claims ([`gate::after_preface`], as a TCP
/// connection's); a flow the gate admitted keeps `gated`, its source's
/// slot. A refusal names the claim (if any) for the record, and its close
/// reason.
pub(crate) fn decide<'d>(
    generation: &Generation,
    from: SocketAddr,
    dialled: Option<SocketAddr>,
    arrival: DatagramArrival<'d>,
    gated: Option<SourceGuard>,
    metrics: &ListenerMetrics,
) -> Result<(FlowPreface<'d>, Option<SourceGuard>), (Option<ClaimedAddr>, CloseReason)> {
    let inbound = generation.listener.proxy_protocol.as_ref();
    let preface = first(inbound, from, dialled, arrival)
        .map_err(|error| (error.claimed(), CloseReason::from(error)))?;
    if gated.is_some() {
        return Ok((preface, gated));
    }
    let claimed = preface.sender.claimed();
    gate::after_preface(generation, PeerAddr(from), claimed, metrics)
        .map(|admitted| (preface, admitted.and_then(|a| a.guard)))
        .map_err(|reason| (claimed, reason))
}

#[cfg(test)]
mod tests;
