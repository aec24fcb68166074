//! `snirelay probe` against real relays on loopback: a healthy relay, a
//! relay whose backend is dead (TCP fine, handshake fails), and an address
//! that refuses; plus the Prometheus textfile and certificate trust.

use crate::common;

use std::net::SocketAddr;

use common::*;
use serde_json::Value;
use tokio::io::AsyncReadExt;

const NAME: &str = "app.localhost";

/// A TLS backend that waits for the client to go away.
async fn idle_backend(pki: &Pki) -> SocketAddr {
    tls_backend(pki, |mut tls| async move {
        let mut buf = [0u8; 1024];
        while let Ok(n) = tls.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    })
    .await
}

fn probe_args(addr: SocketAddr, pem: Option<&PemFiles>, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "probe".into(),
        addr.ip().to_string(),
        "--sni".into(),
        NAME.into(),
        "--port".into(),
        addr.port().to_string(),
        "--timeout".into(),
        "3s".into(),
    ];
    if let Some(pem) = pem {
        for (flag, path) in [
            ("--ca", &pem.ca),
            ("--client-cert", &pem.client_cert),
            ("--client-key", &pem.client_key),
        ] {
            args.push(flag.into());
            args.push(path.display().to_string());
        }
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

fn only_address(report: &Value) -> &Value {
    let addresses = report["addresses"].as_array().expect("addresses");
    assert_eq!(addresses.len(), 1, "{report:#}");
    &addresses[0]
}

fn positive(v: &Value) -> bool {
    v.as_f64().is_some_and(|ms| ms > 0.0 && ms < 3000.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthy_relay_reports_both_times_and_exits_0() {
    let pki = Pki::new(&[NAME]);
    let backend = idle_backend(&pki).await;
    let relay = Relay::start(&simple_config(&[NAME], backend, "")).await;
    let dir = scratch_dir("probe-healthy");
    let pem = pki.write_pem(&dir);
    let textfile = dir.join("probe.prom");

    let extra = ["--json", "--textfile", textfile.to_str().unwrap()];
    let (code, stdout, stderr) = run_snirelay(probe_args(relay.addr(), Some(&pem), &extra)).await;
    assert_eq!(code, Some(0), "stdout: {stdout}\nstderr: {stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["healthy"], 1);
    assert_eq!(report["total"], 1);
    assert_eq!(report["sni"], NAME);
    let address = only_address(&report);
    assert_eq!(address["address"], relay.addr().to_string());
    assert_eq!(address["status"], "healthy");
    assert!(positive(&address["tcp_connect_ms"]), "{address:#}");
    assert!(positive(&address["tls_handshake_ms"]), "{address:#}");
    assert_eq!(address["tls_version"], "TLSv1_3");
    assert_eq!(address["error"], Value::Null);

    // The probe went through the relay to the backend: the relay logged it.
    let line = relay
        .wait_log(|l| l["message"] == "connection closed" && l["sni"] == NAME)
        .await;
    assert_eq!(line["route"], NAME);

    // The textfile is complete and no temporary file is left behind.
    let text = std::fs::read_to_string(&textfile).unwrap();
    let labels = format!(
        "name=\"{}\",sni=\"{NAME}\",address=\"{}\"",
        relay.addr().ip(),
        relay.addr()
    );
    assert!(
        text.contains(&format!("snirelay_probe_up{{{labels}}} 1\n")),
        "{text}"
    );
    assert!(text.contains(&format!(
        "snirelay_probe_status{{{labels},status=\"healthy\"}} 1\n"
    )));
    assert!(text.contains("# TYPE snirelay_probe_tls_handshake_seconds gauge\n"));
    assert!(text.contains(&format!(
        "snirelay_probe_tls_handshake_seconds{{{labels}}} 0."
    )));
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_backend_connects_but_fails_the_handshake() {
    let pki = Pki::new(&[NAME]);
    let relay = Relay::start(&simple_config(&[NAME], closed_port(), "")).await;
    let dir = scratch_dir("probe-dead");
    let pem = pki.write_pem(&dir);
    let textfile = dir.join("probe.prom");

    let extra = ["--json", "--textfile", textfile.to_str().unwrap()];
    let (code, stdout, stderr) = run_snirelay(probe_args(relay.addr(), Some(&pem), &extra)).await;
    assert_eq!(code, Some(2), "stdout: {stdout}\nstderr: {stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["healthy"], 0);
    let address = only_address(&report);
    assert_eq!(address["status"], "handshake_failed", "{address:#}");
    assert!(positive(&address["tcp_connect_ms"]), "{address:#}");
    assert_eq!(address["tls_handshake_ms"], Value::Null);
    assert!(address["error"].is_string());

    let line = relay
        .wait_log(|l| l["message"] == "connection closed" && l["sni"] == NAME)
        .await;
    assert_eq!(line["close"], "connect_failed");

    let text = std::fs::read_to_string(&textfile).unwrap();
    assert!(text.contains("status=\"handshake_failed\"} 1\n"), "{text}");
    assert!(text.contains("snirelay_probe_healthy_addresses{"), "{text}");
    assert!(
        !text.contains("snirelay_probe_tls_handshake_seconds{"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusing_address_is_reported_as_refused() {
    let port = closed_port();
    let (code, stdout, stderr) = run_snirelay(probe_args(port, None, &["--insecure"])).await;
    assert_eq!(code, Some(2), "stdout: {stdout}\nstderr: {stderr}");
    let first = stdout.lines().next().unwrap();
    assert!(first.contains("0/1 address(es) healthy"), "{stdout}");
    let row = stdout.lines().nth(1).unwrap();
    assert!(row.contains(&port.to_string()), "{row}");
    assert!(row.contains(" refused "), "{row}");

    let (code, stdout, _) = run_snirelay(probe_args(port, None, &["--insecure", "--json"])).await;
    assert_eq!(code, Some(2));
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let address = only_address(&report);
    assert_eq!(address["status"], "refused");
    assert_eq!(address["tcp_connect_ms"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_certificate_fails_unless_insecure() {
    let pki = Pki::new(&[NAME]);
    let other = Pki::new(&[NAME]);
    let backend = idle_backend(&pki).await;
    let relay = Relay::start(&simple_config(&[NAME], backend, "")).await;
    let dir = scratch_dir("probe-trust");
    let pem = pki.write_pem(&dir);
    let wrong_dir = scratch_dir("probe-trust-other");
    let wrong = other.write_pem(&wrong_dir);

    // Trusting another CA: the handshake fails on the certificate.
    let mut args = probe_args(relay.addr(), None, &["--json"]);
    args.extend(["--ca".into(), wrong.ca.display().to_string()]);
    let (code, stdout, _) = run_snirelay(args).await;
    assert_eq!(code, Some(2), "{stdout}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let address = only_address(&report);
    assert_eq!(address["status"], "handshake_failed");
    let error = address["error"].as_str().unwrap();
    assert!(error.contains("certificate"), "{error}");

    // --insecure (with the client certificate the origin demands) passes.
    let mut args = probe_args(relay.addr(), None, &["--json", "--insecure"]);
    args.extend([
        "--client-cert".into(),
        pem.client_cert.display().to_string(),
        "--client-key".into(),
        pem.client_key.display().to_string(),
    ]);
    let (code, stdout, stderr) = run_snirelay(args).await;
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
}

#[tokio::test]
async fn unresolvable_name_exits_2_with_a_message() {
    let (code, _, stderr) = run_snirelay(vec![
        "probe".into(),
        "name.invalid".into(),
        "--insecure".into(),
    ])
    .await;
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("cannot resolve name.invalid:443"),
        "{stderr}"
    );
}
