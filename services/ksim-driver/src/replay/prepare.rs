//! The prepare phase, getting the cluster ready for a replay: the simulation root, the plan
//! of the trace's steps, the watches that observe the run, the simulation's namespaces, its node
//! groups (pool groups through the pool's API, seat Deployments for cluster-autoscaler), and
//! waiting until the nodes are Ready and the cloud provider offers the autoscaled groups.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::Duration,
};

use ksim_nodes::labels::PROVISIONING_ANNOTATION;
use ksim_nodes::skeleton::NodeSkeleton;
use ksim_provisioning::{GroupProvisioning, Model};
use tokio::{sync::mpsc, time::Instant};
use tokio_util::task::AbortOnDropHandle;

use super::{cleanup::Created, context::RunContext, handle::Handle};
use crate::{
    cluster::{
        ClusterError,
        applier::Applier,
        launch_lifetimes::{self, UsageFeed},
        namespaces,
        nodepools::{self, NodePoolError},
        observer::Observer,
        replicas::ReplicaWatch,
        root, seats,
    },
    domain::{
        RootRef, SIMULATION_LABEL, autoscaled,
        launches::Launches,
        lifetimes::Lifetimes,
        nodepool,
        plan::{Plan, plan, template_paths},
        report::GroupPrice,
        rewrite::{RewriteOptions, Rewriter},
        run::ResolvedRun,
        spec::{NodeGroup, SimulationSpec},
        usage::{RecordedUsage, Roster},
        warnings::{self, OfferedGroup, StartupTime},
    },
    mesh::MeshError,
};

