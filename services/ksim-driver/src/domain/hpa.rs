//! What the driver knows of HorizontalPodAutoscaler objects: which kind they are, and their own
//! windows put on the replay's clock ([`behavior_at_speed`]).

use serde_json::{Map, Value, json};

use super::Gvk;

/// Any version of `autoscaling` HorizontalPodAutoscaler.
pub fn is_hpa(gvk: &Gvk) -> bool {
    gvk.group == "autoscaling" && gvk.kind == "HorizontalPodAutoscaler"
}

/// An autoscaling/v2 HPA's `spec.behavior` on the replay's clock: its stabilization windows
/// and policy periods divided by `speed`, whole seconds, at least 1 (a policy's period must be;
/// a window of 0 stays 0). A behavior the HPA leaves out is the controller's business, whose
/// flags the environment divides; but a direction left out of a given behavior is filled in
/// by the apiserver with 15 s periods, so it is filled here with the same rules, divided.
pub fn behavior_at_speed(spec: &mut Map<String, Value>, speed: f64) {
    if !(speed.is_finite() && speed > 0.0) || speed == 1.0 {
        return;
    }
    let Some(behavior) = spec.get_mut("behavior").and_then(Value::as_object_mut) else {
        return;
    };
    for (direction, defaults) in [
        ("scaleUp", scale_up_default()),
        ("scaleDown", scale_down_default()),
    ] {
        let rules = behavior
            .entry(direction)
            .or_insert_with(|| defaults.clone());
        let Some(rules) = rules.as_object_mut() else {
            continue;
        };
        if !rules.contains_key("policies")
            && let Some(policies) = defaults.get("policies")
        {
            rules.insert("policies".to_owned(), policies.clone());
        }
        if let Some(window) = rules.get_mut("stabilizationWindowSeconds")
            && let Some(seconds) = window.as_f64()
        {
            *window = json!(divided(seconds, speed, 0));
        }
        for policy in rules
            .get_mut("policies")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(period) = policy.get_mut("periodSeconds")
                && let Some(seconds) = period.as_f64()
            {
                *period = json!(divided(seconds, speed, 1));
            }
        }
    }
}

fn divided(seconds: f64, speed: f64, floor: i64) -> i64 {
    if seconds <= 0.0 {
        return 0;
    }
    // Saturating: the apiserver refuses what is too long, naming the field.
    ((seconds / speed).round() as i64).max(floor)
}

/// The apiserver's default for a given behavior's scale-up rules (autoscaling/v2).
fn scale_up_default() -> Value {
    json!({
        "stabilizationWindowSeconds": 0,
        "selectPolicy": "Max",
        "policies": [
            {"type": "Percent", "value": 100, "periodSeconds": 15},
            {"type": "Pods", "value": 4, "periodSeconds": 15},
        ],
    })
}

/// The apiserver's default for a given behavior's scale-down rules; the window is left to the
/// controller's `--horizontal-pod-autoscaler-downscale-stabilization`.
fn scale_down_default() -> Value {
    json!({
        "selectPolicy": "Max",
        "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_behavior_runs_divided_by_the_speed_with_omitted_directions_filled_in() {
        let mut spec = json!({"behavior": {"scaleDown": {
            "stabilizationWindowSeconds": 300,
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
        }}});
        behavior_at_speed(spec.as_object_mut().unwrap(), 10.0);
        assert_eq!(
            spec["behavior"],
            json!({
                "scaleDown": {
                    "stabilizationWindowSeconds": 30,
                    "policies": [{"type": "Pods", "value": 1, "periodSeconds": 6}],
                },
                "scaleUp": {
                    "stabilizationWindowSeconds": 0,
                    "selectPolicy": "Max",
                    "policies": [
                        {"type": "Percent", "value": 100, "periodSeconds": 2},
                        {"type": "Pods", "value": 4, "periodSeconds": 2},
                    ],
                },
            })
        );
    }

    #[test]
    fn periods_stop_at_one_second_and_a_missing_behavior_or_speed_one_is_left_alone() {
        let mut spec = json!({"behavior": {"scaleUp": {
            "policies": [{"type": "Percent", "value": 50, "periodSeconds": 15}],
        }, "scaleDown": {"policies": []}}});
        behavior_at_speed(spec.as_object_mut().unwrap(), 100.0);
        assert_eq!(
            spec["behavior"]["scaleUp"]["policies"][0]["periodSeconds"],
            1
        );
        // An empty list is the user's, not a missing one.
        assert_eq!(spec["behavior"]["scaleDown"]["policies"], json!([]));

        let without = json!({"minReplicas": 1});
        let mut spec = without.clone();
        behavior_at_speed(spec.as_object_mut().unwrap(), 10.0);
        assert_eq!(spec, without);

        let given = json!({"behavior": {"scaleDown": {"stabilizationWindowSeconds": 300}}});
        let mut spec = given.clone();
        behavior_at_speed(spec.as_object_mut().unwrap(), 1.0);
        assert_eq!(spec, given);
    }
}
