//! Binary upgrade by socket handoff (`snirelay run --takeover PATH`): what
//! happens when the new process fails (the load test is in upgrade_load.rs).

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
