//! The play phase: the held autoscaler groups are released to cluster-autoscaler, the clock starts,
//! and each step of the plan is dispatched at its time (its offset divided by the speed) until
//! the trace's end or the run's duration. A cancel ends it at once; with on_error=STOP, so
//! does the first object the cluster refuses.

use std::{path::PathBuf, sync::Arc, time::Duration};

use ksim_trace::time::now_ms;
use tokio::{task::JoinHandle, time::Instant};
use tokio_util::{sync::CancellationToken, task::AbortOnDropHandle};

use super::{
    configure::Configured,
    context::RunContext,
    dispatch::{Dispatcher, Steps},
    disruptions as disruption_player,
    ending::{Ending, stop_reason},
    handle::Handle,
    live::{Live, LiveDisruptions},
    nodes_kept,
    prepare::{PrepareError, Prepared},
    progress::Progress,
};
use crate::{
    cluster::{
        availability::AvailabilityWatch,
        seats,
        usage_replay::{self, DEFAULT_INTERVAL, RecordedClock, UsageCounts},
    },
    domain::{
        disruptions::Disruption,
        nodes_kept::NodesKeptFold,
        plan::window_start_ms,
        recorded::{recorded_pending, recorded_states},
        recorded_failures::recorded_failures,
        report, rightsizing,
        run::ResolvedRun,
        spec::OnError,
    },
};

/// The running clock: when it started, what the replay has seen since, and the tasks that
/// sample it for progress and the report.
#[derive(Debug)]
pub struct Clock {
    pub origin: Instant,
    live: Arc<Live>,
    sampling: JoinHandle<()>,
    /// Saves the report so far now and then (see [`save_every`]).
    saving: AbortOnDropHandle<()>,
    reading: Option<JoinHandle<()>>,
    /// Replays recorded usage, when the trace holds some; stops with the clock.
    usage: Option<(AbortOnDropHandle<()>, Arc<UsageCounts>)>,
    /// Plays the run's disruptions, when it has some; stops with the clock.
    disruptions: Option<AbortOnDropHandle<()>>,
}

