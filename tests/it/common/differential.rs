//! The differential harness: real HAProxy on an HAProxy configuration and
//! snirelay on `snirelay import-haproxy` of the same text, side by side,
//! each with its own recording backends, fed the same scripted traffic.
//! The HAProxy is a parameter ([`Haproxy`]): [`haproxies`] gives the
//! versions operators run, Debian 12's 2.6 and Debian 13's 3.0, each
//! checked to be the version it claims, and the scripts run against each.
//!
//! A script is a list of [`Conn`]s (the sibling `differential_script`):
//! when each starts, from which loopback source (127.0.0.x), what it sends
//! and how long the client watches. [`run`] plays the script
//! against both proxies at once (separate processes, separate backends, so
//! neither's limits see the other's traffic) and gives each connection's
//! [`Outcome`] on each side: relayed (to which server, with which PROXY
//! header fields), and how and when it ended (TLS alert, reset, close, or
//! still open when the client stopped watching: timed out).
//! [`check`](super::differential_check::check) then compares them.
//!
//! The backends are the configuration's server addresses, replaced by
//! recorders on loopback: a recorder reads what the proxy forwards (up to
//! one TLS record, or what arrives within [`QUIET`]), parses any PROXY
//! header with the relay's own parser, records it, answers one byte `R`
//! and then closes ([`Mode::Answer`]), keeps the connection open until
//! the test ends ([`Mode::Hold`]), or half-closes and notes when the proxy
//! closes toward it ([`Mode::HalfClose`]). A connection that closes without a byte
//! (a health check) is not recorded. [`Both::set_up`] takes a recorder's
//! listener down and up again, for health checks to notice.
//!
//! Not here: what counts as a difference and which are listed (the
//! sibling `differential_check`), nor any script (`tests/it/differential*.rs`).
//! Cost: two proxies and a handful of loopback listeners per test; every
//! wait is bounded by the connection's watch or [`WAIT`].

use super::*;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use snirelay::wire::proxy::{self, Announced, Parse};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub(crate) use super::differential_script::*;

/// How long a recorder waits for more bytes before it records what it has
/// (a forwarded stream that is no complete TLS record, or none at all).
pub(crate) const QUIET: Duration = Duration::from_millis(300);

/// The HAProxy versions every script runs against, in order: Debian 12's
/// (the system's `haproxy`) and Debian 13's (unpacked beside it by
/// `.ci/install-trixie-tools`).
pub(crate) const HAPROXY_VERSIONS: [&str; 2] = ["2.6", "3.0"];

/// One HAProxy binary and the version it answered with.
#[derive(Debug, Clone)]
pub(crate) struct Haproxy {
    pub binary: PathBuf,
    /// major.minor, as [`HAPROXY_VERSIONS`] writes it.
    pub version: &'static str,
    /// The first line of `haproxy -v`.
    pub line: String,
}

impl Haproxy {
    /// Runs `binary -v`, prints its first line and asserts it is HAProxy
    /// `version` (major.minor); a missing binary fails naming the set-up
    /// that installs it.
    pub(crate) fn checked(binary: PathBuf, version: &'static str) -> Haproxy {
        let out = Command::new(&binary)
            .arg("-v")
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "HAProxy {version} is not installed at {}: {e}; run .ci/install-deps \
                 (Debian 12's haproxy package; HAProxy 3.0 through .ci/install-trixie-tools)",
                    binary.display()
                )
            });
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().next().unwrap_or("").to_owned();
        println!("{}: {line}", binary.display());
        assert!(
            out.status.success() && line.starts_with(&format!("HAProxy version {version}.")),
            "{} is not HAProxy {version}: {line:?} {}; run .ci/install-deps",
            binary.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Haproxy {
            binary,
            version,
            line,
        }
    }
}

