//! `sni_file`: a route's names read from a file beside the configuration,
//! through the real relay binary and real TLS. The names in the file are
//! relayed and others refused; `check` names the file and line of a bad
//! name; a reload takes the file's new names, and a reload whose file has a
//! bad line is refused with the old names still served.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::*;

/// Every name the tests' server certificate holds.
const SERVED: &[&str] = &[
    "app.example.com",
    "x.r.example.com",
    "s.example.com",
    "new.example.com",
];

/// [`two_routes`] with route `r` reading `names.lst` (found from the
/// configuration's directory) instead of its inline names; route `s`
/// still lists `s.example.com`.
fn config(r: std::net::SocketAddr, s: std::net::SocketAddr) -> String {
    let inline = "sni = [\"r.example.com\", \"app.example.com\"]";
    let text = two_routes(r, s, "");
    assert!(text.contains(inline));
    text.replace(inline, "sni_file = \"names.lst\"")
}

/// Starts the relay with `names` written to `names.lst` beside its
/// configuration file.
async fn start(config: &str, names: &str) -> Relay {
    let names = names.to_owned();
    Relay::launch(config, move |path| {
        std::fs::write(names_path(path), names).unwrap();
        Relay::command(path)
    })
    .await
}

fn names_path(config: &Path) -> std::path::PathBuf {
    config.parent().unwrap().join("names.lst")
}

/// Whether a handshake for `name` fails with the relay's
/// `unrecognized_name` alert.
async fn refused(relay: &Relay, pki: &Pki, name: &str) -> bool {
    let tcp = tokio::net::TcpStream::connect(relay.addr()).await.unwrap();
    match tls_connect(pki.client_config(), name, tcp).await {
        Ok(_) => false,
        Err(e) => {
            let e = e.to_string().to_lowercase();
            e.contains("unrecognisedname") || e.contains("unrecognizedname")
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_relays_the_names_of_its_file_and_refuses_others() {
    let pki = Pki::new(SERVED);
    let r = tls_echo_backend(&pki).await;
    let s = tls_echo_backend(&pki).await;
    let relay = start(
        &config(r, s),
        "# customers of this edge\n\nAPP.example.com.\n  *.r.example.com  \n",
    )
    .await;
    // The file's exact name (normalised like an inline one) and wildcard
    // reach `r`; the inline route still reaches `s`.
    assert_eq!(
        relayed_backend_addr(&relay, &pki, "app.example.com").await,
        r.to_string()
    );
    assert_eq!(
        relayed_backend_addr(&relay, &pki, "x.r.example.com").await,
        r.to_string()
    );
    assert_eq!(
        relayed_backend_addr(&relay, &pki, "s.example.com").await,
        s.to_string()
    );
    // A name in neither is refused, and so is the wildcard's own suffix.
    assert!(refused(&relay, &pki, "new.example.com").await);
    let pki_suffix = Pki::new(&["r.example.com"]);
    assert!(refused(&relay, &pki_suffix, "r.example.com").await);
}

#[test]
fn check_names_the_file_and_line_of_a_bad_name() {
    let dir = scratch_dir("sni-file-check");
    let config = dir.join("snirelay.toml");
    let addr = "127.0.0.1:9".parse().unwrap();
    std::fs::write(&config, common_config(addr)).unwrap();
    std::fs::write(
        dir.join("names.lst"),
        "a.example.com\n# a comment\nb..example.com\nc.example.com\nd.example.com # note\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_snirelay"))
        .args(["check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("2 problem(s)"), "{stderr}");
    assert!(
        stderr.contains(
            "route[0].sni_file: names.lst:3: \"b..example.com\": empty label (two dots in a row, or a leading dot)"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "route[0].sni_file: names.lst:5: \"d.example.com # note\": character ' ' is not allowed"
        ),
        "{stderr}"
    );
    // Fixed, the same file passes.
    std::fs::write(dir.join("names.lst"), "a.example.com\nc.example.com\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_snirelay"))
        .args(["check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "ok\n");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// [`config`] with both backends at `addr` (for `check`, which connects
/// nowhere).
fn common_config(addr: std::net::SocketAddr) -> String {
    config(addr, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_takes_the_files_new_names_and_a_broken_file_keeps_the_old() {
    let pki = Pki::new(SERVED);
    let r = tls_echo_backend(&pki).await;
    let s = tls_echo_backend(&pki).await;
    let text = config(r, s);
    let relay = start(&text, "app.example.com\n").await;
    assert!(refused(&relay, &pki, "new.example.com").await);

    // The configuration is unchanged; only the file is.
    let names = names_path(&relay.config_path);
    std::fs::write(&names, "new.example.com\n*.r.example.com\n").unwrap();
    let line = relay.reload(&text, 1).await;
    assert_eq!(line["message"], "reload applied", "{line}");
    assert_eq!(
        relayed_backend_addr(&relay, &pki, "new.example.com").await,
        r.to_string()
    );
    assert_eq!(
        relayed_backend_addr(&relay, &pki, "x.r.example.com").await,
        r.to_string()
    );
    assert!(refused(&relay, &pki, "app.example.com").await);

    // A bad line refuses the reload, naming the file and line; the names
    // of the running generation are still served.
    std::fs::write(&names, "app.example.com\n*.*.example.com\n").unwrap();
    let line = relay.reload(&text, 2).await;
    assert_eq!(
        line["message"], "reload rejected; still serving the previous configuration",
        "{line}"
    );
    let error = line["error"].as_str().unwrap();
    assert!(
        error.contains(
            "route[0].sni_file: names.lst:2: \"*.*.example.com\": `*` may only stand alone"
        ),
        "{error}"
    );
    assert_eq!(
        relayed_backend_addr(&relay, &pki, "new.example.com").await,
        r.to_string()
    );
    assert!(refused(&relay, &pki, "app.example.com").await);
    // So is a file that is gone.
    std::fs::remove_file(&names).unwrap();
    let line = relay.reload(&text, 3).await;
    let error = line["error"].as_str().unwrap();
    assert!(
        error.contains("route[0].sni_file:") && error.contains("names.lst: No such file"),
        "{error}"
    );
    assert_eq!(
        relayed_backend_addr(&relay, &pki, "x.r.example.com").await,
        r.to_string()
    );
}
