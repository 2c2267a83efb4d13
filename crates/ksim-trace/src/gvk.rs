//! Kind names as SimKube and kubectl write them: `group/version.Kind`, and `version.Kind` for
//! the core group.

use crate::{TraceError, pb};

/// `"apps/v1.Deployment"`, or `"v1.Pod"` for the core group.
pub fn display(gvk: &pb::GroupVersionKind) -> String {
    if gvk.group.is_empty() {
        format!("{}.{}", gvk.version, gvk.kind)
    } else {
        format!("{}/{}.{}", gvk.group, gvk.version, gvk.kind)
    }
}

/// The inverse of [`display`].
pub fn parse(text: &str) -> Result<pb::GroupVersionKind, TraceError> {
    let invalid = |reason| TraceError::InvalidGvk {
        text: text.to_owned(),
        reason,
    };
    let (group, version_kind) = match text.split_once('/') {
        Some((group, rest)) => (group, rest),
        None => ("", text),
    };
    if text.contains('/') && group.is_empty() {
        return Err(invalid("the group before '/' is empty"));
    }
    if version_kind.contains('/') {
        return Err(invalid("more than one '/'"));
    }
    // Versions never contain a dot, groups usually do: the kind follows the first dot after '/'.
    let Some((version, kind)) = version_kind.split_once('.') else {
        return Err(invalid(
            "expected version.Kind, as in apps/v1.Deployment or v1.Pod",
        ));
    };
    if version.is_empty() {
        return Err(invalid("the version is empty"));
    }
    if kind.is_empty() {
        return Err(invalid("the kind is empty"));
    }
    if text.chars().any(char::is_whitespace) {
        return Err(invalid("it contains whitespace"));
    }
    Ok(pb::GroupVersionKind {
        group: group.to_owned(),
        version: version.to_owned(),
        kind: kind.to_owned(),
    })
}

/// The kind of an object from its `apiVersion` and `kind` fields: `("apps/v1", "Deployment")`,
/// or `("v1", "Pod")` for the core group.
pub fn from_api_version(api_version: &str, kind: &str) -> pb::GroupVersionKind {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    pb::GroupVersionKind {
        group: group.to_owned(),
        version: version.to_owned(),
        kind: kind.to_owned(),
    }
}

/// A Kubernetes Event, of the core group or `events.k8s.io`.
pub fn is_event(gvk: &pb::GroupVersionKind) -> bool {
    gvk.kind == "Event" && (gvk.group.is_empty() || gvk.group == "events.k8s.io")
}

/// A kind a recording observes but no user creates: Events (written by controllers about
/// what happened) and Nodes (the cloud's). They are evidence for reports and calibration; a
/// replay must never create them, or the simulated cluster reads its own recording back.
pub fn is_observed_only(gvk: &pb::GroupVersionKind) -> bool {
    is_event(gvk) || (gvk.group.is_empty() && gvk.kind == "Node")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::{display, from_api_version, is_observed_only, parse};
    use crate::TraceError;

    #[test]
    fn displays_grouped_and_core_kinds() {
        assert_eq!(
            display(&from_api_version("apps/v1", "Deployment")),
            "apps/v1.Deployment"
        );
        assert_eq!(display(&from_api_version("v1", "Pod")), "v1.Pod");
        assert_eq!(
            display(&from_api_version("batch.volcano.sh/v1alpha1", "Job")),
            "batch.volcano.sh/v1alpha1.Job"
        );
    }

    #[test]
    fn parse_inverts_display() {
        for text in [
            "apps/v1.Deployment",
            "v1.Pod",
            "batch/v1.CronJob",
            "batch.volcano.sh/v1alpha1.Job",
        ] {
            let gvk = parse(text).unwrap();
            assert_eq!(display(&gvk), text);
        }
        let gvk = parse("apps/v1.Deployment").unwrap();
        assert_eq!(
            (gvk.group.as_str(), gvk.version.as_str(), gvk.kind.as_str()),
            ("apps", "v1", "Deployment")
        );
        assert_eq!(parse("v1.Pod").unwrap().group, "");
    }

    #[test]
    fn parse_refuses_malformed_names_and_says_why() {
        for (text, why) in [
            ("Deployment", "expected version.Kind"),
            ("apps/Deployment", "expected version.Kind"),
            ("/v1.Pod", "group"),
            ("a/b/v1.Pod", "more than one"),
            (".Pod", "version is empty"),
            ("v1.", "kind is empty"),
            ("v1.Po d", "whitespace"),
            ("", "expected version.Kind"),
        ] {
            match parse(text) {
                Err(error @ TraceError::InvalidGvk { .. }) => {
                    let message = error.to_string();
                    assert!(message.contains(why), "{text:?}: {message}");
                    assert!(message.contains(&format!("{text:?}")), "{message}");
                }
                other => panic!("{text:?}: expected InvalidGvk, got {other:?}"),
            }
        }
    }

    #[test]
    fn events_and_nodes_are_observed_only() {
        for (api_version, kind) in [
            ("v1", "Event"),
            ("events.k8s.io/v1", "Event"),
            ("v1", "Node"),
        ] {
            assert!(
                is_observed_only(&from_api_version(api_version, kind)),
                "{kind}"
            );
        }
        for (api_version, kind) in [
            ("v1", "Pod"),
            ("apps/v1", "Deployment"),
            ("example.com/v1", "Event"),
            ("example.com/v1", "Node"),
        ] {
            assert!(
                !is_observed_only(&from_api_version(api_version, kind)),
                "{api_version} {kind}"
            );
        }
    }
}
