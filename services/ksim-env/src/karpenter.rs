//! `ksim up --karpenter`: the real Karpenter (its KWOK provider) as the environment's node
//! autoscaler in place of cluster-autoscaler, offering the instance types of the user's node
//! skeletons at the prices of the provider config, with the KWOKNodeClass `default` a user's
//! NodePools refer to. Everything it reads is checked before anything starts. One node
//! autoscaler runs at a time: a simulation of cluster-autoscaler's stops Karpenter until it
//! ends (`configuration::Components`), so one experiment can compare the two.

use std::{collections::BTreeMap, path::PathBuf};

use anyhow::Context;
use ksim_localenv::{ControlPlane, Karpenter, KarpenterBinary, manifests};
use ksim_nodes::{
    karpenter::{InstanceType, instance_types},
    pricing::Pricing,
    skeleton::NodeSkeleton,
};
use serde::Deserialize;

/// The node class every NodePool of the environment may name (`nodeClassRef` to the
/// KWOKNodeClass `default`), with no registration delay of its own: a NodePool's provisioning
/// model is the pool's to play.
const NODE_CLASS_YAML: &str = "\
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata:
  name: default
spec: {}
";

/// What Karpenter will run with, found and checked before the environment starts.
#[derive(Debug)]
pub struct KarpenterSetup {
    binary: KarpenterBinary,
    /// Empty: the KWOK provider's built-in list.
    instance_types: Vec<InstanceType>,
}

/// The part of the provider config Karpenter needs, read as the cloud provider reads it; the
/// provider checks the rest of the file (`nodeGroups`).
#[derive(Debug, Default, Deserialize)]
struct Prices {
    #[serde(default)]
    pricing: Pricing,
}

impl KarpenterSetup {
    /// The binary, and the instance types of `skeletons` priced by the provider config's
    /// `pricing.instanceTypes` (every type needs a price: Karpenter launches the cheapest).
    /// `provider_config`: where the file came from, and its YAML.
    pub fn prepare(
        skeletons: &[PathBuf],
        provider_config: Option<(&str, &str)>,
    ) -> anyhow::Result<Self> {
        let binary = KarpenterBinary::locate()
            .context("--karpenter needs Karpenter (deploy/karpenter/build.sh)")?;
        Ok(Self {
            binary,
            instance_types: instance_types_of(skeletons, provider_config)?,
        })
    }

    /// The instance types it offers; empty: the KWOK provider's built-in list.
    pub fn instance_types(&self) -> &[InstanceType] {
        &self.instance_types
    }

    /// Karpenter of `binary` with its built-in instance types, for tests that never start it.
    #[cfg(test)]
    pub fn of_binary(binary: KarpenterBinary) -> Self {
        Self {
            binary,
            instance_types: Vec::new(),
        }
    }

    /// Starts Karpenter against the embedded control plane with its own defaults (production's)
    /// and creates the node class.
    pub async fn start(&self, control_plane: &ControlPlane) -> anyhow::Result<Karpenter> {
        let mut builder = Karpenter::builder(control_plane).binary(self.binary.clone());
        if !self.instance_types.is_empty() {
            builder = builder.instance_types(self.instance_types.clone());
        }
        let karpenter = builder.start().await.context("starting Karpenter")?;
        manifests::apply(&control_plane.client(), NODE_CLASS_YAML)
            .await
            .context("creating Karpenter's node class")?;
        Ok(karpenter)
    }
}

/// The instance types of the node skeleton files `skeletons` at the provider config's prices
/// (`provider_config`: where the file came from, and its YAML); none (the KWOK provider's
/// built-in list) without skeletons.
pub fn instance_types_of(
    skeletons: &[PathBuf],
    provider_config: Option<(&str, &str)>,
) -> anyhow::Result<Vec<InstanceType>> {
    let mut shapes = Vec::with_capacity(skeletons.len());
    for path in skeletons {
        let yaml = crate::files::read_text_bounded(
            path,
            crate::files::MAX_CONFIG_BYTES,
            "the instance type's node skeleton",
        )?;
        let skeleton = NodeSkeleton::from_yaml(&yaml)
            .with_context(|| format!("--instance-type {}", path.display()))?;
        shapes.push(skeleton);
    }
    priced(&shapes, provider_config)
}

/// The instance types of `shapes` at the provider config's prices; none (the KWOK provider's
/// built-in list) without shapes.
fn priced(
    shapes: &[NodeSkeleton],
    provider_config: Option<(&str, &str)>,
) -> anyhow::Result<Vec<InstanceType>> {
    let prices = match provider_config {
        Some((source, yaml)) => {
            let context = || format!("the provider config {source}");
            let prices: Option<Prices> = serde_saphyr::from_str(yaml).with_context(context)?;
            let pricing = prices.unwrap_or_default().pricing;
            pricing.validate().with_context(context)?;
            pricing.instance_types
        }
        None => BTreeMap::new(),
    };
    if shapes.is_empty() {
        return Ok(Vec::new());
    }
    instance_types(shapes, &prices).context("--instance-type")
}

/// Karpenter in an environment started with it: prepared once, running while the configuration
/// asks for it.
#[derive(Debug)]
pub struct KarpenterSlot {
    setup: KarpenterSetup,
    process: Option<Karpenter>,
}

impl KarpenterSlot {
    pub fn new(setup: KarpenterSetup) -> Self {
        Self {
            setup,
            process: None,
        }
    }

    /// The release it runs, e.g. `v1.14.1`.
    pub fn version(&self) -> &'static str {
        ksim_localenv::karpenter::karpenter_version()
    }

    pub fn running(&self) -> Option<&Karpenter> {
        self.process.as_ref()
    }

    /// Starts it unless it runs. Its CRDs are applied again, which changes nothing that is
    /// there, and it takes up the NodeClaims it finds, as a restarted operator does.
    pub async fn start(&mut self, control_plane: &ControlPlane) -> anyhow::Result<()> {
        if self.process.is_none() {
            self.process = Some(self.setup.start(control_plane).await?);
        }
        Ok(())
    }

    /// Stops it (its process is killed).
    pub fn stop(&mut self) {
        self.process = None;
    }

    /// What happened if it exited since last asked; it is then not running.
    pub fn exited(&mut self) -> Option<String> {
        let process = self.process.as_mut()?;
        let error = process.check_running().err()?;
        let what = format!(
            "karpenter stopped: {error} (log {})",
            process.log_path().display()
        );
        self.process = None;
        Some(what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M5_LARGE: &str = include_str!("../../../../deploy/vnode/examples/skeleton-m5-large.yaml");

    fn error(yaml: &str) -> String {
        let shapes = [NodeSkeleton::from_yaml(M5_LARGE).unwrap()];
        format!("{:#}", priced(&shapes, Some(("p.yaml", yaml))).unwrap_err())
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
