//! Pool-managed node groups outlive the process: each is a ConfigMap in the pool's namespace.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, Client,
    api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams},
};

use crate::domain::labels::{FIELD_MANAGER, GROUP_LABEL, POOL_LABEL};
use ksim_kube::is_not_found;

const SKELETON_KEY: &str = "skeleton.yaml";
const DESIRED_KEY: &str = "desired";
/// The group's provisioning model as JSON; absent in groups stored before models existed.
const PROVISIONING_KEY: &str = "provisioning.json";

/// A pool-managed group as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredGroup {
    pub name: String,
    pub skeleton_yaml: String,
    pub desired: u32,
    /// Empty: no provisioning model.
    pub provisioning_json: String,
}

#[derive(Debug, Clone)]
pub struct GroupStore {
    config_maps: Api<ConfigMap>,
    pool: String,
}

impl GroupStore {
    pub fn new(client: Client, namespace: &str, pool: &str) -> Self {
        Self {
            config_maps: Api::namespaced(client, namespace),
            pool: pool.to_owned(),
        }
    }

    fn object_name(&self, group: &str) -> String {
        format!("{}-group-{group}", self.pool)
    }

    pub async fn save(&self, group: &StoredGroup) -> Result<(), kube::Error> {
        let name = self.object_name(&group.name);
        let config_map = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(BTreeMap::from([
                    (POOL_LABEL.to_owned(), self.pool.clone()),
                    (GROUP_LABEL.to_owned(), group.name.clone()),
                ])),
                ..ObjectMeta::default()
            },
            data: Some(
                [
                    (SKELETON_KEY, group.skeleton_yaml.clone()),
                    (DESIRED_KEY, group.desired.to_string()),
                    (PROVISIONING_KEY, group.provisioning_json.clone()),
                ]
                .into_iter()
                .filter(|(_, value)| !value.is_empty())
                .map(|(key, value)| (key.to_owned(), value))
                .collect(),
            ),
            ..ConfigMap::default()
        };
        let params = PatchParams::apply(FIELD_MANAGER).force();
        self.config_maps
            .patch(&name, &params, &Patch::Apply(&config_map))
            .await
            .map(drop)
    }

    /// Changes only the stored count of an existing group.
    pub async fn set_desired(&self, group: &str, desired: u32) -> Result<(), kube::Error> {
        let patch = serde_json::json!({ "data": { DESIRED_KEY: desired.to_string() } });
        self.config_maps
            .patch(
                &self.object_name(group),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
            .map(drop)
    }

    pub async fn delete(&self, group: &str) -> Result<(), kube::Error> {
        match self
            .config_maps
            .delete(&self.object_name(group), &DeleteParams::default())
            .await
        {
            Err(error) if !is_not_found(&error) => Err(error),
            _ => Ok(()),
        }
    }

    /// Every stored group of this pool; entries that cannot be read are skipped with a warning
    /// rather than blocking the others.
    pub async fn load(&self) -> Result<Vec<StoredGroup>, kube::Error> {
        let params = ListParams::default().labels(&format!("{POOL_LABEL}={}", self.pool));
        let mut groups = Vec::new();
        for config_map in self.config_maps.list(&params).await?.items {
            let labels = config_map.metadata.labels.unwrap_or_default();
            let data = config_map.data.unwrap_or_default();
            let parsed = (
                labels.get(GROUP_LABEL),
                data.get(SKELETON_KEY),
                data.get(DESIRED_KEY).and_then(|d| d.parse().ok()),
            );
            match parsed {
                (Some(name), Some(skeleton), Some(desired)) => groups.push(StoredGroup {
                    name: name.clone(),
                    skeleton_yaml: skeleton.clone(),
                    desired,
                    provisioning_json: data.get(PROVISIONING_KEY).cloned().unwrap_or_default(),
                }),
                _ => tracing::warn!(
                    config_map = config_map.metadata.name.as_deref().unwrap_or_default(),
                    "skipping a node group definition that cannot be read"
                ),
            }
        }
        Ok(groups)
    }
}
