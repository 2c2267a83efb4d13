//! A plan step on its way to the cluster: counted in [`Progress`], noted by the bare-pod
//! rescheduler (which may add the delete of a clone), and queued operation by operation.

use std::{iter::Peekable, ops::RangeFrom, sync::Arc, time::Duration, vec};

use tokio::time::Instant;

use super::{
    bare_pods::Rescheduler,
    progress::Progress,
    queue::{OpQueue, QueuedOp},
};
use crate::{
    domain::plan::{Step, StepKind},
    metrics::ReplayMetrics,
};

/// The plan's steps with their numbers, as the settle and play phases take them in turn.
pub type Steps = Peekable<std::iter::Zip<RangeFrom<u64>, vec::IntoIter<Step>>>;

/// Numbers `steps` from 0.
pub fn numbered(steps: Vec<Step>) -> Steps {
    (0u64..).zip(steps).peekable()
}

#[derive(Debug)]
pub struct Dispatcher {
    queue: OpQueue,
    rescheduler: Option<Rescheduler>,
    progress: Arc<Progress>,
    metrics: ReplayMetrics,
}

impl Dispatcher {
    pub fn new(
        queue: OpQueue,
        rescheduler: Option<Rescheduler>,
        progress: Arc<Progress>,
        metrics: ReplayMetrics,
    ) -> Self {
        Self {
            queue,
            rescheduler,
            progress,
            metrics,
        }
    }

    pub fn progress(&self) -> &Progress {
        &self.progress
    }

    /// Hands step `number` to the queue. `due` is when the clock wanted it (`None` before the
    /// clock starts, when nothing is late); the step's lateness is measured from it now.
    pub fn dispatch(&self, number: u64, step: Step, due: Option<Instant>) {
        let lateness = due.map_or(Duration::ZERO, |due| {
            Instant::now().saturating_duration_since(due)
        });
        if due.is_some() {
            self.metrics.step_dispatched(lateness);
        }
        self.progress.begin_step(
            number,
            step.kind == StepKind::Event,
            step.ops.len(),
            lateness,
        );
        for op in step.ops {
            let extra = self.rescheduler.as_ref().and_then(|r| r.before(&op));
            for op in std::iter::once(op).chain(extra) {
                self.queue.dispatch(QueuedOp {
                    op,
                    step: number,
                    event_index: step.event_index,
                    trace_offset: step.trace_offset,
                    due,
                });
            }
        }
    }

    /// Waits until every dispatched operation is done, then stops rescheduling bare pods (the
    /// cleanup is about to delete every pod and must not see them cloned); how many clones
    /// were made.
    pub async fn drain(self) -> u64 {
        self.queue.drain().await;
        self.rescheduler.map_or(0, Rescheduler::stop)
    }
}
