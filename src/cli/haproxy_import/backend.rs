//! A `backend` (or a `listen` section's backend half): servers, balance,
//! source addresses, PROXY headers and health checks, into
//! `[backend.NAME]` and its `[backend.NAME.health]`. Which backends are
//! read at all is decided by the routes that name them.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};

use super::parse::{HaproxyLine, HaproxySection, SectionKind, lines_with, millis, with_defaults};
use super::toml::{TomlTable, duration, quoted, toml_key};
use super::translator::{BackendInfo, Translator, option_no_key};

/// HAProxy's default check interval (`inter`), rise and fall.
pub(super) const HAPROXY_DEFAULT_INTER_MS: u64 = 2000;
pub(super) const HAPROXY_DEFAULT_RISE: u64 = 2;
pub(super) const HAPROXY_DEFAULT_FALL: u64 = 3;

/// A server line, read.
#[derive(Debug, Clone, Default)]
pub(super) struct HaproxyServer {
    pub(super) address: String,
    pub(super) weight: Option<u64>,
    pub(super) check: bool,
    pub(super) inter_ms: Option<u64>,
    pub(super) rise: Option<u64>,
    pub(super) fall: Option<u64>,
    pub(super) proxy: Option<&'static str>,
    /// Its own `source`, as the TOML value of the address entry's key.
    pub(super) source: Option<String>,
    /// `backup`: used only while no other server is usable.
    pub(super) backup: bool,
    /// `check-send-proxy`: its checks start with a PROXY header.
    pub(super) check_send_proxy: bool,
    /// `maxconn N`: the address's `max_connections`.
    pub(super) max_connections: Option<u64>,
    /// The address is `host:port` (a name to resolve), not `IP:port`.
    pub(super) host: Option<String>,
    /// `resolvers NAME`: the `resolvers` section its name is asked of.
    pub(super) resolvers: Option<String>,
    /// `disabled`: in maintenance from the start (HAProxy sends it nothing).
    pub(super) disabled: bool,
    /// Options without a key, each with what follows from leaving it out
    /// and what to do (a note; the line is still translated).
    pub(super) left_out: Vec<String>,
    /// Options whose absence changes what the server gets: the line is
    /// reported as not translated (the server is still written).
    pub(super) refused: Vec<String>,
    pub(super) text: String,
}

