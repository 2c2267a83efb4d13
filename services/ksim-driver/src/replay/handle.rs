//! One simulation as the API sees it: its state and progress (watchable), its cancel switch,
//! its live observations while it runs, and its report once it ends.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use ksim_proto::ksim::driver::v1 as pb;
use ksim_trace::time::now_ms;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::live::Live;

#[derive(Debug)]
pub struct Handle {
    pub id: String,
    simulation: watch::Sender<pb::Simulation>,
    pub cancel: CancellationToken,
    live: Mutex<Option<Arc<Live>>>,
    report: Mutex<Option<pb::Report>>,
}

pub use ksim_report::is_terminal;

impl Handle {
    pub fn new(simulation: pb::Simulation) -> Self {
        Self {
            id: simulation.id.clone(),
            simulation: watch::channel(simulation).0,
            cancel: CancellationToken::new(),
            live: Mutex::new(None),
            report: Mutex::new(None),
        }
    }

    pub fn simulation(&self) -> pb::Simulation {
        self.simulation.borrow().clone()
    }

    pub fn subscribe(&self) -> watch::Receiver<pb::Simulation> {
        self.simulation.subscribe()
    }

    pub fn state(&self) -> pb::SimulationState {
        self.simulation.borrow().state()
    }

    pub fn set_state(&self, state: pb::SimulationState) {
        let now = ksim_trace::time::timestamp(now_ms());
        self.simulation.send_modify(|simulation| {
            simulation.set_state(state);
            if let Some(progress) = simulation.progress.as_mut() {
                progress.set_state(state);
            }
            match state {
                pb::SimulationState::Running => simulation.start_time = Some(now),
                state if is_terminal(state) => simulation.end_time = Some(now),
                _ => {}
            }
        });
    }

    /// Ends the simulation as FAILED with `message`, unless it already failed (the first cause
    /// is the one worth reading).
    pub fn fail(&self, message: String) {
        self.simulation.send_modify(|simulation| {
            if simulation.error_message.is_empty() {
                simulation.error_message = message;
            }
        });
    }

    pub fn error_message(&self) -> Option<String> {
        let message = self.simulation.borrow().error_message.clone();
        (!message.is_empty()).then_some(message)
    }

    pub fn set_progress(&self, mut progress: pb::SimulationProgress) {
        self.simulation.send_modify(|simulation| {
            progress.state = simulation.state;
            simulation.progress = Some(progress);
        });
    }

    pub fn set_live(&self, live: Option<Arc<Live>>) {
        *lock(&self.live) = live;
    }

    pub fn live(&self) -> Option<Arc<Live>> {
        lock(&self.live).clone()
    }

    pub fn set_report(&self, report: pb::Report) {
        *lock(&self.report) = Some(report);
    }

    pub fn report(&self) -> Option<pb::Report> {
        lock(&self.report).clone()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
