//! The files in packaging/: the packaged configuration passes `snirelay
//! check`, the committed man pages match the CLI, and the systemd units pass
//! `systemd-analyze verify` and keep their sandbox (`systemd-analyze
//! security --offline`). Needs systemd-analyze (Debian package `systemd`);
//! fails loudly without it.

use std::path::{Path, PathBuf};
use std::process::Command;

use snirelay::config::Config;

include!("support/man_pages.rs");

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn packaged_config_passes_check_and_listens_on_443() {
    let path = root().join("packaging/snirelay.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_snirelay"))
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).as_ref()
        ),
        (Some(0), "ok\n"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let config = Config::load(&path).unwrap();
    let tls = config.listener("tls").unwrap();
    assert!(tls.listen.iter().all(|a| a.port() == 443), "{tls:?}");
    assert!(tls.listen.iter().any(|a| a.is_ipv4()));
    assert!(tls.listen.iter().any(|a| a.is_ipv6()));
    let admin = config
        .admin
        .expect("the package enables the admin listener");
    assert!(
        matches!(admin.listen, snirelay::config::AdminListen::Tcp(a) if a.ip().is_loopback()),
        "{:?}",
        admin.listen
    );
}

#[test]
fn committed_man_pages_match_the_cli() {
    for (name, page) in snirelay_man_pages() {
        let path = root().join("packaging").join(&name);
        let committed = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("{}: {e}; run `cargo run --example manpage`", name));
        assert!(
            committed == page,
            "{name} is stale: run `cargo run --example manpage` and commit packaging/"
        );
    }
}

/// Copies the units into a scratch directory with ExecStart pointing at the
/// binary under test and ExecReload at the helper in packaging/ (the
/// packaged paths do not exist before install).
fn units_for_analysis() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("snirelay-units-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for unit in [
        "snirelay.service",
        "snirelay-tls.socket",
        "snirelay-h3.socket",
    ] {
        let text = std::fs::read_to_string(root().join("packaging").join(unit)).unwrap();
        // The man page is checked by the .deb install, not here.
        let text: String = text
            .lines()
            .filter(|l| !l.starts_with("Documentation=man:"))
            .map(|l| {
                l.replace("/usr/bin/snirelay", env!("CARGO_BIN_EXE_snirelay"))
                    .replace(
                        "/usr/libexec/snirelay/snirelay-reload",
                        &root().join("packaging/snirelay-reload").to_string_lossy(),
                    )
                    + "\n"
            })
            .collect();
        std::fs::write(dir.join(unit), text).unwrap();
    }
    dir
}

