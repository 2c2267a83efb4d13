//! The provisioning model: how long a node takes from a scale-up to existing and to Ready,
//! how long a removed node lingers before it is gone, and how long a bound pod takes to start,
//! in recorded time (a replay at speed S divides each draw by S, like every other duration).
//!
//! A model file (YAML, unknown keys refused):
//!
//! ```yaml
//! name: prod-eu-1          # what reports call it
//! source: ksim trace calibrate prod.ksimtrace   # where its figures came from
//! seed: 7                  # the same seed draws the same delays
//! nodes:
//!   default:               # every group the model does not name
//!     registration: {p50: 40s, p90: 70s}   # scale-up -> the Node object exists
//!     ready: 5s                            # the Node exists -> Ready
//!     termination: 30s                     # scale-down -> the node is gone
//!   groups:
//!     gpu: {registration: {samples: [2m, 2m30s, 3m10s]}}   # unset fields: the default's
//! pods:
//!   default: {start: {p50: 2s, p90: 4s}, firstPull: 8s}
//!   owners:
//!     Deployment/shop/web: {start: 5s}
//! ```
//!
//! Each delay is a [`Delay`]: fixed, percentiles or samples. [`Model::builtin`] names the
//! models that need no file: `instant` (no delays) and `published` (the figures
//! docs/provisioning.md gives, for traces that hold no nodes to learn from).

pub mod calibrate;
pub mod delay;
pub mod go_duration;
pub mod observe;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use delay::{Delay, DelayError, MAX_DELAY};

/// The longest a model's name or source may be: both are printed on one summary line.
const MAX_LABEL: usize = 256;

/// How long a node of one group takes to come and to go.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeDelays {
    /// From the scale-up (the seat or the pool's scale request) to the Node object existing.
    #[serde(default, skip_serializing_if = "Delay::is_zero")]
    pub registration: Delay,
    /// From the Node existing to its Ready condition turning True.
    #[serde(default, skip_serializing_if = "Delay::is_zero")]
    pub ready: Delay,
    /// From the scale-down to the node being gone; until then it is unschedulable, then
    /// NotReady, and counts in node-hours.
    #[serde(default, skip_serializing_if = "Delay::is_zero")]
    pub termination: Delay,
}

impl NodeDelays {
    pub fn is_zero(&self) -> bool {
        self.registration.is_zero() && self.ready.is_zero() && self.termination.is_zero()
    }

    fn fields(&self) -> [(&'static str, &Delay); 3] {
        [
            ("registration", &self.registration),
            ("ready", &self.ready),
            ("termination", &self.termination),
        ]
    }
}

/// A group's override: each field it sets replaces the default's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeDelaysOverride {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registration: Option<Delay>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<Delay>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination: Option<Delay>,
}

impl NodeDelaysOverride {
    fn over(&self, base: &NodeDelays) -> NodeDelays {
        NodeDelays {
            registration: self
                .registration
                .clone()
                .unwrap_or_else(|| base.registration.clone()),
            ready: self.ready.clone().unwrap_or_else(|| base.ready.clone()),
            termination: self
                .termination
                .clone()
                .unwrap_or_else(|| base.termination.clone()),
        }
    }

