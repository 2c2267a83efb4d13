//! Seat Deployments: a Deployment labelled [`GROUP_LABEL`] is a node group, each of its pods
//! a "seat" for one virtual node. The pool registers the nodes; the cloud provider scales the
//! Deployment. Both read the group and its skeleton from the Deployment the same way.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use thiserror::Error;

use crate::labels::{
    GROUP_LABEL, MAX_SIZE_ANNOTATION, MIN_SIZE_ANNOTATION, NO_SCHEDULE, PROVISIONING_ANNOTATION,
    SEAT_HOST_LABEL, SKELETON_ANNOTATION, SKELETON_CONFIGMAP_ANNOTATION, TRUE_VALUE,
    VIRTUAL_TAINT_KEY,
};

/// Image of the seat container; the pool plays its kubelet, so it is never pulled.
pub const SEAT_IMAGE: &str = "registry.k8s.io/pause:3.10";

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

/// A seat Deployment to create: one virtual node per replica, on the pool's seat host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeatDeployment {
    pub group: String,
    pub namespace: String,
    pub replicas: i32,
    pub skeleton: SkeletonSource,
    /// Limits for cluster-autoscaler; unset ones are the provider's defaults.
    pub min_size: Option<i32>,
    pub max_size: Option<i32>,
    /// The group's provisioning model as JSON (`GroupProvisioning::to_json`), written to the
    /// Deployment's [`PROVISIONING_ANNOTATION`]; `None`: no delays.
    pub provisioning: Option<String>,
}

impl SeatDeployment {
    /// The Deployment `seats-<group>`, as `deploy/vnode/examples/seat-deployment.yaml` shows it.
    pub fn to_deployment(&self) -> Deployment {
        let group_labels = BTreeMap::from([(GROUP_LABEL.to_owned(), self.group.clone())]);
        let annotations: BTreeMap<String, String> = [
            (MIN_SIZE_ANNOTATION, self.min_size.map(|n| n.to_string())),
            (MAX_SIZE_ANNOTATION, self.max_size.map(|n| n.to_string())),
            (PROVISIONING_ANNOTATION, self.provisioning.clone()),
        ]
        .into_iter()
        .filter_map(|(key, value)| Some((key.to_owned(), value?)))
        .collect();
        let skeleton = match &self.skeleton {
            SkeletonSource::Inline(yaml) => (SKELETON_ANNOTATION, yaml),
            SkeletonSource::ConfigMap(name) => (SKELETON_CONFIGMAP_ANNOTATION, name),
        };
        let toleration = |key: &str| Toleration {
            key: Some(key.to_owned()),
            operator: Some("Exists".to_owned()),
            effect: Some(NO_SCHEDULE.to_owned()),
            ..Toleration::default()
        };
        Deployment {
            metadata: ObjectMeta {
                name: Some(format!("seats-{}", self.group)),
                namespace: Some(self.namespace.clone()),
                labels: Some(group_labels.clone()),
                annotations: (!annotations.is_empty()).then_some(annotations),
                ..ObjectMeta::default()
            },
            spec: Some(DeploymentSpec {
                replicas: Some(self.replicas),
                selector: LabelSelector {
                    match_labels: Some(group_labels.clone()),
                    ..LabelSelector::default()
                },
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(group_labels),
                        annotations: Some(BTreeMap::from([(
                            skeleton.0.to_owned(),
                            skeleton.1.clone(),
                        )])),
                        ..ObjectMeta::default()
                    }),
                    spec: Some(PodSpec {
                        // Seats run only on the pool's seat host node.
                        node_selector: Some(BTreeMap::from([(
                            SEAT_HOST_LABEL.to_owned(),
                            TRUE_VALUE.to_owned(),
                        )])),
                        tolerations: Some(vec![
                            toleration(SEAT_HOST_LABEL),
                            toleration(VIRTUAL_TAINT_KEY),
                        ]),
                        containers: vec![Container {
                            name: "seat".to_owned(),
                            image: Some(SEAT_IMAGE.to_owned()),
                            ..Container::default()
                        }],
                        ..PodSpec::default()
                    }),
                },
                ..DeploymentSpec::default()
            }),
            status: None,
        }
    }
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

/// The provisioning model a seat Deployment carries ([`PROVISIONING_ANNOTATION`]), unparsed.
pub fn provisioning_of(deployment: &Deployment) -> Option<&str> {
    deployment
        .metadata
        .annotations
        .as_ref()?
        .get(PROVISIONING_ANNOTATION)
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
    fn a_built_seat_deployment_reads_back_as_its_group_and_skeleton() {
        let seats = SeatDeployment {
            group: "m5".to_owned(),
            namespace: "ksim-system".to_owned(),
            replicas: 2,
            skeleton: SkeletonSource::ConfigMap("m5-shape".to_owned()),
            min_size: Some(1),
            max_size: None,
            provisioning: Some("{\"model\":\"m\"}".to_owned()),
        };
        let deployment = seats.to_deployment();
        assert_eq!(group_of(&deployment), Some("m5"));
        assert_eq!(provisioning_of(&deployment), seats.provisioning.as_deref());
        assert_eq!(skeleton_source(&deployment), Ok(seats.skeleton.clone()));
        let annotations = deployment.metadata.annotations.clone().unwrap();
        assert_eq!(
            annotations.get(MIN_SIZE_ANNOTATION).map(String::as_str),
            Some("1")
        );
        assert!(!annotations.contains_key(MAX_SIZE_ANNOTATION));
        let spec = deployment.spec.unwrap();
        // The selector must match the template, or the apiserver refuses the Deployment.
        assert_eq!(
            spec.selector.match_labels,
            spec.template.metadata.unwrap().labels
        );
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
