//! Kubelet-like status of pods bound to virtual nodes: pure functions from a Pod (and the time)
//! to the PodStatus a kubelet would write.

use std::net::Ipv4Addr;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use thiserror::Error;

use super::labels::{LIFETIME_ANNOTATION, LIFETIME_PENDING_ANNOTATION};
use super::node::stable_hex;

pub const POD_SCHEDULED: &str = "PodScheduled";
pub const POD_READY_TO_START_CONTAINERS: &str = "PodReadyToStartContainers";
pub const INITIALIZED: &str = "Initialized";
pub const CONTAINERS_READY: &str = "ContainersReady";
pub const READY: &str = "Ready";

/// Reason on PodReadyToStartContainers when the pod sandbox (here: its IP) cannot be set up;
/// the reason of the kubelet event for the same failure.
pub const SANDBOX_FAILED_REASON: &str = "FailedCreatePodSandBox";

/// Reason on Ready and ContainersReady once the pod's containers have all exited.
pub const POD_COMPLETED_REASON: &str = "PodCompleted";

/// Reason on Ready when a readiness gate's condition is missing or not True.
pub const READINESS_GATES_NOT_READY_REASON: &str = "ReadinessGatesNotReady";

/// Prefix of the container and image IDs the virtual runtime reports.
const RUNTIME_SCHEME: &str = "ksim://";

/// `status.phase` of a pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PodPhase {
    Pending,
    Running,
    Succeeded,
    Failed,
    Unknown,
}

impl PodPhase {
    /// A missing phase is Pending (the apiserver defaults it so); an unknown string is Unknown.
    pub fn parse(phase: Option<&str>) -> PodPhase {
        match phase {
            None | Some("Pending") => PodPhase::Pending,
            Some("Running") => PodPhase::Running,
            Some("Succeeded") => PodPhase::Succeeded,
            Some("Failed") => PodPhase::Failed,
            Some(_) => PodPhase::Unknown,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PodPhase::Pending => "Pending",
            PodPhase::Running => "Running",
            PodPhase::Succeeded => "Succeeded",
            PodPhase::Failed => "Failed",
            PodPhase::Unknown => "Unknown",
        }
    }
}

/// Why a pod's completion time could not be worked out.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum PodRuleError {
    #[error(
        "annotation {LIFETIME_ANNOTATION} has value {value:?}: expected a non-negative integer of milliseconds"
    )]
    InvalidLifetime { value: String },
    #[error("pod started at {start} cannot complete after {delay:?}: the time is out of range")]
    DeadlineOutOfRange { start: Timestamp, delay: Duration },
}

pub fn phase(pod: &Pod) -> PodPhase {
    PodPhase::parse(pod.status.as_ref().and_then(|s| s.phase.as_deref()))
}

/// Whether the pod has finished for good (Succeeded or Failed).
pub fn is_terminal(pod: &Pod) -> bool {
    matches!(phase(pod), PodPhase::Succeeded | PodPhase::Failed)
}

pub fn is_host_network(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.host_network)
        .unwrap_or(false)
}

/// The pod's IPv4 `status.podIP`, if it has one.
pub fn pod_ip(pod: &Pod) -> Option<Ipv4Addr> {
    pod.status.as_ref()?.pod_ip.as_deref()?.parse().ok()
}

/// Whether the pod is being deleted and nothing else holds it: only then may it be removed.
/// Finalizers are someone else's to clear, never ours.
pub fn ready_to_delete(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
        && pod
            .metadata
            .finalizers
            .as_ref()
            .is_none_or(|finalizers| finalizers.is_empty())
}

/// Whether the pool has nothing left to write for the pod unless its deletion is requested
/// (which arrives as a change of its own): it has finished, or it is Running with no end of
/// its own (no lifetime annotation, not a Job's) and Ready as its kubelet reported it.
pub fn awaits_only_deletion(pod: &Pod) -> bool {
    if pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    match phase(pod) {
        PodPhase::Succeeded | PodPhase::Failed => true,
        // The default job duration only matters for when, not whether, a pod completes.
        PodPhase::Running => {
            matches!(completion_delay(pod, Duration::ZERO), Ok(None)) && !readiness_lost(pod)
        }
        PodPhase::Pending | PodPhase::Unknown => false,
    }
}

/// Whether a Running pod is not Ready though its kubelet would say it is: the node lifecycle
/// controller marks the pods of a node it lost NotReady, and a kubelet that comes back
/// reports them Ready again. (A pod held by its readiness gates stays as it is.)
pub fn readiness_lost(pod: &Pod) -> bool {
    let conditions = pod
        .status
        .as_ref()
        .and_then(|status| status.conditions.as_deref())
        .unwrap_or_default();
    phase(pod) == PodPhase::Running
        && conditions
            .iter()
            .any(|condition| condition.type_ == READY && condition.status != "True")
        && unready_readiness_gates(pod, conditions).is_none()
}

/// How long after starting the pod completes: its lifetime annotation if set, else the default
/// job duration for Job pods, else `None` (runs until deleted). `None` too while the driver has
/// yet to give the pod its own lifetime ([`LIFETIME_PENDING_ANNOTATION`]): its patch is a change
/// the pool sees, and the deadline then counts from the pod's start.
pub fn completion_delay(
    pod: &Pod,
    default_job_duration: Duration,
) -> Result<Option<Duration>, PodRuleError> {
    let annotations = pod.metadata.annotations.as_ref();
    if annotations.is_some_and(|annotations| annotations.contains_key(LIFETIME_PENDING_ANNOTATION))
    {
        return Ok(None);
    }
    if let Some(value) = annotations.and_then(|annotations| annotations.get(LIFETIME_ANNOTATION)) {
        return parse_lifetime(value).map(Some);
    }
    let owned_by_job = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|owner| owner.kind == "Job" && owner.api_version == "batch/v1");
    Ok(owned_by_job.then_some(default_job_duration))
}

/// When a Running pod completes: its start time plus [`completion_delay`]. `None` if it is not
/// Running, has no start time, or runs until deleted. An invalid annotation is reported whatever
/// the phase.
pub fn completion_deadline(
    pod: &Pod,
    default_job_duration: Duration,
) -> Result<Option<Timestamp>, PodRuleError> {
    let Some(delay) = completion_delay(pod, default_job_duration)? else {
        return Ok(None);
    };
    if phase(pod) != PodPhase::Running {
        return Ok(None);
    }
    let Some(Time(start)) = pod.status.as_ref().and_then(|s| s.start_time.clone()) else {
        return Ok(None);
    };
    let out_of_range = || PodRuleError::DeadlineOutOfRange { start, delay };
    let signed = SignedDuration::try_from(delay).map_err(|_| out_of_range())?;
    start
        .checked_add(signed)
        .map(Some)
        .map_err(|_| out_of_range())
}

fn parse_lifetime(value: &str) -> Result<Duration, PodRuleError> {
    let invalid = || PodRuleError::InvalidLifetime {
        value: value.to_owned(),
    };
    // u64's parser alone would accept a leading '+'.
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    value
        .parse::<u64>()
        .map(Duration::from_millis)
        .map_err(|_| invalid())
}