fn systemd_analyze(dir: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new("systemd-analyze")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("systemd-analyze is missing: apt-get install systemd");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn units_verify_and_keep_their_sandbox() {
    let dir = units_for_analysis();
    let (code, output) = systemd_analyze(
        &dir,
        &[
            "verify",
            "snirelay.service",
            "snirelay-tls.socket",
            "snirelay-h3.socket",
        ],
    );
    assert_eq!((code, output.as_str()), (0, ""), "{output}");

    let (code, output) = systemd_analyze(&dir, &["security", "--offline=true", "snirelay.service"]);
    assert_eq!(code, 0, "{output}");
    assert!(!output.contains("Unknown"), "{output}");
    let exposure: f64 = output
        .split("Overall exposure level for snirelay.service: ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in:\n{output}"));
    assert!(exposure <= 2.0, "exposure {exposure}:\n{output}");

    // The only capability is binding low ports.
    let service = std::fs::read_to_string(root().join("packaging/snirelay.service")).unwrap();
    for line in [
        "CapabilityBoundingSet=CAP_NET_BIND_SERVICE\n",
        "AmbientCapabilities=CAP_NET_BIND_SERVICE\n",
        "DynamicUser=yes\n",
        "SystemCallFilter=@system-service\n",
    ] {
        assert!(service.contains(line), "missing {line:?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every `snirelay_*` metric the Grafana dashboard queries is one the relay
/// (src/metrics.rs) or the probe (src/probe.rs) exports.
#[test]
fn dashboard_queries_only_exported_metrics() {
    let text = std::fs::read_to_string(root().join("packaging/grafana-dashboard.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    let exported = std::fs::read_to_string(root().join("src/metrics.rs")).unwrap()
        + &std::fs::read_to_string(root().join("src/probe.rs")).unwrap();
    let mut checked = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            for (start, _) in expr.match_indices("snirelay_") {
                let name: String = expr[start..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                let base = ["_total", "_bucket", "_count", "_sum"]
                    .iter()
                    .find_map(|suffix| name.strip_suffix(suffix))
                    .unwrap_or(&name);
                assert!(
                    exported.contains(&format!("\"{base}\"")),
                    "panel {:?} queries {name}, which nothing exports",
                    panel["title"]
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 20, "only {checked} metric references found");
}

/// The nftables ruleset in packaging/cloud-init.yaml parses (`nft -c`, a dry
/// run that changes nothing), drops by default, and opens only port 443 to
/// everyone. Needs nft (Debian package `nftables`); fails loudly without it.
#[test]
fn cloud_init_firewall_parses_and_opens_only_the_relay_port() {
    let yaml = std::fs::read_to_string(root().join("packaging/cloud-init.yaml")).unwrap();
    // The file's content block: the lines after `path: /etc/nftables.conf`'s
    // `content: |`, indented six spaces, up to the next `- path:` entry.
    let start = yaml
        .find("path: /etc/nftables.conf")
        .expect("no nftables file");
    let block = &yaml[start..];
    let block = &block[block.find("content: |\n").unwrap() + "content: |\n".len()..];
    let ruleset: String = block
        .lines()
        .take_while(|l| l.is_empty() || l.starts_with("      "))
        .map(|l| format!("{}\n", l.get(6..).unwrap_or("")))
        .collect();
    assert!(ruleset.contains("policy drop;"), "{ruleset}");
    let accepts: Vec<&str> = ruleset
        .lines()
        .map(str::trim)
        .filter(|l| l.contains("dport") && l.ends_with("accept"))
        .collect();
    assert_eq!(
        accepts,
        [
            "tcp dport 443 accept",
            "ip saddr 198.51.100.0/24 tcp dport 22 accept"
        ]
    );

    let path = std::env::temp_dir().join(format!("snirelay-nft-{}.conf", std::process::id()));
    std::fs::write(&path, &ruleset).unwrap();
    let out = Command::new("nft")
        .arg("-c")
        .arg("-f")
        .arg(&path)
        .output()
        .expect("nft is missing: apt-get install nftables");
    std::fs::remove_file(&path).unwrap();
    assert!(
        out.status.success(),
        "nft -c rejects the ruleset:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The binary upgrade as the package ships it: the unit lets the new process
/// become its main one (NotifyAccess=all, READY=1 with MAINPID), ExecReload
/// is the helper that starts it inside the unit, the takeover socket sits in
/// the unit's RuntimeDirectory (kept: the unit stays active through the
/// upgrade), and the package installs both scripts where the unit and the
/// postinst call them. The scripts parse (`sh -n`). The booted proof is
/// scripts/field-test.sh.
#[test]
fn the_shipped_upgrade_procedure_is_wired_up() {
    let service = std::fs::read_to_string(root().join("packaging/snirelay.service")).unwrap();
    for line in [
        "Type=notify\n",
        "NotifyAccess=all\n",
        "ExecReload=/usr/libexec/snirelay/snirelay-reload $MAINPID\n",
        "RuntimeDirectory=snirelay\n",
    ] {
        assert!(service.contains(line), "missing {line:?}");
    }
    let exec_start = service
        .lines()
        .find(|l| l.starts_with("ExecStart="))
        .unwrap();
    assert!(
        exec_start.ends_with("--takeover /run/snirelay/takeover.sock"),
        "{exec_start}"
    );

    let cargo = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    for asset in [
        r#"["packaging/snirelay-upgrade", "usr/sbin/", "755"]"#,
        r#"["packaging/snirelay-reload", "usr/libexec/snirelay/", "755"]"#,
        "restart-after-upgrade = false, stop-on-upgrade = false",
        r#"conf-files = ["/etc/snirelay/snirelay.toml"]"#,
    ] {
        assert!(cargo.contains(asset), "Cargo.toml lacks {asset}");
    }
    // Every man page the CLI has is in the package.
    for (name, _) in snirelay_man_pages() {
        let asset = format!(r#"["packaging/{name}", "usr/share/man/man1/", "644"]"#);
        assert!(cargo.contains(&asset), "Cargo.toml lacks {asset}");
    }

    let postinst = std::fs::read_to_string(root().join("packaging/debian/postinst")).unwrap();
    assert!(postinst.contains("\n#DEBHELPER#\n"), "{postinst}");
    assert!(postinst.contains("snirelay-upgrade"), "{postinst}");
    // Purge takes the state directory the unit declares with it.
    let unit = std::fs::read_to_string(root().join("packaging/snirelay.service")).unwrap();
    assert!(unit.contains("\nStateDirectory=snirelay\n"), "{unit}");
    let postrm = std::fs::read_to_string(root().join("packaging/debian/postrm")).unwrap();
    assert!(postrm.contains("\n#DEBHELPER#\n"), "{postrm}");
    assert!(
        postrm.contains("rm -rf /var/lib/private/snirelay /var/lib/snirelay"),
        "{postrm}"
    );
    let reload = std::fs::read_to_string(root().join("packaging/snirelay-reload")).unwrap();
    assert!(reload.contains("request=/run/snirelay/upgrade\n"));
    let upgrade = std::fs::read_to_string(root().join("packaging/snirelay-upgrade")).unwrap();
    assert!(upgrade.contains(": >/run/snirelay/upgrade\n"));

    for script in [
        "packaging/snirelay-reload",
        "packaging/snirelay-upgrade",
        "packaging/debian/postinst",
        "packaging/debian/postrm",
    ] {
        let status = Command::new("sh")
            .arg("-n")
            .arg(root().join(script))
            .status()
            .unwrap();
        assert!(status.success(), "{script} does not parse");
    }
}

/// The cloud-init example describes the unit as it is, and its runcmd waits
/// for readiness with a bound.
#[test]
fn cloud_init_matches_the_unit() {
    let yaml = std::fs::read_to_string(root().join("packaging/cloud-init.yaml")).unwrap();
    assert!(
        !yaml.contains("Type=exec"),
        "stale unit type in cloud-init.yaml"
    );
    assert!(yaml.starts_with("#cloud-config\n"));
    for needle in [
        "SNIRELAY_DEB_URL",
        "SNIRELAY_DEB_SHA256",
        "--force-confold",
        "for i in $(seq 30)",
    ] {
        assert!(yaml.contains(needle), "cloud-init.yaml lacks {needle}");
    }
}

/// The container image runs the static binary on an empty base.
#[test]
fn dockerfile_runs_the_static_binary_from_scratch() {
    let dockerfile = std::fs::read_to_string(root().join("packaging/Dockerfile")).unwrap();
    assert!(
        dockerfile.contains("target-feature=+crt-static"),
        "{dockerfile}"
    );
    assert!(dockerfile.contains("\nFROM scratch\n"), "{dockerfile}");
}
