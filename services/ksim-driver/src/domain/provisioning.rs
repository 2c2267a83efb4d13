//! Which provisioning model a run uses: the one given, else the one its trace's recording
//! teaches, else the published default; and what the report says of it.

use ksim_provisioning::{Delay, GroupProvisioning, Model, calibrate, observe};
use ksim_report::DelaySamples;
use ksim_trace::Trace;

use super::report::Provisioning;

/// How a run got its model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The spec's.
    Given,
    /// Learned from the trace's recorded nodes and pods.
    Learned,
    /// The built-in model from published figures: the trace recorded no nodes.
    Default,
}

impl Origin {
    fn as_str(self) -> &'static str {
        match self {
            Self::Given => "given",
            Self::Learned => "learned",
            Self::Default => "default",
        }
    }
}

/// The model the trace's recording teaches, as `ksim trace calibrate` would learn it; `None`
/// when it recorded no nodes (a SimKube trace, or one recorded without them).
pub fn learn(trace: &Trace) -> Option<Model> {
    let observations = observe::observe(trace);
    if observations.nodes.is_empty() {
        return None;
    }
    let source = format!(
        "learned from the trace's recording ({} nodes, {} pods)",
        observations.nodes.len(),
        observations.pods.len()
    );
    Some(calibrate::calibrate(&observations, "learned", &source).model)
}

/// The model a run uses and how it got it.
#[derive(Debug, Clone, PartialEq)]
pub struct Chosen {
    pub model: Model,
    pub origin: Origin,
}

impl Chosen {
    /// The given model, else `learned` (what the trace's recording teaches, when it recorded
    /// nodes), else the published default.
    pub fn of(
        given: Option<&Model>,
        trace: &Trace,
        learn: impl FnOnce(&Trace) -> Option<Model>,
    ) -> Self {
        if let Some(model) = given {
            return Self {
                model: model.clone(),
                origin: Origin::Given,
            };
        }
        match learn(trace) {
            Some(model) => Self {
                model,
                origin: Origin::Learned,
            },
            None => Self {
                model: Model::published(),
                origin: Origin::Default,
            },
        }
    }

    /// What an autoscaler group carries to the pool (its delays at the replay's speed); `None` when
    /// the model delays its nodes by nothing, so such a group runs exactly as before models.
    pub fn for_group(&self, group: &str, speed: f64) -> Option<String> {
        let group = GroupProvisioning::of(&self.model, group, speed);
        (!group.nodes.is_zero()).then(|| group.to_json())
    }

    /// What the report says of it.
    pub fn used(&self) -> Provisioning {
        Provisioning {
            name: self.model.name.clone(),
            source: self.model.source.clone(),
            origin: self.origin.as_str().to_owned(),
            summary: self.model.summary(),
            yaml: self.model.to_yaml(),
            delays: sampled_delays(&self.model),
        }
    }
}

