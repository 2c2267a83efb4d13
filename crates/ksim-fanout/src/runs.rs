//! What each run of a fanned-out experiment is doing, read from its Job and pods: waiting for a
//! slot, pending and why, running and which attempt, collected, failed.

use k8s_openapi::api::{batch::v1::Job, core::v1::Pod};

use crate::job;

/// What one run is doing, as the Job and its pods say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunState {
    Waiting,
    Pending(String),
    Running { attempt: u32 },
    Collected,
    Failed,
}

impl std::fmt::Display for RunState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Waiting => write!(f, "waiting for a slot"),
            Self::Pending(why) => write!(f, "pending ({why})"),
            Self::Running { attempt: 1 } => write!(f, "running"),
            Self::Running { attempt } => write!(f, "running (attempt {attempt})"),
            Self::Collected => write!(f, "report collected"),
            Self::Failed => write!(f, "failed after {} attempts", job::RETRIES_PER_RUN + 1),
        }
    }
}

/// Image pull failures: the run never starts, so the experiment stops at the first one.
const PULL_FAILURES: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
];

/// A pod's completion index (its annotation).
pub fn completion_index(pod: &Pod) -> Option<u32> {
    pod.metadata
        .annotations
        .as_ref()?
        .get("batch.kubernetes.io/job-completion-index")?
        .parse()
        .ok()
}

/// Why a pod is pending: its container's waiting reason, else its scheduling condition.
pub fn pending_reason(pod: &Pod) -> String {
    let status = pod.status.as_ref();
    let waiting = status
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|statuses| statuses.first())
        .and_then(|s| s.state.as_ref())
        .and_then(|s| s.waiting.as_ref())
        .and_then(|w| w.reason.clone());
    if let Some(reason) = waiting {
        return reason;
    }
    let unschedulable = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|conditions| {
            conditions
                .iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        })
        .map(|c| {
            c.message
                .clone()
                .unwrap_or_else(|| "unschedulable".to_owned())
        });
    unschedulable.unwrap_or_else(|| "starting".to_owned())
}

/// The reason and message of a container that cannot get its image.
pub fn pull_failure(pod: &Pod) -> Option<(String, String)> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .filter_map(|s| s.state.as_ref()?.waiting.as_ref())
        .find_map(|waiting| {
            let reason = waiting.reason.as_deref()?;
            PULL_FAILURES.contains(&reason).then(|| {
                (
                    reason.to_owned(),
                    waiting.message.clone().unwrap_or_default(),
                )
            })
        })
}

/// The Job's failed completion indexes (`status.failedIndexes`, e.g. "1,3-5").
pub fn failed_indexes(job: &Job) -> Vec<u32> {
    let Some(text) = job
        .status
        .as_ref()
        .and_then(|s| s.failed_indexes.as_deref())
    else {
        return Vec::new();
    };
    parse_indexes(text)
}

fn parse_indexes(text: &str) -> Vec<u32> {
    let mut indexes = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((from, to)) => {
                if let (Ok(from), Ok(to)) = (from.parse::<u32>(), to.parse::<u32>()) {
                    indexes.extend(from..=to.min(from.saturating_add(100_000)));
                }
            }
            None => indexes.extend(part.parse::<u32>().ok()),
        }
    }
    indexes
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn failed_indexes_read_as_the_job_writes_them() {
        assert_eq!(parse_indexes("1,3-5,9"), [1, 3, 4, 5, 9]);
        assert_eq!(parse_indexes(""), Vec::<u32>::new());
        assert_eq!(parse_indexes("x,2"), [2]);
    }
}
