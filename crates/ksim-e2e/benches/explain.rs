//! What ksim-scheduler's explain layer costs: the scheduling throughput of a burst of pods on
//! 1,000 ready Nodes with the stock kube-scheduler and with ksim-scheduler explaining no pod, a
//! tenth of them and every one, side by side in one run; and the size of the explanations it
//! writes. Prints figures; asserts no timing.
//!
//!   cargo bench -p ksim-e2e --bench explain
//!   cargo bench -p ksim-e2e --bench explain -- --nodes 100 --pods 500 --repeats 1   # small
//!
//! Every run has a fresh control plane without kube-controller-manager ([`Tuning::simulation`]:
//! the scheduler's client at 5,000 QPS) and `--nodes` Node objects created through the API
//! (8 CPU, 32Gi, 110 pods, Ready, the apiserver's not-ready taint removed; no kubelet). Then
//! `--pods` bare pods (100m, 128Mi) are created, at most `--in-flight` at a time, in groups of
//! `--owner-pods` under a made-up ReplicaSet (an ownerReference with controller=true, in every
//! variant; nothing collects them without the controller manager). Throughput is the pods over
//! the time from the first create to the last pod a watch sees bound. The variants:
//!
//! - `stock`: the stock kube-scheduler, pods without annotation;
//! - `off`: ksim-scheduler, pods without annotation;
//! - `sampled`: ksim-scheduler, every pod `ksim.dev/explain: "10"`: 10 explained per owner;
//! - `on`: ksim-scheduler, every pod `ksim.dev/explain: all`.
//!
//! The variants run interleaved `--repeats` times (stock, off, sampled, on; then off, sampled,
//! on, stock; ...); the table has each one's median and its ratio to `stock`. The explanations
//! are written after the binding, asynchronously: each run waits for as many as were asked
//! for, then checks that exactly the pods asked for have one, naming the node each is bound
//! to, and sizes them.
//! A missing, extra or wrong explanation, or one the scheduler logged as dropped, fails the
//! bench (a panic listing them) after the table is printed.
//!
//! Needs KSIM_CONTROL_PLANE_BIN_DIR (deploy/control-plane/build.sh: ksim-scheduler beside the
//! stock binaries) or ~/.cache/ksim/k8s-<version>/bin.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use clap::Parser;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use ksim_localenv::ControlPlane;
use kube::{
    Api, Client,
    api::{ListParams, PostParams},
    runtime::watcher,
};
use serde_json::{Value, json};

const NAMESPACE: &str = "default";
const EXPLAIN: &str = "ksim.dev/explain";
const EXPLANATION: &str = "ksim.dev/scheduling-explanation";
/// The scheduler's process name in the control plane, whichever binary runs as it.
const SCHEDULER: &str = "kube-scheduler";
/// The wait for the pods bound fails when none more was bound for this long.
const BIND_STALL: Duration = Duration::from_secs(120);
/// The wait for the explanations fails when none more was written for this long: the writer
/// writes hundreds a second.
const EXPLAIN_STALL: Duration = Duration::from_secs(30);
/// After the explanations asked for: how long more a late, unasked-for one may take to show.
const SETTLE: Duration = Duration::from_secs(2);
/// Linux reports CPU time in USER_HZ ticks, 100 a second on every mainstream kernel build.
const CLOCK_TICKS_PER_SECOND: f64 = 100.0;

