//! A day of a cluster sized for a number of nodes.
//!
//! - **Services**: one Deployment per [`NODES_PER_SERVICE`] nodes, in one namespace per
//!   [`NODES_PER_TEAM`]. Each follows the clock (UTC time of day) as a horizontal pod autoscaler
//!   following its traffic would scale it, re-evaluated every [`AUTOSCALE_PERIOD_MS`]:
//!   `replicas = peak × (trough + (1 − trough) × (1 + cos(2π (t − peak hour) / 24 h)) / 2)`,
//!   the peak hour drawn within two hours of 14:00, the trough between a quarter and a half.
//!   Together the services request about [`SERVICE_SHARE`] of the cluster's CPU at their peak.
//! - **Batch Jobs** arrive as a Poisson process whose rate follows the night (highest at
//!   02:00, a tenth of that at 14:00). Each runs 1 to 16 pods at once for 10 to 60 minutes; at
//!   the night's peak they request about [`JOB_SHARE`] of the CPU. Each pod's lifetime is a
//!   recorded [`pb::PodLifecycle`], and each Job is deleted [`JOB_TTL_MS`] after its last pod
//!   ends, as a TTL controller would.
//! - **CronJobs**: one per [`NODES_PER_CRONJOB`] nodes, each every 15 minutes, hourly or
//!   nightly (01:00-04:59) at a drawn minute, `concurrencyPolicy: Forbid`; each run is one pod
//!   of 1 to 10 minutes (drawn per CronJob, ±10% per run) whose lifetime is recorded under the
//!   CronJob, as the tracer records a CronJob's pods. The runs are the schedule's, so a replay
//!   that plays the CronJob (the driver does) starts them when the recording did.
//!
//! Pod sizes are fractions of a node, so the workload fits the node size it is made for.

use std::f64::consts::TAU;
use std::io::Write;

use ksim_trace::{FORMAT_VERSION, TraceWriter, pb, time::timestamp};
use serde_json::{Value, json};

use crate::SynthError;

pub const DAY_MS: i64 = 86_400_000;
const HOUR_MS: i64 = 3_600_000;
const MINUTE_MS: i64 = 60_000;
/// 2026-01-05T00:00:00Z, a Monday: the default start.
pub const MONDAY_MS: i64 = 1_767_571_200_000;

/// The largest node the workload is sized for: beyond the biggest instances clouds sell, and
/// small enough that a cluster's CPU and memory sums stay far inside u64.
pub const MAX_NODE_CPU_MILLIS: u64 = 10_000 * 1000;
pub const MAX_NODE_MEMORY_MIB: u64 = 64 << 20;
/// The latest a recording may end: a day before the last time a trace can hold, so Job pods
/// that outlive the recording still end inside it.
pub const MAX_END_MS: i64 = ksim_trace::time::MAX_MS - DAY_MS;

pub const NODES_PER_SERVICE: u32 = 5;
pub const NODES_PER_TEAM: u32 = 100;
/// How often a service's replicas are re-evaluated (the HPA's default sync is 15 s, but its
/// scale-down stabilisation window is 5 minutes, which is what a day's curve shows).
pub const AUTOSCALE_PERIOD_MS: i64 = 5 * MINUTE_MS;
/// The cluster's CPU the services request together at their daily peak.
pub const SERVICE_SHARE: f64 = 0.75;
/// The cluster's CPU the Jobs request together at the night's peak.
pub const JOB_SHARE: f64 = 0.25;
/// The Jobs' arrival rate at 14:00 relative to 02:00.
const JOB_DAYTIME_RATE: f64 = 0.1;
const SERVICE_PEAK_HOUR_MS: i64 = 14 * HOUR_MS;
const JOB_PEAK_HOUR_MS: i64 = 2 * HOUR_MS;
/// From a Job's creation to its first pod's start (scheduling, image pull).
const JOB_START_DELAY_MS: i64 = 3_000;
/// Between the starts of one Job's pods.
const JOB_POD_STAGGER_MS: i64 = 200;
pub const JOB_TTL_MS: i64 = 10 * MINUTE_MS;
const JOB_RUNTIME_MS: (i64, i64) = (10 * MINUTE_MS, 60 * MINUTE_MS);
pub const NODES_PER_CRONJOB: u32 = 50;
const CRON_RUNTIME_MS: (i64, i64) = (MINUTE_MS, 10 * MINUTE_MS);
/// A CronJob's pod as a fraction of a node, and how often each is drawn.
const CRON_SIZES: [(f64, u32); 2] = [(1.0 / 16.0, 1), (1.0 / 8.0, 1)];

/// A service pod's CPU and memory as fractions of a node, and how often each is drawn.
const SERVICE_SIZES: [(f64, u32); 4] = [(1.0 / 16.0, 4), (1.0 / 8.0, 3), (0.25, 2), (0.5, 1)];
const JOB_SIZES: [(f64, u32); 2] = [(0.25, 1), (0.5, 1)];
const JOB_PARALLELISM: [(u32, u32); 5] = [(1, 5), (2, 4), (4, 3), (8, 2), (16, 1)];
/// Memory per CPU, as a share of the node's memory per CPU: pods leave half the memory free.
const MEMORY_PER_CPU: f64 = 0.5;

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct DayWorkload {
    /// The cluster's size at its daily peak: the nodes the workload is sized to fill.
    pub nodes: u32,
    /// What one node can allocate.
    pub node_cpu_millis: u64,
    pub node_memory_mib: u64,
    /// Length of the recording from `start_ms`.
    pub length_ms: i64,
    /// In ms since the Unix epoch; the curves follow its UTC time of day.
    pub start_ms: i64,
    pub seed: u64,
}

