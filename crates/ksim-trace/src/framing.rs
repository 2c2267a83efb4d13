//! Length-delimited records: encoding them for the writer, and reading them back from the
//! decompressed stream with every length checked before anything is allocated for it.

use std::io::{self, BufRead, Read};

use prost::Message;

use crate::source::classify;
use crate::{MAX_RECORD_BYTES, TraceError, pb};

/// Field numbers of `TraceRecord.record`'s variants.
pub(crate) const HEADER_FIELD: u8 = 1;
pub(crate) const EVENT_FIELD: u8 = 2;
pub(crate) const LIFECYCLE_FIELD: u8 = 3;
pub(crate) const TRAILER_FIELD: u8 = 4;
pub(crate) const SAMPLE_FIELD: u8 = 5;
pub(crate) const NODE_FIELD: u8 = 6;
pub(crate) const USAGE_FIELD: u8 = 7;

/// Protobuf wire type of an embedded message.
const LENGTH_DELIMITED: u8 = 2;

/// A varint of a 64-bit value takes at most 10 bytes.
const MAX_VARINT_BYTES: u32 = 10;

/// Appends `message` to `buf` as a length-delimited `TraceRecord` whose oneof field number
/// `field` holds it. Encoding the oneof by hand spares cloning the message into a `TraceRecord`.
pub(crate) fn encode_record<M: Message>(
    field: u8,
    message: &M,
    buf: &mut Vec<u8>,
) -> Result<(), TraceError> {
    let message_len = message.encoded_len();
    let record_len = 1 + prost::length_delimiter_len(message_len) + message_len;
    if record_len > MAX_RECORD_BYTES {
        return Err(TraceError::invalid(format!(
            "the record would take {record_len} bytes, over the limit of {MAX_RECORD_BYTES}"
        )));
    }
    buf.reserve(prost::length_delimiter_len(record_len) + record_len);
    // A Vec grows as needed, so these encodings cannot run out of space.
    let encoded = prost::encode_length_delimiter(record_len, buf)
        .map(|()| buf.push((field << 3) | LENGTH_DELIMITED))
        .and_then(|()| prost::encode_length_delimiter(message_len, buf))
        .and_then(|()| message.encode(buf));
    encoded.map_err(|error| TraceError::invalid(format!("cannot encode the record: {error}")))
}

/// One record read from the stream, with the offset of its length prefix.
#[derive(Debug)]
pub(crate) struct Frame {
    pub(crate) offset: u64,
    pub(crate) record: pb::trace_record::Record,
}

/// Reads length-delimited records from a decompressed stream, tracking the offset.
#[derive(Debug)]
pub(crate) struct RecordStream<B> {
    input: B,
    offset: u64,
}

impl<B: BufRead> RecordStream<B> {
    pub(crate) fn new(input: B) -> Self {
        Self { input, offset: 0 }
    }

    /// Bytes of the decompressed stream consumed so far.
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    pub(crate) fn get_ref(&self) -> &B {
        &self.input
    }

    pub(crate) fn get_mut(&mut self) -> &mut B {
        &mut self.input
    }

    /// The next record; `None` when the stream ends exactly between records.
    pub(crate) fn next_frame(&mut self) -> Result<Option<Frame>, TraceError> {
        let start = self.offset;
        let Some(len) = self.read_length()? else {
            return Ok(None);
        };
        if len > MAX_RECORD_BYTES as u64 {
            return Err(TraceError::corrupt(
                start,
                format!("record length {len} is over the limit of {MAX_RECORD_BYTES} bytes"),
            ));
        }
        // Read through `take` rather than into a buffer of `len` bytes, so a lying length
        // costs no more memory than the data actually present.
        let mut body = Vec::new();
        let read = (&mut self.input).take(len).read_to_end(&mut body);
        self.offset += body.len() as u64;
        read.map_err(|error| classify(error, self.offset))?;
        if (body.len() as u64) < len {
            return Err(TraceError::Truncated {
                offset: self.offset,
            });
        }
        let record = pb::TraceRecord::decode(body.as_slice()).map_err(|error| {
            TraceError::corrupt(start, format!("the record does not decode: {error}"))
        })?;
        match record.record {
            Some(record) => Ok(Some(Frame {
                offset: start,
                record,
            })),
            None => Err(TraceError::corrupt(
                start,
                "the record is empty: none of header, event, lifecycle or trailer is set",
            )),
        }
    }

    /// Whether the stream has ended; reads at most one byte.
    pub(crate) fn at_end(&mut self) -> Result<bool, TraceError> {
        Ok(self.read_byte()?.is_none())
    }

    /// Reads a record's varint length prefix; `None` at a clean end of the stream.
    fn read_length(&mut self) -> Result<Option<u64>, TraceError> {
        let start = self.offset;
        let mut value = 0u64;
        for index in 0..MAX_VARINT_BYTES {
            let Some(byte) = self.read_byte()? else {
                if index == 0 {
                    return Ok(None);
                }
                return Err(TraceError::Truncated {
                    offset: self.offset,
                });
            };
            let bits = u64::from(byte & 0x7f);
            // The tenth byte holds only the top bit of a u64.
            if index == MAX_VARINT_BYTES - 1 && bits > 1 {
                return Err(TraceError::corrupt(
                    start,
                    "the record length is not a valid varint: it overflows 64 bits",
                ));
            }
            value |= bits << (7 * index);
            if byte & 0x80 == 0 {
                return Ok(Some(value));
            }
        }
        Err(TraceError::corrupt(
            start,
            "the record length is not a valid varint: it runs over 10 bytes",
        ))
    }

