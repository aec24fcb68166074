//! `snirelay import-haproxy` on its own: the translation of the seed
//! template equals the migration guide's, the manual's SNI-routing
//! examples import completely, and lines snirelay cannot reproduce are
//! each named with their line and reason (exit 1). Running HAProxy and
//! snirelay side by side on the translations is the differential area
//! (`differential*`), which also owns the fixtures' shared helpers.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

pub(crate) use common::differential::{fixture, import, import_with};
use common::scratch_dir;
use snirelay::config::Config;

/// `snirelay check` on `toml`, written to a scratch file: exit code and
/// stdout + stderr.
pub(crate) fn check(toml: &str) -> (i32, String) {
    let dir = scratch_dir("import-check");
    let path = dir.join("imported.toml");
    std::fs::write(&path, toml).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_snirelay"))
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

#[test]
fn the_seed_template_imports_completely_and_equals_the_readme_translation() {
    let (code, toml, stderr) = import(&fixture("tls-edge-failover.cfg"));
    assert_eq!(code, 0, "{stderr}\n{toml}");
    assert!(!toml.contains("NOT TRANSLATED"), "{toml}");
    let (code, out) = check(&toml);
    assert_eq!(code, 0, "{out}");
    // The migration guide's block is this translation, key for key.
    let readme = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/migrating-from-haproxy.md"),
    )
    .unwrap();
    let section = readme.split_once("# Migrating from HAProxy\n").unwrap().1;
    let block = section
        .split_once("```toml\n")
        .and_then(|(_, rest)| rest.split_once("\n```"))
        .unwrap()
        .0;
    let from_readme =
        Config::from_toml(block, Path::new("docs/migrating-from-haproxy.md")).unwrap();
    let imported = Config::from_toml(&toml, Path::new("imported.toml")).unwrap();
    assert_eq!(imported.to_file(), from_readme.to_file());
}

#[test]
fn the_manuals_sni_routing_examples_import_completely() {
    let (code, toml, stderr) = import(&fixture("documentation-sni-routing.cfg"));
    assert_eq!(code, 0, "{stderr}\n{toml}");
    let (code, out) = check(&toml);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("default route bk_default -> backend bk_default"),
        "{out}"
    );
    // The one behaviour it cannot carry over is said: HAProxy relays
    // bytes that are no ClientHello to the default backend.
    assert!(
        toml.contains("HAProxy relays bytes that are no ClientHello to `bk_default`"),
        "{toml}"
    );
}

#[test]
fn unsupported_lines_exit_1_each_named_with_its_line_and_reason() {
    let (code, toml, stderr) = import(&fixture("unsupported.cfg"));
    assert_eq!(code, 1, "{stderr}\n{toml}");
    let named: BTreeMap<usize, String> = toml
        .lines()
        .filter_map(|l| l.strip_prefix("#   line "))
        .filter_map(|l| l.split_once(": "))
        .map(|(n, rest)| (n.parse().unwrap(), rest.to_owned()))
        .collect();
    let not_translated = toml
        .split_once("# NOT TRANSLATED")
        .expect("a NOT TRANSLATED list")
        .1
        .split("\n#\n")
        .next()
        .unwrap();
    let listed: Vec<usize> = not_translated
        .lines()
        .filter_map(|l| l.strip_prefix("#   line "))
        .map(|l| l.split_once(':').unwrap().0.parse().unwrap())
        .collect();
    // tune.bufsize; the defaults' timeouts (nothing translated uses them);
    // req.ssl_ver; -m sub; -m end without a dot; the three use_backend
    // rules (one with -m beg); the backend only those rules name, with its
    // balance first, a check on another port, a host name and backup.
    assert_eq!(
        listed,
        [5, 9, 10, 11, 16, 17, 18, 19, 20, 21, 23, 24, 25, 26],
        "{toml}"
    );
    assert!(named[&17].contains("`-m sub`"), "{}", named[&17]);
    assert!(named[&18].contains("badexample.org"), "{}", named[&18]);
    assert!(named[&21].contains("-m beg"), "{}", named[&21]);
    assert!(named[&16].contains("req.ssl_ver"), "{}", named[&16]);
    // stderr lists the same lines.
    assert!(
        stderr.starts_with("snirelay import-haproxy: 14 line(s) not translated"),
        "{stderr}"
    );
}

#[test]
fn unreadable_files_and_http_configs_exit_2() {
    let (code, toml, stderr) = import(Path::new("/nonexistent/haproxy.cfg"));
    assert_eq!((code, toml.as_str()), (2, ""), "{stderr}");
    let dir = scratch_dir("import-http");
    let path = dir.join("haproxy.cfg");
    std::fs::write(
        &path,
        "defaults\n    mode http\nfrontend web\n    bind :80\n    default_backend app\nbackend app\n    server a 192.0.2.1:80\n",
    )
    .unwrap();
    let (code, toml, stderr) = import(&path);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!((code, toml.as_str()), (2, ""), "{stderr}");
    assert!(
        stderr.contains("no frontend or listen section in mode tcp"),
        "{stderr}"
    );
}

