//! An experiment file: one trace, the speed and repeats, and the variants to compare, each a
//! configuration under test. Read whole and checked before anything runs; an unknown key or a
//! bad value is an error naming it.

use std::collections::BTreeSet;

use serde::Deserialize;

/// The file as written (YAML), camelCase keys.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Experiment {
    /// The trace file, relative to the experiment file.
    pub trace: String,
    /// Replay speed; default 1.
    #[serde(default = "one")]
    pub speed: f64,
    /// Runs of each variant; default 1.
    #[serde(default = "one_run")]
    pub repeats: u32,
    /// Whether cluster-autoscaler resizes the `autoscalerGroups` (a variant may say otherwise).
    #[serde(default)]
    pub autoscaler: bool,
    /// Fixed-size groups as `ksim run --node-group` takes them (`NAME=SKELETON.yaml:COUNT`).
    #[serde(default)]
    pub node_groups: Vec<String>,
    /// Groups CA resizes, as `--autoscaler-group` (`NAME=SKELETON.yaml:MIN:MAX:INITIAL`).
    #[serde(default)]
    pub autoscaler_groups: Vec<String>,
    /// Karpenter NodePool files, as `ksim run --nodepool` (relative to the experiment file);
    /// the environment must run Karpenter.
    #[serde(default)]
    pub node_pools: Vec<String>,
    /// Karpenter's instance types, as node skeleton files (`ksim up --instance-type`), relative
    /// to the experiment file and priced by each run's `providerConfig`; empty: the KWOK
    /// provider's built-in list. A run on a cluster starts its Karpenter with them; a local
    /// run checks that the environment's Karpenter offers the same.
    #[serde(default)]
    pub instance_types: Vec<String>,
    /// The cloud provider's pricing and per-group options of every variant that names none, as
    /// `ksim run --provider-config`.
    pub provider_config: Option<String>,
    /// Every run starts from a settled cluster, as `ksim run --settle`.
    #[serde(default)]
    pub settle: bool,
    /// The provisioning model of every variant that names none, as `ksim run --provisioning`
    /// (a model file relative to the experiment file, or `instant` / `published`).
    pub provisioning: Option<String>,
    /// Who decides scaled workloads' replica counts in every variant that does not say, as
    /// `ksim run --replicas` (`recorded` or `hpa`; unset: the trace's default).
    pub replicas: Option<Replicas>,
    /// Nodes every variant that names none fails, as `ksim run --node-failure`
    /// (`group=NAME,at=DURATION[,share=S][,for=DURATION]`, recorded time).
    #[serde(default)]
    pub node_failures: Vec<String>,
    /// Zone outages every variant that names none meets, as `ksim run --zone-outage`
    /// (`zone=ZONE,at=DURATION[,for=DURATION]`).
    #[serde(default)]
    pub zone_outages: Vec<String>,
    /// Stockouts every variant that names none meets, as `ksim run --stockout`
    /// (`group=NAME,at=DURATION[,for=DURATION][,instance-type=TYPE]`).
    #[serde(default)]
    pub stockouts: Vec<String>,
    /// Spot interruptions every variant that names none meets, as `ksim run
    /// --spot-interruption` (`group=NAME,at=DURATION` or `group=NAME,rate=R,...`).
    #[serde(default)]
    pub spot_interruptions: Vec<String>,
    /// Node-pool upgrades every variant that names none meets, as `ksim run
    /// --node-pool-upgrade`.
    #[serde(default)]
    pub node_pool_upgrades: Vec<String>,
    /// Replays the failures the recording observed, as `ksim run --replay-failures`.
    #[serde(default)]
    pub replay_failures: bool,
    /// Chooses the nodes the disruptions take, as `ksim run --disruption-seed`: every variant
    /// meets the same failures.
    #[serde(default)]
    pub disruption_seed: u64,
    /// Explains at most this many pods of each workload in every run (0: every pod), as
    /// `ksim run --explain --explain-per-owner N`, so that `ksim compare --pod` can say what
    /// decided a pod in each variant; unset: none.
    pub explain: Option<u32>,
    /// What is compared: at least one; the first is the baseline.
    pub variants: Vec<Variant>,
}