impl Default for DayWorkload {
    fn default() -> Self {
        Self {
            nodes: 1000,
            node_cpu_millis: 4000,
            node_memory_mib: 16_384,
            length_ms: DAY_MS,
            start_ms: MONDAY_MS,
            seed: 1,
        }
    }
}

impl DayWorkload {
    fn check(&self) -> Result<(), SynthError> {
        let bad = |name, value: String, expected| {
            Err(SynthError::BadParameter {
                name,
                value,
                expected,
            })
        };
        if !(1..=100_000).contains(&self.nodes) {
            return bad("nodes", self.nodes.to_string(), "expected 1 to 100000");
        }
        if !(500..=MAX_NODE_CPU_MILLIS).contains(&self.node_cpu_millis) {
            return bad(
                "node CPU",
                format!("{}m", self.node_cpu_millis),
                "expected 500m to 10000 cores",
            );
        }
        if !(512..=MAX_NODE_MEMORY_MIB).contains(&self.node_memory_mib) {
            return bad(
                "node memory",
                format!("{}Mi", self.node_memory_mib),
                "expected 512Mi to 64Ti",
            );
        }
        if !(MINUTE_MS..=31 * DAY_MS).contains(&self.length_ms) {
            return bad(
                "length",
                format!("{} ms", self.length_ms),
                "expected 1 minute to 31 days",
            );
        }
        // Checked as a difference: the sum of a start near i64::MAX and a length overflows.
        if self.start_ms < 0 || self.start_ms > MAX_END_MS - self.length_ms {
            return bad(
                "start",
                format!("{} ms", self.start_ms),
                "expected 1970 or later, the recording ending a day before the end of 9999",
            );
        }
        Ok(())
    }

    fn time_of_day(&self, offset_ms: i64) -> i64 {
        (self.start_ms + offset_ms).rem_euclid(DAY_MS)
    }

    /// A pod of `fraction` of a node: (CPU millis, memory MiB).
    fn pod_size(&self, fraction: f64) -> (u64, u64) {
        let cpu = (self.node_cpu_millis as f64 * fraction).round() as u64;
        let memory = (self.node_memory_mib as f64 * fraction * MEMORY_PER_CPU).round() as u64;
        (cpu.max(1), memory.max(1))
    }
}

/// What [`write`] wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub services: usize,
    pub jobs: usize,
    pub job_pods: usize,
    pub cronjobs: usize,
    /// Runs of the CronJobs within the recording, one pod each.
    pub cron_runs: usize,
    pub events: u64,
    pub lifecycles: u64,
    /// Requested CPU at the start of every [`AUTOSCALE_PERIOD_MS`].
    pub profile: Vec<Bucket>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    pub offset_ms: i64,
    pub service_cpu_millis: u64,
    pub job_cpu_millis: u64,
}

impl Bucket {
    pub fn cpu_millis(&self) -> u64 {
        self.service_cpu_millis + self.job_cpu_millis
    }
}

impl Summary {
    /// The bucket requesting the most CPU.
    pub fn peak(&self) -> Option<Bucket> {
        self.profile.iter().copied().max_by_key(Bucket::cpu_millis)
    }
}

/// Writes the trace of `workload` to `out`.
pub fn write<W: Write>(workload: &DayWorkload, out: W) -> Result<(W, Summary), SynthError> {
    workload.check()?;
    let mut rng = fastrand::Rng::with_seed(workload.seed);
    let services = services(workload, &mut rng);
    let jobs = jobs(workload, &mut rng);
    let cronjobs = cronjobs(workload, &mut rng);

    let timelines: Vec<Vec<(i64, u32)>> = services
        .iter()
        .map(|service| service.timeline(workload))
        .collect();
    // What happens when, without the objects: they are made one at a time as they are
    // written, so memory follows the number of events, not their bytes.
    let mut happenings: Vec<(i64, Happening)> = Vec::new();
    for (i, timeline) in timelines.iter().enumerate() {
        happenings.extend(
            timeline
                .iter()
                .map(|&(offset_ms, replicas)| (offset_ms, Happening::Scaled(i, replicas))),
        );
    }
    // Made before the window, so they open it with the services.
    happenings.extend((0..cronjobs.len()).map(|i| (0, Happening::CronJobCreated(i))));
    for (i, job) in jobs.iter().enumerate() {
        happenings.push((job.created_ms, Happening::JobCreated(i)));
        if let Some(deleted_ms) = job.deleted_ms(workload) {
            happenings.push((deleted_ms, Happening::JobDeleted(i)));
        }
    }
    // Stable: a service's creation stays before its first change at the same instant.
    happenings.sort_by_key(|(offset_ms, _)| *offset_ms);

    let mut writer = TraceWriter::new(out, &header(workload))?;
    for &(offset_ms, happening) in &happenings {
        let (applied, deleted) = match happening {
            Happening::Scaled(i, replicas) => (Some(services[i].deployment(replicas)), None),
            Happening::JobCreated(i) => (Some(jobs[i].job()), None),
            Happening::JobDeleted(i) => (None, Some(jobs[i].identity())),
            Happening::CronJobCreated(i) => (Some(cronjobs[i].cronjob()), None),
        };
        writer.write_event(&pb::TraceEvent {
            timestamp_ms: workload.start_ms + offset_ms,
            applied: applied.into_iter().collect(),
            deleted: deleted.into_iter().collect(),
        })?;
    }
    for job in &jobs {
        for lifecycle in job.lifecycles(workload) {
            writer.write_lifecycle(&lifecycle)?;
        }
    }
    for cronjob in &cronjobs {
        for lifecycle in cronjob.lifecycles(workload) {
            writer.write_lifecycle(&lifecycle)?;
        }
    }
    let (out, trailer) = writer.finish()?;
    let summary = Summary {
        services: services.len(),
        jobs: jobs.len(),
        job_pods: jobs.iter().map(|job| job.pods.len()).sum(),
        cronjobs: cronjobs.len(),
        cron_runs: cronjobs.iter().map(|cronjob| cronjob.pods.len()).sum(),
        events: trailer.event_count,
        lifecycles: trailer.lifecycle_count,
        profile: profile(workload, &services, &timelines, &jobs, &cronjobs),
    };
    Ok((out, summary))
}

