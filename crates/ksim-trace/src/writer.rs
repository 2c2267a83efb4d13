//! Writing a trace file record by record.

use std::fmt;
use std::io::Write;

use zstd::stream::write::Encoder;

use crate::framing::{
    EVENT_FIELD, HEADER_FIELD, LIFECYCLE_FIELD, NODE_FIELD, SAMPLE_FIELD, TRAILER_FIELD,
    USAGE_FIELD, encode_record,
};
use crate::validate::{Totals, check_header};
use crate::{COMPRESSION_LEVEL, FORMAT_VERSION, TraceError, pb};

/// Writes a trace file: the header on creation, then events and lifecycles, then the trailer
/// on [`TraceWriter::finish`]. A writer dropped without `finish` leaves a file that readers
/// report as truncated, which is what it is.
pub struct TraceWriter<W: Write> {
    encoder: Encoder<'static, W>,
    totals: Totals,
    /// Reused for every record, so writing allocates only when a record outgrows it.
    buf: Vec<u8>,
}

impl<W: Write> TraceWriter<W> {
    /// Starts a file on `out` with `header`, whose `format_version` is replaced by
    /// [`FORMAT_VERSION`]: that is the version this writer produces, whatever the caller set.
    /// Refuses a header time outside 1970 to the end of 9999, as every record's.
    pub fn new(out: W, header: &pb::TraceHeader) -> Result<Self, TraceError> {
        check_header(header).map_err(|problem| TraceError::invalid(problem.to_string()))?;
        let mut encoder = Encoder::new(out, COMPRESSION_LEVEL)?;
        // A checksum lets readers catch damage that still decompresses.
        encoder.include_checksum(true)?;
        let mut writer = Self {
            encoder,
            totals: Totals::default(),
            buf: Vec::new(),
        };
        let header = pb::TraceHeader {
            format_version: FORMAT_VERSION,
            ..header.clone()
        };
        writer.write_record(HEADER_FIELD, &header)?;
        Ok(writer)
    }

    /// Writes events older than the event before them instead of refusing them: for tests
    /// and tools that need such a file. Readers refuse it unless they are
    /// [`crate::TraceReader::unordered`] too.
    pub fn unordered(mut self) -> Self {
        self.totals.unordered = true;
        self
    }

    /// Appends an event. Refuses (writing nothing) an event older than the previous one or
    /// outside 1970 to the end of 9999, an object without kind or name, and a record over
    /// [`crate::MAX_RECORD_BYTES`].
    pub fn write_event(&mut self, event: &pb::TraceEvent) -> Result<(), TraceError> {
        self.totals
            .check_event(event)
            .map_err(|problem| TraceError::invalid(problem.to_string()))?;
        self.write_record(EVENT_FIELD, event)?;
        self.totals.count_event(event);
        Ok(())
    }

    /// Appends a pod lifecycle. Refuses one without owner kind or name or with an unknown
    /// outcome.
    pub fn write_lifecycle(&mut self, lifecycle: &pb::PodLifecycle) -> Result<(), TraceError> {
        self.totals
            .check_lifecycle(lifecycle)
            .map_err(|problem| TraceError::invalid(problem.to_string()))?;
        self.write_record(LIFECYCLE_FIELD, lifecycle)?;
        self.totals.count_lifecycle();
        Ok(())
    }

    /// Appends a cluster sample. Refuses one older than the previous sample.
    pub fn write_sample(&mut self, sample: &pb::ClusterSample) -> Result<(), TraceError> {
        self.totals
            .check_sample(sample)
            .map_err(|problem| TraceError::invalid(problem.to_string()))?;
        self.write_record(SAMPLE_FIELD, sample)?;
        self.totals.count_sample(sample);
        Ok(())
    }

    /// Appends a recorded node. Refuses one without a name.
    pub fn write_node(&mut self, node: &pb::RecordedNode) -> Result<(), TraceError> {
        self.totals
            .check_node(node)
            .map_err(|problem| TraceError::invalid(problem.to_string()))?;
        self.write_record(NODE_FIELD, node)?;
        self.totals.count_node();
        Ok(())
    }

