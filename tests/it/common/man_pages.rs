// Shared by examples/manpage.rs (writes the pages) and tests/it/packaging.rs
// (checks the committed pages are current): the man pages generated from
// the clap definition in src/cli/mod.rs and the tables of
// src/cli/manual.rs, as (file name, roff text). Each page has NAME,
// SYNOPSIS, DESCRIPTION and OPTIONS (clap_mangen's), its commands (the
// top page names each subcommand's page; `ctl`'s page lists its actions
// in full, as they have no pages of their own), then EXIT STATUS, SIGNALS
// (where the command handles any), FILES, ENVIRONMENT, EXAMPLES, SEE ALSO
// and VERSION.

/// Every man page: `snirelay.1`, then `snirelay-SUB.1` per subcommand.
pub(crate) fn snirelay_man_pages() -> Vec<(String, Vec<u8>)> {
    use clap::CommandFactory;
    let mut command = snirelay::cli::Cli::command();
    // Built, so the global options are listed on every page that takes them.
    command.build();
    let version = command.get_version().unwrap_or_default().to_owned();
    let mut pages = vec![(
        "snirelay.1".to_owned(),
        man_page(&command, "snirelay", "snirelay", &version),
    )];
    for sub in command.get_subcommands().filter(|s| s.get_name() != "help") {
        let name = format!("snirelay-{}", sub.get_name());
        let bin = format!("snirelay {}", sub.get_name());
        let sub = sub.clone().display_name(name.clone()).bin_name(bin.clone());
        pages.push((
            format!("{name}.1"),
            man_page(&sub, sub.get_name(), &bin, &version),
        ));
    }
    pages
}

/// One page: clap_mangen's sections, then the command's own.
fn man_page(command: &clap::Command, key: &str, bin: &str, version: &str) -> Vec<u8> {
    let manual = snirelay::cli::manual::manual(key)
        .unwrap_or_else(|| panic!("src/cli/manual.rs has no page for `{key}`"));
    let man = clap_mangen::Man::new(command.clone()).source(format!("snirelay {version}"));
    let mut page = Vec::new();
    let render = |result: std::io::Result<()>| result.expect("rendering to memory cannot fail");
    render(man.render_title(&mut page));
    render(man.render_name_section(&mut page));
    render(man.render_synopsis_section(&mut page));
    render(man.render_description_section(&mut page));
    render(man.render_options_section(&mut page));
    // Each section clap_mangen renders on its own repeats the page's
    // preamble (the `Aq` string); once is enough.
    let mut page = man_dedup_preamble(&page);
    let mut roff = String::new();
    let subs: Vec<&clap::Command> = command
        .get_subcommands()
        .filter(|s| s.get_name() != "help")
        .collect();
    if !subs.is_empty() {
        roff.push_str(".SH COMMANDS\n");
        for sub in subs {
            let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
            if key == "snirelay" {
                let name = format!("snirelay-{}(1)", sub.get_name());
                roff.push_str(&format!(".TP\n{}\n{}\n", man_escape(&name), man_escape(&about)));
                continue;
            }
            // An action without a page of its own: its usage, what it
            // does, and its arguments.
            let usage = sub
                .clone()
                .bin_name(format!("{bin} {}", sub.get_name()))
                .render_usage()
                .to_string();
            let usage = usage.trim().trim_start_matches("Usage:").trim();
            let long = sub.get_long_about().map(|a| a.to_string());
            roff.push_str(&format!(
                ".TP\n\\fB{}\\fR\n{}\n",
                man_escape(usage),
                man_escape(long.as_deref().unwrap_or(&about))
            ));
            for arg in sub.get_arguments().filter(|a| !a.is_hide_set() && !a.is_global_set()) {
                let name = match arg.get_long() {
                    Some(long) => format!("--{long}"),
                    None if arg.is_positional() => arg.get_id().as_str().to_uppercase(),
                    None => continue,
                };
                if name == "--help" {
                    continue;
                }
                let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
                roff.push_str(&format!(
                    ".RS\n.TP\n\\fB{}\\fR\n{}\n.RE\n",
                    man_escape(&name),
                    man_escape(&help)
                ));
            }
        }
    }
    let mut table = |title: &str, rows: &[(&str, &str)], bold: bool| {
        if rows.is_empty() {
            return;
        }
        roff.push_str(&format!(".SH {title}\n"));
        for (term, meaning) in rows {
            let term = man_escape(term);
            let term = if bold { format!("\\fB{term}\\fR") } else { term };
            roff.push_str(&format!(".TP\n{term}\n{}\n", man_escape(meaning)));
        }
    };
    table("EXIT STATUS", manual.exit_status, true);
    table("SIGNALS", manual.signals, true);
    table("FILES", manual.files, false);
    table("ENVIRONMENT", manual.environment, true);
    if manual.environment.is_empty() {
        roff.push_str(".SH ENVIRONMENT\nNo environment variable changes what this command does.\n");
    }
    roff.push_str(".SH EXAMPLES\n");
    for (example, meaning) in manual.examples {
        roff.push_str(&format!(
            ".TP\n.B {}\n{}\n",
            man_escape(example),
            man_escape(meaning)
        ));
    }
    let own = format!("{}(1)", command.get_display_name().unwrap_or(command.get_name()));
    let others: Vec<String> = manual
        .see_also
        .iter()
        .filter(|page| **page != own)
        .map(|page| man_escape(page))
        .collect();
    roff.push_str(&format!(".SH SEE ALSO\n{}\n", others.join(", ")));
    roff.push_str(&format!(".SH VERSION\nv{}\n", man_escape(version)));
    page.extend_from_slice(roff.as_bytes());
    page
}

/// `page` with every line already seen among its first two dropped.
fn man_dedup_preamble(page: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(page);
    let preamble: Vec<&str> = text.lines().take(2).collect();
    let mut out = String::new();
    for (at, line) in text.lines().enumerate() {
        if at >= 2 && preamble.contains(&line) {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out.into_bytes()
}

/// Text as roff reads it literally: backslashes and hyphens escaped, and a
/// line that would start with a control character guarded.
fn man_escape(text: &str) -> String {
    let text = text.replace('\\', "\\e").replace('-', "\\-");
    text.lines()
        .map(|line| {
            if line.starts_with(['.', '\'']) {
                format!("\\&{line}")
            } else {
                line.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}
