//! `ksim demo`, the README's first command, as a user runs it: the real control plane, the four
//! services and the real cluster-autoscaler (deploy/test.sh builds it first; without it the
//! test fails). CA must add nodes for the pending pods, remove them after the scale-down, and
//! the simulation's cleanup must not make CA fail on the groups it removes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{path::PathBuf, process::Command};

/// "N nodes added (a, b), M removed (c)" -> (N, M).
fn added_and_removed(line: &str) -> (u64, u64) {
    let count_before = |marker: &str| -> u64 {
        let (head, _) = line
            .split_once(marker)
            .unwrap_or_else(|| panic!("{marker:?} in {line}"));
        let digits: String = head
            .chars()
            .rev()
            .take_while(char::is_ascii_digit)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        digits
            .parse()
            .unwrap_or_else(|_| panic!("no count before {marker:?} in {line}"))
    };
    (count_before(" nodes added"), count_before(" removed"))
}

#[test]
fn the_demo_lets_cluster_autoscaler_add_and_remove_nodes() {
    let _ports = ksim_e2e::LOCAL_ENV_PORTS.blocking_lock();
    let state = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let output = Command::new(ksim_e2e::binary("ksim"))
        .arg("demo")
        .env("KSIM_STATE_DIR", state.path())
        // Keeps CA's directory (in a TMPDIR of this test's, removed with it), so its log can be
        // read after the demo stopped it.
        .env("KSIM_KEEP_TESTENV", "1")
        .env("TMPDIR", tmp.path())
        .env_remove("KSIM_DEMO_NO_AUTOSCALER")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // The environment (ksim-env, the demo's child) says where it kept CA's directory in its
    // own output.
    let environment_log =
        std::fs::read_to_string(state.path().join("logs/environment.log")).unwrap_or_default();
    let kept: Vec<PathBuf> = environment_log
        .lines()
        .filter_map(|line| {
            line.split_once(" kept in ")
                .map(|(_, dir)| PathBuf::from(dir.trim()))
        })
        .collect();
    let ca_log = kept
        .iter()
        .map(|dir| dir.join("cluster-autoscaler.log"))
        .find(|log| log.exists())
        .map(|log| String::from_utf8_lossy(&std::fs::read(log).unwrap()).into_owned());
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        !stdout.contains("runs without cluster-autoscaler"),
        "{stdout}"
    );
    // Progress and the summary only: no log record (they start with a timestamp), no colour.
    let records: Vec<&str> = stdout
        .lines()
        .filter(|line| line.get(..5).is_some_and(|year| year.ends_with('-')))
        .filter(|line| line[..4].bytes().all(|b| b.is_ascii_digit()))
        .collect();
    assert!(records.is_empty(), "log records on stdout: {records:#?}");
    assert!(
        !stdout.contains('\x1b'),
        "terminal escapes on stdout:\n{stdout}"
    );

    let line = stdout
        .lines()
        .find(|line| line.starts_with("ksim demo: cluster-autoscaler:"))
        .unwrap_or_else(|| panic!("no cluster-autoscaler line in:\n{stdout}"));
    let (added, removed) = added_and_removed(line);
    // 20 web pods do not fit the 2 initial nodes; 5 fit fewer nodes than 20 needed.
    assert!(added >= 1, "{line}");
    assert!(removed >= 1, "{line}");
    assert!(line.contains("seats-m5-large-"), "nodes not named: {line}");
    // Its nodes boot by a model of its own, and the summary says which.
    assert!(
        stdout
            .lines()
            .any(|line| line.trim_start().starts_with("provisioning:")
                && line.contains("demo (ksim demo")
                && line.ends_with("[given]")),
        "{stdout}"
    );

    // Explained pods (the demo explains two of each workload): the command it names prints
    // where the pod went, from the report directory, the environment gone. Its node is one of
    // the group's, and the seat host (tainted) was ruled out by TaintToleration.
    let asked = stdout
        .lines()
        .find_map(|line| line.strip_prefix("ksim demo: why a pod went where it did: ksim "))
        .unwrap_or_else(|| panic!("no explained pod named in:\n{stdout}"));
    let explained = Command::new(ksim_e2e::binary("ksim"))
        .args(asked.split(' '))
        .env("KSIM_STATE_DIR", state.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&explained.stdout);
    assert!(
        explained.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&explained.stderr)
    );
    let pod = asked.rsplit(' ').next().unwrap();
    assert!(text.starts_with(&format!("{pod} (")), "{text}");
    let placed = text
        .lines()
        .find(|line| line.trim_start().starts_with("at ") && line.contains(": on "))
        .unwrap_or_else(|| panic!("no placement in:\n{text}"));
    assert!(placed.contains(": on seats-m5-large-"), "{text}");
    assert!(
        text.contains("TaintToleration: node(s) had untolerated taint(s) (e.g. ksim-seat-host-"),
        "{text}"
    );

    // The report as a web page: a real browser runs its scripts without an error, and the
    // figures and charts it shows are report.json's.
    let page = stdout
        .lines()
        .find_map(|line| line.trim_start().strip_prefix("web page"))
        .map(|path| PathBuf::from(path.trim()))
        .unwrap_or_else(|| panic!("no web page in:\n{stdout}"));
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(page.with_file_name("report.json")).unwrap())
            .unwrap();
    let (dom, _) = ksim_e2e::render_page(&page, "demo-report");
    assert!(
        dom.contains("data-rendered=\"true\""),
        "the page's script did not finish"
    );
    assert!(!dom.contains("data-error="), "a script error: {dom}");
    let shown = |figure: &str| -> String {
        let marker = format!("data-figure=\"{figure}\">");
        let start = dom.find(&marker).unwrap_or_else(|| panic!("no {figure}")) + marker.len();
        dom[start..start + dom[start..].find('<').unwrap()].to_owned()
    };
    assert_eq!(shown("peak_nodes"), report["peak_nodes"].to_string());
    assert_eq!(
        shown("events_applied"),
        report["events_applied"].to_string()
    );
    assert_eq!(
        shown("pods_never_scheduled"),
        report["costs"]["pods_never_scheduled"].to_string()
    );
    let node_hours = report["costs"]["node_hours"].as_f64().unwrap();
    assert_eq!(shown("node_hours"), format!("{node_hours:.4}"));
    // The timeline chart (uPlot's), and the explained pods' list.
    assert!(dom.contains("data-chart=\"timeline\""), "{dom}");
    assert!(dom.contains("class=\"uplot"), "no chart drawn: {dom}");
    let explained = report["explanations"].as_array().unwrap().len();
    assert_eq!(
        dom.matches("<details data-pod=").count(),
        explained,
        "{dom}"
    );

    // The group was retired before it went: CA logged no error on the way out (klog's error
    // lines start with E).
    let ca_log =
        ca_log.unwrap_or_else(|| panic!("no cluster-autoscaler log kept: {environment_log}"));
    let errors: Vec<&str> = ca_log
        .lines()
        .filter(|line| line.starts_with('E'))
        .collect();
    assert!(errors.is_empty(), "CA logged errors: {errors:#?}");
}
