//! The kinds the tracer records and how: the configured list and its defaults.

use ksim_proto::ksim::trace::v1 as pb;
use serde::Deserialize;

/// How one kind is recorded, as written in the tracer config.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TrackedKind {
    /// `group/version`, or `version` for the core group (`v1`), as in an object's apiVersion.
    pub api_version: String,
    pub kind: String,
    /// JSON pointers to the pod templates inside an object; `""` means the object is a pod.
    #[serde(default)]
    pub pod_template_paths: Vec<String>,
    /// Whether the lifetimes of the pods this kind creates are recorded.
    #[serde(default)]
    pub track_lifecycles: bool,
    /// Leave out objects that have a controller owner: the owner recreates them at replay.
    #[serde(default)]
    pub skip_owned: bool,
}

impl TrackedKind {
    fn new(
        api_version: &str,
        kind: &str,
        paths: &[&str],
        track_lifecycles: bool,
        skip_owned: bool,
    ) -> Self {
        Self {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            pod_template_paths: paths.iter().map(|p| (*p).to_owned()).collect(),
            track_lifecycles,
            skip_owned,
        }
    }

    /// Nodes are the cluster's state, recorded as `RecordedNode`s and samples, never replayed.
    pub fn is_node(&self) -> bool {
        self.group().is_empty() && self.kind == "Node"
    }

    pub fn group(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map_or("", |(group, _)| group)
    }

    pub fn version(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map_or(self.api_version.as_str(), |(_, v)| v)
    }

    pub fn gvk(&self) -> pb::GroupVersionKind {
        pb::GroupVersionKind {
            group: self.group().to_owned(),
            version: self.version().to_owned(),
            kind: self.kind.clone(),
        }
    }

    pub fn is_pod(&self) -> bool {
        self.group().is_empty() && self.kind == "Pod"
    }

    /// The trace-file description of the kind; plural and scope come from discovery.
    pub fn to_proto(&self, plural: &str, namespaced: bool) -> pb::TrackedKindConfig {
        pb::TrackedKindConfig {
            gvk: Some(self.gvk()),
            plural: plural.to_owned(),
            namespaced,
            pod_template_paths: self.pod_template_paths.clone(),
            track_lifecycles: self.track_lifecycles,
            skip_owned: self.skip_owned,
        }
    }
}

/// The workload kinds a replay needs. Controller-made objects (ReplicaSets of a
/// Deployment, Jobs of a CronJob, pods of anything) are skipped when owned,
/// because their owner makes them again at replay; their pods' lifetimes are kept.
pub fn default_kinds() -> Vec<TrackedKind> {
    vec![
        TrackedKind::new("apps/v1", "Deployment", &["/spec/template"], true, false),
        TrackedKind::new("apps/v1", "StatefulSet", &["/spec/template"], true, false),
        TrackedKind::new("apps/v1", "DaemonSet", &["/spec/template"], true, false),
        TrackedKind::new("apps/v1", "ReplicaSet", &["/spec/template"], true, true),
        TrackedKind::new("batch/v1", "Job", &["/spec/template"], true, true),
        TrackedKind::new(
            "batch/v1",
            "CronJob",
            &["/spec/jobTemplate/spec/template"],
            true,
            false,
        ),
        TrackedKind::new("v1", "Pod", &[""], true, true),
        // Not replayed: recorded as the cluster's state, which reports compare a replay with.
        TrackedKind::new("v1", "Node", &[], false, false),
        // Replayed only when a run lets the simulated HPAs decide replica counts; recorded
        // either way, so that a run may.
        TrackedKind::new(
            "autoscaling/v2",
            "HorizontalPodAutoscaler",
            &[],
            false,
            false,
        ),
    ]
}

/// The first bad entry of a kind list, by its index in `trackedKinds`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KindsError {
    #[error("trackedKinds[{index}]: apiVersion and kind are required")]
    Incomplete { index: usize },
    #[error("trackedKinds[{index}]: {api_version}/{kind} is listed twice")]
    Twice {
        index: usize,
        api_version: String,
        kind: String,
    },
    #[error(
        "trackedKinds[{index}] ({kind}): pod template path {path:?} is not a JSON pointer (it must start with '/')"
    )]
    NotAPointer {
        index: usize,
        kind: String,
        path: String,
    },
    #[error(
        "{kind} sets trackLifecycles, which needs the v1 Pod kind in trackedKinds \
         (with skipOwned: true, pods made by a controller are not recorded as objects)"
    )]
    LifecyclesWithoutPods { kind: String },
}

/// Checks a kind list before any watch starts, naming the first bad entry.
pub fn validate(kinds: &[TrackedKind]) -> Result<(), KindsError> {
    let mut seen = std::collections::HashSet::new();
    for (index, kind) in kinds.iter().enumerate() {
        if kind.kind.is_empty() || kind.version().is_empty() {
            return Err(KindsError::Incomplete { index });
        }
        if !seen.insert((kind.group().to_owned(), kind.kind.clone())) {
            return Err(KindsError::Twice {
                index,
                api_version: kind.api_version.clone(),
                kind: kind.kind.clone(),
            });
        }
        if let Some(path) = kind
            .pod_template_paths
            .iter()
            .find(|path| !path.is_empty() && !path.starts_with('/'))
        {
            return Err(KindsError::NotAPointer {
                index,
                kind: kind.kind.clone(),
                path: path.clone(),
            });
        }
    }
    let pods_watched = kinds.iter().any(TrackedKind::is_pod);
    if let Some(kind) = kinds.iter().find(|k| k.track_lifecycles && !pods_watched) {
        return Err(KindsError::LifecyclesWithoutPods {
            kind: kind.kind.clone(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_and_grouped_api_versions_split() {
        let pod = TrackedKind::new("v1", "Pod", &[""], true, true);
        assert_eq!((pod.group(), pod.version()), ("", "v1"));
        assert!(pod.is_pod());
        let deploy = TrackedKind::new("apps/v1", "Deployment", &[], false, false);
        assert_eq!((deploy.group(), deploy.version()), ("apps", "v1"));
        assert!(!deploy.is_pod());
    }

    #[test]
    fn defaults_are_valid_and_cover_the_workload_kinds() {
        let kinds = default_kinds();
        assert_eq!(validate(&kinds), Ok(()));
        let names: Vec<_> = kinds.iter().map(|k| k.kind.as_str()).collect();
        for expected in [
            "Deployment",
            "StatefulSet",
            "DaemonSet",
            "Job",
            "CronJob",
            "ReplicaSet",
            "Pod",
            "Node",
        ] {
            assert!(names.contains(&expected), "{expected} missing");
        }
    }

    #[test]
    fn validation_names_the_bad_entry() {
        let mut kinds = default_kinds();
        kinds.push(TrackedKind::new("apps/v1", "Deployment", &[], false, false));
        let error = validate(&kinds).unwrap_err().to_string();
        assert!(
            error.contains("trackedKinds[9]") && error.contains("twice"),
            "{error}"
        );

        let no_pods = vec![TrackedKind::new(
            "apps/v1",
            "Deployment",
            &["/spec/template"],
            true,
            false,
        )];
        let error = validate(&no_pods).unwrap_err().to_string();
        assert!(
            error.contains("Deployment sets trackLifecycles") && error.contains("Pod"),
            "{error}"
        );

        let bad_path = vec![TrackedKind::new(
            "example.com/v1",
            "Widget",
            &["spec/template"],
            false,
            false,
        )];
        let error = validate(&bad_path).unwrap_err().to_string();
        assert!(error.contains("JSON pointer"), "{error}");
    }
}
