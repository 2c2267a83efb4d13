//! How a pool runs: identity, address space, heartbeat timing and API concurrency.

use std::time::Duration;

use ipnet::Ipv4Net;

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
        }
    }
}
