//! What the rules look at inside an object: identities, pod specs and the references they hold,
//! owner references and server fields, and the edits `--fix` makes to them.

use std::collections::BTreeMap;
use std::fmt;

use ksim_trace::pb;
use serde_json::{Map, Value};

/// An object's identity, version-insensitive (owner references and pod templates name a kind,
/// not the version it was recorded at). Memory per distinct object, never per event.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub group: String,
    pub kind: String,
    /// Empty for cluster-scoped objects.
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn new(group: &str, kind: &str, namespace: &str, name: &str) -> Self {
        Self {
            group: group.to_owned(),
            kind: kind.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }

    pub fn of(object: &pb::TraceObject) -> Self {
        let (group, kind) = object
            .gvk
            .as_ref()
            .map(|gvk| (gvk.group.as_str(), gvk.kind.as_str()))
            .unwrap_or_default();
        Self::new(group, kind, &object.namespace, &object.name)
    }

    /// A core-group kind in `namespace`.
    pub fn core(kind: &str, namespace: &str, name: &str) -> Self {
        Self::new("", kind, namespace, name)
    }
}

impl fmt::Display for ObjectKey {
    /// `Deployment.apps shop/web`, `ConfigMap shop/cfg`, `Namespace shop`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.kind)?;
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        if self.namespace.is_empty() {
            write!(f, " {}", self.name)
        } else {
            write!(f, " {}/{}", self.namespace, self.name)
        }
    }
}

/// `apps/v1.Deployment shop/web`: how findings name an object of the trace.
pub fn describe(object: &pb::TraceObject) -> String {
    let kind = object
        .gvk
        .as_ref()
        .map(ksim_trace::gvk::display)
        .unwrap_or_default();
    if object.namespace.is_empty() {
        format!("{kind} {}", object.name)
    } else {
        format!("{kind} {}/{}", object.namespace, object.name)
    }
}

/// Where the pod templates of each kind are, from the header's tracer config; kinds it does not
/// describe fall back to the built-in kinds' well-known paths.
#[derive(Debug, Clone, Default)]
pub struct TemplatePaths {
    by_kind: BTreeMap<(String, String), Vec<String>>,
}

impl TemplatePaths {
    pub fn from_header(header: &pb::TraceHeader) -> Self {
        let mut by_kind = BTreeMap::new();
        for tracked in header
            .tracer_config
            .iter()
            .flat_map(|config| &config.tracked_kinds)
        {
            if let Some(gvk) = &tracked.gvk
                && !tracked.pod_template_paths.is_empty()
            {
                by_kind.insert(
                    (gvk.group.clone(), gvk.kind.clone()),
                    tracked.pod_template_paths.clone(),
                );
            }
        }
        Self { by_kind }
    }

    /// JSON pointers to the pod templates of objects of `group`/`kind` ("" is the object itself).
    pub fn of(&self, group: &str, kind: &str) -> Vec<String> {
        if let Some(paths) = self.by_kind.get(&(group.to_owned(), kind.to_owned())) {
            return paths.clone();
        }
        let path = match (group, kind) {
            ("", "Pod") => "",
            ("", "ReplicationController")
            | ("apps", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet")
            | ("batch", "Job") => "/spec/template",
            ("batch", "CronJob") => "/spec/jobTemplate/spec/template",
            _ => return Vec::new(),
        };
        vec![path.to_owned()]
    }
}

/// A ServiceAccount, ConfigMap, Secret or claim a pod spec names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Reference {
    /// `ServiceAccount`, `ConfigMap`, `Secret` or `PersistentVolumeClaim` (core group).
    pub kind: &'static str,
    pub name: String,
    /// Where in the object: `/spec/template/spec/volumes/0`, ...
    pub at: String,
}

/// Objects every namespace has, so never missing.
fn always_present(kind: &str, name: &str) -> bool {
    matches!(
        (kind, name),
        ("ServiceAccount", "default") | ("ConfigMap", "kube-root-ca.crt")
    )
}

fn is_optional(value: &Value) -> bool {
    value.get("optional").and_then(Value::as_bool) == Some(true)
}

fn str_at<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

const CONTAINER_LISTS: [&str; 3] = ["containers", "initContainers", "ephemeralContainers"];

