//! A CronJob's run, as the cronjob controller would start it: the replayed CronJob is
//! suspended (the controller's clock is not the recording's), so the driver reads it at each
//! run the plan scheduled in recorded time, applies its concurrency policy to the Jobs it
//! started before, starts the Job, and records it in the CronJob's status. The controller
//! still keeps a suspended CronJob's books: it drops finished Jobs from `status.active` and
//! deletes those beyond the history limits.

use k8s_openapi::api::batch::v1::{CronJob, Job};
use kube::{
    Api, Client,
    api::{DeleteParams, ListParams, Patch, PostParams},
};
use serde_json::json;

use super::ApplyError;
use crate::domain::{
    Target,
    cron::{self, CRONJOB_LABEL, Decision},
};

pub async fn run(
    client: &Client,
    target: &Target,
    job_name: &str,
    scheduled: &str,
) -> Result<(), ApplyError> {
    let namespace = target
        .namespace
        .as_deref()
        .ok_or_else(|| ApplyError::NoNamespace {
            gvk: target.gvk.clone(),
            name: target.name.clone(),
        })?;
    let cronjobs: Api<CronJob> = Api::namespaced(client.clone(), namespace);
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    let cronjob = cronjobs
        .get(&target.name)
        .await
        .map_err(ApplyError::Request)?;
    let uid = cronjob.metadata.uid.clone().unwrap_or_default();
    let own = jobs
        .list(&ListParams::default().labels(&format!("{CRONJOB_LABEL}={}", target.name)))
        .await
        .map_err(ApplyError::Request)?;
    let running: Vec<String> = own
        .items
        .iter()
        .filter(|job| {
            let controlled = job
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|owner| owner.uid == uid && owner.controller == Some(true));
            controlled && job.metadata.deletion_timestamp.is_none() && !cron::finished(job)
        })
        .filter_map(|job| job.metadata.name.clone())
        .collect();
    let policy = cronjob
        .spec
        .as_ref()
        .and_then(|spec| spec.concurrency_policy.as_deref());
    let replaced = match cron::decide(policy, running) {
        Decision::Skip => {
            tracing::debug!(cronjob = %target.name, job = job_name, "run skipped: a Job still runs (Forbid)");
            return Ok(());
        }
        Decision::Replace(names) => names,
        Decision::Start => Vec::new(),
    };
    for name in &replaced {
        match jobs.delete(name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(error) if ksim_kube::is_not_found(&error) => {}
            Err(error) => return Err(ApplyError::Request(error)),
        }
    }

    let job = cron::job(&cronjob, job_name, scheduled)
        .map_err(|problem| ApplyError::CronRun(format!("CronJob {}: {problem}", target.name)))?;
    let created = match jobs.create(&PostParams::default(), &job).await {
        Ok(created) => created,
        // Started already: this run was played before.
        Err(error) if ksim_kube::is_conflict(&error) => return Ok(()),
        Err(error) => return Err(ApplyError::Request(error)),
    };

    let mut active: Vec<_> = cronjob
        .status
        .and_then(|status| status.active)
        .unwrap_or_default()
        .into_iter()
        .filter(|reference| {
            reference
                .name
                .as_ref()
                .is_none_or(|name| !replaced.contains(name))
        })
        .collect();
    active.push(k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("batch/v1".to_owned()),
        kind: Some("Job".to_owned()),
        name: created.metadata.name.clone(),
        namespace: created.metadata.namespace.clone(),
        uid: created.metadata.uid.clone(),
        resource_version: created.metadata.resource_version.clone(),
        ..Default::default()
    });
    // The simulated cluster's clock, as the controller writes it there.
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let status = json!({"status": {"active": active, "lastScheduleTime": now}});
    cronjobs
        .patch_status(&target.name, &super::merge_params(), &Patch::Merge(&status))
        .await
        .map_err(ApplyError::Request)?;
    Ok(())
}
