//! Which objects an export keeps: namespaces, labels and kinds (`ksim.trace.v1.TraceFilter`).

use std::collections::BTreeMap;

use ksim_proto::ksim::trace::v1 as pb;
use serde_json::Value;

use super::selector::{Selector, SelectorError};

/// Why a request's filter was refused, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    #[error("filter.{field}: {source}")]
    Selector {
        field: &'static str,
        source: SelectorError,
    },
    #[error("filter.include_kinds[{index}]: kind is required")]
    KindRequired { index: usize },
}

#[derive(Debug, Clone, Default)]
pub struct Filter {
    include_namespaces: Vec<String>,
    exclude_namespaces: Vec<String>,
    include_selectors: Vec<Selector>,
    exclude_selectors: Vec<Selector>,
    include_kinds: Vec<(String, String)>,
    include_cluster_scoped: bool,
}

impl Filter {
    /// Parses the request's filter; an unset filter keeps everything.
    pub fn from_proto(filter: Option<&pb::TraceFilter>) -> Result<Self, FilterError> {
        let Some(filter) = filter else {
            return Ok(Self::default());
        };
        let parse_all = |texts: &[String], field: &'static str| {
            texts
                .iter()
                .map(|t| {
                    Selector::parse(t).map_err(|source| FilterError::Selector { field, source })
                })
                .collect::<Result<Vec<_>, _>>()
        };
        let include_kinds = filter
            .include_kinds
            .iter()
            .enumerate()
            .map(|(i, gvk)| {
                if gvk.kind.is_empty() {
                    Err(FilterError::KindRequired { index: i })
                } else {
                    Ok((gvk.group.clone(), gvk.kind.clone()))
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            include_namespaces: filter.include_namespaces.clone(),
            exclude_namespaces: filter.exclude_namespaces.clone(),
            include_selectors: parse_all(
                &filter.include_label_selectors,
                "include_label_selectors",
            )?,
            exclude_selectors: parse_all(
                &filter.exclude_label_selectors,
                "exclude_label_selectors",
            )?,
            include_kinds,
            include_cluster_scoped: filter.include_cluster_scoped,
        })
    }

    /// Whether the pods of `namespace` count in the exported cluster samples: the namespace
    /// rules apply; kind and label rules are about objects, not about what the cluster ran.
    pub fn keeps_namespace(&self, namespace: &str) -> bool {
        !self.exclude_namespaces.iter().any(|n| n == namespace)
            && (self.include_namespaces.is_empty()
                || self.include_namespaces.iter().any(|n| n == namespace))
    }

    pub fn keeps(&self, object: &pb::TraceObject) -> bool {
        let gvk = object.gvk.clone().unwrap_or_default();
        if !self.include_kinds.is_empty()
            && !self
                .include_kinds
                .iter()
                .any(|(g, k)| *g == gvk.group && *k == gvk.kind)
        {
            return false;
        }
        let namespace = object.namespace.as_str();
        if self.exclude_namespaces.iter().any(|n| n == namespace) {
            return false;
        }
        if !self.include_namespaces.is_empty() {
            let cluster_scoped_kept = namespace.is_empty() && self.include_cluster_scoped;
            if !cluster_scoped_kept && !self.include_namespaces.iter().any(|n| n == namespace) {
                return false;
            }
        }
        if self.include_selectors.is_empty() && self.exclude_selectors.is_empty() {
            return true;
        }
        let labels = labels_of(&object.object_json);
        (self.include_selectors.is_empty()
            || self.include_selectors.iter().any(|s| s.matches(&labels)))
            && !self.exclude_selectors.iter().any(|s| s.matches(&labels))
    }
}

fn labels_of(object_json: &[u8]) -> BTreeMap<String, String> {
    let Ok(object) = serde_json::from_slice::<Value>(object_json) else {
        return BTreeMap::new();
    };
    object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|labels| {
            labels
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn object(kind: &str, namespace: &str, labels: Value) -> pb::TraceObject {
        pb::TraceObject {
            gvk: Some(pb::GroupVersionKind {
                group: "apps".into(),
                version: "v1".into(),
                kind: kind.into(),
            }),
            namespace: namespace.into(),
            name: "x".into(),
            object_json: serde_json::to_vec(&json!({"metadata": {"name": "x", "labels": labels}}))
                .unwrap(),
        }
    }

    #[test]
    fn unset_filter_keeps_everything() {
        let filter = Filter::from_proto(None).unwrap();
        assert!(filter.keeps(&object("Deployment", "a", json!({}))));
    }

    #[test]
    fn namespaces_labels_and_kinds_combine() {
        let filter = Filter::from_proto(Some(&pb::TraceFilter {
            include_namespaces: vec!["shop".into()],
            exclude_namespaces: vec!["kube-system".into()],
            include_label_selectors: vec!["app=web".into(), "app=api".into()],
            exclude_label_selectors: vec!["canary".into()],
            include_kinds: vec![pb::GroupVersionKind {
                group: "apps".into(),
                version: String::new(),
                kind: "Deployment".into(),
            }],
            include_cluster_scoped: true,
        }))
        .unwrap();
        assert!(filter.keeps(&object("Deployment", "shop", json!({"app": "web"}))));
        assert!(filter.keeps(&object("Deployment", "shop", json!({"app": "api"}))));
        assert!(
            filter.keeps(&object("Deployment", "", json!({"app": "api"}))),
            "cluster-scoped kept"
        );
        assert!(!filter.keeps(&object("Deployment", "other", json!({"app": "web"}))));
        assert!(!filter.keeps(&object("Deployment", "shop", json!({"app": "db"}))));
        assert!(!filter.keeps(&object(
            "Deployment",
            "shop",
            json!({"app": "web", "canary": "1"})
        )));
        assert!(!filter.keeps(&object("StatefulSet", "shop", json!({"app": "web"}))));
    }

    #[test]
    fn cluster_scoped_objects_follow_the_flag_when_namespaces_are_listed() {
        let filter = Filter::from_proto(Some(&pb::TraceFilter {
            include_namespaces: vec!["shop".into()],
            ..Default::default()
        }))
        .unwrap();
        assert!(!filter.keeps(&object("Deployment", "", json!({}))));
        assert!(filter.keeps(&object("Deployment", "shop", json!({}))));
    }

    #[test]
    fn a_bad_selector_names_its_field() {
        let error = Filter::from_proto(Some(&pb::TraceFilter {
            exclude_label_selectors: vec!["a in b".into()],
            ..Default::default()
        }))
        .unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("filter.exclude_label_selectors"),
            "{error}"
        );
    }
}
