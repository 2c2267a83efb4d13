//! The Kubernetes side of the driver: the simulation root and lease, the simulation's
//! namespaces, applying replayed objects, seat Deployments, watching what the simulated cluster
//! does, and giving started pods their recorded lifetimes. The rest of the driver reaches the
//! apiserver only through here.

pub mod applier;
pub mod cron_runs;
pub mod launch_lifetimes;
pub mod lease;
pub mod namespaces;
pub mod observer;
pub mod removed_pods;
pub mod root;
pub mod seats;

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
