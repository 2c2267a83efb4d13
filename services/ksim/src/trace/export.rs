//! `ksim trace export`: a time window of a tracer store's log, written to a trace file.

use std::{io::Write, path::PathBuf, time::SystemTime};

use anyhow::{Context, bail};
use clap::Args;
use ksim_proto::ksim::trace::v1 as pb;

use super::{ServerArgs, connect, progress};

#[derive(Debug, Args)]
pub struct ExportArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Start of the window: an RFC 3339 time, or a duration before now ("2h"); default: the oldest event.
    #[arg(long, allow_hyphen_values = true)]
    start: Option<String>,
    /// End of the window (exclusive), as --start; default: now, or where an imported trace's
    /// recording ended (--trace-id).
    #[arg(long, allow_hyphen_values = true)]
    end: Option<String>,
    /// Keep only these namespaces (repeatable).
    #[arg(long = "namespace", short = 'n')]
    namespaces: Vec<String>,
    /// Drop these namespaces (repeatable).
    #[arg(long = "exclude-namespace")]
    exclude_namespaces: Vec<String>,
    /// Keep objects matching this label selector (repeatable: any may match).
    #[arg(long = "selector", short = 'l')]
    selectors: Vec<String>,
    /// Drop objects matching this label selector (repeatable).
    #[arg(long = "exclude-selector")]
    exclude_selectors: Vec<String>,
    /// Keep cluster-scoped objects even with --namespace.
    #[arg(long)]
    include_cluster_scoped: bool,
    /// Export from this imported trace instead of the recorded log.
    #[arg(long)]
    trace_id: Option<String>,
    /// Apply the rules of this YAML file to the exported trace before it is written.
    #[arg(long, value_name = "RULES.yaml")]
    transform: Option<PathBuf>,
    /// File to write.
    #[arg(long, short = 'o')]
    output: PathBuf,
}

pub async fn run(args: ExportArgs) -> anyhow::Result<()> {
    let label = format!("--output {}", args.output.display());
    // Its one file read is the rules file, which the output must not replace.
    let rules_file: Vec<&std::path::Path> = args.transform.as_deref().into_iter().collect();
    crate::files::check_output_of(&label, &args.output, &rules_file)?;
    // Read first: bad rules fail before anything is asked of the tracer.
    let rules = args
        .transform
        .as_deref()
        .map(super::transform::load_rules)
        .transpose()?;
    let request = pb::ExportRequest {
        start_time: args
            .start
            .as_deref()
            .map(|t| parse_time(t, "--start"))
            .transpose()?,
        end_time: args
            .end
            .as_deref()
            .map(|t| parse_time(t, "--end"))
            .transpose()?,
        filter: Some(pb::TraceFilter {
            include_namespaces: args.namespaces,
            exclude_namespaces: args.exclude_namespaces,
            include_label_selectors: args.selectors,
            exclude_label_selectors: args.exclude_selectors,
            include_kinds: Vec::new(),
            include_cluster_scoped: args.include_cluster_scoped,
        }),
        chunk_size_bytes: 0,
        trace_id: args.trace_id.unwrap_or_default(),
    };
    let mut client = connect(&args.server).await?;
    let mut stream = client
        .export(request)
        .await
        .map_err(status_error)?
        .into_inner();
    // Written beside the target and renamed at the end: a failed export leaves no partial file.
    let mut file = crate::files::file_beside(&args.output)?;
    let bar = progress::bytes(None, "exporting");
    let mut summary = None;
    while let Some(chunk) = stream.message().await.map_err(status_error)? {
        file.write_all(&chunk.data).context("writing the trace")?;
        bar.inc(chunk.data.len() as u64);
        if chunk.summary.is_some() {
            summary = chunk.summary;
        }
    }
    bar.finish_and_clear();
    let Some(summary) = summary else {
        bail!("the export ended early (no summary received); nothing was written");
    };
    if let Some(rules) = &rules {
        let transformed =
            super::transform::transform_file(file.path(), &args.output, &label, rules)?;
        super::transform::report(&args.output, rules, &transformed);
        return Ok(());
    }
    crate::files::persist(file, &label, &args.output)?;
    eprintln!(
        "wrote {}: {} events, {} object changes (applies and deletes), {} pod lifecycles",
        args.output.display(),
        summary.events,
        summary.objects,
        summary.lifecycles
    );
    Ok(())
}

fn parse_time(text: &str, flag: &str) -> anyhow::Result<prost_types::Timestamp> {
    if let Some(ms) =
        super::parse_rfc3339_ms(text).map_err(|why| anyhow::anyhow!("{flag} {why}"))?
    {
        return Ok(ksim_trace::time::timestamp(ms));
    }
    let Some((negative, ago)) = super::parse_signed_duration(text) else {
        anyhow::bail!(
            "{flag} {text:?} is neither an RFC 3339 time (2026-01-05T10:00:00Z) nor a duration before now (2h)"
        );
    };
    anyhow::ensure!(
        !negative,
        "{flag} {text:?}: a duration is how long before now (2h) and takes no sign; give a later time in RFC 3339"
    );
    let since_epoch = SystemTime::now()
        .checked_sub(ago)
        .and_then(|time| time.duration_since(std::time::UNIX_EPOCH).ok());
    let Some(since_epoch) = since_epoch else {
        anyhow::bail!("{flag} {text}: that long before now is before 1970-01-01T00:00:00Z");
    };
    Ok(prost_types::Timestamp::from(
        std::time::UNIX_EPOCH + since_epoch,
    ))
}

pub(super) fn status_error(status: tonic::Status) -> anyhow::Error {
    anyhow::anyhow!("tracer store: {} ({:?})", status.message(), status.code())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_window_time_says_what_is_wrong_with_it() {
        let error = |text| parse_time(text, "--start").unwrap_err().to_string();
        assert!(
            error("1969-12-31T23:30:00Z").contains("is before 1970-01-01T00:00:00Z"),
            "{}",
            error("1969-12-31T23:30:00Z")
        );
        assert!(error("-10m").contains("takes no sign"), "{}", error("-10m"));
        // Further back than the epoch: refused by name. The second is further back than a
        // SystemTime reaches, where `now - ago` panicked.
        for ago in ["100000000y", "400000000000y"] {
            assert!(error(ago).contains("before 1970-01-01"), "{}", error(ago));
        }
        let hour_ago = parse_time("1h", "--start").unwrap();
        let now = prost_types::Timestamp::from(SystemTime::now());
        assert!(hour_ago.seconds < now.seconds);
    }
}