fn header(workload: &DayWorkload) -> pb::TraceHeader {
    let kind = |gvk: pb::GroupVersionKind, plural: &str, template: &str| pb::TrackedKindConfig {
        gvk: Some(gvk),
        plural: plural.to_owned(),
        namespaced: true,
        pod_template_paths: vec![template.to_owned()],
        track_lifecycles: true,
        skip_owned: true,
    };
    let end_ms = workload.start_ms + workload.length_ms;
    pb::TraceHeader {
        format_version: FORMAT_VERSION,
        tracer_config: Some(pb::TracerConfig {
            tracked_kinds: vec![
                kind(gvk("apps", "Deployment"), "deployments", "/spec/template"),
                kind(gvk("batch", "Job"), "jobs", "/spec/template"),
                kind(
                    gvk("batch", "CronJob"),
                    "cronjobs",
                    "/spec/jobTemplate/spec/template",
                ),
            ],
            // Generated: there is no cluster state to compare a replay with, and no usage.
            cluster_recorded: false,
            usage_recording: pb::UsageRecording::Unspecified.into(),
            usage_interval_ms: 0,
        }),
        start_time: Some(timestamp(workload.start_ms)),
        end_time: Some(timestamp(end_ms)),
        created_by: "ksim trace generate".to_owned(),
        create_time: Some(timestamp(end_ms)),
        origin: format!(
            "generated: a day of a {}-node cluster ({}m CPU, {}Mi memory a node), seed {}",
            workload.nodes, workload.node_cpu_millis, workload.node_memory_mib, workload.seed
        ),
        transforms: Vec::new(),
    }
}

#[derive(Debug, Clone, Copy)]
enum Happening {
    /// Service `.0` created or scaled to `.1` replicas.
    Scaled(usize, u32),
    JobCreated(usize),
    JobDeleted(usize),
    CronJobCreated(usize),
}

struct Service {
    namespace: String,
    name: String,
    cpu_millis: u64,
    memory_mib: u64,
    peak: f64,
    trough: f64,
    peak_hour_ms: i64,
    /// When in each autoscaling period this service is re-evaluated: real autoscalers are not
    /// in step with each other.
    phase_ms: i64,
}

fn services(workload: &DayWorkload, rng: &mut fastrand::Rng) -> Vec<Service> {
    let count = workload.nodes.div_ceil(NODES_PER_SERVICE);
    let teams = workload.nodes.div_ceil(NODES_PER_TEAM);
    let drawn: Vec<(f64, f64, f64, i64, i64)> = (0..count)
        .map(|_| {
            // Service sizes spread over an order of magnitude, as real ones do.
            let weight = (rng.f64() * 2.0 - 1.0).exp();
            let fraction = pick(rng, &SERVICE_SIZES);
            let trough = 0.25 + rng.f64() * 0.25;
            let peak_hour =
                SERVICE_PEAK_HOUR_MS + ((rng.f64() * 4.0 - 2.0) * HOUR_MS as f64) as i64;
            let phase = rng.i64(0..AUTOSCALE_PERIOD_MS);
            (weight, fraction, trough, peak_hour, phase)
        })
        .collect();
    let total_weight: f64 = drawn.iter().map(|d| d.0).sum();
    let target_millis = SERVICE_SHARE * f64::from(workload.nodes) * workload.node_cpu_millis as f64;
    drawn
        .into_iter()
        .zip(0u32..)
        .map(|((weight, fraction, trough, peak_hour_ms, phase_ms), i)| {
            let (cpu_millis, memory_mib) = workload.pod_size(fraction);
            Service {
                namespace: team(i % teams),
                name: format!("svc-{i:04}"),
                cpu_millis,
                memory_mib,
                peak: (target_millis * weight / total_weight / cpu_millis as f64).max(1.0),
                trough,
                peak_hour_ms,
                phase_ms,
            }
        })
        .collect()
}

impl Service {
    fn replicas_at(&self, time_of_day_ms: i64) -> u32 {
        let angle = TAU * (time_of_day_ms - self.peak_hour_ms) as f64 / DAY_MS as f64;
        let level = self.trough + (1.0 - self.trough) * (1.0 + angle.cos()) / 2.0;
        ((self.peak * level).round() as u32).max(1)
    }

