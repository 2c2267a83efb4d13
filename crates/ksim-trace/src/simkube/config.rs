//! SimKube's tracer configuration as the header's tracked kinds.

use super::model;
use crate::{TraceError, gvk, pb};

pub(super) fn tracer_config(config: &model::TracerConfig) -> Result<pb::TracerConfig, TraceError> {
    let tracked_kinds = config
        .tracked_objects
        .iter()
        .map(|(name, tracked)| tracked_kind(name, tracked))
        .collect::<Result<_, _>>()?;
    // SimKube records no cluster state (a report has nothing to compare a replay with) and no
    // usage.
    Ok(pb::TracerConfig {
        tracked_kinds,
        cluster_recorded: false,
        usage_recording: pb::UsageRecording::Unspecified.into(),
        usage_interval_ms: 0,
    })
}

fn tracked_kind(
    name: &str,
    tracked: &model::TrackedObjectConfig,
) -> Result<pb::TrackedKindConfig, TraceError> {
    let gvk = gvk::parse(name).map_err(|error| {
        TraceError::simkube(format!("config.trackedObjects has a bad key: {error}"))
    })?;
    Ok(pb::TrackedKindConfig {
        plural: plural(&gvk.kind),
        gvk: Some(gvk),
        // SimKube records namespaced objects only.
        namespaced: true,
        pod_template_paths: tracked.pod_spec_template_paths.clone().unwrap_or_default(),
        track_lifecycles: tracked.track_lifecycle.unwrap_or(false),
        skip_owned: tracked.skip_owned.unwrap_or(false),
    })
}

/// A guess at the resource name of a kind, by simple English rules that hold for the built-in
/// kinds: SimKube's trace does not carry the real one. A vowel before a final "y" keeps it
/// ("gateways"), as the real plurals do.
pub(super) fn plural(kind: &str) -> String {
    let lower = kind.to_lowercase();
    if let Some(stem) = lower.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'i', 'o', 'u'])
    {
        return format!("{stem}ies");
    }
    if ["s", "x", "ch", "sh"]
        .iter()
        .any(|end| lower.ends_with(end))
    {
        return format!("{lower}es");
    }
    format!("{lower}s")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::{plural, tracer_config};
    use crate::simkube::model::{TracerConfig, TrackedObjectConfig};

    #[test]
    fn pluralises_kinds_simply() {
        for (kind, expected) in [
            ("Deployment", "deployments"),
            ("Pod", "pods"),
            ("NetworkPolicy", "networkpolicies"),
            ("Ingress", "ingresses"),
            ("Box", "boxes"),
            ("Patch", "patches"),
            ("Mesh", "meshes"),
            ("Gateway", "gateways"),
        ] {
            assert_eq!(plural(kind), expected, "{kind}");
        }
    }

    #[test]
    fn maps_every_setting() {
        let mut config = TracerConfig::default();
        config.tracked_objects.insert(
            "batch/v1.CronJob".to_owned(),
            TrackedObjectConfig {
                pod_spec_template_paths: Some(vec!["/spec/jobTemplate/spec/template".to_owned()]),
                track_lifecycle: Some(true),
                skip_owned: Some(true),
            },
        );
        config
            .tracked_objects
            .insert("v1.Pod".to_owned(), TrackedObjectConfig::default());
        let kinds = tracer_config(&config).unwrap().tracked_kinds;
        assert_eq!(kinds.len(), 2);
        let cron = &kinds[0];
        assert_eq!(cron.gvk.as_ref().unwrap().group, "batch");
        assert_eq!(cron.plural, "cronjobs");
        assert!(cron.namespaced && cron.track_lifecycles && cron.skip_owned);
        assert_eq!(cron.pod_template_paths, ["/spec/jobTemplate/spec/template"]);
        let pod = &kinds[1];
        assert_eq!(pod.plural, "pods");
        assert!(!pod.track_lifecycles && !pod.skip_owned);
        assert!(pod.pod_template_paths.is_empty());
    }

    #[test]
    fn a_bad_kind_is_named() {
        let mut config = TracerConfig::default();
        config
            .tracked_objects
            .insert("Deployment".to_owned(), TrackedObjectConfig::default());
        let error = tracer_config(&config).unwrap_err().to_string();
        assert!(error.contains("trackedObjects"), "{error}");
        assert!(error.contains("\"Deployment\""), "{error}");
    }
}
