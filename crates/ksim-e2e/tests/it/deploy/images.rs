//! `deploy/images/build.sh` builds every image, and each runs: non-root, from scratch, its
//! labels set; every service serves gRPC health and reflection from its container, and the
//! pool's registers virtual nodes with the real control plane.
//!
//! Containers run under podman with runc and cgroupfs and explicit ulimits, which is what works
//! on these machines (crun fails on their hybrid cgroups; a nofile limit over the hard limit
//! is refused). The images are built from this test build's binaries (`--binaries`), so the
//! test needs no release build; their layout is the release images'.

use std::{
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Command, Output},
    time::Duration,
};

use k8s_openapi::api::core::v1::{Namespace, Node};
use ksim_localenv::{ControlPlane, wait};
use ksim_proto::ksim::vnode::v1::{
    CreateNodeGroupRequest, virtual_node_pool_client::VirtualNodePoolClient,
};
use kube::{
    Api,
    api::{ListParams, PostParams},
};
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};
use tonic_reflection::pb::v1alpha::{
    ServerReflectionRequest, server_reflection_client::ServerReflectionClient,
    server_reflection_request::MessageRequest, server_reflection_response::MessageResponse,
};

const DEADLINE: Duration = Duration::from_secs(90);
const SKELETON: &str = ksim_localenv::fixtures::M5_LARGE_SKELETON;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(command: &mut Command) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Removes the test's containers and images, however the test ends.
struct Cleanup {
    containers: Vec<String>,
    images: Vec<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for container in &self.containers {
            let _ = Command::new("podman")
                .args(["rm", "-f", container])
                .output();
        }
        for image in &self.images {
            let _ = Command::new("podman").args(["rmi", "-f", image]).output();
        }
    }
}

