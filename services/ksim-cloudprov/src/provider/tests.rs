//! The provider's invariants under concurrent calls, against a stand-in for the apiserver
//! that applies each write to the index as a watch would, and removes seats the way the
//! ReplicaSet controller ranks them (lowest deletion cost first). The real controllers are
//! exercised in crates/ksim-e2e/tests/it/cloudprov/autoscaler.rs.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use k8s_openapi::api::{apps::v1::Deployment, core::v1::Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use ksim_nodes::labels::{
    GROUP_LABEL, HELD_ANNOTATION, OWNER_LABEL, OWNER_POOL, RELEASED_ANNOTATION,
    RETIRING_ANNOTATION, TO_BE_DELETED_TAINT,
};

use super::*;
use crate::index::{
    Skeleton, Source,
    tests::{deployment, node, seat_pod},
};
use ksim_nodes::labels::DELETION_COST_ANNOTATION;

#[derive(Debug, Default)]
struct Objects {
    deployment: Option<Deployment>,
    pods: BTreeMap<String, Pod>,
    deleted_nodes: Vec<String>,
    resource_version: u64,
}

#[derive(Debug, Clone)]
struct FakeCluster {
    index: Index,
    objects: Arc<Mutex<Objects>>,
    /// One permit per Node deletion; unlimited unless a test holds them.
    node_deletes: Arc<tokio::sync::Semaphore>,
    /// Signalled as each Node deletion begins.
    node_delete_begun: Arc<tokio::sync::Notify>,
}

impl FakeCluster {
    fn objects(&self) -> std::sync::MutexGuard<'_, Objects> {
        self.objects.lock().unwrap()
    }

    /// The ReplicaSet controller's scale-down: lowest deletion cost first.
    fn reconcile(&self, objects: &mut Objects) {
        let replicas = objects
            .deployment
            .as_ref()
            .and_then(|d| d.spec.as_ref()?.replicas)
            .unwrap_or(0);
        let cost = |pod: &Pod| -> i32 {
            pod.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DELETION_COST_ANNOTATION)?.parse().ok())
                .unwrap_or(0)
        };
        let mut active: Vec<(i32, String)> = objects
            .pods
            .values()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(|p| (cost(p), p.metadata.name.clone().unwrap()))
            .collect();
        active.sort();
        let excess = active
            .len()
            .saturating_sub(usize::try_from(replicas).unwrap());
        for (_, name) in active.into_iter().take(excess) {
            let pod = objects.pods.get_mut(&name).unwrap();
            pod.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
            self.index.apply_pod(pod);
        }
    }
}

impl ProviderWrites for FakeCluster {
    async fn set_deletion_cost(
        &self,
        _namespace: &str,
        pod: &str,
        cost: Option<i32>,
    ) -> Result<(), ClusterError> {
        let mut objects = self.objects();
        let seat = objects
            .pods
            .get_mut(pod)
            .ok_or_else(|| ClusterError::NotFound(pod.to_owned()))?;
        let annotations = seat.metadata.annotations.get_or_insert_default();
        match cost {
            Some(cost) => annotations.insert(DELETION_COST_ANNOTATION.to_owned(), cost.to_string()),
            None => annotations.remove(DELETION_COST_ANNOTATION),
        };
        self.index.apply_pod(seat);
        Ok(())
    }

    async fn scale(
        &self,
        _namespace: &str,
        _deployment: &str,
        replicas: i32,
        resource_version: &str,
    ) -> Result<(), ClusterError> {
        tokio::task::yield_now().await;
        let mut guard = self.objects();
        let objects = &mut *guard;
        let current = objects.resource_version.to_string();
        if current != resource_version {
            return Err(ClusterError::Conflict("Deployment".to_owned()));
        }
        objects.resource_version += 1;
        let deployment = objects.deployment.as_mut().unwrap();
        deployment.spec.as_mut().unwrap().replicas = Some(replicas);
        deployment.metadata.resource_version = Some(objects.resource_version.to_string());
        let deployment = deployment.clone();
        self.index
            .apply_deployment(&deployment, Skeleton::Missing)
            .unwrap();
        self.reconcile(objects);
        Ok(())
    }

