//! The simulation's Karpenter NodePools: judged by the apiserver (Karpenter's validation) in
//! a dry run before a simulation is accepted, created owned by the simulation root (so the
//! root's deletion deletes them, and Karpenter then their nodes), and after the root is gone
//! waited for until Karpenter has removed their nodes.

use k8s_openapi::api::core::v1::Node;
use kube::{
    Api, Client,
    api::{DynamicObject, ListParams, PostParams},
};

use ksim_kube::karpenter::nodepools as resource;
use ksim_nodes::labels::KARPENTER_NODEPOOL_LABEL as NODEPOOL_LABEL;

use crate::domain::nodepool::API_VERSION;

#[derive(Debug, thiserror::Error)]
pub enum NodePoolError {
    #[error(
        "the cluster serves no Karpenter NodePools ({API_VERSION}): run the environment with \
         `ksim up --karpenter`"
    )]
    NoKarpenter,
    /// The apiserver's words, which name the field (Karpenter's schema and CEL rules).
    #[error("NodePool {name}: {message}")]
    Refused { name: String, message: String },
    #[error("NodePool {name} already exists; choose another name")]
    Exists { name: String },
    #[error("creating NodePool {name}: {source}")]
    Api { name: String, source: kube::Error },
}

impl NodePoolError {
    /// Whether the caller's NodePool is at fault (rather than the cluster).
    pub fn is_invalid(&self) -> bool {
        matches!(self, Self::Refused { .. })
    }
}

/// Whether the apiserver would create `object` as it is, without creating it.
pub async fn check(
    client: &Client,
    name: &str,
    object: &serde_json::Value,
) -> Result<(), NodePoolError> {
    post(client, name, object, true).await
}

pub async fn create(
    client: &Client,
    name: &str,
    object: &serde_json::Value,
) -> Result<(), NodePoolError> {
    post(client, name, object, false).await
}

async fn post(
    client: &Client,
    name: &str,
    object: &serde_json::Value,
    dry_run: bool,
) -> Result<(), NodePoolError> {
    let object: DynamicObject =
        serde_json::from_value(object.clone()).map_err(|error| NodePoolError::Refused {
            name: name.to_owned(),
            message: error.to_string(),
        })?;
    let params = PostParams {
        dry_run,
        field_manager: Some(crate::domain::FIELD_MANAGER.to_owned()),
    };
    match Api::<DynamicObject>::all_with(client.clone(), &resource())
        .create(&params, &object)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(answer)) if answer.code == 404 => Err(NodePoolError::NoKarpenter),
        Err(kube::Error::Api(answer)) if answer.code == 409 => Err(NodePoolError::Exists {
            name: name.to_owned(),
        }),
        Err(kube::Error::Api(answer)) if answer.code == 422 || answer.code == 400 => {
            Err(NodePoolError::Refused {
                name: name.to_owned(),
                message: answer.message,
            })
        }
        Err(source) => Err(NodePoolError::Api {
            name: name.to_owned(),
            source,
        }),
    }
}

/// The nodes Karpenter still has for the NodePools `names`.
pub async fn nodes_left(client: &Client, names: &[String]) -> Result<Vec<String>, kube::Error> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let selector = format!("{NODEPOOL_LABEL} in ({})", names.join(","));
    let nodes: Api<Node> = Api::all(client.clone());
    Ok(nodes
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .into_iter()
        .filter_map(|node| node.metadata.name)
        .collect())
}
