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

/// A route's patterns while it is checked, before they join its
/// listener's [`NameIndex`]: their text in one string (as `Display`
/// writes them), and where each was written. A list of 100,000 names
/// costs its text and 12 bytes a name here, not a `String` each.
#[derive(Debug, Default)]
pub(super) struct Parsed {
    text: String,
    /// Where each pattern's text ends, and where it was written
    /// (`sni[i]`, or line `n` of the file, with the flag bit).
    ends: Vec<(u32, u32)>,
}

/// Marks an origin as a line of `sni_file` rather than a place in `sni`.
const LINE: u32 = 1 << 31;

impl Parsed {
    /// Appends `pattern`, written at `origin`.
    pub(super) fn push(&mut self, pattern: &Pattern, origin: PatternOrigin) {
        match pattern.as_pattern_ref() {
            PatternRef::Exact(name) => self.text.push_str(name),
            PatternRef::Below(suffix) => {
                self.text.push_str("*.");
                self.text.push_str(suffix);
            }
            PatternRef::Any => self.text.push('*'),
        }
        // The text of a route is bounded by the file's own caps (a 64 MiB
        // `sni_file`), far below `u32`; saturating keeps a bad count from
        // wrapping.
        let end = u32::try_from(self.text.len()).unwrap_or(u32::MAX);
        let origin = match origin {
            PatternOrigin::Inline(i) => u32::try_from(i).unwrap_or(LINE - 1),
            PatternOrigin::Line(n) => LINE | u32::try_from(n).unwrap_or(LINE - 1),
        };
        self.ends.push((end, origin));
    }

    /// Room for `bytes` more of patterns' text.
    pub(super) fn reserve_text(&mut self, bytes: usize) {
        self.text.reserve(bytes);
    }

    /// How many patterns were pushed.
    pub(super) fn len(&self) -> usize {
        self.ends.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The text of every pattern, in all.
    pub(super) fn text_len(&self) -> usize {
        self.text.len()
    }

    /// The first pattern, for a route's default name.
    pub(super) fn first(&self) -> Option<PatternRef<'_>> {
        self.iter().next().map(|(p, _)| p)
    }

    /// The patterns in order, with where each was written.
    pub(super) fn iter(&self) -> impl Iterator<Item = (PatternRef<'_>, PatternOrigin)> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().map(|&(end, _)| end));
        starts.zip(&self.ends).map(|(start, &(end, origin))| {
            let pattern = PatternRef::from_written(&self.text[start as usize..end as usize]);
            let origin = if origin & LINE == 0 {
                PatternOrigin::Inline(origin as usize)
            } else {
                PatternOrigin::Line((origin & !LINE) as usize)
            };
            (pattern, origin)
        })
    }
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
        patterns: &mut Parsed,
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
        // The patterns' text is at most the file's (lines lose their
        // ends, names their trailing dot): one allocation, not a doubling
        // series with a copy each.
        patterns.reserve_text(text.len());
        let mut bad = 0;
        for (n, line) in lines(&text) {
            match Pattern::parse(line) {
                Ok(pattern) => patterns.push(&pattern, PatternOrigin::Line(n)),
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