/// Every HAProxy of [`HAPROXY_VERSIONS`], checked: 2.6 is `haproxy` in
/// /usr/sbin (Debian's package), 3.0 is `bin/haproxy-3.0` under
/// `$SNIRELAY_TOOLS` (default /opt/snirelay-tools), where
/// `.ci/install-trixie-tools` puts it.
pub(crate) fn haproxies() -> Vec<Haproxy> {
    let system = ["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"]
        .iter()
        .map(|d| PathBuf::from(d).join("haproxy"))
        .find(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("/usr/sbin/haproxy"));
    let tools = std::env::var_os("SNIRELAY_TOOLS")
        .map_or_else(|| PathBuf::from("/opt/snirelay-tools"), PathBuf::from);
    vec![
        Haproxy::checked(system, HAPROXY_VERSIONS[0]),
        Haproxy::checked(tools.join("bin/haproxy-3.0"), HAPROXY_VERSIONS[1]),
    ]
}

/// The path of a fixture in tests/data/haproxy.
pub(crate) fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/haproxy")
        .join(name)
}

/// `snirelay import-haproxy FILE`: exit code, stdout, stderr.
pub(crate) fn import(file: &std::path::Path) -> (i32, String, String) {
    import_with(file, &[])
}

/// `snirelay import-haproxy ARGS… FILE` (`--check`): exit code, stdout,
/// stderr.
pub(crate) fn import_with(file: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_snirelay"))
        .arg("import-haproxy")
        .args(args)
        .arg(file)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

// ----------------------------------------------------------------- outcomes

/// How a connection ended, as its client saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// A TLS alert record with this description arrived (the client then
    /// closes, as a TLS client does).
    Alert(u8),
    /// The connection was reset (or connecting was refused).
    Reset,
    /// A FIN, without an alert.
    Close,
    /// Still open when the client stopped watching: timed out.
    Open,
}

/// What one side did with one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outcome {
    /// The server (by its address in the HAProxy configuration) and the
    /// PROXY header it received (see [`proxy_fields`]), if relayed.
    pub relayed: Option<(String, Option<String>)>,
    /// When the backend's answer arrived, from connect: when it was relayed.
    pub answered: Option<Duration>,
    pub end: End,
    /// [`Mode::HalfClose`]: how long after the server's FIN the proxy
    /// closed the connection toward the server.
    pub server_closed: Option<Duration>,
    /// From the client's last action (connect, last segment, FIN) to the
    /// end; the watch when [`End::Open`].
    pub after: Duration,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.relayed {
            Some((server, None)) => write!(f, "relayed to {server}")?,
            Some((server, Some(proxy))) => write!(f, "relayed to {server} [{proxy}]")?,
            None => write!(f, "refused: ")?,
        }
        if let Some(answered) = self.answered {
            write!(f, " at {} ms, then ", answered.as_millis())?;
        }
        match self.end {
            End::Open => write!(f, "open after {:?} (timed out)", self.after)?,
            end => write!(f, "{end:?} after {} ms", self.after.as_millis())?,
        }
        if let Some(closed) = self.server_closed {
            write!(
                f,
                "; closed toward the server {} ms after its FIN",
                closed.as_millis()
            )?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------- recorders

/// What a recording backend does once it has recorded a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Answers `R` and closes.
    Answer,
    /// Answers `R` and keeps the connection open until the test ends.
    Hold,
    /// Answers `R`, half-closes (FIN) and keeps reading until the test
    /// ends: a server that has said all it will.
    HalfClose,
}

/// One connection a recorder received.
#[derive(Debug, Clone)]
struct Record {
    server: String,
    /// The PROXY header, parsed, with the peer addresses it names.
    proxy: Option<(proxy::Header, Vec<u8>)>,
    payload: Vec<u8>,
    /// [`Mode::HalfClose`]: how long after its FIN the proxy closed the
    /// connection toward it (its `server-fin` / half-close timer).
    closed_after_fin: Arc<Mutex<Option<Duration>>>,
    half_closes: bool,
}

/// One side's recording backends, by the server address the HAProxy
/// configuration names.
pub(crate) struct Recorders {
    records: Arc<Mutex<Vec<Record>>>,
    held: Arc<Mutex<Vec<TcpStream>>>,
    servers: Vec<(String, SocketAddr, Mode, Option<JoinHandle<()>>)>,
}

