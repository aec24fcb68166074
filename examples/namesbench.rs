//! Names benchmark: what many SNI names cost snirelay, HAProxy and nginx,
//! side by side (`scripts/loadbench.sh --only names`).
//!
//! For N names (`--names`, 100,000), all exact or with every tenth a
//! `*.` wildcard, starts each proxy on one route to one backend and reads
//! its RSS from /proc once it accepts connections (and a settling second
//! later): snirelay with the names inline (`sni = [...]`) and in an
//! `sni_file`, HAProxy with `req.ssl_sni -f names.lst` (the wildcards as
//! `-m end` suffixes in a second file). Each is also started on a
//! one-name configuration, so the table gives the RSS above it, the bytes
//! per name and its ratio to HAProxy's; and how long start (spawn to
//! accepting), a reload of the unchanged file (SIGHUP to `reload applied`;
//! snirelay only), `snirelay check` and `haproxy -c` take. Medians of
//! `--runs` (5).
//!
//! With `--sozu PATH` (sozu 2.3, whose TCP listener routes on the preread
//! SNI), sozu joins the table: one frontend per name in one cluster (its
//! configuration has no file of names; `*.` patterns as they are), RSS of
//! its main process and its worker together (both hold the routes; the
//! split is printed below the table), start, a reload of the unchanged
//! file (`sozu reload`, which returns once the worker has it) and
//! `sozu config check`, medians of `--sozu-runs` (1: a start of 100,000
//! frontends takes tens of seconds).
//!
//! With `--nginx NAME=PATH` (repeatable: Debian 13's nginx 1.26 and
//! Debian 12's 1.22), each nginx joins the table as its stream module runs
//! it ([`nginx`]): `ssl_preread` and a `map` with `hostnames` and the names
//! in an included file (`*.` patterns as they are), one process; its RSS,
//! start and `nginx -t`, its version line printed above the table (its
//! reload is not timed, as HAProxy's is not).
//!
//! Then the reload series: snirelay on the inline configuration, RSS after
//! each of `--reloads` (20) SIGHUPs of the unchanged file, then after each
//! of as many alternating between two different sets of N names
//! (`--skip-table` runs only this series; `--threads` sets the relay's
//! `global.threads`, 1 by default).
//!
//! Not here: traffic (loadbench's other phases); the names are never
//! looked up, only held.

#[path = "support/nginx.rs"]
mod nginx;
// Only `rss_kib` and `median` are read here.
#[allow(dead_code)]
#[path = "support/proc.rs"]
mod proc;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use proc::{free_port, median, rss_kib, sozu_worker};

struct Args {
    relay: PathBuf,
    haproxy: Option<PathBuf>,
    names: usize,
    runs: usize,
    reloads: usize,
    /// Only the reload series (`--skip-table`).
    skip_table: bool,
    /// The relay's `global.threads` (`--threads`, 1).
    threads: usize,
    /// A sozu binary (`--sozu`), and its runs (`--sozu-runs`, 1).
    sozu: Option<PathBuf>,
    sozu_runs: usize,
    /// nginx builds (`--nginx NAME=PATH`, repeatable): name, binary and
    /// the version line it answered.
    nginx: Vec<(String, PathBuf, String)>,
}

fn args() -> Args {
    let mut a = Args {
        relay: PathBuf::from("target/release/snirelay"),
        haproxy: Some(PathBuf::from("/usr/sbin/haproxy")),
        names: 100_000,
        runs: 5,
        reloads: 20,
        skip_table: false,
        threads: 1,
        sozu: None,
        sozu_runs: 1,
        nginx: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--relay" => a.relay = value().into(),
            "--haproxy" => {
                a.haproxy = Some(value()).filter(|v| v != "none").map(PathBuf::from);
            }
            "--names" => a.names = value().parse().expect("--names N"),
            "--runs" => a.runs = value().parse().expect("--runs N"),
            "--reloads" => a.reloads = value().parse().expect("--reloads N"),
            "--skip-table" => a.skip_table = true,
            "--threads" => a.threads = value().parse().expect("--threads N"),
            "--sozu" => a.sozu = Some(value().into()),
            "--sozu-runs" => a.sozu_runs = value().parse().expect("--sozu-runs N"),
            "--nginx" => a.nginx.push(nginx_build(&value())),
            // loadbench.sh passes its own flags through: `--only names`.
            "--only" => {
                value();
            }
            "--help" => {
                println!(
                    "namesbench [--relay PATH] [--haproxy PATH|none] [--sozu PATH] [--sozu-runs 1] [--nginx NAME=PATH]... [--names 100000] [--runs 5] [--reloads 20] [--skip-table] [--threads 1]"
                );
                std::process::exit(0);
            }
            other => panic!("unknown flag {other}"),
        }
    }
    // The proxies run in the scratch directory (relative name files).
    a.relay = std::fs::canonicalize(&a.relay).expect("--relay names no file");
    if let Some(sozu) = &a.sozu {
        a.sozu = Some(std::fs::canonicalize(sozu).expect("--sozu names no file"));
    }
    a
}

