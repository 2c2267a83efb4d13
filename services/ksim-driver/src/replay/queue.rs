//! The replay's operations on their way to the apiserver: each object's operations run one at
//! a time in trace order, different objects' in parallel, at most `max_in_flight` requests at
//! once.
//!
//! An operation waits only for its own object's earlier operations and for a request slot.
//! Objects used to be hashed onto a fixed set of lanes, and an operation then also waited for
//! any unrelated object that shared its lane: a whole apiserver round trip for a few percent
//! of a busy day's events, which set the replay's lateness p99.

use std::{
    collections::{HashMap, VecDeque, hash_map::Entry},
    future::Future,
    num::NonZeroUsize,
    sync::Arc,
    time::Duration,
};

use tokio::{
    sync::{Semaphore, mpsc},
    task::{Id, JoinError, JoinHandle, JoinSet},
    time::Instant,
};

use super::progress::Progress;
use crate::{
    cluster::ReplayWrites,
    domain::{Operation, Target, plan::Op, report::ObjectErrorRecord},
    metrics::ReplayMetrics,
};

/// One operation and when it was due.
#[derive(Debug)]
pub struct QueuedOp {
    pub op: Op,
    /// The plan step's number, which [`Progress`] tracks it by.
    pub step: u64,
    pub event_index: u64,
    pub trace_offset: Duration,
    /// `None` for an operation applied before the replay's clock started, which is never late.
    pub due: Option<Instant>,
}

#[derive(Debug)]
pub struct OpQueue {
    sender: mpsc::UnboundedSender<QueuedOp>,
    dispatcher: JoinHandle<()>,
}

impl OpQueue {
    /// A queue whose operations `cluster` carries out, each reported to `progress`.
    pub fn start<C: ReplayWrites>(
        max_in_flight: NonZeroUsize,
        cluster: Arc<C>,
        progress: Arc<Progress>,
        metrics: ReplayMetrics,
    ) -> Self {
        Self::with_runner(max_in_flight, move |queued, lateness| {
            let (cluster, progress, metrics) = (cluster.clone(), progress.clone(), metrics.clone());
            async move { run(queued, lateness, &*cluster, &progress, &metrics).await }
        })
    }

    /// A queue whose operations are carried out by `runner`, given each operation and how late it
    /// got its request slot.
    fn with_runner<R, F>(max_in_flight: NonZeroUsize, runner: R) -> Self
    where
        R: Fn(QueuedOp, Duration) -> F + Send + Sync + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        let (sender, receiver) = mpsc::unbounded_channel();
        let slots = Arc::new(Semaphore::new(max_in_flight.get()));
        let dispatcher = tokio::spawn(dispatch(receiver, slots, Arc::new(runner)));
        Self { sender, dispatcher }
    }

    pub fn dispatch(&self, queued: QueuedOp) {
        // The dispatcher ends only after this sender is dropped, so sending cannot fail here.
        let _ = self.sender.send(queued);
    }

    /// Waits until every dispatched operation is done.
    pub async fn drain(self) {
        drop(self.sender);
        if let Err(error) = self.dispatcher.await {
            tracing::error!(%error, "the replay's operation dispatcher failed");
        }
    }
}

/// Starts each operation once its object has nothing running, until the sender is gone and
/// every started operation is done.
async fn dispatch<R, F>(
    mut incoming: mpsc::UnboundedReceiver<QueuedOp>,
    slots: Arc<Semaphore>,
    runner: Arc<R>,
) where
    R: Fn(QueuedOp, Duration) -> F + Send + Sync + 'static,
    F: Future<Output = ()> + Send + 'static,
{
    // Objects with an operation running, each with its later operations in trace order.
    let mut waiting: HashMap<Target, VecDeque<QueuedOp>> = HashMap::new();
    let mut running = Running {
        tasks: JoinSet::new(),
        serving: HashMap::new(),
        slots,
        runner,
    };
    let mut open = true;
    loop {
        if !open && running.tasks.is_empty() {
            break;
        }
        tokio::select! {
            next = incoming.recv(), if open => match next {
                Some(queued) => match waiting.entry(target_of(&queued.op).clone()) {
                    Entry::Occupied(mut later) => later.get_mut().push_back(queued),
                    Entry::Vacant(idle) => {
                        idle.insert(VecDeque::new());
                        running.start(queued);
                    }
                },
                None => open = false,
            },
            Some(done) = running.tasks.join_next_with_id() => {
                let Some(target) = running.finished(done) else { continue };
                if let Entry::Occupied(mut later) = waiting.entry(target) {
                    match later.get_mut().pop_front() {
                        Some(next) => running.start(next),
                        None => {
                            later.remove();
                        }
                    }
                }
            },
            else => break,
        }
    }
}

