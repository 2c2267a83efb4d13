//! A whole trace, file to file: read a record, transform it, write it.

use std::io::{Read, Write};

use ksim_trace::{Record, TraceReader, TraceWriter, pb};

use crate::{Rules, Stats, TransformError, Transformer};

/// What a transform wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub stats: Stats,
    pub trailer: pb::TraceTrailer,
}

/// Reads the ksim trace `input`, applies `rules` and writes the result to `output`, one record
/// at a time. The output header is the input's with the rules recorded and `created_by`; its
/// `create_time` is the input's, so the same input and rules give the same bytes.
pub fn transform_trace<R: Read, W: Write>(
    rules: &Rules,
    input: R,
    output: W,
    created_by: &str,
) -> Result<(W, Summary), TransformError> {
    let mut reader = TraceReader::new(input).map_err(TransformError::Read)?;
    let mut transformer = Transformer::new(rules, reader.header())?;
    let header = pb::TraceHeader {
        created_by: created_by.to_owned(),
        ..transformer.header().clone()
    };
    let mut writer = TraceWriter::new(output, &header).map_err(TransformError::Write)?;
    while let Some(record) = reader.next_record().map_err(TransformError::Read)? {
        match record {
            Record::Event(event) => {
                if let Some(event) = transformer.event(event)? {
                    writer.write_event(&event).map_err(TransformError::Write)?;
                }
            }
            Record::Lifecycle(lifecycle) => {
                if let Some(lifecycle) = transformer.lifecycle(lifecycle)? {
                    writer
                        .write_lifecycle(&lifecycle)
                        .map_err(TransformError::Write)?;
                }
            }
            Record::Sample(sample) => {
                if let Some(sample) = transformer.sample(sample)? {
                    writer
                        .write_sample(&sample)
                        .map_err(TransformError::Write)?;
                }
            }
            Record::Node(node) => {
                if let Some(node) = transformer.node(node)? {
                    writer.write_node(&node).map_err(TransformError::Write)?;
                }
            }
            Record::Usage(usage) => {
                if let Some(usage) = transformer.usage(usage)? {
                    writer.write_usage(&usage).map_err(TransformError::Write)?;
                }
            }
        }
    }
    let (output, trailer) = writer.finish().map_err(TransformError::Write)?;
    Ok((
        output,
        Summary {
            stats: transformer.stats().clone(),
            trailer,
        },
    ))
}