    /// Appends what a pod used. Refuses one without a pod name, with an unnamed container or
    /// a negative amount.
    pub fn write_usage(&mut self, usage: &pb::UsageSample) -> Result<(), TraceError> {
        self.totals
            .check_usage(usage)
            .map_err(|problem| TraceError::invalid(problem.to_string()))?;
        self.write_record(USAGE_FIELD, usage)?;
        self.totals.count_usage();
        Ok(())
    }

    /// Writes any record a reader yields, in the same way.
    pub fn write(&mut self, record: &crate::Record) -> Result<(), TraceError> {
        match record {
            crate::Record::Event(event) => self.write_event(event),
            crate::Record::Lifecycle(lifecycle) => self.write_lifecycle(lifecycle),
            crate::Record::Sample(sample) => self.write_sample(sample),
            crate::Record::Node(node) => self.write_node(node),
            crate::Record::Usage(usage) => self.write_usage(usage),
        }
    }

    /// The totals the trailer would carry if the file were finished now.
    pub fn totals(&self) -> pb::TraceTrailer {
        self.totals.trailer()
    }

    /// Writes the trailer, ends the zstd frame and flushes; returns the output and the trailer.
    pub fn finish(mut self) -> Result<(W, pb::TraceTrailer), TraceError> {
        let trailer = self.totals.trailer();
        self.write_record(TRAILER_FIELD, &trailer)?;
        let mut out = self.encoder.finish()?;
        out.flush()?;
        Ok((out, trailer))
    }

    fn write_record<M: prost::Message>(
        &mut self,
        field: u8,
        message: &M,
    ) -> Result<(), TraceError> {
        self.buf.clear();
        encode_record(field, message, &mut self.buf)?;
        self.encoder.write_all(&self.buf)?;
        Ok(())
    }
}

