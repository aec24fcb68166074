//! The last step: the timeouts that need both sides (idle and half-close,
//! from a frontend and the backends its routes use), every unread line
//! reported, and the TOML written with its lists of lines not translated,
//! lines needing no key, and notes. It decides no other key.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use super::Translation;
use super::check::check_table;
use super::parse::words;
use super::toml::{TomlRow, TomlTable, duration, quoted};
use super::translator::{BackendInfo, Outcome, Translator};

impl Translator {
    pub(super) fn finish(mut self, text: &str, source: &str) -> Translation {
        // Relay timeouts: per listener, from the frontend's client side and
        // the backends its routes use.
        let mut listeners = std::mem::take(&mut self.listeners);
        let fts = std::mem::take(&mut self.frontend_timeouts);
        let source_lines: Vec<&str> = text.lines().collect();
        for (i, (listener, _, routes)) in listeners.iter_mut().enumerate() {
            if routes.is_empty() {
                continue;
            }
            let (client, client_fin) = fts.get(&i).cloned().unwrap_or_default();
            let backends: Vec<String> = routes
                .iter()
                .filter_map(|r| {
                    r.rows
                        .iter()
                        .find(|x| x.key == "backend")
                        .map(|x| x.value.trim_matches('"').to_owned())
                })
                .collect();
            let mut infos: Vec<BackendInfo> = backends
                .iter()
                .filter_map(|b| self.backends.get(b).map(|x| x.0.clone()))
                .collect();
            if infos.is_empty() {
                infos.push(BackendInfo::default());
            }
            let idle = |info: &BackendInfo| -> Result<(u64, String), String> {
                match (&info.tunnel_ms, &client, &info.server_ms) {
                    (Some((t, tt)), _, _) => Ok((*t, format!("{tt}: replaces timeout client/server while relaying"))),
                    (None, Some((c, ct)), Some((sv, st))) if c == sv => Ok((*c, format!("{ct}, {st}"))),
                    (None, Some((_, ct)), Some((_, st))) => Err(format!("`{ct}` and `{st}` differ: snirelay has one idle timer for both directions (idle_timeout); set timeout tunnel, or choose one")),
                    (None, Some((c, ct)), None) => Ok((*c, format!("{ct} (no timeout server)"))),
                    (None, None, Some((sv, st))) => Ok((*sv, format!("{st} (no timeout client)"))),
                    (None, None, None) => Err("no timeout client, server or tunnel: HAProxy never times out an idle connection; snirelay's idle_timeout defaults to 5m".into()),
                }
            };
            let mut idles = BTreeSet::new();
            let mut idle_row = None;
            let mut idle_problem = None;
            for info in &infos {
                match idle(info) {
                    Ok((ms, why)) => {
                        idles.insert(ms);
                        idle_row.get_or_insert((ms, why));
                    }
                    Err(why) => idle_problem = Some(why),
                }
            }
            let timeout_lines = |word: &str| -> Vec<usize> {
                text.lines()
                    .enumerate()
                    .filter(|(_, l)| {
                        let w = words(l);
                        w.len() >= 2 && w[0] == "timeout" && w[1] == word
                    })
                    .map(|(n, _)| n + 1)
                    .collect()
            };
            if idles.len() > 1 {
                for w in ["server", "tunnel"] {
                    for n in timeout_lines(w) {
                        self.mark_not(n, source_lines[n - 1], "the backends of one frontend have different idle timeouts: the listener takes the first; set each route's idle_timeout by hand");
                    }
                }
            }
            let mut idle_ms = None;
            if let Some(why) = idle_problem {
                let mut any = false;
                for w in ["client", "server"] {
                    for n in timeout_lines(w) {
                        self.mark_not(n, source_lines[n - 1], &why);
                        any = true;
                    }
                }
                if !any {
                    self.notes.push(why);
                }
            } else if let Some((ms, why)) = idle_row {
                listener.row("idle_timeout", quoted(&duration(ms)), why);
                idle_ms = Some(ms);
                for w in ["client", "server", "tunnel"] {
                    for n in timeout_lines(w) {
                        self.mark_key(n, source_lines[n - 1]);
                    }
                }
            }
            // Half-close: client-fin here, server-fin from the backends.
            let server_fins: BTreeSet<Option<u64>> = infos
                .iter()
                .map(|i| i.server_fin_ms.as_ref().map(|x| x.0))
                .collect();
            let server_fin = if server_fins.len() == 1 {
                server_fins.into_iter().next().unwrap()
            } else {
                None
            };
            let sf_text = infos
                .iter()
                .find_map(|i| i.server_fin_ms.as_ref().map(|x| x.1.clone()));
            match (client_fin.as_ref(), server_fin) {
                (Some((c, ct)), Some(sv)) if *c == sv => {
                    listener.row(
                        "half_close_timeout",
                        quoted(&duration(*c)),
                        format!("{ct}, {}", sf_text.unwrap_or_default()),
                    );
                    for w in ["client-fin", "server-fin"] {
                        for n in timeout_lines(w) {
                            self.mark_key(n, source_lines[n - 1]);
                        }
                    }
                }
                (Some((c, _)), None) if infos.iter().all(|i| i.server_fin_ms.is_none()) => {
                    let why = format!(
                        "`timeout client-fin` alone: snirelay has one half_close_timeout for whichever side closed first, so it stays at its default ({}) for both sides, where HAProxy applies {} to the client side only; set half_close_timeout to the time you want for both",
                        duration(crate::config::DEFAULT_HALF_CLOSE_TIMEOUT.as_millis() as u64),
                        duration(*c)
                    );
                    for n in timeout_lines("client-fin") {
                        self.no_key_at(n, source_lines[n - 1], &why);
                    }
                }
                (None, Some(sv)) => {
                    let why = format!(
                        "`timeout server-fin` alone: snirelay has one half_close_timeout for whichever side closed first, so it stays at its default ({}) for both sides, where HAProxy applies {} to the server side only; set half_close_timeout to the time you want for both",
                        duration(crate::config::DEFAULT_HALF_CLOSE_TIMEOUT.as_millis() as u64),
                        duration(sv)
                    );
                    for n in timeout_lines("server-fin") {
                        self.no_key_at(n, source_lines[n - 1], &why);
                    }
                }
                (None, None) => {
                    if let Some(ms) = idle_ms {
                        listener.row("half_close_timeout", quoted(&duration(ms)), "no client-fin/server-fin: HAProxy keeps a half-closed connection as long as an open one");
                    }
                }
                _ => {
                    for w in ["client-fin", "server-fin"] {
                        for n in timeout_lines(w) {
                            self.mark_not(n, source_lines[n - 1], "snirelay has one half_close_timeout for whichever side closed first: set client-fin and server-fin alike");
                        }
                    }
                }
            }
        }
        // Anything left unread is reported.
        for (i, raw) in text.lines().enumerate() {
            if !words(raw).is_empty() && !self.ledger.contains_key(&(i + 1)) {
                self.ledger.insert(
                    i + 1,
                    (
                        raw.trim().to_owned(),
                        Outcome::Not(
                            "not read by import-haproxy, or used by nothing it translated".into(),
                        ),
                    ),
                );
            }
        }

        let mut out = String::new();
        let _ = writeln!(
            out,
            "# snirelay configuration translated from {source} by `snirelay import-haproxy`."
        );
        let _ = writeln!(
            out,
            "# Check it with `snirelay check --config FILE` before use."
        );
        let not: Vec<(usize, String, String)> = self
            .ledger
            .iter()
            .filter_map(|(n, (t, o))| match o {
                Outcome::Not(why) => Some((*n, t.clone(), why.clone())),
                _ => None,
            })
            .collect();
        if !not.is_empty() {
            let _ = writeln!(
                out,
                "#\n# NOT TRANSLATED: these lines' meaning is missing below."
            );
            for (n, t, why) in &not {
                let _ = writeln!(out, "#   line {n}: `{t}`: {why}");
            }
        }
        let no_key: Vec<_> = self
            .ledger
            .iter()
            .filter_map(|(n, (t, o))| match o {
                Outcome::NoKey(why) => Some((n, t, why)),
                _ => None,
            })
            .collect();
        if !no_key.is_empty() {
            let _ = writeln!(out, "#\n# No key needed:");
            for (n, t, why) in no_key {
                let _ = writeln!(out, "#   line {n}: `{t}`: {why}");
            }
        }
        if !self.notes.is_empty() {
            let _ = writeln!(out, "#\n# Notes:");
            for note in &self.notes {
                let _ = writeln!(out, "#   {note}");
            }
        }
        out.push('\n');
        // Each table with the name `--check` shows it by.
        let mut tables: Vec<(String, TomlTable)> = Vec::new();
        if !self.global.rows.is_empty() {
            tables.push(("[global]".into(), self.global.clone()));
        }
        if let Some(a) = self.admin.take() {
            tables.push(("[admin]".into(), a));
        }
        if let Some(l) = self.log.take() {
            tables.push(("[log]".into(), l));
        }
        let several = listeners.len() > 1;
        let mut route_tables = Vec::new();
        for (listener, limits, routes) in listeners {
            let name = listener.rows[0].value.clone();
            let shown = name.trim_matches('"').to_owned();
            tables.push((format!("[[listener]] {shown}"), listener));
            tables.push((format!("[listener.limits] of {shown}"), limits));
            for mut r in routes {
                if several {
                    r.rows.insert(
                        1,
                        TomlRow {
                            key: "listener".into(),
                            value: name.clone(),
                            ..TomlRow::default()
                        },
                    );
                }
                route_tables.push((
                    format!("[[route]] {}", r.rows[0].value.trim_matches('"')),
                    r,
                ));
            }
        }
        tables.extend(route_tables);
        for (_, (_, ts)) in std::mem::take(&mut self.backends) {
            tables.extend(ts.into_iter().map(|t| (t.header.clone(), t)));
        }
        for (_, t) in &tables {
            let _ = writeln!(out, "{}", t.header);
            for row in &t.rows {
                let kv = format!("{} = {}", row.key, row.value);
                if row.comment.is_empty() {
                    let _ = writeln!(out, "{kv}");
                } else {
                    let _ = writeln!(out, "{kv:<32} # {}", row.comment);
                }
            }
            out.push('\n');
        }
        let check = check_table(source, &self.ledger, &tables);
        let toml = out.trim_end().to_owned() + "\n";
        Translation {
            toml,
            not_translated: not,
            check,
        }
    }
}
