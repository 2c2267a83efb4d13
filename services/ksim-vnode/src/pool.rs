//! The running pool: starts from what the cluster already holds (adoption), runs the
//! controllers, and offers the operations the gRPC API maps to.

use std::{
    net::Ipv4Addr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::StreamExt;
use ipnet::Ipv4Net;
use k8s_openapi::jiff::Timestamp;
use ksim_kube::simulation;
use ksim_provisioning::{GroupProvisioning, ModelError};
use kube::Client;
use tokio::{sync::Notify, task::JoinSet};

use crate::{
    apiserver::{GroupStore, NodeClient, PodClient, StoredGroup},
    config::PoolConfig,
    controllers::{
        self, Context,
        heartbeats::NodeLease,
        kubelet::{self, Endpoints, KubeletError},
    },
    domain::{
        cidr::{CidrError, PodCidrPool},
        groups::{GroupError, validate_count, validate_group_name},
        heartbeat::{LeaseError, check_lease},
        limits,
        node::{provider_id, seat_host_skeleton},
        pod::{self, PodPhase},
        provisioning,
        skeleton::{NodeSkeleton, SkeletonError},
        usage::{self, ContainerReading, ContainerUsage, UsageError},
    },
    index::{Group, GroupSource, NodeNamesError, NodeState, PhaseCounts, PoolIndex},
    metrics::Metrics,
};

#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error(transparent)]
    InvalidGroup(#[from] GroupError),
    #[error("invalid node skeleton: {0}")]
    Skeleton(#[from] SkeletonError),
    #[error("provisioning_json: {0}")]
    Provisioning(#[from] ModelError),
    #[error("unknown node group {0:?}")]
    UnknownGroup(String),
    #[error("node group {0:?} already exists")]
    GroupExists(String),
    #[error("node group {0:?} is backed by a Deployment: scale or delete the Deployment instead")]
    NotPoolManaged(String),
    #[error("node group {0:?} is Karpenter's NodePool: Karpenter sizes it")]
    KarpenterGroup(String),
    #[error(
        "pod CIDR pool exhausted: node group {group:?} needs {needed} more node CIDRs, {available} are free"
    )]
    CidrExhausted {
        group: String,
        needed: usize,
        available: usize,
    },
    #[error("invalid pod CIDR configuration: {0}")]
    Cidr(#[from] CidrError),
    #[error("apiserver: {0}")]
    Kube(#[from] kube::Error),
    #[error("usage of pod {pod}: {source}")]
    Usage { pod: String, source: UsageError },
    #[error("{0} pods in one usage request; at most {MAX_USAGE_PODS} are accepted")]
    TooManyUsagePods(usize),
    #[error("kubelet endpoints: {0}")]
    Kubelet(#[from] KubeletError),
    #[error(transparent)]
    NodeNames(#[from] NodeNamesError),
    #[error(transparent)]
    Lease(#[from] LeaseError),
    #[error(
        "node group {group:?} is simulation {simulation}'s, which is running (it holds the \
         driver's lease and its root lists the group): cancel it or wait for it to end; its \
         cleanup deletes the group"
    )]
    HeldBySimulation { group: String, simulation: String },
}

/// What the pool reads of the simulation holding the driver's Lease: its id and root.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RunningRoot {
    simulation: String,
    /// The root is being deleted (foreground): the run has ended and is cleaning up.
    deleting: bool,
    pool_groups: Vec<String>,
}

/// The simulation that `group` may not be deleted under, if any. A caller's word cannot be
/// checked, so the decision rests on what the apiserver says: the group is refused while the
/// simulation that holds the driver's Lease has a live root listing it. The driver's own
/// cleanup deletes its groups only after its root is gone, so it is never refused; a root
/// left by a driver that died no longer has a live lease, so it holds nothing either.
fn held_by<'a>(group: &str, running: Option<&'a RunningRoot>) -> Option<&'a str> {
    let running = running?;
    (!running.deleting && running.pool_groups.iter().any(|g| g == group))
        .then_some(running.simulation.as_str())
}

/// What [`held_by`] reads of the root of `simulation`.
fn running_root(simulation: String, root: &kube::api::DynamicObject) -> RunningRoot {
    let pool_groups = simulation::pool_groups(root.metadata.annotations.as_ref());
    RunningRoot {
        simulation,
        deleting: root.metadata.deletion_timestamp.is_some(),
        pool_groups,
    }
}

/// Most pods one usage request sets: a bound on what one request holds in memory.
pub const MAX_USAGE_PODS: usize = 10_000;

/// A pod's usage as a caller sets it; no containers clears it.
#[derive(Debug, Clone)]
pub struct PodUsageUpdate {
    pub namespace: String,
    pub name: String,
    pub containers: Vec<ContainerUsage>,
}

/// What a usage request did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UsageApplied {
    pub applied: u32,
    pub not_running: u32,
    /// Containers this request's usage put above their memory limit.
    pub oom_kills: Vec<OomKill>,
    /// Throttled CPU-seconds accrued since each pod's previous set, per container with any.
    pub throttled: Vec<Throttling>,
    /// Pods evicted because this request left their node short of memory.
    pub evicted: Vec<Eviction>,
}

