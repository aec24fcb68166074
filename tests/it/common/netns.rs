//! A network namespace joined to the test's own by a veth pair, for tests
//! that need packets dropped (a peer that vanishes without FIN or reset)
//! without touching the host's firewall.
//!
//! The relay runs inside the namespace ([`NetNs::wrap`]) on the inner
//! address; clients and backends stay in the test process, on the outer
//! address. A packet filter in the namespace ([`NetNs::drop_from`]) drops
//! what a peer sends to the relay, so the relay's probes go unanswered as
//! if the peer's network had gone. Names and the /30 subnet (in
//! 10.200.0.0/16) are derived from the process id and a counter, skipping
//! subnets already in use, so tests running in parallel do not collide.
//! Everything is removed on drop (on panic too). Needs root, `ip` and
//! `nft`; a test that cannot set up fails loudly, it never skips.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// A namespace, its veth pair and its addresses.
pub(crate) struct NetNs {
    pub name: String,
    /// The test's end of the veth pair (in the test's namespace).
    pub outer: Ipv4Addr,
    /// The namespace's end.
    pub inner: Ipv4Addr,
    outer_link: String,
}

/// Subnets (of 16,384 /30s) tried before giving up.
const ATTEMPTS: u32 = 64;

impl NetNs {
    pub(crate) fn new() -> NetNs {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let pid = std::process::id();
        for _ in 0..ATTEMPTS {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let index = (pid.wrapping_mul(64).wrapping_add(n)) % 16_384;
            let base = u32::from(Ipv4Addr::new(10, 200, 0, 0)) + index * 4;
            let (outer, inner) = (Ipv4Addr::from(base + 1), Ipv4Addr::from(base + 2));
            let in_use = output(&[
                "ip",
                "-4",
                "-o",
                "addr",
                "show",
                "to",
                &format!("{}/30", Ipv4Addr::from(base)),
            ]);
            if !in_use.trim().is_empty() {
                continue;
            }
            let name = format!("snirelay-{pid}-{n}");
            // Interface names have at most 15 bytes.
            let (outer_link, inner_link) = (format!("snr{index}a"), format!("snr{index}b"));
            let ns = NetNs {
                name,
                outer,
                inner,
                outer_link,
            };
            run(&["ip", "netns", "add", &ns.name]);
            run(&[
                "ip",
                "link",
                "add",
                &ns.outer_link,
                "type",
                "veth",
                "peer",
                "name",
                &inner_link,
                "netns",
                &ns.name,
            ]);
            run(&[
                "ip",
                "addr",
                "add",
                &format!("{outer}/30"),
                "dev",
                &ns.outer_link,
            ]);
            run(&["ip", "link", "set", &ns.outer_link, "up"]);
            ns.exec(&[
                "ip",
                "addr",
                "add",
                &format!("{inner}/30"),
                "dev",
                &inner_link,
            ]);
            ns.exec(&["ip", "link", "set", &inner_link, "up"]);
            ns.exec(&["ip", "link", "set", "lo", "up"]);
            return ns;
        }
        panic!("no free /30 in 10.200.0.0/16 after {ATTEMPTS} attempts");
    }

    /// `command` (program and arguments), run inside the namespace with
    /// `ip netns exec`, which execs it: the child's pid is the program's.
    pub(crate) fn wrap(&self, command: &Command) -> Command {
        wrap_in(&self.name, command)
    }

    /// Runs `args` inside the namespace; panics unless it succeeds.
    pub(crate) fn exec(&self, args: &[&str]) -> String {
        let mut all = vec!["ip", "netns", "exec", &self.name];
        all.extend_from_slice(args);
        output(&all)
    }

