//! IP networks in CIDR notation (`10.0.0.0/8`, `2001:db8::/32`, or a bare
//! address meaning one host), for lists such as
//! `[listener.proxy_protocol] trusted`.
//!
//! An IPv4-mapped IPv6 address (`::ffff:10.1.2.3`, what a dual-stack `[::]`
//! listener reports for IPv4 clients) is matched as the IPv4 address it
//! carries, so one IPv4 entry covers both kinds of socket.
//!
//! Two shapes: a [`Cidr`] matches by itself (a linear scan of a short list,
//! one mask per entry: trusted peers, cluster `allowed_targets`); a
//! [`CidrSet`] matches in O(distinct prefix lengths), one hash lookup per
//! prefix length present, however many blocks it holds (admission's allow
//! and deny lists, which may be long).
//!
//! Not here: source keys for per-source limits (see [`crate::admission`]).

use std::collections::HashSet;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// One network: an address with its host bits clear, and a prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

/// Why a CIDR text is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    /// The text is neither an IP address nor `address/prefix`.
    #[error("not an IP address or network (write e.g. \"10.0.0.0/8\" or \"2001:db8::/32\")")]
    Syntax,
    /// The prefix is longer than 32 (IPv4) or 128 (IPv6) bits.
    #[error("prefix length {0} is too long for this address family")]
    PrefixTooLong(u8),
    /// The address has bits set past the prefix; the value is the network meant.
    #[error("has host bits set; the network is {0}")]
    HostBits(Cidr),
}

impl Cidr {
    /// Every IPv4 address (`0.0.0.0/0`).
    pub(crate) const ANY_V4: Cidr = Cidr {
        network: IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        prefix: 0,
    };
    /// Every IPv6 address (`::/0`).
    pub(crate) const ANY_V6: Cidr = Cidr {
        network: IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
        prefix: 0,
    };

    /// The prefix length (0 matches every address of its family).
    pub(crate) fn prefix(&self) -> u8 {
        self.prefix
    }

    /// The network's first address.
    pub(crate) fn first(&self) -> IpAddr {
        self.network
    }

    /// The address just after the network's last, if there is one.
    pub(crate) fn after_last(&self) -> Option<IpAddr> {
        match self.network {
            IpAddr::V4(net) => (u32::from(net) | !mask32(self.prefix))
                .checked_add(1)
                .map(|a| IpAddr::V4(a.into())),
            IpAddr::V6(net) => (u128::from(net) | !mask128(self.prefix))
                .checked_add(1)
                .map(|a| IpAddr::V6(a.into())),
        }
    }

    /// Whether `ip` lies inside this network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        match (self.network, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                u32::from(ip) & mask32(self.prefix) == u32::from(net)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                u128::from(ip) & mask128(self.prefix) == u128::from(net)
            }
            _ => false,
        }
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it carries.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => ip,
        },
        IpAddr::V4(_) => ip,
    }
}

pub(crate) fn mask32(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

pub(crate) fn mask128(prefix: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(text: &str) -> Result<Cidr, CidrError> {
        let (addr, prefix) = match text.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (text, None),
        };
        let addr = canonical(addr.parse::<IpAddr>().map_err(|_| CidrError::Syntax)?);
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && p.len() <= 3 => {
                p.parse::<u8>().map_err(|_| CidrError::Syntax)?
            }
            Some(_) => return Err(CidrError::Syntax),
        };
        if prefix > max {
            return Err(CidrError::PrefixTooLong(prefix));
        }
        let network = match addr {
            IpAddr::V4(v4) => IpAddr::V4((u32::from(v4) & mask32(prefix)).into()),
            IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & mask128(prefix)).into()),
        };
        let cidr = Cidr { network, prefix };
        if network != addr {
            return Err(CidrError::HostBits(cidr));
        }
        Ok(cidr)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// A set of CIDR blocks, matched in O(distinct prefix lengths): one hash
/// lookup per prefix length present (at most 33 for IPv4, 129 for IPv6, in
/// practice a handful), however many blocks the list holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CidrSet {
    v4: Vec<(u8, HashSet<u32>)>,
    v6: Vec<(u8, HashSet<u128>)>,
    blocks: usize,
}

