//! `--reschedule-bare-pods` during a replay: what the trace does to its bare pods goes into
//! [`BarePods`] as the operations are dispatched, and a pod the cluster removes behind the
//! trace's back is replaced by its clone.

use std::sync::{
    Arc, Mutex, PoisonError,
    atomic::{AtomicU64, Ordering},
};

use tokio::task::JoinHandle;

use crate::{
    cluster::{ReplayWrites, removed_pods},
    domain::{Target, bare_pods::BarePods, plan::Op},
};

#[derive(Debug)]
pub struct Rescheduler {
    pods: Arc<Mutex<BarePods>>,
    clones: Arc<AtomicU64>,
    watch: JoinHandle<()>,
    task: JoinHandle<()>,
}

impl Rescheduler {
    pub fn start<C: ReplayWrites>(
        client: &kube::Client,
        simulation_id: &str,
        cluster: Arc<C>,
    ) -> Self {
        let pods = Arc::new(Mutex::new(BarePods::default()));
        let clones = Arc::new(AtomicU64::new(0));
        let (mut removed, watch) = removed_pods::watch(client, simulation_id);
        let task = tokio::spawn({
            let (pods, clones) = (pods.clone(), clones.clone());
            async move {
                while let Some(target) = removed.recv().await {
                    let clone = lock(&pods).removed(&target);
                    let Some((clone, object)) = clone else {
                        continue;
                    };
                    match cluster.apply(&clone, &object).await {
                        Ok(()) => {
                            clones.fetch_add(1, Ordering::Relaxed);
                            tracing::info!(namespace = ?clone.namespace, removed = %target.name, clone = %clone.name, "bare pod rescheduled");
                        }
                        Err(error) => {
                            tracing::warn!(namespace = ?clone.namespace, removed = %target.name, clone = %clone.name, %error, "bare pod not rescheduled");
                        }
                    }
                }
            }
        });
        Self {
            pods,
            clones,
            watch,
            task,
        }
    }

    /// Notes what `op` does to bare pods before it is dispatched; a delete of a pod that was
    /// rescheduled also deletes its live clone, returned as the extra operation.
    pub fn before(&self, op: &Op) -> Option<Op> {
        let mut pods = lock(&self.pods);
        match op {
            Op::Apply { target, object } => {
                pods.applied(target, object);
                None
            }
            Op::Delete { target } => pods
                .deleted(target)
                .map(|clone: Target| Op::Delete { target: clone }),
            Op::HandOver { .. } | Op::CronRun { .. } | Op::Invalid { .. } => None,
        }
    }

    /// Stops rescheduling (the cleanup is about to delete every pod); how many clones it made.
    pub fn stop(self) -> u64 {
        self.watch.abort();
        self.task.abort();
        self.clones.load(Ordering::Relaxed)
    }
}

fn lock(pods: &Mutex<BarePods>) -> std::sync::MutexGuard<'_, BarePods> {
    pods.lock().unwrap_or_else(PoisonError::into_inner)
}
