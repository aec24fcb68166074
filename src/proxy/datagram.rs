//! PROXY v2 over UDP (the DGRAM transport): the header a UDP flow's
//! datagrams carry toward a backend that reads one, and reading one off a
//! datagram from a trusted peer.
//!
//! # When the header is sent
//! On every datagram toward the backend **until the first datagram comes
//! back from it**, then never again for that flow ([`DatagramHeaders`]).
//! A backend answers only once it has read a datagram of the flow, and
//! every datagram it could have read first carried the header, so an
//! answer proves the far end holds the flow and its claim; until then the
//! loss of any datagram (the first included) loses nothing, since the next
//! one carries the same header. Headers stop before the flow's bulk
//! traffic, so they cost nothing once a QUIC handshake is done. A reader
//! tells a header from a QUIC packet by the v2 signature's 12 bytes: a
//! QUIC packet would need its fixed bit clear (RFC 9000 §17.2–17.3; only
//! with RFC 9287's greased bit) and 11 bytes of its connection ID equal
//! to the signature's.
//!
//! # Size
//! A header must never push a datagram past `max_datagram_size` (default
//! [`DEFAULT_MAX_DATAGRAM_SIZE`]: a 1,500-byte MTU less 40 bytes of IPv6
//! and 8 of UDP header, which also fits IPv4's 1,472). The full header
//! carries the addresses (12 bytes for IPv4, 36 for IPv6), AUTHORITY (the
//! SNI, up to 3 + 255 bytes), UNIQUE_ID (3 + up to 20) and, for a relayed
//! flow, the hop count (17): 16 + 36 + 3 + 20 + 3 + 20 + 17 = 115 bytes for
//! a 20-byte name over IPv6. A QUIC client pads its Initial datagrams to
//! at least 1,200 bytes (RFC 9000 §14.1) and many send 1,250–1,357, so
//! 1,357 + 115 would not fit 1,452. A datagram the full header would make
//! too large carries the **minimal** header instead: the addresses and
//! the hop count only, 16 + 36 + 17 = 69 bytes at most (28 for IPv4 and
//! no hop), which fits every datagram up to 1,383 bytes. One that not
//! even the minimal header fits is dropped ([`Prefix::TooLarge`], counted
//! by the caller): sent without a header it would reach the backend with
//! no claim, and sent whole it would be fragmented or lost on the path.
//!
//! # Reading
//! [`read`] takes one datagram from a trusted peer: no signature is a
//! plain datagram; a v2 header is stripped and its claim returned (a
//! STREAM claim, AF_UNIX or UNSPEC falls back to no claim, as on TCP); a
//! v2 header the datagram cuts short and a v1 header (which has no UDP
//! form) are invalid.
//!
//! Not here: the flows, their sockets and when a flow is answered
//! (`quic`), the header grammar ([`crate::wire::proxy`]), or the header a
//! TCP backend receives ([`crate::proxy::outbound`]).

use std::sync::atomic::{AtomicBool, Ordering};

use ppp::v2;

use crate::proxy::outbound::{AddedTlvs, Announcement, Outbound, finish, header_over, same_family};
use crate::wire::proxy::{self, Invalid, Parse, ProxyTransport, ProxyVersion, Sniff, sniff};

/// The largest datagram a header may make: a 1,500-byte MTU less IPv6's
/// 40-byte and UDP's 8-byte headers.
pub const DEFAULT_MAX_DATAGRAM_SIZE: usize = 1500 - 40 - 8;

/// The two headers a flow's datagrams may carry toward its backend, and
/// whether the backend has answered (after which none is sent). Shared by
/// the task that sends the flow's datagrams and the one that reads its
/// answers: the answer is a flag either may read.
#[derive(Debug)]
pub struct DatagramHeaders {
    full: Vec<u8>,
    minimal: Vec<u8>,
    /// The backend's `max_datagram_size`: no header makes a datagram larger.
    max_datagram_size: usize,
    answered: AtomicBool,
}

/// What to put in front of one datagram toward the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prefix<'a> {
    /// Nothing: the backend has answered.
    Nothing,
    /// This header (the full one, or the minimal one where the full one
    /// would not fit).
    Header(&'a [u8]),
    /// Not even the minimal header fits under the size: drop the datagram.
    TooLarge,
}

