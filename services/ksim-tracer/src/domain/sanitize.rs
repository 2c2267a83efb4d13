//! Sanitising: what of an object is recorded. Server-populated metadata and status go (the
//! apiserver and controllers make them again at replay), Secret data never enters the log, and
//! literal env values whose names look sensitive are redacted.

use serde::Deserialize;
use serde_json::Value;

use super::kinds::TrackedKind;

/// Metadata the apiserver fills in; replaying it would be refused or meaningless.
const SERVER_METADATA: &[&str] = &[
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "managedFields",
    "resourceVersion",
    "selfLink",
    "uid",
];

/// Annotations written by tools and controllers, not by the object's author. The
/// last-applied configuration would also carry a Secret's data verbatim.
const SERVER_ANNOTATIONS: &[&str] = &[
    "kubectl.kubernetes.io/last-applied-configuration",
    "deployment.kubernetes.io/revision",
];

pub const REDACTED: &str = "<redacted>";

/// Which literal env values are replaced by [`REDACTED`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct EnvRedaction {
    /// Redact every literal value.
    pub all_values: bool,
    /// Redact values of variables whose name contains one of these (case-insensitive).
    pub name_contains: Vec<String>,
}

impl Default for EnvRedaction {
    fn default() -> Self {
        Self {
            all_values: false,
            name_contains: [
                "PASSWORD",
                "PASSWD",
                "SECRET",
                "TOKEN",
                "CREDENTIAL",
                "API_KEY",
                "PRIVATE_KEY",
            ]
            .map(String::from)
            .to_vec(),
        }
    }
}

impl EnvRedaction {
    fn redacts(&self, name: &str) -> bool {
        let name = name.to_ascii_uppercase();
        self.all_values
            || self
                .name_contains
                .iter()
                .any(|part| name.contains(&part.to_ascii_uppercase()))
    }
}

/// The recorded form of `object`, a kind listed in the tracer config.
pub fn sanitize(kind: &TrackedKind, mut object: Value, redaction: &EnvRedaction) -> Value {
    if let Some(root) = object.as_object_mut() {
        root.remove("status");
        if kind.group().is_empty() && kind.kind == "Secret" {
            root.remove("data");
            root.remove("stringData");
        }
    }
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in SERVER_METADATA {
            metadata.remove(*field);
        }
        let annotations_left = metadata
            .get_mut("annotations")
            .and_then(Value::as_object_mut)
            .map(|annotations| {
                for annotation in SERVER_ANNOTATIONS {
                    annotations.remove(*annotation);
                }
                annotations.len()
            });
        if annotations_left == Some(0) {
            metadata.remove("annotations");
        }
    }
    if kind.is_pod() {
        // Bound by the scheduler, not the author; at replay the scheduler binds again.
        if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
            spec.remove("nodeName");
        }
    }
    for path in &kind.pod_template_paths {
        if let Some(template) = object.pointer_mut(path) {
            redact_env(template, redaction);
        }
    }
    object
}

/// A tombstone: enough of a deleted object to name it and to filter it by labels.
pub fn tombstone(object: &Value) -> Value {
    let mut metadata = serde_json::Map::new();
    for field in ["name", "namespace", "labels"] {
        if let Some(value) = object.pointer(&format!("/metadata/{field}")) {
            metadata.insert(field.to_owned(), value.clone());
        }
    }
    let mut tombstone = serde_json::Map::new();
    for field in ["apiVersion", "kind"] {
        if let Some(value) = object.get(field) {
            tombstone.insert(field.to_owned(), value.clone());
        }
    }
    tombstone.insert("metadata".to_owned(), Value::Object(metadata));
    Value::Object(tombstone)
}

