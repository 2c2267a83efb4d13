//! Trace files and the local environment for the CLI's tests.

pub mod up;

use std::path::Path;

use k8s_openapi::api::apps::v1::Deployment;
use ksim_nodes::labels::{GROUP_LABEL, VIRTUAL_TAINT_KEY};
use ksim_proto::ksim::trace::v1 as pb;
use ksim_trace::TraceWriter;
use serde_json::{Value, json};

/// Deployment `web` in `shop`: `replicas` pods of one CPU on group `group`'s virtual nodes, one
/// per m5.large (1930m allocatable), so each pod CA sees pending asks for a node of its own;
/// `annotations` go on the pod template (`{}` for none).
pub fn web(group: &str, replicas: i32, annotations: Value) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}, "annotations": annotations},
                "spec": {
                    "nodeSelector": {GROUP_LABEL: group},
                    "tolerations": [{"key": VIRTUAL_TAINT_KEY, "operator": "Exists",
                        "effect": "NoSchedule"}],
                    "containers": [{"name": "web", "image": "registry.example/web:1",
                        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]
                }
            }
        }
    }))
    .expect("web is a valid Deployment")
}

/// The fidelity series `name` of a report's `fidelity`.
pub fn series<'a>(fidelity: &'a Value, name: &str) -> &'a Value {
    fidelity["series"]
        .as_array()
        .and_then(|all| all.iter().find(|series| series["name"] == name))
        .unwrap_or_else(|| panic!("no series {name} in {fidelity:#}"))
}

/// Deletes what a recording made, group `group`'s seats and namespace `shop`, so a replay can
/// bring its own group of that name.
pub async fn forget_recording(client: &kube::Client, group: &str) {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::{Api, api::DeleteParams};

    Api::<Deployment>::namespaced(client.clone(), "ksim-system")
        .delete(&format!("seats-{group}"), &DeleteParams::default())
        .await
        .unwrap();
    Api::<Namespace>::all(client.clone())
        .delete("shop", &DeleteParams::default())
        .await
        .unwrap();
}

/// Deployment `name` in namespace `shop`: `replicas` pods of `cpu` and `memory` each.
pub fn shop_deployment(
    name: &str,
    replicas: i32,
    cpu: &str,
    memory: &str,
    revision: &str,
) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "shop", "labels": {"revision": revision}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "tolerations": [{"key": "workload-class", "operator": "Exists",
                        "effect": "NoSchedule"}],
                    "containers": [{"name": "web", "image": "registry.example/web:1",
                        "resources": {"requests": {"cpu": cpu, "memory": memory}}}]
                }
            }
        }
    })
}

/// A Deployment in namespace `shop`, applied.
pub fn deployment(object: &Value) -> pb::TraceObject {
    pb::TraceObject {
        gvk: Some(pb::GroupVersionKind {
            group: "apps".into(),
            version: "v1".into(),
            kind: "Deployment".into(),
        }),
        namespace: "shop".into(),
        name: object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .into(),
        object_json: serde_json::to_vec(object).unwrap_or_default(),
    }
}

/// Writes a trace of `applies` (timestamp in ms, object) and `lifecycles` to `path`.
pub fn write_trace(
    path: &Path,
    applies: impl IntoIterator<Item = (i64, pb::TraceObject)>,
    lifecycles: &[pb::PodLifecycle],
) {
    let header = pb::TraceHeader {
        format_version: ksim_trace::FORMAT_VERSION,
        created_by: "test".into(),
        ..Default::default()
    };
    let file = std::fs::File::create(path).expect("creating the trace file");
    let mut writer = TraceWriter::new(file, &header).expect("writing the trace header");
    for (timestamp_ms, object) in applies {
        writer
            .write_event(&pb::TraceEvent {
                timestamp_ms,
                applied: vec![object],
                deleted: vec![],
            })
            .expect("writing an event");
    }
    for lifecycle in lifecycles {
        writer
            .write_lifecycle(lifecycle)
            .expect("writing a lifecycle");
    }
    writer.finish().expect("finishing the trace");
}

/// A SimKube trace (MessagePack, format 2) at `path`: an empty first event, then the
/// Deployment `n/web` with 3 replicas 10 s later.
pub fn write_simkube_trace(path: &Path) {
    write_simkube_trace_with(path, 1_767_225_610);
}

/// As [`write_simkube_trace`], its second event at `second_ts` (seconds since the epoch, as
/// SimKube writes them): a time no ksim trace can hold, for the readers' refusals.
pub fn write_simkube_trace_with(path: &Path, second_ts: i64) {
    let trace = serde_json::json!({
        "version": 2,
        "config": {"trackedObjects": {"apps/v1.Deployment": {"podSpecTemplatePaths": ["/spec/template"]}}},
        "events": [
            {"ts": 1_767_225_600, "applied_objs": [], "deleted_objs": []},
            {"ts": second_ts, "applied_objs": [{"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "n"}, "spec": {"replicas": 3}}], "deleted_objs": []}
        ],
        "index": {},
        "pod_lifecycles": {}
    });
    let bytes = rmp_serde::to_vec_named(&trace).expect("encoding the SimKube trace");
    std::fs::write(path, bytes).expect("writing the SimKube trace");
}

/// A "What-if" section of the experiments manual, the one whose title starts `title`: the files
/// its `cat > FILE <<'END'` blocks write (name, text) and its `ksim experiment run` line's
/// arguments after `ksim`, the quoted assertion as one.
pub fn manual_what_if(title: &str) -> (Vec<(String, String)>, Vec<String>) {
    let docs = include_str!("../../../../../../docs/experiments.md");
    let section = docs
        .split("\n**What-if: ")
        .find(|section| section.starts_with(title))
        .unwrap_or_else(|| panic!("the experiments manual has no what-if {title:?}"));
    let mut files = Vec::new();
    let mut command = None;
    let mut lines = section.lines();
    while let Some(line) = lines.next() {
        if let Some((name, end)) = line
            .strip_prefix("cat > ")
            .and_then(|rest| rest.split_once(" <<"))
        {
            let end = end.trim_matches('\'');
            let text: Vec<&str> = lines.by_ref().take_while(|line| *line != end).collect();
            files.push((name.to_owned(), text.join("\n") + "\n"));
        } else if line.starts_with("ksim experiment run") {
            command = Some(line.to_owned());
        }
    }
    let command = command.expect("the section runs an experiment");
    // `ksim experiment run -f hpa.yaml --assert '...'`: the quoted assertion is one argument.
    let (head, assertion) = command
        .split_once(" '")
        .expect("the command has an assertion");
    let mut args: Vec<String> = head.split_whitespace().skip(1).map(str::to_owned).collect();
    args.push(assertion.trim_end_matches('\'').to_owned());
    (files, args)
}

/// Runs a manual's `ksim experiment run` (its arguments after `ksim`, paths already made
/// absolute) in `up`'s environment; what it printed, once it has succeeded with its assertion
/// holding.
pub async fn run_what_if(up: &up::Up, args: Vec<String>) -> String {
    let state = up.state.path().to_owned();
    let output = tokio::task::spawn_blocking(move || up::ksim_in(&state, &args))
        .await
        .expect("the ksim process ran");
    let printed = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(printed.contains("assert ok:"), "{printed}");
    printed
}