/// Releases the held autoscaler groups and starts the clock.
pub async fn start_clock(
    ctx: &RunContext,
    handle: &Arc<Handle>,
    run: &ResolvedRun,
    configured: Configured,
    prepared: &Prepared,
    progress: Arc<Progress>,
) -> Result<Clock, PrepareError> {
    let (spec, trace, provisioning) = (&run.spec, &run.trace, &run.provisioning);
    seats::release(&ctx.client, &ctx.settings.namespace, &handle.id, |group| {
        provisioning.for_group(group, spec.speed)
    })
    .await?;

    let origin = Instant::now();
    let observer = prepared.observer.clone();
    observer.set_origin(origin);
    if let Some(replicas) = &prepared.replicas {
        replicas.set_origin(origin);
    }
    let reads_autoscaler = spec.enable_autoscaler && ctx.mesh.has_environment();
    let mut live = Live::new(
        observer,
        progress,
        now_ms(),
        prepared.plan.events_total,
        spec.speed,
        recorded_states(trace),
    )
    .with_configuration(configured.configuration)
    .with_provisioning(provisioning.used())
    // A price per node group and a few warnings: copied, so the phases keep `Prepared` whole.
    .with_prices(prepared.prices.clone())
    .with_warnings(prepared.warnings.clone())
    .with_trace_transforms(trace.header.transforms.clone())
    .with_recorded_pending(recorded_pending(trace));
    if spec.explain.is_some() {
        live = live.with_explanations(&spec.namespace_prefix);
    }
    if reads_autoscaler {
        live = live.with_nodes_kept(NodesKeptFold::new(configured.applied_at_ms));
    }
    let interval = trace
        .header
        .tracer_config
        .as_ref()
        .and_then(|config| u64::try_from(config.usage_interval_ms).ok())
        .filter(|ms| *ms > 0)
        .map_or(DEFAULT_INTERVAL, Duration::from_millis);
    let usage_counts = Arc::new(UsageCounts::default());
    if let Some(feed) = &prepared.usage {
        live = live.with_usage(
            ksim_report::UsageReplay {
                samples: feed.recorded.samples(),
                ignored_samples: feed.recorded.ignored(),
                interval: Some(ksim_proto::json::of_millis(
                    u64::try_from(interval.as_millis()).unwrap_or(u64::MAX),
                )),
                // From the trace alone, so known from the start.
                usage_vs_requests: rightsizing::usage_vs_requests(
                    &trace.usage,
                    &trace.lifecycles,
                    &trace.events,
                ),
                ..Default::default()
            },
            usage_counts.clone(),
        );
    }
    let mut disruptions = None;
    let mut played = spec.disruptions.clone();
    if spec.replay_recorded_failures {
        let groups: Vec<&str> = spec.node_groups.iter().map(|g| g.name()).collect();
        let recorded = recorded_failures(&trace.nodes, window_start_ms(trace), |group| {
            groups.contains(&group)
        });
        tracing::info!(
            failures = recorded.len(),
            "replaying the recording's failures"
        );
        played.extend(recorded.into_iter().map(Disruption::Recorded));
    }
    if spec.has_disruptions() {
        let player = disruption_player::Player {
            mesh: ctx.mesh.clone(),
            client: ctx.client.clone(),
            evictions: ctx.evictions.clone(),
            namespace: ctx.settings.namespace.clone(),
            simulation_id: handle.id.clone(),
            root: prepared.root.clone(),
            seed: spec.disruption_seed,
        };
        let (task, played) = disruption_player::start(player, played, spec.speed, origin);
        disruptions = Some(task);
        live = live.with_disruptions(LiveDisruptions {
            seed: spec.disruption_seed,
            played,
            workloads: AvailabilityWatch::start(&ctx.client, &spec.namespace_prefix, origin),
        });
    }
    let live = Arc::new(
        live.with_workload_scaling(prepared.workload_scaling.clone())
            .with_replicas(prepared.replicas.clone()),
    );
    handle.set_live(Some(live.clone()));
    let sampling = tokio::spawn(sample_every_bucket(live.clone(), handle.clone()));
    let saving = AbortOnDropHandle::new(tokio::spawn(save_every(
        live.clone(),
        handle.id.clone(),
        ctx.settings.report_dir.join(&handle.id),
    )));
    let reading = reads_autoscaler
        .then(|| tokio::spawn(nodes_kept::read_every_second(ctx.clone(), live.clone())));
    let usage = prepared.usage.clone().map(|feed| {
        let clock = RecordedClock {
            origin,
            start_ms: window_start_ms(trace),
            speed: spec.speed,
        };
        let task = usage_replay::spawn(
            ctx.mesh.clone(),
            feed,
            clock,
            interval,
            usage_counts.clone(),
        );
        (task, usage_counts)
    });
    Ok(Clock {
        origin,
        live,
        sampling,
        saving,
        reading,
        usage,
        disruptions,
    })
}

impl Clock {
    /// Stops sampling. The last sample is the one GetSimulation keeps: it must agree with the
    /// report.
    pub fn stop(self, handle: &Handle) {
        self.sampling.abort();
        drop(self.saving);
        if let Some(reading) = self.reading {
            reading.abort();
        }
        if let Some((task, counts)) = self.usage {
            drop(task);
            tracing::info!(?counts, "usage replayed");
        }
        drop(self.disruptions);
        handle.set_progress(self.live.sample());
    }
}

/// Dispatches each step at `origin` + its time, those up to `limit`, then waits out `limit`.
pub async fn play(
    steps: Steps,
    dispatcher: &Dispatcher,
    origin: Instant,
    limit: Duration,
    cancel: &CancellationToken,
    on_error: OnError,
) -> Ending {
    for (number, step) in steps {
        if step.at > limit {
            break;
        }
        let due = origin + step.at;
        if let Some(early) = wait_until(due, cancel, dispatcher.progress(), on_error).await {
            return early;
        }
        dispatcher.dispatch(number, step, Some(due));
    }
    wait_until(origin + limit, cancel, dispatcher.progress(), on_error)
        .await
        .unwrap_or(Ending::Finished)
}

/// Sleeps until `due`, waking early for a cancel or (with on_error=STOP) a refused object.
async fn wait_until(
    due: Instant,
    cancel: &CancellationToken,
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
            () = cancel.cancelled() => return Some(Ending::Cancelled),
            () = tokio::time::sleep_until(due.min(now + CHECK)) => {}
        }
    }
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

/// How often a running simulation's report so far is saved.
const SAVE_INTERVAL: Duration = Duration::from_secs(5);

