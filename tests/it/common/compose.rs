//! Pangolin's HA reference deployment (`config/ha-reference` in
//! fosrl/pangolin) as network namespaces: two nodes, each a host with its
//! external and internal addresses and, inside it, a Linux bridge
//! (172.30.0.0/24, as the compose network of docs/pangolin.md) with the
//! `pangolin` container (172.30.0.2) and the `gerbil` container
//! (172.30.0.3), whose namespace snirelay and Traefik share
//! (`network_mode: service:gerbil`); the published ports as Docker's
//! rules make them (DNAT of the host's local addresses' 443 to the gerbil
//! container's 8443 and 3004 to its 3004 for whatever does not come from
//! the bridge; masquerade of what leaves the bridge; the hairpin
//! masquerade); a client outside. Every host, and the client, hangs on one
//! "internet" bridge, in a namespace of its own, that carries the external
//! (203.0.113.0/24) and internal (192.0.2.0/24) addresses.
//!
//! With [`Layout::nat`], node 1's host holds only a private address
//! (10.1.0.10) behind a NAT namespace that maps its external and internal
//! addresses 1:1 onto it, as a cloud's 1:1 NAT does.
//!
//! Addresses exist only inside these namespaces. Names carry the process
//! id and a counter; everything is removed on drop (panic too). Needs
//! root, `ip` and `nft`.
//!
//! Not here: the processes and doubles that run in the containers (the
//! test's), or name resolution (`super::hosts`).

use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use super::netns::{address, default_route, run, run_with_input, veth as link, wrap_in};

/// The client, outside every node.
pub(crate) const CLIENT: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 100);
/// The client's address on the internal network (for calls to a node's
/// Gerbil API from outside its bridge).
pub(crate) const CLIENT_INTERNAL: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 100);
/// The `pangolin` container, on each node's bridge.
pub(crate) const PANGOLIN: Ipv4Addr = Ipv4Addr::new(172, 30, 0, 2);
/// The `gerbil` container (snirelay's and Traefik's namespace).
pub(crate) const GERBIL: Ipv4Addr = Ipv4Addr::new(172, 30, 0, 3);
/// Node 1's private address behind the NAT ([`Layout::nat`]).
pub(crate) const NAT_PRIVATE: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 10);

/// One node: its namespaces and addresses.
pub(crate) struct Node {
    /// The host's namespace.
    pub host: String,
    /// The `pangolin` container's.
    pub pangolin: String,
    /// The `gerbil` container's (snirelay, Traefik, Gerbil's API).
    pub gerbil: String,
    /// `<NODEn_EXTERNAL_IP>`.
    pub external: Ipv4Addr,
    /// `<NODEn_INTERNAL_IP>`.
    pub internal: Ipv4Addr,
}

/// Both nodes, the client and the internet between them.
pub(crate) struct Layout {
    pub nodes: [Node; 2],
    pub client: String,
    wan: String,
    /// The NAT in front of node 1, when there is one.
    nat: Option<String>,
}

/// Docker's rules for the gerbil container's published ports
/// (`443:8443`, `3004:3004`), in nftables form: `iptables -t nat`'s
/// `DOCKER` chain DNATs the host's local addresses (`addrtype LOCAL`) for
/// whatever does not come in from the bridge, `POSTROUTING` masquerades
/// the bridge's traffic that leaves by another interface, and a connection
/// from the container to its own published port is masqueraded too.
const DOCKER_RULES: &str = "table ip docker {
    chain prerouting {
        type nat hook prerouting priority dstnat; policy accept;
        fib daddr type local iifname != \"br0\" tcp dport 443 dnat to 172.30.0.3:8443
        fib daddr type local iifname != \"br0\" tcp dport 3004 dnat to 172.30.0.3:3004
    }
    chain postrouting {
        type nat hook postrouting priority srcnat; policy accept;
        ip saddr 172.30.0.0/24 oifname != \"br0\" masquerade
        ip saddr 172.30.0.3 ip daddr 172.30.0.3 tcp dport { 8443, 3004 } masquerade
    }
}
";

impl Layout {
    /// Both nodes on the internet with their own addresses.
    pub(crate) fn direct() -> Layout {
        Layout::build(false)
    }

    /// Node 1 behind a 1:1 NAT.
    pub(crate) fn nat() -> Layout {
        Layout::build(true)
    }

