//! Per-group autoscaling options (NodeGroupGetOptions). A group without configured options is
//! answered UNIMPLEMENTED so cluster-autoscaler uses its flags; a configured group gets every
//! field, the unconfigured ones taken from the defaults cluster-autoscaler sent, because older
//! versions dereference the durations without checking them.

use std::time::Duration;

use serde::Deserialize;
use thiserror::Error;

/// The longest duration cluster-autoscaler can hold: a Go `time.Duration` is int64 nanoseconds
/// (about 292 years). A longer one would reach it clamped, a value nobody wrote.
pub const MAX_DURATION: Duration = Duration::from_nanos(i64::MAX as u64);

/// A group option no cluster-autoscaler setting can mean.
#[derive(Debug, Error, Clone, PartialEq)]
#[error("nodeGroups[{group:?}].{field} is {value}: {expected}")]
pub struct BadOption {
    pub group: String,
    /// The option's name as written, e.g. `scaleDownUtilizationThreshold`.
    pub field: &'static str,
    pub value: String,
    pub expected: &'static str,
}

/// Options a user configured for one group; `None` = cluster-autoscaler's default.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GroupOptions {
    pub scale_down_utilization_threshold: Option<f64>,
    pub scale_down_gpu_utilization_threshold: Option<f64>,
    #[serde(default, with = "go_duration")]
    pub scale_down_unneeded_time: Option<Duration>,
    #[serde(default, with = "go_duration")]
    pub scale_down_unready_time: Option<Duration>,
    #[serde(default, with = "go_duration")]
    pub max_node_provision_time: Option<Duration>,
    pub zero_or_max_node_scaling: Option<bool>,
    pub ignore_daemon_sets_utilization: Option<bool>,
}

/// Every option, as returned to cluster-autoscaler.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResolvedOptions {
    pub scale_down_utilization_threshold: f64,
    pub scale_down_gpu_utilization_threshold: f64,
    pub scale_down_unneeded_time: Duration,
    pub scale_down_unready_time: Duration,
    pub max_node_provision_time: Duration,
    pub zero_or_max_node_scaling: bool,
    pub ignore_daemon_sets_utilization: bool,
}

impl GroupOptions {
    /// The first option of group `group` that no setting can mean: a utilization threshold
    /// outside 0 to 1 (or NaN), a duration longer than cluster-autoscaler can hold.
    pub fn validate(&self, group: &str) -> Result<(), BadOption> {
        let bad = |field, value: String, expected| BadOption {
            group: group.to_owned(),
            field,
            value,
            expected,
        };
        for (field, threshold) in [
            (
                "scaleDownUtilizationThreshold",
                self.scale_down_utilization_threshold,
            ),
            (
                "scaleDownGpuUtilizationThreshold",
                self.scale_down_gpu_utilization_threshold,
            ),
        ] {
            if let Some(value) = threshold
                && !(0.0..=1.0).contains(&value)
            {
                return Err(bad(
                    field,
                    value.to_string(),
                    "a utilization threshold is a fraction from 0 to 1",
                ));
            }
        }
        for (field, duration) in [
            ("scaleDownUnneededTime", self.scale_down_unneeded_time),
            ("scaleDownUnreadyTime", self.scale_down_unready_time),
            ("maxNodeProvisionTime", self.max_node_provision_time),
        ] {
            if let Some(value) = duration
                && value > MAX_DURATION
            {
                return Err(bad(
                    field,
                    humantime::format_duration(value).to_string(),
                    "longer than cluster-autoscaler's durations can hold (about 292 years)",
                ));
            }
        }
        Ok(())
    }