impl Recorders {
    async fn new(servers: &[(&str, Mode)]) -> Recorders {
        let mut recorders = Recorders {
            records: Arc::default(),
            held: Arc::default(),
            servers: Vec::new(),
        };
        for (address, mode) in servers {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let at = listener.local_addr().unwrap();
            let task = recorders.serve(address, listener, *mode);
            recorders
                .servers
                .push((address.to_string(), at, *mode, Some(task)));
        }
        recorders
    }

    fn serve(&self, server: &str, listener: TcpListener, mode: Mode) -> JoinHandle<()> {
        let records = self.records.clone();
        let held = self.held.clone();
        let server = server.to_owned();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let records = records.clone();
                let held = held.clone();
                let server = server.clone();
                tokio::spawn(async move {
                    record(stream, server, mode, &records, &held).await;
                });
            }
        })
    }

    /// Takes the recorder of `server` down (connections to it are refused)
    /// or up again on the same port.
    pub(crate) async fn set_up(&mut self, server: &str, up: bool) {
        let i = self.servers.iter().position(|s| s.0 == server).unwrap();
        if let Some(task) = self.servers[i].3.take() {
            task.abort();
            let _ = task.await;
        }
        if up {
            let (_, at, mode, _) = self.servers[i];
            let listener = TcpListener::bind(at).await.unwrap();
            self.servers[i].3 = Some(self.serve(server, listener, mode));
        }
    }

    /// Replaces each server address in `text` (as `a` or `"a"`) by its
    /// recorder's.
    fn rewrite(&self, text: &str, quoted: bool) -> String {
        let mut text = text.to_owned();
        for (server, at, _, _) in &self.servers {
            text = if quoted {
                text.replace(&format!("\"{server}\""), &format!("\"{at}\""))
            } else {
                text.replace(server.as_str(), &at.to_string())
            };
        }
        text
    }
}

/// Reads what the proxy forwards on one backend connection, records it
/// and answers as `mode` says.
async fn record(
    mut stream: TcpStream,
    server: String,
    mode: Mode,
    records: &Mutex<Vec<Record>>,
    held: &Mutex<Vec<TcpStream>>,
) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut eof = false;
    loop {
        if forwarded_whole(&buf) {
            break;
        }
        match tokio::time::timeout(QUIET, stream.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                eof = true;
                break;
            }
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
            Err(_) => break,
        }
    }
    if eof && buf.is_empty() {
        return; // a health check
    }
    let (proxy, payload) = match proxy::parse(&buf) {
        Parse::Header(header) => {
            let len = header.len;
            (Some((header, buf[..len].to_vec())), buf[len..].to_vec())
        }
        _ => (None, buf),
    };
    let closed_after_fin = Arc::new(Mutex::new(None));
    records.lock().unwrap().push(Record {
        server,
        proxy,
        payload,
        closed_after_fin: closed_after_fin.clone(),
        half_closes: mode == Mode::HalfClose,
    });
    let _ = stream.write_all(b"R").await;
    match mode {
        Mode::Answer => {}
        Mode::Hold => held.lock().unwrap().push(stream),
        Mode::HalfClose => {
            let _ = stream.shutdown().await;
            let fin = Instant::now();
            // Until the proxy closes its side, bounded.
            let _ = tokio::time::timeout(WAIT, async {
                while let Ok(n) = stream.read(&mut chunk).await {
                    if n == 0 {
                        break;
                    }
                }
            })
            .await;
            *closed_after_fin.lock().unwrap() = Some(fin.elapsed());
            held.lock().unwrap().push(stream);
        }
    }
}

/// Whether `buf` (after any PROXY header) holds one whole TLS record.
fn forwarded_whole(buf: &[u8]) -> bool {
    let rest = match proxy::parse(buf) {
        Parse::Header(header) => &buf[header.len..],
        Parse::Incomplete => return false,
        _ => buf,
    };
    rest.len() >= 5
        && rest[0] == 0x16
        && rest.len() >= 5 + u16::from_be_bytes([rest[3], rest[4]]) as usize
}

