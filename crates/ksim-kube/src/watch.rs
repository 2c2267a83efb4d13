//! Following a watch for as long as it runs. kube's `watcher` never ends: after an error it
//! relists and goes on (after its backoff) when polled again. `TryStreamExt::try_for_each`
//! would stop at the first error instead, and whatever the watch fed would freeze unnoticed,
//! as a report's availability once did under load; so an error is logged and the watch goes
//! on.

use std::fmt::Display;

use futures::{Stream, StreamExt};

/// Feeds each event of `events` to `apply` until the stream ends, logging each error with
/// `what` the watch is of.
pub async fn follow<S, T, E>(what: &str, events: S, mut apply: impl FnMut(T))
where
    S: Stream<Item = Result<T, E>>,
    E: Display,
{
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        match event {
            Ok(event) => apply(event),
            Err(error) => tracing::warn!(%error, watch = what, "watch failed; retrying"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_error_is_passed_over_and_the_events_after_it_still_come() {
        let events = futures::stream::iter([Ok(1), Err("gone"), Ok(2), Err("reset"), Ok(3)]);
        let mut seen = Vec::new();
        follow("numbers", events, |n| seen.push(n)).await;
        assert_eq!(seen, [1, 2, 3]);
    }
}
