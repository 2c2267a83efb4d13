//! Disruptions as a user runs them (issue 56). A node failure: `ksim run --node-failure`
//! stops one node of three mid-replay, and what follows is the real control plane's: the node
//! lifecycle controller (at the replay's speed) finds it unreachable, the taint eviction
//! controller evicts its pod once the pod's toleration (300 s, divided) runs out, the
//! replacement waits for room until the node comes back, and the report says what it cost.
//! In the same environment: a spot interruption (the eviction API refuses past a
//! PodDisruptionBudget, the instance goes, its group replaces it), a recorded failure replayed
//! at its recorded time, and a surge upgrade with stuck drains. Apart: a zone outage with the
//! real cluster-autoscaler.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{path::Path, process::Output};

use ksim_proto::ksim::trace::v1 as pb;
use serde_json::{Value, json};

use super::common::{
    deployment, shop_deployment,
    up::{Up, report_dir},
    write_trace,
};

const SKELETON: &str = ksim_localenv::fixtures::M5_LARGE_SKELETON;
/// Fast enough that the recorded 15 minutes take 45 s, slow enough that the node lifecycle
/// controller's grace period (2.5 s) stays above its floor.
const SPEED: &str = "20";

fn report_of(printed: &str) -> Value {
    let path = Path::new(report_dir(printed)).join("report.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// A run that succeeded: what it printed and its report.
fn succeeded(output: &Output) -> (String, Value) {
    let printed = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report = report_of(&printed);
    (printed, report)
}

/// A run refused before anything started: one line on stderr, which contains `expected`.
fn refused(output: &Output, expected: &str) {
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{said}");
    assert_eq!(said.trim_end().lines().count(), 1, "{said}");
    assert!(said.contains(expected), "{said}");
}

/// `web.ksim` in `dir`: Deployment shop/web of `replicas` pods of one CPU (one per
/// m5.large), applied at the start and again after `minutes` recorded minutes, so the replay
/// lasts that long.
fn web_trace(dir: &Path, replicas: i32, minutes: i64) -> std::path::PathBuf {
    let web = shop_deployment("web", replicas, "1", "256Mi", "1");
    let trace = dir.join("web.ksim");
    let start_ms = 1_767_225_600_000;
    write_trace(
        &trace,
        [
            (start_ms, deployment(&web)),
            (start_ms + minutes * 60_000, deployment(&web)),
        ],
        &[],
    );
    trace
}

fn seconds(value: &Value) -> f64 {
    value
        .as_f64()
        .unwrap_or_else(|| panic!("not a number: {value}"))
        / 1000.0
}

/// One environment (no autoscaler) for the four: each run cleans up after itself.
#[tokio::test(flavor = "multi_thread")]
async fn failures_interruptions_and_upgrades_play_out_and_their_cost_is_reported() {
    let up = tokio::task::spawn_blocking(|| Up::start(&[]))
        .await
        .unwrap();
    a_failed_node_is_found_by_the_control_plane_and_its_cost_reported(&up);
    a_spot_interruption_drains_within_the_budget_and_the_group_replaces_the_node(&up);
    a_recorded_failure_is_replayed_at_its_recorded_time(&up);
    a_surge_upgrade_replaces_every_node_and_a_budget_stalls_one_drain(&up);
}

fn a_failed_node_is_found_by_the_control_plane_and_its_cost_reported(up: &Up) {
    let dir = up.state.path();
    // web: three pods of one CPU, one per m5.large (1930m): no node has room for a fourth.
    // The trace goes on for 15 recorded minutes.
    let trace = web_trace(dir, 3, 15);
    let skeleton = dir.join("m5.yaml");
    std::fs::write(&skeleton, SKELETON).unwrap();
    let group = format!("--node-group=a={}:3", skeleton.display());
    let trace = trace.to_str().unwrap();
    let run = |failure: &str| {
        up.ksim_any(&[
            "run".into(),
            trace.into(),
            "--driver".into(),
            up.urls.driver.clone(),
            group.clone(),
            "--speed".into(),
            SPEED.into(),
            "--node-failure".into(),
            failure.into(),
            "--disruption-seed".into(),
            "7".into(),
        ])
    };

    // Refused before anything starts, naming the field.
    refused(
        &run("group=b,at=60s"),
        "spec.disruptions[0].node_failure.node_group: \"b\" is not a node group",
    );
    refused(
        &run("node=a-3,at=60s"),
        "spec.disruptions[0].node_failure.node: \"a-3\" is none of the run's named nodes \
         (a-0..a-2;",
    );

    // One node of three (0.3, rounded up) fails a minute in and comes back 7.5 minutes later.
    let output = run("group=a,share=0.3,at=60s,for=450s");
    let (printed, report) = succeeded(&output);
    let disruptions = &report["disruptions"];
    assert_eq!(disruptions["seed"], 7, "{disruptions:#}");
    let failure = &disruptions["outcomes"][0];
    assert_eq!(failure["kind"], "node-failure", "{disruptions:#}");
    assert_eq!(
        failure["nodes"].as_array().unwrap().len(),
        1,
        "{disruptions:#}"
    );
    // Recorded time, no earlier than asked and late by at most 2 s of wall clock (40 s at
    // 20x): the machine may be busy.
    let began = seconds(&failure["offset_ms"]);
    assert!((60.0..100.0).contains(&began), "{disruptions:#}");
    let back = seconds(&failure["recovered_offset_ms"]);
    assert!((510.0..550.0).contains(&back), "{disruptions:#}");

    // The workload lost a ready pod when the controller found the node, and its pod was
    // evicted (its toleration ran out) before the node came back.
    let web = &disruptions["workloads"][0];
    assert_eq!(web["name"], "Deployment/shop/web", "{disruptions:#}");
    assert_eq!(
        (web["desired"].as_u64(), web["lowest_ready"].as_u64()),
        (Some(3), Some(2))
    );
    assert_eq!(web["pods_evicted"], 1, "{disruptions:#}");
    let availability = web["availability"].as_f64().unwrap();
    assert!(availability > 0.0 && availability < 1.0, "{disruptions:#}");
    // No other node had room: the replacement ran only once the node was back, so the
    // workload was whole again no sooner than the node came back, and before the end.
    assert_eq!(failure["recovered"], true, "{disruptions:#}");
    let recovery = seconds(&failure["time_to_recovery_ms"]);
    assert!(began + recovery >= back - 0.01, "{disruptions:#}");
    let below = seconds(&web["time_below_desired_ms"]);
    assert!(
        below > 300.0 && below <= recovery + 5.0,
        "below {below}, recovery {recovery}: {disruptions:#}"
    );

    // The controller ran at the replay's speed: production's 50 s grace period, divided.
    let flags = report["configuration"]["controller_manager_flags"]
        .as_array()
        .unwrap();
    let grace = flags
        .iter()
        .find(|flag| flag["name"] == "node-monitor-grace-period")
        .unwrap_or_else(|| panic!("{flags:#?}"));
    assert_eq!(
        (grace["given"].as_str(), grace["as_run"].as_str()),
        (Some("50s"), Some("2.5s"))
    );
    assert!(
        printed.contains("disruptions:       node-failure of a at ")
            && printed
                .contains("availability:      0 workload(s) always at desired ready, 1 below"),
        "{printed}"
    );
}

/// A PodDisruptionBudget of shop/web that forbids evicting any of its `replicas` pods.
fn web_budget(replicas: i32) -> pb::TraceObject {
    let budget = json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"minAvailable": replicas, "selector": {"matchLabels": {"app": "web"}}}
    });
    pb::TraceObject {
        gvk: Some(pb::GroupVersionKind {
            group: "policy".into(),
            version: "v1".into(),
            kind: "PodDisruptionBudget".into(),
        }),
        namespace: "shop".into(),
        name: "web".into(),
        object_json: serde_json::to_vec(&budget).unwrap(),
    }
}