/// Scheduling throughput with and without ksim-scheduler's explanations, and their size.
#[derive(Debug, Parser)]
#[command(name = "explain")]
struct Args {
    /// Ready Node objects (8 CPU, 32Gi, 110 pods each) in every run.
    #[arg(long, default_value_t = 1000)]
    nodes: usize,
    /// Pods created in each run's burst (100m CPU, 128Mi each).
    #[arg(long, default_value_t = 2000)]
    pods: usize,
    /// Creates in flight at once.
    #[arg(long, default_value_t = 64)]
    in_flight: usize,
    /// Pods under one made-up ReplicaSet.
    #[arg(long, default_value_t = 100)]
    owner_pods: usize,
    /// Pods explained per owner in the `sampled` variant (its `ksim.dev/explain` value).
    #[arg(long, default_value_t = 10)]
    sample: usize,
    /// Runs of every variant, interleaved.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Variants to run, in this order in the first repeat (each next repeat starts one later).
    #[arg(long, value_delimiter = ',', default_value = "stock,off,sampled,on")]
    variants: Vec<Variant>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Variant {
    Stock,
    Off,
    Sampled,
    On,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Self::Stock => "stock",
            Self::Off => "off",
            Self::Sampled => "sampled",
            Self::On => "on",
        }
    }

    fn scheduler(self) -> &'static str {
        match self {
            Self::Stock => "kube-scheduler",
            _ => "ksim-scheduler",
        }
    }

    /// The pods' `ksim.dev/explain` value, if they have one.
    fn annotation(self, args: &Args) -> Option<String> {
        match self {
            Self::Stock | Self::Off => None,
            Self::Sampled => Some(args.sample.to_string()),
            Self::On => Some("all".to_owned()),
        }
    }

    /// Pods whose explanation the run asks for: all, or `--sample` of each owner's.
    fn expected(self, args: &Args) -> usize {
        match self {
            Self::Stock | Self::Off => 0,
            Self::On => args.pods,
            Self::Sampled => (0..args.pods)
                .step_by(args.owner_pods)
                .map(|first| (args.pods - first).min(args.owner_pods).min(args.sample))
                .sum(),
        }
    }
}

/// One run's figures.
#[derive(Debug)]
struct Run {
    variant: Variant,
    pods_per_second: f64,
    /// From the first create to the last create answered; to the last pod bound; to the first
    /// and the last explanation seen.
    created_seconds: f64,
    bound_seconds: f64,
    explained_seconds: Option<(f64, f64)>,
    /// The bytes of each explanation.
    sizes: Vec<usize>,
    /// CPU seconds from the burst to the last explanation (or binding).
    scheduler_cpu: f64,
    apiserver_cpu: f64,
    /// The scheduler's log lines: explanations dropped (its queue full) and not written.
    dropped: usize,
    not_written: usize,
}

/// What the pod watch has seen: when each pod was first seen bound and explained.
#[derive(Debug, Default)]
struct Seen {
    bound: HashMap<String, Instant>,
    explained: HashMap<String, Instant>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(
        args.nodes >= 1 && args.pods >= 1 && args.in_flight >= 1 && args.owner_pods >= 1,
        "--nodes, --pods, --in-flight and --owner-pods must be at least 1"
    );
    anyhow::ensure!(
        args.pods <= args.nodes * 80,
        "--pods must fit the nodes' CPU (80 pods of 100m a node)"
    );
    println!(
        "control plane {}; {} nodes, {} pods a run ({} in flight, {} per owner), {} repeat(s) of {:?}",
        ksim_localenv::kubernetes_version(),
        args.nodes,
        args.pods,
        args.in_flight,
        args.owner_pods,
        args.repeats,
        args.variants.iter().map(|v| v.name()).collect::<Vec<_>>(),
    );
    let mut runs = Vec::new();
    let mut problems = Vec::new();
    for repeat in 1..=args.repeats {
        // Each repeat starts one variant later, so none is always first (or after the same one).
        let mut order = args.variants.clone();
        let shift = (repeat - 1) % order.len().max(1);
        order.rotate_left(shift);
        for variant in order {
            let run = run(&args, variant, &mut problems).await;
            println!(
                "repeat {repeat} {:<8} {:>7.1} pods/s  created in {:.2} s, bound in {:.2} s, \
                 {} explained{}; CPU-s scheduler {:.1}, apiserver {:.1}",
                variant.name(),
                run.pods_per_second,
                run.created_seconds,
                run.bound_seconds,
                run.sizes.len(),
                run.explained_seconds
                    .map(|(first, last)| format!(" from {first:.2} s to {last:.2} s"))
                    .unwrap_or_default(),
                run.scheduler_cpu,
                run.apiserver_cpu,
            );
            runs.push(run);
        }
    }
    print_table(&args, &runs);
    assert!(
        problems.is_empty(),
        "the explanations are not as asked for:\n  {}",
        problems.join("\n  ")
    );
    Ok(())
}

