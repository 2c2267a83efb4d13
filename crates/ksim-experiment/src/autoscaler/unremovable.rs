//! Why cluster-autoscaler keeps nodes: its unremovable reasons, as it publishes them.
//!
//! CA publishes them in one place only, the gauge [`METRIC`]`{reason}` on its diagnostics
//! address's `/metrics` (metrics/metrics.go, `UpdateUnremovableNodesCount`). `reason` is the
//! decimal number of `simulator.UnremovableReason` (simulator/cluster.go), named here by
//! [`reason_name`]. The gauge has no node group label, and CA sets it once per loop only for
//! the reasons present in that loop (core/static_autoscaler.go, `countsByReason`): a reason no
//! node has any more keeps its last value. Pure: the caller reads the text, bounded.

use std::collections::BTreeMap;

/// The gauge's name in CA's Prometheus text.
pub const METRIC: &str = "cluster_autoscaler_unremovable_nodes_count";

/// The process collector's start time, which every CA release exposes beside its own metrics.
const START_TIME: &str = "process_start_time_seconds";

/// `simulator.UnremovableReason` by number, as 1.34.5, 1.35.2 and 1.36.1 define it (the same
/// numbering in all three; 18 exists from 1.36 on).
const REASONS: [&str; 19] = [
    "NoReason",
    "ScaleDownDisabledAnnotation",
    "ScaleDownUnreadyDisabled",
    "NotAutoscaled",
    "NotUnneededLongEnough",
    "NotUnreadyLongEnough",
    "NodeGroupMinSizeReached",
    "NodeGroupMaxDeletionCountReached",
    "AtomicScaleDownFailed",
    "MinimalResourceLimitExceeded",
    "CurrentlyBeingDeleted",
    "NotUnderutilized",
    "NotUnneededOtherReason",
    "RecentlyUnremovable",
    "NoPlaceToMovePods",
    "BlockedByPod",
    "UnexpectedError",
    "NoNodeInfo",
    "BlockedByOnCompletionPod",
];

/// CA's name for reason `code`; `None` for a number the tested releases do not define.
pub fn reason_name(code: u32) -> Option<&'static str> {
    usize::try_from(code)
        .ok()
        .and_then(|index| REASONS.get(index))
        .copied()
}

/// What one read of CA's `/metrics` says of unremovable nodes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UnremovableCounts {
    /// Nodes per reason number, as the gauge stands (a reason CA never set is absent).
    pub counts: BTreeMap<u32, u64>,
    /// When the CA process started, Unix seconds; `None` if the text does not say.
    pub process_start_seconds: Option<f64>,
}

/// A line of [`METRIC`] (or of the start time) that is not what CA writes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cluster-autoscaler's /metrics line {line}: {problem}")]
pub struct MetricsError {
    /// From 1.
    pub line: usize,
    pub problem: String,
}

/// The unremovable counts in Prometheus text exposition `text`. Only the lines of [`METRIC`]
/// (and the start time) are read; one of them malformed refuses the whole read rather than
/// report a partial picture.
pub fn parse(text: &str) -> Result<UnremovableCounts, MetricsError> {
    let mut read = UnremovableCounts::default();
    for (index, line) in text.lines().enumerate() {
        let fail = |problem: String| MetricsError {
            line: index + 1,
            problem,
        };
        if let Some(rest) = sample_of(line, METRIC) {
            let (labels, value) = split_labels(rest).map_err(fail)?;
            let reason = labels
                .iter()
                .find(|(name, _)| name == "reason")
                .map(|(_, value)| value.as_str())
                .ok_or_else(|| fail(format!("{METRIC} without a reason label")))?;
            let code: u32 = reason
                .parse()
                .map_err(|_| fail(format!("reason {reason:?} is not a number")))?;
            let nodes = node_count(value).map_err(fail)?;
            if read.counts.insert(code, nodes).is_some() {
                return Err(fail(format!("reason {code} appears twice")));
            }
        } else if let Some(rest) = sample_of(line, START_TIME) {
            let (_, value) = split_labels(rest).map_err(fail)?;
            let seconds = first_field(value)
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s >= 0.0)
                .ok_or_else(|| fail(format!("{START_TIME} {value:?} is not a time")))?;
            read.process_start_seconds = Some(seconds);
        }
    }
    Ok(read)
}

/// The rest of `line` after `name` when it is a sample of exactly that metric.
fn sample_of<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let rest = line.strip_prefix(name)?;
    (rest.starts_with('{') || rest.starts_with([' ', '\t'])).then_some(rest)
}

/// A sample's labels, name and value.
type Labels = Vec<(String, String)>;

