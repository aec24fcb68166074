//! More anchors in the load benchmark: other HAProxy and nginx builds
//! (`--anchor NAME=PATH`, e.g. Debian 13's HAProxy 3.0 and nginx 1.26
//! beside Debian 12's 2.6 and 1.22, which `.ci/install-trixie-tools`
//! unpacks and scripts/loadbench.sh passes) run through the `rate`, `up`,
//! `down`, `ping` and `idle` phases as HAProxy does, and a table of their
//! own gives each one's medians beside snirelay's, with the version each
//! answered (`-v`) so that a figure names what it was measured against.
//!
//! nginx runs as [`super::nginx`] sets it up, its map sending the bench's
//! one name to the backend.
//!
//! Not here: the phases, the HAProxy configuration (in [`super`]); an
//! nginx anchor with `--proxy-v2` (its stream proxy sends v1 only) or
//! `--threads` above 1.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::{
    Args, Proxy, Samples, free_port, median, nginx, pinned, start_haproxy, wait_listening,
};

/// Which proxy an anchor is, by its name's prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Haproxy,
    Nginx,
}

/// One extra anchor: its name in the tables (`haproxy-3.0`, `nginx-1.26`,
/// …), its binary, and the version line it answered.
#[derive(Debug, Clone)]
pub(crate) struct Anchor {
    pub name: &'static str,
    pub kind: Kind,
    pub bin: PathBuf,
    pub version: String,
}

/// Parses `NAME=PATH` (NAME starts with `haproxy` or `nginx`) and asks the
/// binary its version; a missing binary is an error naming the installer.
pub(crate) fn parse(spec: &str) -> Result<Anchor, String> {
    let (name, path) = spec.split_once('=').ok_or("expected NAME=PATH")?;
    let kind = if name.starts_with("haproxy") {
        Kind::Haproxy
    } else if name.starts_with("nginx") {
        Kind::Nginx
    } else {
        return Err(format!(
            "{name}: an anchor's name starts with haproxy or nginx"
        ));
    };
    let out = Command::new(path).arg("-v").output().map_err(|e| {
        format!(
            "{path}: {e} (scripts/loadbench.sh installs the anchors with .ci/install-trixie-tools)"
        )
    })?;
    // HAProxy prints its version on stdout, nginx on stderr.
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let version = text.lines().next().unwrap_or("").trim().to_owned();
    if !out.status.success() || version.is_empty() {
        return Err(format!("{path} -v failed: {text}"));
    }
    Ok(Anchor {
        name: Box::leak(name.to_owned().into_boxed_str()),
        kind,
        bin: PathBuf::from(path),
        version,
    })
}

/// Starts `anchor` toward `backend`.
pub(crate) async fn start(anchor: &Anchor, args: &Args, dir: &Path, backend: SocketAddr) -> Proxy {
    match anchor.kind {
        Kind::Haproxy => start_haproxy(&anchor.bin, anchor.name, args, dir, backend).await,
        Kind::Nginx => start_nginx(anchor, args, dir, backend).await,
    }
}

async fn start_nginx(anchor: &Anchor, args: &Args, dir: &Path, backend: SocketAddr) -> Proxy {
    assert!(
        !args.proxy_v2,
        "{}: nginx's stream proxy sends PROXY v1 only: drop --proxy-v2",
        anchor.name
    );
    assert!(
        args.threads == 1,
        "{}: nginx runs as one process here: drop --threads",
        anchor.name
    );
    let port = free_port();
    let prefix = dir.join(anchor.name);
    std::fs::create_dir_all(prefix.join("logs")).unwrap();
    let config = nginx::StreamConfig {
        bin: &anchor.bin,
        prefix: &prefix,
        port,
        // The idle phase's connections, both sockets each, and the rate
        // phase's in flight.
        sockets: 2 * args.idle + 2000,
        stream_head: "",
        map_body: &format!("        www.example.com {backend};\n        default 127.0.0.1:9;\n"),
    }
    .render();
    let path = prefix.join("nginx.conf");
    std::fs::write(&path, config).unwrap();
    let log = std::fs::File::create(prefix.join("logs/stderr.log")).unwrap();
    let child = nginx::with_arguments(&mut pinned(&anchor.bin, args), &prefix, &path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", anchor.bin.display()));
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    wait_listening(addr, anchor.name).await;
    let pid = child.id();
    Proxy {
        name: anchor.name,
        child,
        addr,
        pid,
    }
}

/// snirelay against each anchor, medians, for the figures both have, each
/// anchor named with its version.
pub(crate) fn print_table(samples: &Samples, anchors: &[Anchor]) {
    if anchors.is_empty() {
        return;
    }
    let get = |metric: &str, who: &str| {
        samples
            .iter()
            .find(|((m, w), _)| *m == metric && *w == who)
            .map(|(_, v)| median(v))
    };
    let rows: &[(&str, &str)] = &[
        ("rate", "connections/s"),
        ("rate_cpu", "proxy CPU per connection (us)"),
        ("rate_p99", "connect-to-reply p99 (ms)"),
        ("up", "upload MB/s (8 streams)"),
        ("up_cpu", "proxy CPU ms per 100 MB up"),
        ("down", "download MB/s (8 streams)"),
        ("down_cpu", "proxy CPU ms per 100 MB down"),
        ("p50", "ping-pong p50 (us)"),
        ("p99", "ping-pong p99 (us)"),
        ("idle_rss", "idle RSS per connection (B)"),
    ];
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "\nsnirelay against the anchors (medians)\n");
    for anchor in anchors {
        let _ = writeln!(
            out,
            "- {}: {} ({})",
            anchor.name,
            anchor.version,
            anchor.bin.display()
        );
    }
    let mut header = "\n| figure | snirelay |".to_owned();
    let mut rule = "|---|---|".to_owned();
    for anchor in anchors {
        header += &format!(" {} | snirelay/{} |", anchor.name, anchor.name);
        rule += "---|---|";
    }
    let _ = writeln!(out, "{header}\n{rule}");
    for &(metric, label) in rows {
        let Some(s) = get(metric, "snirelay") else {
            continue;
        };
        let mut line = format!("| {label} | {s:.1} |");
        for anchor in anchors {
            match get(metric, anchor.name) {
                Some(a) => line += &format!(" {a:.1} | {:.2} |", s / a),
                None => line += " - | - |",
            }
        }
        let _ = writeln!(out, "{line}");
    }
}
