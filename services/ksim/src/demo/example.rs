//! The demo's bundled trace, written here rather than checked in as a binary file: a recording
//! of namespace `shop` whose `web` Deployment scales 2 -> 20 -> 5 while a `report` Job runs
//! three 15-second pods. At 20 replicas it needs more nodes than a fixed group of four has,
//! which is what cluster-autoscaler (or its absence) shows in the report.

use ksim_trace::{FORMAT_VERSION, TraceError, TraceWriter, pb, time::timestamp};
use serde_json::{Value, json};

/// When the recording starts (2026-01-05T10:00:00Z); any fixed time works, the replay only
/// uses offsets from it.
pub const START_MS: i64 = 1_767_607_200_000;
/// Length of the recording; the replay lasts this long divided by the speed.
pub const LENGTH_MS: i64 = 130_000;
pub const NAMESPACE: &str = "shop";
pub const DEPLOYMENT: &str = "web";
pub const JOB: &str = "report";
/// The Deployment's replicas over time: (offset in ms, replicas).
pub const WEB_REPLICAS: [(i64, i32); 3] = [(0, 2), (20_000, 20), (80_000, 5)];
/// The Job's creation, and when its pods started and ended, as offsets in ms.
pub const JOB_CREATED_MS: i64 = 100_000;
pub const JOB_POD_START_MS: i64 = 101_000;
pub const JOB_POD_RUN_MS: i64 = 15_000;
pub const JOB_PODS: i32 = 3;
/// Requests of each web pod.
pub const WEB_CPU: &str = "500m";
pub const WEB_MEMORY: &str = "512Mi";

/// The trace file's bytes.
pub fn example_trace() -> Result<Vec<u8>, TraceError> {
    let mut writer = TraceWriter::new(Vec::new(), &header())?;
    let mut events: Vec<(i64, pb::TraceObject)> = WEB_REPLICAS
        .iter()
        .map(|&(offset_ms, replicas)| (offset_ms, web(replicas)))
        .collect();
    events.push((JOB_CREATED_MS, report_job()));
    for (offset_ms, object) in events {
        writer.write_event(&pb::TraceEvent {
            timestamp_ms: START_MS + offset_ms,
            applied: vec![object],
            deleted: Vec::new(),
        })?;
    }
    // Pod names as the Job controller would have made them; for diagnostics only.
    for (launch_index, suffix) in (0u32..).zip(["4kq2m", "9xw7t", "c8r5p"]) {
        let start_ms = START_MS + JOB_POD_START_MS;
        writer.write_lifecycle(&pb::PodLifecycle {
            owner_gvk: Some(job_gvk()),
            owner_namespace: NAMESPACE.to_owned(),
            owner_name: JOB.to_owned(),
            // One template, so one hash; only compared for equality within the trace.
            pod_spec_hash: 0x6b73_696d_2d64_656d,
            launch_index,
            start_ms,
            end_ms: start_ms + JOB_POD_RUN_MS,
            outcome: pb::PodOutcome::Succeeded as i32,
            pod_name: format!("{JOB}-{suffix}"),
            ..Default::default()
        })?;
    }
    let (bytes, _trailer) = writer.finish()?;
    Ok(bytes)
}

fn header() -> pb::TraceHeader {
    let kind = |gvk: pb::GroupVersionKind, plural: &str| pb::TrackedKindConfig {
        gvk: Some(gvk),
        plural: plural.to_owned(),
        namespaced: true,
        pod_template_paths: vec!["/spec/template".to_owned()],
        track_lifecycles: true,
        skip_owned: true,
    };
    pb::TraceHeader {
        format_version: FORMAT_VERSION,
        tracer_config: Some(pb::TracerConfig {
            tracked_kinds: vec![
                kind(deployment_gvk(), "deployments"),
                kind(job_gvk(), "jobs"),
            ],
            // Written in code, not recorded: there is no cluster state to compare with.
            cluster_recorded: false,
            ..Default::default()
        }),
        start_time: Some(timestamp(START_MS)),
        // Exclusive, and the last event is well before it.
        end_time: Some(timestamp(START_MS + LENGTH_MS)),
        created_by: "ksim demo".to_owned(),
        create_time: Some(timestamp(START_MS + LENGTH_MS)),
        origin: "the ksim demo scenario".to_owned(),
        transforms: Vec::new(),
    }
}

fn deployment_gvk() -> pb::GroupVersionKind {
    gvk("apps", "Deployment")
}

fn job_gvk() -> pb::GroupVersionKind {
    gvk("batch", "Job")
}

fn gvk(group: &str, kind: &str) -> pb::GroupVersionKind {
    pb::GroupVersionKind {
        group: group.to_owned(),
        version: "v1".to_owned(),
        kind: kind.to_owned(),
    }
}

fn object(gvk: pb::GroupVersionKind, name: &str, json: &Value) -> pb::TraceObject {
    pb::TraceObject {
        gvk: Some(gvk),
        namespace: NAMESPACE.to_owned(),
        name: name.to_owned(),
        // Display of a Value cannot fail, unlike serde_json::to_vec's signature.
        object_json: json.to_string().into_bytes(),
    }
}

