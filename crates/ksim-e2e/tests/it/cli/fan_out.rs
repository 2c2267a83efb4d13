//! `ksim experiment run --cluster` against the real control plane, as the account
//! `deploy/experiment/` gives a user: the Job and the bundle are accepted by the server, bad
//! input is one line with nothing left behind, and a whole fanned-out experiment runs, each run
//! exactly as its pod's container would run it, compared as a local experiment is, and resumed.
//!
//! This plane has no kubelet, so the test plays it for the Job's pods: it starts each pod's
//! container command (`ksim experiment run-one` with the pod's arguments and environment, as the
//! runs' account) as a process, and writes the pod's status as a kubelet would. The image that
//! command runs in is built and run under podman by `deploy::images`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use k8s_openapi::api::{
    batch::v1::Job,
    core::v1::{ConfigMap, Namespace, Pod},
};
use ksim_localenv::{ControlPlane, ControlPlaneBinaries};
use kube::{
    Api,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

const NAMESPACE: &str = "ksim-experiments";
const EXPERIMENTER: &str = "ksim-experimenter";
const RUN_ACCOUNT: &str = "ksim-experiment-run";

const PACKED: &str = ksim_localenv::fixtures::PACKING_SCHEDULER_CONFIG;

const EXPERIMENT: &str = "\
trace: demo.ktrace
speed: 20
nodeGroups: [\"small=m5.yaml:4\"]
provisioning: instant
variants:
- name: baseline
- name: packed
  schedulerConfig: packed.yaml
";

/// The plane with `deploy/experiment/` applied, and an experiment's files.
struct Setup {
    plane: ControlPlane,
    kubectl: PathBuf,
    dir: tempfile::TempDir,
    /// Kubeconfigs that act as the experimenter and as the runs' account.
    experimenter: PathBuf,
    run_account: PathBuf,
}

impl Setup {
    async fn start() -> Self {
        let plane = ControlPlane::start().await.unwrap();
        let kubectl = ControlPlaneBinaries::locate().unwrap().kubectl().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/experiment");
        let applied = Command::new(&kubectl)
            .args(["apply", "-k"])
            .arg(&deploy)
            .env("KUBECONFIG", plane.kubeconfig_path())
            .output()
            .unwrap();
        assert!(applied.status.success(), "{}", text(&applied.stderr));
        let experimenter = impersonating(&plane, dir.path(), EXPERIMENTER);
        let run_account = impersonating(&plane, dir.path(), RUN_ACCOUNT);

        let written = Command::new(ksim_e2e::binary("ksim"))
            .args(["demo", "--write-trace"])
            .arg(dir.path().join("demo.ktrace"))
            .output()
            .unwrap();
        assert!(written.status.success(), "{}", text(&written.stderr));
        std::fs::write(
            dir.path().join("m5.yaml"),
            ksim_localenv::fixtures::M5_LARGE_SKELETON,
        )
        .unwrap();
        std::fs::write(dir.path().join("packed.yaml"), PACKED).unwrap();
        std::fs::write(dir.path().join("experiment.yaml"), EXPERIMENT).unwrap();
        Self {
            plane,
            kubectl,
            dir,
            experimenter,
            run_account,
        }
    }

    fn file(&self) -> String {
        self.dir
            .path()
            .join("experiment.yaml")
            .display()
            .to_string()
    }

    /// `ksim experiment run -f FILE --cluster --kubeconfig KUBECONFIG ARGS`.
    fn command(&self, kubeconfig: &Path, args: &[&str]) -> Command {
        let mut command = Command::new(ksim_e2e::binary("ksim"));
        command
            .args([
                "experiment",
                "run",
                "-f",
                &self.file(),
                "--cluster",
                "--kubeconfig",
            ])
            .arg(kubeconfig)
            .args(args)
            .stdin(Stdio::null());
        command
    }

    /// Nothing of any experiment is left on the cluster.
    async fn nothing_left(&self) {
        let client = self.plane.client();
        let jobs: Api<Job> = Api::all(client.clone());
        let left: Vec<String> = jobs
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|job| job.metadata.name)
            .collect();
        assert!(left.is_empty(), "Jobs left: {left:?}");
        let maps: Api<ConfigMap> = Api::all(client);
        let left = maps
            .list(&ListParams::default().labels("ksim.dev/experiment"))
            .await
            .unwrap()
            .items;
        assert!(left.is_empty(), "{} ConfigMaps left", left.len());
    }
}

/// A kubeconfig of the plane's admin that acts as the ServiceAccount `account` of the
/// experiment namespace (impersonation, as the plane's own tests of RBAC do).
fn impersonating(plane: &ControlPlane, dir: &Path, account: &str) -> PathBuf {
    let mut config = kube::config::Kubeconfig::read_from(plane.kubeconfig_path()).unwrap();
    for named in &mut config.auth_infos {
        let info = named.auth_info.as_mut().unwrap();
        info.impersonate = Some(format!("system:serviceaccount:{NAMESPACE}:{account}"));
        info.impersonate_groups = Some(vec![
            "system:serviceaccounts".to_owned(),
            format!("system:serviceaccounts:{NAMESPACE}"),
        ]);
    }
    let path = dir.join(format!("{account}.kubeconfig"));
    // JSON is YAML: kubectl and kube read it alike.
    std::fs::write(&path, serde_json::to_vec(&config).unwrap()).unwrap();
    path
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The one line a refused command says on stderr, and that it failed.
fn refused(output: &std::process::Output) -> String {
    let said = text(&output.stderr);
    assert!(!output.status.success(), "{}{said}", text(&output.stdout));
    assert_eq!(said.trim_end().lines().count(), 1, "{said}");
    said
}

#[tokio::test(flavor = "multi_thread")]
async fn the_job_is_accepted_as_the_experimenter_and_bad_input_is_one_line_leaving_nothing() {
    let setup = Setup::start().await;
    let output_dir = setup.dir.path().join("results");
    let output_arg = output_dir.display().to_string();

    // The Job and the bundle, as the experimenter may create them: the server's dry run.
    let printed = setup
        .command(&setup.experimenter, &["--dry-run", "-o", &output_arg])
        .output()
        .unwrap();
    assert!(printed.status.success(), "{}", text(&printed.stderr));
    let manifests = text(&printed.stdout);
    assert!(manifests.contains("kind: Job"), "{manifests}");
    // Sized by the rule for at most 100 nodes (the demo's 4): 1,024 MiB and 160 a hundred nodes.
    assert!(manifests.contains("memory: 1184Mi"), "{manifests}");
    let mut apply = Command::new(&setup.kubectl)
        .args([
            "apply",
            "--dry-run=server",
            "-o",
            "name",
            "-n",
            NAMESPACE,
            "-f",
            "-",
        ])
        .env("KUBECONFIG", &setup.experimenter)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(apply.stdin.as_mut().unwrap(), manifests.as_bytes()).unwrap();
    drop(apply.stdin.take());
    let applied = apply.wait_with_output().unwrap();
    let names = text(&applied.stdout);
    assert!(applied.status.success(), "{}{names}", text(&applied.stderr));
    assert!(
        names
            .lines()
            .any(|l| l.starts_with("job.batch/ksim-experiment-")),
        "{names}"
    );
    assert!(
        names
            .lines()
            .any(|l| l.starts_with("configmap/ksim-experiment-")),
        "{names}"
    );
    // The run's pod would be admitted by the namespace's restricted Pod Security level.
    assert!(
        !text(&applied.stderr).contains("violate"),
        "{}",
        text(&applied.stderr)
    );

    // Refused before anything is created, one line each.
    let admin = setup.plane.kubeconfig_path().to_owned();
    let namespaces: Api<Namespace> = Api::all(setup.plane.client());
    let bare = serde_json::from_value(json!({ "metadata": { "name": "bare" } })).unwrap();
    namespaces
        .create(&PostParams::default(), &bare)
        .await
        .unwrap();
    let unreachable = setup.dir.path().join("unreachable.kubeconfig");
    let mut config = kube::config::Kubeconfig::read_from(&admin).unwrap();
    for named in &mut config.clusters {
        named.cluster.as_mut().unwrap().server = Some("https://127.0.0.1:1".to_owned());
    }
    std::fs::write(&unreachable, serde_json::to_vec(&config).unwrap()).unwrap();
    let cases: [(&Path, &[&str], &str); 4] = [
        (&unreachable, &[], "cannot reach the cluster"),
        (
            &admin,
            &["-n", "nowhere"],
            "namespace nowhere does not exist",
        ),
        (
            &setup.experimenter,
            &["-n", "default"],
            "no permission to look up Jobs in namespace default",
        ),
        (
            &admin,
            &["-n", "bare"],
            "namespace bare has no ServiceAccount ksim-experiment-run",
        ),
    ];
    for (kubeconfig, args, reason) in cases {
        let mut args = args.to_vec();
        args.extend(["-o", &output_arg]);
        let output = setup.command(kubeconfig, &args).output().unwrap();
        let said = refused(&output);
        assert!(said.contains(reason), "{reason}: {said}");
    }
    assert!(!output_dir.exists(), "an output directory was made");

    // An image that cannot be pulled stops the experiment at the first pod that says so, and
    // the Job goes with it. (The test is the kubelet: it reports the pull failure.)
    let running = setup
        .command(
            &setup.experimenter,
            &[
                "--image",
                "registry.invalid/ksim-run:none",
                "-o",
                &output_arg,
            ],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(setup.plane.client(), NAMESPACE);
    let pod = first_pod(&pods).await;
    let status = json!({ "status": { "phase": "Pending", "containerStatuses": [{
        "name": "run", "image": "registry.invalid/ksim-run:none", "imageID": "", "ready": false,
        "restartCount": 0,
        "state": { "waiting": { "reason": "ErrImagePull",
                                "message": "dial tcp: lookup registry.invalid: no such host" } } }] } });
    pods.patch_status(
        pod.metadata.name.as_deref().unwrap(),
        &PatchParams::default(),
        &Patch::Merge(&status),
    )
    .await
    .unwrap();
    refused_in_the_end(
        &setup,
        running,
        "the image registry.invalid/ksim-run:none cannot be pulled (ErrImagePull",
    )
    .await;

    // Ctrl-C while the runs wait deletes the Job and what it made, and says how to resume.
    // (First the garbage collector removes the pull test's pod, so the pod awaited is new.)
    let deadline = Instant::now() + Duration::from_secs(60);
    while !pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .is_empty()
    {
        assert!(Instant::now() < deadline, "the deleted Job's pod stayed");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let running = setup
        .command(&setup.experimenter, &["-o", &output_arg])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    first_pod(&pods).await;
    let signalled = Command::new("kill")
        .args(["-INT", &running.id().to_string()])
        .status()
        .unwrap();
    assert!(signalled.success());
    refused_in_the_end(
        &setup,
        running,
        "interrupted: the Job and its ConfigMaps are deleted; 0 of 2 reports are in",
    )
    .await;
}

/// A `ksim` started in the background ends refused, its one line saying `reason`, and leaves
/// nothing on the cluster.
async fn refused_in_the_end(setup: &Setup, running: Child, reason: &str) {
    let output = tokio::task::spawn_blocking(move || running.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let said = refused(&output);
    assert!(said.contains(reason), "{reason}: {said}");
    setup.nothing_left().await;
}

/// The first pod of the experiment's Job, once the Job controller has made it.
async fn first_pod(pods: &Api<Pod>) -> Pod {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(Instant::now() < deadline, "no pod of the Job appeared");
        let list = pods.list(&ListParams::default()).await.unwrap();
        if let Some(pod) = list.items.into_iter().next() {
            return pod;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The test's kubelet: each pod of the experiment's Job runs its container's command as a
/// process (as the runs' account, on ports of its own), and its status follows.
struct Kubelet {
    running: BTreeMap<String, Child>,
    done: BTreeSet<String>,
}

impl Kubelet {
    async fn tick(&mut self, setup: &Setup) {
        let pods: Api<Pod> = Api::namespaced(setup.plane.client(), NAMESPACE);
        for pod in pods.list(&ListParams::default()).await.unwrap().items {
            let name = pod.metadata.name.clone().unwrap();
            if self.running.contains_key(&name) || self.done.contains(&name) {
                continue;
            }
            let labels = pod.metadata.labels.clone().unwrap_or_default();
            let index = &pod.metadata.annotations.as_ref().unwrap()["batch.kubernetes.io/job-completion-index"];
            let container = &pod.spec.as_ref().unwrap().containers[0];
            let state = setup.dir.path().join(format!("state-{name}"));
            let child = Command::new(ksim_e2e::binary("ksim"))
                .args(container.args.as_ref().unwrap())
                .env("JOB_COMPLETION_INDEX", index)
                .env("KSIM_POD_NAMESPACE", NAMESPACE)
                .env("KSIM_JOB_NAME", &labels["batch.kubernetes.io/job-name"])
                .env(
                    "KSIM_JOB_UID",
                    &labels["batch.kubernetes.io/controller-uid"],
                )
                .env("KSIM_STATE_DIR", &state)
                .env("KSIM_PORT_BASE", ksim_e2e::port_base().to_string())
                .env("KSIM_KUBECONFIG", &setup.run_account)
                .stdin(Stdio::null())
                .stdout(std::fs::File::create(format!("{}.out", state.display())).unwrap())
                .stderr(std::fs::File::create(format!("{}.err", state.display())).unwrap())
                .spawn()
                .unwrap();
            set_phase(&pods, &name, "Running", None).await;
            self.running.insert(name, child);
        }
        let mut exited = Vec::new();
        for (name, child) in &mut self.running {
            if let Some(status) = child.try_wait().unwrap() {
                exited.push((name.clone(), status.code().unwrap_or(1)));
            }
        }
        for (name, code) in exited {
            self.running.remove(&name);
            let phase = if code == 0 { "Succeeded" } else { "Failed" };
            set_phase(&pods, &name, phase, Some(code)).await;
            self.done.insert(name);
        }
    }
}

/// A pod's status as its kubelet would write it.
async fn set_phase(pods: &Api<Pod>, name: &str, phase: &str, exit: Option<i32>) {
    let state = match exit {
        Some(code) => json!({ "terminated": { "exitCode": code, "reason":
            if code == 0 { "Completed" } else { "Error" } } }),
        None => json!({ "running": {} }),
    };
    let status = json!({ "status": { "phase": phase, "containerStatuses": [{
        "name": "run", "image": "ksim-run", "imageID": "", "ready": exit.is_none(),
        "restartCount": 0, "state": state }] } });
    // The CLI takes a report as soon as it is handed back and may delete the Job (and its pods)
    // before the run's process has been seen to exit: a pod already gone is no error.
    match pods
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
    {
        Ok(_) => {}
        Err(error) if ksim_kube::is_not_found(&error) => {}
        Err(error) => panic!("pod {name}: {error}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fanned_out_experiment_runs_each_run_in_its_pod_compares_them_and_resumes() {
    let setup = Setup::start().await;
    let output_dir = setup.dir.path().join("results");
    let output_arg = output_dir.display().to_string();
    let holds = "variants.baseline.failed == 0 && variants.packed.failed == 0";
    let args = ["--parallel", "2", "-o", &output_arg, "--assert", holds];
    let mut cli = setup
        .command(&setup.experimenter, &args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut kubelet = Kubelet {
        running: BTreeMap::new(),
        done: BTreeSet::new(),
    };
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        assert!(Instant::now() < deadline, "the experiment did not end");
        if cli.try_wait().unwrap().is_some() {
            break;
        }
        kubelet.tick(&setup).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let output = cli.wait_with_output().unwrap();
    let printed = text(&output.stdout);
    assert!(output.status.success(), "{printed}{}", text(&output.stderr));
    // The runs' processes end once they have handed their reports back and stopped their
    // environments; each pod's command ran once.
    while !kubelet.running.is_empty() {
        assert!(Instant::now() < deadline, "a run's process did not end");
        kubelet.tick(&setup).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(kubelet.done.len(), 2, "{printed}");
    assert!(printed.contains("2 of 2 runs on the cluster"), "{printed}");
    assert!(
        printed.contains(&format!("assert ok:     {holds}")),
        "{printed}"
    );
    // Each report is a whole run's, in the layout of a local experiment.
    for variant in ["baseline", "packed"] {
        let path = output_dir.join(variant).join("1").join("report.json");
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(report["complete"], true, "{report}");
        assert!(report["events_applied"].as_u64().unwrap() > 0, "{report}");
        assert_eq!(report["peak_nodes"], 4, "{report}");
    }
    let comparison = std::fs::read(output_dir.join("comparison.json")).unwrap();
    setup.nothing_left().await;

    // The same command again picks up both reports, runs nothing, and compares the same bytes.
    let again = setup.command(&setup.experimenter, &args).output().unwrap();
    let printed = text(&again.stdout);
    assert!(again.status.success(), "{printed}{}", text(&again.stderr));
    assert!(printed.contains("2 reports already in"), "{printed}");
    assert!(!printed.contains("runs on the cluster"), "{printed}");
    assert_eq!(
        std::fs::read(output_dir.join("comparison.json")).unwrap(),
        comparison
    );
    setup.nothing_left().await;
}