    async fn mark_released(&self, _namespace: &str, _deployment: &str) -> Result<(), ClusterError> {
        let mut objects = self.objects();
        let deployment = objects.deployment.as_mut().unwrap();
        deployment
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(RELEASED_ANNOTATION.to_owned(), "true".to_owned());
        self.index
            .apply_deployment(deployment, Skeleton::Missing)
            .unwrap();
        Ok(())
    }

    async fn delete_node(&self, name: &str) -> Result<(), ClusterError> {
        self.node_delete_begun.notify_one();
        self.node_deletes.acquire().await.unwrap().forget();
        self.objects().deleted_nodes.push(name.to_owned());
        self.index.delete_node(name);
        Ok(())
    }
}

/// A group of `seats` ready seats with registered nodes, limits (min, max).
fn provider(seats: usize, limits: (&str, &str)) -> (Arc<Provider<FakeCluster>>, FakeCluster) {
    let index = Index::new(100);
    let mut objects = Objects {
        resource_version: 1,
        ..Objects::default()
    };
    let deployment = deployment("seats-m5", "m5", i32::try_from(seats).unwrap(), limits);
    index
        .apply_deployment(&deployment, Skeleton::Missing)
        .unwrap();
    objects.deployment = Some(deployment);
    for n in 0..seats {
        let name = format!("seat-{n}");
        let pod = seat_pod(&name, "m5", true);
        index.apply_pod(&pod);
        index.apply_node(&node(&name, &format!("ksim://m5/{name}")));
        objects.pods.insert(name, pod);
    }
    let cluster = FakeCluster {
        index: index.clone(),
        objects: Arc::new(Mutex::new(objects)),
        node_deletes: Arc::new(tokio::sync::Semaphore::new(
            tokio::sync::Semaphore::MAX_PERMITS,
        )),
        node_delete_begun: Arc::new(tokio::sync::Notify::new()),
    };
    let settings = Settings {
        pool_name: "ksim".to_owned(),
        gpu_label: "ksim.io/gpu-type".to_owned(),
        pricing: None,
        group_options: HashMap::new(),
        settle_timeout: Duration::from_secs(5),
    };
    (
        Arc::new(Provider::new(index, cluster.clone(), settings)),
        cluster,
    )
}

fn node_ref(name: &str) -> NodeRef {
    NodeRef {
        name: name.to_owned(),
        provider_id: format!("ksim://m5/{name}"),
    }
}

fn deleting_seats(cluster: &FakeCluster) -> Vec<String> {
    cluster
        .objects()
        .pods
        .values()
        .filter(|p| p.metadata.deletion_timestamp.is_some())
        .map(|p| p.metadata.name.clone().unwrap())
        .collect()
}

#[tokio::test]
async fn delete_nodes_removes_exactly_the_named_seats_and_nodes() {
    let (provider, cluster) = provider(5, ("1", "10"));
    let mut events = provider.subscribe();
    provider
        .delete_nodes("m5", &[node_ref("seat-3"), node_ref("seat-1")])
        .await
        .unwrap();
    assert_eq!(
        events.try_recv().unwrap(),
        ScaleEvent::NodesDeleted {
            group: "m5".to_owned(),
            nodes: vec!["seat-3".to_owned(), "seat-1".to_owned()]
        }
    );
    assert_eq!(provider.target_size("m5").unwrap(), 3);
    assert_eq!(deleting_seats(&cluster), vec!["seat-1", "seat-3"]);
    assert_eq!(cluster.objects().deleted_nodes, vec!["seat-1", "seat-3"]);
    // A retry (CA resends after a timeout) changes nothing more.
    provider
        .delete_nodes("m5", &[node_ref("seat-3"), node_ref("seat-1")])
        .await
        .unwrap();
    assert_eq!(provider.target_size("m5").unwrap(), 3);
    assert_eq!(deleting_seats(&cluster).len(), 2);
}

