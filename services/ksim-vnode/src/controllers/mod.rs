//! The pool's control loops, and the nodes' kubelet endpoints. Each runs until its task is
//! aborted.

pub mod bound_pod;
pub mod heartbeats;
pub mod karpenter;
pub mod kubelet;
pub mod nodes;
pub mod pods;
pub mod seats;
pub mod work_queue;

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use crate::{
    apiserver::{NodeClient, PodClient},
    config::PoolConfig,
    index::PoolIndex,
    metrics::Metrics,
};
use kubelet::Endpoints;

/// What every controller shares.
#[derive(Clone)]
pub struct Context {
    pub config: Arc<PoolConfig>,
    pub index: Arc<Mutex<PoolIndex>>,
    pub metrics: Arc<Metrics>,
    pub nodes: NodeClient,
    pub pods: PodClient,
    pub client: kube::Client,
    /// Wakes the node controller when desired state changed.
    pub reconcile_nodes: Arc<Notify>,
    /// The nodes' kubelet endpoints, when the pool serves them.
    pub kubelet: Option<Arc<Endpoints>>,
    /// The lease the nodes hold now.
    pub lease: Arc<heartbeats::NodeLease>,
    /// Wakes the pods controller when failed nodes recovered: their pods are handled again.
    pub nodes_recovered: Arc<Notify>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("pool", &self.config.pool_name)
            .finish_non_exhaustive()
    }
}

/// Drives a reflecting watch, waking `changed` at each event; an error is logged, naming
/// `what` is watched, and the watch retries by its own backoff.
pub(crate) async fn notify_on_change<S, T, E>(what: &'static str, events: S, changed: Arc<Notify>)
where
    S: futures::Stream<Item = Result<T, E>>,
    E: std::fmt::Display,
{
    ksim_kube::watch::follow(what, events, |_| changed.notify_one()).await;
}

impl Context {
    /// The index, also after a panic elsewhere poisoned the lock: its data stays consistent
    /// because no method leaves it half-updated.
    pub fn index(&self) -> MutexGuard<'_, PoolIndex> {
        self.index
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
