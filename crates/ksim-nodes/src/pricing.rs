//! The provider config's `pricing`: what a node of an instance type and a pod's requests cost
//! an hour. The cloud provider answers cluster-autoscaler's `price` expander with it (only when
//! configured: a made-up price would steer the simulated autoscaler in a way the real cluster
//! never would), and Karpenter's instance types carry the same prices, so both autoscalers
//! choose, and the reports count, at one price list.

use std::collections::BTreeMap;

use serde::Deserialize;
use thiserror::Error;

use crate::skeleton::quantity_value;

const SECONDS_PER_HOUR: f64 = 3600.0;
const BYTES_PER_GIB: f64 = 1024.0 * 1024.0 * 1024.0;

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Pricing {
    /// Price per hour of a node, by its `node.kubernetes.io/instance-type` label.
    #[serde(default)]
    pub instance_types: BTreeMap<String, f64>,
    /// Price per hour of a spot instance, by instance type: Karpenter is offered each type
    /// given here as spot too, in every zone it has (cluster-autoscaler's groups are priced
    /// on demand; a spot group is a group of its own).
    #[serde(default)]
    pub spot_instance_types: BTreeMap<String, f64>,
    /// Price per hour of what a pod requests; pod prices are unanswered without it.
    pub pod: Option<PodRates>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodRates {
    pub cpu_per_hour: f64,
    #[serde(rename = "memoryGiBPerHour")]
    pub memory_gib_per_hour: f64,
}

#[derive(Debug, Error, Clone, PartialEq)]
pub enum PricingError {
    #[error("no price is configured for instance type {0:?}")]
    UnknownInstanceType(String),
    #[error("the node has no instance-type label")]
    NoInstanceType,
    #[error("the time range ends before it starts")]
    NegativeRange,
    #[error("request {resource}={value:?} is not a Kubernetes quantity")]
    BadQuantity { resource: String, value: String },
}

/// A configured price that is no price: negative, NaN or infinite. CA's price expander would
/// rank groups by it (a negative price makes the dearest group look cheapest), so the
/// configuration is refused before anything is served.
#[derive(Debug, Error, Clone, PartialEq)]
#[error("{field} is {value}: a price must be a finite number, zero or more")]
pub struct BadPrice {
    /// Where in the configuration, e.g. `pricing.instanceTypes["m5.large"]`.
    pub field: String,
    pub value: f64,
}

fn price(field: impl FnOnce() -> String, value: f64) -> Result<(), BadPrice> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(BadPrice {
            field: field(),
            value,
        })
    }
}

impl Pricing {
    /// The first price that is no price, by where it is written.
    pub fn validate(&self) -> Result<(), BadPrice> {
        for (instance_type, per_hour) in &self.instance_types {
            price(
                || format!("pricing.instanceTypes[{instance_type:?}]"),
                *per_hour,
            )?;
        }
        for (instance_type, per_hour) in &self.spot_instance_types {
            price(
                || format!("pricing.spotInstanceTypes[{instance_type:?}]"),
                *per_hour,
            )?;
        }
        if let Some(pod) = &self.pod {
            price(|| "pricing.pod.cpuPerHour".to_owned(), pod.cpu_per_hour)?;
            price(
                || "pricing.pod.memoryGiBPerHour".to_owned(),
                pod.memory_gib_per_hour,
            )?;
        }
        Ok(())
    }

    /// The price of running a node of `instance_type` for `seconds`.
    pub fn node_price(
        &self,
        instance_type: Option<&str>,
        seconds: f64,
    ) -> Result<f64, PricingError> {
        let instance_type = instance_type.ok_or(PricingError::NoInstanceType)?;
        let per_hour = self
            .instance_types
            .get(instance_type)
            .ok_or_else(|| PricingError::UnknownInstanceType(instance_type.to_owned()))?;
        Ok(per_hour * hours(seconds)?)
    }
}