impl Translator {
    pub(super) fn read_backend(&mut self, s: &HaproxySection, defaults: Option<&HaproxySection>) {
        self.key(&s.header);
        let (own, lines) = with_defaults(s, defaults);
        let is_listen = s.kind == SectionKind::Listen;
        let mut info = BackendInfo::default();
        let mut check_ms: Option<(u64, String)> = None;
        let mut queue_lines: Vec<&HaproxyLine> = Vec::new();
        let mut servers: Vec<(HaproxyServer, &HaproxyLine)> = Vec::new();
        let mut default_server: Vec<String> = Vec::new();
        let mut balance: Option<(String, &HaproxyLine)> = None;
        let mut source: Option<(String, &HaproxyLine)> = None;
        let mut allbackups: Option<&HaproxyLine> = None;
        let has_tcp_check_rules = lines.iter().any(|l| l.word(0) == "tcp-check");
        for l in lines {
            let mine = own.contains(&l.no);
            match l.word(0) {
                "timeout" => {
                    let Some(ms) = millis(l.word(2)) else {
                        continue;
                    };
                    let v = Some((ms, l.text.clone()));
                    match l.word(1) {
                        "connect" => info.connect_ms = v,
                        "server" => info.server_ms = v,
                        "tunnel" => info.tunnel_ms = v,
                        "server-fin" => info.server_fin_ms = v,
                        "check" => check_ms = v,
                        "queue" => queue_lines.push(l),
                        _ => {}
                    }
                }
                "default-server" => {
                    default_server = l.words_from(1).to_vec();
                    self.key(l);
                }
                "server" => {
                    let mut words = vec![l.word(0).to_owned(), l.word(1).to_owned(), l.word(2).to_owned()];
                    words.extend(default_server.iter().cloned());
                    words.extend(l.words.iter().skip(3).cloned());
                    match server(&words) {
                        Ok(sv) if sv.disabled => self.no_key(
                            l,
                            "`disabled`: HAProxy sends this server nothing until it is enabled at run time; it is left out of `addresses` (add it there to enable it)",
                        ),
                        Ok(sv) => {
                            for why in &sv.left_out {
                                self.notes.push(format!("line {}: server {}: {why}", l.no, l.word(1)));
                            }
                            if sv.refused.is_empty() {
                                self.key(l);
                            } else {
                                self.not(l, format!("server {} is written, but: {}", l.word(1), sv.refused.join("; ")));
                            }
                            servers.push((sv, l));
                        }
                        Err(why) => self.not(l, why),
                    }
                }
                "balance" => balance = Some((l.word(1).to_owned(), l)),
                "source" => match source_value(l.words_from(1)) {
                    Ok((Some(value), used)) if used == l.words_from(1).len() => {
                        source = Some((value, l));
                    }
                    Ok((None, used)) if used == l.words_from(1).len() => {
                        source = None;
                        self.no_key(l, "any local address: the host's own choice, snirelay's default");
                    }
                    Ok(_) => self.not(l, "words after `source ADDR [usesrc …]` are not translated"),
                    Err(why) => self.not(l, why),
                },
                "retries" if mine => self.not(l, "snirelay tries each address once per connection, up to `connect_attempts` addresses; it never retries the same one"),
                "option" if option_no_key(l.word(1)).is_some() => {
                    self.no_key(l, option_no_key(l.word(1)).unwrap_or_default())
                }
                "option" if l.word(1) == "allbackups" => allbackups = Some(l),
                "option" if l.word(1) == "tcp-check" && !has_tcp_check_rules => self.no_key(
                    l,
                    "without `tcp-check` rules it is the default check, a TCP connect: snirelay's `kind = \"tcp\"` on the servers with `check`",
                ),
                "option" if mine => self.not(l, format!("`option {}` is not translated", l.word(1))),
                "mode" | "log" => {}
                _ if !mine || is_listen => {}
                other => self.not(l, format!("the keyword `{other}` is not translated")),
            }
        }
        let mut table = TomlTable::new(&format!("[backend.{}]", toml_key(&s.name)));
        // A host name: a backend of one such server resolves it; beside
        // other servers it cannot be written (snirelay resolves per
        // backend), and is reported.
        let resolved = match servers.as_slice() {
            [(sv, l)] if sv.host.is_some() => Some((sv.clone(), *l)),
            _ => None,
        };
        servers.retain(|(sv, l)| {
            if sv.host.is_some() && resolved.is_none() {
                self.not(l, format!("`{}` is a host name beside other servers: snirelay resolves one name per backend (`resolve = \"{}\"`); put this server in a backend of its own and route to it", sv.address, sv.address));
                return false;
            }
            true
        });
        let plain = servers.iter().all(|(sv, _)| sv.weight.unwrap_or(1) == 1);
        let entries: Vec<String> = servers
            .iter()
            .map(|(sv, _)| {
                let mut keys = vec![format!("address = {}", quoted(&sv.address))];
                if !plain {
                    keys.push(format!("weight = {}", sv.weight.unwrap_or(1)));
                }
                if let Some(own) = &sv.source {
                    keys.push(format!("source = {own}"));
                }
                if sv.backup {
                    keys.push("backup = true".to_owned());
                }
                if let Some(n) = sv.max_connections {
                    keys.push(format!("max_connections = {n}"));
                }
                match keys.len() {
                    1 => quoted(&sv.address),
                    _ => format!("{{ {} }}", keys.join(", ")),
                }
            })
            .collect();
        let texts: Vec<String> = servers.iter().map(|(sv, _)| sv.text.clone()).collect();
        if let Some((sv, _)) = &resolved {
            table.row("resolve", quoted(&sv.address), &sv.text);
            self.resolver_rows(&mut table, sv, &s.name);
        } else {
            if servers.is_empty() {
                self.notes.push(format!(
                    "backend {} has no translated server: add `addresses`",
                    s.name
                ));
            }
            table.row(
                "addresses",
                format!("[{}]", entries.join(", ")),
                texts.join("; "),
            );
        }
        if let Some((value, l)) = source {
            table.row("source", value, &l.text);
            self.key(l);
        }
        let backups = servers.iter().filter(|(sv, _)| sv.backup).count();
        match allbackups {
            Some(l) if backups > 0 => {
                table.row("backup_policy", quoted("all"), format!("{}: every usable backup takes connections while no active server is usable (without it, the first)", l.text));
                self.key(l);
            }
            Some(l) => self.no_key(l, "no backup server"),
            None => {}
        }
        let active = servers.len() - backups;
        if active > 1 {
            let policy = match balance.as_ref().map(|(b, _)| b.as_str()) {
                None | Some("roundrobin" | "static-rr") => Some("round_robin"),
                Some("leastconn") => Some("least_connections"),
                Some("source") => Some("source_hash"),
                Some(_) => None,
            };
            match (policy, balance) {
                (Some(p), Some((_, l))) => {
                    table.row("policy", quoted(p), &l.text);
                    self.key(l);
                }
                (Some(p), None) => table.row("policy", quoted(p), "HAProxy's default balance is roundrobin"),
                (None, Some((b, l))) => self.not(l, format!("`balance {b}` has no snirelay policy (round_robin, least_connections, source_hash, ordered, fastest)")),
                (None, None) => {}
            }
        } else if let Some((_, l)) = balance {
            self.no_key(l, "one active server: nothing to balance (a backup is used only while no active one is usable)");
        }
        match &info.connect_ms {
            Some((ms, text)) => table.row("connect_timeout", quoted(&duration(*ms)), text),
            None => self.notes.push(format!("backend {}: no `timeout connect` (HAProxy waits forever); snirelay's connect_timeout defaults to 5s", s.name)),
        }
        for l in lines_with(&s.lines, defaults, &["timeout", "connect"]) {
            if info.connect_ms.is_some() {
                self.key(l);
            }
        }
        let proxies: BTreeSet<Option<&str>> = servers.iter().map(|(sv, _)| sv.proxy).collect();
        if proxies.len() > 1 {
            for (_, l) in &servers {
                self.not(l, "servers of one backend disagree on send-proxy: snirelay sends one PROXY version per backend");
            }
        } else if let Some(Some(v)) = proxies.into_iter().next() {
            table.row("proxy_protocol", quoted(v), "send-proxy / send-proxy-v2");
        }
        for (sv, l) in servers.iter().filter(|(sv, _)| sv.check_send_proxy) {
            if sv.proxy.is_some() {
                self.notes.push(format!("line {}: check-send-proxy needs no key: snirelay's health checks start with a PROXY header (LOCAL) whenever the backend has proxy_protocol", l.no));
            } else {
                self.not(l, "check-send-proxy without send-proxy: snirelay's health checks send a PROXY header only when the backend sends one on its connections (proxy_protocol)");
            }
        }
        let mut tables = vec![table];
        // Health: HAProxy checks only servers with `check`; snirelay checks
        // every address of a backend with [health].
        let checked: Vec<&(HaproxyServer, &HaproxyLine)> =
            servers.iter().filter(|(sv, _)| sv.check).collect();
        if !checked.is_empty() {
            let params: BTreeSet<(u64, u64, u64)> = checked
                .iter()
                .map(|(sv, _)| {
                    (
                        sv.inter_ms.unwrap_or(HAPROXY_DEFAULT_INTER_MS),
                        sv.rise.unwrap_or(HAPROXY_DEFAULT_RISE),
                        sv.fall.unwrap_or(HAPROXY_DEFAULT_FALL),
                    )
                })
                .collect();
            let unchecked: Vec<&str> = servers
                .iter()
                .filter(|(sv, _)| !sv.check)
                .map(|(_, l)| l.word(1))
                .collect();
            if !unchecked.is_empty() {
                self.notes.push(format!("backend {}: snirelay checks every address of a backend alike, so {} (no `check` in HAProxy, which never marks it down) is checked too and taken out of use while its checks fail: give it `check` in HAProxy too, or move it to a backend of its own", s.name, unchecked.join(", ")));
            }
            {
                // The first checked server's inter, rise and fall.
                let first = checked[0].0.clone();
                let (inter, rise, fall) = (
                    first.inter_ms.unwrap_or(HAPROXY_DEFAULT_INTER_MS),
                    first.rise.unwrap_or(HAPROXY_DEFAULT_RISE),
                    first.fall.unwrap_or(HAPROXY_DEFAULT_FALL),
                );
                if params.len() > 1 {
                    self.notes.push(format!("backend {}: its servers' checks differ in inter, rise or fall; snirelay checks every address alike, with the first checked server's ({} every {}, rise {rise}, fall {fall}): set the others' alike in HAProxy to compare", s.name, checked[0].1.word(1), duration(inter)));
                }
                // HAProxy: min(timeout connect, inter) for the connect when
                // `timeout check` is set, else inter for the whole check.
                let timeout = match (&check_ms, &info.connect_ms) {
                    (Some(_), Some((c, _))) => inter.min(*c),
                    _ => inter,
                };
                let mut h = TomlTable::new(&format!("[backend.{}.health]", toml_key(&s.name)));
                h.row(
                    "kind",
                    quoted("tcp"),
                    "HAProxy's default check: a TCP connect",
                );
                h.row("interval", quoted(&duration(inter)), "inter");
                let why = match &check_ms {
                    Some((_, t)) => format!("min(timeout connect, inter); {t}"),
                    None => "inter: HAProxy's whole check without timeout check".into(),
                };
                h.row("timeout", quoted(&duration(timeout)), why);
                h.row("rise", rise.to_string(), "rise");
                h.row("fall", fall.to_string(), "fall");
                for row in &mut h.rows {
                    row.lines.extend(servers.iter().map(|(_, l)| l.no));
                }
                tables.push(h);
            }
        }
        for l in lines_with(&s.lines, defaults, &["timeout", "check"]) {
            if checked.is_empty() {
                self.no_key(l, "no server has `check`");
            } else {
                self.key(l);
            }
        }
        let capped = servers.iter().any(|(sv, _)| sv.max_connections.is_some());
        for l in queue_lines {
            if capped {
                self.no_key(l, "snirelay has no queue: a connection that finds an address at its max_connections (maxconn) goes to the next one, and one that finds all of them full is refused (`backend_full`) instead of waiting up to timeout queue");
            } else {
                self.no_key(
                    l,
                    "nothing queues: no server has a maxconn (snirelay has no queue)",
                );
            }
        }
        self.backends.insert(s.name.clone(), (info, tables));
    }
}

