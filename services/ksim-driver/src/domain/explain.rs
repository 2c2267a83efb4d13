//! Why explained pods went where they did: which pods a run asks the scheduler to explain
//! (the `ksim.dev/explain` annotation on their templates), and the explanation the scheduler
//! writes (`ksim.dev/scheduling-explanation`, JSON; deploy/control-plane/ksim-scheduler) read
//! into the report's terms. The annotation is untrusted input: its size is bounded, and what
//! is beyond the bounds the scheduler keeps to is dropped.

use std::collections::BTreeSet;

use k8s_openapi::jiff::Timestamp;
use ksim_proto::ksim::driver::v1 as pb;
use serde::Deserialize;

/// The annotation on a pod template asking the scheduler to explain its pods: `all`, or N
/// for at most N pods of each workload.
pub const EXPLAIN_ANNOTATION: &str = "ksim.dev/explain";
/// The annotation the scheduler writes an explained pod's attempts to.
pub const EXPLANATION_ANNOTATION: &str = "ksim.dev/scheduling-explanation";
/// Pods whose explanations a report keeps: the first seen. At about 2 KB each, a report stays
/// within tens of megabytes.
pub const MAX_EXPLAINED_PODS: usize = 10_000;
/// Namespaces a spec may name.
pub const MAX_NAMESPACES: usize = 1_000;
/// The longest explanation read; the scheduler's bounds keep one under 8 KiB.
const MAX_EXPLANATION_BYTES: usize = 64 * 1024;
/// The scheduler's own bounds (explain.go), kept to on reading.
const MAX_ATTEMPTS: usize = 3;
const MAX_REJECTIONS: usize = 8;
const MAX_EXAMPLES: usize = 3;
const MAX_SCORED: usize = 4;
const MAX_PLUGINS: usize = 32;
const MAX_TEXT: usize = 512;

/// The pods a run explains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExplainScope {
    /// At most this many pods of each workload; `None`: every pod.
    pub pods_per_owner: Option<u32>,
    /// Only pods of these recorded namespaces; empty: every namespace.
    pub namespaces: BTreeSet<String>,
}

/// Why a spec's `explain` is refused: the field and the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} {problem}")]
pub struct ScopeError {
    pub field: &'static str,
    pub problem: String,
}

impl ExplainScope {
    pub fn from_proto(explain: &pb::Explain) -> Result<Self, ScopeError> {
        if explain.namespaces.len() > MAX_NAMESPACES {
            return Err(ScopeError {
                field: "spec.explain.namespaces",
                problem: format!(
                    "names {} namespaces, at most {MAX_NAMESPACES}",
                    explain.namespaces.len()
                ),
            });
        }
        let mut namespaces = BTreeSet::new();
        for namespace in &explain.namespaces {
            if !ksim_nodes::names::is_dns_label(namespace) {
                return Err(ScopeError {
                    field: "spec.explain.namespaces",
                    problem: format!("{namespace:?} is not a namespace name (a DNS label)"),
                });
            }
            namespaces.insert(namespace.clone());
        }
        Ok(Self {
            pods_per_owner: (explain.pods_per_owner > 0).then_some(explain.pods_per_owner),
            namespaces,
        })
    }

    /// The annotation's value on the templates of `recorded_namespace`, if its pods are
    /// explained.
    pub fn annotation(&self, recorded_namespace: &str) -> Option<String> {
        if !self.namespaces.is_empty() && !self.namespaces.contains(recorded_namespace) {
            return None;
        }
        Some(
            self.pods_per_owner
                .map_or_else(|| "all".to_owned(), |n| n.to_string()),
        )
    }
}

/// Why an explanation could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExplanationError {
    #[error("the explanation is {0} bytes, over {MAX_EXPLANATION_BYTES}")]
    TooLong(usize),
    #[error("the explanation is not the scheduler's JSON: {0}")]
    Malformed(String),
}

/// The annotation as the scheduler writes it (explain.go).
#[derive(Debug, Deserialize)]
struct Written {
    attempts: Vec<WrittenAttempt>,
}

