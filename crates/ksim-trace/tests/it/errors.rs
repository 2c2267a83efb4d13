//! Every way a file can be wrong, and what the reader says about it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{self, Read};

use crate::common::{compress, deployment, event, framed, header, record_offsets, valid_records};
use ksim_trace::{MAX_RECORD_BYTES, TraceError, TraceReader, inspect, pb, read_trace};

use pb::trace_record::Record as Oneof;

/// Reads the whole file, as every consumer does.
fn read(file: &[u8]) -> Result<ksim_trace::Trace, TraceError> {
    let trace = read_trace(file);
    // inspect must agree with read_trace on whether a file is valid.
    assert_eq!(
        inspect::inspect(file).is_ok(),
        trace.is_ok(),
        "inspect and read_trace disagree"
    );
    trace
}

fn corrupt_reason(result: Result<ksim_trace::Trace, TraceError>) -> (u64, String) {
    match result {
        Err(TraceError::Corrupt { offset, reason }) => (offset, reason),
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn the_valid_records_are_valid() {
    // The base of the cases below: broken only in the way each case breaks it.
    let trace = read(&compress(&framed(&valid_records()))).unwrap();
    assert_eq!(trace.events.len(), 2);
}

#[test]
fn an_empty_file_is_not_a_trace() {
    let error = read(b"").unwrap_err();
    assert!(matches!(error, TraceError::NotATrace { .. }), "{error:?}");
    assert_eq!(error.to_string(), "not a ksim trace: the file is empty");
}

#[test]
fn json_text_is_not_a_trace_and_the_message_shows_its_bytes() {
    let error = read(br#"{"version": 2, "events": []}"#).unwrap_err();
    assert_eq!(
        error.to_string(),
        "not a ksim trace: the file does not start with a zstd frame \
         (first bytes 7b 22 76 65 72 73 69 6f)"
    );
}

#[test]
fn garbage_bytes_are_not_a_trace() {
    let error = read(&[0xde, 0xad, 0xbe, 0xef, 0x00]).unwrap_err();
    match error {
        TraceError::NotATrace { first_bytes } => {
            assert_eq!(first_bytes, [0xde, 0xad, 0xbe, 0xef, 0])
        }
        other => panic!("expected NotATrace, got {other:?}"),
    }
}

#[test]
fn a_zstd_frame_of_garbage_is_corrupt() {
    let error = read(&compress(b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff")).unwrap_err();
    let (offset, reason) = corrupt_reason(Err(error));
    assert_eq!(offset, 0);
    assert!(reason.contains("varint"), "{reason}");
}

#[test]
fn every_cut_of_a_valid_file_is_reported_as_truncated() {
    let (file, _) = crate::common::valid_file();
    for cut in 1..file.len() {
        match read(&file[..cut]) {
            Err(TraceError::Truncated { .. }) => {}
            other => panic!(
                "cut at {cut} of {}: expected Truncated, got {other:?}",
                file.len()
            ),
        }
    }
}

#[test]
fn cuts_in_the_record_stream_name_the_offset_where_data_ends() {
    let records = valid_records();
    let stream = framed(&records);
    let offsets = record_offsets(&records);
    let trailer_start = offsets[3] as usize;
    // Before the trailer, between events, inside an event, inside the header, inside a varint.
    let inside_event = offsets[1] as usize + 5;
    for cut in [trailer_start, offsets[2] as usize, inside_event, 3, 0] {
        let file = compress(&stream[..cut]);
        match read(&file) {
            Err(error @ TraceError::Truncated { .. }) => {
                let TraceError::Truncated { offset } = error else {
                    unreachable!()
                };
                assert_eq!(offset, cut as u64, "cut at {cut}");
                assert!(
                    error.to_string().contains(&format!("byte {cut} ")),
                    "{error}"
                );
            }
            other => panic!("cut at {cut}: expected Truncated, got {other:?}"),
        }
    }
}

#[test]
fn flipped_bytes_inside_the_zstd_stream_are_caught_or_harmless() {
    let (file, _) = crate::common::valid_file();
    let expected = read(&file).unwrap();
    let mut cases = 0;
    let mut harmless = 0;
    let mut zstd_corruption = 0;
    // Past the magic number, which is checked on its own. A few bits of a zstd frame do not
    // change the content (a larger window, a redundant code table entry): such a flip may go
    // unnoticed, but must then read as exactly the original trace.
    for position in 4..file.len() {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut damaged = file.clone();
            damaged[position] ^= flip;
            cases += 1;
            match read(&damaged) {
                Ok(trace) => {
                    assert_eq!(trace, expected, "flipping {flip:#x} at {position}");
                    harmless += 1;
                }
                Err(TraceError::Corrupt { reason, .. }) => {
                    if reason.contains("zstd") {
                        zstd_corruption += 1;
                    }
                }
                Err(TraceError::Truncated { .. } | TraceError::UnsupportedVersion { .. }) => {}
                Err(other) => panic!("flipping {flip:#x} at {position}: unexpected {other:?}"),
            }
        }
    }
    assert!(
        harmless * 50 < cases,
        "{harmless} of {cases} flips went unnoticed"
    );
    assert!(
        zstd_corruption * 2 > cases,
        "only {zstd_corruption} of {cases} flips were zstd errors"
    );
}

#[test]
fn a_future_version_is_refused_by_number() {
    let mut records = valid_records();
    records[0] = Oneof::Header(pb::TraceHeader {
        format_version: 7,
        ..header()
    });
    let error = read(&compress(&framed(&records))).unwrap_err();
    assert!(
        matches!(
            error,
            TraceError::UnsupportedVersion {
                found: 7,
                supported: 1
            }
        ),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("version 7") && message.contains("version 1"),
        "{message}"
    );
}

#[test]
fn a_header_without_a_version_is_refused() {
    let mut records = valid_records();
    records[0] = Oneof::Header(pb::TraceHeader {
        format_version: 0,
        ..header()
    });
    let error = read(&compress(&framed(&records))).unwrap_err();
    assert!(
        matches!(error, TraceError::UnsupportedVersion { found: 0, .. }),
        "{error:?}"
    );
}

#[test]
fn a_missing_header_is_corrupt() {
    let records = valid_records();
    let (offset, reason) = corrupt_reason(read(&compress(&framed(&records[1..]))));
    assert_eq!(offset, 0);
    assert_eq!(reason, "the first record is an event, not the header");
}

#[test]
fn a_second_header_is_corrupt() {
    let mut records = valid_records();
    records.insert(2, Oneof::Header(header()));
    let offsets = record_offsets(&records);
    let (offset, reason) = corrupt_reason(read(&compress(&framed(&records))));
    assert_eq!(offset, offsets[2]);
    assert_eq!(reason, "a second header");
}

#[test]
fn a_length_over_the_limit_is_corrupt_without_being_allocated() {
    let mut stream = framed(&valid_records()[..1]);
    let event_start = stream.len() as u64;
    prost::encode_length_delimiter(MAX_RECORD_BYTES + 1, &mut stream).unwrap();
    stream.extend_from_slice(b"tiny");
    let error = read(&compress(&stream)).unwrap_err();
    let message = error.to_string();
    let (offset, reason) = corrupt_reason(Err(error));
    assert_eq!(offset, event_start);
    assert!(
        reason.contains(&format!("{}", MAX_RECORD_BYTES + 1)),
        "{reason}"
    );
    assert!(
        message.contains(&format!("at byte {event_start}")),
        "{message}"
    );
}

#[test]
fn events_out_of_order_are_corrupt() {
    let mut records = valid_records();
    records.insert(
        3,
        Oneof::Event(event(999, vec![deployment("default", "late", 1)])),
    );
    if let Some(Oneof::Trailer(trailer)) = records.last_mut() {
        trailer.event_count = 3;
        trailer.object_count = 3;
    }
    let offsets = record_offsets(&records);
    let (offset, reason) = corrupt_reason(read(&compress(&framed(&records))));
    assert_eq!(offset, offsets[3]);
    assert!(reason.contains("event 2 at 999 ms is older"), "{reason}");
}

#[test]
fn a_trailer_whose_totals_differ_is_corrupt() {
    for (field, claimed) in [("events", 3u64), ("lifecycles", 1), ("objects", 1)] {
        let mut records = valid_records();
        if let Some(Oneof::Trailer(trailer)) = records.last_mut() {
            match field {
                "events" => trailer.event_count = claimed,
                "lifecycles" => trailer.lifecycle_count = claimed,
                _ => trailer.object_count = claimed,
            }
        }
        let (_, reason) = corrupt_reason(read(&compress(&framed(&records))));
        assert!(
            reason.contains(&format!("counts {claimed} {field}")),
            "{field}: {reason}"
        );
    }
}

#[test]
fn records_after_the_trailer_are_corrupt() {
    let mut records = valid_records();
    records.push(Oneof::Event(event(5_000, Vec::new())));
    let trailer_end = record_offsets(&records)[4];
    let (offset, reason) = corrupt_reason(read(&compress(&framed(&records))));
    assert_eq!(offset, trailer_end);
    assert_eq!(reason, "data after the trailer");
}

#[test]
fn garbage_after_the_zstd_frame_is_corrupt() {
    let (file, _) = crate::common::valid_file();
    for garbage in [&b"x"[..], b"\n\n\n\n\n\n\n\n", &file[..]] {
        let mut damaged = file.clone();
        damaged.extend_from_slice(garbage);
        let (_, reason) = corrupt_reason(read(&damaged));
        assert!(
            reason.contains("after the end of the zstd frame"),
            "{reason}"
        );
    }
}

#[test]
fn an_empty_record_and_an_undecodable_one_are_corrupt() {
    let mut stream = framed(&valid_records()[..1]);
    stream.push(0);
    let (_, reason) = corrupt_reason(read(&compress(&stream)));
    assert!(reason.contains("empty"), "{reason}");

    let mut stream = framed(&valid_records()[..1]);
    // A record of 2 bytes: field 2 (event), wire type 2, claiming 9 bytes it does not have.
    stream.extend_from_slice(&[2, 0x12, 9]);
    let (_, reason) = corrupt_reason(read(&compress(&stream)));
    assert!(reason.contains("does not decode"), "{reason}");
}

#[test]
fn objects_without_identity_are_corrupt() {
    let mut records = valid_records();
    if let Oneof::Event(event) = &mut records[1] {
        event.applied[0].gvk = None;
    }
    let (_, reason) = corrupt_reason(read(&compress(&framed(&records))));
    assert!(
        reason.contains("applied object 0 of event 0 has no kind"),
        "{reason}"
    );
}

struct FailingAfter {
    data: Vec<u8>,
    position: usize,
    fail_at: usize,
}

impl Read for FailingAfter {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.position >= self.fail_at {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "peer went away",
            ));
        }
        let end = self
            .data
            .len()
            .min(self.fail_at)
            .min(self.position + buf.len());
        let n = end - self.position;
        buf[..n].copy_from_slice(&self.data[self.position..end]);
        self.position = end;
        Ok(n)
    }
}

#[test]
fn errors_of_the_input_are_io_errors_not_corruption() {
    let (file, _) = crate::common::valid_file();
    for fail_at in [0, 2, 10, file.len() - 1] {
        let input = FailingAfter {
            data: file.clone(),
            position: 0,
            fail_at,
        };
        let result = TraceReader::new(input).and_then(|mut reader| {
            while reader.next_record()?.is_some() {}
            Ok(())
        });
        match result {
            Err(TraceError::Io(error)) => {
                assert_eq!(
                    error.kind(),
                    io::ErrorKind::ConnectionReset,
                    "fail at {fail_at}"
                );
                assert_eq!(error.to_string(), "peer went away");
            }
            other => panic!("fail at {fail_at}: expected Io, got {other:?}"),
        }
    }
}

#[test]
fn a_reader_that_failed_keeps_failing() {
    let mut records = valid_records();
    records.insert(2, Oneof::Header(header()));
    let file = compress(&framed(&records));
    let mut reader = TraceReader::new(file.as_slice()).unwrap();
    assert!(reader.next_record().unwrap().is_some());
    assert!(reader.next_record().is_err());
    let again = reader.next_record().unwrap_err();
    assert!(again.to_string().contains("earlier error"), "{again}");
    assert_eq!(reader.trailer(), None);
}

#[test]
fn times_outside_1970_to_9999_are_corrupt_naming_the_record_and_field() {
    // The trailer's counts are wrong for some cases: the time must be caught first.
    let with = |record: Oneof| {
        let mut records = valid_records();
        records.insert(3, record);
        let offsets = record_offsets(&records);
        let (offset, reason) = corrupt_reason(read(&compress(&framed(&records))));
        assert_eq!(offset, offsets[3], "{reason}");
        reason
    };
    for ms in [i64::MAX, i64::MIN, -1, ksim_trace::time::MAX_MS + 1] {
        let reason = with(Oneof::Event(event(ms, Vec::new())));
        assert!(
            reason.contains(&format!("event 2 has timestamp_ms {ms} ms, outside")),
            "{reason}"
        );
        assert!(reason.contains("9999-12-31T23:59:59.999Z"), "{reason}");
    }
    let mut lifecycle = crate::common::lifecycle("web", 0, 0);
    lifecycle.bound_ms = -1;
    let reason = with(Oneof::Lifecycle(lifecycle));
    assert!(
        reason.contains("lifecycle 0 has bound_ms -1 ms"),
        "{reason}"
    );
    let reason = with(Oneof::Node(pb::RecordedNode {
        timestamp_ms: 1_000,
        name: "n1".to_owned(),
        deleted_ms: i64::MAX,
        ..Default::default()
    }));
    assert!(
        reason.contains("recorded node 0 has deleted_ms 9223372036854775807 ms"),
        "{reason}"
    );
    let reason = with(Oneof::Sample(pb::ClusterSample {
        timestamp_ms: i64::MIN,
        ..Default::default()
    }));
    assert!(
        reason.contains("cluster sample 0 has timestamp_ms"),
        "{reason}"
    );
    let reason = with(Oneof::Usage(pb::UsageSample {
        timestamp_ms: -1,
        pod: "web-1".to_owned(),
        ..Default::default()
    }));
    assert!(
        reason.contains("usage sample 0 has timestamp_ms -1"),
        "{reason}"
    );

    let mut records = valid_records();
    if let Some(Oneof::Header(header)) = records.first_mut() {
        header.end_time = Some(ksim_trace::time::timestamp(-1));
    }
    let (offset, reason) = corrupt_reason(read(&compress(&framed(&records))));
    assert_eq!(offset, 0);
    assert!(reason.contains("the header has end_time -1 ms"), "{reason}");
}

#[test]
fn the_first_and_last_times_a_trace_can_hold_are_read() {
    let mut records = valid_records();
    records.insert(1, Oneof::Event(event(0, Vec::new())));
    records.insert(4, Oneof::Event(event(ksim_trace::time::MAX_MS, Vec::new())));
    if let Some(Oneof::Trailer(trailer)) = records.last_mut() {
        trailer.event_count = 4;
    }
    let trace = read(&compress(&framed(&records))).unwrap();
    let times: Vec<i64> = trace.events.iter().map(|e| e.timestamp_ms).collect();
    assert_eq!(times, [0, 1_000, 1_000, ksim_trace::time::MAX_MS]);
}
