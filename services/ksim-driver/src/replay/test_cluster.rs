//! A [`ReplayWrites`] for the phases' tests: it records what it was asked and refuses the objects
//! it is told to, after a delay, so the phases' own rules are tested without an apiserver.

use std::{
    collections::BTreeSet,
    num::NonZeroUsize,
    sync::{Arc, Mutex},
    time::Duration,
};

use serde_json::json;
use tokio::time::Instant;

use super::{dispatch::Dispatcher, progress::Progress, queue::OpQueue};
use crate::{
    cluster::{ApplyError, ReplayWrites},
    domain::{
        Gvk, Target,
        plan::{Op, Step, StepKind},
    },
    metrics::ReplayMetrics,
};

#[derive(Debug, Default)]
pub struct TestCluster {
    /// Names of the objects it refuses.
    pub refuse: BTreeSet<String>,
    /// How long each request takes.
    pub delay: Duration,
    /// Each applied object's name and when its request ended.
    log: Mutex<Vec<(String, Instant)>>,
}

impl TestCluster {
    pub fn refusing(name: &str, delay: Duration) -> Self {
        Self {
            refuse: BTreeSet::from([name.to_owned()]),
            delay,
            ..Self::default()
        }
    }

    /// The names applied, in the order their requests ended.
    pub fn applied(&self) -> Vec<String> {
        self.log().into_iter().map(|(name, _)| name).collect()
    }

    pub fn log(&self) -> Vec<(String, Instant)> {
        self.log.lock().unwrap().clone()
    }
}

impl ReplayWrites for TestCluster {
    async fn apply(&self, target: &Target, _: &serde_json::Value) -> Result<(), ApplyError> {
        tokio::time::sleep(self.delay).await;
        if self.refuse.contains(&target.name) {
            return Err(ApplyError::CronRun(format!("{} refused", target.name)));
        }
        self.log
            .lock()
            .unwrap()
            .push((target.name.clone(), Instant::now()));
        Ok(())
    }

    async fn hand_over_replicas(&self, target: &Target, _: i64) -> Result<(), ApplyError> {
        self.log
            .lock()
            .unwrap()
            .push((target.name.clone(), Instant::now()));
        Ok(())
    }

    async fn delete(&self, _: &Target) -> Result<(), ApplyError> {
        Ok(())
    }

    async fn cron_run(&self, _: &Target, _: &str, _: &str) -> Result<(), ApplyError> {
        Ok(())
    }
}

/// A dispatcher whose queue `cluster` serves, and the progress it reports to.
pub fn dispatcher(cluster: &Arc<TestCluster>) -> (Dispatcher, Arc<Progress>) {
    let progress = Arc::new(Progress::new(ReplayMetrics::default()));
    let queue = OpQueue::start(
        NonZeroUsize::new(4).unwrap(),
        cluster.clone(),
        progress.clone(),
        ReplayMetrics::default(),
    );
    let dispatcher = Dispatcher::new(queue, None, progress.clone(), ReplayMetrics::default());
    (dispatcher, progress)
}

/// A trace event at `at_secs` (wall seconds from the replay start) applying ConfigMap `name`.
pub fn step(at_secs: u64, name: &str) -> Step {
    Step {
        at: Duration::from_secs(at_secs),
        event_index: at_secs,
        trace_offset: Duration::from_secs(at_secs),
        ops: vec![Op::Apply {
            target: Target {
                gvk: Gvk::new("", "v1", "ConfigMap"),
                namespace: Some("ns".to_owned()),
                name: name.to_owned(),
            },
            object: json!({"apiVersion": "v1", "kind": "ConfigMap"}),
        }],
        kind: StepKind::Event,
    }
}
