//! Reading Prometheus text exposition (the apiserver's and kruise-manager's `/metrics`): samples with
//! their labels, and histograms whose quantiles are interpolated from bucket counts.

use std::collections::BTreeMap;

/// One sample line: `name{labels} value`.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

impl Sample {
    /// The value of label `key`, or "" when the sample has none (as Prometheus reads a missing label).
    pub fn label(&self, key: &str) -> &str {
        self.labels.get(key).map_or("", String::as_str)
    }
}

/// Every sample of metric `name` in `text`. Comment lines, other metrics and lines that do not parse
/// are skipped.
pub fn samples(text: &str, name: &str) -> Vec<Sample> {
    text.lines()
        .filter(|line| line.starts_with(name))
        .filter_map(parse_line)
        .filter(|sample| sample.name == name)
        .collect()
}

/// The sum of the samples of metric `name` in `text` that `keep` accepts (a counter over some of
/// its label sets).
pub fn sum(text: &str, name: &str, keep: impl Fn(&Sample) -> bool) -> f64 {
    samples(text, name)
        .iter()
        .filter(|sample| keep(sample))
        .map(|sample| sample.value)
        .sum()
}

/// Parses `name{k="v",...} value [timestamp]` or `name value`. Label values may hold escaped quotes,
/// backslashes and commas.
fn parse_line(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line.find(['{', ' '])?;
    let name = line[..name_end].to_string();
    let mut labels = BTreeMap::new();
    let mut rest = &line[name_end..];
    if let Some(inner) = rest.strip_prefix('{') {
        let (parsed, after) = parse_labels(inner)?;
        labels = parsed;
        rest = after;
    }
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        other => other.parse().ok()?,
    };
    Some(Sample {
        name,
        labels,
        value,
    })
}

/// The labels up to the closing `}`, and the text after it.
fn parse_labels(mut text: &str) -> Option<(BTreeMap<String, String>, &str)> {
    let mut labels = BTreeMap::new();
    loop {
        text = text.trim_start_matches([',', ' ']);
        if let Some(after) = text.strip_prefix('}') {
            return Some((labels, after));
        }
        let (key, after_key) = text.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after_key.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                (_, c) => value.push(c),
            }
        };
        labels.insert(key.trim().to_string(), value);
        text = &after_key[end + 1..];
    }
}

/// A histogram's cumulative bucket counts by upper bound (the last bound is `+Inf`), its sum and count.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Histogram {
    pub buckets: Vec<(f64, f64)>,
    pub sum: f64,
    pub count: f64,
}

impl Histogram {
    /// Histogram `name` (the `_bucket`, `_sum` and `_count` series) summed over the label sets that
    /// `keep` accepts.
    pub fn read(text: &str, name: &str, keep: impl Fn(&Sample) -> bool) -> Self {
        let mut buckets: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
        for sample in samples(text, &format!("{name}_bucket")) {
            let Ok(le) = sample.label("le").parse::<f64>() else {
                continue;
            };
            if keep(&sample) {
                // f64's order and total_cmp agree for the non-negative bounds used here.
                buckets.entry(le.to_bits()).or_insert((le, 0.0)).1 += sample.value;
            }
        }
        let mut buckets: Vec<(f64, f64)> = buckets.into_values().collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        let total = |suffix: &str| -> f64 {
            samples(text, &format!("{name}{suffix}"))
                .iter()
                .filter(|s| keep(s))
                .map(|s| s.value)
                .sum()
        };
        Self {
            buckets,
            sum: total("_sum"),
            count: total("_count"),
        }
    }

    /// The observations made since `before` (bucket by bucket; buckets `before` lacks count from 0).
    pub fn since(&self, before: &Histogram) -> Self {
        let earlier = |le: f64| {
            before
                .buckets
                .iter()
                .find(|(b, _)| *b == le)
                .map_or(0.0, |(_, c)| *c)
        };
        Self {
            buckets: self
                .buckets
                .iter()
                .map(|&(le, count)| (le, count - earlier(le)))
                .collect(),
            sum: self.sum - before.sum,
            count: self.count - before.count,
        }
    }

