//! The index, fed objects directly as the watches would.

use std::collections::BTreeMap;

use k8s_openapi::api::{
    apps::v1::{Deployment, DeploymentSpec},
    core::v1::{Node, NodeSpec, Pod, PodCondition, PodSpec, PodStatus},
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use ksim_nodes::labels::{GROUP_LABEL, OWNER_POOL, OWNER_SEATS};

use super::*;
use crate::domain::{
    group::InstanceState,
    limits::{MAX_SIZE_ANNOTATION, MIN_SIZE_ANNOTATION},
};

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

pub(crate) fn deployment(
    name: &str,
    group: &str,
    replicas: i32,
    limits: (&str, &str),
) -> Deployment {
    Deployment {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some("ksim-system".to_owned()),
            labels: Some(map(&[(GROUP_LABEL, group)])),
            annotations: Some(map(&[
                (MIN_SIZE_ANNOTATION, limits.0),
                (MAX_SIZE_ANNOTATION, limits.1),
            ])),
            resource_version: Some("1".to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(replicas),
            ..DeploymentSpec::default()
        }),
        status: None,
    }
}

/// A seat pod as the ReplicaSet of Deployment `seats-<group>` makes it.
pub(crate) fn seat_pod(name: &str, group: &str, ready: bool) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some("ksim-system".to_owned()),
            labels: Some(map(&[
                (GROUP_LABEL, group),
                (POD_TEMPLATE_HASH_LABEL, "5d8f7c9b6"),
            ])),
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".to_owned(),
                kind: "ReplicaSet".to_owned(),
                name: format!("seats-{group}-5d8f7c9b6"),
                uid: "0b8e0e4c-2f43-4f57-9a43-8f7d2f0c1a11".to_owned(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some("ksim-seat-host-0".to_owned()),
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: Some(if ready { "Running" } else { "Pending" }.to_owned()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".to_owned(),
                status: if ready { "True" } else { "False" }.to_owned(),
                ..PodCondition::default()
            }]),
            ..PodStatus::default()
        }),
    }
}

/// A Node as the pool registers a seat's: labelled with the group its `ksim://` provider ID
/// names and owner `seats`.
pub(crate) fn node(name: &str, provider_id: &str) -> Node {
    let labels = parse_provider_id(provider_id)
        .map(|(group, _)| map(&[(GROUP_LABEL, &group), (OWNER_LABEL, OWNER_SEATS)]));
    Node {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels,
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(provider_id.to_owned()),
            ..NodeSpec::default()
        }),
        status: None,
    }
}

fn with_group() -> Index {
    let index = Index::new(100);
    index
        .apply_deployment(
            &deployment("seats-m5", "m5", 3, ("1", "5")),
            Skeleton::Missing,
        )
        .unwrap();
    index.apply_pod(&seat_pod("seat-a", "m5", true));
    index.apply_pod(&seat_pod("seat-b", "m5", true));
    index.apply_node(&node("seat-a", "ksim://m5/seat-a"));
    index
}

#[test]
fn a_seat_deployment_is_a_group_with_its_limits_and_target() {
    let index = with_group();
    assert_eq!(
        index.groups(),
        vec![GroupInfo {
            id: "m5".to_owned(),
            min: 1,
            max: 5,
            debug: "Deployment ksim-system/seats-m5".to_owned()
        }]
    );
    assert_eq!(index.target_size("m5"), Some(3));
    assert_eq!(index.target_size("c5"), None);
}

#[test]
fn instances_come_from_seats_nodes_and_unseated_replicas() {
    let index = with_group();
    let (state, _) = index.group_state("m5").unwrap();
    let states: Vec<_> = state.instances().into_iter().map(|i| i.state).collect();
    assert_eq!(
        states,
        vec![
            InstanceState::Running,
            InstanceState::Creating,
            InstanceState::Creating
        ]
    );
}

#[test]
fn seats_of_other_namespaces_groups_or_terminated_do_not_count() {
    let index = with_group();
    let mut elsewhere = seat_pod("seat-x", "m5", true);
    elsewhere.metadata.namespace = Some("other".to_owned());
    index.apply_pod(&elsewhere);
    index.apply_pod(&seat_pod("seat-y", "c5", true));
    let mut done = seat_pod("seat-z", "m5", true);
    done.status.as_mut().unwrap().phase = Some("Succeeded".to_owned());
    index.apply_pod(&done);
    let (state, _) = index.group_state("m5").unwrap();
    let names: Vec<_> = state.seats.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, vec!["seat-a", "seat-b"]);
}

