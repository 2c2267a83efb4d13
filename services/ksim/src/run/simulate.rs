//! Start a simulation, follow it to its end (cancelling it on Ctrl-C), print its report.

use std::io::Write;

use anyhow::Context;
use ksim_proto::ksim::driver::v1::{
    CancelSimulationRequest, GetSimulationRequest, Report, Simulation, SimulationSpec,
    SimulationState, StartSimulationRequest, WatchSimulationRequest, driver_client::DriverClient,
    simulation_spec::TraceSource,
};
use tonic::transport::Channel;

use ksim_report::is_terminal;

use super::progress::Progress;
pub use super::progress::state_name;
use crate::driver::{connect, get_report, status_error};

/// How a simulation ended, and its report.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The simulation in its terminal state (see `state()` and `error_message`).
    pub simulation: Simulation,
    pub report: Report,
}

/// Runs `spec` on the driver at `driver_url` until it ends, writing its id, its state changes
/// (or, with `show_progress`, a progress bar on stderr) and finally the report's summary to
/// `out`. Ctrl-C or SIGTERM cancels the simulation and waits for the cleanup; a second one
/// stops waiting. A FAILED simulation is an `Ok` outcome: the caller decides.
pub async fn run_simulation(
    driver_url: &str,
    spec: SimulationSpec,
    out: &mut impl Write,
    show_progress: bool,
) -> anyhow::Result<RunOutcome> {
    let mut client = connect(driver_url).await?;
    let uploaded = match &spec.trace_source {
        Some(TraceSource::TraceFile(bytes)) => Some(bytes.len()),
        _ => None,
    };
    // Listening from before the start: a signal while the trace uploads is not lost.
    let mut interrupts = Interrupts::new()?;
    let started = client
        .start_simulation(StartSimulationRequest { spec: Some(spec) })
        .await
        .map_err(|status| match uploaded {
            Some(bytes) if too_large(&status) => anyhow::anyhow!(
                "starting the simulation: the trace file ({bytes} bytes) is larger than the driver \
                 takes in one request ({}); import it into the tracer store (`ksim trace import \
                 FILE`) and replay it with `--stored --trace-id ID`",
                status.message()
            ),
            _ => status_error("starting the simulation", &status),
        })?
        .into_inner()
        .simulation
        .context("the driver answered without a simulation")?;
    let id = started.id;
    writeln!(out, "ksim: simulation {id} started")?;
    let mut progress = Progress::new(show_progress);
    let followed = follow(&mut client, &id, &mut interrupts, &mut progress, out).await;
    progress.finish();
    followed?;

    let simulation = client
        .get_simulation(GetSimulationRequest { id: id.clone() })
        .await
        .map_err(|status| status_error(&format!("getting simulation {id}"), &status))?
        .into_inner()
        .simulation
        .context("the driver answered without a simulation")?;
    let report = get_report(&mut client, &id).await?;
    write!(
        out,
        "{}",
        ksim_report::summary_ended(&report, simulation.state())
    )?;
    writeln!(
        out,
        "ksim: simulation {id} {}",
        state_name(simulation.state())
    )?;
    if simulation.state() == SimulationState::Failed {
        writeln!(out, "  error: {}", simulation.error_message)?;
    }
    Ok(RunOutcome { simulation, report })
}

/// Reads the progress stream until the simulation is in a terminal state. The first Ctrl-C or
/// SIGTERM asks the driver to cancel (without waiting on that call, so the progress, and a
/// second signal, are still heard); the second stops waiting at once.
async fn follow(
    client: &mut DriverClient<Channel>,
    id: &str,
    interrupts: &mut Interrupts,
    progress: &mut Progress,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let mut stream = client
        .watch_simulation(WatchSimulationRequest {
            id: id.to_owned(),
            interval: None,
        })
        .await
        .map_err(|status| status_error(&format!("watching simulation {id}"), &status))?
        .into_inner();
    let mut cancelling = false;
    let (answer_tx, mut answers) = tokio::sync::mpsc::unbounded_channel();
    loop {
        tokio::select! {
            message = stream.message() => match message {
                Ok(Some(response)) => {
                    let Some(snapshot) = response.progress else { continue };
                    progress.update(&snapshot, out)?;
                    if is_terminal(snapshot.state()) {
                        return Ok(());
                    }
                }
                // The driver ends the stream after the terminal message; an early end is
                // settled by the GetSimulation that follows.
                Ok(None) => return Ok(()),
                Err(status) => {
                    return Err(status_error(&format!("watching simulation {id}"), &status));
                }
            },
            () = interrupts.next() => {
                if cancelling {
                    anyhow::bail!(
                        "stopped waiting; simulation {id} is still being cancelled (see `ksim report {id}`)"
                    );
                }
                progress.note(&format!("ksim: cancelling simulation {id} (Ctrl-C again to stop waiting)"), out)?;
                cancelling = true;
                let mut client = client.clone();
                let request = CancelSimulationRequest { id: id.to_owned() };
                let answer_tx = answer_tx.clone();
                tokio::spawn(async move {
                    let answer = client.cancel_simulation(request).await.map(|_| ());
                    let _ = answer_tx.send(answer);
                });
            }
            Some(Err(status)) = answers.recv() => {
                // The progress stream still says when the cancel ends; this says why it may not.
                let error = status_error(&format!("cancelling simulation {id}"), &status);
                progress.note(&format!("ksim: {error}"), out)?;
            }
        }
    }
}

/// Ctrl-C and SIGTERM, listened to for the whole run. Not `ksim_grpc::shutdown_signal`, which
/// logs that a server shuts down.
struct Interrupts {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl Interrupts {
    fn new() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }

    async fn next(&mut self) {
        tokio::select! {
            _ = self.terminate.recv() => {}
            _ = self.interrupt.recv() => {}
        }
    }
}

/// Whether the driver refused a request for its size (tonic's own check of the message limit).
fn too_large(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::OutOfRange | tonic::Code::ResourceExhausted
    ) && status.message().contains("message length too large")
}
