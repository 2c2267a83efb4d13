//! How a pool runs: identity, address space, heartbeat timing and API concurrency.

use std::{net::IpAddr, path::PathBuf, time::Duration};

use ipnet::Ipv4Net;

use crate::domain::kubelet_endpoint::PortRange;

/// Pool settings; flattened into the binary's command line.
#[derive(Debug, Clone, clap::Args)]
pub struct PoolConfig {
    /// Name of this pool; labels every node it owns, so several pools can share a cluster
    /// and a restarted pool adopts exactly its own nodes.
    #[arg(long, env = "KSIM_POOL_NAME", default_value = "ksim")]
    pub pool_name: String,

    /// Namespace holding the pool's own objects (node group definitions).
    #[arg(long, env = "KSIM_NAMESPACE", default_value = "ksim-system")]
    pub namespace: String,

    /// Address space the nodes' podCIDRs are carved from.
    #[arg(long, env = "KSIM_POD_CIDR_POOL", default_value = "10.128.0.0/9")]
    pub pod_cidr_pool: Ipv4Net,

    /// Prefix length of each node's podCIDR (/24 gives 253 pod IPs per node).
    #[arg(long, env = "KSIM_NODE_CIDR_PREFIX", default_value_t = 24)]
    pub node_cidr_prefix: u8,

    /// Node lease duration in seconds; leases are renewed every quarter of it, like a kubelet.
    #[arg(long, env = "KSIM_LEASE_DURATION_SECONDS", default_value_t = 40)]
    pub lease_duration_seconds: u32,

    /// Seconds between node status refreshes; leases carry liveness in between. The default
    /// is the kubelet's (nodeStatusReportFrequency, 5 minutes): every Node update goes to every
    /// node watcher, so at thousands of nodes this is a real share of the apiserver's work.
    #[arg(long, env = "KSIM_NODE_STATUS_PERIOD_SECONDS", default_value_t = 300)]
    pub node_status_period_seconds: u64,

    /// How long a Job pod without a `ksim.io/lifetime-ms` annotation runs, in milliseconds.
    #[arg(long, env = "KSIM_JOB_DURATION_MS", default_value_t = 1000)]
    pub job_duration_ms: u64,

    /// Most API writes in flight at once, per controller.
    #[arg(long, env = "KSIM_API_CONCURRENCY", default_value_t = 64)]
    pub api_concurrency: u16,

    /// Register the host node that runs the seat pods of Deployment-backed node groups.
    #[arg(long, env = "KSIM_SEAT_HOST", default_value_t = true, action = clap::ArgAction::Set)]
    pub seat_host: bool,

    /// Play the kubelet for the nodes Karpenter's KWOK provider creates (the pool's group of
    /// each is named after its NodePool); Karpenter creates and deletes them.
    #[arg(long, env = "KSIM_KARPENTER", default_value_t = false, action = clap::ArgAction::Set)]
    pub karpenter: bool,

    #[command(flatten)]
    pub kubelet: KubeletEndpointConfig,
}

/// The nodes' kubelet resource endpoints, which metrics-server scrapes; off by default.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct KubeletEndpointConfig {
    /// Serve each node's kubelet resource endpoint (`/metrics/resource`, HTTPS) on this
    /// address, a port per node, and advertise it as the node's ExternalIP and kubelet port.
    #[arg(
        long = "kubelet-endpoint",
        env = "KSIM_KUBELET_ENDPOINT",
        requires = "client_ca_file"
    )]
    pub endpoint: Option<IpAddr>,

    /// Ports for the nodes' endpoints, FIRST-LAST: a node's port is FIRST plus its podCIDR's
    /// slot in the pool, so it stays the same across restarts.
    #[arg(long = "kubelet-ports", env = "KSIM_KUBELET_PORTS", default_value_t = PortRange::default())]
    pub ports: PortRange,

    /// CA whose client certificates the endpoints accept, like a kubelet's --client-ca-file;
    /// any other caller is refused. Required with --kubelet-endpoint.
    #[arg(long = "kubelet-client-ca-file", env = "KSIM_KUBELET_CLIENT_CA_FILE")]
    pub client_ca_file: Option<PathBuf>,
}

impl PoolConfig {
    pub fn lease_duration(&self) -> Duration {
        Duration::from_secs(self.lease_duration_seconds.into())
    }

    pub fn node_status_period(&self) -> Duration {
        Duration::from_secs(self.node_status_period_seconds)
    }

    pub fn job_duration(&self) -> Duration {
        Duration::from_millis(self.job_duration_ms)
    }

    /// The internal node group holding this pool's one seat host node.
    pub fn seat_host_group(&self) -> String {
        format!("{}-seat-host", self.pool_name)
    }
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            pool_name: "ksim".to_owned(),
            namespace: "ksim-system".to_owned(),
            pod_cidr_pool: Ipv4Net::new(std::net::Ipv4Addr::new(10, 128, 0, 0), 9)
                .unwrap_or_default(),
            node_cidr_prefix: 24,
            lease_duration_seconds: 40,
            node_status_period_seconds: 300,
            job_duration_ms: 1000,
            api_concurrency: 64,
            seat_host: true,
            karpenter: false,
            kubelet: KubeletEndpointConfig::default(),
        }
    }
}

/// The pool's own `metrics.k8s.io` server (`kubectl top`, the HPA); off unless an address is
/// given. Flattened into the binary's command line beside [`PoolConfig`].
#[derive(Debug, Clone, clap::Args)]
pub struct MetricsApiConfig {
    /// Serve the resource metrics API (metrics.k8s.io/v1beta1) on this address, e.g.
    /// 0.0.0.0:6443 (port 0 picks a free one), and register it with the aggregation layer.
    /// Off when unset; refused if another component owns the APIService.
    #[arg(long = "metrics-api-addr", env = "KSIM_METRICS_API_ADDR")]
    pub addr: Option<std::net::SocketAddr>,

    /// The address the apiserver reaches the metrics API on (the pod IP in a cluster). By
    /// default the listen address, or this machine's first non-loopback IPv4 address when
    /// listening on all.
    #[arg(long = "metrics-api-advertise", env = "KSIM_METRICS_API_ADVERTISE")]
    pub advertise: Option<IpAddr>,

    /// The window every reading reports (metrics-server's scrape interval; 15s as its release
    /// manifest sets it).
    #[arg(long = "metrics-window", env = "KSIM_METRICS_WINDOW", default_value = "15s",
          value_parser = humantime::parse_duration)]
    pub window: Duration,
}

impl Default for MetricsApiConfig {
    fn default() -> Self {
        Self {
            addr: None,
            advertise: None,
            window: crate::domain::metrics_api::DEFAULT_WINDOW,
        }
    }
}
