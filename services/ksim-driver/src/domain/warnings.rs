//! What a run's report warns of: conditions known to make its figures differ from what the
//! recorded cluster would show, one sentence each. The driver gathers the facts (the applied
//! configuration, the provider's answers, the model); this decides.

use std::time::Duration;

use ksim_provisioning::Model;

/// The flag cluster-autoscaler 1.35 added with the per-group startup time; a binary that lists
/// it (the applied configuration names every flag the binary has) reads that time from
/// GetOptions.
pub const STARTUP_TIME_FLAG: &str = "max-node-startup-time";

/// What the cluster-autoscaler of the run does with a group's node startup time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartupTime {
    /// Per group, from GetOptions (1.35 and later), which over externalgrpc carries none, so
    /// 0 for a group that answers it. `global` is `--max-node-startup-time` as given.
    PerGroup { global: String },
    /// The same fixed 15 minutes for every group (before 1.35).
    Fixed,
    /// No cluster-autoscaler, or no environment to say which runs.
    Unknown,
}

impl StartupTime {
    /// From the configuration the environment applied; `None` without an environment.
    pub fn of(configuration: Option<&ksim_report::AppliedConfiguration>) -> Self {
        match configuration {
            Some(configuration) if configuration.autoscaler => configuration
                .autoscaler_flags
                .iter()
                .find(|flag| flag.name == STARTUP_TIME_FLAG)
                .map_or(Self::Fixed, |flag| Self::PerGroup {
                    global: flag.given.clone(),
                }),
            _ => Self::Unknown,
        }
    }
}

/// A node group the provider offers cluster-autoscaler, as the warnings need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfferedGroup {
    pub name: String,
    /// The provider answers GetOptions for it with options (rather than UNIMPLEMENTED).
    pub answers_options: bool,
    /// Its nodes' median ready delay in the run's model, recorded time; `None`: no delay.
    pub ready_p50: Option<Duration>,
}

impl OfferedGroup {
    /// `name`'s ready delay as `model` gives it.
    pub fn new(name: &str, answers_options: bool, model: &Model) -> Self {
        let ready = model.node_delays(name).ready;
        Self {
            name: name.to_owned(),
            answers_options,
            ready_p50: (!ready.is_zero()).then(|| ready.median()),
        }
    }
}

/// Every warning of a run, in a stable order.
pub fn warnings(startup: &StartupTime, groups: &[OfferedGroup]) -> Vec<String> {
    startup_time(startup, groups).into_iter().collect()
}

/// CA 1.35+ takes a startup time of 0 for a group that answers GetOptions, so its booting
/// nodes count as unready from the moment they register: CA scales up again for the same pods
/// and, past its unready limits, stops autoscaling the whole cluster until they are Ready
/// (docs/compatibility.md has the measurements).
pub fn startup_time(startup: &StartupTime, groups: &[OfferedGroup]) -> Option<String> {
    let StartupTime::PerGroup { global } = startup else {
        return None;
    };
    let affected: Vec<String> = groups
        .iter()
        .filter(|group| group.answers_options)
        .filter_map(|group| {
            let ready = group.ready_p50?;
            Some(format!(
                "{} (ready p50 {})",
                group.name,
                humantime::format_duration(ready)
            ))
        })
        .collect();
    if affected.is_empty() {
        return None;
    }
    let (groups, their) = if affected.len() == 1 {
        ("node group", "its")
    } else {
        ("node groups", "their")
    };
    Some(format!(
        "{groups} {} answer{} cluster-autoscaler's GetOptions and the model gives {their} \
         nodes a ready delay: this cluster-autoscaler has --{STARTUP_TIME_FLAG} (added in \
         1.35), and the releases tested with it (1.35.2, 1.36.1) take a startup time of 0 for \
         such a group instead of {global}, so each booting node counts as unready, not \
         upcoming; it scales up again \
         for the same pending pods, stops autoscaling the whole cluster (\"Cluster is not \
         ready for autoscaling\") once the unready nodes exceed its unready limits, and \
         removes the extra nodes only after they are Ready and unneeded",
        affected.join(", "),
        if affected.len() == 1 { "s" } else { "" },
    ))
}

/// The first warning of the report a running simulation saves as it goes (`covered`: how far
/// into the replay, recorded time). Should its driver stop, that report is the one a restarted
/// driver serves, so it says how far its figures go; the final report replaces it.
pub fn saved_mid_run(covered: Duration) -> String {
    format!(
        "figures of the replay's first {} (recorded time) only, the last the driver saved: it \
         stopped before the simulation ended, and nothing after was observed",
        humantime::format_duration(Duration::from_secs(covered.as_secs()))
    )
}

/// The warning of a group some of whose nodes run without their devices: the pool could not
/// publish them as the skeleton says (`why`, as its event on the node said), so the GPU pods
/// that wait for them wait for good.
pub fn devices_not_published(group: &str, nodes: usize, why: &str) -> String {
    format!(
        "the devices of {nodes} node(s) of group {group} were not published, so no claim can \
         be allocated on them: {why}"
    )
}

