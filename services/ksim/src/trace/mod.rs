//! `ksim trace ...`: move traces in and out of a tracer store, and look inside trace files.

pub mod calibrate;
mod convert;
mod export;
mod generate;
mod import;
mod input;
pub mod inspect;
mod progress;
mod show;
pub mod transform;
mod validate;

pub use validate::{FINDINGS_EXIT, FindingsRemain};

use std::path::PathBuf;

use clap::{Args, Subcommand};
use ksim_trace::time::parse_rfc3339_ms;

#[derive(Debug, Subcommand)]
pub enum TraceCommand {
    /// Learn a provisioning model from a recording: per node group and instance type the
    /// scale-up-to-Ready and deletion delays, per owner the pod start delays; -o writes the
    /// model file `ksim run --provisioning FILE` takes.
    Calibrate(calibrate::CalibrateArgs),
    /// Export a time window of the tracer's log (or of an imported trace) to a trace file.
    Export(export::ExportArgs),
    /// Write a synthetic day of a cluster as a trace: service Deployments that follow the
    /// clock as autoscalers would scale them, and batch Jobs mostly at night, sized for a
    /// number of nodes and made from a seed.
    Generate(generate::GenerateArgs),
    /// Upload a trace file (ksim, or SimKube's .sktrace) into a tracer store.
    Import(import::ImportArgs),
    /// Summarise a trace file: time range, kinds, objects, events, lifecycles.
    Inspect {
        /// The trace file (ksim or SimKube).
        file: PathBuf,
    },
    /// Convert a SimKube trace (MessagePack, format version 2) into a ksim trace file, or with
    /// --from alibaba-gpu-v2023 Alibaba's GPU cluster trace v2023 (a node list and a pod list,
    /// CSV): its pods replayed, its nodes and scheduling kept as recorded state, its node groups'
    /// skeletons written with --node-groups.
    #[command(override_usage = "ksim trace convert <INPUT> <OUTPUT>\n       \
        ksim trace convert --from alibaba-gpu-v2023 --nodes <NODES.csv> --pods <PODS.csv> \
        [--node-groups <DIR>] [--gpu-shares <POLICY>] [--namespace <NAME>] [--start <TIME>] <OUTPUT>")]
    Convert(convert::ConvertArgs),
    /// Check a trace against the rules a replay needs (missing references, absent owners,
    /// server fields, unknown kinds, event order); --fix writes a corrected trace.
    Validate(validate::ValidateArgs),
    /// Explain a rule of `ksim trace validate`: why it matters for a replay, what --fix does.
    Explain {
        /// The rule's id or name: KS001, missing-reference, ...
        #[arg(value_parser = validate::parse_rule)]
        rule: &'static ksim_lint::Rule,
    },
    /// List a trace's events or objects (filtered by kind, namespace, name, time), or print one
    /// object's history as YAML diffs.
    Show(show::ShowArgs),
    /// Rewrite a trace file (ksim or SimKube) with the ordered rules of a YAML file: drop,
    /// patch, scale replicas, keep a time window, shift or stretch time, rename namespaces.
    Transform {
        /// The trace to read.
        input: PathBuf,
        /// The ksim trace file to write (written whole or not at all).
        output: PathBuf,
        /// The rules file (YAML; see docs/tracer.md).
        #[arg(long = "rules", short = 'f', value_name = "RULES.yaml")]
        rules: PathBuf,
    },
}

/// Where the tracer store's gRPC API is.
#[derive(Debug, Clone, Args)]
pub struct ServerArgs {
    /// Address of the tracer store's gRPC API [default: the tracer of the environment
    /// `ksim up` runs in KSIM_STATE_DIR, else http://127.0.0.1:7061]
    #[arg(long, env = "KSIM_TRACER_ADDR")]
    pub server: Option<String>,
}

impl ServerArgs {
    /// The address given, else the running environment's tracer, else the default
    /// environment's.
    pub fn resolve(&self) -> anyhow::Result<String> {
        Ok(ksim_localenv::environment::state::service_url(
            self.server.as_deref(),
            |urls| urls.tracer,
            ksim_localenv::environment::services::TRACER,
        )?)
    }
}

pub async fn run(command: TraceCommand) -> anyhow::Result<()> {
    match command {
        TraceCommand::Calibrate(args) => calibrate::run(args),
        TraceCommand::Export(args) => export::run(args).await,
        TraceCommand::Generate(args) => generate::run(args),
        TraceCommand::Import(args) => import::run(args).await,
        TraceCommand::Inspect { file } => inspect::run(&file),
        TraceCommand::Convert(args) => convert::run(args),
        TraceCommand::Validate(args) => validate::run(args).await,
        TraceCommand::Explain { rule } => validate::explain(rule),
        TraceCommand::Show(args) => show::run(args),
        TraceCommand::Transform {
            input,
            output,
            rules,
        } => transform::run(&input, &output, &rules),
    }
}

/// `ms` as an RFC 3339 time, or as the raw number where RFC 3339 has none (before 1970, after
/// 9999): a trace file may carry any time, and printing one must not fail.
fn rfc3339_ms(ms: i64) -> String {
    match u64::try_from(ms) {
        Ok(unsigned) if ksim_trace::time::in_range(ms) => humantime::format_rfc3339_millis(
            std::time::UNIX_EPOCH + std::time::Duration::from_millis(unsigned),
        )
        .to_string(),
        _ => format!("{ms} ms (out of range)"),
    }
}