/// The labels (`{a="b",...}`, possibly absent) and what follows them.
fn split_labels(rest: &str) -> Result<(Labels, &str), String> {
    let Some(mut inside) = rest.strip_prefix('{') else {
        return Ok((Vec::new(), rest.trim()));
    };
    let mut labels = Vec::new();
    loop {
        inside = inside.trim_start_matches([' ', ',']);
        if let Some(after) = inside.strip_prefix('}') {
            return Ok((labels, after.trim()));
        }
        let (name, after) = inside
            .split_once("=\"")
            .ok_or_else(|| "unterminated labels".to_owned())?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                Some((at, '"')) => break at,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, escaped)) => value.push(escaped),
                    None => return Err("unterminated label value".to_owned()),
                },
                Some((_, c)) => value.push(c),
                None => return Err("unterminated label value".to_owned()),
            }
        };
        labels.push((name.trim().to_owned(), value));
        inside = &after[end + 1..];
    }
}

/// The value before an optional timestamp.
fn first_field(value: &str) -> &str {
    value.split_whitespace().next().unwrap_or("")
}

/// A gauge of nodes: a whole number, not negative.
fn node_count(value: &str) -> Result<u64, String> {
    let field = first_field(value);
    let number: f64 = field
        .parse()
        .map_err(|_| format!("value {field:?} is not a number"))?;
    if !number.is_finite() || number < 0.0 || number.fract() != 0.0 || number > u64::MAX as f64 {
        return Err(format!("value {field:?} is not a count of nodes"));
    }
    // Whole, finite and in range: the conversion is exact.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Ok(number as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CA_TEXT: &str = "\
# HELP cluster_autoscaler_unremovable_nodes_count [ALPHA] Number of nodes currently considered unremovable by CA.
# TYPE cluster_autoscaler_unremovable_nodes_count gauge
cluster_autoscaler_unremovable_nodes_count{reason=\"11\"} 12
cluster_autoscaler_unremovable_nodes_count{reason=\"15\"} 1
cluster_autoscaler_unremovable_nodes_count_other{reason=\"x\"} nonsense
cluster_autoscaler_unneeded_nodes_count 3
# HELP process_start_time_seconds [ALPHA] Start time of the process since unix epoch in seconds.
process_start_time_seconds 1.76722560012e+09
";

    #[test]
    fn reads_the_gauge_per_reason_and_the_start_time_only() {
        let read = parse(CA_TEXT).unwrap();
        assert_eq!(read.counts, BTreeMap::from([(11, 12), (15, 1)]));
        assert_eq!(read.process_start_seconds, Some(1_767_225_600.12));
        assert_eq!(parse("").unwrap(), UnremovableCounts::default());
    }

    #[test]
    fn go_float_forms_and_timestamps_are_counts() {
        let read = parse(
            "cluster_autoscaler_unremovable_nodes_count{reason=\"4\"} 1e+06 1767225600000\n\
             cluster_autoscaler_unremovable_nodes_count{ reason=\"6\" ,} 0\n",
        )
        .unwrap();
        assert_eq!(read.counts, BTreeMap::from([(4, 1_000_000), (6, 0)]));
    }

    #[test]
    fn a_malformed_line_of_the_metric_is_refused_naming_its_line() {
        for (text, problem) in [
            (
                "cluster_autoscaler_unremovable_nodes_count{reason=\"x\"} 1",
                "not a number",
            ),
            (
                "cluster_autoscaler_unremovable_nodes_count{reason=\"1\"} 1.5",
                "not a count",
            ),
            (
                "cluster_autoscaler_unremovable_nodes_count{reason=\"1\"} -1",
                "not a count",
            ),
            (
                "cluster_autoscaler_unremovable_nodes_count{reason=\"1\"} NaN",
                "not a count",
            ),
            (
                "cluster_autoscaler_unremovable_nodes_count 3",
                "without a reason",
            ),
            (
                "cluster_autoscaler_unremovable_nodes_count{reason=\"1} 3",
                "unterminated",
            ),
            (
                "cluster_autoscaler_unremovable_nodes_count{reason=\"1\"} 3\n\
                 cluster_autoscaler_unremovable_nodes_count{reason=\"1\"} 4",
                "twice",
            ),
            ("process_start_time_seconds soon", "not a time"),
        ] {
            let error = parse(&format!("# TYPE x gauge\n{text}\n")).unwrap_err();
            assert!(error.line >= 2, "{text}: {error}");
            assert!(error.to_string().contains(problem), "{text}: {error}");
        }
    }

    #[test]
    fn every_tested_release_names_its_reasons() {
        assert_eq!(reason_name(0), Some("NoReason"));
        assert_eq!(reason_name(4), Some("NotUnneededLongEnough"));
        assert_eq!(reason_name(11), Some("NotUnderutilized"));
        assert_eq!(reason_name(15), Some("BlockedByPod"));
        assert_eq!(reason_name(18), Some("BlockedByOnCompletionPod"));
        assert_eq!(reason_name(19), None);
        assert_eq!(reason_name(u32::MAX), None);
    }
}
