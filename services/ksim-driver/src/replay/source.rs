//! Loading the trace a simulation replays: uploaded bytes (ksim or SimKube format) or a window
//! exported from the tracer store. Checked whole before anything is created in the cluster.

use ksim_proto::ksim::trace::v1::ExportRequest;
use ksim_trace::{Trace, pb::TraceFormat};

use crate::{
    domain::spec::TraceSource,
    mesh::{Mesh, MeshError},
};

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("spec.trace_file: {0}")]
    Malformed(String),
    #[error("the tracer store's export is unreadable: {0}")]
    BadExport(ksim_trace::TraceError),
    #[error("exporting the trace from the tracer store: {0}")]
    Export(#[from] MeshError),
    /// A usage sample no replay can give a pod (see `ksim trace validate`'s KS007).
    #[error(
        "the trace's usage cannot be replayed: {0}; `ksim trace validate --fix` removes such samples"
    )]
    BadUsage(String),
}

pub async fn load(source: &TraceSource, mesh: &Mesh) -> Result<Trace, LoadError> {
    let trace = load_unchecked(source, mesh).await?;
    check_usage(&trace)?;
    Ok(trace)
}

/// Usage samples out of order for their pod, outside the window or beyond any machine are
/// refused, as `ksim trace validate` finds them (KS007); the reader has refused negative ones.
fn check_usage(trace: &Trace) -> Result<(), LoadError> {
    let disabled = ksim_lint::RULES
        .iter()
        .map(|rule| rule.id)
        .filter(|id| *id != ksim_lint::rules::BAD_USAGE.id)
        .collect();
    let options = ksim_lint::Options {
        disabled,
        cluster_kinds: None,
    };
    let mut linter = ksim_lint::Linter::new(&trace.header, options);
    let mut first = None;
    for usage in &trace.usage {
        let record = ksim_trace::Record::Usage(usage.clone());
        let mut sink = |finding: ksim_lint::Finding| {
            first.get_or_insert(finding);
        };
        // The usage rule never fails; only event rules can.
        if linter.record(&record, &mut sink).is_err() || first.is_some() {
            break;
        }
    }
    match first {
        Some(finding) => Err(LoadError::BadUsage(finding.to_string())),
        None => Ok(()),
    }
}

async fn load_unchecked(source: &TraceSource, mesh: &Mesh) -> Result<Trace, LoadError> {
    match source {
        TraceSource::Uploaded(bytes) => read_uploaded(bytes),
        TraceSource::Stored(stored) => {
            let file = mesh
                .export(ExportRequest {
                    start_time: stored.start_time,
                    end_time: stored.end_time,
                    filter: stored.filter.clone(),
                    chunk_size_bytes: 0,
                    trace_id: stored.trace_id.clone(),
                })
                .await?;
            ksim_trace::read_trace(&file).map_err(LoadError::BadExport)
        }
    }
}

fn read_uploaded(bytes: &[u8]) -> Result<Trace, LoadError> {
    match ksim_trace::detect_format(bytes) {
        Some(TraceFormat::Ksim) => {
            ksim_trace::read_trace(bytes).map_err(|e| LoadError::Malformed(e.to_string()))
        }
        Some(TraceFormat::SimkubeV2) => {
            let (converted, _) = ksim_trace::simkube::convert(bytes, Vec::new(), "ksim-driver")
                .map_err(|e| LoadError::Malformed(format!("SimKube trace: {e}")))?;
            ksim_trace::read_trace(&converted).map_err(|e| LoadError::Malformed(e.to_string()))
        }
        _ => Err(LoadError::Malformed(
            "neither a ksim trace (zstd) nor a SimKube trace (MessagePack)".to_owned(),
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn usage_out_of_order_or_beyond_any_machine_is_refused_naming_the_rule_and_pod() {
        use ksim_trace::pb;
        let sample = |at: i64, cores: i64| pb::UsageSample {
            timestamp_ms: at,
            window_ms: 15_000,
            namespace: "shop".to_owned(),
            pod: "web-1".to_owned(),
            containers: vec![pb::ContainerUsage {
                name: "app".to_owned(),
                cpu_nanocores: cores * 1_000_000_000,
                memory_bytes: 1 << 20,
            }],
        };
        let trace = |usage: Vec<pb::UsageSample>| Trace {
            header: pb::TraceHeader::default(),
            events: Vec::new(),
            lifecycles: Vec::new(),
            samples: Vec::new(),
            nodes: Vec::new(),
            usage,
            trailer: pb::TraceTrailer::default(),
        };
        assert!(check_usage(&trace(vec![sample(1_000, 1), sample(2_000, 2)])).is_ok());
        for (usage, mentions) in [
            (vec![sample(2_000, 1), sample(1_000, 1)], "previous sample"),
            (vec![sample(1_000, 5_000)], "5000 cores"),
        ] {
            let error = check_usage(&trace(usage)).unwrap_err().to_string();
            assert!(
                error.contains("KS007") && error.contains("shop/web-1") && error.contains(mentions),
                "{error}"
            );
        }
    }

    #[test]
    fn bytes_of_no_known_format_are_refused_naming_the_field() {
        let error = read_uploaded(b"hello, not a trace").unwrap_err();
        assert!(error.to_string().starts_with("spec.trace_file:"), "{error}");
    }

    #[test]
    fn a_truncated_ksim_trace_is_refused() {
        let mut file = Vec::new();
        let writer = ksim_trace::TraceWriter::new(&mut file, &Default::default()).unwrap();
        writer.finish().unwrap();
        let error = read_uploaded(&file[..file.len() / 2]).unwrap_err();
        assert!(matches!(error, LoadError::Malformed(_)), "{error}");
    }
}