#[tokio::test]
async fn concurrent_deletes_never_go_below_min_nor_remove_unasked_seats() {
    let (provider, cluster) = provider(6, ("3", "10"));
    let requests = [
        vec!["seat-0", "seat-1"],
        vec!["seat-2"],
        vec!["seat-3", "seat-4"],
        vec!["seat-5"],
    ];
    let calls = requests.iter().map(|names| {
        let provider = provider.clone();
        let nodes: Vec<NodeRef> = names.iter().map(|n| node_ref(n)).collect();
        tokio::spawn(async move { provider.delete_nodes("m5", &nodes).await })
    });
    let results = futures::future::join_all(calls).await;
    let mut removed = Vec::new();
    for (names, result) in requests.iter().zip(results) {
        match result.unwrap() {
            Ok(()) => removed.extend(names.iter().map(|n| (*n).to_owned())),
            Err(ProviderError::Plan(PlanError::BelowMin { .. })) => {}
            Err(other) => panic!("unexpected error: {other}"),
        }
    }
    removed.sort();
    assert!(provider.target_size("m5").unwrap() >= 3);
    assert_eq!(deleting_seats(&cluster), removed);
    assert_eq!(
        provider.target_size("m5").unwrap(),
        6 - i32::try_from(removed.len()).unwrap()
    );
}

/// CA's next IncreaseSize on a group must not wait while a DeleteNodes it made removes the Nodes
/// of seats already gone: at CA's scale-down parallelism such waits passed its gRPC timeout.
#[tokio::test]
async fn a_scale_up_does_not_wait_while_a_delete_removes_its_nodes() {
    let (provider, cluster) = provider(3, ("0", "10"));
    cluster
        .node_deletes
        .forget_permits(tokio::sync::Semaphore::MAX_PERMITS);
    let deleting = tokio::spawn({
        let provider = provider.clone();
        async move { provider.delete_nodes("m5", &[node_ref("seat-0")]).await }
    });
    cluster.node_delete_begun.notified().await;
    // Its seat is gone and its Node's deletion is held: the group is free to grow.
    tokio::time::timeout(Duration::from_secs(60), provider.increase_size("m5", 1))
        .await
        .expect("IncreaseSize waited for the Node deletions of a DeleteNodes")
        .unwrap();
    assert_eq!(provider.target_size("m5").unwrap(), 3);
    assert_eq!(cluster.objects().deleted_nodes, Vec::<String>::new());
    cluster.node_deletes.add_permits(1);
    deleting.await.unwrap().unwrap();
    assert_eq!(cluster.objects().deleted_nodes, ["seat-0"]);
}

#[tokio::test]
async fn concurrent_increases_stop_exactly_at_max() {
    let (provider, _) = provider(3, ("0", "8"));
    let calls = (0..10).map(|_| {
        let provider = provider.clone();
        tokio::spawn(async move { provider.increase_size("m5", 1).await })
    });
    let results = futures::future::join_all(calls).await;
    let succeeded = results
        .into_iter()
        .filter(|r| matches!(r, Ok(Ok(()))))
        .count();
    assert_eq!(succeeded, 5);
    assert_eq!(provider.target_size("m5").unwrap(), 8);
    let mut events = provider.subscribe();
    assert!(provider.increase_size("m5", 1).await.is_err());
    assert!(
        events.try_recv().is_err(),
        "a refused resize emitted an event"
    );
}

#[tokio::test]
async fn a_concurrent_outside_change_aborts_rather_than_overwrites() {
    let (provider, cluster) = provider(3, ("0", "8"));
    // Someone scales the Deployment behind the index's back.
    cluster.objects().resource_version = 99;
    let err = provider.increase_size("m5", 1).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::Cluster(ClusterError::Conflict(_))),
        "{err}"
    );
    assert_eq!(provider.target_size("m5").unwrap(), 3);
}

#[tokio::test]
async fn refused_requests_write_nothing() {
    let (provider, cluster) = provider(3, ("2", "8"));
    let foreign = NodeRef {
        name: "real".to_owned(),
        provider_id: "aws:///i-1".to_owned(),
    };
    assert!(
        provider
            .delete_nodes("m5", &[node_ref("seat-0"), foreign])
            .await
            .is_err()
    );
    assert!(
        provider
            .delete_nodes("m5", &[node_ref("seat-0"), node_ref("seat-1")])
            .await
            .is_err()
    );
    assert!(provider.decrease_target_size("m5", -1).await.is_err());
    assert!(matches!(
        provider.increase_size("c5", 1).await,
        Err(ProviderError::UnknownGroup(_))
    ));
    let objects = cluster.objects();
    assert!(objects.deleted_nodes.is_empty());
    assert!(
        objects
            .pods
            .values()
            .all(|p| p.metadata.annotations.is_none())
    );
    assert_eq!(objects.resource_version, 1);
}

