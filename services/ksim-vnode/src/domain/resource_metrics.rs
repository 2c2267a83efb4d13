//! A node's kubelet resource endpoint (`/metrics/resource`) as Prometheus text: what
//! metrics-server scrapes from every kubelet and turns into the metrics API.
//!
//! The series and their labels are the kubelet's: cumulative CPU-seconds and working-set bytes
//! per container (labels `container`, `namespace`, `pod`), per pod and for the node, each
//! sample carrying its own timestamp in milliseconds (metrics-server takes a CPU rate from two
//! samples' values and timestamps), and the container's start time. The node's figures are the
//! sum of its metered pods': a virtual node runs nothing else.

use std::fmt::Write as _;

use k8s_openapi::jiff::Timestamp;

use super::usage::ContainerReading;

/// One running, metered pod of the node, read at the snapshot's time.
#[derive(Debug, Clone, PartialEq)]
pub struct MeteredPod {
    pub namespace: String,
    pub name: String,
    pub containers: Vec<ContainerReading>,
}

/// The endpoint's body for a node running `pods`, all read at `now`.
pub fn render(pods: &[MeteredPod], now: Timestamp) -> String {
    let at = now.as_millisecond();
    // About 600 bytes of series per container, plus the fixed lines.
    let containers: usize = pods.iter().map(|pod| pod.containers.len()).sum();
    let mut out = String::with_capacity(1_500 + 600 * containers);

    family(
        &mut out,
        "container_cpu_usage_seconds_total",
        "counter",
        "Cumulative cpu time consumed by the container in core-seconds",
    );
    for (pod, container) in each_container(pods) {
        container_sample(
            &mut out,
            "container_cpu_usage_seconds_total",
            pod,
            container,
        );
        let _ = writeln!(out, " {} {at}", container.cpu_seconds_total);
    }
    family(
        &mut out,
        "container_memory_working_set_bytes",
        "gauge",
        "Current working set of the container in bytes",
    );
    for (pod, container) in each_container(pods) {
        container_sample(
            &mut out,
            "container_memory_working_set_bytes",
            pod,
            container,
        );
        let _ = writeln!(out, " {} {at}", container.memory_bytes);
    }
    family(
        &mut out,
        "container_start_time_seconds",
        "gauge",
        "Start time of the container since unix epoch in seconds",
    );
    for (pod, container) in each_container(pods) {
        container_sample(&mut out, "container_start_time_seconds", pod, container);
        let started = container.started.as_millisecond();
        let _ = writeln!(out, " {} {started}", started as f64 / 1_000.0);
    }

    let (node_cpu, node_memory) = pods
        .iter()
        .map(pod_totals)
        .fold((0.0, 0u64), |(cpu, memory), (c, m)| {
            (cpu + c, memory.saturating_add(m))
        });
    family(
        &mut out,
        "node_cpu_usage_seconds_total",
        "counter",
        "Cumulative cpu time consumed by the node in core-seconds",
    );
    let _ = writeln!(out, "node_cpu_usage_seconds_total {node_cpu} {at}");
    family(
        &mut out,
        "node_memory_working_set_bytes",
        "gauge",
        "Current working set of the node in bytes",
    );
    let _ = writeln!(out, "node_memory_working_set_bytes {node_memory} {at}");

    family(
        &mut out,
        "pod_cpu_usage_seconds_total",
        "counter",
        "Cumulative cpu time consumed by the pod in core-seconds",
    );
    for pod in pods {
        pod_sample(&mut out, "pod_cpu_usage_seconds_total", pod);
        let _ = writeln!(out, " {} {at}", pod_totals(pod).0);
    }
    family(
        &mut out,
        "pod_memory_working_set_bytes",
        "gauge",
        "Current working set of the pod in bytes",
    );
    for pod in pods {
        pod_sample(&mut out, "pod_memory_working_set_bytes", pod);
        let _ = writeln!(out, " {} {at}", pod_totals(pod).1);
    }

    family(
        &mut out,
        "resource_scrape_error",
        "gauge",
        "1 if there was an error while getting container metrics, 0 otherwise",
    );
    out.push_str("resource_scrape_error 0\n");
    out
}

fn each_container(pods: &[MeteredPod]) -> impl Iterator<Item = (&MeteredPod, &ContainerReading)> {
    pods.iter()
        .flat_map(|pod| pod.containers.iter().map(move |container| (pod, container)))
}

