//! `[listener.proxy_protocol] trusted` by host name, as Gerbil's
//! `TRUSTED_UPSTREAMS` takes names: resolved through the system resolver
//! when the configuration is loaded and again at every reload (SIGHUP);
//! `check` accepts a name that resolves and names the key and the name of
//! one that does not, and a reload with such a name is rejected (the
//! running configuration stays).
//!
//! The relay runs in a mount namespace of its own (`unshare --mount`), with
//! a test hosts file and an nsswitch.conf saying `hosts: files`
//! bind-mounted over /etc/hosts and /etc/nsswitch.conf: names resolve from
//! the test's file alone, no DNS server is asked, and the host's files are
//! untouched. Needs root and util-linux's `unshare` and `mount`; a test
//! that cannot set up fails loudly, it never skips.

use crate::common;

use common::hosts::Hosts;
use common::*;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The name the relay trusts.
const PEER: &str = "edge-peer.test";

fn config(backend: SocketAddr) -> String {
    format!(
        r#"
[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]

[listener.proxy_protocol]
trusted = ["{PEER}"]
mode = "optional"

[[route]]
sni = ["*.example.com"]
backend = "b"

[backend.b]
addresses = ["{backend}"]
connect_timeout = "2s"
"#
    )
}

fn loopback(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
}

/// Sends a PROXY v1 header and a hello from `127.0.0.{last}`; returns the
/// relay's close line for that connection.
async fn from(relay: &Relay, last: u8) -> serde_json::Value {
    let mut client = connect_from(loopback(last), relay.addr()).await.unwrap();
    let local = client.local_addr().unwrap();
    client
        .write_all(b"PROXY TCP4 203.0.113.9 192.0.2.1 4242 443\r\n")
        .await
        .unwrap();
    client
        .write_all(&hello_for("www.example.com"))
        .await
        .unwrap();
    client.shutdown().await.unwrap();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(WAIT, client.read_to_end(&mut rest)).await;
    relay.closed_line(local).await
}

fn accepted(line: &serde_json::Value) {
    assert_eq!(line["close"], "done", "{line}");
    assert_eq!(line["client.claimed"], "203.0.113.9:4242", "{line}");
}

fn refused(line: &serde_json::Value) {
    assert_eq!(line["close"], "proxy_untrusted", "{line}");
    assert!(line["client.claimed"].is_null(), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_name_is_resolved_at_load_and_again_at_reload() {
    let hosts = Hosts::new(&format!("127.0.0.2 {PEER}\n"));
    let (backend, _seen) = recording_backend().await;
    let text = config(backend);
    let relay = Relay::launch(&text, |path| hosts.wrap(&Relay::command(path))).await;

    let resolved = |l: &serde_json::Value| l["message"] == "trusted host name resolved";
    let line = relay.wait_nth(1, resolved).await;
    assert_eq!(
        (&line["name"], &line["addresses"]),
        (&PEER.into(), &"127.0.0.2".into())
    );
    // The name is 127.0.0.2: its header is taken, another peer's refused.
    accepted(&from(&relay, 2).await);
    refused(&from(&relay, 3).await);

    // The name moves; a reload resolves it again.
    hosts.set(&format!("127.0.0.3 {PEER}\n"));
    assert_eq!(relay.reload(&text, 1).await["message"], "reload applied");
    assert_eq!(relay.wait_nth(2, resolved).await["addresses"], "127.0.0.3");
    accepted(&from(&relay, 3).await);
    refused(&from(&relay, 2).await);

    // The name is gone: the reload is rejected, naming the key and the
    // name, and the running configuration (127.0.0.3) stays.
    hosts.set("127.0.0.1 localhost\n");
    let line = relay.reload(&text, 2).await;
    assert_eq!(
        line["message"],
        "reload rejected; still serving the previous configuration"
    );
    let error = line["error"].as_str().unwrap();
    assert!(
        error.contains(&format!(
            "listener[0].proxy_protocol.trusted[0]: host name \"{PEER}\" does not resolve"
        )),
        "{error}"
    );
    accepted(&from(&relay, 3).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_accepts_a_trusted_name_that_resolves_and_names_one_that_does_not() {
    let hosts = Hosts::new(&format!("127.0.0.2 {PEER}\n"));
    let path = hosts.dir.join("snirelay.toml");
    std::fs::write(&path, config("127.0.0.1:9".parse().unwrap())).unwrap();
    let (code, stdout, stderr) = hosts.check(&path);
    assert_eq!(code, Some(0), "{stdout}{stderr}");

    hosts.set("127.0.0.1 localhost\n");
    let (code, stdout, stderr) = hosts.check(&path);
    assert_ne!(code, Some(0), "{stdout}");
    assert!(
        stderr.contains(&format!(
            "listener[0].proxy_protocol.trusted[0]: host name \"{PEER}\" does not resolve"
        )) && stderr.contains("a trusted name must resolve when the configuration is loaded"),
        "{stderr}"
    );
}
