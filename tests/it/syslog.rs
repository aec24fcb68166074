//! `[log] target = "syslog"` against a real syslog daemon: rsyslogd, started
//! here in a private directory (its own config, a Unix socket of its own,
//! a TCP and a UDP port, output to a file), receives the relay's lines
//! over each of the three transports; the tests
//! read what rsyslog parsed (facility, severity, app, pid, MSGID) and the
//! JSON message, and compare its fields with the stderr JSON line. A
//! receiver that stopped reading, or none at all, must neither block nor
//! slow relaying: connections still relay at once, the drop counter
//! rises, and the console gets at most one WARN per interval. And
//! `target = "stdout"` moves every line from stderr to stdout.
//!
//! With a socket target the console carries only the log writer's own
//! reports, so these relays get their listening socket the way systemd
//! passes one (LISTEN_FDS): the test knows the address without a log line,
//! and connections wait in the kernel backlog until the relay accepts.

use crate::common;

use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

// ------------------------------------------------------------- rsyslogd

/// An rsyslogd of the test's own: a Unix datagram socket (`log.sock`), a
/// TCP input on `tcp_port` (octet counting or LF framing, as rsyslog
/// detects it), a UDP input on `udp_port`, every message written to
/// `out.log` as `facility severity host app pid msgid msg`.
struct Rsyslog {
    tool: Tool,
    tcp_port: u16,
    udp_port: u16,
}

impl Rsyslog {
    async fn start(tcp_port: Option<u16>) -> Rsyslog {
        let dir = scratch_dir("rsyslog");
        let tcp_port = tcp_port.unwrap_or_else(free_port);
        let udp_port = free_udp_port();
        let config = format!(
            r#"global(workDirectory="{dir}")
module(load="imuxsock" SysSock.Use="off")
module(load="imtcp")
module(load="imudp")
input(type="imuxsock" Socket="{dir}/log.sock" UseSpecialParser="off" ParseHostname="on")
input(type="imtcp" port="{tcp_port}" address="127.0.0.1")
input(type="imudp" port="{udp_port}" address="127.0.0.1")
template(name="fields" type="string"
         string="%syslogfacility-text%\t%syslogseverity-text%\t%hostname%\t%app-name%\t%procid%\t%msgid%\t%msg%\n")
action(type="omfile" file="{dir}/out.log" template="fields")
"#,
            dir = dir.display()
        );
        std::fs::write(dir.join("rsyslog.conf"), config).unwrap();
        // Absolute paths: rsyslogd resolves a relative pidfile against
        // the root, where every test's would be the same file.
        let (conf, pid) = (dir.join("rsyslog.conf"), dir.join("rsyslog.pid"));
        let mut tool = Tool::spawn(
            "rsyslogd",
            &[
                "-n",
                "-f",
                conf.to_str().unwrap(),
                "-i",
                pid.to_str().unwrap(),
            ],
            dir.clone(),
            "rsyslog",
        );
        wait_listening(tcp_port, &mut tool).await;
        wait_udp_bound(udp_port, &mut tool).await;
        let socket = dir.join("log.sock");
        wait_until("rsyslogd's socket", || socket.exists()).await;
        Rsyslog {
            tool,
            tcp_port,
            udp_port,
        }
    }

    fn socket(&self) -> PathBuf {
        self.tool.dir.join("log.sock")
    }

    /// Every message rsyslog wrote so far, split into its fields.
    fn messages(&self) -> Vec<Received> {
        let text = std::fs::read_to_string(self.tool.dir.join("out.log")).unwrap_or_default();
        text.lines().filter_map(Received::parse).collect()
    }