/// One configuration under test.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Variant {
    /// Its name in reports and assertions (`variants.<name>.cost`).
    pub name: String,
    /// A KubeSchedulerConfiguration file, as `ksim run --scheduler-config`.
    pub scheduler_config: Option<String>,
    /// Replaces the experiment's `autoscaler`: a variant of cluster-autoscaler beside one of
    /// Karpenter's `nodePools` (one node autoscaler a run) compares the two on one trace.
    pub autoscaler: Option<bool>,
    /// CA flags as `--autoscaler-arg FLAG=VALUE`.
    #[serde(default)]
    pub autoscaler_args: Vec<String>,
    /// The cloud provider's pricing and per-group options, as `ksim run --provider-config`;
    /// replaces the experiment's.
    pub provider_config: Option<String>,
    /// Trace rules applied before the replay, as `ksim run --transform`.
    pub transform: Option<String>,
    /// Replaces the experiment's node groups for this variant.
    pub node_groups: Option<Vec<String>>,
    /// Replaces the experiment's autoscaler groups for this variant.
    pub autoscaler_groups: Option<Vec<String>>,
    /// Replaces the experiment's NodePools for this variant: the same trace under other
    /// disruption settings, limits or weights.
    pub node_pools: Option<Vec<String>>,
    /// Replaces the experiment's speed for this variant: variants of speeds alone, the baseline
    /// slowest, show how fast the trace replays before it drifts from the baseline
    /// (`nodes_agree_with_baseline`, `lateness_p99_ms`).
    pub speed: Option<f64>,
    /// Replaces the experiment's provisioning model for this variant.
    pub provisioning: Option<String>,
    /// Replaces the experiment's replica source for this variant.
    pub replicas: Option<Replicas>,
    /// Replaces the experiment's node failures for this variant (`[]`: none).
    pub node_failures: Option<Vec<String>>,
    /// Replaces the experiment's zone outages for this variant (`[]`: none).
    pub zone_outages: Option<Vec<String>>,
    /// Replaces the experiment's stockouts for this variant (`[]`: none).
    pub stockouts: Option<Vec<String>>,
    /// Replaces the experiment's spot interruptions for this variant (`[]`: none).
    pub spot_interruptions: Option<Vec<String>>,
    /// Replaces the experiment's node-pool upgrades for this variant (`[]`: none).
    pub node_pool_upgrades: Option<Vec<String>>,
    /// Replaces the experiment's `replayFailures` for this variant.
    pub replay_failures: Option<bool>,
}

/// Who decides the replica counts of workloads an HPA scales.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Replicas {
    /// The recording; the HPAs are not applied.
    Recorded,
    /// The simulated HPAs, acting on the replayed usage.
    Hpa,
}

impl Variant {
    /// The provisioning model it runs with in `experiment`, as given (`None`: the run's default).
    pub fn provisioning_in<'a>(&'a self, experiment: &'a Experiment) -> Option<&'a str> {
        self.provisioning
            .as_deref()
            .or(experiment.provisioning.as_deref())
    }

    /// Who decides replica counts in `experiment` (`None`: the trace's default).
    pub fn replicas_in(&self, experiment: &Experiment) -> Option<Replicas> {
        self.replicas.or(experiment.replicas)
    }

    /// Its provider configuration file in `experiment`, as written.
    pub fn provider_config_in<'a>(&'a self, experiment: &'a Experiment) -> Option<&'a str> {
        self.provider_config
            .as_deref()
            .or(experiment.provider_config.as_deref())
    }

    /// Whether cluster-autoscaler runs in it in `experiment`.
    pub fn autoscaler_in(&self, experiment: &Experiment) -> bool {
        self.autoscaler.unwrap_or(experiment.autoscaler)
    }

    /// Karpenter's NodePool files of it in `experiment`.
    pub fn node_pools_in<'a>(&'a self, experiment: &'a Experiment) -> &'a [String] {
        self.node_pools.as_deref().unwrap_or(&experiment.node_pools)
    }

    /// The node failures it meets in `experiment`, as written.
    pub fn node_failures_in<'a>(&'a self, experiment: &'a Experiment) -> &'a [String] {
        self.node_failures
            .as_deref()
            .unwrap_or(&experiment.node_failures)
    }

    /// The zone outages it meets in `experiment`, as written.
    pub fn zone_outages_in<'a>(&'a self, experiment: &'a Experiment) -> &'a [String] {
        self.zone_outages
            .as_deref()
            .unwrap_or(&experiment.zone_outages)
    }

    /// The stockouts it meets in `experiment`, as written.
    pub fn stockouts_in<'a>(&'a self, experiment: &'a Experiment) -> &'a [String] {
        self.stockouts.as_deref().unwrap_or(&experiment.stockouts)
    }

    /// The node-pool upgrades it meets in `experiment`, as written.
    pub fn node_pool_upgrades_in<'a>(&'a self, experiment: &'a Experiment) -> &'a [String] {
        self.node_pool_upgrades
            .as_deref()
            .unwrap_or(&experiment.node_pool_upgrades)
    }

