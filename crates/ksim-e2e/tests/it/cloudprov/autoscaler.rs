//! The real cluster-autoscaler (CA) against the provider, the pool and the real control plane.
//!
//! Named `real_ca_*`, they run on every test run and need the binaries
//! deploy/cluster-autoscaler/build.sh builds (the pinned release, and 1.34.5 and 1.36.1 for
//! their version tests); a missing binary fails the test with an error naming that script.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::{BTreeMap, BTreeSet},
    net::SocketAddr,
    time::Duration,
};

use super::common::*;
use k8s_openapi::api::{apps::v1::Deployment, core::v1::Pod};
use ksim_grpc::ServeArgs;
use ksim_localenv::fixtures::Workload;
use ksim_localenv::{CloudConfig, ClusterAutoscaler, ClusterAutoscalerBuilder, wait};
use ksim_nodes::labels::{GROUP_LABEL, MIN_SIZE_ANNOTATION, TO_BE_DELETED_TAINT};
use kube::{
    Api,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

/// CA decides within seconds, but a node's life (pending pods, scale-up, registration, pods
/// running, unneeded time, drain, deletion) adds up on a loaded machine.
const CA_DEADLINE: Duration = Duration::from_secs(240);

/// CA with the tests' fast flags (set here, not CA's defaults); change flags with `.arg`.
fn autoscaler(env: &Env, cloud_config: CloudConfig) -> ClusterAutoscalerBuilder {
    ClusterAutoscaler::builder(&env.control_plane, cloud_config).fast()
}

fn plaintext(address: SocketAddr) -> CloudConfig {
    CloudConfig::plaintext(address.to_string())
}

/// Starts CA. A missing binary fails the test with the error (which names
/// deploy/cluster-autoscaler/build.sh), not its Debug form.
async fn started(builder: ClusterAutoscalerBuilder) -> ClusterAutoscaler {
    builder.start().await.unwrap_or_else(|e| panic!("{e}"))
}

/// Creates `replicas` pods labelled `app=<name>` asking for `cpu` each, on `group`'s nodes or,
/// without one, on any group's.
async fn create_workload(env: &Env, name: &str, replicas: i32, cpu: &str, group: Option<&str>) {
    let workload = Workload::new(name, replicas).requests(cpu, "1Gi");
    let workload = match group {
        Some(group) => workload.on_group(group),
        None => workload.on_any_group(),
    };
    Api::<Deployment>::namespaced(env.client.clone(), NAMESPACE)
        .create(&PostParams::default(), &workload.deployment())
        .await
        .unwrap();
}

async fn scale_workload(env: &Env, name: &str, replicas: i32) {
    Api::<Deployment>::namespaced(env.client.clone(), NAMESPACE)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "replicas": replicas } })),
        )
        .await
        .unwrap();
}

/// The Running pods of workload `name`, once there are exactly `count`.
async fn running_pods(env: &Env, name: &str, count: usize) -> Vec<Pod> {
    ksim_localenv::pods::in_phase(
        &env.client,
        NAMESPACE,
        &format!("app={name}"),
        "Running",
        count,
        CA_DEADLINE,
    )
    .await
    .unwrap()
}