    /// (offset, replicas) of its creation and of every change after it.
    fn timeline(&self, workload: &DayWorkload) -> Vec<(i64, u32)> {
        let mut timeline = vec![(0, self.replicas_at(workload.time_of_day(0)))];
        let mut offset_ms = self.phase_ms.max(1);
        while offset_ms < workload.length_ms {
            let replicas = self.replicas_at(workload.time_of_day(offset_ms));
            if timeline.last().is_some_and(|&(_, last)| last != replicas) {
                timeline.push((offset_ms, replicas));
            }
            offset_ms += AUTOSCALE_PERIOD_MS;
        }
        timeline
    }

    fn deployment(&self, replicas: u32) -> pb::TraceObject {
        let labels = json!({ "app": self.name });
        let deployment = json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": { "name": self.name, "namespace": self.namespace, "labels": labels },
            "spec": {
                "replicas": replicas,
                "selector": { "matchLabels": labels },
                "template": {
                    "metadata": { "labels": labels },
                    "spec": { "containers": [container(
                        &format!("registry.example/{}/{}:1.0.0", self.namespace, self.name),
                        self.cpu_millis,
                        self.memory_mib,
                    )] },
                },
            },
        });
        object(
            "apps",
            "Deployment",
            &self.namespace,
            &self.name,
            Some(&deployment),
        )
    }
}

struct Job {
    namespace: String,
    name: String,
    created_ms: i64,
    cpu_millis: u64,
    memory_mib: u64,
    /// Each pod's (start, end) offsets; all run at once (parallelism = completions).
    pods: Vec<(i64, i64)>,
}

/// The Jobs' arrival rate relative to its peak, at a time of day.
fn job_intensity(time_of_day_ms: i64) -> f64 {
    let angle = TAU * (time_of_day_ms - JOB_PEAK_HOUR_MS) as f64 / DAY_MS as f64;
    JOB_DAYTIME_RATE + (1.0 - JOB_DAYTIME_RATE) * (1.0 + angle.cos()) / 2.0
}

fn mean<T: Copy>(choices: &[(T, u32)], value: impl Fn(T) -> f64) -> f64 {
    let total: u32 = choices.iter().map(|c| c.1).sum();
    choices
        .iter()
        .map(|&(choice, weight)| value(choice) * f64::from(weight))
        .sum::<f64>()
        / f64::from(total)
}

fn jobs(workload: &DayWorkload, rng: &mut fastrand::Rng) -> Vec<Job> {
    let teams = workload.nodes.div_ceil(NODES_PER_TEAM);
    // Little's law: CPU in use = arrival rate × CPU-milliseconds a Job uses.
    let job_work = mean(&JOB_PARALLELISM, f64::from)
        * mean(&JOB_SIZES, |f| f * workload.node_cpu_millis as f64)
        * (JOB_RUNTIME_MS.0 + JOB_RUNTIME_MS.1) as f64
        / 2.0;
    let peak_rate_per_ms =
        JOB_SHARE * f64::from(workload.nodes) * workload.node_cpu_millis as f64 / job_work;
    let mut jobs = Vec::new();
    let mut offset_ms = 0.0;
    loop {
        // Thinning: candidates at the peak rate, each kept with the rate of its time of day.
        offset_ms += -(1.0 - rng.f64()).ln() / peak_rate_per_ms;
        let created_ms = offset_ms as i64;
        if created_ms >= workload.length_ms {
            break;
        }
        if rng.f64() >= job_intensity(workload.time_of_day(created_ms)) {
            continue;
        }
        let parallelism = pick(rng, &JOB_PARALLELISM);
        let (cpu_millis, memory_mib) = workload.pod_size(pick(rng, &JOB_SIZES));
        let runtime_ms = rng.i64(JOB_RUNTIME_MS.0..=JOB_RUNTIME_MS.1);
        let pods = (0..i64::from(parallelism))
            .map(|k| {
                let start = created_ms + JOB_START_DELAY_MS + k * JOB_POD_STAGGER_MS;
                // Pods of one Job take about, not exactly, as long as each other.
                let runtime = (runtime_ms as f64 * (0.9 + 0.2 * rng.f64())) as i64;
                (start, start + runtime)
            })
            .collect();
        jobs.push(Job {
            namespace: team(rng.u32(0..teams)),
            name: format!("batch-{:06}", jobs.len()),
            created_ms,
            cpu_millis,
            memory_mib,
            pods,
        });
    }
    jobs
}

impl Job {
    fn template(&self) -> Value {
        json!({
            "metadata": { "labels": { "job": self.name } },
            "spec": {
                "restartPolicy": "Never",
                "containers": [container(
                    &format!("registry.example/{}/batch:2.3.1", self.namespace),
                    self.cpu_millis,
                    self.memory_mib,
                )],
            },
        })
    }

    fn job(&self) -> pb::TraceObject {
        let job = json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": { "name": self.name, "namespace": self.namespace },
            "spec": {
                "parallelism": self.pods.len(),
                "completions": self.pods.len(),
                "backoffLimit": 2,
                "template": self.template(),
            },
        });
        object("batch", "Job", &self.namespace, &self.name, Some(&job))
    }

    fn identity(&self) -> pb::TraceObject {
        object("batch", "Job", &self.namespace, &self.name, None)
    }

    /// When the TTL controller deletes it, if within the recording.
    fn deleted_ms(&self, workload: &DayWorkload) -> Option<i64> {
        let last_end = self.pods.iter().map(|&(_, end)| end).max()?;
        let deleted = last_end + JOB_TTL_MS;
        (deleted < workload.length_ms).then_some(deleted)
    }

    fn lifecycles(&self, workload: &DayWorkload) -> Vec<pb::PodLifecycle> {
        lifecycles(
            workload,
            "Job",
            &self.namespace,
            &self.name,
            &self.template(),
            &self.pods,
        )
    }
}