/// `NAME=PATH` of an nginx build, with the version it answers (`-v`, on
/// stderr); a binary that does not answer stops the bench.
fn nginx_build(spec: &str) -> (String, PathBuf, String) {
    let (name, path) = spec.split_once('=').expect("--nginx NAME=PATH");
    let path = std::fs::canonicalize(path).unwrap_or_else(|e| {
        panic!("--nginx {path}: {e} (scripts/loadbench.sh installs nginx 1.26 with .ci/install-trixie-tools)")
    });
    let out = Command::new(&path).arg("-v").output().expect("nginx -v");
    let version = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    assert!(
        out.status.success(),
        "{} -v failed: {version}",
        path.display()
    );
    (name.to_owned(), path, version)
}

/// N names: `site{i}.{set}.example.com`, and with `wild`, every tenth
/// `*.w{i}.{set}.example.net` instead.
fn names(n: usize, wild: bool, set: &str) -> Vec<String> {
    (0..n)
        .map(|i| {
            if wild && i % 10 == 0 {
                format!("*.w{i}.{set}.example.net")
            } else {
                format!("site{i}.{set}.example.com")
            }
        })
        .collect()
}

/// How a proxy is given its names.
#[derive(Clone, Copy, PartialEq)]
enum Form {
    Inline,
    File,
    Haproxy,
    Sozu,
    /// The nth `--nginx` build, its names in a `map` with `hostnames`.
    Nginx(usize),
}

impl Form {
    fn label(self, args: &Args) -> String {
        match self {
            Form::Inline => "snirelay sni = [...]".to_owned(),
            Form::File => "snirelay sni_file".to_owned(),
            Form::Haproxy => "haproxy -f".to_owned(),
            Form::Sozu => "sozu frontends".to_owned(),
            Form::Nginx(i) => format!("{} map hostnames", args.nginx[i].0),
        }
    }
}

/// Writes the configuration (and name files) for `names` into `dir`;
/// returns the configuration's path.
fn write_config(args: &Args, dir: &Path, form: Form, names: &[String], port: u16) -> PathBuf {
    let threads = args.threads;
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    match form {
        Form::Inline | Form::File => {
            let sni = if form == Form::Inline {
                let quoted: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
                format!("sni = [{}]", quoted.join(", "))
            } else {
                write("names.lst", &(names.join("\n") + "\n"));
                "sni_file = \"names.lst\"".to_owned()
            };
            write(
                "snirelay.toml",
                &format!(
                    "[global]\nthreads = {threads}\n\n[[listener]]\nname = \"bench\"\nlisten = [\"127.0.0.1:{port}\"]\n\n\
                     [[route]]\nname = \"names\"\n{sni}\nbackend = \"b\"\n\n[backend.b]\naddresses = [\"127.0.0.1:9\"]\n"
                ),
            )
        }
        Form::Sozu => {
            let frontends: Vec<String> = names
                .iter()
                .map(|n| format!("  {{ address = \"127.0.0.1:{port}\", hostname = \"{n}\" }}"))
                .collect();
            write(
                "sozu.toml",
                &format!(
                    "command_socket = \"{}\"\nworker_count = 1\nlog_level = \"error\"\nlog_target = \"stdout\"\n\n\
                     [[listeners]]\nprotocol = \"tcp\"\naddress = \"127.0.0.1:{port}\"\n\n\
                     [clusters.names]\nprotocol = \"tcp\"\nfrontends = [\n{}\n]\nbackends = [ {{ address = \"127.0.0.1:9\" }} ]\n",
                    dir.join("sozu.sock").display(),
                    frontends.join(",\n")
                ),
            )
        }
        Form::Nginx(i) => {
            // `*.x` as nginx's `hostnames` map says it: names below `x`.
            let entries: String = names
                .iter()
                .map(|n| format!("{n} 127.0.0.1:9;\n"))
                .collect();
            let map = write("names.map", &entries);
            let prefix = dir.join("nginx");
            std::fs::create_dir_all(prefix.join("logs")).unwrap();
            let config = nginx::StreamConfig {
                bin: &args.nginx[i].1,
                prefix: &prefix,
                port,
                sockets: 1024,
                // A map of 100,000 names needs a hash that large, or nginx
                // refuses to start ("could not build map_hash").
                stream_head: "    map_hash_max_size 262144;\n    map_hash_bucket_size 128;\n",
                map_body: &format!(
                    "        hostnames;\n        include {};\n        default 127.0.0.1:9;\n",
                    map.display()
                ),
            }
            .render();
            write("nginx.conf", &config)
        }
        Form::Haproxy => {
            let (below, exact): (Vec<&String>, Vec<&String>) =
                names.iter().partition(|n| n.starts_with("*."));
            let lines = |v: &[&String], strip: usize| {
                v.iter().map(|n| &n[strip..]).collect::<Vec<_>>().join("\n") + "\n"
            };
            write("names.lst", &lines(&exact, 0));
            let mut acl = String::from("    acl named req.ssl_sni -f names.lst\n");
            if !below.is_empty() {
                // `*.x` as HAProxy says it: names ending in `.x`.
                write("below.lst", &lines(&below, 1));
                acl.push_str("    acl named req.ssl_sni -m end -f below.lst\n");
            }
            write(
                "haproxy.cfg",
                &format!(
                    "global\n    nbthread 1\n\ndefaults\n    mode tcp\n    timeout connect 5s\n    timeout client 5m\n    timeout server 5m\n\n\
                     frontend bench\n    bind 127.0.0.1:{port}\n    tcp-request inspect-delay 5s\n    tcp-request content accept if {{ req.ssl_hello_type 1 }}\n\
                     {acl}    use_backend b if named\n\nbackend b\n    server s1 127.0.0.1:9\n"
                ),
            )
        }
    }
}