impl Translator {
    /// A `resolvers` section: its `nameserver` addresses, for the servers
    /// that name it (`resolver`); its timers need no key.
    pub(super) fn read_resolvers(&mut self, s: &HaproxySection) {
        self.no_key(
            &s.header,
            "read by the servers that name it (`resolvers NAME`)",
        );
        let mut servers = Vec::new();
        for l in &s.lines {
            if l.word(0) == "nameserver" {
                let addr = l
                    .word(2)
                    .trim_start_matches("udp@")
                    .trim_start_matches("ipv4@");
                if addr.parse::<SocketAddr>().is_ok() {
                    servers.push(addr.to_owned());
                    self.no_key(
                        l,
                        "the backend's `resolver`, where a server names this section",
                    );
                } else {
                    self.not(l, format!("`{}` is not IP:port: snirelay asks a resolver by its address, or the system resolver", l.word(2)));
                }
            } else {
                self.no_key(l, "snirelay asks again every `resolve_interval` (30s), keeps the last good answer when an answer fails, and retries with doubling back-off up to 30 s");
            }
        }
        self.resolvers.insert(s.name.clone(), servers);
    }

    /// `resolver` for a backend that resolves `sv`'s host name, and the
    /// note on how its answers are followed.
    fn resolver_rows(&mut self, table: &mut TomlTable, sv: &HaproxyServer, backend: &str) {
        match &sv.resolvers {
            Some(name) => match self.resolvers.get(name).map(Vec::as_slice) {
                Some([first, rest @ ..]) => {
                    table.row("resolver", quoted(first), format!("resolvers {name}: nameserver {first}"));
                    if !rest.is_empty() {
                        self.notes.push(format!("backend {backend}: snirelay asks one resolver, the first nameserver of `resolvers {name}` ({first}); the others ({}) are not asked", rest.join(", ")));
                    }
                }
                _ => self.notes.push(format!("backend {backend}: `resolvers {name}` names no usable nameserver here; snirelay asks the system resolver (set `resolver = \"IP:53\"` to ask another)")),
            },
            None => self.notes.push(format!("backend {backend}: HAProxy resolves `{}` once, at start (no `resolvers`); snirelay asks the system resolver again every `resolve_interval` (30s) and follows its answers", sv.address)),
        }
    }
}

