//! One simulation from start to end: prepare the cluster, apply events at their time, report.
//! Whatever happens (finish, cancel, failure), the cleanup runs and the lease is released.

use std::{
    any::Any,
    collections::{BTreeMap, BTreeSet},
    panic::AssertUnwindSafe,
    sync::Arc,
    time::Duration,
};

use futures::FutureExt;
use ksim_experiment::provisioning::Model;
use ksim_nodes::skeleton::NodeSkeleton;
use ksim_proto::ksim::driver::v1 as pb;
use ksim_trace::{
    Trace,
    time::{now_ms, timestamp},
};
use tokio::{sync::mpsc, time::Instant};

pub use super::context::RunContext;
use super::{
    bare_pods::Rescheduler,
    cleanup::{Created, cleanup},
    handle::Handle,
    live::Live,
    nodes_kept,
    prepare::{PrepareError, create_namespaces, create_node_groups, wait_for_nodes},
    progress::Progress,
    queue::{OpQueue, QueuedOp},
};
use crate::{
    cluster::{
        applier::Applier, launch_lifetimes, lease::SimulationLease, observer::Observer, root, seats,
    },
    domain::{
        launches::Launches,
        lifetimes::Lifetimes,
        nodes_kept::NodesKeptFold,
        outages,
        plan::{Step, StepKind, plan, template_paths},
        provisioning::{Chosen, learn},
        recorded::recorded_states,
        report::{self, AutoscalerOutage, GroupPrice},
        rewrite::{RewriteOptions, Rewriter},
        spec::{NodeGroup, OnError, SimulationSpec},
        warnings::{self, OfferedGroup, StartupTime},
    },
};

/// How the replay loop ended.
enum Ending {
    Finished,
    Cancelled,
    Failed(String),
}

pub async fn run(
    ctx: RunContext,
    handle: Arc<Handle>,
    spec: SimulationSpec,
    trace: Trace,
    lease: SimulationLease,
) {
    let renewing = tokio::spawn(renew(lease.clone(), handle.clone()));
    let mut created = Created::default();
    // A panic anywhere in the replay or the report ends the simulation FAILED with it, and
    // the cleanup and the lease release below still run.
    let replayed = AssertUnwindSafe(replay(&ctx, &handle, &spec, &trace, &mut created))
        .catch_unwind()
        .await;
    let ending = match replayed {
        Ok(Ok(ending)) => ending,
        Ok(Err(error)) => Ending::Failed(error.to_string()),
        Err(panic) => Ending::Failed(format!("the replay panicked: {}", panic_message(&*panic))),
    };
    let outages = match handle.live() {
        Some(live) => autoscaler_outages(&ctx, live.started_at_ms).await,
        None => None,
    };
    let reported =
        std::panic::catch_unwind(AssertUnwindSafe(|| final_report(&ctx, &handle, outages)));
    let ending = match (ending, reported) {
        (ending, Ok(())) => ending,
        (Ending::Failed(message), Err(_)) => Ending::Failed(message),
        (_, Err(panic)) => Ending::Failed(format!(
            "building the report panicked: {}",
            panic_message(&*panic)
        )),
    };
    if handle.report().is_none() {
        // Failed before the replay began: the report says so rather than looking unfinished.
        handle.set_report(pb::Report {
            simulation_id: handle.id.clone(),
            complete: true,
            ..Default::default()
        });
    }
    handle.set_live(None);
    let cleanup = cleanup(&ctx, &handle, &created).await;
    renewing.abort();
    if let Err(error) = lease.release().await {
        tracing::warn!(%error, "releasing the simulation lease");
    }
    ctx.metrics.set_running(false);
    let state = match (ending, cleanup) {
        (Ending::Failed(message), _) => {
            handle.fail(message);
            pb::SimulationState::Failed
        }
        (_, Err(error)) => {
            handle.fail(error.to_string());
            pb::SimulationState::Failed
        }
        // A lost lease cancels the replay but is a failure.
        _ if handle.error_message().is_some() => pb::SimulationState::Failed,
        (Ending::Cancelled, Ok(())) => pb::SimulationState::Cancelled,
        (Ending::Finished, Ok(())) => pb::SimulationState::Succeeded,
    };
    tracing::info!(simulation = handle.id, ?state, "simulation ended");
    handle.set_state(state);
    write_outcome(&ctx, &handle);
}