/// Issue 39, finding 1: a provider ID naming the group and a pool-managed node was trusted,
/// and the pool's Node deleted.
#[tokio::test]
async fn a_node_the_group_does_not_have_is_refused_and_nothing_is_written() {
    let (provider, cluster) = provider(3, ("0", "8"));
    let mut pool_node = node("fixed-0", "ksim://fixed/fixed-0");
    pool_node.metadata.labels = Some(
        [(GROUP_LABEL, "fixed"), (OWNER_LABEL, OWNER_POOL)]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
    );
    provider.index().apply_node(&pool_node);
    let forged = NodeRef {
        name: "fixed-0".to_owned(),
        provider_id: "ksim://m5/fixed-0".to_owned(),
    };
    let err = provider
        .delete_nodes("m5", &[node_ref("seat-0"), forged.clone()])
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::Plan(PlanError::NotAMember { .. })),
        "{err}"
    );
    assert_eq!(provider.group_for_provider_id(&forged.provider_id), None);
    assert!(provider.group_for_provider_id("ksim://m5/seat-0").is_some());
    let objects = cluster.objects();
    assert!(objects.deleted_nodes.is_empty());
    assert!(
        objects
            .pods
            .values()
            .all(|p| p.metadata.annotations.is_none())
    );
    assert_eq!(objects.resource_version, 1);
}

#[tokio::test]
async fn a_retry_after_the_seat_and_node_went_writes_nothing() {
    let (provider, cluster) = provider(3, ("0", "8"));
    provider
        .delete_nodes("m5", &[node_ref("seat-0")])
        .await
        .unwrap();
    // The ReplicaSet finishes: the seat pod goes too.
    provider.index().delete_pod("ksim-system", "seat-0");
    let version = cluster.objects().resource_version;
    provider
        .delete_nodes("m5", &[node_ref("seat-0")])
        .await
        .unwrap();
    let objects = cluster.objects();
    assert_eq!(objects.resource_version, version);
    assert_eq!(objects.deleted_nodes, vec!["seat-0"]);
}

#[tokio::test]
async fn an_unready_seat_blocks_the_removal_until_it_times_out() {
    let (provider, cluster) = provider(3, ("0", "8"));
    {
        let objects = cluster.objects();
        cluster.index.apply_pod(&{
            let mut pod = objects.pods["seat-2"].clone();
            pod.status.as_mut().unwrap().phase = Some("Pending".to_owned());
            pod
        });
    }
    let provider = Arc::new(Provider::new(
        provider.index().clone(),
        cluster.clone(),
        Settings {
            settle_timeout: Duration::from_millis(200),
            ..provider.settings().clone()
        },
    ));
    let err = provider
        .delete_nodes("m5", &[node_ref("seat-0")])
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("every other seat to be ready"),
        "{err}"
    );
    // Replicas were not lowered: the ReplicaSet would have taken the unready seat.
    assert_eq!(provider.target_size("m5").unwrap(), 3);
}

#[tokio::test]
async fn answers_without_configuration_say_so_and_gpu_types_come_from_skeletons() {
    let (provider, _) = provider(1, ("0", "3"));
    assert!(matches!(
        provider.template_node("m5"),
        Err(ProviderError::NoSkeleton(_))
    ));
    assert!(matches!(
        provider.options("m5", &ResolvedOptions::default()),
        Err(ProviderError::NotConfigured(_))
    ));
    assert!(matches!(
        provider.options("nope", &ResolvedOptions::default()),
        Err(ProviderError::UnknownGroup(_))
    ));
    assert!(matches!(
        provider.pricing(),
        Err(ProviderError::NotConfigured(_))
    ));
    assert!(provider.gpu_types().is_empty());

    let skeleton = NodeSkeleton::from_yaml(
        "kind: Node\nmetadata:\n  labels: {ksim.io/gpu-type: nvidia-t4}\nstatus:\n  capacity: {cpu: '8', memory: 32Gi}\n",
    )
    .unwrap();
    provider
        .index()
        .apply_deployment(
            &deployment("seats-g4", "g4", 0, ("0", "3")),
            Skeleton::Parsed(Arc::new(skeleton)),
        )
        .unwrap();
    assert_eq!(provider.gpu_types(), vec!["nvidia-t4".to_owned()]);
    assert!(!provider.template_node("g4").unwrap().is_empty());
}

