//! What the replay has done so far: events applied, their lateness, objects refused. The
//! operation queue reports each operation; a step (a trace event, or a CronJob run the driver
//! plays) is done when its last operation is, and its lateness is that of its latest-starting
//! operation.
//! Only trace events count as events applied; every step's lateness counts.

use std::{collections::HashMap, sync::Mutex, time::Duration};

use crate::{domain::report::ObjectErrorRecord, metrics::ReplayMetrics};

#[derive(Debug, Default)]
pub struct Progress {
    state: Mutex<State>,
    metrics: ReplayMetrics,
}

#[derive(Debug, Default)]
struct State {
    /// Step number -> (operations not yet done, latest start so far, whether a trace event).
    open: HashMap<u64, (usize, Duration, bool)>,
    events_applied: u64,
    lateness: Vec<Duration>,
    last_lateness: Duration,
    errors: Vec<ObjectErrorRecord>,
}

/// A copy of the counters for progress messages.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProgressSnapshot {
    pub events_applied: u64,
    pub last_lateness: Duration,
    pub object_errors: u64,
}

impl Progress {
    pub fn new(metrics: ReplayMetrics) -> Self {
        Self {
            state: Mutex::default(),
            metrics,
        }
    }

    /// Step `step` (a trace event when `event`) with `operations` operations was handed to the
    /// operation queue `lateness` after its time. A step without operations (the trace's opening marker)
    /// is done at once.
    pub fn begin_step(&self, step: u64, event: bool, operations: usize, lateness: Duration) {
        let mut state = self.lock();
        if operations == 0 {
            state.finish(lateness, event);
            self.metrics.event_applied(lateness);
        } else {
            state.open.insert(step, (operations, lateness, event));
        }
    }

    /// One operation of step `step` started `lateness` after the step's time and ended with
    /// `error`, if any.
    pub fn operation_done(&self, step: u64, lateness: Duration, error: Option<ObjectErrorRecord>) {
        let mut state = self.lock();
        if let Some(error) = error {
            state.errors.push(error);
        }
        let Some((remaining, latest, event)) = state.open.get_mut(&step) else {
            return;
        };
        *remaining -= 1;
        *latest = (*latest).max(lateness);
        if *remaining == 0 {
            let (latest, event) = (*latest, *event);
            state.open.remove(&step);
            state.finish(latest, event);
            self.metrics.event_applied(latest);
        }
    }

    /// Steps handed to the queue whose operations are not all done.
    pub fn open_steps(&self) -> usize {
        self.lock().open.len()
    }

    pub fn snapshot(&self) -> ProgressSnapshot {
        let state = self.lock();
        ProgressSnapshot {
            events_applied: state.events_applied,
            last_lateness: state.last_lateness,
            object_errors: state.errors.len() as u64,
        }
    }

    pub fn lateness(&self) -> Vec<Duration> {
        self.lock().lateness.clone()
    }

    pub fn errors(&self) -> Vec<ObjectErrorRecord> {
        self.lock().errors.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock leaves counters that are still meaningful.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl State {
    fn finish(&mut self, lateness: Duration, event: bool) {
        if event {
            self.events_applied += 1;
        }
        self.last_lateness = lateness;
        self.lateness.push(lateness);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn an_event_is_applied_when_its_last_operation_is_done_with_the_latest_lateness() {
        let progress = Progress::default();
        progress.begin_step(0, true, 0, 2 * MS);
        progress.begin_step(1, true, 2, MS);
        progress.operation_done(1, 5 * MS, None);
        assert_eq!(progress.snapshot().events_applied, 1);
        progress.operation_done(1, 3 * MS, None);
        let snapshot = progress.snapshot();
        assert_eq!(snapshot.events_applied, 2);
        assert_eq!(snapshot.last_lateness, 5 * MS);
        assert_eq!(progress.lateness(), vec![2 * MS, 5 * MS]);
    }

    #[test]
    fn a_cron_run_counts_for_lateness_but_not_as_an_event() {
        let progress = Progress::default();
        // The run's step shares its event index with nothing: it has a step number of its own.
        progress.begin_step(7, false, 1, MS);
        progress.operation_done(7, 4 * MS, None);
        assert_eq!(progress.snapshot().events_applied, 0);
        assert_eq!(progress.lateness(), vec![4 * MS]);
    }
}