/// The status a kubelet writes once all the pod's containers run: init containers completed,
/// sidecars and containers running and ready, IPs and start time set.
///
/// `pod_ip` is the node's IP for host-network pods. Re-applying it to a pod it already made
/// Running changes nothing but the IPs passed: start times and transition times are kept.
pub fn running_status(pod: &Pod, host_ip: Ipv4Addr, pod_ip: Ipv4Addr, now: Timestamp) -> PodStatus {
    let existing = pod.status.clone().unwrap_or_default();
    let previous_conditions = existing.conditions.clone().unwrap_or_default();

    let ready = match unready_readiness_gates(pod, &previous_conditions) {
        None => KubeletCondition::met(READY),
        Some(message) => KubeletCondition::unmet(READY, READINESS_GATES_NOT_READY_REASON, message),
    };
    let kubelet_conditions = [
        KubeletCondition::met(POD_READY_TO_START_CONTAINERS),
        KubeletCondition::met(INITIALIZED),
        KubeletCondition::met(CONTAINERS_READY),
        ready,
    ];

    let init_container_statuses = init_containers(pod)
        .iter()
        .map(|container| {
            let previous =
                find_status(existing.init_container_statuses.as_deref(), &container.name);
            if is_sidecar(container) {
                running_container_status(pod, container, previous, now)
            } else {
                completed_init_container_status(pod, container, previous, now)
            }
        })
        .collect::<Vec<_>>();
    let container_statuses = containers(pod)
        .iter()
        .map(|container| {
            let previous = find_status(existing.container_statuses.as_deref(), &container.name);
            running_container_status(pod, container, previous, now)
        })
        .collect();

    PodStatus {
        host_ip: Some(host_ip.to_string()),
        host_ips: Some(vec![HostIP {
            ip: host_ip.to_string(),
        }]),
        pod_ip: Some(pod_ip.to_string()),
        pod_ips: Some(vec![PodIP {
            ip: pod_ip.to_string(),
        }]),
        reason: None,
        message: None,
        ..kubelet_status(
            pod,
            PodPhase::Running,
            kubelet_conditions,
            init_container_statuses,
            container_statuses,
            now,
        )
    }
}

/// The status a kubelet writes when every container has exited with `exit_code`: Succeeded for
/// 0, Failed otherwise. Sidecars are stopped too (cleanly). IPs and the start time are kept.
pub fn completed_status(pod: &Pod, now: Timestamp, exit_code: i32) -> PodStatus {
    let existing = pod.status.clone().unwrap_or_default();
    let succeeded = exit_code == 0;
    let reason = if succeeded { "Completed" } else { "Error" };

    let init_container_statuses = init_containers(pod)
        .iter()
        .map(|container| {
            let previous =
                find_status(existing.init_container_statuses.as_deref(), &container.name);
            if is_sidecar(container) {
                // The kubelet stops sidecars after the main containers; they exit on SIGTERM.
                terminated_container_status(pod, container, previous, now, 0, "Completed")
            } else {
                completed_init_container_status(pod, container, previous, now)
            }
        })
        .collect::<Vec<_>>();
    let container_statuses = containers(pod)
        .iter()
        .map(|container| {
            let previous = find_status(existing.container_statuses.as_deref(), &container.name);
            terminated_container_status(pod, container, previous, now, exit_code, reason)
        })
        .collect();

    let completed = |type_| KubeletCondition::unmet(type_, POD_COMPLETED_REASON, String::new());
    let phase = if succeeded {
        PodPhase::Succeeded
    } else {
        PodPhase::Failed
    };
    kubelet_status(
        pod,
        phase,
        [completed(CONTAINERS_READY), completed(READY)],
        init_container_statuses,
        container_statuses,
        now,
    )
}

/// `status.reason` of a pod its kubelet evicted, and the DisruptionTarget condition's type
/// and reason the kubelet sets on it.
pub const EVICTED_REASON: &str = "Evicted";
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";
pub const TERMINATION_BY_KUBELET_REASON: &str = "TerminationByKubelet";

/// The status a kubelet writes on a pod it evicted (node pressure): its containers killed
/// (exit code 137, as SIGKILL leaves them), the pod Failed with reason Evicted and `message`,
/// and DisruptionTarget True saying the kubelet terminated it.
pub fn evicted_status(pod: &Pod, message: &str, now: Timestamp) -> PodStatus {
    let mut status = completed_status(pod, now, OOM_KILLED_EXIT_CODE);
    let disruption = KubeletCondition {
        type_: DISRUPTION_TARGET,
        status: "True",
        reason: Some(TERMINATION_BY_KUBELET_REASON),
        message: Some(message.to_owned()),
    };
    status.conditions = Some(merge_conditions(
        status.conditions.as_deref().unwrap_or_default(),
        [disruption],
        pod.metadata.generation,
        now,
    ));
    PodStatus {
        reason: Some(EVICTED_REASON.to_owned()),
        message: Some(message.to_owned()),
        ..status
    }
}

/// The status a kubelet writes when it cannot set up the pod's sandbox (for the pool: no free
/// pod IP on the node): still Pending, containers waiting, and PodReadyToStartContainers False
/// with `message` saying why. [`running_status`] replaces all of it once an IP is free.
/// Reason and exit code of a container the kernel killed for memory above its limit.
pub const OOM_KILLED_REASON: &str = "OOMKilled";
pub const OOM_KILLED_EXIT_CODE: i32 = 137;

/// The status a kubelet writes after the kernel kills `killed` containers for memory above
/// their limits. With restart policy Always or OnFailure (137 is a failure) each runs again at
/// once as a new container: restartCount + 1, the kill as its lastState. With Never it stays
/// terminated, and the pod fails once none of its containers runs. Other containers are left
/// as they were.
pub fn oom_killed_status(pod: &Pod, killed: &[String], now: Timestamp) -> PodStatus {
    let existing = pod.status.clone().unwrap_or_default();
    let restarts = pod
        .spec
        .as_ref()
        .and_then(|spec| spec.restart_policy.as_deref())
        != Some("Never");
    let container_statuses: Vec<ContainerStatus> = containers(pod)
        .iter()
        .map(|container| {
            let previous = find_status(existing.container_statuses.as_deref(), &container.name);
            let already_terminated = previous
                .and_then(|status| status.state.as_ref()?.terminated.as_ref())
                .is_some();
            if !killed.contains(&container.name) || (!restarts && already_terminated) {
                return previous
                    .cloned()
                    .unwrap_or_else(|| running_container_status(pod, container, None, now));
            }
            let restart_count = previous.map_or(0, |status| status.restart_count);
            let killed_state = ContainerStateTerminated {
                exit_code: OOM_KILLED_EXIT_CODE,
                reason: Some(OOM_KILLED_REASON.to_owned()),
                started_at: Some(running_started_at(previous).unwrap_or(Time(now))),
                finished_at: Some(Time(now)),
                container_id: Some(
                    previous
                        .and_then(|status| status.container_id.clone())
                        .unwrap_or_else(|| container_id(pod, &container.name)),
                ),
                ..ContainerStateTerminated::default()
            };
            if restarts {
                let restart_count = restart_count.saturating_add(1);
                ContainerStatus {
                    container_id: Some(container_id_after(pod, &container.name, restart_count)),
                    restart_count,
                    last_state: Some(ContainerState {
                        terminated: Some(killed_state),
                        ..ContainerState::default()
                    }),
                    ..running_container_status(pod, container, None, now)
                }
            } else {
                ContainerStatus {
                    container_id: killed_state.container_id.clone(),
                    ready: false,
                    started: Some(false),
                    restart_count,
                    state: Some(ContainerState {
                        terminated: Some(killed_state),
                        ..ContainerState::default()
                    }),
                    ..running_container_status(pod, container, None, now)
                }
            }
        })
        .collect();
    let running = |status: &ContainerStatus| {
        status
            .state
            .as_ref()
            .is_some_and(|state| state.terminated.is_none())
    };
    let phase = if container_statuses.iter().any(running) {
        PodPhase::Running
    } else {
        PodPhase::Failed
    };
    let unready: Vec<&str> = container_statuses
        .iter()
        .filter(|status| !status.ready)
        .map(|status| status.name.as_str())
        .collect();
    let readiness = |type_| {
        if unready.is_empty() {
            KubeletCondition::met(type_)
        } else {
            KubeletCondition::unmet(
                type_,
                "ContainersNotReady",
                format!("containers with unready status: [{}]", unready.join(" ")),
            )
        }
    };
    let conditions = [readiness(CONTAINERS_READY), readiness(READY)];
    let init_container_statuses = existing.init_container_statuses.clone().unwrap_or_default();
    kubelet_status(
        pod,
        phase,
        conditions,
        init_container_statuses,
        container_statuses,
        now,
    )
}

