//! `[backend.*.cluster] node_choice`: which of a site's nodes a connection
//! tries first when a cluster lookup answers several.
//!
//! - `source_hash` (the default): the backend policy of the same name
//!   (weighted rendezvous hashing on the client's IP address, see
//!   `super::balance`), so a client keeps its node while the set around it
//!   changes.
//! - `gerbil_fnv`: the choice Gerbil's SNI proxy makes, so that in a fleet
//!   of Gerbil and snirelay nodes a connection goes to the same node
//!   whichever kind received it. Gerbil (`selectStickyEndpoint` in its
//!   `proxy/proxy.go`) takes FNV-1a (32 bit) of the client's address as
//!   text, `ip:port`, and uses the endpoint at index `hash % n`, `n` the
//!   number of endpoint strings the control plane answered, in that order:
//!   it hashes the client, never an endpoint, and picks before resolving
//!   anything, so a host name counts as one endpoint whatever it resolves
//!   to (`super::cluster::Nodes::gerbil_first` maps the pick onto the
//!   resolved addresses). With one endpoint it does not hash (index 0, as
//!   `hash % 1`). The text is Go's:
//!   for a direct client `net.Conn.RemoteAddr().String()` (`1.2.3.4:5678`,
//!   `[2001:db8::1]:5678`, an IPv4-mapped address written as IPv4); behind
//!   a trusted relay's PROXY header `"%s:%d"` of the claimed address and
//!   port (an IPv6 address without brackets). `gerbil_key` writes the
//!   same text. The remaining endpoints follow in answer order, so a node
//!   that refuses the connection is not the end of it (Gerbil gives up).
//!
//! Because the port is part of the text, `gerbil_fnv` spreads a client's
//! connections over the nodes rather than keeping them on one; it exists
//! for parity with Gerbil, `source_hash` for affinity.
//!
//! Cost per connection: the key is formatted straight into the hash (no
//! allocation), one FNV step per byte of at most 47.
//!
//! Not here: ranking and planning (`super::balance`, `super::plan`).

use std::fmt::Write;
use std::net::{IpAddr, SocketAddr};

use crate::wire::cidr::canonical;

/// `[backend.*.cluster] node_choice`: plain settings.
pub(crate) use crate::config::settings::NodeChoice;

#[cfg(test)]
/// FNV-1a, 32 bit (offset basis 2166136261, prime 16777619), as Go's
/// `hash/fnv.New32a`.
pub(crate) fn fnv1a_32(bytes: &[u8]) -> u32 {
    let mut hash = Fnv(FNV_OFFSET);
    hash.add(bytes);
    hash.0
}

const FNV_OFFSET: u32 = 0x811c_9dc5;
const FNV_PRIME: u32 = 0x0100_0193;

#[cfg(test)]
/// The text Gerbil hashes for a client at `client`; `claimed` when the
/// address came from a trusted relay's PROXY header.
pub(crate) fn gerbil_key(client: SocketAddr, claimed: bool) -> String {
    let mut text = String::with_capacity(48);
    write_key(&mut text, client, claimed).expect("writing to a String");
    text
}

fn write_key(out: &mut impl Write, client: SocketAddr, claimed: bool) -> std::fmt::Result {
    match (canonical(client.ip()), claimed) {
        (IpAddr::V6(v6), false) => write!(out, "[{v6}]:{}", client.port()),
        (ip, _) => write!(out, "{ip}:{}", client.port()),
    }
}

/// FNV-1a over whatever is written to it: the key is hashed as it is
/// formatted, without a buffer (this runs once per connection).
struct Fnv(u32);

impl Fnv {
    fn add(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u32::from(b);
            self.0 = self.0.wrapping_mul(FNV_PRIME);
        }
    }
}

impl Write for Fnv {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.add(s.as_bytes());
        Ok(())
    }
}

/// The index among `n` endpoints Gerbil picks for a client at `client`
/// (0 when `n` is 0).
pub(crate) fn gerbil_index(client: SocketAddr, claimed: bool, n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    let mut hash = Fnv(FNV_OFFSET);
    write_key(&mut hash, client, claimed).expect("hashing never fails");
    // Go computes `Sum32() % uint32(len)`: in u32, as here.
    (hash.0 % n as u32) as usize
}

#[cfg(test)]
mod tests {
    use crate::backend::node_order::*;

    #[test]
    fn fnv1a_32_matches_the_published_test_vectors() {
        // From the FNV reference test suite (draft-eastlake-fnv, fnv_test.c).
        assert_eq!(fnv1a_32(b""), 0x811c9dc5);
        assert_eq!(fnv1a_32(b"a"), 0xe40c292c);
        assert_eq!(fnv1a_32(b"foobar"), 0xbf9cf968);
    }

    #[test]
    fn the_key_is_gos_text_of_the_client_address() {
        let v4: SocketAddr = "192.0.2.7:51234".parse().unwrap();
        assert_eq!(gerbil_key(v4, false), "192.0.2.7:51234");
        assert_eq!(gerbil_key(v4, true), "192.0.2.7:51234");
        let v6: SocketAddr = "[2001:db8::1]:443".parse().unwrap();
        assert_eq!(gerbil_key(v6, false), "[2001:db8::1]:443");
        assert_eq!(gerbil_key(v6, true), "2001:db8::1:443");
        let mapped: SocketAddr = "[::ffff:192.0.2.7]:80".parse().unwrap();
        assert_eq!(gerbil_key(mapped, false), "192.0.2.7:80");
    }

    #[test]
    fn the_choice_equals_gerbils_on_fixed_inputs() {
        // The expected hashes were computed outside this code (a Python
        // transcription of the FNV-1a definition, checked first against
        // the published vectors above) and are written out; `fnv1a` here
        // is a second transcription of the spec in u64 arithmetic reduced
        // mod 2^32, not the function under test.
        fn fnv1a(text: &str) -> u64 {
            let mut h: u64 = 2_166_136_261;
            for b in text.bytes() {
                h = ((h ^ u64::from(b)) * 16_777_619) % (1 << 32);
            }
            h
        }
        let cases: &[(&str, bool, u64, usize, usize)] = &[
            // (client, claimed, FNV-1a 32, endpoints, index)
            ("192.0.2.7:51234", false, 0x8c80_2eaf, 5, 4),
            ("198.51.100.20:40000", false, 0xad0e_7a94, 3, 1),
            ("[2001:db8::1]:443", false, 0xaa64_8ba2, 4, 2),
            ("2001:db8::1:443", true, 0x6945_a1dc, 7, 1),
        ];
        for &(text, claimed, hash, n, index) in cases {
            assert_eq!(fnv1a(text), hash, "{text}: the spec transcription");
            let addr: SocketAddr = text
                .parse()
                .unwrap_or_else(|_| SocketAddr::new("2001:db8::1".parse().unwrap(), 443));
            assert_eq!(gerbil_key(addr, claimed), text);
            assert_eq!(u64::from(fnv1a_32(text.as_bytes())), hash, "{text}");
            assert_eq!(hash as usize % n, index, "{text}: the hand computation");
            assert_eq!(gerbil_index(addr, claimed, n), index, "{text}");
        }
        assert_eq!(gerbil_index("192.0.2.7:1".parse().unwrap(), false, 1), 0);
    }
}