/// The PROXY header's fields as one comparable line: version, addresses
/// (`client` for the client's own address, `listener` for the one it
/// connected to), the SNI it carries and the TLV types.
fn proxy_fields(header: &proxy::Header, raw: &[u8], client: SocketAddr, to: SocketAddr) -> String {
    let name = |a: SocketAddr| {
        if a == client {
            "client".to_owned()
        } else if a == to {
            "listener".to_owned()
        } else {
            a.to_string()
        }
    };
    let addresses = match header.addresses {
        Announced::Proxy {
            source,
            destination,
        } => format!("{} -> {}", name(source), name(destination)),
        other => format!("{other:?}"),
    };
    let mut line = format!("{:?} {addresses}", header.version);
    if let Some(authority) = &header.authority {
        line += &format!(" authority={}", String::from_utf8_lossy(authority));
    }
    // v2: the TLV types after the addresses (12 + 4 + 12 or 36 bytes).
    if raw.len() > 16 && raw[12] >> 4 == 2 {
        let mut at = 16
            + match raw[13] >> 4 {
                1 => 12,
                2 => 36,
                _ => raw.len(),
            };
        let mut types = Vec::new();
        while at + 3 <= raw.len() {
            types.push(format!("{:#04x}", raw[at]));
            at += 3 + u16::from_be_bytes([raw[at + 1], raw[at + 2]]) as usize;
        }
        if !types.is_empty() {
            line += &format!(" tlvs={}", types.join(","));
        }
    }
    line
}

// ------------------------------------------------------------ both proxies

/// HAProxy on a configuration and snirelay on its translation, each with
/// its own recorders.
pub(crate) struct Both {
    /// Which HAProxy runs.
    pub version: &'static str,
    pub haproxy_tool: Tool,
    pub relay: Relay,
    pub haproxy: SocketAddr,
    pub snirelay: SocketAddr,
    pub haproxy_servers: Recorders,
    pub snirelay_servers: Recorders,
    /// The translation snirelay runs (for failure messages).
    pub toml: String,
}

impl Both {
    /// Both sides' recorders of `server` down or up.
    pub(crate) async fn set_up(&mut self, server: &str, up: bool) {
        self.haproxy_servers.set_up(server, up).await;
        self.snirelay_servers.set_up(server, up).await;
    }
}

/// Starts `haproxy` on `text` and snirelay on `snirelay import-haproxy` of
/// it (which must translate every line); `servers` are the server
/// addresses the text names, each replaced by a recorder in `mode`.
///
/// HAProxy's run: each `bind` address becomes one loopback port, `log
/// /dev/log` becomes stdout, and the lines that need root or system paths
/// (`user`, `group`, `daemon`, `stats socket`, `stats timeout`) are
/// dropped (none decides anything). snirelay's run: the translation with
/// its listen address, backend addresses and admin socket pointed at the
/// test's.
pub(crate) async fn both_ways(haproxy: &Haproxy, text: &str, servers: &[(&str, Mode)]) -> Both {
    let haproxy_servers = Recorders::new(servers).await;
    let snirelay_servers = Recorders::new(servers).await;
    let port = free_port();
    let dir = scratch_dir("differential");
    let input = dir.join("input.cfg");
    std::fs::write(&input, text).unwrap();
    let mut rewritten = String::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        let dropped = ["user ", "group ", "daemon", "stats socket", "stats timeout"]
            .iter()
            .any(|p| trimmed.starts_with(p));
        if dropped {
            continue;
        }
        let mut line = line.to_owned();
        if trimmed.starts_with("bind ") {
            let addr = trimmed.split_whitespace().nth(1).unwrap();
            line = line.replacen(addr, &format!("127.0.0.1:{port}"), 1);
        } else if trimmed.starts_with("log /dev/log") {
            line = "    log stdout format raw local0".into();
        } else if trimmed.starts_with("server ") {
            line = haproxy_servers.rewrite(&line, false);
        }
        rewritten.push_str(&line);
        rewritten.push('\n');
    }
    std::fs::write(dir.join("haproxy.cfg"), &rewritten).unwrap();
    let mut haproxy_tool = Tool::spawn(
        haproxy.binary.to_str().unwrap(),
        &["-f", "haproxy.cfg", "-db"],
        dir.clone(),
        "haproxy",
    );
    let version = haproxy.version;
    let haproxy: SocketAddr = ([127, 0, 0, 1], port).into();
    // Listening, not accepting: a probe connection would itself be routed
    // (and recorded, or counted by a limit) at a moment that races the
    // script.
    wait_listening(port, &mut haproxy_tool).await;

    let (code, toml, stderr) = import(&input);
    assert_eq!(code, 0, "import-haproxy: {stderr}\n{toml}");
    let mut toml = toml;
    for line in text.lines().filter(|l| l.trim_start().starts_with("bind ")) {
        let addr = line.split_whitespace().nth(1).unwrap();
        let listen = match addr.rsplit_once(':') {
            Some(("" | "*", port)) => format!("0.0.0.0:{port}"),
            _ => addr.to_owned(),
        };
        toml = toml.replace(
            &format!("listen = \"{listen}\""),
            "listen = \"127.0.0.1:0\"",
        );
    }
    toml = snirelay_servers.rewrite(&toml, true);
    toml = toml.replace(
        "unix:/run/snirelay/admin.sock",
        &format!("unix:{}", dir.join("admin.sock").display()),
    );
    // The relay's lines stay on stderr, where the harness reads them.
    toml = toml.replace("target = \"syslog\"", "target = \"stderr\"");
    let relay = Relay::start(&toml).await;
    let snirelay = *relay.listening.values().next().unwrap().first().unwrap();
    Both {
        version,
        haproxy_tool,
        relay,
        haproxy,
        snirelay,
        haproxy_servers,
        snirelay_servers,
        toml,
    }
}