/// The server lines of real edges, with options snirelay has keys for
/// (`maxconn`, `weight`, `backup`, `check inter fall rise`,
/// `send-proxy-v2`, a host name under `resolvers`) and options it has
/// none for: every server is written with its keys, every option left
/// out is named in a note with what follows, a `disabled` server is left
/// out as HAProxy leaves it out, and the translations load.
#[test]
fn every_server_line_survives_with_the_keys_snirelay_has() {
    let (code, toml, stderr) = import(&fixture("edge-server-options.cfg"));
    assert_eq!(code, 0, "{stderr}\n{toml}");
    for want in [
        r#"addresses = [{ address = "10.0.0.11:443", weight = 10, max_connections = 500 }]"#,
        r#"proxy_protocol = "v2""#,
        r#"{ address = "10.0.0.21:443", max_connections = 1000 }, { address = "10.0.0.22:443", backup = true, max_connections = 1000 }"#,
        "`slowstart 30s`: a server that comes back gets its full share at once",
        "`observe layer4`: snirelay marks an address down after `max_fails`",
        "`option tcp-check`: without `tcp-check` rules it is the default check, a TCP connect",
        "`timeout queue 5s`: snirelay has no queue",
        "`balance roundrobin`: one active server: nothing to balance",
    ] {
        assert!(toml.contains(want), "{want}\n{toml}");
    }
    assert_eq!(toml.matches("[backend.api.health]").count(), 1, "{toml}");
    let (code, out) = check(&toml);
    assert_eq!(code, 0, "{out}\n{toml}");

    let (code, toml, stderr) = import(&fixture("edge-resolvers.cfg"));
    assert_eq!(code, 0, "{stderr}\n{toml}");
    for want in [
        r#"resolve = "origin.example.net:443""#,
        r#"resolver = "10.0.0.53:53""#,
        r#"addresses = [{ address = "192.0.2.51:443", max_connections = 200 }]"#,
        "`disabled`: HAProxy sends this server nothing until it is enabled at run time; it is left out of `addresses`",
        "the others (10.0.0.54:53) are not asked",
    ] {
        assert!(toml.contains(want), "{want}\n{toml}");
    }
    let (code, out) = check(&toml);
    assert_eq!(code, 0, "{out}\n{toml}");
}

/// An SNI edge written for HAProxy 3.x: its thread layout (`thread-groups`,
/// `tune.listener.default-shards`, `bind … shards by-thread`) and
/// `timeout client-hs` (2.8+). HAProxy 3.0 accepts the file; the import
/// takes every line (exit 0), each 3.x keyword with what it means here,
/// and the result checks clean.
#[test]
fn an_edge_written_for_haproxy_3_imports_every_line() {
    let text = "global\n    log /dev/log local0\n    maxconn 4000\n    nbthread 2\n    thread-groups 1\n    tune.listener.default-shards by-thread\n\n\
        defaults\n    log global\n    mode tcp\n    timeout connect 5s\n    timeout client 30s\n    timeout client-hs 5s\n    timeout server 30s\n\n\
        frontend tls_edge\n    bind 127.0.0.1:8443 shards by-thread\n    tcp-request inspect-delay 5s\n    tcp-request content accept if { req.ssl_hello_type 1 }\n    use_backend app if { req.ssl_sni -i app.example.com }\n\n\
        backend app\n    server app1 10.0.0.11:443 check\n";
    let dir = scratch_dir("import-haproxy-3");
    let path = dir.join("haproxy.cfg");
    std::fs::write(&path, text).unwrap();
    let haproxy_3 = common::differential::haproxies().pop().unwrap();
    assert_eq!(haproxy_3.version, "3.0");
    let out = Command::new(&haproxy_3.binary)
        .args(["-c", "-f"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}: {}",
        haproxy_3.line,
        String::from_utf8_lossy(&out.stderr)
    );
    let (code, toml, stderr) = import(&path);
    assert_eq!(code, 0, "{stderr}\n{toml}");
    for said in [
        "`thread-groups 1`: snirelay's threads are one group",
        "`tune.listener.default-shards by-thread`: snirelay accepts on one socket per listen address",
        "`timeout client-hs 5s`: the TLS handshake HAProxy terminates",
        "`shards by-thread` needs no key",
    ] {
        assert!(toml.contains(said), "{said:?} missing from\n{toml}");
    }
    let (code, out) = check(&toml);
    assert_eq!(code, 0, "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}
