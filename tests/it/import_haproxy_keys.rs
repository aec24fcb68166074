//! `snirelay import-haproxy` on the lines of common SNI-edge
//! configurations beyond the seed template: each configuration is first
//! checked with HAProxy itself (`haproxy -c -f`, Debian's 2.6; a missing
//! binary fails the test), then imported; the emitted key and value are
//! asserted and `snirelay check` must accept the output. Also the exit
//! codes (0 when only lines that need no key remain, 1 with a line left
//! untranslated, named on stderr), `--check`'s table for the seed, and
//! the imported admin socket running outside the packaged unit.

use std::path::PathBuf;
use std::process::Command;

use crate::common::*;
use crate::import_haproxy::{check, fixture, import, import_with};

/// The frontend and backend every case adds its lines to (`{GLOBAL}`,
/// `{DEFAULTS}`, `{FRONTEND}`, `{BACKEND}` are replaced).
const SHAPE: &str = "global\n{GLOBAL}defaults\n    mode tcp\n    timeout connect 5s\n    timeout client 1m\n    timeout server 1m\n{DEFAULTS}frontend fe\n    bind 127.0.0.1:8443\n    tcp-request inspect-delay 5s\n    tcp-request content accept if { req.ssl_hello_type 1 }\n{FRONTEND}    default_backend be\nbackend be\n    server s 192.0.2.1:443\n{BACKEND}";

/// [`SHAPE`] with no lines added.
fn plain() -> String {
    Case::shape(["", "", "", ""])
}

/// A configuration of [`SHAPE`] with these lines, and its directory
/// (with `files` written beside it).
struct Case {
    dir: PathBuf,
    cfg: PathBuf,
}

impl Case {
    fn new(tag: &str, parts: [&str; 4], files: &[(&str, &str)]) -> Case {
        Case::text(tag, &Case::shape(parts), files)
    }

    fn shape(parts: [&str; 4]) -> String {
        SHAPE
            .replace("{GLOBAL}", parts[0])
            .replace("{DEFAULTS}", parts[1])
            .replace("{FRONTEND}", parts[2])
            .replace("{BACKEND}", parts[3])
    }

    fn text(tag: &str, text: &str, files: &[(&str, &str)]) -> Case {
        let dir = scratch_dir(tag);
        for (name, body) in files {
            std::fs::write(dir.join(name), body).unwrap();
        }
        let cfg = dir.join("haproxy.cfg");
        std::fs::write(&cfg, text).unwrap();
        // HAProxy accepts it (pattern files are named relative to `dir`).
        let out = Command::new("haproxy")
            .args(["-c", "-f"])
            .arg(&cfg)
            .current_dir(&dir)
            .output()
            .expect("haproxy is installed");
        assert!(
            out.status.success(),
            "haproxy -c refuses:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Case { dir, cfg }
    }

    /// `import-haproxy`, run in the configuration's directory (where
    /// HAProxy reads its pattern files from): exit code, TOML, stderr.
    fn import(&self) -> (i32, String, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_snirelay"))
            .arg("import-haproxy")
            .arg(&self.cfg)
            .current_dir(&self.dir)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    }

    /// Imports with exit 0, `snirelay check` accepting the output.
    fn import_ok(&self) -> String {
        let (code, toml, stderr) = self.import();
        assert_eq!(code, 0, "{stderr}\n{toml}");
        assert!(stderr.is_empty(), "{stderr}");
        let (code, out) = check(&toml);
        assert_eq!(code, 0, "{out}\n{toml}");
        toml
    }
}

impl Drop for Case {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The line of `toml` that sets `key` (its first), without its comment.
fn key_line<'a>(toml: &'a str, key: &str) -> &'a str {
    toml.lines()
        .find(|l| l.starts_with(&format!("{key} = ")))
        .unwrap_or_else(|| panic!("no `{key}` in:\n{toml}"))
        .split(" #")
        .next()
        .unwrap()
        .trim_end()
}