/// A pod the node's kubelet evicted for memory pressure (`domain::limits::node_pressure`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    pub namespace: String,
    pub name: String,
    pub node: String,
    /// The message written on the pod: the threshold and what was available.
    pub message: String,
}

/// A container the kernel killed for memory above its limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OomKill {
    pub namespace: String,
    pub name: String,
    pub container: String,
    /// Whether it runs again (restart policy Always or OnFailure).
    pub restarted: bool,
}

/// CPU a container wanted beyond its limit and did not get.
#[derive(Debug, Clone, PartialEq)]
pub struct Throttling {
    pub namespace: String,
    pub name: String,
    pub container: String,
    pub cpu_seconds: f64,
}

/// A metered running pod's usage at a time.
#[derive(Debug, Clone)]
pub struct PodReading {
    pub namespace: String,
    pub name: String,
    pub node: String,
    pub containers: Vec<ContainerReading>,
}

/// A node group as the API shows it.
#[derive(Debug, Clone)]
pub struct GroupView {
    pub name: String,
    pub source: GroupSource,
    pub desired: u32,
    pub registered: u32,
    pub ready: u32,
    pub skeleton: Arc<NodeSkeleton>,
    pub created: Timestamp,
    /// The name of the provisioning model the group's nodes follow, if any.
    pub provisioning_model: Option<String>,
}

/// A node as the API shows it.
#[derive(Debug, Clone)]
pub struct NodeView {
    pub name: String,
    pub group: String,
    pub provider_id: String,
    pub ready: bool,
    pub pod_cidr: Ipv4Net,
    pub internal_ip: Ipv4Addr,
    pub pods: PhaseCounts,
    pub last_heartbeat: Option<Timestamp>,
    pub created: Timestamp,
    /// Stopped by [`Pool::fail_nodes`] and not recovered since.
    pub failed: bool,
}

#[derive(Debug, Clone, Copy)]
pub struct PoolStats {
    pub nodes_total: u64,
    pub nodes_ready: u64,
    pub pods: PhaseCounts,
    pub renewals_per_second: f64,
    pub api_errors: u64,
    pub ip_exhaustions: u64,
    pub node_groups: u64,
}

/// A running pool. Dropping it stops its controllers (the nodes stay, to be adopted).
#[derive(Debug)]
pub struct Pool {
    ctx: Context,
    store: GroupStore,
    // Serialises group changes so checks and writes of one request are not interleaved.
    changes: tokio::sync::Mutex<()>,
    _tasks: JoinSet<()>,
}