/// The model's delays with the samples each holds, so the report can tell a replay that drew
/// one more often than it has samples: the default node delays, then each group's own, then
/// the pod start delay when every pod draws the default's (no owner has its own; with owners
/// the report cannot tell how many pods drew which).
fn sampled_delays(model: &Model) -> Vec<DelaySamples> {
    let samples = |delay: &Delay| match delay {
        Delay::Samples(samples) => samples.len() as u64,
        Delay::Fixed(_) | Delay::Percentiles { .. } => 0,
    };
    let default = &model.nodes.default;
    let defaults = [
        ("registration", Some(&default.registration)),
        ("ready", Some(&default.ready)),
        ("termination", Some(&default.termination)),
    ]
    .map(|(delay, given)| ("nodes".to_owned(), delay, given));
    let groups = model.nodes.groups.iter().flat_map(|(group, own)| {
        [
            ("registration", own.registration.as_ref()),
            ("ready", own.ready.as_ref()),
            ("termination", own.termination.as_ref()),
        ]
        .map(|(delay, given)| (format!("nodes/{group}"), delay, given))
    });
    let pods = model
        .pods
        .owners
        .is_empty()
        .then(|| ("pods".to_owned(), "start", Some(&model.pods.default.start)));
    defaults
        .into_iter()
        .chain(groups)
        .chain(pods)
        .filter_map(|(scope, delay, given)| {
            Some(DelaySamples {
                scope,
                delay: delay.to_owned(),
                samples: samples(given?),
            })
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn model(yaml: &str) -> Model {
        Model::parse("m.yaml", yaml).unwrap()
    }

    #[test]
    fn the_report_learns_how_many_samples_each_node_delay_holds() {
        let chosen = Chosen {
            model: model(
                "name: m\nnodes:\n  default:\n    registration: {samples: [1m, 2m, 70s]}\n    \
                 ready: 5s\n  groups:\n    gpu: {termination: {samples: [30s]}}\n",
            ),
            origin: Origin::Learned,
        };
        let delays: Vec<(String, String, u64)> = chosen
            .used()
            .delays
            .into_iter()
            .map(|d| (d.scope, d.delay, d.samples))
            .collect();
        let expected = [
            ("nodes", "registration", 3),
            ("nodes", "ready", 0),
            ("nodes", "termination", 0),
            ("nodes/gpu", "termination", 1),
            ("pods", "start", 0),
        ]
        .map(|(scope, delay, samples)| (scope.to_owned(), delay.to_owned(), samples));
        assert_eq!(delays, expected);
        // The pod start delay counts while every pod draws the default's.
        let pods = |yaml: &str| -> Vec<(String, u64)> {
            Chosen {
                model: model(yaml),
                origin: Origin::Learned,
            }
            .used()
            .delays
            .into_iter()
            .filter(|d| d.scope == "pods")
            .map(|d| (d.delay, d.samples))
            .collect()
        };
        assert_eq!(
            pods("name: m\npods:\n  default: {start: {samples: [1s, 2s]}}\n"),
            [("start".to_owned(), 2)]
        );
        assert_eq!(
            pods(
                "name: m\npods:\n  default: {start: {samples: [1s, 2s]}}\n  owners:\n    \
                 Deployment/shop/web: {start: 3s}\n"
            ),
            []
        );
    }

    #[test]
    fn given_beats_learned_beats_the_default() {
        let trace = Trace {
            header: Default::default(),
            events: Vec::new(),
            lifecycles: Vec::new(),
            samples: Vec::new(),
            nodes: Vec::new(),
            usage: Vec::new(),
            trailer: Default::default(),
        };
        let given = model("name: given");
        let learned = || Some(model("name: learned"));
        let chosen = Chosen::of(Some(&given), &trace, |_| learned());
        assert_eq!(
            (chosen.model.name.as_str(), chosen.origin),
            ("given", Origin::Given)
        );
        let chosen = Chosen::of(None, &trace, |_| learned());
        assert_eq!(
            (chosen.model.name.as_str(), chosen.origin),
            ("learned", Origin::Learned)
        );
        let chosen = Chosen::of(None, &trace, |_| None);
        assert_eq!(
            (&chosen.model, chosen.origin),
            (&Model::published(), Origin::Default)
        );
        assert_eq!(chosen.used().origin, "default");
        assert_eq!(
            Model::parse("back", &chosen.used().yaml).unwrap(),
            Model::published()
        );
    }

    #[test]
    fn a_trace_without_recorded_nodes_teaches_nothing_and_one_with_them_a_model() {
        let mut trace = Trace {
            header: Default::default(),
            events: Vec::new(),
            lifecycles: Vec::new(),
            samples: Vec::new(),
            nodes: Vec::new(),
            usage: Vec::new(),
            trailer: Default::default(),
        };
        assert_eq!(learn(&trace), None);
        // A node created inside the recording and Ready 30 s later.
        let node = |at: i64, ready: bool| ksim_trace::pb::RecordedNode {
            timestamp_ms: at,
            name: "m5-a".into(),
            group: "m5".into(),
            ready,
            created_ms: 10_000,
            ..Default::default()
        };
        trace.nodes = vec![node(10_000, false), node(40_000, true)];
        let model = learn(&trace).unwrap();
        assert_eq!(model.name, "learned");
        assert!(model.source.contains("1 nodes"), "{}", model.source);
        assert_eq!(
            model.node_delays("m5").ready.median(),
            std::time::Duration::from_secs(30)
        );
    }

    #[test]
    fn a_group_without_node_delays_carries_nothing() {
        let chosen = Chosen {
            model: model("name: m\nnodes: {groups: {slow: {registration: 1m}}}"),
            origin: Origin::Given,
        };
        assert_eq!(chosen.for_group("fast", 10.0), None);
        let slow = GroupProvisioning::from_json(&chosen.for_group("slow", 10.0).unwrap()).unwrap();
        assert_eq!(slow.speed, 10.0);
        assert_eq!(slow.model, "m");
    }
}
