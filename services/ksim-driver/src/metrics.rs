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
    running: Gauge,
}

impl Default for ReplayMetrics {
    fn default() -> Self {
        Self {
            operations: Family::default(),
            events_applied: Counter::default(),
            // 0.5 ms to ~8 s: the targets are tens of milliseconds, overloads reach seconds.
            lateness_seconds: Histogram::new(
                prometheus_client::metrics::histogram::exponential_buckets(0.0005, 2.0, 15),
            ),
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
        registry.register(
            "simulations_running",
            "Simulations replaying now (0 or 1)",
            self.running.clone(),
        );
    }

    pub fn operation(&self, operation: Operation, ok: bool) {
        let labels = OperationLabels {
            operation: match operation {
                Operation::Apply => "apply",
                Operation::Delete => "delete",
                Operation::CronRun => "cron_run",
            },
            outcome: if ok { "ok" } else { "error" },
        };
        self.operations.get_or_create(&labels).inc();
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
        metrics.operation(Operation::Apply, true);
        metrics.operation(Operation::Delete, false);
        metrics.event_applied(std::time::Duration::from_millis(3));
        metrics.set_running(true);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "driver_operations_total{operation=\"apply\",outcome=\"ok\"} 1",
            "driver_operations_total{operation=\"delete\",outcome=\"error\"} 1",
            "driver_events_applied_total 1",
            "driver_event_lateness_seconds_count 1",
            "driver_event_lateness_seconds_bucket{le=\"0.004\"} 1",
            "driver_simulations_running 1",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }
}
