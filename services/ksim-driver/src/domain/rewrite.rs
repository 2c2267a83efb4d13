//! Rewriting recorded objects into what the driver applies to the simulated cluster: namespaces
//! prefixed, the simulation root as the only owner of what is not in one of them, server-set
//! fields gone, and pod templates kept on virtual nodes with their recorded lifetimes.

use std::collections::HashMap;

use ksim_nodes::labels::{
    GROUP_LABEL, LIFETIME_ANNOTATION, LIFETIME_PENDING_ANNOTATION, NO_SCHEDULE,
    POD_PROVISIONING_ANNOTATION, TRUE_VALUE, VIRTUAL_LABEL, VIRTUAL_TAINT_KEY,
};
use ksim_provisioning::{Model, PodProvisioning};
use serde_json::{Map, Value, json};

use super::explain::{EXPLAIN_ANNOTATION, EXPLANATION_ANNOTATION, ExplainScope};
use super::lifetimes::{Lifetimes, annotation_value};
use super::{Gvk, RootRef, SIMULATION_LABEL, Target};

/// Metadata the apiserver sets; ownerReferences too, because the recorded owners' uids do not
/// exist here and a dangling owner would get the object garbage-collected.
const SERVER_METADATA: &[&str] = &[
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "managedFields",
    "selfLink",
    "ownerReferences",
];

/// Labels the Job controller derives from the recorded Job's uid; see [`Rewriter::apply`].
const JOB_UID_LABELS: &[&str] = &["controller-uid", "batch.kubernetes.io/controller-uid"];

/// What a [`Rewriter`] needs besides the recorded lifetimes.
#[derive(Debug, Clone)]
pub struct RewriteOptions {
    pub simulation_id: String,
    pub namespace_prefix: String,
    /// Replay speed; pod lifetimes are divided by it. Must be finite and > 0 (1.0 is used
    /// otherwise).
    pub speed: f64,
    pub root: RootRef,
    /// JSON pointers to pod templates per kind, from the trace header ([`super::plan::template_paths`]);
    /// kinds absent (or with no paths) use the built-in defaults.
    pub template_paths: HashMap<Gvk, Vec<String>>,
    /// The node groups the run created: its pods may run only there, never on another group's
    /// virtual nodes. Empty: any virtual node (the run created none).
    pub node_groups: Vec<String>,
    /// The run's provisioning model: each pod template gets its owner's start delays (see
    /// [`POD_PROVISIONING_ANNOTATION`]). `None`: pods start at once.
    pub provisioning: Option<Model>,
    /// The run fails nodes: pods tolerate unready and unreachable nodes for the recorded
    /// time divided by the speed (see [`eviction_tolerations_at_speed`]).
    pub node_failures: bool,
    /// The pods the scheduler is asked to explain (their templates carry
    /// [`EXPLAIN_ANNOTATION`]); `None`: none.
    pub explain: Option<ExplainScope>,
}

#[cfg(test)]
impl RewriteOptions {
    /// What unit tests rewrite with: simulation `sim-1` (its root a Simulation), namespaces
    /// named `<namespace_prefix>-<recorded>`, no node groups, the built-in template paths and
    /// no provisioning model.
    pub(crate) fn for_tests(namespace_prefix: &str, speed: f64) -> Self {
        Self {
            simulation_id: "sim-1".to_owned(),
            namespace_prefix: namespace_prefix.to_owned(),
            speed,
            root: RootRef {
                api_version: "ksim.io/v1alpha1".to_owned(),
                kind: "Simulation".to_owned(),
                name: "sim-1".to_owned(),
                uid: "root-uid".to_owned(),
            },
            template_paths: HashMap::new(),
            node_groups: Vec::new(),
            provisioning: None,
            node_failures: false,
            explain: None,
        }
    }
}

/// Why a recorded object cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RewriteError {
    #[error("{kind} {name}: the recorded object is not a JSON object")]
    NotAnObject { kind: String, name: String },
    #[error("{kind} in namespace {namespace:?}: the recorded object has no name")]
    EmptyName { kind: String, namespace: String },
    #[error("{kind} {name}: the pod template at {path:?} is not a JSON object")]
    TemplateNotObject {
        kind: String,
        name: String,
        path: String,
    },
    #[error("{kind} {name}: {field} is not a JSON {expected}")]
    Malformed {
        kind: String,
        name: String,
        field: String,
        expected: &'static str,
    },
}

/// Rewrites recorded objects for one simulation.
#[derive(Debug, Clone)]
pub struct Rewriter {
    options: RewriteOptions,
    lifetimes: Lifetimes,
}

impl Rewriter {
    pub fn new(mut options: RewriteOptions, lifetimes: &Lifetimes) -> Self {
        if !(options.speed.is_finite() && options.speed > 0.0) {
            options.speed = 1.0;
        }
        Self {
            options,
            lifetimes: lifetimes.clone(),
        }
    }

    /// The simulated cluster's name for a recorded namespace: `<prefix>-<namespace>`.
    pub fn namespace(&self, recorded: &str) -> String {
        format!("{}-{recorded}", self.options.namespace_prefix)
    }