/// A pod's CPU-seconds and working set: the sums over its containers.
fn pod_totals(pod: &MeteredPod) -> (f64, u64) {
    pod.containers
        .iter()
        .fold((0.0, 0u64), |(cpu, memory), container| {
            (
                cpu + container.cpu_seconds_total,
                memory.saturating_add(container.memory_bytes),
            )
        })
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} [STABLE] {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn container_sample(out: &mut String, name: &str, pod: &MeteredPod, container: &ContainerReading) {
    out.push_str(name);
    out.push_str("{container=\"");
    escape_into(out, &container.name);
    out.push_str("\",namespace=\"");
    escape_into(out, &pod.namespace);
    out.push_str("\",pod=\"");
    escape_into(out, &pod.name);
    out.push_str("\"}");
}

fn pod_sample(out: &mut String, name: &str, pod: &MeteredPod) {
    out.push_str(name);
    out.push_str("{namespace=\"");
    escape_into(out, &pod.namespace);
    out.push_str("\",pod=\"");
    escape_into(out, &pod.name);
    out.push_str("\"}");
}

/// A label value as the text format escapes it. Kubernetes names never need it; a parser
/// reading a raw quote would lose the rest of the line, so it is done anyway.
fn escape_into(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(millis: i64) -> Timestamp {
        Timestamp::from_millisecond(1_700_000_000_000 + millis).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn container(name: &str, cpu_seconds: f64, memory: u64, started: i64) -> ContainerReading {
        ContainerReading {
            name: name.to_owned(),
            cpu_nanocores: 0,
            memory_bytes: memory,
            cpu_seconds_total: cpu_seconds,
            started: at(started),
        }
    }

    fn pod(namespace: &str, name: &str, containers: Vec<ContainerReading>) -> MeteredPod {
        MeteredPod {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            containers,
        }
    }

    /// The samples of the body: (series with labels, value, timestamp), comments skipped.
    fn samples(body: &str) -> Vec<(String, f64, i64)> {
        body.lines()
            .filter(|line| !line.starts_with('#'))
            .map(|line| {
                let mut fields = line.rsplitn(3, ' ');
                let timestamp = fields.next().unwrap_or_default().parse().unwrap_or(-1);
                let value = fields
                    .next()
                    .unwrap_or_default()
                    .parse()
                    .unwrap_or(f64::NAN);
                let series = fields.next().unwrap_or_default().to_owned();
                (series, value, timestamp)
            })
            .collect()
    }

    fn value_of(body: &str, series: &str) -> Option<(f64, i64)> {
        samples(body)
            .into_iter()
            .find(|(s, _, _)| s == series)
            .map(|(_, value, timestamp)| (value, timestamp))
    }

    #[test]
    fn containers_pods_and_the_node_are_reported_with_the_kubelets_series_and_labels() {
        let pods = [
            pod(
                "shop",
                "web-1",
                vec![
                    container("app", 12.5, 64 << 20, -60_000),
                    container("proxy", 0.5, 16 << 20, -30_000),
                ],
            ),
            pod("batch", "job-7", vec![container("work", 3.0, 1 << 30, 0)]),
        ];
        let body = render(&pods, at(5_000));
        let now = at(5_000).as_millisecond();

        assert_eq!(
            value_of(
                &body,
                r#"container_cpu_usage_seconds_total{container="app",namespace="shop",pod="web-1"}"#
            ),
            Some((12.5, now))
        );
        assert_eq!(
            value_of(
                &body,
                r#"container_memory_working_set_bytes{container="proxy",namespace="shop",pod="web-1"}"#
            ),
            Some(((16u64 << 20) as f64, now))
        );
        // The start time in seconds, stamped with itself, as the kubelet stamps it.
        let started = at(-60_000).as_millisecond();
        assert_eq!(
            value_of(
                &body,
                r#"container_start_time_seconds{container="app",namespace="shop",pod="web-1"}"#
            ),
            Some((started as f64 / 1_000.0, started))
        );
        assert_eq!(
            value_of(
                &body,
                r#"pod_cpu_usage_seconds_total{namespace="shop",pod="web-1"}"#
            ),
            Some((13.0, now))
        );
        assert_eq!(
            value_of(&body, "node_cpu_usage_seconds_total"),
            Some((16.0, now))
        );
        assert_eq!(
            value_of(&body, "node_memory_working_set_bytes"),
            Some((((64u64 + 16) << 20) as f64 + (1u64 << 30) as f64, now))
        );
        assert!(body.ends_with("\nresource_scrape_error 0\n"), "{body}");
        // Every family is declared once, with its type, before its samples.
        for (name, kind) in [
            ("container_cpu_usage_seconds_total", "counter"),
            ("container_memory_working_set_bytes", "gauge"),
            ("container_start_time_seconds", "gauge"),
            ("node_cpu_usage_seconds_total", "counter"),
            ("node_memory_working_set_bytes", "gauge"),
        ] {
            let declaration = format!("# TYPE {name} {kind}\n");
            assert_eq!(body.matches(&declaration).count(), 1, "{name}");
            let declared = body.find(&declaration).unwrap_or(usize::MAX);
            let first = body.find(&format!("\n{name}")).unwrap_or(0);
            assert!(declared < first, "{name} sampled before its TYPE line");
        }
    }

    #[test]
    fn a_node_without_metered_pods_reports_zero_totals() {
        let body = render(&[], at(0));
        let now = at(0).as_millisecond();
        assert_eq!(
            value_of(&body, "node_cpu_usage_seconds_total"),
            Some((0.0, now))
        );
        assert_eq!(
            value_of(&body, "node_memory_working_set_bytes"),
            Some((0.0, now))
        );
        assert!(!body.contains("container=\""));
    }

    #[test]
    fn label_values_are_escaped() {
        let body = render(
            &[pod("n\"s", "a\\b", vec![container("c\nd", 1.0, 1, 0)])],
            at(0),
        );
        assert!(
            body.contains(r#"{container="c\nd",namespace="n\"s",pod="a\\b"}"#),
            "{body}"
        );
    }
}
