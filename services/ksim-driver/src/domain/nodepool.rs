//! A Karpenter NodePool a simulation creates: read from the caller's YAML, checked for what the
//! driver itself relies on (its kind and name), stripped of what the cluster sets, and given
//! the run's owner, label and provisioning model. What Karpenter's own validation checks (every
//! field of its spec) the apiserver checks, in a dry run before anything is created.

use ksim_nodes::labels::{GROUP_LABEL, TRUE_VALUE, VIRTUAL_LABEL};
use serde_json::{Map, Value};

pub const API_VERSION: &str = "karpenter.sh/v1";
pub const KIND: &str = "NodePool";

/// Metadata the cluster or the driver sets, dropped from what the caller gives.
const SET_BY_THE_CLUSTER: &[&str] = &[
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "ownerReferences",
    "finalizers",
    "selfLink",
];

/// The NodePool's name and its object, or why it is none.
pub fn parse(yaml: &str) -> Result<(String, Value), String> {
    let parsed: Option<Value> =
        serde_saphyr::from_str(yaml).map_err(|error| format!("not YAML: {error}"))?;
    let Some(Value::Object(mut object)) = parsed else {
        return Err("expected a NodePool object".to_owned());
    };
    let field = |object: &Map<String, Value>, key: &str| {
        object.get(key).and_then(Value::as_str).map(str::to_owned)
    };
    if field(&object, "apiVersion").as_deref() != Some(API_VERSION)
        || field(&object, "kind").as_deref() != Some(KIND)
    {
        return Err(format!(
            "expected apiVersion {API_VERSION} and kind {KIND}, got {} {}",
            field(&object, "apiVersion").unwrap_or_else(|| "no apiVersion".to_owned()),
            field(&object, "kind").unwrap_or_else(|| "no kind".to_owned()),
        ));
    }
    let Some(Value::Object(metadata)) = object.get_mut("metadata") else {
        return Err("the NodePool has no metadata".to_owned());
    };
    let name = metadata
        .get("name")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or("the NodePool has no metadata.name")?;
    for key in SET_BY_THE_CLUSTER {
        metadata.remove(*key);
    }
    object.remove("status");
    Ok((name, Value::Object(object)))
}

/// The NodePool as the simulation creates it: owned by `owner` (so deleting the simulation
/// root deletes it, and Karpenter then its nodes), labelled with the simulation, and with the
/// run's provisioning model for its nodes when there is one. Its nodes get the labels replayed
/// pods select (`ksim.io/virtual-node`, and `ksim.io/node-group` naming the NodePool), so
/// Karpenter launches for them.
pub fn for_simulation(
    nodepool: &Value,
    owner: Value,
    label: (&str, &str),
    provisioning: Option<(&str, String)>,
) -> Value {
    let mut object = nodepool.clone();
    let name = object["metadata"]["name"].clone();
    if let Some(template) = object
        .get_mut("spec")
        .and_then(Value::as_object_mut)
        .and_then(|spec| spec.get_mut("template"))
        .and_then(Value::as_object_mut)
    {
        let metadata = template
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(metadata) = metadata {
            let labels = metadata
                .entry("labels")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(labels) = labels {
                labels.insert(
                    VIRTUAL_LABEL.to_owned(),
                    Value::String(TRUE_VALUE.to_owned()),
                );
                labels.insert(GROUP_LABEL.to_owned(), name);
            }
        }
    }
    if let Some(Value::Object(metadata)) = object.get_mut("metadata") {
        metadata.insert("ownerReferences".to_owned(), Value::Array(vec![owner]));
        let labels = metadata
            .entry("labels")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(labels) = labels {
            labels.insert(label.0.to_owned(), Value::String(label.1.to_owned()));
        }
        if let Some((key, json)) = provisioning {
            let annotations = metadata
                .entry("annotations")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(annotations) = annotations {
                annotations.insert(key.to_owned(), Value::String(json));
            }
        }
    }
    object
}

/// The NodePool durations Karpenter times in the simulation, as JSON pointers: in recorded time
/// as given, divided by the speed as created.
const DILATED: &[&str] = &[
    "/spec/disruption/consolidateAfter",
    "/spec/template/spec/expireAfter",
    "/spec/template/spec/terminationGracePeriod",
];

/// What Karpenter times that a NodePool cannot carry divided by the speed; said in the report.
pub const NOT_DILATED: &str = "its batching of pending pods (1s idle, 10s at most), its \
    disruption loop (every 10s), its registration and launch timeouts, and budget schedules (cron) \
    and their durations";

/// A duration of the NodePool as given (recorded time) and as it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dilated {
    /// Its field, e.g. `spec.disruption.consolidateAfter`.
    pub field: String,
    pub given: String,
    pub as_run: String,
}