/// A started proxy: the child, the time from spawn to accepting, and its
/// RSS once accepting and a settling second later.
struct Started {
    child: Child,
    ready: Duration,
    rss_kib: u64,
    /// sozu's worker and its share of `rss_kib`.
    worker: Option<(u32, u64)>,
}

fn start(args: &Args, dir: &Path, form: Form, names: &[String]) -> Started {
    let port = free_port();
    let config = write_config(args, dir, form, names, port);
    let log = std::fs::File::create(dir.join("proxy.log")).unwrap();
    let mut command = match form {
        Form::Haproxy => {
            let mut c = Command::new(args.haproxy.as_ref().unwrap());
            c.arg("-db").arg("-f").arg(&config);
            c
        }
        Form::Nginx(i) => {
            let mut c = Command::new(&args.nginx[i].1);
            nginx::with_arguments(&mut c, &dir.join("nginx"), &config);
            c
        }
        Form::Sozu => {
            let _ = std::fs::remove_file(dir.join("sozu.sock"));
            let mut c = Command::new(args.sozu.as_ref().unwrap());
            c.arg("start").arg("-c").arg(&config);
            c
        }
        Form::Inline | Form::File => {
            let mut c = Command::new(&args.relay);
            c.args(["run", "--config"])
                .arg(&config)
                .args(["--log-level", "info,snirelay::access=off"]);
            c
        }
    };
    let t0 = Instant::now();
    let child = command
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("cannot start the proxy");
    // Held from here, so that a proxy that never gets ready is ended too.
    let mut started = Started {
        child,
        ready: Duration::ZERO,
        rss_kib: 0,
        worker: None,
    };
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    // sozu loads 100,000 frontends in about 45 s here.
    let bound = Duration::from_secs(if form == Form::Sozu { 600 } else { 60 });
    while TcpStream::connect(addr).is_err() {
        assert!(t0.elapsed() < bound, "{} did not start", form.label(args));
        std::thread::sleep(Duration::from_millis(2));
    }
    started.ready = t0.elapsed();
    std::thread::sleep(Duration::from_secs(1));
    let main = started.child.id();
    if form == Form::Sozu {
        let pid = sozu_worker(main).expect("sozu has no worker");
        started.worker = Some((pid, rss_kib(pid)));
    }
    started.rss_kib = rss_kib(main) + started.worker.map_or(0, |(_, kib)| kib);
    started
}

/// A proxy ends with its `Started`, a panicking run's included (a sozu
/// left behind would hold its port and 470 MB).
impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some((worker, _)) = self.worker {
            // sozu's worker, found at start: ended by its pid in case it
            // outlives its main process.
            let _ = Command::new("kill")
                .args(["-KILL", &worker.to_string()])
                .status();
        }
    }
}