pub fn sandbox_failed_status(
    pod: &Pod,
    host_ip: Ipv4Addr,
    message: &str,
    now: Timestamp,
) -> PodStatus {
    let init_containers = init_containers(pod);
    let containers = containers(pod);

    let initialized = if init_containers.is_empty() {
        KubeletCondition::met(INITIALIZED)
    } else {
        KubeletCondition::unmet(
            INITIALIZED,
            "ContainersNotInitialized",
            format!(
                "containers with incomplete status: [{}]",
                names(init_containers)
            ),
        )
    };
    let not_ready = |type_| {
        KubeletCondition::unmet(
            type_,
            "ContainersNotReady",
            format!("containers with unready status: [{}]", names(containers)),
        )
    };
    let kubelet_conditions = [
        KubeletCondition::unmet(
            POD_READY_TO_START_CONTAINERS,
            SANDBOX_FAILED_REASON,
            message.to_owned(),
        ),
        initialized,
        not_ready(CONTAINERS_READY),
        not_ready(READY),
    ];

    let main_waiting_reason = if init_containers.is_empty() {
        "ContainerCreating"
    } else {
        "PodInitializing"
    };
    let init_container_statuses = init_containers
        .iter()
        .map(|container| waiting_container_status(container, "PodInitializing"))
        .collect::<Vec<_>>();
    let container_statuses = containers
        .iter()
        .map(|container| waiting_container_status(container, main_waiting_reason))
        .collect();

    PodStatus {
        host_ip: Some(host_ip.to_string()),
        host_ips: Some(vec![HostIP {
            ip: host_ip.to_string(),
        }]),
        ..kubelet_status(
            pod,
            PodPhase::Pending,
            kubelet_conditions,
            init_container_statuses,
            container_statuses,
            now,
        )
    }
}

/// What every kubelet status write sets: the phase, the containers' statuses, the kubelet's
/// conditions merged into the existing ones, the start time (kept once set) and the generation
/// observed. Everything else is kept from the pod's current status.
fn kubelet_status(
    pod: &Pod,
    phase: PodPhase,
    conditions: impl IntoIterator<Item = KubeletCondition>,
    init_container_statuses: Vec<ContainerStatus>,
    container_statuses: Vec<ContainerStatus>,
    now: Timestamp,
) -> PodStatus {
    let existing = pod.status.clone().unwrap_or_default();
    let generation = pod.metadata.generation;
    PodStatus {
        phase: Some(phase.as_str().to_owned()),
        start_time: Some(existing.start_time.clone().unwrap_or(Time(now))),
        conditions: Some(merge_conditions(
            existing.conditions.as_deref().unwrap_or_default(),
            conditions,
            generation,
            now,
        )),
        container_statuses: Some(container_statuses),
        init_container_statuses: (!init_container_statuses.is_empty())
            .then_some(init_container_statuses),
        observed_generation: generation.or(existing.observed_generation),
        ..existing
    }
}

/// A kubelet-owned condition to write: type, whether it holds, and why not.
struct KubeletCondition {
    type_: &'static str,
    status: &'static str,
    reason: Option<&'static str>,
    message: Option<String>,
}

impl KubeletCondition {
    fn met(type_: &'static str) -> Self {
        KubeletCondition {
            type_,
            status: "True",
            reason: None,
            message: None,
        }
    }

    fn unmet(type_: &'static str, reason: &'static str, message: String) -> Self {
        KubeletCondition {
            type_,
            status: "False",
            reason: Some(reason),
            message: (!message.is_empty()).then_some(message),
        }
    }
}

/// `updates` first, then every previous condition they do not replace, untouched: those belong
/// to others (PodScheduled to the scheduler, readiness gates and DisruptionTarget to
/// controllers). An updated
/// condition whose status did not change keeps its lastTransitionTime, as the kubelet does.
fn merge_conditions(
    previous: &[PodCondition],
    updates: impl IntoIterator<Item = KubeletCondition>,
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<PodCondition> {
    let mut merged: Vec<PodCondition> = updates
        .into_iter()
        .map(|update| {
            let unchanged_since = previous
                .iter()
                .find(|c| c.type_ == update.type_ && c.status == update.status)
                .and_then(|c| c.last_transition_time.clone());
            PodCondition {
                type_: update.type_.to_owned(),
                status: update.status.to_owned(),
                reason: update.reason.map(str::to_owned),
                message: update.message,
                last_transition_time: Some(unchanged_since.unwrap_or(Time(now))),
                last_probe_time: None,
                observed_generation: generation,
            }
        })
        .collect();
    let replaced: Vec<String> = merged.iter().map(|c| c.type_.clone()).collect();
    merged.extend(
        previous
            .iter()
            .filter(|c| !replaced.contains(&c.type_))
            .cloned(),
    );
    merged
}

/// A message naming the readiness gates whose condition is missing or not True, if any.
fn unready_readiness_gates(pod: &Pod, conditions: &[PodCondition]) -> Option<String> {
    let problems: Vec<String> = pod
        .spec
        .as_ref()
        .and_then(|spec| spec.readiness_gates.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|gate| {
            let gate_type = &gate.condition_type;
            match conditions.iter().find(|c| &c.type_ == gate_type) {
                None => Some(format!("readiness gate {gate_type:?} has no condition")),
                Some(c) if c.status != "True" => Some(format!(
                    "readiness gate {gate_type:?} is {:?}, not \"True\"",
                    c.status
                )),
                Some(_) => None,
            }
        })
        .collect();
    (!problems.is_empty()).then(|| problems.join("; "))
}

fn containers(pod: &Pod) -> &[Container] {
    pod.spec
        .as_ref()
        .map_or(&[], |spec| spec.containers.as_slice())
}

fn init_containers(pod: &Pod) -> &[Container] {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.init_containers.as_deref())
        .unwrap_or(&[])
}

