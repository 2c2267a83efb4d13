//! Pod lifetimes: when a pod started running and when it ended, read from the pod objects a
//! watch delivers. A kubelet writes container times in whole seconds, so live transitions are
//! timed by the tracer's clock in milliseconds; container times are used only for pods that
//! started or ended while the tracer was not watching.

use ksim_proto::ksim::trace::v1 as pb;
use serde_json::Value;

/// Where a pod is in its life, as far as a replay cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Not yet running any container.
    Waiting,
    Running,
    Ended(pb::PodOutcome),
}

pub fn stage(pod: &Value) -> Stage {
    let phase = pod
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("");
    // A pod whose deletion was asked for ends because of that delete, whatever phase the
    // kubelet writes on the way out; replaying it as "finished on its own" would make the
    // replayed owner's pods all finish and be replaced.
    let deleting = pod.pointer("/metadata/deletionTimestamp").is_some();
    match phase {
        "Succeeded" | "Failed" if deleting => return Stage::Ended(pb::PodOutcome::Deleted),
        "Succeeded" => return Stage::Ended(pb::PodOutcome::Succeeded),
        "Failed" => return Stage::Ended(pb::PodOutcome::Failed),
        "Running" => return Stage::Running,
        _ => {}
    }
    let any_started = container_states(pod)
        .any(|state| state.get("running").is_some() || state.get("terminated").is_some());
    if any_started {
        Stage::Running
    } else {
        Stage::Waiting
    }
}

/// The earliest container start the kubelet reported, in ms since the epoch.
pub fn reported_start_ms(pod: &Value) -> Option<i64> {
    container_states(pod)
        .filter_map(|state| {
            state
                .pointer("/running/startedAt")
                .or_else(|| state.pointer("/terminated/startedAt"))
        })
        .filter_map(parse_time_ms)
        .min()
}

/// The latest container end the kubelet reported, in ms since the epoch.
pub fn reported_end_ms(pod: &Value) -> Option<i64> {
    container_states(pod)
        .filter_map(|state| state.pointer("/terminated/finishedAt"))
        .filter_map(parse_time_ms)
        .max()
}

/// When the pod's condition `kind` (`PodScheduled`, `Ready`) turned True, if it is True now.
pub fn condition_true_ms(pod: &Value, kind: &str) -> Option<i64> {
    let condition = pod
        .pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|condition| condition.get("type").and_then(Value::as_str) == Some(kind))?;
    if condition.get("status").and_then(Value::as_str) != Some("True") {
        return None;
    }
    // A True condition without a time still says it holds: the caller's clock times it.
    Some(
        condition
            .get("lastTransitionTime")
            .and_then(parse_time_ms)
            .unwrap_or(0),
    )
}

/// When the pod was created (`metadata.creationTimestamp`), in ms since the epoch.
pub fn created_ms(pod: &Value) -> Option<i64> {
    pod.pointer("/metadata/creationTimestamp")
        .and_then(parse_time_ms)
}

/// The node the pod is bound to.
pub fn node_name(pod: &Value) -> Option<&str> {
    pod.pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .filter(|name| !name.is_empty())
}

fn container_states(pod: &Value) -> impl Iterator<Item = &Value> {
    pod.pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|status| status.get("state"))
}

pub(crate) fn parse_time_ms(value: &Value) -> Option<i64> {
    let text = value.as_str()?;
    let time = humantime::parse_rfc3339_weak(text.trim_end_matches('Z')).ok()?;
    let since_epoch = time.duration_since(std::time::UNIX_EPOCH).ok()?;
    i64::try_from(since_epoch.as_millis()).ok()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn stages_follow_phase_and_container_states() {
        assert_eq!(
            stage(&json!({"status": {"phase": "Pending"}})),
            Stage::Waiting
        );
        assert_eq!(stage(&json!({})), Stage::Waiting);
        assert_eq!(
            stage(&json!({"status": {"phase": "Running"}})),
            Stage::Running
        );
        assert_eq!(
            stage(
                &json!({"status": {"phase": "Pending", "containerStatuses": [{"state": {"running": {}}}]}})
            ),
            Stage::Running
        );
        assert_eq!(
            stage(&json!({"status": {"phase": "Succeeded"}})),
            Stage::Ended(pb::PodOutcome::Succeeded)
        );
        assert_eq!(
            stage(&json!({
                "metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"},
                "status": {"phase": "Succeeded"}
            })),
            Stage::Ended(pb::PodOutcome::Deleted)
        );
        assert_eq!(
            stage(&json!({"status": {"phase": "Failed"}})),
            Stage::Ended(pb::PodOutcome::Failed)
        );
    }

    #[test]
    fn reported_times_are_the_earliest_start_and_latest_end() {
        let pod = json!({"status": {"containerStatuses": [
            {"state": {"terminated": {"startedAt": "2026-01-01T00:00:05Z", "finishedAt": "2026-01-01T00:01:00Z"}}},
            {"state": {"terminated": {"startedAt": "2026-01-01T00:00:02Z", "finishedAt": "2026-01-01T00:00:30Z"}}}
        ]}});
        let base = 1_767_225_600_000; // 2026-01-01T00:00:00Z
        assert_eq!(reported_start_ms(&pod), Some(base + 2_000));
        assert_eq!(reported_end_ms(&pod), Some(base + 60_000));
        assert_eq!(reported_start_ms(&json!({"status": {}})), None);
    }

    #[test]
    fn created_is_the_creation_timestamp() {
        let pod = json!({"metadata": {"creationTimestamp": "2026-01-01T00:00:07Z"}});
        assert_eq!(created_ms(&pod), Some(1_767_225_607_000));
        assert_eq!(created_ms(&json!({"metadata": {}})), None);
    }
}
