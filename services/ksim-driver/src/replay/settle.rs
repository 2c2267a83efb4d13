//! The settle phase: the trace's first instant is applied before the clock starts, and the
//! replay waits until its pods are placed and running, so it does not begin with a cluster's
//! worth of pending pods. Pods the initial nodes cannot hold wait for a scale-up, which is the
//! replay's: after [`SETTLE_STALL`] without a change the clock starts anyway.

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{
    dispatch::{Dispatcher, Steps},
    ending::Ending,
};
use crate::domain::report::Sample;

/// How long the settling start may go without a change in the pods before the clock starts
/// anyway.
pub const SETTLE_STALL: Duration = Duration::from_secs(30);
/// How long the pods must stay unchanged, none pending, for the start to count as settled:
/// controllers create a workload's pods a moment after the workload.
pub const SETTLE_QUIET: Duration = Duration::from_secs(3);
/// How often the pods are looked at.
const CHECK: Duration = Duration::from_millis(500);

/// What settling watches: the steps still being applied and the simulation's pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Activity {
    pub open_steps: usize,
    pub pending: u64,
    /// Placed pods: running or ended.
    pub placed: u64,
}

impl Activity {
    pub fn of(open_steps: usize, sample: &Sample) -> Self {
        let pods = &sample.pods;
        Self {
            open_steps,
            pending: pods.pending,
            placed: pods.running + pods.succeeded + pods.failed + pods.unknown,
        }
    }
}

/// Dispatches the steps at offset zero, then waits until they settle; an ending only if the
/// simulation is cancelled meanwhile (the run then stops through the same path as a finished
/// one, so the report holds the first instant).
pub async fn settle(
    steps: &mut Steps,
    dispatcher: &Dispatcher,
    activity: impl Fn() -> Activity,
    cancel: &CancellationToken,
) -> Option<Ending> {
    while let Some((number, step)) = steps.next_if(|(_, step)| step.at.is_zero()) {
        dispatcher.dispatch(number, step, None);
    }
    wait_settled(activity, cancel).await
}

/// Waits until the activity has stayed the same for [`SETTLE_QUIET`] with nothing open or
/// pending, or for [`SETTLE_STALL`] whatever it is.
async fn wait_settled(
    activity: impl Fn() -> Activity,
    cancel: &CancellationToken,
) -> Option<Ending> {
    let started = Instant::now();
    let mut last = None;
    let mut since = Instant::now();
    loop {
        let now = activity();
        if last != Some(now) {
            last = Some(now);
            since = Instant::now();
        } else if now.open_steps == 0 && now.pending == 0 && since.elapsed() >= SETTLE_QUIET {
            tracing::info!(after = ?started.elapsed(), "the start settled");
            return None;
        } else if since.elapsed() >= SETTLE_STALL {
            tracing::warn!(
                pending = now.pending,
                "the start stopped settling; starting the clock with pods still pending"
            );
            return None;
        }
        tokio::select! {
            () = cancel.cancelled() => return Some(Ending::Cancelled),
            () = tokio::time::sleep(CHECK) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::replay::test_cluster::{TestCluster, dispatcher, step};

    fn pods(pending: u64, placed: u64) -> Activity {
        Activity {
            open_steps: 0,
            pending,
            placed,
        }
    }

    /// Runs `wait_settled` over `script` (from each instant on, the activity is that), and says
    /// how long it took and how it ended.
    async fn settle_over(
        script: &[(Duration, Activity)],
        cancel_at: Option<Duration>,
    ) -> (Duration, Option<Ending>) {
        let start = Instant::now();
        let script = script.to_vec();
        let activity = move || {
            let elapsed = start.elapsed();
            script
                .iter()
                .rev()
                .find(|(from, _)| *from <= elapsed)
                .map_or_else(Activity::default, |(_, activity)| *activity)
        };
        let cancel = CancellationToken::new();
        if let Some(at) = cancel_at {
            let cancel = cancel.clone();
            tokio::spawn(async move {
                tokio::time::sleep(at).await;
                cancel.cancel();
            });
        }
        let ending = wait_settled(activity, &cancel).await;
        (start.elapsed(), ending)
    }

    #[tokio::test(start_paused = true)]
    async fn the_start_settles_once_the_pods_stay_placed_for_the_quiet_time() {
        // Pods are created and placed over 4 s; settled 3 s after the last change.
        let (took, ending) = settle_over(
            &[
                (Duration::ZERO, pods(5, 0)),
                (Duration::from_secs(2), pods(2, 3)),
                (Duration::from_secs(4), pods(0, 5)),
            ],
            None,
        )
        .await;
        assert_eq!(ending, None);
        assert!(
            took >= Duration::from_secs(7) && took < Duration::from_secs(8),
            "settled after {took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn pods_that_stay_pending_start_the_clock_after_the_stall_time() {
        let (took, ending) = settle_over(&[(Duration::ZERO, pods(4, 6))], None).await;
        assert_eq!(ending, None);
        assert!(
            took >= SETTLE_STALL && took < SETTLE_STALL + Duration::from_secs(1),
            "gave up after {took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_step_still_being_applied_is_not_settled() {
        let open = Activity {
            open_steps: 1,
            ..pods(0, 5)
        };
        let (took, ending) = settle_over(&[(Duration::ZERO, open)], None).await;
        assert_eq!(ending, None);
        assert!(
            took >= SETTLE_STALL,
            "settled with a step open after {took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancel_while_settling_ends_the_run_cancelled_at_once() {
        let (took, ending) = settle_over(
            &[(Duration::ZERO, pods(4, 0))],
            Some(Duration::from_secs(5)),
        )
        .await;
        assert_eq!(ending, Some(Ending::Cancelled));
        assert!(took < Duration::from_secs(6), "cancelled after {took:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn only_the_steps_at_offset_zero_are_dispatched_before_the_clock() {
        let cluster = Arc::new(TestCluster::default());
        let (dispatcher, _progress) = dispatcher(&cluster);
        let mut steps = crate::replay::dispatch::numbered(vec![
            step(0, "first"),
            step(0, "second"),
            step(1, "later"),
        ]);
        let seen = Mutex::new(0);
        let activity = || {
            *seen.lock().unwrap() += 1;
            pods(0, 2)
        };
        let ending = settle(&mut steps, &dispatcher, activity, &CancellationToken::new()).await;
        assert_eq!(ending, None);
        dispatcher.drain().await;
        assert_eq!(cluster.applied(), ["first", "second"]);
        assert_eq!(steps.next().map(|(number, _)| number), Some(2));
    }
}
