//! Which cluster-autoscaler flags a run may set. The configuration under test is CA's
//! decision-making, so a run may set a flag only if it is in [`ALLOWED`]: when CA scales up or
//! down, by how much, how fast, within which limits. Every other flag CA has is in [`REFUSED`],
//! by family: where CA writes, whom it talks to, who it is, what it reports. CA runs as the
//! environment's user, so a flag outside both lists is refused too until someone decides.
//!
//! Both lists are checked against the `--help` of every tested release (ksim-localenv's
//! `real_ca_flags_are_each_allowed_or_refused`): a flag a new release adds fails that test until
//! it is put in one list, and an allowed flag no release knows fails it as stale.

use std::fmt;

/// Why a family of flags is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Logging,
    Connection,
    Files,
    Identity,
    Provider,
    Diagnostics,
    Supervision,
    Testing,
}

impl Family {
    /// One word, for the table and messages.
    pub fn word(self) -> &'static str {
        match self {
            Self::Logging => "logging",
            Self::Connection => "connection",
            Self::Files => "files",
            Self::Identity => "identity",
            Self::Provider => "provider",
            Self::Diagnostics => "diagnostics",
            Self::Supervision => "supervision",
            Self::Testing => "testing",
        }
    }

    /// What a flag of the family does that a run must not.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Logging => "it changes where or how CA logs; the environment keeps its log",
            Self::Connection => {
                "it changes whom CA connects to or how; the environment connects it to its \
                 cluster and provider"
            }
            Self::Files => "it makes CA read or write a file on the environment's machine",
            Self::Identity => {
                "it changes who CA is in the cluster (leader election, namespace, names)"
            }
            Self::Provider => {
                "it configures a cloud provider or its node groups; the environment's provider \
                 and the run's --autoscaler-group define them"
            }
            Self::Diagnostics => {
                "it opens a diagnostics endpoint or changes what CA reports, not what it decides"
            }
            Self::Supervision => "it makes CA restart itself; the environment supervises it",
            Self::Testing => "it configures Ginkgo, a test framework linked into CA, not CA",
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.word())
    }
}

/// The flags a run may set: each changes what CA decides, or the budget it decides in.
pub const ALLOWED: &[&str] = &[
    // The loop.
    "scan-interval",
    "frequent-loops-enabled",
    "feature-gates",
    // Scale-up: which group, how many nodes, when a pod counts.
    "expander",
    "estimator",
    "allowed-scheduler-names",
    "max-nodes-per-scaleup",
    "max-nodegroup-binpacking-duration",
    "max-binpacking-time",
    "new-pod-scale-up-delay",
    "bypassed-scheduler-names",
    "scale-up-from-zero",
    "parallel-scale-up",
    "enable-proactive-scaleup",
    "pod-injection-limit",
    "enforce-node-group-min-size",
    "async-node-groups",
    "salvo-scale-up",
    "salvo-scale-up-budget",
    "fastpath-binpacking-enabled",
    "scaleup-simulation-for-skipped-node-groups-enabled",
    "force-ds",
    "max-node-provision-time",
    "max-node-startup-time",
    // Node templates.
    "startup-taint",
    "startup-taint-prefix",
    "status-taint",
    "ignore-taint",
    "scale-from-unschedulable",
    "node-info-cache-expire-time",
    // Cluster limits and health.
    "max-nodes-total",
    "cores-total",
    "memory-total",
    "gpu-total",
    "max-total-unready-percentage",
    "ok-total-unready-count",
    // Balancing similar groups.
    "balance-similar-node-groups",
    "balancing-ignore-label",
    "balancing-label",
    "memory-difference-ratio",
    "max-free-difference-ratio",
    "max-allocatable-difference-ratio",
    // Scale-down: which nodes, when, how.
    "scale-down-enabled",
    "scale-down-unready-enabled",
    "scale-down-delay-after-add",
    "scale-down-delay-after-delete",
    "scale-down-delay-after-failure",
    "scale-down-delay-type-local",
    "scale-down-unneeded-time",
    "scale-down-unready-time",
    "scale-down-utilization-threshold",
    "scale-down-gpu-utilization-threshold",
    "scale-down-non-empty-candidates-count",
    "scale-down-candidates-pool-ratio",
    "scale-down-candidates-pool-min-count",
    "scale-down-simulation-timeout",
    "ignore-daemonsets-utilization",
    "ignore-mirror-pods-utilization",
    "skip-nodes-with-system-pods",
    "skip-nodes-with-local-storage",
    "skip-nodes-with-custom-controller-pods",
    "min-replica-count",
    "expendable-pods-priority-cutoff",
    "blocking-system-pod-distruption-timeout",
    "unremovable-node-recheck-timeout",
    "max-scale-down-parallelism",
    "max-drain-parallelism",
    "max-graceful-termination-sec",
    "drain-priority-config",
    "max-pod-eviction-time",
    "max-bulk-soft-taint-count",
    "max-bulk-soft-taint-time",
    "cordon-node-before-terminating",
    "daemonset-eviction-for-empty-nodes",
    "daemonset-eviction-for-occupied-nodes",
    "node-delete-delay-after-taint",
    "dynamic-node-delete-delay-after-taint-enabled",
    "node-deletion-delay-timeout",
    "node-deletion-batcher-interval",
    "node-deletion-candidate-ttl",
    "force-delete-unregistered-nodes",
    "force-delete-failed-nodes",
    // Backoff of a group whose nodes failed to come up.
    "initial-node-group-backoff-duration",
    "max-node-group-backoff-duration",
    "node-group-backoff-reset-timeout",
    // ProvisioningRequests, capacity buffers and quotas, DRA, CSI.
    "enable-provisioning-requests",
    "provisioning-request-initial-backoff-time",
    "provisioning-request-max-backoff-time",
    "provisioning-request-max-backoff-cache-size",
    "check-capacity-batch-processing",
    "check-capacity-provisioning-request-max-batch-size",
    "check-capacity-provisioning-request-batch-timebox",
    "check-capacity-processor-instance",
    "capacity-buffer-controller-enabled",
    "capacity-buffer-pod-injection-enabled",
    "capacity-buffer-pod-dry-run-enabled",
    "capacity-quotas-enabled",
    "enable-dynamic-resource-allocation",
    "enable-csi-node-aware-scheduling",
    // How much CPU a decision may use.
    "cluster-snapshot-parallelism",
    "predicate-parallelism",
    // How fast CA's taints, deletions and status reach the API server: a cluster of a thousand
    // nodes often raises them from client-go's 5 a second, and a recording's values must hold.
    "kube-client-qps",
    "kube-client-burst",
    // The log's detail, not its place: a user reading why CA decided needs it.
    "v",
];

