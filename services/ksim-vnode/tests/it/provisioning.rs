//! The provisioning model as the pool plays it against the real control plane: nodes that
//! register late, boot NotReady, and linger unschedulable before they go. Orders and states,
//! never timings: what a watch saw of each node, in the order it saw it.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::StreamExt;
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, Node},
};
use ksim_grpc::ServeArgs;
use ksim_localenv::wait;
use ksim_nodes::{
    labels::{BOOTING_UNTIL_ANNOTATION, TERMINATING_UNTIL_ANNOTATION},
    node::{is_booting, is_ready, is_shutting_down},
};
use ksim_proto::ksim::vnode::v1::{self as pb, virtual_node_pool_client::VirtualNodePoolClient};
use ksim_provisioning::{Delay, GroupProvisioning, NodeDelays};
use ksim_vnode::runtime;
use kube::{
    Api, Client,
    api::{ListParams, Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use serde_json::json;
use tonic::Code;

use crate::common::*;

/// What a watch saw a node be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    Booting,
    Ready,
    /// NotReady shutting down, and unschedulable.
    ShuttingDown,
    /// Shutting down but still schedulable: never right.
    ShuttingDownSchedulable,
    Gone,
}

fn seen(node: &Node) -> Option<Seen> {
    let unschedulable = node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
    if is_shutting_down(node) {
        Some(if unschedulable {
            Seen::ShuttingDown
        } else {
            Seen::ShuttingDownSchedulable
        })
    } else if is_booting(node) {
        Some(Seen::Booting)
    } else if is_ready(node) {
        Some(Seen::Ready)
    } else {
        // Created, its status not written yet.
        None
    }
}

type Lives = Arc<Mutex<BTreeMap<String, Vec<Seen>>>>;

/// Each node of `group` as a watch saw it, each change once, in order.
struct Recorder {
    lives: Lives,
    task: tokio::task::JoinHandle<()>,
}

impl Recorder {
    fn start(client: &Client, group: &str) -> Self {
        let lives = Lives::default();
        let events = watcher(
            Api::<Node>::all(client.clone()),
            watcher::Config::default().labels(&format!("ksim.io/node-group={group}")),
        )
        .default_backoff();
        let task = tokio::spawn({
            let lives = lives.clone();
            async move {
                let mut events = std::pin::pin!(events);
                while let Some(event) = events.next().await {
                    let (node, state) = match event {
                        Ok(watcher::Event::Apply(node) | watcher::Event::InitApply(node)) => {
                            let Some(state) = seen(&node) else { continue };
                            (node, state)
                        }
                        Ok(watcher::Event::Delete(node)) => (node, Seen::Gone),
                        _ => continue,
                    };
                    let name = node.metadata.name.clone().unwrap_or_default();
                    let mut lives = lives.lock().unwrap();
                    let life = lives.entry(name).or_default();
                    if life.last() != Some(&state) {
                        life.push(state);
                    }
                }
            }
        });
        Self { lives, task }
    }

    fn lives(&self) -> BTreeMap<String, Vec<Seen>> {
        self.lives.lock().unwrap().clone()
    }

    /// The lives once `count` nodes were seen gone.
    async fn gone(&self, count: usize) -> BTreeMap<String, Vec<Seen>> {
        wait::until("the nodes seen gone", DEADLINE, || async {
            let lives = self.lives();
            let gone = lives
                .values()
                .filter(|life| life.last() == Some(&Seen::Gone))
                .count();
            if gone == count {
                Ok(lives)
            } else {
                Err(format!("{lives:?}"))
            }
        })
        .await
        .unwrap()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn model(registration: Duration, ready: Duration, termination: Duration) -> GroupProvisioning {
    GroupProvisioning {
        model: "it-model".to_owned(),
        seed: 11,
        speed: 1.0,
        nodes: NodeDelays {
            registration: Delay::Fixed(registration),
            ready: Delay::Fixed(ready),
            termination: Delay::Fixed(termination),
        },
    }
}

async fn scale(client: &Client, group: &str, replicas: i32) {
    Api::<Deployment>::namespaced(client.clone(), "default")
        .patch(
            &format!("seats-{group}"),
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "replicas": replicas } })),
        )
        .await
        .unwrap();
}

