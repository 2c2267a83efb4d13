//! What each recorded workload used against what its pods request (issue 36): from the trace
//! alone, per owner the 95th percentile of its pods' per-pod totals over the usage samples,
//! beside the requests per pod its pod template states.
//!
//! Pure: the trace's samples, lifecycles and objects in, figures out. A sample belongs to the
//! recorded pod of that namespace and name alive when it was taken, as in `usage`.

use std::collections::{BTreeMap, HashMap};

use ksim_nodes::skeleton::quantity_value;
use ksim_trace::pb;
use serde_json::Value;

use super::report::{MAX_USAGE_WORKLOADS, WorkloadUsage};

/// An owner by kind, namespace and name.
type OwnerKey<'a> = (&'a str, &'a str, &'a str);

/// Per owner with samples, its p95 usage per pod and its requests per pod, most CPU first (then
/// by name), at most [`MAX_USAGE_WORKLOADS`].
pub fn usage_vs_requests(
    samples: &[pb::UsageSample],
    lifecycles: &[pb::PodLifecycle],
    events: &[pb::TraceEvent],
) -> Vec<WorkloadUsage> {
    let mut by_pod: HashMap<(&str, &str), Vec<&pb::PodLifecycle>> = HashMap::new();
    for lifecycle in lifecycles {
        if lifecycle.owner_gvk.is_some() {
            by_pod
                .entry((&lifecycle.owner_namespace, &lifecycle.pod_name))
                .or_default()
                .push(lifecycle);
        }
    }
    // Per owner (kind, namespace, name): per-pod totals, nanocores and bytes.
    let mut totals: BTreeMap<OwnerKey, Vec<(u64, u64)>> = BTreeMap::new();
    for sample in samples {
        let alive = by_pod
            .get(&(sample.namespace.as_str(), sample.pod.as_str()))
            .and_then(|candidates| {
                candidates.iter().find(|pod| {
                    sample.timestamp_ms >= pod.start_ms
                        && (pod.end_ms <= 0 || sample.timestamp_ms <= pod.end_ms)
                })
            });
        let Some((pod, Some(gvk))) = alive.map(|pod| (pod, pod.owner_gvk.as_ref())) else {
            continue;
        };
        let total = sample
            .containers
            .iter()
            .fold((0_u64, 0_u64), |(cpu, mem), c| {
                (
                    cpu.saturating_add(u64::try_from(c.cpu_nanocores).unwrap_or(0)),
                    mem.saturating_add(u64::try_from(c.memory_bytes).unwrap_or(0)),
                )
            });
        totals
            .entry((&gvk.kind, &pod.owner_namespace, &pod.owner_name))
            .or_default()
            .push(total);
    }
    let templates = latest_templates(events);
    let mut owners: Vec<WorkloadUsage> = totals
        .into_iter()
        .map(|((kind, namespace, name), pods)| {
            let (requested_cpu_millis, requested_memory_bytes) = templates
                .get(&(kind, namespace, name))
                .map_or((0, 0), pod_requests);
            let mut cpu: Vec<u64> = pods.iter().map(|(cpu, _)| *cpu).collect();
            let mut memory: Vec<u64> = pods.iter().map(|(_, memory)| *memory).collect();
            WorkloadUsage {
                name: format!("{kind}/{namespace}/{name}"),
                samples: pods.len() as u64,
                p95_cpu_millis: p95(&mut cpu) / 1_000_000,
                p95_memory_bytes: p95(&mut memory),
                requested_cpu_millis,
                requested_memory_bytes,
            }
        })
        .collect();
    owners.sort_by(|a, b| {
        b.p95_cpu_millis
            .cmp(&a.p95_cpu_millis)
            .then_with(|| a.name.cmp(&b.name))
    });
    owners.truncate(MAX_USAGE_WORKLOADS);
    owners
}