/// Every other flag of the tested releases, by why a run may not set it.
pub const REFUSED: &[(Family, &[&str])] = &[
    (
        Family::Logging,
        &[
            "log-file",
            "log-dir",
            "log-file-max-size",
            "logtostderr",
            "alsologtostderr",
            "stderrthreshold",
            "alsologtostderrthreshold",
            "legacy-stderr-threshold-behavior",
            "log-backtrace-at",
            "add-dir-header",
            "skip-headers",
            "skip-log-headers",
            "one-output",
            "vmodule",
            "log-flush-frequency",
            "logging-format",
            "log-json-info-buffer-size",
            "log-json-split-stream",
            "log-text-info-buffer-size",
            "log-text-split-stream",
        ],
    ),
    (
        Family::Connection,
        &[
            "kubernetes",
            "kubeconfig",
            "address",
            "kube-api-content-type",
            "grpc-expander-url",
            "user-agent",
        ],
    ),
    (
        Family::Files,
        &[
            "cloud-config",
            "scheduler-config-file",
            "grpc-expander-cert",
        ],
    ),
    (
        Family::Identity,
        &[
            "leader-elect",
            "leader-elect-lease-duration",
            "leader-elect-renew-deadline",
            "leader-elect-resource-lock",
            "leader-elect-resource-name",
            "leader-elect-resource-namespace",
            "leader-elect-retry-period",
            "namespace",
            "cluster-name",
            "status-config-map-name",
        ],
    ),
    (
        Family::Provider,
        &[
            "cloud-provider",
            "nodes",
            "node-group-auto-discovery",
            "regional",
            "aws-use-static-instance-list",
            "gce-concurrent-refreshes",
            "gce-mig-instances-min-refresh-wait-time",
            "bulk-mig-instances-listing-enabled",
            "clusterapi-cloud-config-authoritative",
        ],
    ),
    (
        Family::Diagnostics,
        &[
            "profiling",
            "debugging-snapshot-enabled",
            "emit-per-nodegroup-metrics",
            "record-duplicated-events",
            "write-status-configmap",
            "max-node-skip-eval-time-tracker-enabled",
            "node-removal-latency-tracking-enabled",
        ],
    ),
    (
        Family::Supervision,
        &["max-inactivity", "max-failing-time", "max-startup-time"],
    ),
];