    pub fn resolve(&self, defaults: &ResolvedOptions) -> ResolvedOptions {
        ResolvedOptions {
            scale_down_utilization_threshold: self
                .scale_down_utilization_threshold
                .unwrap_or(defaults.scale_down_utilization_threshold),
            scale_down_gpu_utilization_threshold: self
                .scale_down_gpu_utilization_threshold
                .unwrap_or(defaults.scale_down_gpu_utilization_threshold),
            scale_down_unneeded_time: self
                .scale_down_unneeded_time
                .unwrap_or(defaults.scale_down_unneeded_time),
            scale_down_unready_time: self
                .scale_down_unready_time
                .unwrap_or(defaults.scale_down_unready_time),
            max_node_provision_time: self
                .max_node_provision_time
                .unwrap_or(defaults.max_node_provision_time),
            zero_or_max_node_scaling: self
                .zero_or_max_node_scaling
                .unwrap_or(defaults.zero_or_max_node_scaling),
            ignore_daemon_sets_utilization: self
                .ignore_daemon_sets_utilization
                .unwrap_or(defaults.ignore_daemon_sets_utilization),
        }
    }
}

/// Durations written the way cluster-autoscaler's flags take them: `10m`, `30s`, `1h30m`.
mod go_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, de::Error};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let Some(text) = Option::<String>::deserialize(d)? else {
            return Ok(None);
        };
        humantime::parse_duration(&text).map(Some).map_err(|e| {
            D::Error::custom(format!("{text:?} is not a duration like 10m or 30s: {e}"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_fields_come_from_the_defaults() {
        let options: GroupOptions =
            serde_saphyr::from_str("scaleDownUnneededTime: 1m30s\nzeroOrMaxNodeScaling: true\n")
                .unwrap();
        let defaults = ResolvedOptions {
            scale_down_utilization_threshold: 0.5,
            scale_down_unready_time: Duration::from_secs(1200),
            max_node_provision_time: Duration::from_secs(900),
            ..ResolvedOptions::default()
        };
        let resolved = options.resolve(&defaults);
        assert_eq!(resolved.scale_down_unneeded_time, Duration::from_secs(90));
        assert!(resolved.zero_or_max_node_scaling);
        assert_eq!(resolved.scale_down_utilization_threshold, 0.5);
        assert_eq!(resolved.max_node_provision_time, Duration::from_secs(900));
    }

    /// Issue 39, finding 8: options CA can make no sense of were served as they were.
    #[test]
    fn thresholds_outside_a_fraction_and_endless_durations_are_refused_by_name() {
        let valid: GroupOptions = serde_saphyr::from_str(
            "scaleDownUtilizationThreshold: 0\nscaleDownGpuUtilizationThreshold: 1\nmaxNodeProvisionTime: 290y\n",
        )
        .unwrap();
        assert_eq!(valid.validate("m5"), Ok(()));
        for (yaml, field, value) in [
            (
                "scaleDownUtilizationThreshold: -0.1",
                "scaleDownUtilizationThreshold",
                "-0.1",
            ),
            (
                "scaleDownUtilizationThreshold: .nan",
                "scaleDownUtilizationThreshold",
                "NaN",
            ),
            (
                "scaleDownGpuUtilizationThreshold: 1.5",
                "scaleDownGpuUtilizationThreshold",
                "1.5",
            ),
            (
                "scaleDownGpuUtilizationThreshold: .inf",
                "scaleDownGpuUtilizationThreshold",
                "inf",
            ),
            (
                "scaleDownUnneededTime: 300y",
                "scaleDownUnneededTime",
                "300years",
            ),
            (
                "scaleDownUnreadyTime: 300y",
                "scaleDownUnreadyTime",
                "300years",
            ),
            (
                "maxNodeProvisionTime: 300y",
                "maxNodeProvisionTime",
                "300years",
            ),
        ] {
            let options: GroupOptions = serde_saphyr::from_str(yaml).unwrap();
            let err = options.validate("m5").unwrap_err();
            assert_eq!((err.field, err.value.as_str()), (field, value), "{yaml}");
            assert!(
                err.to_string()
                    .starts_with(&format!("nodeGroups[\"m5\"].{field} is {value}: ")),
                "{err}"
            );
        }
    }

    #[test]
    fn unknown_fields_and_bad_durations_are_refused() {
        assert!(serde_saphyr::from_str::<GroupOptions>("scaleDownUnneded: 1m\n").is_err());
        let err = serde_saphyr::from_str::<GroupOptions>("maxNodeProvisionTime: soon\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"soon\" is not a duration"), "{err}");
    }
}