#[test]
fn invalid_limits_hide_the_group_and_report_why() {
    let index = Index::new(100);
    let err = index
        .apply_deployment(&deployment("bad", "m5", 1, ("3", "2")), Skeleton::Missing)
        .unwrap_err();
    assert!(err.to_string().contains("above"), "{err}");
    assert!(index.groups().is_empty());
    assert_eq!(index.target_size("m5"), None);
}

#[test]
fn a_deployment_losing_its_label_or_deleted_stops_being_a_group() {
    let index = with_group();
    let mut unlabelled = deployment("seats-m5", "m5", 3, ("1", "5"));
    unlabelled.metadata.labels = None;
    index
        .apply_deployment(&unlabelled, Skeleton::Missing)
        .unwrap();
    assert!(index.groups().is_empty());
    let index = with_group();
    index.delete_deployment("ksim-system", "seats-m5");
    assert!(index.group_state("m5").is_none());
}

#[test]
fn nodes_move_between_states_and_orphans_are_deleting() {
    let index = with_group();
    let mut going = node("seat-a", "ksim://m5/seat-a");
    going.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
    index.apply_node(&going);
    // A seat the group had: its node outlives it, an orphan of the group.
    index.apply_pod(&seat_pod("old-seat", "m5", true));
    index.delete_pod("ksim-system", "old-seat");
    index.apply_node(&node("old-seat", "ksim://m5/old-seat"));
    index.apply_node(&node("real", "aws:///i-1"));
    let (state, _) = index.group_state("m5").unwrap();
    assert_eq!(state.seat("seat-a").unwrap().node, NodeState::Deleting);
    assert_eq!(state.orphan_nodes, vec!["old-seat"]);
    index.delete_node("old-seat");
    assert!(index.group_state("m5").unwrap().0.orphan_nodes.is_empty());
}

#[test]
fn a_relist_drops_what_it_did_not_return() {
    let index = with_group();
    let seen = [("ksim-system".to_owned(), "seat-b".to_owned())]
        .into_iter()
        .collect();
    index.retain(Source::Seats, &seen);
    index.retain(Source::Nodes, &BTreeSet::new());
    let (state, _) = index.group_state("m5").unwrap();
    assert_eq!(state.seats.len(), 1);
    assert_eq!(state.seats[0].name, "seat-b");
    assert_eq!(state.seats[0].node, NodeState::Absent);
}

#[test]
fn synced_only_after_all_three_lists() {
    let index = Index::new(1);
    index.mark_synced(Source::Deployments);
    index.mark_synced(Source::Seats);
    assert!(!index.is_synced());
    index.mark_synced(Source::Nodes);
    assert!(index.is_synced());
}

#[test]
fn deletion_cost_is_read_from_the_annotation() {
    let index = with_group();
    let mut marked = seat_pod("seat-b", "m5", true);
    marked.metadata.annotations = Some(map(&[(DELETION_COST_ANNOTATION, "-2147483648")]));
    index.apply_pod(&marked);
    let (state, _) = index.group_state("m5").unwrap();
    assert_eq!(state.seat("seat-b").unwrap().deletion_cost, i32::MIN);
    assert_eq!(state.seat("seat-a").unwrap().deletion_cost, 0);
}

#[tokio::test]
async fn wait_until_wakes_on_a_change() {
    let index = with_group();
    let waiter = {
        let index = index.clone();
        tokio::spawn(async move {
            index
                .wait_until(std::time::Duration::from_secs(30), |i| {
                    i.target_size("m5") == Some(4)
                })
                .await
        })
    };
    tokio::task::yield_now().await;
    index
        .apply_deployment(
            &deployment("seats-m5", "m5", 4, ("1", "5")),
            Skeleton::Missing,
        )
        .unwrap();
    assert!(waiter.await.unwrap());
}