/// Refused families by prefix: Ginkgo's flags (`--ginkgo.junit-report=FILE`, ...) come with
/// CA's build, dozens of them, all of Ginkgo.
pub const REFUSED_PREFIXES: &[(Family, &str)] = &[(Family::Testing, "ginkgo.")];

/// What a flag's value must be, from CA's flag definitions (`config/flags/flags.go`: its Go
/// type) and what CA does with it (a ratio, a count). Checked when a flag is given, so a value
/// CA would refuse, or take to mean nothing, never reaches it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// Go's duration, not negative.
    Duration,
    /// Whole seconds of simulated time (see the autoscaler module's dilated seconds).
    Seconds,
    /// A rate per second of simulated time, above 0.
    Rate,
    /// Go's `strconv.ParseBool`: true, false, 1, 0, t, f, ...
    Bool,
    /// A whole number from `min` to `max` (a Go int).
    Int { min: i64, max: i64 },
    /// A finite number from `min` to `max`.
    Float { min: f64, max: f64 },
    /// One or more of these, comma-separated (CA calls them in turn).
    List(&'static [&'static str]),
    /// One of these.
    OneOf(&'static [&'static str]),
    /// `MIN:MAX`, whole numbers, 0 <= MIN <= MAX.
    MinMax,
    /// `TYPE:MIN:MAX`, whole numbers, 0 <= MIN <= MAX.
    GpuMinMax,
    /// `NAME=BOOL,...`, Kubernetes feature gates.
    Gates,
    /// Any text: names, taints, labels; CA reads it as it is.
    Text,
}

/// CA's expanders (`expander.AvailableExpanders`, the same in every tested release).
pub const EXPANDERS: &[&str] = &[
    "random",
    "most-pods",
    "least-waste",
    "price",
    "priority",
    "grpc",
];

/// CA's estimators (`estimator.AvailableEstimators`).
pub const ESTIMATORS: &[&str] = &["binpacking"];

const COUNT: Kind = Kind::Int {
    min: 0,
    max: i64::MAX,
};
/// Workers or requests at once: none would stall CA.
const AT_LEAST_ONE: Kind = Kind::Int {
    min: 1,
    max: i64::MAX,
};
const FRACTION: Kind = Kind::Float { min: 0.0, max: 1.0 };
const RATIO: Kind = Kind::Float {
    min: 0.0,
    max: f64::MAX,
};