    fn fields(&self) -> [(&'static str, Option<&Delay>); 3] {
        [
            ("registration", self.registration.as_ref()),
            ("ready", self.ready.as_ref()),
            ("termination", self.termination.as_ref()),
        ]
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeModel {
    #[serde(default, skip_serializing_if = "NodeDelays::is_zero")]
    pub default: NodeDelays,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub groups: BTreeMap<String, NodeDelaysOverride>,
}

/// How long a bound pod takes to run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodDelays {
    /// From bound to Running, images present.
    #[serde(default, skip_serializing_if = "Delay::is_zero")]
    pub start: Delay,
    /// Added for the first pod of an image on a node: pulling it. Later pods of the same
    /// image on that node do not pay it.
    #[serde(default, skip_serializing_if = "Delay::is_zero")]
    pub first_pull: Delay,
}

impl PodDelays {
    pub fn is_zero(&self) -> bool {
        self.start.is_zero() && self.first_pull.is_zero()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodModel {
    #[serde(default, skip_serializing_if = "PodDelays::is_zero")]
    pub default: PodDelays,
    /// By owner, `Kind/namespace/name` as recorded (`Deployment/shop/web`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub owners: BTreeMap<String, PodDelays>,
}

/// A whole provisioning model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Model {
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    #[serde(default)]
    pub seed: u64,
    #[serde(default)]
    pub nodes: NodeModel,
    #[serde(default)]
    pub pods: PodModel,
}

/// A model that cannot be taken: the field and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    #[error("{file}: {message}")]
    Parse { file: String, message: String },
    #[error("{field}: {problem}")]
    Field { field: String, problem: String },
    #[error("no built-in provisioning model {0:?} (there are: instant, published)")]
    UnknownBuiltin(String),
}

impl ModelError {
    fn field(field: impl Into<String>, problem: impl ToString) -> Self {
        Self::Field {
            field: field.into(),
            problem: problem.to_string(),
        }
    }
}

/// The built-in model with no delays: nodes Ready and pods Running at once.
pub const INSTANT: &str = "instant";
/// The built-in model from published figures, for traces that hold no nodes.
pub const PUBLISHED: &str = "published";

impl Model {
    /// Reads and checks the YAML text of `file`.
    pub fn parse(file: &str, yaml: &str) -> Result<Self, ModelError> {
        let model: Self = serde_saphyr::from_str(yaml).map_err(|error| {
            // The parser's first line says where and what; the rest is a snippet of the file.
            let text = error.to_string();
            let first = text.lines().next().unwrap_or_default();
            ModelError::Parse {
                file: file.to_owned(),
                message: first.trim_start_matches("error: ").to_owned(),
            }
        })?;
        model.check()?;
        Ok(model)
    }

    /// `instant` or `published`.
    pub fn builtin(name: &str) -> Result<Self, ModelError> {
        match name {
            INSTANT => Ok(Self::instant()),
            PUBLISHED => Ok(Self::published()),
            other => Err(ModelError::UnknownBuiltin(other.to_owned())),
        }
    }

    /// No delays at all: what every run had before models existed.
    pub fn instant() -> Self {
        Self {
            name: INSTANT.to_owned(),
            source: "built in: no delays".to_owned(),
            seed: 0,
            nodes: NodeModel::default(),
            pods: PodModel::default(),
        }
    }

    /// Figures from published sources (docs/provisioning.md says which): a node Ready in
    /// about a minute and a half, three to four minutes in the tail, as cluster-autoscaler's
    /// FAQ reports; pods started within the startup SLO's 5 s at p99, plus an image pull.
    pub fn published() -> Self {
        let p = |p50: u64, p90: u64, p99: u64| Delay::Percentiles {
            p50: Duration::from_secs(p50),
            p90: Some(Duration::from_secs(p90)),
            p99: Some(Duration::from_secs(p99)),
        };
        Self {
            name: PUBLISHED.to_owned(),
            source: "built in: published figures (docs/provisioning.md)".to_owned(),
            seed: 0,
            nodes: NodeModel {
                default: NodeDelays {
                    registration: p(60, 120, 180),
                    ready: p(15, 30, 60),
                    termination: p(30, 60, 90),
                },
                groups: BTreeMap::new(),
            },
            pods: PodModel {
                default: PodDelays {
                    start: p(2, 4, 5),
                    first_pull: p(10, 30, 60),
                },
                owners: BTreeMap::new(),
            },
        }
    }

    /// Every field's bounds and order, each error naming the field (`nodes.default.ready.p90`).
    pub fn check(&self) -> Result<(), ModelError> {
        for (field, text) in [("name", &self.name), ("source", &self.source)] {
            if text.len() > MAX_LABEL || text.contains(['\n', '\r']) {
                return Err(ModelError::field(
                    field,
                    format!("must be one line of at most {MAX_LABEL} bytes"),
                ));
            }
        }
        if self.name.trim().is_empty() {
            return Err(ModelError::field("name", "must not be empty"));
        }
        let check = |path: String, delay: &Delay| {
            delay
                .check()
                .map_err(|error| ModelError::field(path, error))
        };
        for (name, delay) in self.nodes.default.fields() {
            check(format!("nodes.default.{name}"), delay)?;
        }
        for (group, delays) in &self.nodes.groups {
            for (name, delay) in delays.fields() {
                if let Some(delay) = delay {
                    check(format!("nodes.groups.{group}.{name}"), delay)?;
                }
            }
        }
        let pods = std::iter::once(("pods.default".to_owned(), &self.pods.default)).chain(
            self.pods
                .owners
                .iter()
                .map(|(owner, delays)| (format!("pods.owners.{owner}"), delays)),
        );
        for (path, delays) in pods {
            check(format!("{path}.start"), &delays.start)?;
            check(format!("{path}.firstPull"), &delays.first_pull)?;
        }
        for owner in self.pods.owners.keys() {
            if owner.split('/').count() != 3 || owner.split('/').any(str::is_empty) {
                return Err(ModelError::field(
                    format!("pods.owners.{owner}"),
                    "an owner is Kind/namespace/name, e.g. Deployment/shop/web",
                ));
            }
        }
        Ok(())
    }

    /// Every group the model names is one of `groups` (the run's): a model for a group the
    /// run does not have is a mistake, not a no-op.
    pub fn check_groups<'a>(
        &self,
        groups: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), ModelError> {
        let known: Vec<&str> = groups.into_iter().collect();
        match self
            .nodes
            .groups
            .keys()
            .find(|group| !known.contains(&group.as_str()))
        {
            Some(group) => Err(ModelError::field(
                format!("nodes.groups.{group}"),
                format!(
                    "the run has no node group {group} (it has: {})",
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                ),
            )),
            None => Ok(()),
        }
    }

    /// The delays of `group`'s nodes: its override over the default.
    pub fn node_delays(&self, group: &str) -> NodeDelays {
        match self.nodes.groups.get(group) {
            Some(over) => over.over(&self.nodes.default),
            None => self.nodes.default.clone(),
        }
    }

    /// The delays of pods of `owner` (`Kind/namespace/name`), else the default.
    pub fn pod_delays(&self, owner: &str) -> &PodDelays {
        self.pods.owners.get(owner).unwrap_or(&self.pods.default)
    }

    /// Whether the model delays nothing.
    pub fn is_instant(&self) -> bool {
        self.nodes.default.is_zero()
            && self.nodes.groups.values().all(|over| {
                over.fields()
                    .iter()
                    .all(|(_, delay)| delay.is_none_or(Delay::is_zero))
            })
            && self.pods.default.is_zero()
            && self.pods.owners.values().all(PodDelays::is_zero)
    }

    /// One line for a summary: the name, where it came from, the default node and pod delays.
    pub fn summary(&self) -> String {
        let nodes = &self.nodes.default;
        let mut line = format!("{} ({})", self.name, self.source);
        if self.is_instant() {
            line.push_str(": no delays");
            return line;
        }
        line.push_str(&format!(
            ": node registration {}, ready {}, termination {}; pod start {}, first pull {}",
            nodes.registration,
            nodes.ready,
            nodes.termination,
            self.pods.default.start,
            self.pods.default.first_pull
        ));
        if !self.nodes.groups.is_empty() {
            line.push_str(&format!(
                "; {} group(s) of their own",
                self.nodes.groups.len()
            ));
        }
        line
    }

    /// The model as a file (what `ksim trace calibrate -o` writes).
    pub fn to_yaml(&self) -> String {
        serde_saphyr::to_string(self).unwrap_or_default()
    }
}

/// What travels with one node group to the pool that plays its nodes: the group's delays, the
/// stream they are drawn from, and the speed that divides them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GroupProvisioning {
    /// The model's name, for the pool's logs and metrics.
    pub model: String,
    pub seed: u64,
    pub speed: f64,
    pub nodes: NodeDelays,
}