fn redact_env(template: &mut Value, redaction: &EnvRedaction) {
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        let Some(containers) = template
            .pointer_mut(&format!("/spec/{list}"))
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        for container in containers {
            let Some(env) = container.get_mut("env").and_then(Value::as_array_mut) else {
                continue;
            };
            for variable in env {
                let redact = variable
                    .get("name")
                    .and_then(Value::as_str)
                    .is_some_and(|name| redaction.redacts(name));
                if let (true, Some(value)) = (redact, variable.get_mut("value")) {
                    *value = Value::String(REDACTED.to_owned());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::domain::kinds::default_kinds;

    fn kind(name: &str) -> TrackedKind {
        default_kinds()
            .into_iter()
            .find(|k| k.kind == name)
            .unwrap_or_else(|| TrackedKind {
                api_version: "v1".into(),
                kind: name.into(),
                pod_template_paths: vec![],
                track_lifecycles: false,
                skip_owned: false,
            })
    }

    #[test]
    fn server_metadata_and_status_are_dropped_owner_references_kept() {
        let object = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {
                "name": "web", "namespace": "shop", "uid": "u-1", "resourceVersion": "42",
                "generation": 3, "creationTimestamp": "2026-01-01T00:00:00Z", "managedFields": [{}],
                "labels": {"app": "web"},
                "annotations": {"deployment.kubernetes.io/revision": "2",
                                "kubectl.kubernetes.io/last-applied-configuration": "{}"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Thing", "name": "t", "uid": "x"}]
            },
            "spec": {"replicas": 2},
            "status": {"replicas": 2}
        });
        let clean = sanitize(&kind("Deployment"), object, &EnvRedaction::default());
        assert_eq!(
            clean,
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {
                    "name": "web", "namespace": "shop", "labels": {"app": "web"},
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Thing", "name": "t", "uid": "x"}]
                },
                "spec": {"replicas": 2}
            })
        );
    }

    #[test]
    fn secret_data_never_survives() {
        let secret = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db", "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "{\"data\":{\"pw\":\"c2VjcmV0\"}}"}},
            "type": "Opaque", "data": {"pw": "c2VjcmV0"}, "stringData": {"pw": "secret"}
        });
        let clean = sanitize(&kind("Secret"), secret, &EnvRedaction::default());
        let text = clean.to_string();
        assert!(
            !text.contains("c2VjcmV0") && !text.contains("secret\""),
            "{text}"
        );
        assert_eq!(clean["type"], "Opaque");
    }

    #[test]
    fn sensitive_env_values_are_redacted_in_every_template() {
        let job = json!({
            "apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly"},
            "spec": {"jobTemplate": {"spec": {"template": {"spec": {
                "initContainers": [{"name": "i", "env": [{"name": "db_password", "value": "hunter2"}]}],
                "containers": [{"name": "c", "env": [
                    {"name": "MODE", "value": "fast"},
                    {"name": "API_TOKEN", "value": "abc"},
                    {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
                ]}]
            }}}}}
        });
        let clean = sanitize(&kind("CronJob"), job, &EnvRedaction::default());
        let spec = &clean["spec"]["jobTemplate"]["spec"]["template"]["spec"];
        assert_eq!(spec["initContainers"][0]["env"][0]["value"], REDACTED);
        assert_eq!(spec["containers"][0]["env"][0]["value"], "fast");
        assert_eq!(spec["containers"][0]["env"][1]["value"], REDACTED);
        assert!(spec["containers"][0]["env"][2].get("value").is_none());

        let all = EnvRedaction {
            all_values: true,
            name_contains: vec![],
        };
        let job = json!({"kind": "Pod", "metadata": {"name": "p"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "env": [{"name": "MODE", "value": "fast"}]}]}});
        let clean = sanitize(&kind("Pod"), job, &all);
        assert_eq!(clean["spec"]["containers"][0]["env"][0]["value"], REDACTED);
        assert!(
            clean["spec"].get("nodeName").is_none(),
            "a pod's binding is not recorded"
        );
    }

    #[test]
    fn tombstones_keep_identity_and_labels_only() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "n", "labels": {"a": "b"}, "uid": "u"},
            "spec": {"containers": []}});
        assert_eq!(
            tombstone(&pod),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "n", "labels": {"a": "b"}}})
        );
    }
}
