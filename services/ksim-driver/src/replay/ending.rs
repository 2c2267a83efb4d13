//! How a replay ended, and the refusal that ends one early when `on_error` is STOP.

use super::progress::Progress;

/// How the replay's phases ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    Finished,
    Cancelled,
    Failed(String),
}

impl Ending {
    pub fn is_finished(&self) -> bool {
        matches!(self, Self::Finished)
    }
}

/// The first object the cluster refused, as the failure that stops a run with on_error=STOP.
pub fn stop_reason(progress: &Progress) -> Option<Ending> {
    let first = progress.errors().into_iter().next()?;
    let namespace = first
        .target
        .namespace
        .map(|ns| format!("{ns}/"))
        .unwrap_or_default();
    Some(Ending::Failed(format!(
        "the cluster refused {} {namespace}{} (event {}) and on_error is STOP: {}",
        first.target.gvk, first.target.name, first.event_index, first.message
    )))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{
        domain::{Gvk, Operation, Target, report::ObjectErrorRecord},
        metrics::ReplayMetrics,
    };

    #[test]
    fn the_first_refusal_is_the_reason_named_with_its_object_and_event() {
        let progress = Progress::new(ReplayMetrics::default());
        assert_eq!(stop_reason(&progress), None);
        for (name, event_index) in [("web", 7), ("later", 9)] {
            progress.operation_done(
                0,
                Duration::ZERO,
                Some(ObjectErrorRecord {
                    target: Target {
                        gvk: Gvk::new("apps", "v1", "Deployment"),
                        namespace: Some("shop".to_owned()),
                        name: name.to_owned(),
                    },
                    operation: Operation::Apply,
                    event_index,
                    trace_offset: Duration::ZERO,
                    message: "spec.replicas: Invalid value: -1".to_owned(),
                }),
            );
        }
        let Some(Ending::Failed(message)) = stop_reason(&progress) else {
            panic!("no reason to stop");
        };
        assert_eq!(
            message,
            "the cluster refused apps/v1.Deployment shop/web (event 7) and on_error is STOP: \
             spec.replicas: Invalid value: -1"
        );
    }
}