/// A seat Deployment that takes a pool-managed group's name is served (issue 53: a Node
/// labelled as the pool's must not hide a group), and the pool's nodes are never its members:
/// nothing lists, claims or deletes them through it (issue 14).
#[test]
fn a_pool_managed_groups_nodes_are_never_an_autoscaler_groups_members() {
    let index = Index::new(100);
    let mut pool_node = node("race-0", "ksim://race/race-0");
    pool_node.metadata.labels = Some(map(&[(GROUP_LABEL, "race"), (OWNER_LABEL, OWNER_POOL)]));
    index.apply_node(&pool_node);
    index
        .apply_deployment(
            &deployment("seats-race", "race", 2, ("0", "5")),
            Skeleton::Missing,
        )
        .unwrap();
    assert_eq!(
        index
            .groups()
            .iter()
            .map(|g| g.id.as_str())
            .collect::<Vec<_>>(),
        ["race"]
    );
    assert_eq!(index.target_size("race"), Some(2));
    let (state, _) = index.group_state("race").unwrap();
    assert!(state.seats.is_empty() && state.orphan_nodes.is_empty());
    assert_eq!(index.group_for_provider_id("ksim://race/race-0"), None);
    // Not yet synced: a seat may be listed after its node, so no warning yet.
    assert!(index.ignored_nodes().is_empty());

    // Even a seat of the group's name does not make the pool's node, labelled the pool's, its.
    index.apply_pod(&seat_pod("race-0", "race", true));
    let (state, _) = index.group_state("race").unwrap();
    assert_eq!(state.seat("race-0").unwrap().node, NodeState::Absent);
    assert!(state.orphan_nodes.is_empty());
}

#[test]
fn a_seats_node_readiness_comes_from_its_ready_condition() {
    use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus};
    let index = with_group();
    let (state, _) = index.group_state("m5").unwrap();
    assert!(
        !state.seat("seat-a").unwrap().node_ready,
        "no conditions yet"
    );
    let mut ready = node("seat-a", "ksim://m5/seat-a");
    ready.status = Some(NodeStatus {
        conditions: Some(vec![NodeCondition {
            type_: "Ready".to_owned(),
            status: "True".to_owned(),
            ..NodeCondition::default()
        }]),
        ..NodeStatus::default()
    });
    index.apply_node(&ready);
    let (state, _) = index.group_state("m5").unwrap();
    assert!(state.seat("seat-a").unwrap().node_ready);
    let mut unknown = ready.clone();
    unknown
        .status
        .as_mut()
        .unwrap()
        .conditions
        .as_mut()
        .unwrap()[0]
        .status = "Unknown".to_owned();
    index.apply_node(&unknown);
    let (state, _) = index.group_state("m5").unwrap();
    assert!(!state.seat("seat-a").unwrap().node_ready);
    assert!(state.instances()[0].problem.is_some());
}

/// Issue 39, finding 1: the group of a node is what the index knows of it, never its provider
/// ID alone.
#[test]
fn a_node_belongs_to_a_group_only_as_the_index_knows_it() {
    let index = with_group();
    let mut pool_node = node("fixed-0", "ksim://fixed/fixed-0");
    pool_node.metadata.labels = Some(map(&[(GROUP_LABEL, "fixed"), (OWNER_LABEL, OWNER_POOL)]));
    index.apply_node(&pool_node);
    let group = |id: &str| index.group_for_provider_id(id).map(|g| g.id);
    assert_eq!(
        group("ksim://m5/seat-a"),
        Some("m5".to_owned()),
        "registered"
    );
    assert_eq!(
        group("ksim://m5/seat-b"),
        Some("m5".to_owned()),
        "seat, no node yet"
    );
    let (state, _) = index.group_state("m5").unwrap();
    let placeholder = state.instances().pop().unwrap().id;
    assert_eq!(group(&placeholder), Some("m5".to_owned()));
    // A pool-managed node under the group's provider ID, or a node nobody has.
    assert_eq!(group("ksim://m5/fixed-0"), None);
    assert_eq!(group("ksim://fixed/fixed-0"), None);
    assert_eq!(group("ksim://m5/nobody"), None);

    // A Node with the group's provider ID but not labelled as its seat node is not its member.
    let index = with_group();
    let mut unowned = node("seat-b", "ksim://m5/seat-b");
    unowned.metadata.labels = Some(map(&[(GROUP_LABEL, "m5")]));
    index.apply_node(&unowned);
    index.apply_node(&node("renamed", "ksim://m5/other-name"));
    let (state, _) = index.group_state("m5").unwrap();
    assert_eq!(state.seat("seat-b").unwrap().node, NodeState::Absent);
    assert!(state.orphan_nodes.is_empty(), "{:?}", state.orphan_nodes);
    assert_eq!(index.group_for_provider_id("ksim://m5/other-name"), None);
}