impl CidrSet {
    /// Adds a block to the set.
    pub fn insert(&mut self, cidr: Cidr) {
        self.blocks += 1;
        match cidr.network {
            IpAddr::V4(v4) => insert_at(&mut self.v4, cidr.prefix, u32::from(v4)),
            IpAddr::V6(v6) => insert_at(&mut self.v6, cidr.prefix, u128::from(v6)),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.blocks == 0
    }

    /// The distinct blocks, IPv4 first, each family by prefix length then
    /// network (a list given twice is shown once). For showing the set
    /// (`/config`), not for matching.
    pub(crate) fn blocks(&self) -> Vec<Cidr> {
        fn sorted<T: Copy + Ord>(set: &HashSet<T>) -> Vec<T> {
            let mut v: Vec<T> = set.iter().copied().collect();
            v.sort_unstable();
            v
        }
        let v4 = self.v4.iter().flat_map(|(prefix, set)| {
            sorted(set).into_iter().map(|n| Cidr {
                network: IpAddr::V4(n.into()),
                prefix: *prefix,
            })
        });
        let v6 = self.v6.iter().flat_map(|(prefix, set)| {
            sorted(set).into_iter().map(|n| Cidr {
                network: IpAddr::V6(n.into()),
                prefix: *prefix,
            })
        });
        v4.chain(v6).collect()
    }

    /// Whether `ip` (taken in canonical form) lies in any block.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match canonical(ip) {
            IpAddr::V4(v4) => self
                .v4
                .iter()
                .any(|(p, set)| set.contains(&(u32::from(v4) & mask32(*p)))),
            IpAddr::V6(v6) => self
                .v6
                .iter()
                .any(|(p, set)| set.contains(&(u128::from(v6) & mask128(*p)))),
        }
    }
}

fn insert_at<T: std::hash::Hash + Eq>(levels: &mut Vec<(u8, HashSet<T>)>, prefix: u8, network: T) {
    match levels.iter_mut().find(|(p, _)| *p == prefix) {
        Some((_, set)) => {
            set.insert(network);
        }
        None => {
            levels.push((prefix, HashSet::from([network])));
            // Shorter prefixes first: wide blocks tend to be the hot ones.
            levels.sort_by_key(|(p, _)| *p);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::wire::cidr::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn networks_contain_their_hosts_only() {
        let net: Cidr = "10.0.0.0/8".parse().unwrap();
        assert!(net.contains(ip("10.255.1.2")));
        assert!(net.contains(ip("::ffff:10.1.2.3")));
        assert!(!net.contains(ip("11.0.0.1")));
        assert!(!net.contains(ip("::1")));
        let host: Cidr = "127.0.0.1".parse().unwrap();
        assert!(host.contains(ip("127.0.0.1")));
        assert!(!host.contains(ip("127.0.0.2")));
        let v6: Cidr = "2001:db8::/32".parse().unwrap();
        assert!(v6.contains(ip("2001:db8:ffff::1")));
        assert!(!v6.contains(ip("2001:db9::1")));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("203.0.113.9")));
        assert!(!all.contains(ip("2001:db8::1")));
        let all6: Cidr = "::/0".parse().unwrap();
        assert!(all6.contains(ip("2001:db8::1")));
    }

    #[test]
    fn bad_networks_are_refused_with_a_reason() {
        assert_eq!(
            "10.0.0.1/8".parse::<Cidr>().unwrap_err().to_string(),
            "has host bits set; the network is 10.0.0.0/8"
        );
        assert_eq!(
            "10.0.0.0/33".parse::<Cidr>(),
            Err(CidrError::PrefixTooLong(33))
        );
        assert_eq!("::/129".parse::<Cidr>(), Err(CidrError::PrefixTooLong(129)));
        for bad in [
            "",
            "10.0.0.0/",
            "10.0.0.0/+8",
            "10.0.0/8",
            "example.com",
            "10.0.0.0/8/8",
            "10.0.0.0/0008",
        ] {
            assert_eq!(bad.parse::<Cidr>(), Err(CidrError::Syntax), "{bad:?}");
        }
    }

    #[test]
    fn sets_match_by_prefix_and_fold_mapped_ipv4() {
        let mut s = CidrSet::default();
        assert!(s.is_empty());
        for b in ["10.0.0.0/8", "192.0.2.7", "2001:db8::/32"] {
            s.insert(b.parse().unwrap());
        }
        assert!(s.contains(ip("10.200.1.1")));
        assert!(s.contains(ip("::ffff:10.1.1.1")));
        assert!(s.contains(ip("192.0.2.7")));
        assert!(!s.contains(ip("192.0.2.8")));
        assert!(s.contains(ip("2001:db8:ffff::1")));
        assert!(!s.contains(ip("2001:db9::1")));
        let mut all = CidrSet::default();
        all.insert("0.0.0.0/0".parse().unwrap());
        assert!(all.contains(ip("203.0.113.9")));
    }
}
