//! Karpenter as a user runs it (issue 37): `ksim up --karpenter` with ksim's own instance types
//! and prices, then `ksim run` with NodePools of the user's, in one environment:
//! - a NodePool Karpenter's validation refuses is one line naming the field, nothing created;
//! - the demo trace: the real Karpenter launches the nodes, the pool plays their kubelet, every
//!   pod runs, and after the run nothing of it is left (no NodePool, NodeClaim or node); with
//!   `--karpenter` alone, on the default NodePool;
//! - consolidation at 10x: nodes emptied by a recorded scale-down go, never sooner than the
//!   NodePool's consolidateAfter in recorded time after it, and never more than its budget of
//!   one node at once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node};
use ksim_localenv::fixtures::M5_LARGE_SKELETON;
use kube::{
    Api,
    api::{ApiResource, DynamicObject, ListParams},
    runtime::{WatchStreamExt, watcher},
};
use serde_json::{Value, json};

use super::common::{
    self,
    up::{Up, report_dir},
};

const M5_XLARGE_SKELETON: &str =
    include_str!("../../../../../deploy/vnode/examples/skeleton-m5-xlarge.yaml");

const NODEPOOL: &str = "\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  disruption: {consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 30s}
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
";

fn karpenter_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "karpenter.sh".into(),
        version: "v1".into(),
        api_version: "karpenter.sh/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// What `ksim run` printed, and the report.json it names.
fn printed_report(run: &std::process::Output) -> (String, Value) {
    let printed = String::from_utf8_lossy(&run.stdout).into_owned();
    let report = serde_json::from_slice(
        &std::fs::read(Path::new(report_dir(&printed)).join("report.json")).unwrap(),
    )
    .unwrap();
    (printed, report)
}