/// The 95th percentile by nearest rank (a value that occurred); 0 for none.
pub fn p95(values: &mut [u64]) -> u64 {
    if values.is_empty() {
        return 0;
    }
    values.sort_unstable();
    // Nearest rank: the smallest value with at least 95% of them at or below it.
    let rank = (values.len() * 95).div_ceil(100);
    values[rank.saturating_sub(1)]
}

/// Each object's last applied version in the trace, by kind, namespace and name.
fn latest_templates(events: &[pb::TraceEvent]) -> HashMap<OwnerKey<'_>, Value> {
    let mut objects: HashMap<OwnerKey, &[u8]> = HashMap::new();
    for object in events.iter().flat_map(|event| &event.applied) {
        if let Some(gvk) = &object.gvk {
            objects.insert(
                (&gvk.kind, &object.namespace, &object.name),
                &object.object_json,
            );
        }
    }
    objects
        .into_iter()
        .filter_map(|(key, json)| Some((key, serde_json::from_slice(json).ok()?)))
        .collect()
}

/// What one pod of `object` requests, summed over its template's containers: CPU in
/// millicores, memory in bytes. Workloads hold the template at `spec.template`, a CronJob at
/// `spec.jobTemplate.spec.template`; a bare pod is its own.
fn pod_requests(object: &Value) -> (u64, u64) {
    let spec = [
        "/spec/template/spec",
        "/spec/jobTemplate/spec/template/spec",
        "/spec",
    ]
    .iter()
    .find_map(|path| {
        object
            .pointer(path)
            .filter(|spec| spec.get("containers").is_some())
    });
    let containers = spec
        .and_then(|spec| spec.get("containers"))
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let amount = |container: &Value, name: &str| {
        container
            .pointer(&format!("/resources/requests/{name}"))
            .and_then(|quantity| match quantity {
                Value::String(text) => quantity_value(text),
                Value::Number(number) => number.as_f64(),
                _ => None,
            })
            .filter(|value| value.is_finite() && *value > 0.0)
            .unwrap_or(0.0)
    };
    containers.iter().fold((0, 0), |(cpu, memory), container| {
        (
            // Saturating casts: a request beyond u64 is no real pod's.
            cpu + (amount(container, "cpu") * 1000.0).round() as u64,
            memory + amount(container, "memory").round() as u64,
        )
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn gvk(kind: &str) -> pb::GroupVersionKind {
        pb::GroupVersionKind {
            group: "apps".into(),
            version: "v1".into(),
            kind: kind.into(),
        }
    }

    fn lifecycle(owner: &str, pod: &str, start_ms: i64, end_ms: i64) -> pb::PodLifecycle {
        pb::PodLifecycle {
            owner_gvk: Some(gvk("Deployment")),
            owner_namespace: "shop".into(),
            owner_name: owner.into(),
            pod_name: pod.into(),
            start_ms,
            end_ms,
            ..Default::default()
        }
    }

    fn sample(pod: &str, at: i64, containers: &[(i64, i64)]) -> pb::UsageSample {
        pb::UsageSample {
            timestamp_ms: at,
            namespace: "shop".into(),
            pod: pod.into(),
            containers: containers
                .iter()
                .map(|(cpu_nanocores, memory_bytes)| pb::ContainerUsage {
                    cpu_nanocores: *cpu_nanocores,
                    memory_bytes: *memory_bytes,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    fn deployment(name: &str, requests: &[(&str, &str)]) -> pb::TraceObject {
        let containers: Vec<Value> = requests
            .iter()
            .map(|(cpu, memory)| {
                serde_json::json!({"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}})
            })
            .collect();
        let json = serde_json::json!({"spec": {"template": {"spec": {"containers": containers}}}});
        pb::TraceObject {
            gvk: Some(gvk("Deployment")),
            namespace: "shop".into(),
            name: name.into(),
            object_json: serde_json::to_vec(&json).unwrap(),
        }
    }

    #[test]
    fn p95_is_the_nearest_rank_value() {
        let mut hundred: Vec<u64> = (1..=100).rev().collect();
        assert_eq!(p95(&mut hundred), 95);
        assert_eq!(p95(&mut [7]), 7);
        // 20 values: rank 19.
        let mut twenty: Vec<u64> = (1..=20).collect();
        assert_eq!(p95(&mut twenty), 19);
        assert_eq!(p95(&mut []), 0);
    }

    #[test]
    fn each_owner_gets_the_p95_of_its_pods_totals_and_its_templates_requests_most_cpu_first() {
        let lifecycles = [
            lifecycle("web", "web-a", 0, 0),
            lifecycle("web", "web-b", 0, 0),
            lifecycle("api", "api-a", 0, 5_000),
            // The same name reused later, by another owner's pod.
            lifecycle("db", "api-a", 6_000, 0),
        ];
        let mut samples = Vec::new();
        // web: 20 per-pod totals, two containers each: 100m..2000m and 1..20 MiB.
        for i in 1..=10_i64 {
            samples.push(sample(
                "web-a",
                i,
                &[(i * 50_000_000, i << 20), (i * 50_000_000, 0)],
            ));
            let j = i + 10;
            samples.push(sample("web-b", i, &[(j * 100_000_000, j << 20)]));
        }
        samples.push(sample("api-a", 1_000, &[(300_000_000, 64 << 20)]));
        samples.push(sample("api-a", 7_000, &[(50_000_000, 1 << 30)]));
        // No lifecycle: left out.
        samples.push(sample("stranger", 1_000, &[(9_000_000_000, 1)]));
        let events = [
            pb::TraceEvent {
                applied: vec![deployment("web", &[("1", "1Gi")])],
                ..Default::default()
            },
            pb::TraceEvent {
                // The last version applied counts: two containers now.
                applied: vec![
                    deployment("web", &[("500m", "512Mi"), ("250m", "256Mi")]),
                    deployment("api", &[("100m", "32Mi")]),
                ],
                ..Default::default()
            },
        ];
        let owners = usage_vs_requests(&samples, &lifecycles, &events);
        let figures: Vec<(&str, u64, u64, u64, u64, u64)> = owners
            .iter()
            .map(|o| {
                (
                    o.name.as_str(),
                    o.samples,
                    o.p95_cpu_millis,
                    o.p95_memory_bytes,
                    o.requested_cpu_millis,
                    o.requested_memory_bytes,
                )
            })
            .collect();
        assert_eq!(
            figures,
            [
                ("Deployment/shop/web", 20, 1900, 19 << 20, 750, 768 << 20),
                ("Deployment/shop/api", 1, 300, 64 << 20, 100, 32 << 20),
                // No template in the trace: no requests known.
                ("Deployment/shop/db", 1, 50, 1 << 30, 0, 0),
            ]
        );
    }

    #[test]
    fn a_cronjobs_template_is_under_its_job_template_and_owners_are_capped() {
        let cron = serde_json::json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {
            "containers": [{"resources": {"requests": {"cpu": "2", "memory": "1Mi"}}}]}}}}}});
        assert_eq!(pod_requests(&cron), (2000, 1 << 20));
        assert_eq!(pod_requests(&serde_json::json!({"spec": {}})), (0, 0));

        let lifecycles: Vec<_> = (0..150)
            .map(|i| lifecycle(&format!("w{i:03}"), &format!("p{i:03}"), 0, 0))
            .collect();
        let samples: Vec<_> = (0..150_i64)
            .map(|i| sample(&format!("p{i:03}"), 1, &[(i * 1_000_000, 0)]))
            .collect();
        let owners = usage_vs_requests(&samples, &lifecycles, &[]);
        assert_eq!(owners.len(), MAX_USAGE_WORKLOADS);
        assert_eq!(owners[0].name, "Deployment/shop/w149");
        assert_eq!(owners[99].p95_cpu_millis, 50);
    }
}
