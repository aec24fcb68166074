//! The admin listener against a real relay process: /metrics moves with
//! traffic, /healthz, /config (only when exposed: every key, and the keys
//! a reload cannot apply until a restart), /readyz turning 503
//! during a drain, and health probes answered while a thousand connections
//! sit silent, trickle their headers or idle on keep-alive.

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const NAME: &str = "app.localhost";

/// A relay with an admin listener on a free loopback port; returns it and
/// the admin address it logged.
async fn relay_with_admin(backend: SocketAddr) -> (Relay, SocketAddr) {
    relay_with_admin_keys(backend, "").await
}

/// [`relay_with_admin`] with more `[admin]` keys (`key = value` lines).
async fn relay_with_admin_keys(backend: SocketAddr, keys: &str) -> (Relay, SocketAddr) {
    start_with_admin(&admin_config(keys, &simple_config(&[NAME], backend, ""))).await
}

/// `[admin]` on a free loopback port with `keys`, then `rest`.
fn admin_config(keys: &str, rest: &str) -> String {
    format!("[admin]\nlisten = \"127.0.0.1:0\"\n{keys}\n{rest}")
}

/// Starts the relay on `config`; returns it and the admin address it logged.
async fn start_with_admin(config: &str) -> (Relay, SocketAddr) {
    let relay = Relay::start(config).await;
    let admin = relay.admin_addr().await;
    (relay, admin)
}

