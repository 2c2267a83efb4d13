//! `ksim run --repeat N`: the real CLI runs the same trace N times in a row through the
//! in-process driver, with a report each, and prints the spread over the runs.

use std::process::Command;

use super::common::*;

#[tokio::test(flavor = "multi_thread")]
async fn repeat_runs_the_trace_n_times_and_prints_the_spread() {
    let mesh = start().await;
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("web.ktrace");
    std::fs::write(
        &trace,
        trace_file(
            vec![(
                0,
                vec![(
                    "apps/v1.Deployment",
                    "shop",
                    "web",
                    Workload::new("web", 2).json(),
                )],
            )],
            2_000,
        ),
    )
    .unwrap();
    let skeleton = dir.path().join("m5.yaml");
    std::fs::write(&skeleton, SKELETON).unwrap();

    let output = tokio::task::spawn_blocking({
        let (trace, skeleton, url) = (trace.clone(), skeleton.clone(), mesh.driver_url.clone());
        move || {
            Command::new(ksim_e2e::binary("ksim"))
                .arg("run")
                .arg(&trace)
                .args(["--repeat", "2", "--speed", "4", "--driver", &url])
                .arg(format!("--node-group=rep={}:2", skeleton.display()))
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("ksim: run 1 of 2"), "{stdout}");
    assert!(stdout.contains("ksim: run 2 of 2"), "{stdout}");
    assert!(stdout.contains("Repeated 2 times: 2 succeeded"), "{stdout}");
    // Each run brings up its own 2-node group: the peak is 2 in both.
    assert!(stdout.contains("peak nodes:        2 / 2 / 2"), "{stdout}");

    // Two distinct simulations, each with its own report and nothing left behind.
    let ids: Vec<&str> = stdout
        .lines()
        .filter_map(|line| line.strip_prefix("ksim: simulation "))
        .filter_map(|rest| rest.strip_suffix(" started"))
        .collect();
    assert_eq!(ids.len(), 2, "{stdout}");
    assert_ne!(ids[0], ids[1]);
    let mut mesh = mesh;
    for id in ids {
        let report = mesh.report(id).await;
        assert_eq!(report.simulation_id, id);
        assert_eq!(report.events_applied, 1);
        mesh.assert_nothing_left(id, &["rep"]).await;
    }
}