/// `podman run` as these machines need it: runc, cgroupfs, ulimits within the hard limits.
fn podman_run() -> Command {
    let hard = run(Command::new("sh").args(["-c", "ulimit -Hn"]));
    let nofile = String::from_utf8_lossy(&hard.stdout).trim().to_owned();
    let mut command = Command::new("podman");
    command.args([
        "run",
        "--runtime",
        "runc",
        "--cgroup-manager=cgroupfs",
        "--ulimit",
        &format!("nofile={nofile}:{nofile}"),
        "--ulimit",
        "nproc=4096:4096",
    ]);
    command
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The admin kubeconfig and its certificates in `dir`, readable by the images' user, as the
/// containers see them at /etc/ksim.
fn portable_kubeconfig(plane: &ControlPlane, dir: &Path) {
    let text = std::fs::read_to_string(plane.kubeconfig_path()).unwrap();
    let mut moved = String::new();
    for line in text.lines() {
        let file = [
            "certificate-authority: ",
            "client-certificate: ",
            "client-key: ",
        ]
        .iter()
        .find_map(|key| {
            let (indent, path) = line.split_once(key)?;
            let path = Path::new(path.trim());
            let file = path.file_name()?.to_str()?.to_owned();
            std::fs::copy(path, dir.join(&file)).unwrap();
            Some(format!("{indent}{key}/etc/ksim/{file}"))
        });
        moved.push_str(&file.unwrap_or_else(|| line.to_owned()));
        moved.push('\n');
    }
    std::fs::write(dir.join("kubeconfig"), moved).unwrap();
    run(Command::new("chmod").args(["-R", "a+rX"]).arg(dir));
}

async fn serving(port: u16, service: &str) -> Result<(), String> {
    let endpoint = format!("http://127.0.0.1:{port}");
    let channel = tonic::transport::Endpoint::from_shared(endpoint)
        .map_err(|e| e.to_string())?
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    let status = HealthClient::new(channel.clone())
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .map_err(|e| e.to_string())?
        .into_inner()
        .status();
    if status != ServingStatus::Serving {
        return Err(format!("health says {status:?}"));
    }
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut answers = ServerReflectionClient::new(channel)
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .map_err(|e| e.to_string())?
        .into_inner();
    let answer = answers
        .message()
        .await
        .map_err(|e| e.to_string())?
        .ok_or("no reflection answer")?;
    let Some(MessageResponse::ListServicesResponse(list)) = answer.message_response else {
        return Err(format!("unexpected reflection answer {answer:?}"));
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    if names.iter().any(|name| name == service) {
        Ok(())
    } else {
        Err(format!("reflection lists {names:?}, not {service}"))
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_image_builds_and_runs_as_non_root_serving_health_and_reflection() {
    for tool in ["buildah", "skopeo", "podman", "runc"] {
        assert!(
            Command::new(tool).arg("--version").output().is_ok(),
            "{tool} is not installed (deploy/test.sh installs it: apt-get install buildah skopeo \
             podman runc)"
        );
    }
    let binaries = ksim_e2e::binary("ksim");
    let binaries = binaries.parent().unwrap();
    let tag = format!("e2e-{}", std::process::id());
    let out = tempfile::tempdir().unwrap();
    // ksim-run has a test of its own (below): building it takes the control plane.
    let images = [
        "ksim-tracer",
        "ksim-vnode",
        "ksim-cloudprov",
        "ksim-driver",
        "ksim",
    ];
    let mut cleanup = Cleanup {
        containers: Vec::new(),
        images: images
            .iter()
            .map(|image| format!("docker.io/ksim/{image}:{tag}"))
            .collect(),
    };
    let built = run(Command::new(repo().join("deploy/images/build.sh"))
        .args(["--tag", &tag, "--binaries"])
        .arg(binaries)
        .arg("--out")
        .arg(out.path())
        .args(images));
    let printed = String::from_utf8_lossy(&built.stdout);
    eprintln!("{printed}");
    assert_eq!(printed.lines().count(), images.len(), "{printed}");

    // Every image: its config, read back from the OCI archive the script wrote.
    for image in images {
        let archive = out.path().join(format!("{image}.oci.tar"));
        let inspected = run(Command::new("skopeo")
            .args(["inspect", "--config"])
            .arg(format!("oci-archive:{}", archive.display())));
        let config: serde_json::Value = serde_json::from_slice(&inspected.stdout).unwrap();
        let config = &config["config"];
        assert_eq!(config["User"], "65532:65532", "{image}: {config}");
        assert_eq!(
            config["Entrypoint"],
            serde_json::json!([format!("/usr/local/bin/{image}")]),
            "{image}"
        );
        let labels = &config["Labels"];
        assert_eq!(labels["org.opencontainers.image.title"], image);
        assert_eq!(
            labels["org.opencontainers.image.version"],
            env!("CARGO_PKG_VERSION")
        );
        assert!(
            labels["org.opencontainers.image.source"]
                .as_str()
                .is_some_and(|s| s.starts_with("https://")),
            "{labels}"
        );
    }
    let name = |image: &str| format!("docker.io/ksim/{image}:{tag}");
    let version = run(podman_run().args(["--rm", &name("ksim"), "--version"]));
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("ksim {}", env!("CARGO_PKG_VERSION"))
    );

    // The services, each in its container on the host's network, against the real plane.
    let plane = ControlPlane::start().await.unwrap();
    let namespaces: Api<Namespace> = Api::all(plane.client());
    let namespace = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "ksim-system" }
    }))
    .unwrap();
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    let config_dir = tempfile::tempdir().unwrap();
    portable_kubeconfig(&plane, config_dir.path());
    let pool_port = free_port();
    let services = [
        (
            "ksim-vnode",
            "ksim.vnode.v1.VirtualNodePool",
            vec!["--namespace".to_owned(), "ksim-system".to_owned()],
        ),
        (
            "ksim-tracer",
            "ksim.trace.v1.TraceStore",
            vec!["--data-dir".to_owned(), "/tmp/data".to_owned()],
        ),
        (
            "ksim-cloudprov",
            "clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider",
            vec![],
        ),
        (
            "ksim-driver",
            "ksim.driver.v1.Driver",
            vec![
                "--pool-url".to_owned(),
                format!("http://127.0.0.1:{pool_port}"),
                "--report-dir".to_owned(),
                "/tmp/reports".to_owned(),
            ],
        ),
    ];
    let mut ports = Vec::new();
    for (image, service, args) in &services {
        let port = if *image == "ksim-vnode" {
            pool_port
        } else {
            free_port()
        };
        let container = format!("ksim-e2e-{image}-{}", std::process::id());
        cleanup.containers.push(container.clone());
        run(podman_run()
            .args(["-d", "--name", &container, "--network", "host", "-v"])
            .arg(format!("{}:/etc/ksim:ro", config_dir.path().display()))
            .arg(name(image))
            .arg(format!("--grpc-addr=127.0.0.1:{port}"))
            .arg(format!("--admin-addr=127.0.0.1:{}", free_port()))
            .arg("--kubeconfig=/etc/ksim/kubeconfig")
            .args(args));
        ports.push((container, port, *service));
    }
    for (container, port, service) in &ports {
        let served = wait::until(service, DEADLINE, || serving(*port, service)).await;
        if let Err(error) = served {
            let logs = Command::new("podman").args(["logs", container]).output();
            panic!(
                "{error}; its log: {}",
                logs.map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                    .unwrap_or_default()
            );
        }
    }

    // The pool's container registers virtual nodes that turn Ready.
    let mut pool = VirtualNodePoolClient::connect(format!("http://127.0.0.1:{pool_port}"))
        .await
        .unwrap();
    pool.create_node_group(CreateNodeGroupRequest {
        name: "image".to_owned(),
        node_skeleton_yaml: SKELETON.to_owned(),
        count: 2,
        provisioning_json: String::new(),
    })
    .await
    .unwrap();
    let nodes: Api<Node> = Api::all(plane.client());
    wait::until(
        "two Ready nodes of the pool's container",
        DEADLINE,
        || async {
            let listed = nodes
                .list(&ListParams::default().labels("ksim.io/node-group=image"))
                .await
                .map_err(|e| e.to_string())?;
            let ready = listed
                .items
                .iter()
                .filter(|node| {
                    node.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
                })
                .count();
            if ready == 2 {
                Ok(())
            } else {
                Err(format!("{ready} of 2 Ready"))
            }
        },
    )
    .await
    .unwrap();
    drop(cleanup);
}