/// The Deployment as the tracer records it: no status, no server metadata, no tolerations
/// (the driver adds the virtual-node toleration).
fn web(replicas: i32) -> pb::TraceObject {
    let json = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": DEPLOYMENT,
            "namespace": NAMESPACE,
            "labels": { "app": DEPLOYMENT },
        },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": DEPLOYMENT } },
            "template": {
                "metadata": { "labels": { "app": DEPLOYMENT } },
                "spec": {
                    "containers": [{
                        "name": DEPLOYMENT,
                        "image": "registry.example/shop/web:1.4.2",
                        "ports": [{ "containerPort": 8080 }],
                        "resources": {
                            "requests": { "cpu": WEB_CPU, "memory": WEB_MEMORY },
                        },
                    }],
                },
            },
        },
    });
    object(deployment_gvk(), DEPLOYMENT, &json)
}

fn report_job() -> pb::TraceObject {
    let json = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": JOB,
            "namespace": NAMESPACE,
            "labels": { "app": JOB },
        },
        "spec": {
            "completions": JOB_PODS,
            "parallelism": JOB_PODS,
            "backoffLimit": 2,
            "template": {
                "metadata": { "labels": { "app": JOB } },
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{
                        "name": JOB,
                        "image": "registry.example/shop/report:2.0.1",
                        "args": ["--day", "yesterday"],
                        "resources": {
                            "requests": { "cpu": "250m", "memory": "256Mi" },
                        },
                    }],
                },
            },
        },
    });
    object(job_gvk(), JOB, &json)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use ksim_trace::{read_trace, time::millis};

    use super::*;

    fn decoded(object: &pb::TraceObject) -> Value {
        serde_json::from_slice(&object.object_json).unwrap()
    }

    #[test]
    fn reads_back_complete_with_the_header_it_was_written_with() {
        let trace = read_trace(&example_trace().unwrap()).unwrap();
        assert_eq!(trace.header.format_version, FORMAT_VERSION);
        assert_eq!(trace.header.created_by, "ksim demo");
        let kinds: Vec<_> = trace
            .header
            .tracer_config
            .as_ref()
            .unwrap()
            .tracked_kinds
            .iter()
            .map(|kind| {
                let gvk = kind.gvk.as_ref().unwrap();
                (
                    format!("{}/{}.{}", gvk.group, gvk.version, gvk.kind),
                    kind.pod_template_paths.clone(),
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [
                (
                    "apps/v1.Deployment".to_owned(),
                    vec!["/spec/template".to_owned()]
                ),
                ("batch/v1.Job".to_owned(), vec!["/spec/template".to_owned()]),
            ]
        );
        assert_eq!(trace.trailer.event_count, 4);
        assert_eq!(trace.trailer.lifecycle_count, 3);
        assert_eq!(trace.trailer.object_count, 4);
    }

    #[test]
    fn events_are_in_order_and_inside_the_header_window() {
        let trace = read_trace(&example_trace().unwrap()).unwrap();
        let times: Vec<i64> = trace.events.iter().map(|e| e.timestamp_ms).collect();
        assert!(times.is_sorted(), "{times:?}");
        let start = millis(trace.header.start_time.as_ref().unwrap());
        let end = millis(trace.header.end_time.as_ref().unwrap());
        assert_eq!((start, end - start), (START_MS, 130_000));
        // The window's end is exclusive.
        assert!(times.iter().all(|t| (start..end).contains(t)), "{times:?}");
        for lifecycle in &trace.lifecycles {
            assert!(start <= lifecycle.start_ms && lifecycle.end_ms < end);
        }
    }

    #[test]
    fn web_scales_from_2_to_20_to_5() {
        let trace = read_trace(&example_trace().unwrap()).unwrap();
        let web: Vec<(i64, i64)> = trace
            .events
            .iter()
            .flat_map(|event| event.applied.iter().map(move |o| (event.timestamp_ms, o)))
            .filter(|(_, o)| o.gvk.as_ref().unwrap().kind == "Deployment")
            .map(|(t, o)| {
                assert_eq!((o.namespace.as_str(), o.name.as_str()), ("shop", "web"));
                let json = decoded(o);
                assert_eq!(json["metadata"]["name"], "web");
                let requests =
                    &json["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"];
                assert_eq!(requests["cpu"], "500m");
                assert_eq!(requests["memory"], "512Mi");
                (t - START_MS, json["spec"]["replicas"].as_i64().unwrap())
            })
            .collect();
        assert_eq!(web, [(0, 2), (20_000, 20), (80_000, 5)]);
    }

    #[test]
    fn the_job_runs_three_pods_for_15_seconds() {
        let trace = read_trace(&example_trace().unwrap()).unwrap();
        let job = trace.events.last().unwrap();
        assert_eq!(job.timestamp_ms - START_MS, 100_000);
        let [object] = job.applied.as_slice() else {
            panic!("{job:?}")
        };
        assert_eq!(object.gvk, Some(job_gvk()));
        let json = decoded(object);
        assert_eq!(json["spec"]["completions"], 3);
        assert_eq!(json["spec"]["parallelism"], 3);
        assert_eq!(json["spec"]["template"]["spec"]["restartPolicy"], "Never");

        assert_eq!(trace.lifecycles.len(), 3);
        for (index, lifecycle) in (0u32..).zip(&trace.lifecycles) {
            assert_eq!(lifecycle.owner_gvk, Some(job_gvk()));
            assert_eq!(
                (
                    lifecycle.owner_namespace.as_str(),
                    lifecycle.owner_name.as_str()
                ),
                ("shop", "report")
            );
            assert_eq!(lifecycle.launch_index, index);
            assert_eq!(lifecycle.outcome(), pb::PodOutcome::Succeeded);
            assert_eq!(lifecycle.end_ms - lifecycle.start_ms, 15_000);
            assert!(lifecycle.start_ms >= job.timestamp_ms);
        }
    }
}