/// HAProxy's `source ADDR[:PORT[-PORT]] [usesrc client|clientip]` (after
/// the keyword, on a server or a backend): the TOML value of snirelay's
/// `source` (`None`: any address, the default) and how many words it
/// took. `usesrc client` and `usesrc clientip` are `"client"` (snirelay
/// binds the client's port too, as `usesrc client` does); a port range is
/// `ports`, which snirelay applies per destination (HAProxy binds each
/// port once across destinations), and one fixed port, which serves one
/// connection at a time, has no equivalent; `usesrc ADDR`, `hdr_ip` and
/// `interface` are not translated.
pub(super) fn source_value(words: &[String]) -> Result<(Option<String>, usize), String> {
    let spec = words.first().map_or("", String::as_str);
    let bare = spec.trim_start_matches("ipv4@").trim_start_matches("ipv6@");
    let not_an_address = || format!("`source {spec}` is not an address");
    // As HAProxy reads it: `[IPv6]` or `[IPv6]:PORTS`; otherwise the text
    // after the last colon is the port (`ipv6@2001:db8::9:0` is 2001:db8::9,
    // port 0, and a bare `2001:db8::9` is refused by HAProxy).
    let (host, ports) = match bare.strip_prefix('[') {
        Some(rest) => {
            let (host, after) = rest.split_once(']').ok_or_else(not_an_address)?;
            (host, after.strip_prefix(':').map(str::to_owned))
        }
        None => match bare.rsplit_once(':') {
            Some((host, port)) => (host, Some(port.to_owned())),
            None => (bare, None),
        },
    };
    let ip = host.parse::<IpAddr>().map_err(|_| not_an_address())?;
    let ports = match ports.as_deref() {
        None | Some("0") => None,
        Some(range) => match range.split_once('-') {
            Some((lo, hi)) if lo.parse::<u16>().is_ok() && hi.parse::<u16>().is_ok() => {
                Some(format!("{lo}-{hi}"))
            }
            _ => {
                return Err(format!(
                    "`source {spec}`: one fixed source port has no equivalent (snirelay takes a range, `ports = \"LOW-HIGH\"`)"
                ));
            }
        },
    };
    let mut used = 1;
    let transparent = match words.get(1).map(String::as_str) {
        Some("usesrc") => {
            used = 3;
            match words.get(2).map(String::as_str) {
                Some("client" | "clientip") => true,
                Some(other) => {
                    return Err(format!(
                        "`usesrc {other}` is not translated (snirelay has `source = \"client\"`, HAProxy's `usesrc client`)"
                    ));
                }
                None => return Err("`usesrc` without its argument".to_owned()),
            }
        }
        Some("interface") => {
            return Err(
                "`source … interface` is not translated (snirelay binds addresses, not interfaces)"
                    .to_owned(),
            );
        }
        _ => false,
    };
    if transparent {
        return Ok((Some("\"client\"".to_owned()), used));
    }
    if ip.is_unspecified() && ports.is_none() {
        return Ok((None, used));
    }
    if ip.is_unspecified() {
        return Err(format!(
            "`source {spec}`: a port range on any address has no equivalent (snirelay's `ports` goes with `addresses`)"
        ));
    }
    let ports = ports
        .map(|r| format!(", ports = {}", quoted(&r)))
        .unwrap_or_default();
    Ok((
        Some(format!(
            "{{ addresses = [{}]{ports} }}",
            quoted(&ip.to_string())
        )),
        used,
    ))
}

