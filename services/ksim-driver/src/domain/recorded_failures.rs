//! Failures a recording observed (docs/disruptions.md, "Recorded failures"): a node that went
//! NotReady after it had been Ready, or vanished while Ready, when no removal had begun (an
//! autoscaler's taint or a cordon: those are removals, not failures). A run that asks for
//! them fails a node of the run's group of the same name at the same recorded time, for as
//! long as the recorded one stayed down.

use std::{collections::BTreeMap, time::Duration};

use ksim_trace::pb::RecordedNode;

/// One failure the recording observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedFailure {
    /// The recorded node's group.
    pub group: String,
    /// The recorded node's name.
    pub node: String,
    /// When it failed, in recorded time since the trace's start.
    pub at: Duration,
    /// How long it stayed down; `None`: it did not come back within the recording.
    pub duration: Option<Duration>,
}

/// The failures among `nodes` (in any order) of the groups `wanted` names, from `start_ms`
/// (the trace's start) on, in time order.
pub fn recorded_failures(
    nodes: &[RecordedNode],
    start_ms: i64,
    wanted: impl Fn(&str) -> bool,
) -> Vec<RecordedFailure> {
    let mut by_node: BTreeMap<&str, Vec<&RecordedNode>> = BTreeMap::new();
    for node in nodes.iter().filter(|node| wanted(&node.group)) {
        by_node.entry(node.name.as_str()).or_default().push(node);
    }
    let offset = |ms: i64| Duration::from_millis(u64::try_from(ms - start_ms).unwrap_or(0));
    let mut failures = Vec::new();
    for (name, mut records) in by_node {
        records.sort_by_key(|record| record.timestamp_ms);
        let mut was_ready = false;
        let mut down_since: Option<i64> = None;
        let mut group = "";
        let mut close = |since: i64, until: Option<i64>, group: &str| {
            if since >= start_ms {
                failures.push(RecordedFailure {
                    group: group.to_owned(),
                    node: name.to_owned(),
                    at: offset(since),
                    duration: until.map(|until| offset(until).saturating_sub(offset(since))),
                });
            }
        };
        for record in records {
            group = &record.group;
            let removing = record.removal_started_ms != 0;
            if record.deleted_ms != 0 {
                match down_since.take() {
                    // Failed, then deleted: it never came back.
                    Some(since) => close(since, None, group),
                    // Gone while Ready, no removal begun: it vanished.
                    None if record.ready && was_ready && !removing => {
                        close(record.deleted_ms, None, group);
                    }
                    None => {}
                }
                was_ready = false;
                continue;
            }
            if record.ready {
                if let Some(since) = down_since.take() {
                    close(since, Some(record.timestamp_ms), group);
                }
                was_ready = true;
            } else if was_ready && !removing && down_since.is_none() {
                down_since = Some(record.timestamp_ms);
            }
        }
        if let Some(since) = down_since {
            close(since, None, group);
        }
    }
    failures.sort_by(|a, b| a.at.cmp(&b.at).then_with(|| a.node.cmp(&b.node)));
    failures
}

#[cfg(test)]
mod tests {
    use super::*;

    const START: i64 = 1_767_225_600_000;

    fn record(name: &str, at_s: i64, ready: bool) -> RecordedNode {
        RecordedNode {
            timestamp_ms: START + at_s * 1000,
            name: name.to_owned(),
            group: "m5".to_owned(),
            ready,
            ..RecordedNode::default()
        }
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn a_node_that_went_not_ready_after_being_ready_failed_until_it_was_ready_again() {
        let nodes = [
            record("a", 0, false),
            record("a", 30, true),
            record("a", 300, false),
            record("a", 420, true),
            // Never Ready: a node that did not start is no failure.
            record("b", 0, false),
            // Down to the end.
            record("c", 10, true),
            record("c", 600, false),
        ];
        assert_eq!(
            recorded_failures(&nodes, START, |_| true),
            vec![
                RecordedFailure {
                    group: "m5".to_owned(),
                    node: "a".to_owned(),
                    at: secs(300),
                    duration: Some(secs(120)),
                },
                RecordedFailure {
                    group: "m5".to_owned(),
                    node: "c".to_owned(),
                    at: secs(600),
                    duration: None,
                },
            ]
        );
        assert!(
            recorded_failures(&nodes, START, |group| group == "c5").is_empty(),
            "only the groups asked for"
        );
    }

    #[test]
    fn removals_are_not_failures_but_a_node_that_vanished_is() {
        let removed = RecordedNode {
            removal_started_ms: START + 200_000,
            ..record("a", 200, true)
        };
        let nodes = [
            record("a", 0, true),
            removed.clone(),
            RecordedNode {
                ready: false,
                ..removed.clone()
            },
            RecordedNode {
                timestamp_ms: START + 260_000,
                deleted_ms: START + 260_000,
                ready: false,
                ..removed
            },
            // Deleted while Ready, with no removal begun.
            record("b", 0, true),
            RecordedNode {
                deleted_ms: START + 500_000,
                ..record("b", 500, true)
            },
            // Failed, then deleted: down from the failure to the end.
            record("c", 0, true),
            record("c", 100, false),
            RecordedNode {
                deleted_ms: START + 400_000,
                ..record("c", 400, false)
            },
        ];
        let failures = recorded_failures(&nodes, START, |_| true);
        let found: Vec<(&str, Duration, Option<Duration>)> = failures
            .iter()
            .map(|f| (f.node.as_str(), f.at, f.duration))
            .collect();
        assert_eq!(found, vec![("c", secs(100), None), ("b", secs(500), None)]);
    }
}