    fn build(nat: bool) -> Layout {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let tag = format!(
            "snr-ha-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let node = |n: u8| Node {
            host: format!("{tag}-h{n}"),
            pangolin: format!("{tag}-p{n}"),
            gerbil: format!("{tag}-g{n}"),
            external: Ipv4Addr::new(203, 0, 113, 10 * n),
            internal: Ipv4Addr::new(192, 0, 2, 10 * n),
        };
        let layout = Layout {
            nodes: [node(1), node(2)],
            client: format!("{tag}-c"),
            wan: format!("{tag}-wan"),
            nat: nat.then(|| format!("{tag}-nat")),
        };
        for ns in &layout.namespaces() {
            run(&["ip", "netns", "add", ns]);
            run(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        let wan = &layout.wan;
        run(&["ip", "-n", wan, "link", "add", "br0", "type", "bridge"]);
        run(&["ip", "-n", wan, "link", "set", "br0", "up"]);
        // `ns`'s `eth0` on the internet bridge, with these addresses.
        let mut ports = 0;
        let mut on_wan = |ns: &str, addrs: &[Ipv4Addr]| {
            ports += 1;
            let port = format!("w{ports}");
            link(wan, &port, ns, "eth0");
            run(&["ip", "-n", wan, "link", "set", &port, "master", "br0"]);
            run(&["ip", "-n", wan, "link", "set", &port, "up"]);
            for addr in addrs {
                address(ns, *addr, 24, "eth0");
            }
            run(&["ip", "-n", ns, "link", "set", "eth0", "up"]);
        };
        on_wan(&layout.client, &[CLIENT, CLIENT_INTERNAL]);
        for (i, node) in layout.nodes.iter().enumerate() {
            match (&layout.nat, i) {
                (Some(nat), 0) => {
                    on_wan(nat, &[node.external, node.internal]);
                    link(nat, "eth1", &node.host, "eth0");
                    address(nat, Ipv4Addr::new(10, 1, 0, 1), 24, "eth1");
                    run(&["ip", "-n", nat, "link", "set", "eth1", "up"]);
                    address(&node.host, NAT_PRIVATE, 24, "eth0");
                    run(&["ip", "-n", &node.host, "link", "set", "eth0", "up"]);
                    default_route(&node.host, Ipv4Addr::new(10, 1, 0, 1));
                    forwarding(nat);
                    let rules = format!(
                        "table ip nat1to1 {{
    chain prerouting {{
        type nat hook prerouting priority dstnat; policy accept;
        ip daddr {{ {ext}, {int} }} dnat to {private}
    }}
    chain postrouting {{
        type nat hook postrouting priority srcnat; policy accept;
        ip saddr {private} ip daddr 192.0.2.0/24 snat to {int}
        ip saddr {private} snat to {ext}
    }}
}}
",
                        ext = node.external,
                        int = node.internal,
                        private = NAT_PRIVATE,
                    );
                    run_with_input(&["ip", "netns", "exec", nat, "nft", "-f", "-"], &rules);
                }
                _ => on_wan(&node.host, &[node.external, node.internal]),
            }
            node.containers();
        }
        layout
    }

    /// Every namespace of the layout.
    fn namespaces(&self) -> Vec<String> {
        let mut all = vec![self.wan.clone(), self.client.clone()];
        all.extend(self.nat.clone());
        for n in &self.nodes {
            all.extend([n.host.clone(), n.pangolin.clone(), n.gerbil.clone()]);
        }
        all
    }

    /// Node 1 and node 2.
    pub(crate) fn node(&self, n: usize) -> &Node {
        &self.nodes[n - 1]
    }
}

impl Node {
    /// The bridge in the host, its two containers, Docker's rules.
    fn containers(&self) {
        let host = &self.host;
        run(&["ip", "-n", host, "link", "add", "br0", "type", "bridge"]);
        address(host, Ipv4Addr::new(172, 30, 0, 1), 24, "br0");
        run(&["ip", "-n", host, "link", "set", "br0", "up"]);
        for (ns, addr, port) in [
            (&self.pangolin, PANGOLIN, "vp"),
            (&self.gerbil, GERBIL, "vg"),
        ] {
            link(host, port, ns, "eth0");
            run(&["ip", "-n", host, "link", "set", port, "master", "br0"]);
            run(&["ip", "-n", host, "link", "set", port, "up"]);
            address(ns, addr, 24, "eth0");
            run(&["ip", "-n", ns, "link", "set", "eth0", "up"]);
            default_route(ns, Ipv4Addr::new(172, 30, 0, 1));
        }
        forwarding(host);
        run_with_input(
            &["ip", "netns", "exec", host, "nft", "-f", "-"],
            DOCKER_RULES,
        );
    }

    /// `command` run in the gerbil container's namespace (`ip netns exec`
    /// execs it: the child's pid is the program's).
    pub(crate) fn in_gerbil(&self, command: &Command) -> Command {
        wrap_in(&self.gerbil, command)
    }
}

impl Drop for Layout {
    fn drop(&mut self) {
        for ns in self.namespaces() {
            let _ = Command::new("ip").args(["netns", "del", &ns]).output();
        }
    }
}

/// IPv4 forwarding on in `ns` (a namespace's own setting).
fn forwarding(ns: &str) {
    run(&[
        "ip",
        "netns",
        "exec",
        ns,
        "sysctl",
        "-q",
        "-w",
        "net.ipv4.ip_forward=1",
    ]);
}
