//! CronJobs run in recorded time: the driver suspends each replayed CronJob and starts its Jobs
//! at the recorded minutes its schedule names, divided by the speed, with the controller's Job
//! names, concurrency policies and (kept by the real cronjob controller) history limits.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::common::*;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use ksim_localenv::wait;
use ksim_proto::ksim::driver::v1 as pb;
use ksim_trace::pb as trace;
use kube::{Api, api::ListParams};
use serde_json::json;

const NAMESPACE: &str = "cron-batch";
/// The synthetic traces' start (common::trace_file_with_deletes): 2023-11-14T22:13:20Z.
const TRACE_START_MS: i64 = 1_700_000_000_000;

#[tokio::test(flavor = "multi_thread")]
async fn cronjobs_run_at_their_recorded_minutes_with_their_policies() {
    let mut mesh = start().await;
    // Minutes 14 to 18 of the hour: five runs, 40 s to 280 s into the hour-long window, and
    // none after it (the next would be an hour later, as the window closes).
    let schedule = "14-18 * * * *";
    let file = trace_file_with_lifecycles(
        vec![(
            0,
            vec![
                (
                    "batch/v1.CronJob",
                    "batch",
                    "every",
                    cronjob("every", schedule, json!({})),
                ),
                (
                    "batch/v1.CronJob",
                    "batch",
                    "forbid",
                    cronjob("forbid", schedule, json!({"concurrencyPolicy": "Forbid"})),
                ),
                (
                    "batch/v1.CronJob",
                    "batch",
                    "replace",
                    cronjob("replace", schedule, json!({"concurrencyPolicy": "Replace"})),
                ),
                (
                    "batch/v1.CronJob",
                    "batch",
                    "history",
                    cronjob(
                        "history",
                        schedule,
                        json!({"successfulJobsHistoryLimit": 1}),
                    ),
                ),
            ],
        )],
        // Each run's pod, a recorded second after the run: "history"'s run a second, the
        // others 50 minutes (2.5 min at 20x), so that their Jobs still run while checked.
        ["every", "forbid", "replace", "history"]
            .into_iter()
            .flat_map(|name| {
                let lifetime = if name == "history" {
                    1_000
                } else {
                    50 * 60_000
                };
                (0..5).map(move |launch| {
                    let start_ms = 41_000 + 60_000 * i64::from(launch);
                    trace::PodLifecycle {
                        owner_gvk: Some(ksim_trace::gvk::parse("batch/v1.CronJob").unwrap()),
                        owner_namespace: "batch".to_owned(),
                        owner_name: name.to_owned(),
                        pod_spec_hash: 1,
                        launch_index: launch,
                        start_ms,
                        end_ms: start_ms + lifetime,
                        outcome: trace::PodOutcome::Succeeded as i32,
                        pod_name: format!("{name}-{launch}"),
                        ..Default::default()
                    }
                })
            })
            .collect(),
        60 * 60_000,
    );
    let simulation = mesh
        .start_simulation(pb::SimulationSpec {
            trace_source: uploaded(file),
            speed: 20.0,
            namespace_prefix: "cron".to_owned(),
            node_groups: vec![pool_group("cron", 2)],
            // Each run's pods start 10 s (0.5 s at 20x) after they are bound, no pulls.
            provisioning: Some(pb::ProvisioningModel {
                source: "cronjobs test".to_owned(),
                yaml: "name: cron-start\npods: {default: {start: 10s}}\n".to_owned(),
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    let id = simulation.id;
    let jobs: Api<Job> = Api::namespaced(mesh.client.clone(), NAMESPACE);
    let cronjobs: Api<CronJob> = Api::namespaced(mesh.client.clone(), NAMESPACE);
    let minutes: Vec<i64> = (0..5).map(|n| TRACE_START_MS / 60_000 + 1 + n).collect();
    let names = |cronjob: &str| -> Vec<String> {
        minutes.iter().map(|m| format!("{cronjob}-{m}")).collect()
    };

    // Allow: a Job per run, named for its recorded minute, controlled by the CronJob.
    let every = until_jobs(&jobs, "every", |jobs| jobs.len() == 5).await;
    assert_eq!(job_names(&every), names("every"));
    let cronjob = cronjobs.get("every").await.unwrap();
    let uid = cronjob.metadata.uid.clone().unwrap();
    for job in &every {
        let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("CronJob", uid.as_str())
        );
        assert_eq!(owner.controller, Some(true));
        let scheduled = &job.metadata.annotations.as_ref().unwrap()["batch.kubernetes.io/cronjob-scheduled-timestamp"];
        assert!(scheduled.starts_with("2023-11-14T22:1"), "{scheduled}");
    }
    // Suspended for the controller, which never starts one itself; its status shows the runs.
    assert_eq!(cronjob.spec.as_ref().unwrap().suspend, Some(true));
    wait::until("every's status to list its five Jobs", DEADLINE, || async {
        let status = cronjobs
            .get("every")
            .await
            .map_err(|e| e.to_string())?
            .status
            .unwrap_or_default();
        let active: Vec<String> = status
            .active
            .iter()
            .flatten()
            .filter_map(|reference| reference.name.clone())
            .collect();
        if active.len() == 5 && status.last_schedule_time.is_some() {
            Ok(())
        } else {
            Err(format!(
                "active {active:?}, last scheduled {:?}",
                status.last_schedule_time
            ))
        }
    })
    .await
    .unwrap();

    // Forbid: the first run's Job still runs, so the other four are skipped.
    let forbid = until_jobs(&jobs, "forbid", |jobs| !jobs.is_empty()).await;
    assert_eq!(job_names(&forbid), names("forbid")[..1]);
    // Replace: each run deletes the running Job; the last run's is the one left.
    let replace = until_jobs(&jobs, "replace", |jobs| {
        job_names(jobs) == [format!("replace-{}", minutes[4])]
    })
    .await;
    assert_eq!(replace.len(), 1);
    // History: the real controller keeps a suspended CronJob's books, so of five finished
    // Jobs it keeps the newest one.
    let history = until_jobs(&jobs, "history", |jobs| {
        job_names(jobs) == [format!("history-{}", minutes[4])] && jobs.iter().all(complete)
    })
    .await;
    assert_eq!(history.len(), 1);
    // No more runs than the five.
    assert_eq!(
        job_names(
            &jobs
                .list(&ListParams::default().labels("ksim.io/cronjob=every"))
                .await
                .unwrap()
                .items
        ),
        names("every")
    );

    let report_before_cancel = mesh.simulation(&id).await;
    let progress = report_before_cancel.progress.unwrap();
    // The trace has one event; the twenty runs are steps of their own, not events.
    assert_eq!(progress.events_total, 1);
    assert_eq!(progress.object_errors, 0);
    let cancelled = mesh.cancel(&id).await;
    assert_eq!(cancelled.state(), pb::SimulationState::Cancelled);
    // The runs' pods waited their start, reported in recorded time like every pod's. The
    // runs fall on whole recorded minutes, whole seconds apart at 20x: counted from the
    // bind's whole second (PodScheduled), a delay under a second was gone in most runs. Every
    // pod draws 10 s (0.5 s of wall clock); the driver's view of a bind lags its watch under
    // the suite's load, which moves a pod's figure by tenths of a wall-clock second, seconds at
    // 20x (one warm suite measured half of them under 2.1 s): the p90 holds the delay drawn.
    let starts = mesh.report(&id).await.pod_start_time.unwrap();
    assert!(starts.count >= 5, "{starts:?}");
    let p90 = starts.p90.unwrap();
    assert!(
        (6..20).contains(&p90.seconds),
        "pod start p90 {p90:?}, drew 10 s: {starts:?}"
    );
    mesh.assert_nothing_left(&id, &["cron"]).await;
}

fn cronjob(name: &str, schedule: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut spec = json!({
        "schedule": schedule,
        "jobTemplate": {"spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "work", "image": "registry.example/batch:1"}]
        }}}}
    });
    for (key, value) in extra.as_object().unwrap() {
        spec[key] = value.clone();
    }
    json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": name}, "spec": spec})
}

async fn until_jobs(jobs: &Api<Job>, cronjob: &str, done: impl Fn(&[Job]) -> bool) -> Vec<Job> {
    let selector = format!("ksim.io/cronjob={cronjob}");
    wait::until(&format!("Jobs of {cronjob}"), DEADLINE, || async {
        let list = jobs
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| e.to_string())?;
        let live: Vec<Job> = list
            .items
            .into_iter()
            .filter(|job| job.metadata.deletion_timestamp.is_none())
            .collect();
        if done(&live) {
            Ok(live)
        } else {
            Err(format!("{:?}", job_names(&live)))
        }
    })
    .await
    .unwrap()
}

fn job_names(jobs: &[Job]) -> Vec<String> {
    let mut names: Vec<String> = jobs
        .iter()
        .filter_map(|job| job.metadata.name.clone())
        .collect();
    names.sort();
    names
}

fn complete(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Complete" && c.status == "True")
        })
}
