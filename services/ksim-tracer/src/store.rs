//! The tracer's state: the log on disk, the recorder's in-memory view, the watch statuses.
//! Records flow watch -> [`Store::run_recorder`] -> log; everything the gRPC API answers comes
//! from here.

use std::{
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use ksim_proto::ksim::trace::v1 as pb;
use ksim_trace::time::now_ms;
use pb::trace_record::Record;
use thiserror::Error;
use tokio::{sync::mpsc, task::JoinHandle};

use crate::{
    domain::{
        cluster::SAMPLE_INTERVAL_MS,
        kinds::TrackedKind,
        recorder::{Observation, Recorder},
        sanitize::EnvRedaction,
    },
    log::{Log, LogConfig, LogEntry, LogError, LogSnapshot, LogStats, Recovery},
    usage::UsageStatus,
    watch::Statuses,
};

/// Most observations folded into one append: one write and at most one fsync for all of them.
const BATCH: usize = 1024;

#[derive(Debug, Error)]
pub enum StoreError {
    #[error(transparent)]
    Log(#[from] LogError),
    #[error("the tracer's log is unavailable: a writer panicked while holding it")]
    Poisoned,
}

#[derive(Debug)]
pub struct Store {
    log: Mutex<Log>,
    recorder: Mutex<Recorder>,
    statuses: Statuses,
    usage: UsageStatus,
}

impl Store {
    /// Opens the log and rebuilds the recorder's view from it. Blocking: reads the whole log.
    pub fn open(
        config: LogConfig,
        kinds: Vec<TrackedKind>,
        redaction: EnvRedaction,
    ) -> Result<(Arc<Self>, Recovery), StoreError> {
        let (log, recovery) = Log::open(config)?;
        let statuses = Statuses::new(kinds.len());
        let mut recorder = Recorder::new(kinds, redaction);
        let snapshot = log.snapshot()?;
        let base = snapshot.base()?;
        for object in &base.objects {
            recorder.restore_object(object);
        }
        for lifecycle in &base.open_lifecycles {
            recorder.restore_lifecycle(lifecycle);
        }
        if let Some(sample) = &base.sample {
            recorder.restore(sample.timestamp_ms, &Record::Sample(sample.clone()));
        }
        for node in &base.nodes {
            recorder.restore(node.timestamp_ms, &Record::Node(node.clone()));
        }
        for entry in snapshot.entries(i64::MIN)? {
            let entry = entry?;
            if let Some(record) = &entry.record.record {
                recorder.restore(entry.timestamp_ms, record);
            }
        }
        let store = Self {
            log: Mutex::new(log),
            recorder: Mutex::new(recorder),
            statuses,
            usage: UsageStatus::default(),
        };
        Ok((Arc::new(store), recovery))
    }

    pub fn statuses(&self) -> &Statuses {
        &self.statuses
    }

    /// Whether usage is recorded (off until [`crate::usage::spawn`] reads it).
    pub fn usage(&self) -> &UsageStatus {
        &self.usage
    }

    pub fn kinds(&self) -> Vec<TrackedKind> {
        self.recorder()
            .map(|r| r.kinds().to_vec())
            .unwrap_or_default()
    }

    /// The recorded kinds as a trace header describes them (plural and scope from discovery).
    pub fn tracer_config(&self) -> pb::TracerConfig {
        let statuses = self.statuses.get();
        pb::TracerConfig {
            tracked_kinds: self
                .kinds()
                .iter()
                .zip(statuses.iter())
                .filter(|(kind, _)| !kind.is_node())
                .map(|(kind, status)| kind.to_proto(&status.plural, status.namespaced))
                .collect(),
            cluster_recorded: self.recorder().is_ok_and(|r| r.records_cluster()),
            usage_recording: self.usage.recording().into(),
            usage_interval_ms: self.usage.interval_ms(),
        }
    }

    pub fn object_count(&self, group: &str, kind: &str) -> u64 {
        self.recorder()
            .map(|r| r.object_count(group, kind))
            .unwrap_or(0)
    }

    pub fn snapshot(&self) -> Result<LogSnapshot, StoreError> {
        Ok(self.log()?.snapshot()?)
    }

    pub fn log_stats(&self) -> Result<LogStats, StoreError> {
        Ok(self.log()?.stats())
    }

    /// What observations record, stamped `now_ms`. Updates the in-memory view at once.
    pub fn observe(
        &self,
        observations: Vec<Observation>,
        now_ms: i64,
    ) -> Result<Vec<LogEntry>, StoreError> {
        let mut recorder = self.recorder()?;
        let observed: Vec<_> = observations
            .into_iter()
            .flat_map(|o| recorder.observe(o, now_ms))
            .collect();
        // After the batch: a sample records the state the batch left.
        let sample = recorder.sample(now_ms);
        Ok(observed
            .into_iter()
            .chain(sample)
            .map(|r| LogEntry {
                timestamp_ms: r.timestamp_ms,
                record: pb::TraceRecord {
                    record: Some(r.record),
                },
            })
            .collect())
    }

    /// Appends entries to the log. Blocking.
    pub fn append(&self, entries: &[LogEntry]) -> Result<(), StoreError> {
        Ok(self.log()?.append(entries)?)
    }

    /// Drains observations into the log in batches until the senders are gone. An append that
    /// fails (a full disk, say) is retried with the same entries, since the in-memory view has
    /// already moved on: nothing observed is dropped, and the watches wait behind the bounded
    /// channel meanwhile.
    pub fn run_recorder(
        self: Arc<Self>,
        mut observations: mpsc::Receiver<Observation>,
    ) -> JoinHandle<()> {
        tokio::spawn(async move {
            let mut batch = Vec::with_capacity(BATCH);
            // Once a second without observations too: a change that came less than a second
            // after the last sample is sampled then, not at the next change.
            let mut ticks = tokio::time::interval(Duration::from_millis(
                u64::try_from(SAMPLE_INTERVAL_MS).unwrap_or(1000),
            ));
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    received = observations.recv_many(&mut batch, BATCH) => {
                        if received == 0 {
                            return;
                        }
                    }
                    _ = ticks.tick() => {}
                }
                let entries = match self.observe(std::mem::take(&mut batch), now_ms()) {
                    Ok(entries) if entries.is_empty() => continue,
                    Ok(entries) => Arc::new(entries),
                    Err(error) => {
                        tracing::error!(%error, "recorder unavailable; stopping");
                        return;
                    }
                };
                loop {
                    let store = self.clone();
                    let pending = entries.clone();
                    match tokio::task::spawn_blocking(move || store.append(&pending)).await {
                        Ok(Ok(())) => break,
                        Ok(Err(error)) => {
                            tracing::error!(%error, "appending to the log failed; retrying");
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                        Err(error) => {
                            tracing::error!(%error, "recorder task failed");
                            return;
                        }
                    }
                }
            }
        })
    }

    /// Syncs on the fsync interval, seals old segments and applies retention.
    pub fn run_maintenance(self: Arc<Self>, every: Duration) -> JoinHandle<()> {
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let store = self.clone();
                let done = tokio::task::spawn_blocking(move || {
                    store.log().map(|mut log| log.maintain(now_ms()))
                })
                .await;
                match done {
                    Ok(Ok(Ok(report))) if report.dropped_segments > 0 => {
                        tracing::info!(
                            segments = report.dropped_segments,
                            entries = report.dropped_entries,
                            "retention folded old segments into the checkpoint"
                        );
                    }
                    Ok(Ok(Err(error))) => tracing::error!(%error, "log maintenance failed"),
                    Ok(Err(error)) => tracing::error!(%error, "log maintenance failed"),
                    Err(error) => tracing::error!(%error, "log maintenance task failed"),
                    _ => {}
                }
            }
        })
    }

    /// Seals the active segment (benchmarks measure what sealed segments take on disk).
    pub fn seal_active(&self) -> Result<(), StoreError> {
        self.log()?.seal()?;
        Ok(())
    }

    /// Makes everything appended so far durable (on shutdown).
    pub fn sync(&self) -> Result<(), StoreError> {
        Ok(self.log()?.sync()?)
    }

    fn log(&self) -> Result<MutexGuard<'_, Log>, StoreError> {
        self.log.lock().map_err(|_| StoreError::Poisoned)
    }

    fn recorder(&self) -> Result<MutexGuard<'_, Recorder>, StoreError> {
        self.recorder.lock().map_err(|_| StoreError::Poisoned)
    }
}
