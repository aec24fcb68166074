//! Active health checks (TCP and TLS), the certificates a TLS check learns,
//! and `policy = "fastest"` (timing the connect or the TLS check's
//! ServerHello) against the real binary.
//!
//! Backends here can be stopped and started again on the same port (health),
//! or made slow to connect (fastest). On loopback the kernel completes a
//! handshake before accept(), so "slow" is made with the accept queue: the
//! listener stops accepting and its backlog shrinks to 1, the relay's own
//! probes fill the queue, and a further SYN is dropped and retransmitted
//! after the initial RTO (1 s). A helper frees one queue slot whenever it
//! sees the relay's probe waiting in SYN_SENT, so the retransmitted SYN is
//! answered: the probe connects, about one second late. These backends
//! listen on ::1, whose socket table stays small enough to watch.

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

const NAME: &str = "app.example.com";
const DOWN: &str = "backend address marked down (health check)";
const UP: &str = "backend address marked up (health check)";
const CHOSEN: &str = "fastest backend address chosen";
const CHANGED: &str = "fastest backend address changed";
const ROUND: &str = "fastest round measured";

/// A relay with one route (`NAME`) to backend `b`, whose section is `backend`
/// (without its header), and an admin listener; returns it and the admin
/// address.
async fn relay(backend: &str) -> (Relay, SocketAddr) {
    let config = format!(
        r#"
[admin]
listen = "127.0.0.1:0"

[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]

[[route]]
sni = ["{NAME}"]
backend = "b"

[backend.b]
{backend}
"#
    );
    with_admin(&config).await
}

/// A relay on `config`, which has an `[admin]` listener, and its address.
async fn with_admin(config: &str) -> (Relay, SocketAddr) {
    let relay = Relay::start(config).await;
    let line = relay.wait_log(|l| l["message"] == "admin listening").await;
    let admin = line["addr"].as_str().unwrap().parse().unwrap();
    (relay, admin)
}

/// A TLS echo backend on `addr` (port 0 for a new one); returns the task
/// serving it and the bound address.
async fn echo_on(pki: &Pki, addr: SocketAddr) -> (JoinHandle<()>, SocketAddr) {
    let listener = TcpListener::bind(addr).await.unwrap();
    let bound = listener.local_addr().unwrap();
    (serve_tls_echo(pki, Arc::new(listener)), bound)
}

/// Stops a backend served by `task`: once this returns, its port refuses.
async fn stop(task: JoinHandle<()>) {
    task.abort();
    let _ = task.await;
}

fn is(line: &Value, message: &str, addr: SocketAddr) -> bool {
    line["message"] == message && line["addr"] == addr.to_string().as_str()
}

