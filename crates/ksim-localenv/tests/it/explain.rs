//! The explain layer of the scheduler the environment runs (ksim-scheduler): what it writes for
//! a pod asking for it, against the real scheduler's plugins, and that it decides as the stock
//! kube-scheduler does.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use ksim_localenv::{ControlPlane, wait};
use kube::{
    Api, Client,
    api::{DeleteParams, ListParams, PostParams},
};
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(120);
const EXPLANATION: &str = "ksim.dev/scheduling-explanation";
const EXPLAIN: &str = "ksim.dev/explain";

/// A node of `cpu` cores and as many GiB, ready, with `taint` (`key=value:Effect`) if given.
async fn create_node(client: &Client, name: &str, cpu: u32, taint: Option<(&str, &str, &str)>) {
    let taints: Vec<Value> = taint
        .into_iter()
        .map(|(key, value, effect)| json!({ "key": key, "value": value, "effect": effect }))
        .collect();
    let (cpu, memory) = (cpu.to_string(), format!("{cpu}Gi"));
    let capacity = [("cpu", cpu.as_str()), ("memory", &memory), ("pods", "110")];
    ksim_localenv::nodes::create_ready_node(client, name, &capacity, Some(json!(taints)))
        .await
        .unwrap();
}

/// Restarts the scheduler with a profile that packs (NodeResourcesFit MostAllocated).
async fn restart_packing(control_plane: &mut ControlPlane) {
    let kubeconfig = control_plane
        .scheduler_kubeconfig_path()
        .unwrap()
        .to_owned();
    let packing = ksim_experiment::scheduler::for_environment(
        "packing.yaml",
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
         profiles:\n- pluginConfig:\n  - name: NodeResourcesFit\n    args:\n      \
         scoringStrategy:\n        type: MostAllocated\n",
        &kubeconfig,
        control_plane.tuning().client_rate(),
    )
    .unwrap();
    let path = control_plane.dir().unwrap().join("packing.yaml");
    std::fs::write(&path, packing).unwrap();
    control_plane.restart_scheduler(Some(&path)).await.unwrap();
}

/// Without the controller manager, nothing makes the namespace's service account pods need.
async fn create_service_account(client: &Client) {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    let account: ServiceAccount =
        serde_json::from_value(json!({ "metadata": { "name": "default" } })).unwrap();
    accounts
        .create(&PostParams::default(), &account)
        .await
        .unwrap();
}

/// A bare pod asking for `cpu` cores and as many GiB; explained when `explain`; already on
/// `node` when given (bound without the scheduler, as a kubelet's static pod would be counted).
fn pod(name: &str, cpu: &str, explain: bool, node: Option<&str>) -> Pod {
    let memory = format!("{cpu}Gi");
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": name, "namespace": "default" },
        "spec": { "containers": [{
            "name": "app",
            "image": "registry.example/web:1",
            "resources": { "requests": { "cpu": cpu, "memory": memory } },
        }] },
    });
    if explain {
        pod["metadata"]["annotations"] = json!({ EXPLAIN: "all" });
    }
    if let Some(node) = node {
        pod["spec"]["nodeName"] = json!(node);
    }
    serde_json::from_value(pod).unwrap()
}

/// The explanation's last attempt once it names `bound` (a node, or "" for none).
async fn last_attempt(pods: &Api<Pod>, name: &str, placed: bool) -> Value {
    wait::until(&format!("pod {name}'s explanation"), DEADLINE, || async {
        let pod = pods.get(name).await.map_err(|e| e.to_string())?;
        let text = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|annotations| annotations.get(EXPLANATION))
            .ok_or("no explanation yet")?;
        let explanation: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let last = explanation["attempts"]
            .as_array()
            .and_then(|attempts| attempts.last())
            .cloned()
            .ok_or("no attempt")?;
        if last["node"].is_string() == placed {
            Ok(last)
        } else {
            Err(format!("last attempt {last}"))
        }
    })
    .await
    .unwrap()
}

async fn node_of(pods: &Api<Pod>, name: &str) -> String {
    ksim_localenv::pods::bound_node(pods, name, DEADLINE)
        .await
        .unwrap()
}

/// The rejection groups of an attempt as (plugin, reason, nodes, example nodes).
fn rejections(attempt: &Value) -> Vec<(String, String, u64, Vec<String>)> {
    attempt["rejected"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|group| {
            (
                group["plugin"].as_str().unwrap().to_owned(),
                group["reason"].as_str().unwrap().to_owned(),
                group["nodes"].as_u64().unwrap(),
                serde_json::from_value(group["examples"].clone()).unwrap(),
            )
        })
        .collect()
}

