//! The Kubernetes objects of a fanned-out experiment: one Indexed Job whose completions are the
//! runs still to do, each pod one embedded environment (the `ksim-run` image) that runs one run
//! and hands its report back; its resources from the sizing rule. Pure: built from what the
//! CLI decided, applied by it.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::{
        batch::v1::{Job, JobSpec},
        core::v1::{
            Capabilities, Container, EmptyDirVolumeSource, EnvVar, EnvVarSource,
            ObjectFieldSelector, PodSecurityContext, PodSpec, PodTemplateSpec,
            ResourceRequirements, SeccompProfile, SecurityContext, Volume, VolumeMount,
        },
    },
    apimachinery::pkg::{
        api::resource::Quantity,
        apis::meta::v1::{ObjectMeta, OwnerReference},
    },
};

use crate::store::EXPERIMENT_LABEL;

/// The account the runs' pods use: it reads the bundle and writes the reports, nothing else
/// (`deploy/experiment/`).
pub const RUN_SERVICE_ACCOUNT: &str = "ksim-experiment-run";

/// The image of one run, as `deploy/images/build.sh` names it.
pub const DEFAULT_IMAGE: &str = "docker.io/ksim/ksim-run:dev";

/// The tmpfs at /dev/shm a run's etcd keeps its data on (counted in the pod's memory).
pub const SHM_SIZE: &str = "1Gi";

/// Attempts of one run beyond its first before the Job counts it failed.
pub const RETRIES_PER_RUN: i32 = 2;

/// What one run's pod asks for: CPU in millicores, memory in MiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizing {
    pub cpu_millis: u32,
    pub memory_mib: u32,
}

/// The sizing rule, fitted to runs measured in a process tree (docs/benchmarks-archive.md, "One run in
/// one pod"): memory is a base (the control plane, four services and an autoscaler idle) and a
/// part per simulated node with its pods (the apiserver's watch cache and etcd hold every Node,
/// Lease and pod); CPU is a base, a part per node (leases, status, scheduling) and a part per
/// event a minute of wall time (the replay's writes and what they set off).
pub fn sizing(peak_nodes: u32, events_per_minute: u32) -> Sizing {
    const BASE_CPU_MILLIS: u32 = 250;
    const CPU_MILLIS_PER_100_NODES: u32 = 100;
    const CPU_MILLIS_PER_EVENT_A_MINUTE: u32 = 1;
    const BASE_MEMORY_MIB: u32 = 1024;
    const MEMORY_MIB_PER_100_NODES: u32 = 160;
    let hundreds = peak_nodes.div_ceil(100);
    Sizing {
        cpu_millis: BASE_CPU_MILLIS
            .saturating_add(hundreds.saturating_mul(CPU_MILLIS_PER_100_NODES))
            .saturating_add(events_per_minute.saturating_mul(CPU_MILLIS_PER_EVENT_A_MINUTE)),
        memory_mib: BASE_MEMORY_MIB
            .saturating_add(hundreds.saturating_mul(MEMORY_MIB_PER_100_NODES)),
    }
}

/// What the Job is made of.
#[derive(Debug, Clone, PartialEq)]
pub struct JobPlan {
    /// The experiment id: the Job is `ksim-<id>`.
    pub id: String,
    pub namespace: String,
    pub image: String,
    /// The runs to do, by index; completion index i runs `runs[i]`.
    pub runs: Vec<u32>,
    /// The most runs at once.
    pub parallelism: u32,
    pub sizing: Sizing,
}

/// The Job's name.
pub fn job_name(id: &str) -> String {
    format!("ksim-{id}")
}

/// What the experiment's ConfigMaps carry so that deleting the Job deletes them.
pub fn job_owner(name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "batch/v1".to_owned(),
        kind: "Job".to_owned(),
        name: name.to_owned(),
        uid: uid.to_owned(),
        ..OwnerReference::default()
    }
}