impl<W: Write> fmt::Debug for TraceWriter<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceWriter")
            .field("totals", &self.totals)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::io::{self, Write};

    use super::TraceWriter;
    use crate::test_support::{decompress, object, pod_gvk, sample_event, sample_header};
    use crate::{FORMAT_VERSION, MAX_RECORD_BYTES, TraceError, TraceReader, pb};

    #[test]
    fn writes_the_current_format_version_whatever_the_header_says() {
        let header = pb::TraceHeader {
            format_version: 99,
            ..sample_header()
        };
        let (file, trailer) = TraceWriter::new(Vec::new(), &header)
            .unwrap()
            .finish()
            .unwrap();
        assert_eq!(trailer, pb::TraceTrailer::default());
        let reader = TraceReader::new(file.as_slice()).unwrap();
        assert_eq!(reader.header().format_version, FORMAT_VERSION);
        assert_eq!(reader.header().origin, "unit test");
    }

    #[test]
    fn a_sample_is_the_same_bytes_whatever_order_its_maps_were_filled_in() {
        let groups = ["m5", "c5", "r6", "g4dn", "t3", "x2", "i4i", "p5"];
        let file = |order: &mut dyn Iterator<Item = &&str>| {
            let mut sample = pb::ClusterSample {
                timestamp_ms: 1_000,
                ..Default::default()
            };
            for group in order {
                sample
                    .ready_nodes
                    .insert((*group).to_owned(), group.len() as u32);
                let counts = pb::RecordedPodCounts {
                    pending: 1,
                    running: group.len() as u32,
                };
                sample.pods.insert(format!("ns-{group}"), counts);
            }
            let mut writer = TraceWriter::new(Vec::new(), &sample_header()).unwrap();
            writer.write_sample(&sample).unwrap();
            writer.finish().unwrap().0
        };
        // An export written twice must be the same bytes; a hash map would encode its entries
        // in an order that changes from one map (and one process) to the next.
        assert_eq!(
            decompress(&file(&mut groups.iter())),
            decompress(&file(&mut groups.iter().rev()))
        );
    }

    #[test]
    fn refuses_an_older_event_and_keeps_going() {
        let mut writer = TraceWriter::new(Vec::new(), &sample_header()).unwrap();
        writer.write_event(&sample_event(2_000, "a")).unwrap();
        let error = writer.write_event(&sample_event(1_999, "b")).unwrap_err();
        assert!(matches!(error, TraceError::InvalidRecord { .. }));
        assert!(error.to_string().contains("older"), "{error}");
        writer.write_event(&sample_event(2_000, "c")).unwrap();
        let (file, trailer) = writer.finish().unwrap();
        assert_eq!(trailer.event_count, 2);
        let trace = crate::read_trace(&file).unwrap();
        let names: Vec<_> = trace.events.iter().map(|e| &e.applied[0].name).collect();
        assert_eq!(names, ["a", "c"]);
    }

    #[test]
    fn an_unordered_writer_and_reader_keep_events_as_given() {
        let mut writer = TraceWriter::new(Vec::new(), &sample_header())
            .unwrap()
            .unordered();
        writer.write_event(&sample_event(2_000, "a")).unwrap();
        writer.write_event(&sample_event(1_000, "b")).unwrap();
        let (file, trailer) = writer.finish().unwrap();
        assert_eq!(trailer.event_count, 2);
        // The ordinary reader refuses the file, an unordered one reads it as written.
        assert!(crate::read_trace(&file).is_err());
        let mut reader = TraceReader::new(file.as_slice()).unwrap().unordered();
        let mut times = Vec::new();
        while let Some(record) = reader.next_record().unwrap() {
            if let crate::Record::Event(event) = record {
                times.push(event.timestamp_ms);
            }
        }
        assert_eq!(times, [2_000, 1_000]);
    }

    #[test]
    fn refuses_times_a_reader_would_refuse() {
        let mut writer = TraceWriter::new(Vec::new(), &sample_header()).unwrap();
        let error = writer
            .write_event(&sample_event(-1, "web"))
            .unwrap_err()
            .to_string();
        assert!(error.contains("event 0 has timestamp_ms -1 ms"), "{error}");
        writer.write_event(&sample_event(0, "web")).unwrap();
        let header = pb::TraceHeader {
            start_time: Some(crate::time::timestamp(i64::MAX)),
            ..sample_header()
        };
        let error = TraceWriter::new(Vec::new(), &header)
            .unwrap_err()
            .to_string();
        assert!(error.contains("the header has start_time"), "{error}");
    }

    #[test]
    fn refuses_a_record_over_the_limit() {
        let mut writer = TraceWriter::new(Vec::new(), &sample_header()).unwrap();
        let mut huge = object(pod_gvk(), "default", "big");
        huge.object_json = vec![b' '; MAX_RECORD_BYTES];
        let event = pb::TraceEvent {
            timestamp_ms: 1,
            applied: vec![huge],
            deleted: Vec::new(),
        };
        let error = writer.write_event(&event).unwrap_err();
        assert!(error.to_string().contains("over the limit"), "{error}");
        assert_eq!(writer.totals().event_count, 0);
    }

    #[test]
    fn a_writer_never_finished_leaves_no_trailer() {
        let mut out = Vec::new();
        {
            let mut writer = TraceWriter::new(&mut out, &sample_header()).unwrap();
            writer.write_event(&sample_event(1, "a")).unwrap();
        }
        // zstd may not have written anything yet: then the file is empty, not a trace.
        assert!(matches!(
            crate::read_trace(&out),
            Err(TraceError::Truncated { .. } | TraceError::NotATrace { .. })
        ));
    }

    #[test]
    fn the_file_is_one_checksummed_zstd_frame() {
        let (file, _) = TraceWriter::new(Vec::new(), &sample_header())
            .unwrap()
            .finish()
            .unwrap();
        assert_eq!(file[..4], [0x28, 0xb5, 0x2f, 0xfd]);
        // Frame header descriptor: bit 2 is the content checksum flag.
        assert_ne!(file[4] & 0b100, 0);
        assert!(!decompress(&file).is_empty());
    }

    #[derive(Debug)]
    struct Broken;

    impl Write for Broken {
        fn write(&mut self, _buf: &[u8]) -> io::Result<usize> {
            Err(io::Error::new(io::ErrorKind::StorageFull, "disk full"))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn output_errors_are_io_errors() {
        let mut writer = TraceWriter::new(Broken, &sample_header()).unwrap();
        // zstd buffers, so the error surfaces at the latest when the frame ends.
        let error = match writer.write_event(&sample_event(1, "a")) {
            Err(error) => error,
            Ok(()) => writer.finish().unwrap_err(),
        };
        match error {
            TraceError::Io(inner) => assert_eq!(inner.kind(), io::ErrorKind::StorageFull),
            other => panic!("expected Io, got {other}"),
        }
    }
}
