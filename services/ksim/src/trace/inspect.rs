//! `ksim trace inspect`: a trace file's summary (format, origin, time range, totals, kinds).

use std::{fmt::Write as _, io::Write, path::Path};

use anyhow::Context;
use ksim_proto::ksim::trace::v1 as pb;
use ksim_trace::inspect::Inspection;

pub fn run(path: &Path) -> anyhow::Result<()> {
    let inspection = inspect_file(path)?;
    std::io::stdout()
        .write_all(render(&inspection).as_bytes())
        .context("writing to stdout")?;
    Ok(())
}

/// The summary of the trace file at `path`, opened once (it may be a FIFO).
pub(super) fn inspect_file(path: &Path) -> anyhow::Result<Inspection> {
    let opened = super::input::Opened::open(path)?;
    if opened.is_simkube() {
        return inspect_bytes(&opened.read_whole()?, &path.display().to_string());
    }
    ksim_trace::inspect::inspect(opened.into_reader())
        .with_context(|| format!("{} is not a valid trace", path.display()))
}

/// The summary of a trace held in memory, of either format (`label` names it in errors).
pub fn inspect_bytes(bytes: &[u8], label: &str) -> anyhow::Result<Inspection> {
    match ksim_trace::detect_format(bytes) {
        Some(pb::TraceFormat::SimkubeV2) => {
            let (converted, _) = ksim_trace::simkube::convert(bytes, Vec::new(), "ksim inspect")
                .with_context(|| format!("{label} is not a valid SimKube trace"))?;
            ksim_trace::inspect::inspect(converted.as_slice())
        }
        _ => ksim_trace::inspect::inspect(bytes),
    }
    .with_context(|| format!("{label} is not a valid trace"))
}

/// Whether the trace carries the recorded cluster's state, which reports compare a replay with.
fn cluster_state(inspection: &Inspection) -> String {
    let recorded = inspection
        .header
        .tracer_config
        .as_ref()
        .is_some_and(|config| config.cluster_recorded);
    if !recorded {
        let why = if inspection.header.origin == ksim_trace::simkube::ORIGIN {
            "SimKube traces carry none"
        } else {
            "recorded without Nodes in trackedKinds"
        };
        return format!("not recorded ({why}): a report cannot compare a replay with it");
    }
    format!(
        "{} samples, {} node records; at most {} Ready nodes, {} pods pending, {} running",
        inspection.samples,
        inspection.nodes,
        inspection.peak_ready_nodes,
        inspection.peak_pending_pods,
        inspection.peak_running_pods
    )
}

/// Whether the trace holds what the recorded pods used, and if not, why not.
fn usage(inspection: &Inspection) -> String {
    let config = inspection.header.tracer_config.as_ref();
    let recording = config.map_or(pb::UsageRecording::Unspecified, |c| c.usage_recording());
    let interval_ms = config.map_or(0, |c| c.usage_interval_ms);
    if inspection.usage_samples > 0 {
        let every = if interval_ms > 0 {
            format!(
                ", read every {}",
                humantime::format_duration(ms(interval_ms))
            )
        } else {
            String::new()
        };
        return format!(
            "{} samples of {} pods{every}",
            inspection.usage_samples, inspection.usage_pods
        );
    }
    match recording {
        pb::UsageRecording::NoMetricsApi => {
            "none: the recorded cluster served no metrics API (metrics.k8s.io)".to_owned()
        }
        pb::UsageRecording::Recorded => {
            "none: the metrics API reported no pod while it was read".to_owned()
        }
        pb::UsageRecording::Unspecified
            if inspection.header.origin == ksim_trace::simkube::ORIGIN =>
        {
            "none (SimKube traces carry none)".to_owned()
        }
        pb::UsageRecording::Unspecified => "not recorded".to_owned(),
    }
}

/// A non-negative count of milliseconds as a duration.
fn ms(value: i64) -> std::time::Duration {
    std::time::Duration::from_millis(u64::try_from(value).unwrap_or(0))
}

