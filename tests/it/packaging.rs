//! The files in packaging/: the packaged configuration passes `snirelay
//! check`, the committed man pages match the CLI, and the systemd units pass
//! `systemd-analyze verify` and keep their sandbox (`systemd-analyze
//! security --offline`). CI's package check (scripts/package-check.sh)
//! runs docs/operations.md's install commands word for word and expects every asset;
//! the field test's mirror comes from the machine's apt sources and no
//! packaging script names a host. The benchmark tools (`loadbench`,
//! `quicbench`) answer `--help`. Needs systemd-analyze (Debian package
//! `systemd`) and python3; fails loudly without them.

use std::path::{Path, PathBuf};
use std::process::Command;

use snirelay::config::Config;

include!("common/man_pages.rs");
include!("common/command_reference.rs");

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

/// docs/commands.md is the command reference generated from the same clap
/// definition, and names every subcommand at any depth (`probe`, `ctl
/// connections`, `ctl close` included) and every long option.
#[test]
fn committed_command_reference_matches_the_cli() {
    use clap::CommandFactory;
    let generated = snirelay_command_reference();
    let committed =
        std::fs::read_to_string(root().join(COMMAND_REFERENCE_PATH)).unwrap_or_else(|e| {
            panic!("{COMMAND_REFERENCE_PATH}: {e}; run `cargo run --example manpage`")
        });
    assert!(
        committed == generated,
        "{COMMAND_REFERENCE_PATH} is stale: run `cargo run --example manpage` and commit it"
    );
    fn walk(command: &clap::Command, path: &str, text: &str) -> usize {
        assert!(
            text.contains(&format!("# {path}\n")),
            "no heading for `{path}`"
        );
        for arg in command.get_arguments().filter_map(|a| a.get_long()) {
            assert!(
                text.contains(&format!("`--{arg}")),
                "`{path}` lacks `--{arg}`"
            );
        }
        1 + command
            .get_subcommands()
            .map(|sub| walk(sub, &format!("{path} {}", sub.get_name()), text))
            .sum::<usize>()
    }
    let commands = walk(&snirelay::cli::Cli::command(), "snirelay", &committed);
    assert!(commands >= 12, "only {commands} commands documented");
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
/// (src/metrics/, whose families.rs declares every family) or the probe
/// (src/cli/probe.rs) exports; tests/it/metrics_catalog.rs checks the
/// other way (every family plotted).
#[test]
fn dashboard_queries_only_exported_metrics() {
    let text = std::fs::read_to_string(root().join("packaging/grafana-dashboard.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut exported = std::fs::read_to_string(root().join("src/cli/probe.rs")).unwrap();
    for entry in std::fs::read_dir(root().join("src/metrics")).unwrap() {
        exported += &std::fs::read_to_string(entry.unwrap().path()).unwrap();
    }
    let mut checked = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        // Rows group panels and query nothing.
        for target in panel["targets"].as_array().into_iter().flatten() {
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
                    exported.contains(&format!("\"{base}\""))
                        || exported.contains(&format!("\"{name}\"")),
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

/// Shell commands of `text` as one line each: continuation lines joined,
/// comments after a command dropped, runs of blanks made one space.
fn shell_commands(text: &str) -> Vec<String> {
    let mut commands = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let line = line.split(" #").next().unwrap_or("").trim();
        if line.starts_with('#') {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => current.push_str(&format!("{part} ")),
            None => {
                current.push_str(line);
                let command = current.split_whitespace().collect::<Vec<_>>().join(" ");
                if !command.is_empty() {
                    commands.push(command);
                }
                current.clear();
            }
        }
    }
    commands
}

/// The commands of docs/operations.md's "## Install" section (its first
/// `sh` block).
fn readme_install_commands() -> Vec<String> {
    let readme = std::fs::read_to_string(root().join("docs/operations.md")).unwrap();
    let section = readme
        .split("\n## Install\n")
        .nth(1)
        .expect("docs/operations.md has an Install section");
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .expect("the Install section starts with a sh block");
    shell_commands(block)
}

/// CI builds the package exactly as docs/operations.md tells an operator
/// to: scripts/package-check.sh runs its build and cargo-deb commands word
/// for word, .ci/run runs it after the tests, and the cargo-deb it
/// installs is the one .ci/install-deps pins.
#[test]
fn ci_builds_the_package_as_readme_says() {
    let readme = readme_install_commands();
    let script =
        shell_commands(&std::fs::read_to_string(root().join("scripts/package-check.sh")).unwrap());
    for prefix in ["RUSTFLAGS=", "cargo deb "] {
        let command = readme
            .iter()
            .find(|c| c.starts_with(prefix))
            .unwrap_or_else(|| {
                panic!("docs/operations.md's Install has no `{prefix}` command: {readme:?}")
            });
        // The same words, not a longer command that starts with them.
        let runs = script.iter().any(|line| {
            line.match_indices(command.as_str()).any(|(at, _)| {
                let rest = &line[at + command.len()..];
                rest.is_empty() || rest.starts_with(')')
            })
        });
        assert!(runs, "scripts/package-check.sh does not run `{command}`");
    }

    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    let tests_at = ci
        .find("\ncargo test --locked\n")
        .expect(".ci/run runs the tests");
    let check_at = ci
        .find("\nscripts/package-check.sh\n")
        .expect(".ci/run runs scripts/package-check.sh");
    assert!(
        check_at > tests_at,
        "the package check runs after the tests"
    );

    let deps = std::fs::read_to_string(root().join(".ci/install-deps")).unwrap();
    let pinned = deps
        .lines()
        .find_map(|l| l.strip_prefix("cargo_deb_version="))
        .expect(".ci/install-deps pins cargo-deb");
    let install = format!("cargo install --locked cargo-deb --version {pinned}");
    assert!(
        readme.contains(&install),
        "docs/operations.md's Install does not say `{install}`: {readme:?}"
    );
}

/// The files scripts/package-check.sh requires in the .deb (EXPECTED_FILES)
/// are the package's assets in Cargo.toml, the service unit and the
/// copyright file cargo-deb adds, and docs/operations.md's count of them is right. The
/// .deb itself is compared with the list by the script (in CI).
#[test]
fn package_check_expects_every_asset() {
    let cargo: toml::Value =
        toml::from_str(&std::fs::read_to_string(root().join("Cargo.toml")).unwrap()).unwrap();
    let deb = &cargo["package"]["metadata"]["deb"];
    let mut from_cargo: Vec<String> = deb["assets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|asset| {
            let source = asset[0].as_str().unwrap();
            let dest = asset[1].as_str().unwrap();
            let mut path = format!("./{dest}");
            if dest.ends_with('/') {
                path.push_str(Path::new(source).file_name().unwrap().to_str().unwrap());
            }
            if dest.starts_with("usr/share/man/") {
                path.push_str(".gz"); // cargo-deb compresses man pages
            }
            path
        })
        .collect();
    for unit in deb["systemd-units"].as_array().unwrap() {
        if unit.get("unit-scripts").is_some() {
            let name = unit["unit-name"].as_str().unwrap();
            from_cargo.push(format!("./usr/lib/systemd/system/{name}.service"));
        }
    }
    from_cargo.push("./usr/share/doc/snirelay/copyright".into());
    from_cargo.sort();

    let script = std::fs::read_to_string(root().join("scripts/package-check.sh")).unwrap();
    let list = script
        .split("EXPECTED_FILES=\"\\\n")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .expect("scripts/package-check.sh has EXPECTED_FILES");
    let expected: Vec<String> = list.lines().map(str::to_owned).collect();
    assert_eq!(expected, from_cargo);
    // README's links into docs/ resolve in the installed package too.
    for page in std::fs::read_dir(root().join("docs")).unwrap() {
        let name = page.unwrap().file_name().into_string().unwrap();
        let installed = format!("./usr/share/doc/snirelay/docs/{name}");
        assert!(
            !name.ends_with(".md") || expected.contains(&installed),
            "docs/{name} is not in the package (Cargo.toml's deb assets)"
        );
    }

    let readme = std::fs::read_to_string(root().join("docs/operations.md")).unwrap();
    let count = format!("lists exactly {} files", expected.len());
    assert!(
        readme.contains(&count),
        "docs/operations.md does not say `{count}`"
    );
}

/// The field test's Debian mirror comes from the machine's apt sources
/// (scripts/field/apt-mirror.py), in both formats, in apt's file order,
/// skipping deb-src, comments and disabled stanzas; with none for this
/// release, or off Debian, it prints nothing and exits 1. Needs python3.
#[test]
fn field_test_mirror_comes_from_the_apt_sources() {
    let tree = std::env::temp_dir().join(format!("snirelay-apt-{}", std::process::id()));
    let lists = tree.join("etc/apt/sources.list.d");
    std::fs::create_dir_all(&lists).unwrap();
    let mirror = |tree: &Path| {
        let out = Command::new("python3")
            .arg(root().join("scripts/field/apt-mirror.py"))
            .arg(tree)
            .output()
            .expect("python3 is missing: apt-get install python3");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        )
    };
    let write = |path: &str, text: &str| std::fs::write(tree.join(path), text).unwrap();
    write(
        "etc/os-release",
        "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\nVERSION_CODENAME=bookworm\n",
    );
    write(
        "etc/apt/sources.list",
        "# deb http://commented.example/debian bookworm main\n\
         deb-src http://source.example/debian bookworm main\n\
         deb http://other.example/debian trixie main\n",
    );
    write(
        "etc/apt/sources.list.d/b.list",
        "deb [arch=amd64 signed-by=/k.gpg] http://one-line.example/debian/ bookworm main\n",
    );
    write(
        "etc/apt/sources.list.d/a.sources",
        "Types: deb\nURIs: http://disabled.example/debian\nSuites: bookworm\nEnabled: no\n\n\
         Types: deb-src deb\nURIs: https://deb822.example/debian/\nSuites: bookworm-updates\n bookworm\nComponents: main\n",
    );
    assert_eq!(
        mirror(&tree),
        (Some(0), "https://deb822.example/debian".into())
    );
    std::fs::remove_file(tree.join("etc/apt/sources.list.d/a.sources")).unwrap();
    assert_eq!(
        mirror(&tree),
        (Some(0), "http://one-line.example/debian".into())
    );
    std::fs::remove_file(tree.join("etc/apt/sources.list.d/b.list")).unwrap();
    assert_eq!(mirror(&tree), (Some(1), String::new()));
    write(
        "etc/apt/sources.list.d/c.list",
        "deb http://one-line.example/debian bookworm main\n",
    );
    write("etc/os-release", "ID=ubuntu\nVERSION_CODENAME=bookworm\n");
    assert_eq!(mirror(&tree), (Some(1), String::new()));
    std::fs::remove_dir_all(&tree).unwrap();
}

/// The packaging and field-test scripts name no host: every URL in them is
/// an IP literal (the guest's view of the host, loopback) or built at run
/// time, so no mirror or registry is written into the repository.
#[test]
fn packaging_scripts_name_no_host() {
    for file in [
        ".ci/run",
        ".ci/install-deps",
        "scripts/package-check.sh",
        "scripts/field-test.sh",
        "scripts/field/guest.sh",
        "scripts/field/loader.py",
        "scripts/field/apt-mirror.py",
        "packaging/cloud-init.yaml",
        "packaging/Dockerfile",
    ] {
        let text = std::fs::read_to_string(root().join(file)).unwrap();
        for (at, _) in text.match_indices("://") {
            let host = &text[at + 3..];
            let first = host.chars().next().unwrap_or(' ');
            assert!(
                !first.is_ascii_alphabetic(),
                "{file} names a host: {}",
                host.lines().next().unwrap()
            );
        }
    }
}

/// An example built next to this test binary: target/<profile>/examples/NAME
/// (this binary is target/<profile>/deps/it-HASH). `cargo test`
/// builds the examples; `cargo test --test it` alone does not.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(Path::parent).unwrap();
    let path = profile.join("examples").join(name);
    assert!(
        path.exists(),
        "{}: not built; run `cargo build --examples` (plain `cargo test` builds it)",
        path.display()
    );
    path
}

#[test]
fn benchmark_tools_answer_help() {
    for (name, option) in [("loadbench", "--haproxy"), ("quicbench", "--flows")] {
        let out = Command::new(example(name)).arg("--help").output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{name} --help: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains(&format!("Usage: {name}")),
            "{name} --help:\n{text}"
        );
        assert!(
            text.contains(option),
            "{name} --help names no {option}:\n{text}"
        );
    }
}
