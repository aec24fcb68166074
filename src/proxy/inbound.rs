//! The preface stage: an inbound PROXY protocol header (v2 or v1) from a
//! trusted peer relay, read before the ClientHello.
//!
//! Runs only on listeners with a `[listener.proxy_protocol]` section; others
//! go straight to `inspect`. Per connection:
//! - the source is trusted when its socket address lies in `trusted`: a
//!   network, or an address a host name there resolved to when the
//!   configuration was loaded (at start and at every reload; as Gerbil's
//!   `TRUSTED_UPSTREAMS`, which resolves its names once at start);
//! - every source is sniffed: a PROXY signature (v2's 12-byte signature, or
//!   v1's `"PROXY "`) from an untrusted source is closed (`proxy_untrusted`);
//!   anything else from it goes on untouched;
//! - a trusted source in mode `require` must send a valid header before
//!   `client_hello_timeout` (`proxy_missing`, `proxy_invalid`); in mode
//!   `optional` a first byte that cannot start a signature (a TLS record
//!   starts with 0x16) means "no header" and the connection goes on as is,
//!   so a fleet can migrate without a flag day.
//!
//! TLVs of the types the listener's `pass_through_tlvs` lists are copied
//! from a valid v2 PROXY header into [`Preface::passed_tlvs`] (bounded; our
//! hop count never among them: see [`crate::wire::proxy_tlv`]), for the outbound
//! header.
//!
//! Every byte read past the header is kept in [`Preface::buffered`] and
//! handed to `inspect`, which starts from it: sniffing never loses or
//! re-reads a byte.
//!
//! # Claims, hops, and per-source limits
//! A PROXY command with TCP over IPv4/IPv6 yields a [`ClaimedAddr`]
//! (logged as `client.claimed`, never mixed with `client.peer`), once
//! [`crate::wire::proxy::check_claim`] has found that it can be a client's. LOCAL (v2),
//! UNKNOWN (v1), and the v2 fallbacks claim nothing: the socket addresses
//! are used. A hop count over `max_hops` is refused (`hop_limit`), so a
//! routing loop between cluster nodes dies within a few hops.
//!
//! Budget decision (applied by [`crate::admission::Admission`]): a trusted peer's own
//! connections are **exempt** from per-source limits keyed on the peer's
//! address — one peer relay carries many clients, and capping it as one
//! source would cut a whole edge's traffic at 100 connections. Instead,
//! connections that carry a claim are limited by the claimed address (the
//! real client), as if it had connected directly; those with no claim
//! (LOCAL health checks, UNKNOWN, or no header in `optional` mode) are not
//! counted as a client. A trusted peer is bounded by `global.max_connections`
//! only. Because the claim is known only after the preface, admission for a
//! trusted source happens after this stage, not before the first read.
//!
//! Cost: at most one small buffer (`PREFACE_READ_CHUNK`) per connection, moved on to
//! `inspect`; a header is parsed once when complete (see `wire`).
//!
//! Not here: the header grammar, TLVs and the hop-count format (see
//! `wire`), or what the relay announces to backends (see `outbound`).

use std::io;
use std::net::IpAddr;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout_at};

use crate::addr::{ClaimedAddr, PeerAddr};
use crate::close_reason::CloseReason;
use crate::wire::cidr::canonical;
use crate::wire::proxy::{Announced, Header, Invalid, Parse, Sniff, check_claim, parse, sniff};
use crate::wire::proxy_tlv::{PassedTlvs, passed_tlvs};

/// Bytes asked for per read while sniffing or reading a header.
pub(crate) const PREFACE_READ_CHUNK: usize = 4096;

pub(crate) use crate::config::settings::Inbound;
/// A listener's validated `[listener.proxy_protocol]`: plain settings.
pub use crate::config::settings::Mode;