/// Two spot nodes (a group of two, which no autoscaler resizes here), web's two pods one on
/// each, and a budget that allows no eviction. One node gets its two-minute notice two
/// recorded minutes in: the eviction API refuses its pod for the whole notice, so the pod is
/// lost when the instance goes; the group replaces the node and the pod runs again there.
fn a_spot_interruption_drains_within_the_budget_and_the_group_replaces_the_node(up: &Up) {
    let dir = up.state.path();
    let web = shop_deployment("web", 2, "1", "256Mi", "1");
    let trace = dir.join("spot.ksim");
    let start_ms = 1_767_225_600_000;
    write_trace(
        &trace,
        [
            (start_ms, deployment(&web)),
            (start_ms, web_budget(2)),
            (start_ms + 12 * 60_000, deployment(&web)),
        ],
        &[],
    );
    let skeleton = dir.join("spot.yaml");
    std::fs::write(&skeleton, SKELETON).unwrap();
    let run = |interruption: &str| {
        up.ksim_any(&[
            "run".into(),
            trace.to_str().unwrap().into(),
            "--driver".into(),
            up.urls.driver.clone(),
            format!("--autoscaler-group=spot={}:2:2:2", skeleton.display()),
            "--speed".into(),
            SPEED.into(),
            "--spot-interruption".into(),
            interruption.into(),
            "--disruption-seed".into(),
            "7".into(),
        ])
    };
    refused(
        &run("group=spot,rate=20"),
        "spec.disruptions[0].spot_interruption.rate_per_hour: must be in (0, 10] per node and \
         hour, got 20",
    );

    let output = run("group=spot,at=120s");
    let (printed, report) = succeeded(&output);
    let disruptions = &report["disruptions"];
    let outcomes = disruptions["outcomes"].as_array().unwrap();
    assert_eq!(outcomes.len(), 1, "{disruptions:#}");
    let spot = &outcomes[0];
    assert_eq!(
        (spot["kind"].as_str(), spot["node_group"].as_str()),
        (Some("spot-interruption"), Some("spot")),
        "{disruptions:#}"
    );
    let interrupted = spot["nodes"].as_array().unwrap();
    assert_eq!(interrupted.len(), 1, "{disruptions:#}");
    // The notice at its time, the instance gone two minutes later (recorded time).
    let noticed = seconds(&spot["offset_ms"]);
    assert!((120.0..160.0).contains(&noticed), "{disruptions:#}");
    let gone = seconds(&spot["recovered_offset_ms"]);
    assert!(
        (noticed + 115.0..noticed + 160.0).contains(&gone),
        "{disruptions:#}"
    );
    // The budget held for the whole notice: nothing evicted, the pod lost with its node.
    assert_eq!(
        (
            spot["evictions_blocked"].as_u64(),
            spot["pods_lost"].as_u64()
        ),
        (Some(1), Some(1)),
        "{disruptions:#}"
    );
    let web = &disruptions["workloads"][0];
    assert_eq!(
        (
            web["lowest_ready"].as_u64(),
            web["pods_evicted"].as_u64(),
            web["evictions_blocked"].as_u64()
        ),
        (Some(1), Some(0), Some(1)),
        "{disruptions:#}"
    );
    assert_eq!(disruptions["evictions_blocked"], 1, "{disruptions:#}");
    // The group replaced the node: web was whole again, after the instance went.
    assert_eq!(spot["recovered"], true, "{disruptions:#}");
    let recovery = seconds(&spot["time_to_recovery_ms"]);
    assert!(recovery > gone - noticed, "{disruptions:#}");
    let changes = report["node_changes"].as_array().unwrap();
    let node = interrupted[0].as_str().unwrap();
    assert!(
        changes
            .iter()
            .any(|c| c["kind"] == "removed" && c["node"] == node),
        "{changes:#?}"
    );
    assert!(
        changes
            .iter()
            .any(|c| c["kind"] == "added" && seconds(&c["offset_ms"]) > noticed),
        "{changes:#?}"
    );
    assert!(
        printed.contains("spot-interruption of spot at ")
            && printed.contains("(1 eviction(s) blocked, 1 pod(s) lost)")
            && printed.contains("1 blocked by a PodDisruptionBudget"),
        "{printed}"
    );
}

