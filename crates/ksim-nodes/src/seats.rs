//! Seat Deployments: a Deployment labelled [`GROUP_LABEL`] is a node group, each of its pods
//! a "seat" for one virtual node. The pool registers the nodes; the cloud provider scales the
//! Deployment. Both read the group and its skeleton from the Deployment the same way.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use thiserror::Error;

use crate::labels::{GROUP_LABEL, SKELETON_ANNOTATION, SKELETON_CONFIGMAP_ANNOTATION};

/// Key of the skeleton YAML in a ConfigMap named by [`SKELETON_CONFIGMAP_ANNOTATION`].
pub const SKELETON_CONFIGMAP_KEY: &str = "node.yaml";

/// Where a seat Deployment keeps its node skeleton.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkeletonSource {
    /// YAML inline in the pod template's [`SKELETON_ANNOTATION`].
    Inline(String),
    /// A ConfigMap in the Deployment's namespace, key [`SKELETON_CONFIGMAP_KEY`].
    ConfigMap(String),
}

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum SeatError {
    #[error(
        "its pod template has neither a {SKELETON_ANNOTATION} nor a {SKELETON_CONFIGMAP_ANNOTATION} annotation"
    )]
    NoSkeleton,
}

/// The node group a Deployment backs, if it is a seat Deployment.
pub fn group_of(deployment: &Deployment) -> Option<&str> {
    deployment
        .metadata
        .labels
        .as_ref()?
        .get(GROUP_LABEL)
        .map(String::as_str)
}

/// Where the Deployment's pod template keeps the skeleton; inline wins over a ConfigMap.
pub fn skeleton_source(deployment: &Deployment) -> Result<SkeletonSource, SeatError> {
    let empty = BTreeMap::new();
    let annotations = deployment
        .spec
        .as_ref()
        .and_then(|spec| spec.template.metadata.as_ref())
        .and_then(|meta| meta.annotations.as_ref())
        .unwrap_or(&empty);
    if let Some(inline) = annotations.get(SKELETON_ANNOTATION) {
        Ok(SkeletonSource::Inline(inline.clone()))
    } else if let Some(name) = annotations.get(SKELETON_CONFIGMAP_ANNOTATION) {
        Ok(SkeletonSource::ConfigMap(name.clone()))
    } else {
        Err(SeatError::NoSkeleton)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::DeploymentSpec;
    use k8s_openapi::api::core::v1::PodTemplateSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn deployment(labels: &[(&str, &str)], template_annotations: &[(&str, &str)]) -> Deployment {
        let map = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>()
        };
        Deployment {
            metadata: ObjectMeta {
                labels: Some(map(labels)),
                ..ObjectMeta::default()
            },
            spec: Some(DeploymentSpec {
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        annotations: Some(map(template_annotations)),
                        ..ObjectMeta::default()
                    }),
                    spec: None,
                },
                ..DeploymentSpec::default()
            }),
            status: None,
        }
    }

    #[test]
    fn the_group_label_names_the_group() {
        assert_eq!(
            group_of(&deployment(&[(GROUP_LABEL, "m5")], &[])),
            Some("m5")
        );
        assert_eq!(group_of(&deployment(&[("app", "web")], &[])), None);
    }

    #[test]
    fn inline_skeleton_wins_over_a_config_map() {
        let both = deployment(
            &[],
            &[
                (SKELETON_ANNOTATION, "kind: Node"),
                (SKELETON_CONFIGMAP_ANNOTATION, "shapes"),
            ],
        );
        assert_eq!(
            skeleton_source(&both),
            Ok(SkeletonSource::Inline("kind: Node".to_owned()))
        );
        let config_map = deployment(&[], &[(SKELETON_CONFIGMAP_ANNOTATION, "shapes")]);
        assert_eq!(
            skeleton_source(&config_map),
            Ok(SkeletonSource::ConfigMap("shapes".to_owned()))
        );
    }

    #[test]
    fn a_template_without_a_skeleton_is_refused_with_both_keys_named() {
        let err = skeleton_source(&deployment(&[], &[("other", "x")])).unwrap_err();
        let message = err.to_string();
        assert!(message.contains(SKELETON_ANNOTATION), "{message}");
        assert!(message.contains(SKELETON_CONFIGMAP_ANNOTATION), "{message}");
    }
}