/// Keeps how the simulation ended beside its report, for a driver restarted later.
pub fn write_outcome(ctx: &RunContext, handle: &Handle) {
    let simulation = handle.simulation();
    let outcome = report::Outcome {
        state: simulation.state().as_str_name().to_owned(),
        error_message: simulation.error_message,
        end_time_ms: now_ms(),
    };
    if let Err(error) = report::write_outcome(&outcome, &ctx.settings.report_dir.join(&handle.id)) {
        tracing::warn!(%error, "writing the simulation's outcome");
    }
}

/// Builds the final report from what the replay saw and writes its files.
fn final_report(ctx: &RunContext, handle: &Handle, outages: Option<Vec<AutoscalerOutage>>) {
    let Some(live) = handle.live() else {
        return;
    };
    let complete = true;
    let mut observations = live.observations(&handle.id, complete);
    observations.autoscaler_outages = outages;
    let report = report::build(&observations);
    let mut proto = report.to_proto();
    match report::write_files(&report, &ctx.settings.report_dir.join(&handle.id)) {
        Ok(files) => proto.artifacts = Some(files.to_proto()),
        Err(error) => tracing::warn!(%error, "writing the report files"),
    }
    handle.set_report(proto);
}

/// How long the environment may take to list CA's outages before they are left unknown.
const OUTAGES_TIMEOUT: Duration = Duration::from_secs(10);

/// cluster-autoscaler's outages since the replay start. `None` (unknown) without an
/// environment, or when it does not answer (an older one: UNIMPLEMENTED): the report then says
/// nothing of them; the run does not fail for it.
async fn autoscaler_outages(ctx: &RunContext, started_at_ms: i64) -> Option<Vec<AutoscalerOutage>> {
    if !ctx.mesh.has_environment() {
        return None;
    }
    let listed = tokio::time::timeout(
        OUTAGES_TIMEOUT,
        ctx.mesh.autoscaler_outages(timestamp(started_at_ms)),
    )
    .await;
    match listed {
        Ok(Ok(listed)) => Some(outages::since_start(started_at_ms, &listed)),
        Ok(Err(error)) => {
            tracing::warn!(%error, "cluster-autoscaler's outages are unknown");
            None
        }
        Err(_) => {
            tracing::warn!(
                "cluster-autoscaler's outages are unknown: the environment did not answer"
            );
            None
        }
    }
}

