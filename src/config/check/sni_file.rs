//! Reads a route's `sni_file`: one name or pattern a line, as `sni` takes
//! them, for lists an operator's tooling writes (HAProxy's
//! `req.ssl_sni -f FILE`, an nginx `map` include).
//!
//! The file is read whole, with the configuration, at start, by `check`
//! and at every reload; a line is trimmed, and blank lines and lines whose
//! first character is `#` are skipped (a `#` after a name is not a
//! comment: the line is refused, as HAProxy would look the whole line up).
//! Each bad line is a problem naming the file and the line
//! (`names.lst:17: ...`), with the message an inline name gets.
//!
//! Not here: what a pattern means (`wire::sni`), or duplicates across
//! routes (the route checker, [`super::route`], which sees every pattern).

use std::io::Read;

use super::*;

/// Largest `sni_file` read: about a million names of 60 bytes. A bigger
/// file is refused rather than read into memory.
pub(crate) const MAX_SNI_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// Bad lines reported one by one; the rest are counted in one more
/// problem, so a wrong file does not print a million lines.
const MAX_LINE_PROBLEMS: usize = 20;

/// Where one of a route's patterns was written: for the key and the
/// words of a problem about it.
#[derive(Debug, Clone, Copy)]
pub(super) enum PatternOrigin {
    /// `sni[i]`.
    Inline(usize),
    /// Line `n` (from 1) of `sni_file`.
    Line(usize),
}

impl Checker {
    /// Reads `sni_file` (found from the configuration's directory) and
    /// appends its patterns; `None` after recording why when the file
    /// cannot be read or has a bad line. `written` is the path as the
    /// file gives it, which problems name.
    pub(super) fn sni_file(
        &mut self,
        key: &str,
        written: &str,
        patterns: &mut Vec<(Pattern, PatternOrigin)>,
    ) -> Option<PathBuf> {
        let key = format!("{key}.sni_file");
        if written.is_empty() {
            self.problem(key, "\"\" names no file");
            return None;
        }
        let path = self.dir.join(written);
        let text = match read_capped(&path) {
            Ok(text) => text,
            Err(why) => {
                self.problem(key, why);
                return None;
            }
        };
        let mut bad = 0;
        for (n, line) in lines(&text) {
            match Pattern::parse(line) {
                Ok(pattern) => patterns.push((pattern, PatternOrigin::Line(n))),
                Err(e) => {
                    bad += 1;
                    if bad <= MAX_LINE_PROBLEMS {
                        self.problem(&key, format!("{written}:{n}: {line:?}: {e}"));
                    }
                }
            }
        }
        if bad > MAX_LINE_PROBLEMS {
            self.problem(
                &key,
                format!(
                    "{written}: {} more bad lines not listed",
                    bad - MAX_LINE_PROBLEMS
                ),
            );
        }
        (bad == 0).then_some(path)
    }
}

/// The lines of an `sni_file` that hold a pattern, with their numbers
/// (from 1): trimmed; blank lines and `#` comments skipped.
pub(super) fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(n, l)| (n + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
}

/// The file's text: a regular file (a FIFO would block the reload), UTF-8,
/// at most [`MAX_SNI_FILE_BYTES`].
fn read_capped(path: &Path) -> Result<String, String> {
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| format!("{shown}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{shown}: not a regular file"));
    }
    if meta.len() > MAX_SNI_FILE_BYTES {
        return Err(format!("{shown}: larger than {MAX_SNI_FILE_BYTES} bytes"));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_SNI_FILE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| format!("{shown}: {e}"))?;
    if bytes.len() as u64 > MAX_SNI_FILE_BYTES {
        return Err(format!("{shown}: larger than {MAX_SNI_FILE_BYTES} bytes"));
    }
    String::from_utf8(bytes).map_err(|e| {
        let line = 1 + e.as_bytes()[..e.utf8_error().valid_up_to()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count();
        format!("{shown}:{line}: not UTF-8 (write names in punycode, `xn--…`)")
    })
}

#[cfg(test)]
mod tests {
    use super::lines;

    #[test]
    fn comments_and_blank_lines_are_skipped_and_lines_keep_their_numbers() {
        let text = "# customers\n\na.example\n  *.b.example  \n\t# indented comment\nc.example # not a comment\r\n";
        let got: Vec<(usize, &str)> = lines(text).collect();
        assert_eq!(
            got,
            [
                (3, "a.example"),
                (4, "*.b.example"),
                (6, "c.example # not a comment")
            ]
        );
    }
}