/// The operations started and not yet done.
struct Running<R> {
    tasks: JoinSet<()>,
    /// Which object each task serves: a task that panics still frees its object.
    serving: HashMap<Id, Target>,
    slots: Arc<Semaphore>,
    runner: Arc<R>,
}

impl<R, F> Running<R>
where
    R: Fn(QueuedOp, Duration) -> F + Send + Sync + 'static,
    F: Future<Output = ()> + Send + 'static,
{
    /// Runs `queued` as soon as a request slot is free.
    fn start(&mut self, queued: QueuedOp) {
        let target = target_of(&queued.op).clone();
        let (slots, runner) = (self.slots.clone(), self.runner.clone());
        let task = self.tasks.spawn(async move {
            // Never closed, so a slot always comes.
            let Ok(_slot) = slots.acquire_owned().await else {
                return;
            };
            let lateness = queued.due.map_or(Duration::ZERO, |due| {
                Instant::now().saturating_duration_since(due)
            });
            runner(queued, lateness).await;
        });
        self.serving.insert(task.id(), target);
    }

    /// The object a finished task served.
    fn finished(&mut self, done: Result<(Id, ()), JoinError>) -> Option<Target> {
        let id = match done {
            Ok((id, ())) => id,
            Err(error) => {
                tracing::error!(%error, "a replayed operation's task failed");
                error.id()
            }
        };
        self.serving.remove(&id)
    }
}

/// Carries out one operation and reports it to `progress`.
async fn run(
    queued: QueuedOp,
    lateness: Duration,
    cluster: &impl ReplayWrites,
    progress: &Progress,
    metrics: &ReplayMetrics,
) {
    let started = Instant::now();
    // The report keeps the error as text, beside the object and operation it names.
    let (operation, result) = match &queued.op {
        Op::Apply { target, object } => (
            Operation::Apply,
            cluster
                .apply(target, object)
                .await
                .map_err(|e| e.to_string()),
        ),
        Op::HandOver { target, replicas } => (
            Operation::Apply,
            cluster
                .hand_over_replicas(target, *replicas)
                .await
                .map_err(|e| e.to_string()),
        ),
        Op::Delete { target } => (
            Operation::Delete,
            cluster.delete(target).await.map_err(|e| e.to_string()),
        ),
        Op::CronRun {
            target,
            job,
            scheduled,
        } => (
            Operation::CronRun,
            cluster
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
        target: target_of(&queued.op).clone(),
        operation,
        event_index: queued.event_index,
        trace_offset: queued.trace_offset,
        message,
    });
    progress.operation_done(queued.step, lateness, error);
}