impl Pool {
    pub async fn start(client: Client, config: PoolConfig) -> Result<Self, PoolError> {
        let cidrs = PodCidrPool::new(config.pod_cidr_pool, config.node_cidr_prefix)?;
        let endpoints = Endpoints::new(&config.kubelet, config.pod_cidr_pool)?.map(Arc::new);
        let mut index = PoolIndex::new(&config.pool_name, cidrs);
        let store = GroupStore::new(client.clone(), &config.namespace, &config.pool_name);
        for stored in store.load().await? {
            let skeleton = match NodeSkeleton::from_yaml(&stored.skeleton_yaml) {
                Ok(skeleton) => skeleton,
                Err(error) => {
                    tracing::warn!(group = stored.name, %error, "stored node group skipped");
                    continue;
                }
            };
            // Checked when the group was created; a model unreadable now runs no delays.
            let provisioning =
                provisioning::parse(&stored.provisioning_json).unwrap_or_else(|error| {
                    tracing::warn!(group = stored.name, %error,
                        "stored provisioning model unreadable; the group runs without delays");
                    None
                });
            index.upsert_group(Group {
                name: stored.name,
                skeleton: Arc::new(skeleton),
                // Nodes not registered before the restart count their delay from now.
                source: GroupSource::PoolManaged {
                    desired: stored.desired,
                    scaled_up: Timestamp::now(),
                },
                created: Timestamp::now(),
                provisioning,
            });
        }
        if config.seat_host {
            let group = config.seat_host_group();
            index.mark_host_network(&crate::domain::groups::pool_node_name(&group, 0));
            index.upsert_internal_group(Group {
                name: group,
                skeleton: Arc::new(seat_host_skeleton()),
                source: GroupSource::PoolManaged {
                    desired: 1,
                    scaled_up: Timestamp::now(),
                },
                created: Timestamp::now(),
                provisioning: None,
            });
        }
        let nodes = NodeClient::new(client.clone(), &config.pool_name);
        let existing = nodes.list_pool_nodes(&config.pool_name).await?;
        for node in &existing {
            if let Err(error) = index.adopt_node(node) {
                tracing::warn!(%error, "existing node not adopted");
            }
        }
        // Adopted nodes advertise the endpoint this run serves (or none), whatever the
        // previous run's flags were.
        kubelet::readvertise(&nodes, &index, endpoints.as_deref(), &existing).await?;
        let config_lease = config.lease_duration();
        let ctx = Context {
            pods: PodClient::new(client.clone(), &config.pool_name),
            config: Arc::new(config),
            index: Arc::new(Mutex::new(index)),
            metrics: Arc::new(Metrics::default()),
            nodes,
            client,
            reconcile_nodes: Arc::new(Notify::new()),
            kubelet: endpoints.clone(),
            lease: Arc::new(NodeLease::new(config_lease)),
            nodes_recovered: Arc::new(Notify::new()),
        };
        // Leases first: adopted nodes must not wait for anything else to be renewed.
        let mut tasks = JoinSet::new();
        tasks.spawn(controllers::heartbeats::run(ctx.clone()));
        controllers::pods::adopt_existing(&ctx).await?;
        tasks.spawn(controllers::nodes::run(ctx.clone()));
        tasks.spawn(controllers::pods::run(ctx.clone()));
        tasks.spawn(controllers::seats::run(ctx.clone()));
        if ctx.config.karpenter {
            tasks.spawn(controllers::karpenter::run(ctx.clone()));
        }
        if let Some(endpoints) = endpoints {
            tasks.spawn(kubelet::run(ctx.clone(), endpoints));
        }
        Ok(Self {
            ctx,
            store,
            changes: tokio::sync::Mutex::new(()),
            _tasks: tasks,
        })
    }

    pub fn metrics(&self) -> &Metrics {
        &self.ctx.metrics
    }

    /// Validates everything, stores the group, then lets the node controller create nodes.
    /// Nothing is written when any check fails.
    pub async fn create_group(
        &self,
        name: &str,
        skeleton_yaml: &str,
        count: i32,
    ) -> Result<GroupView, PoolError> {
        self.create_provisioned_group(name, skeleton_yaml, count, "")
            .await
    }

