//! The behaviours that differ between the cluster-autoscaler releases under test
//! (`CLUSTER_AUTOSCALER_TESTED_VERSIONS`), each against every release. A module of their own,
//! named to run last: libtest starts tests in name order, and deploy/test.sh builds the releases
//! other than the pinned one beside the tests, so by the time these start they are there, not
//! waited on with a test thread held.

use crate::cloudprov::autoscaler::{
    applies_the_options_get_options_answers_per_group,
    scales_from_zero_and_down_exactly_the_nodes_it_named,
};
use crate::cloudprov::startup::booting_nodes_in_a_group_with_options;

/// CA 1.34 reads the template node from the legacy `nodeInfo` field.
#[tokio::test(flavor = "multi_thread")]
async fn real_ca_1_34_5_scales_from_zero_and_down_exactly_the_nodes_it_named() {
    scales_from_zero_and_down_exactly_the_nodes_it_named("1.34.5").await;
}

/// CA 1.35 reads the template node from `nodeBytes` only.
#[tokio::test(flavor = "multi_thread")]
async fn real_ca_1_35_2_scales_from_zero_and_down_exactly_the_nodes_it_named() {
    scales_from_zero_and_down_exactly_the_nodes_it_named("1.35.2").await;
}

/// The newest release, like 1.35 on `nodeBytes`.
#[tokio::test(flavor = "multi_thread")]
async fn real_ca_1_36_1_scales_from_zero_and_down_exactly_the_nodes_it_named() {
    scales_from_zero_and_down_exactly_the_nodes_it_named("1.36.1").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn real_ca_1_34_5_applies_the_options_get_options_answers_per_group() {
    applies_the_options_get_options_answers_per_group("1.34.5").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn real_ca_1_35_2_applies_the_options_get_options_answers_per_group() {
    applies_the_options_get_options_answers_per_group("1.35.2").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn real_ca_1_36_1_applies_the_options_get_options_answers_per_group() {
    applies_the_options_get_options_answers_per_group("1.36.1").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn real_ca_1_34_5_counts_booting_nodes_as_upcoming_with_or_without_options() {
    booting_nodes_in_a_group_with_options("1.34.5").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn real_ca_1_35_2_scales_a_group_with_options_up_again_while_its_nodes_boot() {
    booting_nodes_in_a_group_with_options("1.35.2").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn real_ca_1_36_1_scales_a_group_with_options_up_again_while_its_nodes_boot() {
    booting_nodes_in_a_group_with_options("1.36.1").await;
}