    /// The recorded namespace behind a simulated one, if it is one of this simulation's.
    pub fn recorded_namespace<'a>(&self, simulated: &'a str) -> Option<&'a str> {
        simulated
            .strip_prefix(self.options.namespace_prefix.as_str())?
            .strip_prefix('-')
            .filter(|recorded| !recorded.is_empty())
    }

    /// A Namespace named `name` (already prefixed), labelled and owned by the simulation root.
    pub fn namespace_object(&self, name: &str) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": name,
                "labels": { SIMULATION_LABEL: self.options.simulation_id },
                "ownerReferences": [self.root_reference()],
            },
        })
    }

    /// The object to server-side apply for a recorded `object` of kind `gvk` named `name` in
    /// `recorded_namespace` ("" when cluster-scoped), and where it goes.
    pub fn apply(
        &self,
        gvk: &Gvk,
        recorded_namespace: &str,
        name: &str,
        mut object: Value,
    ) -> Result<(Target, Value), RewriteError> {
        let target = self.target(gvk, recorded_namespace, name);
        let err_name = display_name(recorded_namespace, name);
        if name.is_empty() {
            return Err(RewriteError::EmptyName {
                kind: gvk.to_string(),
                namespace: recorded_namespace.to_owned(),
            });
        }
        let malformed = |field: &str, expected| RewriteError::Malformed {
            kind: gvk.to_string(),
            name: err_name.clone(),
            field: field.to_owned(),
            expected,
        };
        let root = object
            .as_object_mut()
            .ok_or_else(|| RewriteError::NotAnObject {
                kind: gvk.to_string(),
                name: err_name.clone(),
            })?;
        root.insert("apiVersion".to_owned(), json!(gvk.api_version()));
        root.insert("kind".to_owned(), json!(gvk.kind));
        root.remove("status");

        let metadata =
            child_object(root, "metadata").ok_or_else(|| malformed("metadata", "object"))?;
        for field in SERVER_METADATA {
            metadata.remove(*field);
        }
        metadata.insert("name".to_owned(), json!(target.name));
        // A namespaced object goes with its namespace, which the root owns and which carries
        // the simulation's label: an owner reference or a label of its own would only cost
        // each apply (every field is the field manager's to merge and the stored object's to
        // carry; for small objects a label is a large share of them, docs/benchmarks.md) and
        // the garbage collector an edge per object.
        match &target.namespace {
            Some(namespace) => {
                metadata.insert("namespace".to_owned(), json!(namespace));
            }
            None => {
                metadata.remove("namespace");
                metadata.insert("ownerReferences".to_owned(), json!([self.root_reference()]));
                child_object(metadata, "labels")
                    .ok_or_else(|| malformed("metadata.labels", "object"))?
                    .insert(
                        SIMULATION_LABEL.to_owned(),
                        json!(self.options.simulation_id),
                    );
            }
        }

        if let Some(spec) = root.get_mut("spec").and_then(Value::as_object_mut) {
            if is_core(gvk, "Service") {
                // Recorded IPs are from another cluster's service range.
                spec.remove("clusterIP");
                spec.remove("clusterIPs");
            } else if is_core(gvk, "PersistentVolumeClaim") {
                // The recorded volume does not exist here; the claim binds anew.
                spec.remove("volumeName");
            } else if gvk.group == "batch" && gvk.kind == "Job" {
                strip_job_selector(spec);
            } else if gvk.group == "batch" && gvk.kind == "CronJob" {
                // The driver plays its runs in recorded time (super::cron); the controller,
                // on the simulated cluster's clock, must not start any.
                spec.insert("suspend".to_owned(), json!(true));
            } else if super::hpa::is_hpa(gvk) {
                super::hpa::behavior_at_speed(spec, self.options.speed);
            }
        }

        let lifetime_ms = self
            .lifetimes
            .recorded(gvk, recorded_namespace, name)
            .map(|lifetime| annotation_value(lifetime, self.options.speed));
        // Keyed as recorded (`Kind/namespace/name`), as calibration learns them.
        let start_delays = self.options.provisioning.as_ref().and_then(|model| {
            let owner = format!("{}/{recorded_namespace}/{name}", gvk.kind);
            PodProvisioning::of(model, &owner, self.options.speed).map(|pods| pods.to_json())
        });
        let explain = self
            .options
            .explain
            .as_ref()
            .and_then(|scope| scope.annotation(recorded_namespace));
        for path in self.template_paths(gvk) {
            let Some(template) = object.pointer_mut(&path) else {
                continue;
            };
            let template =
                template
                    .as_object_mut()
                    .ok_or_else(|| RewriteError::TemplateNotObject {
                        kind: gvk.to_string(),
                        name: err_name.clone(),
                        path: path.clone(),
                    })?;
            self.rewrite_template(
                template,
                lifetime_ms.as_deref(),
                start_delays.as_deref(),
                explain.as_deref(),
            )
            .map_err(|field| malformed(&format!("{path}/{field}"), "object or list"))?;
        }
        Ok((target, object))
    }

    /// Where a recorded delete goes.
    pub fn delete(&self, gvk: &Gvk, recorded_namespace: &str, name: &str) -> Target {
        self.target(gvk, recorded_namespace, name)
    }

    fn target(&self, gvk: &Gvk, recorded_namespace: &str, name: &str) -> Target {
        if is_core(gvk, "Namespace") {
            return Target {
                gvk: gvk.clone(),
                namespace: None,
                name: self.namespace(name),
            };
        }
        Target {
            gvk: gvk.clone(),
            namespace: (!recorded_namespace.is_empty()).then(|| self.namespace(recorded_namespace)),
            name: name.to_owned(),
        }
    }

    fn root_reference(&self) -> Value {
        let root = &self.options.root;
        json!({
            "apiVersion": root.api_version,
            "kind": root.kind,
            "name": root.name,
            "uid": root.uid,
            "blockOwnerDeletion": true,
            "controller": false,
        })
    }

    fn template_paths(&self, gvk: &Gvk) -> Vec<String> {
        match self.options.template_paths.get(gvk) {
            Some(paths) if !paths.is_empty() => paths.clone(),
            _ => default_template_paths(gvk)
                .iter()
                .map(|path| (*path).to_owned())
                .collect(),
        }
    }

    /// Keeps a pod template on virtual nodes; on a malformed field, returns its name.
    fn rewrite_template(
        &self,
        template: &mut Map<String, Value>,
        lifetime_ms: Option<&str>,
        start_delays: Option<&str>,
        explain: Option<&str>,
    ) -> Result<(), &'static str> {
        let metadata = child_object(template, "metadata").ok_or("metadata")?;
        // A cluster that ksim simulated has its pool's start delays on its pods, and maybe
        // explanations: this run's model and scope decide them, instant and none included.
        if let Some(annotations) = metadata
            .get_mut("annotations")
            .and_then(Value::as_object_mut)
        {
            annotations.remove(POD_PROVISIONING_ANNOTATION);
            annotations.remove(EXPLAIN_ANNOTATION);
            annotations.remove(EXPLANATION_ANNOTATION);
        }
        if let Some(explain) = explain {
            child_object(metadata, "annotations")
                .ok_or("metadata/annotations")?
                .insert(EXPLAIN_ANNOTATION.to_owned(), json!(explain));
        }
        child_object(metadata, "labels")
            .ok_or("metadata/labels")?
            .insert(
                SIMULATION_LABEL.to_owned(),
                json!(self.options.simulation_id),
            );
        if let Some(ms) = lifetime_ms {
            // The template's lifetime is a launch's, not necessarily this pod's: the pool waits
            // for the driver to give the pod its own (cluster::launch_lifetimes).
            let annotations =
                child_object(metadata, "annotations").ok_or("metadata/annotations")?;
            annotations.insert(LIFETIME_ANNOTATION.to_owned(), json!(ms));
            annotations.insert(LIFETIME_PENDING_ANNOTATION.to_owned(), json!(TRUE_VALUE));
        }
        if let Some(delays) = start_delays {
            child_object(metadata, "annotations")
                .ok_or("metadata/annotations")?
                .insert(POD_PROVISIONING_ANNOTATION.to_owned(), json!(delays));
        }

        let spec = child_object(template, "spec").ok_or("spec")?;
        // The scheduler binds again, onto virtual nodes.
        spec.remove("nodeName");
        child_object(spec, "nodeSelector")
            .ok_or("spec/nodeSelector")?
            .insert(VIRTUAL_LABEL.to_owned(), json!(TRUE_VALUE));
        if !self.options.node_groups.is_empty() {
            self.keep_on_own_groups(spec)?;
        }
        if spec.get("tolerations").is_none_or(Value::is_null) {
            spec.insert("tolerations".to_owned(), json!([]));
        }
        let tolerations = spec
            .get_mut("tolerations")
            .and_then(Value::as_array_mut)
            .ok_or("spec/tolerations")?;
        if !tolerations.iter().any(tolerates_virtual_taint) {
            tolerations.push(json!({
                "key": VIRTUAL_TAINT_KEY,
                "operator": "Exists",
                "effect": NO_SCHEDULE,
            }));
        }
        if self.options.node_failures {
            eviction_tolerations_at_speed(tolerations, self.options.speed);
        }
        // Recorded ports can hold duplicates the apiserver accepted on create but server-side
        // apply refuses (ports merge by key); virtual pods serve nothing.
        for list in ["containers", "initContainers", "ephemeralContainers"] {
            let containers = spec.get_mut(list).and_then(Value::as_array_mut);
            for container in containers.into_iter().flatten() {
                if let Some(container) = container.as_object_mut() {
                    container.remove("ports");
                }
            }
        }
        Ok(())
    }
}