/// A `server NAME ADDR [options]` line (default-server options first).
/// Every option snirelay has a key for is read; every other one is named
/// in [`HaproxyServer::left_out`] with what follows from leaving it out,
/// or in [`HaproxyServer::refused`] when the bytes the server gets would
/// differ. The server is kept either way: only an address snirelay cannot
/// write (no port, a port offset) is an error.
pub(super) fn server(words: &[String]) -> Result<HaproxyServer, String> {
    let addr = words.get(2).map_or("", String::as_str);
    let bare = addr.trim_start_matches("ipv4@").trim_start_matches("ipv6@");
    let mut host = None;
    let address = match bare.parse::<SocketAddr>() {
        Ok(a) => a.to_string(),
        Err(_) => match bare.rsplit_once(':') {
            Some((h, p))
                if h.parse::<IpAddr>().is_ok() && p.parse::<u16>().is_ok_and(|p| p > 0) =>
            {
                SocketAddr::new(h.parse().unwrap(), p.parse().unwrap()).to_string()
            }
            Some((h, p))
                if h.parse::<IpAddr>().is_err()
                    && !h.is_empty()
                    && p.parse::<u16>().is_ok_and(|p| p > 0) =>
            {
                host = Some(bare.to_owned());
                bare.to_owned()
            }
            _ => {
                return Err(format!(
                    "`{addr}` is not IP:port or host:port (a server without a port, or with a port offset, has no equivalent: write its port)"
                ));
            }
        },
    };
    let mut sv = HaproxyServer {
        address,
        host,
        text: words.join(" "),
        ..HaproxyServer::default()
    };
    let mut i = 3;
    let number = |w: Option<&String>| w.and_then(|w| w.parse::<u64>().ok());
    while i < words.len() {
        let option = words[i].as_str();
        let arg = words.get(i + 1);
        let arg_text = arg.map_or("", String::as_str);
        match option {
            "check" => sv.check = true,
            "no-check" => sv.check = false,
            "inter" => sv.inter_ms = arg.and_then(|w| millis(w)),
            "rise" => sv.rise = number(arg),
            "fall" => sv.fall = number(arg),
            "weight" => match number(arg) {
                Some(0) => {
                    sv.weight = Some(1);
                    sv.left_out.push("`weight 0` (HAProxy sends this server no new connections while another is usable; snirelay gives it weight 1: take it out of `addresses` if it is drained on purpose)".to_owned());
                }
                Some(w @ 1..=256) => sv.weight = Some(w),
                _ => sv.left_out.push(format!("`weight {arg_text}` is no weight of 1 to 256: the server gets weight 1")),
            },
            "maxconn" => match number(arg) {
                Some(n @ 1..=10_000_000) => sv.max_connections = Some(n),
                _ => sv.left_out.push(format!("`maxconn {arg_text}`: no cap written (snirelay takes 1 to 10000000)")),
            },
            "source" => {
                match source_value(&words[i + 1..]) {
                    Ok((value, used)) => {
                        sv.source = value;
                        i += used;
                    }
                    Err(why) => {
                        sv.refused.push(why);
                        i = words.len();
                    }
                }
                i += 1;
                continue;
            }
            "backup" => sv.backup = true,
            "no-backup" => sv.backup = false,
            "disabled" => sv.disabled = true,
            "enabled" => sv.disabled = false,
            "non-stick" | "stick" => {}
            "check-send-proxy" => sv.check_send_proxy = true,
            "send-proxy" => sv.proxy = Some("v1"),
            "send-proxy-v2" => sv.proxy = Some("v2"),
            "no-send-proxy" | "no-send-proxy-v2" => sv.proxy = None,
            "resolvers" => sv.resolvers = Some(arg_text.to_owned()),
            "init-addr" | "resolve-prefer" | "resolve-opts" | "resolve-net" => {
                sv.left_out.push(format!("`{option} {arg_text}`: snirelay asks for A and AAAA records and uses every answer, and a backend that never resolved waits up to connect_timeout per connection"));
            }
            "ssl" => sv.refused.push("`ssl`: HAProxy encrypts toward this server, snirelay relays the client's TLS bytes as they are (remove `ssl` if the server expects the client's own TLS)".to_owned()),
            "no-ssl" | "no-verifyhost" | "no-tls-tickets" | "no-ssl-reuse" | "allow-0rtt" | "no-check-ssl" | "tfo" | "no-tfo" | "no-agent-check" => {}
            "check-ssl" | "check-sni" | "check-alpn" | "agent-check" | "agent-port" | "agent-inter" | "agent-addr" | "agent-send" | "port" | "addr" => {
                let a = if takes_argument(option) { format!(" {arg_text}") } else { String::new() };
                sv.left_out.push(format!("`{option}{a}`: snirelay's check is a TCP connect to the server's own address and port (and no agent changes its weight); if the check must reach another port or speak TLS, check that the connect alone tells an up server from a down one"));
            }
            "fastinter" | "downinter" => sv.left_out.push(format!("`{option} {arg_text}`: snirelay checks at `interval` (inter) in every state")),
            "slowstart" => sv.left_out.push(format!("`slowstart {arg_text}`: a server that comes back gets its full share at once")),
            "maxqueue" | "minconn" => sv.left_out.push(format!("`{option} {arg_text}`: snirelay has no queue and a fixed cap (maxconn as max_connections): past it the next address is used, all full is refused (`backend_full`)")),
            "observe" | "error-limit" | "on-error" | "on-marked-down" | "on-marked-up" => sv.left_out.push(format!("`{option} {arg_text}`: snirelay marks an address down after `max_fails` failed connects (passive health, default 3) and keeps existing connections when it goes down")),
            "track" => sv.left_out.push(format!("`track {arg_text}`: snirelay checks this server itself (its own [health])")),
            other => {
                let a = if takes_argument(other) { format!(" {arg_text}") } else { String::new() };
                sv.left_out.push(format!("`{other}{a}` has no snirelay key and is left out: check that the server works without it"));
            }
        }
        if takes_argument(option) {
            i += 1;
        }
        i += 1;
    }
    if sv.inter_ms == Some(0) || sv.rise == Some(0) || sv.fall == Some(0) {
        sv.refused
            .push("inter, rise and fall must be above 0".into());
    }
    Ok(sv)
}