    /// [`Self::create_group`] with the group's provisioning model
    /// (`GroupProvisioning::to_json`; empty for none), checked before anything is written.
    pub async fn create_provisioned_group(
        &self,
        name: &str,
        skeleton_yaml: &str,
        count: i32,
        provisioning_json: &str,
    ) -> Result<GroupView, PoolError> {
        validate_group_name(name)?;
        let desired = validate_count(count)?;
        let skeleton = Arc::new(NodeSkeleton::from_yaml(skeleton_yaml)?);
        let provisioning: Option<GroupProvisioning> = provisioning::parse(provisioning_json)?;
        let _serial = self.changes.lock().await;
        {
            let index = self.ctx.index();
            if index.group(name).is_some() || index.is_internal_group(name) {
                return Err(PoolError::GroupExists(name.to_owned()));
            }
            check_cidrs(&index, name, desired as usize)?;
        }
        self.store
            .save(&StoredGroup {
                name: name.to_owned(),
                skeleton_yaml: skeleton_yaml.to_owned(),
                desired,
                provisioning_json: provisioning
                    .as_ref()
                    .map(GroupProvisioning::to_json)
                    .unwrap_or_default(),
            })
            .await?;
        self.ctx.index().upsert_group(Group {
            name: name.to_owned(),
            skeleton,
            source: GroupSource::PoolManaged {
                desired,
                scaled_up: Timestamp::now(),
            },
            created: Timestamp::now(),
            provisioning,
        });
        self.ctx.reconcile_nodes.notify_one();
        self.group(name)
    }

    pub async fn scale_group(&self, name: &str, count: i32) -> Result<GroupView, PoolError> {
        let desired = validate_count(count)?;
        let _serial = self.changes.lock().await;
        {
            let index = self.ctx.index();
            self.pool_managed(&index, name)?;
            // Nodes shutting down are on their way out: they hold a podCIDR but not a place.
            let current = index
                .nodes_of(name)
                .filter(|node| node.terminating.is_none())
                .count();
            check_cidrs(&index, name, (desired as usize).saturating_sub(current))?;
        }
        self.store.set_desired(name, desired).await?;
        if let Some(group) = self.ctx.index().group_mut(name)
            && let GroupSource::PoolManaged {
                desired: before,
                scaled_up,
            } = &mut group.source
        {
            // New nodes count their registration delay from the request that asked for them.
            if desired > *before {
                *scaled_up = Timestamp::now();
            }
            *before = desired;
        }
        self.ctx.reconcile_nodes.notify_one();
        self.group(name)
    }

    /// Removes the group; the node controller then deletes its nodes. A group a running
    /// simulation created is refused (see [`held_by`]).
    pub async fn delete_group(&self, name: &str) -> Result<(), PoolError> {
        let _serial = self.changes.lock().await;
        self.pool_managed(&self.ctx.index(), name)?;
        let running = self.running_root().await?;
        if let Some(simulation) = held_by(name, running.as_ref()) {
            return Err(PoolError::HeldBySimulation {
                group: name.to_owned(),
                simulation: simulation.to_owned(),
            });
        }
        self.store.delete(name).await?;
        self.ctx.index().remove_group(name);
        self.ctx.reconcile_nodes.notify_one();
        Ok(())
    }

    /// The simulation holding the driver's Lease and its root; `None` when none holds it or
    /// its root does not exist.
    async fn running_root(&self) -> Result<Option<RunningRoot>, PoolError> {
        match simulation::running(&self.ctx.client, &self.ctx.config.namespace).await {
            Ok(running) => Ok(running.and_then(|running| {
                let root = running.root?;
                Some(running_root(running.simulation, &root))
            })),
            Err(error) => unreadable(error),
        }
    }