    /// The mean observation, if any.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0.0).then(|| self.sum / self.count)
    }

    /// Quantile `q` (0..=1) as Prometheus' `histogram_quantile` estimates it: the bucket holding the
    /// rank `q × count`, interpolated linearly between its lower bound (0 for the first bucket) and
    /// its upper bound. A rank in the `+Inf` bucket reads as the highest finite bound. `None` without
    /// observations.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.buckets.last()?.1;
        if total <= 0.0 {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * total;
        let mut lower = (0.0, 0.0);
        for &(le, cumulative) in &self.buckets {
            if cumulative >= rank && cumulative > lower.1 {
                if le.is_infinite() {
                    return Some(lower.0);
                }
                let share = (rank - lower.1) / (cumulative - lower.1);
                return Some(lower.0 + (le - lower.0) * share);
            }
            lower = (le, cumulative);
        }
        Some(lower.0)
    }

    /// Whether quantile `q` lies above the highest finite bound, so that [`Histogram::quantile`]
    /// gives only a lower bound.
    pub fn beyond_buckets(&self, q: f64) -> bool {
        let Some(&(_, total)) = self.buckets.last() else {
            return false;
        };
        let within = self
            .buckets
            .iter()
            .rev()
            .find(|(le, _)| le.is_finite())
            .map_or(0.0, |&(_, cumulative)| cumulative);
        total > 0.0 && q.clamp(0.0, 1.0) * total > within
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP lat Latency.
# TYPE lat histogram
lat_bucket{path="/a",le="0.001"} 10
lat_bucket{path="/a",le="0.002"} 60
lat_bucket{path="/a",le="0.004"} 100
lat_bucket{path="/a",le="+Inf"} 100
lat_sum{path="/a"} 0.2
lat_count{path="/a"} 100
lat_bucket{path="/b",le="0.001"} 5
lat_bucket{path="/b",le="0.002"} 5
lat_bucket{path="/b",le="0.004"} 5
lat_bucket{path="/b",le="+Inf"} 5
lat_sum{path="/b"} 0.001
lat_count{path="/b"} 5
apiserver_request_total{code="201",component="apiserver",group="",resource="pods",subresource="",verb="POST",version="v1"} 2000
odd{msg="a \"quoted\", comma\\ here",x="1"} 3 1700000000
plain 7
"#;

    /// A metric name, its labels and its value.
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], f64);

    #[test]
    fn sums_the_samples_kept() {
        assert_eq!(sum(TEXT, "lat_count", |_| true), 105.0);
        assert_eq!(sum(TEXT, "lat_count", |s| s.label("path") == "/b"), 5.0);
        assert_eq!(sum(TEXT, "absent", |_| true), 0.0);
    }

    #[test]
    fn sample_lines() {
        let cases: &[Case] = &[
            ("plain", &[], 7.0),
            (
                "odd",
                &[("msg", "a \"quoted\", comma\\ here"), ("x", "1")],
                3.0,
            ),
            (
                "apiserver_request_total",
                &[
                    ("code", "201"),
                    ("component", "apiserver"),
                    ("group", ""),
                    ("resource", "pods"),
                    ("subresource", ""),
                    ("verb", "POST"),
                    ("version", "v1"),
                ],
                2000.0,
            ),
        ];
        for (name, labels, value) in cases {
            let found = samples(TEXT, name);
            assert_eq!(found.len(), 1, "{name}: {found:?}");
            let want: BTreeMap<String, String> = labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            assert_eq!(found[0].labels, want, "{name}");
            assert_eq!(found[0].value, *value, "{name}");
        }
        // A prefix of another metric's name is not that metric.
        assert!(samples(TEXT, "pla").is_empty());
        assert_eq!(samples(TEXT, "lat_bucket").len(), 8);
    }

    #[test]
    fn histogram_filtered_and_summed() {
        let a = Histogram::read(TEXT, "lat", |s| s.label("path") == "/a");
        assert_eq!(
            a.buckets,
            vec![
                (0.001, 10.0),
                (0.002, 60.0),
                (0.004, 100.0),
                (f64::INFINITY, 100.0)
            ]
        );
        assert_eq!((a.sum, a.count), (0.2, 100.0));
        let both = Histogram::read(TEXT, "lat", |_| true);
        assert_eq!(both.buckets[0], (0.001, 15.0));
        assert_eq!(both.count, 105.0);
    }

    #[test]
    fn quantiles_interpolate_within_the_bucket() {
        let a = Histogram::read(TEXT, "lat", |s| s.label("path") == "/a");
        let cases = [
            // rank 5 of 10 in [0, 1 ms]
            (0.05, 0.0005),
            // rank 50: 40 of 50 into [1, 2 ms]
            (0.5, 0.0018),
            // rank 99: 39 of 40 into [2, 4 ms]
            (0.99, 0.00395),
            (1.0, 0.004),
        ];
        for (q, want) in cases {
            let got = a.quantile(q).expect("observations");
            assert!((got - want).abs() < 1e-12, "q {q}: {got} want {want}");
        }
        assert_eq!(a.mean(), Some(0.002));
    }

    #[test]
    fn quantile_edges() {
        let empty = Histogram::default();
        assert_eq!(empty.quantile(0.5), None);
        assert_eq!(empty.mean(), None);
        // Everything above the highest finite bound reads as that bound.
        let overflow = Histogram {
            buckets: vec![(1.0, 0.0), (2.0, 0.0), (f64::INFINITY, 4.0)],
            sum: 20.0,
            count: 4.0,
        };
        assert_eq!(overflow.quantile(0.5), Some(2.0));
        assert!(overflow.beyond_buckets(0.5));
        // Empty buckets before the rank are skipped, not interpolated into.
        let gap = Histogram {
            buckets: vec![(1.0, 0.0), (2.0, 0.0), (4.0, 2.0), (f64::INFINITY, 2.0)],
            sum: 6.0,
            count: 2.0,
        };
        assert_eq!(gap.quantile(0.5), Some(3.0));
        assert_eq!(gap.quantile(0.0), Some(2.0));
        assert!(!gap.beyond_buckets(1.0));
        assert!(!empty.beyond_buckets(0.5));
    }

    #[test]
    fn since_subtracts_bucket_by_bucket() {
        let before = Histogram {
            buckets: vec![(1.0, 2.0), (f64::INFINITY, 3.0)],
            sum: 4.0,
            count: 3.0,
        };
        let after = Histogram {
            buckets: vec![(1.0, 5.0), (f64::INFINITY, 9.0)],
            sum: 10.0,
            count: 9.0,
        };
        assert_eq!(
            after.since(&before),
            Histogram {
                buckets: vec![(1.0, 3.0), (f64::INFINITY, 6.0)],
                sum: 6.0,
                count: 6.0,
            }
        );
        // Against nothing (the series did not exist yet) the delta is the histogram itself.
        assert_eq!(after.since(&Histogram::default()), after);
    }
}
