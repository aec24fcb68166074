//! Debian's chromium, headless, as a test client: a run with a profile of
//! its own (removed afterwards), bounded, its stdout and stderr returned;
//! and what a browser needs to trust a certificate made at test time
//! (the SHA-256 pin of the server key, `--ignore-certificate-errors-spki-list`).
//!
//! And the server the browser tests fetch from: Caddy's JSON configuration
//! for one HTTP/1-2-3 site ([`caddy_config`]).
//!
//! Not here: DevTools protocol, screenshots beyond what a flag gives, or any
//! waiting other than the process's own exit.

use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::{Pki, base64};

/// What a chromium run printed, and how long it took.
pub(crate) struct BrowserRun {
    pub stdout: String,
    /// Chromium's own log (a failed page load says why here, e.g.
    /// `Page load failed: net::ERR_QUIC_PROTOCOL_ERROR`).
    pub stderr: String,
    pub took: Duration,
}

/// Runs Debian's chromium headless with `args` (and a profile of its own
/// in a scratch directory) and returns its stdout. Fails loudly when
/// chromium is missing (`.ci/install-deps` installs it): never skipped.
pub(crate) async fn chromium(args: &[String]) -> String {
    chromium_run(args).await.stdout
}

/// As [`chromium`], with stderr and the time taken. The run must exit with
/// success (chromium does, even when the page failed to load) within 60 s.
pub(crate) async fn chromium_run(args: &[String]) -> BrowserRun {
    chromium_run_in(None, args).await
}

/// As [`chromium_run`], inside the named network namespace `netns` when
/// given (`ip netns exec`, as [`super::netns::wrap_in`] runs a program).
pub(crate) async fn chromium_run_in(netns: Option<&str>, args: &[String]) -> BrowserRun {
    let profile = super::scratch_dir("chromium-profile");
    let mut command = match netns {
        None => std::process::Command::new("chromium"),
        Some(ns) => {
            let mut wrapped = std::process::Command::new("ip");
            wrapped.args(["netns", "exec", ns, "chromium"]);
            wrapped
        }
    };
    command
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .env("HOME", &profile)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let run = tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let mut child = command
            .spawn()
            .expect("chromium must be installed (Debian package `chromium`, see .ci/install-deps)");
        // Read both pipes off this thread, so a full pipe cannot stall it.
        let mut stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let out = std::thread::spawn(move || {
            let mut text = String::new();
            stdout.read_to_string(&mut text).map(|_| text)
        });
        let err = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        // Bounded: 60 s, in steps of 50 ms.
        let mut status = None;
        for _ in 0..1200 {
            status = child.try_wait().unwrap();
            if status.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let Some(status) = status else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within 60 s");
        };
        let took = started.elapsed();
        let (stdout, stderr) = (out.join().unwrap().unwrap(), err.join().unwrap());
        assert!(status.success(), "chromium failed ({status}): {stderr}");
        BrowserRun {
            stdout,
            stderr,
            took,
        }
    })
    .await;
    // A profile is a few megabytes: a suite run must not leave them behind.
    let _ = std::fs::remove_dir_all(&profile);
    run.unwrap()
}

/// SHA-256 of `bytes` (rustls's default provider: no hashing crate of the
/// tests' own).
pub(crate) fn sha256(bytes: &[u8]) -> Vec<u8> {
    let rustls::SupportedCipherSuite::Tls13(suite) =
        rustls::crypto::aws_lc_rs::cipher_suite::TLS13_AES_128_GCM_SHA256
    else {
        unreachable!("a TLS 1.3 suite")
    };
    suite.common.hash_provider.hash(bytes).as_ref().to_vec()
}

/// Lowercase hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Pki {
    /// The server key's pin as chromium's
    /// `--ignore-certificate-errors-spki-list` takes it: base64 of the
    /// SHA-256 of the SubjectPublicKeyInfo. With it chromium accepts the
    /// test certificate without a trusted root (it honours the flag only
    /// with its own `--user-data-dir`, which [`chromium_run`] gives it).
    pub(crate) fn server_spki_pin(&self) -> String {
        use rcgen::PublicKeyData;
        let key = rcgen::KeyPair::try_from(self.server_key.as_slice()).unwrap();
        base64(&sha256(&key.subject_public_key_info()))
    }
}

/// Writes a Caddy configuration into `dir` (and `pki`'s server certificate
/// and key beside it) that serves the files of `site` for `name` over
/// HTTP/1.1, HTTP/2 and HTTP/3 on `listen` (TCP and UDP), with no admin
/// endpoint, no automatic HTTPS (so no ACME), its storage in `dir` and its
/// access lines (logger `http.log.access`) as JSON on stderr; returns the
/// configuration's path, for `caddy run --config PATH`.
pub(crate) fn caddy_config(
    dir: &std::path::Path,
    listen: std::net::SocketAddr,
    name: &str,
    site: &std::path::Path,
    pki: &Pki,
) -> std::path::PathBuf {
    let (cert, key) = pki.write_server_pem(dir);
    let config = serde_json::json!({
        // No admin endpoint, and no copy of the config in the user's home.
        "admin": { "disabled": true, "config": { "persist": false } },
        "storage": { "module": "file_system", "root": dir.join("storage") },
        "apps": {
            "http": { "servers": { "h3": {
                "listen": [listen.to_string()],
                "protocols": ["h1", "h2", "h3"],
                // No ACME, no redirects: the certificate below serves.
                "automatic_https": { "disable": true },
                "tls_connection_policies": [{}],
                // Access lines (logger `http.log.access`) for every request.
                "logs": {},
                "routes": [{
                    "match": [{ "host": [name] }],
                    "handle": [{ "handler": "file_server", "root": site }]
                }]
            }}},
            "tls": { "certificates": { "load_files": [
                { "certificate": cert, "key": key }
            ]}}
        }
    });
    let path = dir.join("caddy.json");
    std::fs::write(&path, config.to_string()).unwrap();
    path
}