    /// Ok if `name` is a pool-managed group, otherwise why it is not one.
    fn pool_managed(&self, index: &PoolIndex, name: &str) -> Result<(), PoolError> {
        match index.group(name) {
            Some(group) if !index.is_internal_group(name) => match group.source {
                GroupSource::PoolManaged { .. } => Ok(()),
                GroupSource::Deployment { .. } => Err(PoolError::NotPoolManaged(name.to_owned())),
                GroupSource::Karpenter => Err(PoolError::KarpenterGroup(name.to_owned())),
            },
            _ => Err(PoolError::UnknownGroup(name.to_owned())),
        }
    }

    pub fn group(&self, name: &str) -> Result<GroupView, PoolError> {
        let index = self.ctx.index();
        index
            .groups()
            .find(|group| group.name == name)
            .map(|group| group_view(&index, group))
            .ok_or_else(|| PoolError::UnknownGroup(name.to_owned()))
    }

    pub fn groups(&self) -> Vec<GroupView> {
        let index = self.ctx.index();
        index
            .groups()
            .map(|group| group_view(&index, group))
            .collect()
    }

    /// Registered nodes sorted by name, of one group or of all listed groups.
    pub fn nodes(&self, group: Option<&str>) -> Result<Vec<NodeView>, PoolError> {
        let index = self.ctx.index();
        if let Some(group) = group
            && index.groups().all(|g| g.name != group)
        {
            return Err(PoolError::UnknownGroup(group.to_owned()));
        }
        Ok(index
            .nodes()
            .filter(|node| {
                node.state == NodeState::Registered && !index.is_internal_group(&node.group)
            })
            .filter(|node| group.is_none_or(|group| node.group == group))
            .map(|node| NodeView {
                name: node.name.clone(),
                group: node.group.clone(),
                provider_id: provider_id(&node.group, &node.name),
                ready: node.is_ready(),
                pod_cidr: node.pod_cidr,
                internal_ip: node.internal_ip(),
                pods: index.pod_counts(Some(&node.name)),
                last_heartbeat: node.last_heartbeat,
                created: node.created,
                failed: node.failed,
            })
            .collect())
    }

    /// Stops the named nodes as machines that lost power would (see `FailNodes`); every name
    /// is checked before any node changes.
    pub fn fail_nodes(&self, names: &[String]) -> Result<(), PoolError> {
        let failed = {
            let mut index = self.ctx.index();
            let failed = index.fail_nodes(names)?;
            self.ctx
                .metrics
                .failed_nodes
                .set(gauge(index.failed_nodes()));
            failed
        };
        if !failed.is_empty() {
            tracing::info!(nodes = ?failed, "nodes failed");
        }
        Ok(())
    }

    /// Brings failed nodes back: their lease and status are written at once and their pods
    /// handled again. Every name is checked before any node changes.
    pub fn recover_nodes(&self, names: &[String]) -> Result<(), PoolError> {
        let recovered = {
            let mut index = self.ctx.index();
            let recovered = index.recover_nodes(names, Timestamp::now(), Instant::now())?;
            self.ctx
                .metrics
                .failed_nodes
                .set(gauge(index.failed_nodes()));
            recovered
        };
        if !recovered.is_empty() {
            tracing::info!(nodes = ?recovered, "nodes recovered");
            self.ctx.nodes_recovered.notify_one();
            // A node that was booting may be due its Ready write.
            self.ctx.reconcile_nodes.notify_one();
        }
        Ok(())
    }

    /// Sets the lease every node holds from now on (`None`: the pool's own); the lease in
    /// force.
    pub fn set_node_lease(&self, lease: Option<Duration>) -> Result<Duration, PoolError> {
        let lease = lease.map(check_lease).transpose()?;
        Ok(self.ctx.lease.set(lease))
    }

    /// The lease the nodes hold now.
    pub fn node_lease(&self) -> Duration {
        self.ctx.lease.get()
    }