#[tokio::test]
async fn options_are_the_groups_own_and_only_for_a_served_group() {
    let (provider, cluster) = provider(2, ("0", "3"));
    let m5 = GroupOptions {
        scale_down_unneeded_time: Some(Duration::from_secs(180)),
        ..GroupOptions::default()
    };
    let provider = Provider::new(
        provider.index().clone(),
        cluster,
        Settings {
            group_options: HashMap::from([("m5".to_owned(), m5)]),
            ..provider.settings().clone()
        },
    );
    let defaults = ResolvedOptions {
        scale_down_unneeded_time: Duration::from_secs(600),
        max_node_provision_time: Duration::from_secs(900),
        ..ResolvedOptions::default()
    };
    let resolved = provider.options("m5", &defaults).unwrap();
    assert_eq!(resolved.scale_down_unneeded_time, Duration::from_secs(180));
    assert_eq!(resolved.max_node_provision_time, Duration::from_secs(900));
    assert!(matches!(
        provider.options("nope", &defaults),
        Err(ProviderError::UnknownGroup(_))
    ));
}

/// Marks the provider's group retiring, as the driver's cleanup does.
fn retire(provider: &Provider<FakeCluster>, cluster: &FakeCluster) {
    annotate(provider, cluster, RETIRING_ANNOTATION, Some("true"));
}

/// Sets (or with `None` removes) an annotation of the provider's group's Deployment.
fn annotate(
    provider: &Provider<FakeCluster>,
    cluster: &FakeCluster,
    key: &str,
    value: Option<&str>,
) {
    let mut deployment = cluster.objects().deployment.clone().unwrap();
    let annotations = deployment.metadata.annotations.get_or_insert_default();
    match value {
        Some(value) => annotations.insert(key.to_owned(), value.to_owned()),
        None => annotations.remove(key),
    };
    provider
        .index()
        .apply_deployment(&deployment, Skeleton::Missing)
        .unwrap();
    cluster.objects().deployment = Some(deployment);
}

#[tokio::test]
async fn a_held_group_is_frozen_at_its_size_until_the_hold_is_lifted() {
    let (provider, cluster) = provider(3, ("0", "10"));
    synced(&provider);
    let limits = |provider: &Provider<FakeCluster>| {
        provider
            .groups()
            .into_iter()
            .map(|g| (g.id, g.min, g.max))
            .collect::<Vec<_>>()
    };
    assert_eq!(limits(&provider), [("m5".to_owned(), 0, 10)]);

    annotate(&provider, &cluster, HELD_ANNOTATION, Some("true"));
    // Still offered (its nodes are CA's to know), but CA may neither add nor remove a node.
    assert_eq!(limits(&provider), [("m5".to_owned(), 3, 3)]);
    provider.refresh().await.unwrap();
    assert!(!released(&cluster), "a held group is not retiring");

    annotate(&provider, &cluster, HELD_ANNOTATION, None);
    assert_eq!(limits(&provider), [("m5".to_owned(), 0, 10)]);
}

fn released(cluster: &FakeCluster) -> bool {
    let deployment = cluster.objects().deployment.clone().unwrap();
    deployment
        .metadata
        .annotations
        .is_some_and(|a| a.contains_key(RELEASED_ANNOTATION))
}

fn synced(provider: &Provider<FakeCluster>) {
    for source in [Source::Deployments, Source::Seats, Source::Nodes] {
        provider.index().mark_synced(source);
    }
}