    /// Whether it replays the recording's failures in `experiment`.
    pub fn replay_failures_in(&self, experiment: &Experiment) -> bool {
        self.replay_failures.unwrap_or(experiment.replay_failures)
    }

    /// The spot interruptions it meets in `experiment`, as written.
    pub fn spot_interruptions_in<'a>(&'a self, experiment: &'a Experiment) -> &'a [String] {
        self.spot_interruptions
            .as_deref()
            .unwrap_or(&experiment.spot_interruptions)
    }

    /// The speed it runs at in `experiment`.
    pub fn speed_in(&self, experiment: &Experiment) -> f64 {
        self.speed.unwrap_or(experiment.speed)
    }
}

fn one() -> f64 {
    1.0
}

fn one_run() -> u32 {
    1
}

/// Most runs of one variant an experiment may ask for.
pub const MAX_REPEATS: u32 = 100;

/// An experiment file that cannot be taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExperimentError {
    #[error("experiment {file}: {message}")]
    Invalid { file: String, message: String },
}

impl Experiment {
    /// Reads and checks the YAML text of `file`.
    pub fn parse(file: &str, yaml: &str) -> Result<Self, ExperimentError> {
        let invalid = |message: String| ExperimentError::Invalid {
            file: file.to_owned(),
            message,
        };
        // The parser's first line says where and what; the rest is a snippet of the file.
        let experiment: Self = serde_saphyr::from_str(yaml).map_err(|error| {
            let text = error.to_string();
            let first = text.lines().next().unwrap_or_default();
            invalid(first.trim_start_matches("error: ").to_owned())
        })?;
        let speeds = std::iter::once(("speed".to_owned(), experiment.speed)).chain(
            experiment.variants.iter().filter_map(|variant| {
                Some((format!("variant {}: speed", variant.name), variant.speed?))
            }),
        );
        for (key, speed) in speeds {
            if !(speed.is_finite() && speed > 0.0) {
                return Err(invalid(format!("{key} must be a number > 0, got {speed}")));
            }
        }
        if !(1..=MAX_REPEATS).contains(&experiment.repeats) {
            return Err(invalid(format!(
                "repeats must be 1 to {MAX_REPEATS}, got {}",
                experiment.repeats
            )));
        }
        if experiment.variants.is_empty() {
            return Err(invalid("variants: give at least one".to_owned()));
        }
        let mut names = BTreeSet::new();
        for variant in &experiment.variants {
            if !is_identifier(&variant.name) {
                return Err(invalid(format!(
                    "variant name {:?} must be letters, digits and '_', not starting with a \
                     digit (assertions name it: variants.<name>.cost)",
                    variant.name
                )));
            }
            if !names.insert(variant.name.as_str()) {
                return Err(invalid(format!("variant {} is named twice", variant.name)));
            }
            let autoscaler = variant.autoscaler_in(&experiment);
            if !autoscaler && !variant.autoscaler_args.is_empty() {
                return Err(invalid(format!(
                    "variant {}: autoscalerArgs need autoscaler: true",
                    variant.name
                )));
            }
            if autoscaler && !variant.node_pools_in(&experiment).is_empty() {
                return Err(invalid(format!(
                    "variant {}: autoscaler and nodePools: a run has one node autoscaler, \
                     cluster-autoscaler or Karpenter (set autoscaler: false in the variant of \
                     NodePools)",
                    variant.name
                )));
            }
        }
        let karpenter = experiment
            .variants
            .iter()
            .any(|variant| !variant.node_pools_in(&experiment).is_empty());
        if !experiment.instance_types.is_empty() && !karpenter {
            return Err(invalid(
                "instanceTypes are Karpenter's, and no variant names nodePools".to_owned(),
            ));
        }
        Ok(experiment)
    }
}

