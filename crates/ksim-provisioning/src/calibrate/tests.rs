use super::*;

const T0: i64 = 1_767_225_600_000;
const Z90: f64 = 1.281_551_565_545;

/// Draws from the log-normal through `p50` and `p90` (seconds), in ms.
struct LogNormal {
    rng: fastrand::Rng,
}

impl LogNormal {
    fn new(seed: u64) -> Self {
        Self {
            rng: fastrand::Rng::with_seed(seed),
        }
    }

    fn ms(&mut self, p50: f64, p90: f64) -> i64 {
        let (u1, u2) = (self.rng.f64(), self.rng.f64());
        let z = (-2.0 * (1.0 - u1).ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        let sigma = (p90 / p50).ln() / Z90;
        ((p50.ln() + z * sigma).exp() * 1000.0) as i64
    }
}

fn within(delay: &Delay, p50: f64, p90: f64) {
    let Delay::Percentiles {
        p50: got50,
        p90: Some(got90),
        ..
    } = delay
    else {
        panic!("not percentiles: {delay:?}");
    };
    for (got, want) in [(got50, p50), (got90, p90)] {
        let error = (got.as_secs_f64() - want).abs() / want;
        assert!(
            error < 0.15,
            "{got:?} vs {want}s: {:.0}% off",
            error * 100.0
        );
    }
}

/// `count` nodes of `group`, each scaled up by CA (when `events`), created, Ready, removed
/// and deleted with log-normal delays.
fn nodes(observations: &mut Observations, group: &str, count: usize, seed: u64, scale: f64) {
    let mut draw = LogNormal::new(seed);
    for i in 0..count {
        let trigger = T0 + 60_000 + i as i64 * 600_000;
        let created = trigger + draw.ms(40.0 * scale, 70.0 * scale);
        let ready = created + draw.ms(5.0, 9.0);
        let removal = ready + 300_000;
        let deleted = removal + draw.ms(30.0, 45.0);
        if observations.events_recorded {
            observations.add_scale_up_event(
                &format!(
                    "pod triggered scale-up: [{{{group} {i}->{} (max: 1000)}}]",
                    i + 1
                ),
                trigger,
            );
            // A second pod helped by the same scale-up: the same event again.
            observations.add_scale_up_event(
                &format!(
                    "pod triggered scale-up: [{{{group} {i}->{} (max: 1000)}}]",
                    i + 1
                ),
                trigger + 40,
            );
        }
        observations.nodes.push(NodeObservation {
            name: format!("{group}-{i}"),
            group: group.to_owned(),
            instance_type: "m5.large".to_owned(),
            // creationTimestamp has whole seconds; the tracer saw it 20 ms after.
            created_ms: created / 1000 * 1000,
            first_seen_ms: created + 20,
            ready_ms: Some(ready),
            removal_started_ms: Some(removal),
            deleted_ms: Some(deleted),
            triggered_ms: None,
        });
    }
}

#[test]
fn delays_drawn_from_a_log_normal_come_back_within_15_percent() {
    let mut observations = Observations {
        recorded_from_ms: T0,
        events_recorded: true,
        ..Default::default()
    };
    nodes(&mut observations, "m5", 300, 1, 1.0);
    let mut draw = LogNormal::new(2);
    for i in 0..400 {
        let bound = T0 + i * 1_000;
        observations.pods.push(PodObservation {
            owner: "Deployment/shop/web".to_owned(),
            bound_ms: Some(bound),
            started_ms: bound + draw.ms(3.0, 5.0),
            ready_ms: None,
            node: "old-node".to_owned(),
        });
    }
    observations.match_scale_ups();
    assert_eq!(
        observations.scale_ups.len(),
        300,
        "one scale-up per node, not per event"
    );
    let calibration = calibrate(&observations, "prod", "ksim trace calibrate prod.ktrace");
    let model = &calibration.model;
    within(&model.nodes.default.registration, 40.0, 70.0);
    within(&model.nodes.default.ready, 5.0, 9.0);
    within(&model.nodes.default.termination, 30.0, 45.0);
    within(&model.pods.default.start, 3.0, 5.0);
    assert!(
        model.pods.default.first_pull.is_zero(),
        "no node was new to a pod"
    );
    assert!(
        matches!(
            model.nodes.default.ready,
            Delay::Percentiles { p99: Some(_), .. }
        ),
        "300 samples give a p99"
    );
    assert!(
        model.nodes.groups.is_empty(),
        "one group: the default says it all"
    );
    assert_eq!(model.source, "ksim trace calibrate prod.ktrace");
    let group = &calibration.groups[0];
    assert_eq!(
        (
            group.group.as_str(),
            group.instance_type.as_str(),
            group.nodes
        ),
        ("m5", "m5.large", 300)
    );
    assert_eq!(group.started_from, StartedFrom::Trigger);
    let to_ready = group.to_ready.unwrap();
    assert!(to_ready.p50 > group.registration.unwrap().p50);

    // What it writes, Model::parse reads back.
    let again = Model::parse("learned.yaml", &model.to_yaml()).unwrap();
    assert_eq!(&again, model);
    let table = calibration.table();
    for says in [
        "m5.large",
        "CA trigger",
        "Deployment/shop/web",
        "model: prod (ksim trace calibrate",
    ] {
        assert!(table.contains(says), "{says} missing:\n{table}");
    }
}

#[test]
fn without_events_registration_is_unknown_and_said_so() {
    let mut observations = Observations {
        recorded_from_ms: T0,
        events_recorded: false,
        ..Default::default()
    };
    nodes(&mut observations, "m5", 150, 3, 1.0);
    observations.match_scale_ups();
    let calibration = calibrate(&observations, "m", "s");
    assert!(calibration.model.nodes.default.registration.is_zero());
    within(&calibration.model.nodes.default.ready, 5.0, 9.0);
    assert_eq!(calibration.groups[0].started_from, StartedFrom::Creation);
    assert!(
        calibration
            .notes
            .iter()
            .any(|n| n.contains("recorded no Events"))
    );
    assert!(calibration.table().contains("node creation"));
}

#[test]
fn a_group_that_differs_gets_its_own_entry_and_few_samples_stay_samples() {
    let mut observations = Observations {
        recorded_from_ms: T0,
        events_recorded: true,
        ..Default::default()
    };
    nodes(&mut observations, "cpu", 100, 4, 1.0);
    nodes(&mut observations, "gpu", 5, 5, 4.0);
    observations.match_scale_ups();
    let model = calibrate(&observations, "m", "s").model;
    let gpu = model.nodes.groups.get("gpu").expect("gpu boots 4x slower");
    assert!(matches!(&gpu.registration, Some(Delay::Samples(list)) if list.len() == 5));
    assert_eq!(gpu.ready, None, "ready is alike: the default's");
    assert!(!model.nodes.groups.contains_key("cpu"));
    Model::parse("m.yaml", &model.to_yaml()).unwrap();
}

#[test]
fn a_node_answers_the_latest_scale_up_of_its_group_not_yet_answered() {
    let mut observations = Observations {
        recorded_from_ms: T0,
        events_recorded: true,
        ..Default::default()
    };
    observations.add_scale_up_event("pod triggered scale-up: [{a 0->2 (max: 5)}]", T0 + 1_000);
    observations.add_scale_up_event(
        "pod triggered scale-up: [{a 2->3 (max: 5)} {b 0->1 (max: 1)}]",
        T0 + 30_000,
    );
    let node = |name: &str, group: &str, created: i64| NodeObservation {
        name: name.to_owned(),
        group: group.to_owned(),
        created_ms: created,
        first_seen_ms: created,
        ..Default::default()
    };
    observations.nodes = vec![
        node("a1", "a", T0 + 40_000),
        node("a2", "a", T0 + 50_000),
        node("a3", "a", T0 + 60_000),
        node("a4", "a", T0 + 70_000),
        node("b1", "b", T0 + 20_000),
        node("old", "a", T0 - 5_000),
    ];
    observations.match_scale_ups();
    let triggered: Vec<Option<i64>> = observations
        .nodes
        .iter()
        .map(|n| n.triggered_ms.map(|t| t - T0))
        .collect();
    assert_eq!(
        triggered,
        [Some(30_000), Some(1_000), Some(1_000), None, None, None],
        "a1 the latest; a2, a3 the earlier's two; a4 none left; b1 created before b's; old before the recording"
    );
}

#[test]
fn scale_up_messages_are_read_and_others_ignored() {
    assert_eq!(
        parse_scale_up("pod triggered scale-up: [{m5 1->2 (max: 10)} {gpu-a 0->3 (max: 4)}]"),
        [("m5".to_owned(), 1), ("gpu-a".to_owned(), 3)]
    );
    assert!(
        parse_scale_up("pod didn't trigger scale-up: 1 max node group size reached").is_empty()
    );
    assert!(parse_scale_up("pod triggered scale-up: [{m5 x->2 (max: 10)}]").is_empty());
    assert!(parse_scale_up("").is_empty());
}

#[test]
fn a_first_pull_is_what_an_owners_first_pod_on_a_new_node_takes_more() {
    let mut observations = Observations {
        recorded_from_ms: T0,
        events_recorded: false,
        ..Default::default()
    };
    let mut draw = LogNormal::new(6);
    for n in 0..40 {
        let node = format!("new-{n}");
        observations.nodes.push(NodeObservation {
            name: node.clone(),
            group: "m5".to_owned(),
            created_ms: T0 + n * 1_000,
            first_seen_ms: T0 + n * 1_000,
            ..Default::default()
        });
        for k in 0..4 {
            let bound = T0 + 100_000 + n * 10_000 + k * 1_000;
            let pull = if k == 0 { draw.ms(10.0, 20.0) } else { 0 };
            observations.pods.push(PodObservation {
                owner: "Deployment/shop/web".to_owned(),
                bound_ms: Some(bound),
                started_ms: bound + draw.ms(2.0, 3.0) + pull,
                ready_ms: Some(bound + 15_000 + pull),
                node: node.clone(),
            });
        }
    }
    let calibration = calibrate(&observations, "m", "s");
    let pods = &calibration.model.pods.default;
    within(&pods.start, 2.0, 3.0);
    let pull = pods.first_pull.median().as_secs_f64();
    assert!((pull - 10.0).abs() < 1.5, "first pull p50 {pull}");
    assert!(calibration.owners[0].first_pull.is_some());
    assert!(calibration.owners[0].ready.is_some());
}

#[test]
fn nothing_to_learn_is_an_instant_model_with_notes() {
    let calibration = calibrate(&Observations::default(), "m", "s");
    assert!(calibration.model.is_instant());
    assert!(
        calibration
            .notes
            .iter()
            .any(|n| n.contains("no recorded nodes"))
    );
    assert!(calibration.table().contains("nodes: none recorded"));
    assert!(
        Model::parse("m.yaml", &calibration.model.to_yaml())
            .unwrap()
            .is_instant()
    );
}

#[test]
fn delays_of_a_few_or_zero_samples() {
    let s = |v: &[u64]| {
        v.iter()
            .map(|ms| Duration::from_millis(*ms))
            .collect::<Vec<_>>()
    };
    assert_eq!(delay_of(&[]), Delay::default());
    assert_eq!(delay_of(&s(&[0, 0, 0])), Delay::default());
    assert_eq!(
        delay_of(&s(&[3_000, 1_000])),
        Delay::Samples(s(&[1_000, 3_000]))
    );
    // A median of 0 cannot be a log-normal's: the samples.
    let mostly_zero: Vec<Duration> = s(&[0; 30]).into_iter().chain(s(&[5_000; 5])).collect();
    assert!(matches!(delay_of(&mostly_zero), Delay::Samples(_)));
    assert!(delay_of(&mostly_zero).check().is_ok());
}

#[test]
fn a_node_created_just_after_the_start_counts_though_its_second_is_before() {
    // The recording starts at T0 + 600 ms; the node's creationTimestamp says T0 (whole
    // seconds), the tracer first saw it at T0 + 800 ms and Ready 10 s later.
    let node = NodeObservation {
        name: "m5-a".into(),
        group: "m5".into(),
        created_ms: T0,
        first_seen_ms: T0 + 800,
        ready_ms: Some(T0 + 10_800),
        ..NodeObservation::default()
    };
    let observations = Observations {
        recorded_from_ms: T0 + 600,
        nodes: vec![node.clone()],
        ..Observations::default()
    };
    let model = calibrate(&observations, "m", "test").model;
    assert_eq!(
        model.node_delays("m5").ready,
        Delay::Samples(vec![Duration::from_secs(10)])
    );
    // One that existed before the start (created a minute earlier) is not seen coming.
    let before = Observations {
        recorded_from_ms: T0 + 60_000,
        nodes: vec![NodeObservation {
            first_seen_ms: T0 + 60_000,
            ready_ms: Some(T0 + 60_000),
            ..node
        }],
        ..Observations::default()
    };
    assert!(
        calibrate(&before, "m", "test")
            .model
            .node_delays("m5")
            .ready
            .is_zero()
    );
}

#[test]
fn nodes_of_the_first_instant_are_not_seen_coming_and_the_table_says_where_delays_start() {
    // An export stamps the nodes that existed with the window's start: two initial nodes,
    // created half a second before it (the second rounds down), Ready all along.
    let mut observations = Observations {
        recorded_from_ms: T0 + 500,
        events_recorded: true,
        ..Default::default()
    };
    for name in ["m5-initial-a", "m5-initial-b"] {
        observations.nodes.push(NodeObservation {
            name: name.into(),
            group: "m5".into(),
            instance_type: "m5.large".into(),
            created_ms: T0,
            first_seen_ms: T0 + 500,
            ready_ms: Some(T0 + 500),
            ..NodeObservation::default()
        });
    }
    nodes(&mut observations, "m5", 6, 11, 1.0);
    observations.match_scale_ups();
    let calibration = calibrate(&observations, "m", "s");
    let group = &calibration.groups[0];
    assert_eq!(group.nodes, 8);
    assert_eq!(
        group.ready.unwrap().count,
        6,
        "the initial nodes are no samples"
    );
    assert_eq!(group.started_from, StartedFrom::Trigger);
    assert!(calibration.table().contains("CA trigger"));

    // A node created inside the recording of no recorded scale-up: the column says so.
    observations.nodes.push(NodeObservation {
        name: "m5-by-hand".into(),
        group: "m5".into(),
        instance_type: "m5.large".into(),
        created_ms: T0 + 3_600_000,
        first_seen_ms: T0 + 3_600_020,
        ready_ms: Some(T0 + 3_607_000),
        ..NodeObservation::default()
    });
    let calibration = calibrate(&observations, "m", "s");
    assert_eq!(
        calibration.groups[0].started_from,
        StartedFrom::Mixed {
            triggered: 6,
            of: 7
        }
    );
    assert!(calibration.table().contains("CA trigger (6 of 7)"));

    // Created in the very second the recording starts at: seen coming, not the first instant's.
    let at_start = Observations {
        recorded_from_ms: T0,
        nodes: vec![NodeObservation {
            name: "m5-at-start".into(),
            group: "m5".into(),
            created_ms: T0,
            first_seen_ms: T0,
            ready_ms: Some(T0 + 8_000),
            ..NodeObservation::default()
        }],
        ..Observations::default()
    };
    assert_eq!(
        calibrate(&at_start, "m", "s").groups[0]
            .ready
            .unwrap()
            .count,
        1
    );
}
