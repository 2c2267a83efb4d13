//! `ksim trace ...`: move traces in and out of a tracer store, and look inside trace files.

mod convert;
mod export;
mod generate;
mod import;
mod input;
mod inspect;
mod progress;
mod show;
pub mod transform;
mod validate;

pub use validate::{FINDINGS_EXIT, FindingsRemain};

use std::path::PathBuf;

use clap::{Args, Subcommand};

#[derive(Debug, Subcommand)]
pub enum TraceCommand {
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
    /// Convert a SimKube trace (MessagePack, format version 2) into a ksim trace file.
    Convert {
        /// The SimKube trace.
        input: PathBuf,
        /// The ksim trace file to write.
        output: PathBuf,
    },
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
        /// The rules file (YAML; see the README's trace tools section).
        #[arg(long = "rules", short = 'f', value_name = "RULES.yaml")]
        rules: PathBuf,
    },
}

/// Where the tracer store's gRPC API is.
#[derive(Debug, Clone, Args)]
pub struct ServerArgs {
    /// Address of the tracer store's gRPC API.
    #[arg(
        long,
        env = "KSIM_TRACER_ADDR",
        default_value = "http://127.0.0.1:7061"
    )]
    pub server: String,
}

pub async fn run(command: TraceCommand) -> anyhow::Result<()> {
    match command {
        TraceCommand::Export(args) => export::run(args).await,
        TraceCommand::Generate(args) => generate::run(args),
        TraceCommand::Import(args) => import::run(args).await,
        TraceCommand::Inspect { file } => inspect::run(&file),
        TraceCommand::Convert { input, output } => convert::run(&input, &output),
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

/// A temporary file in `output`'s directory, for a command that writes the whole output or
/// none of it: it persists the file onto `output` once everything is written.
fn file_beside(output: &std::path::Path) -> anyhow::Result<tempfile::NamedTempFile> {
    use anyhow::Context;
    let dir = output
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("creating a file in {}", dir.display()))
}

async fn connect(
    server: &ServerArgs,
) -> anyhow::Result<
    ksim_proto::ksim::trace::v1::trace_store_client::TraceStoreClient<tonic::transport::Channel>,
> {
    use anyhow::Context;
    ksim_proto::ksim::trace::v1::trace_store_client::TraceStoreClient::connect(
        server.server.clone(),
    )
    .await
    .with_context(|| format!("connecting to the tracer store at {}", server.server))
}
