//! systemd integration with a real relay process: sd_notify datagrams over
//! NOTIFY_SOCKET, and socket activation from LISTEN_FDS/LISTEN_FDNAMES
//! (stream sockets for a tcp listener, datagram sockets for a quic one, and
//! the startup error when the types are crossed).

use crate::common;

use std::os::fd::AsRawFd;
use std::process::Command;

use common::*;
use tokio::net::UnixDatagram;

include!("common/quic_capture.rs");

/// `relay` run with `fd` passed as descriptor 3, named `name`, as systemd
/// passes an activated socket (LISTEN_PID, LISTEN_FDS, LISTEN_FDNAMES).
fn activated_command(relay: Command, fd: i32, name: &str) -> Command {
    let mut command = Command::new("bash");
    command
        .arg("-c")
        .arg(format!(
            "exec 3<&{fd}; LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES={name} exec \"$@\""
        ))
        .arg("bash")
        .arg(relay.get_program())
        .args(relay.get_args());
    command
}

/// A quic listener named `quic` on a free port, routing `localhost` to
/// `backend` (a UDP echo).
fn quic_config(backend: std::net::SocketAddr) -> String {
    format!(
        r#"
[[listener]]
name = "quic"
protocol = "quic"
listen = ["127.0.0.1:0"]
idle_timeout = "300ms"

[[route]]
sni = ["localhost"]
backend = "b"

[backend.b]
addresses = ["{backend}"]
"#
    )
}