fn target_of(op: &Op) -> &Target {
    match op {
        Op::Apply { target, .. }
        | Op::HandOver { target, .. }
        | Op::Delete { target }
        | Op::CronRun { target, .. }
        | Op::Invalid { target, .. } => target,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{
        Mutex,
        atomic::{AtomicUsize, Ordering},
    };

    use tokio::sync::Notify;

    use super::*;
    use crate::domain::Gvk;

    fn queued(name: &str, number: u64) -> QueuedOp {
        QueuedOp {
            op: Op::Delete {
                target: Target {
                    gvk: Gvk::new("", "v1", "ConfigMap"),
                    namespace: Some("ns".to_owned()),
                    name: name.to_owned(),
                },
            },
            step: number,
            event_index: number,
            trace_offset: Duration::ZERO,
            due: None,
        }
    }

    fn name(queued: &QueuedOp) -> String {
        target_of(&queued.op).name.clone()
    }

    fn slots(count: usize) -> NonZeroUsize {
        NonZeroUsize::new(count).unwrap()
    }

    /// Polls `done` until it holds; the test fails if it never does.
    async fn eventually(what: &str, done: impl Fn() -> bool) {
        for _ in 0..1000 {
            if done() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("never happened: {what}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_object_waits_for_its_own_operations_and_no_others() {
        // "a"'s first operation hangs until released; "b" must finish meanwhile, "a"'s second
        // must not start.
        let release = Arc::new(Notify::new());
        let log = Arc::new(Mutex::new(Vec::<String>::new()));
        let queue = OpQueue::with_runner(slots(8), {
            let (release, log) = (release.clone(), log.clone());
            move |queued, _| {
                let (release, log) = (release.clone(), log.clone());
                async move {
                    let label = format!("{}{}", name(&queued), queued.step);
                    log.lock().unwrap().push(format!("start {label}"));
                    if label == "a1" {
                        release.notified().await;
                    }
                    log.lock().unwrap().push(format!("end {label}"));
                }
            }
        });
        queue.dispatch(queued("a", 1));
        queue.dispatch(queued("a", 2));
        queue.dispatch(queued("b", 3));
        let logged = |entry: &str| log.lock().unwrap().iter().any(|e| e == entry);
        eventually("b done while a1 hangs", || logged("end b3")).await;
        assert!(logged("start a1") && !logged("end a1"));
        assert!(!logged("start a2"), "a2 started before a1 ended: {log:?}");
        release.notify_one();
        queue.drain().await;
        let log = log.lock().unwrap().clone();
        let at = |entry: &str| log.iter().position(|e| e == entry).unwrap();
        assert!(at("end a1") < at("start a2"), "{log:?}");
        assert_eq!(log.len(), 6, "{log:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requests_in_flight_never_exceed_the_limit() {
        // Ten objects, two slots: operations hang until the gate lets one through, and no
        // third starts while two hang.
        let gate = Arc::new(Semaphore::new(0));
        let started = Arc::new(AtomicUsize::new(0));
        let queue = OpQueue::with_runner(slots(2), {
            let (gate, started) = (gate.clone(), started.clone());
            move |_, _| {
                let (gate, started) = (gate.clone(), started.clone());
                async move {
                    started.fetch_add(1, Ordering::SeqCst);
                    gate.acquire().await.unwrap().forget();
                }
            }
        });
        for number in 0..10 {
            queue.dispatch(queued(&format!("object-{number}"), number));
        }
        let count = || started.load(Ordering::SeqCst);
        eventually("two operations started", || count() == 2).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(count(), 2, "a third operation started with two slots");
        gate.add_permits(1);
        eventually("a third started once a slot was free", || count() == 3).await;
        gate.add_permits(9);
        queue.drain().await;
        assert_eq!(count(), 10);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_objects_operations_run_in_trace_order_and_one_at_a_time() {
        // Three objects' operations interleaved, each taking a little while.
        let log = Arc::new(Mutex::new(Vec::<(String, u64, bool)>::new()));
        let queue = OpQueue::with_runner(slots(4), {
            let log = log.clone();
            move |queued, _| {
                let log = log.clone();
                async move {
                    log.lock().unwrap().push((name(&queued), queued.step, true));
                    tokio::time::sleep(Duration::from_millis(queued.step % 3)).await;
                    log.lock()
                        .unwrap()
                        .push((name(&queued), queued.step, false));
                }
            }
        });
        let objects = ["x", "y", "z"];
        for number in 0..60 {
            queue.dispatch(queued(objects[(number * 7 % 11) as usize % 3], number));
        }
        queue.drain().await;
        let log = log.lock().unwrap().clone();
        assert_eq!(log.len(), 120);
        for object in objects {
            let mine: Vec<_> = log.iter().filter(|(n, ..)| n == object).collect();
            // start, end, start, end, ... with steps increasing.
            for pair in mine.chunks(2) {
                assert!(
                    pair[0].2 && !pair[1].2 && pair[0].1 == pair[1].1,
                    "{mine:?}"
                );
            }
            let steps: Vec<u64> = mine.iter().step_by(2).map(|(_, step, _)| *step).collect();
            assert!(steps.is_sorted(), "{object}: {steps:?}");
        }
    }
}
