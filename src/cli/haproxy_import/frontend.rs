//! A `frontend` (or a `listen` section's frontend half): binds, client
//! timeouts, per-source limits and the routing rules, into a `[[listener]]`,
//! its `[listener.limits]` and its `[[route]]`s. Backends, and the
//! timeouts that combine both sides, are read elsewhere.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use super::acl::{Atom, Guard, NamePattern, Spelling, atom, guard};
use super::connection::ConnectionRules;
use super::map::{inline_pattern_files, map_rule, sni_file};
use super::parse::{HaproxyLine, HaproxySection, SectionKind, millis, with_defaults};
use super::routes::{Routing, build_routes};
use super::toml::{TomlTable, duration, quoted, quoted_list};
use super::translator::{Translator, option_no_key};

impl Translator {
    pub(super) fn read_frontend(
        &mut self,
        s: &HaproxySection,
        defaults: Option<&HaproxySection>,
        backends: &BTreeMap<&str, &HaproxySection>,
    ) {
        self.key(&s.header);
        let (own, lines) = with_defaults(s, defaults);
        let is_listen = s.kind == SectionKind::Listen;
        let mut listener = TomlTable::new("[[listener]]");
        listener.row(
            "name",
            quoted(&s.name),
            format!("{} {}", s.header.word(0), s.name),
        );
        let mut listen: Vec<(String, String)> = Vec::new();
        let mut accept_proxy: Option<String> = None;
        let mut backlog: Option<(u64, String)> = None;
        let mut client_ms: Option<(u64, String)> = None;
        let mut client_fin_ms: Option<(u64, String)> = None;
        let mut inspect: Option<(u64, String)> = None;
        let mut acls: BTreeMap<String, Result<Vec<Atom>, String>> = BTreeMap::new();
        let mut acl_lines: BTreeMap<String, Vec<&HaproxyLine>> = BTreeMap::new();
        let mut content: Vec<(&HaproxyLine, bool, Guard)> = Vec::new();
        let mut uses: Vec<(&HaproxyLine, Option<String>, Guard)> = Vec::new();
        let mut default_backend: Option<(String, &HaproxyLine)> = None;
        let mut limits = TomlTable::new("[listener.limits]");
        let mut connection = ConnectionRules::default();
        let mut connection_lines: Vec<&HaproxyLine> = Vec::new();
        for l in lines {
            let mine = own.contains(&l.no);
            let w0 = l.word(0);
            if mine && l.words.windows(2).any(|w| w[0] == "-m" && w[1] == "dom") {
                self.notes.push(format!(
                    "line {}: `-m dom D` is read as the name D and every name below it (`D`, `*.D`); HAProxy also matches D as inner labels (`D.other.net`), which snirelay routes as any other name",
                    l.no
                ));
            }
            match w0 {
                "mode" => self.no_key(l, "snirelay relays TCP"),
                "log" if l.word(1) == "global" => self.no_key(l, "the process's [log] (from the global `log` line) takes every listener's lines"),
                "log" if self.is_key(l) => {}
                "log" => self.read_log(l),
                "option" if option_no_key(l.word(1)).is_some() => {
                    self.no_key(l, option_no_key(l.word(1)).unwrap_or_default())
                }
                "bind" => {
                    let mut v6only = false;
                    let mut sharded = Vec::new();
                    let mut i = 2;
                    let mut bad = Vec::new();
                    while i < l.words.len() {
                        match l.word(i) {
                            "backlog" => {
                                match l.word(i + 1).parse::<u64>() {
                                    Ok(n) => backlog = Some((n, l.text.clone())),
                                    Err(_) => bad.push("backlog".to_owned()),
                                }
                                i += 1;
                            }
                            "v6only" => v6only = true,
                            "accept-proxy" => accept_proxy = Some(l.text.clone()),
                            "v4v6" => {}
                            "name" => i += 1,
                            // HAProxy 3.x: sockets per thread or group, and
                            // which threads serve the line; snirelay accepts
                            // on one socket per address for all its threads.
                            "shards" | "thread" => {
                                sharded.push(format!("{} {}", l.word(i), l.word(i + 1)));
                                i += 1;
                            }
                            other => bad.push(other.to_owned()),
                        }
                        i += 1;
                    }
                    let mut addrs = Vec::new();
                    for a in l.word(1).split(',') {
                        match bind_addresses(a, v6only) {
                            Some(list) => addrs.extend(list),
                            None => bad.push(a.to_owned()),
                        }
                    }
                    listen.extend(addrs.into_iter().map(|a| (a, l.text.clone())));
                    if bad.is_empty() {
                        self.key(l);
                        if !sharded.is_empty() {
                            self.notes.push(format!(
                                "line {}: `{}` needs no key: snirelay accepts on one socket per listen address and its threads share the accepted connections",
                                l.no,
                                sharded.join("`, `")
                            ));
                        }
                    } else {
                        self.not(l, format!("not translated on this bind line: {} (snirelay binds `IP:port` addresses; TLS termination, PROXY on accept and socket options have no equivalent here)", bad.join(", ")));
                    }
                }
                "maxconn" => match l.word(1).parse::<u64>() {
                    Ok(n) => self.frontend_maxconns.push((n, l.no, l.text.clone())),
                    Err(_) => self.not(l, "not a number"),
                },
                "backlog" => match l.word(1).parse::<u64>() {
                    Ok(n) => {
                        backlog = Some((n, l.text.clone()));
                        self.key(l);
                    }
                    Err(_) => self.not(l, "not a number"),
                },
                "timeout" => {
                    let Some(ms) = millis(l.word(2)) else {
                        self.not(l, "not a time");
                        continue;
                    };
                    match l.word(1) {
                        "client" => client_ms = Some((ms, l.text.clone())),
                        "client-fin" => client_fin_ms = Some((ms, l.text.clone())),
                        "http-request" | "http-keep-alive" => self.no_key(l, "HTTP only"),
                        // HAProxy 2.8+: the TLS (or QUIC) handshake HAProxy
                        // terminates; an SNI edge terminates none.
                        "client-hs" => self.no_key(l, "the TLS handshake HAProxy terminates (`bind … ssl`, QUIC); snirelay terminates none: it waits for the ClientHello within client_hello_timeout (`tcp-request inspect-delay`), then relays"),
                        "connect" | "server" | "server-fin" | "tunnel" | "check" | "queue" if !mine || is_listen => {}
                        "connect" | "server" | "server-fin" | "tunnel" | "check" | "queue" => self.no_key(l, "a backend's timeout: HAProxy ignores it in a frontend"),
                        other => self.not(l, format!("`timeout {other}` is not translated")),
                    }
                }
                "tcp-request" => match l.word(1) {
                    "inspect-delay" => match millis(l.word(2)) {
                        Some(ms) => {
                            inspect = Some((ms, l.text.clone()));
                            self.key(l);
                        }
                        None => self.not(l, "not a time"),
                    },
                    "content" if !mine => self.not(l, "content rules in a defaults section are not translated"),
                    "content" => match l.word(2) {
                        action @ ("accept" | "reject") => match inline_pattern_files(l.words_from(3), &self.files).and_then(|w| guard(&w, &acls)) {
                            Ok(g) if !g.on_hello() => self.not(l, "content rules on anything but the ClientHello and its SNI are not translated"),
                            Ok(g) => content.push((l, action == "accept", g)),
                            Err(why) => self.not(l, why),
                        },
                        other => self.not(l, format!("the content action `{other}` is not translated (only accept and reject)")),
                    },
                    "connection" if !mine => self.not(l, "connection rules in a defaults section are not translated"),
                    "connection" => {
                        connection_lines.push(l);
                        if let Err(why) = connection.rule(l, &acls) {
                            self.not(l, why);
                        }
                    }
                    other => self.not(l, format!("`tcp-request {other}` is not translated")),
                },
                "stick-table" if mine => {
                    if let Err(why) = connection.stick_table(l) {
                        self.not(l, why);
                    }
                }
                "acl" if mine => {
                    let name = l.word(1).to_owned();
                    let a = inline_pattern_files(l.words_from(2), &self.files).and_then(|w| atom(&w));
                    let by_regex = l.words.windows(2).any(|w| w[0] == "-m" && w[1] == "reg");
                    if by_regex && matches!(a, Ok(Atom::Sni(_, Spelling { ldh: false, .. }))) {
                        self.notes.push(format!(
                            "line {}: the regex's class admits `_`, and so does snirelay's `*.suffix` (without `ldh_names`)",
                            l.no
                        ));
                    }
                    acl_lines.entry(name.clone()).or_default().push(l);
                    let entry = acls.entry(name).or_insert(Ok(Vec::new()));
                    match (a, entry.is_ok()) {
                        (Ok(a), true) => {
                            if let Ok(list) = entry {
                                list.push(a);
                            }
                        }
                        (Err(why), _) => {
                            self.not(l, why.clone());
                            *entry = Err(why);
                        }
                        (Ok(_), false) => {}
                    }
                }
                "use_backend" if mine => {
                    let name = l.word(1).to_owned();
                    self.named_backends.insert(name.clone());
                    if name.contains('%') {
                        self.use_map(l, backends, &mut uses);
                        continue;
                    }
                    match inline_pattern_files(l.words_from(2), &self.files).and_then(|w| guard(&w, &acls)) {
                        Ok(g) if !g.on_hello() => self.not(l, "use_backend rules on anything but the ClientHello and its SNI are not translated"),
                        Ok(g) => uses.push((l, Some(name), g)),
                        Err(why) => self.not(l, why),
                    }
                }
                "monitor" if mine => self.monitor_fail(l, &acls),
                "default_backend" => {
                    self.named_backends.insert(l.word(1).to_owned());
                    default_backend = Some((l.word(1).to_owned(), l));
                }
                // A listen section's backend half, and backend keywords
                // from defaults, are read with the backend.
                "server" | "default-server" | "balance" | "retries" if is_listen || !mine => {}
                "option" if !mine || is_listen => {}
                "stats" | "description" | "id" | "enabled" if mine => self.no_key(l, "statistics and identification: snirelay has none per listener"),
                _ if !mine => {}
                "option" => self.not(l, format!("`option {}` is not translated", l.word(1))),
                _ => self.not(l, format!("the keyword `{w0}` is not translated")),
            }
        }
        // A listen section is its own default backend.
        if is_listen && default_backend.is_none() {
            default_backend = Some((s.name.clone(), &s.header));
        }

        if listen.is_empty() {
            self.notes.push(format!(
                "frontend {} has no translated bind line: add `listen`",
                s.name
            ));
        }
        let addrs: Vec<String> = listen.iter().map(|(a, _)| a.clone()).collect();
        let binds: BTreeSet<&str> = listen.iter().map(|(_, t)| t.as_str()).collect();
        let value = if addrs.len() == 1 {
            quoted(&addrs[0])
        } else {
            quoted_list(&addrs)
        };
        listener.row(
            "listen",
            value,
            binds.into_iter().collect::<Vec<_>>().join("; "),
        );
        if let Some((n, text)) = backlog {
            listener.row("backlog", n.to_string(), text);
        }
        let connection_outcome = self.connection_limits(connection, &mut limits);
        let reads_headers = match (accept_proxy, connection_outcome.expect_proxy) {
            (Some(text), expect) => {
                listener.row(
                    "proxy_protocol",
                    "{ trusted = [\"0.0.0.0/0\", \"::/0\"] }".into(),
                    format!("{text}: HAProxy takes a PROXY header (v1 or v2) from any peer, as this does; narrow `trusted` to the load balancers in front"),
                );
                if let Some((_, rule)) = expect {
                    self.notes.push(format!("`{rule}`: `accept-proxy` on the bind line already reads a header from every peer"));
                }
                true
            }
            (None, Some((nets, rule))) => {
                let nets: Vec<String> = nets.iter().map(ToString::to_string).collect();
                listener.row(
                    "proxy_protocol",
                    format!("{{ trusted = {} }}", quoted_list(&nets)),
                    format!("{rule}: these peers must start with a PROXY header (v1 or v2); others' bytes are read as sent (snirelay refuses a header from them: proxy_untrusted)"),
                );
                true
            }
            (None, None) => false,
        };
        if reads_headers && connection_outcome.per_source {
            self.notes.push(format!(
                "frontend {}: HAProxy's `tcp-request connection` rules run before the PROXY header is read, so its per-source limits count the load balancer's address; snirelay's count the client each header claims (the peer's own connections are exempt), as HAProxy's `tcp-request session` rules would",
                s.name
            ));
        }
        match &inspect {
            Some((ms, text)) => listener.row("client_hello_timeout", quoted(&duration(*ms)), text),
            None => self.notes.push(format!(
                "frontend {} has no `tcp-request inspect-delay`: HAProxy then decides on whatever the first segment carried; snirelay waits for the whole hello (client_hello_timeout, 5s by default)",
                s.name
            )),
        }

        // A named ACL that a connection rule left untranslated uses is
        // not translated either: its meaning went with the rule's.
        for (name, ls) in &acl_lines {
            let untranslated_user = connection_lines.iter().find(|l| {
                self.is_not(l)
                    && l.words
                        .iter()
                        .any(|w| w.trim_start_matches('!') == name.as_str())
            });
            if let Some(user) = untranslated_user {
                for l in ls {
                    self.not(
                        l,
                        format!("used by line {}, which is not translated", user.no),
                    );
                }
            }
        }

        // Routing: evaluate the rules as HAProxy would, per kind of name.
        let mut patterns: Vec<NamePattern> = Vec::new();
        // How each pattern's tests compare the client's spelling.
        let mut spellings: BTreeMap<NamePattern, BTreeSet<Spelling>> = BTreeMap::new();
        for g in content
            .iter()
            .map(|c| &c.2)
            .chain(uses.iter().map(|u| &u.2))
        {
            for (p, spelling) in g.spelled_patterns() {
                spellings.entry(p.clone()).or_default().insert(spelling);
                if !patterns.contains(&p) {
                    patterns.push(p);
                }
            }
        }
        let decide_for = |hello: bool, name: Option<&str>| -> Option<String> {
            for (_, accept, g) in &content {
                if g.holds(hello, name) {
                    if !*accept {
                        return None;
                    }
                    break;
                }
            }
            for (_, backend, g) in &uses {
                if g.holds(hello, name) {
                    // No backend: a map's name that resolves to none ends
                    // the rules (HAProxy's default_backend).
                    if backend.is_some() {
                        return backend.clone();
                    }
                    break;
                }
            }
            default_backend.as_ref().map(|(b, _)| b.clone())
        };
        let decide = |name: Option<&str>| decide_for(true, name);
        if let Some(b) = decide_for(false, None) {
            self.notes.push(format!(
                "frontend {}: HAProxy relays bytes that are no ClientHello to `{b}` once the inspect delay ends (no rule rejects them); snirelay refuses them (not_tls)",
                s.name
            ));
        }
        let routing = build_routes(&patterns, &decide)
            .and_then(|r| route_spellings(r, &patterns, &spellings));
        let route_lines: Vec<&HaproxyLine> = content
            .iter()
            .map(|c| c.0)
            .chain(uses.iter().map(|u| u.0))
            .chain(default_backend.iter().map(|d| d.1))
            .chain(acl_lines.values().flatten().copied())
            .collect();
        match routing {
            Ok(r) => {
                for l in &route_lines {
                    self.key(l);
                }
                // Rules on the hello alone: snirelay's inspect stage.
                let hello_only = |g: &Guard| g.patterns().is_empty();
                for (l, _, g) in &content {
                    if hello_only(g) {
                        self.no_key(l, "snirelay refuses anything that is not a complete ClientHello within client_hello_timeout (not_tls, malformed, hello_timeout)");
                    }
                }
                for (name, ls) in &acl_lines {
                    if let Some(Ok(atoms)) = acls.get(name) {
                        if atoms
                            .iter()
                            .all(|a| matches!(a, Atom::Hello | Atom::WaitEnd | Atom::Constant(_)))
                        {
                            for l in ls {
                                self.no_key(l, "every connection snirelay relays is a ClientHello");
                            }
                        }
                    }
                }
                // Backends must exist.
                let mut routes = Vec::new();
                for (backend, names) in &r.routes {
                    if !backends.contains_key(backend.as_str()) {
                        self.notes.push(format!(
                            "frontend {} routes to `{backend}`, which is not defined",
                            s.name
                        ));
                    }
                    let mut t = TomlTable::new("[[route]]");
                    t.row("name", quoted(backend), "");
                    // A pattern file that lists the route's names as
                    // snirelay writes them is read at run time, as HAProxy
                    // reads it: `sni_file`, the other names inline.
                    let why = r.why.get(backend).cloned().unwrap_or_default();
                    match sni_file(names, &s.lines, &self.files) {
                        Some((file, rest)) => {
                            if !rest.is_empty() {
                                t.row("sni", quoted_list(&rest), why.clone());
                            }
                            let from = if file.starts_with('/') {
                                String::new()
                            } else {
                                " (relative: found from this file's directory; HAProxy reads it from its working directory)".to_owned()
                            };
                            t.row(
                                "sni_file",
                                quoted(&file),
                                format!("the names of `-f {file}`, read again at every reload{from}; {why}"),
                            );
                        }
                        None => t.row("sni", quoted_list(names), why),
                    }
                    let rule_lines = || {
                        content
                            .iter()
                            .map(|c| c.0.no)
                            .chain(acl_lines.values().flatten().map(|l| l.no))
                    };
                    t.at(rule_lines());
                    let spelling = r.spelling.get(backend).copied().unwrap_or_default();
                    if spelling.cased {
                        t.row("case_sensitive_names", "true".into(), "no `-i` (or a map without `,lower`): HAProxy compares the name as the client wrote it, so a capital in the labels the pattern names makes it go on to the next rule");
                        t.at(rule_lines());
                    }
                    if spelling.ldh {
                        t.row("ldh_names", "true".into(), "the regex's label class is letters, digits and `-`: a name with `_` matches no pattern of this route");
                        t.at(rule_lines());
                    }
                    // One line per rule, though a map rule names the
                    // backend once per key.
                    let mut seen = BTreeSet::new();
                    let naming: Vec<&str> = uses
                        .iter()
                        .filter(|u| u.1.as_ref() == Some(backend))
                        .map(|u| u.0.text.as_str())
                        .chain(
                            default_backend
                                .iter()
                                .filter(|d| d.0 == *backend)
                                .map(|d| d.1.text.as_str()),
                        )
                        .filter(|text| seen.insert(*text))
                        .collect();
                    t.row("backend", quoted(backend), naming.join("; "));
                    routes.push((backend.clone(), t));
                    self.used_backends.insert(backend.clone());
                }
                if let Some(b) = &r.no_sni {
                    listener.row(
                        "no_sni",
                        quoted(b),
                        "a hello without SNI reaches this backend in HAProxy",
                    );
                    self.used_backends.insert(b.clone());
                }
                let tables: Vec<TomlTable> = routes.into_iter().map(|(_, t)| t).collect();
                self.listeners.push((listener, limits, tables));
                self.pending_timeouts(client_ms, client_fin_ms);
            }
            Err(why) => {
                for l in &route_lines {
                    self.not(l, format!("the rules together: {why}"));
                }
                self.listeners.push((listener, limits, Vec::new()));
                self.pending_timeouts(client_ms, client_fin_ms);
            }
        }
    }

