//! The PROXY protocol (v2 and v1), split by role:
//!
//! - [`crate::wire::proxy`]: the format itself: signatures, the header parser, TLV
//!   reading, the claim check and our hop-count value. Pure, no I/O.
//! - [`inbound`]: the preface stage: reading a header from a trusted peer
//!   relay off the socket, under the ClientHello deadline, and the
//!   listener's `[listener.proxy_protocol]` settings.
//! - [`outbound`]: the announce stage: the header a backend receives,
//!   encoded with `ppp`, and the backend's `proxy_protocol` setting.
//! - [`datagram`]: the same over UDP (DGRAM): the headers a flow's
//!   datagrams carry until the backend answers, within a datagram size,
//!   and reading one off a datagram.
//!
//! `inbound → wire ← outbound ← datagram`: the stages share the format;
//! the datagram headers are the outbound announcement in another framing.
//!
//! Not here: the claimed address's type ([`crate::addr`]), or what
//! admission does with a peer relay's connections ([`crate::flow::gate`]).

pub mod datagram;
pub mod inbound;
pub mod outbound;
