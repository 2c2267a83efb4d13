//! The node skeleton a seat Deployment carries inline or names in a ConfigMap, read and parsed
//! the same way by the pool (which makes the nodes) and the cloud provider (which tells
//! cluster-autoscaler what a new node of the group would look like).

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use k8s_openapi::api::{apps::v1::Deployment, core::v1::ConfigMap};
use ksim_nodes::{
    seats::{SKELETON_CONFIGMAP_KEY, SeatError, SkeletonSource, skeleton_source},
    skeleton::{NodeSkeleton, SkeletonError},
};
use kube::Api;

#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The Deployment names no skeleton at all.
    #[error(transparent)]
    NoSource(#[from] SeatError),
    #[error("cannot read ConfigMap {namespace}/{name}: {source}")]
    ReadConfigMap {
        namespace: String,
        name: String,
        source: kube::Error,
    },
    #[error("ConfigMap {namespace}/{name} has no {SKELETON_CONFIGMAP_KEY}")]
    MissingKey { namespace: String, name: String },
    #[error(transparent)]
    Invalid(#[from] SkeletonError),
}

/// Resolves skeletons, parsing each distinct text once: every seat of a group carries the
/// same text, and a resync must not parse it again per Deployment.
#[derive(Clone)]
pub struct SkeletonResolver {
    client: kube::Client,
    parsed: Arc<Mutex<BTreeMap<String, Arc<NodeSkeleton>>>>,
}

impl std::fmt::Debug for SkeletonResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SkeletonResolver").finish_non_exhaustive()
    }
}

impl SkeletonResolver {
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            parsed: Arc::default(),
        }
    }

    pub async fn resolve(
        &self,
        deployment: &Deployment,
    ) -> Result<Arc<NodeSkeleton>, ResolveError> {
        let yaml = match skeleton_source(deployment)? {
            SkeletonSource::Inline(yaml) => yaml,
            SkeletonSource::ConfigMap(name) => {
                let namespace = deployment.metadata.namespace.clone().unwrap_or_default();
                let config_map = Api::<ConfigMap>::namespaced(self.client.clone(), &namespace)
                    .get(&name)
                    .await;
                match config_map {
                    Ok(config_map) => config_map
                        .data
                        .and_then(|mut data| data.remove(SKELETON_CONFIGMAP_KEY))
                        .ok_or(ResolveError::MissingKey { namespace, name })?,
                    Err(source) => {
                        return Err(ResolveError::ReadConfigMap {
                            namespace,
                            name,
                            source,
                        });
                    }
                }
            }
        };
        // A poisoned cache holds only fully parsed entries: keep using it.
        let mut parsed = self.parsed.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(skeleton) = parsed.get(&yaml) {
            return Ok(skeleton.clone());
        }
        let skeleton = Arc::new(NodeSkeleton::from_yaml(&yaml)?);
        parsed.insert(yaml, skeleton.clone());
        Ok(skeleton)
    }
}