    fn read_byte(&mut self) -> Result<Option<u8>, TraceError> {
        loop {
            match self.input.fill_buf() {
                Ok(buf) => {
                    let Some(&byte) = buf.first() else {
                        return Ok(None);
                    };
                    self.input.consume(1);
                    self.offset += 1;
                    return Ok(Some(byte));
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(classify(error, self.offset)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use prost::Message;

    use super::{EVENT_FIELD, HEADER_FIELD, LIFECYCLE_FIELD, RecordStream, TRAILER_FIELD};
    use crate::test_support::{sample_event, sample_header, sample_lifecycle};
    use crate::{MAX_RECORD_BYTES, TraceError, pb};

    use pb::trace_record::Record as Oneof;

    fn hand_encoded<M: Message>(field: u8, message: &M) -> Vec<u8> {
        let mut buf = Vec::new();
        super::encode_record(field, message, &mut buf).unwrap();
        buf
    }

    fn prost_encoded(record: Oneof) -> Vec<u8> {
        pb::TraceRecord {
            record: Some(record),
        }
        .encode_length_delimited_to_vec()
    }

    #[test]
    fn hand_encoding_matches_prost_for_every_variant() {
        let header = sample_header();
        let event = sample_event(1_000, "web");
        let lifecycle = sample_lifecycle("web", 0);
        let trailer = pb::TraceTrailer {
            event_count: 1,
            lifecycle_count: 2,
            object_count: 3,
            ..Default::default()
        };
        assert_eq!(
            hand_encoded(HEADER_FIELD, &header),
            prost_encoded(Oneof::Header(header))
        );
        assert_eq!(
            hand_encoded(EVENT_FIELD, &event),
            prost_encoded(Oneof::Event(event))
        );
        assert_eq!(
            hand_encoded(LIFECYCLE_FIELD, &lifecycle),
            prost_encoded(Oneof::Lifecycle(lifecycle))
        );
        assert_eq!(
            hand_encoded(TRAILER_FIELD, &trailer),
            prost_encoded(Oneof::Trailer(trailer))
        );
    }

    #[test]
    fn reads_records_back_with_their_offsets() {
        let mut data = hand_encoded(HEADER_FIELD, &sample_header());
        let second = data.len() as u64;
        data.extend(hand_encoded(EVENT_FIELD, &sample_event(5, "a")));
        let mut stream = RecordStream::new(data.as_slice());
        let first = stream.next_frame().unwrap().unwrap();
        assert_eq!(first.offset, 0);
        assert!(matches!(first.record, Oneof::Header(_)));
        let event = stream.next_frame().unwrap().unwrap();
        assert_eq!(event.offset, second);
        assert!(matches!(event.record, Oneof::Event(ref e) if e.timestamp_ms == 5));
        assert!(stream.next_frame().unwrap().is_none());
        assert_eq!(stream.offset(), data.len() as u64);
    }

    #[test]
    fn refuses_a_length_over_the_limit_before_reading_it() {
        let mut data = Vec::new();
        prost::encode_length_delimiter(MAX_RECORD_BYTES + 1, &mut data).unwrap();
        match RecordStream::new(data.as_slice()).next_frame() {
            Err(TraceError::Corrupt { offset: 0, reason }) => {
                assert!(reason.contains("over the limit"), "{reason}");
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    #[test]
    fn refuses_bad_varints() {
        let too_long = [0xffu8; 11];
        let overflow = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        for data in [&too_long[..], &overflow[..]] {
            match RecordStream::new(data).next_frame() {
                Err(TraceError::Corrupt { offset: 0, reason }) => {
                    assert!(reason.contains("varint"), "{reason}");
                }
                other => panic!("expected Corrupt, got {other:?}"),
            }
        }
    }

    #[test]
    fn reports_truncation_inside_the_length_and_the_body() {
        let mut mid_varint = RecordStream::new(&[0x80u8][..]);
        assert!(matches!(
            mid_varint.next_frame(),
            Err(TraceError::Truncated { offset: 1 })
        ));
        let mut mid_body = RecordStream::new(&[10u8, 1, 2, 3][..]);
        assert!(matches!(
            mid_body.next_frame(),
            Err(TraceError::Truncated { offset: 4 })
        ));
    }

    #[test]
    fn refuses_empty_and_undecodable_records() {
        match RecordStream::new(&[0u8][..]).next_frame() {
            Err(TraceError::Corrupt { reason, .. }) => assert!(reason.contains("empty")),
            other => panic!("expected Corrupt, got {other:?}"),
        }
        // Field 1, wire type 2, length 5, but only 1 byte follows inside the record.
        match RecordStream::new(&[3u8, 0x0a, 5, 0][..]).next_frame() {
            Err(TraceError::Corrupt { reason, .. }) => {
                assert!(reason.contains("does not decode"), "{reason}");
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }
}
