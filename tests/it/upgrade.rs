//! Binary upgrade by socket handoff (`snirelay run --takeover PATH`): what
//! happens when the new process fails, the admin socket handed over with
//! the listeners, and a QUIC listener's UDP socket handed over with the
//! flows in flight kept by the old process (the load test is in
//! upgrade_load.rs).

use crate::common;

use std::net::SocketAddr;

use common::*;

fn config(backend: SocketAddr) -> String {
    "[global]\ndrain_timeout = \"5s\"\n".to_owned()
        + &simple_config(&["app.example.com"], backend, "")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_process_that_fails_before_ready_leaves_the_old_one_serving() {
    let pki = Pki::new(&["app.example.com"]);
    let backend = tls_echo_backend(&pki).await;
    let dir = scratch_dir("upgrade-fail");
    let path = dir.join("takeover.sock");
    let old = start_with_takeover(&config(backend), &path).await;

    // The new process's config binds the old listener plus an address that
    // is taken, so it fails after receiving the sockets, before `ready`.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let bad = config(backend).replace(
        "listen = [\"127.0.0.1:0\"]",
        &format!(
            "listen = [\"127.0.0.1:0\", \"{}\"]",
            taken.local_addr().unwrap()
        ),
    );
    let new_config = dir.join("new.toml");
    std::fs::write(&new_config, bad).unwrap();
    let status = Relay::command(&new_config)
        .arg("--takeover")
        .arg(&path)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(1));
    old.wait_log(|l| {
        l["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("binary takeover abandoned"))
    })
    .await;
    echo_session(&pki, old.addr(), "app.example.com")
        .await
        .unwrap();
    // And it still offers the takeover for the next attempt.
    let next = start_with_takeover(&config(backend), &path).await;
    assert_eq!(next.addr(), old.addr());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The admin listener's TCP socket is handed over too: a new process whose
/// `[admin] listen` is the address the old one holds adopts that socket
/// (binding it would fail while the old process lives), and /readyz keeps
/// answering on the same address after the old process has exited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_socket_is_handed_over() {
    let pki = Pki::new(&["app.example.com"]);
    let backend = tls_echo_backend(&pki).await;
    let dir = scratch_dir("upgrade-admin");
    let path = dir.join("takeover.sock");
    let with_admin =
        |listen: &str| format!("[admin]\nlisten = \"{listen}\"\n\n") + &config(backend);
    let mut old = start_with_takeover(&with_admin("127.0.0.1:0"), &path).await;
    let admin = old.admin_addr().await;

    let new = start_with_takeover(&with_admin(&admin.to_string()), &path).await;
    assert_eq!(new.admin_addr().await, admin);
    assert_eq!(old.wait_exit().await, Some(0));
    assert_eq!(
        http_get(admin, "/readyz").await,
        (200, "ready\n".to_owned())
    );
    echo_session(&pki, new.addr(), "app.example.com")
        .await
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

include!("common/quic_capture.rs");

/// One quic listener (flows idle out after 2 s) routing `localhost` to
/// `backend`.
fn quic_config(backend: SocketAddr) -> String {
    format!(
        "[global]\ndrain_timeout = \"20s\"\n\n\
         [[listener]]\nname = \"quic\"\nprotocol = \"quic\"\nlisten = [\"127.0.0.1:0\"]\n\
         idle_timeout = \"2s\"\n\n\
         [[route]]\nsni = [\"localhost\"]\nbackend = \"u\"\n\n\
         [backend.u]\naddresses = [\"{backend}\"]\n"
    )
}

fn is_quic_close(line: &serde_json::Value, client: SocketAddr) -> bool {
    line["message"] == "connection closed"
        && line["protocol"] == "quic"
        && line["client.peer"] == client.to_string().as_str()
}

/// A QUIC listener's UDP socket is handed over: a flow open before the
/// upgrade keeps exchanging datagrams through the old process, none lost
/// and none taken by the new one for a flow of its own; a flow that starts
/// after the upgrade is the new process's (the old one forwards its
/// datagrams while it still reads the socket); once the old flow idles out
/// the old process exits and the new one reads the socket itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quic_socket_is_handed_over_and_open_flows_stay_with_the_old_process() {
    let config = quic_config(udp_echo_backend().await);
    let dir = scratch_dir("upgrade-quic");
    let path = dir.join("takeover.sock");
    let mut old = start_with_takeover(&config, &path).await;
    let relay = old.addr_of("quic");
    // ngtcp2's one-datagram hello names `localhost`.
    let hello = capture("ngtcp2").remove(0);
    let before = open_quic_flow(relay, &hello).await;
    let before_addr = before.local_addr().unwrap();

    let new = start_with_takeover(&config, &path).await;
    assert_eq!(new.addr_of("quic"), relay, "the same socket");
    let listening = new
        .wait_log(|l| l["message"] == "listening" && l["listener"] == "quic")
        .await;
    assert_eq!(listening["inherited"], true, "{listening}");
    old.wait_log(|l| l["message"] == "the new process accepts on our sockets; draining")
        .await;

    // The open flow goes on through the old process, well within its
    // drain window (each exchange well within idle_timeout).
    let mut sent_before = 1; // the hello's first send; retransmits counted below
    for i in 0..20 {
        sent_before += udp_round_trip(&before, relay, format!("in flight {i}").as_bytes()).await;
    }
    // A flow that starts now is the new process's.
    let after = open_quic_flow(relay, &hello).await;
    let after_addr = after.local_addr().unwrap();
    udp_round_trip(&after, relay, b"served by the new process").await;

    // The old flow idles out in the old process, having carried every
    // datagram it was sent; the old process then exits.
    let line = old.wait_log(|l| is_quic_close(l, before_addr)).await;
    assert_eq!(line["close"], "idle_timeout", "{line}");
    assert_eq!(line["route"], "localhost");
    let up = line["datagrams.up"].as_u64().unwrap();
    assert!(
        up >= 21 && up <= sent_before as u64,
        "{line} (sent {sent_before})"
    );
    assert_eq!(line["datagrams.down"].as_u64().unwrap(), up, "{line}");
    assert_eq!(old.wait_exit().await, Some(0));
    // The new process never saw a datagram of it (no flow of its own, such
    // as a `not_quic` one from a short header), nor the old one of the new flow.
    assert!(
        !new.log_lines()
            .iter()
            .any(|l| is_quic_close(l, before_addr)),
        "{:#?}",
        new.log_lines()
    );
    assert!(!old.log_lines().iter().any(|l| is_quic_close(l, after_addr)));
    new.wait_log(|l| {
        l["message"] == "the previous process let go of the QUIC socket; reading it now"
    })
    .await;
    let line = new.wait_log(|l| is_quic_close(l, after_addr)).await;
    assert_eq!(line["close"], "idle_timeout", "{line}");
    assert_eq!(line["sni"], "localhost");

    // And it reads the socket itself now.
    let later = open_quic_flow(relay, &hello).await;
    udp_round_trip(&later, relay, b"read by the new process").await;
    let line = new
        .wait_log(|l| is_quic_close(l, later.local_addr().unwrap()))
        .await;
    assert_eq!(line["close"], "idle_timeout", "{line}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two upgrades in a row while flows of each generation are open: the
/// middle process relays its own flow, passes the first process's
/// forwarded datagrams on to the third when they are not its own, and
/// reads the socket only after the first has let go of it. Every flow
/// carries every exchange and ends in the process it started in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_flows_survive_two_upgrades_in_a_row() {
    let config = quic_config(udp_echo_backend().await);
    let dir = scratch_dir("upgrade-quic-twice");
    let path = dir.join("takeover.sock");
    let hello = capture("ngtcp2").remove(0);
    let mut first = start_with_takeover(&config, &path).await;
    let relay = first.addr_of("quic");
    let one = open_quic_flow(relay, &hello).await;
    let mut second = start_with_takeover(&config, &path).await;
    first
        .wait_log(|l| l["message"] == "the new process accepts on our sockets; draining")
        .await;
    let two = open_quic_flow(relay, &hello).await;
    let third = start_with_takeover(&config, &path).await;
    second
        .wait_log(|l| l["message"] == "the new process accepts on our sockets; draining")
        .await;
    let three = open_quic_flow(relay, &hello).await;
    for i in 0..10 {
        for flow in [&one, &two, &three] {
            udp_round_trip(flow, relay, format!("exchange {i}").as_bytes()).await;
        }
    }
    for (process, flow) in [(&first, &one), (&second, &two), (&third, &three)] {
        let client = flow.local_addr().unwrap();
        let line = process.wait_log(|l| is_quic_close(l, client)).await;
        assert_eq!(line["close"], "idle_timeout", "{line}");
        assert!(line["datagrams.up"].as_u64().unwrap() >= 11, "{line}");
        for other in [&first, &second, &third] {
            let lines = other.log_lines();
            let count = lines.iter().filter(|l| is_quic_close(l, client)).count();
            assert_eq!(
                count,
                usize::from(std::ptr::eq(other, process)),
                "{client}: {lines:#?}"
            );
        }
    }
    assert_eq!(first.wait_exit().await, Some(0));
    assert_eq!(second.wait_exit().await, Some(0));
    let later = open_quic_flow(relay, &hello).await;
    let client = later.local_addr().unwrap();
    let line = third.wait_log(|l| is_quic_close(l, client)).await;
    assert_eq!(line["close"], "idle_timeout", "{line}");
    let _ = std::fs::remove_dir_all(&dir);
}
