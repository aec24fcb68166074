//! The `/metrics` exposition read back: every sample of the
//! Prometheus/OpenMetrics text ([`ExpositionSample`]: its series text, name,
//! labels and value), looked up by series or by name and labels
//! ([`Samples`]), and the series text `/metrics` writes for a name and
//! labels ([`series`]). The status page takes every number it shows from
//! here, so the page and a scrape taken at the same moment agree by
//! construction.
//!
//! Not here: writing the exposition ([`crate::metrics::registry::Metrics::render`]),
//! or the page ([`super::status`]).

/// One sample of the exposition: its series text as `/metrics` writes it
/// (`name{labels}`), the metric name, the labels, and the value.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ExpositionSample {
    pub(super) series: String,
    pub(super) name: String,
    pub(super) labels: Vec<(String, String)>,
    pub(super) value: f64,
}

impl ExpositionSample {
    pub(super) fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// The samples of a Prometheus/OpenMetrics text exposition, in order.
/// Comments and lines that do not parse are skipped.
pub(super) fn parse_exposition(text: &str) -> Vec<ExpositionSample> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let value: f64 = value.parse().ok()?;
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, parse_labels(rest.strip_suffix('}')?)?),
                None => (series, Vec::new()),
            };
            Some(ExpositionSample {
                series: series.to_owned(),
                name: name.to_owned(),
                labels,
                value,
            })
        })
        .collect()
}

/// `k="v",k2="v2"` (values with `\\`, `\"` and `\n` escapes).
fn parse_labels(text: &str) -> Option<Vec<(String, String)>> {
    let mut labels = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        labels.push((key.trim_start_matches(',').to_owned(), value));
        rest = after[end + 1..].trim_start_matches(',');
    }
    Some(labels)
}

/// The samples by series, with lookups by name and labels.
pub(super) struct Samples(pub(super) Vec<ExpositionSample>);

impl Samples {
    /// The samples of metric `name` whose labels include every `(k, v)` of
    /// `with`.
    pub(super) fn matching<'a>(
        &'a self,
        name: &'a str,
        with: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a ExpositionSample> + 'a {
        self.0
            .iter()
            .filter(move |s| s.name == name && with.iter().all(|(k, v)| s.label(k) == Some(*v)))
    }

    pub(super) fn value(&self, series: &str) -> f64 {
        self.0
            .iter()
            .find(|s| s.series == series)
            .map_or(0.0, |s| s.value)
    }
}

/// The series text `/metrics` writes for `name` with `labels`, in that
/// order (the order of the label struct's fields in `metrics`).
pub(super) fn series(name: &str, labels: &[(&str, &str)]) -> String {
    if labels.is_empty() {
        return name.to_owned();
    }
    let inner: Vec<String> = labels
        .iter()
        .map(|(k, v)| {
            let v = v
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            format!("{k}=\"{v}\"")
        })
        .collect();
    format!("{name}{{{}}}", inner.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exposition_parses_back_into_its_series() {
        let text = "# HELP x y\nsnirelay_reloads_total{outcome=\"ok\"} 3\n\
                    snirelay_connections_draining 0\n\
                    a_total{listener=\"t\\\"x\",route=\"r\"} 1.5\n# EOF\n";
        let samples = parse_exposition(text);
        assert_eq!(samples.len(), 3);
        assert_eq!(samples[0].series, "snirelay_reloads_total{outcome=\"ok\"}");
        assert_eq!(samples[0].label("outcome"), Some("ok"));
        assert_eq!(samples[1].name, "snirelay_connections_draining");
        assert_eq!(samples[2].label("listener"), Some("t\"x"));
        assert_eq!(samples[2].label("route"), Some("r"));
        assert_eq!(
            series("a_total", &[("listener", "t\"x"), ("route", "r")]),
            samples[2].series
        );
    }
}