fn render(inspection: &Inspection) -> String {
    let mut out = String::new();
    let header = &inspection.header;
    let time = |ms: Option<i64>| ms.map_or_else(|| "-".to_owned(), super::rfc3339_ms);
    let _ = writeln!(out, "format version  {}", header.format_version);
    let _ = writeln!(out, "created by      {}", header.created_by);
    if !header.origin.is_empty() {
        let _ = writeln!(out, "origin          {}", header.origin);
    }
    for transform in &header.transforms {
        let _ = writeln!(out, "transformed     {transform}");
    }
    let _ = writeln!(
        out,
        "time range      {} .. {}",
        time(inspection.first_event_ms),
        time(inspection.last_event_ms)
    );
    // A replay lasts to the header's end, which may be later (`extendEnd`) than any record.
    if let Some(end) = header.end_time.as_ref().map(ksim_trace::time::millis)
        && inspection.last_event_ms.is_none_or(|last| end > last)
    {
        let _ = writeln!(out, "replay ends     {}", time(Some(end)));
    }
    let _ = writeln!(
        out,
        "totals          {} events, {} objects, {} applies, {} deletes, {} pod lifecycles",
        inspection.events,
        inspection.objects,
        inspection.applies,
        inspection.deletes,
        inspection.lifecycles
    );
    let _ = writeln!(out, "cluster state   {}", cluster_state(inspection));
    let _ = writeln!(out, "usage           {}", usage(inspection));
    let _ = writeln!(
        out,
        "size            {} bytes ({} uncompressed)",
        inspection.compressed_bytes, inspection.uncompressed_bytes
    );
    let width = inspection
        .kinds
        .keys()
        .map(String::len)
        .max()
        .unwrap_or(4)
        .max(4);
    let _ = writeln!(
        out,
        "\n{:<width$}  {:>8}  {:>8}  {:>8}  {:>10}",
        "KIND", "OBJECTS", "APPLIES", "DELETES", "LIFECYCLES"
    );
    for (kind, counts) in &inspection.kinds {
        let _ = writeln!(
            out,
            "{kind:<width$}  {:>8}  {:>8}  {:>8}  {:>10}",
            counts.objects, counts.applies, counts.deletes, counts.lifecycles
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inspection(recording: pb::UsageRecording, samples: u64, pods: u64) -> Inspection {
        let header = pb::TraceHeader {
            tracer_config: Some(pb::TracerConfig {
                usage_recording: recording.into(),
                usage_interval_ms: 15_000,
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut inspection = ksim_trace::inspect::inspect(
            ksim_trace::TraceWriter::new(Vec::new(), &header)
                .and_then(ksim_trace::TraceWriter::finish)
                .map(|(file, _)| file)
                .unwrap()
                .as_slice(),
        )
        .unwrap();
        inspection.usage_samples = samples;
        inspection.usage_pods = pods;
        inspection
    }

    #[test]
    fn inspect_says_whether_usage_was_recorded_and_why_not() {
        let line = |recording, samples, pods| usage(&inspection(recording, samples, pods));
        assert_eq!(
            line(pb::UsageRecording::Recorded, 40, 3),
            "40 samples of 3 pods, read every 15s"
        );
        assert_eq!(
            line(pb::UsageRecording::NoMetricsApi, 0, 0),
            "none: the recorded cluster served no metrics API (metrics.k8s.io)"
        );
        assert_eq!(line(pb::UsageRecording::Unspecified, 0, 0), "not recorded");
        assert!(
            render(&inspection(pb::UsageRecording::Unspecified, 0, 0))
                .contains("\nusage           not recorded\n")
        );
    }

    #[test]
    fn an_end_past_the_last_record_is_shown() {
        let mut extended = inspection(pb::UsageRecording::Unspecified, 0, 0);
        extended.first_event_ms = Some(1_000);
        extended.last_event_ms = Some(60_000);
        extended.header.end_time = Some(ksim_trace::time::timestamp(3_600_000));
        assert!(
            render(&extended).contains("\nreplay ends     1970-01-01T01:00:00.000Z\n"),
            "{}",
            render(&extended)
        );
        // At the last record: nothing to say.
        extended.header.end_time = Some(ksim_trace::time::timestamp(60_000));
        assert!(!render(&extended).contains("replay ends"));
    }
}