#[test]
fn log_targets_become_the_log_section() {
    let case = Case::new(
        "import-log",
        ["    log /dev/log local0\n", "    log global\n", "", ""],
        &[],
    );
    let toml = case.import_ok();
    assert_eq!(key_line(&toml, "target"), "target = \"syslog\"");
    assert_eq!(key_line(&toml, "syslog"), "syslog = \"unix:/dev/log\"");
    assert_eq!(key_line(&toml, "facility"), "facility = \"local0\"");
    assert_eq!(
        key_line(&toml, "syslog_format"),
        "syslog_format = \"rfc3164\""
    );
    // A UDP syslog server, a format and a level.
    let case = Case::new(
        "import-log-udp",
        [
            "    log 127.0.0.1:514 format rfc5424 local3 info\n",
            "",
            "",
            "",
        ],
        &[],
    );
    let toml = case.import_ok();
    assert_eq!(
        key_line(&toml, "syslog"),
        "syslog = \"udp://127.0.0.1:514\""
    );
    assert_eq!(key_line(&toml, "facility"), "facility = \"local3\"");
    assert_eq!(
        key_line(&toml, "syslog_format"),
        "syslog_format = \"rfc5424\""
    );
    assert!(
        toml.contains("the level filter `info` is snirelay's --log-level"),
        "{toml}"
    );
    // One target only: a second is reported.
    let case = Case::new(
        "import-log-two",
        [
            "    log /dev/log local0\n    log 127.0.0.1 local1\n",
            "",
            "",
            "",
        ],
        &[],
    );
    let (code, toml, stderr) = case.import();
    assert_eq!(code, 1, "{toml}");
    assert!(
        stderr.contains("line 3: `log 127.0.0.1 local1`: a second log target"),
        "{stderr}"
    );
}

#[test]
fn monitor_fail_on_an_empty_backend_becomes_ready_requires() {
    let monitor = "frontend health\n    mode http\n    bind 127.0.0.1:8404\n    monitor-uri /healthz\n    monitor fail if { nbsrv(be) lt 1 }\n";
    let case = Case::text("import-monitor", &format!("{}{monitor}", plain()), &[]);
    let toml = case.import_ok();
    assert_eq!(key_line(&toml, "listen"), "listen = \"127.0.0.1:8404\"");
    assert_eq!(
        key_line(&toml, "ready_requires"),
        "ready_requires = [\"backend:be\"]"
    );
    assert!(toml.contains("point the health check at /readyz instead of /healthz"));
    // In a tcp listen section, over its own servers.
    let case = Case::text(
        "import-monitor-listen",
        "defaults\n    mode tcp\n    timeout connect 5s\n    timeout client 1m\n    timeout server 1m\nlisten tls\n    bind 127.0.0.1:8443\n    tcp-request inspect-delay 5s\n    monitor fail unless { nbsrv(tls) ge 1 }\n    server s 192.0.2.1:443\n",
        &[],
    );
    let toml = case.import_ok();
    assert_eq!(
        key_line(&toml, "ready_requires"),
        "ready_requires = [\"backend:tls\"]"
    );
    // Another count is not what /readyz decides: reported.
    let case = Case::text(
        "import-monitor-two",
        &format!("{}{}", plain(), monitor.replace("lt 1", "lt 2")),
        &[],
    );
    let (code, _, stderr) = case.import();
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("line 18: `monitor fail if { nbsrv(be) lt 2 }`"),
        "{stderr}"
    );
    // A backend no translated route uses is not in the output: the line
    // is reported and the rest still passes `check`.
    let case = Case::text(
        "import-monitor-unused",
        &format!(
            "{}backend spare\n    server t 192.0.2.2:443\n{}",
            plain(),
            monitor.replace("nbsrv(be)", "nbsrv(spare)")
        ),
        &[],
    );
    let (code, toml, stderr) = case.import();
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("`monitor fail if { nbsrv(spare) lt 1 }`: backend spare is not in the translated configuration"),
        "{stderr}"
    );
    assert!(!toml.contains("\nready_requires = "), "{toml}");
    let (code, out) = check(&toml);
    assert_eq!(code, 0, "{out}\n{toml}");
}