/// The kind of allowed flag `name`'s value; `None` for a flag a run may not set.
pub fn kind(name: &str) -> Option<Kind> {
    Some(match name {
        "scan-interval"
        | "max-nodegroup-binpacking-duration"
        | "max-binpacking-time"
        | "new-pod-scale-up-delay"
        | "salvo-scale-up-budget"
        | "max-node-provision-time"
        | "max-node-startup-time"
        | "node-info-cache-expire-time"
        | "scale-down-delay-after-add"
        | "scale-down-delay-after-delete"
        | "scale-down-delay-after-failure"
        | "scale-down-unneeded-time"
        | "scale-down-unready-time"
        | "scale-down-simulation-timeout"
        | "blocking-system-pod-distruption-timeout"
        | "unremovable-node-recheck-timeout"
        | "max-pod-eviction-time"
        | "max-bulk-soft-taint-time"
        | "node-delete-delay-after-taint"
        | "node-deletion-delay-timeout"
        | "node-deletion-batcher-interval"
        | "node-deletion-candidate-ttl"
        | "initial-node-group-backoff-duration"
        | "max-node-group-backoff-duration"
        | "node-group-backoff-reset-timeout"
        | "provisioning-request-initial-backoff-time"
        | "provisioning-request-max-backoff-time"
        | "check-capacity-provisioning-request-batch-timebox" => Kind::Duration,
        "max-graceful-termination-sec" => Kind::Seconds,
        "kube-client-qps" => Kind::Rate,
        "frequent-loops-enabled"
        | "scale-up-from-zero"
        | "parallel-scale-up"
        | "enable-proactive-scaleup"
        | "enforce-node-group-min-size"
        | "async-node-groups"
        | "salvo-scale-up"
        | "fastpath-binpacking-enabled"
        | "scaleup-simulation-for-skipped-node-groups-enabled"
        | "force-ds"
        | "scale-from-unschedulable"
        | "balance-similar-node-groups"
        | "scale-down-enabled"
        | "scale-down-unready-enabled"
        | "scale-down-delay-type-local"
        | "ignore-daemonsets-utilization"
        | "ignore-mirror-pods-utilization"
        | "skip-nodes-with-system-pods"
        | "skip-nodes-with-local-storage"
        | "skip-nodes-with-custom-controller-pods"
        | "cordon-node-before-terminating"
        | "daemonset-eviction-for-empty-nodes"
        | "daemonset-eviction-for-occupied-nodes"
        | "dynamic-node-delete-delay-after-taint-enabled"
        | "force-delete-unregistered-nodes"
        | "force-delete-failed-nodes"
        | "enable-provisioning-requests"
        | "check-capacity-batch-processing"
        | "capacity-buffer-controller-enabled"
        | "capacity-buffer-pod-injection-enabled"
        | "capacity-buffer-pod-dry-run-enabled"
        | "capacity-quotas-enabled"
        | "enable-dynamic-resource-allocation"
        | "enable-csi-node-aware-scheduling" => Kind::Bool,
        // 0 means no limit (max-nodes-total) or turns the feature off.
        "max-nodes-per-scaleup"
        | "pod-injection-limit"
        | "max-nodes-total"
        | "ok-total-unready-count"
        | "scale-down-candidates-pool-min-count"
        | "min-replica-count"
        | "max-scale-down-parallelism"
        | "max-drain-parallelism"
        | "max-bulk-soft-taint-count"
        | "provisioning-request-max-backoff-cache-size"
        | "check-capacity-provisioning-request-max-batch-size" => COUNT,
        "predicate-parallelism" | "cluster-snapshot-parallelism" | "kube-client-burst" => {
            AT_LEAST_ONE
        }
        // A pod priority, below 0 by default; a non-positive count turns the heuristic off.
        "expendable-pods-priority-cutoff" | "scale-down-non-empty-candidates-count" => Kind::Int {
            min: i64::MIN,
            max: i64::MAX,
        },
        // klog's Level, an int32.
        "v" => Kind::Int {
            min: 0,
            max: i64::from(i32::MAX),
        },
        "scale-down-utilization-threshold"
        | "scale-down-gpu-utilization-threshold"
        | "scale-down-candidates-pool-ratio" => FRACTION,
        "max-total-unready-percentage" => Kind::Float {
            min: 0.0,
            max: 100.0,
        },
        "memory-difference-ratio"
        | "max-free-difference-ratio"
        | "max-allocatable-difference-ratio" => RATIO,
        "expander" => Kind::List(EXPANDERS),
        "estimator" => Kind::OneOf(ESTIMATORS),
        "cores-total" | "memory-total" => Kind::MinMax,
        "gpu-total" => Kind::GpuMinMax,
        "feature-gates" => Kind::Gates,
        "allowed-scheduler-names"
        | "bypassed-scheduler-names"
        | "startup-taint"
        | "startup-taint-prefix"
        | "status-taint"
        | "ignore-taint"
        | "balancing-ignore-label"
        | "balancing-label"
        | "drain-priority-config"
        | "check-capacity-processor-instance" => Kind::Text,
        _ => return None,
    })
}

impl Kind {
    /// What a value of the kind is, for messages ("... is not {expected}").
    pub fn expected(self) -> String {
        match self {
            Self::Duration => "a duration (e.g. 10m, 1h30m, 1.5s, 300ms)".to_owned(),
            Self::Seconds => "a whole number of seconds".to_owned(),
            Self::Rate => "a rate above 0 (e.g. 5 or 12.5)".to_owned(),
            Self::Bool => "true or false".to_owned(),
            Self::Int { min, max } => match (min, max) {
                (i64::MIN, i64::MAX) => "a whole number".to_owned(),
                (min, i64::MAX) => format!("a whole number of {min} or more"),
                (min, max) => format!("a whole number from {min} to {max}"),
            },
            Self::Float { min, max } if max == f64::MAX => format!("a number of {min} or more"),
            Self::Float { min, max } => format!("a number from {min} to {max}"),
            Self::List(choices) => format!("a comma-separated list of {}", choices.join(", ")),
            Self::OneOf(choices) => format!("one of {}", choices.join(", ")),
            Self::MinMax => "MIN:MAX, whole numbers with 0 <= MIN <= MAX".to_owned(),
            Self::GpuMinMax => "TYPE:MIN:MAX, whole numbers with 0 <= MIN <= MAX".to_owned(),
            Self::Gates => "a comma-separated list of NAME=true or NAME=false".to_owned(),
            Self::Text => "text".to_owned(),
        }
    }