fn up_series(addr: SocketAddr) -> String {
    format!("snirelay_backend_address_up{{backend=\"b\",address=\"{addr}\"}}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_health_marks_down_after_fall_failures_and_up_after_rise_successes() {
    let pki = Pki::new(&[NAME]);
    let (a_task, a) = echo_on(&pki, "127.0.0.1:0".parse().unwrap()).await;
    let b = tls_echo_backend(&pki).await;
    // Passive health is off, so only the checker marks addresses down.
    let (relay, admin) = relay(&format!(
        r#"addresses = ["{a}", "{b}"]
policy = "ordered"
max_fails = 0
connect_timeout = "1s"

[backend.b.health]
interval = "100ms"
timeout = "500ms"
rise = 2
fall = 3
"#
    ))
    .await;
    assert_eq!(
        relayed_backend_addr(&relay, &pki, NAME).await,
        a.to_string()
    );

    // A stops listening: three failed checks in a row mark it down, once.
    stop(a_task).await;
    let down = relay.wait_log(|l| is(l, DOWN, a)).await;
    assert_eq!(down["level"], "WARN");
    assert_eq!(down["backend"], "b");
    assert_eq!(down["failures"], 3);
    let (_, metrics) = http_get(admin, "/metrics").await;
    assert_eq!(metric(&metrics, &up_series(a)), 0.0, "{metrics}");
    assert_eq!(metric(&metrics, &up_series(b)), 1.0, "{metrics}");

    // While A is down, clients go to B first: A is not even tried (a tried
    // and refused address would leave a debug line).
    assert_eq!(
        relayed_backend_addr(&relay, &pki, NAME).await,
        b.to_string()
    );
    let tried_a = relay.log_lines().into_iter().any(|l| {
        l["message"] == "backend connect attempt failed" && l["addr"] == a.to_string().as_str()
    });
    assert!(!tried_a, "a down address was tried before the up one");

    // A listens again on the same port: two good checks mark it up.
    let (a_task, _) = echo_on(&pki, a).await;
    let up = relay.wait_log(|l| is(l, UP, a)).await;
    assert_eq!(up["level"], "INFO");
    assert_eq!(up["backend"], "b");
    assert_eq!(up["successes"], 2);
    let lines = relay.log_lines();
    let downs = lines.iter().filter(|l| is(l, DOWN, a)).count();
    assert_eq!(downs, 1, "the down state is logged once");
    assert!(!lines.iter().any(|l| is(l, DOWN, b) || is(l, UP, b)));
    let (_, metrics) = http_get(admin, "/metrics").await;
    assert_eq!(metric(&metrics, &up_series(a)), 1.0, "{metrics}");
    assert_eq!(
        relayed_backend_addr(&relay, &pki, NAME).await,
        a.to_string()
    );
    stop(a_task).await;
}

/// A backend that reports every connection's bytes and whether it ended
/// with a clean FIN.
async fn recording_backend() -> (SocketAddr, mpsc::UnboundedReceiver<(Vec<u8>, bool)>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let addr = raw_backend(move |mut stream: TcpStream| {
        let tx = tx.clone();
        async move {
            let mut got = Vec::new();
            let clean = stream.read_to_end(&mut got).await.is_ok();
            let _ = tx.send((got, clean));
        }
    })
    .await;
    (addr, rx)
}

async fn next_probe(rx: &mut mpsc::UnboundedReceiver<(Vec<u8>, bool)>) -> (Vec<u8>, bool) {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("no health check reached the backend")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_of_a_proxy_backend_send_a_local_header_and_close_cleanly() {
    let (v2, mut v2_probes) = recording_backend().await;
    let (v1, mut v1_probes) = recording_backend().await;
    let config = format!(
        r#"
[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]

[[route]]
sni = ["v2.example.com"]
backend = "v2"

[[route]]
sni = ["v1.example.com"]
backend = "v1"

[backend.v2]
addresses = ["{v2}"]
proxy_protocol = "v2"
proxy_protocol_crc32c = true

[backend.v2.health]
interval = "100ms"

[backend.v1]
addresses = ["{v1}"]
proxy_protocol = "v1"

[backend.v1.health]
interval = "100ms"
"#
    );
    let _relay = Relay::start(&config).await;

    for _ in 0..2 {
        let (bytes, clean) = next_probe(&mut v2_probes).await;
        assert!(clean, "the checker reset the connection");
        let header = ppp::v2::Header::try_from(&bytes[..])
            .unwrap_or_else(|e| panic!("not a PROXY v2 header ({e:?}): {bytes:?}"));
        assert_eq!(header.command, ppp::v2::Command::Local);
        assert_eq!(header.addresses, ppp::v2::Addresses::Unspecified);
        assert_eq!(header.len(), bytes.len(), "nothing after the header");
        // The CRC32C TLV follows; ppp counts everything after an UNSPEC
        // header's fixed part as addresses (receivers ignore them).
        assert_eq!(header.address_bytes().len(), 7, "one CRC32C TLV");
    }
    let (bytes, clean) = next_probe(&mut v1_probes).await;
    assert!(clean, "the checker reset the connection");
    assert_eq!(bytes, b"PROXY UNKNOWN\r\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_address_down_a_client_is_still_relayed_once_one_accepts() {
    let pki = Pki::new(&[NAME]);
    let (a, a_held) = closed_port_held();
    let b = closed_port();
    // B first: a client will be refused by B, then relayed by A, which is
    // still marked down (20 good checks are needed to mark it up).
    let (relay, _admin) = relay(&format!(
        r#"addresses = ["{b}", "{a}"]
connect_timeout = "1s"

[backend.b.health]
interval = "100ms"
timeout = "500ms"
rise = 20
fall = 1
"#
    ))
    .await;
    relay.wait_log(|l| is(l, DOWN, a)).await;
    relay.wait_log(|l| is(l, DOWN, b)).await;

    drop(a_held);
    let (a_task, _) = echo_on(&pki, a).await;
    let tls = echo_session(&pki, relay.addr(), NAME)
        .await
        .expect("health refused a client");
    let still_down = !relay.log_lines().iter().any(|l| is(l, UP, a));
    let local = tls.get_ref().0.local_addr().unwrap();
    drop(tls);
    let closed = relay.closed_line(local).await;
    assert!(still_down, "A was marked up before the client was relayed");
    assert_eq!(closed["backend.addr"], a.to_string().as_str());
    stop(a_task).await;
}

// ------------------------------------------------------------- TLS checks

/// A forwarder whose own downstream is dead: it accepts TCP, reads the
/// first TLS record (for up to a second), and closes. A TCP
/// check passes it; a TLS check does not. Returns its address and a count
/// of accepted connections.
async fn dead_forwarder() -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    let addr = raw_backend(move |mut stream: TcpStream| {
        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async move {
            // The whole first record (a ClientHello), so that the close is
            // a FIN, not a reset for unread bytes.
            let read = async {
                let mut header = [0u8; 5];
                stream.read_exact(&mut header).await?;
                let mut body = vec![0u8; usize::from(u16::from_be_bytes([header[3], header[4]]))];
                stream.read_exact(&mut body).await
            };
            let _ = tokio::time::timeout(Duration::from_secs(1), read).await;
        }
    })
    .await;
    (addr, accepted)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_check_marks_down_a_forwarder_that_accepts_tcp_but_answers_no_hello() {
    let pki = Pki::new(&[NAME]);
    let (dead, _) = dead_forwarder().await;
    let good = tls_echo_backend(&pki).await;
    // Passive health off, so only the TLS checker can mark the first
    // address down; with `ordered` the client would otherwise go there.
    let (relay, admin) = relay(&format!(
        r#"addresses = ["{dead}", "{good}"]
policy = "ordered"
max_fails = 0

[backend.b.health]
kind = "tls"
sni = "{NAME}"
interval = "100ms"
timeout = "500ms"
fall = 2
"#
    ))
    .await;
    let down = relay.wait_log(|l| is(l, DOWN, dead)).await;
    assert_eq!(down["level"], "WARN");
    assert_eq!(down["failures"], 2);
    assert_eq!(
        down["error"],
        "no ServerHello: the backend closed the connection"
    );
    // The client goes to the address that answers a hello.
    assert_eq!(
        relayed_backend_addr(&relay, &pki, NAME).await,
        good.to_string()
    );
    // The TLS server passed the same rounds (fall = 2 failures would have
    // marked it down with the forwarder).
    let lines = relay.log_lines();
    assert!(
        !lines.iter().any(|l| is(l, DOWN, good)),
        "the TLS server failed its check"
    );
    let (_, metrics) = http_get(admin, "/metrics").await;
    assert_eq!(metric(&metrics, &up_series(dead)), 0.0, "{metrics}");
    assert_eq!(metric(&metrics, &up_series(good)), 1.0, "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tcp_check_passes_the_same_dead_forwarder() {
    // The reason for `kind = "tls"`: with TCP checks the dead forwarder is
    // up, and an `ordered` client goes to it and gets nothing.
    let pki = Pki::new(&[NAME]);
    let (dead, checked) = dead_forwarder().await;
    let good = tls_echo_backend(&pki).await;
    let (relay, _admin) = relay(&format!(
        r#"addresses = ["{dead}", "{good}"]
policy = "ordered"
max_fails = 0

[backend.b.health]
interval = "100ms"
fall = 1
"#
    ))
    .await;
    // Three checks have reached it (so two verdicts are in), none failing...
    wait_until("three checks of the forwarder", || {
        checked.load(std::sync::atomic::Ordering::SeqCst) >= 3
    })
    .await;
    assert!(
        !relay.log_lines().iter().any(|l| is(l, DOWN, dead)),
        "a TCP check failed the forwarder"
    );
    // ...and the client is sent to the forwarder, which closes on it.
    let tcp = TcpStream::connect(relay.addr()).await.unwrap();
    let local = tcp.local_addr().unwrap();
    assert!(tls_connect(pki.client_config(), NAME, tcp).await.is_err());
    let line = relay.closed_line(local).await;
    assert_eq!(line["backend.addr"], dead.to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fastest_measure_tls_ranks_on_the_time_until_the_server_hello() {
    let pki = Pki::new(&[NAME]);
    // Both connect at once; the first answers the hello 300 ms late.
    let inner = tls_echo_backend(&pki).await;
    let slow = raw_backend(move |mut client: TcpStream| async move {
        let Ok(mut server) = TcpStream::connect(inner).await else {
            return;
        };
        let mut hello = vec![0u8; 16 * 1024];
        let Ok(n) = client.read(&mut hello).await else {
            return;
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        use tokio::io::AsyncWriteExt;
        if server.write_all(&hello[..n]).await.is_ok() {
            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
        }
    })
    .await;
    let fast = tls_echo_backend(&pki).await;
    let (relay, _admin) = relay(&format!(
        r#"addresses = ["{slow}", "{fast}"]
policy = "fastest"
fastest_measure = "tls"
fastest_interval = "1h"

[backend.b.health]
kind = "tls"
sni = "{NAME}"
interval = "1h"
"#
    ))
    .await;
    let chosen = relay.wait_log(|l| l["message"] == CHOSEN).await;
    assert_eq!(chosen["addr"], fast.to_string());
    let round = relay.wait_log(|l| l["message"] == ROUND).await;
    let slow_ms = latency_in(&round, slow).expect("the slow address answered");
    assert!(slow_ms >= 300.0, "{round}");
    assert_eq!(
        relayed_backend_addr(&relay, &pki, NAME).await,
        fast.to_string()
    );
}

// ------------------------------------------------------------------ fastest

/// A TLS echo backend that can be made slow to connect.
struct Gate {
    addr: SocketAddr,
    listener: Arc<TcpListener>,
    serving: Option<JoinHandle<()>>,
    opener: Option<JoinHandle<()>>,
}

impl Gate {
    async fn new(pki: &Pki) -> Gate {
        let listener = TcpListener::bind("[::1]:0")
            .await
            .expect("these tests need IPv6 loopback (::1)");
        let listener = Arc::new(listener);
        Gate {
            addr: listener.local_addr().unwrap(),
            serving: Some(serve_tls_echo(pki, listener.clone())),
            listener,
            opener: None,
        }
    }

    /// Stops accepting and lets the accept queue fill, then answers each
    /// connect after one SYN retransmission (about 1 s).
    async fn make_slow(&mut self) {
        stop(self.serving.take().unwrap()).await;
        // A listening socket may listen again: only its backlog changes.
        // With a backlog of 1 the queue is full at 2.
        socket2::SockRef::from(&*self.listener).listen(1).unwrap();
        // The relay's own probes fill it: connections nobody accepts.
        // Nothing else connects here, so no half-open connection (a SYN
        // answered just before the queue filled) is left to take the slots
        // freed below.
        wait_until("the relay's probes to fill the accept queue", || {
            queue_len6(self.addr) >= 2
        })
        .await;
        let listener = self.listener.clone();
        let addr = self.addr;
        self.opener = Some(tokio::spawn(async move {
            // Bounded by the test: the task is aborted when the gate drops.
            let mut served = std::collections::HashMap::new();
            loop {
                for socket in syn_sent_to(addr) {
                    // One slot for this socket's next retransmitted SYN;
                    // should that one be lost, another for the second
                    // retransmission (at 3 s).
                    let now = tokio::time::Instant::now();
                    let due = served
                        .get(&socket)
                        .is_none_or(|&at| now - at > Duration::from_millis(1500));
                    if due {
                        served.insert(socket.clone(), now);
                        let free = listener.accept();
                        let _ = tokio::time::timeout(Duration::from_millis(100), free).await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }));
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        for task in [self.serving.take(), self.opener.take()]
            .into_iter()
            .flatten()
        {
            task.abort();
        }
    }
}

/// The rows of /proc/net/tcp6 as (local, remote, state, queues, inode).
///
/// The gates listen on ::1 because this table stays small: on a busy host
/// /proc/net/tcp holds thousands of IPv4 sockets and takes too long to read
/// to react within a SYN retransmission.
fn tcp6_rows() -> Vec<[String; 5]> {
    let table = std::fs::read_to_string("/proc/net/tcp6").unwrap();
    table
        .lines()
        .skip(1)
        .map(|row| {
            let c: Vec<&str> = row.split_whitespace().collect();
            [c[1], c[2], c[3], c[4], c[9]].map(str::to_owned)
        })
        .collect()
}

/// How many connections wait in the accept queue of the listener on `addr`.
fn queue_len6(addr: SocketAddr) -> u32 {
    let port = format!(":{:04X}", addr.port());
    let row = tcp6_rows()
        .into_iter()
        .find(|[local, _, state, _, _]| local.ends_with(&port) && state == "0A")
        .unwrap_or_else(|| panic!("no listener on {addr} in /proc/net/tcp6"));
    let (_tx, rx) = row[3].split_once(':').unwrap();
    u32::from_str_radix(rx, 16).unwrap()
}

/// The sockets waiting in SYN_SENT for `addr` (on ::1), by local address
/// and inode.
fn syn_sent_to(addr: SocketAddr) -> Vec<(String, String)> {
    let port = format!(":{:04X}", addr.port());
    tcp6_rows()
        .into_iter()
        .filter(|[_, remote, state, _, _]| remote.ends_with(&port) && state == "02")
        .map(|[local, _, _, _, inode]| (local, inode))
        .collect()
}

/// The latency a `fastest round measured` line reports for `addr`, in ms;
/// `None` when its probe failed.
fn latency_in(round: &Value, addr: SocketAddr) -> Option<f64> {
    let text = round["latencies"].as_str().unwrap();
    let entry = text
        .split(", ")
        .find_map(|e| e.strip_prefix(&format!("{addr}=")))
        .unwrap_or_else(|| panic!("{addr} not in {text}"));
    entry.strip_suffix("ms")?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fastest_converges_on_the_faster_address_and_does_not_flap() {
    let pki = Pki::new(&[NAME]);
    let mut x = Gate::new(&pki).await;
    let mut y = Gate::new(&pki).await;
    let (relay, _admin) = relay(&format!(
        r#"addresses = ["{}", "{}"]
policy = "fastest"
fastest_interval = "200ms"
connect_timeout = "5s"
"#,
        x.addr, y.addr
    ))
    .await;

    // Both are equally fast: a first choice, then no switch over 10 rounds.
    let chosen = relay.wait_log(|l| l["message"] == CHOSEN).await;
    assert_eq!(chosen["level"], "INFO");
    let first: SocketAddr = chosen["addr"].as_str().unwrap().parse().unwrap();
    relay.wait_count(10, |l| l["message"] == ROUND).await;
    assert!(
        !relay.log_lines().iter().any(|l| l["message"] == CHANGED),
        "flapped between equally fast addresses"
    );
    assert_eq!(
        relayed_backend_addr(&relay, &pki, NAME).await,
        first.to_string()
    );

    // The chosen one becomes about 1 s slow to connect: after two slow
    // rounds in a row the choice moves to the other.
    let (slow, fast) = if first == x.addr {
        (&mut x, &mut y)
    } else {
        (&mut y, &mut x)
    };
    let (slow_addr, fast_addr) = (slow.addr, fast.addr);
    slow.make_slow().await;
    let changed = relay.wait_log(|l| l["message"] == CHANGED).await;
    assert_eq!(changed["level"], "INFO");
    assert_eq!(changed["from"], slow_addr.to_string().as_str());
    assert_eq!(changed["to"], fast_addr.to_string().as_str());
    let rounds: Vec<String> = relay
        .log_lines()
        .iter()
        .filter(|l| l["message"] == ROUND)
        .map(|l| format!("{} {}", l["timestamp"], l["latencies"]))
        .collect();
    assert_eq!(changed["from.failed"], false, "{changed} after {rounds:#?}");
    let from_ms = changed["from.latency_ms"].as_f64().unwrap();
    let to_ms = changed["to.latency_ms"].as_f64().unwrap();
    assert!((900.0..5000.0).contains(&from_ms), "{changed}");
    assert!(to_ms < 100.0, "{changed}");
    let lines = relay.log_lines();
    let at = lines.iter().position(|l| l["message"] == CHANGED).unwrap();
    let slow_rounds = lines[..at]
        .iter()
        .filter(|l| l["message"] == ROUND)
        .filter(|l| latency_in(l, slow_addr).is_some_and(|ms| ms >= 500.0))
        .count();
    assert_eq!(slow_rounds, 2, "moved after exactly two slow rounds");
    assert_eq!(
        relayed_backend_addr(&relay, &pki, NAME).await,
        fast_addr.to_string()
    );

    // It stays there while the other is slower.
    let rounds = lines.iter().filter(|l| l["message"] == ROUND).count();
    relay
        .wait_count(rounds + 2, |l| l["message"] == ROUND)
        .await;
    let changes = relay
        .log_lines()
        .iter()
        .filter(|l| l["message"] == CHANGED)
        .count();
    assert_eq!(changes, 1, "flapped back");
    drop(x);
    drop(y);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fastest_moves_at_once_when_its_choice_fails() {
    let pki = Pki::new(&[NAME]);
    let x = Gate::new(&pki).await;
    let y = Gate::new(&pki).await;
    let (relay, _admin) = relay(&format!(
        r#"addresses = ["{}", "{}"]
policy = "fastest"
fastest_interval = "200ms"
connect_timeout = "1s"
"#,
        x.addr, y.addr
    ))
    .await;
    let chosen = relay.wait_log(|l| l["message"] == CHOSEN).await;
    let first: SocketAddr = chosen["addr"].as_str().unwrap().parse().unwrap();
    let (failing, other) = if first == x.addr { (x, y) } else { (y, x) };
    let failing_addr = failing.addr;
    // Closed: connects are refused.
    drop(failing);
    let changed = relay.wait_log(|l| l["message"] == CHANGED).await;
    assert_eq!(changed["from"], failing_addr.to_string().as_str());
    assert_eq!(changed["from.failed"], true, "{changed}");
    assert_eq!(changed["to"], other.addr.to_string().as_str());
    // The failure's round is the one that moved it.
    let lines = relay.log_lines();
    let at = lines.iter().position(|l| l["message"] == CHANGED).unwrap();
    let round = lines[..at]
        .iter()
        .rev()
        .find(|l| l["message"] == ROUND)
        .unwrap();
    assert_eq!(latency_in(round, failing_addr), None, "{round}");
    let failed_rounds = lines[..at]
        .iter()
        .filter(|l| l["message"] == ROUND && latency_in(l, failing_addr).is_none())
        .count();
    assert_eq!(failed_rounds, 1);
    assert_eq!(
        relayed_backend_addr(&relay, &pki, NAME).await,
        other.addr.to_string()
    );
}

/// Polls /metrics until every one of `series` is there; returns the text.
async fn wait_series(admin: SocketAddr, series: &[String]) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (_, text) = http_get(admin, "/metrics").await;
        let missing: Vec<&String> = series
            .iter()
            .filter(|s| !text.lines().any(|l| l.starts_with(&format!("{s} "))))
            .collect();
        if missing.is_empty() {
            return text;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{missing:?} not exported after {WAIT:?}:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_check_exports_each_address_certificate_expiry_and_coverage() {
    let covering = tls_echo_backend(&Pki::new(&[NAME])).await;
    let other = tls_echo_backend(&Pki::new(&["other.example.com"])).await;
    let (_relay, admin) = relay(&format!(
        r#"addresses = ["{covering}", "{other}"]

[backend.b.health]
kind = "tls"
sni = "{NAME}"
interval = "100ms"
timeout = "2s"
"#
    ))
    .await;
    let series = |family: &str, addr: SocketAddr| {
        format!("snirelay_backend_certificate_{family}{{backend=\"b\",address=\"{addr}\"}}")
    };
    let wanted = [
        series("not_after_seconds", covering),
        series("covers", covering),
        series("not_after_seconds", other),
        series("covers", other),
    ];
    let text = wait_series(admin, &wanted).await;
    assert_eq!(metric(&text, &wanted[1]), 1.0, "{text}");
    assert_eq!(metric(&text, &wanted[3]), 0.0, "{text}");
    // rcgen's default validity ends on 4096-01-01.
    assert_eq!(metric(&text, &wanted[0]), 67_090_118_400.0, "{text}");
    assert_eq!(metric(&text, &wanted[2]), 67_090_118_400.0, "{text}");
}

/// A certificate for `name` alone, valid until the first day of `year`,
/// with its key, as a rustls server presents it.
fn certified(name: &str, year: i32) -> rustls::sign::CertifiedKey {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec![name.to_owned()]).unwrap();
    params.not_after = rcgen::date_time_ymd(year, 1, 1);
    let cert = params.self_signed(&key).unwrap();
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    rustls::sign::CertifiedKey::from_der(
        vec![cert.der().clone()],
        rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        &provider,
    )
    .unwrap()
}

/// A TLS server that presents, for each name asked, the certificate of
/// `by_name` (a backend choosing by SNI), or `only` for every name; it
/// completes handshakes and closes.
async fn certificate_server(
    by_name: &[(&str, rustls::sign::CertifiedKey)],
    only: Option<rustls::sign::CertifiedKey>,
) -> SocketAddr {
    let builder = rustls::ServerConfig::builder().with_no_client_auth();
    let config = match only {
        Some(certified) => {
            builder.with_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(certified)))
        }
        None => {
            let mut resolver = rustls::server::ResolvesServerCertUsingSni::new();
            for (name, certified) in by_name {
                resolver.add(name, certified.clone()).unwrap();
            }
            builder.with_cert_resolver(Arc::new(resolver))
        }
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let _ = acceptor.accept(tcp).await;
            });
        }
    });
    addr
}

/// Every name routed to a TLS-checked backend is asked for its own
/// certificate: a backend choosing by SNI covers both names (and the
/// earliest expiry is the second name's), one presenting the check's
/// certificate for every name does not cover the others (a backend
/// written as deployed: a host name, the check's defaults); after a
/// reload that routes fewer names, the watch asks again at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_certificate_watch_asks_every_name_routed_to_the_backend() {
    const OTHER: &str = "other.example.com";
    // 2090-01-01 and 4096-01-01, in Unix seconds.
    let (soon, late) = (3_786_912_000_i64, 67_090_118_400_i64);
    let by_sni = certificate_server(
        &[
            (NAME, certified(NAME, 4096)),
            (OTHER, certified(OTHER, 2090)),
        ],
        None,
    )
    .await;
    let one_cert = certificate_server(&[], Some(certified(NAME, 4096))).await;
    let one_port = one_cert.port();
    let config = format!(
        r#"
[admin]
listen = "127.0.0.1:0"

[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]

[[route]]
name = "by_sni"
sni = ["{NAME}", "{OTHER}"]
backend = "by_sni"

[[route]]
name = "one_cert"
sni = ["one.{NAME}", "one.{OTHER}"]
backend = "one_cert"

[backend.by_sni]
addresses = ["{by_sni}"]
[backend.by_sni.health]
kind = "tls"
sni = "{NAME}"
interval = "100ms"
timeout = "2s"

# As deployed: a host name resolved by the system resolver, and the
# health check's interval and timeout left at their defaults.
[backend.one_cert]
resolve = "localhost:{one_port}"
[backend.one_cert.health]
kind = "tls"
sni = "{NAME}"
"#
    );
    let (relay, admin) = with_admin(&config).await;
    let series = |family: &str, backend: &str, addr: SocketAddr| {
        format!("snirelay_backend_certificate_{family}{{backend=\"{backend}\",address=\"{addr}\"}}")
    };
    let wanted = [
        series("not_after_seconds", "by_sni", by_sni),
        series("covers", "by_sni", by_sni),
        series("not_after_seconds", "one_cert", one_cert),
        series("covers", "one_cert", one_cert),
    ];
    let text = wait_series(admin, &wanted).await;
    assert_eq!(metric(&text, &wanted[0]), soon as f64, "{text}");
    assert_eq!(metric(&text, &wanted[1]), 1.0, "{text}");
    assert_eq!(metric(&text, &wanted[2]), late as f64, "{text}");
    assert_eq!(metric(&text, &wanted[3]), 0.0, "{text}");

    // A reload that routes only the check's name there keeps the backend
    // (its section is unchanged) and its watch asks again at once: the
    // earliest certificate is now the check name's.
    let fewer = config.replace(
        &format!("sni = [\"{NAME}\", \"{OTHER}\"]"),
        &format!("sni = [\"{NAME}\"]"),
    );
    assert_ne!(fewer, config);
    let reloaded = relay.reload(&fewer, 1).await;
    assert_eq!(reloaded["message"], "reload applied", "{reloaded}");
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (_, text) = http_get(admin, "/metrics").await;
        if metric(&text, &wanted[0]) == late as f64 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not asked again after the reload:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
