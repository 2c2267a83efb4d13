//! Rightsizing: the `scaleResources` and `setResources` rules, which change the requests and
//! limits of the containers in an object's pod template (a Pod's own spec, a workload's
//! `spec.template`, a CronJob's job template).

use serde_json::Value;

use ksim_nodes::skeleton::{is_valid_quantity, quantity_value};

/// Largest factor `scaleResources` takes: a typo, not a what-if, beyond it.
pub(crate) const MAX_FACTOR: f64 = 1_000.0;

/// Resources whose amounts `scaleResources` may multiply: divisible ones. Device counts and
/// extended resources are whole numbers a factor would have to round; set them instead.
const SCALABLE: [&str; 3] = ["cpu", "memory", "ephemeral-storage"];

/// `requests` or `limits` of a container's `resources`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Field {
    Requests,
    Limits,
}

impl Field {
    pub(crate) fn key(self) -> &'static str {
        match self {
            Field::Requests => "requests",
            Field::Limits => "limits",
        }
    }
}

/// What happens to one resource's amount.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Amount {
    /// Multiplied, rounded up to the resource's unit (1m of CPU, one byte); absent stays absent.
    Factor(f64),
    /// Set, added where absent.
    Quantity(String),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Change {
    pub(crate) field: Field,
    pub(crate) resource: String,
    pub(crate) amount: Amount,
}

/// One rule's changes, for the containers named `container` (every container when `None`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ResourceChange {
    pub(crate) container: Option<String>,
    pub(crate) changes: Vec<Change>,
}

impl ResourceChange {
    /// The rule as the header shows it: `requests.cpu x0.5` or `limits.memory=128Mi`.
    pub(crate) fn text(&self) -> String {
        let mut parts: Vec<String> = self
            .changes
            .iter()
            .map(|change| match &change.amount {
                Amount::Factor(factor) => format!(
                    "{}.{} x{}",
                    change.field.key(),
                    change.resource,
                    number(*factor)
                ),
                Amount::Quantity(quantity) => {
                    format!("{}.{}={quantity}", change.field.key(), change.resource)
                }
            })
            .collect();
        if let Some(container) = &self.container {
            parts.push(format!("in container {container}"));
        }
        parts.join(" ")
    }

    /// Applies the changes to every matching container of `object`'s pod template. Whether
    /// anything changed; an error when a container would end up requesting more than its
    /// limit, which the API server refuses.
    pub(crate) fn apply(&self, object: &mut Value) -> Result<bool, String> {
        let mut changed = false;
        for spec in pod_specs(object) {
            for list in ["initContainers", "containers"] {
                let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) else {
                    continue;
                };
                for container in containers {
                    let name = container
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned();
                    if self
                        .container
                        .as_ref()
                        .is_some_and(|wanted| *wanted != name)
                    {
                        continue;
                    }
                    if self.apply_to(container)? {
                        changed = true;
                        check_within_limits(container, &name)?;
                    }
                }
            }
        }
        Ok(changed)
    }

    fn apply_to(&self, container: &mut Value) -> Result<bool, String> {
        let mut changed = false;
        for change in &self.changes {
            let current = container
                .pointer(&format!(
                    "/resources/{}/{}",
                    change.field.key(),
                    change.resource
                ))
                .and_then(quantity_text);
            let current = current.as_deref();
            let new = match (&change.amount, current) {
                (Amount::Factor(_), None) => continue,
                (Amount::Factor(factor), Some(current)) => {
                    let value = quantity_value(current).ok_or_else(|| {
                        format!(
                            "{}.{} {current:?} is not a quantity",
                            change.field.key(),
                            change.resource
                        )
                    })?;
                    scaled(&change.resource, value * factor)
                }
                (Amount::Quantity(quantity), _) => quantity.clone(),
            };
            if current == Some(new.as_str()) {
                continue;
            }
            let Some(container) = container.as_object_mut() else {
                continue;
            };
            let resources = container
                .entry("resources")
                .or_insert_with(|| Value::Object(Default::default()));
            let Some(resources) = resources.as_object_mut() else {
                return Err("resources is not a map".to_owned());
            };
            let amounts = resources
                .entry(change.field.key())
                .or_insert_with(|| Value::Object(Default::default()));
            let Some(amounts) = amounts.as_object_mut() else {
                return Err(format!("resources.{} is not a map", change.field.key()));
            };
            amounts.insert(change.resource.clone(), Value::String(new));
            changed = true;
        }
        Ok(changed)
    }
}

