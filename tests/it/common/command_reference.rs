// Shared by examples/manpage.rs (writes docs/commands.md) and
// tests/it/packaging.rs (checks the committed file is current): the command
// reference in Markdown, generated from the clap definition in src/cli/mod.rs
// as the man pages are (see man_pages.rs beside it). Every subcommand, at
// any depth, gets a heading (`## snirelay check`, `### snirelay ctl
// drain`), its description, its usage line as clap prints it, a table
// of its arguments and options (options marked global are listed once,
// on the command that defines them), and, for `snirelay` and each command
// with a man page, its exit codes from src/cli/manual.rs.

/// Where the command reference is committed, relative to the repository.
pub(crate) const COMMAND_REFERENCE_PATH: &str = "docs/commands.md";

/// The whole of docs/commands.md.
pub(crate) fn snirelay_command_reference() -> String {
    use clap::CommandFactory;
    let command = snirelay::cli::Cli::command();
    let mut out = String::from(
        "<!-- Generated from src/cli/mod.rs by `cargo run --example manpage`; \
         do not edit (tests/it/packaging.rs fails when it is stale). -->\n\n\
         # Commands\n\n\
         Every subcommand and option of `snirelay`, generated from the\n\
         command-line definition the binary parses, as its man pages are\n\
         (`man snirelay`, `man snirelay-SUBCOMMAND`). Exit codes and signals:\n\
         [operations](operations.md#exit-codes-and-signals). Every command\n\
         also takes `-h` / `--help`.\n",
    );
    render_command(&command, "snirelay", 2, &mut out);
    out
}

/// One command's section, then its subcommands' one level deeper.
fn render_command(command: &clap::Command, path: &str, level: usize, out: &mut String) {
    let heading = "#".repeat(level.min(6));
    out.push_str(&format!("\n{heading} {path}\n\n"));
    let about = command
        .get_long_about()
        .or_else(|| command.get_about())
        .map(|text| text.to_string())
        .unwrap_or_default();
    if !about.trim().is_empty() {
        out.push_str(about.trim());
        out.push_str("\n\n");
    }
    let usage = command
        .clone()
        .bin_name(path.to_owned())
        .render_usage()
        .to_string();
    let usage = usage.trim().trim_start_matches("Usage:").trim();
    out.push_str(&format!("```text\n{usage}\n```\n"));

    let args: Vec<&clap::Arg> = command
        .get_arguments()
        .filter(|arg| !arg.is_hide_set())
        .collect();
    if !args.is_empty() {
        let title = if args.iter().any(|arg| arg.is_global_set()) {
            "| argument or option | default | meaning (options marked global also apply to every subcommand below) |"
        } else {
            "| argument or option | default | meaning |"
        };
        out.push_str(&format!("\n{title}\n|---|---|---|\n"));
        for arg in args {
            out.push_str(&format!(
                "| {} | {} | {} |\n",
                arg_name(arg),
                arg_default(arg),
                arg_meaning(arg)
            ));
        }
    }

    // The exit codes, from the table the man page has them from; a
    // command without a page of its own (a `ctl` action) has its parent's.
    if level <= 3 {
        if let Some(manual) = snirelay::cli::manual::manual(command.get_name()) {
            out.push_str("\nExit status:\n\n");
            for (code, when) in manual.exit_status {
                out.push_str(&format!("- `{code}`: {}\n", cell(when)));
            }
        }
    }

    let subcommands: Vec<&clap::Command> = command.get_subcommands().collect();
    if !subcommands.is_empty() {
        out.push_str("\nSubcommands:\n\n");
        for sub in &subcommands {
            let sub_path = format!("{path} {}", sub.get_name());
            let about = sub
                .get_about()
                .map(|text| text.to_string())
                .unwrap_or_default();
            out.push_str(&format!(
                "- [`{sub_path}`](#{}): {}\n",
                sub_path.replace(' ', "-"),
                cell(&about)
            ));
        }
        for sub in subcommands {
            render_command(sub, &format!("{path} {}", sub.get_name()), level + 1, out);
        }
    }
}

/// `-c`, `--config <CONFIG>`, or `<FILE>` for a positional argument.
fn arg_name(arg: &clap::Arg) -> String {
    let value = arg
        .get_value_names()
        .map(|names| {
            names
                .iter()
                .map(|name| format!("<{name}>"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| format!("<{}>", arg.get_id().as_str().to_uppercase()));
    if arg.is_positional() {
        return format!("`{value}`");
    }
    let takes_value = arg.get_num_args().is_none_or(|n| n.takes_values())
        && !matches!(
            arg.get_action(),
            clap::ArgAction::SetTrue
                | clap::ArgAction::SetFalse
                | clap::ArgAction::Count
                | clap::ArgAction::Help
                | clap::ArgAction::Version
        );
    let mut names = Vec::new();
    if let Some(short) = arg.get_short() {
        names.push(format!("`-{short}`"));
    }
    if let Some(long) = arg.get_long() {
        if takes_value {
            names.push(format!("`--{long} {value}`"));
        } else {
            names.push(format!("`--{long}`"));
        }
    }
    names.join(", ")
}

/// The default value, the accepted values, or `required`.
fn arg_default(arg: &clap::Arg) -> String {
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|value| format!("`{}`", value.to_string_lossy()))
        .collect();
    if !defaults.is_empty() {
        return defaults.join(", ");
    }
    if arg.is_required_set() || (arg.is_positional() && arg.get_default_values().is_empty()) {
        return "required".to_owned();
    }
    String::new()
}

/// The help text, then the accepted values, what it conflicts with or
/// needs, and whether it is global.
fn arg_meaning(arg: &clap::Arg) -> String {
    let mut text = arg
        .get_long_help()
        .or_else(|| arg.get_help())
        .map(|help| help.to_string())
        .unwrap_or_default();
    let text_end = text.trim_end();
    if !text_end.is_empty() && !text_end.ends_with('.') {
        text = format!("{text_end}.");
    }
    let flag = matches!(
        arg.get_action(),
        clap::ArgAction::SetTrue | clap::ArgAction::SetFalse
    );
    let values: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|value| !value.is_hide_set())
        .map(|value| format!("`{}`", value.get_name()))
        .collect();
    if !values.is_empty() && !flag {
        text.push_str(&format!(" One of {}.", values.join(", ")));
    }
    if arg.is_global_set() {
        text.push_str(" Global.");
    }
    cell(&text)
}

/// Text that fits in one table cell: one line, `|` escaped.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}
