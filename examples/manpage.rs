//! Writes the man pages generated from the clap command line into
//! `packaging/`: `snirelay.1` and one `snirelay-SUBCOMMAND.1` per
//! subcommand. The Debian package ships them; a test
//! (`tests/it/packaging.rs`) fails when they are stale.
//!
//! Run with: `cargo run --example manpage`

use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("packaging");
    for (name, page) in snirelay_man_pages() {
        let path = dir.join(name);
        std::fs::write(&path, page)?;
        println!("{}", path.display());
    }
    Ok(())
}

include!("../tests/it/common/man_pages.rs");