/// Every pod of workload `name` by UID, with its node, phase and whether it is being deleted.
async fn pods_of(env: &Env, name: &str) -> BTreeMap<String, (String, String, bool)> {
    Api::<Pod>::namespaced(env.client.clone(), NAMESPACE)
        .list(&ListParams::default().labels(&format!("app={name}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|pod| {
            let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
            let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
            (
                pod.metadata.uid.unwrap(),
                (
                    node.unwrap_or_default(),
                    phase.unwrap_or_default(),
                    pod.metadata.deletion_timestamp.is_some(),
                ),
            )
        })
        .collect()
}

/// Workload `name`'s pods (UID -> node) once exactly `count` exist, all Running and none
/// terminating: what a shrink leaves.
async fn settled_pods(env: &Env, name: &str, count: usize) -> BTreeMap<String, String> {
    wait::until(
        &format!("{count} settled pods of {name}"),
        CA_DEADLINE,
        || async {
            let pods = pods_of(env, name).await;
            let settled = pods.len() == count
                && pods
                    .values()
                    .all(|(_, phase, deleting)| phase == "Running" && !deleting);
            settled
                .then(|| {
                    pods.iter()
                        .map(|(uid, (node, _, _))| (uid.clone(), node.clone()))
                        .collect()
                })
                .ok_or(format!("{pods:?}"))
        },
    )
    .await
    .unwrap()
}

/// The nodes workload `name`'s Running pods that are not being deleted are on.
async fn nodes_of_running_pods(env: &Env, name: &str) -> BTreeSet<String> {
    pods_of(env, name)
        .await
        .into_values()
        .filter(|(_, phase, deleting)| phase == "Running" && !deleting)
        .map(|(node, _, _)| node)
        .collect()
}

fn nodes_of_pods(pods: &[Pod]) -> BTreeSet<String> {
    pods.iter()
        .map(|p| p.spec.as_ref().unwrap().node_name.clone().unwrap())
        .collect()
}

/// Sets a seat Deployment's min size and waits until the provider reports it.
async fn set_min_size(env: &Env, group: &str, min: i32) {
    Api::<Deployment>::namespaced(env.client.clone(), NAMESPACE)
        .patch(
            &format!("seats-{group}"),
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "annotations": {
                MIN_SIZE_ANNOTATION: min.to_string()
            } } })),
        )
        .await
        .unwrap();
    wait::until(&format!("{group} at min size {min}"), DEADLINE, || async {
        let seen = env
            .provider
            .groups()
            .into_iter()
            .find(|g| g.id == group)
            .map(|g| g.min);
        (seen == Some(min)).then_some(()).ok_or(format!("{seen:?}"))
    })
    .await
    .unwrap();
}

/// Waits until `group` is down to `count` nodes, each with a live seat and the target size
/// matching, and the nodes gone from `before` are exactly the ones CA named in DeleteNodes.
/// Returns the nodes left.
async fn scaled_down_to(
    env: &Env,
    resizes: &mut Resizes,
    group: &str,
    before: &BTreeSet<String>,
    count: usize,
) -> BTreeSet<String> {
    wait::until(
        &format!("{group} scaled down to {count}, the nodes CA named gone"),
        CA_DEADLINE,
        || {
            let named = resizes.deleted(group);
            async move {
                let nodes = node_names(&env.client, group).await;
                let seats = live_seats(&env.client, group).await;
                let target = env.provider.target_size(group).ok();
                let gone: BTreeSet<String> = before.difference(&nodes).cloned().collect();
                let done = nodes.len() == count
                    && seats == nodes
                    && target == Some(i32::try_from(count).unwrap())
                    && gone == named;
                done.then_some(nodes.clone()).ok_or(format!(
                    "nodes {nodes:?}, seats {seats:?}, target {target:?}, CA named {named:?}"
                ))
            }
        },
    )
    .await
    .unwrap()
}

/// Waits until CA logs that it keeps one of `nodes` because its group is at its min size.
async fn kept_at_min_size(ca: &ClusterAutoscaler, nodes: &BTreeSet<String>) {
    wait::until("CA to stop at the min size", CA_DEADLINE, || async {
        nodes
            .iter()
            .any(|node| ca.log_contains(&format!("Skipping {node} - node group min size reached")))
            .then_some(())
            .ok_or_else(|| ca.log_tail())
    })
    .await
    .unwrap();
}

/// How many lines of CA's log contain `needle`.
fn log_count(ca: &ClusterAutoscaler, needle: &str) -> usize {
    std::fs::read(ca.log_path())
        .map(|bytes| String::from_utf8_lossy(&bytes).matches(needle).count())
        .unwrap_or(0)
}

/// How many RunOnce loops CA has started, from its metrics.
async fn loops(ca: &ClusterAutoscaler) -> Result<u64, String> {
    const MAIN: &str = "cluster_autoscaler_function_duration_seconds_count{function=\"main\"} ";
    let metrics = ca.metrics().await.map_err(|e| e.to_string())?;
    Ok(metrics
        .lines()
        .find_map(|line| line.strip_prefix(MAIN))
        .and_then(|count| count.trim().parse().ok())
        .unwrap_or(0))
}

