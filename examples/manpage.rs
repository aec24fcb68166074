//! Writes what is generated from the clap command line: the man pages into
//! `packaging/` (`snirelay.1` and one `snirelay-SUBCOMMAND.1` per
//! subcommand), which the Debian package ships, and the command reference
//! `docs/commands.md`. Tests (`tests/it/packaging.rs`) fail when either is
//! stale.
//!
//! Run with: `cargo run --example manpage`

use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("packaging");
    for (name, page) in snirelay_man_pages() {
        let path = dir.join(name);
        std::fs::write(&path, page)?;
        println!("{}", path.display());
    }
    let path = root.join(COMMAND_REFERENCE_PATH);
    std::fs::write(&path, snirelay_command_reference())?;
    println!("{}", path.display());
    Ok(())
}

include!("../tests/it/common/man_pages.rs");
include!("../tests/it/common/command_reference.rs");