impl GroupProvisioning {
    /// `group`'s part of `model` at `speed`.
    pub fn of(model: &Model, group: &str, speed: f64) -> Self {
        Self {
            model: model.name.clone(),
            seed: model.seed,
            speed,
            nodes: model.node_delays(group),
        }
    }

    /// Reads what [`Self::to_json`] wrote (an annotation, a request field), checked.
    pub fn from_json(text: &str) -> Result<Self, ModelError> {
        let parsed: Self = carried("provisioning", text, |parsed: &Self| parsed.speed)?;
        for (name, delay) in parsed.nodes.fields() {
            delay
                .check()
                .map_err(|error| ModelError::field(format!("nodes.{name}"), error))?;
        }
        Ok(parsed)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// `delay` in the simulation's time: divided by the speed.
    pub fn as_run(&self, delay: Duration) -> Duration {
        divided(delay, self.speed)
    }
}

/// What travels with a replayed pod to the pool that starts it: its owner's start delays, the
/// stream they are drawn from, and the speed that divides them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodProvisioning {
    /// The model's name, for the pool's logs.
    pub model: String,
    pub seed: u64,
    pub speed: f64,
    pub pods: PodDelays,
}

impl PodProvisioning {
    /// The part of `model` for pods of `owner` (`Kind/namespace/name` as recorded) at `speed`;
    /// `None` when they start at once.
    pub fn of(model: &Model, owner: &str, speed: f64) -> Option<Self> {
        let pods = model.pod_delays(owner);
        (!pods.is_zero()).then(|| Self {
            model: model.name.clone(),
            seed: model.seed,
            speed,
            pods: pods.clone(),
        })
    }