/// An init container with restartPolicy Always runs beside the main containers.
fn is_sidecar(container: &Container) -> bool {
    container.restart_policy.as_deref() == Some("Always")
}

fn names(containers: &[Container]) -> String {
    containers
        .iter()
        .map(|c| c.name.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

fn find_status<'a>(
    statuses: Option<&'a [ContainerStatus]>,
    name: &str,
) -> Option<&'a ContainerStatus> {
    statuses?.iter().find(|status| status.name == name)
}

/// A container ID that is the same each time for one container of one pod, so re-applying a
/// status changes nothing.
fn container_id(pod: &Pod, container_name: &str) -> String {
    container_id_after(pod, container_name, 0)
}

/// The ID of a container after `restarts` restarts: each run is a new container.
fn container_id_after(pod: &Pod, container_name: &str, restarts: i32) -> String {
    let pod_key = match pod.metadata.uid.as_deref() {
        Some(uid) => uid.to_owned(),
        None => format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default()
        ),
    };
    let run = restarts.to_string();
    // The first run's ID is the one the pool always gave, so existing statuses stay valid.
    let parts: &[&str] = if restarts == 0 {
        &["container", &pod_key, container_name]
    } else {
        &["container", &pod_key, container_name, &run]
    };
    format!("{RUNTIME_SCHEME}{}", stable_hex(parts, 64))
}

fn image(container: &Container) -> String {
    container.image.clone().unwrap_or_default()
}

fn image_id(container: &Container) -> String {
    format!("{RUNTIME_SCHEME}{}", image(container))
}

fn running_started_at(status: Option<&ContainerStatus>) -> Option<Time> {
    status?.state.as_ref()?.running.as_ref()?.started_at.clone()
}

fn running_container_status(
    pod: &Pod,
    container: &Container,
    previous: Option<&ContainerStatus>,
    now: Timestamp,
) -> ContainerStatus {
    ContainerStatus {
        name: container.name.clone(),
        image: image(container),
        image_id: image_id(container),
        container_id: Some(container_id(pod, &container.name)),
        ready: true,
        started: Some(true),
        restart_count: 0,
        state: Some(ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(running_started_at(previous).unwrap_or(Time(now))),
            }),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    }
}

