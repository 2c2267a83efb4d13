//! What a CronJob's run starts, as the cronjob controller would: the Job from its template,
//! and what `concurrencyPolicy` says about the Jobs still running.

use k8s_openapi::{
    api::batch::v1::{CronJob, Job},
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference},
};

/// Label on the Jobs the driver starts for a CronJob, naming it, so that a run lists its
/// CronJob's Jobs without reading every Job of the namespace.
pub const CRONJOB_LABEL: &str = "ksim.io/cronjob";

/// Annotation the cronjob controller puts on each Job: when the run was scheduled.
pub const SCHEDULED_ANNOTATION: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

/// What a run does about its CronJob's Jobs that are still running (`spec.concurrencyPolicy`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Start,
    /// `Forbid` with a Job still running: this run is skipped.
    Skip,
    /// `Replace`: these running Jobs are deleted, then the new one starts.
    Replace(Vec<String>),
}

pub fn decide(policy: Option<&str>, running: Vec<String>) -> Decision {
    match policy {
        Some("Forbid") if !running.is_empty() => Decision::Skip,
        Some("Replace") if !running.is_empty() => Decision::Replace(running),
        _ => Decision::Start,
    }
}

/// Whether a Job has finished: a Complete or Failed condition is true, as the controller reads it.
pub fn finished(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions.iter().any(|condition| {
                matches!(condition.type_.as_str(), "Complete" | "Failed")
                    && condition.status == "True"
            })
        })
}

/// Why a CronJob as the cluster returned it cannot start a run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoJob {
    #[error("the CronJob has no name or uid")]
    Unnamed,
    #[error("the CronJob has no spec")]
    NoSpec,
}

/// The Job the cronjob controller would create for a run of `cronjob`: its job template,
/// named `name`, controlled by the CronJob (so the controller's history limits and the garbage
/// collector treat it as the CronJob's own) and labelled for [`CRONJOB_LABEL`].
pub fn job(cronjob: &CronJob, name: &str, scheduled: &str) -> Result<Job, NoJob> {
    let (Some(cronjob_name), Some(uid)) = (&cronjob.metadata.name, &cronjob.metadata.uid) else {
        return Err(NoJob::Unnamed);
    };
    let template = cronjob
        .spec
        .as_ref()
        .map(|spec| spec.job_template.clone())
        .ok_or(NoJob::NoSpec)?;
    let template_metadata = template.metadata.unwrap_or_default();
    let mut labels = template_metadata.labels.unwrap_or_default();
    labels.insert(CRONJOB_LABEL.to_owned(), cronjob_name.clone());
    let mut annotations = template_metadata.annotations.unwrap_or_default();
    annotations.insert(SCHEDULED_ANNOTATION.to_owned(), scheduled.to_owned());
    Ok(Job {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: cronjob.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: "batch/v1".to_owned(),
                kind: "CronJob".to_owned(),
                name: cronjob_name.clone(),
                uid: uid.clone(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        },
        spec: template.spec,
        status: None,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn a_run_starts_the_job_template_controlled_by_the_cronjob() {
        let cronjob: CronJob = serde_json::from_value(json!({
            "metadata": {"name": "nightly", "namespace": "p-batch", "uid": "u-1"},
            "spec": {"schedule": "@daily", "jobTemplate": {
                "metadata": {"labels": {"team": "data"}},
                "spec": {"backoffLimit": 2, "template": {"spec": {"containers": [], "restartPolicy": "Never"}}},
            }},
        }))
        .unwrap();
        let job = job(&cronjob, "nightly-29453760", "2026-01-01T00:00:00Z").unwrap();
        let value = serde_json::to_value(&job).unwrap();
        assert_eq!(value["metadata"]["namespace"], "p-batch");
        assert_eq!(value["metadata"]["labels"]["team"], "data");
        assert_eq!(value["metadata"]["labels"][CRONJOB_LABEL], "nightly");
        assert_eq!(
            value["metadata"]["annotations"][SCHEDULED_ANNOTATION],
            "2026-01-01T00:00:00Z"
        );
        assert_eq!(
            value["metadata"]["ownerReferences"],
            json!([{"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly", "uid": "u-1",
                    "controller": true, "blockOwnerDeletion": true}])
        );
        assert_eq!(value["spec"]["backoffLimit"], 2);

        let unsaved: CronJob = serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap();
        assert!(super::job(&unsaved, "x-1", "").is_err());
    }

    #[test]
    fn a_runs_pods_carry_the_cronjobs_start_delays() {
        use crate::domain::{
            Gvk,
            lifetimes::Lifetimes,
            rewrite::{RewriteOptions, Rewriter},
        };
        use ksim_nodes::labels::POD_PROVISIONING_ANNOTATION;
        use ksim_provisioning::{Model, PodProvisioning};

        // SimKube's examples/traces/cronjob.sktrace, as recorded.
        let recorded = json!({
            "apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": "hello-simkube", "namespace": "testing", "annotations": {}},
            "spec": {"schedule": "* * * * *", "concurrencyPolicy": "Allow", "jobTemplate": {
                "metadata": {},
                "spec": {"template": {"metadata": {"name": "simkube-job"}, "spec": {
                    "containers": [{"name": "sleeper", "image": "busybox",
                                    "command": ["sleep", "30"]}],
                    "restartPolicy": "Never",
                }}},
            }},
        });
        let mut options = RewriteOptions::for_tests("ksim", 10.0);
        options.provisioning = Some(Model::published());
        let rewriter = Rewriter::new(options, &Lifetimes::default());
        let gvk = Gvk::new("batch", "v1", "CronJob");
        let (_, mut applied) = rewriter
            .apply(&gvk, "testing", "hello-simkube", recorded)
            .unwrap();
        // As the apiserver returns it to the run.
        applied["metadata"]["uid"] = json!("u-1");
        let cronjob: CronJob = serde_json::from_value(applied).unwrap();
        let job = job(&cronjob, "hello-simkube-1", "2026-01-01T00:00:00Z").unwrap();
        let annotations = job
            .spec
            .and_then(|spec| spec.template.metadata)
            .and_then(|metadata| metadata.annotations)
            .unwrap();
        let carried =
            PodProvisioning::from_json(&annotations[POD_PROVISIONING_ANNOTATION]).unwrap();
        assert_eq!((carried.model.as_str(), carried.speed), ("published", 10.0));
        assert_eq!(carried.pods, Model::published().pods.default);
    }

    #[test]
    fn concurrency_policy_decides_about_running_jobs() {
        let running = vec!["nightly-1".to_owned()];
        assert_eq!(decide(None, running.clone()), Decision::Start);
        assert_eq!(decide(Some("Allow"), running.clone()), Decision::Start);
        assert_eq!(decide(Some("Forbid"), running.clone()), Decision::Skip);
        assert_eq!(decide(Some("Forbid"), Vec::new()), Decision::Start);
        assert_eq!(
            decide(Some("Replace"), running.clone()),
            Decision::Replace(running)
        );
        assert_eq!(decide(Some("Replace"), Vec::new()), Decision::Start);

        let job = |conditions: Value| -> Job {
            serde_json::from_value(json!({"metadata": {}, "status": {"conditions": conditions}}))
                .unwrap()
        };
        assert!(finished(&job(
            json!([{"type": "Complete", "status": "True"}])
        )));
        assert!(finished(&job(
            json!([{"type": "Failed", "status": "True"}])
        )));
        assert!(!finished(&job(
            json!([{"type": "Suspended", "status": "True"}])
        )));
        assert!(!finished(&job(
            json!([{"type": "Complete", "status": "False"}])
        )));
    }
}