impl Rewriter {
    /// Requires the run's node groups: added to every required node selector term (terms are
    /// ORed, expressions in one ANDed), or as the only term when the recording had none.
    fn keep_on_own_groups(&self, spec: &mut Map<String, Value>) -> Result<(), &'static str> {
        let own = json!({
            "key": GROUP_LABEL,
            "operator": "In",
            "values": self.options.node_groups,
        });
        let affinity = child_object(spec, "affinity").ok_or("spec/affinity")?;
        let node = child_object(affinity, "nodeAffinity").ok_or("spec/affinity/nodeAffinity")?;
        let required = child_object(node, "requiredDuringSchedulingIgnoredDuringExecution")
            .ok_or("spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution")?;
        if required.get("nodeSelectorTerms").is_none_or(Value::is_null) {
            required.insert("nodeSelectorTerms".to_owned(), json!([]));
        }
        let terms = required
            .get_mut("nodeSelectorTerms")
            .and_then(Value::as_array_mut)
            .ok_or("nodeSelectorTerms")?;
        if terms.is_empty() {
            terms.push(json!({}));
        }
        for term in terms {
            let term = term.as_object_mut().ok_or("nodeSelectorTerms[]")?;
            if term.get("matchExpressions").is_none_or(Value::is_null) {
                term.insert("matchExpressions".to_owned(), json!([]));
            }
            term.get_mut("matchExpressions")
                .and_then(Value::as_array_mut)
                .ok_or("nodeSelectorTerms[].matchExpressions")?
                .push(own.clone());
        }
        Ok(())
    }
}

