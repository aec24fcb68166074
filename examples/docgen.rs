//! Writes the configuration reference generated from the key declarations
//! (`src/config/keys.rs`): `docs/config-keys.md` and the
//! `snirelay.toml(5)` man page, `packaging/snirelay.toml.5`. A test
//! (`tests/it/config.rs`) fails when the committed files are stale.
//!
//! Run with: `cargo run --example docgen`

use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    for (name, text) in snirelay::config::reference::generated_files() {
        let path = root.join(name);
        std::fs::write(&path, text)?;
        println!("{}", path.display());
    }
    Ok(())
}
