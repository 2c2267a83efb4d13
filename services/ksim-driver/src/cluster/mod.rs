//! The Kubernetes side of the driver: the simulation root and lease, the simulation's
//! namespaces, applying replayed objects, seat Deployments, watching what the simulated cluster
//! does, and giving started pods their recorded lifetimes. The rest of the driver reaches the
//! apiserver only through here.

pub mod applier;
pub mod availability;
pub mod cron_runs;
pub mod launch_lifetimes;
pub mod lease;
pub mod namespaces;
pub mod node_drain;
pub mod nodepools;
pub mod observer;
pub mod offerings;
pub mod removed_pods;
pub mod replicas;
pub mod root;
pub mod seats;
pub mod usage_replay;

use std::future::Future;

use kube::api::PatchParams;

use crate::domain::{FIELD_MANAGER, Gvk, Target};

/// What the replay's operations do to the simulated cluster's objects. [`applier::Applier`]
/// does it through the apiserver; the replay's phases take any `ReplayWrites`, so their own rules
/// (timing, order, stopping on a refusal) are tested without one, as the provider's are.
pub trait ReplayWrites: Send + Sync + 'static {
    /// Applies `object` (server-side, under the driver's field manager).
    fn apply(
        &self,
        target: &Target,
        object: &serde_json::Value,
    ) -> impl Future<Output = Result<(), ApplyError>> + Send;

    /// Applies `replicas` as the workload's `spec.replicas` under
    /// [`crate::domain::autoscaled::REPLICAS_MANAGER`], which then holds the field beside
    /// the driver.
    fn hand_over_replicas(
        &self,
        target: &Target,
        replicas: i64,
    ) -> impl Future<Output = Result<(), ApplyError>> + Send;

    /// Deletes the object and what it owns; one already gone counts as deleted.
    fn delete(&self, target: &Target) -> impl Future<Output = Result<(), ApplyError>> + Send;

    /// Starts the Job named `job` that a CronJob's schedule calls for at `scheduled`.
    fn cron_run(
        &self,
        cronjob: &Target,
        job: &str,
        scheduled: &str,
    ) -> impl Future<Output = Result<(), ApplyError>> + Send;
}

/// Parameters of the driver's merge patches: under its own field manager, so an object's
/// `managedFields` say the driver changed it (a patch without one is "unknown").
pub fn merge_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    }
}

/// A request to the apiserver that failed, naming what it did to which object; the apiserver's
/// answer (or the transport error) is its source.
#[derive(Debug, thiserror::Error)]
#[error("{operation} {object}: {source}")]
pub struct ClusterError {
    operation: &'static str,
    object: String,
    source: kube::Error,
}

impl ClusterError {
    pub(crate) fn new(
        operation: &'static str,
        object: impl Into<String>,
        source: kube::Error,
    ) -> Self {
        Self {
            operation,
            object: object.into(),
            source,
        }
    }

    /// 409: the object exists already, or changed meanwhile.
    pub fn is_conflict(&self) -> bool {
        ksim_kube::is_conflict(&self.source)
    }

    /// The apiserver's answer alone, for a caller that says itself what it was doing.
    pub fn answer(&self) -> &kube::Error {
        &self.source
    }
}

/// Why an object was not applied or deleted. The report's object error names the object and
/// the operation beside this message.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Discovery did not resolve the kind: looked up once, shared by every object of it.
    #[error("the cluster does not serve kind {gvk}: {source}")]
    Unserved {
        gvk: Gvk,
        source: std::sync::Arc<kube::Error>,
    },
    #[error("kind {0} was not looked up")]
    NotLookedUp(Gvk),
    #[error("{gvk} is namespaced but the trace gives {name} no namespace")]
    NoNamespace { gvk: Gvk, name: String },
    /// The object exists and this run did not create it ([`crate::domain::ownership`]).
    #[error(
        "{gvk} {name} was not created by this replay ({reason}): a replay changes or deletes \
         only what it created"
    )]
    NotCreatedHere {
        gvk: Gvk,
        name: String,
        reason: crate::domain::ownership::NotCreatedHere,
    },
    /// The apiserver refused the request, or it did not reach the apiserver.
    #[error("{}", describe(.0))]
    Request(#[source] kube::Error),
    /// A CronJob run could not start its Job.
    #[error("{0}")]
    CronRun(String),
}

/// The apiserver's own message for API errors (it names the field at fault), else the error.
fn describe(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => format!("{} ({})", status.message, status.code),
        other => other.to_string(),
    }
}