    /// Sets the usage of running pods from `now` on, as their limits let them: every pod is
    /// checked before any applies. Containers killed for memory, and pods evicted from a node
    /// the new usage left short of memory, get the status a kubelet would write before this
    /// returns; a write that fails is logged and counted as an API error, and the kill or
    /// eviction still stands (the pool no longer runs an evicted pod).
    pub async fn set_pod_usage(
        &self,
        pods: Vec<PodUsageUpdate>,
        now: Timestamp,
    ) -> Result<UsageApplied, PoolError> {
        let applied = self.apply_pod_usage(pods, now)?;
        self.write_oom_kills(&applied.oom_kills, now).await;
        // After the kills: an evicted pod's status follows its containers' latest state.
        self.write_evictions(&applied.evicted, now).await;
        Ok(applied)
    }

    fn apply_pod_usage(
        &self,
        pods: Vec<PodUsageUpdate>,
        now: Timestamp,
    ) -> Result<UsageApplied, PoolError> {
        if pods.len() > MAX_USAGE_PODS {
            return Err(PoolError::TooManyUsagePods(pods.len()));
        }
        for pod in pods.iter().filter(|pod| !pod.containers.is_empty()) {
            usage::validate(&pod.containers).map_err(|source| PoolError::Usage {
                pod: format!("{}/{}", pod.namespace, pod.name),
                source,
            })?;
        }
        let mut index = self.ctx.index();
        let mut outcome = UsageApplied::default();
        // Nodes whose pods' usage changed: the only ones that can have come under pressure.
        let mut touched = std::collections::BTreeSet::new();
        for pod in pods {
            let key = format!("{}/{}", pod.namespace, pod.name);
            if let Some(node) = index.pod_node(&key) {
                touched.insert(node.to_owned());
            }
            let applied = if pod.containers.is_empty() {
                index.clear_pod_usage(&key) || index.runs_pod(&key)
            } else {
                let events = index
                    .set_pod_usage(&key, pod.containers, now)
                    .map_err(|source| PoolError::Usage { pod: key, source })?;
                if let Some(events) = &events {
                    outcome
                        .oom_kills
                        .extend(events.oom_killed.iter().map(|container| OomKill {
                            namespace: pod.namespace.clone(),
                            name: pod.name.clone(),
                            container: container.clone(),
                            restarted: events.restarts,
                        }));
                    outcome.throttled.extend(events.throttled.iter().map(
                        |(container, cpu_seconds)| Throttling {
                            namespace: pod.namespace.clone(),
                            name: pod.name.clone(),
                            container: container.clone(),
                            cpu_seconds: *cpu_seconds,
                        },
                    ));
                }
                events.is_some()
            };
            if applied {
                outcome.applied += 1;
            } else {
                outcome.not_running += 1;
            }
        }
        for (node, pressure) in index.memory_pressure(&touched) {
            let message = limits::eviction_message(pressure.available);
            for key in pressure.evicted {
                // Stops running now, as the kubelet kills it at once (hard threshold): the
                // status write follows, and the watch confirms it.
                index.pod_finished(&key, PodPhase::Failed);
                let (namespace, name) = key.split_once('/').unwrap_or(("", &key));
                outcome.evicted.push(Eviction {
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                    node: node.clone(),
                    message: message.clone(),
                });
            }
        }
        self.ctx
            .metrics
            .oom_kills
            .inc_by(outcome.oom_kills.len() as u64);
        self.ctx
            .metrics
            .evictions
            .inc_by(outcome.evicted.len() as u64);
        Ok(outcome)
    }

    /// Writes each OOM-killed pod's status, a few pods at a time. The pod is read first: the
    /// status a kubelet writes follows the containers' current state (their restart counts).
    async fn write_oom_kills(&self, kills: &[OomKill], now: Timestamp) {
        // One write per pod, however many of its containers were killed (kills come grouped).
        // Owned, so the writes' futures borrow nothing (a Send future over borrowed tuples
        // trips the compiler's higher-ranked lifetime checks).
        let mut pods: Vec<(String, String, Vec<String>)> = Vec::new();
        for kill in kills {
            match pods.last_mut() {
                Some((namespace, name, containers))
                    if *namespace == kill.namespace && *name == kill.name =>
                {
                    containers.push(kill.container.clone());
                }
                _ => pods.push((
                    kill.namespace.clone(),
                    kill.name.clone(),
                    vec![kill.container.clone()],
                )),
            }
        }
        let writes = pods.into_iter().map(|(namespace, name, killed)| async move {
            if let Err(error) = self.write_oom_kill(&namespace, &name, &killed, now).await {
                self.ctx.metrics.api_errors.inc();
                tracing::warn!(pod = format!("{namespace}/{name}"), %error, "writing an OOM kill");
            }
        });
        futures::stream::iter(writes)
            .buffer_unordered(usize::from(self.ctx.config.api_concurrency.max(1)))
            .collect::<()>()
            .await;
    }