    /// Whether `value` is one of the kind. Durations, seconds and rates are the autoscaler
    /// module's to parse (it divides them by the speed); here they pass.
    pub fn admits(self, value: &str) -> bool {
        match self {
            Self::Duration | Self::Seconds | Self::Rate | Self::Text => true,
            Self::Bool => go_bool(value).is_some(),
            Self::Int { min, max } => value.parse::<i64>().is_ok_and(|n| (min..=max).contains(&n)),
            Self::Float { min, max } => value
                .parse::<f64>()
                .is_ok_and(|x| x.is_finite() && (min..=max).contains(&x)),
            Self::List(choices) => value.split(',').all(|item| choices.contains(&item)),
            Self::OneOf(choices) => choices.contains(&value),
            Self::MinMax => min_max(value.split(':')),
            Self::GpuMinMax => value
                .split_once(':')
                .is_some_and(|(_, limits)| min_max(limits.split(':'))),
            Self::Gates => value.split(',').all(|gate| {
                gate.split_once('=').is_some_and(|(name, enabled)| {
                    !name.trim().is_empty() && go_bool(enabled.trim()).is_some()
                })
            }),
        }
    }
}

/// Go's `strconv.ParseBool`.
fn go_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// Exactly `MIN`, `MAX`: whole numbers, 0 <= MIN <= MAX (CA's `parseMinMaxFlag`).
fn min_max<'a>(mut parts: impl Iterator<Item = &'a str>) -> bool {
    let number = |part: Option<&str>| part.and_then(|p| p.parse::<i64>().ok());
    match (number(parts.next()), number(parts.next()), parts.next()) {
        (Some(min), Some(max), None) => 0 <= min && min <= max,
        _ => false,
    }
}

/// Whether a run may set `name` (as CA spells it, with dashes).
pub fn allowed(name: &str) -> bool {
    ALLOWED.contains(&name)
}

/// The family of a refused flag. Go's flag sets of Kubernetes components take `_` for `-`, so
/// `log_file` is `log-file` here too.
pub fn refused(name: &str) -> Option<Family> {
    let dashed = name.replace('_', "-");
    REFUSED
        .iter()
        .find(|(_, names)| names.contains(&dashed.as_str()))
        .map(|(family, _)| *family)
        .or_else(|| {
            REFUSED_PREFIXES
                .iter()
                .find(|(_, prefix)| dashed.starts_with(prefix))
                .map(|(family, _)| *family)
        })
}

/// The allowed flag `name` most likely means, if one is close (a typo, `_` for `-`).
pub fn suggestion(name: &str) -> Option<&'static str> {
    let dashed = name.replace('_', "-");
    ALLOWED
        .iter()
        .map(|candidate| (edit_distance(&dashed, candidate), *candidate))
        .filter(|(distance, _)| *distance <= 2)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// Levenshtein distance over bytes (flag names are ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let b = b.as_bytes();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.bytes().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn no_flag_is_both_allowed_and_refused_or_listed_twice() {
        let mut seen = BTreeSet::new();
        for name in ALLOWED
            .iter()
            .chain(REFUSED.iter().flat_map(|(_, names)| names.iter()))
        {
            assert!(seen.insert(*name), "--{name} is listed twice");
        }
    }

    #[test]
    fn every_dilated_flag_is_allowed() {
        for name in super::super::dilated_flags() {
            assert!(
                allowed(name),
                "--{name} is divided by the speed but not allowed"
            );
        }
    }

    #[test]
    fn every_allowed_flag_has_a_kind_and_no_other_does() {
        for name in ALLOWED {
            assert!(kind(name).is_some(), "--{name} has no value kind");
        }
        for (_, names) in REFUSED {
            for name in *names {
                assert_eq!(kind(name), None, "--{name}");
            }
        }
    }

    #[test]
    fn refused_flags_are_found_with_underscores_too() {
        assert_eq!(refused("log-file"), Some(Family::Logging));
        assert_eq!(refused("log_file"), Some(Family::Logging));
        assert_eq!(refused("grpc-expander-url"), Some(Family::Connection));
        assert_eq!(refused("ginkgo.junit-report"), Some(Family::Testing));
        assert_eq!(refused("expander"), None);
    }

    #[test]
    fn a_typo_suggests_the_allowed_flag() {
        assert_eq!(
            suggestion("scale-down-unneded-time"),
            Some("scale-down-unneeded-time")
        );
        assert_eq!(
            suggestion("scale_down_unneeded_time"),
            Some("scale-down-unneeded-time")
        );
        assert_eq!(suggestion("frobnicate"), None);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