/// Built-in pod template pointers of the default tracked kinds ("" = the object is a pod).
fn default_template_paths(gvk: &Gvk) -> &'static [&'static str] {
    match (gvk.group.as_str(), gvk.version.as_str(), gvk.kind.as_str()) {
        ("apps", "v1", "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet")
        | ("batch", "v1", "Job") => &["/spec/template"],
        ("batch", "v1", "CronJob") => &["/spec/jobTemplate/spec/template"],
        ("", "v1", "Pod") => &[""],
        _ => &[],
    }
}

fn is_core(gvk: &Gvk, kind: &str) -> bool {
    gvk.group.is_empty() && gvk.kind == kind
}

fn display_name(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        name.to_owned()
    } else {
        format!("{namespace}/{name}")
    }
}

/// `map[key]` as an object, created when absent or null; `None` when it is something else.
fn child_object<'a>(
    map: &'a mut Map<String, Value>,
    key: &str,
) -> Option<&'a mut Map<String, Value>> {
    let value = map
        .entry(key.to_owned())
        .and_modify(|value| {
            if value.is_null() {
                *value = json!({});
            }
        })
        .or_insert_with(|| json!({}));
    value.as_object_mut()
}

/// The taints the node lifecycle controller puts on a node that stopped (`NoExecute`), and
/// how long a pod tolerates each unless it says otherwise: kube-apiserver's
/// DefaultTolerationSeconds admission plugin adds 300 s of each to every pod without one.
const EVICTION_TAINTS: [&str; 2] = [
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
];
const DEFAULT_TOLERATION_SECONDS: f64 = 300.0;

/// A pod's time on a failed node, in recorded time, divided by the speed as every duration
/// of a replay is: each `NoExecute` toleration of the eviction taints has its seconds
/// divided, and a pod without one gets what the admission plugin would give it, divided.
/// Whole seconds (the field's unit), rounded up and never below 1: a toleration of 0 s
/// evicts at once, which no recorded one that waited did.
fn eviction_tolerations_at_speed(tolerations: &mut Vec<Value>, speed: f64) {
    let divided = |seconds: f64| json!(((seconds / speed).ceil() as i64).max(1));
    for taint in EVICTION_TAINTS {
        let mut tolerated = false;
        for toleration in tolerations.iter_mut() {
            let field = |name: &str| toleration.get(name).and_then(Value::as_str).unwrap_or("");
            let matches_key =
                field("key") == taint || (field("key").is_empty() && field("operator") == "Exists");
            if !matches_key || !matches!(field("effect"), "" | "NoExecute") {
                continue;
            }
            tolerated = true;
            let seconds = toleration.get("tolerationSeconds").and_then(Value::as_f64);
            if let (Some(seconds), Some(object)) = (seconds, toleration.as_object_mut())
                && seconds > 0.0
            {
                object.insert("tolerationSeconds".to_owned(), divided(seconds));
            }
        }
        if !tolerated {
            tolerations.push(json!({
                "key": taint,
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": divided(DEFAULT_TOLERATION_SECONDS),
            }));
        }
    }
}

/// Whether a toleration already tolerates the virtual-node taint.
fn tolerates_virtual_taint(toleration: &Value) -> bool {
    let field = |name: &str| toleration.get(name).and_then(Value::as_str).unwrap_or("");
    field("key") == VIRTUAL_TAINT_KEY
        && field("operator") == "Exists"
        && matches!(field("effect"), "" | NO_SCHEDULE)
}

