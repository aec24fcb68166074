//! What a flow announces to its backend: the PROXY v2 headers over UDP
//! ([`DatagramHeaders`]) its datagrams carry when the backend sets
//! `proxy_protocol = "v2"` (a cluster backend: its `hop_proxy_protocol`,
//! toward another node), made once, when the flow is routed (the hello
//! is at hand for the TLVs learnt from it), with the same fields and TLVs
//! a TCP connection's header has: behind a trusted peer relay, the
//! client it claims, the TLVs `pass_through_tlvs` kept and the hop count
//! one above the peer's, so a routing loop between nodes ends at
//! `max_hops` over UDP as over TCP.
//!
//! A cluster's flow learns only once its address is chosen whether it
//! goes to another node (the cluster's hop header) or to this node's
//! `local_backend` (that backend's own setting): both are made at
//! routing, and [`FlowHeaders::for_pick`] keeps the one that applies.
//!
//! Not here: the header's bytes and when it is sent
//! ([`crate::proxy::datagram`]), or putting it in front of datagrams
//! ([`crate::quic::socket_task`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use super::record::FlowRecord;
use crate::backend::Backends;
use crate::config::Backend;
use crate::proxy::datagram::{DEFAULT_MAX_DATAGRAM_SIZE, DatagramHeaders};
use crate::proxy::outbound::{AddedTlvs, Announcement, Learnt, Outbound};
use crate::wire::client_hello::ClientHello;
use crate::wire::fingerprint::Fingerprints;
use crate::wire::proxy::Header;
use crate::wire::proxy_tlv::PassedTlvs;

/// The headers a routed flow may send: toward the backend its route names
/// (for a cluster, toward another node), and toward the cluster's
/// `local_backend`.
#[derive(Debug, Default)]
pub(crate) struct FlowHeaders {
    routed: Option<Arc<DatagramHeaders>>,
    local: Option<Arc<DatagramHeaders>>,
}

impl FlowHeaders {
    /// The headers `record`'s flow sends `backend` (and, for a cluster,
    /// its `local_backend` among `backends`), after `relayed` (the
    /// trusted peer's header and the TLVs kept from it) if the flow came
    /// through one.
    pub(crate) fn toward(
        backend: &Backend,
        backends: &Backends,
        record: &FlowRecord,
        hello: &ClientHello,
        relayed: Option<&(Header, PassedTlvs)>,
    ) -> FlowHeaders {
        let local = backend
            .cluster()
            .and_then(|cluster| cluster.local_backend.as_deref())
            .and_then(|name| backends.get(name))
            .and_then(|local| headers_toward(&local.config, record, hello, relayed));
        FlowHeaders {
            routed: headers_toward(backend, record, hello, relayed),
            local,
        }
    }

    /// The headers for the address chosen: the local backend's when the
    /// flow goes to it, else the routed backend's.
    pub(crate) fn for_pick(self, local: bool) -> Option<Arc<DatagramHeaders>> {
        if local { self.local } else { self.routed }
    }
}

/// The headers `record`'s flow sends `backend`, if it takes them: a
/// `proxy_protocol = "v2"` backend (v1 has no UDP form: a cluster whose
/// `hop_proxy_protocol` is v1 sends none). The destination is the address
/// the client's first datagram was sent to (the unspecified address of the
/// client's family where the socket could not say), or the one a trusted
/// peer's header announced.
fn headers_toward(
    backend: &Backend,
    record: &FlowRecord,
    hello: &ClientHello,
    relayed: Option<&(Header, PassedTlvs)>,
) -> Option<Arc<DatagramHeaders>> {
    if backend.proxy_protocol != Outbound::V2 {
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
    let (inbound, passed) = match relayed {
        Some((header, passed)) => (Some(header), passed),
        None => (None, &PassedTlvs::NONE),
    };
    let announcement =
        Announcement::new(client, dialled, inbound, record.sni.as_deref(), record.id);
    let added = AddedTlvs {
        configured: &backend.proxy_protocol_tlvs,
        learnt: Learnt {
            sni: record.sni.as_deref(),
            alpn: hello.alpn.first().map(Vec::as_slice),
            ja4: record.fingerprints.as_deref().map(Fingerprints::ja4),
            ja3: record.fingerprints.as_deref().map(Fingerprints::ja3_hash),
        },
        passed,
    };
    let headers = DatagramHeaders::new(&announcement, backend.proxy_protocol_crc32c, &added)
        .within(
            backend
                .max_datagram_size
                .unwrap_or(DEFAULT_MAX_DATAGRAM_SIZE),
        );
    Some(Arc::new(headers))
}
