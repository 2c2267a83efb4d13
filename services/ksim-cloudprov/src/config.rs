//! Command-line settings and the optional provider config file (prices, per-group options).

use std::{collections::HashMap, path::PathBuf, time::Duration};

use serde::Deserialize;
use thiserror::Error;

use crate::{
    domain::{options::GroupOptions, pricing::Pricing},
    provider::Settings,
};

#[derive(Debug, Clone, clap::Args)]
pub struct ProviderArgs {
    /// Pool name the virtual nodes carry (`ksim.io/pool`); the template node carries it too.
    #[arg(long, env = "KSIM_POOL_NAME", default_value = "ksim")]
    pub pool_name: String,

    /// Max size of a group whose Deployment has no `ksim.io/max-size` annotation.
    #[arg(long, env = "KSIM_DEFAULT_MAX_SIZE", default_value_t = 1000,
          value_parser = clap::value_parser!(i32).range(0..))]
    pub default_max_size: i32,

    /// Node label naming a node's GPU type, as cluster-autoscaler asks for it.
    #[arg(long, env = "KSIM_GPU_LABEL", default_value = "ksim.io/gpu-type")]
    pub gpu_label: String,

    /// YAML file with `pricing` and `nodeGroups` options; without it, pricing and
    /// per-group options are answered UNIMPLEMENTED so cluster-autoscaler uses its defaults.
    #[arg(long, env = "KSIM_PROVIDER_CONFIG")]
    pub provider_config: Option<PathBuf>,

    /// Seconds to wait for a write to show in the watches before a resize fails (retryable).
    #[arg(long, env = "KSIM_SETTLE_TIMEOUT_SECONDS", default_value_t = 30)]
    pub settle_timeout_seconds: u64,
}

/// The provider config file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProviderConfig {
    pub pricing: Option<Pricing>,
    #[serde(default)]
    pub node_groups: HashMap<String, GroupOptions>,
}

#[derive(Debug, Error)]
pub enum ConfigError {
    /// Unreadable, or over the size limit.
    #[error(transparent)]
    Read(#[from] ksim_grpc::files::FileError),
    #[error("provider config {path} is invalid: {message}")]
    Invalid { path: PathBuf, message: String },
}

impl ProviderConfig {
    pub fn from_yaml(text: &str) -> Result<Self, String> {
        serde_saphyr::from_str(text).map_err(|e| e.to_string())
    }

    pub fn load(path: &std::path::Path) -> Result<Self, ConfigError> {
        // Written by hand: a few KiB. Bounded, so a wrong path (a device) cannot exhaust memory.
        let text = ksim_grpc::files::read_text_bounded(path, 1 << 20, "the provider config")?;
        Self::from_yaml(&text).map_err(|message| ConfigError::Invalid {
            path: path.to_owned(),
            message,
        })
    }
}

impl ProviderArgs {
    pub fn settings(&self) -> Result<Settings, ConfigError> {
        let config = match &self.provider_config {
            Some(path) => ProviderConfig::load(path)?,
            None => ProviderConfig::default(),
        };
        Ok(Settings {
            pool_name: self.pool_name.clone(),
            gpu_label: self.gpu_label.clone(),
            pricing: config.pricing,
            group_options: config.node_groups,
            settle_timeout: Duration::from_secs(self.settle_timeout_seconds),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        provider: ProviderArgs,
    }

    #[test]
    fn a_negative_default_max_size_is_refused_on_the_command_line() {
        use clap::Parser;
        let err = Cli::try_parse_from(["ksim-cloudprov", "--default-max-size=-1"]).unwrap_err();
        assert!(err.to_string().contains("--default-max-size"), "{err}");
        let ok = Cli::try_parse_from(["ksim-cloudprov", "--default-max-size=0"]).unwrap();
        assert_eq!(ok.provider.default_max_size, 0);
    }

    #[test]
    fn a_full_config_parses() {
        let config = ProviderConfig::from_yaml(
            "pricing:\n  instanceTypes:\n    m5.large: 0.096\n  pod:\n    cpuPerHour: 0.03\n    memoryGiBPerHour: 0.004\nnodeGroups:\n  m5:\n    scaleDownUnneededTime: 2m\n",
        )
        .unwrap();
        let pricing = config.pricing.unwrap();
        assert_eq!(pricing.instance_types["m5.large"], 0.096);
        assert_eq!(pricing.pod.unwrap().cpu_per_hour, 0.03);
        assert_eq!(
            config.node_groups["m5"].scale_down_unneeded_time,
            Some(Duration::from_secs(120))
        );
    }

    #[test]
    fn a_typo_is_an_error_naming_the_field() {
        let err = ProviderConfig::from_yaml("prizing: {}\n").unwrap_err();
        assert!(err.contains("prizing"), "{err}");
    }

    #[test]
    fn a_missing_file_names_its_path() {
        let err = ProviderConfig::load(std::path::Path::new("/nonexistent/ksim.yaml")).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/ksim.yaml"), "{err}");
    }
}
