//! `ksim trace generate`: a cluster's day made from a seed (`ksim_synth::day`), written as a
//! trace to replay before a recording exists.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use clap::Args;
use ksim_synth::day::{self, DayWorkload};

#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// The ksim trace file to write (written whole or not at all).
    output: PathBuf,
    /// The nodes the workload fills at its daily peak.
    #[arg(long, default_value_t = 1000)]
    nodes: u32,
    /// CPU one node can allocate, as a Kubernetes quantity (4, 3920m).
    #[arg(long, default_value = "4", value_parser = parse_cpu_millis)]
    node_cpu: u64,
    /// Memory one node can allocate, as a Kubernetes quantity (16Gi, 15000Mi).
    #[arg(long, default_value = "16Gi", value_parser = parse_memory_mib)]
    node_memory: u64,
    /// How long the recording is (24h, 90m).
    #[arg(long, default_value = "24h", value_parser = humantime::parse_duration)]
    length: Duration,
    /// When the recording starts (RFC 3339); the workload follows its UTC time of day.
    #[arg(long, default_value = "2026-01-05T00:00:00Z", value_parser = parse_start_ms)]
    start: i64,
    /// The same seed and flags write the same trace.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

pub fn run(args: GenerateArgs) -> anyhow::Result<()> {
    let label = args.output.display().to_string();
    crate::files::check_output(&label, &args.output)?;
    let length_ms = i64::try_from(args.length.as_millis()).unwrap_or(i64::MAX);
    // Checked before anything is written: a trace's times end with 9999.
    if args.start > day::MAX_END_MS.saturating_sub(length_ms) {
        bail!(
            "--start {}: a recording of --length {} from it ends after {}, a day before the end \
             of 9999, the latest a generated trace may end",
            super::rfc3339_ms(args.start),
            humantime::format_duration(args.length),
            super::rfc3339_ms(day::MAX_END_MS)
        );
    }
    let workload = DayWorkload {
        nodes: args.nodes,
        node_cpu_millis: args.node_cpu,
        node_memory_mib: args.node_memory,
        length_ms,
        start_ms: args.start,
        seed: args.seed,
    };
    let output = &args.output;
    let file = crate::files::file_beside(output)?;
    let (file, summary) = day::write(&workload, file)?;
    crate::files::persist(file, &label, output)?;
    eprintln!(
        "wrote {}: {} services (Deployments), {} Jobs ({} pods), {} CronJobs ({} runs), {} events, \
         {} pod lifecycles",
        output.display(),
        summary.services,
        summary.jobs,
        summary.job_pods,
        summary.cronjobs,
        summary.cron_runs,
        summary.events,
        summary.lifecycles
    );
    let capacity = u64::from(workload.nodes) * workload.node_cpu_millis;
    let describe = |bucket: day::Bucket| {
        let offset = Duration::from_millis(u64::try_from(bucket.offset_ms).unwrap_or(0));
        format!(
            "{} cores at +{} ({:.0}% of {} nodes)",
            bucket.cpu_millis() / 1000,
            humantime::format_duration(offset),
            100.0 * bucket.cpu_millis() as f64 / capacity as f64,
            workload.nodes
        )
    };
    let low = summary
        .profile
        .iter()
        .copied()
        .min_by_key(day::Bucket::cpu_millis);
    if let (Some(peak), Some(low)) = (summary.peak(), low) {
        eprintln!(
            "requested CPU: highest {}, lowest {}",
            describe(peak),
            describe(low)
        );
    }
    Ok(())
}

// Sizes past the generator's largest node are refused here, so clap names the flag.
fn parse_cpu_millis(text: &str) -> Result<u64, String> {
    match ksim_nodes::skeleton::quantity_value(text) {
        Some(cores) if cores > 0.0 => {
            // `as` saturates: 1e18 cores is u64::MAX, refused below.
            let millis = (cores * 1000.0).round() as u64;
            if millis > day::MAX_NODE_CPU_MILLIS {
                return Err(format!(
                    "{text} is more CPU than the largest node generated (10000 cores)"
                ));
            }
            Ok(millis)
        }
        _ => Err(format!(
            "{text:?} is not a positive CPU quantity (4, 3920m)"
        )),
    }
}

fn parse_memory_mib(text: &str) -> Result<u64, String> {
    match ksim_nodes::skeleton::quantity_value(text) {
        Some(bytes) if bytes > 0.0 => {
            let mib = (bytes / f64::from(1u32 << 20)).round() as u64;
            if mib > day::MAX_NODE_MEMORY_MIB {
                return Err(format!(
                    "{text} is more memory than the largest node generated (64Ti)"
                ));
            }
            Ok(mib)
        }
        _ => Err(format!(
            "{text:?} is not a positive memory quantity (16Gi, 15000Mi)"
        )),
    }
}

fn parse_start_ms(text: &str) -> anyhow::Result<i64> {
    match super::parse_rfc3339_ms(text).map_err(anyhow::Error::msg)? {
        Some(ms) => Ok(ms),
        None => bail!("{text:?} is not an RFC 3339 time (2026-01-05T00:00:00Z)"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn node_sizes_are_quantities() {
        assert_eq!(parse_cpu_millis("4").unwrap(), 4000);
        assert_eq!(parse_cpu_millis("3920m").unwrap(), 3920);
        assert_eq!(parse_memory_mib("16Gi").unwrap(), 16_384);
        assert_eq!(parse_memory_mib("15000Mi").unwrap(), 15_000);
        assert!(parse_cpu_millis("four").unwrap_err().contains("\"four\""));
        assert!(parse_memory_mib("0").is_err());
        assert_eq!(
            parse_start_ms("2026-01-05T00:00:00Z").unwrap(),
            day::MONDAY_MS
        );
        assert!(parse_start_ms("monday").is_err());
        // RFC 3339, before the range: said so, not "not an RFC 3339 time".
        assert_eq!(
            parse_start_ms("1969-12-31T23:30:00Z")
                .unwrap_err()
                .to_string(),
            "1969-12-31T23:30:00Z is before 1970-01-01T00:00:00Z; a trace holds times from 1970 to the end of 9999"
        );
        // Sizes whose products overflowed the generator are refused by the parsers.
        assert!(parse_cpu_millis("10000").is_ok());
        assert!(
            parse_cpu_millis("1e18")
                .unwrap_err()
                .contains("10000 cores")
        );
        assert!(parse_memory_mib("64Ti").is_ok());
        assert!(parse_memory_mib("1E").unwrap_err().contains("64Ti"));
    }
}