fn is_identifier(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const FILE: &str = "\
trace: demo.ktrace
speed: 10
repeats: 2
autoscaler: true
autoscalerGroups: [\"m5=skeleton.yaml:1:6:1\"]
variants:
- name: baseline
- name: packed
  schedulerConfig: packed.yaml
  autoscalerArgs: [expander=least-waste]
  speed: 20
  replicas: recorded
";

    #[test]
    fn a_file_reads_whole() {
        let experiment = Experiment::parse("e.yaml", FILE).unwrap();
        assert_eq!(experiment.trace, "demo.ktrace");
        assert_eq!((experiment.speed, experiment.repeats), (10.0, 2));
        assert_eq!(experiment.variants.len(), 2);
        let packed = &experiment.variants[1];
        assert_eq!(packed.scheduler_config.as_deref(), Some("packed.yaml"));
        assert_eq!(packed.autoscaler_args, ["expander=least-waste"]);
        assert_eq!(packed.speed_in(&experiment), 20.0);
        assert_eq!(experiment.variants[0].speed_in(&experiment), 10.0);
        assert_eq!(packed.replicas_in(&experiment), Some(Replicas::Recorded));
        assert_eq!(experiment.variants[0].replicas_in(&experiment), None);
        let hpa = Experiment::parse(
            "e.yaml",
            &format!(
                "replicas: hpa
{FILE}"
            ),
        )
        .unwrap();
        assert_eq!(hpa.variants[0].replicas_in(&hpa), Some(Replicas::Hpa));
        assert_eq!(hpa.variants[1].replicas_in(&hpa), Some(Replicas::Recorded));
        assert_eq!(
            experiment.variants[0],
            Variant {
                name: "baseline".into(),
                ..Variant::default()
            }
        );
    }

    #[test]
    fn variants_meet_the_experiments_disruptions_unless_they_name_their_own() {
        let experiment = Experiment::parse(
            "e.yaml",
            &format!(
                "spotInterruptions: [\"group=m5,rate=0.05\"]
disruptionSeed: 3
explain: 5
{FILE}  spotInterruptions: []
"
            ),
        )
        .unwrap();
        assert_eq!(experiment.disruption_seed, 3);
        assert_eq!(experiment.explain, Some(5));
        assert!(!experiment.variants[0].replay_failures_in(&experiment));
        assert_eq!(
            experiment.variants[0].spot_interruptions_in(&experiment),
            ["group=m5,rate=0.05"]
        );
        assert!(
            experiment.variants[1]
                .spot_interruptions_in(&experiment)
                .is_empty(),
            "[] is none"
        );
    }

    #[test]
    fn a_variant_of_karpenter_beside_one_of_cluster_autoscaler() {
        let experiment = Experiment::parse(
            "e.yaml",
            "\
trace: demo.ktrace
autoscaler: true
autoscalerGroups: [\"m5=m5.yaml:0:6:0\"]
instanceTypes: [m5.yaml]
providerConfig: prices.yaml
variants:
- name: ca
- name: karpenter
  autoscaler: false
  nodePools: [general.yaml]
  providerConfig: other-prices.yaml
",
        )
        .unwrap();
        let [ca, karpenter] = &experiment.variants[..] else {
            panic!("two variants")
        };
        assert!(ca.autoscaler_in(&experiment));
        assert!(ca.node_pools_in(&experiment).is_empty());
        assert!(!karpenter.autoscaler_in(&experiment));
        assert_eq!(karpenter.node_pools_in(&experiment), ["general.yaml"]);
        assert_eq!(experiment.instance_types, ["m5.yaml"]);
        assert_eq!(ca.provider_config_in(&experiment), Some("prices.yaml"));
        assert_eq!(
            karpenter.provider_config_in(&experiment),
            Some("other-prices.yaml")
        );
    }

    #[test]
    fn mistakes_are_named() {
        let cases = [
            (format!("{FILE}colour: red\n"), "unknown field `colour`"),
            (
                FILE.replace("  schedulerConfig", "  schedulerConfg"),
                "unknown field `schedulerConfg`",
            ),
            (FILE.replace("speed: 10", "speed: 0"), "speed must be"),
            (
                FILE.replace("speed: 20", "speed: -1"),
                "variant packed: speed must be a number > 0, got -1",
            ),
            (FILE.replace("repeats: 2", "repeats: 0"), "repeats must be"),
            (
                FILE.replace("name: packed", "name: baseline"),
                "named twice",
            ),
            (FILE.replace("name: packed", "name: 2fast"), "\"2fast\""),
            (
                FILE.replace("autoscaler: true", "autoscaler: false"),
                "autoscalerArgs need autoscaler: true",
            ),
            (
                FILE.replace(
                    "- name: packed\n",
                    "- name: packed\n  nodePools: [np.yaml]\n",
                ),
                "variant packed: autoscaler and nodePools",
            ),
            ("trace: t\nvariants: []\n".to_owned(), "at least one"),
            (
                format!("instanceTypes: [m5.yaml]\n{FILE}"),
                "instanceTypes are Karpenter's, and no variant names nodePools",
            ),
            (
                FILE.replace("replicas: recorded", "replicas: hap"),
                "unknown variant `hap`",
            ),
        ];
        for (text, expected) in cases {
            let error = Experiment::parse("e.yaml", &text).unwrap_err().to_string();
            assert_eq!(error.lines().count(), 1, "{error}");
            assert!(error.starts_with("experiment e.yaml: "), "{error}");
            assert!(error.contains(expected), "{expected}: {error}");
        }
    }
}