    /// Reads what [`Self::to_json`] wrote (a pod annotation), checked.
    pub fn from_json(text: &str) -> Result<Self, ModelError> {
        let parsed: Self = carried("pod provisioning", text, |parsed: &Self| parsed.speed)?;
        for (name, delay) in [
            ("start", &parsed.pods.start),
            ("firstPull", &parsed.pods.first_pull),
        ] {
            delay
                .check()
                .map_err(|error| ModelError::field(format!("pods.{name}"), error))?;
        }
        Ok(parsed)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// `delay` in the simulation's time: divided by the speed.
    pub fn as_run(&self, delay: Duration) -> Duration {
        divided(delay, self.speed)
    }
}

/// What a group or a pod carries (`what`), read from its JSON, its speed checked.
fn carried<T: serde::de::DeserializeOwned>(
    what: &str,
    text: &str,
    speed: impl Fn(&T) -> f64,
) -> Result<T, ModelError> {
    let parsed: T = serde_json::from_str(text).map_err(|error| ModelError::Parse {
        file: what.to_owned(),
        message: error.to_string(),
    })?;
    let speed = speed(&parsed);
    if !(speed.is_finite() && speed > 0.0) {
        return Err(ModelError::field(
            "speed",
            format!("must be a number > 0, got {speed}"),
        ));
    }
    Ok(parsed)
}

/// `delay` at `speed`, at most [`MAX_DELAY`].
fn divided(delay: Duration, speed: f64) -> Duration {
    Duration::try_from_secs_f64(delay.as_secs_f64() / speed).unwrap_or(MAX_DELAY)
}

/// A seeded stream of draws for one thing (a group's nodes, a node's pods): the same seed and
/// name give the same delays in the same order, whatever else the run does.
#[derive(Debug, Clone)]
pub struct Draws {
    rng: fastrand::Rng,
}

impl Draws {
    pub fn new(seed: u64, name: &str) -> Self {
        Self {
            rng: fastrand::Rng::with_seed(seed ^ fnv1a(name.as_bytes())),
        }
    }

    /// The next draw of `delay`, in recorded time.
    pub fn next(&mut self, delay: &Delay) -> Duration {
        // Two numbers per draw whatever the delay, so one delay's kind never shifts another's.
        let (u1, u2) = (self.rng.f64(), self.rng.f64());
        delay.draw(u1, u2)
    }
}

/// FNV-1a: a stable hash (std's is randomised per process), so a name's stream is the same in
/// every run.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const FILE: &str = "\
name: prod
source: calibrated
seed: 7
nodes:
  default:
    registration: {p50: 40s, p90: 70s}
    ready: 5s
    termination: 30s
  groups:
    gpu: {registration: {samples: [2m, 3m]}}
pods:
  default: {start: {p50: 2s, p90: 4s}, firstPull: 8s}
  owners:
    Deployment/shop/web: {start: 5s}
";

