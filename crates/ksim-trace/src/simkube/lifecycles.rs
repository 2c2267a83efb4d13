//! SimKube's pod lifecycles as trace lifecycle records.

use std::collections::BTreeMap;

use super::model::PodLifecycleData;
use crate::{TraceError, gvk, pb};

type Lifecycles = BTreeMap<(String, String), BTreeMap<u64, Vec<PodLifecycleData>>>;

/// The lifecycle records, and how many `Empty` entries were left out.
pub(super) fn convert(lifecycles: &Lifecycles) -> Result<(Vec<pb::PodLifecycle>, u64), TraceError> {
    let mut records = Vec::new();
    let mut skipped = 0;
    for ((kind, owner), by_hash) in lifecycles {
        let fail = |problem: String| {
            TraceError::simkube(format!("pod_lifecycles of {kind} {owner:?}: {problem}"))
        };
        let owner_gvk = gvk::parse(kind).map_err(|error| fail(error.to_string()))?;
        // SimKube records namespaced owners only, but a bare name is read as cluster-scoped.
        let (namespace, name) = owner.split_once('/').unwrap_or(("", owner));
        if name.is_empty() {
            return Err(fail("the owner has no name".to_owned()));
        }
        for (&hash, entries) in by_hash {
            for (position, entry) in entries.iter().enumerate() {
                // The launch index is the position in SimKube's list even when an Empty
                // entry before it is skipped: replay matches the n-th pod to the n-th entry.
                let launch_index = u32::try_from(position)
                    .map_err(|_| fail(format!("more than {} pods of one spec", u32::MAX)))?;
                let seconds_to_ms = |seconds: i64| {
                    seconds
                        .checked_mul(1000)
                        .filter(|ms| crate::time::in_range(*ms))
                        .ok_or_else(|| {
                            fail(format!(
                                "entry {position} of hash {hash}: time {seconds} s is out of \
                                 range (1970 to 9999)"
                            ))
                        })
                };
                let (start_ms, end_ms, outcome) = match *entry {
                    PodLifecycleData::Empty => {
                        skipped += 1;
                        continue;
                    }
                    PodLifecycleData::Running(start) => {
                        (seconds_to_ms(start)?, 0, pb::PodOutcome::Running)
                    }
                    // SimKube does not record how a pod ended.
                    PodLifecycleData::Finished(start, end) => (
                        seconds_to_ms(start)?,
                        seconds_to_ms(end)?,
                        pb::PodOutcome::Unspecified,
                    ),
                };
                records.push(pb::PodLifecycle {
                    owner_gvk: Some(owner_gvk.clone()),
                    owner_namespace: namespace.to_owned(),
                    owner_name: name.to_owned(),
                    pod_spec_hash: hash,
                    launch_index,
                    start_ms,
                    end_ms,
                    outcome: outcome.into(),
                    pod_name: String::new(),
                    ..Default::default()
                });
            }
        }
    }
    Ok((records, skipped))
}