/// A duration as `--from`/`--to` and `--start`/`--end` take one, "10m", with an optional sign
/// ("-10m": whether it is negative); `None` when `text` is not a duration.
fn parse_signed_duration(text: &str) -> Option<(bool, std::time::Duration)> {
    let (negative, magnitude) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    humantime::parse_duration(magnitude)
        .ok()
        .map(|duration| (negative, duration))
}

async fn connect(
    server: &ServerArgs,
) -> anyhow::Result<
    ksim_proto::ksim::trace::v1::trace_store_client::TraceStoreClient<tonic::transport::Channel>,
> {
    use anyhow::Context;
    let server = server.resolve()?;
    ksim_proto::ksim::trace::v1::trace_store_client::TraceStoreClient::connect(server.clone())
        .await
        .with_context(|| format!("connecting to the tracer store at {server}"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn times_outside_rfc_3339_print_as_numbers() {
        assert_eq!(rfc3339_ms(1_767_225_600_123), "2026-01-01T00:00:00.123Z");
        assert_eq!(
            rfc3339_ms(ksim_trace::time::MAX_MS),
            "9999-12-31T23:59:59.999Z"
        );
        for ms in [ksim_trace::time::MAX_MS + 1, i64::MAX, -1, i64::MIN] {
            assert_eq!(rfc3339_ms(ms), format!("{ms} ms (out of range)"));
        }
    }

    #[test]
    fn a_negative_offset_is_a_value_not_a_flag() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(subcommand)]
            command: TraceCommand,
        }
        let parsed =
            Cli::try_parse_from(["trace", "show", "x.ktrace", "--from", "-10m", "--to", "-5m"]);
        let Ok(Cli {
            command: TraceCommand::Show(args),
        }) = parsed
        else {
            panic!("--from -10m does not parse: {:?}", parsed.err());
        };
        assert_eq!(args.from.as_deref(), Some("-10m"));
        assert_eq!(args.to.as_deref(), Some("-5m"));
        let parsed = Cli::try_parse_from(["trace", "export", "--start", "-10m", "-o", "x.ktrace"]);
        assert!(parsed.is_ok(), "{:?}", parsed.err());
    }

    use std::path::Path;

    /// `ksim trace ARGS...` as the command line parses it.
    async fn trace(args: &[&std::ffi::OsStr]) -> anyhow::Result<()> {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(subcommand)]
            command: TraceCommand,
        }
        let argv = std::iter::once(std::ffi::OsStr::new("trace")).chain(args.iter().copied());
        run(Cli::try_parse_from(argv)?.command).await
    }

    #[tokio::test]
    async fn no_command_writes_over_a_file_it_reads() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("x.ktrace");
        std::fs::write(&input, b"recording").unwrap();
        let rules = dir.path().join("rules.yaml");
        std::fs::write(&rules, b"rules: []").unwrap();
        let symlink = dir.path().join("link.ktrace");
        std::os::unix::fs::symlink(&input, &symlink).unwrap();
        let hard_link = dir.path().join("hard.ktrace");
        std::fs::hard_link(&input, &hard_link).unwrap();
        let through_dots = dir.path().join(".").join("x.ktrace");
        let (x, r) = (input.as_os_str(), rules.as_os_str());
        let cases: [(&[&std::ffi::OsStr], String, &Path); 7] = [
            (
                &["calibrate".as_ref(), x, "-o".as_ref(), x],
                format!("-o {}", input.display()),
                &input,
            ),
            (
                &["convert".as_ref(), x, through_dots.as_os_str()],
                through_dots.display().to_string(),
                &input,
            ),
            (
                &[
                    "validate".as_ref(),
                    x,
                    "--fix".as_ref(),
                    hard_link.as_os_str(),
                ],
                format!("--fix {}", hard_link.display()),
                &input,
            ),
            (
                &[
                    "transform".as_ref(),
                    x,
                    symlink.as_os_str(),
                    "-f".as_ref(),
                    r,
                ],
                symlink.display().to_string(),
                &input,
            ),
            (
                &["transform".as_ref(), x, r, "-f".as_ref(), r],
                rules.display().to_string(),
                &rules,
            ),
            (
                &["convert".as_ref(), symlink.as_os_str(), x],
                input.display().to_string(),
                &symlink,
            ),
            (
                &[
                    "export".as_ref(),
                    "--server".as_ref(),
                    "http://127.0.0.1:1".as_ref(),
                    "--transform".as_ref(),
                    r,
                    "-o".as_ref(),
                    r,
                ],
                format!("--output {}", rules.display()),
                &rules,
            ),
        ];
        for (args, label, read) in cases {
            let error = trace(args).await.unwrap_err();
            assert_eq!(
                error.to_string(),
                format!(
                    "the output {label} is the input {}; write to another file",
                    read.display()
                ),
                "{args:?}"
            );
        }
        assert_eq!(std::fs::read(&input).unwrap(), b"recording");
        assert_eq!(std::fs::read(&rules).unwrap(), b"rules: []");
        assert!(std::fs::symlink_metadata(&symlink).unwrap().is_symlink());
    }
}