/// How long a `check` (`snirelay check`, `haproxy -c`, `sozu config
/// check`) of the last configuration written to `dir` takes.
fn check_time(args: &Args, dir: &Path, form: Form) -> Duration {
    let mut command = match form {
        Form::Haproxy => {
            let mut c = Command::new(args.haproxy.as_ref().unwrap());
            c.arg("-c").arg("-q").arg("-f").arg(dir.join("haproxy.cfg"));
            c
        }
        Form::Nginx(i) => {
            let mut c = Command::new(&args.nginx[i].1);
            c.args(["-t", "-q"]);
            nginx::with_arguments(&mut c, &dir.join("nginx"), &dir.join("nginx.conf"));
            c
        }
        Form::Sozu => {
            let mut c = Command::new(args.sozu.as_ref().unwrap());
            c.args(["config", "-c"])
                .arg(dir.join("sozu.toml"))
                .arg("check");
            c
        }
        Form::Inline | Form::File => {
            let mut c = Command::new(&args.relay);
            c.args(["check", "--config"]).arg(dir.join("snirelay.toml"));
            c
        }
    };
    let t0 = Instant::now();
    let out = command.current_dir(dir).output().unwrap();
    assert!(
        out.status.success(),
        "{}: check failed: {out:?}",
        form.label(args)
    );
    t0.elapsed()
}