    /// Waits until a received message satisfies `pred`; returns it.
    async fn wait_message(&self, pred: impl Fn(&Received) -> bool) -> Received {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(found) = self.messages().into_iter().find(|m| pred(m)) {
                return found;
            }
            assert!(
                Instant::now() < deadline,
                "rsyslog received no such message within {WAIT:?}; received: {:#?}; rsyslogd said: {:#?}",
                self.messages(),
                self.tool.lines()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// One message as rsyslog parsed it.
#[derive(Debug, Clone)]
struct Received {
    facility: String,
    severity: String,
    host: String,
    app: String,
    pid: String,
    msgid: String,
    /// The message, which snirelay sends as the JSON line.
    json: Value,
}

impl Received {
    fn parse(line: &str) -> Option<Received> {
        let parts: Vec<&str> = line.splitn(7, '\t').collect();
        let [facility, severity, host, app, pid, msgid, msg] = parts[..] else {
            return None;
        };
        Some(Received {
            facility: facility.to_owned(),
            severity: severity.to_owned(),
            host: host.to_owned(),
            app: app.to_owned(),
            pid: pid.to_owned(),
            msgid: msgid.to_owned(),
            // RFC 3164's message keeps the space after the tag's colon.
            json: serde_json::from_str(msg.trim_start()).unwrap_or(Value::Null),
        })
    }

    fn is_access_line_of(&self, peer: std::net::SocketAddr) -> bool {
        self.json["message"] == "connection closed" && self.json["client.peer"] == peer.to_string()
    }
}

// ------------------------------------------------- a relay with a socket target

/// A relay whose log lines go to syslog: its TCP listener is passed in
/// (as systemd passes one), its console (stderr) is collected as JSON.
struct SyslogRelay {
    child: Child,
    dir: PathBuf,
    addr: std::net::SocketAddr,
    console: Arc<Mutex<Vec<Value>>>,
    stdout: Arc<Mutex<Vec<Value>>>,
    /// Held so the listening socket outlives the relay's start.
    _listener: std::net::TcpListener,
}

impl SyslogRelay {
    fn start(config: &str) -> SyslogRelay {
        let dir = scratch_dir("syslog-relay");
        let path = dir.join("snirelay.toml");
        std::fs::write(&path, config).unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        socket2::SockRef::from(&listener)
            .set_cloexec(false)
            .unwrap();
        let relay = Relay::command(&path);
        let mut command = Command::new("bash");
        command
            .arg("-c")
            .arg(format!(
                "exec 3<&{fd}; LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=tls exec \"$@\"",
                fd = listener.as_raw_fd()
            ))
            .arg("bash")
            .arg(relay.get_program())
            .args(relay.get_args());
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot start snirelay");
        let console = Arc::new(Mutex::new(Vec::new()));
        let stdout = Arc::new(Mutex::new(Vec::new()));
        for (pipe, book) in [
            (
                Box::new(child.stderr.take().unwrap()) as Box<dyn std::io::Read + Send>,
                console.clone(),
            ),
            (Box::new(child.stdout.take().unwrap()), stdout.clone()),
        ] {
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    let value = serde_json::from_str(&line)
                        .unwrap_or_else(|_| serde_json::json!({ "raw": line }));
                    book.lock().unwrap().push(value);
                }
            });
        }
        SyslogRelay {
            child,
            dir,
            addr: listener.local_addr().unwrap(),
            console,
            stdout,
            _listener: listener,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn console(&self) -> Vec<Value> {
        self.console.lock().unwrap().clone()
    }

    /// The console's reports that lines were dropped or not delivered.
    fn warnings(&self) -> Vec<Value> {
        self.console()
            .into_iter()
            .filter(|l| l["level"] == "WARN" && l["target"] == "snirelay::log_sink")
            .collect()
    }

    /// One series of `GET /metrics` on the admin listener's Unix socket
    /// `admin.sock` in `dir` (as [`config_with_log`] puts it).
    async fn metric(&self, dir: &Path, series: &str) -> u64 {
        let socket = dir.join("admin.sock");
        wait_until("the admin socket", || socket.exists()).await;
        let answer = http_unix(
            &socket,
            "GET /metrics HTTP/1.1\r\nHost: relay\r\nConnection: close\r\n\r\n",
        )
        .await;
        answer
            .body
            .lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for SyslogRelay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn config_with_log(backend: std::net::SocketAddr, log: &str, dir: &Path) -> String {
    format!(
        "{}\n[log]\n{log}\n\n[admin]\nlisten = \"unix:{}/admin.sock\"\n",
        simple_config(&["app.example.com"], backend, ""),
        dir.display()
    )
}

/// One TLS echo through `addr`, closed by the client; returns the client's
/// address (the line's `client.peer`) and how long it took.
async fn one_session(pki: &Pki, addr: std::net::SocketAddr) -> (std::net::SocketAddr, Duration) {
    let started = Instant::now();
    let session = tokio::time::timeout(WAIT, echo_session(pki, addr, "app.example.com"))
        .await
        .expect("relaying stalled")
        .expect("the relay did not relay");
    let peer = session.get_ref().0.local_addr().unwrap();
    drop(session);
    (peer, started.elapsed())
}

/// The host name rsyslog shows: the kernel's.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned()
}

// ------------------------------------------------------------------ tests

/// RFC 5424 over the local Unix socket: the access line arrives with its
/// facility, severity, app, pid and MSGID `access`, and its message holds
/// the same fields as the stderr JSON line of the same connection. A
/// reload that changes `[log]` is reported there as needing a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_lines_reach_rsyslog_over_a_unix_socket_in_rfc5424() {
    let pki = Pki::new(&["app.example.com"]);
    let backend = tls_echo_backend(&pki).await;
    let rsyslog = Rsyslog::start(None).await;
    let dir = scratch_dir("syslog-unix");
    let log = format!(
        "target = \"syslog\"\nsyslog = \"unix:{}\"\nfacility = \"local3\"\n",
        rsyslog.socket().display()
    );
    let relay = SyslogRelay::start(&config_with_log(backend, &log, &dir));

    let (peer, _) = one_session(&pki, relay.addr).await;
    let line = rsyslog.wait_message(|m| m.is_access_line_of(peer)).await;
    assert_eq!(line.facility, "local3");
    assert_eq!(line.severity, "info");
    assert_eq!(line.app, "snirelay");
    assert_eq!(line.pid, relay.pid().to_string());
    assert_eq!(line.msgid, "access");
    assert_eq!(line.host, hostname());
    assert_eq!(line.json["sni"], "app.example.com");
    assert_eq!(line.json["listener"], "tls");
    assert_eq!(line.json["backend"], "b");
    assert_eq!(line.json["target"], "snirelay::access");
    assert!(line.json["bytes.up"].as_u64().unwrap() > 0, "{line:?}");
    // The relay's other lines go there too, without the access MSGID.
    let ready = rsyslog.wait_message(|m| m.json["message"] == "ready").await;
    assert_eq!(ready.msgid, "-");

    // The same connection through a relay that logs JSON to stderr: the
    // same fields, none more, none fewer.
    let plain = Relay::start(&simple_config(&["app.example.com"], backend, "")).await;
    let (plain_peer, _) = one_session(&pki, plain.addr()).await;
    let plain_line = plain.closed_line(plain_peer).await;
    let keys = |v: &Value| {
        v.as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect::<std::collections::BTreeSet<_>>()
    };
    assert_eq!(keys(&line.json), keys(&plain_line));

    // A reload that changes [log] is applied otherwise; the target stays
    // as it started, and says so where it writes.
    let changed = config_with_log(backend, &log.replace("local3", "local5"), &dir);
    std::fs::write(relay.dir.join("snirelay.toml"), changed).unwrap();
    let status = Command::new("kill")
        .args(["-s", "HUP", &relay.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let pending = rsyslog
        .wait_message(|m| m.json["message"] == "needs a restart; the running value stays")
        .await;
    assert_eq!(pending.json["key"], "log.facility");
    assert_eq!(pending.facility, "local3");
    assert_eq!(pending.severity, "warning");

    // The console carried none of it: only the log writer's own line.
    let console = relay.console();
    assert!(
        console
            .iter()
            .all(|l| l["target"] == "snirelay::log_sink" && l["level"] == "INFO"),
        "{console:#?}"
    );
    assert!(!console.is_empty(), "no console line at all");
    let _ = std::fs::remove_dir_all(&dir);
}

/// RFC 3164 over TCP to a host name, octet-counted: rsyslog parses each
/// frame as one message; after rsyslog restarts, the relay reconnects and
/// lines arrive again.
/// As the seed's HAProxy edge is deployed (`log /dev/log local0`): only
/// `target` and the local socket set, so the facility (`local0`) and the
/// format (RFC 5424) are the defaults. The socket is rsyslog's own
/// imuxsock input, as `/dev/log` is on a host; only its path differs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_defaults_log_as_haproxys_dev_log_local0_line_does() {
    let pki = Pki::new(&["app.example.com"]);
    let backend = tls_echo_backend(&pki).await;
    let rsyslog = Rsyslog::start(None).await;
    let dir = scratch_dir("syslog-defaults");
    let log = format!(
        "target = \"syslog\"\nsyslog = \"unix:{}\"\n",
        rsyslog.socket().display()
    );
    let relay = SyslogRelay::start(&config_with_log(backend, &log, &dir));
    let (peer, _) = one_session(&pki, relay.addr).await;
    let line = rsyslog.wait_message(|m| m.is_access_line_of(peer)).await;
    assert_eq!(line.facility, "local0");
    assert_eq!(line.severity, "info");
    assert_eq!(line.app, "snirelay");
    assert_eq!(line.msgid, "access", "RFC 5424 by default: {line:?}");
    assert_eq!(line.json["sni"], "app.example.com");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc3164_over_tcp_is_octet_counted_and_reconnects_after_a_restart() {
    let pki = Pki::new(&["app.example.com"]);
    let backend = tls_echo_backend(&pki).await;
    let rsyslog = Rsyslog::start(None).await;
    let dir = scratch_dir("syslog-tcp");
    let log = format!(
        "target = \"syslog\"\nsyslog = \"tcp://localhost:{}\"\nfacility = \"daemon\"\n\
         syslog_format = \"rfc3164\"\n",
        rsyslog.tcp_port
    );
    let relay = SyslogRelay::start(&config_with_log(backend, &log, &dir));

    let mut peers = Vec::new();
    for _ in 0..3 {
        peers.push(one_session(&pki, relay.addr).await.0);
    }
    for peer in &peers {
        let line = rsyslog.wait_message(|m| m.is_access_line_of(*peer)).await;
        assert_eq!(line.facility, "daemon");
        assert_eq!(line.severity, "info");
        assert_eq!(line.app, "snirelay");
        assert_eq!(line.pid, relay.pid().to_string());
        assert_eq!(line.host, hostname());
        assert_eq!(line.json["close"], "done", "{line:?}");
    }
    // Every message parsed whole: no frame split or run together.
    assert!(
        rsyslog.messages().iter().all(|m| m.json.is_object()),
        "{:#?}",
        rsyslog.messages()
    );

    // rsyslog restarts on the same port; lines written while it was gone
    // may be lost, but the relay connects again and later lines arrive.
    let port = rsyslog.tcp_port;
    drop(rsyslog);
    let rsyslog = Rsyslog::start(Some(port)).await;
    let deadline = Instant::now() + WAIT;
    loop {
        let (peer, _) = one_session(&pki, relay.addr).await;
        let arrived = async {
            let until = Instant::now() + Duration::from_millis(500);
            while Instant::now() < until {
                if rsyslog.messages().iter().any(|m| m.is_access_line_of(peer)) {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            false
        };
        if arrived.await {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no line reached the restarted rsyslog; relay console: {:#?}",
            relay.console()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A receiver that stopped reading (a Unix datagram socket whose queue is
/// full, so every send waits out the writer's timeout): connections still
/// relay at once, lines are dropped and counted, and the console gets one
/// WARN per interval, never more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_syslog_neither_blocks_nor_slows_relaying() {
    let pki = Pki::new(&["app.example.com"]);
    let backend = tls_echo_backend(&pki).await;
    let dir = scratch_dir("syslog-stuck");
    let stuck_path = dir.join("stuck.sock");
    let stuck = UnixDatagram::bind(&stuck_path).unwrap();
    let log = format!(
        "target = \"syslog\"\nsyslog = \"unix:{}\"\nqueue = 8\n",
        stuck_path.display()
    );
    let relay = SyslogRelay::start(&config_with_log(backend, &log, &dir));

    // Until two WARNs: about two report intervals (5 s each).
    let started = Instant::now();
    let mut sessions = 0;
    let mut slowest = Duration::ZERO;
    while relay.warnings().len() < 2 {
        let (_, took) = one_session(&pki, relay.addr).await;
        sessions += 1;
        slowest = slowest.max(took);
        // One send to the stuck socket waits 2 s before it gives up: a
        // connection that had waited for its log line would take that long.
        assert!(
            took < Duration::from_secs(2),
            "session {sessions} took {took:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "fewer than two WARNs in 30 s: {:#?}",
            relay.console()
        );
    }
    let warnings = relay.warnings();
    let at = |w: &Value| humantime::parse_rfc3339(w["timestamp"].as_str().unwrap()).unwrap();
    let apart = at(&warnings[1]).duration_since(at(&warnings[0])).unwrap();
    assert!(apart >= Duration::from_millis(4900), "{warnings:#?}");
    let reported: u64 = warnings
        .iter()
        .map(|w| w["dropped"].as_u64().unwrap())
        .sum();
    assert!(reported > 0, "{warnings:#?}");
    // The counters hold every drop, reported or not yet.
    let full = relay
        .metric(
            &dir,
            "snirelay_log_lines_dropped_total{target=\"syslog\",reason=\"queue_full\"}",
        )
        .await;
    let failed = relay
        .metric(
            &dir,
            "snirelay_log_lines_dropped_total{target=\"syslog\",reason=\"send_failed\"}",
        )
        .await;
    assert!(
        full > 0 && full + failed >= reported,
        "{full} + {failed} < {reported}"
    );
    println!(
        "stuck syslog: {sessions} sessions in {:?}, slowest {slowest:?}; dropped: {full} queue_full, \
         {failed} send_failed; WARNs {apart:?} apart",
        started.elapsed()
    );
    // Some lines did reach the socket before its queue filled.
    let mut buf = [0u8; 8192];
    stuck.set_nonblocking(true).unwrap();
    let n = stuck.recv(&mut buf).unwrap();
    assert!(buf[..n].starts_with(b"<134>1 "), "{:?}", &buf[..n]);
    drop(relay);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Nothing listens at the syslog address: the relay starts and relays
/// all the same, counts what it drops and says why once per interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_syslog_address_is_reported_and_relaying_goes_on() {
    let pki = Pki::new(&["app.example.com"]);
    let backend = tls_echo_backend(&pki).await;
    let dir = scratch_dir("syslog-dead");
    let log = format!(
        "target = \"syslog\"\nsyslog = \"unix:{}/nobody.sock\"\nqueue = 4\n",
        dir.display()
    );
    let relay = SyslogRelay::start(&config_with_log(backend, &log, &dir));
    let started = Instant::now();
    while relay.warnings().is_empty() {
        let (_, took) = one_session(&pki, relay.addr).await;
        assert!(took < Duration::from_secs(2), "a session took {took:?}");
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no WARN within 20 s: {:#?}",
            relay.console()
        );
    }
    let warning = &relay.warnings()[0];
    assert!(
        warning["error"]
            .as_str()
            .unwrap()
            .contains("No such file or directory"),
        "{warning:#?}"
    );
    assert!(warning["dropped"].as_u64().unwrap() > 0, "{warning:#?}");
    let dropped = relay
        .metric(
            &dir,
            "snirelay_log_lines_dropped_total{target=\"syslog\",reason=\"queue_full\"}",
        )
        .await;
    assert!(dropped >= warning["dropped"].as_u64().unwrap(), "{dropped}");
    drop(relay);
    let _ = std::fs::remove_dir_all(&dir);
}

/// RFC 5424 over UDP: one datagram per line, parsed whole by rsyslog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_lines_reach_rsyslog_over_udp() {
    let pki = Pki::new(&["app.example.com"]);
    let backend = tls_echo_backend(&pki).await;
    let rsyslog = Rsyslog::start(None).await;
    let dir = scratch_dir("syslog-udp");
    let log = format!(
        "target = \"syslog\"\nsyslog = \"udp://127.0.0.1:{}\"\nfacility = \"local7\"\n",
        rsyslog.udp_port
    );
    let relay = SyslogRelay::start(&config_with_log(backend, &log, &dir));
    let (peer, _) = one_session(&pki, relay.addr).await;
    let line = rsyslog.wait_message(|m| m.is_access_line_of(peer)).await;
    assert_eq!(line.facility, "local7");
    assert_eq!(line.severity, "info");
    assert_eq!(line.msgid, "access");
    assert_eq!(line.pid, relay.pid().to_string());
    assert_eq!(line.json["sni"], "app.example.com");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `target = "stdout"`: the same lines on stdout, none on stderr.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stdout_target_moves_every_line_to_stdout() {
    let pki = Pki::new(&["app.example.com"]);
    let backend = tls_echo_backend(&pki).await;
    let dir = scratch_dir("log-stdout");
    let relay = SyslogRelay::start(&config_with_log(backend, "target = \"stdout\"", &dir));
    let (peer, _) = one_session(&pki, relay.addr).await;
    wait_until("the access line on stdout", || {
        relay
            .stdout
            .lock()
            .unwrap()
            .iter()
            .any(|l| l["message"] == "connection closed" && l["client.peer"] == peer.to_string())
    })
    .await;
    assert!(
        relay
            .stdout
            .lock()
            .unwrap()
            .iter()
            .any(|l| l["message"] == "ready"),
        "{:#?}",
        relay.stdout.lock().unwrap()
    );
    assert_eq!(relay.console(), Vec::<Value>::new());
    let _ = std::fs::remove_dir_all(&dir);
}