#[tokio::test]
async fn a_retiring_group_is_frozen_at_its_size_and_released_at_the_next_refresh() {
    let (provider, cluster) = provider(2, ("0", "10"));
    synced(&provider);
    retire(&provider, &cluster);

    // Still CA's group, so nothing it holds fails; min = max = target, so it starts nothing.
    let frozen = |info: Option<GroupInfo>| info.map(|g| (g.id, g.min, g.max));
    let expected = Some(("m5".to_owned(), 2, 2));
    assert_eq!(frozen(provider.groups().into_iter().next()), expected);
    assert_eq!(
        frozen(provider.group_for_provider_id("ksim://m5/seat-0")),
        expected
    );
    assert!(!released(&cluster));

    provider.refresh().await.unwrap();
    assert!(released(&cluster));
    assert!(provider.index().unreleased().is_empty());
}

#[tokio::test]
async fn a_scale_down_under_way_holds_the_release_until_it_is_done() {
    let (provider, cluster) = provider(2, ("0", "10"));
    synced(&provider);
    let mut tainted = node("seat-1", "ksim://m5/seat-1");
    tainted.spec.get_or_insert_default().taints = Some(vec![k8s_openapi::api::core::v1::Taint {
        key: TO_BE_DELETED_TAINT.to_owned(),
        effect: "NoSchedule".to_owned(),
        ..Default::default()
    }]);
    provider.index().apply_node(&tainted);
    retire(&provider, &cluster);

    provider.refresh().await.unwrap();
    assert!(!released(&cluster), "released while CA removes a node");
    // The group's own limits, not the frozen ones, bound the scale-down CA began.
    provider
        .delete_nodes("m5", &[node_ref("seat-1")])
        .await
        .unwrap();
    provider.refresh().await.unwrap();
    assert!(released(&cluster));
}

#[tokio::test]
async fn a_released_group_is_answered_for_until_the_next_refresh() {
    let (provider, cluster) = provider(2, ("0", "10"));
    synced(&provider);
    retire(&provider, &cluster);
    provider.refresh().await.unwrap();
    let deployment = cluster.objects().deployment.clone().unwrap();
    provider
        .index()
        .apply_deployment(&deployment, Skeleton::Missing)
        .unwrap();
    provider
        .index()
        .delete_deployment("ksim-system", "seats-m5");

    // The loop under way still holds the group.
    assert_eq!(provider.target_size("m5").unwrap(), 2);
    assert_eq!(provider.groups().len(), 1);
    provider.refresh().await.unwrap();
    assert!(matches!(
        provider.target_size("m5"),
        Err(ProviderError::UnknownGroup(_))
    ));
    assert!(provider.groups().is_empty());
}

#[tokio::test]
async fn refresh_before_the_first_lists_marks_nothing() {
    let (provider, cluster) = provider(1, ("0", "10"));
    retire(&provider, &cluster);
    assert!(matches!(
        provider.refresh().await,
        Err(ProviderError::NotSynced)
    ));
    assert!(!released(&cluster));
}

#[tokio::test]
async fn a_resize_whose_call_is_cancelled_still_runs_to_its_end() {
    use crate::grpc::CloudProviderService;
    use ksim_proto::clusterautoscaler::cloudprovider::v1::externalgrpc::{
        self as pb, cloud_provider_server::CloudProvider,
    };

    let (provider, cluster) = provider(3, ("1", "10"));
    let mut events = provider.subscribe();
    let service = CloudProviderService::new(provider.clone());
    let request = pb::NodeGroupDeleteNodesRequest {
        id: "m5".to_owned(),
        nodes: vec![pb::ExternalGrpcNode {
            provider_id: "ksim://m5/seat-2".to_owned(),
            name: "seat-2".to_owned(),
            ..Default::default()
        }],
    };
    // The call is polled until the resize waits, then dropped, as when CA goes away.
    let call = service.node_group_delete_nodes(tonic::Request::new(request));
    tokio::select! {
        biased;
        _ = call => panic!("the resize finished without waiting once"),
        () = tokio::task::yield_now() => {}
    }

    let event = tokio::time::timeout(Duration::from_secs(5), events.recv())
        .await
        .expect("the resize went on")
        .unwrap();
    assert_eq!(
        event,
        ScaleEvent::NodesDeleted {
            group: "m5".to_owned(),
            nodes: vec!["seat-2".to_owned()],
        }
    );
    assert_eq!(cluster.objects().deleted_nodes, ["seat-2"]);
}