/// Plays `script` against both proxies at once; each connection's outcome
/// on HAProxy and on snirelay.
pub(crate) async fn run(both: &Both, script: &[Conn]) -> Vec<(Outcome, Outcome)> {
    let (by_haproxy, by_snirelay) = tokio::join!(
        run_side(both.haproxy, &both.haproxy_servers, script),
        run_side(both.snirelay, &both.snirelay_servers, script),
    );
    by_haproxy.into_iter().zip(by_snirelay).collect()
}

/// Plays `script` against one proxy, every connection on its own task.
/// The connections of one source connect in the script's order (one task
/// per source starts them), so which of a burst's connections a limit
/// takes is the script's choice, not the scheduler's.
pub(crate) async fn run_side(to: SocketAddr, servers: &Recorders, script: &[Conn]) -> Vec<Outcome> {
    let start = Instant::now();
    let sources: BTreeSet<u8> = script.iter().map(|c| c.from).collect();
    let lanes: Vec<_> = sources
        .into_iter()
        .map(|from| {
            let lane: Vec<(usize, Conn)> = script
                .iter()
                .enumerate()
                .filter(|(_, c)| c.from == from)
                .map(|(i, c)| (i, c.clone()))
                .collect();
            let records = servers.records.clone();
            tokio::spawn(async move {
                let mut tasks = Vec::new();
                let mut lane = lane;
                lane.sort_by_key(|(_, c)| c.at);
                for (i, conn) in lane {
                    tokio::time::sleep_until(start + conn.at).await;
                    let connected = connect_from(source(&conn), to).await;
                    let records = records.clone();
                    tasks.push((
                        i,
                        tokio::spawn(async move {
                            play_connected(to, connected, &conn, &records).await
                        }),
                    ));
                }
                tasks
            })
        })
        .collect();
    let mut by_index = BTreeMap::new();
    for lane in lanes {
        for (i, task) in lane.await.unwrap() {
            by_index.insert(i, task.await.unwrap());
        }
    }
    // The open streams live to here, as clients that stay to the end.
    by_index
        .into_values()
        .map(|(outcome, _stream)| outcome)
        .collect()
}

fn source(conn: &Conn) -> std::net::IpAddr {
    std::net::IpAddr::V4(Ipv4Addr::new(127, 0, 0, conn.from))
}

/// Plays one connection now; its outcome, and the stream if still open.
async fn play(
    to: SocketAddr,
    conn: &Conn,
    records: &Mutex<Vec<Record>>,
) -> (Outcome, Option<TcpStream>) {
    let connected = connect_from(source(conn), to).await;
    play_connected(to, connected, conn, records).await
}