/// GETs `path` until `done(body)` holds (a reload's effect on the admin
/// listener follows its `reload applied` line by a moment); returns the body.
async fn get_until(admin: SocketAddr, path: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (_, body) = http_get(admin, path).await;
        if done(&body) {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{path} never satisfied the condition: {body}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// One TLS session through the relay that echoes `message`; returns the
/// client's local address.
async fn roundtrip(pki: &Pki, relay: SocketAddr, message: &[u8]) -> SocketAddr {
    let tcp = TcpStream::connect(relay).await.unwrap();
    let local = tcp.local_addr().unwrap();
    let mut tls = tls_connect(pki.client_config(), NAME, tcp).await.unwrap();
    tls.write_all(message).await.unwrap();
    let mut back = vec![0u8; message.len()];
    tls.read_exact(&mut back).await.unwrap();
    assert_eq!(back, message);
    tls.shutdown().await.unwrap();
    let mut rest = Vec::new();
    let _ = tls.read_to_end(&mut rest).await;
    local
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_move_with_traffic() {
    let pki = Pki::new(&[NAME]);
    let backend = tls_echo_backend(&pki).await;
    let (relay, admin) = relay_with_admin(backend).await;

    let (status, before) = http_get(admin, "/metrics").await;
    assert_eq!(status, 200);
    let accepted = "snirelay_connections_accepted_total{listener=\"tls\",protocol=\"tcp\"}";
    // Series exist from start-up, at zero.
    assert!(before.contains(&format!("{accepted} 0\n")), "{before}");
    assert!(
        before.contains("snirelay_build_info{version=\""),
        "{before}"
    );
    assert!(metric(&before, "snirelay_process_open_fds") > 0.0);
    assert!(metric(&before, "snirelay_process_resident_memory_bytes") > 1e6);

    // One relayed session, one unknown name, one non-TLS client.
    let message = vec![7u8; 10_000];
    let peer = roundtrip(&pki, relay.addr(), &message).await;
    let done = relay.closed_line(peer).await;
    assert_eq!(done["close"], "done");

    let tcp = TcpStream::connect(relay.addr()).await.unwrap();
    let unmatched_peer = tcp.local_addr().unwrap();
    assert!(
        tls_connect(pki.client_config(), "other.example", tcp)
            .await
            .is_err()
    );
    relay.closed_line(unmatched_peer).await;

    let mut plain = TcpStream::connect(relay.addr()).await.unwrap();
    let plain_peer = plain.local_addr().unwrap();
    plain.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
    let _ = plain.read_to_end(&mut Vec::new()).await;
    assert_eq!(relay.closed_line(plain_peer).await["close"], "not_tls");

    let (_, after) = http_get(admin, "/metrics").await;
    let m = |series: &str| metric(&after, series);
    assert_eq!(m(accepted), 3.0, "{after}");
    assert_eq!(
        m("snirelay_connections_active{listener=\"tls\",protocol=\"tcp\"}"),
        0.0
    );
    for (reason, count) in [("done", 1.0), ("unmatched", 1.0), ("not_tls", 1.0)] {
        let series = format!(
            "snirelay_connections_closed_total{{listener=\"tls\",protocol=\"tcp\",reason=\"{reason}\"}}"
        );
        assert_eq!(m(&series), count, "{series}\n{after}");
    }
    assert_eq!(
        m("snirelay_client_hellos_total{listener=\"tls\",protocol=\"tcp\",outcome=\"sni\"}"),
        2.0
    );
    assert_eq!(
        m("snirelay_client_hellos_total{listener=\"tls\",protocol=\"tcp\",outcome=\"not_tls\"}"),
        1.0
    );
    let traffic = format!("{{listener=\"tls\",protocol=\"tcp\",route=\"{NAME}\",backend=\"b\"}}");
    let up = m(&format!("snirelay_bytes_up_total{traffic}"));
    let down = m(&format!("snirelay_bytes_down_total{traffic}"));
    assert_eq!(up, done["bytes.up"].as_f64().unwrap(), "{after}");
    assert_eq!(down, done["bytes.down"].as_f64().unwrap(), "{after}");
    assert!(up > message.len() as f64 && down > message.len() as f64);
    assert_eq!(
        m("snirelay_backend_connect_attempts_total{backend=\"b\"}"),
        1.0
    );
    assert_eq!(
        m("snirelay_backend_connect_failures_total{backend=\"b\"}"),
        0.0
    );
    assert_eq!(
        m("snirelay_backend_connect_duration_seconds_count{backend=\"b\"}"),
        1.0
    );
    // Never a client address or a server name in a label (the backend's
    // fixed address is there, as `address` of its health gauge).
    for client in [peer, unmatched_peer, plain_peer] {
        assert!(!after.contains(&client.to_string()), "{after}");
    }
    assert_eq!(
        m(&format!(
            "snirelay_backend_address_up{{backend=\"b\",address=\"{backend}\"}}"
        )),
        1.0,
        "{after}"
    );
    assert!(!after.contains("other.example"), "{after}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_backend_connects_are_counted() {
    let (relay, admin) = relay_with_admin(closed_port()).await;
    let pki = Pki::new(&[NAME]);
    let tcp = TcpStream::connect(relay.addr()).await.unwrap();
    let peer = tcp.local_addr().unwrap();
    assert!(tls_connect(pki.client_config(), NAME, tcp).await.is_err());
    assert_eq!(relay.closed_line(peer).await["close"], "connect_failed");
    let (_, text) = http_get(admin, "/metrics").await;
    let m = |series: &str| metric(&text, series);
    assert_eq!(
        m("snirelay_backend_connect_attempts_total{backend=\"b\"}"),
        1.0
    );
    assert_eq!(
        m("snirelay_backend_connect_failures_total{backend=\"b\"}"),
        1.0
    );
    assert_eq!(
        m(
            "snirelay_connections_closed_total{listener=\"tls\",protocol=\"tcp\",reason=\"connect_failed\"}"
        ),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_config_and_unknown_paths() {
    let backend = closed_port();
    let (relay, admin) = relay_with_admin_keys(backend, "expose_config = true").await;
    assert_eq!(http_get(admin, "/healthz").await, (200, "ok\n".into()));
    assert_eq!(http_get(admin, "/readyz").await, (200, "ready\n".into()));
    assert_eq!(http_get(admin, "/nope").await.0, 404);

    let (status, body) = http_get(admin, "/config").await;
    assert_eq!(status, 200);
    let config: Value = serde_json::from_str(&body).unwrap();
    let listener = &config["listener"][0];
    assert_eq!(listener["name"], "tls");
    assert_eq!(listener["listen"][0], "127.0.0.1:0");
    // Defaults are filled in.
    assert_eq!(listener["client_hello_timeout"], "5s");
    assert_eq!(listener["no_sni"], "reject");
    // Routes are `[[route]]` tables, as in the file.
    assert_eq!(config["route"][0]["sni"][0], NAME);
    assert_eq!(config["route"][0]["backend"], "b");
    assert_eq!(config["backend"]["b"]["addresses"][0], backend.to_string());
    assert_eq!(config["backend"]["b"]["connect_timeout"], "2s");
    assert_eq!(config["admin"]["listen"], "127.0.0.1:0");
    assert_eq!(config["admin"]["expose_config"], true);
    assert_eq!(config["admin"]["address_labels"], true);
    drop(relay);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_is_not_served_unless_exposed() {
    let (relay, admin) = relay_with_admin(closed_port()).await;
    let (status, body) = http_get(admin, "/config").await;
    assert_eq!(status, 404);
    // Answered like any unknown path: nothing hints at it.
    assert_eq!(body, http_get(admin, "/nope").await.1);
    assert!(!body.contains("config"), "{body}");
    assert_eq!(http_get(admin, "/metrics").await.0, 200);

    // A reload that sets it serves it from then on.
    let config = std::fs::read_to_string(&relay.config_path).unwrap();
    let exposed = config.replacen("[admin]\n", "[admin]\nexpose_config = true\n", 1);
    assert_eq!(relay.reload(&exposed, 1).await["message"], "reload applied");
    let body = get_until(admin, "/config", |b| b.starts_with('{')).await;
    let config: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(config["admin"]["expose_config"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_shows_every_key_with_its_effective_value() {
    let text = admin_config(
        "expose_config = true",
        &format!(
            "[global]\nmax_connection_rate = 500\n{}",
            one_route_config(
                &[NAME],
                "",
                "addresses = [\"127.0.0.1:9\"]\npolicy = \"fastest\"\nfastest_interval = \"2m\"",
            )
        ),
    );
    let (relay, admin) = start_with_admin(&text).await;
    let (status, body) = http_get(admin, "/config").await;
    assert_eq!(status, 200);
    let config: Value = serde_json::from_str(&body).unwrap();

    // Exactly the file model filled from the validated file: one source.
    let validated = snirelay::config::Config::from_toml(&text, &relay.config_path).unwrap();
    let mut want = serde_json::to_value(validated.to_file()).unwrap();
    want["pending_restart"] = serde_json::json!([]);
    assert_eq!(config, want);

    // Among them the keys the hand-written view used to leave out.
    let global = &config["global"];
    let threads = std::thread::available_parallelism().unwrap().get();
    assert_eq!(global["threads"], threads);
    assert_eq!(global["splice"], true);
    assert_eq!(global["pipe_size"], 65536);
    assert_eq!(global["max_pipes"], 512);
    assert_eq!(global["max_connection_rate"], 500);
    let listener = &config["listener"][0];
    assert_eq!(listener["reuse_port"], false);
    assert_eq!(listener["splice"], true);
    assert_eq!(listener["limits"]["connections_per_source"], 256);
    assert_eq!(listener["limits"]["source_prefix_v6"], 64);
    assert_eq!(listener["limits"]["dry_run"], false);
    // Unset and off: shown as null, not left out.
    assert!(listener["limits"]["connection_rate_per_source"].is_null());
    assert!(listener["proxy_protocol"].is_null());
    assert_eq!(config["backend"]["b"]["fastest_interval"], "2m");
    assert_eq!(config["admin"]["allow_public"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_of_a_restart_only_key_warns_and_config_shows_it_pending() {
    let config = |global: &str, admin_listen: &str| {
        format!(
            "[admin]\nlisten = \"{admin_listen}\"\nexpose_config = true\n[global]\n{global}\n{}",
            simple_config(&[NAME], closed_port(), "")
        )
    };
    let started = config(
        "threads = 2\npipe_size = 65536\nmax_pipes = 512",
        "127.0.0.1:0",
    );
    let (relay, admin) = start_with_admin(&started).await;
    let is_warning = |l: &Value| l["message"] == "needs a restart; the running value stays";

    // Every restart-only key changed, and one key that a reload applies.
    let changed = config(
        "threads = 1\npipe_size = 131072\nmax_pipes = 64\ndrain_timeout = \"7s\"",
        "127.0.0.1:9",
    );
    assert_eq!(relay.reload(&changed, 1).await["message"], "reload applied");
    relay.wait_count(4, is_warning).await;
    let warnings: Vec<Value> = relay.log_lines().into_iter().filter(is_warning).collect();
    let keys: Vec<&str> = warnings
        .iter()
        .map(|l| l["key"].as_str().unwrap())
        .collect();
    assert_eq!(
        keys,
        [
            "global.threads",
            "global.pipe_size",
            "global.max_pipes",
            "admin.listen"
        ]
    );
    assert!(
        warnings.iter().all(|l| l["level"] == "WARN"),
        "{warnings:?}"
    );
    assert_eq!(
        (&warnings[0]["running"], &warnings[0]["file"]),
        (&"2".into(), &"1".into())
    );
    assert_eq!(warnings[3]["running"], "\"127.0.0.1:0\"");
    assert_eq!(warnings[3]["file"], "\"127.0.0.1:9\"");

    // The admin listener stays where it was and /config says what waits.
    let body = get_until(admin, "/config", |b| b.contains("\"7s\"")).await;
    let view: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(view["global"]["drain_timeout"], "7s", "applied");
    assert_eq!(view["global"]["threads"], 1, "the file's value");
    assert_eq!(
        view["pending_restart"],
        serde_json::json!([
            { "key": "global.threads", "running": 2, "file": 1 },
            { "key": "global.pipe_size", "running": 65536, "file": 131072 },
            { "key": "global.max_pipes", "running": 512, "file": 64 },
            { "key": "admin.listen", "running": "127.0.0.1:0", "file": "127.0.0.1:9" },
        ])
    );

    // Back to the running values: nothing pending, no new warning.
    assert_eq!(relay.reload(&started, 2).await["message"], "reload applied");
    let body = get_until(admin, "/config", |b| !b.contains("\"7s\"")).await;
    let view: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(view["pending_restart"], serde_json::json!([]));
    assert_eq!(relay.log_lines().into_iter().filter(is_warning).count(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_turns_503_while_draining() {
    let pki = Pki::new(&[NAME]);
    let backend = tls_echo_backend(&pki).await;
    let (relay, admin) = relay_with_admin(backend).await;
    assert_eq!(http_get(admin, "/readyz").await.0, 200);

    // A live session keeps the drain going.
    let tcp = TcpStream::connect(relay.addr()).await.unwrap();
    let mut tls = tls_connect(pki.client_config(), NAME, tcp).await.unwrap();
    tls.write_all(b"ping").await.unwrap();
    let mut back = [0u8; 4];
    tls.read_exact(&mut back).await.unwrap();

    relay.signal("TERM");
    relay.wait_log(|l| l["message"] == "draining").await;
    assert_eq!(
        http_get(admin, "/readyz").await,
        (503, "not ready\n".into())
    );
    // Alive all the same, and the session still works.
    assert_eq!(http_get(admin, "/healthz").await.0, 200);
    tls.write_all(b"pong").await.unwrap();
    tls.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"pong");
    let (_, text) = http_get(admin, "/metrics").await;
    assert_eq!(
        metric(
            &text,
            "snirelay_connections_active{listener=\"tls\",protocol=\"tcp\"}"
        ),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn address_labels_can_be_turned_off() {
    let pki = Pki::new(&[NAME]);
    let up = tls_echo_backend(&pki).await;
    let down = closed_port();
    let config = |labels: bool| {
        let backend = format!(
            r#"addresses = ["{down}", "{up}"]
max_fails = 0

[backend.b.health]
interval = "100ms"
timeout = "500ms"
rise = 1
fall = 1
"#
        );
        admin_config(
            &format!("address_labels = {labels}"),
            &one_route_config(&[NAME], "", &backend),
        )
    };
    let (relay, admin) = start_with_admin(&config(false)).await;
    relay
        .wait_log(|l| {
            l["message"] == "backend address marked down (health check)"
                && l["addr"] == down.to_string().as_str()
        })
        .await;
    let (_, text) = http_get(admin, "/metrics").await;
    // No origin address anywhere, but the health is still there, by state.
    assert!(!text.contains("address="), "{text}");
    assert!(!text.contains(&down.port().to_string()), "{text}");
    assert!(!text.contains(&up.port().to_string()), "{text}");
    let state = |text: &str, state: &str| {
        metric(
            text,
            &format!("snirelay_backend_addresses{{backend=\"b\",state=\"{state}\"}}"),
        )
    };
    assert_eq!(state(&text, "down"), 1.0, "{text}");
    assert_eq!(state(&text, "up"), 1.0, "{text}");

    // Turned on by a reload: the series come back with the states known.
    assert_eq!(
        relay.reload(&config(true), 1).await["message"],
        "reload applied"
    );
    let series = |addr: SocketAddr| {
        format!("snirelay_backend_address_up{{backend=\"b\",address=\"{addr}\"}}")
    };
    let text = get_until(admin, "/metrics", |t| t.contains(&series(up))).await;
    assert!(text.contains(&format!("{} 0\n", series(down))), "{text}");
    assert!(text.contains(&format!("{} 1\n", series(up))), "{text}");
    assert_eq!(state(&text, "down"), 1.0, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_requests_are_refused() {
    let (relay, admin) = relay_with_admin(closed_port()).await;
    let long = format!(
        "GET /healthz HTTP/1.1\r\nHost: a\r\nX-Long: {}\r\n\r\n",
        "a".repeat(9000)
    );
    let many: String = (0..40).map(|i| format!("X-{i}: a\r\n")).collect();
    let many = format!("GET /healthz HTTP/1.1\r\nHost: a\r\n{many}\r\n");
    for request in [long, many] {
        let mut stream = TcpStream::connect(admin).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(WAIT, stream.read_to_end(&mut answer))
            .await
            .expect("the connection is closed");
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");
    }
    relay
        .wait_count(2, |l| {
            l["message"] == "admin connection closed" && l["close"] == "error"
        })
        .await;
    // Health probes are not affected.
    assert_eq!(http_get(admin, "/healthz").await.0, 200);
}

// ------------------------------------------------ starving the admin listener

/// What an attacker's connection to the admin listener does.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Hostile {
    /// Connects and sends nothing.
    Silent,
    /// Sends a header byte every 100 ms and never finishes it.
    Trickle,
    /// Makes one request, reads the answer, and keeps the connection open.
    Idle,
}

impl Hostile {
    /// The `close` the relay logs for it when nothing else intervenes.
    fn close(self) -> &'static str {
        match self {
            Hostile::Silent => "silent",
            Hostile::Trickle => "request_timeout",
            Hostile::Idle => "idle_timeout",
        }
    }

    /// How long the relay lets it live.
    fn lifetime(self) -> Duration {
        use snirelay::admin::{FIRST_BYTE_TIMEOUT, KEEP_ALIVE_TIMEOUT, REQUEST_TIMEOUT};
        match self {
            Hostile::Silent => FIRST_BYTE_TIMEOUT,
            Hostile::Trickle => REQUEST_TIMEOUT,
            Hostile::Idle => KEEP_ALIVE_TIMEOUT,
        }
    }
}

/// Opens `n` connections of `kind` to `admin`, one after another (so the
/// relay accepts them in this order); returns once each is in place (idle
/// ones have read their answer). Each task ends when the relay closes its
/// connection, at the latest after [`WAIT`].
async fn hold(admin: SocketAddr, kind: Hostile, n: usize) -> Vec<tokio::task::JoinHandle<()>> {
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        let mut stream = TcpStream::connect(admin).await.unwrap();
        match kind {
            Hostile::Silent => {}
            Hostile::Trickle => stream.write_all(b"G").await.unwrap(),
            Hostile::Idle => {
                stream
                    .write_all(b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n")
                    .await
                    .unwrap();
                let mut answer = Vec::new();
                while !answer.ends_with(b"\r\n\r\nok\n") {
                    let mut chunk = [0u8; 512];
                    let read = stream.read(&mut chunk).await.unwrap();
                    assert!(read > 0, "closed before the answer");
                    answer.extend_from_slice(&chunk[..read]);
                }
            }
        }
        held.push(tokio::spawn(async move {
            let (mut reader, mut writer) = stream.into_split();
            let closed = async {
                let mut sink = [0u8; 512];
                // Any read ends it: nothing more is ever sent to these.
                let _ = reader.read(&mut sink).await;
            };
            let trickle = async {
                if kind != Hostile::Trickle {
                    return std::future::pending().await;
                }
                let head = b"ET / HTTP/1.1\r\nX-Slow: ";
                for i in 0..(WAIT.as_millis() / 100) as usize {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let byte = head.get(i).copied().unwrap_or(b'a');
                    if writer.write_all(&[byte]).await.is_err() {
                        break;
                    }
                }
                std::future::pending().await
            };
            tokio::select! {
                () = closed => {}
                () = trickle => {}
                () = tokio::time::sleep(WAIT) => panic!("a {kind:?} connection was never closed"),
            }
        }));
    }
    held
}

/// Times `rounds` fresh-connection requests each to /healthz and /readyz;
/// every one must answer 200. Returns the latencies, sorted.
async fn probe(admin: SocketAddr, rounds: usize) -> Vec<Duration> {
    let mut took = Vec::with_capacity(2 * rounds);
    for _ in 0..rounds {
        for path in ["/healthz", "/readyz"] {
            let started = std::time::Instant::now();
            let (status, _) = http_get(admin, path).await;
            took.push(started.elapsed());
            assert_eq!(status, 200, "{path}");
        }
    }
    took.sort();
    took
}

/// Far below every admin timeout (first byte 1 s, request 2 s, keep-alive
/// 5 s): a probe that waited for any of them, or for a connection to be
/// closed to make room, fails. Loopback answers take milliseconds.
const PROBE_BOUND: Duration = Duration::from_millis(500);

/// A thousand `kind` connections open; probes answer within
/// [`PROBE_BOUND`], a TLS session is relayed, and every hostile
/// connection is closed later with the close its kind earns.
async fn probes_answer_while_held(kind: Hostile) {
    const N: usize = 1000;
    let _heavy = HEAVY.lock().await;
    let pki = Pki::new(&[NAME]);
    let backend = tls_echo_backend(&pki).await;
    let (relay, admin) = relay_with_admin(backend).await;

    let started = std::time::Instant::now();
    let held = hold(admin, kind, N).await;
    let opened = started.elapsed();
    let took = probe(admin, 10).await;
    let probed = started.elapsed();
    let (_, text) = http_get(admin, "/metrics").await;
    let open = metric(&text, "snirelay_admin_connections_open");
    roundtrip(&pki, relay.addr(), b"still relaying").await;
    eprintln!(
        "{kind:?} x{N}: opened in {opened:?}, probed by {probed:?}, relayed by {:?}; \
         probe median {:?}, max {:?}; admin connections open {open}",
        started.elapsed(),
        took[took.len() / 2],
        took[took.len() - 1]
    );
    assert!(took[took.len() - 1] < PROBE_BOUND, "{kind:?}: {took:?}");
    // They were all still open (the scrape itself is one more; a probe's
    // task may still be ending), unless opening them took longer than the
    // relay lets the oldest live (a dropped SYN costs a one-second
    // retransmit on a busy machine).
    if started.elapsed() + Duration::from_millis(100) < kind.lifetime() {
        assert!(open >= (N + 1) as f64, "{text}");
        for reason in [kind.close(), "evicted", "error"] {
            assert_eq!(closed(&text, reason), 0.0, "{reason}: {text}");
        }
    }

    for task in held {
        task.await.unwrap();
    }
    let close = kind.close();
    relay
        .wait_count(N, |l| {
            l["message"] == "admin connection closed" && l["close"] == close
        })
        .await;
    let (_, text) = http_get(admin, "/metrics").await;
    assert_eq!(closed(&text, close), N as f64, "{text}");
    assert_eq!(closed(&text, "evicted"), 0.0, "{text}");
}

/// `snirelay_admin_connections_closed_total` for `reason` in `text`.
fn closed(text: &str, reason: &str) -> f64 {
    metric(
        text,
        &format!("snirelay_admin_connections_closed_total{{reason=\"{reason}\"}}"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_answer_while_a_thousand_connections_send_nothing() {
    probes_answer_while_held(Hostile::Silent).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_answer_while_a_thousand_connections_trickle_headers() {
    probes_answer_while_held(Hostile::Trickle).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_answer_while_a_thousand_connections_idle_on_keep_alive() {
    probes_answer_while_held(Hostile::Idle).await;
}

/// Admin sockets the relay keeps open at once (`admin::MAX_ADMIN_CONNECTIONS`).
const CAP: usize = snirelay::admin::MAX_ADMIN_CONNECTIONS;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_table_drops_silent_connections_first() {
    let _heavy = HEAVY.lock().await;
    let (relay, admin) = relay_with_admin(closed_port()).await;
    let idle = hold(admin, Hostile::Idle, 1000).await;
    // 100 silent ones: 1,100 is past the cap, so the oldest silent ones
    // make room for the newer, never an idle one.
    let silent = hold(admin, Hostile::Silent, 100).await;
    let took = probe(admin, 1).await;
    assert!(took[took.len() - 1] < PROBE_BOUND, "{took:?}");
    for task in silent {
        task.await.unwrap();
    }
    for task in idle {
        task.await.unwrap();
    }
    // Every silent one ended evicted (76 on the way to 1,100, one for the
    // first probe, unless the oldest timed out first) or timed out; no idle
    // one was evicted.
    relay
        .wait_count(1000, |l| {
            l["message"] == "admin connection closed" && l["close"] == "idle_timeout"
        })
        .await;
    let (_, text) = http_get(admin, "/metrics").await;
    let closed = |reason: &str| closed(&text, reason);
    assert_eq!(closed("evicted") + closed("silent"), 100.0, "{text}");
    assert!(closed("evicted") >= (1100 - CAP) as f64, "{text}");
    assert_eq!(closed("idle_timeout"), 1000.0, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_table_drops_the_oldest_idle_connections() {
    let _heavy = HEAVY.lock().await;
    let (relay, admin) = relay_with_admin(closed_port()).await;
    const N: usize = 1030;
    let started = std::time::Instant::now();
    let mut idle = hold(admin, Hostile::Idle, N).await;
    let opened = started.elapsed();
    // One probe: a second one could find the first's place not yet given
    // back (its client sees the answer before the relay's task ends).
    let probed = std::time::Instant::now();
    assert_eq!(http_get(admin, "/healthz").await.0, 200);
    let took = probed.elapsed();
    assert!(took < PROBE_BOUND, "{took:?}");
    // Past the cap, each new connection (the last idle ones, then the
    // probe) closed the oldest idle one: those end first, long before
    // their keep-alive timeout, while every younger one is still open.
    let evicted = N - CAP + 1;
    let rest = idle.split_off(evicted);
    for task in idle {
        task.await.unwrap();
    }
    let first_closed = started.elapsed();
    let closed_early: Vec<usize> = (0..rest.len())
        .filter(|&i| rest[i].is_finished())
        .map(|i| i + evicted)
        .collect();
    assert!(
        closed_early.is_empty(),
        "younger idle connections {closed_early:?} were closed first \
         (opened in {opened:?}, probed in {took:?}, the oldest closed by {first_closed:?})"
    );
    for task in rest {
        task.await.unwrap();
    }
    eprintln!("{N} idle opened in {opened:?}; the evicted ones closed by {first_closed:?}");
    relay
        .wait_count(N - evicted, |l| {
            l["message"] == "admin connection closed" && l["close"] == "idle_timeout"
        })
        .await;
    let (_, text) = http_get(admin, "/metrics").await;
    let closed = |reason: &str| closed(&text, reason);
    assert_eq!(closed("evicted"), evicted as f64, "{text}");
    assert_eq!(closed("idle_timeout"), (N - evicted) as f64, "{text}");
}
