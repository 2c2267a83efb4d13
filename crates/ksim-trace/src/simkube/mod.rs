//! Converting a SimKube trace (`.sktrace`, format version 2: one MessagePack map) into a ksim
//! trace file.
//!
//! Seconds become milliseconds; a deleted object that carries only its name gets its kind from
//! SimKube's index or from the object applied earlier under that name; pod lifecycles keep
//! their position in SimKube's lists as their launch index, and `Empty` entries are skipped.
//! A `v1 Secret` loses its data (`data`, `stringData`, the last applied configuration), as the
//! tracer's recording does: a trace never holds Secret data.

mod config;
mod lifecycles;
mod model;
mod objects;

use std::io::Write;
use std::time::SystemTime;

use crate::{TraceError, TraceWriter, pb};

/// The only SimKube format version this converter reads.
pub const SIMKUBE_VERSION: i64 = 2;

/// The largest SimKube trace a tool reads. A SimKube trace is one MessagePack document,
/// converted in memory: its objects are held as JSON text until the events are sorted, about
/// three times the file's size at the peak (a 253 MiB trace peaks at 706 MiB,
/// `docs/benchmarks.md`), so this keeps a conversion within about 1.5 GiB.
pub const MAX_INPUT_BYTES: usize = 512 << 20;

/// The header's `origin` of a converted trace.
pub const ORIGIN: &str = "simkube trace v2";

/// What a conversion wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversion {
    pub events: u64,
    /// Applied and deleted objects over all events.
    pub objects: u64,
    pub lifecycles: u64,
    /// SimKube's `Empty` lifecycle entries, which carry no times and are left out.
    pub skipped_lifecycles: u64,
    /// Events older than an event before them in the SimKube file, put in order by the
    /// conversion (`ksim trace validate` reports them).
    pub reordered_events: u64,
}

/// Converts the SimKube trace `input` into a ksim trace file written to `out`, with
/// `created_by` in its header. Events are written in timestamp order (SimKube's order among
/// equal timestamps is kept), then the lifecycles.
pub fn convert<W: Write>(
    input: &[u8],
    out: W,
    created_by: &str,
) -> Result<(W, Conversion), TraceError> {
    let found = model::version(input)?;
    if found != SIMKUBE_VERSION {
        return Err(TraceError::SimkubeVersion { found });
    }
    let model::ExportedTrace {
        config,
        events,
        index,
        pod_lifecycles,
    } = model::decode(input)?;

    let mut events: Vec<_> = events.into_iter().enumerate().collect();
    // Before the header is made of the first and last: its times must be in range too.
    for (position, event) in &events {
        objects::event_ms(*position, event.ts)?;
    }
    let mut latest = i64::MIN;
    let mut reordered_events = 0u64;
    for (_, event) in &events {
        if event.ts < latest {
            reordered_events += 1;
        }
        latest = latest.max(event.ts);
    }
    // Stable, so SimKube's order among equal timestamps survives.
    events.sort_by_key(|(_, event)| event.ts);
    let (lifecycles, skipped_lifecycles) = lifecycles::convert(&pod_lifecycles)?;

    let header = pb::TraceHeader {
        format_version: crate::FORMAT_VERSION,
        tracer_config: Some(config::tracer_config(&config)?),
        start_time: events
            .first()
            .map(|(_, event)| crate::time::timestamp(event.ts.saturating_mul(1000))),
        // The end is exclusive: one millisecond past the last event.
        end_time: events.last().map(|(_, event)| {
            crate::time::timestamp(event.ts.saturating_mul(1000).saturating_add(1))
        }),
        created_by: created_by.to_owned(),
        create_time: Some(SystemTime::now().into()),
        origin: ORIGIN.to_owned(),
        transforms: Vec::new(),
    };

    let mut writer = TraceWriter::new(out, &header)?;
    let mut converter = objects::EventConverter::new(&index);
    let mut objects = 0u64;
    let event_count = events.len() as u64;
    for (position, event) in events {
        let event = converter.convert(position, event)?;
        objects += (event.applied.len() + event.deleted.len()) as u64;
        writer
            .write_event(&event)
            .map_err(|error| in_context(error, || format!("event {position}")))?;
    }
    for (position, lifecycle) in lifecycles.iter().enumerate() {
        writer
            .write_lifecycle(lifecycle)
            .map_err(|error| in_context(error, || format!("lifecycle {position}")))?;
    }
    let (out, _) = writer.finish()?;
    Ok((
        out,
        Conversion {
            events: event_count,
            objects,
            lifecycles: lifecycles.len() as u64,
            skipped_lifecycles,
            reordered_events,
        },
    ))
}

/// A record the writer refuses is a problem of the input: say which part of it.
fn in_context(error: TraceError, what: impl FnOnce() -> String) -> TraceError {
    match error {
        TraceError::InvalidRecord { reason } => {
            TraceError::simkube(format!("{} cannot be written: {reason}", what()))
        }
        other => other,
    }
}
