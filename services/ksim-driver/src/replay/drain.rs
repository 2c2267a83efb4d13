//! The drain phase: after the last step, the operations still in flight finish (they are the
//! trace's, and the report counts them), bare pods stop being rescheduled, and a refusal among
//! the last operations still stops a run with on_error=STOP.

use super::{
    dispatch::Dispatcher,
    ending::{Ending, stop_reason},
    progress::Progress,
};
use crate::domain::spec::OnError;

/// Drains `dispatcher`; how the run ended, given how play ended.
pub async fn drain(
    dispatcher: Dispatcher,
    progress: &Progress,
    ending: Ending,
    on_error: OnError,
) -> Ending {
    let clones = dispatcher.drain().await;
    if clones > 0 {
        tracing::info!(clones, "bare pods rescheduled");
    }
    if ending.is_finished() && on_error == OnError::Stop {
        return stop_reason(progress).unwrap_or(Ending::Finished);
    }
    ending
}

#[cfg(test)]
mod tests {
    use std::{sync::Arc, time::Duration};

    use tokio::time::Instant;

    use super::*;
    use crate::replay::test_cluster::{TestCluster, dispatcher, step};

    /// Dispatches a step refused 5 s later and drains; how it ended and how long it took.
    async fn drained(ending: Ending, on_error: OnError) -> (Ending, Duration) {
        let cluster = Arc::new(TestCluster::refusing("last", Duration::from_secs(5)));
        let (dispatcher, progress) = dispatcher(&cluster);
        let started = Instant::now();
        dispatcher.dispatch(0, step(0, "last"), Some(started));
        let ending = drain(dispatcher, &progress, ending, on_error).await;
        (ending, started.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn the_last_operations_finish_and_a_refusal_among_them_stops_the_run() {
        let (ending, took) = drained(Ending::Finished, OnError::Stop).await;
        assert_eq!(
            took,
            Duration::from_secs(5),
            "did not wait for the operation"
        );
        let Ending::Failed(message) = ending else {
            panic!("not failed: {ending:?}");
        };
        assert!(message.contains("ns/last"), "{message}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_does_not_change_a_run_that_continues_or_was_cancelled() {
        assert_eq!(
            drained(Ending::Finished, OnError::Continue).await.0,
            Ending::Finished
        );
        assert_eq!(
            drained(Ending::Cancelled, OnError::Stop).await.0,
            Ending::Cancelled
        );
    }
}