/// `--replay-failures`: the trace records node rec-1 of group a Ready from the start, NotReady
/// 90 s in and Ready again at 240 s (as the tracer records a node whose kubelet stopped), and
/// node rec-2 removed by an autoscaler (cordoned first: no failure). The run fails one of its
/// group a nodes at the recorded time, within one 5 s bucket, and brings it back when the
/// recorded one was.
fn a_recorded_failure_is_replayed_at_its_recorded_time(up: &Up) {
    let dir = up.state.path();
    let start_ms: i64 = 1_767_225_600_000;
    let web = shop_deployment("web", 1, "100m", "64Mi", "1");
    let trace = dir.join("recorded.ksim");
    let header = pb::TraceHeader {
        format_version: ksim_trace::FORMAT_VERSION,
        created_by: "test".into(),
        ..Default::default()
    };
    let mut writer =
        ksim_trace::TraceWriter::new(std::fs::File::create(&trace).unwrap(), &header).unwrap();
    for at_ms in [0, 6 * 60_000] {
        writer
            .write_event(&pb::TraceEvent {
                timestamp_ms: start_ms + at_ms,
                applied: vec![deployment(&web)],
                deleted: vec![],
            })
            .unwrap();
    }
    let node = |name: &str, at_s: i64, ready: bool| pb::RecordedNode {
        timestamp_ms: start_ms + at_s * 1000,
        name: name.into(),
        group: "a".into(),
        ready,
        created_ms: start_ms - 3_600_000,
        ..Default::default()
    };
    // In time order, as the tracer writes them.
    for record in [
        node("rec-1", 0, true),
        node("rec-2", 0, true),
        node("rec-1", 90, false),
        pb::RecordedNode {
            removal_started_ms: start_ms + 100_000,
            ..node("rec-2", 100, true)
        },
        pb::RecordedNode {
            removal_started_ms: start_ms + 100_000,
            deleted_ms: start_ms + 160_000,
            ..node("rec-2", 160, false)
        },
        node("rec-1", 240, true),
    ] {
        writer.write_node(&record).unwrap();
    }
    writer.finish().unwrap();
    let skeleton = dir.join("m5.yaml");
    std::fs::write(&skeleton, SKELETON).unwrap();
    let output = up.ksim_any(&[
        "run".into(),
        trace.to_str().unwrap().into(),
        "--driver".into(),
        up.urls.driver.clone(),
        format!("--node-group=a={}:2", skeleton.display()),
        "--speed".into(),
        SPEED.into(),
        "--replay-failures".into(),
    ]);
    let (printed, report) = succeeded(&output);
    let disruptions = &report["disruptions"];
    let outcomes = disruptions["outcomes"].as_array().unwrap();
    assert_eq!(
        outcomes.len(),
        1,
        "the removal is no failure: {disruptions:#}"
    );
    let failure = &outcomes[0];
    assert_eq!(
        (
            failure["kind"].as_str(),
            failure["node_group"].as_str(),
            failure["recorded_node"].as_str()
        ),
        (Some("recorded-failure"), Some("a"), Some("rec-1")),
        "{disruptions:#}"
    );
    assert_eq!(
        failure["nodes"].as_array().unwrap().len(),
        1,
        "{disruptions:#}"
    );
    // At the recorded times, late by at most 2 s of wall clock (40 s at 20x).
    let began = seconds(&failure["offset_ms"]);
    assert!((90.0..130.0).contains(&began), "{disruptions:#}");
    let back = seconds(&failure["recovered_offset_ms"]);
    assert!((240.0..280.0).contains(&back), "{disruptions:#}");
    assert!(
        printed.contains("recorded-failure of a (recorded rec-1) at "),
        "{printed}"
    );
}

