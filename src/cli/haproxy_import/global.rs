//! The `global` section: the process's caps, threads, drain window and
//! admin socket, and the process-management lines that need no key under
//! systemd. Frontends and backends are read elsewhere.

use std::net::SocketAddr;

use super::parse::{HaproxyLine, HaproxySection, millis};
use super::toml::{TomlTable, duration, quoted};
use super::translator::Translator;

impl Translator {
    pub(super) fn read_global(&mut self, s: &HaproxySection) {
        for l in &s.lines {
            match l.word(0) {
                "maxconn" => match l.word(1).parse::<u64>() {
                    Ok(n) => {
                        self.global_maxconn = Some((n, l.text.clone()));
                        self.key(l);
                    }
                    Err(_) => self.not(l, "not a number"),
                },
                "maxconnrate" => match l.word(1).parse::<u64>() {
                    Ok(n) if n > 0 => {
                        self.global.row("max_connection_rate", n.to_string(), &l.text);
                        self.key(l);
                    }
                    _ => self.not(l, "not a positive number"),
                },
                "hard-stop-after" => match millis(l.word(1)) {
                    Some(ms) => {
                        self.global.row("drain_timeout", quoted(&duration(ms)), &l.text);
                        self.key(l);
                    }
                    None => self.not(l, "not a time"),
                },
                "nbthread" => match l.word(1).parse::<u64>() {
                    Ok(n) if n > 0 => {
                        self.global.row("threads", n.to_string(), &l.text);
                        self.key(l);
                    }
                    _ => self.not(l, "not a positive number"),
                },
                "log" => self.read_log(l),
                "log-tag" | "log-send-hostname" => self.no_key(l, "snirelay's syslog lines carry `snirelay` as the app name and the host's name"),
                "user" | "group" | "uid" | "gid" => self.no_key(l, "the packaged systemd unit runs snirelay as its own unprivileged user"),
                "daemon" | "master-worker" | "pidfile" => self.no_key(l, "snirelay stays in the foreground under systemd (Type=notify)"),
                "chroot" => self.no_key(l, "the packaged systemd unit sandboxes snirelay instead"),
                "cpu-map" => self.no_key(l, "the kernel schedules snirelay's threads (pin them with CPUAffinity= in the unit if needed)"),
                "nbproc" => self.no_key(l, "snirelay is one process (threads: [global] threads)"),
                // HAProxy 3.x's thread layout: groups and listener shards.
                "thread-groups" => self.no_key(l, "snirelay's threads are one group: their number is [global] threads (`nbthread`)"),
                "thread-hard-limit" => self.no_key(l, "snirelay starts [global] threads threads (default: one per CPU); set `threads` to cap them"),
                "tune.listener.default-shards" => self.no_key(l, "snirelay accepts on one socket per listen address and its threads share the accepted connections (two relays on one port: `reuse_port`)"),
                "spread-checks" => self.no_key(l, "snirelay spreads each address's first check over its interval"),
                "tune.ssl.default-dh-param" | "tune.ssl.cachesize" | "tune.ssl.lifetime" | "tune.ssl.maxrecord" | "maxsslconn" | "maxsslrate" | "ssl-server-verify" => self.no_key(l, "TLS settings: snirelay never terminates TLS"),
                "tune.maxaccept" | "tune.maxpollevents" | "tune.runqueue-depth" => self.no_key(l, "event-loop tuning of HAProxy's own: decides no connection's outcome"),
                "tune.pipesize" => match l.word(1).parse::<u64>() {
                    Ok(n) if n > 0 => {
                        self.global.row("pipe_size", n.to_string(), &l.text);
                        self.key(l);
                    }
                    _ => self.not(l, "not a positive number"),
                },
                "ulimit-n" => self.no_key(l, "snirelay raises its descriptor limit to the hard limit itself (LimitNOFILE= in the unit)"),
                "stats" if l.word(1) == "socket" => self.read_stats_socket(l),
                "stats" if l.word(1) == "timeout" => self.no_key(l, "the admin listener bounds each request with its own time limits"),
                "ca-base" | "crt-base" | "ssl-default-bind-ciphers" | "ssl-default-bind-ciphersuites" | "ssl-default-bind-options" | "ssl-default-server-ciphers" | "ssl-default-server-ciphersuites" | "ssl-default-server-options" | "ssl-dh-param-file" => self.no_key(l, "TLS settings: snirelay never terminates TLS"),
                _ => self.not(l, format!("the global keyword `{}` is not translated", l.word(0))),
            }
        }
    }

