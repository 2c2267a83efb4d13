//! Command-line settings and the tracer config file (tracked kinds, env redaction).

use std::{path::PathBuf, time::Duration};

use serde::Deserialize;
use thiserror::Error;

use crate::{
    domain::{
        kinds::{self, TrackedKind},
        sanitize::EnvRedaction,
    },
    log::{FsyncPolicy, LogConfig, Retention},
};

#[derive(Debug, Clone, clap::Args)]
pub struct TracerArgs {
    /// YAML file with `trackedKinds` and `redactEnv`; without it the workload kinds are tracked.
    #[arg(long, env = "KSIM_TRACER_CONFIG")]
    pub config: Option<PathBuf>,

    /// Directory of the log, its checkpoint, imported traces, and the temporary files an export
    /// sorts a long window in (unnamed: removed when the export ends).
    #[arg(
        long,
        env = "KSIM_TRACER_DATA_DIR",
        default_value = "/var/lib/ksim-tracer"
    )]
    pub data_dir: PathBuf,

    /// When appended events reach the disk: `always` (before they count as recorded),
    /// `interval` (every --fsync-interval), `never` (left to the OS).
    #[arg(long, env = "KSIM_TRACER_FSYNC", value_enum, default_value_t = Fsync::Interval)]
    pub fsync: Fsync,

    /// How often `--fsync interval` syncs; events count as recorded once synced.
    #[arg(long, env = "KSIM_TRACER_FSYNC_INTERVAL", value_parser = humantime::parse_duration, default_value = "100ms")]
    pub fsync_interval: Duration,

    /// Events older than this are folded into the checkpoint and their segments deleted.
    #[arg(long, env = "KSIM_TRACER_RETENTION_AGE", value_parser = humantime::parse_duration, default_value = "7d")]
    pub retention_age: Duration,

    /// Most bytes the log keeps on disk (suffixes Ki, Mi, Gi); older segments are folded away.
    #[arg(long, env = "KSIM_TRACER_RETENTION_BYTES", value_parser = parse_bytes, default_value = "10Gi")]
    pub retention_bytes: u64,

    /// A segment is sealed and compressed when it reaches this size (suffixes Ki, Mi, Gi).
    #[arg(long, env = "KSIM_TRACER_SEGMENT_BYTES", value_parser = parse_bytes, default_value = "16Mi")]
    pub segment_bytes: u64,

    /// ... or when it is this old, so retention can drop old events in small steps.
    #[arg(long, env = "KSIM_TRACER_SEGMENT_AGE", value_parser = humantime::parse_duration, default_value = "10m")]
    pub segment_age: Duration,

    /// How long to wait before looking again for a kind whose CRD is missing or whose watch failed.
    #[arg(long, env = "KSIM_TRACER_RETRY_INTERVAL", value_parser = humantime::parse_duration, default_value = "10s")]
    pub retry_interval: Duration,

    /// How often pods' CPU and memory usage is read from the cluster's metrics API
    /// (`metrics.k8s.io`, as metrics-server serves it); a window already recorded is not
    /// recorded again. The default is metrics-server's resolution in its release manifest.
    /// `0s` records no usage.
    #[arg(long, env = "KSIM_TRACER_USAGE_INTERVAL", value_parser = humantime::parse_duration, default_value = "15s")]
    pub usage_interval: Duration,

    /// Largest trace file Import accepts (suffixes Ki, Mi, Gi).
    #[arg(long, env = "KSIM_TRACER_MAX_IMPORT_BYTES", value_parser = parse_bytes, default_value = "1Gi")]
    pub max_import_bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Fsync {
    Always,
    Interval,
    Never,
}

impl TracerArgs {
    /// Every flag at its default (or its environment variable), the data under `data_dir`: for
    /// a tracer started in-process.
    pub fn with_data_dir(data_dir: impl Into<PathBuf>) -> Result<Self, clap::Error> {
        #[derive(clap::Parser)]
        struct Defaults {
            #[command(flatten)]
            tracer: TracerArgs,
        }
        let mut args = <Defaults as clap::Parser>::try_parse_from(["ksim-tracer"])?.tracer;
        args.data_dir = data_dir.into();
        Ok(args)
    }

    /// The usage read interval; `None` when usage is not recorded.
    pub fn usage_interval(&self) -> Option<Duration> {
        (!self.usage_interval.is_zero()).then_some(self.usage_interval)
    }

    pub fn log_config(&self) -> LogConfig {
        let mut config = LogConfig::new(self.data_dir.join("log"));
        config.fsync = match self.fsync {
            Fsync::Always => FsyncPolicy::Always,
            Fsync::Interval => FsyncPolicy::Interval(self.fsync_interval),
            Fsync::Never => FsyncPolicy::Never,
        };
        config.retention = Retention {
            max_age: Some(self.retention_age),
            max_bytes: Some(self.retention_bytes),
        };
        config.segment_max_bytes = self.segment_bytes;
        config.segment_max_age = self.segment_age;
        config
    }

    pub fn tracer_config(&self) -> Result<TracerConfig, ConfigError> {
        match &self.config {
            Some(path) => TracerConfig::load(path),
            None => Ok(TracerConfig::default()),
        }
    }
}