/// A recorded Job's selector and template carry the recorded Job's uid; the apiserver refuses a
/// Job whose selector it did not generate (unless manualSelector), so both are left to it.
fn strip_job_selector(spec: &mut Map<String, Value>) {
    if spec.get("manualSelector") == Some(&Value::Bool(true)) {
        return;
    }
    spec.remove("selector");
    if let Some(labels) = spec
        .get_mut("template")
        .and_then(|template| template.pointer_mut("/metadata/labels"))
        .and_then(Value::as_object_mut)
    {
        for label in JOB_UID_LABELS {
            labels.remove(*label);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::time::Duration;

    use ksim_trace::pb;

    use super::*;

    fn rewriter_with(speed: f64, lifetimes: &Lifetimes) -> Rewriter {
        Rewriter::new(RewriteOptions::for_tests("ksim-sim-1", speed), lifetimes)
    }

    fn rewriter() -> Rewriter {
        rewriter_with(1.0, &Lifetimes::default())
    }

    fn deployment() -> Gvk {
        Gvk::new("apps", "v1", "Deployment")
    }

    fn root_owner() -> Value {
        json!([{
            "apiVersion": "ksim.io/v1alpha1",
            "kind": "Simulation",
            "name": "sim-1",
            "uid": "root-uid",
            "blockOwnerDeletion": true,
            "controller": false,
        }])
    }

    fn recorded_deployment() -> Value {
        json!({
            "apiVersion": "apps/v1beta1",
            "kind": "Deployment",
            "metadata": {
                "name": "web",
                "namespace": "shop",
                "uid": "old-uid",
                "resourceVersion": "42",
                "creationTimestamp": "2025-01-01T00:00:00Z",
                "generation": 3,
                "managedFields": [{"manager": "kubectl"}],
                "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "gone"}],
                "labels": {"app": "web"},
            },
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "nodeName": "real-node-1",
                        "nodeSelector": {"disk": "ssd"},
                        "tolerations": [
                            {"key": "ksim.io/virtual-node", "operator": "Exists", "effect": "NoSchedule"},
                            {"key": "other", "operator": "Exists"},
                        ],
                        "containers": [
                            {"name": "a", "image": "nginx", "ports": [{"containerPort": 80}, {"containerPort": 80}]},
                        ],
                        "initContainers": [{"name": "i", "ports": [{"containerPort": 1}]}],
                    },
                },
            },
            "status": {"replicas": 2},
        })
    }

    #[test]
    fn namespaces_are_prefixed_and_namespace_objects_owned_by_the_root() {
        let rewriter = rewriter();
        assert_eq!(rewriter.namespace("shop"), "ksim-sim-1-shop");
        let namespace = rewriter.namespace_object("ksim-sim-1-shop");
        assert_eq!(namespace["kind"], "Namespace");
        assert_eq!(namespace["apiVersion"], "v1");
        assert_eq!(namespace["metadata"]["name"], "ksim-sim-1-shop");
        assert_eq!(namespace["metadata"]["labels"][SIMULATION_LABEL], "sim-1");
        assert_eq!(namespace["metadata"]["ownerReferences"], root_owner());
    }

    #[test]
    fn simulated_namespaces_map_back_to_recorded_ones() {
        let rewriter = rewriter();
        assert_eq!(
            rewriter.recorded_namespace(&rewriter.namespace("shop")),
            Some("shop")
        );
        assert_eq!(
            rewriter.recorded_namespace("ksim-sim-1-a-b"),
            Some("a-b"),
            "a recorded namespace may hold dashes"
        );
        for other in [
            "shop",
            "ksim-sim-1",
            "ksim-sim-1-",
            "ksim-sim-12-shop",
            "x-ksim-sim-1-shop",
        ] {
            assert_eq!(rewriter.recorded_namespace(other), None, "{other}");
        }
    }

    #[test]
    fn deployment_loses_server_fields_and_recorded_owners() {
        let (target, object) = rewriter()
            .apply(&deployment(), "shop", "web", recorded_deployment())
            .unwrap();
        assert_eq!(
            target,
            Target {
                gvk: deployment(),
                namespace: Some("ksim-sim-1-shop".to_owned()),
                name: "web".to_owned(),
            }
        );
        assert_eq!(object["apiVersion"], "apps/v1");
        assert_eq!(object["kind"], "Deployment");
        assert!(object.get("status").is_none());
        let metadata = object["metadata"].as_object().unwrap();
        for gone in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "generation",
            "managedFields",
        ] {
            assert!(!metadata.contains_key(gone), "{gone}");
        }
        assert_eq!(metadata["namespace"], "ksim-sim-1-shop");
        // Its namespace, which the root owns and the simulation's label marks, takes it with
        // it; its own labels are the recording's.
        assert!(!metadata.contains_key("ownerReferences"));
        assert_eq!(metadata["labels"], json!({"app": "web"}));
        // The workload's own selector is left alone.
        assert_eq!(
            object["spec"]["selector"],
            json!({"matchLabels": {"app": "web"}})
        );
    }

    #[test]
    fn templates_of_the_explained_namespaces_ask_the_scheduler_and_no_other_does() {
        let mut options = RewriteOptions::for_tests("ksim-sim-1", 1.0);
        options.explain = Some(ExplainScope {
            pods_per_owner: Some(3),
            namespaces: ["shop".to_owned()].into(),
        });
        let rewriter = Rewriter::new(options, &Lifetimes::default());
        let explain = |namespace: &str| {
            let mut recorded = recorded_deployment();
            // A recording of a cluster ksim simulated carries the annotations of its run.
            recorded["spec"]["template"]["metadata"]["annotations"] =
                json!({ EXPLAIN_ANNOTATION: "all", EXPLANATION_ANNOTATION: "{}", "team": "a" });
            let (_, object) = rewriter
                .apply(&deployment(), namespace, "web", recorded)
                .unwrap();
            object["spec"]["template"]["metadata"]["annotations"].clone()
        };
        assert_eq!(
            explain("shop"),
            json!({ EXPLAIN_ANNOTATION: "3", "team": "a" })
        );
        assert_eq!(explain("batch"), json!({ "team": "a" }));
    }

    #[test]
    fn deployment_template_is_kept_on_virtual_nodes() {
        let (_, object) = rewriter()
            .apply(&deployment(), "shop", "web", recorded_deployment())
            .unwrap();
        let template = &object["spec"]["template"];
        assert_eq!(template["metadata"]["labels"][SIMULATION_LABEL], "sim-1");
        assert_eq!(template["metadata"]["labels"]["app"], "web");
        let spec = &template["spec"];
        assert!(spec.get("nodeName").is_none());
        assert_eq!(
            spec["nodeSelector"],
            json!({"disk": "ssd", "ksim.io/virtual-node": "true"})
        );
        let tolerations = spec["tolerations"].as_array().unwrap();
        assert_eq!(
            tolerations.len(),
            2,
            "the present toleration is not duplicated"
        );
        assert!(spec["containers"][0].get("ports").is_none());
        assert_eq!(spec["containers"][0]["image"], "nginx");
        assert!(spec["initContainers"][0].get("ports").is_none());
        // No recorded lifetime, no annotation.
        assert!(template["metadata"].get("annotations").is_none());
    }

    #[test]
    fn templates_carry_their_owners_start_delays_at_the_speed() {
        let model = Model::parse(
            "m.yaml",
            "name: m\npods: {default: {start: 2s}, owners: {Deployment/shop/api: {start: 0s}}}",
        )
        .unwrap();
        let mut options = rewriter().options.clone();
        options.provisioning = Some(model);
        options.speed = 4.0;
        let rewriter = Rewriter::new(options, &Lifetimes::default());
        let (_, web) = rewriter
            .apply(&deployment(), "shop", "web", recorded_deployment())
            .unwrap();
        let carried = web["spec"]["template"]["metadata"]["annotations"]
            [POD_PROVISIONING_ANNOTATION]
            .as_str()
            .unwrap();
        let carried = PodProvisioning::from_json(carried).unwrap();
        assert_eq!((carried.model.as_str(), carried.speed), ("m", 4.0));
        assert_eq!(carried.pods.start.median(), Duration::from_secs(2));
        // An owner whose pods start at once carries nothing.
        let (_, api) = rewriter
            .apply(&deployment(), "shop", "api", recorded_deployment())
            .unwrap();
        assert!(
            api["spec"]["template"]["metadata"]
                .get("annotations")
                .is_none()
        );
    }

    #[test]
    fn a_recorded_simulations_start_delays_give_way_to_the_runs_model() {
        let mut recorded = recorded_deployment();
        recorded["spec"]["template"]["metadata"]["annotations"] =
            json!({POD_PROVISIONING_ANNOTATION: "{\"model\":\"recorded\"}", "team": "shop"});
        // Instant: no delays at all, the recording's gone too.
        let (_, web) = rewriter()
            .apply(&deployment(), "shop", "web", recorded.clone())
            .unwrap();
        assert_eq!(
            web["spec"]["template"]["metadata"]["annotations"],
            json!({"team": "shop"})
        );
        // A model: its own delays, not the recording's.
        let mut options = rewriter().options.clone();
        options.provisioning =
            Some(Model::parse("m.yaml", "name: m\npods: {default: {start: 2s}}").unwrap());
        let (_, web) = Rewriter::new(options, &Lifetimes::default())
            .apply(&deployment(), "shop", "web", recorded)
            .unwrap();
        let carried = web["spec"]["template"]["metadata"]["annotations"]
            [POD_PROVISIONING_ANNOTATION]
            .as_str()
            .unwrap();
        assert_eq!(PodProvisioning::from_json(carried).unwrap().model, "m");
    }

    #[test]
    fn pods_are_kept_on_the_runs_own_node_groups() {
        let mut options = rewriter().options.clone();
        options.node_groups = vec!["m5".to_owned(), "c5".to_owned()];
        let own = Rewriter::new(options, &Lifetimes::default());
        let expression = json!({"key": GROUP_LABEL, "operator": "In", "values": ["m5", "c5"]});

        // Without a recorded node affinity: one term, ours.
        let (_, object) = own
            .apply(&deployment(), "shop", "web", recorded_deployment())
            .unwrap();
        assert_eq!(
            object["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                ["nodeSelectorTerms"],
            json!([{"matchExpressions": [expression.clone()]}])
        );

        // With recorded terms (ORed): each also requires the run's groups.
        let mut recorded = recorded_deployment();
        recorded["spec"]["template"]["spec"]["affinity"] = json!({"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
            ]}
        }});
        let (_, object) = own.apply(&deployment(), "shop", "web", recorded).unwrap();
        assert_eq!(
            object["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                ["nodeSelectorTerms"],
            json!([
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}, expression.clone()]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}],
                 "matchExpressions": [expression]}
            ])
        );

        // A run that created no group leaves the choice of virtual node to the scheduler.
        let (_, object) = rewriter()
            .apply(&deployment(), "shop", "web", recorded_deployment())
            .unwrap();
        assert!(object["spec"]["template"]["spec"].get("affinity").is_none());
    }

    #[test]
    fn a_run_that_fails_nodes_divides_the_eviction_tolerations_by_the_speed() {
        let mut tolerations = vec![
            json!({"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                   "effect": "NoExecute", "tolerationSeconds": 45}),
            json!({"key": "dedicated", "operator": "Exists", "effect": "NoExecute",
                   "tolerationSeconds": 600}),
        ];
        eviction_tolerations_at_speed(&mut tolerations, 10.0);
        assert_eq!(
            tolerations,
            vec![
                // 4.5 s rounds up.
                json!({"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                       "effect": "NoExecute", "tolerationSeconds": 5}),
                json!({"key": "dedicated", "operator": "Exists", "effect": "NoExecute",
                       "tolerationSeconds": 600}),
                // The admission plugin's 300 s, divided.
                json!({"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                       "effect": "NoExecute", "tolerationSeconds": 30}),
            ]
        );
        // A pod that tolerates everything forever is left alone, and no toleration drops to 0.
        let mut forever = vec![json!({"operator": "Exists"})];
        eviction_tolerations_at_speed(&mut forever, 10.0);
        assert_eq!(forever, vec![json!({"operator": "Exists"})]);
        let mut fast = Vec::new();
        eviction_tolerations_at_speed(&mut fast, 1000.0);
        assert!(fast.iter().all(|t| t["tolerationSeconds"] == 1), "{fast:?}");

        let mut options = RewriteOptions::for_tests("ksim-sim-1", 10.0);
        options.node_failures = true;
        let rewriter = Rewriter::new(options, &Lifetimes::default());
        let (_, object) = rewriter
            .apply(&deployment(), "shop", "web", recorded_deployment())
            .unwrap();
        let seconds: Vec<_> = object["spec"]["template"]["spec"]["tolerations"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| t.get("tolerationSeconds"))
            .collect();
        assert_eq!(seconds, vec![&json!(30), &json!(30)]);
    }

    #[test]
    fn cronjob_template_gets_toleration_and_scaled_lifetime() {
        let cronjob = Gvk::new("batch", "v1", "CronJob");
        let lifetimes = Lifetimes::from_lifecycles(&[pb::PodLifecycle {
            owner_gvk: Some(pb::GroupVersionKind::from(&cronjob)),
            owner_namespace: "batch".to_owned(),
            owner_name: "nightly".to_owned(),
            start_ms: 1_000,
            end_ms: 31_000,
            outcome: pb::PodOutcome::Succeeded as i32,
            ..Default::default()
        }]);
        let recorded = json!({
            "metadata": {"name": "nightly"},
            "spec": {"schedule": "@daily", "jobTemplate": {"spec": {"template": {
                "spec": {"containers": [{"name": "c", "ports": [{"containerPort": 1}]}]},
            }}}},
        });
        let (_, object) = rewriter_with(10.0, &lifetimes)
            .apply(&cronjob, "batch", "nightly", recorded)
            .unwrap();
        let template = &object["spec"]["jobTemplate"]["spec"]["template"];
        assert_eq!(
            template["metadata"]["annotations"][LIFETIME_ANNOTATION],
            "3000"
        );
        // Each pod waits for its own launch's lifetime before its clock runs.
        assert_eq!(
            template["metadata"]["annotations"][LIFETIME_PENDING_ANNOTATION],
            "true"
        );
        assert_eq!(template["metadata"]["labels"][SIMULATION_LABEL], "sim-1");
        assert_eq!(template["spec"]["nodeSelector"][VIRTUAL_LABEL], "true");
        assert_eq!(
            template["spec"]["tolerations"],
            json!([{"key": "ksim.io/virtual-node", "operator": "Exists", "effect": "NoSchedule"}])
        );
        assert!(template["spec"]["containers"][0].get("ports").is_none());
        // The controller must not run it: the driver plays its runs.
        assert_eq!(object["spec"]["suspend"], true);
        assert_eq!(
            lifetimes.recorded(&cronjob, "batch", "nightly"),
            Some(Duration::from_secs(30))
        );
    }

    #[test]
    fn pod_is_its_own_template_and_header_paths_override_defaults() {
        let pod = Gvk::new("", "v1", "Pod");
        let recorded =
            json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1", "containers": []}});
        let (_, object) = rewriter().apply(&pod, "shop", "p", recorded).unwrap();
        assert!(object["spec"].get("nodeName").is_none());
        assert_eq!(object["spec"]["nodeSelector"][VIRTUAL_LABEL], "true");
        assert_eq!(object["spec"]["tolerations"].as_array().unwrap().len(), 1);
        // A pod is the observer's to find by label, namespaced or not.
        assert_eq!(object["metadata"]["labels"][SIMULATION_LABEL], "sim-1");

        let custom = Gvk::new("example.com", "v1", "Runner");
        let mut options = rewriter().options;
        options.template_paths.insert(
            custom.clone(),
            vec!["/spec/podTemplate".to_owned(), "/spec/missing".to_owned()],
        );
        let rewriter = Rewriter::new(options, &Lifetimes::default());
        let recorded = json!({"metadata": {"name": "r"}, "spec": {"podTemplate": {"spec": {}}}});
        let (_, object) = rewriter.apply(&custom, "shop", "r", recorded).unwrap();
        assert_eq!(
            object["spec"]["podTemplate"]["spec"]["nodeSelector"][VIRTUAL_LABEL],
            "true"
        );
        assert!(
            object["spec"].get("missing").is_none(),
            "unresolved pointers are skipped"
        );
    }

    #[test]
    fn service_ips_pvc_volume_and_job_selector_are_dropped() {
        let service = Gvk::new("", "v1", "Service");
        let recorded = json!({"metadata": {"name": "s"}, "spec": {
            "clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"], "ports": [{"port": 80}],
        }});
        let (_, object) = rewriter().apply(&service, "shop", "s", recorded).unwrap();
        assert_eq!(object["spec"], json!({"ports": [{"port": 80}]}));

        let pvc = Gvk::new("", "v1", "PersistentVolumeClaim");
        let recorded = json!({"metadata": {"name": "c"}, "spec": {"volumeName": "pv-1"}});
        let (_, object) = rewriter().apply(&pvc, "shop", "c", recorded).unwrap();
        assert_eq!(object["spec"], json!({}));

        let job = Gvk::new("batch", "v1", "Job");
        let recorded = json!({"metadata": {"name": "j"}, "spec": {
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "old"}},
            "template": {"metadata": {"labels": {"batch.kubernetes.io/controller-uid": "old", "app": "j"}}},
        }});
        let (_, object) = rewriter().apply(&job, "shop", "j", recorded).unwrap();
        assert!(object["spec"].get("selector").is_none());
        assert_eq!(
            object["spec"]["template"]["metadata"]["labels"],
            json!({"app": "j", SIMULATION_LABEL: "sim-1"})
        );
    }

    #[test]
    fn namespace_objects_are_renamed_and_cluster_scoped() {
        let namespace = Gvk::new("", "v1", "Namespace");
        let recorded = json!({"metadata": {"name": "shop", "namespace": "odd"}, "spec": {"finalizers": ["kubernetes"]}});
        let (target, object) = rewriter().apply(&namespace, "", "shop", recorded).unwrap();
        assert_eq!(target.name, "ksim-sim-1-shop");
        assert_eq!(target.namespace, None);
        assert_eq!(object["metadata"]["name"], "ksim-sim-1-shop");
        assert!(object["metadata"].get("namespace").is_none());
        assert_eq!(object["metadata"]["ownerReferences"], root_owner());
        assert_eq!(rewriter().delete(&namespace, "", "shop"), target);

        // Cluster-scoped objects are the root's own: nothing else would take them.
        let class = Gvk::new("scheduling.k8s.io", "v1", "PriorityClass");
        let recorded = json!({"metadata": {"name": "high", "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "gone"}]}, "value": 1000});
        let (target, object) = rewriter().apply(&class, "", "high", recorded).unwrap();
        assert_eq!(target.namespace, None);
        assert_eq!(object["metadata"]["ownerReferences"], root_owner());
        assert_eq!(object["metadata"]["labels"][SIMULATION_LABEL], "sim-1");

        let pv = Gvk::new("", "v1", "PersistentVolume");
        let target = rewriter().delete(&pv, "", "pv");
        assert_eq!((target.namespace, target.name.as_str()), (None, "pv"));
    }

    #[test]
    fn refusals_name_the_kind_and_object() {
        let error = rewriter()
            .apply(&deployment(), "shop", "web", json!([1]))
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "apps/v1.Deployment shop/web: the recorded object is not a JSON object"
        );
        let error = rewriter()
            .apply(&deployment(), "shop", "", json!({}))
            .unwrap_err();
        assert!(matches!(error, RewriteError::EmptyName { .. }), "{error}");
        assert!(error.to_string().contains("apps/v1.Deployment"));
        let error = rewriter()
            .apply(
                &deployment(),
                "shop",
                "web",
                json!({"spec": {"template": "nope"}}),
            )
            .unwrap_err();
        assert!(matches!(error, RewriteError::TemplateNotObject { .. }));
        assert!(error.to_string().contains("shop/web"), "{error}");
        assert!(error.to_string().contains("/spec/template"), "{error}");
    }
}
