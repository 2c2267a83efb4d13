//! What the CLI refuses on its own, before it asks a driver anything: no environment runs
//! here, and the driver's URL answers nothing, so an error that is not "cannot reach the
//! driver" was decided before any simulation could start.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{path::Path, process::Output};

use super::common;

/// Nothing listens on port 9 (discard) on loopback.
const NO_DRIVER: &str = "http://127.0.0.1:9";

const SKELETON: &str = ksim_localenv::fixtures::M5_LARGE_SKELETON;

fn ksim(args: &[&str]) -> Output {
    std::process::Command::new(ksim_e2e::binary("ksim"))
        .args(args)
        .args(["--driver", NO_DRIVER])
        .env_remove("KSIM_DRIVER_URL")
        .output()
        .unwrap()
}

/// Asserts `output` failed with one line on stderr that says `expected`, and returns it.
fn refused(output: &Output, expected: &[&str]) -> String {
    let said = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "{said}");
    assert_eq!(said.trim_end().lines().count(), 1, "{said}");
    assert!(!said.contains("cannot reach the driver"), "{said}");
    assert!(!said.contains("panicked"), "{said}");
    for part in expected {
        assert!(said.contains(part), "{part}: {said}");
    }
    said
}

fn files(dir: &Path) -> (String, String) {
    let trace = dir.join("t.ktrace");
    common::write_trace(
        &trace,
        [(
            1_767_225_600_000,
            common::deployment(&serde_json::json!({
                "metadata": {"name": "web", "namespace": "shop"},
                "spec": {"replicas": 1}
            })),
        )],
        &[],
    );
    let skeleton = dir.join("m5.yaml");
    std::fs::write(&skeleton, SKELETON).unwrap();
    (
        trace.to_str().unwrap().to_owned(),
        skeleton.to_str().unwrap().to_owned(),
    )
}

#[test]
fn run_refuses_a_group_past_the_pools_limit_before_starting() {
    let dir = tempfile::tempdir().unwrap();
    let (trace, skeleton) = files(dir.path());
    let huge = format!("m5={skeleton}:1000000");
    refused(
        &ksim(&["run", &trace, "--node-group", &huge]),
        &["--node-group", "COUNT 1000000 is more than 10000"],
    );
    let huge_max = format!("m5={skeleton}:0:20000:1");
    refused(
        &ksim(&[
            "run",
            &trace,
            "--autoscaler",
            "--autoscaler-group",
            &huge_max,
        ]),
        &["--autoscaler-group", "MAX 20000 is more than 10000"],
    );
    refused(
        &ksim(&["run", &trace, "--speed", "5000"]),
        &["--speed", "0.001", "1000"],
    );
}

#[test]
fn an_experiment_refuses_an_assertion_naming_what_it_does_not_have_before_running() {
    let dir = tempfile::tempdir().unwrap();
    files(dir.path());
    let file = dir.path().join("experiment.yaml");
    std::fs::write(
        &file,
        "trace: t.ktrace\nnodeGroups: [\"small=m5.yaml:2\"]\nvariants:\n- name: baseline\n\
         - name: packed\n",
    )
    .unwrap();
    let file = file.to_str().unwrap();
    refused(
        &ksim(&[
            "experiment",
            "run",
            "-f",
            file,
            "--assert",
            "variants.zzz.cost <= 3.0",
        ]),
        &[
            "variants.zzz.cost <= 3.0",
            "no variant \"zzz\" (it has baseline, packed)",
        ],
    );
    refused(
        &ksim(&[
            "experiment",
            "run",
            "-f",
            file,
            "--assert",
            "variants.packed.cots <= variants.baseline.cost",
        ]),
        &["variant packed has no figure \"cots\""],
    );
    // A later variant's speed is refused before the first variant runs.
    std::fs::write(
        dir.path().join("experiment.yaml"),
        "trace: t.ktrace\nvariants:\n- name: baseline\n- name: fast\n  speed: 5000\n",
    )
    .unwrap();
    refused(
        &ksim(&["experiment", "run", "-f", file]),
        &["variant fast", "speed 5000"],
    );
    assert!(!dir.path().join("experiment-results").exists());
}

#[test]
fn compare_names_a_missing_report_directory() {
    let dir = tempfile::tempdir().unwrap();
    let there = dir.path().join("there");
    std::fs::create_dir(&there).unwrap();
    refused(
        &ksim(&["compare", "/nonexistent", there.to_str().unwrap()]),
        &["cannot read report directory /nonexistent"],
    );
}

/// An environment CA flag a run could not set is one line naming `--autoscaler-flag`, and
/// nothing starts; a malformed recorded-flags file is one line naming the file and its line.
#[test]
fn up_refuses_an_autoscaler_flag_a_run_may_not_set_and_run_a_malformed_flags_file() {
    let state = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(ksim_e2e::binary("ksim"))
        .args(["up", "--autoscaler", "--autoscaler-flag", "log-file=/tmp/x"])
        .env("KSIM_STATE_DIR", state.path())
        .output()
        .unwrap();
    refused(
        &output,
        &[
            "--autoscaler-flag",
            "--log-file is not a flag a run may set (logging)",
        ],
    );
    assert!(!state.path().join("env.json").exists());
    // A port base whose ports would be privileged, or run into the ephemeral range.
    for base in ["80", "30664"] {
        let output = std::process::Command::new(ksim_e2e::binary("ksim"))
            .args(["up", "--port-base", base])
            .env("KSIM_STATE_DIR", state.path())
            .output()
            .unwrap();
        refused(&output, &["--port-base", base, "1024..=30663"]);
        assert!(!state.path().join("env.json").exists());
    }
    // A provider config the cloud provider refuses: one line naming the file and the value,
    // before anything starts (no service's log).
    let bad = state.path().join("bad-pricing.yaml");
    std::fs::write(&bad, "pricing:\n  instanceTypes:\n    m5.large: -1\n").unwrap();
    let output = std::process::Command::new(ksim_e2e::binary("ksim"))
        .args(["up", "--provider-config", bad.to_str().unwrap()])
        .args(["--port-base", &ksim_e2e::port_base().to_string()])
        .env("KSIM_STATE_DIR", state.path())
        .output()
        .unwrap();
    refused(
        &output,
        &[
            "--provider-config",
            bad.to_str().unwrap(),
            r#"["m5.large"] is -1"#,
        ],
    );
    assert!(!state.path().join("env.json").exists());
    assert!(!state.path().join("logs/tracer.log").exists());

    let dir = tempfile::tempdir().unwrap();
    let (trace, skeleton) = files(dir.path());
    let flags = dir.path().join("ca.flags");
    std::fs::write(
        &flags,
        "# recorded\nscan-interval=10s\n--expander least-waste\n",
    )
    .unwrap();
    let group = format!("m5={skeleton}:0:2:1");
    refused(
        &ksim(&[
            "run",
            &trace,
            "--autoscaler",
            "--autoscaler-group",
            &group,
            "--autoscaler-flags-file",
            flags.to_str().unwrap(),
        ]),
        &["--autoscaler-flags-file", "line 3", "is not FLAG=VALUE"],
    );
}
