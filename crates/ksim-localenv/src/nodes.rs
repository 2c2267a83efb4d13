//! Waiting for nodes, as every test that scales node groups does.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use ksim_nodes::node::takes_pods;
use kube::{Api, Client, api::ListParams};

use crate::wait::{self, TimedOut};

/// The nodes matching `label_selector`, once exactly `count` exist and every one is Ready
/// with its not-ready taint lifted, so a test's next pods can land on any of them.
pub async fn ready_nodes(
    client: &Client,
    label_selector: &str,
    count: usize,
    deadline: Duration,
) -> Result<Vec<Node>, TimedOut> {
    let nodes: Api<Node> = Api::all(client.clone());
    let params = ListParams::default().labels(label_selector);
    wait::until(
        &format!("{count} Ready nodes ({label_selector})"),
        deadline,
        || async {
            let list = nodes.list(&params).await.map_err(|e| e.to_string())?;
            let ready = list.items.iter().filter(|n| takes_pods(n)).count();
            if ready == count && list.items.len() == count {
                Ok(list.items)
            } else {
                Err(format!("{ready} Ready of {}", list.items.len()))
            }
        },
    )
    .await
}