impl Inbound {
    pub fn trusts(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|net| net.contains(ip))
            || (!self.trusted_names.is_empty() && {
                let ip = canonical(ip);
                self.trusted_names.iter().any(|n| n.addrs.contains(&ip))
            })
    }
}

/// Who sent a connection: a client itself, or a trusted peer relay with or
/// without a claim (admission decides on it: [`crate::admission::Admission::after_preface`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sender {
    /// An untrusted source, or a listener without PROXY protocol.
    Direct(PeerAddr),
    /// A trusted peer relaying a client whose address it claims.
    Relayed {
        /// The trusted peer's socket address, as measured.
        peer: PeerAddr,
        /// The client address its PROXY header claims.
        claimed: ClaimedAddr,
    },
    /// A trusted peer's connection without a claim: LOCAL, UNKNOWN, or no
    /// header in `optional` mode.
    TrustedPeer(PeerAddr),
}

impl Sender {
    /// The claimed client address; `None` unless [`Sender::Relayed`].
    pub fn claimed(&self) -> Option<ClaimedAddr> {
        match self {
            Sender::Relayed { claimed, .. } => Some(*claimed),
            _ => None,
        }
    }
}

/// The outcome of the preface stage.
#[derive(Debug)]
pub struct Preface {
    pub(crate) sender: Sender,
    /// The header, when a trusted source sent one.
    pub header: Option<Header>,
    /// Bytes read past the header: the start of the ClientHello.
    pub buffered: Vec<u8>,
    /// The header's TLVs of the types `pass_through_tlvs` lists, for the
    /// outbound header.
    pub passed_tlvs: PassedTlvs,
}

/// Why the preface closed the connection.
#[derive(Debug, thiserror::Error)]
pub enum PrefaceError {
    /// The client closed (or reset) before sending a byte.
    #[error("closed without sending a byte")]
    Silent,
    /// The peer closed (or reset) after some bytes, before a complete header.
    #[error("closed in the middle of a PROXY header")]
    Closed,
    /// A source that owed no header sent nothing complete before the
    /// hello deadline.
    #[error("no byte before the deadline")]
    Timeout,
    /// A trusted source sent no header in `require` mode, or started one and
    /// did not finish it before the deadline.
    #[error("a trusted source sent no complete PROXY header in time")]
    Missing,
    /// A trusted source's header breaks the spec, or claims an impossible
    /// source.
    #[error("invalid PROXY header: {0}")]
    Invalid(Invalid),
    /// A source outside the trusted set sent a PROXY header.
    #[error("PROXY header from an untrusted source")]
    Untrusted,
    /// The header's hop count is above the listener's `max_hops`: a loop
    /// between relays.
    #[error("{hops} relay hops exceed max_hops = {max}")]
    HopLimit {
        /// The hop count the header carries.
        hops: u8,
        /// The listener's `max_hops`.
        max: u8,
        /// The client the looping connection carries, for the log line.
        claimed: Option<ClaimedAddr>,
    },
}

impl PrefaceError {
    /// The claimed client of a refused but well-formed header.
    pub fn claimed(&self) -> Option<ClaimedAddr> {
        match self {
            PrefaceError::HopLimit { claimed, .. } => *claimed,
            _ => None,
        }
    }
}

impl From<PrefaceError> for CloseReason {
    fn from(e: PrefaceError) -> Self {
        match e {
            PrefaceError::Silent => CloseReason::Silent,
            PrefaceError::Closed => CloseReason::ClientClosed,
            PrefaceError::Timeout => CloseReason::HelloTimeout,
            PrefaceError::Missing => CloseReason::ProxyMissing,
            PrefaceError::Invalid(_) => CloseReason::ProxyInvalid,
            PrefaceError::Untrusted => CloseReason::ProxyUntrusted,
            PrefaceError::HopLimit { .. } => CloseReason::HopLimit,
        }
    }
}

