//! What every run shares: the cluster client, the other services, settings and metrics.

use kube::Client;

use crate::{config::Settings, mesh::Mesh, metrics::ReplayMetrics};

/// What every run shares.
#[derive(Clone)]
pub struct RunContext {
    pub client: Client,
    /// For the eviction API: a client that returns a 429 at once (no default retries).
    pub evictions: Client,
    pub mesh: Mesh,
    pub settings: Settings,
    pub metrics: ReplayMetrics,
}

impl std::fmt::Debug for RunContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunContext")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}
