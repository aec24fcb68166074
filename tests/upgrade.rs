//! Binary upgrade by socket handoff (`snirelay run --takeover PATH`): what
//! happens when the new process fails, and the admin socket handed over with
//! the listeners (the load test is in upgrade_load.rs).

mod common;

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
