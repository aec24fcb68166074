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
//! The header's fields and TLVs are read off the record and the hello as
//! a TCP connection's are ([`HeaderInputs`]).
//!
//! Not here: the header's bytes and when it is sent
//! ([`crate::proxy::datagram`]), or putting it in front of datagrams
//! ([`crate::quic::socket_task`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use super::record::FlowRecord;
use crate::backend::Backends;
use crate::config::Backend;
use crate::flow::carry_out::HeaderInputs;
use crate::proxy::datagram::{DEFAULT_MAX_DATAGRAM_SIZE, DatagramHeaders};
use crate::proxy::outbound::Outbound;
use crate::wire::client_hello::ClientHello;
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
        // Made only when a backend takes a header: most do not.
        let local = backend
            .cluster()
            .and_then(|cluster| cluster.local_backend.as_deref())
            .and_then(|name| backends.get(name))
            .filter(|local| local.config.proxy_protocol == Outbound::V2);
        if backend.proxy_protocol != Outbound::V2 && local.is_none() {
            return FlowHeaders::default();
        }
        let client = record.part.peer();
        let dialled = record.part.dialled.unwrap_or_else(|| {
            let unspecified = match client.ip() {
                IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            };
            SocketAddr::new(unspecified, 0)
        });
        let relayed = relayed.map(|(header, passed)| (header, passed));
        let alpn = hello.alpn.first().map(Vec::as_slice);
        let inputs = HeaderInputs::of(record, dialled, relayed, alpn);
        FlowHeaders {
            routed: headers_toward(backend, &inputs),
            local: local.and_then(|local| headers_toward(&local.config, &inputs)),
        }
    }

    /// The headers for the address chosen: the local backend's when the
    /// flow goes to it, else the routed backend's.
    pub(crate) fn for_pick(self, local: bool) -> Option<Arc<DatagramHeaders>> {
        if local { self.local } else { self.routed }
    }
}

/// The headers a flow with `inputs` sends `backend`, if it takes them: a
/// `proxy_protocol = "v2"` backend (v1 has no UDP form: a cluster whose
/// `hop_proxy_protocol` is v1 sends none). The destination is the address
/// the client's first datagram was sent to (the unspecified address of the
/// client's family where the socket could not say), or the one a trusted
/// peer's header announced.
fn headers_toward(backend: &Backend, inputs: &HeaderInputs<'_>) -> Option<Arc<DatagramHeaders>> {
    if backend.proxy_protocol != Outbound::V2 {
        return None;
    }
    let added = inputs.added(&backend.proxy_protocol_tlvs);
    let headers = DatagramHeaders::new(&inputs.announcement, backend.proxy_protocol_crc32c, &added)
        .within(
            backend
                .max_datagram_size
                .unwrap_or(DEFAULT_MAX_DATAGRAM_SIZE),
        );
    Some(Arc::new(headers))
}