/// The tracer config file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TracerConfig {
    #[serde(default = "kinds::default_kinds")]
    pub tracked_kinds: Vec<TrackedKind>,
    #[serde(default)]
    pub redact_env: EnvRedaction,
}

impl Default for TracerConfig {
    fn default() -> Self {
        Self {
            tracked_kinds: kinds::default_kinds(),
            redact_env: EnvRedaction::default(),
        }
    }
}

#[derive(Debug, Error)]
pub enum ConfigError {
    /// Unreadable, or over the size limit.
    #[error(transparent)]
    Read(#[from] ksim_grpc::files::FileError),
    #[error("tracer config {path} is invalid: {problem}")]
    Invalid {
        path: PathBuf,
        problem: ConfigProblem,
    },
}

/// What is wrong with a tracer config's text.
#[derive(Debug, Error)]
pub enum ConfigProblem {
    /// Not YAML of the config's shape: the parser's message, which names the key.
    #[error("{0}")]
    Shape(String),
    #[error(transparent)]
    Kinds(#[from] kinds::KindsError),
}

impl TracerConfig {
    pub fn from_yaml(text: &str) -> Result<Self, ConfigProblem> {
        let config: Self =
            serde_saphyr::from_str(text).map_err(|e| ConfigProblem::Shape(e.to_string()))?;
        kinds::validate(&config.tracked_kinds)?;
        Ok(config)
    }

    pub fn load(path: &std::path::Path) -> Result<Self, ConfigError> {
        // Written by hand: a few KiB. Bounded, so a wrong path (a device) cannot exhaust memory.
        let text = ksim_grpc::files::read_text_bounded(path, 1 << 20, "the tracer config")?;
        Self::from_yaml(&text).map_err(|problem| ConfigError::Invalid {
            path: path.to_owned(),
            problem,
        })
    }
}

/// Bytes with an optional binary suffix: `1048576`, `512Ki`, `16Mi`, `10Gi`.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (digits, factor) = [
        ("Ki", 1_u64 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
    ]
    .iter()
    .find_map(|(suffix, factor)| text.strip_suffix(suffix).map(|d| (d, *factor)))
    .unwrap_or((text, 1));
    digits
        .trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(factor))
        .ok_or_else(|| format!("{text:?} is not a byte size (a whole number with an optional Ki, Mi, Gi or Ti suffix)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_process_args_take_the_flag_defaults_and_the_given_directory() {
        let args = TracerArgs::with_data_dir("/tmp/t").unwrap();
        assert_eq!(args.data_dir, PathBuf::from("/tmp/t"));
        assert_eq!(args.retention_bytes, 10 << 30);
        assert_eq!(args.fsync, Fsync::Interval);
        assert_eq!(args.log_config().segment_max_bytes, 16 << 20);
    }

    #[test]
    fn byte_sizes_take_binary_suffixes_and_refuse_the_rest() {
        assert_eq!(parse_bytes("1024"), Ok(1024));
        assert_eq!(parse_bytes("16Mi"), Ok(16 << 20));
        assert_eq!(parse_bytes("10Gi"), Ok(10 << 30));
        for bad in ["", "1.5Gi", "10GB", "-1", "99999999999Ti"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_config_file_lists_any_kind_and_keeps_defaults_for_what_it_omits() {
        let config = TracerConfig::from_yaml(
            "trackedKinds:\n\
             - apiVersion: scheduling.k8s.io/v1\n  kind: PriorityClass\n\
             - apiVersion: example.com/v1\n  kind: Widget\n  podTemplatePaths: [/spec/template]\n  trackLifecycles: true\n\
             - {apiVersion: v1, kind: Pod, skipOwned: true}\n",
        )
        .unwrap();
        assert_eq!(config.tracked_kinds.len(), 3);
        assert_eq!(config.tracked_kinds[1].group(), "example.com");
        assert!(config.tracked_kinds[1].track_lifecycles);
        assert_eq!(config.redact_env, EnvRedaction::default());
        assert_eq!(
            TracerConfig::from_yaml("{}").unwrap(),
            TracerConfig::default()
        );
    }

    #[test]
    fn the_shipped_config_map_holds_a_valid_config_equal_to_the_defaults() {
        let manifest = include_str!("../../../deploy/tracer/config.yaml");
        let config_map: serde_json::Value = serde_saphyr::from_str(manifest).unwrap();
        let text = config_map["data"]["tracer.yaml"].as_str().unwrap();
        assert_eq!(
            TracerConfig::from_yaml(text).unwrap(),
            TracerConfig::default()
        );
    }

    #[test]
    fn config_errors_name_the_field() {
        let unknown = TracerConfig::from_yaml("trackedKind: []")
            .unwrap_err()
            .to_string();
        assert!(unknown.contains("trackedKind"), "{unknown}");
        let duplicate = TracerConfig::from_yaml(
            "trackedKinds:\n- {apiVersion: v1, kind: Pod}\n- {apiVersion: v1, kind: Pod}\n",
        )
        .unwrap_err()
        .to_string();
        assert!(duplicate.contains("twice"), "{duplicate}");
    }
}