/// The references a pod spec makes that must exist for its pods to run.
pub fn references(spec: &Value, spec_path: &str) -> Vec<Reference> {
    let mut out = Vec::new();
    let mut push = |kind: &'static str, name: &str, at: String| {
        if !always_present(kind, name) {
            out.push(Reference {
                kind,
                name: name.to_owned(),
                at,
            });
        }
    };
    for key in ["serviceAccountName", "serviceAccount"] {
        if let Some(name) = str_at(spec, key) {
            push("ServiceAccount", name, format!("{spec_path}/{key}"));
        }
    }
    for (index, volume) in array(spec, "volumes").iter().enumerate() {
        let at = format!("{spec_path}/volumes/{index}");
        for (kind, source, name_key) in VOLUME_SOURCES {
            if let Some(source) = volume.get(source)
                && !is_optional(source)
                && let Some(name) = str_at(source, name_key)
            {
                push(kind, name, at.clone());
            }
        }
        let projected = volume
            .get("projected")
            .map(|p| array(p, "sources"))
            .unwrap_or_default();
        for (source_index, source) in projected.iter().enumerate() {
            for (kind, key) in [("ConfigMap", "configMap"), ("Secret", "secret")] {
                if let Some(source) = source.get(key)
                    && !is_optional(source)
                    && let Some(name) = str_at(source, "name")
                {
                    push(kind, name, format!("{at}/projected/sources/{source_index}"));
                }
            }
        }
    }
    for list in CONTAINER_LISTS {
        for (index, container) in array(spec, list).iter().enumerate() {
            let at = format!("{spec_path}/{list}/{index}");
            for (env_index, from) in array(container, "envFrom").iter().enumerate() {
                for (kind, key) in [("ConfigMap", "configMapRef"), ("Secret", "secretRef")] {
                    if let Some(source) = from.get(key)
                        && !is_optional(source)
                        && let Some(name) = str_at(source, "name")
                    {
                        push(kind, name, format!("{at}/envFrom/{env_index}"));
                    }
                }
            }
            for (env_index, var) in array(container, "env").iter().enumerate() {
                let Some(from) = var.get("valueFrom") else {
                    continue;
                };
                for (kind, key) in [("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")] {
                    if let Some(source) = from.get(key)
                        && !is_optional(source)
                        && let Some(name) = str_at(source, "name")
                    {
                        push(kind, name, format!("{at}/env/{env_index}"));
                    }
                }
            }
        }
    }
    out
}

/// (kind, volume source key, key of the name inside it).
const VOLUME_SOURCES: [(&str, &str, &str); 3] = [
    ("ConfigMap", "configMap", "name"),
    ("Secret", "secret", "secretName"),
    (
        "PersistentVolumeClaim",
        "persistentVolumeClaim",
        "claimName",
    ),
];

fn array<'a>(value: &'a Value, key: &str) -> &'a [Value] {
    value
        .get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// Removes from a pod spec every reference for which `missing(kind, name)` holds; returns a
/// description of each removal.
pub fn remove_references(spec: &mut Value, missing: impl Fn(&str, &str) -> bool) -> Vec<String> {
    let missing = |kind: &str, name: &str| !always_present(kind, name) && missing(kind, name);
    let mut changes = Vec::new();
    let Some(spec) = spec.as_object_mut() else {
        return changes;
    };
    for key in ["serviceAccountName", "serviceAccount"] {
        if let Some(name) = spec.get(key).and_then(Value::as_str).map(str::to_owned)
            && missing("ServiceAccount", &name)
        {
            spec.remove(key);
            changes.push(format!("removed {key} {name:?} (ServiceAccount absent)"));
        }
    }
    let mut removed_volumes = Vec::new();
    if let Some(volumes) = spec.get_mut("volumes").and_then(Value::as_array_mut) {
        volumes.retain_mut(|volume| {
            let volume_name = str_at(volume, "name").unwrap_or_default().to_owned();
            for (kind, source, name_key) in VOLUME_SOURCES {
                if let Some(source) = volume.get(source)
                    && !is_optional(source)
                    && let Some(name) = str_at(source, name_key)
                    && missing(kind, name)
                {
                    changes.push(format!(
                        "removed volume {volume_name:?} and its mounts ({kind} {name} absent)"
                    ));
                    removed_volumes.push(volume_name);
                    return false;
                }
            }
            if let Some(sources) = volume
                .get_mut("projected")
                .and_then(|p| p.get_mut("sources"))
                .and_then(Value::as_array_mut)
            {
                sources.retain(|source| {
                    for (kind, key) in [("ConfigMap", "configMap"), ("Secret", "secret")] {
                        if let Some(inner) = source.get(key)
                            && !is_optional(inner)
                            && let Some(name) = str_at(inner, "name")
                            && missing(kind, name)
                        {
                            changes.push(format!(
                                "removed a source of projected volume {volume_name:?} ({kind} {name} absent)"
                            ));
                            return false;
                        }
                    }
                    true
                });
                if sources.is_empty() {
                    changes.push(format!(
                        "removed projected volume {volume_name:?}, left without sources, and its mounts"
                    ));
                    removed_volumes.push(volume_name);
                    return false;
                }
            }
            true
        });
    }
    for list in CONTAINER_LISTS {
        let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for container in containers {
            let container_name = str_at(container, "name").unwrap_or_default().to_owned();
            let Some(container) = container.as_object_mut() else {
                continue;
            };
            if let Some(mounts) = container
                .get_mut("volumeMounts")
                .and_then(Value::as_array_mut)
            {
                mounts.retain(|mount| {
                    !str_at(mount, "name").is_some_and(|n| removed_volumes.iter().any(|r| r == n))
                });
            }
            if let Some(from) = container.get_mut("envFrom").and_then(Value::as_array_mut) {
                from.retain(|from| {
                    for (kind, key) in [("ConfigMap", "configMapRef"), ("Secret", "secretRef")] {
                        if let Some(source) = from.get(key)
                            && !is_optional(source)
                            && let Some(name) = str_at(source, "name")
                            && missing(kind, name)
                        {
                            changes.push(format!(
                                "removed envFrom {kind} {name} from container {container_name:?} ({kind} absent)"
                            ));
                            return false;
                        }
                    }
                    true
                });
            }
            if let Some(env) = container.get_mut("env").and_then(Value::as_array_mut) {
                env.retain(|var| {
                    let Some(from) = var.get("valueFrom") else {
                        return true;
                    };
                    for (kind, key) in [("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")]
                    {
                        if let Some(source) = from.get(key)
                            && !is_optional(source)
                            && let Some(name) = str_at(source, "name")
                            && missing(kind, name)
                        {
                            let var_name = str_at(var, "name").unwrap_or_default();
                            changes.push(format!(
                                "removed env {var_name} from container {container_name:?} ({kind} {name} absent)"
                            ));
                            return false;
                        }
                    }
                    true
                });
            }
        }
    }
    changes
}