    /// Remembers the frontend-side timeouts; they are combined with the
    /// backend's once it is read.
    pub(super) fn pending_timeouts(
        &mut self,
        client: Option<(u64, String)>,
        client_fin: Option<(u64, String)>,
    ) {
        let last = self.listeners.len() - 1;
        self.frontend_timeouts.insert(last, (client, client_fin));
    }
}

/// `bind` addresses: `IP:PORT`, `:PORT` and `*:PORT` (every IPv4 address),
/// `:::PORT` (every IPv6 address, and IPv4 unless v6only), `ipv4@`/`ipv6@`.
pub(super) fn bind_addresses(text: &str, v6only: bool) -> Option<Vec<String>> {
    let text = text.trim_start_matches("ipv4@");
    let (v6_prefix, text) = match text.strip_prefix("ipv6@") {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (host, port) = text.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    if port == 0 {
        return None;
    }
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match host {
        "" | "*" if !v6_prefix => Some(vec![format!("0.0.0.0:{port}")]),
        "::" | "" => {
            let mut out = vec![format!("[::]:{port}")];
            if !v6only {
                out.insert(0, format!("0.0.0.0:{port}"));
            }
            Some(out)
        }
        h => match h.parse::<IpAddr>().ok()? {
            IpAddr::V4(a) => Some(vec![format!("{a}:{port}")]),
            IpAddr::V6(a) => Some(vec![format!("[{a}]:{port}")]),
        },
    }
}

impl Translator {
    /// `use_backend %[req.ssl_sni,lower,map(FILE)]`: one rule per name of
    /// the map ([`super::map`]), appended to `uses`; reported if it cannot be.
    fn use_map<'a>(
        &mut self,
        l: &'a HaproxyLine,
        backends: &BTreeMap<&str, &HaproxySection>,
        uses: &mut Vec<(&'a HaproxyLine, Option<String>, Guard)>,
    ) {
        let read = |f: &str| {
            self.files
                .get(f)
                .cloned()
                .unwrap_or_else(|| Err("not read".into()))
        };
        let rule = match map_rule(l.word(1), &read, &|b| backends.contains_key(b)) {
            Ok(_) if l.words.len() > 2 => {
                return self.not(l, "a condition on a map rule is not translated");
            }
            Ok(rule) => rule,
            Err(why) => return self.not(l, why),
        };
        if !rule.lower {
            self.notes.push(format!(
                "line {}: without `lower` HAProxy looks the name up as the client wrote it (`App.example.com` misses the key `app.example.com`); the map's routes get `case_sensitive_names = true`, so snirelay misses it too",
                l.no
            ));
        }
        let missing: Vec<&str> = rule
            .names
            .iter()
            .filter(|(_, b)| b.is_none())
            .map(|(n, _)| n.as_str())
            .collect();
        if !missing.is_empty() {
            self.notes.push(format!(
                "line {}: {} maps {} to no defined backend: HAProxy sends them to default_backend, and so does the translation",
                l.no,
                rule.file,
                missing.join(", ")
            ));
        }
        for (target, g) in rule.as_rules() {
            if let Some(b) = &target {
                self.named_backends.insert(b.clone());
            }
            uses.push((l, target, g));
        }
    }
}

/// Each route's [`Spelling`]: the one its names' tests share. A route
/// whose names are spelled differently by their tests (some with `-i`,
/// some without), or whose `*` would take the `ldh_names` of its other
/// names, cannot be written as one route, and is reported.
fn route_spellings(
    mut routing: Routing,
    patterns: &[NamePattern],
    spellings: &BTreeMap<NamePattern, BTreeSet<Spelling>>,
) -> Result<Routing, String> {
    for (backend, names) in &routing.routes {
        let mut seen = BTreeSet::new();
        for name in names {
            let found = patterns
                .iter()
                .filter(|p| p.as_snirelay() == *name)
                .filter_map(|p| spellings.get(p))
                .flatten();
            seen.extend(found.copied());
        }
        let spelling = match seen.len() {
            0 => Spelling::default(),
            1 => seen.into_iter().next().unwrap(),
            _ => {
                return Err(format!(
                    "the names of backend `{backend}` come from tests that compare the client's spelling differently (some with `-i`, some without, or a regex that refuses `_` beside one that does not): write them alike"
                ));
            }
        };
        if spelling.ldh && names.iter().any(|n| n == "*") {
            return Err(format!(
                "backend `{backend}` is both the default and the route of a regex that refuses `_`: snirelay's `ldh_names` would refuse such names from its `*` too"
            ));
        }
        routing.spelling.insert(backend.clone(), spelling);
    }
    Ok(routing)
}