    #[test]
    fn a_model_file_reads_with_group_overrides() {
        let model = Model::parse("m.yaml", FILE).unwrap();
        assert_eq!(model.seed, 7);
        let gpu = model.node_delays("gpu");
        assert_eq!(
            gpu.registration,
            Delay::Samples(vec![Duration::from_secs(120), Duration::from_secs(180)])
        );
        assert_eq!(gpu.ready, Delay::fixed_secs(5));
        assert_eq!(model.node_delays("other"), model.nodes.default);
        assert_eq!(
            model.pod_delays("Deployment/shop/web").start,
            Delay::fixed_secs(5)
        );
        assert_eq!(model.pod_delays("Job/x/y").first_pull, Delay::fixed_secs(8));
        assert_eq!(Model::parse("again", &model.to_yaml()).unwrap(), model);
        assert!(
            model
                .summary()
                .starts_with("prod (calibrated): node registration p50 40s")
        );
    }

    #[test]
    fn bad_models_are_refused_naming_the_field() {
        for (text, says) in [
            ("name: m\nnodes: {default: {ready: -5s}}", "negative"),
            (
                "name: m\nnodes: {groups: {a: {ready: {p50: 1m, p90: 30s}}}}",
                "nodes.groups.a.ready: p90 (30s) is shorter than p50 (1m)",
            ),
            (
                "name: m\nnodes: {default: {termination: 48h}}",
                "nodes.default.termination: 48h is longer than 24h",
            ),
            ("name: m\nnodes: {default: {boot: 1m}}", "unknown field"),
            (
                "name: m\npods: {owners: {web: {start: 1s}}}",
                "pods.owners.web: an owner is",
            ),
            ("name: ''", "name: must not be empty"),
            ("seed: 1", "name"),
        ] {
            let error = Model::parse("m.yaml", text).unwrap_err().to_string();
            assert!(error.contains(says), "{text}: {error}");
        }
    }

    #[test]
    fn a_group_the_run_lacks_is_refused() {
        let model = Model::parse("m.yaml", FILE).unwrap();
        assert!(model.check_groups(["gpu", "cpu"]).is_ok());
        assert_eq!(
            model.check_groups(["cpu"]).unwrap_err().to_string(),
            "nodes.groups.gpu: the run has no node group gpu (it has: cpu)"
        );
    }

    #[test]
    fn builtins_are_named_and_checked() {
        assert!(Model::builtin(INSTANT).unwrap().is_instant());
        let published = Model::builtin(PUBLISHED).unwrap();
        assert!(published.check().is_ok());
        assert!(!published.is_instant());
        assert!(Model::builtin("fast").is_err());
        assert!(Model::instant().summary().ends_with("no delays"));
    }

    #[test]
    fn a_group_carries_its_delays_and_the_speed() {
        let model = Model::parse("m.yaml", FILE).unwrap();
        let group = GroupProvisioning::of(&model, "gpu", 10.0);
        let back = GroupProvisioning::from_json(&group.to_json()).unwrap();
        assert_eq!(back, group);
        assert_eq!(
            back.as_run(Duration::from_secs(120)),
            Duration::from_secs(12)
        );
        let bad = group.to_json().replace("\"speed\":10.0", "\"speed\":0.0");
        assert!(
            GroupProvisioning::from_json(&bad)
                .unwrap_err()
                .to_string()
                .contains("speed")
        );
    }

    #[test]
    fn a_pod_carries_its_owners_delays_or_nothing() {
        let model = Model::parse("m.yaml", FILE).unwrap();
        let web = PodProvisioning::of(&model, "Deployment/shop/web", 2.0).unwrap();
        assert_eq!(web.pods.start, Delay::fixed_secs(5));
        assert_eq!(PodProvisioning::from_json(&web.to_json()).unwrap(), web);
        assert_eq!(
            web.as_run(Duration::from_secs(5)),
            Duration::from_millis(2500)
        );
        assert_eq!(PodProvisioning::of(&Model::instant(), "Job/a/b", 1.0), None);
        assert!(PodProvisioning::from_json("{}").is_err());
    }

    #[test]
    fn the_same_seed_and_name_draw_the_same_delays() {
        let delay = Delay::Percentiles {
            p50: Duration::from_secs(40),
            p90: Some(Duration::from_secs(70)),
            p99: None,
        };
        let draws = |seed, name| {
            let mut d = Draws::new(seed, name);
            (0..5).map(|_| d.next(&delay)).collect::<Vec<_>>()
        };
        assert_eq!(draws(1, "a"), draws(1, "a"));
        assert_ne!(draws(1, "a"), draws(2, "a"));
        assert_ne!(draws(1, "a"), draws(1, "b"));
    }
}