/// Divides the NodePool's durations ([`DILATED`]) by `speed`, rounded up to whole seconds (the
/// only unit finer than minutes Karpenter's schema takes; `Never` stays), and says what each
/// became. A value that is no duration is left for the apiserver's check to refuse.
pub fn dilate(nodepool: &mut Value, speed: f64) -> Vec<Dilated> {
    let mut dilated = Vec::new();
    for pointer in DILATED {
        let Some(value) = nodepool.pointer_mut(pointer) else {
            continue;
        };
        let Some(given) = value.as_str().map(str::to_owned) else {
            continue;
        };
        let Ok(duration) = ksim_provisioning::go_duration::parse(&given) else {
            continue;
        };
        let seconds = (duration.as_secs_f64() / speed).ceil();
        // Saturating: a speed below 1 never overflows what Karpenter reads.
        let as_run = format!("{}s", seconds.min(i64::MAX as f64 / 1e9) as u64);
        *value = Value::String(as_run.clone());
        dilated.push(Dilated {
            field: pointer.trim_start_matches('/').replace('/', "."),
            given,
            as_run,
        });
    }
    dilated
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    const NODEPOOL: &str = "
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: general
  uid: 1234
  resourceVersion: '99'
  labels: {team: web}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements: []
status: {resources: {cpu: '4'}}
";

    #[test]
    fn a_nodepool_is_named_by_its_metadata_and_loses_what_the_cluster_sets() {
        let (name, object) = parse(NODEPOOL).unwrap();
        assert_eq!(name, "general");
        assert_eq!(object["metadata"].get("uid"), None);
        assert_eq!(object["metadata"].get("resourceVersion"), None);
        assert_eq!(object.get("status"), None);
        assert_eq!(object["metadata"]["labels"]["team"], "web");
        assert_eq!(
            object["spec"]["template"]["spec"]["nodeClassRef"]["kind"],
            "KWOKNodeClass"
        );
    }

    #[test]
    fn its_durations_run_divided_by_the_speed_in_whole_seconds() {
        let mut nodepool = json!({"spec": {
            "disruption": {"consolidateAfter": "1m30s", "budgets": [{"nodes": "1", "duration": "10m"}]},
            "template": {"spec": {"expireAfter": "Never", "terminationGracePeriod": "25s"}}}});
        let dilated = dilate(&mut nodepool, 10.0);
        assert_eq!(nodepool["spec"]["disruption"]["consolidateAfter"], "9s");
        // 2.5 s rounds up: never sooner than recorded.
        assert_eq!(
            nodepool["spec"]["template"]["spec"]["terminationGracePeriod"],
            "3s"
        );
        assert_eq!(nodepool["spec"]["template"]["spec"]["expireAfter"], "Never");
        // A budget's window goes with its cron schedule, which cannot be divided.
        assert_eq!(
            nodepool["spec"]["disruption"]["budgets"][0]["duration"],
            "10m"
        );
        assert_eq!(
            dilated,
            vec![
                Dilated {
                    field: "spec.disruption.consolidateAfter".into(),
                    given: "1m30s".into(),
                    as_run: "9s".into()
                },
                Dilated {
                    field: "spec.template.spec.terminationGracePeriod".into(),
                    given: "25s".into(),
                    as_run: "3s".into()
                },
            ]
        );
        let mut zero = json!({"spec": {"disruption": {"consolidateAfter": "0s"}}});
        dilate(&mut zero, 40.0);
        assert_eq!(zero["spec"]["disruption"]["consolidateAfter"], "0s");
    }

    #[test]
    fn anything_but_a_named_nodepool_is_refused_saying_what_it_is() {
        let deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n";
        assert_eq!(
            parse(deployment).unwrap_err(),
            "expected apiVersion karpenter.sh/v1 and kind NodePool, got apps/v1 Deployment"
        );
        let old = "apiVersion: karpenter.sh/v1beta1\nkind: NodePool\nmetadata: {name: a}\n";
        assert!(parse(old).unwrap_err().contains("karpenter.sh/v1beta1"));
        let unnamed = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {}\n";
        assert_eq!(
            parse(unnamed).unwrap_err(),
            "the NodePool has no metadata.name"
        );
        assert!(parse("[1, 2]").unwrap_err().contains("expected a NodePool"));
        assert!(parse("{unclosed").unwrap_err().starts_with("not YAML"));
    }

    #[test]
    fn the_simulation_owns_and_labels_it_and_gives_it_the_runs_model() {
        let (_, object) = parse(NODEPOOL).unwrap();
        let owner = json!({"apiVersion": "ksim.io/v1alpha1", "kind": "SimulationRoot",
            "name": "sim-1", "uid": "u", "blockOwnerDeletion": true});
        let made = for_simulation(
            &object,
            owner.clone(),
            ("ksim.io/simulation", "1"),
            Some(("ksim.io/provisioning", "{}".to_owned())),
        );
        assert_eq!(made["metadata"]["ownerReferences"], json!([owner]));
        assert_eq!(made["metadata"]["labels"]["ksim.io/simulation"], "1");
        assert_eq!(made["metadata"]["labels"]["team"], "web");
        assert_eq!(
            made["metadata"]["annotations"]["ksim.io/provisioning"],
            "{}"
        );
        // Its nodes carry what replayed pods select.
        let labels = &made["spec"]["template"]["metadata"]["labels"];
        assert_eq!(labels["ksim.io/virtual-node"], "true");
        assert_eq!(labels["ksim.io/node-group"], "general");
        let without = for_simulation(&object, owner, ("ksim.io/simulation", "1"), None);
        assert_eq!(without["metadata"].get("annotations"), None);
    }
}