async fn nodes_of(client: &Client, group: &str) -> Vec<Node> {
    Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(&format!("ksim.io/node-group={group}")))
        .await
        .unwrap()
        .items
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_seats_node_boots_then_is_ready_and_shuts_down_unschedulable_before_it_goes() {
    let env = control_plane().await;
    let pool = start_pool(&env.client, pool_config()).await;
    let recorder = Recorder::start(&env.client, "slow");
    let provisioning = model(secs(1), secs(2), secs(2)).to_json();
    Api::<Deployment>::namespaced(env.client.clone(), "default")
        .create(
            &PostParams::default(),
            &seat_deployment("slow", 2, Some(provisioning)),
        )
        .await
        .unwrap();
    let ready = ready_nodes(&env.client, "slow", 2).await;
    for node in &ready {
        // When it turned Ready is on the node, for a restarted pool.
        let annotations = node.metadata.annotations.as_ref().unwrap();
        assert!(
            annotations.contains_key(BOOTING_UNTIL_ANNOTATION),
            "{annotations:?}"
        );
    }
    assert_eq!(
        pool.group("slow").unwrap().provisioning_model.as_deref(),
        Some("it-model")
    );

    scale(&env.client, "slow", 0).await;
    let lives = recorder.gone(2).await;
    assert_eq!(lives.len(), 2, "{lives:?}");
    for (node, life) in &lives {
        assert_eq!(
            life,
            &[Seen::Booting, Seen::Ready, Seen::ShuttingDown, Seen::Gone],
            "{node}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_day_long_registration_leaves_the_seat_without_a_node_and_its_removal_writes_none() {
    let env = control_plane().await;
    let pool = start_pool(&env.client, pool_config()).await;
    let recorder = Recorder::start(&env.client, "late");
    let deployments = Api::<Deployment>::namespaced(env.client.clone(), "default");
    let day = model(secs(24 * 3600), secs(0), secs(0)).to_json();
    deployments
        .create(
            &PostParams::default(),
            &seat_deployment("late", 1, Some(day)),
        )
        .await
        .unwrap();
    // The seat runs: the pool has seen it, and its node is not due for a day.
    pods_in_phase(
        &env.client,
        "default",
        "ksim.io/node-group=late",
        "Running",
        1,
    )
    .await;
    // A group created after it, with no model, gets its node: the pool is not stuck.
    deployments
        .create(&PostParams::default(), &seat_deployment("prompt", 1, None))
        .await
        .unwrap();
    ready_nodes(&env.client, "prompt", 1).await;
    assert!(nodes_of(&env.client, "late").await.is_empty());
    let group = pool.group("late").unwrap();
    assert_eq!((group.desired, group.registered), (1, 0));

    // Scaled away before its time: nothing was ever written for it.
    scale(&env.client, "late", 0).await;
    wait::until("the late group at zero", DEADLINE, || async {
        let group = pool.group("late").map_err(|e| e.to_string())?;
        if group.desired == 0 {
            Ok(())
        } else {
            Err(format!("{group:?}"))
        }
    })
    .await
    .unwrap();
    assert!(recorder.lives().is_empty(), "{:?}", recorder.lives());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreadable_provisioning_annotation_runs_the_group_without_delays() {
    let env = control_plane().await;
    let pool = start_pool(&env.client, pool_config()).await;
    let recorder = Recorder::start(&env.client, "bad");
    let unreadable = "{\"model\": \"x\", \"speed\": -1".to_owned();
    Api::<Deployment>::namespaced(env.client.clone(), "default")
        .create(
            &PostParams::default(),
            &seat_deployment("bad", 1, Some(unreadable)),
        )
        .await
        .unwrap();
    ready_nodes(&env.client, "bad", 1).await;
    assert_eq!(pool.group("bad").unwrap().provisioning_model, None);
    scale(&env.client, "bad", 0).await;
    let lives = recorder.gone(1).await;
    let life = lives.values().next().unwrap();
    assert_eq!(life, &[Seen::Ready, Seen::Gone], "no booting, no lingering");
}

#[tokio::test(flavor = "multi_thread")]
async fn create_node_group_takes_a_model_refuses_a_bad_one_and_its_nodes_follow_it() {
    let env = control_plane().await;
    init_logs();
    let service = runtime::start(env.client.clone(), pool_config(), ServeArgs::ephemeral())
        .await
        .unwrap();
    let mut client = VirtualNodePoolClient::connect(service.url()).await.unwrap();
    let request = |name: &str, provisioning_json: String| pb::CreateNodeGroupRequest {
        name: name.to_owned(),
        node_skeleton_yaml: SKELETON.to_owned(),
        count: 1,
        provisioning_json,
    };

    // Refused whole: the field named, nothing stored, no node.
    let mut bad = model(secs(1), secs(1), secs(1));
    bad.speed = 0.0;
    for text in [bad.to_json(), "{\"model\": \"m\"".to_owned()] {
        let status = client
            .create_node_group(request("refused", text.clone()))
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{text}");
        assert!(status.message().contains("provisioning_json"), "{status:?}");
    }
    let groups = client
        .list_node_groups(pb::ListNodeGroupsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(groups.node_groups.is_empty(), "{groups:?}");
    let stored = Api::<ConfigMap>::namespaced(env.client.clone(), "default")
        .list(&ListParams::default().labels("ksim.io/node-group=refused"))
        .await
        .unwrap();
    assert!(stored.items.is_empty());

    // An hour to be Ready and an hour to go: the node stays booting, then shutting down.
    let recorder = Recorder::start(&env.client, "hour");
    let created = client
        .create_node_group(request(
            "hour",
            model(secs(0), secs(3600), secs(3600)).to_json(),
        ))
        .await
        .unwrap()
        .into_inner()
        .node_group
        .unwrap();
    assert_eq!(created.provisioning_model, "it-model");
    let booting = wait::until("the node registered, booting", DEADLINE, || async {
        let nodes = nodes_of(&env.client, "hour").await;
        match nodes.as_slice() {
            [node] if is_booting(node) => Ok(node.clone()),
            _ => Err(format!("{nodes:?}")),
        }
    })
    .await
    .unwrap();
    assert_eq!(booting.metadata.name.as_deref(), Some("hour-0"));
    // The pool counts it once its lease is there too; Ready it is not, for an hour.
    let listed = wait::until("the group with its node registered", DEADLINE, || {
        let mut client = client.clone();
        async move {
            let group = client
                .get_node_group(pb::GetNodeGroupRequest {
                    name: "hour".to_owned(),
                })
                .await
                .map_err(|e| e.to_string())?
                .into_inner()
                .node_group
                .ok_or("no group")?;
            if group.registered_nodes == 1 {
                Ok(group)
            } else {
                Err(format!("{group:?}"))
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(listed.ready_nodes, 0, "registered, not Ready");
    assert_eq!(listed.provisioning_model, "it-model");

    client
        .scale_node_group(pb::ScaleNodeGroupRequest {
            name: "hour".to_owned(),
            count: 0,
        })
        .await
        .unwrap();
    let shutting_down = wait::until("the node shutting down", DEADLINE, || async {
        let nodes = nodes_of(&env.client, "hour").await;
        match nodes.as_slice() {
            [node] if is_shutting_down(node) => Ok(node.clone()),
            _ => Err(format!("{nodes:?}")),
        }
    })
    .await
    .unwrap();
    assert_eq!(
        shutting_down.spec.as_ref().unwrap().unschedulable,
        Some(true)
    );
    let annotations = shutting_down.metadata.annotations.as_ref().unwrap();
    assert!(annotations.contains_key(TERMINATING_UNTIL_ANNOTATION));

    // The group deleted, its model goes with it: the node goes at once.
    client
        .delete_node_group(pb::DeleteNodeGroupRequest {
            name: "hour".to_owned(),
        })
        .await
        .unwrap();
    let lives = recorder.gone(1).await;
    assert_eq!(
        lives["hour-0"],
        [Seen::Booting, Seen::ShuttingDown, Seen::Gone]
    );
}
