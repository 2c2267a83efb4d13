//! A driver killed with -9 mid-run, and the one started after it: the simulation it left is
//! answered for at once, then ended FAILED and cleaned up, its report the figures saved before
//! the kill; the reports of simulations that ended before are still served. The driver runs as its own process here, so the kill is real.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    path::Path,
    process::{Child, Command, Stdio},
};

use super::common::*;
use k8s_openapi::api::{coordination::v1::Lease, core::v1::Namespace};
use ksim_grpc::BoundAddrs;
use ksim_localenv::wait;
use ksim_proto::ksim::driver::v1::{self as pb, driver_client::DriverClient};
use kube::Api;
use tonic::transport::Channel;

/// The soak's rounds, and the one whose driver is killed.
const ROUNDS: usize = 10;
const KILLED: usize = 5;

/// The `ksim-driver` binary against `mesh`, writing reports into `reports`.
struct DriverProcess {
    child: Child,
    client: DriverClient<Channel>,
}

impl DriverProcess {
    async fn start(mesh: &TestMesh, reports: &Path) -> Self {
        let addrs_file = reports.with_extension("addrs");
        let _ = std::fs::remove_file(&addrs_file);
        let child = Command::new(ksim_e2e::binary("ksim-driver"))
            .arg("--grpc-addr=127.0.0.1:0")
            .arg("--admin-addr=127.0.0.1:0")
            .arg(format!("--bound-addrs-file={}", addrs_file.display()))
            .arg(format!(
                "--kubeconfig={}",
                mesh.env.kubeconfig_path().display()
            ))
            .arg(format!("--pool-url={}", mesh.pool_url))
            .arg(format!("--tracer-url={}", mesh.tracer_url))
            .arg(format!("--namespace={SEATS_NAMESPACE}"))
            .arg(format!("--report-dir={}", reports.display()))
            .arg("--lease-duration=5s")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let client = wait::until("the driver to serve", DEADLINE, || {
            let addrs = BoundAddrs::read(&addrs_file);
            async move {
                let addrs = addrs.ok_or("its ports are not bound yet")?;
                DriverClient::connect(format!("http://{}", addrs.grpc))
                    .await
                    .map_err(|e| e.to_string())
            }
        })
        .await
        .unwrap();
        Self { child, client }
    }

    fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    async fn simulation(&mut self, id: &str) -> Result<pb::Simulation, tonic::Status> {
        self.client
            .get_simulation(pb::GetSimulationRequest { id: id.to_owned() })
            .await
            .map(|r| r.into_inner().simulation.unwrap())
    }

    async fn until(&mut self, id: &str, state: pb::SimulationState) -> pb::Simulation {
        until_state_of(&self.client, id, state).await
    }
}

