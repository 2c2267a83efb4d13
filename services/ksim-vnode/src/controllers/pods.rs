//! Plays the kubelet for pods bound to the pool's nodes: one cluster-wide watch of bound
//! pods, filtered in memory, its changes handled oldest first by `api_concurrency` workers
//! (see `work_queue`). Pending pods get an IP and a Running status (at once, or when their
//! start model says: `domain::pod_start`), pods with a lifetime (or owned by a Job) complete
//! when it ends, and pods whose deletion was requested are finished and deleted once their
//! finalizers are gone. Pods of a failed node are left as they are until it recovers.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::{
    api::{core::v1::Pod, resource::v1::ResourceClaim},
    jiff::Timestamp,
};
use kube::{
    Api,
    runtime::{
        WatchStreamExt,
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};

use super::{
    Context,
    bound_pod::{BoundPod, Kept},
    work_queue::WorkQueue,
};
use crate::{
    domain::{
        claims,
        limits::PodLimits,
        pod::{
            PodPhase, SANDBOX_FAILED_REASON, completed_status, completion_deadline,
            is_host_network, phase, pod_ip, readiness_lost, ready_to_delete, running_status,
            sandbox_failed_status,
        },
        pod_start::{self, Due, PodStarts},
    },
    index::AssignError,
};

const BOUND_PODS: &str = "spec.nodeName!=";
const RETRY: Duration = Duration::from_secs(2);
const NO_IP_RETRY: Duration = Duration::from_secs(5);
/// A pod whose claims are not ready is looked at again after this long.
const CLAIM_RETRY: Duration = Duration::from_millis(500);
const SWEEP: Duration = Duration::from_secs(2);

/// Claims the IPs of pods already on the pool's nodes, so none is handed out twice after
/// a restart. Runs before the controller starts assigning.
pub async fn adopt_existing(ctx: &Context) -> Result<(), kube::Error> {
    let pods: Api<Pod> = Api::all(ctx.client.clone());
    let list = pods
        .list(&kube::api::ListParams::default().fields(BOUND_PODS))
        .await?;
    let mut index = ctx.index();
    for pod in &list.items {
        if let Some(node) = node_name(pod)
            && index.is_ours(node)
        {
            index.observe_pod(
                &key(pod),
                uid(pod),
                node,
                pod_ip(pod),
                phase(pod),
                PodLimits::of(pod),
            );
        }
    }
    Ok(())
}

pub async fn run(ctx: Context) {
    let api: Api<Pod> = Api::all(ctx.client.clone());
    let (store, writer) = reflector::store::<BoundPod>();
    let index = ctx.index.clone();
    // Only pods on this pool's nodes are kept, and of most only what the next write needs:
    // in a real cluster most bound pods are elsewhere.
    let pods = watcher(api, watcher::Config::default().fields(BOUND_PODS))
        .default_backoff()
        .try_filter(move |event| {
            let keep = match event {
                watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => node_name(pod)
                    .is_some_and(|node| {
                        index
                            .lock()
                            .unwrap_or_else(|poisoned| poisoned.into_inner())
                            .is_ours(node)
                    }),
                // Deletes always reach the store, which ignores pods it never held.
                watcher::Event::Delete(_) | watcher::Event::Init | watcher::Event::InitDone => true,
            };
            std::future::ready(keep)
        })
        .map_ok(into_bound)
        .reflect(writer)
        .applied_objects();
    let queue = WorkQueue::default();
    let starts = Starts::default();
    let parked = Parked::default();
    // Owned here, so aborting this controller aborts its workers and sweeper too.
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..ctx.config.api_concurrency {
        tasks.spawn(work(
            ctx.clone(),
            store.clone(),
            queue.clone(),
            starts.clone(),
            parked.clone(),
        ));
    }
    tasks.spawn(sweep_deleted(ctx.clone(), store, starts));
    tasks.spawn(release_recovered(ctx.clone(), queue.clone(), parked));
    pods.for_each(|pod| {
        match pod {
            Ok(pod) => queue.add(ObjectRef::from_obj(&pod)),
            Err(error) => tracing::warn!(%error, "pod watch"),
        }
        std::future::ready(())
    })
    .await;
}

/// One worker: takes the oldest changed pod and brings it where it should be.
async fn work(
    ctx: Context,
    store: Store<BoundPod>,
    queue: WorkQueue<ObjectRef<BoundPod>>,
    starts: Starts,
    parked: Parked,
) {
    loop {
        let key = queue.next().await;
        // Gone from the store: deleted, and the sweeper releases what it held.
        if let Some(pod) = store.get(&key) {
            match reconcile(&pod, &ctx, &starts).await {
                Ok(Next::AwaitChange) => {}
                Ok(Next::After(delay)) => queue.add_after(key.clone(), delay),
                Ok(Next::WhenRecovered) => {
                    if let Some(node) = pod.node.as_deref() {
                        parked.park(&ctx, node, key.clone(), &queue);
                    }
                }
                Err(error) => {
                    ctx.metrics.api_errors.inc();
                    tracing::warn!(pod = pod.key(), %error, "retrying");
                    queue.add_after(key.clone(), RETRY);
                }
            }
        }
        queue.done(&key);
    }
}

/// The images on the nodes and the pods waiting to start, shared by the workers and the
/// sweeper. Never locked together with the index.
#[derive(Debug, Clone, Default)]
struct Starts(Arc<Mutex<PodStarts>>);

impl Starts {
    fn lock(&self) -> MutexGuard<'_, PodStarts> {
        // No method leaves the bookkeeping half-updated, so a panic elsewhere does not spoil it.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// What a pod needs next: nothing until it changes, another look after a while, or another
/// once its failed node recovers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    AwaitChange,
    After(Duration),
    WhenRecovered,
}

/// The pods of failed nodes, by node, waiting for its recovery: nothing is looked at for them
/// meanwhile, however many there are. Locked before the index, never after it.
#[derive(Debug, Clone, Default)]
struct Parked(Arc<Mutex<HashMap<String, HashSet<ObjectRef<BoundPod>>>>>);

impl Parked {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, HashSet<ObjectRef<BoundPod>>>> {
        // Only inserts and removes of whole entries: a panic elsewhere leaves it consistent.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Keeps `key` until `node` is no longer failed; queued again at once if it recovered
    /// since the pod was looked at. Checked under this lock, which [`Self::release`] takes
    /// before reading the index, so no recovery is missed in between.
    fn park(
        &self,
        ctx: &Context,
        node: &str,
        key: ObjectRef<BoundPod>,
        queue: &WorkQueue<ObjectRef<BoundPod>>,
    ) {
        let mut parked = self.lock();
        if ctx.index().is_failed(node) {
            parked.entry(node.to_owned()).or_default().insert(key);
        } else {
            queue.add(key);
        }
    }

    /// Queues again the pods of every node no longer failed: recovered, or gone (they are then
    /// nobody's to handle, which their next look finds).
    fn release(&self, ctx: &Context, queue: &WorkQueue<ObjectRef<BoundPod>>) {
        let mut parked = self.lock();
        if parked.is_empty() {
            return;
        }
        let released: Vec<String> = {
            let index = ctx.index();
            parked
                .keys()
                .filter(|node| !index.is_failed(node))
                .cloned()
                .collect()
        };
        for node in released {
            for key in parked.remove(&node).unwrap_or_default() {
                queue.add(key);
            }
        }
    }
}

/// Hands the parked pods of recovered nodes back to the workers when the pool says nodes
/// recovered, and those of nodes gone now and then.
async fn release_recovered(ctx: Context, queue: WorkQueue<ObjectRef<BoundPod>>, parked: Parked) {
    loop {
        let _ = tokio::time::timeout(SWEEP, ctx.nodes_recovered.notified()).await;
        parked.release(&ctx, &queue);
    }
}

fn into_bound(event: watcher::Event<Pod>) -> watcher::Event<BoundPod> {
    match event {
        watcher::Event::Apply(pod) => watcher::Event::Apply(pod.into()),
        watcher::Event::InitApply(pod) => watcher::Event::InitApply(pod.into()),
        watcher::Event::Delete(pod) => watcher::Event::Delete(pod.into()),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{operation}: {source}")]
pub struct ReconcileError {
    operation: &'static str,
    source: kube::Error,
}

fn failed(operation: &'static str) -> impl FnOnce(kube::Error) -> ReconcileError {
    move |source| ReconcileError { operation, source }
}

async fn reconcile(
    bound: &BoundPod,
    ctx: &Context,
    starts: &Starts,
) -> Result<Next, ReconcileError> {
    match &bound.kept {
        Kept::Unsettled(pod) => reconcile_unsettled(pod, bound, ctx, starts).await,
        Kept::Settled { phase, ip } => {
            if let Some(node) = bound.node.as_deref() {
                let key = bound.key();
                let mut index = ctx.index();
                match phase {
                    PodPhase::Succeeded | PodPhase::Failed => index.pod_finished(&key, *phase),
                    _ => index.observe_pod(
                        &key,
                        bound.uid(),
                        node,
                        *ip,
                        *phase,
                        bound.limits.clone(),
                    ),
                }
            }
            Ok(Next::AwaitChange)
        }
    }
}

async fn reconcile_unsettled(
    pod: &Pod,
    bound: &BoundPod,
    ctx: &Context,
    starts: &Starts,
) -> Result<Next, ReconcileError> {
    let Some(node) = node_name(pod) else {
        return Ok(Next::AwaitChange);
    };
    let node_ip = match ctx.index().node(node) {
        // A failed node's kubelet does nothing: its pod stays as it is, not started, completed
        // or finished, until the node recovers.
        Some(entry) if entry.failed => return Ok(Next::WhenRecovered),
        Some(entry) => entry.internal_ip(),
        None => return Ok(Next::AwaitChange),
    };
    let key = key(pod);
    let now = Timestamp::now();

    if pod.metadata.deletion_timestamp.is_some() {
        if !ready_to_delete(pod) {
            // Finalizers are someone else's to remove; their removal is a change we see.
            return Ok(Next::AwaitChange);
        }
        if phase(pod) == PodPhase::Running {
            ctx.pods
                .write_status(pod, &completed_status(pod, now, 0))
                .await
                .map_err(failed("finish deleted pod"))?;
        }
        ctx.pods
            .delete_now(pod)
            .await
            .map_err(failed("delete pod"))?;
        ctx.metrics.pods_deleted.inc();
        ctx.index().forget_pod(&key);
        return Ok(Next::AwaitChange);
    }

    match phase(pod) {
        PodPhase::Succeeded | PodPhase::Failed => {
            ctx.index().pod_finished(&key, phase(pod));
            Ok(Next::AwaitChange)
        }
        PodPhase::Running => {
            ctx.index().observe_pod(
                &key,
                uid(pod),
                node,
                pod_ip(pod),
                PodPhase::Running,
                bound.limits.clone(),
            );
            // Its node is up again: Ready, as the kubelet reports it once it reconnects.
            if let Some(ip) = pod_ip(pod).filter(|_| readiness_lost(pod)) {
                ctx.pods
                    .write_status(pod, &running_status(pod, node_ip, ip, now))
                    .await
                    .map_err(failed("report pod ready again"))?;
                return Ok(Next::AwaitChange);
            }
            let deadline =
                completion_deadline(pod, ctx.config.job_duration()).unwrap_or_else(|error| {
                    tracing::warn!(pod = key, %error, "ignoring the pod's lifetime");
                    None
                });
            match deadline {
                Some(deadline) if deadline > now => Ok(Next::After(
                    Duration::try_from(deadline - now).unwrap_or(RETRY),
                )),
                Some(_) => {
                    ctx.pods
                        .write_status(pod, &completed_status(pod, now, 0))
                        .await
                        .map_err(failed("complete pod"))?;
                    ctx.metrics.pods_completed.inc();
                    ctx.index().pod_finished(&key, PodPhase::Succeeded);
                    Ok(Next::AwaitChange)
                }
                None => Ok(Next::AwaitChange),
            }
        }
        PodPhase::Pending | PodPhase::Unknown => {
            if !claims_prepared(ctx, pod, &key).await? {
                return Ok(Next::After(CLAIM_RETRY));
            }
            let due = start_due(pod, &key, node, now, starts);
            if let Some(due) = due {
                ctx.metrics.image_pulls.inc_by(due.pulls_begun as u64);
                if due.at > now {
                    // Still starting: the delayed look is the only one due before then.
                    return Ok(Next::After(pod_start::until(now, due.at)));
                }
            }
            let assigned = ctx
                .index()
                .assign_pod_ip(&key, uid(pod), node, is_host_network(pod));
            match assigned {
                Ok(ip) => {
                    // Running for the pool before anyone can read it so, as a kubelet knows
                    // its containers started before it reports them: usage sent for a pod
                    // seen Running is never refused as not running. A failed write is retried
                    // with the same IP and phase.
                    ctx.index().observe_pod(
                        &key,
                        uid(pod),
                        node,
                        Some(ip),
                        PodPhase::Running,
                        bound.limits.clone(),
                    );
                    ctx.pods
                        .write_status(pod, &running_status(pod, node_ip, ip, now))
                        .await
                        .map_err(failed("start pod"))?;
                    ctx.metrics.pods_started.inc();
                    if let Some(due) = due {
                        ctx.metrics
                            .pod_start_delays
                            .observe(due.delay().as_secs_f64());
                        starts.lock().forget_pod(&key);
                    }
                    // The Running pod comes back through the watch to schedule its end.
                    Ok(Next::AwaitChange)
                }
                Err(AssignError::Exhausted(error)) => {
                    if !reported_no_ip(pod) {
                        ctx.metrics.ip_exhaustions.inc();
                        let message = format!("failed to assign a pod IP: {error}");
                        let status = sandbox_failed_status(pod, node_ip, &message, now);
                        ctx.pods
                            .report_no_ip(pod, &status, &message)
                            .await
                            .map_err(failed("report IP exhaustion"))?;
                    }
                    // Retried until an IP is free; the event above is not repeated.
                    Ok(Next::After(NO_IP_RETRY))
                }
                Err(AssignError::UnknownNode(_)) => Ok(Next::AwaitChange),
            }
        }
    }
}

/// Whether each of `pod`'s ResourceClaims is allocated and reserved for it, which is all a
/// virtual node's devices need to be prepared; one that is not yet is looked at again later.
async fn claims_prepared(ctx: &Context, pod: &Pod, key: &str) -> Result<bool, ReconcileError> {
    let names = match claims::claim_names(pod) {
        Ok(names) if names.is_empty() => return Ok(true),
        Ok(names) => names,
        Err(claim) => {
            tracing::debug!(pod = key, claim, "resource claim not created yet");
            return Ok(false);
        }
    };
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let api: Api<ResourceClaim> = Api::namespaced(ctx.client.clone(), namespace);
    for name in names {
        let claim = api
            .get_opt(&name)
            .await
            .map_err(failed("read resource claim"))?;
        if !claim.is_some_and(|claim| claims::prepared(&claim, uid(pod))) {
            tracing::debug!(
                pod = key,
                claim = name,
                "resource claim not allocated for the pod yet"
            );
            return Ok(false);
        }
    }
    Ok(true)
}

/// When a Pending pod with a start model runs (`None`: at once, as every pod without one).
/// A model that cannot be read is reported and the pod starts at once.
fn start_due(pod: &Pod, key: &str, node: &str, now: Timestamp, starts: &Starts) -> Option<Due> {
    let provisioning = match pod_start::provisioning(pod) {
        Ok(provisioning) => provisioning?,
        Err(error) => {
            tracing::warn!(pod = key, %error, "ignoring the pod's start model: starting it at once");
            return None;
        }
    };
    let delays = pod_start::draw(&provisioning, key, pod);
    let scheduled = pod_start::scheduled_at(pod);
    Some(starts.lock().due(key, node, scheduled, now, &delays))
}

/// Deleted pods never reach `reconcile`; their IPs are released once the watch's store no
/// longer has them. The start model forgets gone nodes and pods here too.
async fn sweep_deleted(ctx: Context, store: Store<BoundPod>, starts: Starts) {
    if store.wait_until_ready().await.is_err() {
        return;
    }
    let mut ticker = tokio::time::interval(SWEEP);
    loop {
        ticker.tick().await;
        let keys = ctx.index().pod_keys();
        let gone: Vec<_> = keys
            .into_iter()
            .filter(|key| {
                let (namespace, name) = key.split_once('/').unwrap_or(("", key));
                store.get(&ObjectRef::new(name).within(namespace)).is_none()
            })
            .collect();
        if !gone.is_empty() {
            let mut index = ctx.index();
            for key in gone {
                index.forget_pod(&key);
            }
        }
        forget_gone(&ctx, &store, &starts);
    }
}

/// Drops the images of nodes no longer the pool's and the first-seen times of pods gone.
fn forget_gone(ctx: &Context, store: &Store<BoundPod>, starts: &Starts) {
    // The two locks are taken one after the other, never together.
    let nodes = starts.lock().nodes();
    let gone: Vec<String> = {
        let index = ctx.index();
        nodes
            .into_iter()
            .filter(|node| !index.is_ours(node))
            .collect()
    };
    let mut starts = starts.lock();
    for node in &gone {
        starts.forget_node(node);
    }
    starts.retain_pods(|key| {
        let (namespace, name) = key.split_once('/').unwrap_or(("", key));
        store.get(&ObjectRef::new(name).within(namespace)).is_some()
    });
}

fn reported_no_ip(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.reason.as_deref() == Some(SANDBOX_FAILED_REASON) && c.status == "False")
        })
}

fn node_name(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

fn uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or_default()
}

fn key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}
