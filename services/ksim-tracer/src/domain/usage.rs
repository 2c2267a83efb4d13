//! Usage from the metrics API (`metrics.k8s.io/v1beta1` PodMetrics, as metrics-server serves
//! it) turned into the trace's usage samples: CPU in nanocores and memory (the working set) in
//! bytes per container, numbers only.
//!
//! The API answers with its latest window for every pod at each read, so a pod whose metrics'
//! timestamp has not changed since the last read is not recorded again: a read interval shorter
//! than metrics-server's resolution costs reads, not log space.

use std::collections::HashMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use ksim_proto::ksim::trace::v1 as pb;
use serde::Deserialize;
use thiserror::Error;

/// Most containers taken from one pod: more than any real pod has; a larger answer is cut, not
/// let grow the log without bound.
const MAX_CONTAINERS: usize = 64;

/// A PodMetricsList as the API serves it, only the fields a sample needs.
#[derive(Debug, Deserialize)]
pub struct PodMetricsList {
    #[serde(default)]
    items: Vec<PodMetrics>,
}

#[derive(Debug, Deserialize)]
struct PodMetrics {
    metadata: Metadata,
    timestamp: Time,
    window: kube::core::Duration,
    #[serde(default)]
    containers: Vec<ContainerMetrics>,
}

#[derive(Debug, Deserialize)]
struct Metadata {
    name: String,
    #[serde(default)]
    namespace: String,
}

#[derive(Debug, Deserialize)]
struct ContainerMetrics {
    name: String,
    #[serde(default)]
    usage: HashMap<String, String>,
}

/// Why one pod's metrics were not recorded.
#[derive(Debug, Error, PartialEq)]
pub enum UsageError {
    #[error(
        "pod {namespace}/{pod}: container {container:?} {resource} usage {value:?} is not a non-negative quantity"
    )]
    Quantity {
        namespace: String,
        pod: String,
        container: String,
        resource: &'static str,
        value: String,
    },
    #[error("pod {namespace}/{pod}: a negative window")]
    Window { namespace: String, pod: String },
}

/// What one read of the API gave: the samples to record, and the pods left out with why.
#[derive(Debug, Default)]
pub struct Read {
    pub samples: Vec<pb::UsageSample>,
    pub refused: Vec<UsageError>,
}

/// The last metrics timestamp recorded per pod, so each window is recorded once.
#[derive(Debug, Default)]
pub struct UsageReader {
    last: HashMap<(String, String), i64>,
}

impl UsageReader {
    /// The samples of `list` not recorded before. Pods the list no longer holds are forgotten:
    /// what is kept is bounded by the pods that exist, and a pod recreated under the same name
    /// is recorded from its first window.
    pub fn read(&mut self, list: PodMetricsList) -> Read {
        let mut read = Read::default();
        let mut seen = HashMap::with_capacity(list.items.len());
        for pod in list.items {
            let key = (pod.metadata.namespace.clone(), pod.metadata.name.clone());
            let timestamp_ms = pod.timestamp.0.as_millisecond();
            let new = self.last.get(&key) != Some(&timestamp_ms);
            seen.insert(key, timestamp_ms);
            if !new {
                continue;
            }
            match sample(pod, timestamp_ms) {
                Ok(sample) => read.samples.push(sample),
                Err(error) => read.refused.push(error),
            }
        }
        self.last = seen;
        read
    }
}

