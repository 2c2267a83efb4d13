//! The metrics API adapter: reads every pod's usage from `metrics.k8s.io/v1beta1` at the
//! configured interval and hands the new windows to the recorder
//! ([`crate::domain::usage`] decides which are new and what a sample holds).

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use ksim_proto::ksim::trace::v1 as pb;
use kube::Client;
use tokio::{sync::mpsc, task::JoinHandle};

use crate::domain::{
    recorder::Observation,
    usage::{PodMetricsList, UsageReader},
};

const PODS_PATH: &str = "/apis/metrics.k8s.io/v1beta1/pods";

/// Whether the tracer records usage, as a trace header says it: unspecified while usage is off
/// or before the first read answered, `NoMetricsApi` while the cluster serves no metrics API,
/// `Recorded` once a read succeeded (kept through a later failed read: the API was there).
#[derive(Debug, Clone, Default)]
pub struct UsageStatus(Arc<Mutex<State>>);

#[derive(Debug, Clone, Copy, Default)]
struct State {
    interval_ms: i64,
    recording: pb::UsageRecording,
}

impl UsageStatus {
    pub fn recording(&self) -> pb::UsageRecording {
        self.get().recording
    }

    /// The read interval; 0 while usage is off.
    pub fn interval_ms(&self) -> i64 {
        self.get().interval_ms
    }

    fn get(&self) -> State {
        self.0.lock().map(|s| *s).unwrap_or_default()
    }

    fn update(&self, change: impl FnOnce(&mut State)) {
        if let Ok(mut state) = self.0.lock() {
            change(&mut state);
        }
    }

    fn set(&self, recording: pb::UsageRecording) {
        self.update(|state| {
            if state.recording != recording {
                tracing::info!(?recording, "usage recording");
                state.recording = recording;
            }
        });
    }
}

/// Reads usage every `interval` until the recorder is gone, reporting in `status`.
pub fn spawn(
    client: Client,
    interval: Duration,
    status: UsageStatus,
    observations: mpsc::Sender<Observation>,
) -> JoinHandle<()> {
    status.update(|state| {
        state.interval_ms = i64::try_from(interval.as_millis()).unwrap_or(i64::MAX);
    });
    tokio::spawn(async move {
        let mut reader = UsageReader::default();
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let list = match read(&client).await {
                Ok(list) => list,
                Err(kube::Error::Api(answer)) if answer.code == 404 => {
                    // The group is not served: no metrics-server, or it was removed after
                    // usage was recorded (which the recording still holds).
                    status.update(|state| {
                        if state.recording != pb::UsageRecording::Recorded {
                            state.recording = pb::UsageRecording::NoMetricsApi;
                        }
                    });
                    continue;
                }
                Err(error) => {
                    // A 503 while metrics-server starts, a timeout: the next read may answer.
                    tracing::warn!(%error, "reading the metrics API failed");
                    continue;
                }
            };
            status.set(pb::UsageRecording::Recorded);
            let read = reader.read(list);
            for refused in &read.refused {
                tracing::warn!(%refused, "usage not recorded");
            }
            for sample in read.samples {
                if observations.send(Observation::Usage(sample)).await.is_err() {
                    return;
                }
            }
        }
    })
}

async fn read(client: &Client) -> Result<PodMetricsList, kube::Error> {
    let request = http::Request::get(PODS_PATH)
        .body(Vec::new())
        .map_err(kube::Error::HttpError)?;
    client.request(request).await
}