const EXPERIMENT: &str = "\
trace: demo.ktrace
speed: 20
nodeGroups: [\"small=m5.yaml:4\"]
provisioning: instant
variants:
- name: baseline
- name: spread
  speed: 10
";

/// Every key path of a JSON value (arrays by their first element), for comparing shapes.
fn shape(value: &serde_json::Value, at: &str, into: &mut std::collections::BTreeSet<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, value) in map {
                let path = format!("{at}.{key}");
                into.insert(path.clone());
                shape(value, &path, into);
            }
        }
        serde_json::Value::Array(items) => {
            if let Some(first) = items.first() {
                shape(first, &format!("{at}[]"), into);
            }
        }
        _ => {}
    }
}

/// ksim-run holds a whole simulation: in a container on a network of its own (podman's default,
/// as a pod's; kube-apiserver needs a default route to choose its address), with no
/// capabilities and a read-only root, as user 65532, it starts its own control plane and services, runs one run of
/// an experiment, and writes a report shaped as the same run's outside a container.
#[tokio::test(flavor = "multi_thread")]
async fn the_run_image_runs_one_run_of_the_demo_trace_unprivileged() {
    let binaries = ksim_e2e::binary("ksim");
    let binaries = binaries.parent().unwrap();
    let tag = format!("e2e-run-{}", std::process::id());
    let out = tempfile::tempdir().unwrap();
    let image = format!("docker.io/ksim/ksim-run:{tag}");
    let container = format!("ksim-e2e-run-{}", std::process::id());
    let _cleanup = Cleanup {
        containers: vec![container.clone()],
        images: vec![image.clone()],
    };
    let built = run(Command::new(repo().join("deploy/images/build.sh"))
        .args(["--tag", &tag, "--binaries"])
        .arg(binaries)
        .arg("--out")
        .arg(out.path())
        .arg("ksim-run"));
    eprintln!("{}", String::from_utf8_lossy(&built.stdout));
    let inspected = run(Command::new("skopeo")
        .args(["inspect", "--config"])
        .arg(format!(
            "oci-archive:{}",
            out.path().join("ksim-run.oci.tar").display()
        )));
    let config: serde_json::Value = serde_json::from_slice(&inspected.stdout).unwrap();
    let config = &config["config"];
    assert_eq!(config["User"], "65532:65532", "{config}");
    assert_eq!(
        config["Entrypoint"],
        serde_json::json!(["/usr/local/bin/ksim"])
    );
    let env: Vec<&str> = config["Env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e.as_str())
        .collect();
    assert!(
        env.contains(&"KSIM_CONTROL_PLANE_BIN_DIR=/opt/ksim/control-plane"),
        "{env:?}"
    );

    // The experiment's files, read-only; the report goes to a directory the image's user may
    // write.
    let files = tempfile::tempdir().unwrap();
    let written = Command::new(ksim_e2e::binary("ksim"))
        .args(["demo", "--write-trace"])
        .arg(files.path().join("demo.ktrace"))
        .output()
        .unwrap();
    assert!(written.status.success());
    std::fs::write(files.path().join("m5.yaml"), SKELETON).unwrap();
    std::fs::write(files.path().join("experiment.yaml"), EXPERIMENT).unwrap();
    let reports = tempfile::tempdir().unwrap();
    run(Command::new("chmod")
        .args(["-R", "a+rwX"])
        .arg(files.path())
        .arg(reports.path()));
    let contained = podman_run()
        .args([
            "--rm",
            "--name",
            &container,
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "--read-only",
            "--tmpfs",
            "/tmp:rw,exec,size=2g",
            // etcd's data lives on /dev/shm, which is 64 MiB in a container by default: less
            // than its first WAL file. The Job's pods mount a memory emptyDir there.
            "--shm-size",
            "1g",
            "-v",
        ])
        .arg(format!("{}:/experiment:ro", files.path().display()))
        .arg("-v")
        .arg(format!("{}:/reports", reports.path().display()))
        .args([
            image.as_str(),
            "experiment",
            "run-one",
            "-f",
            "/experiment/experiment.yaml",
            "--index",
            "1",
            "--report",
            "/reports/report.json",
        ])
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&contained.stdout);
    assert!(
        contained.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&contained.stderr)
    );
    assert!(
        printed.contains("run 1 (variant spread, repeat 1 of 1)"),
        "{printed}"
    );
    let in_container: serde_json::Value =
        serde_json::from_slice(&std::fs::read(reports.path().join("report.json")).unwrap())
            .unwrap();

    // The same run on this machine, outside a container.
    let host_report = reports.path().join("host.json");
    let state = tempfile::tempdir().unwrap();
    let outside = Command::new(ksim_e2e::binary("ksim"))
        .args(["experiment", "run-one", "-f"])
        .arg(files.path().join("experiment.yaml"))
        .args(["--index", "1", "--report"])
        .arg(&host_report)
        .env("KSIM_STATE_DIR", state.path())
        .env("KSIM_PORT_BASE", ksim_e2e::port_base().to_string())
        .output()
        .unwrap();
    assert!(
        outside.status.success(),
        "{}",
        String::from_utf8_lossy(&outside.stderr)
    );
    let on_host: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&host_report).unwrap()).unwrap();
    for report in [&in_container, &on_host] {
        assert_eq!(report["complete"], true, "{report}");
        assert_eq!(report["peak_nodes"], 4);
        assert_eq!(report["speed"], 10.0);
    }
    assert_eq!(in_container["events_applied"], on_host["events_applied"]);
    let (mut inside_shape, mut host_shape) = Default::default();
    shape(&in_container, "", &mut inside_shape);
    shape(&on_host, "", &mut host_shape);
    assert_eq!(inside_shape, host_shape);
}