#[test]
fn source_rules_become_deny_and_allow_when_haproxys_order_agrees() {
    // reject if { src … }, inline and from a pattern file.
    let case = Case::new(
        "import-deny",
        [
            "",
            "",
            "    tcp-request connection reject if { src 198.51.100.0/24 10.0.0.1 }\n    tcp-request connection reject if { src -f blocked.lst }\n",
            "",
        ],
        &[(
            "blocked.lst",
            "# abusers\n203.0.113.0/25\n\n2001:db8::/32\n",
        )],
    );
    let toml = case.import_ok();
    assert_eq!(
        key_line(&toml, "deny"),
        "deny = [\"198.51.100.0/24\", \"10.0.0.1/32\", \"203.0.113.0/25\", \"2001:db8::/32\"]"
    );
    // accept if { src … } then a catch-all reject, and reject if !{ src … }.
    for rules in [
        "    tcp-request connection accept if { src 10.0.0.0/8 }\n    tcp-request connection reject\n",
        "    tcp-request connection reject if !{ src 10.0.0.0/8 }\n",
        "    acl inside src 10.0.0.0/255.0.0.0\n    tcp-request connection reject unless inside\n",
    ] {
        let case = Case::new("import-allow", ["", "", rules, ""], &[]);
        let toml = case.import_ok();
        assert_eq!(
            key_line(&toml, "allow"),
            "allow = [\"10.0.0.0/8\"]",
            "{rules}"
        );
    }
    // An accepted source skips HAProxy's later limit: not what snirelay
    // does (limits apply to every source), so reported with the address.
    let case = Case::new(
        "import-allow-limit",
        [
            "",
            "",
            "    stick-table type ip size 1k expire 10s store conn_cur\n    tcp-request connection track-sc0 src\n    tcp-request connection accept if { src 10.0.0.0/8 }\n    tcp-request connection reject if { sc0_conn_cur gt 5 }\n",
            "",
        ],
        &[],
    );
    let (code, toml, stderr) = case.import();
    assert_eq!(code, 1, "{toml}");
    assert!(
        stderr.contains("line 13: `tcp-request connection accept if { src 10.0.0.0/8 }`: the connection rules together: a connection from 10.0.0.0 over its open-connection limit is admitted by HAProxy's rules"),
        "{stderr}"
    );
    // The same limit first: exact, and both keys are written.
    let case = Case::new(
        "import-limit-allow",
        [
            "",
            "",
            "    stick-table type ip size 1k expire 10s store conn_cur\n    tcp-request connection track-sc0 src\n    tcp-request connection reject if { sc0_conn_cur gt 5 }\n    tcp-request connection accept if { src 10.0.0.0/8 }\n    tcp-request connection reject\n",
            "",
        ],
        &[],
    );
    let toml = case.import_ok();
    assert_eq!(key_line(&toml, "allow"), "allow = [\"10.0.0.0/8\"]");
    assert_eq!(
        key_line(&toml, "connections_per_source"),
        "connections_per_source = 5"
    );
}

#[test]
fn per_source_conn_rate_becomes_attempts_per_source() {
    let case = Case::new(
        "import-attempts",
        [
            "",
            "",
            "    stick-table type ip size 1k expire 30s store conn_rate(10s)\n    tcp-request connection track-sc1 src\n    tcp-request connection reject if { sc1_conn_rate ge 50 }\n",
            "",
        ],
        &[],
    );
    let toml = case.import_ok();
    assert_eq!(
        key_line(&toml, "attempts_per_source"),
        "attempts_per_source = 49"
    );
    assert_eq!(
        key_line(&toml, "attempts_period"),
        "attempts_period = \"10s\""
    );
    assert!(
        toml.contains(
            "refused past 49 attempts from one source, refused ones included, counted over 10s"
        ),
        "{toml}"
    );
    assert!(!toml.contains("connection_rate_per_source"), "{toml}");
}