/// A provisioning model whose nodes take `termination` to go, as the driver annotates it.
fn provisioning_json(termination: &str) -> String {
    format!(r#"{{"model":"m","seed":1,"speed":1.0,"nodes":{{"termination":"{termination}"}}}}"#)
}

#[tokio::test]
async fn nodes_that_linger_by_the_model_are_left_to_the_pool_to_delete() {
    let (provider, cluster) = provider(3, ("0", "10"));
    let json = provisioning_json("30s");
    annotate(
        &provider,
        &cluster,
        ksim_nodes::labels::PROVISIONING_ANNOTATION,
        Some(&json),
    );
    provider
        .delete_nodes("m5", &[node_ref("seat-1")])
        .await
        .unwrap();
    assert_eq!(deleting_seats(&cluster), vec!["seat-1"]);
    assert!(
        cluster.objects().deleted_nodes.is_empty(),
        "the pool deletes it when its termination delay has passed"
    );
    // Its seat gone, the node that stays is an instance being deleted.
    provider.index().delete_pod("ksim-system", "seat-1");
    let instances = provider.instances("m5").unwrap();
    let seat_1: Vec<_> = instances
        .iter()
        .filter(|instance| instance.id == "ksim://m5/seat-1")
        .collect();
    assert_eq!(seat_1.len(), 1);
    assert_eq!(
        seat_1[0].state,
        crate::domain::group::InstanceState::Deleting
    );

    // No termination delay (or an unreadable model): deleted at once, as without a model.
    for json in [provisioning_json("0s"), "{not json".to_owned()] {
        annotate(
            &provider,
            &cluster,
            ksim_nodes::labels::PROVISIONING_ANNOTATION,
            Some(&json),
        );
        let before = cluster.objects().deleted_nodes.len();
        let seat = if before == 0 { "seat-2" } else { "seat-0" };
        provider
            .delete_nodes("m5", &[node_ref(seat)])
            .await
            .unwrap();
        assert_eq!(cluster.objects().deleted_nodes.len(), before + 1, "{json}");
    }
}

/// Issue 53, finding 1: a held group is offered at min = max = its size, yet a DeleteNodes
/// from another caller took it from 1 to 0 (its own min annotation was 0), and the run waiting
/// for its node failed. CA's contract: DeleteNodes validates the minimal size (only
/// ForceDeleteNodes does not).
#[tokio::test]
async fn a_delete_below_the_min_size_offered_is_refused_and_changes_nothing() {
    let (provider, cluster) = provider(1, ("0", "10"));
    synced(&provider);
    annotate(&provider, &cluster, HELD_ANNOTATION, Some("true"));
    let offered = provider.groups().into_iter().next().unwrap();
    assert_eq!((offered.min, offered.max), (1, 1));
    let error = provider
        .delete_nodes("m5", &[node_ref("seat-0")])
        .await
        .unwrap_err();
    let ProviderError::Plan(PlanError::BelowMin { left, min, .. }) = &error else {
        panic!("{error}");
    };
    assert_eq!((*left, *min), (0, 1));
    let message = error.to_string();
    assert!(
        message.contains("node group m5")
            && message.contains("would leave 0")
            && message.contains("min size 1"),
        "{message}"
    );
    assert_eq!(provider.target_size("m5").unwrap(), 1);
    assert!(deleting_seats(&cluster).is_empty());
    assert!(cluster.objects().deleted_nodes.is_empty());
    // As a gRPC answer: a precondition of the group, not a bad request.
    assert_eq!(
        tonic::Status::from(error).code(),
        tonic::Code::FailedPrecondition
    );

    // The hold lifted, the group's own min (0) bounds it.
    annotate(&provider, &cluster, HELD_ANNOTATION, None);
    provider
        .delete_nodes("m5", &[node_ref("seat-0")])
        .await
        .unwrap();
    assert_eq!(provider.target_size("m5").unwrap(), 0);
}
