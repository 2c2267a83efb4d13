//! `ksim up --karpenter`: the real Karpenter (its KWOK provider) as the environment's node
//! autoscaler in place of cluster-autoscaler, offering the instance types of the user's node
//! skeletons at the prices of the provider config, with the KWOKNodeClass `default` a user's
//! NodePools refer to. Everything it reads is checked before anything starts. One node
//! autoscaler runs at a time: a simulation of cluster-autoscaler's stops Karpenter until it
//! ends (`configuration::Components`), so one experiment can compare the two.

use std::path::PathBuf;

use anyhow::Context;
use ksim_localenv::environment::instance_types::instance_types_of;
use ksim_localenv::{ControlPlane, Karpenter, KarpenterBinary, manifests};
use ksim_nodes::karpenter::InstanceType;

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
