//! The objects a report speaks of: a kind, one replayed object, and what was done with it.

use std::fmt;

use ksim_trace::pb;
use serde::{Deserialize, Serialize};

/// A Kubernetes kind: group (empty for the core group), version and kind.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Gvk {
    pub group: String,
    pub version: String,
    pub kind: String,
}

impl Gvk {
    pub fn new(group: &str, version: &str, kind: &str) -> Self {
        Self {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
        }
    }

    /// `apiVersion` as objects carry it: `v1` for the core group, else `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

impl fmt::Display for Gvk {
    /// As SimKube and the trace tools write kinds: `apps/v1.Deployment`, `v1.Pod`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.api_version(), self.kind)
    }
}

impl From<&pb::GroupVersionKind> for Gvk {
    fn from(gvk: &pb::GroupVersionKind) -> Self {
        Self::new(&gvk.group, &gvk.version, &gvk.kind)
    }
}

impl From<&Gvk> for pb::GroupVersionKind {
    fn from(gvk: &Gvk) -> Self {
        Self {
            group: gvk.group.clone(),
            version: gvk.version.clone(),
            kind: gvk.kind.clone(),
        }
    }
}

/// One object of the simulated cluster, as replayed (namespace already prefixed).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Target {
    pub gvk: Gvk,
    /// `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    pub name: String,
}

impl From<Operation> for crate::ObjectOperation {
    fn from(operation: Operation) -> Self {
        match operation {
            Operation::Apply => Self::Apply,
            Operation::Delete => Self::Delete,
            Operation::CronRun => Self::CronRun,
        }
    }
}

/// What the driver does with an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    /// Server-side apply under the driver's field manager.
    Apply,
    /// Delete by name; "not found" counts as done.
    Delete,
    /// Start the Job a CronJob's schedule called for (the object is the CronJob).
    CronRun,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_version_and_display_follow_kubernetes_spelling() {
        let core = Gvk::new("", "v1", "Pod");
        let apps = Gvk::new("apps", "v1", "Deployment");
        assert_eq!(core.api_version(), "v1");
        assert_eq!(apps.api_version(), "apps/v1");
        assert_eq!(core.to_string(), "v1.Pod");
        assert_eq!(apps.to_string(), "apps/v1.Deployment");
        let round_trip = Gvk::from(&pb::GroupVersionKind::from(&apps));
        assert_eq!(round_trip, apps);
    }
}
