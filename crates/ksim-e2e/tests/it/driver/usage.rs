//! Usage replay: each replayed pod uses what its recorded pod used, or its share of its owner's
//! recorded total when the replay runs another number of replicas; the pool holds the figures
//! (and serves them as the metrics API).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use super::common::*;
use k8s_openapi::jiff::Timestamp;
use ksim_localenv::fixtures::Workload;
use ksim_localenv::wait;
use ksim_proto::ksim::driver::v1 as pb;
use ksim_trace::pb as trace;

const INTERVAL_MS: i64 = 2_000;

fn deployment() -> trace::GroupVersionKind {
    ksim_trace::gvk::parse("apps/v1.Deployment").unwrap()
}

/// A recorded pod of a Deployment in `shop`, running from the start to the end of the trace.
fn recorded(owner: &str, pod: &str, launch_index: u32) -> trace::PodLifecycle {
    trace::PodLifecycle {
        owner_gvk: Some(deployment()),
        owner_namespace: "shop".to_owned(),
        owner_name: owner.to_owned(),
        pod_spec_hash: 7,
        launch_index,
        start_ms: 0,
        end_ms: 0,
        outcome: trace::PodOutcome::Running as i32,
        pod_name: pod.to_owned(),
        ..Default::default()
    }
}

/// `pod` used `millicores` of CPU from `from_ms` on, sampled every interval up to `to_ms`.
fn used(pod: &str, from_ms: i64, to_ms: i64, millicores: i64) -> Vec<trace::UsageSample> {
    (from_ms..to_ms)
        .step_by(INTERVAL_MS as usize)
        .map(|at| trace::UsageSample {
            timestamp_ms: at,
            window_ms: INTERVAL_MS,
            namespace: "shop".to_owned(),
            pod: pod.to_owned(),
            containers: vec![trace::ContainerUsage {
                name: "main".to_owned(),
                cpu_nanocores: millicores * 1_000_000,
                memory_bytes: 64 << 20,
            }],
        })
        .collect()
}

/// CPU millicores per replayed pod of `app` the pool holds now, lowest first.
fn cpu_of(mesh: &TestMesh, app: &str) -> Vec<u64> {
    let mut cpu: Vec<u64> = mesh
        .pool
        .pod_readings(Timestamp::now())
        .iter()
        .filter(|pod| pod.namespace == "use-shop" && pod.name.starts_with(&format!("{app}-")))
        .map(|pod| pod.containers.iter().map(|c| c.cpu_nanocores).sum::<u64>() / 1_000_000)
        .collect();
    cpu.sort_unstable();
    cpu
}