/// Each node group's instance type (from its skeleton) and the cloud provider's price of it.
async fn prices(ctx: &RunContext, spec: &SimulationSpec) -> BTreeMap<String, GroupPrice> {
    let mut prices = BTreeMap::new();
    for group in &spec.node_groups {
        let instance_type = NodeSkeleton::from_yaml(group.skeleton_yaml())
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
    configuration: Option<&ksim_report::Configuration>,
    model: &Model,
) -> Vec<String> {
    let startup = StartupTime::of(configuration);
    if !spec.enable_autoscaler || startup == StartupTime::Unknown {
        return Vec::new();
    }
    let mut groups = Vec::new();
    for group in &spec.node_groups {
        // Only seat groups are offered to CA; the pool's fixed groups never answer it.
        if let NodeGroup::Deployment { name, .. } = group {
            let answers = ctx.mesh.answers_group_options(name).await;
            groups.push(OfferedGroup::new(name, answers, model));
        }
    }
    warnings::warnings(&startup, &groups)
}

/// The text a panic carried (`panic!` gives a `&str` or a `String`).
fn panic_message(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}

async fn replay(
    ctx: &RunContext,
    handle: &Arc<Handle>,
    spec: &SimulationSpec,
    trace: &Trace,
    created: &mut Created,
) -> Result<Ending, PrepareError> {
    // First, so no object of the simulation meets the scheduler or CA of another configuration
    // (a run without one gets the environment's own, restarting nothing that already runs so).
    // A CA started before this moment may hold an earlier run's counts (`domain::nodes_kept`).
    let applied_at_ms = now_ms();
    let configuration = if ctx.mesh.has_environment() {
        created.configured = true;
        let applied = ctx
            .mesh
            .apply_configuration(spec.environment_run())
            .await
            .map_err(PrepareError::Configuration)?;
        Some(ksim_report::Configuration::from_proto(&applied))
    } else {
        None
    };
    let provisioning = Chosen::of(spec.provisioning.as_ref(), trace, learn);
    tracing::info!(
        simulation = %handle.id,
        model = %provisioning.model.name,
        origin = ?provisioning.origin,
        "provisioning model chosen"
    );
    root::ensure_crd(&ctx.client, ctx.settings.ready_deadline).await?;
    let root = root::create(&ctx.client, &handle.id).await?;
    created.root = Some(root.clone());
    root::record(&ctx.client, &handle.id, &[], spec.enable_autoscaler).await?;

    let lifetimes = Lifetimes::from_lifecycles(&trace.lifecycles);
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
            provisioning: Some(provisioning.model.clone()),
        },
        &lifetimes,
    );
    let plan = plan(trace, &rewriter, spec.speed);
    let groups: BTreeSet<String> = spec
        .node_groups
        .iter()
        .map(|g| g.name().to_owned())
        .collect();
    // Started pods are matched to their recorded launches while the replay runs.
    let (starts, _matching) = if lifetimes.is_empty() {
        (None, None)
    } else {
        let (starts, started) = mpsc::unbounded_channel();
        let launches = Launches::new(lifetimes, spec.speed);
        let matching =
            launch_lifetimes::spawn(ctx.client.clone(), rewriter.clone(), launches, started);
        (Some(starts), Some(matching))
    };
    let observer = Observer::start(
        &ctx.client,
        &handle.id,
        groups,
        &ctx.settings.namespace,
        starts,
    );

    tracing::info!(
        simulation = %handle.id,
        events = plan.events_total,
        cron_runs = plan.cron_runs,
        "replay planned"
    );
    create_namespaces(ctx, &handle.id, &rewriter, &plan).await?;
    let applier = Arc::new(Applier::discover(ctx.client.clone(), &plan.kinds).await);
    created.autoscaled = spec.enable_autoscaler;
    create_node_groups(ctx, handle, spec, &root, &mut created.pool_groups).await?;
    if handle.cancel.is_cancelled() {
        return Ok(Ending::Cancelled);
    }
    wait_for_nodes(ctx, handle, spec, &observer).await?;
    let prices = prices(ctx, spec).await;
    let warnings = report_warnings(ctx, spec, configuration.as_ref(), &provisioning.model).await;

    let progress = Arc::new(Progress::new(ctx.metrics.clone()));
    let rescheduler = spec
        .reschedule_bare_pods
        .then(|| Rescheduler::start(&ctx.client, &handle.id, applier.clone()));
    let queue = OpQueue::start(
        ctx.settings.max_in_flight,
        applier,
        progress.clone(),
        ctx.metrics.clone(),
    );
    let dispatch = |number: u64, step: Step, due: Option<Instant>| {
        for op in step.ops {
            let extra = rescheduler.as_ref().and_then(|r| r.before(&op));
            for op in std::iter::once(op).chain(extra) {
                queue.dispatch(QueuedOp {
                    op,
                    step: number,
                    event_index: step.event_index,
                    trace_offset: step.trace_offset,
                    due,
                });
            }
        }
    };
    let mut steps = (0u64..).zip(plan.steps).peekable();
    let mut ending = Ending::Finished;
    if spec.settle_start {
        while let Some((number, step)) = steps.next_if(|(_, step)| step.at.is_zero()) {
            progress.begin_step(
                number,
                step.kind == StepKind::Event,
                step.ops.len(),
                Duration::ZERO,
            );
            dispatch(number, step, None);
        }
        // Cancelled while settling: no step is played, and what was started stops below,
        // through the same path as a finished run so the report holds the first instant.
        if let Some(early) = settle(handle, &progress, &observer).await {
            ending = early;
        }
    }
    seats::release(&ctx.client, &ctx.settings.namespace, &handle.id, |group| {
        provisioning.for_group(group, spec.speed)
    })
    .await?;

    let origin = Instant::now();
    observer.set_origin(origin);
    let reads_autoscaler = spec.enable_autoscaler && ctx.mesh.has_environment();
    let mut live = Live::new(
        observer,
        progress.clone(),
        now_ms(),
        plan.events_total,
        spec.speed,
        recorded_states(trace),
    )
    .with_configuration(configuration)
    .with_provisioning(provisioning.used())
    .with_prices(prices)
    .with_warnings(warnings);
    if reads_autoscaler {
        live = live.with_nodes_kept(NodesKeptFold::new(applied_at_ms));
    }
    let live = Arc::new(live);
    handle.set_live(Some(live.clone()));
    // A run cancelled while it settled never replays: it stays Pending through its cleanup.
    if matches!(ending, Ending::Finished) {
        handle.set_state(pb::SimulationState::Running);
        ctx.metrics.set_running(true);
    }
    let sampling = tokio::spawn(sample_every_bucket(live.clone(), handle.clone()));
    let reading = reads_autoscaler
        .then(|| tokio::spawn(nodes_kept::read_every_second(ctx.clone(), live.clone())));

    let limit = spec.duration.map_or(plan.end, |d| d.min(plan.end));
    for (number, step) in steps {
        if step.at > limit || !matches!(ending, Ending::Finished) {
            break;
        }
        let due = origin + step.at;
        if let Some(early) = wait_until(due, handle, &progress, spec.on_error).await {
            ending = early;
            break;
        }
        let lateness = Instant::now().saturating_duration_since(due);
        ctx.metrics.step_dispatched(lateness);
        progress.begin_step(
            number,
            step.kind == StepKind::Event,
            step.ops.len(),
            lateness,
        );
        dispatch(number, step, Some(due));
    }
    if matches!(ending, Ending::Finished)
        && let Some(early) = wait_until(origin + limit, handle, &progress, spec.on_error).await
    {
        ending = early;
    }
    queue.drain().await;
    // Before the cleanup, which deletes every pod and must not see them cloned.
    if let Some(rescheduler) = rescheduler {
        let clones = rescheduler.stop();
        if clones > 0 {
            tracing::info!(simulation = %handle.id, clones, "bare pods rescheduled");
        }
    }
    if matches!(ending, Ending::Finished) && spec.on_error == OnError::Stop {
        ending = stop_reason(&progress).unwrap_or(Ending::Finished);
    }
    sampling.abort();
    if let Some(reading) = reading {
        reading.abort();
    }
    // The last sample is the one GetSimulation keeps: it must agree with the report.
    handle.set_progress(live.sample());
    Ok(ending)
}