#[test]
fn members_seen_going_are_remembered_and_updates_are_not_departures() {
    let index = with_group();
    // Heartbeats re-apply a node: it has not gone.
    index.apply_node(&node("seat-a", "ksim://m5/seat-a"));
    assert!(index.departed("m5", ["seat-a"]).is_empty());
    index.delete_pod("ksim-system", "seat-a");
    index.delete_node("seat-a");
    index.retain(Source::Seats, &BTreeSet::new());
    assert_eq!(
        index.departed("m5", ["seat-a", "seat-b", "seat-c"]),
        ["seat-a".to_owned(), "seat-b".to_owned()].into()
    );
    assert!(index.departed("c5", ["seat-a"]).is_empty());
}

#[test]
fn a_node_booting_by_its_model_is_no_problem_but_one_gone_quiet_is() {
    use ksim_nodes::node::{Phase, lose_contact, phase_conditions};
    let index = with_group();
    let mut booting = node("seat-a", "ksim://m5/seat-a");
    let now = Timestamp::now();
    booting.status = Some(k8s_openapi::api::core::v1::NodeStatus {
        conditions: Some(phase_conditions(Phase::Booting, now, now)),
        ..Default::default()
    });
    index.apply_node(&booting);
    let (state, _) = index.group_state("m5").unwrap();
    let seat = state.seat("seat-a").unwrap();
    assert!(!seat.node_ready && seat.node_booting);
    assert_eq!(state.instances()[0].problem, None);
    // The lifecycle controller's Unknown (its pool stopped) is a problem again.
    lose_contact(&mut booting);
    index.apply_node(&booting);
    let (state, _) = index.group_state("m5").unwrap();
    assert!(state.instances()[0].problem.is_some());
}

/// Issue 53, finding 1: a Node the pool never made, labelled as a pool-managed group's under
/// a served group's name, made NodeGroups drop the group; one labelled as the group's seat
/// node, with no seat behind it, was counted as the group's. Membership is what the group's
/// Deployment made: a seat pod it owns, and the Node of that seat.
#[test]
fn a_node_without_a_seat_of_the_group_neither_joins_nor_hides_it() {
    let index = with_group();
    for source in [Source::Deployments, Source::Seats, Source::Nodes] {
        index.mark_synced(source);
    }
    let mut pool_labelled = node("m5-x", "ksim://m5/m5-x");
    pool_labelled.metadata.labels = Some(map(&[(GROUP_LABEL, "m5"), (OWNER_LABEL, OWNER_POOL)]));
    index.apply_node(&pool_labelled);
    assert_eq!(
        index
            .groups()
            .iter()
            .map(|g| g.id.as_str())
            .collect::<Vec<_>>(),
        ["m5"]
    );
    assert_eq!(index.target_size("m5"), Some(3));

    // Labelled as the group's seat node, but no seat of the group has its name.
    index.apply_node(&node("forged", "ksim://m5/forged"));
    let (state, _) = index.group_state("m5").unwrap();
    assert!(state.orphan_nodes.is_empty(), "{:?}", state.orphan_nodes);
    assert_eq!(index.group_for_provider_id("ksim://m5/forged"), None);
    assert_eq!(index.group_for_provider_id("ksim://m5/m5-x"), None);
    // Its deletion is no departure of the group's: a retried DeleteNodes naming it is refused.
    index.delete_node("forged");
    assert!(index.departed("m5", ["forged"]).is_empty());

    // A pod labelled with the group that the Deployment's ReplicaSet did not make is no seat,
    // and the Node named after it no member.
    let mut stray = seat_pod("stray", "m5", true);
    stray.metadata.owner_references = None;
    index.apply_pod(&stray);
    index.apply_node(&node("stray", "ksim://m5/stray"));
    let (state, _) = index.group_state("m5").unwrap();
    assert!(state.seat("stray").is_none());
    assert!(state.orphan_nodes.is_empty(), "{:?}", state.orphan_nodes);
    assert_eq!(index.group_for_provider_id("ksim://m5/stray"), None);

    // The seat's own Node still is one, and once its seat goes, an orphan of the group.
    assert_eq!(
        index
            .group_for_provider_id("ksim://m5/seat-a")
            .map(|g| g.id),
        Some("m5".to_owned())
    );
    index.delete_pod("ksim-system", "seat-a");
    let (state, _) = index.group_state("m5").unwrap();
    assert_eq!(state.orphan_nodes, ["seat-a"]);
    // Each ignored Node is named once at warn; a deleted one is forgotten.
    assert_eq!(index.ignored_nodes(), ["m5-x", "stray"]);
}
