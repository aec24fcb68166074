//! PROXY protocol interop with real peers: Debian's HAProxy 2.6 and nginx
//! 1.22 (stream module) run as child processes on loopback, with configs
//! written at test time. They must be installed (`apt-get install haproxy
//! nginx libnginx-mod-stream`); a missing binary fails the test.
//!
//! - snirelay → HAProxy `accept-proxy`: HAProxy logs the client address and
//!   `fc_pp_authority` it received;
//! - snirelay → nginx `listen … proxy_protocol`: nginx logs
//!   `$proxy_protocol_addr` (and the SNI it pre-reads from the hello);
//! - HAProxy `send-proxy-v2` → snirelay (trusted): `client.claimed` is the
//!   original client;
//! - snirelay → snirelay → HAProxy `accept-proxy`: HAProxy takes a header
//!   carrying our hop-count TLV (type 0xE0 with the `snirelay-hops`
//!   sub-type) and sees the original client.

use crate::common;

use std::net::SocketAddr;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A TLS backend that echoes what it reads.
async fn echo_backend(pki: &Pki) -> SocketAddr {
    tls_backend(pki, |mut tls| async move {
        let mut buf = vec![0u8; 16 * 1024];
        while let Ok(n) = tls.read(&mut buf).await {
            if n == 0 || tls.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = tls.shutdown().await;
    })
    .await
}

/// A full mutual-TLS session to `addr` with SNI `name`: handshake, one echo,
/// close. Returns the client's local address.
async fn session(pki: &Pki, addr: SocketAddr, name: &str) -> SocketAddr {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let local = tcp.local_addr().unwrap();
    let mut tls = tokio::time::timeout(WAIT, tls_connect(pki.client_config(), name, tcp))
        .await
        .expect("handshake timed out")
        .expect("mutual TLS handshake through the chain");
    tls.write_all(b"ping").await.unwrap();
    let mut back = [0u8; 4];
    tls.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"ping");
    tls.shutdown().await.unwrap();
    let mut rest = Vec::new();
    let _ = tls.read_to_end(&mut rest).await;
    local
}

fn haproxy(config: &str) -> Tool {
    let dir = scratch_dir("haproxy");
    std::fs::write(dir.join("haproxy.cfg"), config).unwrap();
    Tool::spawn("haproxy", &["-f", "haproxy.cfg", "-db"], dir, "haproxy")
}

const HAPROXY_DEFAULTS: &str = r#"
global
    log stdout format raw local0 info
defaults
    mode tcp
    log global
    option dontlognull
    timeout connect 2s
    timeout client 10s
    timeout server 10s
"#;