/// When a CronJob runs: at `phase_ms` into every `period_ms` of UTC time (both divide a day).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cadence {
    period_ms: i64,
    phase_ms: i64,
}

impl Cadence {
    fn draw(rng: &mut fastrand::Rng) -> Self {
        let minute = rng.i64(0..60);
        match rng.u32(0..4) {
            0 => Self {
                period_ms: 15 * MINUTE_MS,
                phase_ms: minute % 15 * MINUTE_MS,
            },
            1 | 2 => Self {
                period_ms: HOUR_MS,
                phase_ms: minute * MINUTE_MS,
            },
            _ => Self {
                period_ms: DAY_MS,
                phase_ms: rng.i64(1..5) * HOUR_MS + minute * MINUTE_MS,
            },
        }
    }

    /// The five cron fields.
    fn schedule(&self) -> String {
        let minute = self.phase_ms % HOUR_MS / MINUTE_MS;
        match self.period_ms {
            DAY_MS => format!("{minute} {} * * *", self.phase_ms / HOUR_MS),
            HOUR_MS => format!("{minute} * * * *"),
            _ => format!("{minute}/15 * * * *"),
        }
    }

    /// Offsets of its runs after the window opens (a run at its very start belongs to the
    /// time before it) and before it closes.
    fn runs(&self, workload: &DayWorkload) -> Vec<i64> {
        let mut first = (self.phase_ms - workload.start_ms).rem_euclid(self.period_ms);
        if first == 0 {
            first = self.period_ms;
        }
        (0..)
            .map(|n| first + n * self.period_ms)
            .take_while(|&offset| offset < workload.length_ms)
            .collect()
    }
}

struct CronJob {
    namespace: String,
    name: String,
    cadence: Cadence,
    cpu_millis: u64,
    memory_mib: u64,
    /// Each run's pod: (start, end) offsets.
    pods: Vec<(i64, i64)>,
}

fn cronjobs(workload: &DayWorkload, rng: &mut fastrand::Rng) -> Vec<CronJob> {
    let teams = workload.nodes.div_ceil(NODES_PER_TEAM);
    (0..workload.nodes.div_ceil(NODES_PER_CRONJOB))
        .map(|i| {
            let cadence = Cadence::draw(rng);
            let (cpu_millis, memory_mib) = workload.pod_size(pick(rng, &CRON_SIZES));
            let runtime_ms = rng.i64(CRON_RUNTIME_MS.0..=CRON_RUNTIME_MS.1);
            let pods = cadence
                .runs(workload)
                .into_iter()
                .map(|run| {
                    let start = run + JOB_START_DELAY_MS;
                    (
                        start,
                        start + (runtime_ms as f64 * (0.9 + 0.2 * rng.f64())) as i64,
                    )
                })
                .collect();
            CronJob {
                namespace: team(i % teams),
                name: format!("cron-{i:04}"),
                cadence,
                cpu_millis,
                memory_mib,
                pods,
            }
        })
        .collect()
}

impl CronJob {
    fn template(&self) -> Value {
        json!({
            "metadata": { "labels": { "cronjob": self.name } },
            "spec": {
                "restartPolicy": "Never",
                "containers": [container(
                    &format!("registry.example/{}/{}:1.4.0", self.namespace, self.name),
                    self.cpu_millis,
                    self.memory_mib,
                )],
            },
        })
    }

    fn cronjob(&self) -> pb::TraceObject {
        let cronjob = json!({
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": { "name": self.name, "namespace": self.namespace },
            "spec": {
                "schedule": self.cadence.schedule(),
                "concurrencyPolicy": "Forbid",
                "jobTemplate": { "spec": { "backoffLimit": 0, "template": self.template() } },
            },
        });
        object(
            "batch",
            "CronJob",
            &self.namespace,
            &self.name,
            Some(&cronjob),
        )
    }

    /// One per run, in run order: the n-th pod a replay starts for it is launch n.
    fn lifecycles(&self, workload: &DayWorkload) -> Vec<pb::PodLifecycle> {
        let template = self.template();
        lifecycles(
            workload,
            "CronJob",
            &self.namespace,
            &self.name,
            &template,
            &self.pods,
        )
    }
}

/// The recorded lifetimes of a batch owner's pods, `pods` their (start, end) offsets in launch
/// order; a pod still running when the recording ends has no end.
fn lifecycles(
    workload: &DayWorkload,
    kind: &str,
    namespace: &str,
    name: &str,
    template: &Value,
    pods: &[(i64, i64)],
) -> Vec<pb::PodLifecycle> {
    // One template, so one hash; only compared for equality within the trace.
    let pod_spec_hash = ksim_trace::hash::stable_hash(&template["spec"]);
    (0u32..)
        .zip(pods)
        .map(|(launch_index, &(start, end))| {
            let ended = end < workload.length_ms;
            pb::PodLifecycle {
                owner_gvk: Some(gvk("batch", kind)),
                owner_namespace: namespace.to_owned(),
                owner_name: name.to_owned(),
                pod_spec_hash,
                launch_index,
                start_ms: workload.start_ms + start,
                end_ms: if ended { workload.start_ms + end } else { 0 },
                outcome: if ended {
                    pb::PodOutcome::Succeeded
                } else {
                    pb::PodOutcome::Running
                } as i32,
                pod_name: format!("{name}-{launch_index}"),
                ..Default::default()
            }
        })
        .collect()
}