impl PodRates {
    /// The price for `seconds` of a pod whose containers request `cpu` and `memory`
    /// (quantity strings, one per container that requests it).
    pub fn pod_price(
        &self,
        cpu: &[&str],
        memory: &[&str],
        seconds: f64,
    ) -> Result<f64, PricingError> {
        let sum = |resource: &str, values: &[&str]| {
            values
                .iter()
                .map(|q| quantity(resource, q))
                .sum::<Result<f64, PricingError>>()
        };
        let cores = sum("cpu", cpu)?;
        let bytes = sum("memory", memory)?;
        Ok(
            (cores * self.cpu_per_hour + bytes / BYTES_PER_GIB * self.memory_gib_per_hour)
                * hours(seconds)?,
        )
    }
}

fn hours(seconds: f64) -> Result<f64, PricingError> {
    if seconds < 0.0 {
        return Err(PricingError::NegativeRange);
    }
    Ok(seconds / SECONDS_PER_HOUR)
}

fn quantity(resource: &str, value: &str) -> Result<f64, PricingError> {
    quantity_value(value).ok_or_else(|| PricingError::BadQuantity {
        resource: resource.to_owned(),
        value: value.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_price_scales_with_time_and_needs_a_known_type() {
        let pricing: Pricing =
            serde_saphyr::from_str("instanceTypes:\n  m5.large: 0.096\n").unwrap();
        let price = pricing.node_price(Some("m5.large"), 1800.0).unwrap();
        assert!((price - 0.048).abs() < 1e-12, "{price}");
        assert_eq!(
            pricing.node_price(Some("c5.xlarge"), 60.0),
            Err(PricingError::UnknownInstanceType("c5.xlarge".to_owned()))
        );
        assert_eq!(
            pricing.node_price(None, 60.0),
            Err(PricingError::NoInstanceType)
        );
        assert_eq!(
            pricing.node_price(Some("m5.large"), -1.0),
            Err(PricingError::NegativeRange)
        );
    }

    /// Issue 39, finding 8: such prices were served, and ranked groups for the price expander.
    #[test]
    fn negative_nan_and_infinite_prices_are_refused_by_name() {
        let valid: Pricing = serde_saphyr::from_str(
            "instanceTypes:\n  m5.large: 0.096\n  free: 0\npod: {cpuPerHour: 0.03, memoryGiBPerHour: 0}\n",
        )
        .unwrap();
        assert_eq!(valid.validate(), Ok(()));
        for (value, shown) in [
            ("-0.5", "-0.5"),
            (".nan", "NaN"),
            (".inf", "inf"),
            ("-.inf", "-inf"),
        ] {
            let pricing: Pricing =
                serde_saphyr::from_str(&format!("instanceTypes:\n  m5.large: {value}\n")).unwrap();
            let err = pricing.validate().unwrap_err();
            assert_eq!(err.field, r#"pricing.instanceTypes["m5.large"]"#, "{value}");
            assert!(err.to_string().contains(&format!("is {shown}:")), "{err}");
        }
        let mut pricing = valid.clone();
        pricing.pod.as_mut().unwrap().cpu_per_hour = -1.0;
        assert_eq!(
            pricing.validate().unwrap_err().field,
            "pricing.pod.cpuPerHour"
        );
        let mut pricing = valid;
        pricing.pod.as_mut().unwrap().memory_gib_per_hour = f64::NAN;
        assert_eq!(
            pricing.validate().unwrap_err().field,
            "pricing.pod.memoryGiBPerHour"
        );
    }

    #[test]
    fn pod_price_sums_cpu_and_memory() {
        let rates = PodRates {
            cpu_per_hour: 0.04,
            memory_gib_per_hour: 0.005,
        };
        let price = rates
            .pod_price(&["250m", "250m"], &["2Gi"], 3600.0)
            .unwrap();
        assert!((price - 0.03).abs() < 1e-12, "{price}");
        assert!(matches!(
            rates.pod_price(&["half"], &[], 1.0),
            Err(PricingError::BadQuantity { .. })
        ));
    }
}
