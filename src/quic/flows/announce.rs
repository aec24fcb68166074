//! What a flow announces to its backend: the PROXY v2 headers over UDP
//! ([`DatagramHeaders`]) its datagrams carry when the backend sets
//! `proxy_protocol = "v2"`, made once, when the flow is routed (the hello
//! is at hand for the TLVs learnt from it), with the same fields and TLVs
//! a TCP connection's header has.
//!
//! Not here: the header's bytes and when it is sent
//! ([`crate::proxy::datagram`]), or putting it in front of datagrams
//! ([`crate::quic::socket_task`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use super::record::FlowRecord;
use crate::config::Backend;
use crate::proxy::datagram::{DEFAULT_MAX_DATAGRAM_SIZE, DatagramHeaders};
use crate::proxy::outbound::{AddedTlvs, Announcement, Learnt, Outbound};
use crate::wire::client_hello::ClientHello;
use crate::wire::fingerprint::Fingerprints;
use crate::wire::proxy_tlv::PassedTlvs;

/// The headers `record`'s flow sends `backend`, if it takes them: a
/// `proxy_protocol = "v2"` backend that is not a cluster (whose hops carry
/// no header over UDP). The destination is the address the client's first
/// datagram was sent to (the unspecified address of the client's family
/// where the socket could not say).
pub(crate) fn headers_toward(
    backend: &Backend,
    record: &FlowRecord,
    hello: &ClientHello,
) -> Option<Arc<DatagramHeaders>> {
    if backend.proxy_protocol != Outbound::V2 || backend.cluster().is_some() {
        return None;
    }
    let client = record.part.peer();
    let dialled = record.part.dialled.unwrap_or_else(|| {
        let unspecified = match client.ip() {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        };
        SocketAddr::new(unspecified, 0)
    });
    let announcement = Announcement::new(client, dialled, None, record.sni.as_deref(), record.id);
    let added = AddedTlvs {
        configured: &backend.proxy_protocol_tlvs,
        learnt: Learnt {
            sni: record.sni.as_deref(),
            alpn: hello.alpn.first().map(Vec::as_slice),
            ja4: record.fingerprints.as_deref().map(Fingerprints::ja4),
            ja3: record.fingerprints.as_deref().map(Fingerprints::ja3_hash),
        },
        passed: &PassedTlvs::NONE,
    };
    let headers = DatagramHeaders::new(&announcement, backend.proxy_protocol_crc32c, &added)
        .within(
            backend
                .max_datagram_size
                .unwrap_or(DEFAULT_MAX_DATAGRAM_SIZE),
        );
    Some(Arc::new(headers))
}