    async fn write_oom_kill(
        &self,
        namespace: &str,
        name: &str,
        killed: &[String],
        now: Timestamp,
    ) -> Result<(), kube::Error> {
        let Some(pod) = self.ctx.pods.get(namespace, name).await? else {
            return Ok(());
        };
        let status = pod::oom_killed_status(&pod, killed, now);
        self.ctx.pods.write_status(&pod, &status).await?;
        if status.phase.as_deref() == Some(PodPhase::Failed.as_str()) {
            self.ctx
                .index()
                .pod_finished(&format!("{namespace}/{name}"), PodPhase::Failed);
        }
        Ok(())
    }

    /// Writes each evicted pod's status, a few pods at a time, reading the pod first (the
    /// status keeps its containers' IDs and restart counts).
    async fn write_evictions(&self, evictions: &[Eviction], now: Timestamp) {
        let writes = evictions.iter().cloned().map(|eviction| async move {
            let Eviction {
                namespace,
                name,
                message,
                ..
            } = eviction;
            if let Err(error) = self.write_eviction(&namespace, &name, &message, now).await {
                self.ctx.metrics.api_errors.inc();
                tracing::warn!(pod = format!("{namespace}/{name}"), %error, "writing an eviction");
            }
        });
        futures::stream::iter(writes)
            .buffer_unordered(usize::from(self.ctx.config.api_concurrency.max(1)))
            .collect::<()>()
            .await;
    }

    async fn write_eviction(
        &self,
        namespace: &str,
        name: &str,
        message: &str,
        now: Timestamp,
    ) -> Result<(), kube::Error> {
        let Some(pod) = self.ctx.pods.get(namespace, name).await? else {
            return Ok(());
        };
        // Gone already (an OOM kill under restart policy Never failed it): nothing to evict.
        if pod::is_terminal(&pod) {
            return Ok(());
        }
        let status = pod::evicted_status(&pod, message, now);
        self.ctx.pods.write_status(&pod, &status).await
    }

    /// Every metered running pod's usage at `now`.
    pub fn pod_readings(&self, now: Timestamp) -> Vec<PodReading> {
        let index = self.ctx.index();
        index
            .pod_usage()
            .map(|pod| PodReading {
                namespace: pod.namespace().to_owned(),
                name: pod.name().to_owned(),
                node: pod.node.to_owned(),
                containers: pod.meter.read(now),
            })
            .collect()
    }

    pub fn stats(&self) -> PoolStats {
        let index = self.ctx.index();
        let nodes = index.nodes().filter(|node| {
            node.state == NodeState::Registered && !index.is_internal_group(&node.group)
        });
        let (mut total, mut ready) = (0, 0);
        for node in nodes {
            total += 1;
            ready += u64::from(node.is_ready());
        }
        let metrics = &self.ctx.metrics;
        PoolStats {
            nodes_total: total,
            nodes_ready: ready,
            pods: index.pod_counts(None),
            renewals_per_second: metrics.renewals_per_second(),
            api_errors: metrics.api_errors.get(),
            ip_exhaustions: metrics.ip_exhaustions.get(),
            node_groups: index.groups().count() as u64,
        }
    }
}