impl DatagramHeaders {
    /// The headers for a flow announced by `announcement` (its claim or
    /// its client, its SNI, its id, its hop count), the full one with
    /// `added` (the backend's `proxy_protocol_tlvs`, as a TCP connection's
    /// header has them), each with a CRC32C TLV when `crc32c`.
    pub fn new(
        announcement: &Announcement,
        crc32c: bool,
        added: &AddedTlvs<'_>,
    ) -> DatagramHeaders {
        let full = header_over(
            Outbound::V2,
            crc32c,
            announcement,
            added,
            v2::Protocol::Datagram,
        )
        .unwrap_or_default();
        let (source, destination) = same_family(announcement.source, announcement.destination);
        let hops = announcement.hops.map(proxy::hops_value);
        let minimal = finish(
            v2::Builder::with_addresses(
                v2::Version::Two | v2::Command::Proxy,
                v2::Protocol::Datagram,
                (source, destination),
            ),
            &hops
                .as_ref()
                .map(|h| (proxy::TLV_HOPS, &h[..]))
                .into_iter()
                .collect::<Vec<_>>(),
            crc32c,
        );
        DatagramHeaders {
            full,
            minimal,
            max_datagram_size: DEFAULT_MAX_DATAGRAM_SIZE,
            answered: AtomicBool::new(false),
        }
    }

    /// The same headers, for datagrams that must stay within
    /// `max_datagram_size` bytes (the backend's key; without it
    /// [`DEFAULT_MAX_DATAGRAM_SIZE`]).
    pub fn within(mut self, max_datagram_size: usize) -> DatagramHeaders {
        self.max_datagram_size = max_datagram_size;
        self
    }

    /// What goes in front of the flow's next datagram of `payload` bytes,
    /// within its `max_datagram_size`.
    pub fn next(&self, payload: usize) -> Prefix<'_> {
        self.prefix(payload, self.max_datagram_size)
    }

    /// The backend sent a datagram of the flow back: it holds the flow,
    /// so no further datagram carries a header.
    pub fn answered(&self) {
        self.answered.store(true, Ordering::Relaxed);
    }

    /// Whether headers are still being sent.
    pub fn sending(&self) -> bool {
        !self.answered.load(Ordering::Relaxed)
    }

    /// What goes in front of a datagram of `payload` bytes that must stay
    /// within `max_datagram_size` bytes.
    pub fn prefix(&self, payload: usize, max_datagram_size: usize) -> Prefix<'_> {
        if !self.sending() {
            Prefix::Nothing
        } else if payload + self.full.len() <= max_datagram_size {
            Prefix::Header(&self.full)
        } else if payload + self.minimal.len() <= max_datagram_size {
            Prefix::Header(&self.minimal)
        } else {
            Prefix::TooLarge
        }
    }
}

/// One datagram from a trusted peer, as [`read`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read<'a> {
    /// No PROXY signature: the datagram as it came.
    Plain(&'a [u8]),
    /// A valid v2 header, and the payload after it.
    Header {
        /// What the header says (its claim: [`proxy::Announced`]).
        header: proxy::Header,
        /// The bytes after the header.
        payload: &'a [u8],
    },
    /// A PROXY signature followed by something that is no valid header
    /// in one datagram.
    Invalid(Invalid),
}

/// Reads the PROXY header, if any, at the start of one datagram.
pub fn read(datagram: &[u8]) -> Read<'_> {
    match sniff(datagram) {
        Sniff::NotProxy => return Read::Plain(datagram),
        Sniff::Incomplete if datagram.is_empty() => return Read::Plain(datagram),
        Sniff::Incomplete => return Read::Invalid(Invalid::Truncated),
        Sniff::Signature(ProxyVersion::V1) => return Read::Invalid(Invalid::V1OverUdp),
        Sniff::Signature(ProxyVersion::V2) => {}
    }
    match proxy::parse_as(datagram, ProxyTransport::Datagram) {
        Parse::Header(header) => {
            let payload = &datagram[header.len..];
            Read::Header { header, payload }
        }
        Parse::Incomplete => Read::Invalid(Invalid::Truncated),
        Parse::Invalid(invalid) => Read::Invalid(invalid),
        // sniff found a signature: parse agrees.
        Parse::NotProxy => Read::Plain(datagram),
    }
}

#[cfg(test)]
mod tests;
