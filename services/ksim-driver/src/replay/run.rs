//! One simulation from start to end: the replay's phases in order (configure, prepare,
//! settle, play, drain; each in its own module), then the report. Whatever happens (finish,
//! cancel, failure, panic), the cleanup runs and the lease is released.

use std::{any::Any, panic::AssertUnwindSafe, sync::Arc, time::Duration};

use futures::FutureExt;
use ksim_proto::ksim::driver::v1 as pb;
use ksim_trace::time::{now_ms, timestamp};

pub use super::context::RunContext;
use super::{
    bare_pods::Rescheduler,
    cleanup::{Created, cleanup},
    configure::configure,
    dispatch::{Dispatcher, numbered},
    drain::drain,
    ending::Ending,
    handle::Handle,
    play::{play, start_clock},
    prepare::{PrepareError, prepare},
    progress::Progress,
    queue::OpQueue,
    settle::{Activity, settle},
};
use crate::{
    cluster::lease::SimulationLease,
    domain::{
        outages,
        report::{self, ObservedOutage},
        run::ResolvedRun,
    },
};

pub async fn run(ctx: RunContext, handle: Arc<Handle>, run: ResolvedRun, lease: SimulationLease) {
    let renewing = tokio::spawn(renew(lease.clone(), handle.clone()));
    let mut created = Created::default();
    // A panic anywhere in the replay or the report ends the simulation FAILED with it, and
    // the cleanup and the lease release below still run.
    let replayed = AssertUnwindSafe(replay(&ctx, &handle, &run, &mut created))
        .catch_unwind()
        .await;
    let ending = match replayed {
        Ok(Ok(ending)) => ending,
        Ok(Err(error)) => Ending::Failed(error.to_string()),
        Err(panic) => Ending::Failed(format!("the replay panicked: {}", panic_message(&*panic))),
    };
    let outages = match handle.live() {
        Some(live) => autoscaler_outages(&ctx, live.started_at_ms, live.speed).await,
        None => (None, Vec::new()),
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
fn final_report(
    ctx: &RunContext,
    handle: &Handle,
    (outages, provider_outages): (Option<Vec<ObservedOutage>>, Vec<String>),
) {
    let Some(live) = handle.live() else {
        return;
    };
    // The final report is written below: no report so far may replace it after.
    live.stop_saving();
    let complete = true;
    let mut observations = live.observations(&handle.id, complete);
    observations.autoscaler_outages = outages;
    observations.warnings.extend(provider_outages);
    let mut report = report::build(&observations);
    match report::write_files(&report, &ctx.settings.report_dir.join(&handle.id)) {
        Ok(files) => report.artifacts = Some(files.to_proto()),
        Err(error) => tracing::warn!(%error, "writing the report files"),
    }
    handle.set_report(report);
}

/// How long the environment may take to list CA's outages before they are left unknown.
const OUTAGES_TIMEOUT: Duration = Duration::from_secs(10);

/// cluster-autoscaler's outages since the replay start, and the cloud provider's as the
/// report's warnings. `None` (unknown) without an environment, or when it does not answer (an
/// older one: UNIMPLEMENTED): the report then says nothing of them; the run does not fail for
/// it.
async fn autoscaler_outages(
    ctx: &RunContext,
    started_at_ms: i64,
    speed: f64,
) -> (Option<Vec<ObservedOutage>>, Vec<String>) {
    if !ctx.mesh.has_environment() {
        return (None, Vec::new());
    }
    let listed = tokio::time::timeout(
        OUTAGES_TIMEOUT,
        ctx.mesh.autoscaler_outages(timestamp(started_at_ms)),
    )
    .await;
    match listed {
        Ok(Ok(listed)) => (
            Some(outages::since_start(started_at_ms, &listed.outages)),
            outages::provider_warnings(
                &outages::since_start(started_at_ms, &listed.cloud_provider_outages),
                speed,
            ),
        ),
        Ok(Err(error)) => {
            tracing::warn!(%error, "cluster-autoscaler's outages are unknown");
            (None, Vec::new())
        }
        Err(_) => {
            tracing::warn!(
                "cluster-autoscaler's outages are unknown: the environment did not answer"
            );
            (None, Vec::new())
        }
    }
}

/// The text a panic carried (`panic!` gives a `&str` or a `String`).
fn panic_message(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}

/// The replay's phases in turn: configure, prepare, settle, play, drain. The cleanup runs
/// after them in [`run`], however they end.
async fn replay(
    ctx: &RunContext,
    handle: &Arc<Handle>,
    run: &ResolvedRun,
    created: &mut Created,
) -> Result<Ending, PrepareError> {
    let spec = &run.spec;
    let configured = configure(ctx, run, created).await?;
    let configuration = configured.configuration.as_ref();
    let Some(mut prepared) = prepare(ctx, handle, run, configuration, created).await? else {
        return Ok(Ending::Cancelled);
    };

    let progress = Arc::new(Progress::new(ctx.metrics.clone()));
    let rescheduler = spec
        .reschedule_bare_pods
        .then(|| Rescheduler::start(&ctx.client, &handle.id, prepared.applier.clone()));
    let queue = OpQueue::start(
        ctx.settings.max_in_flight,
        prepared.applier.clone(),
        progress.clone(),
        ctx.metrics.clone(),
    );
    let dispatcher = Dispatcher::new(queue, rescheduler, progress.clone(), ctx.metrics.clone());
    // Moved out, not copied: the steps hold every replayed object.
    let mut steps = numbered(std::mem::take(&mut prepared.plan.steps));

    let mut ending = Ending::Finished;
    if spec.settle_start {
        let observer = prepared.observer.clone();
        let activity = || Activity::of(progress.open_steps(), &observer.sample());
        if let Some(early) = settle(&mut steps, &dispatcher, activity, &handle.cancel).await {
            ending = early;
        }
    }
    let clock = start_clock(ctx, handle, run, configured, &prepared, progress.clone()).await?;
    // A run cancelled while it settled never replays: it stays Pending through its cleanup.
    if ending.is_finished() {
        handle.set_state(pb::SimulationState::Running);
        ctx.metrics.set_running(true);
        let limit = spec
            .duration
            .map_or(prepared.plan.end, |d| d.min(prepared.plan.end));
        ending = play(
            steps,
            &dispatcher,
            clock.origin,
            limit,
            &handle.cancel,
            spec.on_error,
        )
        .await;
    }
    let ending = drain(dispatcher, &progress, ending, spec.on_error).await;
    clock.stop(handle);
    Ok(ending)
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