/// Metadata fields the API server sets.
pub const SERVER_METADATA: [&str; 8] = [
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "generation",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// The server fields `object` carries: `status`, `metadata.uid`, ...
pub fn server_fields(object: &Map<String, Value>) -> Vec<String> {
    let mut found = Vec::new();
    if let Some(metadata) = object.get("metadata").and_then(Value::as_object) {
        for key in SERVER_METADATA {
            if metadata.contains_key(key) {
                found.push(format!("metadata.{key}"));
            }
        }
    }
    if object.contains_key("status") {
        found.push("status".to_owned());
    }
    found
}

/// Removes what [`server_fields`] finds.
pub fn remove_server_fields(object: &mut Map<String, Value>) -> Vec<String> {
    let found = server_fields(object);
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in SERVER_METADATA {
            metadata.remove(key);
        }
    }
    object.remove("status");
    found
}

/// `spec.replicas` when it is set and not an integer in 0..=[`MAX_REPLICAS`] (an int32).
///
/// [`MAX_REPLICAS`]: ksim_trace::names::MAX_REPLICAS
pub fn invalid_replicas(object: &Map<String, Value>) -> Option<&Value> {
    let replicas = object.get("spec")?.get("replicas")?;
    let valid = replicas.is_null()
        || replicas
            .as_i64()
            .is_some_and(|n| (0..=ksim_trace::names::MAX_REPLICAS).contains(&n));
    (!valid).then_some(replicas)
}

/// Sets numeric replicas that [`invalid_replicas`] finds to the nearest integer in range;
/// returns (was, now). Replicas that are not a number are left: there is no nearest value.
pub fn clamp_replicas(object: &mut Map<String, Value>) -> Option<(Value, i64)> {
    let was = invalid_replicas(object)?.clone();
    let now = was
        .as_f64()?
        .round()
        .clamp(0.0, ksim_trace::names::MAX_REPLICAS as f64) as i64;
    let spec = object.get_mut("spec")?.as_object_mut()?;
    spec.insert("replicas".to_owned(), Value::from(now));
    Some((was, now))
}

/// One owner reference: the owner's identity (in `namespace`, the owned object's) and a label.
pub fn owner_references(object: &Map<String, Value>, namespace: &str) -> Vec<ObjectKey> {
    let Some(owners) = object
        .get("metadata")
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    owners
        .iter()
        .map(|owner| owner_key(owner, namespace))
        .collect()
}

fn owner_key(owner: &Value, namespace: &str) -> ObjectKey {
    let api_version = str_at(owner, "apiVersion").unwrap_or_default();
    let group = api_version.split_once('/').map(|(g, _)| g).unwrap_or("");
    ObjectKey::new(
        group,
        str_at(owner, "kind").unwrap_or_default(),
        namespace,
        str_at(owner, "name").unwrap_or_default(),
    )
}

/// Removes the owner references whose owner `absent` says is absent; returns them.
pub fn remove_owner_references(
    object: &mut Map<String, Value>,
    namespace: &str,
    mut absent: impl FnMut(&ObjectKey) -> bool,
) -> Vec<ObjectKey> {
    let mut removed = Vec::new();
    let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return removed;
    };
    if let Some(owners) = metadata
        .get_mut("ownerReferences")
        .and_then(Value::as_array_mut)
    {
        owners.retain(|owner| {
            let key = owner_key(owner, namespace);
            if absent(&key) {
                removed.push(key);
                false
            } else {
                true
            }
        });
        if owners.is_empty() {
            metadata.remove("ownerReferences");
        }
    }
    removed
}

/// The pod spec under the template at `template_path` ("" is the object itself).
pub fn pod_spec_path(template_path: &str) -> String {
    format!("{template_path}/spec")
}