    /// From now on, every TCP segment from the outer address's `port`
    /// (a peer the relay talks to) is dropped as it reaches the namespace:
    /// the peer has vanished, no FIN, no reset, no ICMP.
    pub(crate) fn drop_from(&self, port: u16) {
        self.exec(&["nft", "add", "table", "inet", "vanish"]);
        self.exec(&[
            "nft",
            "add",
            "chain",
            "inet",
            "vanish",
            "input",
            "{ type filter hook input priority 0 ; policy accept ; }",
        ]);
        self.exec(&[
            "nft",
            "add",
            "rule",
            "inet",
            "vanish",
            "input",
            "ip",
            "saddr",
            &self.outer.to_string(),
            "tcp",
            "sport",
            &port.to_string(),
            "drop",
        ]);
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        // Deleting the outer end deletes the pair; the namespace goes when
        // its last process (the relay, killed first) has gone.
        let _ = Command::new("ip")
            .args(["link", "del", &self.outer_link])
            .output();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// The relay's nftables rules for the transparent source, as
/// docs/operations.md gives them.
pub(crate) const TPROXY_RULES: &str = "table inet snirelay_tproxy {
    chain prerouting {
        type filter hook prerouting priority mangle; policy accept;
        socket transparent 1 meta mark set 0x1
    }
}
";

/// Runs `args` with `input` on its standard input; panics unless it
/// succeeds.
pub(crate) fn run_with_input(args: &[&str], input: &str) {
    use std::io::Write;
    let mut child = Command::new(args[0])
        .args(&args[1..])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {args:?}: {e} (the test needs root, ip and nft)"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{args:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `args`; panics with its output unless it succeeds.
pub(crate) fn run(args: &[&str]) {
    output(args);
}

fn output(args: &[&str]) -> String {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {args:?}: {e} (the test needs root, ip and nft)"));
    assert!(
        out.status.success(),
        "{args:?} failed ({}): {} (the test needs root, ip and nft)",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

// ------------------------------------------------------- three namespaces

/// Three namespaces in a row, for the transparent source
/// (tests/it/transparent.rs): `client` — `relay` — `backend`, each link a
/// veth pair with a /24 of its own (10.211.N.0/24 client side, 10.212.N.0/24
/// backend side, the relay .1 on both), the client's and the backend's
/// default routes through the relay, and on the relay the policy routing and
/// nftables rule of docs/operations.md ("Transparent source") that deliver
/// the backend's replies to the relay's transparent sockets. Sockets are
/// made inside a namespace from a thread that joined it ([`Triangle::in_ns`]);
/// the relay runs in its namespace through `ip netns exec` ([`Triangle::wrap`]).
/// Everything is removed on drop. Names carry the branch's tag and the
/// process id; needs root, `ip` and `nft`.
pub(crate) struct Triangle {
    pub client: String,
    pub relay: String,
    pub backend: String,
    /// The client's address, the relay's on the client link, the
    /// backend's.
    pub client_ip: Ipv4Addr,
    pub relay_ip: Ipv4Addr,
    pub backend_ip: Ipv4Addr,
    /// The same three in IPv6 (fd33:N:1::/64 client side, fd33:N:2::/64
    /// backend side), added without duplicate address detection.
    pub client_ip6: Ipv6Addr,
    pub relay_ip6: Ipv6Addr,
    pub backend_ip6: Ipv6Addr,
}

impl Triangle {
    pub(crate) fn new() -> Triangle {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let pid = std::process::id();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let index = (pid.wrapping_mul(8).wrapping_add(n) % 250) as u8;
        let tag = format!("snr-egress-{pid}-{n}");
        let triangle = Triangle {
            client: format!("{tag}-c"),
            relay: format!("{tag}-r"),
            backend: format!("{tag}-b"),
            client_ip: Ipv4Addr::new(10, 211, index, 2),
            relay_ip: Ipv4Addr::new(10, 211, index, 1),
            backend_ip: Ipv4Addr::new(10, 212, index, 2),
            client_ip6: Ipv6Addr::new(0xfd33, index.into(), 1, 0, 0, 0, 0, 2),
            relay_ip6: Ipv6Addr::new(0xfd33, index.into(), 1, 0, 0, 0, 0, 1),
            backend_ip6: Ipv6Addr::new(0xfd33, index.into(), 2, 0, 0, 0, 0, 2),
        };
        let relay_back = Ipv4Addr::new(10, 212, index, 1);
        let relay_back6 = Ipv6Addr::new(0xfd33, index.into(), 2, 0, 0, 0, 0, 1);
        for ns in [&triangle.client, &triangle.relay, &triangle.backend] {
            run(&["ip", "netns", "add", ns]);
            run(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        veth(&triangle.client, "c0", &triangle.relay, "r0");
        veth(&triangle.relay, "r1", &triangle.backend, "b0");
        let addr = |ns: &str, ip: Ipv4Addr, dev: &str| {
            address(ns, ip, 24, dev);
            run(&["ip", "-n", ns, "link", "set", dev, "up"]);
        };
        addr(&triangle.client, triangle.client_ip, "c0");
        addr(&triangle.relay, triangle.relay_ip, "r0");
        addr(&triangle.relay, relay_back, "r1");
        addr(&triangle.backend, triangle.backend_ip, "b0");
        let addr6 = |ns: &str, ip: Ipv6Addr, dev: &str| {
            run(&[
                "ip",
                "-n",
                ns,
                "-6",
                "addr",
                "add",
                &format!("{ip}/64"),
                "dev",
                dev,
                "nodad",
            ]);
        };
        addr6(&triangle.client, triangle.client_ip6, "c0");
        addr6(&triangle.relay, triangle.relay_ip6, "r0");
        addr6(&triangle.relay, relay_back6, "r1");
        addr6(&triangle.backend, triangle.backend_ip6, "b0");
        default_route(&triangle.client, triangle.relay_ip);
        // The backend answers the client through the relay.
        default_route(&triangle.backend, relay_back);
        for (ns, gw) in [
            (&triangle.client, triangle.relay_ip6),
            (&triangle.backend, relay_back6),
        ] {
            run(&[
                "ip",
                "-n",
                ns,
                "-6",
                "route",
                "add",
                "default",
                "via",
                &gw.to_string(),
            ]);
        }
        // docs/operations.md, "Transparent source": replies to a
        // transparent socket are marked and routed to this host.
        let r = &triangle.relay;
        run(&["ip", "-n", r, "rule", "add", "fwmark", "1", "lookup", "100"]);
        run(&[
            "ip",
            "-n",
            r,
            "route",
            "add",
            "local",
            "0.0.0.0/0",
            "dev",
            "lo",
            "table",
            "100",
        ]);
        run(&[
            "ip", "-n", r, "-6", "rule", "add", "fwmark", "1", "lookup", "100",
        ]);
        run(&[
            "ip", "-n", r, "-6", "route", "add", "local", "::/0", "dev", "lo", "table", "100",
        ]);
        run_with_input(&["ip", "netns", "exec", r, "nft", "-f", "-"], TPROXY_RULES);
        triangle
    }

    /// `command` run inside the relay's namespace (`ip netns exec` execs
    /// it: the child's pid is the program's).
    pub(crate) fn wrap(&self, command: &Command) -> Command {
        wrap_in(&self.relay, command)
    }

    /// Runs `make` on a thread that has joined namespace `ns`: a socket
    /// made there stays in that namespace for its life.
    pub(crate) fn in_ns<T: Send + 'static>(
        &self,
        ns: &str,
        make: impl FnOnce() -> T + Send + 'static,
    ) -> T {
        in_ns(ns, make)
    }
}

/// `command` run inside the named namespace `ns` with `ip netns exec`,
/// which execs it: the child's pid is the program's.
pub(crate) fn wrap_in(ns: &str, command: &Command) -> Command {
    let mut wrapped = Command::new("ip");
    wrapped
        .args(["netns", "exec", ns])
        .arg(command.get_program())
        .args(command.get_args());
    wrapped
}

/// A veth pair made straight into two named namespaces: `a_if` in `a`,
/// `b_if` in `b`.
pub(crate) fn veth(a: &str, a_if: &str, b: &str, b_if: &str) {
    run(&[
        "ip", "link", "add", a_if, "netns", a, "type", "veth", "peer", "name", b_if, "netns", b,
    ]);
}

/// `addr/prefix` on `dev` in the named namespace `ns`.
pub(crate) fn address(ns: &str, addr: Ipv4Addr, prefix: u8, dev: &str) {
    run(&[
        "ip",
        "-n",
        ns,
        "addr",
        "add",
        &format!("{addr}/{prefix}"),
        "dev",
        dev,
    ]);
}

/// A default route in the named namespace `ns`, through `gw`.
pub(crate) fn default_route(ns: &str, gw: Ipv4Addr) {
    run(&[
        "ip",
        "-n",
        ns,
        "route",
        "add",
        "default",
        "via",
        &gw.to_string(),
    ]);
}

/// Runs `make` on a thread that has joined the named network namespace
/// `ns`: a socket made there stays in that namespace for its life.
pub(crate) fn in_ns<T: Send + 'static>(ns: &str, make: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
            .unwrap_or_else(|e| panic!("setns {path}: {e} (the test needs root)"));
        make()
    })
    .join()
    .unwrap()
}

impl Drop for Triangle {
    fn drop(&mut self) {
        for ns in [&self.client, &self.relay, &self.backend] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}