/// What stops a simulation before its first event is applied.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// Installing the root's CRD, creating or recording the root, reading or creating a
    /// namespace, creating a seat Deployment.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error(
        "namespace {name} {}; choose another namespace prefix or delete it",
        whose(.owner.as_deref())
    )]
    NamespaceTaken { name: String, owner: Option<String> },
    #[error("creating node group {name}: {source}")]
    PoolGroup { name: String, source: MeshError },
    /// The pool group exists, but a restarted driver would not know to delete it.
    #[error("recording node group {name} on the simulation root: {}", .source.answer())]
    RecordGroup { name: String, source: ClusterError },
    #[error(
        "node group {name} already exists (its seat Deployment is in namespace {namespace}); \
         choose another name"
    )]
    GroupExists { name: String, namespace: String },
    #[error("running the scheduler and cluster-autoscaler with the configuration: {0}")]
    Configuration(#[source] MeshError),
    #[error("giving the pool's nodes leases at the replay's speed: {0}")]
    NodeLease(#[source] MeshError),
    #[error("asking the cloud provider for its node groups: {0}")]
    CloudProvider(#[source] MeshError),
    #[error("enable_autoscaler needs the driver's --cloudprov-url")]
    NoCloudProvider,
    #[error("the cloud provider does not offer node groups {0:?} to cluster-autoscaler")]
    NotOffered(Vec<String>),
    #[error(transparent)]
    NodePool(#[from] NodePoolError),
    #[error("node groups were not Ready after {after:?}: {}", .short.join(", "))]
    NotReady {
        after: Duration,
        /// Each group short of nodes, with its Ready and wanted counts.
        short: Vec<String>,
    },
}

/// What the prepare phase leaves the others: the plan, the cluster it is applied to, the
/// watches on what the cluster does, and what the report needs from the providers.
#[derive(Debug)]
pub struct Prepared {
    /// The simulation root, owner of what the run creates.
    pub root: RootRef,
    pub plan: Plan,
    pub applier: Arc<Applier>,
    pub observer: Arc<Observer>,
    pub prices: BTreeMap<String, GroupPrice>,
    pub warnings: Vec<String>,
    /// Matches started pods to their recorded launches while the replay runs.
    pub matching: Option<AbortOnDropHandle<()>>,
    /// The recorded usage and the running pods it is shared among, when the trace holds usage.
    pub usage: Option<UsageFeed>,
    /// Who decided replica counts; `None` when the trace holds no HPA.
    pub workload_scaling: Option<ksim_report::WorkloadScaling>,
    /// The scaled workloads' replicas, recorded and watched; `None` without any.
    pub replicas: Option<Arc<ReplicaWatch>>,
}

/// Prepares the cluster for the resolved `run` with the `configuration` the configure phase
/// applied; `None` when the simulation was cancelled meanwhile. Everything it creates is added
/// to `created` as it goes, for the cleanup.
pub async fn prepare(
    ctx: &RunContext,
    handle: &Handle,
    run: &ResolvedRun,
    configuration: Option<&ksim_report::AppliedConfiguration>,
    created: &mut Created,
) -> Result<Option<Prepared>, PrepareError> {
    let (spec, trace, model) = (&run.spec, &run.trace, &run.provisioning.model);
    root::ensure_crd(&ctx.client, ctx.settings.ready_deadline).await?;
    let root = root::create(&ctx.client, &handle.id).await?;
    created.root = Some(root.clone());
    root::record(&ctx.client, &handle.id, &[], spec.enable_autoscaler).await?;

    let lifetimes = Lifetimes::from_lifecycles(&trace.lifecycles);
    let groups: BTreeSet<String> = spec
        .node_groups
        .iter()
        .map(|g| g.name().to_owned())
        .collect();
    let rewriter = Rewriter::new(
        RewriteOptions {
            simulation_id: handle.id.clone(),
            namespace_prefix: spec.namespace_prefix.clone(),
            speed: spec.speed,
            root: root.clone(),
            template_paths: template_paths(&trace.header),
            node_groups: spec
                .node_groups
                .iter()
                .map(|g| g.name().to_owned())
                .collect(),
            provisioning: Some(model.clone()),
            node_failures: spec.has_disruptions(),
            explain: spec.explain.clone(),
        },
        &lifetimes,
    );
    let mut plan = plan(trace, &rewriter, spec.speed);
    // Read before `apply` takes the recorded counts of scaled workloads out of the plan.
    let recorded_replicas = autoscaled::recorded_replicas(&plan);
    let resolved = &run.replicas;
    let scaling = autoscaled::apply(&mut plan, resolved.source);
    tracing::info!(
        source = ?resolved.source,
        reason = %resolved.reason,
        hpas = scaling.hpas,
        scaled = scaling.scaled_workloads,
        not_replayed = scaling.not_replayed,
        "replica counts decided"
    );
    let workload_scaling = (scaling.hpas > 0).then(|| ksim_report::WorkloadScaling {
        source: resolved.source.to_proto() as i32,
        reason: resolved.reason.clone(),
        hpas: scaling.hpas,
        scaled_workloads: scaling.scaled_workloads,
        not_replayed: scaling.not_replayed,
        workloads: Vec::new(),
    });
    let recorded_usage = RecordedUsage::new(
        &trace.usage,
        &trace.lifecycles,
        trace
            .header
            .tracer_config
            .as_ref()
            .map_or(0, |c| c.usage_interval_ms),
    );
    if recorded_usage.ignored() > 0 {
        tracing::info!(
            ignored = recorded_usage.ignored(),
            "usage samples of pods the trace holds no lifecycle for are ignored"
        );
    }
    let usage = (recorded_usage.samples() > 0).then(|| UsageFeed {
        recorded: Arc::new(recorded_usage),
        roster: Arc::new(std::sync::Mutex::new(Roster::default())),
    });
    // Started pods are matched to their recorded launches (and join the usage roster) while
    // the replay runs.
    let (starts, matching) = if lifetimes.is_empty() && usage.is_none() {
        (None, None)
    } else {
        let (starts, started) = mpsc::unbounded_channel();
        let launches = Launches::new(lifetimes, spec.speed);
        let matching = launch_lifetimes::spawn(
            ctx.client.clone(),
            rewriter.clone(),
            launches,
            usage.clone(),
            started,
        );
        (Some(starts), Some(matching))
    };
    let replicas = (workload_scaling.is_some() && !recorded_replicas.is_empty()).then(|| {
        let named = recorded_replicas
            .into_iter()
            .map(|recorded| {
                let target = &recorded.target;
                let namespace = target
                    .namespace
                    .as_deref()
                    .map(|namespace| rewriter.recorded_namespace(namespace).unwrap_or(namespace))
                    .unwrap_or("");
                (
                    format!("{}/{namespace}/{}", target.gvk.kind, target.name),
                    recorded,
                )
            })
            .collect();
        Arc::new(ReplicaWatch::start(&ctx.client, named))
    });
    let observer = Arc::new(Observer::start(
        &ctx.client,
        &handle.id,
        groups,
        &ctx.settings.namespace,
        starts,
    ));
    tracing::info!(
        simulation = %handle.id,
        events = plan.events_total,
        cron_runs = plan.cron_runs,
        observed_only = plan.observed_only,
        "replay planned"
    );
    create_namespaces(ctx, &handle.id, &rewriter, &plan).await?;
    let applier = Arc::new(Applier::discover(ctx.client.clone(), &handle.id, &plan.kinds).await);
    created.autoscaled = spec.enable_autoscaler;
    let karpenter_notes = create_node_groups(ctx, handle, spec, &root, model, created).await?;
    if handle.cancel.is_cancelled() {
        return Ok(None);
    }
    wait_for_nodes(ctx, handle, spec, &observer).await?;
    let prices = prices(ctx, spec).await;
    let mut warnings = report_warnings(ctx, spec, configuration, model).await;
    warnings.extend(karpenter_notes);
    Ok(Some(Prepared {
        root,
        plan,
        applier,
        observer,
        prices,
        warnings,
        matching,
        usage,
        workload_scaling,
        replicas,
    }))
}

/// Each node group's instance type (from its skeleton) and the cloud provider's price of it.
async fn prices(ctx: &RunContext, spec: &SimulationSpec) -> BTreeMap<String, GroupPrice> {
    let mut prices = BTreeMap::new();
    for group in &spec.node_groups {
        // A NodePool's nodes are of the types Karpenter chooses: no one price for the group.
        let Some(skeleton) = group.skeleton_yaml() else {
            continue;
        };
        let instance_type = NodeSkeleton::from_yaml(skeleton)
            .ok()
            .and_then(|skeleton| skeleton.instance_type().map(str::to_owned))
            .unwrap_or_default();
        let per_hour = if instance_type.is_empty() {
            None
        } else {
            ctx.mesh.node_price_per_hour(&instance_type).await
        };
        prices.insert(
            group.name().to_owned(),
            GroupPrice {
                instance_type,
                per_hour,
            },
        );
    }
    prices
}

/// What the report warns of: the facts from the environment's configuration, the provider's
/// GetOptions answers and the model, decided by `domain::warnings`.
async fn report_warnings(
    ctx: &RunContext,
    spec: &SimulationSpec,
    configuration: Option<&ksim_report::AppliedConfiguration>,
    model: &Model,
) -> Vec<String> {
    let startup = StartupTime::of(configuration);
    if !spec.enable_autoscaler || startup == StartupTime::Unknown {
        return Vec::new();
    }
    let mut groups = Vec::new();
    for group in &spec.node_groups {
        // Only autoscaler groups are offered to CA; the pool's fixed groups never answer it.
        if let NodeGroup::Deployment { name, .. } = group {
            let answers = ctx.mesh.answers_group_options(name).await;
            groups.push(OfferedGroup::new(name, answers, model));
        }
    }
    warnings::warnings(&startup, &groups)
}

/// Whose a namespace is, when it is not this simulation's.
fn whose(owner: Option<&str>) -> String {
    owner.map_or_else(
        || "is not a simulation's".to_owned(),
        |other| format!("belongs to simulation {other}, still in the cluster"),
    )
}

/// Creates the simulation's namespaces. One that exists and is not this simulation's (another
/// simulation's, still in the cluster, or not a simulation's at all) fails the run before
/// anything is applied: taking it over would let this run's cleanup delete it.
pub async fn create_namespaces(
    ctx: &RunContext,
    id: &str,
    rewriter: &Rewriter,
    plan: &Plan,
) -> Result<(), PrepareError> {
    for name in &plan.namespaces {
        if let Some(existing) = namespaces::get(&ctx.client, name).await?
            && existing.simulation.as_deref() != Some(id)
        {
            return Err(PrepareError::NamespaceTaken {
                name: name.clone(),
                owner: existing.simulation,
            });
        }
        namespaces::apply(&ctx.client, name, &rewriter.namespace_object(name)).await?;
    }
    Ok(())
}

/// Creates the spec's node groups. Pool groups it created are added to `created` one by one,
/// so a failure half-way leaves the cleanup a list of exactly what is this run's; a group that
/// already exists fails the run and is left alone. Returns what the report says of each
/// NodePool: its durations as given and as run, and what Karpenter times undivided.
pub async fn create_node_groups(
    ctx: &RunContext,
    handle: &Handle,
    spec: &SimulationSpec,
    root: &RootRef,
    model: &Model,
    created: &mut Created,
) -> Result<Vec<String>, PrepareError> {
    let mut notes = Vec::new();
    for group in &spec.node_groups {
        match group {
            NodeGroup::Karpenter { name, nodepool } => {
                let owner = serde_json::json!({
                    "apiVersion": root.api_version, "kind": root.kind, "name": root.name,
                    "uid": root.uid, "blockOwnerDeletion": true, "controller": false,
                });
                // As an autoscaler group's: no delays, no annotation.
                let delays = GroupProvisioning::of(model, name, spec.speed);
                let provisioning =
                    (!delays.nodes.is_zero()).then(|| (PROVISIONING_ANNOTATION, delays.to_json()));
                let mut object = nodepool::for_simulation(
                    nodepool,
                    owner,
                    (SIMULATION_LABEL, &handle.id),
                    provisioning,
                );
                let dilated = nodepool::dilate(&mut object, spec.speed);
                notes.push(karpenter_note(name, spec.speed, &dilated));
                // Recorded first: a NodePool that exists was made by no one else's run.
                created.nodepools.push(name.clone());
                nodepools::create(&ctx.client, name, &object).await?;
            }
            NodeGroup::PoolManaged {
                name,
                skeleton_yaml,
                count,
            } => {
                ctx.mesh
                    .create_node_group(name, skeleton_yaml, *count)
                    .await
                    .map_err(|source| PrepareError::PoolGroup {
                        name: name.clone(),
                        source,
                    })?;
                created.pool_groups.push(name.clone());
                // On the root too, for a driver restarted after this one died.
                root::record(
                    &ctx.client,
                    &handle.id,
                    &created.pool_groups,
                    spec.enable_autoscaler,
                )
                .await
                .map_err(|source| PrepareError::RecordGroup {
                    name: name.clone(),
                    source,
                })?;
            }
            NodeGroup::Deployment {
                name,
                skeleton_yaml,
                min_size,
                max_size,
                initial_size,
            } => {
                let seat = seats::AutoscalerGroup {
                    name,
                    skeleton_yaml,
                    min_size: *min_size,
                    max_size: *max_size,
                    initial_size: *initial_size,
                };
                seats::create(
                    &ctx.client,
                    &ctx.settings.namespace,
                    &seat,
                    root,
                    &handle.id,
                )
                .await
                .map_err(|error| {
                    if error.is_conflict() {
                        PrepareError::GroupExists {
                            name: name.clone(),
                            namespace: ctx.settings.namespace.clone(),
                        }
                    } else {
                        PrepareError::Cluster(error)
                    }
                })?;
            }
        }
    }
    if spec.enable_autoscaler {
        wait_for_autoscaler_groups(ctx, spec).await?;
    }
    Ok(notes)
}

/// `Karpenter NodePool general at 10x: spec.disruption.consolidateAfter 30s runs as 3s; not
/// divided by the speed: ...`.
fn karpenter_note(name: &str, speed: f64, dilated: &[nodepool::Dilated]) -> String {
    let durations = if dilated.is_empty() {
        "no duration of its own to divide".to_owned()
    } else {
        dilated
            .iter()
            .map(|d| format!("{} {} runs as {}", d.field, d.given, d.as_run))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "Karpenter NodePool {name} at {speed}x: {durations}; not divided by the speed: {}",
        nodepool::NOT_DILATED
    )
}

/// cluster-autoscaler sees a group only through the cloud provider; a group it cannot see would
/// make an autoscaling simulation silently static.
async fn wait_for_autoscaler_groups(
    ctx: &RunContext,
    spec: &SimulationSpec,
) -> Result<(), PrepareError> {
    let wanted: BTreeSet<&str> = spec
        .node_groups
        .iter()
        .filter(|g| matches!(g, NodeGroup::Deployment { .. }))
        .map(NodeGroup::name)
        .collect();
    let started = Instant::now();
    loop {
        let offered = ctx
            .mesh
            .autoscaler_groups()
            .await
            .map_err(PrepareError::CloudProvider)?
            .ok_or(PrepareError::NoCloudProvider)?;
        let missing: Vec<String> = wanted
            .iter()
            .filter(|name| !offered.iter().any(|id| id == **name))
            .map(|name| (*name).to_owned())
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        if started.elapsed() >= ctx.settings.ready_deadline {
            return Err(PrepareError::NotOffered(missing));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

pub async fn wait_for_nodes(
    ctx: &RunContext,
    handle: &Handle,
    spec: &SimulationSpec,
    observer: &Observer,
) -> Result<(), PrepareError> {
    let started = Instant::now();
    loop {
        let sample = observer.sample();
        let short: Vec<String> = spec
            .node_groups
            .iter()
            .filter_map(|group| {
                let ready = sample.nodes.get(group.name()).map_or(0, |c| c.ready);
                let wanted = u64::try_from(group.initial_nodes()).unwrap_or(0);
                (ready < wanted).then(|| format!("{} ({ready}/{wanted} Ready)", group.name()))
            })
            .collect();
        if short.is_empty() || handle.cancel.is_cancelled() {
            return Ok(());
        }
        if started.elapsed() >= ctx.settings.ready_deadline {
            return Err(PrepareError::NotReady {
                after: ctx.settings.ready_deadline,
                short,
            });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_namespace_is_named_with_whose_it_is() {
        let theirs = PrepareError::NamespaceTaken {
            name: "virtual-shared".to_owned(),
            owner: Some("0abc-0002".to_owned()),
        };
        assert_eq!(
            theirs.to_string(),
            "namespace virtual-shared belongs to simulation 0abc-0002, still in the cluster; \
             choose another namespace prefix or delete it"
        );
        let nobodys = PrepareError::NamespaceTaken {
            name: "default".to_owned(),
            owner: None,
        };
        assert_eq!(
            nobodys.to_string(),
            "namespace default is not a simulation's; choose another namespace prefix or delete it"
        );
    }

    #[test]
    fn groups_the_cloud_provider_does_not_offer_are_listed() {
        let error = PrepareError::NotOffered(vec!["a".to_owned(), "b".to_owned()]);
        assert_eq!(
            error.to_string(),
            r#"the cloud provider does not offer node groups ["a", "b"] to cluster-autoscaler"#
        );
    }
}