/// Returns once CA has run `n` more loops: each one saw the cluster as it is now.
async fn after_loops(ca: &ClusterAutoscaler, n: u64) {
    let start = loops(ca).await.unwrap();
    wait::until(&format!("{n} more CA loops"), CA_DEADLINE, || async {
        let now = loops(ca).await?;
        (now >= start + n)
            .then_some(())
            .ok_or(format!("{now} loops"))
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn real_ca_scales_up_for_pending_pods_and_down_exactly_the_nodes_it_named() {
    let env = start().await;
    let mut resizes = Resizes::new(&env);
    let server = serve(env.provider.clone(), ServeArgs::ephemeral()).await;
    let address = server.grpc_addr();
    create_seats(
        &env.client,
        &seat_deployment("m5", 1, 1, 5, M5_LARGE_TAINTED_SKELETON),
    )
    .await;
    ready_nodes(&env.client, "m5", 1).await;
    let _ca = started(autoscaler(&env, plaintext(address))).await;

    create_workload(&env, "work", 3, "1500m", Some("m5")).await;
    running_pods(&env, "work", 3).await;
    let before = node_names(&env.client, "m5").await;
    assert_eq!(before.len(), 3, "{before:?}");
    assert_eq!(resizes.increased("m5"), 2);

    scale_workload(&env, "work", 1).await;
    // CA removes the two unneeded nodes; min size 1 keeps the last.
    let after = scaled_down_to(&env, &mut resizes, "m5", &before, 1).await;
    let pods = running_pods(&env, "work", 1).await;
    assert_eq!(nodes_of_pods(&pods), after);
}

/// A group at zero grows from its template for pending pods; when the workload shrinks, CA
/// removes exactly the nodes it named and stops at the group's min size.
pub(crate) async fn scales_from_zero_and_down_exactly_the_nodes_it_named(version: &str) {
    let binary = release(version);
    let env = start().await;
    let mut resizes = Resizes::new(&env);
    let server = serve(env.provider.clone(), ServeArgs::ephemeral()).await;
    let address = server.grpc_addr();
    create_seats(
        &env.client,
        &seat_deployment("m5", 0, 0, 5, M5_LARGE_TAINTED_SKELETON),
    )
    .await;
    let ca = started(autoscaler(&env, plaintext(address)).binary(binary)).await;

    create_workload(&env, "work", 3, "1500m", Some("m5")).await;
    running_pods(&env, "work", 3).await;
    let before = node_names(&env.client, "m5").await;
    assert_eq!(before.len(), 3, "{before:?}");
    assert_eq!(resizes.increased("m5"), 3, "one node per pending pod");

    // Of the two nodes the shrink empties, the raised min size lets only one go.
    set_min_size(&env, "m5", 2).await;
    scale_workload(&env, "work", 1).await;
    let after = scaled_down_to(&env, &mut resizes, "m5", &before, 2).await;
    kept_at_min_size(&ca, &after).await;
    assert_eq!(node_names(&env.client, "m5").await, after);
    let pods = running_pods(&env, "work", 1).await;
    assert!(nodes_of_pods(&pods).is_subset(&after));
}

#[tokio::test(flavor = "multi_thread")]
async fn real_ca_scales_only_the_group_whose_instance_type_fits_the_pending_pods() {
    let env = start().await;
    let mut resizes = Resizes::new(&env);
    let server = serve(env.provider.clone(), ServeArgs::ephemeral()).await;
    let address = server.grpc_addr();
    create_seats(
        &env.client,
        &seat_deployment("m5", 1, 1, 5, M5_LARGE_TAINTED_SKELETON),
    )
    .await;
    create_seats(
        &env.client,
        &seat_deployment("c5", 0, 0, 5, C5_XLARGE_TAINTED_SKELETON),
    )
    .await;
    ready_nodes(&env.client, "m5", 1).await;
    let m5 = node_names(&env.client, "m5").await;
    let _ca = started(autoscaler(&env, plaintext(address))).await;

    // 3 CPU fits a c5.xlarge (3920m allocatable), never an m5.large (1930m).
    create_workload(&env, "big", 2, "3", None).await;
    let pods = running_pods(&env, "big", 2).await;
    let c5 = node_names(&env.client, "c5").await;
    assert_eq!(c5.len(), 2, "{c5:?}");
    assert_eq!(nodes_of_pods(&pods), c5);
    assert_eq!(resizes.increased("c5"), 2);
    assert_eq!(resizes.increased("m5"), 0);
    assert_eq!(env.provider.target_size("m5").unwrap(), 1);
    assert_eq!(node_names(&env.client, "m5").await, m5);
}

#[tokio::test(flavor = "multi_thread")]
async fn real_ca_scales_two_groups_from_zero_each_for_the_pods_that_select_it() {
    let env = start().await;
    let mut resizes = Resizes::new(&env);
    let server = serve(env.provider.clone(), ServeArgs::ephemeral()).await;
    let address = server.grpc_addr();
    create_seats(
        &env.client,
        &seat_deployment("m5", 0, 0, 5, M5_LARGE_TAINTED_SKELETON),
    )
    .await;
    create_seats(
        &env.client,
        &seat_deployment("c5", 0, 0, 5, C5_XLARGE_TAINTED_SKELETON),
    )
    .await;
    let _ca = started(autoscaler(&env, plaintext(address))).await;

    create_workload(&env, "small", 3, "1500m", Some("m5")).await;
    create_workload(&env, "big", 2, "3", Some("c5")).await;
    let small = running_pods(&env, "small", 3).await;
    let big = running_pods(&env, "big", 2).await;
    assert_eq!(nodes_of_pods(&small), node_names(&env.client, "m5").await);
    assert_eq!(nodes_of_pods(&big), node_names(&env.client, "c5").await);
    assert_eq!(resizes.increased("m5"), 3);
    assert_eq!(resizes.increased("c5"), 2);
}

/// GPUs as the device plugin advertises them (issue 57): a GPU group scaled from zero only for
/// the pod that asks for a GPU. CA learns the GPU type label from the provider (`GPULabel`)
/// and takes a node with it for not ready until it has `nvidia.com/gpu` allocatable, which the
/// pool's node has from its skeleton at once; the template of the empty group (the skeleton)
/// tells it the GPU pod fits there. The CPU pods would fit the GPU node's CPU too, but its
/// taint keeps them on the CPU group, as in production.
#[tokio::test(flavor = "multi_thread")]
async fn real_ca_grows_the_gpu_group_from_zero_for_the_gpu_pod_only() {
    let env = start().await;
    let gpu_group = seat_deployment("p3", 0, 0, 2, P3_2XLARGE_SKELETON);
    let train = Workload::new("train", 1).gpus(1);
    let gpu_types = grows_the_gpu_group_for_the_gpu_pods_only(&env, gpu_group, train).await;
    assert_eq!(gpu_types, ["nvidia-tesla-v100"]);
}

/// CA (1.35: DRA on, locked) grows a DRA GPU group for a pod whose claim its one node's device
/// cannot take, and the CPU group for the CPU pods. Its templates come from the group's node
/// with the node's ResourceSlice: the provider's template (externalgrpc carries a Node only)
/// has no devices, so a DRA group is grown from a node of its own, never from zero
/// (docs/compatibility.md).
#[tokio::test(flavor = "multi_thread")]
async fn real_ca_grows_the_dra_gpu_group_from_its_node_for_the_claiming_pod_only() {
    let env = start().await;
    let mut template = gpu_claim_template("gpu", None);
    template["metadata"]["namespace"] = json!(NAMESPACE);
    for object in [gpu_device_class(), template] {
        ksim_localenv::manifests::apply(&env.client, &object.to_string())
            .await
            .unwrap();
    }
    // One whole GPU each: the second pod needs a second node.
    let gpu_group = seat_deployment("p3", 1, 1, 3, P3_2XLARGE_DRA_SKELETON);
    let train = Workload::new("train", 2).device_claim("gpu");
    grows_the_gpu_group_for_the_gpu_pods_only(&env, gpu_group, train).await;
}

/// Group `p3` (`gpu_group`, its initial nodes Ready first) and a tainted CPU group `m5` from
/// zero under the real CA, then two CPU pods of 1.5 CPUs and `train`, whose pods each take one
/// GPU node: the GPU group grew by one for them and only them, the CPU group by two. The GPU
/// types the provider told CA of.
async fn grows_the_gpu_group_for_the_gpu_pods_only(
    env: &Env,
    gpu_group: ksim_nodes::seats::SeatDeployment,
    train: Workload,
) -> Vec<String> {
    let mut resizes = Resizes::new(env);
    let server = serve(env.provider.clone(), ServeArgs::ephemeral()).await;
    let address = server.grpc_addr();
    create_seats(
        &env.client,
        &seat_deployment("m5", 0, 0, 5, M5_LARGE_TAINTED_SKELETON),
    )
    .await;
    create_seats(&env.client, &gpu_group).await;
    ready_nodes(
        &env.client,
        "p3",
        usize::try_from(gpu_group.replicas).unwrap(),
    )
    .await;
    let _ca = started(autoscaler(env, plaintext(address))).await;

    let deployments = Api::<Deployment>::namespaced(env.client.clone(), NAMESPACE);
    let replicas = usize::try_from(train.deployment().spec.unwrap().replicas.unwrap()).unwrap();
    for workload in [
        Workload::new("web", 2)
            .requests("1500m", "1Gi")
            .on_any_group(),
        train.requests("1", "1Gi").on_any_group(),
    ] {
        deployments
            .create(&PostParams::default(), &workload.deployment())
            .await
            .unwrap();
    }
    let train = running_pods(env, "train", replicas).await;
    let web = running_pods(env, "web", 2).await;
    let gpu_nodes = node_names(&env.client, "p3").await;
    assert_eq!(gpu_nodes.len(), replicas, "{gpu_nodes:?}");
    assert_eq!(nodes_of_pods(&train), gpu_nodes, "one GPU node each");
    assert_eq!(nodes_of_pods(&web), node_names(&env.client, "m5").await);
    assert_eq!(resizes.increased("p3"), 1);
    assert_eq!(resizes.increased("m5"), 2);
    env.provider.gpu_types()
}

#[tokio::test(flavor = "multi_thread")]
async fn real_ca_removes_many_nodes_at_once_exactly_those_it_named_and_evicts_no_kept_pod() {
    let env = start().await;
    let mut resizes = Resizes::new(&env);
    let server = serve(env.provider.clone(), ServeArgs::ephemeral()).await;
    let address = server.grpc_addr();
    create_seats(
        &env.client,
        &seat_deployment("m5", 12, 3, 15, M5_LARGE_TAINTED_SKELETON),
    )
    .await;
    ready_nodes(&env.client, "m5", 12).await;
    create_workload(&env, "work", 12, "1500m", Some("m5")).await;
    running_pods(&env, "work", 12).await;
    let before = node_names(&env.client, "m5").await;
    let ca = started(autoscaler(&env, plaintext(address))).await;

    // Ten nodes empty at once; min size 3 lets nine go.
    scale_workload(&env, "work", 2).await;
    let kept_pods = settled_pods(&env, "work", 2).await;
    let after = scaled_down_to(&env, &mut resizes, "m5", &before, 3).await;
    kept_at_min_size(&ca, &after).await;
    let pod_nodes: BTreeSet<String> = kept_pods.values().cloned().collect();
    assert!(pod_nodes.is_subset(&after), "{pod_nodes:?} {after:?}");
    // The same pods, on the same nodes, none evicted or restarted elsewhere.
    assert_eq!(settled_pods(&env, "work", 2).await, kept_pods);
}

#[tokio::test(flavor = "multi_thread")]
async fn real_ca_scales_up_over_mutual_tls_and_a_client_without_a_certificate_is_refused() {
    let env = start().await;
    let mut resizes = Resizes::new(&env);
    let tls = MutualTls::create();
    let server = serve(env.provider.clone(), tls.serve_args()).await;
    let address = server.grpc_addr();
    create_seats(
        &env.client,
        &seat_deployment("m5", 0, 0, 3, M5_LARGE_TAINTED_SKELETON),
    )
    .await;
    // CA checks the server certificate against the host of `address`.
    let config =
        CloudConfig::mutual_tls(format!("localhost:{}", address.port()), tls.client.clone());
    let _ca = started(autoscaler(&env, config)).await;

    create_workload(&env, "work", 2, "1500m", Some("m5")).await;
    running_pods(&env, "work", 2).await;
    assert_eq!(ready_nodes(&env.client, "m5", 2).await.len(), 2);
    assert_eq!(resizes.increased("m5"), 2);
    assert!(
        tls.refuses_client_without_certificate(address.port()).await,
        "a client without a certificate was served"
    );
}

/// Waits until `fast` has one node per Running `work` pod, each with a live seat, the target
/// size matching, and none of the nodes CA named since `before` among them. Returns the nodes.
async fn one_node_per_pod(
    env: &Env,
    resizes: &mut Resizes,
    before: &BTreeSet<String>,
) -> BTreeSet<String> {
    wait::until("fast to shrink to one node per pod", CA_DEADLINE, || {
        let extra: BTreeSet<String> = resizes
            .deleted("fast")
            .difference(before)
            .cloned()
            .collect();
        async move {
            let nodes = node_names(&env.client, "fast").await;
            let seats = live_seats(&env.client, "fast").await;
            let target = env.provider.target_size("fast").ok();
            let hosts = nodes_of_running_pods(env, "work").await;
            let done = nodes.len() == 2
                && hosts == nodes
                && seats == nodes
                && target == Some(2)
                && extra.is_disjoint(&nodes);
            done.then_some(nodes.clone()).ok_or(format!(
                "nodes {nodes:?}, pods on {hosts:?}, seats {seats:?}, target {target:?}, \
                 CA named {extra:?}"
            ))
        }
    })
    .await
    .unwrap()
}

/// One group's options (answered by GetOptions) make its empty nodes go after 5 s while CA's
/// own 10 minutes keep the other group's; when it grows for pending pods, one node per pod stays.
pub(crate) async fn applies_the_options_get_options_answers_per_group(version: &str) {
    let binary = release(version);
    let env = start_with(settings_answering_options_for("fast")).await;
    let mut resizes = Resizes::new(&env);
    let server = serve(env.provider.clone(), ServeArgs::ephemeral()).await;
    let address = server.grpc_addr();
    create_seats(
        &env.client,
        &seat_deployment("fast", 2, 0, 5, M5_LARGE_TAINTED_SKELETON),
    )
    .await;
    create_seats(
        &env.client,
        &seat_deployment("slow", 2, 0, 5, M5_LARGE_TAINTED_SKELETON),
    )
    .await;
    ready_nodes(&env.client, "fast", 2).await;
    ready_nodes(&env.client, "slow", 2).await;
    let slow = node_names(&env.client, "slow").await;
    let fast_before = node_names(&env.client, "fast").await;
    let ca = started(
        autoscaler(&env, plaintext(address))
            .binary(binary)
            .arg("--scale-down-unneeded-time=10m")
            // 1.36 logs the startup time it took at level 5 (1.35 at level 1).
            .arg("--v=5"),
    )
    .await;

    // Every node is empty: only the group whose options say 5 s goes within CA's 10 minutes.
    scaled_down_to(&env, &mut resizes, "fast", &fast_before, 0).await;
    assert_eq!(node_names(&env.client, "slow").await, slow);
    assert_eq!(resizes.deleted("slow"), BTreeSet::new());

    // Grown from zero for two pods: the group ends with one node per pod; any node beyond them
    // goes as unneeded after the group's 5 s, named by CA like every other. Which nodes stay is
    // CA's choice: while extra nodes exist it may drain a pod's node onto one of them.
    create_workload(&env, "work", 2, "1500m", Some("fast")).await;
    running_pods(&env, "work", 2).await;
    // A 1.35+ CA can repeat a scale-up it already got (startup time 0, above) and take the
    // extra node away again after the group's 5 s, so there the group has settled once it
    // stays the same across ten of CA's loops; before 1.35 the first settled state must last.
    let deadline = tokio::time::Instant::now() + CA_DEADLINE;
    let nodes = loop {
        let nodes = one_node_per_pod(&env, &mut resizes, &fast_before).await;
        after_loops(&ca, 10).await;
        let now = node_names(&env.client, "fast").await;
        let hosts = nodes_of_running_pods(&env, "work").await;
        if now == nodes && hosts == nodes {
            break nodes;
        }
        assert!(
            startup_time_comes_from_options(version) && tokio::time::Instant::now() < deadline,
            "fast changed from {nodes:?} to {now:?} (pods on {hosts:?}) after it settled; \
             resizes {:?}\n{}",
            resizes.poll(),
            ca.log_tail()
        );
    };
    assert_eq!(node_names(&env.client, "slow").await, slow);
    // Read again: the wait above takes CA's names before it looks at the nodes, so a DeleteNodes
    // that lands in between is in the nodes it saw but not yet in `extra`.
    let extra: BTreeSet<String> = resizes
        .deleted("fast")
        .difference(&fast_before)
        .cloned()
        .collect();
    assert!(extra.is_disjoint(&nodes), "CA named kept nodes: {extra:?}");
    let added = resizes.increased("fast");
    assert_eq!(
        usize::try_from(added).unwrap(),
        nodes.len() + extra.len(),
        "every node beyond the pods' was removed by CA"
    );
    if startup_time_comes_from_options(version) {
        // CA logs the 0 it took; a repeated scale-up is the consequence, not the provider's.
        assert!(
            added == 2 || ca.log_contains("using maxNodeStartupTime = 0s"),
            "{}",
            ca.log_tail()
        );
    } else {
        assert_eq!(added, 2, "one node per pending pod");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn real_ca_resumes_after_the_provider_restarts_without_scaling_up_twice() {
    let env = start().await;
    let mut resizes = Resizes::new(&env);
    let server = serve(env.provider.clone(), ServeArgs::ephemeral()).await;
    let address = server.grpc_addr();
    create_seats(
        &env.client,
        &seat_deployment("m5", 1, 1, 6, M5_LARGE_TAINTED_SKELETON),
    )
    .await;
    ready_nodes(&env.client, "m5", 1).await;
    let ca = started(autoscaler(&env, plaintext(address))).await;
    after_loops(&ca, 2).await;

    server.shutdown().await.unwrap();
    const REFRESH_FAILED: &str = "Error on gRPC call Refresh";
    wait::until("CA's calls to fail", CA_DEADLINE, || async {
        (log_count(&ca, REFRESH_FAILED) > 0)
            .then_some(())
            .ok_or_else(|| ca.log_tail())
    })
    .await
    .unwrap();
    // One pod fits the node there is; the other two wait for nodes while the provider is down.
    create_workload(&env, "work", 3, "1500m", Some("m5")).await;
    let failed = log_count(&ca, REFRESH_FAILED);
    wait::until("CA to fail with pods pending", CA_DEADLINE, || async {
        (log_count(&ca, REFRESH_FAILED) >= failed + 3)
            .then_some(())
            .ok_or_else(|| ca.log_tail())
    })
    .await
    .unwrap();
    assert_eq!(resizes.increased("m5"), 0);

    let _server = serve(
        env.provider.clone(),
        ServeArgs {
            grpc_addr: address,
            ..ServeArgs::ephemeral()
        },
    )
    .await;
    running_pods(&env, "work", 3).await;
    assert_eq!(ready_nodes(&env.client, "m5", 3).await.len(), 3);
    after_loops(&ca, 5).await;
    assert_eq!(resizes.increased("m5"), 2, "one node per pending pod");
    assert_eq!(env.provider.target_size("m5").unwrap(), 3);
}

/// When the first CA is killed during its scale-down.
#[derive(Debug, Clone, Copy)]
enum Kill {
    /// Once it has tainted the nodes it chose, before it asks to delete any (CA waits 5 s
    /// between the two).
    AfterTainting,
    /// As soon as the first of its parallel DeleteNodes calls has completed, the others in
    /// flight.
    WhileDeleting,
}

/// Nodes of `group` carrying CA's to-be-deleted taint.
async fn tainted_nodes(env: &Env, group: &str) -> Result<BTreeSet<String>, String> {
    let list = Api::<k8s_openapi::api::core::v1::Node>::all(env.client.clone())
        .list(&ListParams::default().labels(&format!("{GROUP_LABEL}={group}")))
        .await
        .map_err(|e| e.to_string())?;
    Ok(list
        .items
        .into_iter()
        .filter(|n| {
            n.spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|t| t.iter().any(|t| t.key == TO_BE_DELETED_TAINT))
        })
        .map(|n| n.metadata.name.unwrap())
        .collect())
}

/// CA is killed in the middle of removing five empty nodes and a new one started: in the end
/// exactly the nodes named went, every node has a live seat and every seat a node, and the
/// kept node is untainted.
async fn restarted_mid_scale_down(kill: Kill) {
    let env = start().await;
    let mut resizes = Resizes::new(&env);
    let server = serve(env.provider.clone(), ServeArgs::ephemeral()).await;
    let address = server.grpc_addr();
    create_seats(
        &env.client,
        &seat_deployment("m5", 6, 1, 8, M5_LARGE_TAINTED_SKELETON),
    )
    .await;
    ready_nodes(&env.client, "m5", 6).await;
    let before = node_names(&env.client, "m5").await;

    // Five empty nodes above min size 1: CA taints them, then deletes them in parallel.
    let first = started(autoscaler(&env, plaintext(address))).await;
    match kill {
        Kill::AfterTainting => {
            wait::until("CA to taint nodes", CA_DEADLINE, || async {
                let tainted = tainted_nodes(&env, "m5").await?;
                (!tainted.is_empty())
                    .then_some(())
                    .ok_or_else(|| format!("{tainted:?}"))
            })
            .await
            .unwrap();
            assert_eq!(resizes.deleted("m5"), BTreeSet::new());
        }
        Kill::WhileDeleting => resizes.next_deletion("m5", CA_DEADLINE).await,
    }
    drop(first);

    let second = started(autoscaler(&env, plaintext(address))).await;
    let after = scaled_down_to(&env, &mut resizes, "m5", &before, 1).await;
    kept_at_min_size(&second, &after).await;
    wait::until("the kept node to be untainted", CA_DEADLINE, || async {
        let tainted = tainted_nodes(&env, "m5").await?;
        tainted
            .is_empty()
            .then_some(())
            .ok_or_else(|| format!("{tainted:?}"))
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn real_ca_restarted_after_tainting_leaves_every_node_with_a_seat() {
    restarted_mid_scale_down(Kill::AfterTainting).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn real_ca_restarted_while_deleting_leaves_every_node_with_a_seat() {
    restarted_mid_scale_down(Kill::WhileDeleting).await;
}

/// A group its deleter retires (as the driver's cleanup does) is frozen for CA: its empty
/// nodes stay though CA would remove them, a pending pod gets no node, and the provider marks
/// the group released once CA has looked at it frozen.
#[tokio::test(flavor = "multi_thread")]
async fn real_ca_leaves_a_retiring_group_alone_and_the_provider_releases_it() {
    let env = start().await;
    let mut resizes = Resizes::new(&env);
    let server = serve(env.provider.clone(), ServeArgs::ephemeral()).await;
    let address = server.grpc_addr();
    create_seats(
        &env.client,
        &seat_deployment("m5", 2, 0, 5, M5_LARGE_TAINTED_SKELETON),
    )
    .await;
    ready_nodes(&env.client, "m5", 2).await;
    let before = node_names(&env.client, "m5").await;
    retire(&env.client, "m5").await;
    // Seen retiring before CA starts, so CA never acts on it unfrozen.
    wait::until("the provider to see m5 retiring", DEADLINE, || async {
        let unreleased = env.provider.index().unreleased();
        (unreleased.len() == 1)
            .then_some(())
            .ok_or(format!("{unreleased:?}"))
    })
    .await
    .unwrap();

    let ca = started(autoscaler(&env, plaintext(address))).await;
    wait::until("m5 released", CA_DEADLINE, || released(&env.client, "m5"))
        .await
        .unwrap();
    // Longer than the 5 s unneeded time at one loop a second: empty nodes would have gone.
    after_loops(&ca, 10).await;
    create_workload(&env, "work", 3, "1500m", Some("m5")).await;
    running_pods(&env, "work", 2).await;
    after_loops(&ca, 5).await;

    assert_eq!(node_names(&env.client, "m5").await, before);
    assert_eq!(resizes.increased("m5"), 0);
    assert!(resizes.deleted("m5").is_empty());
}
