//! The pushed local names: the set of names this node's control plane says
//! are served here (`POST /update-local-snis`, as Pangolin pushes to
//! Gerbil). A cluster backend with a `local_backend` sends a name in the set
//! there before any lookup (`cluster::Cache::lookup`).
//!
//! One set per process, replaced whole by each push ([`replace`]), kept
//! across reloads (it is run-time state, not configuration) and, when
//! `[admin] local_names_file` is set, across restarts: `save` writes it
//! atomically (a temporary file in the same directory, fsync'd, then
//! renamed over the old one), and [`load`] reads it at start, so a restart
//! serves the last pushed set until the next push.
//!
//! The file is JSON in the shape of the push (`{"fullDomains": [...]}`), so
//! an operator can read it, or replay it with curl.
//!
//! Cost on the hot path: a cluster backend with a `local_backend` takes a
//! read lock and one hash lookup per connection; a push builds a new set
//! and swaps it in under the write lock (O(names)).
//!
//! Not here: what a push does to open connections (`registry::move_out`)
//! and cached answers (`cluster::Cache::forget`), or the endpoint (`admin`).

use std::collections::HashSet;
use std::io::{self, Write};
use std::path::Path;
use std::sync::{Arc, LazyLock, Mutex, PoisonError, RwLock};

use crate::metrics;
use crate::wire::sni::Sni;

type Names = Arc<HashSet<Box<str>>>;

fn set() -> &'static RwLock<Names> {
    static SET: LazyLock<RwLock<Names>> = LazyLock::new(RwLock::default);
    &SET
}

/// Whether `sni` (normalised) was pushed as local.
pub fn contains(sni: &str) -> bool {
    set()
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .contains(sni)
}

/// What a push changed.
#[derive(Debug, Default)]
pub struct LocalNamesChange {
    /// Local now, not before.
    pub added: HashSet<Box<str>>,
    /// Local before, not now: their connections move.
    pub removed: HashSet<Box<str>>,
    /// Names in force after the push.
    pub len: usize,
}

/// Replaces the set; returns what changed.
pub fn replace(names: HashSet<Box<str>>) -> LocalNamesChange {
    let names = Arc::new(names);
    let old = std::mem::replace(
        &mut *set().write().unwrap_or_else(PoisonError::into_inner),
        names.clone(),
    );
    metrics::metrics().set_local_names(names.len());
    LocalNamesChange {
        added: names.difference(&old).cloned().collect(),
        removed: old.difference(&names).cloned().collect(),
        len: names.len(),
    }
}

/// Puts a pushed set in force, saving it to `file` first when one is
/// configured: if it cannot be written, nothing changes. Pushes are
/// serialised, so the file and the set in force are always the same push.
pub(crate) fn push(names: HashSet<Box<str>>, file: Option<&Path>) -> io::Result<LocalNamesChange> {
    static PUSHING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = PUSHING.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(path) = file {
        save(path, &names)?;
    }
    Ok(replace(names))
}

/// The names of a push, normalised as SNIs are (lowercase, no trailing
/// dot); those that are not host names (a client could never send them)
/// are returned apart, for the answer and the log.
pub fn normalise(raw: &[String]) -> (HashSet<Box<str>>, Vec<String>) {
    let mut names = HashSet::with_capacity(raw.len());
    let mut ignored = Vec::new();
    for text in raw {
        match Sni::parse_written(text.as_bytes()) {
            Ok(sni) => {
                names.insert(sni.as_str().into());
            }
            Err(_) => ignored.push(text.clone()),
        }
    }
    (names, ignored)
}

/// The file's JSON: the shape of a push.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct LocalNamesFile {
    full_domains: Vec<String>,
}

/// Writes `names` to `path` atomically: a reader (or a crash) sees the old
/// file or the new one, never a part.
pub(crate) fn save(path: &Path, names: &HashSet<Box<str>>) -> io::Result<()> {
    let mut sorted: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    sorted.sort_unstable();
    let text = serde_json::to_vec_pretty(&LocalNamesFile {
        full_domains: sorted,
    })
    .map_err(io::Error::other)?;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    let file_name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let mut temp_name = std::ffi::OsString::from(".");
    temp_name.push(file_name);
    temp_name.push(format!(".{}.tmp", std::process::id()));
    let temp = dir.map_or_else(|| temp_name.clone().into(), |d| d.join(&temp_name));
    let written = (|| {
        let mut file = std::fs::File::create(&temp)?;
        file.write_all(&text)?;
        file.write_all(b"\n")?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written?;
    // The rename is durable once the directory is synced.
    if let Some(dir) = dir
        && let Ok(dir) = std::fs::File::open(dir)
    {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// Reads the set saved at `path` and puts it in force; a missing file is an
/// empty set (nothing was pushed yet). Returns how many names it held and
/// how many of them were not host names (skipped).
pub fn load(path: &Path) -> io::Result<(usize, usize)> {
    let text = match std::fs::read(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((0, 0)),
        Err(e) => return Err(e),
    };
    let stored: LocalNamesFile =
        serde_json::from_slice(&text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    let (names, ignored) = normalise(&stored.full_domains);
    let change = replace(names);
    Ok((change.len, ignored.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_normalised_and_saved_atomically() {
        let raw = ["A.Example.COM.".to_owned(), "bad name".to_owned()];
        let (names, ignored) = normalise(&raw);
        assert!(names.contains("a.example.com"));
        assert_eq!(ignored, ["bad name"]);
        let dir = std::env::temp_dir().join(format!("snirelay-local-names-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("local-names.json");
        save(&path, &names).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"fullDomains\""), "{text}");
        let leftovers = std::fs::read_dir(&dir).unwrap().count();
        assert_eq!(leftovers, 1, "no temporary file left");
        assert_eq!(load(&path).unwrap(), (1, 0));
        assert!(contains("a.example.com"));
        assert_eq!(load(&dir.join("missing.json")).unwrap(), (0, 0));
        std::fs::write(&path, "{").unwrap();
        assert_eq!(load(&path).unwrap_err().kind(), io::ErrorKind::InvalidData);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