#[test]
fn lines_snirelay_needs_no_key_for_exit_0_each_with_its_reason() {
    let case = Case::new(
        "import-no-ops",
        [
            "    nbthread 2\n    cpu-map auto:1/1-2 0-1\n    ulimit-n 65536\n    pidfile /run/haproxy.pid\n    chroot /var/empty\n    user haproxy\n    group haproxy\n    daemon\n    tune.maxaccept 64\n",
            "    option splice-auto\n    option splice-request\n    option splice-response\n    option tcp-smart-accept\n    option tcp-smart-connect\n    option dontlognull\n    option tcplog\n    timeout tunnel 1h\n",
            "    tcp-request content reject if !{ req.ssl_hello_type 1 }\n",
            "",
        ],
        &[],
    );
    let toml = case.import_ok();
    for (line, why) in [
        ("cpu-map auto:1/1-2 0-1", "the kernel schedules"),
        ("ulimit-n 65536", "descriptor limit"),
        ("pidfile /run/haproxy.pid", "foreground"),
        ("chroot /var/empty", "sandboxes"),
        ("tune.maxaccept 64", "decides no connection's outcome"),
        (
            "option splice-auto",
            "splices between the sockets by default",
        ),
        (
            "option splice-response",
            "splices between the sockets by default",
        ),
        (
            "option tcp-smart-accept",
            "ClientHello as soon as it arrives",
        ),
        ("option tcp-smart-connect", "right after connecting"),
        (
            "tcp-request content reject if !{ req.ssl_hello_type 1 }",
            "not a complete ClientHello",
        ),
    ] {
        let listed = toml
            .lines()
            .find(|l| l.contains(&format!("`{line}`: ")))
            .unwrap_or_else(|| panic!("`{line}` is not listed:\n{toml}"));
        assert!(listed.contains(why), "{listed}");
    }
    assert_eq!(key_line(&toml, "threads"), "threads = 2");
    assert_eq!(key_line(&toml, "idle_timeout"), "idle_timeout = \"1h\"");
}

#[test]
fn backup_servers_and_check_send_proxy() {
    let case = Case::new(
        "import-backup",
        [
            "",
            "",
            "",
            "    balance roundrobin\n    server b 192.0.2.2:443 backup\n",
        ],
        &[],
    );
    let toml = case.import_ok();
    assert_eq!(
        key_line(&toml, "addresses"),
        "addresses = [\"192.0.2.1:443\", { address = \"192.0.2.2:443\", backup = true }]"
    );
    assert!(
        toml.contains("`balance roundrobin`: one active server: nothing to balance"),
        "{toml}"
    );
    // option allbackups: every usable backup, not the first only.
    let case = Case::new(
        "import-allbackups",
        [
            "",
            "",
            "",
            "    option allbackups\n    server b 192.0.2.2:443 backup\n    server c 192.0.2.3:443 backup\n",
        ],
        &[],
    );
    let toml = case.import_ok();
    assert_eq!(key_line(&toml, "backup_policy"), "backup_policy = \"all\"");
    // check-send-proxy with send-proxy-v2: the checks already send one.
    let case = Case::text(
        "import-check-proxy",
        &plain().replace(
            "server s 192.0.2.1:443\n",
            "server s 192.0.2.1:443 send-proxy-v2 check check-send-proxy\n",
        ),
        &[],
    );
    let toml = case.import_ok();
    assert_eq!(key_line(&toml, "proxy_protocol"), "proxy_protocol = \"v2\"");
    assert!(
        toml.contains(
            "check-send-proxy needs no key: snirelay's health checks start with a PROXY header"
        ),
        "{toml}"
    );
    // Without send-proxy: reported.
    let case = Case::text(
        "import-check-proxy-alone",
        &plain().replace(
            "server s 192.0.2.1:443\n",
            "server s 192.0.2.1:443 check check-send-proxy\n",
        ),
        &[],
    );
    let (code, _, stderr) = case.import();
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("check-send-proxy without send-proxy"),
        "{stderr}"
    );
}

#[test]
fn accept_proxy_trusts_every_peer_as_haproxy_does() {
    let case = Case::text(
        "import-accept-proxy",
        &plain().replace("bind 127.0.0.1:8443", "bind 127.0.0.1:8443 accept-proxy"),
        &[],
    );
    let toml = case.import_ok();
    assert_eq!(
        key_line(&toml, "proxy_protocol"),
        "proxy_protocol = { trusted = [\"0.0.0.0/0\", \"::/0\"] }"
    );
}

#[test]
fn an_untranslated_line_exits_1_and_is_named_on_stderr() {
    let case = Case::new(
        "import-exit-1",
        [
            "",
            "",
            "    tcp-request content reject if { req.ssl_ver 3 }\n",
            "",
        ],
        &[],
    );
    let (code, toml, stderr) = case.import();
    assert_eq!(code, 1, "{toml}");
    assert!(
        stderr.starts_with("snirelay import-haproxy: 1 line(s) not translated"),
        "{stderr}"
    );
    assert!(
        stderr.contains("line 11: `tcp-request content reject if { req.ssl_ver 3 }`: conditions on `req.ssl_ver`"),
        "{stderr}"
    );
    assert!(toml.contains("# NOT TRANSLATED"), "{toml}");
}

