//! The pod start model as the pool applies it: a pod whose `ksim.io/pod-provisioning`
//! annotation gives it start delays runs `start` after it was bound, plus, if one of its images
//! is not yet on its node, the time to pull it. The first pod of an image on a node pulls it
//! (`firstPull`); a pod of that image arriving while the pull is under way waits for the same
//! pull; later pods pay nothing. Images are pulled in parallel, so a pod waits for its slowest.
//!
//! Each pod's delays come from its own seeded stream (`Draws::new(seed, "namespace/name")`):
//! `start` first, then one `firstPull` per distinct image in spec order, drawn whether or not the
//! node has the image, so a pod's draws never depend on its neighbours. All run divided by the
//! speed. Pure: the caller passes the time in.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::{api::core::v1::Pod, apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};
use ksim_provisioning::{Draws, ModelError, PodProvisioning};

use super::labels::POD_PROVISIONING_ANNOTATION;
use super::pod::POD_SCHEDULED;
use super::provisioning::after;

/// The most images remembered per node. Past it the oldest pull is forgotten, as a kubelet's
/// image garbage collection would, and a later pod of that image pulls it again.
pub const MAX_IMAGES_PER_NODE: usize = 256;

/// The pod's start model from its annotation; `None` when it has none (it starts at once).
pub fn provisioning(pod: &Pod) -> Result<Option<PodProvisioning>, ModelError> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get(POD_PROVISIONING_ANNOTATION))
        .map(|text| PodProvisioning::from_json(text))
        .transpose()
}

/// One pod's delays in the simulation's time (the model's draws divided by the speed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartDelays {
    /// From bound to its containers starting, its images present.
    pub start: Duration,
    /// Per distinct image, in spec order: how long its pull takes if the node lacks it.
    pub pulls: Vec<(String, Duration)>,
}

/// The delays of the pod `key` (`namespace/name`, the stream's name).
pub fn draw(provisioning: &PodProvisioning, key: &str, pod: &Pod) -> StartDelays {
    let mut draws = Draws::new(provisioning.seed, key);
    let start = provisioning.as_run(draws.next(&provisioning.pods.start));
    let pulls = images(pod)
        .into_iter()
        .map(|image| {
            let pull = provisioning.as_run(draws.next(&provisioning.pods.first_pull));
            (image, pull)
        })
        .collect();
    StartDelays { start, pulls }
}

/// The pod's distinct images, init containers first, in spec order.
pub fn images(pod: &Pod) -> Vec<String> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let mut images: Vec<String> = Vec::new();
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers);
    for image in containers.filter_map(|container| container.image.as_deref()) {
        if !image.is_empty() && !images.iter().any(|seen| seen == image) {
            images.push(image.to_owned());
        }
    }
    images
}

/// When the scheduler bound the pod: its PodScheduled condition's last transition to True.
pub fn scheduled_at(pod: &Pod) -> Option<Timestamp> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    let scheduled = conditions
        .iter()
        .find(|c| c.type_ == POD_SCHEDULED && c.status == "True")?;
    let Time(at) = scheduled.last_transition_time.clone()?;
    Some(at)
}

/// When a pod may run, and what that cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    /// When it was bound: the clock its delays count from.
    pub bound: Timestamp,
    /// When it runs.
    pub at: Timestamp,
    /// Pulls this look began (0 when its images were there or being pulled already).
    pub pulls_begun: usize,
}

impl Due {
    /// How long the pod waits from bound to Running.
    pub fn delay(&self) -> Duration {
        until(self.bound, self.at)
    }
}

/// How precise a PodScheduled transition time is: whole seconds (an apiserver `Time`), so the
/// bind happened up to this long after it.
const SCHEDULED_PRECISION: Duration = Duration::from_secs(1);

