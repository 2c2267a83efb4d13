//! Bare pods (`--reschedule-bare-pods`): a pod the trace holds without an owner has nothing to
//! recreate it when the simulation removes it (a scale-down drains its node, an eviction), so
//! the driver does, as `<name>-clone-<n>`, the way SimKube names them. Pure: fed what the replay
//! applied and deleted and what the cluster removed, it says which clone to create.

use std::collections::HashMap;

use serde_json::Value;

use super::{Gvk, Target};

/// The replay's bare pods, their live copies and how many clones each has had.
#[derive(Debug, Default)]
pub struct BarePods {
    /// By the name the trace gives it: the rewritten object and its live copy's name.
    originals: HashMap<Target, Original>,
    /// Live copy name -> the trace's name, for every live copy (the original included).
    live: HashMap<Target, Target>,
}

#[derive(Debug)]
struct Original {
    object: Value,
    live: Target,
    clones: u32,
}

pub fn is_pod(gvk: &Gvk) -> bool {
    gvk.group.is_empty() && gvk.version == "v1" && gvk.kind == "Pod"
}

impl BarePods {
    /// The replay applied a pod (the trace recorded it without an owner).
    pub fn applied(&mut self, target: &Target, object: &Value) {
        if !is_pod(&target.gvk) {
            return;
        }
        if let Some(previous) = self.originals.get(target) {
            self.live.remove(&previous.live);
        }
        self.live.insert(target.clone(), target.clone());
        let clones = self.originals.get(target).map_or(0, |o| o.clones);
        self.originals.insert(
            target.clone(),
            Original {
                object: object.clone(),
                live: target.clone(),
                clones,
            },
        );
    }

    /// The trace deletes a pod: it is not rescheduled any more. Returns its live clone, which
    /// the replay deletes too (the trace's delete names only the original).
    pub fn deleted(&mut self, target: &Target) -> Option<Target> {
        let original = self.originals.remove(target)?;
        self.live.remove(&original.live);
        (original.live != *target).then_some(original.live)
    }

    /// The cluster removed the pod `removed`. When it is the live copy of a bare pod the trace
    /// still holds, the clone to create in its place (target and object); otherwise `None`.
    pub fn removed(&mut self, removed: &Target) -> Option<(Target, Value)> {
        let name = self.live.remove(removed)?;
        let original = self.originals.get_mut(&name)?;
        original.clones += 1;
        let clone = Target {
            name: format!("{}-clone-{}", name.name, original.clones),
            ..name.clone()
        };
        let mut object = original.object.clone();
        if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            metadata.insert("name".to_owned(), Value::String(clone.name.clone()));
        }
        // The node it was bound to may be the one that went away; the scheduler picks again.
        if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
            spec.remove("nodeName");
        }
        original.live = clone.clone();
        self.live.insert(clone.clone(), name);
        Some((clone, object))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(name: &str) -> Target {
        Target {
            gvk: Gvk::new("", "v1", "Pod"),
            namespace: Some("virtual-shop".to_owned()),
            name: name.to_owned(),
        }
    }

    fn object(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "virtual-shop"},
               "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]}})
    }

    #[test]
    fn a_removed_bare_pod_comes_back_as_numbered_clones() {
        let mut pods = BarePods::default();
        pods.applied(&pod("solo"), &object("solo"));
        let (first, object) = pods.removed(&pod("solo")).unwrap();
        assert_eq!(first, pod("solo-clone-1"));
        assert_eq!(object["metadata"]["name"], "solo-clone-1");
        assert!(object["spec"].get("nodeName").is_none());
        assert_eq!(object["spec"]["containers"][0]["name"], "c");
        // The clone is removed in turn: the next one counts on, from the trace's name.
        let (second, _) = pods.removed(&first).unwrap();
        assert_eq!(second, pod("solo-clone-2"));
        // A copy that is no longer live (the first clone, again) is not cloned twice.
        assert_eq!(pods.removed(&first), None);
    }

    #[test]
    fn pods_the_trace_deletes_and_other_objects_are_left_alone() {
        let mut pods = BarePods::default();
        pods.applied(&pod("gone"), &object("gone"));
        assert_eq!(pods.deleted(&pod("gone")), None);
        assert_eq!(pods.removed(&pod("gone")), None);
        assert!(pods.originals.is_empty() && pods.live.is_empty());

        pods.applied(&pod("moved"), &object("moved"));
        let (clone, _) = pods.removed(&pod("moved")).unwrap();
        // The trace's delete of the original also takes its live clone.
        assert_eq!(pods.deleted(&pod("moved")), Some(clone));

        let deployment = Target {
            gvk: Gvk::new("apps", "v1", "Deployment"),
            namespace: Some("virtual-shop".to_owned()),
            name: "web".to_owned(),
        };
        pods.applied(&deployment, &json!({}));
        assert_eq!(pods.removed(&deployment), None);
        assert_eq!(pods.removed(&pod("never-applied")), None);
    }
}