/// The surge upgrade: a group of four (an autoscaler group, which no autoscaler
/// resizes here), `max-surge=1,max-unavailable=0`, web's one pod on one of the nodes behind a
/// budget that allows no eviction. Every node is replaced, the group never has fewer Ready
/// nodes than at the start, and web's node is a stuck drain: its pod is deleted once the drain
/// runs out of its (one recorded minute) timeout, and each old node its replacement lands on
/// stalls the same way.
fn a_surge_upgrade_replaces_every_node_and_a_budget_stalls_one_drain(up: &Up) {
    let dir = up.state.path();
    let web = shop_deployment("web", 1, "1", "256Mi", "1");
    let trace = dir.join("upgrade.ksim");
    let start_ms = 1_767_225_600_000;
    write_trace(
        &trace,
        [
            (start_ms, deployment(&web)),
            (start_ms, web_budget(1)),
            (start_ms + 8 * 60_000, deployment(&web)),
        ],
        &[],
    );
    let skeleton = dir.join("up.yaml");
    std::fs::write(&skeleton, SKELETON).unwrap();
    let run = |upgrade: &str, more: &[&str]| {
        let mut args = vec![
            "run".to_owned(),
            trace.to_str().unwrap().to_owned(),
            "--driver".to_owned(),
            up.urls.driver.clone(),
            format!("--autoscaler-group=up={}:4:5:4", skeleton.display()),
            "--speed".to_owned(),
            SPEED.to_owned(),
            "--node-pool-upgrade".to_owned(),
            upgrade.to_owned(),
        ];
        args.extend(more.iter().map(|arg| (*arg).to_owned()));
        up.ksim_any(&args)
    };
    refused(
        &run(
            "group=up,at=60s",
            &["--node-pool-upgrade", "group=up,at=5m"],
        ),
        "spec.disruptions[1].node_pool_upgrade.node_group: \"up\" is upgraded by",
    );

    let output = run(
        "group=up,at=60s,max-surge=1,max-unavailable=0,drain-timeout=60s",
        &[],
    );
    let (printed, report) = succeeded(&output);
    let disruptions = &report["disruptions"];
    let upgrade = &disruptions["outcomes"][0];
    assert_eq!(upgrade["kind"], "node-pool-upgrade", "{disruptions:#}");
    let old: Vec<&str> = upgrade["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|node| node.as_str().unwrap())
        .collect();
    assert_eq!(old.len(), 4, "{disruptions:#}");
    let began = seconds(&upgrade["offset_ms"]);
    assert!((60.0..65.0).contains(&began), "{disruptions:#}");
    // Over within the run, after the stuck drain's minute.
    let over = seconds(&upgrade["recovered_offset_ms"]);
    assert!(over >= began + 60.0 && over < 480.0, "{disruptions:#}");
    // web's node: its drain ran out of time and its pod was deleted. Only the batch is
    // cordoned (as GKE does), so the replacement may land on an old node still to come and
    // stall that drain too: one stuck drain, blocked eviction and lost pod each time.
    let stuck = upgrade["stuck_drains"].as_array().map_or(0, Vec::len) as u64;
    assert!(stuck >= 1, "{disruptions:#}");
    assert_eq!(
        (
            upgrade["evictions_blocked"].as_u64(),
            upgrade["pods_lost"].as_u64()
        ),
        (Some(stuck), Some(stuck)),
        "{disruptions:#}"
    );
    // Every node of the start removed, and the group back at four new ones.
    let changes = report["node_changes"].as_array().unwrap();
    for node in &old {
        assert!(
            changes
                .iter()
                .any(|c| c["kind"] == "removed" && c["node"] == *node),
            "{node} not removed: {changes:#?}"
        );
    }
    let timeline = report["timeline"].as_array().unwrap();
    let ready = |bucket: &Value| bucket["nodes"]["up"]["ready"].as_u64().unwrap_or(0);
    let during: Vec<u64> = timeline
        .iter()
        .filter(|bucket| {
            let at = seconds(&bucket["offset_ms"]);
            at >= began && at <= over
        })
        .map(ready)
        .collect();
    assert!(
        !during.is_empty() && during.iter().all(|ready| *ready >= 4),
        "fewer Ready nodes than at the start: {during:?}"
    );
    assert_eq!(
        ready(timeline.last().unwrap()),
        4,
        "{:#}",
        timeline.last().unwrap()
    );
    assert!(
        printed.contains("node-pool-upgrade of up at ") && printed.contains(" stuck drain(s): "),
        "{printed}"
    );
}

/// The zone outage, smallest form: web's two pods of one CPU fill one node in each of
/// two zones, each zone a group cluster-autoscaler resizes (production defaults at 30x). When
/// us-east-1a goes away its node fails and its group gets no capacity: the evicted pod's
/// replacement can only run on a node CA adds in us-east-1b, so web is whole again well
/// before the zone comes back. The outage comes 16 recorded minutes in: CA counts a node that
/// is not Ready within `max-node-startup-time` (15 minutes) of its creation as still starting
/// and waits for it, as it would in production. An agent that tolerates the lost node stays
/// on it, NotReady, and is Ready again when the zone comes back.
#[tokio::test(flavor = "multi_thread")]
async fn a_zone_outage_fails_its_nodes_and_the_autoscaler_adds_capacity_elsewhere() {
    let up = tokio::task::spawn_blocking(|| Up::start(&["--autoscaler"]))
        .await
        .unwrap();
    let dir = up.state.path();
    // Beside web, an agent in us-east-1a that tolerates a lost node for good (as a DaemonSet's
    // pods do): never evicted, it is NotReady while the zone is away and Ready again when it
    // comes back, as its kubelet reports it.
    let web = shop_deployment("web", 2, "1", "256Mi", "1");
    let mut agent = shop_deployment("agent", 1, "100m", "64Mi", "1");
    agent["spec"]["template"]["spec"]["nodeSelector"] =
        json!({"topology.kubernetes.io/zone": "us-east-1a"});
    for taint in [
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/not-ready",
    ] {
        agent["spec"]["template"]["spec"]["tolerations"]
            .as_array_mut()
            .unwrap()
            .push(json!({"key": taint, "operator": "Exists", "effect": "NoExecute"}));
    }
    // Two small Deployments of two replicas that differ in one thing: `spread` keeps one pod in
    // each zone by a topology spread constraint, `clustered` prefers us-east-1a (the node
    // affinity outweighs the scheduler's default spreading score) and so has both pods there.
    let mut spread = shop_deployment("spread", 2, "100m", "64Mi", "1");
    spread["spec"]["template"]["spec"]["topologySpreadConstraints"] = json!([{
        "maxSkew": 1,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "spread"}}
    }]);
    let mut clustered = shop_deployment("clustered", 2, "100m", "64Mi", "1");
    clustered["spec"]["template"]["spec"]["affinity"] = json!({"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": {
            "matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In",
                "values": ["us-east-1a"]}]}}]
    }});
    let trace = dir.join("web-and-agent.ksim");
    let start_ms = 1_767_225_600_000;
    write_trace(
        &trace,
        [
            (start_ms, deployment(&web)),
            (start_ms, deployment(&agent)),
            (start_ms, deployment(&spread)),
            (start_ms, deployment(&clustered)),
            (start_ms + 30 * 60_000, deployment(&web)),
        ],
        &[],
    );
    let east = dir.join("east.yaml");
    std::fs::write(&east, SKELETON).unwrap();
    let west = dir.join("west.yaml");
    assert!(SKELETON.contains("topology.kubernetes.io/zone: us-east-1a"));
    std::fs::write(&west, SKELETON.replace("us-east-1a", "us-east-1b")).unwrap();
    let output = up.ksim_any(&[
        "run".into(),
        trace.to_str().unwrap().into(),
        "--driver".into(),
        up.urls.driver.clone(),
        "--autoscaler".into(),
        format!("--autoscaler-group=east={}:1:3:1", east.display()),
        format!("--autoscaler-group=west={}:1:3:1", west.display()),
        "--speed".into(),
        "30".into(),
        "--zone-outage".into(),
        "zone=us-east-1a,at=960s,for=600s".into(),
    ]);
    let (printed, report) = succeeded(&output);
    let disruptions = &report["disruptions"];
    let outage = &disruptions["outcomes"][0];
    assert_eq!(
        (
            outage["kind"].as_str(),
            outage["zone"].as_str(),
            outage["node_group"].as_str()
        ),
        (Some("zone-outage"), Some("us-east-1a"), Some("east")),
        "{disruptions:#}"
    );
    assert_eq!(
        outage["nodes"].as_array().unwrap().len(),
        1,
        "{disruptions:#}"
    );
    // Windows of a few seconds of wall clock (at 30x, 30 s recorded is 1 s): the machine may be
    // busy.
    let back = seconds(&outage["recovered_offset_ms"]);
    assert!((1560.0..1650.0).contains(&back), "{disruptions:#}");
    // Every workload whole again only when the zone came back: the agent waited for its node.
    // Read from the outage's observed start, which may lag its scheduled one by more than the
    // agent lagged the zone's return, so compared with the return, not with the 600 s.
    let began = seconds(&outage["offset_ms"]);
    let whole = began + seconds(&outage["time_to_recovery_ms"]);
    assert!(
        (back - 0.01..back + 150.0).contains(&whole),
        "{disruptions:#}\nwaits: {:#}\nnode changes: {:#}\n{printed}",
        report["waits"],
        report["node_changes"]
    );
    let workload = |name: &str| {
        disruptions["workloads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["name"] == format!("Deployment/shop/{name}"))
            .unwrap_or_else(|| panic!("no {name}: {disruptions:#}"))
            .clone()
    };
    let web = workload("web");
    assert_eq!(
        (web["lowest_ready"].as_u64(), web["pods_evicted"].as_u64()),
        (Some(1), Some(1))
    );
    // Web whole again while the zone was still away: the capacity came from the other zone.
    assert!(
        seconds(&web["time_below_desired_ms"]) < 600.0,
        "{disruptions:#}\nnode changes: {:#}",
        report["node_changes"]
    );
    // The agent went NotReady with its node, was never evicted, and was Ready again by the
    // end: every workload whole then.
    let agent = workload("agent");
    assert_eq!(
        (
            agent["lowest_ready"].as_u64(),
            agent["pods_evicted"].as_u64()
        ),
        (Some(0), Some(0)),
        "{disruptions:#}"
    );
    // The spread constraint kept a ready replica in the zone that worked; without it both
    // replicas were lost with the zone until the controller evicted them.
    let (spread, clustered) = (workload("spread"), workload("clustered"));
    assert_eq!(
        (
            spread["lowest_ready"].as_u64(),
            clustered["lowest_ready"].as_u64(),
            clustered["pods_evicted"].as_u64()
        ),
        (Some(1), Some(0), Some(2)),
        "{disruptions:#}"
    );
    assert_eq!(outage["recovered"], true, "{disruptions:#}\n{printed}");
    // CA added nodes only where there was capacity.
    let added: Vec<(&str, f64)> = report["node_changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|change| change["kind"] == "added")
        .map(|change| {
            (
                change["group"].as_str().unwrap(),
                seconds(&change["offset_ms"]),
            )
        })
        .collect();
    assert!(
        added
            .iter()
            .any(|(group, at)| *group == "west" && *at > 960.0),
        "{added:?}"
    );
    assert!(added.iter().all(|(group, _)| *group == "west"), "{added:?}");
    // The outage's outcome counts what CA added while it lasted.
    let during = added
        .iter()
        .filter(|(_, at)| (began..=back).contains(at))
        .count() as u64;
    assert!(during > 0, "{added:?}");
    assert_eq!(outage["nodes_added"].as_u64(), Some(during), "{outage:#}");
    assert!(
        printed.contains("zone-outage of us-east-1a (east) at "),
        "{printed}"
    );
    assert!(
        printed.contains(&format!("; {during} node(s) added meanwhile")),
        "{printed}"
    );
}