/// Requested CPU at the start of each autoscaling period: the services' replicas then in
/// force, and the Job pods running then.
fn profile(
    workload: &DayWorkload,
    services: &[Service],
    timelines: &[Vec<(i64, u32)>],
    jobs: &[Job],
    cronjobs: &[CronJob],
) -> Vec<Bucket> {
    let buckets = buckets_before(workload.length_ms);
    let mut profile: Vec<Bucket> = (0..buckets)
        .map(|i| Bucket {
            offset_ms: i as i64 * AUTOSCALE_PERIOD_MS,
            service_cpu_millis: 0,
            job_cpu_millis: 0,
        })
        .collect();
    for (service, timeline) in services.iter().zip(timelines) {
        let mut changes = timeline.iter().peekable();
        let mut in_force = 0;
        for bucket in &mut profile {
            while let Some(&(_, replicas)) =
                changes.next_if(|&&(offset_ms, _)| offset_ms <= bucket.offset_ms)
            {
                in_force = replicas;
            }
            bucket.service_cpu_millis += u64::from(in_force) * service.cpu_millis;
        }
    }
    let batch = jobs
        .iter()
        .map(|job| (job.cpu_millis, &job.pods))
        .chain(cronjobs.iter().map(|cron| (cron.cpu_millis, &cron.pods)));
    for (cpu_millis, pods) in batch {
        for &(start, end) in pods {
            // The buckets whose start falls within the pod's run.
            let first = buckets_before(start);
            let last = buckets_before(end);
            for bucket in profile.iter_mut().take(last).skip(first) {
                bucket.job_cpu_millis += cpu_millis;
            }
        }
    }
    profile
}

/// How many buckets start before `offset_ms`.
fn buckets_before(offset_ms: i64) -> usize {
    let offset = u64::try_from(offset_ms).unwrap_or(0);
    usize::try_from(offset.div_ceil(AUTOSCALE_PERIOD_MS.unsigned_abs())).unwrap_or(usize::MAX)
}

fn team(i: u32) -> String {
    format!("team-{i:02}")
}

fn container(image: &str, cpu_millis: u64, memory_mib: u64) -> Value {
    json!({
        "name": "main",
        "image": image,
        "resources": { "requests": {
            "cpu": format!("{cpu_millis}m"),
            "memory": format!("{memory_mib}Mi"),
        } },
    })
}

fn pick<T: Copy>(rng: &mut fastrand::Rng, choices: &[(T, u32)]) -> T {
    let total: u32 = choices.iter().map(|c| c.1).sum();
    let mut drawn = rng.u32(0..total);
    for &(choice, weight) in choices {
        if drawn < weight {
            return choice;
        }
        drawn -= weight;
    }
    // Unreachable: drawn < total, the sum of the weights.
    choices[choices.len() - 1].0
}

fn gvk(group: &str, kind: &str) -> pb::GroupVersionKind {
    pb::GroupVersionKind {
        group: group.to_owned(),
        version: "v1".to_owned(),
        kind: kind.to_owned(),
    }
}

