//! Operations run on a fixed set of lanes so the replay keeps pace with busy traces: an
//! object always maps to the same lane (its operations stay in trace order) while different
//! objects proceed in parallel. Lanes outnumber the requests in flight: a lane waiting on one
//! slow object holds no slot another lane could use, and the apiserver gets the few dozen
//! concurrent writes it completes fastest.

use std::{
    hash::{DefaultHasher, Hash, Hasher},
    sync::Arc,
    time::Duration,
};

use tokio::{
    sync::{Semaphore, mpsc},
    task::JoinSet,
    time::Instant,
};

use super::progress::Progress;
use crate::{
    cluster::applier::Applier,
    domain::{Operation, Target, plan::Op, report::ObjectErrorRecord},
    metrics::ReplayMetrics,
};

/// One operation and when it was due.
#[derive(Debug)]
pub struct Job {
    pub op: Op,
    /// The plan step's number, which [`Progress`] tracks it by.
    pub step: u64,
    pub event_index: u64,
    pub trace_offset: Duration,
    /// `None` for an operation applied before the replay's clock started, which is never late.
    pub due: Option<Instant>,
}

#[derive(Debug)]
pub struct Lanes {
    senders: Vec<mpsc::UnboundedSender<Job>>,
    workers: JoinSet<()>,
}

impl Lanes {
    pub fn start(
        count: usize,
        max_in_flight: usize,
        applier: Arc<Applier>,
        progress: Arc<Progress>,
        metrics: ReplayMetrics,
    ) -> Self {
        let mut senders = Vec::with_capacity(count);
        let mut workers = JoinSet::new();
        let in_flight = Arc::new(Semaphore::new(max_in_flight.max(1)));
        for _ in 0..count.max(1) {
            let (sender, receiver) = mpsc::unbounded_channel();
            senders.push(sender);
            workers.spawn(run_lane(
                receiver,
                in_flight.clone(),
                applier.clone(),
                progress.clone(),
                metrics.clone(),
            ));
        }
        Self { senders, workers }
    }

    pub fn dispatch(&self, job: Job) {
        let lane = lane_of(target_of(&job.op), self.senders.len());
        // A lane ends only when its sender is dropped, so sending cannot fail here.
        let _ = self.senders[lane].send(job);
    }

    /// Waits until every dispatched operation is done.
    pub async fn drain(mut self) {
        self.senders.clear();
        while self.workers.join_next().await.is_some() {}
    }
}

async fn run_lane(
    mut jobs: mpsc::UnboundedReceiver<Job>,
    in_flight: Arc<Semaphore>,
    applier: Arc<Applier>,
    progress: Arc<Progress>,
    metrics: ReplayMetrics,
) {
    while let Some(job) = jobs.recv().await {
        // Never closed, so a permit always comes.
        let Ok(_permit) = in_flight.acquire().await else {
            break;
        };
        let lateness = job.due.map_or(Duration::ZERO, |due| {
            Instant::now().saturating_duration_since(due)
        });
        let started = Instant::now();
        // The report keeps the error as text, beside the object and operation it names.
        let (operation, result) = match &job.op {
            Op::Apply { target, object } => (
                Operation::Apply,
                applier
                    .apply(target, object)
                    .await
                    .map_err(|e| e.to_string()),
            ),
            Op::Delete { target } => (
                Operation::Delete,
                applier.delete(target).await.map_err(|e| e.to_string()),
            ),
            Op::CronRun {
                target,
                job,
                scheduled,
            } => (
                Operation::CronRun,
                applier
                    .cron_run(target, job, scheduled)
                    .await
                    .map_err(|e| e.to_string()),
            ),
            Op::Invalid {
                operation, message, ..
            } => (*operation, Err(message.clone())),
        };
        metrics.operation(operation, result.is_ok(), started.elapsed());
        let error = result.err().map(|message| ObjectErrorRecord {
            target: target_of(&job.op).clone(),
            operation,
            event_index: job.event_index,
            trace_offset: job.trace_offset,
            message,
        });
        progress.operation_done(job.step, lateness, error);
    }
}

fn target_of(op: &Op) -> &Target {
    match op {
        Op::Apply { target, .. }
        | Op::Delete { target }
        | Op::CronRun { target, .. }
        | Op::Invalid { target, .. } => target,
    }
}

fn lane_of(target: &Target, lanes: usize) -> usize {
    let mut hasher = DefaultHasher::new();
    target.hash(&mut hasher);
    (hasher.finish() % lanes as u64) as usize
}