/// Reads the preface of a connection from `peer` on a listener with
/// `config`, all before `deadline` (the ClientHello deadline).
pub(crate) async fn read(
    client: &mut TcpStream,
    peer: PeerAddr,
    config: &Inbound,
    deadline: Instant,
) -> Result<Preface, PrefaceError> {
    let trusted = config.trusts(peer.0.ip());
    let mut buffered = Vec::with_capacity(PREFACE_READ_CHUNK);
    if !trusted {
        loop {
            match sniff(&buffered) {
                Sniff::Incomplete => {
                    read_more(client, &mut buffered, deadline, false, config.mode).await?
                }
                Sniff::NotProxy => {
                    return Ok(Preface {
                        sender: Sender::Direct(peer),
                        header: None,
                        buffered,
                        passed_tlvs: PassedTlvs::NONE,
                    });
                }
                Sniff::Signature(_) => return Err(PrefaceError::Untrusted),
            }
        }
    }
    let header = loop {
        match parse(&buffered) {
            Parse::Incomplete => {
                read_more(client, &mut buffered, deadline, true, config.mode).await?
            }
            Parse::NotProxy if config.mode == Mode::Require => {
                return Err(PrefaceError::Missing);
            }
            Parse::NotProxy => {
                return Ok(Preface {
                    sender: Sender::TrustedPeer(peer),
                    header: None,
                    buffered,
                    passed_tlvs: PassedTlvs::NONE,
                });
            }
            Parse::Invalid(invalid) => return Err(PrefaceError::Invalid(invalid)),
            Parse::Header(header) => break header,
        }
    };
    let sender = match header.addresses {
        Announced::Proxy { source, .. } => {
            // getsockname(2) only for a header that carries a claim.
            let local = client.local_addr().map_err(|_| PrefaceError::Closed)?;
            check_claim(source, local).map_err(PrefaceError::Invalid)?;
            Sender::Relayed {
                peer,
                claimed: ClaimedAddr(source),
            }
        }
        Announced::Local | Announced::Unknown => Sender::TrustedPeer(peer),
    };
    if header.hops > config.max_hops {
        return Err(PrefaceError::HopLimit {
            hops: header.hops,
            max: config.max_hops,
            claimed: sender.claimed(),
        });
    }
    let passed = passed_tlvs(&buffered, &header, &config.pass_through_tlvs);
    if passed.dropped > 0 {
        tracing::debug!(
            client.peer = %peer.0,
            dropped = passed.dropped,
            "PROXY TLVs past the pass-through bound were not passed on"
        );
    }
    buffered.drain(..header.len);
    Ok(Preface {
        sender,
        header: Some(header),
        buffered,
        passed_tlvs: passed.tlvs,
    })
}

async fn read_more(
    client: &mut TcpStream,
    buffered: &mut Vec<u8>,
    deadline: Instant,
    trusted: bool,
    mode: Mode,
) -> Result<(), PrefaceError> {
    let before = buffered.len();
    buffered.resize(before + PREFACE_READ_CHUNK, 0);
    let read = timeout_at(deadline, client.read(&mut buffered[before..])).await;
    let n = match read {
        Ok(Ok(n)) => n,
        Ok(Err(e)) => return Err(closed(e, before)),
        Err(_elapsed) => {
            buffered.truncate(before);
            // A trusted source owes a header in `require` mode, and a
            // header it started but never finished is missing in either
            // mode; anyone else simply sent no hello in time.
            return Err(if trusted && (before > 0 || mode == Mode::Require) {
                PrefaceError::Missing
            } else {
                PrefaceError::Timeout
            });
        }
    };
    buffered.truncate(before + n);
    match (n, before) {
        (0, 0) => Err(PrefaceError::Silent),
        (0, _) => Err(PrefaceError::Closed),
        _ => Ok(()),
    }
}

fn closed(_error: io::Error, before: usize) -> PrefaceError {
    // As in `inspect`: a reset is the client going away.
    if before == 0 {
        PrefaceError::Silent
    } else {
        PrefaceError::Closed
    }
}