impl JobPlan {
    /// The Job, created suspended: its bundle's ConfigMaps are created owned by it before any
    /// pod runs, then it is resumed.
    pub fn job(&self) -> Job {
        let labels = BTreeMap::from([
            ("app.kubernetes.io/name".to_owned(), "ksim".to_owned()),
            (
                "app.kubernetes.io/component".to_owned(),
                "experiment-run".to_owned(),
            ),
            (EXPERIMENT_LABEL.to_owned(), self.id.clone()),
        ]);
        let completions = i32::try_from(self.runs.len()).unwrap_or(i32::MAX);
        let runs: Vec<String> = self.runs.iter().map(u32::to_string).collect();
        let label_env = |name: &str, label: &str| EnvVar {
            name: name.to_owned(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: format!("metadata.labels['{label}']"),
                    ..ObjectFieldSelector::default()
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        };
        let quantity = |text: String| Quantity(text);
        let Sizing {
            cpu_millis,
            memory_mib,
        } = self.sizing;
        let resources = ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_owned(), quantity(format!("{cpu_millis}m"))),
                ("memory".to_owned(), quantity(format!("{memory_mib}Mi"))),
            ])),
            // Memory is capped with room above the rule (a run past it is retried, then
            // reported); CPU is not, a throttled control plane would only slow the replay and
            // make it late.
            limits: Some(BTreeMap::from([(
                "memory".to_owned(),
                quantity(format!("{}Mi", memory_mib.saturating_mul(3) / 2)),
            )])),
            ..ResourceRequirements::default()
        };
        let container = Container {
            name: "run".to_owned(),
            image: Some(self.image.clone()),
            image_pull_policy: Some("IfNotPresent".to_owned()),
            args: Some(vec![
                "experiment".to_owned(),
                "run-one".to_owned(),
                "--from-cluster".to_owned(),
                self.id.clone(),
                "--runs".to_owned(),
                runs.join(","),
            ]),
            env: Some(vec![
                EnvVar {
                    name: "KSIM_POD_NAMESPACE".to_owned(),
                    value_from: Some(EnvVarSource {
                        field_ref: Some(ObjectFieldSelector {
                            field_path: "metadata.namespace".to_owned(),
                            ..ObjectFieldSelector::default()
                        }),
                        ..EnvVarSource::default()
                    }),
                    ..EnvVar::default()
                },
                label_env("KSIM_JOB_NAME", "batch.kubernetes.io/job-name"),
                label_env("KSIM_JOB_UID", "batch.kubernetes.io/controller-uid"),
                EnvVar {
                    name: "KSIM_STATE_DIR".to_owned(),
                    value: Some("/tmp/ksim".to_owned()),
                    ..EnvVar::default()
                },
            ]),
            resources: Some(resources),
            security_context: Some(SecurityContext {
                allow_privilege_escalation: Some(false),
                read_only_root_filesystem: Some(true),
                capabilities: Some(Capabilities {
                    drop: Some(vec!["ALL".to_owned()]),
                    ..Capabilities::default()
                }),
                ..SecurityContext::default()
            }),
            volume_mounts: Some(vec![
                VolumeMount {
                    name: "tmp".to_owned(),
                    mount_path: "/tmp".to_owned(),
                    ..VolumeMount::default()
                },
                VolumeMount {
                    name: "shm".to_owned(),
                    mount_path: "/dev/shm".to_owned(),
                    ..VolumeMount::default()
                },
            ]),
            ..Container::default()
        };
        Job {
            metadata: ObjectMeta {
                name: Some(job_name(&self.id)),
                namespace: Some(self.namespace.clone()),
                labels: Some(labels.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(JobSpec {
                completion_mode: Some("Indexed".to_owned()),
                completions: Some(completions),
                parallelism: Some(
                    i32::try_from(self.parallelism.max(1))
                        .unwrap_or(i32::MAX)
                        .min(completions),
                ),
                // Each run is retried on its own; one that keeps failing does not stop the rest.
                backoff_limit_per_index: Some(RETRIES_PER_RUN),
                max_failed_indexes: Some(completions),
                // A replacement starts only once the failed pod is gone: never two of one run.
                pod_replacement_policy: Some("Failed".to_owned()),
                suspend: Some(true),
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(labels),
                        ..ObjectMeta::default()
                    }),
                    spec: Some(PodSpec {
                        restart_policy: Some("Never".to_owned()),
                        service_account_name: Some(RUN_SERVICE_ACCOUNT.to_owned()),
                        enable_service_links: Some(false),
                        security_context: Some(PodSecurityContext {
                            run_as_non_root: Some(true),
                            run_as_user: Some(65532),
                            run_as_group: Some(65532),
                            seccomp_profile: Some(SeccompProfile {
                                type_: "RuntimeDefault".to_owned(),
                                ..SeccompProfile::default()
                            }),
                            ..PodSecurityContext::default()
                        }),
                        containers: vec![container],
                        volumes: Some(vec![
                            Volume {
                                name: "tmp".to_owned(),
                                empty_dir: Some(EmptyDirVolumeSource::default()),
                                ..Volume::default()
                            },
                            // etcd keeps its data on tmpfs at /dev/shm (the tuned plane), and
                            // a container's own /dev/shm is 64 MiB: less than etcd's first WAL.
                            Volume {
                                name: "shm".to_owned(),
                                empty_dir: Some(EmptyDirVolumeSource {
                                    medium: Some("Memory".to_owned()),
                                    size_limit: Some(Quantity(SHM_SIZE.to_owned())),
                                }),
                                ..Volume::default()
                            },
                        ]),
                        ..PodSpec::default()
                    }),
                },
                ..JobSpec::default()
            }),
            ..Job::default()
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn plan() -> JobPlan {
        JobPlan {
            id: "day-0a1b2c3d".to_owned(),
            namespace: "sims".to_owned(),
            image: DEFAULT_IMAGE.to_owned(),
            runs: vec![1, 4, 5],
            parallelism: 8,
            sizing: sizing(1200, 484),
        }
    }

    #[test]
    fn the_rule_grows_memory_with_nodes_and_cpu_with_the_event_rate() {
        // The demo: 4 nodes, under an event a minute.
        let small = sizing(4, 1);
        assert_eq!(
            small,
            Sizing {
                cpu_millis: 351,
                memory_mib: 1184
            }
        );
        // The generated 1,000-node day at 40x: its groups' 1,200 nodes, 484 events a minute.
        let day = sizing(1200, 484);
        assert_eq!(
            day,
            Sizing {
                cpu_millis: 250 + 1200 + 484,
                memory_mib: 1024 + 12 * 160
            }
        );
        // Past any real cluster, it still answers (saturating), never panics.
        let huge = sizing(u32::MAX, u32::MAX);
        assert!(huge.memory_mib > day.memory_mib && huge.cpu_millis > day.cpu_millis);
    }

    #[test]
    fn the_job_runs_the_missing_runs_each_once_at_a_time_unprivileged() {
        let job = plan().job();
        assert_eq!(job.metadata.name.as_deref(), Some("ksim-day-0a1b2c3d"));
        let spec = job.spec.unwrap();
        assert_eq!(spec.completion_mode.as_deref(), Some("Indexed"));
        assert_eq!((spec.completions, spec.parallelism), (Some(3), Some(3)));
        assert_eq!(spec.suspend, Some(true));
        assert_eq!(spec.backoff_limit_per_index, Some(RETRIES_PER_RUN));
        let pod = spec.template.spec.unwrap();
        assert_eq!(
            pod.service_account_name.as_deref(),
            Some(RUN_SERVICE_ACCOUNT)
        );
        assert_eq!(pod.security_context.unwrap().run_as_non_root, Some(true));
        let container = &pod.containers[0];
        let args = container.args.as_ref().unwrap();
        assert_eq!(args[args.len() - 2..], ["--runs", "1,4,5"]);
        let resources = container.resources.as_ref().unwrap();
        assert_eq!(resources.requests.as_ref().unwrap()["cpu"].0, "1934m");
        assert_eq!(resources.requests.as_ref().unwrap()["memory"].0, "2944Mi");
        assert_eq!(resources.limits.as_ref().unwrap()["memory"].0, "4416Mi");
        assert!(resources.limits.as_ref().unwrap().get("cpu").is_none());
        let shm = pod
            .volumes
            .as_ref()
            .unwrap()
            .iter()
            .find(|v| v.name == "shm")
            .unwrap();
        assert_eq!(
            shm.empty_dir.as_ref().unwrap().medium.as_deref(),
            Some("Memory")
        );
        let security = container.security_context.as_ref().unwrap();
        assert_eq!(security.allow_privilege_escalation, Some(false));
    }
}