/// The warning of a run that asked for explanations and got none while pods were scheduled:
/// the cluster's scheduler is not one that writes them.
pub fn no_explanations() -> String {
    "explanations were asked for, but the scheduler wrote none: it is not ksim-scheduler (the \
     environment's scheduler; docs/explain.md), or it explains none of the run's pods"
        .to_owned()
}

/// The warning of a report whose driver stopped before it saved any figures: the counts and
/// times printed with it are placeholders, not measurements.
pub const NOTHING_SAVED: &str = "no figures: the driver running the simulation stopped before \
     it saved any, so every count and time in this report is unknown, not zero";

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_report_saved_mid_run_says_how_far_its_figures_go() {
        let warning = saved_mid_run(Duration::from_millis(95_700));
        assert!(
            warning.starts_with("figures of the replay's first 1m 35s "),
            "{warning}"
        );
        assert!(
            warning.contains("stopped before the simulation ended"),
            "{warning}"
        );
    }

    fn group(name: &str, answers_options: bool, ready_secs: u64) -> OfferedGroup {
        OfferedGroup {
            name: name.to_owned(),
            answers_options,
            ready_p50: (ready_secs > 0).then(|| Duration::from_secs(ready_secs)),
        }
    }

    fn per_group() -> StartupTime {
        StartupTime::PerGroup {
            global: "15m".to_owned(),
        }
    }

    #[test]
    fn a_group_with_options_and_booting_nodes_on_1_35_is_named() {
        let warning = startup_time(
            &per_group(),
            &[group("gpu", true, 120), group("web", false, 120)],
        )
        .unwrap();
        assert!(
            warning.starts_with("node group gpu (ready p50 2m) answers"),
            "{warning}"
        );
        assert!(
            warning.contains("has --max-node-startup-time (added in 1.35)"),
            "{warning}"
        );
        assert!(warning.contains("instead of 15m"), "{warning}");
        assert!(!warning.contains("web"), "{warning}");
    }

    #[test]
    fn several_groups_are_named_together() {
        let warning =
            startup_time(&per_group(), &[group("a", true, 30), group("b", true, 90)]).unwrap();
        assert!(
            warning.starts_with("node groups a (ready p50 30s), b (ready p50 1m 30s) answer "),
            "{warning}"
        );
        assert!(warning.contains("their nodes"), "{warning}");
    }

    #[test]
    fn no_warning_without_all_three_conditions() {
        // Options but nodes Ready at once; a delay but no options; an older CA; no CA known.
        assert_eq!(startup_time(&per_group(), &[group("a", true, 0)]), None);
        assert_eq!(startup_time(&per_group(), &[group("a", false, 60)]), None);
        assert_eq!(
            startup_time(&StartupTime::Fixed, &[group("a", true, 60)]),
            None
        );
        assert_eq!(
            startup_time(&StartupTime::Unknown, &[group("a", true, 60)]),
            None
        );
        assert_eq!(startup_time(&per_group(), &[]), None);
    }

    fn configuration(
        autoscaler: bool,
        flags: &[(&str, &str)],
    ) -> ksim_report::AppliedConfiguration {
        ksim_report::AppliedConfiguration {
            autoscaler,
            autoscaler_flags: flags
                .iter()
                .map(|(name, given)| ksim_report::AutoscalerFlag {
                    name: (*name).to_owned(),
                    given: (*given).to_owned(),
                    ..ksim_report::AutoscalerFlag::default()
                })
                .collect(),
            ..ksim_report::AppliedConfiguration::default()
        }
    }

    #[test]
    fn the_release_is_known_by_its_startup_time_flag() {
        let with = configuration(
            true,
            &[("scan-interval", "10s"), ("max-node-startup-time", "15m")],
        );
        assert_eq!(
            StartupTime::of(Some(&with)),
            StartupTime::PerGroup {
                global: "15m".to_owned()
            }
        );
        let without = configuration(true, &[("scan-interval", "10s")]);
        assert_eq!(StartupTime::of(Some(&without)), StartupTime::Fixed);
        let no_ca = configuration(false, &[("max-node-startup-time", "15m")]);
        assert_eq!(StartupTime::of(Some(&no_ca)), StartupTime::Unknown);
        assert_eq!(StartupTime::of(None), StartupTime::Unknown);
    }

    #[test]
    fn a_group_takes_its_ready_delay_from_the_model() {
        let model = Model::parse(
            "m.yaml",
            "name: m\nnodes:\n  default: {ready: 40s}\n  groups:\n    fast: {ready: 0s}\n",
        )
        .unwrap();
        assert_eq!(
            OfferedGroup::new("slow", true, &model).ready_p50,
            Some(Duration::from_secs(40))
        );
        assert_eq!(OfferedGroup::new("fast", true, &model).ready_p50, None);
    }
}
