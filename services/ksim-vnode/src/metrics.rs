//! What the pool counts, for `GetPoolStats` and Prometheus.

use std::{
    sync::Mutex,
    time::{Duration, Instant},
};

use prometheus_client::{
    metrics::{
        counter::Counter,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

use crate::domain::heartbeat::RenewalRate;

#[derive(Debug)]
pub struct Metrics {
    pub lease_renewals: Counter,
    pub api_errors: Counter,
    pub ip_exhaustions: Counter,
    pub nodes_registered: Counter,
    pub pods_started: Counter,
    pub pods_completed: Counter,
    pub pods_deleted: Counter,
    /// Seconds from bound to Running of pods with a start model, in the simulation's time.
    pub pod_start_delays: Histogram,
    /// First pulls of an image on a node begun by the pod start model.
    pub image_pulls: Counter,
    /// Nodes whose kubelet endpoint is listening (one listener each).
    pub kubelet_listeners: Gauge,
    /// Scrapes of the nodes' kubelet resource endpoints answered.
    pub kubelet_scrapes: Counter,
    /// Containers killed for memory above their limit (`domain::limits`).
    pub oom_kills: Counter,
    /// Pods evicted for node memory pressure (`domain::limits::node_pressure`).
    pub evictions: Counter,
    /// Nodes stopped by `FailNodes` and not recovered.
    pub failed_nodes: Gauge,
    renewal_rate: Mutex<RenewalRate>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            lease_renewals: Counter::default(),
            api_errors: Counter::default(),
            ip_exhaustions: Counter::default(),
            nodes_registered: Counter::default(),
            pods_started: Counter::default(),
            pods_completed: Counter::default(),
            pods_deleted: Counter::default(),
            // 50 ms to about 14 h.
            pod_start_delays: Histogram::new(exponential_buckets(0.05, 2.0, 21)),
            image_pulls: Counter::default(),
            kubelet_listeners: Gauge::default(),
            kubelet_scrapes: Counter::default(),
            oom_kills: Counter::default(),
            evictions: Counter::default(),
            failed_nodes: Gauge::default(),
            renewal_rate: Mutex::new(RenewalRate::new(Duration::from_secs(30))),
        }
    }
}

impl Metrics {
    pub fn register(&self, registry: &mut Registry) {
        let registry = registry.sub_registry_with_prefix("vnode");
        registry.register(
            "lease_renewals",
            "Node lease renewals written",
            self.lease_renewals.clone(),
        );
        registry.register(
            "api_errors",
            "Failed apiserver requests",
            self.api_errors.clone(),
        );
        registry.register(
            "ip_exhaustions",
            "Pods left Pending because their node had no free IP",
            self.ip_exhaustions.clone(),
        );
        registry.register(
            "nodes_registered",
            "Virtual nodes registered",
            self.nodes_registered.clone(),
        );
        registry.register(
            "pods_started",
            "Pods moved to Running",
            self.pods_started.clone(),
        );
        registry.register(
            "pods_completed",
            "Pods moved to Succeeded or Failed",
            self.pods_completed.clone(),
        );
        registry.register(
            "pods_deleted",
            "Pods deleted after their deletion was requested",
            self.pods_deleted.clone(),
        );
        registry.register(
            "pod_start_delay_seconds",
            "Delay from bound to Running applied to pods with a start model (simulation time)",
            self.pod_start_delays.clone(),
        );
        registry.register(
            "image_pulls",
            "First pulls of an image on a node, by the pod start model",
            self.image_pulls.clone(),
        );
        registry.register(
            "kubelet_listeners",
            "Nodes whose kubelet resource endpoint is listening, one listener each",
            self.kubelet_listeners.clone(),
        );
        registry.register(
            "kubelet_scrapes",
            "Scrapes of the nodes' kubelet resource endpoints answered",
            self.kubelet_scrapes.clone(),
        );
        registry.register(
            "oom_kills",
            "Containers killed for memory above their limit",
            self.oom_kills.clone(),
        );
        registry.register(
            "evictions",
            "Pods evicted for node memory pressure",
            self.evictions.clone(),
        );
        registry.register(
            "failed_nodes",
            "Virtual nodes stopped by FailNodes and not recovered since",
            self.failed_nodes.clone(),
        );
    }

    pub fn renewed(&self) {
        self.lease_renewals.inc();
        if let Ok(mut rate) = self.renewal_rate.lock() {
            rate.record(Instant::now());
        }
    }

    pub fn renewals_per_second(&self) -> f64 {
        self.renewal_rate
            .lock()
            .map(|rate| rate.per_second(Instant::now()))
            .unwrap_or_default()
    }

    pub fn api_error(&self, operation: &str, error: &kube::Error) {
        self.api_errors.inc();
        tracing::warn!(operation, %error, "apiserver request failed");
    }
}