/// How long the settling start may go without a change in the pods before the clock starts
/// anyway: pods the initial nodes cannot hold wait for a scale-up, which is the replay's.
const SETTLE_STALL: Duration = Duration::from_secs(30);
/// How long the pods must stay unchanged, none pending, for the start to count as settled:
/// controllers create a workload's pods a moment after the workload.
const SETTLE_QUIET: Duration = Duration::from_secs(3);

/// Waits until the trace's first instant is applied and its pods are placed and running, or
/// until they stop changing for [`SETTLE_STALL`]; an ending only if the simulation is
/// cancelled meanwhile.
async fn settle(handle: &Handle, progress: &Progress, observer: &Observer) -> Option<Ending> {
    const CHECK: Duration = Duration::from_millis(500);
    let started = Instant::now();
    let mut last = None;
    let mut since = Instant::now();
    loop {
        let sample = observer.sample();
        let pods = &sample.pods;
        let now = (
            progress.open_steps(),
            pods.pending,
            pods.running + pods.succeeded + pods.failed + pods.unknown,
        );
        if last != Some(now) {
            last = Some(now);
            since = Instant::now();
        } else if now.0 == 0 && now.1 == 0 && since.elapsed() >= SETTLE_QUIET {
            tracing::info!(simulation = handle.id, after = ?started.elapsed(), "the start settled");
            return None;
        } else if since.elapsed() >= SETTLE_STALL {
            tracing::warn!(
                simulation = handle.id,
                pending = now.1,
                "the start stopped settling; starting the clock with pods still pending"
            );
            return None;
        }
        tokio::select! {
            () = handle.cancel.cancelled() => return Some(Ending::Cancelled),
            () = tokio::time::sleep(CHECK) => {}
        }
    }
}