async fn next_notification(socket: &UnixDatagram) -> String {
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(WAIT, socket.recv(&mut buf))
        .await
        .expect("no sd_notify datagram")
        .unwrap();
    String::from_utf8(buf[..n].to_vec()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_reloading_and_stopping_are_notified() {
    let pki = Pki::new(&["app.example.com"]);
    let backend = tls_echo_backend(&pki).await;
    let dir = scratch_dir("notify");
    let path = dir.join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();

    let config = simple_config(&["app.example.com"], backend, "");
    let relay = Relay::launch(&config, |config_path| {
        let mut command = Relay::command(config_path);
        command.env("NOTIFY_SOCKET", &path);
        command
    })
    .await;

    let ready = next_notification(&socket).await;
    assert!(ready.starts_with("READY=1\n"), "{ready:?}");
    assert!(
        ready.contains(&format!("MAINPID={}", relay.pid())),
        "{ready:?}"
    );

    relay.signal("HUP");
    let reloading = next_notification(&socket).await;
    assert!(
        reloading.starts_with("RELOADING=1\nMONOTONIC_USEC="),
        "{reloading:?}"
    );
    let usec: u64 = reloading.lines().nth(1).unwrap()["MONOTONIC_USEC=".len()..]
        .parse()
        .unwrap();
    assert!(usec > 0);
    let ready = next_notification(&socket).await;
    assert!(ready.starts_with("READY=1\n"), "{ready:?}");
    assert!(ready.contains("reload applied"), "{ready:?}");

    // A rejected reload also ends with READY=1, saying why.
    std::fs::write(&relay.config_path, "[global]\nbogus = 1\n").unwrap();
    relay.signal("HUP");
    assert!(next_notification(&socket).await.starts_with("RELOADING=1"));
    let ready = next_notification(&socket).await;
    assert!(ready.starts_with("READY=1\n"), "{ready:?}");
    assert!(ready.contains("reload rejected"), "{ready:?}");
    assert!(ready.contains("bogus"), "{ready:?}");

    relay.signal("TERM");
    let stopping = next_notification(&socket).await;
    assert!(stopping.starts_with("STOPPING=1\n"), "{stopping:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activated_sockets_serve_the_listener_of_the_same_name() {
    let pki = Pki::new(&["app.example.com"]);
    let backend = tls_echo_backend(&pki).await;
    // The "socket unit": a listening socket made by the parent, passed as
    // fd 3 with the name of the listener it is for.
    let activated = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let activated_addr = activated.local_addr().unwrap();
    socket2::SockRef::from(&activated)
        .set_cloexec(false)
        .unwrap();
    let fd = activated.as_raw_fd();

    // The file's own address differs: the activated socket replaces it.
    let config = simple_config(&["app.example.com"], backend, "");
    let mut relay = Relay::launch(&config, |config_path| {
        activated_command(Relay::command(config_path), fd, "tls")
    })
    .await;
    assert_eq!(relay.listening["tls"], [activated_addr]);
    let line = relay.wait_log(|l| l["message"] == "listening").await;
    assert_eq!(line["socket"], format!("activated {activated_addr}"));

    let mut session = echo_session(&pki, activated_addr, "app.example.com")
        .await
        .unwrap();
    // A reload keeps the activated socket as it is.
    let line = relay.reload(&config, 1).await;
    assert_eq!(line["message"], "reload applied");
    assert_eq!(line["binds.added"], 0);
    assert_eq!(line["binds.removed"], 0);
    echo_session(&pki, activated_addr, "app.example.com")
        .await
        .unwrap();
    echo_once(&mut session, b"after reload").await.unwrap();
    relay.signal("INT");
    assert_eq!(relay.wait_exit().await, Some(0));
    drop(activated);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_activated_datagram_socket_serves_the_quic_listener_of_the_same_name() {
    let backend = udp_echo_backend().await;
    // The "socket unit" with `ListenDatagram=`: a bound UDP socket made by
    // the parent, passed as fd 3 with the name of the quic listener.
    let (activated, activated_addr, fd) = activated_udp();

    // The file's own address (port 0) differs: the activated socket
    // replaces it.
    let config = quic_config(backend);
    let mut relay = Relay::launch(&config, |config_path| {
        activated_command(Relay::command(config_path), fd, "quic")
    })
    .await;
    assert_eq!(relay.listening["quic"], [activated_addr]);
    let line = relay.wait_log(|l| l["message"] == "listening").await;
    assert_eq!(line["socket"], format!("activated {activated_addr}"));
    assert_eq!(line["protocol"], "quic");

    // A real first flight (ngtcp2's Initial for `localhost`) is routed and
    // echoed through the activated socket.
    let flight = capture("ngtcp2");
    let client = udp::echoed_flow(activated_addr, "127.0.0.1", &flight).await;
    let line = relay.closed_line(client.local_addr().unwrap()).await;
    assert_eq!(line["protocol"], "quic", "{line}");
    assert_eq!(line["route"], "localhost", "{line}");
    assert_eq!(line["close"], "idle_timeout", "{line}");

    // A reload keeps the activated socket as it is: nothing bound, nothing
    // closed, and a new flow still goes through it.
    let line = relay.reload(&config, 1).await;
    assert_eq!(line["message"], "reload applied");
    assert_eq!(line["binds.added"], 0);
    assert_eq!(line["binds.removed"], 0);
    udp::echoed_flow(activated_addr, "127.0.0.1", &flight).await;
    relay.signal("INT");
    assert_eq!(relay.wait_exit().await, Some(0));
    drop(activated);
}

/// A binary upgrade of a relay whose quic listener has systemd's datagram
/// socket: the new process takes it over as the activated socket it is
/// (not a `listen` address to bind), and a reload keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_activated_datagram_socket_is_handed_over_by_an_upgrade() {
    let backend = udp_echo_backend().await;
    let (activated, activated_addr, fd) = activated_udp();
    let dir = scratch_dir("activated-upgrade");
    let takeover = dir.join("takeover.sock");
    let config = quic_config(backend);
    let mut old = Relay::launch(&config, |config_path| {
        let mut relay = Relay::command(config_path);
        relay.arg("--takeover").arg(&takeover);
        activated_command(relay, fd, "quic")
    })
    .await;
    old.wait_log(|l| l["message"] == "offering binary takeover")
        .await;
    // Only the relay holds the socket from here on.
    drop(activated);

    let mut new = start_with_takeover(&config, &takeover).await;
    assert_eq!(old.wait_exit().await, Some(0));
    assert_eq!(new.listening["quic"], [activated_addr]);
    let line = new
        .wait_log(|l| l["message"] == "listening" && l["listener"] == "quic")
        .await;
    assert_eq!(line["socket"], format!("activated {activated_addr}"));
    assert_eq!(line["inherited"], true, "{line}");
    let flight = capture("ngtcp2");
    udp::echoed_flow(activated_addr, "127.0.0.1", &flight).await;
    let line = new.reload(&config, 1).await;
    assert_eq!(line["message"], "reload applied");
    assert_eq!(line["binds.added"], 0);
    assert_eq!(line["binds.removed"], 0);
    udp::echoed_flow(activated_addr, "127.0.0.1", &flight).await;
    new.signal("INT");
    assert_eq!(new.wait_exit().await, Some(0));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs the relay on `config` with `fd` passed as systemd's socket named
/// `name`; returns its exit code and its stderr (it must exit by itself).
fn run_activated(config: &str, fd: i32, name: &str) -> (Option<i32>, String) {
    let dir = scratch_dir("activated-type");
    let path = dir.join("snirelay.toml");
    std::fs::write(&path, config).unwrap();
    let mut command = activated_command(Relay::command(&path), fd, name);
    let mut child = command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        text
    });
    // Bounded: a relay that started instead of refusing is killed (it is
    // this test's own child, not yet reaped).
    let deadline = std::time::Instant::now() + WAIT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() >= deadline {
            child.kill().unwrap();
            break child.wait().unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let _ = std::fs::remove_dir_all(&dir);
    (status.code(), reader.join().unwrap())
}

#[test]
fn a_socket_of_the_wrong_type_for_its_listener_stops_the_start() {
    // A stream socket (ListenStream=) named for a quic listener.
    let stream = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let stream_addr = stream.local_addr().unwrap();
    socket2::SockRef::from(&stream).set_cloexec(false).unwrap();
    let backend: std::net::SocketAddr = "127.0.0.1:9".parse().unwrap();
    let (code, stderr) = run_activated(&quic_config(backend), stream.as_raw_fd(), "quic");
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "listener \"quic\" has protocol = \"quic\", but systemd passed it a stream socket on {stream_addr} (ListenStream= in its socket unit)"
        )),
        "{stderr}"
    );

    // A datagram socket (ListenDatagram=) named for a tcp listener.
    let datagram = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let datagram_addr = datagram.local_addr().unwrap();
    socket2::SockRef::from(&datagram)
        .set_cloexec(false)
        .unwrap();
    let config = simple_config(&["app.example.com"], backend, "");
    let (code, stderr) = run_activated(&config, datagram.as_raw_fd(), "tls");
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "listener \"tls\" has protocol = \"tcp\", but systemd passed it a datagram socket on {datagram_addr} (ListenDatagram= in its socket unit)"
        )),
        "{stderr}"
    );
}