    /// `log TARGET [len N] [format F] [sample R:S] FACILITY [LEVEL [MINLEVEL]]`
    /// into `[log]`; snirelay has one log target for the process.
    pub(super) fn read_log(&mut self, l: &HaproxyLine) {
        if self.log.is_some() {
            self.not(
                l,
                "a second log target: snirelay sends its lines to one ([log])",
            );
            return;
        }
        let mut i = 2;
        let mut format = None;
        while matches!(l.word(i), "len" | "format" | "sample") {
            if l.word(i) == "format" {
                format = Some(l.word(i + 1).to_owned());
            }
            i += 2;
        }
        let facility = l.word(i);
        let levels = l.words_from(i + 1).join(" ");
        let target = l.word(1);
        let at = target
            .trim_start_matches("udp4@")
            .trim_start_matches("udp6@")
            .trim_start_matches("udp@")
            .trim_start_matches("ipv4@")
            .trim_start_matches("ipv6@");
        let syslog = if let Some(path) = target
            .strip_prefix("unix@")
            .or(target.starts_with('/').then_some(target))
        {
            Some(format!("unix:{path}"))
        } else if matches!(target, "stdout" | "stderr") {
            None
        } else if let Ok(ip) = at.parse::<std::net::IpAddr>() {
            Some(format!("udp://{}", SocketAddr::new(ip, 514)))
        } else if let Ok(a) = at.parse::<SocketAddr>() {
            Some(format!("udp://{a}"))
        } else {
            self.not(l, format!("the log target `{target}` is not translated (a Unix socket path, an IP[:port] (UDP), stdout or stderr are)"));
            return;
        };
        let mut log = TomlTable::new("[log]");
        match &syslog {
            Some(s) => {
                log.row("target", quoted("syslog"), &l.text);
                log.row("syslog", quoted(s), "");
                if facilities().contains(&facility) {
                    log.row("facility", quoted(facility), "");
                } else {
                    self.not(
                        l,
                        format!("`{facility}` is not a syslog facility snirelay knows"),
                    );
                    return;
                }
                match format.as_deref() {
                    None | Some("rfc3164") => log.row(
                        "syslog_format",
                        quoted("rfc3164"),
                        "HAProxy's default header (RFC 3164)",
                    ),
                    Some("rfc5424") => log.row("syslog_format", quoted("rfc5424"), ""),
                    Some(other) => self.notes.push(format!(
                        "line {}: `format {other}` has no snirelay equivalent: its lines carry an RFC 3164 header",
                        l.no
                    )),
                }
            }
            None => log.row("target", quoted(target), &l.text),
        }
        self.notes.push(format!(
            "line {}: snirelay writes its own line per connection (text, or JSON with --log-format json), not HAProxy's tcplog format{}",
            l.no,
            if levels.is_empty() {
                String::new()
            } else {
                format!("; the level filter `{levels}` is snirelay's --log-level")
            }
        ));
        for row in &mut log.rows {
            row.lines.push(l.no);
        }
        self.log = Some(log);
        self.key(l);
    }

    pub(super) fn read_stats_socket(&mut self, l: &HaproxyLine) {
        let at = l.word(2);
        let level = l
            .words
            .iter()
            .position(|w| w == "level")
            .map_or("operator", |i| l.word(i + 1));
        if level != "admin" {
            self.not(l, format!("`level {level}`: snirelay's admin socket gives control to whoever may connect (as `level admin`); add `[admin]` with a `token_file` instead"));
            return;
        }
        let listen = if at.starts_with('/') || at.starts_with("unix@") {
            "unix:/run/snirelay/admin.sock".to_owned()
        } else {
            match at.trim_start_matches("ipv4@").parse::<SocketAddr>() {
                Ok(a) if a.ip().is_loopback() => a.to_string(),
                _ => {
                    self.not(l, "a stats socket on a network address: snirelay's admin listener takes loopback or a Unix socket (`allow_public` for more)");
                    return;
                }
            }
        };
        let mut admin = TomlTable::new("[admin]");
        admin.row(
            "listen",
            quoted(&listen),
            format!(
                "{}; HTTP endpoints and `snirelay ctl`, not HAProxy's CLI; the packaged unit creates /run/snirelay (RuntimeDirectory=, mode 0700), and elsewhere `snirelay run` creates the missing directory with mode 0700",
                l.text
            ),
        );
        self.admin = Some(admin);
        self.key(l);
    }

    pub(super) fn finish_global(&mut self) {
        // The process's cap: the global maxconn, or with one frontend
        // whose own cap is lower, that one (it binds first).
        let one_frontend = self.listeners.len() == 1;
        let mut cap = self.global_maxconn.clone();
        let mut fes = std::mem::take(&mut self.frontend_maxconns);
        fes.sort();
        fes.dedup();
        for (n, no, text) in &fes {
            let line = HaproxyLine {
                no: *no,
                text: text.clone(),
                words: Vec::new(),
            };
            if one_frontend {
                cap = match cap {
                    Some((g, gt)) if *n <= g => Some((*n, format!("global {gt}; frontend {text}"))),
                    Some(global) => Some(global),
                    None => Some((*n, format!("frontend {text}"))),
                };
                self.key(&line);
            } else {
                self.not(&line, "a frontend's own maxconn: snirelay has a process-wide cap only (a route's max_connections refuses instead of pausing)");
            }
        }
        let mut rows = Vec::new();
        if let Some((n, text)) = cap {
            let mut max = TomlTable::new("");
            max.row("max_connections", n.to_string(), text);
            rows.append(&mut max.rows);
        }
        rows.append(&mut self.global.rows);
        self.global.rows = rows;
    }
}

/// The facilities `[log] facility` takes, from its declaration.
fn facilities() -> &'static [&'static str] {
    crate::config::keys::KEYS
        .iter()
        .find(|k| k.name == "log.facility")
        .and_then(|k| match k.kind {
            crate::config::keys::Kind::Choice(names) => Some(names),
            _ => None,
        })
        .unwrap_or(&[])
}
