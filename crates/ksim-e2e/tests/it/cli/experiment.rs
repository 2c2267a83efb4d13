//! `ksim experiment run` as a team would gate a change in its CI: two variants of the demo trace,
//! each run twice on `ksim up`'s environment, their comparison, and assertions over it, one
//! made to fail. A file or assertion that cannot be taken costs no simulation.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use serde_json::Value;

use super::common::up::Up;

const SKELETON: &str = ksim_e2e::fixtures::M5_LARGE_SKELETON;

const PACKED: &str = ksim_e2e::fixtures::PACKING_SCHEDULER_CONFIG;

const EXPERIMENT: &str = "\
trace: demo.ktrace
speed: 10
repeats: 2
nodeGroups: [\"small=m5.yaml:4\"]
provisioning: instant
variants:
- name: baseline
- name: packed
  schedulerConfig: packed.yaml
  speed: 20
";

fn ksim(up: &Up, args: &[&str]) -> std::process::Output {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    up.ksim_any(&args)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn two_variants_twice_each_are_compared_and_a_failed_assertion_fails_the_run() {
    let up = tokio::task::spawn_blocking(|| Up::start(&[]))
        .await
        .unwrap();
    let dir = up.state.path().join("what-if");
    std::fs::create_dir_all(&dir).unwrap();
    let written = ksim(
        &up,
        &[
            "demo",
            "--write-trace",
            dir.join("demo.ktrace").to_str().unwrap(),
        ],
    );
    assert!(written.status.success(), "{}", text(&written.stderr));
    std::fs::write(dir.join("m5.yaml"), SKELETON).unwrap();
    std::fs::write(dir.join("packed.yaml"), PACKED).unwrap();
    let file = dir.join("experiment.yaml");
    let file_arg = file.to_str().unwrap().to_owned();

    // Refused before anything runs, one line each.
    std::fs::write(&file, format!("{EXPERIMENT}colour: red\n")).unwrap();
    let unknown_key = ksim(&up, &["experiment", "run", "-f", &file_arg]);
    std::fs::write(&file, EXPERIMENT).unwrap();
    let bad_cel = ksim(
        &up,
        &[
            "experiment",
            "run",
            "-f",
            &file_arg,
            "--assert",
            "variants.packed.cost <",
        ],
    );
    for (output, reason) in [
        (&unknown_key, "unknown field `colour`"),
        (&bad_cel, "not CEL"),
    ] {
        let said = text(&output.stderr);
        assert!(!output.status.success(), "{said}");
        assert!(said.contains(reason), "{said}");
        assert_eq!(said.trim_end().lines().count(), 1, "{said}");
    }
    assert!(!dir.join("experiment-results").exists());
    let reports = up.state.path().join("reports");
    assert_eq!(std::fs::read_dir(&reports).map_or(0, |e| e.count()), 0);

    // Both variants twice; one assertion holds, one is made to fail.
    let holds = "variants.baseline.failed == 0 && variants.packed.failed == 0";
    let fails = "variants.packed.node_hours > variants.baseline.node_hours * 2.0";
    // The noise test judged every variant after the baseline, and only those.
    let judged = "has(variants.packed.p.node_hours) && !has(variants.baseline.p.node_hours) \
                  && (variants.packed.beyond_noise.node_hours == (variants.packed.p.node_hours < 0.05))";
    let tokio_up = &up;
    let output = tokio::task::block_in_place(|| {
        ksim(
            tokio_up,
            &[
                "experiment",
                "run",
                "-f",
                &file_arg,
                "--assert",
                holds,
                "--assert",
                fails,
                "--assert",
                judged,
            ],
        )
    });
    let printed = text(&output.stdout);
    let said = text(&output.stderr);
    assert!(!output.status.success(), "{printed}{said}");
    assert!(
        printed.contains(&format!("assert ok:     {holds}")),
        "{printed}"
    );
    assert!(
        printed.contains(&format!("assert FAILED: {fails}")),
        "{printed}"
    );
    assert!(
        printed.contains(&format!("assert ok:     {judged}")),
        "{printed}"
    );
    assert!(
        said.contains("1 of 3 assertions failed") && said.contains(fails),
        "{said}"
    );

    // Four reports and the comparison, whose means are the reports' own.
    let results = dir.join("experiment-results");
    let node_hours = |variant: &str| -> Vec<f64> {
        (1..=2)
            .map(|run| {
                let path = results
                    .join(variant)
                    .join(run.to_string())
                    .join("report.json");
                let report: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
                report["costs"]["node_hours"].as_f64().unwrap()
            })
            .collect()
    };
    let (baseline, packed) = (node_hours("baseline"), node_hours("packed"));
    let comparison: Value =
        serde_json::from_slice(&std::fs::read(results.join("comparison.json")).unwrap()).unwrap();
    assert_eq!(
        comparison["runs"],
        serde_json::json!(["baseline", "packed"])
    );
    let row = comparison["figures"]
        .as_array()
        .unwrap()
        .iter()
        .find(|figure| figure["name"] == "node_hours")
        .unwrap();
    let mean = |values: &[f64]| values.iter().sum::<f64>() / values.len() as f64;
    for (i, runs) in [&baseline, &packed].into_iter().enumerate() {
        assert!(
            (row["values"][i].as_f64().unwrap() - mean(runs)).abs() < 1e-9,
            "{row}"
        );
        let min = runs.iter().copied().fold(f64::INFINITY, f64::min);
        assert!(
            (row["min"][i].as_f64().unwrap() - min).abs() < 1e-9,
            "{row}"
        );
    }
    // The packed variant ran at its own speed; held against the baseline bucket by bucket in
    // recorded time, its four fixed nodes agree everywhere, and each run's lateness is kept.
    let speed = |variant: &str| -> f64 {
        let path = results.join(variant).join("1").join("report.json");
        let report: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        report["speed"].as_f64().unwrap()
    };
    assert_eq!((speed("baseline"), speed("packed")), (10.0, 20.0));
    let figure = |name: &str| -> Vec<Option<f64>> {
        let row = comparison["figures"]
            .as_array()
            .unwrap()
            .iter()
            .find(|figure| figure["name"] == name)
            .unwrap_or_else(|| panic!("no {name}"));
        row["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(Value::as_f64)
            .collect()
    };
    assert_eq!(figure("nodes_agree_with_baseline"), [Some(1.0), Some(1.0)]);
    assert!(figure("lateness_p99_ms").iter().all(Option::is_some));
    // Each figure of the packed variant says whether it is beyond the noise of two repeats.
    let noise = &row["noise"];
    assert!(noise[0].is_null(), "{row}");
    let p = noise[1]["p_value"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&p), "{row}");
    assert_eq!(noise[1]["beyond_noise"].as_bool(), Some(p < 0.05), "{row}");
    let table = std::fs::read_to_string(results.join("comparison.txt")).unwrap();
    assert!(table.contains("Welch's t-test"), "{table}");
    for name in ["comparison.txt", "comparison.svg"] {
        assert!(Path::new(&results.join(name)).is_file(), "{name}");
    }
    assert!(printed.contains("(baseline)"), "{printed}");
}
