//! Replay progress and lateness for Prometheus (`/metrics` on the admin port).

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

use crate::domain::Operation;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    operation: &'static str,
    outcome: &'static str,
}

/// Cheap to clone: every field shares its metric.
#[derive(Debug, Clone)]
pub struct ReplayMetrics {
    operations: Family<OperationLabels, Counter>,
    events_applied: Counter,
    lateness_seconds: Histogram,
    dispatch_lateness_seconds: Histogram,
    operation_seconds: Family<OperationLabels, Histogram>,
    running: Gauge,
}

/// Lateness and operation times, 0.5 ms to ~8 s: the targets are tens of milliseconds,
/// overloads reach seconds.
fn seconds_histogram() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.0005, 2.0, 15,
    ))
}

impl Default for ReplayMetrics {
    fn default() -> Self {
        Self {
            operations: Family::default(),
            events_applied: Counter::default(),
            lateness_seconds: seconds_histogram(),
            dispatch_lateness_seconds: seconds_histogram(),
            operation_seconds: Family::new_with_constructor(seconds_histogram),
            running: Gauge::default(),
        }
    }
}

impl ReplayMetrics {
    pub fn register(&self, registry: &mut Registry) {
        let registry = registry.sub_registry_with_prefix("driver");
        registry.register(
            "operations",
            "Replayed object operations by kind of operation and outcome",
            self.operations.clone(),
        );
        registry.register(
            "events_applied",
            "Trace events fully applied",
            self.events_applied.clone(),
        );
        registry.register(
            "event_lateness_seconds",
            "How late trace events were applied relative to their scheduled time",
            self.lateness_seconds.clone(),
        );
        // Event lateness is the clock's lateness plus the wait in the queue: these two tell them
        // apart, and the second one's cause (the apiserver's answers) from the rest.
        registry.register(
            "dispatch_lateness_seconds",
            "How late the replay's clock handed trace steps to the operation queue",
            self.dispatch_lateness_seconds.clone(),
        );
        registry.register(
            "operation_seconds",
            "How long replayed object operations took, by kind of operation and outcome",
            self.operation_seconds.clone(),
        );
        registry.register(
            "simulations_running",
            "Simulations replaying now (0 or 1)",
            self.running.clone(),
        );
    }

    pub fn operation(&self, operation: Operation, ok: bool, took: std::time::Duration) {
        let labels = OperationLabels {
            operation: match operation {
                Operation::Apply => "apply",
                Operation::Delete => "delete",
                Operation::CronRun => "cron_run",
            },
            outcome: if ok { "ok" } else { "error" },
        };
        self.operations.get_or_create(&labels).inc();
        self.operation_seconds
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    pub fn step_dispatched(&self, lateness: std::time::Duration) {
        self.dispatch_lateness_seconds
            .observe(lateness.as_secs_f64());
    }

    pub fn event_applied(&self, lateness: std::time::Duration) {
        self.events_applied.inc();
        self.lateness_seconds.observe(lateness.as_secs_f64());
    }

    pub fn set_running(&self, running: bool) {
        self.running.set(i64::from(running));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn replay_progress_and_lateness_are_exported() {
        let metrics = ReplayMetrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let ms = std::time::Duration::from_millis;
        metrics.operation(Operation::Apply, true, ms(20));
        metrics.operation(Operation::Delete, false, ms(1));
        metrics.event_applied(ms(3));
        metrics.step_dispatched(ms(1));
        metrics.set_running(true);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "driver_operations_total{operation=\"apply\",outcome=\"ok\"} 1",
            "driver_operations_total{operation=\"delete\",outcome=\"error\"} 1",
            "driver_events_applied_total 1",
            "driver_event_lateness_seconds_count 1",
            "driver_event_lateness_seconds_bucket{le=\"0.004\"} 1",
            "driver_dispatch_lateness_seconds_bucket{le=\"0.001\"} 1",
            "driver_operation_seconds_bucket{le=\"0.016\",operation=\"apply\",outcome=\"ok\"} 0",
            "driver_operation_seconds_bucket{le=\"0.032\",operation=\"apply\",outcome=\"ok\"} 1",
            "driver_simulations_running 1",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }
}