fn sample(pod: PodMetrics, timestamp_ms: i64) -> Result<pb::UsageSample, UsageError> {
    let Metadata { name, namespace } = pod.metadata;
    if pod.window.is_negative() {
        return Err(UsageError::Window {
            namespace,
            pod: name,
        });
    }
    let window = std::time::Duration::from(pod.window);
    let containers = pod
        .containers
        .into_iter()
        .take(MAX_CONTAINERS)
        .map(|container| {
            let amount = |resource: &'static str, scale: f64| {
                let text = container.usage.get(resource).map_or("0", String::as_str);
                ksim_nodes::skeleton::quantity_value(text)
                    .filter(|value| *value >= 0.0 && (value * scale) < i64::MAX as f64)
                    // In range, as just checked; the fraction of a nanocore or byte is noise.
                    .map(|value| (value * scale).round() as i64)
                    .ok_or_else(|| UsageError::Quantity {
                        namespace: namespace.clone(),
                        pod: name.clone(),
                        container: container.name.clone(),
                        resource,
                        value: text.to_owned(),
                    })
            };
            Ok(pb::ContainerUsage {
                cpu_nanocores: amount("cpu", 1e9)?,
                memory_bytes: amount("memory", 1.0)?,
                name: container.name,
            })
        })
        .collect::<Result<_, UsageError>>()?;
    Ok(pb::UsageSample {
        timestamp_ms,
        window_ms: i64::try_from(window.as_millis()).unwrap_or(i64::MAX),
        namespace,
        pod: name,
        containers,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn list(items: serde_json::Value) -> PodMetricsList {
        serde_json::from_value(json!({ "kind": "PodMetricsList", "items": items })).unwrap()
    }

    fn pod(name: &str, timestamp: &str, cpu: &str, memory: &str) -> serde_json::Value {
        json!({
            "metadata": { "name": name, "namespace": "shop" },
            "timestamp": timestamp,
            "window": "15.004s",
            "containers": [{ "name": "app", "usage": { "cpu": cpu, "memory": memory } }],
        })
    }

    #[test]
    fn a_pod_metrics_list_becomes_samples_in_nanocores_and_bytes() {
        let mut reader = UsageReader::default();
        let read = reader.read(list(json!([pod(
            "web-1",
            "2026-11-27T10:00:15Z",
            "1234567n",
            "20Mi"
        )])));
        assert!(read.refused.is_empty());
        assert_eq!(
            read.samples,
            vec![pb::UsageSample {
                timestamp_ms: 1_795_773_615_000,
                window_ms: 15_004,
                namespace: "shop".into(),
                pod: "web-1".into(),
                containers: vec![pb::ContainerUsage {
                    name: "app".into(),
                    cpu_nanocores: 1_234_567,
                    memory_bytes: 20 * 1024 * 1024,
                }],
            }]
        );
    }

    #[test]
    fn a_window_already_recorded_is_not_recorded_again() {
        let mut reader = UsageReader::default();
        let first = reader.read(list(json!([
            pod("web-1", "2026-11-27T10:00:15Z", "1m", "1Ki"),
            pod("web-2", "2026-11-27T10:00:15Z", "2m", "2Ki"),
        ])));
        assert_eq!(first.samples.len(), 2);
        // web-1 has a new window, web-2 the same one.
        let second = reader.read(list(json!([
            pod("web-1", "2026-11-27T10:00:30Z", "3m", "1Ki"),
            pod("web-2", "2026-11-27T10:00:15Z", "2m", "2Ki"),
        ])));
        let pods: Vec<_> = second.samples.iter().map(|s| s.pod.as_str()).collect();
        assert_eq!(pods, ["web-1"]);
        assert_eq!(second.samples[0].containers[0].cpu_nanocores, 3_000_000);
    }

    #[test]
    fn a_pod_gone_from_the_list_is_forgotten_and_recorded_afresh_when_it_returns() {
        let mut reader = UsageReader::default();
        reader.read(list(json!([pod(
            "web-1",
            "2026-11-27T10:00:15Z",
            "1m",
            "1Ki"
        )])));
        assert!(reader.read(list(json!([]))).samples.is_empty());
        assert!(reader.last.is_empty());
        let again = reader.read(list(json!([pod(
            "web-1",
            "2026-11-27T10:00:15Z",
            "1m",
            "1Ki"
        )])));
        assert_eq!(again.samples.len(), 1);
    }

    #[test]
    fn a_pod_with_a_bad_amount_is_refused_by_name_and_the_others_are_recorded() {
        let mut reader = UsageReader::default();
        let read = reader.read(list(json!([
            pod("web-1", "2026-11-27T10:00:15Z", "-5m", "1Ki"),
            pod("web-2", "2026-11-27T10:00:15Z", "many", "1Ki"),
            pod("web-3", "2026-11-27T10:00:15Z", "1m", "1Ki"),
        ])));
        let pods: Vec<_> = read.samples.iter().map(|s| s.pod.as_str()).collect();
        assert_eq!(pods, ["web-3"]);
        let refused: Vec<_> = read.refused.iter().map(ToString::to_string).collect();
        assert_eq!(
            refused,
            [
                "pod shop/web-1: container \"app\" cpu usage \"-5m\" is not a non-negative quantity",
                "pod shop/web-2: container \"app\" cpu usage \"many\" is not a non-negative quantity",
            ]
        );
    }

    #[test]
    fn a_container_without_a_memory_figure_records_zero_and_containers_are_capped() {
        let containers: Vec<_> = (0..MAX_CONTAINERS + 5)
            .map(|i| json!({ "name": format!("c{i}"), "usage": { "cpu": "1m" } }))
            .collect();
        let mut reader = UsageReader::default();
        let read = reader.read(list(json!([{
            "metadata": { "name": "big", "namespace": "shop" },
            "timestamp": "2026-11-27T10:00:15Z",
            "window": "15s",
            "containers": containers,
        }])));
        let containers = &read.samples[0].containers;
        assert_eq!(containers.len(), MAX_CONTAINERS);
        assert_eq!(containers[0].memory_bytes, 0);
    }
}
