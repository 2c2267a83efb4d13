//! `ksim experiment run` as a team would gate a change in its CI: two variants of the demo trace,
//! each run twice on `ksim up`'s environment, their comparison, and assertions over it, one
//! made to fail. A file or assertion that cannot be taken costs no simulation.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use serde_json::Value;

use super::common::{deployment, shop_deployment, up::Up, write_trace};

const SKELETON: &str = ksim_localenv::fixtures::M5_LARGE_SKELETON;

const PACKED: &str = ksim_localenv::fixtures::PACKING_SCHEDULER_CONFIG;

const EXPERIMENT: &str = "\
trace: demo.ktrace
speed: 10
repeats: 2
nodeGroups: [\"small=m5.yaml:4\"]
provisioning: instant
explain: 2
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

/// The row of figure `name` in a comparison's JSON.
fn figure_row<'a>(comparison: &'a Value, name: &str) -> &'a Value {
    comparison["figures"]
        .as_array()
        .unwrap()
        .iter()
        .find(|figure| figure["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {comparison:#}"))
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
    let assertions = ["--assert", holds, "--assert", fails, "--assert", judged];
    let tokio_up = &up;
    let output = tokio::task::block_in_place(|| {
        let run = ["experiment", "run", "-f", &file_arg];
        ksim(tokio_up, &[&run[..], &assertions[..]].concat())
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
    let row = figure_row(&comparison, "node_hours");
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
        figure_row(&comparison, name)["values"]
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

    // The comparison as a web page: a real browser runs its scripts without an error, its
    // table holds every figure of comparison.json, with the same values.
    let (dom, _) = ksim_e2e::render_page(&results.join("comparison.html"), "experiment-comparison");
    assert!(
        dom.contains("data-rendered=\"true\""),
        "the page's script did not finish"
    );
    assert!(!dom.contains("data-error="), "a script error: {dom}");
    assert!(dom.contains("class=\"uplot"), "no chart drawn: {dom}");
    let figures = comparison["figures"].as_array().unwrap();
    let table_start = dom
        .find("data-table=\"figures\"")
        .expect("the figures' table");
    let table = &dom[table_start..];
    let table = &table[..table.find("</table>").unwrap()];
    assert_eq!(table.matches("<tr>").count(), figures.len() + 1, "{table}");
    let baseline_hours = row["values"][0].as_f64().unwrap();
    assert!(
        table.contains(&format!("<td>node_hours</td><td>{baseline_hours:.4}</td>")),
        "{table}"
    );

    // Every run explained two pods of each workload (`explain: 2`), as the scheduler chose:
    // the chosen node first, no runner-up above it.
    for variant in ["baseline", "packed"] {
        let path = results.join(variant).join("1").join("report.json");
        let report: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let explained = report["explanations"].as_array().unwrap();
        let web = explained
            .iter()
            .filter(|pod| pod["owner"] == "Deployment/web")
            .count();
        assert_eq!(web, 2, "{variant}: {explained:#?}");
        for attempt in explained
            .iter()
            .flat_map(|pod| pod["attempts"].as_array().unwrap())
        {
            let totals: Vec<i64> = attempt["scores"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .map(|node| node["total"].as_i64().unwrap())
                .collect();
            if let Some(chosen) = totals.first() {
                assert_eq!(attempt["scores"][0]["node"], attempt["node"], "{attempt}");
                assert!(totals.iter().all(|total| total <= chosen), "{attempt}");
            }
        }
    }
    // The two variants' pods of web side by side, matched by place (their names differ).
    let run_dir = |variant: &str| results.join(variant).join("1").display().to_string();
    let compared = ksim(
        &up,
        &[
            "compare",
            &run_dir("baseline"),
            &run_dir("packed"),
            "--owner",
            "Deployment/web",
        ],
    );
    let lines = text(&compared.stdout);
    assert!(
        compared.status.success(),
        "{lines}{}",
        text(&compared.stderr)
    );
    assert_eq!(
        lines
            .lines()
            .filter(|line| line.contains("(Deployment/web, its pod"))
            .count(),
        2,
        "{lines}"
    );
    for variant in ["baseline", "packed"] {
        assert_eq!(
            lines
                .lines()
                .filter(|line| line.contains(&format!("{variant}/1: web-")))
                .count(),
            2,
            "{lines}"
        );
    }

    // The same reports through the cluster's path (`--cluster` reads each run's report.json
    // back as it does the ones its Jobs hand back, then compares): the same bytes, the same
    // verdicts. With every report already collected, it has nothing to ask of a cluster.
    let elsewhere = dir.join("cluster-results");
    for variant in ["baseline", "packed"] {
        for run in ["1", "2"] {
            let into = elsewhere.join(variant).join(run);
            std::fs::create_dir_all(&into).unwrap();
            std::fs::copy(
                results.join(variant).join(run).join("report.json"),
                into.join("report.json"),
            )
            .unwrap();
        }
    }
    std::fs::write(
        elsewhere.join("cluster-experiment.json"),
        r#"{"id": "same-reports"}"#,
    )
    .unwrap();
    let unreachable = dir.join("no-cluster.kubeconfig");
    let to_cluster = [
        "experiment",
        "run",
        "-f",
        &file_arg,
        "--cluster",
        "--id",
        "same-reports",
        "--kubeconfig",
        unreachable.to_str().unwrap(),
        "-o",
        elsewhere.to_str().unwrap(),
    ];
    let output = ksim(&up, &[&to_cluster[..], &assertions[..]].concat());
    let replayed = text(&output.stdout);
    assert!(!output.status.success(), "{replayed}");
    assert!(
        replayed.contains("resuming experiment same-reports: 4 reports"),
        "{replayed}"
    );
    for name in ["comparison.json", "comparison.txt", "comparison.svg"] {
        assert!(
            std::fs::read(results.join(name)).unwrap()
                == std::fs::read(elsewhere.join(name)).unwrap(),
            "{name} differs"
        );
    }
    let verdicts = |printed: &str| -> Vec<String> {
        printed
            .lines()
            .filter(|line| line.starts_with("  assert "))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(verdicts(&replayed), verdicts(&printed));
    assert_eq!(verdicts(&printed).len(), 3, "{printed}");
}

/// Noise told apart from effect on repeats: the same configuration run as a second variant is
/// within the noise of the baseline's repeats on every figure the test judges, and the scheduler
/// packing where it spread (most of the group's nodes emptied, so cluster-autoscaler removes
/// them) is beyond it, in the table, the JSON and the assertions' CEL context alike.
#[tokio::test(flavor = "multi_thread")]
async fn the_same_configuration_is_within_noise_and_packing_where_it_spread_is_beyond_it() {
    let dir = tempfile::tempdir().unwrap();
    let pricing = dir.path().join("provider.yaml");
    std::fs::write(
        &pricing,
        "pricing:\n  instanceTypes:\n    m5.large: 0.096\n",
    )
    .unwrap();
    let provider_config = pricing.to_str().unwrap().to_owned();
    let up = tokio::task::spawn_blocking(move || {
        Up::with_fast_autoscaler(&["--provider-config", &provider_config])
    })
    .await
    .unwrap();
    let dir = dir.path();
    // Six pods, three of which fit one node, for 300 recorded seconds: spread over the group's
    // six nodes they hold 31% each, above the threshold, so none is removed; packed, four are
    // empty. The runs settle: unsettled, the groups are released as the clock starts and the
    // pods land a moment later, and CA at the test's unneeded time (5 s, half a second at 10x)
    // now and then removes an initial node in between (a spread run with a removal, a packed
    // one with one fewer).
    let t0 = 1_767_225_600_000;
    write_trace(
        &dir.join("six.ktrace"),
        [
            (
                t0,
                deployment(&shop_deployment("web", 6, "600m", "256Mi", "a")),
            ),
            (
                t0 + 300_000,
                deployment(&shop_deployment("web", 6, "600m", "256Mi", "b")),
            ),
        ],
        &[],
    );
    std::fs::write(dir.join("m5.yaml"), SKELETON).unwrap();
    std::fs::write(
        dir.join("packed.yaml"),
        ksim_localenv::fixtures::PACKING_ONLY_SCHEDULER_CONFIG,
    )
    .unwrap();
    let file = dir.join("experiment.yaml");
    std::fs::write(
        &file,
        "\
trace: six.ktrace
speed: 10
repeats: 2
settle: true
provisioning: instant
autoscaler: true
autoscalerGroups: [\"m5=m5.yaml:1:6:6\"]
variants:
- name: spread
  autoscalerArgs: [scale-down-utilization-threshold=0.2]
- name: again
  autoscalerArgs: [scale-down-utilization-threshold=0.2]
- name: packed
  autoscalerArgs: [scale-down-utilization-threshold=0.2]
  schedulerConfig: packed.yaml
",
    )
    .unwrap();
    let judged = [
        "node_hours",
        "peak_nodes",
        "scale_downs",
        "cpu_requested_mean",
    ];
    let within = judged
        .iter()
        .map(|figure| format!("!variants.again.beyond_noise.{figure}"))
        .collect::<Vec<_>>()
        .join(" && ");
    let beyond = "variants.packed.beyond_noise.node_hours \
                  && variants.packed.node_hours < variants.spread.node_hours";
    let output = tokio::task::block_in_place(|| {
        ksim(
            &up,
            &[
                "experiment",
                "run",
                "-f",
                file.to_str().unwrap(),
                "--assert",
                &within,
                "--assert",
                beyond,
            ],
        )
    });
    let printed = text(&output.stdout);
    assert!(output.status.success(), "{printed}{}", text(&output.stderr));
    for assertion in [within.as_str(), beyond] {
        assert!(
            printed.contains(&format!("assert ok:     {assertion}")),
            "{printed}"
        );
    }
    let results = dir.join("experiment-results");
    let comparison: Value =
        serde_json::from_slice(&std::fs::read(results.join("comparison.json")).unwrap()).unwrap();
    let noise = |name: &str, variant: usize| -> Value {
        figure_row(&comparison, name)["noise"][variant].clone()
    };
    for figure in judged {
        let again = noise(figure, 1);
        assert_eq!(again["beyond_noise"], false, "{figure}: {again}");
        assert!(
            again["p_value"].as_f64().unwrap() >= 0.05,
            "{figure}: {again}"
        );
    }
    for figure in ["node_hours", "cost", "scale_downs", "cpu_requested_mean"] {
        let packed = noise(figure, 2);
        assert_eq!(packed["beyond_noise"], true, "{figure}: {packed}");
        assert!(
            packed["p_value"].as_f64().unwrap() < 0.05,
            "{figure}: {packed}"
        );
        assert!(packed.get("repeats_needed").is_none(), "{figure}: {packed}");
    }
    // The table marks each judgement: `~` within the noise, `*` beyond it.
    let table = std::fs::read_to_string(results.join("comparison.txt")).unwrap();
    let line = table
        .lines()
        .find(|line| line.starts_with("node_hours "))
        .unwrap_or_else(|| panic!("{table}"));
    assert_eq!(line.matches("~p=").count(), 1, "{line}");
    assert_eq!(line.matches("*p=").count(), 1, "{line}");

    // Each run's report: packed, four nodes are empty and CA removes them; spread, none is.
    let report = |variant: &str, run: u32| -> (String, Value) {
        let dir = results.join(variant).join(run.to_string());
        let report = serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap());
        (dir.to_str().unwrap().to_owned(), report.unwrap())
    };
    let costs = |report: &Value, name: &str| report["costs"][name].as_f64().unwrap();
    for run in 1..=2 {
        let ((_, spread), (_, packed)) = (report("spread", run), report("packed", run));
        assert!(
            costs(&packed, "node_hours") < costs(&spread, "node_hours")
                && costs(&packed, "cpu_requested_mean") > costs(&spread, "cpu_requested_mean")
                && costs(&packed, "cost") < costs(&spread, "cost"),
            "packed {:#} spread {:#}",
            packed["costs"],
            spread["costs"]
        );
        assert_eq!(spread["costs"]["groups"][0]["scale_downs"], 0);
        assert_eq!(packed["costs"]["groups"][0]["scale_downs"], 4);
        for report in [&spread, &packed] {
            let m5 = &report["costs"]["groups"][0];
            assert_eq!(m5["group"], "m5");
            assert_eq!(m5["instance_type"], "m5.large");
            assert_eq!(m5["price_per_hour"], 0.096);
            let expected = m5["node_hours"].as_f64().unwrap() * 0.096;
            assert!(
                (m5["cost"].as_f64().unwrap() - expected).abs() < 1e-9,
                "{m5}"
            );
            // The timeline says how tightly: requested and allocatable per bucket.
            let usage = &report["timeline"].as_array().unwrap().last().unwrap()["usage"];
            assert_eq!(usage["requested_cpu_millis"], 3600, "{usage}");
        }
    }
    assert!(printed.contains("at 0.096/h"), "{printed}");

    // Two runs side by side with `ksim compare`: the deltas are the reports' own figures.
    let ((spread_dir, spread), (packed_dir, packed)) = (report("spread", 1), report("packed", 1));
    let chart = dir.join("compare.svg");
    let compare = |extra: &[&str]| {
        let mut args = vec!["compare".to_owned(), spread_dir.clone(), packed_dir.clone()];
        args.extend(extra.iter().map(|arg| (*arg).to_owned()));
        up.ksim_any(&args)
    };
    let output = compare(&["--json", "--svg", chart.to_str().unwrap()]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let compared: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        compared["runs"],
        serde_json::json!([spread_dir, packed_dir])
    );
    for name in [
        "node_hours",
        "cost",
        "cpu_requested_mean",
        "pending_pod_seconds",
    ] {
        let (base, other) = (costs(&spread, name), costs(&packed, name));
        let row = figure_row(&compared, name);
        assert_eq!(row["values"], serde_json::json!([base, other]), "{name}");
        let delta = row["deltas"][1].as_f64().unwrap();
        assert!((delta - (other - base)).abs() < 1e-9, "{name}: {row}");
        if base != 0.0 {
            let relative = row["relative"][1].as_f64().unwrap();
            assert!(
                (relative - (other - base) / base).abs() < 1e-9,
                "{name}: {row}"
            );
        }
    }
    assert_eq!(
        figure_row(&compared, "pending_p99_ms")["values"],
        serde_json::json!([
            spread["pod_pending_time"]["p99_ms"],
            packed["pod_pending_time"]["p99_ms"]
        ])
    );
    let svg = std::fs::read_to_string(&chart).unwrap();
    assert!(
        svg.contains(&spread_dir) && svg.contains(&packed_dir),
        "{svg}"
    );
    let table = text(&compare(&[]).stdout);
    assert!(
        table.contains("(baseline)") && table.contains("node_hours"),
        "{table}"
    );
    // A name that is neither a directory nor a simulation is one line and an exit.
    let missing = up.ksim_any(&[
        "compare".to_owned(),
        spread_dir.clone(),
        "no-such-report".to_owned(),
    ]);
    assert!(!missing.status.success());
    assert!(
        text(&missing.stderr).contains("no-such-report"),
        "{}",
        text(&missing.stderr)
    );
}