/// The images on each node (or being pulled to it), and when the pool first saw each waiting
/// pod bound. The pods controller holds one.
#[derive(Debug, Default)]
pub struct PodStarts {
    /// Node -> image -> when it is (or was) on the node.
    nodes: HashMap<String, HashMap<String, Timestamp>>,
    /// Pods still to start: when the pool first saw them bound.
    first_seen: HashMap<String, Timestamp>,
}

/// When the pod was bound: the pool's first sight of it bound when that falls within the second
/// its PodScheduled time names (the closer of the two: at whole seconds the delays of a replay at
/// 10x, a few tenths of a second, were mostly gone before the pool looked), else the
/// PodScheduled time (the pool saw it late, after a restart), else the first sight.
fn bind_time(scheduled: Option<Timestamp>, first_seen: Timestamp) -> Timestamp {
    match scheduled {
        Some(at) if first_seen < at || first_seen >= after(at, SCHEDULED_PRECISION) => at,
        _ => first_seen,
    }
}

impl PodStarts {
    /// When the pod `key` on `node` runs, given its delays. Bound as [`bind_time`] says, from
    /// `scheduled` and when this was first asked (`now` then). Asking again gives the same
    /// answer: the pull a pod began is the one it waits for.
    pub fn due(
        &mut self,
        key: &str,
        node: &str,
        scheduled: Option<Timestamp>,
        now: Timestamp,
        delays: &StartDelays,
    ) -> Due {
        let first_seen = *self.first_seen.entry(key.to_owned()).or_insert(now);
        let bound = bind_time(scheduled, first_seen);
        // Images are needed once the sandbox is up, `start` after the bind.
        let needed = after(bound, delays.start);
        let mut at = needed;
        let mut pulls_begun = 0;
        if !delays.pulls.is_empty() {
            let images = self.nodes.entry(node.to_owned()).or_default();
            for (image, pull) in &delays.pulls {
                let present = match images.get(image) {
                    Some(present) => *present,
                    None => {
                        forget_oldest_past(images, MAX_IMAGES_PER_NODE - 1);
                        let present = after(needed, *pull);
                        images.insert(image.clone(), present);
                        pulls_begun += 1;
                        present
                    }
                };
                at = at.max(present);
            }
        }
        Due {
            bound,
            at,
            pulls_begun,
        }
    }

    /// The pod started (or is gone): its first-seen time is no longer needed.
    pub fn forget_pod(&mut self, key: &str) {
        self.first_seen.remove(key);
    }

    /// Keeps the first-seen times of the pods `keep` says still wait.
    pub fn retain_pods(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.first_seen.retain(|key, _| keep(key));
    }

    /// The nodes images are remembered for.
    pub fn nodes(&self) -> Vec<String> {
        self.nodes.keys().cloned().collect()
    }

    /// The node is gone: a node of the same name later starts empty.
    pub fn forget_node(&mut self, node: &str) {
        self.nodes.remove(node);
    }

    /// How many images are remembered on `node`.
    pub fn images_on(&self, node: &str) -> usize {
        self.nodes.get(node).map_or(0, HashMap::len)
    }

    /// How many pods' first-seen times are kept.
    pub fn pods_seen(&self) -> usize {
        self.first_seen.len()
    }
}

/// Drops the images present longest until at most `keep` remain.
fn forget_oldest_past(images: &mut HashMap<String, Timestamp>, keep: usize) {
    while images.len() > keep {
        let Some(oldest) = images
            .iter()
            .min_by_key(|(image, present)| (**present, (*image).clone()))
            .map(|(image, _)| image.clone())
        else {
            return;
        };
        images.remove(&oldest);
    }
}

