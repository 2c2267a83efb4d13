//! `ksim trace show` as a user runs it: listing events and objects with filters, and one
//! object's history as YAML diffs, on ksim and SimKube files.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ksim_localenv::fixtures::Workload;
use serde_json::json;

use super::validate::{bare_pod, ksim, ksim_file, simkube_fixtures, text};

fn show(args: &[&str]) -> String {
    let mut all = vec!["trace", "show"];
    all.extend_from_slice(args);
    let output = ksim(&all);
    let (out, err) = text(&output);
    assert!(output.status.success(), "{args:?}: {err}");
    out
}

/// Deployment `name` in `shop`: `replicas` pods of `image`.
fn deployment(name: &str, replicas: i32, image: &str) -> serde_json::Value {
    Workload::new(name, replicas)
        .namespace("shop")
        .image(image)
        .json()
}

fn shop_trace(dir: &std::path::Path) -> std::path::PathBuf {
    let file = dir.join("shop.ktrace");
    let config = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "shop"}});
    ksim_file(
        &file,
        vec![
            (0, vec![config, deployment("web", 2, "web:1")]),
            (30, vec![deployment("web", 20, "web:1")]),
            (60, vec![deployment("api", 1, "api:1")]),
            (90, vec![deployment("web", 5, "web:2")]),
        ],
    );
    file
}

#[test]
fn lists_events_filtered_by_kind_namespace_name_and_time() {
    let dir = tempfile::tempdir().unwrap();
    let file = shop_trace(dir.path());
    let f = file.to_str().unwrap();
    let all = show(&[f]);
    assert!(all.lines().next().unwrap().starts_with("EVENT"), "{all}");
    assert!(all.ends_with("5 object changes\n"), "{all}");
    assert!(
        all.contains("2026-01-01T00:00:30.000Z") && all.contains("apps/v1.Deployment"),
        "{all}"
    );

    let web = show(&[f, "--kind", "deployment", "--name", "web"]);
    assert!(web.ends_with("3 object changes\n"), "{web}");
    assert!(
        !web.contains("shop/api") && !web.contains("ConfigMap"),
        "{web}"
    );
    let kind = show(&[f, "--kind", "v1.ConfigMap", "-n", "shop"]);
    assert!(
        kind.ends_with("1 object changes\n") && kind.contains("shop/settings"),
        "{kind}"
    );
    let none = show(&[f, "-n", "elsewhere"]);
    assert!(none.ends_with("0 object changes\n"), "{none}");

    let window = show(&[
        f,
        "--from",
        "2026-01-01T00:00:30Z",
        "--to",
        "2026-01-01T00:01:30Z",
    ]);
    assert!(window.ends_with("2 object changes\n"), "{window}");
    assert!(
        window.contains("shop/api") && !window.contains("00:01:30.000Z"),
        "{window}"
    );
}

#[test]
fn lists_objects_with_their_counts() {
    let dir = tempfile::tempdir().unwrap();
    let file = shop_trace(dir.path());
    let objects = show(&[file.to_str().unwrap(), "--objects"]);
    let web = objects.lines().find(|l| l.contains("shop/web")).unwrap();
    let columns: Vec<&str> = web.split_whitespace().collect();
    assert_eq!(
        columns[..4],
        ["apps/v1.Deployment", "shop/web", "3", "0"],
        "{objects}"
    );
    assert!(objects.ends_with("3 objects\n"), "{objects}");
}

#[test]
fn prints_an_objects_history_as_yaml_diffs() {
    let dir = tempfile::tempdir().unwrap();
    let file = shop_trace(dir.path());
    let history = show(&[
        file.to_str().unwrap(),
        "--object",
        "Deployment/web",
        "-n",
        "shop",
    ]);
    let headers: Vec<&str> = history.lines().filter(|l| l.starts_with("# ")).collect();
    assert_eq!(headers.len(), 3, "{history}");
    assert!(
        headers[0].starts_with("# event 0 at 2026-01-01T00:00:00.000Z: applied"),
        "{history}"
    );
    assert!(
        headers[2].contains("applied apps/v1.Deployment shop/web (version 3)"),
        "{history}"
    );
    assert!(history.contains("--- (none)\n+++ version 1"), "{history}");
    assert!(history.contains("+  replicas: 2"), "{history}");
    assert!(
        history.contains("--- version 1\n+++ version 2"),
        "{history}"
    );
    assert!(
        history.contains("-  replicas: 2\n+  replicas: 20"),
        "{history}"
    );
    assert!(
        history.contains("-      - image: web:1\n+      - image: web:2"),
        "{history}"
    );
    // Only what changed, with context: version 2's diff does not show the image line twice.
    let second = history
        .split("# event 1")
        .nth(1)
        .unwrap()
        .split("# event 3")
        .next()
        .unwrap();
    assert!(!second.contains("image"), "{second}");

    let output = ksim(&[
        "trace",
        "show",
        file.to_str().unwrap(),
        "--object",
        "Deployment/nope",
    ]);
    let (_, err) = text(&output);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        err.starts_with("ksim: error: ") && err.contains("no object Deployment/nope"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1);
}