#[test]
fn check_lists_each_decision_of_the_seed_with_its_key() {
    let (code, table, stderr) = import_with(&fixture("tls-edge-failover.cfg"), &["--check"]);
    assert_eq!(code, 0, "{stderr}\n{table}");
    for (line, key) in [
        (
            "line    5  log /dev/log local0",
            "-> [log]: target = \"syslog\"",
        ),
        (
            "line   11  stats socket /run/haproxy/admin.sock mode 600 level admin",
            "-> [admin]: listen = \"unix:/run/snirelay/admin.sock\"",
        ),
        (
            "line   21  timeout client 5m",
            "-> [[listener]] home_https: idle_timeout = \"5m\"",
        ),
        (
            "line   34  tcp-request connection reject if { sc0_conn_cur gt 100 }",
            "-> [listener.limits] of home_https: connections_per_source = 100",
        ),
        (
            "line   35  tcp-request connection reject if { sc0_conn_rate gt 30 }",
            "-> [listener.limits] of home_https: attempts_per_source = 30",
        ),
        (
            "line   39  tcp-request content reject if hello !allowed_sni",
            "-> [[route]] home_npm: sni = [\"example.com\", \"*.example.com\"]",
        ),
        (
            "line   41  tcp-request content reject if WAIT_END",
            "-> no key: snirelay refuses anything that is not a complete ClientHello",
        ),
        (
            "line   45  server home 203.0.113.10:443 check inter 5s fall 3 rise 2",
            "-> [backend.home_npm.health]: interval = \"5s\"",
        ),
    ] {
        let at = table
            .find(&format!("{line}\n"))
            .unwrap_or_else(|| panic!("no `{line}` in:\n{table}"));
        let entry = table[at..].split("\nline ").next().unwrap();
        assert!(entry.contains(key), "{entry}");
    }
    // Lines that decide nothing are left out.
    assert!(!table.contains("user haproxy"), "{table}");
    // The unsupported fixture: its lines are there, as not translated.
    let (code, table, _) = import_with(&fixture("unsupported.cfg"), &["--check"]);
    assert_eq!(code, 1);
    assert!(
        table.contains("-> not translated: the match method `-m sub`"),
        "{table}"
    );
}

/// The seed's admin socket is `/run/snirelay/admin.sock`, the packaged
/// unit's runtime directory; outside the unit `run` creates the missing
/// directory (mode 0700) and starts. Run here with the same path under a
/// scratch directory, so the host's /run is left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_imported_admin_socket_starts_outside_the_packaged_unit() {
    let (code, toml, stderr) = import(&fixture("tls-edge-failover.cfg"));
    assert_eq!(code, 0, "{stderr}");
    let dir = scratch_dir("import-run");
    let socket_dir = dir.join("run/snirelay");
    let toml = toml
        .replace(
            "unix:/run/snirelay/admin.sock",
            &format!("unix:{}/admin.sock", socket_dir.display()),
        )
        .replace("listen = \"0.0.0.0:443\"", "listen = \"127.0.0.1:0\"")
        // The host's syslog socket may be absent here.
        .replace("target = \"syslog\"", "target = \"stderr\"");
    assert!(!socket_dir.exists());
    let relay = Relay::start(&toml).await;
    relay.wait_log(|l| l["message"] == "admin listening").await;
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let mode = std::fs::metadata(&socket_dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    assert!(
        std::fs::metadata(socket_dir.join("admin.sock"))
            .unwrap()
            .file_type()
            .is_socket()
    );
    drop(relay);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A named `src` ACL goes with the connection rule that uses it: when the
/// rule is not translated, neither is the ACL line, and both are named.
#[test]
fn an_acl_of_an_untranslated_connection_rule_is_named_with_it() {
    let case = Case::new(
        "import-acl-of-rule",
        [
            "",
            "",
            "    stick-table type ip size 1k expire 30s store conn_cur\n    tcp-request connection track-sc0 src\n    acl bad src 192.0.2.0/24\n    tcp-request connection reject if bad { sc0_conn_cur gt 3 }\n",
            "",
        ],
        &[],
    );
    let (code, _, stderr) = case.import();
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("line 14: `tcp-request connection reject if bad { sc0_conn_cur gt 3 }`: conditions mixing"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "line 13: `acl bad src 192.0.2.0/24`: used by line 14, which is not translated"
        ),
        "{stderr}"
    );
}