/// Whether a server option takes the word after it as its argument
/// (HAProxy's server keywords, 2.6 to 3.2).
fn takes_argument(option: &str) -> bool {
    matches!(
        option,
        "inter"
            | "rise"
            | "fall"
            | "weight"
            | "maxconn"
            | "maxqueue"
            | "minconn"
            | "slowstart"
            | "resolvers"
            | "init-addr"
            | "resolve-prefer"
            | "resolve-opts"
            | "resolve-net"
            | "agent-port"
            | "agent-inter"
            | "agent-addr"
            | "agent-send"
            | "port"
            | "addr"
            | "check-sni"
            | "check-alpn"
            | "fastinter"
            | "downinter"
            | "observe"
            | "error-limit"
            | "on-error"
            | "on-marked-down"
            | "on-marked-up"
            | "track"
            | "id"
            | "cookie"
            | "redir"
            | "ca-file"
            | "crt"
            | "crl-file"
            | "verify"
            | "sni"
            | "alpn"
            | "npn"
            | "ciphers"
            | "ciphersuites"
            | "curves"
            | "sigalgs"
            | "client-sigalgs"
            | "ssl-min-ver"
            | "ssl-max-ver"
            | "verifyhost"
            | "proto"
            | "namespace"
            | "pool-max-conn"
            | "pool-purge-delay"
            | "pool-low-conn"
            | "max-reuse"
            | "tcp-ut"
            | "ws"
            | "shard"
            | "hash-key"
            | "log-proto"
            | "proxy-v2-options"
            | "set-proxy-v2-tlv-fmt"
            | "check-proto"
            | "check-via-socks4"
            | "socks4"
            | "guid"
            | "log-bufsize"
            | "agent-check-proto"
    )
}