/// A regular init container that ran to completion; the kubelet reports these ready.
fn completed_init_container_status(
    pod: &Pod,
    container: &Container,
    previous: Option<&ContainerStatus>,
    now: Timestamp,
) -> ContainerStatus {
    let id = container_id(pod, &container.name);
    let terminated = previous
        .and_then(|status| status.state.as_ref()?.terminated.clone())
        .filter(|terminated| terminated.exit_code == 0)
        .unwrap_or_else(|| ContainerStateTerminated {
            exit_code: 0,
            reason: Some("Completed".to_owned()),
            started_at: Some(Time(now)),
            finished_at: Some(Time(now)),
            container_id: Some(id.clone()),
            ..ContainerStateTerminated::default()
        });
    ContainerStatus {
        name: container.name.clone(),
        image: image(container),
        image_id: image_id(container),
        container_id: Some(id),
        ready: true,
        started: Some(false),
        restart_count: 0,
        state: Some(ContainerState {
            terminated: Some(terminated),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    }
}

fn terminated_container_status(
    pod: &Pod,
    container: &Container,
    previous: Option<&ContainerStatus>,
    now: Timestamp,
    exit_code: i32,
    reason: &str,
) -> ContainerStatus {
    let id = previous
        .and_then(|status| status.container_id.clone())
        .unwrap_or_else(|| container_id(pod, &container.name));
    // Already stopped (a repeated call): its first termination stands.
    let terminated = previous
        .and_then(|status| status.state.as_ref()?.terminated.clone())
        .unwrap_or_else(|| ContainerStateTerminated {
            exit_code,
            reason: Some(reason.to_owned()),
            started_at: Some(running_started_at(previous).unwrap_or(Time(now))),
            finished_at: Some(Time(now)),
            container_id: Some(id.clone()),
            ..ContainerStateTerminated::default()
        });
    ContainerStatus {
        name: container.name.clone(),
        image: previous.map_or_else(|| image(container), |s| s.image.clone()),
        image_id: previous.map_or_else(|| image_id(container), |s| s.image_id.clone()),
        container_id: Some(id),
        ready: false,
        started: Some(false),
        restart_count: previous.map_or(0, |s| s.restart_count),
        state: Some(ContainerState {
            terminated: Some(terminated),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    }
}

fn waiting_container_status(container: &Container, reason: &str) -> ContainerStatus {
    ContainerStatus {
        name: container.name.clone(),
        image: image(container),
        image_id: String::new(),
        ready: false,
        started: Some(false),
        restart_count: 0,
        state: Some(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.to_owned()),
                message: None,
            }),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    const SCHEDULED_AT: &str = "2026-03-01T11:59:58Z";
    const NOW: &str = "2026-03-01T12:00:00Z";
    const LATER: &str = "2026-03-01T12:05:00Z";

    /// A pod as the scheduler leaves it: bound, PodScheduled, qosClass set by the apiserver.
    fn bound_pod(spec: serde_json::Value) -> Pod {
        pod(json!({
            "metadata": {"name": "web-7d4b9c-x2x9q", "namespace": "shop", "uid": "0f6e1b2a-uid", "generation": 1},
            "spec": spec,
            "status": {
                "phase": "Pending",
                "qosClass": "Burstable",
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": SCHEDULED_AT},
                    {"type": "example.com/Warmed", "status": "False", "reason": "Cold", "lastTransitionTime": SCHEDULED_AT}
                ]
            }
        }))
    }

    fn web_spec() -> serde_json::Value {
        json!({
            "nodeName": "m5-large-0",
            "containers": [
                {"name": "app", "image": "registry.example.com/shop/web:1.4.2"},
                {"name": "proxy", "image": "envoyproxy/envoy:v1.31.0"}
            ]
        })
    }

    fn condition<'a>(status: &'a PodStatus, type_: &str) -> &'a PodCondition {
        status
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == type_)
            .unwrap_or_else(|| panic!("no {type_} condition"))
    }

    fn with_status(mut pod: Pod, status: PodStatus) -> Pod {
        pod.status = Some(status);
        pod
    }

    #[test]
    fn running_status_sets_phase_ips_and_start_time() {
        let status = running_status(
            &bound_pod(web_spec()),
            ip("10.244.0.1"),
            ip("10.244.0.7"),
            at(NOW),
        );
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(status.host_ip.as_deref(), Some("10.244.0.1"));
        assert_eq!(status.host_ips.unwrap()[0].ip, "10.244.0.1");
        assert_eq!(status.pod_ip.as_deref(), Some("10.244.0.7"));
        assert_eq!(status.pod_ips.unwrap()[0].ip, "10.244.0.7");
        assert_eq!(status.start_time, Some(Time(at(NOW))));
        assert_eq!(status.qos_class.as_deref(), Some("Burstable"));
        assert_eq!(status.observed_generation, Some(1));
    }

    #[test]
    fn running_status_conditions_keep_scheduler_and_custom_ones() {
        let status = running_status(
            &bound_pod(web_spec()),
            ip("10.244.0.1"),
            ip("10.244.0.7"),
            at(NOW),
        );
        for type_ in [
            POD_READY_TO_START_CONTAINERS,
            INITIALIZED,
            CONTAINERS_READY,
            READY,
        ] {
            let c = condition(&status, type_);
            assert_eq!(c.status, "True", "{type_}");
            assert_eq!(c.last_transition_time, Some(Time(at(NOW))), "{type_}");
        }
        let scheduled = condition(&status, POD_SCHEDULED);
        assert_eq!(scheduled.status, "True");
        assert_eq!(scheduled.last_transition_time, Some(Time(at(SCHEDULED_AT))));
        let custom = condition(&status, "example.com/Warmed");
        assert_eq!(custom.status, "False");
        assert_eq!(custom.reason.as_deref(), Some("Cold"));
        assert_eq!(status.conditions.as_ref().unwrap().len(), 6);
    }

    #[test]
    fn running_status_reports_each_container_running() {
        let pod = bound_pod(web_spec());
        let status = running_status(&pod, ip("10.244.0.1"), ip("10.244.0.7"), at(NOW));
        let containers = status.container_statuses.unwrap();
        assert_eq!(containers.len(), 2);
        let app = &containers[0];
        assert_eq!(app.name, "app");
        assert_eq!(app.image, "registry.example.com/shop/web:1.4.2");
        assert_eq!(app.image_id, "ksim://registry.example.com/shop/web:1.4.2");
        assert!(app.ready);
        assert_eq!(app.started, Some(true));
        assert_eq!(app.restart_count, 0);
        let running = app.state.as_ref().unwrap().running.as_ref().unwrap();
        assert_eq!(running.started_at, Some(Time(at(NOW))));
        let app_id = app.container_id.as_deref().unwrap();
        assert!(
            app_id.starts_with("ksim://") && app_id.len() == "ksim://".len() + 64,
            "{app_id}"
        );
        assert_ne!(containers[1].container_id.as_deref(), Some(app_id));
        assert!(status.init_container_statuses.is_none());
    }

    #[test]
    fn running_status_is_stable_when_reapplied() {
        let pod = bound_pod(web_spec());
        let first = running_status(&pod, ip("10.244.0.1"), ip("10.244.0.7"), at(NOW));
        let again = running_status(
            &with_status(pod, first.clone()),
            ip("10.244.0.1"),
            ip("10.244.0.7"),
            at(LATER),
        );
        assert_eq!(again, first);
    }

    #[test]
    fn running_status_keeps_an_existing_start_time() {
        let mut pod = bound_pod(web_spec());
        pod.status.as_mut().unwrap().start_time = Some(Time(at(SCHEDULED_AT)));
        let status = running_status(&pod, ip("10.244.0.1"), ip("10.244.0.7"), at(NOW));
        assert_eq!(status.start_time, Some(Time(at(SCHEDULED_AT))));
    }

    #[test]
    fn init_containers_complete_and_sidecars_run() {
        let pod = bound_pod(json!({
            "initContainers": [
                {"name": "migrate", "image": "shop/migrate:7"},
                {"name": "log-shipper", "image": "fluent/fluent-bit:3.2", "restartPolicy": "Always"}
            ],
            "containers": [{"name": "app", "image": "shop/web:1"}]
        }));
        let status = running_status(&pod, ip("10.244.0.1"), ip("10.244.0.7"), at(NOW));
        let init = status.init_container_statuses.clone().unwrap();
        assert_eq!(init.len(), 2);

        let migrate = &init[0];
        assert_eq!(migrate.name, "migrate");
        assert!(migrate.ready);
        assert_eq!(migrate.started, Some(false));
        let terminated = migrate.state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!(terminated.exit_code, 0);
        assert_eq!(terminated.reason.as_deref(), Some("Completed"));
        assert_eq!(terminated.started_at, Some(Time(at(NOW))));
        assert_eq!(terminated.finished_at, Some(Time(at(NOW))));
        assert_eq!(terminated.container_id, migrate.container_id);

        let sidecar = &init[1];
        assert!(sidecar.ready);
        assert_eq!(sidecar.started, Some(true));
        assert!(sidecar.state.as_ref().unwrap().running.is_some());
        assert!(sidecar.state.as_ref().unwrap().terminated.is_none());
        assert_eq!(condition(&status, INITIALIZED).status, "True");
    }

    #[test]
    fn missing_readiness_gate_condition_keeps_pod_unready() {
        let mut spec = web_spec();
        spec["readinessGates"] = json!([{"conditionType": "target-health.elbv2.k8s.aws/web"}]);
        let status = running_status(
            &bound_pod(spec),
            ip("10.244.0.1"),
            ip("10.244.0.7"),
            at(NOW),
        );
        let ready = condition(&status, READY);
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason.as_deref(), Some("ReadinessGatesNotReady"));
        assert!(
            ready
                .message
                .as_deref()
                .unwrap()
                .contains("target-health.elbv2.k8s.aws/web")
        );
        assert_eq!(condition(&status, CONTAINERS_READY).status, "True");
        assert!(status.container_statuses.unwrap().iter().all(|c| c.ready));
    }

    #[test]
    fn readiness_gates_are_checked_by_their_condition_status() {
        let mut spec = web_spec();
        spec["readinessGates"] = json!([
            {"conditionType": "example.com/Warmed"},
            {"conditionType": "example.com/Registered"}
        ]);
        let mut pod = bound_pod(spec);
        let conditions = pod.status.as_mut().unwrap().conditions.as_mut().unwrap();
        conditions.push(PodCondition {
            type_: "example.com/Registered".to_owned(),
            status: "True".to_owned(),
            ..PodCondition::default()
        });
        let status = running_status(&pod, ip("10.244.0.1"), ip("10.244.0.7"), at(NOW));
        let message = condition(&status, READY).message.clone().unwrap();
        assert!(
            message.contains("example.com/Warmed") && message.contains("False"),
            "{message}"
        );
        assert!(!message.contains("Registered"), "{message}");

        // Once every gate is True the pod is Ready.
        let conditions = pod.status.as_mut().unwrap().conditions.as_mut().unwrap();
        conditions.iter_mut().for_each(|c| {
            if c.type_ == "example.com/Warmed" {
                c.status = "True".to_owned();
            }
        });
        let status = running_status(&pod, ip("10.244.0.1"), ip("10.244.0.7"), at(NOW));
        assert_eq!(condition(&status, READY).status, "True");
        assert_eq!(condition(&status, READY).reason, None);
    }

    #[test]
    fn host_network_pods_are_recognised() {
        let mut spec = web_spec();
        spec["hostNetwork"] = json!(true);
        let host = bound_pod(spec);
        assert!(is_host_network(&host));
        assert!(!is_host_network(&bound_pod(web_spec())));
        let node_ip = ip("10.244.0.1");
        let status = running_status(&host, node_ip, node_ip, at(NOW));
        assert_eq!(status.pod_ip, status.host_ip);
    }

    fn running_pod() -> Pod {
        let pod = bound_pod(json!({
            "initContainers": [
                {"name": "migrate", "image": "shop/migrate:7"},
                {"name": "log-shipper", "image": "fluent/fluent-bit:3.2", "restartPolicy": "Always"}
            ],
            "containers": [{"name": "app", "image": "shop/web:1"}]
        }));
        let status = running_status(&pod, ip("10.244.0.1"), ip("10.244.0.7"), at(NOW));
        with_status(pod, status)
    }

    #[test]
    fn an_oom_kill_restarts_the_container_as_a_new_one_and_counts_it() {
        let pod = running_pod();
        let status = oom_killed_status(&pod, &["app".to_owned()], at(LATER));
        assert_eq!(status.phase.as_deref(), Some("Running"));
        let app = &status.container_statuses.as_ref().unwrap()[0];
        assert_eq!(app.restart_count, 1);
        assert!(app.ready);
        let state = app.state.as_ref().unwrap().running.as_ref().unwrap();
        assert_eq!(state.started_at, Some(Time(at(LATER))));
        let last = app
            .last_state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap();
        assert_eq!(last.reason.as_deref(), Some(OOM_KILLED_REASON));
        assert_eq!(last.exit_code, 137);
        assert_eq!(last.started_at, Some(Time(at(NOW))));
        assert_eq!(last.finished_at, Some(Time(at(LATER))));
        let first_id = pod
            .status
            .as_ref()
            .unwrap()
            .container_statuses
            .as_ref()
            .unwrap()[0]
            .container_id
            .clone();
        assert_eq!(last.container_id, first_id);
        assert_ne!(
            app.container_id, first_id,
            "the restarted container is a new one"
        );
        // Killed again: the count goes on.
        let again = oom_killed_status(&with_status(pod, status), &["app".to_owned()], at(LATER));
        assert_eq!(again.container_statuses.unwrap()[0].restart_count, 2);
    }

    #[test]
    fn an_evicted_pod_fails_with_its_containers_killed_and_a_disruption_target() {
        let pod = running_pod();
        let message = "The node was low on resource: memory.";
        let status = evicted_status(&pod, message, at(LATER));
        assert_eq!(status.phase.as_deref(), Some("Failed"));
        assert_eq!(status.reason.as_deref(), Some(EVICTED_REASON));
        assert_eq!(status.message.as_deref(), Some(message));
        let app = &status.container_statuses.as_ref().unwrap()[0];
        assert!(!app.ready);
        let terminated = app.state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!(terminated.exit_code, 137);
        assert_eq!(terminated.finished_at, Some(Time(at(LATER))));
        let conditions = status.conditions.unwrap();
        let disruption = conditions
            .iter()
            .find(|c| c.type_ == DISRUPTION_TARGET)
            .unwrap();
        assert_eq!(disruption.status, "True");
        assert_eq!(
            disruption.reason.as_deref(),
            Some(TERMINATION_BY_KUBELET_REASON)
        );
        assert_eq!(disruption.message.as_deref(), Some(message));
        let ready = conditions.iter().find(|c| c.type_ == READY).unwrap();
        assert_eq!(ready.status, "False");
        assert!(
            conditions.iter().any(|c| c.type_ == POD_SCHEDULED),
            "the scheduler's condition stays"
        );
    }

    #[test]
    fn an_oom_kill_under_restart_policy_never_fails_the_pod() {
        let mut pod = running_pod();
        pod.spec.as_mut().unwrap().restart_policy = Some("Never".to_owned());
        let status = oom_killed_status(&pod, &["app".to_owned()], at(LATER));
        assert_eq!(status.phase.as_deref(), Some("Failed"));
        let app = &status.container_statuses.as_ref().unwrap()[0];
        assert_eq!(app.restart_count, 0);
        assert!(!app.ready);
        let terminated = app.state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!(terminated.reason.as_deref(), Some(OOM_KILLED_REASON));
        assert_eq!(terminated.exit_code, 137);
        let ready = status
            .conditions
            .unwrap()
            .into_iter()
            .find(|c| c.type_ == READY)
            .unwrap();
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason.as_deref(), Some("ContainersNotReady"));
    }

    #[test]
    fn completed_status_terminates_everything_cleanly() {
        let pod = running_pod();
        let status = completed_status(&pod, at(LATER), 0);
        assert_eq!(status.phase.as_deref(), Some("Succeeded"));
        assert_eq!(status.pod_ip.as_deref(), Some("10.244.0.7"));
        assert_eq!(status.host_ip.as_deref(), Some("10.244.0.1"));
        assert_eq!(status.start_time, Some(Time(at(NOW))));

        let app = &status.container_statuses.as_ref().unwrap()[0];
        assert!(!app.ready);
        assert_eq!(app.started, Some(false));
        let terminated = app.state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!(terminated.exit_code, 0);
        assert_eq!(terminated.reason.as_deref(), Some("Completed"));
        assert_eq!(
            terminated.started_at,
            Some(Time(at(NOW))),
            "from the running state"
        );
        assert_eq!(terminated.finished_at, Some(Time(at(LATER))));
        assert!(app.state.as_ref().unwrap().running.is_none());
        let running_id = pod
            .status
            .as_ref()
            .unwrap()
            .container_statuses
            .as_ref()
            .unwrap()[0]
            .container_id
            .clone();
        assert_eq!(app.container_id, running_id);

        let init = status.init_container_statuses.as_ref().unwrap();
        let sidecar = init[1].state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!(sidecar.exit_code, 0);
        assert_eq!(sidecar.finished_at, Some(Time(at(LATER))));
        assert!(!init[1].ready);
        let migrate = init[0].state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!(
            migrate.finished_at,
            Some(Time(at(NOW))),
            "init container finished earlier"
        );
    }

    #[test]
    fn completed_status_conditions() {
        let status = completed_status(&running_pod(), at(LATER), 0);
        for type_ in [READY, CONTAINERS_READY] {
            let c = condition(&status, type_);
            assert_eq!(c.status, "False");
            assert_eq!(c.reason.as_deref(), Some("PodCompleted"));
            assert_eq!(c.last_transition_time, Some(Time(at(LATER))));
        }
        assert_eq!(condition(&status, INITIALIZED).status, "True");
        assert_eq!(
            condition(&status, INITIALIZED).last_transition_time,
            Some(Time(at(NOW)))
        );
        assert_eq!(condition(&status, POD_SCHEDULED).status, "True");
        assert_eq!(
            condition(&status, "example.com/Warmed").reason.as_deref(),
            Some("Cold")
        );
    }

    #[test]
    fn nonzero_exit_fails_the_pod() {
        let status = completed_status(&running_pod(), at(LATER), 137);
        assert_eq!(status.phase.as_deref(), Some("Failed"));
        let terminated = status.container_statuses.as_ref().unwrap()[0]
            .state
            .as_ref()
            .unwrap()
            .terminated
            .clone()
            .unwrap();
        assert_eq!(terminated.exit_code, 137);
        assert_eq!(terminated.reason.as_deref(), Some("Error"));
    }

    #[test]
    fn completing_a_pod_that_never_ran() {
        let pod = bound_pod(web_spec());
        let status = completed_status(&pod, at(LATER), 0);
        assert_eq!(status.phase.as_deref(), Some("Succeeded"));
        assert_eq!(status.start_time, Some(Time(at(LATER))));
        let containers = status.container_statuses.unwrap();
        assert_eq!(containers.len(), 2);
        let terminated = containers[1]
            .state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap();
        assert_eq!(terminated.started_at, Some(Time(at(LATER))));
        assert_eq!(containers[1].image, "envoyproxy/envoy:v1.31.0");
    }

    #[test]
    fn completed_status_is_stable_when_reapplied() {
        let pod = running_pod();
        let first = completed_status(&pod, at(LATER), 0);
        let again = completed_status(
            &with_status(pod, first.clone()),
            at("2026-03-01T13:00:00Z"),
            0,
        );
        assert_eq!(again, first);
    }

    fn annotated(lifetime: &str) -> Pod {
        pod(json!({"metadata": {"name": "p", "annotations": {"ksim.io/lifetime-ms": lifetime}}}))
    }

    fn job_pod() -> Pod {
        pod(json!({"metadata": {"name": "p", "ownerReferences": [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "nightly", "uid": "u1", "controller": true}
        ]}}))
    }

    const JOB: Duration = Duration::from_secs(30);

    #[test]
    fn a_pending_lifetime_starts_no_clock_until_the_driver_gives_one() {
        let pending = |owned_by_job: bool| {
            let mut pod = if owned_by_job {
                job_pod()
            } else {
                annotated("1")
            };
            pod.metadata.annotations.get_or_insert_default().extend([
                ("ksim.io/lifetime-ms".to_owned(), "1".to_owned()),
                ("ksim.io/lifetime-pending".to_owned(), "true".to_owned()),
            ]);
            running(pod, Some("2026-01-01T00:00:00Z"))
        };
        for owned_by_job in [false, true] {
            let pod = pending(owned_by_job);
            assert_eq!(completion_delay(&pod, JOB), Ok(None), "job: {owned_by_job}");
            assert_eq!(completion_deadline(&pod, JOB), Ok(None));
            // Nothing to write until the driver's patch, which is a change of its own.
            assert!(awaits_only_deletion(&pod));
        }
        // The patch: the launch's lifetime, the marker gone; the clock counts from the start.
        let mut given = pending(true);
        let annotations = given.metadata.annotations.as_mut().unwrap();
        annotations.remove("ksim.io/lifetime-pending");
        annotations.insert("ksim.io/lifetime-ms".to_owned(), "5000".to_owned());
        assert_eq!(
            completion_deadline(&given, JOB),
            Ok(Some(at("2026-01-01T00:00:05Z")))
        );
    }

    #[test]
    fn lifetime_annotation_sets_the_delay() {
        assert_eq!(
            completion_delay(&annotated("1500"), JOB),
            Ok(Some(Duration::from_millis(1500)))
        );
        assert_eq!(
            completion_delay(&annotated("0"), JOB),
            Ok(Some(Duration::ZERO))
        );
    }

    #[test]
    fn invalid_lifetimes_are_errors_naming_annotation_and_value() {
        for value in [
            "",
            "-5",
            "+5",
            "1.5",
            "10ms",
            " 5",
            "5 ",
            "1e3",
            "99999999999999999999999",
        ] {
            let error = completion_delay(&annotated(value), JOB).unwrap_err();
            assert_eq!(
                error,
                PodRuleError::InvalidLifetime {
                    value: value.to_owned()
                }
            );
            let message = error.to_string();
            assert!(message.contains("ksim.io/lifetime-ms"), "{message}");
            assert!(message.contains(&format!("{value:?}")), "{message}");
        }
    }

    #[test]
    fn job_pods_get_the_default_duration_and_others_none() {
        assert_eq!(completion_delay(&job_pod(), JOB), Ok(Some(JOB)));
        let replica = pod(json!({"metadata": {"name": "p", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u2"}
        ]}}));
        assert_eq!(completion_delay(&replica, JOB), Ok(None));
        let lookalike = pod(json!({"metadata": {"name": "p", "ownerReferences": [
            {"apiVersion": "example.com/v1", "kind": "Job", "name": "x", "uid": "u3"}
        ]}}));
        assert_eq!(completion_delay(&lookalike, JOB), Ok(None));
        assert_eq!(
            completion_delay(&pod(json!({"metadata": {"name": "p"}})), JOB),
            Ok(None)
        );

        let mut annotated_job = job_pod();
        annotated_job.metadata.annotations = annotated("250").metadata.annotations;
        assert_eq!(
            completion_delay(&annotated_job, JOB),
            Ok(Some(Duration::from_millis(250)))
        );
    }

    fn running(mut pod: Pod, start: Option<&str>) -> Pod {
        pod.status = Some(PodStatus {
            phase: Some("Running".to_owned()),
            start_time: start.map(|s| Time(at(s))),
            ..PodStatus::default()
        });
        pod
    }

    #[test]
    fn deadline_is_start_plus_delay_for_running_pods() {
        assert_eq!(
            completion_deadline(&running(annotated("90000"), Some(NOW)), JOB),
            Ok(Some(at("2026-03-01T12:01:30Z")))
        );
        assert_eq!(
            completion_deadline(&running(job_pod(), Some(NOW)), JOB),
            Ok(Some(at("2026-03-01T12:00:30Z")))
        );
    }

    #[test]
    fn no_deadline_unless_running_with_a_start_and_a_delay() {
        assert_eq!(completion_deadline(&annotated("90000"), JOB), Ok(None));
        assert_eq!(
            completion_deadline(&running(annotated("90000"), None), JOB),
            Ok(None)
        );
        let plain = pod(json!({"metadata": {"name": "p"}}));
        assert_eq!(
            completion_deadline(&running(plain, Some(NOW)), JOB),
            Ok(None)
        );
    }

    #[test]
    fn deadline_errors() {
        assert!(matches!(
            completion_deadline(&annotated("soon"), JOB),
            Err(PodRuleError::InvalidLifetime { .. })
        ));
        let forever = running(annotated(&u64::MAX.to_string()), Some(NOW));
        let error = completion_deadline(&forever, JOB).unwrap_err();
        assert!(
            matches!(error, PodRuleError::DeadlineOutOfRange { .. }),
            "{error:?}"
        );
    }

    #[test]
    fn phases_parse() {
        let with_phase = |phase: Option<&str>| {
            let mut p = pod(json!({"metadata": {"name": "p"}}));
            p.status = phase.map(|phase| PodStatus {
                phase: Some(phase.to_owned()),
                ..PodStatus::default()
            });
            p
        };
        assert_eq!(phase(&with_phase(None)), PodPhase::Pending);
        let mut no_phase = with_phase(None);
        no_phase.status = Some(PodStatus::default());
        assert_eq!(phase(&no_phase), PodPhase::Pending);
        for p in [
            PodPhase::Pending,
            PodPhase::Running,
            PodPhase::Succeeded,
            PodPhase::Failed,
            PodPhase::Unknown,
        ] {
            assert_eq!(phase(&with_phase(Some(p.as_str()))), p);
        }
        assert_eq!(phase(&with_phase(Some("Exploded"))), PodPhase::Unknown);
        assert!(is_terminal(&with_phase(Some("Succeeded"))));
        assert!(is_terminal(&with_phase(Some("Failed"))));
        assert!(!is_terminal(&with_phase(Some("Running"))));
        assert!(!is_terminal(&with_phase(None)));
    }

    #[test]
    fn pod_ip_parses_ipv4_only() {
        let with_ip =
            |ip: Option<&str>| pod(json!({"metadata": {"name": "p"}, "status": {"podIP": ip}}));
        assert_eq!(pod_ip(&with_ip(Some("10.244.0.7"))), Some(ip("10.244.0.7")));
        assert_eq!(pod_ip(&with_ip(Some("fd00::7"))), None);
        assert_eq!(pod_ip(&with_ip(Some("garbage"))), None);
        assert_eq!(pod_ip(&with_ip(None)), None);
        assert_eq!(pod_ip(&pod(json!({"metadata": {"name": "p"}}))), None);
    }

    #[test]
    fn only_settled_pods_await_nothing_but_deletion() {
        let web = running(bound_pod(web_spec()), Some("2026-01-01T00:00:00Z"));
        assert!(awaits_only_deletion(&web), "a Running Deployment pod");

        let pending = bound_pod(web_spec());
        assert!(!awaits_only_deletion(&pending), "still to be started");

        let with_lifetime = running(annotated("1000"), Some("2026-01-01T00:00:00Z"));
        assert!(!awaits_only_deletion(&with_lifetime), "due to complete");
        let bad_lifetime = running(annotated("soon"), Some("2026-01-01T00:00:00Z"));
        assert!(
            !awaits_only_deletion(&bad_lifetime),
            "its annotation is reported"
        );
        let job = running(job_pod(), Some("2026-01-01T00:00:00Z"));
        assert!(!awaits_only_deletion(&job), "a Job's pod completes");

        let mut deleting = web.clone();
        deleting.metadata.deletion_timestamp = Some(Time(at("2026-01-01T00:01:00Z")));
        assert!(
            !awaits_only_deletion(&deleting),
            "to be finished and deleted"
        );

        let finished = with_status(
            bound_pod(web_spec()),
            PodStatus {
                phase: Some("Succeeded".into()),
                ..PodStatus::default()
            },
        );
        assert!(awaits_only_deletion(&finished));
    }

    #[test]
    fn a_pod_marked_not_ready_for_its_lost_node_is_written_ready_again() {
        let node_ip = ip("10.244.0.1");
        let pod_ip = ip("10.244.0.7");
        let web = bound_pod(web_spec());
        let ready = with_status(web.clone(), running_status(&web, node_ip, pod_ip, at(NOW)));
        assert!(!readiness_lost(&ready) && awaits_only_deletion(&ready));
        // What the node lifecycle controller writes for a node it lost: Ready False.
        let mut marked = ready.clone();
        for condition in marked.status.as_mut().unwrap().conditions.as_mut().unwrap() {
            if condition.type_ == READY {
                condition.status = "False".into();
            }
        }
        assert!(readiness_lost(&marked));
        assert!(!awaits_only_deletion(&marked), "the pool writes it again");
        let again = running_status(&marked, node_ip, pod_ip, at(LATER));
        assert_eq!(condition(&again, READY).status, "True");
        assert!(!readiness_lost(&with_status(marked, again)));

        // Held by a readiness gate: not the node's doing, left as it is.
        let mut spec = web_spec();
        spec["readinessGates"] = json!([{"conditionType": "target-health.elbv2.k8s.aws/web"}]);
        let gated = bound_pod(spec);
        let gated = with_status(
            gated.clone(),
            running_status(&gated, node_ip, pod_ip, at(NOW)),
        );
        assert_eq!(
            condition(gated.status.as_ref().unwrap(), READY).status,
            "False"
        );
        assert!(!readiness_lost(&gated) && awaits_only_deletion(&gated));
    }

    #[test]
    fn ready_to_delete_waits_for_finalizers() {
        let deleting = |finalizers: serde_json::Value| {
            pod(json!({"metadata": {
                "name": "p",
                "deletionTimestamp": NOW,
                "finalizers": finalizers
            }}))
        };
        assert!(ready_to_delete(&deleting(json!(null))));
        assert!(ready_to_delete(&deleting(json!([]))));
        assert!(!ready_to_delete(&deleting(json!(["example.com/keep"]))));
        let alive = pod(json!({"metadata": {"name": "p"}}));
        assert!(!ready_to_delete(&alive));
    }

    #[test]
    fn sandbox_failure_leaves_pod_pending_with_a_reason() {
        let pod = bound_pod(web_spec());
        let message = "no free pod IP: 10.244.0.0/29 is exhausted: all 5 pod addresses are in use";
        let status = sandbox_failed_status(&pod, ip("10.244.0.1"), message, at(NOW));
        assert_eq!(status.phase.as_deref(), Some("Pending"));
        assert_eq!(status.pod_ip, None);
        assert_eq!(status.host_ip.as_deref(), Some("10.244.0.1"));
        let sandbox = condition(&status, POD_READY_TO_START_CONTAINERS);
        assert_eq!(sandbox.status, "False");
        assert_eq!(sandbox.reason.as_deref(), Some("FailedCreatePodSandBox"));
        assert_eq!(sandbox.message.as_deref(), Some(message));
        let ready = condition(&status, READY);
        assert_eq!(ready.status, "False");
        assert_eq!(
            ready.message.as_deref(),
            Some("containers with unready status: [app proxy]")
        );
        assert_eq!(condition(&status, INITIALIZED).status, "True");
        let waiting = status.container_statuses.as_ref().unwrap()[0]
            .state
            .as_ref()
            .unwrap()
            .waiting
            .clone()
            .unwrap();
        assert_eq!(waiting.reason.as_deref(), Some("ContainerCreating"));

        // Once an IP frees up, the Running status replaces every kubelet condition.
        let recovered = running_status(
            &with_status(pod, status),
            ip("10.244.0.1"),
            ip("10.244.0.3"),
            at(LATER),
        );
        let sandbox = condition(&recovered, POD_READY_TO_START_CONTAINERS);
        assert_eq!(
            (sandbox.status.as_str(), sandbox.reason.as_deref()),
            ("True", None)
        );
        assert_eq!(sandbox.last_transition_time, Some(Time(at(LATER))));
        assert_eq!(recovered.start_time, Some(Time(at(NOW))));
    }

    #[test]
    fn sandbox_failure_with_init_containers_is_not_initialized() {
        let pod = running_pod();
        let mut pending = pod.clone();
        pending.status = bound_pod(web_spec()).status;
        let status = sandbox_failed_status(&pending, ip("10.244.0.1"), "no IP", at(NOW));
        let initialized = condition(&status, INITIALIZED);
        assert_eq!(initialized.status, "False");
        assert_eq!(
            initialized.message.as_deref(),
            Some("containers with incomplete status: [migrate log-shipper]")
        );
        let app_waiting = status.container_statuses.as_ref().unwrap()[0]
            .state
            .as_ref()
            .unwrap()
            .waiting
            .clone()
            .unwrap();
        assert_eq!(app_waiting.reason.as_deref(), Some("PodInitializing"));
        assert_eq!(status.init_container_statuses.unwrap().len(), 2);
    }
}
