//! What the replay has done so far: events applied, their lateness, objects refused. Lanes
//! report each operation; an event counts as applied when its last operation is done, and its
//! lateness is that of its latest-starting operation.

use std::{collections::HashMap, sync::Mutex, time::Duration};

use crate::{domain::report::ObjectErrorRecord, metrics::ReplayMetrics};

#[derive(Debug, Default)]
pub struct Progress {
    state: Mutex<State>,
    metrics: ReplayMetrics,
}

#[derive(Debug, Default)]
struct State {
    /// Event index -> (operations not yet done, latest start so far).
    open: HashMap<u64, (usize, Duration)>,
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

    /// An event with `operations` operations was handed to the lanes `lateness` after its time.
    /// An event without operations (the trace's opening marker) is applied at once.
    pub fn begin_event(&self, event_index: u64, operations: usize, lateness: Duration) {
        let mut state = self.lock();
        if operations == 0 {
            state.finish(lateness);
            self.metrics.event_applied(lateness);
        } else {
            state.open.insert(event_index, (operations, lateness));
        }
    }

    /// One operation of an event started `lateness` after the event's time and ended with
    /// `error`, if any.
    pub fn operation_done(
        &self,
        event_index: u64,
        lateness: Duration,
        error: Option<ObjectErrorRecord>,
    ) {
        let mut state = self.lock();
        if let Some(error) = error {
            state.errors.push(error);
        }
        let Some((remaining, latest)) = state.open.get_mut(&event_index) else {
            return;
        };
        *remaining -= 1;
        *latest = (*latest).max(lateness);
        if *remaining == 0 {
            let latest = *latest;
            state.open.remove(&event_index);
            state.finish(latest);
            self.metrics.event_applied(latest);
        }
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
    fn finish(&mut self, lateness: Duration) {
        self.events_applied += 1;
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
        progress.begin_event(0, 0, 2 * MS);
        progress.begin_event(1, 2, MS);
        progress.operation_done(1, 5 * MS, None);
        assert_eq!(progress.snapshot().events_applied, 1);
        progress.operation_done(1, 3 * MS, None);
        let snapshot = progress.snapshot();
        assert_eq!(snapshot.events_applied, 2);
        assert_eq!(snapshot.last_lateness, 5 * MS);
        assert_eq!(progress.lateness(), vec![2 * MS, 5 * MS]);
    }
}