/// Lines of the relay's log (in `dir`) that end a reload.
fn reloads_logged(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("proxy.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("reload applied") || l.contains("reload rejected"))
        .count()
}

/// Sends SIGHUP and waits (bounded) for the reload's line; the time it took.
fn reload(relay: &Started, dir: &Path, done_before: usize) -> Duration {
    let t0 = Instant::now();
    let ok = Command::new("kill")
        .args(["-HUP", &relay.child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    while reloads_logged(dir) <= done_before {
        assert!(t0.elapsed() < Duration::from_secs(60), "reload not logged");
        std::thread::sleep(Duration::from_millis(2));
    }
    let took = t0.elapsed();
    let log = std::fs::read_to_string(dir.join("proxy.log")).unwrap();
    assert!(
        !log.contains("reload rejected"),
        "a reload was rejected:\n{log}"
    );
    took
}

/// `sozu reload` of its unchanged file: the time until it answers (the
/// worker has applied the difference), or why it failed and when.
fn sozu_reload(args: &Args, dir: &Path) -> Result<Duration, String> {
    let t0 = Instant::now();
    let out = Command::new(args.sozu.as_ref().unwrap())
        .args(["-c"])
        .arg(dir.join("sozu.toml"))
        .args(["reload", "-t", "0"])
        .current_dir(dir)
        .output()
        .unwrap();
    if out.status.success() {
        Ok(t0.elapsed())
    } else {
        let why = String::from_utf8_lossy(&out.stderr);
        let why = why.split_whitespace().collect::<Vec<_>>().join(" ");
        Err(format!(
            "failed after {:.1} s: {why}",
            t0.elapsed().as_secs_f64()
        ))
    }
}

fn mb(kib: f64) -> f64 {
    kib / 1024.0
}

fn main() {
    let args = args();
    let dir = std::env::temp_dir().join(format!("snirelay-namesbench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut forms = vec![Form::Inline, Form::File];
    if args.haproxy.is_some() {
        forms.push(Form::Haproxy);
    }
    if args.sozu.is_some() {
        forms.push(Form::Sozu);
    }
    forms.extend((0..args.nginx.len()).map(Form::Nginx));
    println!(
        "namesbench: {} names, {} run(s), medians; RSS once accepting + 1 s",
        args.names, args.runs
    );
    for (name, bin, version) in &args.nginx {
        println!("{name}: {version} ({})", bin.display());
    }
    println!(
        "| shape | form | RSS 1 name | RSS N names | above 1 name | B/name | ratio | start | reload | check |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for wild in [false, true].into_iter().filter(|_| !args.skip_table) {
        let shape = if wild { "10 % `*.`" } else { "exact" };
        let many = names(args.names, wild, "a");
        let one = names(1, false, "a");
        let mut per_name_haproxy = None;
        let mut rows = Vec::new();
        let mut notes = Vec::new();
        for &form in &forms {
            let (mut base, mut full, mut ready, mut check) = (vec![], vec![], vec![], vec![]);
            let mut reloads = vec![];
            let mut workers = vec![];
            let mut failed_reloads = 0;
            let runs = if form == Form::Sozu {
                args.sozu_runs
            } else {
                args.runs
            };
            for _ in 0..runs {
                let s = start(&args, &dir, form, &one);
                base.push(s.rss_kib as f64);
                drop(s);
                let s = start(&args, &dir, form, &many);
                full.push(s.rss_kib as f64);
                ready.push(s.ready.as_secs_f64());
                match form {
                    // HAProxy's and nginx's reloads are not timed here.
                    Form::Haproxy | Form::Nginx(_) => {}
                    Form::Sozu => {
                        workers.extend(s.worker.map(|(_, kib)| kib as f64));
                        match sozu_reload(&args, &dir) {
                            Ok(took) => reloads.push(took.as_secs_f64()),
                            Err(why) => {
                                failed_reloads += 1;
                                notes.push(format!("{shape}: sozu reload {why}"));
                            }
                        }
                    }
                    Form::Inline | Form::File => reloads.push(reload(&s, &dir, 0).as_secs_f64()),
                }
                drop(s);
                check.push(check_time(&args, &dir, form).as_secs_f64());
            }
            let (base, full) = (median(&base), median(&full));
            let per_name = (full - base) * 1024.0 / args.names as f64;
            if !workers.is_empty() {
                let worker = median(&workers);
                notes.push(format!(
                    "{shape}: sozu's {:.1} MB with {} names is its main process's {:.1} MB and its worker's {:.1} MB",
                    mb(full),
                    args.names,
                    mb(full - worker),
                    mb(worker)
                ));
            }
            if form == Form::Haproxy {
                per_name_haproxy = Some(per_name);
            }
            let reloaded = match (reloads.is_empty(), failed_reloads) {
                (true, 0) => "-".to_owned(),
                (true, _) => "failed".to_owned(),
                (false, 0) => format!("{:.3} s", median(&reloads)),
                (false, n) => format!("{:.3} s ({n} failed)", median(&reloads)),
            };
            rows.push((
                form,
                base,
                full,
                per_name,
                median(&ready),
                reloaded,
                median(&check),
            ));
        }
        for (form, base, full, per_name, ready, reloaded, check) in rows {
            let ratio = per_name_haproxy.map_or("-".to_owned(), |h| format!("{:.2}", per_name / h));
            println!(
                "| {shape} | {} | {:.1} MB | {:.1} MB | {:.1} MB | {per_name:.0} | {ratio} | {ready:.3} s | {reloaded} | {check:.3} s |",
                form.label(&args),
                mb(base),
                mb(full),
                mb(full - base),
            );
        }
        for note in notes {
            println!("{note}");
        }
    }
    reload_series(&args, &dir);
    let _ = std::fs::remove_dir_all(&dir);
}

/// RSS after each reload: unchanged, then alternating between two sets.
fn reload_series(args: &Args, dir: &Path) {
    if args.reloads == 0 {
        return;
    }
    let a = names(args.names, false, "a");
    let b = names(args.names, false, "b");
    let relay = start(args, dir, Form::Inline, &a);
    let port = {
        // The port the relay listens on, from its configuration.
        let text = std::fs::read_to_string(dir.join("snirelay.toml")).unwrap();
        let at = text.find("127.0.0.1:").unwrap() + "127.0.0.1:".len();
        text[at..at + text[at..].find('"').unwrap()]
            .parse::<u16>()
            .unwrap()
    };
    let first = relay.rss_kib;
    let mut done = 0;
    let mut series = |label: &str, alternate: bool| {
        let mut rss = Vec::new();
        let mut took = Vec::new();
        for i in 0..args.reloads {
            if alternate {
                write_config(
                    args,
                    dir,
                    Form::Inline,
                    if i % 2 == 0 { &b } else { &a },
                    port,
                );
            }
            took.push(reload(&relay, dir, done).as_secs_f64());
            done += 1;
            std::thread::sleep(Duration::from_millis(500));
            rss.push(rss_kib(relay.child.id()));
        }
        let max = *rss.iter().max().unwrap();
        let list: Vec<String> = rss
            .iter()
            .map(|k| format!("{:.1}", mb(*k as f64)))
            .collect();
        println!(
            "reloads {label}: after start {:.1} MB; after each (MB): {}; max {:.1} MB = {:.2}x start; reload median {:.2} s",
            mb(first as f64),
            list.join(" "),
            mb(max as f64),
            max as f64 / first as f64,
            median(&took),
        );
        let _ = std::io::stdout().flush();
    };
    series("unchanged", false);
    series("alternating", true);
    drop(relay);
}
