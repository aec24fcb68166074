//! The `global` section: the process's caps, threads, drain window and
//! admin socket, and the process-management lines that need no key under
//! systemd. Frontends and backends are read elsewhere.

use std::net::SocketAddr;

use super::Translator;
use super::parse::{Line, Section, millis};
use super::toml::{Table, duration, quoted};

impl Translator {
    pub(super) fn read_global(&mut self, s: &Section) {
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
                "log" => self.no_key(l, "snirelay writes its log lines to stderr, which journald keeps under systemd; to send them to syslog as this line does, add [log] target = \"syslog\" with syslog = \"unix:/dev/log\" and its facility"),
                "user" | "group" | "uid" | "gid" => self.no_key(l, "the packaged systemd unit runs snirelay as its own unprivileged user"),
                "daemon" | "master-worker" | "pidfile" => self.no_key(l, "snirelay stays in the foreground under systemd (Type=notify)"),
                "chroot" => self.no_key(l, "the packaged systemd unit sandboxes snirelay instead"),
                "ulimit-n" => self.no_key(l, "snirelay raises its descriptor limit to the hard limit itself (LimitNOFILE= in the unit)"),
                "stats" if l.word(1) == "socket" => self.read_stats_socket(l),
                "stats" if l.word(1) == "timeout" => self.no_key(l, "the admin listener bounds each request with its own time limits"),
                "ca-base" | "crt-base" | "ssl-default-bind-ciphers" | "ssl-default-bind-ciphersuites" | "ssl-default-bind-options" | "ssl-default-server-ciphers" | "ssl-default-server-ciphersuites" | "ssl-default-server-options" | "ssl-dh-param-file" => self.no_key(l, "TLS settings: snirelay never terminates TLS"),
                _ => self.not(l, format!("the global keyword `{}` is not translated", l.word(0))),
            }
        }
    }

    pub(super) fn read_stats_socket(&mut self, l: &Line) {
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
        let mut admin = Table::new("[admin]");
        admin.row(
            "listen",
            quoted(&listen),
            format!(
                "{}; HTTP endpoints and `snirelay ctl`, not HAProxy's CLI",
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
            let line = Line {
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
            rows.push(("max_connections".to_owned(), n.to_string(), text));
        }
        rows.append(&mut self.global.rows);
        self.global.rows = rows;
    }
}