/// One variant on a fresh control plane; what is wrong with its explanations goes to `problems`.
async fn run(args: &Args, variant: Variant, problems: &mut Vec<String>) -> Run {
    let builder = ControlPlane::builder().without_controller_manager();
    let builder = match variant {
        Variant::Stock => builder.stock_scheduler(),
        _ => builder,
    };
    let plane = builder.start().await.expect("the control plane starts");
    let client = plane.client();
    create_service_account(&client).await;
    create_nodes(&client, args).await;

    let seen = Arc::new(Mutex::new(Seen::default()));
    let watch = watch_pods(client.clone(), seen.clone()).await;
    let cpu_before = cpu(&plane);

    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let annotation = variant.annotation(args);
    let start = Instant::now();
    stream::iter(0..args.pods)
        .for_each_concurrent(args.in_flight, |i| {
            let pods = pods.clone();
            let pod = pod(i, args.owner_pods, annotation.as_deref());
            async move {
                pods.create(&PostParams::default(), &pod)
                    .await
                    .unwrap_or_else(|e| panic!("creating pod {i}: {e}"));
            }
        })
        .await;
    let created_seconds = start.elapsed().as_secs_f64();

    let last_bound = wait_for(&seen, args.pods, "pods bound", BIND_STALL, |seen| {
        &seen.bound
    })
    .await
    .unwrap_or_else(|waited| panic!("{} ({})", waited, variant.name()));
    let bound_seconds = last_bound.duration_since(start).as_secs_f64();

    let expected = variant.expected(args);
    let waited = wait_for(&seen, expected, "explanations", EXPLAIN_STALL, |seen| {
        &seen.explained
    })
    .await;
    if let Err(waited) = waited {
        problems.push(format!("{}: {waited}", variant.name()));
    }
    let explained_seconds = {
        let seen = seen.lock().unwrap();
        let since = |at: Option<&Instant>| at.map(|at| at.duration_since(start).as_secs_f64());
        since(seen.explained.values().min()).zip(since(seen.explained.values().max()))
    };
    let cpu_after = cpu(&plane);
    tokio::time::sleep(SETTLE).await;
    watch.abort();

    let sizes = check_explanations(&pods, variant, expected, problems).await;
    let log = plane
        .log_path(SCHEDULER)
        .map(|path| std::fs::read_to_string(path).expect("the scheduler's log reads"))
        .unwrap_or_default();
    let dropped = log.matches("explanation dropped").count();
    let not_written = log.matches("explanation not written").count();
    if dropped + not_written > 0 {
        problems.push(format!(
            "{}: the scheduler logged {dropped} explanations dropped and {not_written} not written",
            variant.name()
        ));
    }
    Run {
        variant,
        pods_per_second: args.pods as f64 / bound_seconds,
        created_seconds,
        bound_seconds,
        explained_seconds,
        sizes,
        scheduler_cpu: cpu_after.0 - cpu_before.0,
        apiserver_cpu: cpu_after.1 - cpu_before.1,
        dropped,
        not_written,
    }
}

/// Without the controller manager, nothing makes the namespace's service account pods need.
async fn create_service_account(client: &Client) {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), NAMESPACE);
    let account: ServiceAccount =
        serde_json::from_value(json!({ "metadata": { "name": "default" } })).unwrap();
    accounts
        .create(&PostParams::default(), &account)
        .await
        .expect("the default ServiceAccount is created");
}

/// `--nodes` ready Nodes without taints, checked by a list; then a moment for the scheduler's
/// informers to see the last of them.
async fn create_nodes(client: &Client, args: &Args) {
    let nodes: Api<Node> = Api::all(client.clone());
    stream::iter(0..args.nodes)
        .for_each_concurrent(args.in_flight, |i| {
            let client = client.clone();
            async move {
                let name = format!("node-{i:05}");
                let capacity = [("cpu", "8"), ("memory", "32Gi"), ("pods", "110")];
                // No controller manager lifts the apiserver's not-ready taint: none instead.
                ksim_localenv::nodes::create_ready_node(&client, &name, &capacity, Some(json!([])))
                    .await
                    .unwrap_or_else(|e| panic!("creating node {name}: {e}"));
            }
        })
        .await;
    let listed = nodes.list(&ListParams::default()).await.unwrap();
    let ready = listed
        .items
        .iter()
        .filter(|node| {
            let spec = node.spec.clone().unwrap_or_default();
            let status = node.status.clone().unwrap_or_default();
            spec.taints.unwrap_or_default().is_empty()
                && status
                    .allocatable
                    .unwrap_or_default()
                    .get("cpu")
                    .is_some_and(|cpu| cpu.0 == "8")
                && ksim_nodes::node::is_ready(node)
        })
        .count();
    assert_eq!(
        ready,
        args.nodes,
        "nodes ready, untainted, with 8 CPU of {} listed",
        listed.items.len()
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
}

/// Pod `i`: 100m and 128Mi, under the made-up ReplicaSet of its group, asking for an
/// explanation if `explain` says so.
fn pod(i: usize, owner_pods: usize, explain: Option<&str>) -> Pod {
    let group = i / owner_pods;
    let mut pod = json!({
        "metadata": {
            "name": format!("pod-{i:05}"),
            "namespace": NAMESPACE,
            "labels": { "app": format!("web-{group}") },
            "ownerReferences": [{
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": format!("web-{group}"),
                "uid": format!("00000000-0000-4000-8000-{group:012}"),
                "controller": true,
            }],
        },
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "app",
                "image": "registry.example/web:1",
                "resources": { "requests": { "cpu": "100m", "memory": "128Mi" } },
            }],
        },
    });
    if let Some(value) = explain {
        pod["metadata"]["annotations"] = json!({ EXPLAIN: value });
    }
    serde_json::from_value(pod).unwrap()
}