impl Drop for DriverProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spec(file: Vec<u8>, group: &str) -> pb::SimulationSpec {
    pb::SimulationSpec {
        trace_source: uploaded(file),
        node_groups: vec![pool_group(group, 1)],
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_driver_ends_and_cleans_what_a_killed_one_left_and_serves_old_reports() {
    let mesh = start().await;
    let reports = tempfile::tempdir().unwrap();
    let mut first = DriverProcess::start(&mesh, reports.path()).await;

    // One simulation ends before the kill: its report must outlive the process.
    let short = trace_file(
        vec![(0, vec![("v1.ConfigMap", "team", "a", config_map("a"))])],
        1_000,
    );
    let done = started(&mut first, spec(short, "orphan")).await;
    first.until(&done, pb::SimulationState::Succeeded).await;

    // The next one is killed mid-run: ten minutes of trace, a namespace and a pool group.
    let long = trace_file(
        vec![
            (0, vec![("v1.ConfigMap", "team", "a", config_map("a"))]),
            (
                600_000,
                vec![("v1.ConfigMap", "team", "b", config_map("b"))],
            ),
        ],
        600_000,
    );
    let left = started(&mut first, spec(long.clone(), "orphan")).await;
    first.until(&left, pb::SimulationState::Running).await;
    let namespaces: Api<Namespace> = Api::all(mesh.client.clone());
    assert!(namespaces.get_opt("virtual-team").await.unwrap().is_some());
    // The running driver saves its report so far: killed, it leaves figures, not none.
    until_saved_with_an_event(&reports.path().join(&left).join("report.json")).await;
    first.kill9();

    // Answered for from the first request, while the killed driver's lease runs out.
    let mut second = DriverProcess::start(&mesh, reports.path()).await;
    let adopted = second.simulation(&left).await.unwrap();
    assert!(
        matches!(
            adopted.state(),
            pb::SimulationState::Running | pb::SimulationState::Failed
        ),
        "{adopted:?}"
    );
    let ended = second.until(&left, pb::SimulationState::Failed).await;
    assert!(
        ended.error_message.contains("driver running it stopped"),
        "{}",
        ended.error_message
    );
    // Its report has the figures saved before the kill and says they stop there.
    let saved = second
        .client
        .get_report(pb::GetReportRequest { id: left.clone() })
        .await
        .unwrap()
        .into_inner()
        .report
        .unwrap();
    assert_eq!(saved.events_applied, 1, "{saved:?}");
    assert!(!saved.complete);
    assert!(
        saved
            .warnings
            .first()
            .is_some_and(|w| w.contains("the last the driver saved")),
        "{:?}",
        saved.warnings
    );
    mesh.assert_nothing_left(&left, &["orphan"]).await;
    let leases: Api<Lease> = Api::namespaced(mesh.client.clone(), SEATS_NAMESPACE);
    let holder = leases
        .get("ksim-driver")
        .await
        .unwrap()
        .spec
        .and_then(|spec| spec.holder_identity);
    assert_eq!(holder, None, "the lease was released");

    // The simulation that ended before the kill is still answered for, from its files.
    let old = second.simulation(&done).await.unwrap();
    assert_eq!(old.state(), pb::SimulationState::Succeeded);
    let report = second
        .client
        .get_report(pb::GetReportRequest { id: done.clone() })
        .await
        .unwrap()
        .into_inner()
        .report
        .unwrap();
    assert_eq!(report.simulation_id, done);
    assert_eq!(report.events_applied, 1);
    assert!(report.artifacts.is_some());
    let unknown = second.simulation("0abc-0001").await.unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound);
    let outside = second.simulation("../../etc").await.unwrap_err();
    assert_eq!(outside.code(), tonic::Code::NotFound);

    // The group name is free again: the next run with it starts and ends.
    let again = started(&mut second, spec(long, "orphan")).await;
    second.until(&again, pb::SimulationState::Running).await;
    let cancelled = second
        .client
        .cancel_simulation(pb::CancelSimulationRequest { id: again.clone() })
        .await
        .unwrap()
        .into_inner()
        .simulation
        .unwrap();
    assert_eq!(cancelled.state(), pb::SimulationState::Cancelled);
    mesh.assert_nothing_left(&again, &["orphan"]).await;
}

/// Waits until the report file at `path` holds an applied event.
async fn until_saved_with_an_event(path: &Path) {
    wait::until(
        "the running report to be saved with an event",
        DEADLINE,
        || async move {
            let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
            let report: serde_json::Value =
                serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
            (report["events_applied"].as_u64() >= Some(1))
                .then_some(())
                .ok_or_else(|| format!("not yet: {}", report["events_applied"]))
        },
    )
    .await
    .unwrap();
}

/// The terminal state `id` reaches, polled through `driver`.
async fn until_ended(driver: &mut DriverProcess, id: &str) -> pb::Simulation {
    until_simulation(&driver.client, id, "to end", |state| {
        matches!(
            state,
            pb::SimulationState::Succeeded
                | pb::SimulationState::Failed
                | pb::SimulationState::Cancelled
        )
    })
    .await
}

/// Starts `spec`, retrying while the driver is busy (ending what a killed driver left).
async fn started(driver: &mut DriverProcess, mut spec: pb::SimulationSpec) -> String {
    spec.provisioning.get_or_insert_with(instant_provisioning);
    wait::until("a simulation to start", DEADLINE, || {
        let mut client = driver.client.clone();
        let spec = spec.clone();
        async move {
            client
                .start_simulation(pb::StartSimulationRequest { spec: Some(spec) })
                .await
                .map(|r| r.into_inner().simulation.unwrap().id)
                .map_err(|status| format!("{status:?}"))
        }
    })
    .await
    .unwrap()
}

/// A bounded soak: 10 simulations in a row over three groups, some cancelled at a random
/// moment, the driver killed with -9 in the middle of one; afterwards nothing of any is left in
/// the cluster. Ten rounds, not the twenty it had (five minutes of the suite), still end each
/// way, cancelled, succeeded and killed, which the test asserts.
#[tokio::test(flavor = "multi_thread")]
async fn ten_runs_with_random_cancels_and_a_driver_kill_leave_nothing_behind() {
    let mesh = start().await;
    let reports = tempfile::tempdir().unwrap();
    let mut driver = DriverProcess::start(&mesh, reports.path()).await;
    // Seeded: a failure reproduces with the same cancels.
    let mut rng = fastrand::Rng::with_seed(14);
    let trace = trace_file(
        vec![
            (
                0,
                vec![(
                    "apps/v1.Deployment",
                    "team",
                    "api",
                    Workload::new("api", 2).json(),
                )],
            ),
            (3_000, vec![("v1.ConfigMap", "team", "b", config_map("b"))]),
        ],
        4_000,
    );
    let mut ids = Vec::new();
    let mut states = Vec::new();
    for round in 0..ROUNDS {
        let group = format!("soak-{}", round % 3);
        let id = started(&mut driver, spec(trace.clone(), &group)).await;
        ids.push(id.clone());
        if round == KILLED {
            driver.until(&id, pb::SimulationState::Running).await;
            driver.kill9();
            driver = DriverProcess::start(&mesh, reports.path()).await;
        } else if rng.bool() {
            tokio::time::sleep(std::time::Duration::from_millis(rng.u64(0..4_000))).await;
            // It may have ended already; either way it ends.
            let _ = driver
                .client
                .cancel_simulation(pb::CancelSimulationRequest { id: id.clone() })
                .await;
        }
        let ended = until_ended(&mut driver, &id).await;
        states.push(ended.state());
        if round == KILLED {
            assert_eq!(ended.state(), pb::SimulationState::Failed);
        } else {
            assert_ne!(
                ended.state(),
                pb::SimulationState::Failed,
                "round {round}: {}",
                ended.error_message
            );
        }
    }
    assert!(
        states.contains(&pb::SimulationState::Cancelled)
            && states.contains(&pb::SimulationState::Succeeded),
        "the seed gave no mix: {states:?}"
    );

    for id in &ids {
        mesh.assert_nothing_left(id, &["soak-0", "soak-1", "soak-2"])
            .await;
    }
    let namespaces: Api<Namespace> = Api::all(mesh.client.clone());
    let simulated = namespaces
        .list(&kube::api::ListParams::default().labels("ksim.io/simulation"))
        .await
        .unwrap();
    assert!(
        simulated.items.is_empty(),
        "namespaces of a simulation left"
    );
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(mesh.client.clone());
    wait::until("the soak groups' nodes to go", DEADLINE, || {
        let nodes = nodes.clone();
        async move {
            let left: Vec<String> = nodes
                .list(&kube::api::ListParams::default().labels("ksim.io/group-owner=pool"))
                .await
                .map_err(|e| e.to_string())?
                .items
                .into_iter()
                .filter_map(|n| n.metadata.name)
                .filter(|n| n.starts_with("soak-"))
                .collect();
            left.is_empty()
                .then_some(())
                .ok_or(format!("nodes left: {left:?}"))
        }
    })
    .await
    .unwrap();
    let leases: Api<Lease> = Api::namespaced(mesh.client.clone(), SEATS_NAMESPACE);
    let holder = leases
        .get("ksim-driver")
        .await
        .unwrap()
        .spec
        .and_then(|spec| spec.holder_identity);
    assert_eq!(holder, None);
}