/// A Lease or root the pool may not read (403: a cluster whose RBAC predates the check) holds
/// nothing back, as before it, rather than failing the driver's own cleanup; anything else
/// fails the delete.
fn unreadable(error: kube::Error) -> Result<Option<RunningRoot>, PoolError> {
    if ksim_kube::status_code(&error) == Some(403) {
        tracing::warn!(%error, "cannot read the driver's lease or a simulation root: a running simulation's groups are not protected");
        return Ok(None);
    }
    Err(PoolError::Kube(error))
}

fn gauge(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

fn check_cidrs(index: &PoolIndex, group: &str, needed: usize) -> Result<(), PoolError> {
    let available = index.free_cidrs();
    if needed > available {
        return Err(PoolError::CidrExhausted {
            group: group.to_owned(),
            needed,
            available,
        });
    }
    Ok(())
}

fn group_view(index: &PoolIndex, group: &Group) -> GroupView {
    let nodes: Vec<_> = index
        .nodes_of(&group.name)
        .filter(|node| node.state == NodeState::Registered)
        .collect();
    let desired = match &group.source {
        GroupSource::PoolManaged { desired, .. } => *desired,
        GroupSource::Deployment { seats, .. } => seats.len() as u32,
        // Karpenter wants what it launched.
        GroupSource::Karpenter => index.nodes_of(&group.name).count() as u32,
    };
    GroupView {
        name: group.name.clone(),
        source: group.source.clone(),
        desired,
        registered: nodes.len() as u32,
        ready: nodes.iter().filter(|node| node.is_ready()).count() as u32,
        skeleton: group.skeleton.clone(),
        created: group.created,
        provisioning_model: group.provisioning.as_ref().map(|p| p.model.clone()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube::api::DynamicObject;

    use super::*;
    use tonic::Status;

    fn root(groups: Option<&str>, deleting: bool) -> DynamicObject {
        let mut root = DynamicObject::new("sim-5f-1", &simulation::root_resource());
        root.metadata.annotations = groups.map(|groups| {
            [(
                simulation::POOL_GROUPS_ANNOTATION.to_owned(),
                groups.to_owned(),
            )]
            .into()
        });
        root.metadata.deletion_timestamp = deleting.then(|| Time(Timestamp::now()));
        root
    }

    #[test]
    fn a_group_a_running_simulations_root_lists_is_held_until_its_root_goes() {
        let running = running_root("5f-1".to_owned(), &root(Some("small,big"), false));
        assert_eq!(running.pool_groups, ["small", "big"]);
        assert_eq!(held_by("small", Some(&running)), Some("5f-1"));
        assert_eq!(held_by("big", Some(&running)), Some("5f-1"));
        // Not the run's: the environment's or another's.
        assert_eq!(held_by("other", Some(&running)), None);
        // Its cleanup deletes the root first.
        let ending = running_root("5f-1".to_owned(), &root(Some("small"), true));
        assert_eq!(held_by("small", Some(&ending)), None);
        let none_recorded = running_root("5f-1".to_owned(), &root(None, false));
        assert_eq!(held_by("small", Some(&none_recorded)), None);
        assert_eq!(held_by("small", None), None);

        let refused = Status::from(PoolError::HeldBySimulation {
            group: "small".to_owned(),
            simulation: "5f-1".to_owned(),
        });
        assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
        assert!(refused.message().contains("simulation 5f-1"), "{refused:?}");
    }

    #[test]
    fn node_names_and_leases_refused_map_to_their_codes() {
        let code = |error: PoolError| Status::from(error).code();
        assert_eq!(
            code(NodeNamesError::Unknown("g-9".to_owned()).into()),
            tonic::Code::NotFound
        );
        assert_eq!(
            code(NodeNamesError::Empty.into()),
            tonic::Code::InvalidArgument
        );
        assert_eq!(
            code(NodeNamesError::Repeated("g-0".to_owned()).into()),
            tonic::Code::InvalidArgument
        );
        let short = check_lease(Duration::from_millis(1)).unwrap_err();
        assert_eq!(code(short.into()), tonic::Code::InvalidArgument);
    }
}