async fn until_cpu(mesh: &TestMesh, app: &str, expected: &[u64]) {
    wait::until(
        &format!("{app}'s pods to use {expected:?}"),
        DEADLINE,
        || async {
            let cpu = cpu_of(mesh, app);
            if cpu == expected {
                Ok(())
            } else {
                Err(format!("{cpu:?}"))
            }
        },
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn replayed_pods_use_what_their_recorded_pods_used_and_share_it_when_counts_differ() {
    let mut mesh = start().await;
    let end_ms = 600_000;
    // web: two recorded pods, two replicas replayed: each uses its own pod's figures, which
    // change at 20 s. api: one recorded pod using 900m, three replicas replayed: 300m each.
    let mut usage = used("web-a", 0, 20_000, 200);
    usage.extend(used("web-b", 0, 20_000, 400));
    usage.extend(used("web-a", 20_000, end_ms, 600));
    usage.extend(used("web-b", 20_000, end_ms, 800));
    usage.extend(used("api-a", 0, end_ms, 900));
    let replayable = usage.len() as u64;
    // A pod the trace holds no lifecycle for: ignored.
    usage.extend(used("stranger", 0, 10_000, 50));
    let file = trace_file_with_usage(
        vec![(
            0,
            vec![
                (
                    "apps/v1.Deployment",
                    "shop",
                    "web",
                    Workload::new("web", 2).json(),
                ),
                (
                    "apps/v1.Deployment",
                    "shop",
                    "api",
                    Workload::new("api", 3).requests("100m", "32Mi").json(),
                ),
            ],
            Vec::new(),
        )],
        vec![
            recorded("web", "web-a", 0),
            recorded("web", "web-b", 1),
            recorded("api", "api-a", 0),
        ],
        usage,
        INTERVAL_MS,
        end_ms,
    );
    let simulation = mesh
        .start_simulation(pb::SimulationSpec {
            trace_source: uploaded(file),
            speed: 1.0,
            namespace_prefix: "use".to_owned(),
            node_groups: vec![pool_group("use", 2)],
            ..Default::default()
        })
        .await
        .unwrap();

    until_cpu(&mesh, "api", &[300, 300, 300]).await;
    until_cpu(&mesh, "web", &[200, 400]).await;
    // Recorded time goes on: the later samples take over.
    until_cpu(&mesh, "web", &[600, 800]).await;
    let memory: BTreeMap<String, u64> = mesh
        .pool
        .pod_readings(Timestamp::now())
        .into_iter()
        .filter(|pod| pod.name.starts_with("web-"))
        .map(|pod| (pod.name, pod.containers[0].memory_bytes))
        .collect();
    assert!(
        memory.values().all(|bytes| *bytes == 64 << 20),
        "{memory:?}"
    );

    let cancelled = mesh.cancel(&simulation.id).await;
    assert_eq!(cancelled.state(), pb::SimulationState::Cancelled);
    // The report says how: web's updates matched, api's shared, none defaulted.
    let report = mesh.report(&simulation.id).await;
    let replayed = report.usage.clone().unwrap();
    assert_eq!(
        (replayed.samples, replayed.ignored_samples),
        (replayable, 5)
    );
    assert_eq!(replayed.interval.unwrap().seconds, 2);
    // Buckets carry what was set: at most web's 600m + 800m and api's 3 x 300m.
    let used = report.timeline.iter().filter_map(|bucket| bucket.usage);
    assert_eq!(used.map(|usage| usage.used_cpu_millis).max(), Some(2300));
    // From the trace: api's one recorded pod used 900m against its 100m request.
    let api = replayed
        .usage_vs_requests
        .iter()
        .find(|w| w.name == "Deployment/shop/api");
    assert_eq!(
        api.map(|w| (
            w.p95_cpu_millis,
            w.requested_cpu_millis,
            w.requested_memory_bytes
        )),
        Some((900, 100, 32 << 20))
    );
    assert!(
        replayed.matched >= 2 && replayed.shared >= 3 && replayed.defaulted == 0,
        "{replayed:?}"
    );
    mesh.assert_nothing_left(&simulation.id, &["use"]).await;
}

/// `workload` with its container's limits set (what a rightsizing transform would write).
/// The rightsizing under test, as a user writes it: limits set by a trace transform.
const RIGHTSIZING: &str = r#"
rules:
- name: web's memory limit below what it used
  match: 'kind == "Deployment" && name == "web"'
  setResources: { limits: { memory: 32Mi } }
- name: api's CPU limit below what it used
  match: 'kind == "Deployment" && name == "api"'
  setResources: { limits: { cpu: 100m } }
- name: db's limits above what it used
  match: 'kind == "Deployment" && name == "db"'
  setResources: { limits: { cpu: 1, memory: 1Gi } }
"#;

#[tokio::test(flavor = "multi_thread")]
async fn limits_below_the_recorded_usage_oom_kill_and_throttle_exactly_that_workload() {
    let mut mesh = start().await;
    let end_ms = 600_000;
    // All three used 200m and 64Mi with no limits. The transform sets web's memory limit below
    // that: OOM kills. api's CPU limit below it: throttled. db's limits above it: neither.
    let mut usage = used("web-a", 0, end_ms, 200);
    usage.extend(used("api-a", 0, end_ms, 200));
    usage.extend(used("db-a", 0, end_ms, 200));
    let workload = |name: &str| Workload::new(name, 1).requests("100m", "32Mi").json();
    let recorded_file = trace_file_with_usage(
        vec![(
            0,
            ["web", "api", "db"]
                .map(|name| ("apps/v1.Deployment", "shop", name, workload(name)))
                .to_vec(),
            Vec::new(),
        )],
        vec![
            recorded("web", "web-a", 0),
            recorded("api", "api-a", 0),
            recorded("db", "db-a", 0),
        ],
        usage,
        INTERVAL_MS,
        end_ms,
    );
    let rules = ksim_transform::Rules::parse(RIGHTSIZING).unwrap();
    let (file, summary) =
        ksim_transform::transform_trace(&rules, recorded_file.as_slice(), Vec::new(), "test")
            .unwrap();
    assert_eq!(summary.stats.objects_changed, 3, "{summary:?}");
    let simulation = mesh
        .start_simulation(pb::SimulationSpec {
            trace_source: uploaded(file),
            speed: 1.0,
            namespace_prefix: "lim".to_owned(),
            node_groups: vec![pool_group("lim", 1)],
            ..Default::default()
        })
        .await
        .unwrap();
    // api reads its limit, not what it wants; db what it wants.
    wait::until("api throttled to its limit, db not", DEADLINE, || async {
        let cpu = |app| {
            mesh.pool
                .pod_readings(Timestamp::now())
                .iter()
                .filter(|pod| pod.namespace == "lim-shop" && pod.name.starts_with(app))
                .map(|pod| pod.containers.iter().map(|c| c.cpu_nanocores).sum::<u64>() / 1_000_000)
                .collect::<Vec<_>>()
        };
        let (api, db) = (cpu("api-"), cpu("db-"));
        (api == [100] && db == [200])
            .then_some(())
            .ok_or(format!("api {api:?}, db {db:?}"))
    })
    .await
    .unwrap();
    // web restarts as a kubelet would restart it.
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(mesh.client.clone(), "lim-shop");
    wait::until("web OOM-killed and restarted", DEADLINE, || async {
        let list = pods
            .list(&kube::api::ListParams::default().labels("app=web"))
            .await
            .map_err(|e| e.to_string())?;
        let status = list
            .items
            .first()
            .and_then(|pod| pod.status.as_ref())
            .and_then(|status| status.container_statuses.as_ref())
            .and_then(|statuses| statuses.first().cloned());
        let killed = status.as_ref().is_some_and(|status| {
            status.restart_count >= 1
                && status
                    .last_state
                    .as_ref()
                    .and_then(|state| state.terminated.as_ref())
                    .is_some_and(|terminated| terminated.reason.as_deref() == Some("OOMKilled"))
        });
        killed.then_some(()).ok_or(format!("{status:?}"))
    })
    .await
    .unwrap();
    // A few more intervals of throttling.
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;

    let cancelled = mesh.cancel(&simulation.id).await;
    assert_eq!(cancelled.state(), pb::SimulationState::Cancelled);
    let replayed = mesh.report(&simulation.id).await.usage.unwrap();
    assert!(replayed.oom_kills >= 1, "{replayed:?}");
    let by_name: BTreeMap<&str, (u64, f64)> = replayed
        .workloads
        .iter()
        .map(|w| (w.name.as_str(), (w.oom_kills, w.throttled_cpu_seconds)))
        .collect();
    // Exactly the workload whose limit is below its use is killed; api alone is throttled,
    // at 100m beyond its limit for the seconds it ran.
    let names: Vec<&str> = by_name.keys().copied().collect();
    assert_eq!(
        names,
        ["Deployment/shop/api", "Deployment/shop/web"],
        "{replayed:?}"
    );
    let (web_kills, web_throttled) = by_name["Deployment/shop/web"];
    let (api_kills, api_throttled) = by_name["Deployment/shop/api"];
    assert_eq!((web_kills, web_throttled), (replayed.oom_kills, 0.0));
    assert_eq!(api_kills, 0);
    // At least one interval's worth (100m over 2 s), at most 100m over the whole window.
    assert!((0.19..0.1 * 600.0).contains(&api_throttled), "{replayed:?}");
    mesh.assert_nothing_left(&simulation.id, &["lim"]).await;
}