/// Saves the report so far into `dir` at once and every [`SAVE_INTERVAL`]: a driver killed
/// mid-run leaves figures up to then, which the restarted one serves instead of none.
async fn save_every(live: Arc<Live>, id: String, dir: PathBuf) {
    let mut ticks = tokio::time::interval(SAVE_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        // Building, rendering and writing a report is blocking work: off the replay's workers,
        // so a save never makes an event late.
        let (live, id, dir) = (live.clone(), id.clone(), dir.clone());
        if let Err(error) = tokio::task::spawn_blocking(move || live.save_partial(&id, &dir)).await
        {
            tracing::warn!(%error, "saving the report so far");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::{
        dispatch::numbered,
        test_cluster::{TestCluster, dispatcher, step},
    };

    const SECOND: Duration = Duration::from_secs(1);

    #[tokio::test(start_paused = true)]
    async fn each_step_is_applied_at_its_time_and_none_after_the_limit() {
        let cluster = Arc::new(TestCluster::default());
        let (dispatcher, progress) = dispatcher(&cluster);
        let steps = numbered(vec![
            step(1, "a"),
            step(4, "b"),
            step(9, "c"),
            step(12, "d"),
        ]);
        let origin = Instant::now();
        let cancel = CancellationToken::new();
        let ending = play(
            steps,
            &dispatcher,
            origin,
            10 * SECOND,
            &cancel,
            OnError::Continue,
        )
        .await;
        assert_eq!(ending, Ending::Finished);
        // The trace's end (or the run's duration) is waited out, not just its last step.
        assert_eq!(origin.elapsed(), 10 * SECOND);
        dispatcher.drain().await;
        let at: Vec<(String, Duration)> = cluster
            .log()
            .into_iter()
            .map(|(name, when)| (name, when - origin))
            .collect();
        let expected = [("a", 1), ("b", 4), ("c", 9)]
            .map(|(name, secs)| (name.to_owned(), Duration::from_secs(secs)));
        assert_eq!(at, expected);
        assert_eq!(progress.snapshot().events_applied, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn with_on_error_stop_the_first_refusal_ends_the_run_before_the_next_step() {
        // "b" is refused 2 s after it is sent, at 6 s; "c" at 9 s is never sent.
        let cluster = Arc::new(TestCluster::refusing("b", 2 * SECOND));
        let (dispatcher, _) = dispatcher(&cluster);
        let steps = numbered(vec![step(1, "a"), step(4, "b"), step(9, "c")]);
        let origin = Instant::now();
        let cancel = CancellationToken::new();
        let ending = play(
            steps,
            &dispatcher,
            origin,
            20 * SECOND,
            &cancel,
            OnError::Stop,
        )
        .await;
        let Ending::Failed(message) = ending else {
            panic!("not failed: {ending:?}");
        };
        assert!(message.contains("v1.ConfigMap ns/b (event 4)"), "{message}");
        let stopped = origin.elapsed();
        assert!(
            stopped >= 6 * SECOND && stopped < 6 * SECOND + 100 * Duration::from_millis(1),
            "stopped at {stopped:?}"
        );
        dispatcher.drain().await;
        assert_eq!(cluster.applied(), ["a"]);
    }

    #[tokio::test(start_paused = true)]
    async fn with_on_error_continue_a_refusal_is_counted_and_the_run_goes_on() {
        let cluster = Arc::new(TestCluster::refusing("b", SECOND));
        let (dispatcher, progress) = dispatcher(&cluster);
        let steps = numbered(vec![step(1, "a"), step(4, "b"), step(9, "c")]);
        let cancel = CancellationToken::new();
        let ending = play(
            steps,
            &dispatcher,
            Instant::now(),
            10 * SECOND,
            &cancel,
            OnError::Continue,
        )
        .await;
        assert_eq!(ending, Ending::Finished);
        dispatcher.drain().await;
        assert_eq!(cluster.applied(), ["a", "c"]);
        assert_eq!(progress.snapshot().object_errors, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancel_ends_the_run_at_once_and_sends_no_later_step() {
        let cluster = Arc::new(TestCluster::default());
        let (dispatcher, _) = dispatcher(&cluster);
        let steps = numbered(vec![step(1, "a"), step(60, "b")]);
        let origin = Instant::now();
        let cancel = CancellationToken::new();
        tokio::spawn({
            let cancel = cancel.clone();
            async move {
                tokio::time::sleep(5 * SECOND).await;
                cancel.cancel();
            }
        });
        let ending = play(
            steps,
            &dispatcher,
            origin,
            100 * SECOND,
            &cancel,
            OnError::Continue,
        )
        .await;
        assert_eq!(ending, Ending::Cancelled);
        assert_eq!(origin.elapsed(), 5 * SECOND);
        dispatcher.drain().await;
        assert_eq!(cluster.applied(), ["a"]);
    }
}