#[derive(Debug, Deserialize)]
struct WrittenAttempt {
    time: String,
    #[serde(default)]
    node: String,
    #[serde(default)]
    nodes: u32,
    #[serde(default)]
    feasible: u32,
    #[serde(default)]
    rejected: Vec<WrittenRejection>,
    #[serde(default)]
    scores: Vec<WrittenScores>,
    #[serde(default)]
    message: String,
}

#[derive(Debug, Deserialize)]
struct WrittenRejection {
    plugin: String,
    reason: String,
    nodes: u32,
    #[serde(default)]
    examples: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct WrittenScores {
    node: String,
    total: i64,
    #[serde(default)]
    plugins: std::collections::BTreeMap<String, i64>,
}

/// A pod's attempts from its annotation `text`, each at its offset since the replay started
/// (`started_at_ms`, unix; wall clock, as the scheduler's times are; the report turns it into
/// recorded time), oldest first. An attempt from before the start is at 0.
pub fn attempts(
    text: &str,
    started_at_ms: i64,
) -> Result<Vec<pb::SchedulingAttempt>, ExplanationError> {
    if text.len() > MAX_EXPLANATION_BYTES {
        return Err(ExplanationError::TooLong(text.len()));
    }
    let written: Written = serde_json::from_str(text)
        .map_err(|error| ExplanationError::Malformed(error.to_string()))?;
    let skip = written.attempts.len().saturating_sub(MAX_ATTEMPTS);
    written
        .attempts
        .into_iter()
        .skip(skip)
        .map(|attempt| {
            let at: Timestamp = attempt.time.parse().map_err(|_| {
                ExplanationError::Malformed(format!(
                    "{:?} is not an RFC 3339 time",
                    clip(&attempt.time)
                ))
            })?;
            let since = at.as_millisecond().saturating_sub(started_at_ms).max(0);
            Ok(pb::SchedulingAttempt {
                offset: Some(ksim_proto::json::of_millis(since.unsigned_abs())),
                node: clip(&attempt.node),
                nodes: attempt.nodes,
                feasible: attempt.feasible,
                rejected: attempt
                    .rejected
                    .into_iter()
                    .take(MAX_REJECTIONS)
                    .map(|group| pb::FilterRejection {
                        plugin: clip(&group.plugin),
                        reason: clip(&group.reason),
                        nodes: group.nodes,
                        examples: group
                            .examples
                            .iter()
                            .take(MAX_EXAMPLES)
                            .map(|n| clip(n))
                            .collect(),
                    })
                    .collect(),
                scores: attempt
                    .scores
                    .into_iter()
                    .take(MAX_SCORED)
                    .map(|node| pb::NodeScore {
                        node: clip(&node.node),
                        total: node.total,
                        plugins: node
                            .plugins
                            .into_iter()
                            .take(MAX_PLUGINS)
                            .map(|(plugin, score)| pb::PluginScore {
                                plugin: clip(&plugin),
                                score,
                            })
                            .collect(),
                    })
                    .collect(),
                message: clip(&attempt.message),
            })
        })
        .collect()
}

fn clip(text: &str) -> String {
    if text.len() <= MAX_TEXT {
        return text.to_owned();
    }
    let mut end = MAX_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_annotates_its_namespaces_with_its_bound() {
        let every = ExplainScope::from_proto(&pb::Explain::default()).unwrap();
        assert_eq!(every.annotation("shop").as_deref(), Some("all"));
        let some = ExplainScope::from_proto(&pb::Explain {
            pods_per_owner: 5,
            namespaces: vec!["shop".into()],
        })
        .unwrap();
        assert_eq!(some.annotation("shop").as_deref(), Some("5"));
        assert_eq!(some.annotation("batch"), None);
        let error = ExplainScope::from_proto(&pb::Explain {
            pods_per_owner: 0,
            namespaces: vec!["Not A Namespace".into()],
        })
        .unwrap_err();
        assert_eq!(error.field, "spec.explain.namespaces");
        assert!(error.problem.contains("\"Not A Namespace\""), "{error}");
    }

    const WRITTEN: &str = r#"{"attempts":[
        {"time":"2026-01-01T00:00:01Z","nodes":3,"feasible":0,"message":"0/3 nodes are available",
         "rejected":[{"plugin":"NodeResourcesFit","reason":"Insufficient cpu","nodes":2,"examples":["a","b"]},
                     {"plugin":"TaintToleration","reason":"node(s) had untolerated taint(s)","nodes":1,"examples":["c"]}]},
        {"time":"2026-01-01T00:00:05.5Z","node":"d","nodes":4,"feasible":2,
         "rejected":[{"plugin":"TaintToleration","reason":"node(s) had untolerated taint(s)","nodes":1,"examples":["c"]}],
         "scores":[{"node":"d","total":180,"plugins":{"NodeResourcesFit":88,"BalancedAllocation":92}},
                   {"node":"a","total":120,"plugins":{"NodeResourcesFit":41,"BalancedAllocation":79}}]}]}"#;

    #[test]
    fn the_schedulers_attempts_read_at_their_offsets_since_the_start() {
        let start = "2026-01-01T00:00:00Z"
            .parse::<Timestamp>()
            .unwrap()
            .as_millisecond();
        let attempts = attempts(WRITTEN, start).unwrap();
        assert_eq!(attempts.len(), 2);
        let (failed, placed) = (&attempts[0], &attempts[1]);
        assert_eq!(failed.offset, Some(ksim_proto::json::of_millis(1_000)));
        assert_eq!(failed.node, "");
        assert_eq!(failed.rejected[0].examples, ["a", "b"]);
        assert_eq!(failed.message, "0/3 nodes are available");
        assert_eq!(placed.offset, Some(ksim_proto::json::of_millis(5_500)));
        assert_eq!(
            (placed.node.as_str(), placed.nodes, placed.feasible),
            ("d", 4, 2)
        );
        // Plugins by name, so that two runs' scores line up.
        let plugins: Vec<(&str, i64)> = placed.scores[0]
            .plugins
            .iter()
            .map(|p| (p.plugin.as_str(), p.score))
            .collect();
        assert_eq!(
            plugins,
            [("BalancedAllocation", 92), ("NodeResourcesFit", 88)]
        );
        assert_eq!(placed.scores[1].total, 120);
    }

    #[test]
    fn an_explanation_beyond_the_bounds_is_cut_or_refused() {
        // An attempt before the start is at the start; only the last three are kept.
        let attempt = |second: u32| {
            format!(
                r#"{{"time":"2026-01-01T00:00:0{second}Z","nodes":1,"feasible":1,"node":"n{second}"}}"#
            )
        };
        let text = format!(
            r#"{{"attempts":[{}]}}"#,
            (0..5).map(attempt).collect::<Vec<_>>().join(",")
        );
        let start = "2026-01-01T00:00:03Z"
            .parse::<Timestamp>()
            .unwrap()
            .as_millisecond();
        let read = attempts(&text, start).unwrap();
        let nodes: Vec<&str> = read.iter().map(|a| a.node.as_str()).collect();
        assert_eq!(nodes, ["n2", "n3", "n4"]);
        assert_eq!(read[0].offset, Some(ksim_proto::json::of_millis(0)));

        let long = format!(
            r#"{{"attempts":[{{"time":"2026-01-01T00:00:00Z","message":"{}"}}]}}"#,
            "é".repeat(400)
        );
        assert!(attempts(&long, 0).unwrap()[0].message.ends_with('…'));
        assert!(matches!(
            attempts(&" ".repeat(MAX_EXPLANATION_BYTES + 1), 0),
            Err(ExplanationError::TooLong(_))
        ));
        assert!(
            matches!(attempts("{\"attempts\":[{\"time\":\"yesterday\"}]}", 0), Err(ExplanationError::Malformed(m)) if m.contains("yesterday"))
        );
        assert!(matches!(
            attempts("not json", 0),
            Err(ExplanationError::Malformed(_))
        ));
    }
}