/// A traced object; `None` is a delete carrying only the identity.
fn object(
    group: &str,
    kind: &str,
    namespace: &str,
    name: &str,
    json: Option<&Value>,
) -> pb::TraceObject {
    pb::TraceObject {
        gvk: Some(gvk(group, kind)),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        object_json: json.map_or_else(Vec::new, |json| json.to_string().into_bytes()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use ksim_trace::{TraceReader, read_trace};

    use super::*;

    /// A smaller day than the default, so debug-built tests stay quick; the default's
    /// proportions hold at any size.
    fn workload() -> DayWorkload {
        DayWorkload {
            nodes: 200,
            ..DayWorkload::default()
        }
    }

    fn generated(workload: &DayWorkload) -> (Vec<u8>, Summary) {
        write(workload, Vec::new()).unwrap()
    }

    fn bucket_at(summary: &Summary, hour: i64) -> Bucket {
        summary.profile[usize::try_from(hour * HOUR_MS / AUTOSCALE_PERIOD_MS).unwrap()]
    }

    #[test]
    fn the_same_parameters_write_the_same_bytes_and_another_seed_others() {
        let (first, _) = generated(&workload());
        let (again, _) = generated(&workload());
        assert!(first == again, "two runs of one seed differ");
        let (other, _) = generated(&DayWorkload {
            seed: 2,
            ..workload()
        });
        assert!(first != other);
    }

    #[test]
    fn services_peak_in_the_afternoon_and_jobs_at_night() {
        let (_, summary) = generated(&workload());
        let capacity = 200.0 * 4000.0;
        let afternoon = bucket_at(&summary, 14);
        let night = bucket_at(&summary, 2);
        // Troughs are a quarter to a half of each service's peak.
        assert!(
            afternoon.service_cpu_millis as f64 > 1.8 * night.service_cpu_millis as f64,
            "{afternoon:?} {night:?}"
        );
        // Arrivals at 02:00 are ten times those at 14:00; Jobs run up to an hour.
        assert!(
            night.job_cpu_millis > 3 * afternoon.job_cpu_millis,
            "{afternoon:?} {night:?}"
        );
        let share = |millis: u64| millis as f64 / capacity;
        let services = share(afternoon.service_cpu_millis);
        assert!((0.6..0.85).contains(&services), "services {services}");
        let jobs = share(night.job_cpu_millis);
        assert!((0.12..0.4).contains(&jobs), "jobs {jobs}");
        // Sized for its nodes: the busiest moment requests most of the cluster, never more.
        let peak = share(summary.peak().unwrap().cpu_millis());
        assert!((0.7..0.95).contains(&peak), "peak {peak}");
    }

    #[test]
    fn the_trace_reads_back_complete_and_validates_clean() {
        let (bytes, summary) = generated(&workload());
        let trace = read_trace(&bytes).unwrap();
        assert_eq!(trace.trailer.event_count, summary.events);
        assert_eq!(trace.trailer.lifecycle_count, summary.lifecycles);
        assert_eq!(
            summary.lifecycles,
            (summary.job_pods + summary.cron_runs) as u64
        );
        assert!(!trace.header.tracer_config.unwrap().cluster_recorded);
        assert_eq!(trace.header.start_time.unwrap().seconds * 1000, MONDAY_MS);

        let mut findings = Vec::new();
        let reader = TraceReader::new(&bytes[..]).unwrap().unordered();
        ksim_lint::lint(reader, ksim_lint::Options::default(), &mut |finding| {
            findings.push(finding.to_string());
        })
        .unwrap();
        assert!(findings.is_empty(), "{findings:#?}");

        // Every service is created once, first, then only changes its replicas.
        let mut replicas: BTreeMap<String, Vec<i64>> = BTreeMap::new();
        for event in &trace.events {
            for applied in &event.applied {
                let object: Value = serde_json::from_slice(&applied.object_json).unwrap();
                if applied.gvk.as_ref().unwrap().kind == "Deployment" {
                    replicas
                        .entry(applied.name.clone())
                        .or_default()
                        .push(object["spec"]["replicas"].as_i64().unwrap());
                }
            }
        }
        assert_eq!(replicas.len(), summary.services);
        for (name, history) in &replicas {
            assert!(history.iter().all(|&r| r >= 1), "{name} {history:?}");
            assert!(
                history.windows(2).all(|pair| pair[0] != pair[1]),
                "{name} repeats a value: {history:?}"
            );
        }
    }

    #[test]
    fn each_job_has_a_lifetime_per_pod_and_is_deleted_after_its_pods_end() {
        let (bytes, summary) = generated(&workload());
        let trace = read_trace(&bytes).unwrap();
        let mut created: BTreeMap<(String, String), (i64, i64)> = BTreeMap::new();
        let mut deleted: BTreeMap<(String, String), i64> = BTreeMap::new();
        for event in &trace.events {
            for applied in event
                .applied
                .iter()
                .filter(|o| o.gvk.as_ref().unwrap().kind == "Job")
            {
                let object: Value = serde_json::from_slice(&applied.object_json).unwrap();
                let key = (applied.namespace.clone(), applied.name.clone());
                let pods = object["spec"]["completions"].as_i64().unwrap();
                assert_eq!(object["spec"]["parallelism"].as_i64(), Some(pods));
                assert!(created.insert(key, (event.timestamp_ms, pods)).is_none());
            }
            for gone in &event.deleted {
                deleted.insert(
                    (gone.namespace.clone(), gone.name.clone()),
                    event.timestamp_ms,
                );
            }
        }
        assert_eq!(created.len(), summary.jobs);
        let mut pods: BTreeMap<(String, String), Vec<&pb::PodLifecycle>> = BTreeMap::new();
        for lifecycle in &trace.lifecycles {
            pods.entry((
                lifecycle.owner_namespace.clone(),
                lifecycle.owner_name.clone(),
            ))
            .or_default()
            .push(lifecycle);
        }
        let end_ms = MONDAY_MS + DAY_MS;
        for (key, &(created_ms, count)) in &created {
            let lifecycles = &pods[key];
            assert_eq!(lifecycles.len() as i64, count, "{key:?}");
            let indexes: BTreeSet<u32> = lifecycles.iter().map(|l| l.launch_index).collect();
            assert_eq!(indexes.len() as i64, count);
            for lifecycle in lifecycles {
                assert!(lifecycle.start_ms > created_ms);
                if lifecycle.outcome() == pb::PodOutcome::Succeeded {
                    let ran = lifecycle.end_ms - lifecycle.start_ms;
                    assert!((9 * MINUTE_MS..=66 * MINUTE_MS).contains(&ran), "{ran}");
                } else {
                    // Still running when the recording ends.
                    assert_eq!(lifecycle.outcome(), pb::PodOutcome::Running);
                    assert_eq!(lifecycle.end_ms, 0);
                    assert!(!deleted.contains_key(key));
                }
            }
            if let Some(&deleted_ms) = deleted.get(key) {
                let last_end = lifecycles.iter().map(|l| l.end_ms).max().unwrap();
                assert_eq!(deleted_ms, last_end + JOB_TTL_MS);
                assert!(deleted_ms < end_ms);
            }
        }
        assert!(
            deleted.len() * 10 > created.len() * 9,
            "most Jobs end within the day"
        );
    }

    #[test]
    fn cronjobs_run_on_their_schedule_with_a_lifetime_per_run() {
        let (bytes, summary) = generated(&workload());
        let trace = read_trace(&bytes).unwrap();
        let cronjobs: Vec<Value> = trace
            .events
            .iter()
            .filter(|event| event.timestamp_ms == MONDAY_MS)
            .flat_map(|event| &event.applied)
            .filter(|o| o.gvk.as_ref().unwrap().kind == "CronJob")
            .map(|o| serde_json::from_slice(&o.object_json).unwrap())
            .collect();
        assert_eq!(cronjobs.len(), 4, "one per 50 of the 200 nodes");
        assert_eq!(summary.cronjobs, 4);
        let mut runs = 0;
        for cronjob in &cronjobs {
            let name = cronjob["metadata"]["name"].as_str().unwrap();
            let schedule = cronjob["spec"]["schedule"].as_str().unwrap();
            let fields: Vec<&str> = schedule.split(' ').collect();
            let minute: i64 = fields[0].trim_end_matches("/15").parse().unwrap();
            let (period, phase) = match (fields[0].ends_with("/15"), fields[1]) {
                (true, "*") => (15 * MINUTE_MS, minute * MINUTE_MS),
                (false, "*") => (HOUR_MS, minute * MINUTE_MS),
                (false, hour) => {
                    let hour: i64 = hour.parse().unwrap();
                    assert!((1..5).contains(&hour), "{schedule}");
                    (DAY_MS, hour * HOUR_MS + minute * MINUTE_MS)
                }
                _ => panic!("{schedule}"),
            };
            let mut launches: Vec<&pb::PodLifecycle> = trace
                .lifecycles
                .iter()
                .filter(|l| l.owner_name == name)
                .collect();
            launches.sort_by_key(|l| l.launch_index);
            // Strictly inside the day: a run at midnight belongs to the day before or after.
            let expected = DAY_MS / period - i64::from(phase == 0);
            assert_eq!(launches.len() as i64, expected, "{schedule}");
            for (n, launch) in (0u32..).zip(&launches) {
                assert_eq!(launch.launch_index, n);
                assert_eq!(launch.owner_gvk.as_ref().unwrap().kind, "CronJob");
                // Each run starts at a time the schedule names, a pod-start delay later.
                let run = launch.start_ms - JOB_START_DELAY_MS;
                assert_eq!(run.rem_euclid(period), phase, "{schedule}");
                assert!(run > MONDAY_MS && run < MONDAY_MS + DAY_MS);
                if launch.end_ms != 0 {
                    let ran = launch.end_ms - launch.start_ms;
                    assert!((54_000..=11 * MINUTE_MS).contains(&ran), "{ran}");
                }
            }
            runs += launches.len();
        }
        assert_eq!(summary.cron_runs, runs);
    }

    #[test]
    fn the_node_size_sizes_the_pods() {
        let small = DayWorkload {
            nodes: 20,
            node_cpu_millis: 2000,
            node_memory_mib: 8192,
            length_ms: 6 * HOUR_MS,
            ..DayWorkload::default()
        };
        let (bytes, summary) = generated(&small);
        let trace = read_trace(&bytes).unwrap();
        assert_eq!(summary.services, 4);
        for event in &trace.events {
            for applied in &event.applied {
                let object: Value = serde_json::from_slice(&applied.object_json).unwrap();
                let template = match applied.gvk.as_ref().unwrap().kind.as_str() {
                    "CronJob" => &object["spec"]["jobTemplate"]["spec"]["template"],
                    _ => &object["spec"]["template"],
                };
                let requests = &template["spec"]["containers"][0]["resources"]["requests"];
                let cpu: u64 = requests["cpu"]
                    .as_str()
                    .unwrap()
                    .trim_end_matches('m')
                    .parse()
                    .unwrap();
                assert!(cpu <= 1000, "at most half a 2-core node: {requests}");
                assert!(event.timestamp_ms < MONDAY_MS + 6 * HOUR_MS);
            }
        }
        assert_eq!(summary.profile.len(), 72);
    }

    #[test]
    fn bad_parameters_are_named() {
        let error = |workload: DayWorkload| write(&workload, Vec::new()).unwrap_err().to_string();
        assert_eq!(
            error(DayWorkload {
                nodes: 0,
                ..workload()
            }),
            "nodes is 0: expected 1 to 100000"
        );
        assert_eq!(
            error(DayWorkload {
                node_cpu_millis: 100,
                ..workload()
            }),
            "node CPU is 100m: expected 500m to 10000 cores"
        );
        // Sizes whose products overflowed u64 (1e18 cores, 1Ei) are refused, not multiplied.
        assert_eq!(
            error(DayWorkload {
                node_cpu_millis: u64::MAX,
                node_memory_mib: 1 << 40,
                ..workload()
            }),
            "node CPU is 18446744073709551615m: expected 500m to 10000 cores"
        );
        assert_eq!(
            error(DayWorkload {
                node_memory_mib: 1 << 40,
                ..workload()
            }),
            "node memory is 1099511627776Mi: expected 512Mi to 64Ti"
        );
        // The largest sizes accepted write a trace without overflowing.
        write(
            &DayWorkload {
                nodes: 100_000,
                node_cpu_millis: MAX_NODE_CPU_MILLIS,
                node_memory_mib: MAX_NODE_MEMORY_MIB,
                length_ms: MINUTE_MS,
                ..workload()
            },
            std::io::sink(),
        )
        .unwrap();
        for start_ms in [-1, MAX_END_MS, i64::MAX] {
            assert_eq!(
                error(DayWorkload {
                    start_ms,
                    ..workload()
                }),
                format!(
                    "start is {start_ms} ms: expected 1970 or later, the recording ending a day \
                     before the end of 9999"
                )
            );
        }
        write(
            &DayWorkload {
                start_ms: MAX_END_MS - workload().length_ms,
                ..workload()
            },
            std::io::sink(),
        )
        .unwrap();
        assert_eq!(
            error(DayWorkload {
                length_ms: 1000,
                ..workload()
            }),
            "length is 1000 ms: expected 1 minute to 31 days"
        );
    }
}
