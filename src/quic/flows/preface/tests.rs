use std::net::SocketAddr;

use super::*;
use crate::proxy::datagram::{DatagramHeaders, Prefix};
use crate::proxy::outbound::{AddedTlvs, Announcement, Learnt};
use crate::wire::proxy::Invalid;
use crate::wire::proxy_tlv::TlvTypes;

fn addr(text: &str) -> SocketAddr {
    text.parse().unwrap()
}

fn inbound(mode: Mode) -> Inbound {
    Inbound {
        trusted: vec!["10.0.0.0/8".parse().unwrap()],
        trusted_names: Vec::new(),
        mode,
        max_hops: 3,
        pass_through_tlvs: TlvTypes::NONE,
    }
}

/// A datagram as our own sender frames it: a v2 DGRAM header claiming
/// `client`, dialled at `dialled`, with `hops`, then `payload`.
fn framed(client: &str, dialled: &str, hops: Option<u8>, payload: &[u8]) -> Vec<u8> {
    let announcement = Announcement {
        source: addr(client),
        destination: addr(dialled),
        authority: Some(b"example.com".to_vec()),
        unique_id: 7,
        hops,
    };
    let added = AddedTlvs {
        configured: &[],
        learnt: Learnt::default(),
        passed: &PassedTlvs::NONE,
    };
    let headers = DatagramHeaders::new(&announcement, false, &added);
    let Prefix::Header(header) = headers.next(payload.len()) else {
        panic!("a header fits");
    };
    [header, payload].concat()
}

const PEER: &str = "10.0.0.2:40000";
const DIALLED: &str = "192.0.2.1:443";
const INITIAL: &[u8] = &[0xc3, 0, 0, 0, 1, 8, 1, 2, 3, 4, 5, 6, 7, 8];

#[test]
fn a_trusted_peers_header_is_stripped_and_claims_its_client() {
    let config = inbound(Mode::Require);
    let datagram = framed("203.0.113.7:5555", DIALLED, Some(2), INITIAL);
    let arrival = arrived(Some(&config), addr(PEER), &datagram);
    assert_eq!(arrival.payload(), Some(INITIAL));
    assert_eq!(arrival.len(), datagram.len());
    let preface = first(Some(&config), addr(PEER), Some(addr(DIALLED)), arrival).unwrap();
    assert_eq!(preface.payload, INITIAL);
    assert_eq!(
        preface.sender,
        Sender::Relayed {
            peer: PeerAddr(addr(PEER)),
            claimed: ClaimedAddr(addr("203.0.113.7:5555")),
        }
    );
    let (header, _) = preface.relayed.expect("relayed");
    assert_eq!(header.hops, 2);
}

#[test]
fn an_untrusted_signature_is_refused_and_a_plain_datagram_goes_on() {
    let config = inbound(Mode::Require);
    let untrusted = addr("198.51.100.1:1234");
    let datagram = framed("203.0.113.7:5555", DIALLED, None, INITIAL);
    let arrival = arrived(Some(&config), untrusted, &datagram);
    // A later datagram of a flow relays it as it came; a first one is refused.
    assert_eq!(arrival.payload(), Some(&datagram[..]));
    let error = first(Some(&config), untrusted, None, arrival).unwrap_err();
    assert!(matches!(error, PrefaceError::Untrusted), "{error:?}");
    assert_eq!(CloseReason::from(error), CloseReason::ProxyUntrusted);
    // v1's signature too.
    let v1 = b"PROXY TCP4 203.0.113.7 192.0.2.1 5555 443\r\n";
    let error = first(
        Some(&config),
        untrusted,
        None,
        arrived(Some(&config), untrusted, v1),
    );
    assert!(matches!(error, Err(PrefaceError::Untrusted)));
    let preface = first(
        Some(&config),
        untrusted,
        None,
        arrived(Some(&config), untrusted, INITIAL),
    )
    .unwrap();
    assert_eq!(preface.sender, Sender::Direct(PeerAddr(untrusted)));
    assert_eq!(preface.payload, INITIAL);
}

#[test]
fn required_optional_invalid_truncated_and_hop_limit_close_as_on_tcp() {
    let require = inbound(Mode::Require);
    let optional = inbound(Mode::Optional);
    let peer = addr(PEER);
    let close = |config: &Inbound, datagram: &[u8]| {
        let arrival = arrived(Some(config), peer, datagram);
        first(Some(config), peer, Some(addr(DIALLED)), arrival).map(|p| p.sender)
    };
    // No header from a trusted peer.
    assert!(matches!(
        close(&require, INITIAL),
        Err(PrefaceError::Missing)
    ));
    assert_eq!(
        close(&optional, INITIAL).unwrap(),
        Sender::TrustedPeer(PeerAddr(peer))
    );
    // A header cut short by the datagram's end: started, never finished,
    // `proxy_missing` in either mode as on TCP.
    let whole = framed("203.0.113.7:5555", DIALLED, None, b"");
    for mode in [&require, &optional] {
        let cut = close(mode, &whole[..whole.len() - 1]);
        assert!(matches!(cut, Err(PrefaceError::Missing)), "{cut:?}");
        let short = close(mode, &whole[..5]);
        assert!(matches!(short, Err(PrefaceError::Missing)), "{short:?}");
    }
    // v1 has no UDP form.
    let v1 = close(&require, b"PROXY TCP4 203.0.113.7 192.0.2.1 5555 443\r\n");
    assert!(
        matches!(v1, Err(PrefaceError::Invalid(Invalid::V1OverUdp))),
        "{v1:?}"
    );
    // A bad version nibble.
    let mut bad = framed("203.0.113.7:5555", DIALLED, None, INITIAL);
    bad[12] = 0x31;
    assert!(matches!(
        close(&require, &bad),
        Err(PrefaceError::Invalid(Invalid::Version(3)))
    ));
    // A claim of the relay's own listening socket.
    let looped = close(&require, &framed(DIALLED, DIALLED, None, INITIAL));
    assert!(matches!(
        looped,
        Err(PrefaceError::Invalid(Invalid::ImpossibleClaim { .. }))
    ));
    // Four hops over max_hops = 3, with the claim for the log line.
    let error = close(
        &require,
        &framed("203.0.113.7:5555", DIALLED, Some(4), INITIAL),
    )
    .unwrap_err();
    assert_eq!(error.claimed(), Some(ClaimedAddr(addr("203.0.113.7:5555"))));
    assert_eq!(CloseReason::from(error), CloseReason::HopLimit);
    assert!(
        close(
            &require,
            &framed("203.0.113.7:5555", DIALLED, Some(3), INITIAL)
        )
        .is_ok()
    );
}

#[test]
fn an_invalid_header_on_a_later_datagram_leaves_nothing_to_relay() {
    let config = inbound(Mode::Optional);
    let whole = framed("203.0.113.7:5555", DIALLED, None, INITIAL);
    let arrival = arrived(Some(&config), addr(PEER), &whole[..10]);
    assert_eq!(arrival.payload(), None);
    // A listener without the section reads no header at all.
    let arrival = arrived(None, addr(PEER), &whole);
    assert_eq!(arrival.payload(), Some(&whole[..]));
}
