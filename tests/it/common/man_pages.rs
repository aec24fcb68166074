// Shared by examples/manpage.rs (writes the pages) and tests/it/packaging.rs
// (checks the committed pages are current): the man pages generated from
// the clap definition in src/cli/mod.rs, as (file name, roff text).

/// Every man page: `snirelay.1`, then `snirelay-SUB.1` per subcommand.
pub(crate) fn snirelay_man_pages() -> Vec<(String, Vec<u8>)> {
    use clap::CommandFactory;
    let command = snirelay::cli::Cli::command();
    let mut pages = Vec::new();
    let mut top = Vec::new();
    clap_mangen::Man::new(command.clone())
        .render(&mut top)
        .expect("rendering to memory cannot fail");
    pages.push(("snirelay.1".to_owned(), top));
    for sub in command.get_subcommands() {
        let name = format!("snirelay-{}", sub.get_name());
        let mut page = Vec::new();
        clap_mangen::Man::new(sub.clone().display_name(name.clone()).bin_name(format!("snirelay {}", sub.get_name())))
            .render(&mut page)
            .expect("rendering to memory cannot fail");
        pages.push((format!("{name}.1"), page));
    }
    pages
}
