//! Command-line settings and the optional provider config file (prices, per-group options).

use std::{collections::HashMap, path::PathBuf, time::Duration};

use serde::Deserialize;
use thiserror::Error;

use ksim_nodes::pricing::{BadPrice, Pricing};

use crate::{
    domain::options::{BadOption, GroupOptions},
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
    #[error("provider config {path} is invalid: {problem}")]
    Invalid {
        path: PathBuf,
        problem: ConfigProblem,
    },
}

/// What is wrong with a provider config's text.
#[derive(Debug, Error)]
pub enum ConfigProblem {
    /// Not YAML of the config's shape: the parser's message, which names the key.
    #[error("{0}")]
    Shape(String),
    #[error(transparent)]
    Price(#[from] BadPrice),
    #[error(transparent)]
    Option(#[from] BadOption),
}

impl ProviderConfig {
    /// Parses and judges the file: a value no setting can mean (a negative or NaN price, a
    /// threshold outside 0 to 1) is refused here, before the provider serves anything.
    pub fn from_yaml(text: &str) -> Result<Self, ConfigProblem> {
        let config: Self =
            serde_saphyr::from_str(text).map_err(|e| ConfigProblem::Shape(e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// The first bad value, by name; groups in name order, so the same file names the same one.
    fn validate(&self) -> Result<(), ConfigProblem> {
        if let Some(pricing) = &self.pricing {
            pricing.validate()?;
        }
        let mut groups: Vec<_> = self.node_groups.iter().collect();
        groups.sort_unstable_by_key(|(group, _)| *group);
        for (group, options) in groups {
            options.validate(group)?;
        }
        Ok(())
    }

    pub fn load(path: &std::path::Path) -> Result<Self, ConfigError> {
        // Written by hand: a few KiB. Bounded, so a wrong path (a device) cannot exhaust memory.
        let text = ksim_grpc::files::read_text_bounded(path, 1 << 20, "the provider config")?;
        Self::from_yaml(&text).map_err(|problem| ConfigError::Invalid {
            path: path.to_owned(),
            problem,
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

    /// Issue 39, finding 8: a negative or NaN price was taken, and served to the price expander.
    #[test]
    fn absurd_numbers_are_refused_at_load_naming_field_and_group() {
        for (yaml, named) in [
            (
                "pricing:\n  instanceTypes:\n    m5.large: -0.096\n",
                r#"pricing.instanceTypes["m5.large"] is -0.096: a price must be"#,
            ),
            (
                "pricing:\n  instanceTypes:\n    c5.xlarge: .nan\n",
                r#"pricing.instanceTypes["c5.xlarge"] is NaN"#,
            ),
            (
                "pricing:\n  pod: {cpuPerHour: .inf, memoryGiBPerHour: 0.004}\n",
                "pricing.pod.cpuPerHour is inf",
            ),
            (
                "nodeGroups:\n  a: {}\n  m5:\n    scaleDownUtilizationThreshold: -1\n",
                r#"nodeGroups["m5"].scaleDownUtilizationThreshold is -1"#,
            ),
        ] {
            let err = ProviderConfig::from_yaml(yaml).unwrap_err().to_string();
            assert!(err.contains(named), "{yaml}: {err}");
        }
        // What the provider starts from (and `--check` judges) refuses it too.
        use clap::Parser;
        let path = std::env::temp_dir().join(format!(
            "ksim-cloudprov-negative-price-{}.yaml",
            std::process::id()
        ));
        std::fs::write(&path, "pricing:\n  instanceTypes:\n    m5.large: -1\n").unwrap();
        let cli = Cli::try_parse_from([
            "ksim-cloudprov".as_ref(),
            "--provider-config".as_ref(),
            path.as_os_str(),
        ])
        .unwrap();
        let err = cli.provider.settings().unwrap_err().to_string();
        let _ = std::fs::remove_file(&path);
        assert!(
            err.contains(&path.display().to_string()) && err.contains(r#"["m5.large"] is -1"#),
            "{err}"
        );
    }

    #[test]
    fn a_typo_is_an_error_naming_the_field() {
        let err = ProviderConfig::from_yaml("prizing: {}\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("prizing"), "{err}");
    }

    #[test]
    fn a_missing_file_names_its_path() {
        let err = ProviderConfig::load(std::path::Path::new("/nonexistent/ksim.yaml")).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/ksim.yaml"), "{err}");
    }
}
