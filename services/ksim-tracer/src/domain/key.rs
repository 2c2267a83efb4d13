//! Identities of recorded objects.

use std::fmt;

use ksim_proto::ksim::trace::v1 as pb;
use serde_json::Value;

/// One object's identity across versions of its API: group, kind, namespace, name.
/// The version is left out on purpose: `apps/v1beta2` and `apps/v1` name the same Deployment.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub group: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn of(object: &pb::TraceObject) -> Self {
        let gvk = object.gvk.clone().unwrap_or_default();
        Self {
            group: gvk.group,
            kind: gvk.kind,
            namespace: object.namespace.clone(),
            name: object.name.clone(),
        }
    }

    /// The key of the object an owner reference points at; owners live in the owned object's namespace
    /// (or are cluster-scoped, which the caller cannot tell apart: both are tried).
    pub fn owner(reference: &Value, namespace: &str) -> Option<Self> {
        let api_version = reference.get("apiVersion")?.as_str()?;
        Some(Self {
            group: api_version
                .rsplit_once('/')
                .map_or("", |(g, _)| g)
                .to_owned(),
            kind: reference.get("kind")?.as_str()?.to_owned(),
            namespace: namespace.to_owned(),
            name: reference.get("name")?.as_str()?.to_owned(),
        })
    }

    pub fn cluster_scoped(mut self) -> Self {
        self.namespace.clear();
        self
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        if self.namespace.is_empty() {
            write!(f, "{}.{group} {}", self.kind, self.name)
        } else {
            write!(f, "{}.{group} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// The owner references of an object (the `metadata.ownerReferences` array, possibly empty).
pub fn owner_references(object: &Value) -> &[Value] {
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The controller owner reference, which is the one a controller recreates the object from.
pub fn controller_reference(object: &Value) -> Option<&Value> {
    owner_references(object)
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
}