/// Sleeps until `due`, waking early for a cancel or (with on_error=stop) a refused object.
async fn wait_until(
    due: Instant,
    handle: &Handle,
    progress: &Progress,
    on_error: OnError,
) -> Option<Ending> {
    // Refusals arrive from the queue at any time; checking every 50 ms bounds the overrun.
    const CHECK: Duration = Duration::from_millis(50);
    loop {
        if on_error == OnError::Stop
            && let Some(ending) = stop_reason(progress)
        {
            return Some(ending);
        }
        let now = Instant::now();
        if now >= due {
            return None;
        }
        tokio::select! {
            () = handle.cancel.cancelled() => return Some(Ending::Cancelled),
            () = tokio::time::sleep_until(due.min(now + CHECK)) => {}
        }
    }
}

fn stop_reason(progress: &Progress) -> Option<Ending> {
    let first = progress.errors().into_iter().next()?;
    let namespace = first
        .target
        .namespace
        .map(|ns| format!("{ns}/"))
        .unwrap_or_default();
    Some(Ending::Failed(format!(
        "the cluster refused {} {namespace}{} (event {}) and on_error is STOP: {}",
        first.target.gvk, first.target.name, first.event_index, first.message
    )))
}

/// One sample per bucket of the report's timeline: a second of recorded time, so every 100 ms
/// at 10x (see `ksim_report::sample_interval`).
async fn sample_every_bucket(live: Arc<Live>, handle: Arc<Handle>) {
    let mut ticks = tokio::time::interval(report::sample_interval(live.speed));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        handle.set_progress(live.sample());
    }
}

/// Keeps the lease while the simulation runs; losing it fails the simulation, since another
/// one may now start on the same cluster.
async fn renew(lease: SimulationLease, handle: Arc<Handle>) {
    let mut ticks = tokio::time::interval(lease.renew_interval());
    ticks.tick().await;
    loop {
        ticks.tick().await;
        if let Err(error) = lease.renew().await {
            tracing::warn!(%error, "renewing the simulation lease");
            if matches!(error, crate::cluster::lease::LeaseError::Held { .. }) {
                handle.fail(format!("lost the simulation lease: {error}"));
                handle.cancel.cancel();
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_is_reported_with_its_message() {
        let text = std::panic::catch_unwind(|| panic!("static text")).unwrap_err();
        assert_eq!(panic_message(&*text), "static text");
        let formatted = std::panic::catch_unwind(|| panic!("speed {}", 1e308)).unwrap_err();
        assert_eq!(panic_message(&*formatted), format!("speed {}", 1e308));
        let other = std::panic::catch_unwind(|| std::panic::panic_any(7_u8)).unwrap_err();
        assert_eq!(panic_message(&*other), "(no message)");
    }
}
