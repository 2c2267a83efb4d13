//! Rightsizing as a what-if, as a user runs it (issue 36): the experiments manual's section
//! "What-if: rightsizing" runs as written on a trace of six pods of 900m, with the real
//! cluster-autoscaler sizing the group. As recorded they need three m5.large (two to a node);
//! at half their CPU requests, two (four to a node), so fewer node-hours.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};

use super::common::{deployment, manual_what_if, run_what_if, up::Up, write_trace};

/// `web` in `shop`: six pods of 900m on any node that tolerates the virtual nodes' taint.
fn web(revision: &str) -> Value {
    let mut web = ksim_localenv::fixtures::Workload::new("web", 6)
        .namespace("shop")
        .requests("900m", "256Mi")
        .on_any_group()
        .json();
    web["metadata"]["labels"]["revision"] = json!(revision);
    web
}

#[tokio::test(flavor = "multi_thread")]
async fn the_manuals_rightsizing_what_if_needs_fewer_nodes_at_half_the_cpu_requests() {
    let (files, args) = manual_what_if("rightsizing.**");
    assert_eq!(
        files
            .iter()
            .map(|(name, _)| name.as_str())
            .collect::<Vec<_>>(),
        ["halve-cpu.yaml", "rightsizing.yaml"]
    );
    let up = tokio::task::spawn_blocking(|| Up::with_fast_autoscaler(&[]))
        .await
        .unwrap();

    // 300 recorded seconds (30 s at the manual's 10x): web, then the same web again at the end
    // so the replay lasts that long.
    let dir = up.state.path().join("what-if");
    std::fs::create_dir_all(&dir).unwrap();
    let t0 = 1_767_225_600_000;
    write_trace(
        &dir.join("shop.ktrace"),
        [
            (t0, deployment(&web("a"))),
            (t0 + 300_000, deployment(&web("b"))),
        ],
        &[],
    );
    std::fs::write(
        dir.join("skeleton-m5-large.yaml"),
        ksim_localenv::fixtures::M5_LARGE_SKELETON,
    )
    .unwrap();
    for (name, text) in &files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let args: Vec<String> = args
        .into_iter()
        .map(|arg| match arg.as_str() {
            "rightsizing.yaml" => dir.join(&arg).display().to_string(),
            _ => arg,
        })
        .collect();
    let printed = run_what_if(&up, args).await;
    // The half run's summary names its rule.
    assert!(
        printed.contains("  transformed by:    rule 1 (line 2) \"shop at half its CPU requests\""),
        "{printed}"
    );

    let report = |variant: &str| -> Value {
        let path = dir
            .join("rightsizing-results")
            .join(variant)
            .join("1/report.json");
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    };
    let (recorded, half) = (report("recorded"), report("half"));
    // What CA grew the group to: three nodes as recorded, two at half.
    assert_eq!(
        (recorded["peak_nodes"].as_u64(), half["peak_nodes"].as_u64()),
        (Some(3), Some(2)),
        "{:#} {:#}",
        recorded["costs"],
        half["costs"]
    );
    // Every pod ran at its size: 5400m requested as recorded, 2700m at half.
    let requested = |report: &Value| {
        report["timeline"].as_array().unwrap().last().unwrap()["usage"]["requested_cpu_millis"]
            .as_u64()
    };
    assert_eq!(
        (requested(&recorded), requested(&half)),
        (Some(5400), Some(2700))
    );
    for report in [&recorded, &half] {
        let pods = &report["timeline"].as_array().unwrap().last().unwrap()["pods"];
        assert_eq!(pods["running"], 6, "{pods}");
    }
    // The report names the rules its trace went through.
    assert_eq!(
        half["trace_transforms"],
        json!([
            "rule 1 (line 2) \"shop at half its CPU requests\": scaleResources requests.cpu x0.5 \
             where ns == \"shop\""
        ]),
        "{half:#}"
    );
    assert!(recorded.get("trace_transforms").is_none(), "{recorded:#}");
}
