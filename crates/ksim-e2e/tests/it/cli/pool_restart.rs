//! A pool killed with -9 in the middle of a run, as `ksim up` restarts it: the restarted pool
//! registers the nodes of the run's autoscaler group again under their names, and the report counts
//! that as re-registrations, not as nodes cluster-autoscaler removed and added (CA is not even
//! running here: every autoscaler count must be 0). The cloud provider killed after it is an
//! outage in the run's report (a warning), as CA's outages are.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::BTreeMap,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Node;
use ksim_nodes::{labels::GROUP_LABEL, node::is_ready};
use ksim_proto::ksim::driver::v1::{self as pb, driver_client::DriverClient};
use kube::{Api, api::ListParams};
use serde_json::{Value, json};

use super::common::{
    self,
    up::{Up, report_dir, service_pid, terminate},
};

const SKELETON: &str = ksim_localenv::fixtures::M5_LARGE_SKELETON;
/// A restart, its adoption and re-registration on a loaded machine.
const DEADLINE: Duration = Duration::from_secs(240);

/// Polls `check` every 250 ms until it gives a value.
async fn until<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "{what}: not within {DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The Ready nodes of group `m5`, name to uid.
async fn seat_nodes(nodes: &Api<Node>) -> BTreeMap<String, String> {
    let Ok(list) = nodes
        .list(&ListParams::default().labels(&format!("{GROUP_LABEL}=m5")))
        .await
    else {
        return BTreeMap::new();
    };
    list.items
        .into_iter()
        .filter(is_ready)
        .filter_map(|node| Some((node.metadata.name?, node.metadata.uid?)))
        .collect()
}

/// kill -9 of the service `ksim up` lists as `name` (its line names its pid).
fn kill9(up: &Up, name: &str) {
    let pid =
        service_pid(&up.said(), name).unwrap_or_else(|| panic!("no {name} pid in {}", up.said()));
    let killed = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pool_restart_mid_run_is_reported_as_re_registrations_not_autoscaling() {
    let up = tokio::task::spawn_blocking(|| Up::start(&[]))
        .await
        .unwrap();
    let dir = up.state.path();
    let skeleton = dir.join("m5.yaml");
    std::fs::write(&skeleton, SKELETON).unwrap();
    // Ten minutes of trace: the run is cancelled long before its end.
    let trace = dir.join("long.ksim");
    let deployment = |name: &str| {
        common::deployment(&json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": name, "image": "nginx"}]}}
            }
        }))
    };
    common::write_trace(
        &trace,
        [
            (1_767_225_600_000, deployment("first")),
            (1_767_226_200_000, deployment("late")),
        ],
        &[],
    );

    // An autoscaler group of 2 that no autoscaler resizes.
    let run_log = dir.join("run.out");
    let group = format!("m5={}:1:4:2", skeleton.display());
    let running = Command::new(ksim_e2e::binary("ksim"))
        .args(["run", trace.to_str().unwrap(), "--autoscaler-group", &group])
        .args(["--driver", &up.urls.driver, "--provisioning", "instant"])
        .env("KSIM_STATE_DIR", dir)
        .stdout(std::fs::File::create(&run_log).unwrap())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let id = until("the run to start", async || {
        std::fs::read_to_string(&run_log)
            .unwrap_or_default()
            .lines()
            .find_map(|line| {
                Some(
                    line.strip_prefix("ksim: simulation ")?
                        .strip_suffix(" started")?
                        .to_owned(),
                )
            })
    })
    .await;
    let mut driver = DriverClient::connect(up.urls.driver.clone()).await.unwrap();
    until("the replay to run", async || {
        let simulation = driver
            .get_simulation(pb::GetSimulationRequest { id: id.clone() })
            .await
            .ok()?
            .into_inner()
            .simulation?;
        (simulation.state() == pb::SimulationState::Running).then_some(())
    })
    .await;
    let nodes: Api<Node> = Api::all(up.client().await);
    let before = seat_nodes(&nodes).await;
    assert_eq!(before.len(), 2, "{before:?}");

    // kill -9 of the pool; `ksim up` starts it again.
    kill9(&up, "pool");
    // The restarted pool deletes the nodes of autoscaler groups it has not read yet and registers
    // them again under their names: the same names, new objects.
    until("the seat nodes to be registered again", async || {
        let after = seat_nodes(&nodes).await;
        let again = after.len() == before.len()
            && before
                .iter()
                .all(|(name, uid)| after.get(name).is_some_and(|new| new != uid));
        (again && up.said().contains("ksim: pool restarted (pid")).then_some(())
    })
    .await;
    // The cloud provider killed too: its outage is in the run's report, as CA's would be.
    kill9(&up, "cloudprov");
    until("the cloud provider to be restarted", async || {
        up.said()
            .contains("ksim: cloudprov restarted (pid")
            .then_some(())
    })
    .await;

    // SIGTERM cancels the run; its report is written all the same.
    let ended = terminate(running).await;
    let printed = std::fs::read_to_string(&run_log).unwrap();
    assert!(
        String::from_utf8_lossy(&ended.stderr).contains("was cancelled"),
        "{printed}{}",
        String::from_utf8_lossy(&ended.stderr)
    );
    assert!(
        printed.contains("autoscaler:        0 nodes added, 0 removed"),
        "{printed}"
    );
    assert!(
        printed.contains("node re-registrations (pool restart): 2"),
        "{printed}"
    );
    assert!(
        printed.contains("warning: the cloud provider (ksim-cloudprov) was down "),
        "{printed}"
    );
    let report: Value = serde_json::from_slice(
        &std::fs::read(format!("{}/report.json", report_dir(&printed))).unwrap(),
    )
    .unwrap();
    let provider_outages = report["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| {
            w.as_str()
                .unwrap()
                .starts_with("the cloud provider (ksim-cloudprov)")
        })
        .count();
    assert_eq!(provider_outages, 1, "{}", report["warnings"]);
    let mut causes: BTreeMap<(String, String), usize> = BTreeMap::new();
    for change in report["node_changes"].as_array().unwrap() {
        let key = (
            change["cause"].as_str().unwrap().to_owned(),
            change["kind"].as_str().unwrap().to_owned(),
        );
        *causes.entry(key).or_default() += 1;
    }
    let count = |cause: &str, kind: &str| {
        causes
            .get(&(cause.to_owned(), kind.to_owned()))
            .copied()
            .unwrap_or(0)
    };
    assert_eq!(count("autoscaler", "added"), 0, "{causes:?}");
    assert_eq!(count("autoscaler", "removed"), 0, "{causes:?}");
    assert_eq!(count("reregistration", "removed"), 2, "{causes:?}");
    assert_eq!(count("reregistration", "added"), 2, "{causes:?}");
}