/// Starts a watch of the namespace's pods and returns once its initial list is read, so every
/// pod created after is seen; its task records when each pod is first seen bound and explained.
async fn watch_pods(client: Client, seen: Arc<Mutex<Seen>>) -> tokio::task::JoinHandle<()> {
    let mut events = Box::pin(watcher(
        Api::<Pod>::namespaced(client, NAMESPACE),
        watcher::Config::default(),
    ));
    while let Some(event) = events.try_next().await.expect("the pod watch") {
        if matches!(event, watcher::Event::InitDone) {
            break;
        }
    }
    tokio::spawn(async move {
        while let Some(event) = events.try_next().await.expect("the pod watch") {
            let (watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) = event else {
                continue;
            };
            let now = Instant::now();
            let name = pod.metadata.name.clone().unwrap_or_default();
            let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_ref());
            let explained = pod
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(EXPLANATION));
            let mut seen = seen.lock().unwrap();
            if bound.is_some() {
                seen.bound.entry(name.clone()).or_insert(now);
            }
            if explained {
                seen.explained.entry(name).or_insert(now);
            }
        }
    })
}

/// Waits until `count` pods are in the watch's `which` record; returns when the last was
/// seen, or what was seen when none was added for `stall`.
async fn wait_for(
    seen: &Mutex<Seen>,
    count: usize,
    what: &str,
    stall: Duration,
    which: impl Fn(&Seen) -> &HashMap<String, Instant>,
) -> Result<Instant, String> {
    let mut last = (0, Instant::now());
    loop {
        {
            let seen = seen.lock().unwrap();
            let record = which(&seen);
            if record.len() >= count {
                return Ok(record.values().max().copied().unwrap_or_else(Instant::now));
            }
            if record.len() != last.0 {
                last = (record.len(), Instant::now());
            }
        }
        if last.1.elapsed() > stall {
            return Err(format!(
                "{what}: {} of {count} after none more for {} s",
                last.0,
                stall.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Lists the pods: every one bound, exactly `expected` explained (the variant's pods asking
/// for one), each explanation JSON whose last attempt names the pod's node. Returns the
/// explanations' sizes in bytes.
async fn check_explanations(
    pods: &Api<Pod>,
    variant: Variant,
    expected: usize,
    problems: &mut Vec<String>,
) -> Vec<usize> {
    let listed = pods.list(&ListParams::default()).await.unwrap();
    let mut sizes = Vec::new();
    let mut wrong = Vec::new();
    for pod in &listed.items {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        let node = node.unwrap_or_else(|| panic!("{}: pod {name} not bound", variant.name()));
        let Some(text) = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(EXPLANATION))
        else {
            continue;
        };
        sizes.push(text.len());
        let explanation: Value = serde_json::from_str(text).unwrap_or_default();
        let last = explanation["attempts"]
            .as_array()
            .and_then(|attempts| attempts.last());
        if last.is_none_or(|attempt| attempt["node"] != node) && wrong.len() < 3 {
            wrong.push(format!("{name} on {node}: {text}"));
        }
    }
    if sizes.len() != expected {
        problems.push(format!(
            "{}: {} of {} pods explained, {expected} asked for",
            variant.name(),
            sizes.len(),
            listed.items.len()
        ));
    }
    if !wrong.is_empty() {
        problems.push(format!(
            "{}: explanations not naming the pod's node, e.g. {}",
            variant.name(),
            wrong.join("; ")
        ));
    }
    sizes
}

/// CPU seconds so far of the scheduler and the apiserver.
fn cpu(plane: &ControlPlane) -> (f64, f64) {
    let of = |component: &str| {
        let (_, pid) = plane
            .pids()
            .into_iter()
            .find(|(name, _)| *name == component)
            .unwrap_or_else(|| panic!("no {component} runs"));
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let (_, after_name) = stat.rsplit_once(')').unwrap();
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        let ticks = |i: usize| fields[i].parse::<f64>().unwrap();
        (ticks(11) + ticks(12)) / CLOCK_TICKS_PER_SECOND
    };
    (of(SCHEDULER), of("kube-apiserver"))
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

fn print_table(args: &Args, runs: &[Run]) {
    let per_thousand = 1000.0 / args.pods as f64;
    let stock = {
        let mut values: Vec<f64> = runs
            .iter()
            .filter(|r| r.variant == Variant::Stock)
            .map(|r| r.pods_per_second)
            .collect();
        (!values.is_empty()).then(|| median(&mut values))
    };
    println!();
    println!(
        "{} nodes, {} pods a run; CPU-s per 1,000 pods from the burst to the last explanation \
         (medians)",
        args.nodes, args.pods
    );
    println!(
        "{:<8} {:<15} {:<8} {:>22} {:>8} {:>9} {:>18} {:>14} {:>10} {:>10}",
        "variant",
        "scheduler",
        "explain",
        "pods/s (each run)",
        "median",
        "of stock",
        "explained",
        "explained by",
        "sched CPU",
        "api CPU"
    );
    for &variant in &args.variants {
        let of: Vec<&Run> = runs.iter().filter(|r| r.variant == variant).collect();
        if of.is_empty() {
            continue;
        }
        let each: Vec<String> = of
            .iter()
            .map(|r| format!("{:.0}", r.pods_per_second))
            .collect();
        let mut rates: Vec<f64> = of.iter().map(|r| r.pods_per_second).collect();
        let rate = median(&mut rates);
        let ratio = stock.map_or("-".to_owned(), |s| format!("{:.0}%", 100.0 * rate / s));
        let explained: Vec<String> = of.iter().map(|r| r.sizes.len().to_string()).collect();
        let mut by: Vec<f64> = of
            .iter()
            .filter_map(|r| r.explained_seconds.map(|(_, last)| last))
            .collect();
        let by = if by.is_empty() {
            "-".to_owned()
        } else {
            format!("{:.1} s", median(&mut by))
        };
        let mut scheduler: Vec<f64> = of.iter().map(|r| r.scheduler_cpu).collect();
        let mut apiserver: Vec<f64> = of.iter().map(|r| r.apiserver_cpu).collect();
        println!(
            "{:<8} {:<15} {:<8} {:>22} {:>8.0} {:>9} {:>18} {:>14} {:>10.2} {:>10.2}",
            variant.name(),
            variant.scheduler(),
            variant.annotation(args).unwrap_or_else(|| "-".to_owned()),
            each.join(", "),
            rate,
            ratio,
            explained.join(", "),
            by,
            median(&mut scheduler) * per_thousand,
            median(&mut apiserver) * per_thousand,
        );
    }
    let sizes: Vec<usize> = runs
        .iter()
        .filter(|r| r.variant == Variant::On)
        .flat_map(|r| r.sizes.iter().copied())
        .collect();
    if !sizes.is_empty() {
        let total: usize = sizes.iter().sum();
        let mean = total as f64 / sizes.len() as f64;
        println!();
        println!(
            "explanations of `on` ({} pods over its runs): {:.0} KiB per 1,000 pods; per pod \
             mean {:.0} B, max {} B",
            sizes.len(),
            mean * 1000.0 / 1024.0,
            mean,
            sizes.iter().max().unwrap(),
        );
    }
    let sampled: Vec<String> = runs
        .iter()
        .filter(|r| r.variant == Variant::Sampled)
        .map(|r| r.sizes.len().to_string())
        .collect();
    if !sampled.is_empty() {
        println!(
            "sampled: {} of {} pods explained in each run ({} asked for)",
            sampled.join(", "),
            args.pods,
            Variant::Sampled.expected(args),
        );
    }
    let (dropped, not_written) = runs
        .iter()
        .fold((0, 0), |(d, n), r| (d + r.dropped, n + r.not_written));
    println!("the scheduler's log: {dropped} explanations dropped, {not_written} not written");
}