/// The pod specs `object` holds: its own (a Pod), its template's (Deployment, ReplicaSet,
/// StatefulSet, DaemonSet, Job, ReplicationController) or its job template's (CronJob).
fn pod_specs(object: &mut Value) -> Vec<&mut Value> {
    let Some(spec) = object.get_mut("spec") else {
        return Vec::new();
    };
    if spec.get("containers").is_some() {
        return vec![spec];
    }
    let template = if spec.get("jobTemplate").is_some() {
        spec.pointer_mut("/jobTemplate/spec/template/spec")
    } else {
        spec.pointer_mut("/template/spec")
    };
    template.into_iter().collect()
}

/// A container whose request of a resource is above its limit of it is refused by the API
/// server: say so here, naming both, rather than in the middle of a replay.
fn check_within_limits(container: &Value, name: &str) -> Result<(), String> {
    let (Some(requests), Some(limits)) = (
        container
            .pointer("/resources/requests")
            .and_then(Value::as_object),
        container
            .pointer("/resources/limits")
            .and_then(Value::as_object),
    ) else {
        return Ok(());
    };
    for (resource, request) in requests {
        let (Some(request), Some(limit)) = (
            quantity_text(request),
            limits.get(resource).and_then(quantity_text),
        ) else {
            continue;
        };
        if let (Some(asked), Some(allowed)) = (quantity_value(&request), quantity_value(&limit))
            && asked > allowed
        {
            return Err(format!(
                "container {name} would request {resource} {request}, above its limit \
                 {limit}; change the request too"
            ));
        }
    }
    Ok(())
}

/// A quantity as written: a string, or a bare number in a hand-written object (`cpu: 2`).
fn quantity_text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        _ => None,
    }
}