/// How long from `now` until `at`; zero if it has come.
pub fn until(now: Timestamp, at: Timestamp) -> Duration {
    Duration::try_from(at.duration_since(now)).unwrap_or(Duration::ZERO)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use ksim_provisioning::{Delay, PodDelays};
    use serde_json::json;

    use super::*;

    const BOUND: &str = "2026-03-01T12:00:00Z";

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn plus(s: u64) -> Timestamp {
        after(at(BOUND), secs(s))
    }

    /// `pod`'s start on `node` when it is first seen as it is bound, at `t`.
    fn bound_at(
        starts: &mut PodStarts,
        pod: &str,
        node: &str,
        t: Timestamp,
        d: &StartDelays,
    ) -> Due {
        starts.due(pod, node, Some(t), t, d)
    }

    fn delays(start: u64, pulls: &[(&str, u64)]) -> StartDelays {
        StartDelays {
            start: secs(start),
            pulls: pulls
                .iter()
                .map(|(image, pull)| ((*image).to_owned(), secs(*pull)))
                .collect(),
        }
    }

    fn model(start: Delay, first_pull: Delay, speed: f64) -> PodProvisioning {
        PodProvisioning {
            model: "m".to_owned(),
            seed: 7,
            speed,
            pods: PodDelays { start, first_pull },
        }
    }

    fn pod(annotations: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web-1", "namespace": "shop", "annotations": annotations},
            "spec": {
                "nodeName": "n-0",
                "initContainers": [{"name": "migrate", "image": "web:1"}],
                "containers": [
                    {"name": "app", "image": "web:1"},
                    {"name": "proxy", "image": "envoy:1"},
                    {"name": "blank"}
                ]
            },
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": BOUND}
            ]}
        }))
        .unwrap()
    }

    #[test]
    fn the_first_pod_of_an_image_pays_the_pull_and_later_ones_do_not() {
        let mut starts = PodStarts::default();
        let first = bound_at(&mut starts, "a", "n", at(BOUND), &delays(2, &[("web", 10)]));
        assert_eq!(first.at, plus(12));
        assert_eq!(first.delay(), secs(12));
        assert_eq!(first.pulls_begun, 1);

        // Bound after the pull ended: only its own start.
        let later = bound_at(&mut starts, "b", "n", plus(20), &delays(2, &[("web", 10)]));
        assert_eq!((later.at, later.pulls_begun), (plus(22), 0));

        // Another node pulls for itself.
        let elsewhere = bound_at(&mut starts, "c", "m", plus(20), &delays(1, &[("web", 5)]));
        assert_eq!((elsewhere.at, elsewhere.pulls_begun), (plus(26), 1));
    }

    #[test]
    fn a_pod_arriving_during_a_pull_waits_for_that_pull_not_a_second() {
        let mut starts = PodStarts::default();
        bound_at(&mut starts, "a", "n", at(BOUND), &delays(2, &[("web", 10)]));
        // Needs the image at 5 s, the pull ends at 12 s; its own (longer) pull is not drawn on.
        let second = bound_at(&mut starts, "b", "n", plus(4), &delays(1, &[("web", 60)]));
        assert_eq!((second.at, second.pulls_begun), (plus(12), 0));
        assert_eq!(second.delay(), secs(8));
    }

    #[test]
    fn a_pod_waits_for_its_slowest_image() {
        let mut starts = PodStarts::default();
        bound_at(
            &mut starts,
            "a",
            "n",
            at(BOUND),
            &delays(0, &[("envoy", 30)]),
        );
        let due = bound_at(
            &mut starts,
            "b",
            "n",
            plus(1),
            &delays(2, &[("web", 10), ("envoy", 5)]),
        );
        // web is pulled from 3 s to 13 s, envoy is there at 30 s.
        assert_eq!((due.at, due.pulls_begun), (plus(30), 1));
        let quick = bound_at(
            &mut starts,
            "c",
            "n",
            plus(40),
            &delays(2, &[("web", 1), ("envoy", 1)]),
        );
        assert_eq!((quick.at, quick.pulls_begun), (plus(42), 0));
    }

    #[test]
    fn asking_again_gives_the_same_answer() {
        let mut starts = PodStarts::default();
        let d = delays(3, &[("web", 10), ("envoy", 4)]);
        let first = bound_at(&mut starts, "a", "n", at(BOUND), &d);
        let again = starts.due("a", "n", Some(at(BOUND)), plus(5), &d);
        assert_eq!(again.at, first.at);
        assert_eq!(again.pulls_begun, 0);
        assert_eq!(starts.images_on("n"), 2);
    }

    #[test]
    fn a_pod_seen_within_its_scheduled_second_counts_from_when_it_was_seen() {
        let millis = |ms: u64| after(at(BOUND), Duration::from_millis(ms));
        // Bound at 0.7 s into the second its PodScheduled time names (whole seconds), seen at
        // 0.75 s: a start of 0.2 s (2 s at 10x) runs 0.2 s later, not at once.
        let mut starts = PodStarts::default();
        let d = StartDelays {
            start: Duration::from_millis(200),
            pulls: Vec::new(),
        };
        let due = starts.due("a", "n", Some(at(BOUND)), millis(750), &d);
        assert_eq!((due.bound, due.at), (millis(750), millis(950)));
        assert_eq!(due.delay(), Duration::from_millis(200));
        // Asked again later: the same.
        assert_eq!(
            starts.due("a", "n", Some(at(BOUND)), millis(900), &d).at,
            millis(950)
        );
        // Seen a second or more after (a restarted pool): the PodScheduled time.
        let late = starts.due("b", "n", Some(at(BOUND)), plus(3), &d);
        assert_eq!((late.bound, late.at), (at(BOUND), millis(200)));
        // Seen before it (another clock): the PodScheduled time.
        let early = starts.due("c", "n", Some(plus(1)), at(BOUND), &d);
        assert_eq!(early.bound, plus(1));
    }

    #[test]
    fn the_first_pod_on_a_node_there_from_the_start_pays_its_pull_from_when_seen() {
        let millis = |ms: u64| after(at(BOUND), Duration::from_millis(ms));
        // A node the pool has held since before any pod (a group's initial node) has no
        // images. At 10x the published model's 2 s start and 10 s pull are 0.2 s and 1 s: bound
        // 0.9 s into its PodScheduled second, the pull is paid in full from then.
        let mut starts = PodStarts::default();
        let d = StartDelays {
            start: Duration::from_millis(200),
            pulls: vec![("busybox".to_owned(), secs(1))],
        };
        let first = starts.due("a", "initial-0", Some(at(BOUND)), millis(900), &d);
        assert_eq!((first.at, first.pulls_begun), (millis(2_100), 1));
        assert_eq!(first.delay(), Duration::from_millis(1_200));
        // The next pod of the image on that node shares the pull.
        let second = starts.due("b", "initial-0", Some(plus(1)), millis(1_100), &d);
        assert_eq!((second.at, second.pulls_begun), (millis(2_100), 0));
    }

    #[test]
    fn without_a_schedule_time_the_clock_starts_when_first_seen() {
        let mut starts = PodStarts::default();
        let d = delays(5, &[]);
        assert_eq!(starts.due("a", "n", None, plus(1), &d).at, plus(6));
        assert_eq!(starts.due("a", "n", None, plus(4), &d).at, plus(6));
        assert_eq!(starts.pods_seen(), 1);
        // A pod with no images remembers nothing of its node.
        assert_eq!(starts.images_on("n"), 0);
        starts.forget_pod("a");
        assert_eq!(starts.pods_seen(), 0);

        starts.due("b", "n", None, plus(1), &d);
        starts.due("c", "n", None, plus(1), &d);
        starts.retain_pods(|key| key == "c");
        assert_eq!(starts.pods_seen(), 1);
    }

    #[test]
    fn memory_stays_bounded_per_node_and_goes_with_the_node() {
        let mut starts = PodStarts::default();
        for n in 0..(MAX_IMAGES_PER_NODE as u64 + 10) {
            let image = format!("image-{n}");
            bound_at(
                &mut starts,
                &format!("p{n}"),
                "n",
                plus(n),
                &delays(0, &[(&image, 1)]),
            );
        }
        assert_eq!(starts.images_on("n"), MAX_IMAGES_PER_NODE);
        // The oldest went first: image-0 is pulled again.
        let again = bound_at(
            &mut starts,
            "q",
            "n",
            plus(1000),
            &delays(0, &[("image-0", 1)]),
        );
        assert_eq!(again.pulls_begun, 1);
        let newest = format!("image-{}", MAX_IMAGES_PER_NODE + 9);
        let kept = bound_at(
            &mut starts,
            "r",
            "n",
            plus(1000),
            &delays(0, &[(&newest, 1)]),
        );
        assert_eq!(kept.pulls_begun, 0);

        assert_eq!(starts.nodes(), vec!["n".to_owned()]);
        starts.forget_node("n");
        assert_eq!(starts.images_on("n"), 0);
        assert!(starts.nodes().is_empty());
    }

    #[test]
    fn a_pods_delays_come_from_its_own_stream_divided_by_the_speed() {
        let provisioning = model(
            Delay::Percentiles {
                p50: secs(2),
                p90: Some(secs(4)),
                p99: None,
            },
            Delay::Samples(vec![secs(10), secs(20), secs(40)]),
            4.0,
        );
        let pod = pod(json!({}));
        let d = draw(&provisioning, "shop/web-1", &pod);
        assert_eq!(d, draw(&provisioning, "shop/web-1", &pod), "seeded");
        assert_ne!(d, draw(&provisioning, "shop/web-2", &pod), "per pod");

        // The same stream by hand: start first, then one pull per distinct image.
        let mut draws = Draws::new(7, "shop/web-1");
        let start = draws.next(&provisioning.pods.start);
        let web = draws.next(&provisioning.pods.first_pull);
        let envoy = draws.next(&provisioning.pods.first_pull);
        assert_eq!(d.start, start.div_f64(4.0));
        assert_eq!(
            d.pulls,
            vec![
                ("web:1".to_owned(), web.div_f64(4.0)),
                ("envoy:1".to_owned(), envoy.div_f64(4.0))
            ]
        );
    }

    #[test]
    fn fixed_delays_draw_themselves() {
        let provisioning = model(Delay::fixed_secs(3), Delay::fixed_secs(8), 2.0);
        let d = draw(&provisioning, "shop/web-1", &pod(json!({})));
        assert_eq!(d.start, Duration::from_millis(1500));
        assert_eq!(d.pulls, delays(0, &[("web:1", 4), ("envoy:1", 4)]).pulls);
    }

    #[test]
    fn the_annotation_is_read_and_checked() {
        assert_eq!(provisioning(&pod(json!({}))), Ok(None));
        let given = model(Delay::fixed_secs(1), Delay::default(), 1.0);
        let annotated = pod(json!({"ksim.io/pod-provisioning": given.to_json()}));
        assert_eq!(provisioning(&annotated), Ok(Some(given)));
        for bad in ["", "soon", r#"{"model":"m","seed":1,"speed":0,"pods":{}}"#] {
            let annotated = pod(json!({ "ksim.io/pod-provisioning": bad }));
            assert!(provisioning(&annotated).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_bind_time_is_the_pod_scheduled_transition() {
        assert_eq!(scheduled_at(&pod(json!({}))), Some(at(BOUND)));
        let mut unscheduled = pod(json!({}));
        unscheduled.status = None;
        assert_eq!(scheduled_at(&unscheduled), None);
        assert_eq!(images(&unscheduled), vec!["web:1", "envoy:1"]);
    }

    #[test]
    fn times_saturate() {
        assert_eq!(after(Timestamp::MAX, secs(1)), Timestamp::MAX);
        assert_eq!(until(plus(5), at(BOUND)), Duration::ZERO);
        assert_eq!(until(at(BOUND), plus(5)), secs(5));
    }
}
