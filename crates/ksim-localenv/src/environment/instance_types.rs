//! What the environment's Karpenter offers: the instance types of the user's node skeletons at
//! the provider config's prices, read the same way by `ksim-env` (which starts Karpenter with
//! them) and by `ksim experiment` (which checks a running environment offers what a file asks).

use std::path::PathBuf;

use ksim_grpc::files::read_text_bounded;
use ksim_nodes::{
    karpenter::{InstanceType, instance_types},
    pricing::Pricing,
    skeleton::NodeSkeleton,
};
use serde::Deserialize;

use super::EnvironmentError;

/// The largest configuration file read (node skeletons, provider configs): written by hand,
/// the largest real ones are a few KiB.
pub const MAX_CONFIG_BYTES: usize = 1 << 20;

/// The part of the provider config Karpenter needs, read as the cloud provider reads it; the
/// provider checks the rest of the file (`nodeGroups`).
#[derive(Debug, Default, Deserialize)]
struct Prices {
    #[serde(default)]
    pricing: Pricing,
}

/// The instance types of the node skeleton files `skeletons` at the provider config's prices
/// (`provider_config`: where the file came from, and its YAML); none (the KWOK provider's
/// built-in list) without skeletons.
pub fn instance_types_of(
    skeletons: &[PathBuf],
    provider_config: Option<(&str, &str)>,
) -> Result<Vec<InstanceType>, EnvironmentError> {
    let mut shapes = Vec::with_capacity(skeletons.len());
    for path in skeletons {
        let yaml = read_text_bounded(path, MAX_CONFIG_BYTES, "the instance type's node skeleton")?;
        let skeleton =
            NodeSkeleton::from_yaml(&yaml).map_err(|source| EnvironmentError::InstanceType {
                path: path.clone(),
                source,
            })?;
        shapes.push(skeleton);
    }
    priced(&shapes, provider_config)
}

/// The instance types of `shapes` at the provider config's prices; none (the KWOK provider's
/// built-in list) without shapes.
fn priced(
    shapes: &[NodeSkeleton],
    provider_config: Option<(&str, &str)>,
) -> Result<Vec<InstanceType>, EnvironmentError> {
    let prices = match provider_config {
        Some((source, yaml)) => {
            let refused = |message: String| EnvironmentError::ProviderConfig {
                file: source.to_owned(),
                message,
            };
            let prices: Option<Prices> =
                serde_saphyr::from_str(yaml).map_err(|error| refused(error.to_string()))?;
            let pricing = prices.unwrap_or_default().pricing;
            pricing
                .validate()
                .map_err(|error| refused(error.to_string()))?;
            pricing
        }
        None => Pricing::default(),
    };
    if shapes.is_empty() {
        return Ok(Vec::new());
    }
    Ok(instance_types(shapes, &prices)?)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const M5_LARGE: &str = include_str!("../../../../deploy/vnode/examples/skeleton-m5-large.yaml");

    fn error(yaml: &str) -> String {
        let shapes = [NodeSkeleton::from_yaml(M5_LARGE).unwrap()];
        priced(&shapes, Some(("p.yaml", yaml)))
            .unwrap_err()
            .to_string()
    }

    /// Karpenter is offered the prices the cloud provider answers CA with: read by the same
    /// rules, the provider's own part of the file (`nodeGroups`) left to it.
    #[test]
    fn instance_types_take_the_provider_configs_prices_by_its_rules() {
        let shapes = [NodeSkeleton::from_yaml(M5_LARGE).unwrap()];
        let yaml = "pricing:\n  instanceTypes: {m5.large: 0.096}\n  pod: {cpuPerHour: 0.03, \
                    memoryGiBPerHour: 0.004}\nnodeGroups:\n  m5: {scaleDownUnneededTime: 2m}\n";
        let types = priced(&shapes, Some(("p.yaml", yaml))).unwrap();
        let [m5] = types.as_slice() else {
            panic!("{types:?}")
        };
        assert_eq!(m5.name, "m5.large");
        assert_eq!(m5.offerings[0].price, 0.096);
        assert!(priced(&[], None).unwrap().is_empty());

        let negative = error("pricing:\n  instanceTypes: {m5.large: -1}\n");
        assert!(
            negative.contains("p.yaml")
                && negative.contains(r#"pricing.instanceTypes["m5.large"]"#),
            "{negative}"
        );
        let misspelt = error("pricing:\n  instanceTypes: {m5.large: 1}\n  pods: {}\n");
        assert!(misspelt.contains("pods"), "{misspelt}");
        let unpriced = error("pricing:\n  instanceTypes: {m5.xlarge: 1}\n");
        assert!(unpriced.contains("m5.large"), "{unpriced}");
    }
}