/// HAProxy with one `accept-proxy` frontend that forwards to `backend` and
/// logs each connection with `log_format`, once it accepts; and its address.
async fn haproxy_accepting_proxy(backend: SocketAddr, log_format: &str) -> (Tool, SocketAddr) {
    let port = free_port();
    let mut hap = haproxy(&format!(
        r#"{HAPROXY_DEFAULTS}
frontend fe
    bind 127.0.0.1:{port} accept-proxy
    log-format "{log_format}"
    default_backend be
backend be
    server origin {backend}
"#
    ));
    let hap_addr: SocketAddr = ([127, 0, 0, 1], port).into();
    wait_accepting(hap_addr, &mut hap).await;
    (hap, hap_addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_accept_proxy_sees_the_original_client_and_sni() {
    let pki = Pki::new(&["app.example.com"]);
    let backend = echo_backend(&pki).await;
    let (mut hap, hap_addr) = haproxy_accepting_proxy(backend, "snirelay-test client=%ci:%cp authority=%[fc_pp_authority] unique_id=%[fc_pp_unique_id] bytes=%B").await;

    let relay = Relay::start(&format!(
        r#"
[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]

[[route]]
sni = ["*.example.com"]
backend = "edge"

[backend.edge]
addresses = ["{hap_addr}"]
proxy_protocol = "v2"
proxy_protocol_crc32c = true
"#
    ))
    .await;

    let client = session(&pki, relay.addr(), "app.example.com").await;
    let relay_line = relay.closed_line(client).await;
    assert_eq!(relay_line["close"], "done");
    let expected = format!("client={client} authority=app.example.com ");
    let line = hap
        .wait_line(|l| l.contains(&format!("snirelay-test client={client} ")))
        .await;
    eprintln!("HAProxy logged: {line}");
    assert!(
        line.starts_with(&format!("snirelay-test {expected}")),
        "HAProxy logged {line:?}, expected {expected:?}"
    );
    assert!(
        line.contains(&format!("unique_id={} ", relay_line["conn_id"])),
        "{line:?}"
    );
}

fn nginx(config_body: &str) -> Tool {
    let dir = scratch_dir("nginx");
    let config = format!(
        "load_module /usr/lib/nginx/modules/ngx_stream_module.so;\n\
         pid {pid};\n\
         error_log stderr notice;\n\
         worker_processes 1;\n\
         events {{ worker_connections 64; }}\n\
         {config_body}\n",
        pid = dir.join("nginx.pid").display()
    );
    std::fs::write(dir.join("nginx.conf"), config).unwrap();
    let prefix = format!("{}/", dir.display());
    let conf = dir.join("nginx.conf").display().to_string();
    Tool::spawn(
        "nginx",
        &[
            "-p",
            &prefix,
            "-e",
            "stderr",
            "-c",
            &conf,
            "-g",
            "daemon off;",
        ],
        dir,
        "nginx libnginx-mod-stream",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_stream_proxy_protocol_sees_the_original_client_and_sni() {
    let pki = Pki::new(&["v1.example.com", "v2.example.com"]);
    let backend = echo_backend(&pki).await;
    let port = free_port();
    let mut ngx = nginx(&format!(
        r#"stream {{
    log_format pp 'snirelay-test client=$proxy_protocol_addr:$proxy_protocol_port sni=$ssl_preread_server_name';
    server {{
        listen 127.0.0.1:{port} proxy_protocol;
        ssl_preread on;
        access_log /dev/stderr pp;
        proxy_pass {backend};
    }}
}}"#
    ));
    ngx.wait_line(|l| l.contains("start worker process")).await;
    let ngx_addr: SocketAddr = ([127, 0, 0, 1], port).into();

    let relay = Relay::start(&format!(
        r#"
[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]

[[route]]
sni = ["v1.example.com"]
backend = "v1"

[[route]]
sni = ["v2.example.com"]
backend = "v2"

[backend.v1]
addresses = ["{ngx_addr}"]
proxy_protocol = "v1"

[backend.v2]
addresses = ["{ngx_addr}"]
proxy_protocol = "v2"
proxy_protocol_crc32c = true
"#
    ))
    .await;

    for name in ["v1.example.com", "v2.example.com"] {
        let client = session(&pki, relay.addr(), name).await;
        assert_eq!(relay.closed_line(client).await["close"], "done");
        let expected = format!("snirelay-test client={client} sni={name}");
        let line = ngx.wait_line(|l| l.contains(&expected)).await;
        eprintln!("nginx logged: {line}");
        assert!(line.ends_with(&expected), "{line:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_send_proxy_v2_in_front_makes_client_claimed_the_original_client() {
    let pki = Pki::new(&["app.example.com"]);
    let backend = echo_backend(&pki).await;
    let relay = Relay::start(&format!(
        r#"
[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]

[listener.proxy_protocol]
trusted = ["127.0.0.0/8"]
mode = "require"

[[route]]
sni = ["*.example.com"]
backend = "origin"

[backend.origin]
addresses = ["{backend}"]
"#
    ))
    .await;
    let port = free_port();
    let mut hap = haproxy(&format!(
        r#"{HAPROXY_DEFAULTS}
frontend fe
    bind 127.0.0.1:{port}
    default_backend be
backend be
    server edge {relay} send-proxy-v2 proxy-v2-options crc32c
"#,
        relay = relay.addr()
    ));
    let hap_addr: SocketAddr = ([127, 0, 0, 1], port).into();
    wait_accepting(hap_addr, &mut hap).await;

    let client = session(&pki, hap_addr, "app.example.com").await;
    let line = relay
        .wait_log(|l| {
            l["message"] == "connection closed"
                && l["client.claimed"] == client.to_string().as_str()
        })
        .await;
    assert_eq!(line["close"], "done");
    assert_eq!(line["sni"], "app.example.com");
    assert_ne!(line["client.peer"], client.to_string(), "peer is HAProxy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_accept_proxy_takes_a_header_with_our_hop_count_tlv() {
    let pki = Pki::new(&["app.example.com"]);
    let backend = echo_backend(&pki).await;
    let (mut hap, hap_addr) = haproxy_accepting_proxy(
        backend,
        "snirelay-test client=%ci:%cp authority=%[fc_pp_authority] bytes=%B",
    )
    .await;

    let relay = |trust: &str, to: SocketAddr| {
        format!(
            r#"
[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]
{trust}

[[route]]
sni = ["*.example.com"]
backend = "next"

[backend.next]
addresses = ["{to}"]
proxy_protocol = "v2"
proxy_protocol_crc32c = true
"#
        )
    };
    // B relays A's connections on to HAProxy with a hop count of 2.
    let b = Relay::start(&relay(
        "[listener.proxy_protocol]\ntrusted = [\"127.0.0.0/8\"]\nmode = \"require\"",
        hap_addr,
    ))
    .await;
    let a = Relay::start(&relay("", b.addr())).await;

    let client = session(&pki, a.addr(), "app.example.com").await;
    assert_eq!(a.closed_line(client).await["close"], "done");
    let line = b
        .wait_log(|l| {
            l["message"] == "connection closed"
                && l["client.claimed"] == client.to_string().as_str()
        })
        .await;
    assert_eq!(line["close"], "done");
    let expected = format!("snirelay-test client={client} authority=app.example.com ");
    let logged = hap
        .wait_line(|l| l.contains(&format!("snirelay-test client={client} ")))
        .await;
    eprintln!("HAProxy logged: {logged}");
    assert!(logged.starts_with(&expected), "{logged:?}");
}