#[test]
fn shows_simkube_traces_and_their_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let files = simkube_fixtures(dir.path());
    let pods = files[0].to_str().unwrap();
    let events = show(&[pods, "--kind", "Pod"]);
    assert!(
        events.contains("delete") && events.contains("batch/a"),
        "{events}"
    );
    assert!(events.ends_with("4 object changes\n"), "{events}");
    let history = show(&[pods, "--object", "Pod/a", "-n", "batch"]);
    assert!(history.contains("deleted v1.Pod batch/a"), "{history}");
    assert!(history.contains("+  - image: busybox"), "{history}");
    let scaling = show(&[files[2].to_str().unwrap(), "--objects", "--from", "100s"]);
    assert!(scaling.ends_with("30 objects\n"), "{scaling}");
    let _ = bare_pod("x");
}

#[test]
fn bad_show_input_is_one_line_and_a_non_zero_exit() {
    let dir = tempfile::tempdir().unwrap();
    let file = shop_trace(dir.path());
    let garbage = dir.path().join("g");
    std::fs::write(&garbage, b"\x00\x01garbage").unwrap();
    let f = file.to_str().unwrap();
    for (args, message, code) in [
        (vec![garbage.to_str().unwrap()], "is not a valid trace", 1),
        (
            vec![f, "--from", "yesterday"],
            "--from \"yesterday\" is neither an RFC 3339 time",
            1,
        ),
        (vec![f, "--object", "web"], "expected KIND/NAME", 1),
        (
            vec![f, "--object", "Deployment/web", "--kind", "Pod"],
            "cannot be used with",
            2,
        ),
    ] {
        let mut all = vec!["trace", "show"];
        all.extend_from_slice(&args);
        let output = ksim(&all);
        let (_, err) = text(&output);
        assert_eq!(output.status.code(), Some(code), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.starts_with("ksim: error: ") && err.contains(message),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn lists_usage_samples_per_container_filtered_by_namespace_pod_and_time() {
    use ksim_proto::ksim::trace::v1 as pb;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("usage.ktrace");
    let start_ms = 1_767_225_600_000; // 2026-01-01T00:00:00Z
    let header = pb::TraceHeader {
        format_version: ksim_trace::FORMAT_VERSION,
        start_time: Some(ksim_trace::time::timestamp(start_ms)),
        ..Default::default()
    };
    let sample = |offset_s: i64, namespace: &str, pod: &str, cpu_m: i64| pb::UsageSample {
        timestamp_ms: start_ms + offset_s * 1000,
        window_ms: 15_000,
        namespace: namespace.into(),
        pod: pod.into(),
        containers: vec![
            pb::ContainerUsage {
                name: "app".into(),
                cpu_nanocores: cpu_m * 1_000_000,
                memory_bytes: 64 << 20,
            },
            pb::ContainerUsage {
                name: "proxy".into(),
                cpu_nanocores: 2_500_000,
                memory_bytes: 16 << 20,
            },
        ],
    };
    let mut writer =
        ksim_trace::TraceWriter::new(std::fs::File::create(&file).unwrap(), &header).unwrap();
    for usage in [
        sample(15, "shop", "web-1", 120),
        sample(15, "kube-system", "dns-1", 5),
        sample(30, "shop", "web-1", 480),
        sample(30, "shop", "web-2", 90),
    ] {
        writer.write_usage(&usage).unwrap();
    }
    writer.finish().unwrap();
    let f = file.to_str().unwrap();

    let all = show(&[f, "--usage"]);
    assert!(all.starts_with("TIME"), "{all}");
    assert!(all.ends_with("4 usage samples\n"), "{all}");
    let web = show(&[
        f, "--usage", "-n", "shop", "--name", "web-1", "--from", "20s",
    ]);
    assert!(web.ends_with("1 usage samples\n"), "{web}");
    let lines: Vec<&str> = web.lines().collect();
    assert_eq!(lines.len(), 4, "{web}");
    let app: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        app,
        [
            "2026-01-01T00:00:30.000Z",
            "+30.000s",
            "15s",
            "shop/web-1",
            "app",
            "480.0",
            "64.0"
        ],
        "{web}"
    );
    assert!(
        lines[2].contains("proxy") && lines[2].contains("2.5"),
        "{web}"
    );
    assert!(all.contains("kube-system/dns-1"), "{all}");
    let none = show(&[f, "--usage", "-n", "elsewhere"]);
    assert_eq!(none, "0 usage samples\n");
}