/// A binary hand-over under systemd: the new process's READY=1 names its own
/// MAINPID, and the replaced one drains without STOPPING=1 (with
/// NotifyAccess=all that would stop the unit, the new relay included).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_over_moves_mainpid_and_sends_no_stopping() {
    let pki = Pki::new(&["app.example.com"]);
    let backend = tls_echo_backend(&pki).await;
    let dir = scratch_dir("notify-upgrade");
    let notify = dir.join("notify.sock");
    let socket = UnixDatagram::bind(&notify).unwrap();
    let takeover = dir.join("takeover.sock");

    let config = "[global]\ndrain_timeout = \"1s\"\n".to_owned()
        + &simple_config(&["app.example.com"], backend, "");
    let with_takeover = |config_path: &std::path::Path| {
        let mut command = Relay::command(config_path);
        command.arg("--takeover").arg(&takeover);
        command.env("NOTIFY_SOCKET", &notify);
        command
    };
    let mut old = Relay::launch(&config, with_takeover).await;
    old.wait_log(|l| l["message"] == "offering binary takeover")
        .await;
    let ready = next_notification(&socket).await;
    assert!(
        ready.contains(&format!("MAINPID={}", old.pid())),
        "{ready:?}"
    );

    let new = Relay::launch(&config, with_takeover).await;
    let ready = next_notification(&socket).await;
    assert!(ready.starts_with("READY=1\n"), "{ready:?}");
    assert!(
        ready.contains(&format!("MAINPID={}", new.pid())),
        "{ready:?}"
    );
    assert_eq!(old.wait_exit().await, Some(0));
    echo_session(&pki, new.addr(), "app.example.com")
        .await
        .unwrap();
    // The next datagram is the new process's own stop: the replaced one sent
    // none (its status would say "replaced by a new process").
    new.signal("TERM");
    let stopping = next_notification(&socket).await;
    assert_eq!(stopping, "STOPPING=1\nSTATUS=asked to stop");
    let _ = std::fs::remove_dir_all(&dir);
}

/// What a socket unit with `ListenDatagram=` hands the relay: a bound UDP
/// socket left open across exec, its address and its descriptor.
fn activated_udp() -> (std::net::UdpSocket, std::net::SocketAddr, i32) {
    let activated = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = activated.local_addr().unwrap();
    socket2::SockRef::from(&activated)
        .set_cloexec(false)
        .unwrap();
    let fd = activated.as_raw_fd();
    (activated, addr, fd)
}