/// `value` (cores for CPU, bytes otherwise) rounded up to the resource's unit and written as
/// Kubernetes writes it: `250m`, `2`, `96Mi`, `1000000`.
fn scaled(resource: &str, value: f64) -> String {
    // A product that should be whole but for float error is not rounded up past it.
    let up = |value: f64| {
        let nearest = value.round();
        if (value - nearest).abs() < 1e-6 {
            nearest
        } else {
            value.ceil()
        }
    };
    if resource == "cpu" {
        let millis = up(value * 1_000.0) as u64;
        return if millis.is_multiple_of(1_000) {
            (millis / 1_000).to_string()
        } else {
            format!("{millis}m")
        };
    }
    let bytes = up(value) as u64;
    for (suffix, unit) in [("Gi", 1u64 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)] {
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    bytes.to_string()
}

/// Checks a `scaleResources` factor.
pub(crate) fn check_factor(field: Field, resource: &str, factor: f64) -> Result<(), String> {
    let name = format!("{}.{resource}", field.key());
    if !SCALABLE.contains(&resource) {
        return Err(format!(
            "scaleResources: {name}: only {} can be scaled; set other resources with \
             setResources",
            SCALABLE.join(", ")
        ));
    }
    if !factor.is_finite() || factor <= 0.0 || factor > MAX_FACTOR {
        return Err(format!(
            "scaleResources: {name} {} must be a number above 0 and at most {}",
            number(factor),
            number(MAX_FACTOR)
        ));
    }
    Ok(())
}

/// Checks a `setResources` quantity: a resource name and a non-negative Kubernetes quantity.
pub(crate) fn check_quantity(field: Field, resource: &str, quantity: &str) -> Result<(), String> {
    let name = format!("{}.{resource}", field.key());
    let name_ok = !resource.is_empty()
        && resource.len() <= 253
        && resource
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-./".contains(c));
    if !name_ok {
        return Err(format!("setResources: {name:?} is not a resource name"));
    }
    if !is_valid_quantity(quantity) || quantity_value(quantity).is_none_or(|value| value < 0.0) {
        return Err(format!(
            "setResources: {name} {quantity:?} is not a non-negative quantity like 500m or 128Mi"
        ));
    }
    Ok(())
}

/// `value` as a rule's text shows it: `2`, `0.5`, and `1e300` rather than its 301 digits.
pub(crate) fn number(value: f64) -> String {
    if value.is_finite() && value.abs() < 1e16 {
        value.to_string()
    } else {
        // Debug switches to an exponent for large magnitudes; Display never does.
        format!("{value:?}")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn change(field: Field, resource: &str, amount: Amount) -> Change {
        Change {
            field,
            resource: resource.to_owned(),
            amount,
        }
    }

    fn deployment(containers: Value) -> Value {
        json!({"kind": "Deployment", "spec": {"replicas": 2, "template": {"spec": {"containers": containers}}}})
    }

    #[test]
    fn scaling_multiplies_stated_amounts_and_rounds_up_to_the_unit() {
        let halve = ResourceChange {
            container: None,
            changes: vec![
                change(Field::Requests, "cpu", Amount::Factor(0.5)),
                change(Field::Requests, "memory", Amount::Factor(0.5)),
            ],
        };
        let mut object = deployment(json!([
            {"name": "main", "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}}},
            {"name": "side", "resources": {"requests": {"cpu": 1, "memory": "1001"}}},
            {"name": "bare"}
        ]));
        assert!(halve.apply(&mut object).unwrap());
        let containers = &object["spec"]["template"]["spec"]["containers"];
        assert_eq!(
            containers[0]["resources"]["requests"],
            json!({"cpu": "125m", "memory": "512Mi"})
        );
        assert_eq!(
            containers[1]["resources"]["requests"],
            json!({"cpu": "500m", "memory": "501"})
        );
        // Nothing stated, nothing scaled.
        assert_eq!(containers[2], json!({"name": "bare"}));
        assert_eq!(scaled("cpu", 0.0001), "1m");
        assert_eq!(scaled("cpu", 3.0 * (1.0 / 3.0)), "1");
        assert_eq!(scaled("memory", 1.5 * 1024.0), "1536");
    }

    #[test]
    fn setting_adds_limits_to_the_named_container_of_any_template() {
        let limit = ResourceChange {
            container: Some("main".to_owned()),
            changes: vec![change(
                Field::Limits,
                "memory",
                Amount::Quantity("128Mi".to_owned()),
            )],
        };
        let containers = json!([
            {"name": "main", "resources": {"requests": {"memory": "64Mi"}}},
            {"name": "side"}
        ]);
        let mut cronjob = json!({"kind": "CronJob", "spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": containers.clone()}}}}}});
        assert!(limit.apply(&mut cronjob).unwrap());
        let set = &cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"];
        assert_eq!(
            set[0]["resources"],
            json!({"requests": {"memory": "64Mi"}, "limits": {"memory": "128Mi"}})
        );
        assert_eq!(set[1], json!({"name": "side"}));

        let mut pod = json!({"kind": "Pod", "spec": {"containers": containers}});
        assert!(limit.apply(&mut pod).unwrap());
        assert_eq!(
            pod["spec"]["containers"][0]["resources"]["limits"]["memory"],
            "128Mi"
        );
        // Applied again, nothing changes; an object without a pod template is left alone.
        assert!(!limit.apply(&mut pod).unwrap());
        let mut service = json!({"kind": "Service", "spec": {"ports": []}});
        assert!(!limit.apply(&mut service).unwrap());
    }

    #[test]
    fn a_limit_below_the_request_is_an_error_naming_both() {
        let limit = ResourceChange {
            container: None,
            changes: vec![change(
                Field::Limits,
                "memory",
                Amount::Quantity("128Mi".to_owned()),
            )],
        };
        let mut object = deployment(json!([
            {"name": "main", "resources": {"requests": {"memory": "256Mi"}}}
        ]));
        assert_eq!(
            limit.apply(&mut object).unwrap_err(),
            "container main would request memory 256Mi, above its limit 128Mi; change the \
             request too"
        );
    }

    #[test]
    fn factors_and_quantities_are_checked() {
        assert!(check_factor(Field::Requests, "cpu", 0.5).is_ok());
        for (resource, factor) in [
            ("cpu", 0.0),
            ("cpu", -1.0),
            ("cpu", f64::NAN),
            ("memory", 1e4),
        ] {
            let error = check_factor(Field::Requests, resource, factor).unwrap_err();
            assert!(error.contains("must be a number above 0"), "{error}");
        }
        let error = check_factor(Field::Limits, "nvidia.com/gpu", 0.5).unwrap_err();
        assert!(
            error.starts_with("scaleResources: limits.nvidia.com/gpu: only cpu"),
            "{error}"
        );

        assert!(check_quantity(Field::Limits, "memory", "128Mi").is_ok());
        assert!(check_quantity(Field::Limits, "nvidia.com/gpu", "1").is_ok());
        for quantity in ["-1", "lots", "1.2.3", ""] {
            let error = check_quantity(Field::Limits, "memory", quantity).unwrap_err();
            assert!(error.contains("is not a non-negative quantity"), "{error}");
        }
        let error = check_quantity(Field::Limits, "CPU!", "1").unwrap_err();
        assert!(error.contains("is not a resource name"), "{error}");
    }

    #[test]
    fn factors_are_written_short() {
        assert_eq!(number(2.0), "2");
        assert_eq!(number(0.5), "0.5");
        assert_eq!(number(1e300), "1e300");
        assert_eq!(number(f64::NAN), "NaN");
    }
}