/// NodeResourcesFit's score of `node` in an attempt's scores.
fn fit_score(attempt: &Value, node: &str) -> i64 {
    attempt["scores"]
        .as_array()
        .unwrap()
        .iter()
        .find(|scores| scores["node"] == node)
        .and_then(|scores| scores["plugins"]["NodeResourcesFit"].as_i64())
        .unwrap_or_else(|| panic!("no NodeResourcesFit score of {node} in {attempt}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_scheduler_explains_filters_scores_and_a_pod_that_fits_nowhere() {
    // No controller manager: nothing but the scheduler touches the nodes and pods.
    let mut control_plane = ControlPlane::builder()
        .without_controller_manager()
        .start()
        .await
        .unwrap();
    let client = control_plane.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    create_service_account(&client).await;
    create_node(
        &client,
        "tainted",
        8,
        Some(("dedicated", "gpu", "NoSchedule")),
    )
    .await;
    create_node(&client, "fuller", 8, None).await;
    create_node(&client, "emptier", 8, None).await;
    pods.create(
        &PostParams::default(),
        &pod("resident", "4", false, Some("fuller")),
    )
    .await
    .unwrap();

    // A pod without the toleration: never on the tainted node, and TaintToleration said why.
    pods.create(
        &PostParams::default(),
        &pod("untolerating", "1", true, None),
    )
    .await
    .unwrap();
    let attempt = last_attempt(&pods, "untolerating", true).await;
    assert_ne!(node_of(&pods, "untolerating").await, "tainted");
    assert_eq!(attempt["nodes"], 3, "{attempt}");
    assert_eq!(attempt["feasible"], 2, "{attempt}");
    let rejected = rejections(&attempt);
    assert_eq!(rejected.len(), 1, "{attempt}");
    let (plugin, reason, nodes, examples) = &rejected[0];
    assert_eq!(
        (plugin.as_str(), *nodes),
        ("TaintToleration", 1),
        "{attempt}"
    );
    assert!(reason.contains("untolerated taint"), "{reason}");
    assert_eq!(examples, &["tainted"]);
    // The default scoring spreads: the chosen node is the emptier one, and its
    // NodeResourcesFit score (LeastAllocated) is above the fuller one's.
    assert_eq!(attempt["node"], "emptier", "{attempt}");
    assert_eq!(attempt["scores"][0]["node"], "emptier", "{attempt}");
    assert!(
        fit_score(&attempt, "emptier") > fit_score(&attempt, "fuller"),
        "{attempt}"
    );
    pods.delete("untolerating", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();

    // Packing (MostAllocated): the reverse, on the same nodes.
    restart_packing(&mut control_plane).await;
    pods.create(&PostParams::default(), &pod("packed", "1", true, None))
        .await
        .unwrap();
    let attempt = last_attempt(&pods, "packed", true).await;
    assert_eq!(node_of(&pods, "packed").await, "fuller");
    assert_eq!(attempt["node"], "fuller", "{attempt}");
    assert!(
        fit_score(&attempt, "fuller") > fit_score(&attempt, "emptier"),
        "{attempt}"
    );

    // A pod that fits nowhere: every node's rejecting plugin and reason, and no node chosen.
    pods.create(&PostParams::default(), &pod("huge", "64", true, None))
        .await
        .unwrap();
    let attempt = last_attempt(&pods, "huge", false).await;
    assert_eq!(attempt["nodes"], 3, "{attempt}");
    let mut rejected = rejections(&attempt);
    rejected.sort();
    assert_eq!(rejected.len(), 2, "{attempt}");
    assert_eq!(
        (
            rejected[0].0.as_str(),
            rejected[0].1.as_str(),
            rejected[0].2
        ),
        (
            "NodeResourcesFit",
            "Insufficient cpu; Insufficient memory",
            2
        ),
        "{attempt}"
    );
    assert_eq!(rejected[0].3, ["emptier", "fuller"]);
    assert_eq!(
        (rejected[1].0.as_str(), rejected[1].2),
        ("TaintToleration", 1)
    );
    assert!(
        attempt["message"].as_str().unwrap().contains("0/3 nodes"),
        "{attempt}"
    );

    // A pod that does not ask is not explained.
    pods.create(&PostParams::default(), &pod("unasked", "1", false, None))
        .await
        .unwrap();
    node_of(&pods, "unasked").await;
    let unasked = pods.get("unasked").await.unwrap();
    assert!(
        !unasked
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key(EXPLANATION)
    );
}

/// Places `count` one-core pods one at a time on nodes of 4, 6 and 10 cores under packing,
/// where no two nodes ever score alike, and returns where each went.
async fn placements(control_plane: &mut ControlPlane, explain: bool, count: usize) -> Vec<String> {
    let client = control_plane.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut placed = Vec::new();
    for i in 0..count {
        let name = format!("pod-{i}");
        pods.create(&PostParams::default(), &pod(&name, "1", explain, None))
            .await
            .unwrap();
        placed.push(node_of(&pods, &name).await);
        if explain {
            let attempt = last_attempt(&pods, &name, true).await;
            assert_eq!(attempt["node"], placed[i], "{attempt}");
        }
    }
    pods.delete_collection(
        &DeleteParams::default().grace_period(0),
        &ListParams::default(),
    )
    .await
    .unwrap();
    wait::until("the pods gone", DEADLINE, || async {
        let left = pods
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        if left.items.is_empty() {
            Ok(())
        } else {
            Err(format!("{} left", left.items.len()))
        }
    })
    .await
    .unwrap();
    placed
}

async fn packing_cluster(stock: bool) -> ControlPlane {
    let builder = ControlPlane::builder().without_controller_manager();
    let builder = if stock {
        builder.stock_scheduler()
    } else {
        builder
    };
    let mut control_plane = builder.start().await.unwrap();
    let client = control_plane.client();
    create_service_account(&client).await;
    for (name, cpu) in [("small", 4), ("medium", 6), ("large", 10)] {
        create_node(&client, name, cpu, None).await;
    }
    restart_packing(&mut control_plane).await;
    control_plane
}

#[tokio::test(flavor = "multi_thread")]
async fn the_explaining_scheduler_places_pods_where_the_stock_one_does() {
    const PODS: usize = 12;
    let mut stock = packing_cluster(true).await;
    let by_stock = placements(&mut stock, false, PODS).await;
    drop(stock);
    // Packing fills the small node, then the medium one, then the large.
    let expected: Vec<String> = [("small", 4), ("medium", 6), ("large", 2)]
        .iter()
        .flat_map(|(node, n)| std::iter::repeat_n((*node).to_owned(), *n))
        .collect();
    assert_eq!(by_stock, expected);

    let mut explaining = packing_cluster(false).await;
    assert_eq!(placements(&mut explaining, false, PODS).await, by_stock);
    assert_eq!(placements(&mut explaining, true, PODS).await, by_stock);
}