/// The nodes a report says were added.
fn added_nodes(report: &Value) -> Vec<String> {
    report["node_changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|change| change["kind"] == "added")
        .map(|change| change["node"].as_str().unwrap().to_owned())
        .collect()
}

/// Whether a report's first group ran some node-hours, each at `price` an hour.
fn priced_at(report: &Value, price: f64) -> bool {
    let group = &report["costs"]["groups"][0];
    let (hours, cost) = (
        group["node_hours"].as_f64().unwrap(),
        group["cost"].as_f64().unwrap(),
    );
    hours > 0.0 && (cost - hours * price).abs() < 1e-6
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

/// Only m5.large (one pod of a CPU each), emptied nodes go 60 s (recorded) after they empty,
/// one at a time.
const CONSOLIDATING: &str = "\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  disruption:
    consolidationPolicy: WhenEmpty
    consolidateAfter: 60s
    budgets: [{nodes: '1'}]
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements:
        - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}
";

/// When the recorded scale-down to zero happens, and the trace's last event (offsets, ms). The
/// scale-down comes 15 s of wall clock in at 10x: Karpenter's batching of pending pods (up to
/// 10 s) is not divided by the speed, and with 3 s a loaded machine saw it launch nothing.
const SCALE_DOWN_MS: i64 = 150_000;
const END_MS: i64 = 1_200_000;
const START_MS: i64 = 1_767_225_600_000;

/// Most of Karpenter's nodes being disrupted (tainted `karpenter.sh/disrupted` or deleting) at
/// once, as a watch saw them, until the returned task is aborted.
fn most_disrupted_at_once(
    client: &kube::Client,
) -> (Arc<Mutex<usize>>, tokio::task::JoinHandle<()>) {
    let most = Arc::new(Mutex::new(0));
    let events = watcher(
        Api::<Node>::all(client.clone()),
        watcher::Config::default().labels("karpenter.sh/nodepool"),
    )
    .default_backoff();
    let seen = most.clone();
    let task = tokio::spawn(async move {
        let mut disrupted: BTreeMap<String, bool> = BTreeMap::new();
        let mut events = std::pin::pin!(events);
        while let Some(Ok(event)) = events.next().await {
            match event {
                watcher::Event::Apply(node) | watcher::Event::InitApply(node) => {
                    let tainted = node
                        .spec
                        .as_ref()
                        .and_then(|spec| spec.taints.as_ref())
                        .is_some_and(|taints| {
                            taints.iter().any(|t| t.key == "karpenter.sh/disrupted")
                        });
                    let deleting = node.metadata.deletion_timestamp.is_some();
                    disrupted.insert(
                        node.metadata.name.clone().unwrap_or_default(),
                        tainted || deleting,
                    );
                }
                watcher::Event::Delete(node) => {
                    disrupted.remove(&node.metadata.name.clone().unwrap_or_default());
                }
                watcher::Event::Init | watcher::Event::InitDone => {}
            }
            let now = disrupted.values().filter(|d| **d).count();
            let mut most = seen.lock().unwrap();
            *most = (*most).max(now);
        }
    });
    (most, task)
}

/// NodePools, NodeClaims and Karpenter's nodes in the cluster.
async fn karpenters(client: &kube::Client) -> (usize, usize, usize) {
    let count = |kind, plural| {
        let api = Api::<DynamicObject>::all_with(client.clone(), &karpenter_resource(kind, plural));
        async move { api.list(&ListParams::default()).await.unwrap().items.len() }
    };
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels("karpenter.sh/nodepool"))
        .await
        .unwrap()
        .items
        .len();
    (
        count("NodePool", "nodepools").await,
        count("NodeClaim", "nodeclaims").await,
        nodes,
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn karpenter_runs_the_demo_trace_and_consolidates_within_its_budget_in_recorded_time() {
    let dir = tempfile::tempdir().unwrap();
    let large = write(dir.path(), "m5-large.yaml", M5_LARGE_SKELETON);
    let xlarge = write(dir.path(), "m5-xlarge.yaml", M5_XLARGE_SKELETON);
    let pricing = write(
        dir.path(),
        "pricing.yaml",
        "pricing:\n  instanceTypes: {m5.large: 0.096, m5.xlarge: 0.192}\n",
    );
    let nodepool = write(dir.path(), "nodepool.yaml", NODEPOOL);
    let trace = dir.path().join("demo.ktrace");
    let trace = trace.to_str().unwrap();
    let up = Up::start(&[
        "--karpenter",
        "--instance-type",
        &large,
        "--instance-type",
        &xlarge,
        "--provider-config",
        &pricing,
    ]);
    // The release deploy/karpenter/versions.env pins, as `ksim up` prints it.
    let version = ksim_localenv::karpenter::karpenter_version();
    assert!(version.starts_with('v'), "{version}");
    assert!(
        up.said().contains(&format!("karpenter  {version}")),
        "{}",
        up.said()
    );
    up.ksim(&["demo", "--write-trace", trace]);
    let client = up.client().await;

    // Refused by Karpenter's own validation, naming the field, before anything is created.
    let bad = write(
        dir.path(),
        "bad.yaml",
        &NODEPOOL.replace("WhenEmptyOrUnderutilized", "Sometimes"),
    );
    let refused = up.ksim_any(&["run".into(), trace.into(), "--nodepool".into(), bad]);
    let said = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert!(!refused.status.success(), "{said}");
    assert_eq!(said.trim_end().lines().count(), 1, "{said}");
    assert!(
        said.contains("spec.disruption.consolidationPolicy"),
        "{said}"
    );
    assert!(said.contains("Sometimes"), "{said}");
    let namespaces = Api::<Namespace>::all(client.clone())
        .list(&ListParams::default().labels("ksim.io/simulation"))
        .await
        .unwrap()
        .items;
    assert!(namespaces.is_empty(), "{namespaces:?}");
    assert_eq!(karpenters(&client).await, (0, 0, 0));

    let run = up.ksim(&["run", trace, "--speed", "10", "--nodepool", &nodepool]);
    let (printed, report) = printed_report(&run);
    // Every pod got a node, launched by Karpenter for the NodePool (its group). A pod may still
    // be starting at the end: consolidation (30 s, 3 s at 10x) can move one in the trace's
    // last seconds, and its replacement is bound but not yet running.
    let last = report["timeline"].as_array().unwrap().last().unwrap();
    assert_eq!(last["unscheduled"], 0, "{printed}");
    assert_eq!(report["costs"]["pods_never_scheduled"], 0, "{printed}");
    assert!(last["pods"]["running"].as_u64().unwrap() > 0, "{printed}");
    assert!(
        last["nodes"]["general"]["ready"].as_u64().unwrap() > 0,
        "{printed}"
    );
    // Why pods waited counts Karpenter's own events: it nominated nodes for them.
    let karpenter_waits: Vec<&Value> = report["waits"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|wait| wait["source"] == "karpenter")
        .collect();
    assert!(
        karpenter_waits
            .iter()
            .any(|wait| wait["reason"] == "Nominated"),
        "{:#}",
        report["waits"]
    );
    let added = added_nodes(&report);
    assert!(!added.is_empty(), "{printed}");
    assert!(
        added.iter().all(|node| node.starts_with("kwok-general-")),
        "{added:?}"
    );
    // And nothing of it is left.
    assert_eq!(karpenters(&client).await, (0, 0, 0), "{printed}");

    // `--karpenter` alone runs the default NodePool, Karpenter's disruption defaults and all:
    // it launches the nodes, and they go with the run.
    let run = up.ksim(&["run", trace, "--speed", "10", "--karpenter"]);
    let (printed, report) = printed_report(&run);
    assert_eq!(
        report["configuration"]["karpenter"],
        ksim_localenv::karpenter::karpenter_version(),
        "{printed}"
    );
    let added = added_nodes(&report);
    assert!(
        !added.is_empty() && added.iter().all(|node| node.starts_with("kwok-default-")),
        "{printed}"
    );
    assert_eq!(
        report["costs"]["groups"][0]["group"], "default",
        "{printed}"
    );
    assert_eq!(karpenters(&client).await, (0, 0, 0), "{printed}");

    // Three pods of a CPU need three m5.large; at 30 s the recording scales them to zero, and
    // the trace goes on to 20 minutes (2 minutes at 10x).
    let consolidating = write(dir.path(), "consolidating.yaml", CONSOLIDATING);
    let scaled = dir.path().join("scaled.ktrace");
    let web = |replicas| {
        common::deployment(
            &serde_json::to_value(common::web("general", replicas, json!({}))).unwrap(),
        )
    };
    common::write_trace(
        &scaled,
        [
            (START_MS, web(3)),
            (START_MS + SCALE_DOWN_MS, web(0)),
            (START_MS + END_MS, web(0)),
        ],
        &[],
    );
    let (most, watch) = most_disrupted_at_once(&client);
    let run = up.ksim(&[
        "run",
        scaled.to_str().unwrap(),
        "--speed",
        "10",
        "--nodepool",
        &consolidating,
    ]);
    watch.abort();
    let (printed, report) = printed_report(&run);
    let changes = |kind: &str| -> Vec<i64> {
        report["node_changes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|change| change["kind"] == kind)
            .map(|change| change["offset_ms"].as_i64().unwrap())
            .collect()
    };
    assert_eq!(changes("added").len(), 3, "{printed}");
    // Priced at ksim's price of the one type the NodePool allows, as Karpenter was.
    let general = &report["costs"]["groups"][0];
    assert_eq!(general["group"], "general", "{printed}");
    assert_eq!(
        general["instance_types"],
        json!({"m5.large": 3}),
        "{printed}"
    );
    let (hours, cost) = (
        general["node_hours"].as_f64().unwrap(),
        general["cost"].as_f64().unwrap(),
    );
    assert!(
        hours > 0.0 && (cost - hours * 0.096).abs() < 1e-6,
        "{printed}"
    );
    assert!(printed.contains("of 3 m5.large = "), "{printed}");
    let removed = changes("removed");
    assert_eq!(
        removed.len(),
        3,
        "every emptied node consolidated: {printed}"
    );
    // consolidateAfter 60 s ran as 6 s at 10x: in recorded time, never sooner than 60 s after
    // the scale-down emptied them.
    assert!(
        removed.iter().all(|at| *at >= SCALE_DOWN_MS + 60_000),
        "{removed:?}: {printed}"
    );
    assert!(
        printed.contains("spec.disruption.consolidateAfter 60s runs as 6s"),
        "{printed}"
    );
    assert_eq!(
        *most.lock().unwrap(),
        1,
        "the budget of one node: {printed}"
    );
    // Why Karpenter disrupted them, from its events, for the NodePool.
    let disrupted: u64 = report["node_disruptions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| d["source"] == "disrupted" && d["reason"] == "Empty" && d["owner"] == "general")
        .map(|d| d["count"].as_u64().unwrap())
        .sum();
    assert_eq!(disrupted, 3, "{:#}", report["node_disruptions"]);
    assert!(
        printed.contains("karpenter:         Empty x3 (general"),
        "{printed}"
    );
}

/// The same demo trace under each node autoscaler: cluster-autoscaler resizing a group of
/// m5.large, or Karpenter launching them for a NodePool.
const SIDE_BY_SIDE: &str = "\
trace: demo.ktrace
speed: 10
provisioning: instant
instanceTypes: [m5.yaml]
providerConfig: pricing.yaml
variants:
- name: ca
  autoscaler: true
  autoscalerGroups: [\"general=m5.yaml:0:8:0\"]
- name: karpenter
  nodePools: [general.yaml]
";

/// One experiment puts the two node autoscalers side by side (issue 37): in an environment of
/// Karpenter's, the variant of cluster-autoscaler runs CA alone (Karpenter stopped), the
/// variant of NodePools runs Karpenter alone again, and the comparison holds node-hours, cost
/// and pending times of both at the same prices.
#[tokio::test(flavor = "multi_thread")]
async fn an_experiment_compares_cluster_autoscaler_and_karpenter_on_the_demo_trace() {
    let dir = tempfile::tempdir().unwrap();
    let large = write(dir.path(), "m5-large.yaml", M5_LARGE_SKELETON);
    let pricing = write(
        dir.path(),
        "pricing.yaml",
        "pricing:\n  instanceTypes: {m5.large: 0.096}\n",
    );
    let up = tokio::task::spawn_blocking(move || {
        Up::start(&[
            "--karpenter",
            "--instance-type",
            &large,
            "--provider-config",
            &pricing,
        ])
    })
    .await
    .unwrap();
    let what_if = dir.path().join("what-if");
    std::fs::create_dir_all(&what_if).unwrap();
    up.ksim(&[
        "demo",
        "--write-trace",
        what_if.join("demo.ktrace").to_str().unwrap(),
    ]);
    write(&what_if, "m5.yaml", M5_LARGE_SKELETON);
    write(&what_if, "general.yaml", NODEPOOL);
    write(
        &what_if,
        "pricing.yaml",
        "pricing:\n  instanceTypes: {m5.large: 0.096}\n",
    );
    // Karpenter's instance types are the environment's: a file that names none (the KWOK
    // provider's list, as a run on a cluster would get) is refused here, where Karpenter offers
    // m5.large, before anything runs.
    let builtin = write(
        &what_if,
        "builtin.yaml",
        &SIDE_BY_SIDE.replace("instanceTypes: [m5.yaml]\n", ""),
    );
    let refused = up.ksim_any(&[
        "experiment".to_owned(),
        "run".to_owned(),
        "-f".to_owned(),
        builtin,
    ]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{said}");
    assert_eq!(said.trim_end().lines().count(), 1, "{said}");
    assert!(
        said.contains("variant karpenter: the experiment offers Karpenter the KWOK provider's built-in instance types, but the environment's Karpenter offers m5.large at 0.096/h"),
        "{said}"
    );
    assert!(!what_if.join("builtin-results").exists());
    let file = write(&what_if, "experiment.yaml", SIDE_BY_SIDE);

    let both_priced = "variants.ca.cost > 0.0 && variants.karpenter.cost > 0.0";
    let output = tokio::task::block_in_place(|| {
        up.ksim(&["experiment", "run", "-f", &file, "--assert", both_priced])
    });
    let printed = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        printed.contains(&format!("assert ok:     {both_priced}")),
        "{printed}"
    );

    let results = what_if.join("experiment-results");
    let report = |variant: &str| -> Value {
        let path = results.join(variant).join("1").join("report.json");
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
    };
    let (ca, karpenter) = (report("ca"), report("karpenter"));
    for (name, report) in [("ca", &ca), ("karpenter", &karpenter)] {
        let last = report["timeline"].as_array().unwrap().last().unwrap();
        assert_eq!(last["pods"]["pending"], 0, "{name}: {printed}");
        assert!(
            last["nodes"]["general"]["ready"].as_u64().unwrap() > 0,
            "{name}"
        );
        // Priced per node at the one price both were given.
        assert!(priced_at(report, 0.096), "{name}: {:#}", report["costs"]);
    }
    // Each run says which node autoscaler produced it, and only that one acted.
    assert_eq!(ca["configuration"]["autoscaler"], true);
    assert_eq!(ca["configuration"]["karpenter"], Value::Null);
    assert_eq!(karpenter["configuration"]["autoscaler"], false);
    assert_eq!(
        karpenter["configuration"]["karpenter"],
        ksim_localenv::karpenter::karpenter_version()
    );
    let sources = |report: &Value| -> Vec<String> {
        report["waits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|wait| wait["source"].as_str().unwrap().to_owned())
            .collect()
    };
    let (ca_sources, karpenter_sources) = (sources(&ca), sources(&karpenter));
    assert!(
        ca_sources.iter().any(|s| s == "autoscaler")
            && !ca_sources.iter().any(|s| s == "karpenter"),
        "{ca_sources:?}"
    );
    assert!(
        karpenter_sources.iter().any(|s| s == "karpenter")
            && !karpenter_sources.iter().any(|s| s == "autoscaler"),
        "{karpenter_sources:?}"
    );
    let added = added_nodes;
    assert!(
        added(&karpenter)
            .iter()
            .all(|node| node.starts_with("kwok-general-")),
        "{:?}",
        added(&karpenter)
    );
    assert!(
        !added(&ca).is_empty() && !added(&ca).iter().any(|node| node.starts_with("kwok-")),
        "{:?}",
        added(&ca)
    );

    // The Karpenter variant as a pod of `--cluster` runs it: an environment started for the run
    // alone, whose Karpenter offers the file's instance types at its prices.
    let state = tempfile::tempdir().unwrap();
    let alone = state.path().join("report.json");
    let output = up.ksim_any(&[
        "experiment".to_owned(),
        "run-one".to_owned(),
        "-f".to_owned(),
        file.clone(),
        "--index".to_owned(),
        "1".to_owned(),
        "--report".to_owned(),
        alone.to_str().unwrap().to_owned(),
        "--state-dir".to_owned(),
        state.path().join("env").to_str().unwrap().to_owned(),
        "--port-base".to_owned(),
        ksim_e2e::port_base().to_string(),
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let alone: Value = serde_json::from_slice(&std::fs::read(&alone).unwrap()).unwrap();
    assert!(priced_at(&alone, 0.096), "{:#}", alone["costs"]);
    assert!(
        added(&alone)
            .iter()
            .all(|node| node.starts_with("kwok-general-"))
            && !added(&alone).is_empty(),
        "{:?}",
        added(&alone)
    );

    // The comparison: both variants' node-hours, cost and pending times, each the report's.
    let comparison: Value =
        serde_json::from_slice(&std::fs::read(results.join("comparison.json")).unwrap()).unwrap();
    assert_eq!(comparison["runs"], json!(["ca", "karpenter"]));
    for (figure, of) in [
        ("node_hours", &["costs", "node_hours"][..]),
        ("cost", &["costs", "cost"][..]),
        ("pending_p99_ms", &["pod_pending_time", "p99_ms"][..]),
    ] {
        let row = comparison["figures"]
            .as_array()
            .unwrap()
            .iter()
            .find(|row| row["name"] == figure)
            .unwrap_or_else(|| panic!("no {figure}: {comparison:#}"));
        for (i, report) in [&ca, &karpenter].into_iter().enumerate() {
            let value = of.iter().fold(report, |value, key| &value[*key]);
            assert!(
                (row["values"][i].as_f64().unwrap() - value.as_f64().unwrap()).abs() < 1e-9,
                "{figure}: {row} against {value}"
            );
        }
    }
    // Nothing of either run is left.
    assert_eq!(karpenters(&up.client().await).await, (0, 0, 0));
}

/// Karpenter's nodes as a watch saw them: by name, their zone, instance type and capacity
/// type, and when each was first seen (since the watch began).
type SeenNodes = BTreeMap<String, (String, String, String, std::time::Duration)>;

/// `ksim run` with `args` while a watch notes Karpenter's nodes: what it printed, its report,
/// and the nodes.
async fn run_seeing_nodes(
    up: &Up,
    client: &kube::Client,
    args: &[&str],
) -> (String, Value, SeenNodes) {
    let (seen, watch) = karpenter_nodes_seen(client);
    let run = tokio::task::block_in_place(|| up.ksim(args));
    watch.abort();
    let (printed, report) = printed_report(&run);
    let nodes = seen.lock().unwrap().clone();
    (printed, report, nodes)
}

fn karpenter_nodes_seen(
    client: &kube::Client,
) -> (Arc<Mutex<SeenNodes>>, tokio::task::JoinHandle<()>) {
    let seen: Arc<Mutex<SeenNodes>> = Arc::default();
    let events = watcher(
        Api::<Node>::all(client.clone()),
        watcher::Config::default().labels("karpenter.sh/nodepool"),
    )
    .default_backoff()
    .applied_objects();
    let nodes = seen.clone();
    let began = std::time::Instant::now();
    let task = tokio::spawn(async move {
        let mut events = std::pin::pin!(events);
        while let Some(Ok(node)) = events.next().await {
            let labels = node.metadata.labels.clone().unwrap_or_default();
            let label = |key: &str| labels.get(key).cloned().unwrap_or_default();
            nodes
                .lock()
                .unwrap()
                .entry(node.metadata.name.clone().unwrap_or_default())
                .or_insert_with(|| {
                    (
                        label("topology.kubernetes.io/zone"),
                        label("node.kubernetes.io/instance-type"),
                        label("karpenter.sh/capacity-type"),
                        began.elapsed(),
                    )
                });
        }
    });
    (seen, task)
}

/// A NodePool of `capacity` types that never consolidates: the nodes a test sees are the
/// disruptions' doing.
fn steady_nodepool(capacity: &str) -> String {
    format!(
        "\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: general}}
spec:
  disruption: {{consolidationPolicy: WhenEmpty, consolidateAfter: Never}}
  template:
    spec:
      nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}}
      requirements:
        - {{key: karpenter.sh/capacity-type, operator: In, values: [{capacity}]}}
"
    )
}

/// Disruptions of a NodePool (issue 56), with the real Karpenter in two zones, m5.large
/// (0.096/h, or 0.04/h spot) and m5.xlarge (0.192/h), at 20x:
/// - a stockout of m5.large for the whole run: Karpenter launches m5.xlarge instead;
/// - a zone outage of us-east-1a (where the pod prefers to run): the node there fails, its pod
///   is evicted by the real node lifecycle controller, and Karpenter, its offerings in the
///   zone withdrawn, launches the replacement in us-east-1b;
/// - a spot interruption: Karpenter's spot node is drained and ended, and Karpenter launches
///   another for the pod.
#[tokio::test(flavor = "multi_thread")]
async fn karpenter_meets_stockouts_zone_outages_and_spot_interruptions() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["--karpenter".to_owned()];
    for (name, skeleton) in [
        ("m5-large", M5_LARGE_SKELETON),
        ("m5-xlarge", M5_XLARGE_SKELETON),
    ] {
        for zone in ["us-east-1a", "us-east-1b"] {
            let file = write(
                dir.path(),
                &format!("{name}-{zone}.yaml"),
                &skeleton.replace("us-east-1a", zone),
            );
            args.extend(["--instance-type".to_owned(), file]);
        }
    }
    let pricing = write(
        dir.path(),
        "pricing.yaml",
        "pricing:\n  instanceTypes: {m5.large: 0.096, m5.xlarge: 0.192}\n  \
         spotInstanceTypes: {m5.large: 0.04}\n",
    );
    args.extend(["--provider-config".to_owned(), pricing]);
    let up = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Up::start(&args)
    })
    .await
    .unwrap();
    let client = up.client().await;

    // One pod of a CPU that would rather run in us-east-1a, for `minutes` recorded minutes.
    let trace_of = |name: &str, minutes: i64| {
        let mut web = serde_json::to_value(common::web("general", 1, json!({}))).unwrap();
        web["spec"]["template"]["spec"]["affinity"] = json!({"nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": {
                "matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In",
                                      "values": ["us-east-1a"]}]}}]}});
        let path = dir.path().join(name);
        common::write_trace(
            &path,
            [
                (START_MS, common::deployment(&web)),
                (START_MS + minutes * 60_000, common::deployment(&web)),
            ],
            &[],
        );
        path.to_str().unwrap().to_owned()
    };

    // m5.large out of stock throughout; us-east-1a away from 1m for 10m.
    let on_demand = write(dir.path(), "on-demand.yaml", &steady_nodepool("on-demand"));
    let trace = trace_of("outage.ktrace", 14);
    let (printed, report, nodes) = run_seeing_nodes(
        &up,
        &client,
        &[
            "run",
            &trace,
            "--speed",
            "20",
            "--nodepool",
            &on_demand,
            "--stockout",
            "group=general,at=0s,instance-type=m5.large",
            "--zone-outage",
            "zone=us-east-1a,at=1m,for=10m",
        ],
    )
    .await;
    let outcomes = report["disruptions"]["outcomes"].as_array().unwrap();
    let outage = outcomes
        .iter()
        .find(|o| o["kind"] == "zone-outage")
        .unwrap_or_else(|| panic!("{printed}"));
    let failed: Vec<&str> = outage["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    // The node Karpenter launched first, in the zone the pod prefers, failed with it; the
    // outcome names the NodePool it hit.
    assert_eq!(outage["node_group"], "general", "{outage:#}");
    assert_eq!(failed.len(), 1, "{outage:#}\n{nodes:?}");
    let (zone, _, _, failed_seen) = nodes[failed[0]].clone();
    assert_eq!(zone, "us-east-1a", "{nodes:?}");
    // Every node an m5.xlarge, on demand: m5.large was out of stock.
    assert!(
        nodes.values().all(
            |(_, instance_type, capacity, _)| instance_type == "m5.xlarge"
                && capacity == "on-demand"
        ),
        "{nodes:?}"
    );
    // The pod's replacement: launched after the failure, in the zone that works.
    let after: Vec<&String> = nodes
        .iter()
        .filter(|(_, (_, _, _, at))| *at > failed_seen)
        .map(|(_, (zone, ..))| zone)
        .collect();
    assert!(
        !after.is_empty() && after.iter().all(|zone| *zone == "us-east-1b"),
        "{nodes:?}\n{printed}"
    );
    let web = &report["disruptions"]["workloads"][0];
    assert_eq!(web["name"], "Deployment/shop/web", "{report:#}");
    assert_eq!(web["lowest_ready"], 0, "{web:#}");
    assert_eq!(outage["recovered"], true, "{outage:#}");
    // The replacement counts as capacity added while the zone was away.
    assert!(outage["nodes_added"].as_u64() >= Some(1), "{outage:#}");
    let stockout = outcomes.iter().find(|o| o["kind"] == "stockout").unwrap();
    assert_eq!(stockout["error"], Value::Null, "{stockout:#}");
    assert_eq!(karpenters(&client).await, (0, 0, 0), "{printed}");

    // Spot m5.large is the cheapest offering: one interrupted 1m in.
    let spot = write(dir.path(), "spot.yaml", &steady_nodepool("spot, on-demand"));
    let trace = trace_of("spot.ktrace", 5);
    let (printed, report, nodes) = run_seeing_nodes(
        &up,
        &client,
        &[
            "run",
            &trace,
            "--speed",
            "20",
            "--nodepool",
            &spot,
            "--spot-interruption",
            "group=general,at=1m",
        ],
    )
    .await;
    let outcomes = report["disruptions"]["outcomes"].as_array().unwrap();
    assert_eq!(outcomes.len(), 1, "{printed}");
    let interrupted = outcomes[0]["nodes"][0]
        .as_str()
        .unwrap_or_else(|| panic!("{printed}"));
    assert_eq!(
        outcomes[0]["pods_lost"], 0,
        "drained in its notice: {printed}"
    );
    assert!(
        nodes.values().all(
            |(_, instance_type, capacity, _)| instance_type == "m5.large" && capacity == "spot"
        ),
        "{nodes:?}"
    );
    assert!(nodes.len() >= 2, "a replacement was launched: {nodes:?}");
    let removed: Vec<&str> = report["node_changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|change| change["kind"] == "removed")
        .map(|change| change["node"].as_str().unwrap())
        .collect();
    assert!(removed.contains(&interrupted), "{printed}");
    // Priced at the spot offering Karpenter launched.
    assert!(priced_at(&report, 0.04), "{:#}", report["costs"]);
    assert_eq!(karpenters(&client).await, (0, 0, 0), "{printed}");
}