/// Plays one connection on a connect's result.
async fn play_connected(
    to: SocketAddr,
    connected: std::io::Result<TcpStream>,
    conn: &Conn,
    records: &Mutex<Vec<Record>>,
) -> (Outcome, Option<TcpStream>) {
    let bytes = conn.bytes();
    let Ok(mut stream) = connected else {
        let outcome = Outcome {
            relayed: None,
            answered: None,
            end: End::Reset,
            after: Duration::ZERO,
            server_closed: None,
        };
        return (outcome, None);
    };
    let client = stream.local_addr().unwrap();
    let connected = Instant::now();
    let (parts, gap) = conn.segments;
    let size = bytes.len().div_ceil(parts.max(1)).max(1);
    for (i, segment) in bytes.chunks(size).enumerate() {
        if i > 0 {
            tokio::time::sleep(gap).await;
        }
        // A refusal may reset the connection before a write: the reads
        // below tell how it ended.
        if stream.write_all(segment).await.is_err() {
            break;
        }
    }
    let mut last = Instant::now();
    let mut answered = None;
    let mut end = End::Open;
    let mut got = Vec::new();
    let mut chunk = [0u8; 512];
    loop {
        let deadline = last + conn.watch;
        match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
            Err(_) => break,
            Ok(Ok(0)) => {
                end = End::Close;
                break;
            }
            Ok(Err(_)) => {
                end = End::Reset;
                break;
            }
            Ok(Ok(n)) => got.extend_from_slice(&chunk[..n]),
        }
        if answered.is_none() && got.first() == Some(&b'R') {
            answered = Some(connected.elapsed());
            got.remove(0);
            if conn.half_close {
                let _ = stream.shutdown().await;
                last = Instant::now();
            }
        }
        if answered.is_none() && got.len() >= 7 && got[0] == 0x15 {
            end = End::Alert(got[6]);
            break;
        }
    }
    let after = if end == End::Open {
        conn.watch
    } else {
        last.elapsed()
    };
    // What the server is to get: the bytes after any PROXY header the
    // client sent (the proxy reads it and sends its own, or none).
    let forwarded = match proxy::parse(&bytes) {
        Parse::Header(header) => &bytes[header.len..],
        _ => &bytes[..],
    };
    let relayed = answered.map(|_| {
        let records = records.lock().unwrap();
        let record = records
            .iter()
            .find(|r| {
                !forwarded.is_empty()
                    && r.payload.starts_with(&forwarded[..forwarded.len().min(64)])
            })
            .or_else(|| {
                records
                    .iter()
                    .find(|r| forwarded.is_empty() && r.payload.is_empty())
            })
            .unwrap_or_else(|| panic!("{}: answered, but no recorder got its bytes", conn.label));
        let proxy = record
            .proxy
            .as_ref()
            .map(|(header, raw)| proxy_fields(header, raw, client, to));
        (
            record.server.clone(),
            proxy,
            record.closed_after_fin.clone(),
        )
    });
    // A server that half-closed: when the proxy closed toward it.
    let mut server_closed = None;
    if let Some((_, _, closed)) = &relayed {
        let deadline = Instant::now() + conn.watch;
        let server = records
            .lock()
            .unwrap()
            .iter()
            .any(|r| Arc::ptr_eq(&r.closed_after_fin, closed) && r.half_closes);
        while server && server_closed.is_none() && Instant::now() < deadline {
            server_closed = *closed.lock().unwrap();
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let outcome = Outcome {
        relayed: relayed.map(|(server, proxy, _)| (server, proxy)),
        answered,
        end,
        after,
        server_closed,
    };
    let stream = (end == End::Open).then_some(stream);
    (outcome, stream)
}

impl Both {
    /// Plays one connection on one side now (for scripts that must act
    /// between connections).
    pub(crate) async fn play_on(&self, haproxy: bool, conn: &Conn) -> (Outcome, Option<TcpStream>) {
        if haproxy {
            play(self.haproxy, conn, &self.haproxy_servers.records).await
        } else {
            play(self.snirelay, conn, &self.snirelay_servers.records).await
        }
    }
}
