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

use std::net::Ipv4Addr;
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
        let mut wrapped = Command::new("ip");
        wrapped
            .args(["netns", "exec", &self.name])
            .arg(command.get_program())
            .args(command.get_args());
        wrapped
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

/// Runs `args`; panics with its output unless it succeeds.
fn run(args: &[&str]) {
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
