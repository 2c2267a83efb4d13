//! The shipped RBAC (deploy/driver/rbac.yaml) is enough for a whole simulation: the CRD and
//! root, namespaces, replayed objects, the lease, watches, and the cleanup.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::common::*;
use ksim_proto::ksim::driver::v1 as pb;

const RBAC_YAML: &str = include_str!("../../../../../deploy/driver/rbac.yaml");
const SERVICE_ACCOUNT: &str = "system:serviceaccount:ksim-system:ksim-driver";

#[tokio::test(flavor = "multi_thread")]
async fn a_simulation_runs_and_cleans_up_as_the_drivers_service_account() {
    let mut mesh = start_as(Some((
        SERVICE_ACCOUNT,
        &["system:serviceaccounts", "system:authenticated"],
    )))
    .await;
    ksim_localenv::manifests::apply(&mesh.client, RBAC_YAML)
        .await
        .unwrap();
    let file = trace_file(
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
            (
                500,
                vec![("v1.ConfigMap", "team", "settings", config_map("settings"))],
            ),
        ],
        3000,
    );
    let started = mesh
        .start_simulation(pb::SimulationSpec {
            trace_source: uploaded(file),
            node_groups: vec![pool_group("r", 1)],
            ..Default::default()
        })
        .await
        .unwrap();
    let ended = mesh.until_done(&started.id).await;
    assert_eq!(
        ended.state(),
        pb::SimulationState::Succeeded,
        "{}",
        ended.error_message
    );
    let report = mesh.report(&started.id).await;
    assert!(
        report.object_errors.is_empty(),
        "{:?}",
        report.object_errors
    );
    assert_eq!(report.events_applied, 2);
    assert_eq!(report.pod_pending_time.unwrap().count, 2, "both pods ran");
    mesh.assert_nothing_left(&started.id, &["r"]).await;
}
