//! What the pool's benchmarks share: starting a process to measure, reaching the pool, waiting
//! for nodes, and a process's CPU time and memory from /proc.
#![allow(dead_code)]

use std::{
    collections::HashMap,
    os::unix::process::CommandExt as _,
    path::Path,
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{Context as _, bail};
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Node;
use ksim_nodes::node::is_ready;
use ksim_proto::ksim::vnode::v1::virtual_node_pool_client::VirtualNodePoolClient;
use kube::{
    Api, Client,
    runtime::{WatchStreamExt, watcher},
};

/// Linux reports process CPU time in clock ticks of USER_HZ, which is 100 on every
/// mainstream kernel build.
/// The node every benchmark group is made of: big enough that pods, not nodes, run out.
pub const SKELETON: &str = r#"
kind: Node
metadata:
  labels: { node.kubernetes.io/instance-type: bench.32xlarge }
status:
  capacity: { cpu: "32", memory: 128Gi, pods: "110" }
"#;

const CLOCK_TICKS_PER_SECOND: f64 = 100.0;

/// A process under measurement, leading a process group of its own, killed whole on drop: a
/// wrapper would otherwise leave what it started running, and so would an error on the way.
#[derive(Debug)]
pub struct ProcessGroup(Child);

impl ProcessGroup {
    pub fn id(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        // SIGKILL to the group through kill(1): the workspace forbids `unsafe`.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.0.wait();
    }
}

/// Starts `binary` in a process group of its own, its output to `log`.
pub fn spawn(
    binary: &Path,
    args: &[String],
    kubeconfig: &Path,
    log: &Path,
) -> anyhow::Result<ProcessGroup> {
    let out = std::fs::File::create(log)?;
    Command::new(binary)
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .stdout(out.try_clone()?)
        .stderr(out)
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
        .map(ProcessGroup)
        .with_context(|| format!("starting {}", binary.display()))
}

pub async fn connect(
    addr: &str,
) -> anyhow::Result<VirtualNodePoolClient<tonic::transport::Channel>> {
    for _ in 0..100 {
        if let Ok(client) = VirtualNodePoolClient::connect(format!("http://{addr}")).await {
            return Ok(client);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bail!("ksim-vnode did not start listening on {addr}")
}

pub async fn wait_nodes_ready(client: &Client, selector: &str, count: usize) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut ready: HashMap<String, bool> = HashMap::new();
    let mut events =
        Box::pin(watcher(nodes, watcher::Config::default().labels(selector)).applied_objects());
    while let Some(node) = events.try_next().await? {
        ready.insert(
            node.metadata.name.clone().unwrap_or_default(),
            is_ready(&node),
        );
        if ready.values().filter(|r| **r).count() >= count {
            return Ok(());
        }
    }
    bail!("node watch ended")
}

/// CPU seconds (user + system), peak and current resident memory of a process, from /proc.
pub fn process_usage(pid: u32) -> anyhow::Result<(f64, f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let after_name = stat.rsplit_once(')').context("malformed stat")?.1;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>()? + fields[12].parse::<f64>()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib = |field: &str| -> anyhow::Result<f64> {
        status
            .lines()
            .find_map(|line| line.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .with_context(|| format!("no {field} in /proc/{pid}/status"))
    };
    Ok((
        ticks / CLOCK_TICKS_PER_SECOND,
        kib("VmHWM:")? / 1024.0,
        kib("VmRSS:")? / 1024.0,
    ))
}
