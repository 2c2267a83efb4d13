//! Telling the trace formats apart from a file's first bytes.

use crate::pb;
use crate::source::ZSTD_MAGIC;

/// The format of a trace file judged from its first bytes (two are enough; four make a ksim
/// file certain): [`pb::TraceFormat::Ksim`] for a zstd frame, [`pb::TraceFormat::SimkubeV2`]
/// for a MessagePack map whose first key is a string (a SimKube trace of any version, so the
/// converter can name the version it refuses), `None` for anything else.
pub fn detect_format(prefix: &[u8]) -> Option<pb::TraceFormat> {
    if prefix.len() >= ZSTD_MAGIC.len() && prefix.starts_with(&ZSTD_MAGIC) {
        return Some(pb::TraceFormat::Ksim);
    }
    let (&first, rest) = prefix.split_first()?;
    // fixmap with at least one entry, map 16, map 32.
    let is_map = matches!(first, 0x81..=0x8f | 0xde | 0xdf);
    let first_key = match first {
        0xde => rest.get(2),
        0xdf => rest.get(4),
        _ => rest.first(),
    };
    // fixstr, str 8, str 16, str 32: serde's named encoding keys maps by field name.
    let key_is_string = first_key.is_some_and(|&key| matches!(key, 0xa0..=0xbf | 0xd9..=0xdb));
    (is_map && key_is_string).then_some(pb::TraceFormat::SimkubeV2)
}

#[cfg(test)]
mod tests {
    use super::detect_format;
    use crate::pb::TraceFormat;
    use crate::test_support::sample_file;

    #[test]
    fn recognises_a_ksim_file() {
        assert_eq!(detect_format(&sample_file()), Some(TraceFormat::Ksim));
    }

    #[test]
    fn recognises_messagepack_maps_keyed_by_strings() {
        // {"version": 2}
        assert_eq!(
            detect_format(b"\x81\xa7version\x02"),
            Some(TraceFormat::SimkubeV2)
        );
        // map 16 with 2 entries, first key a str 8.
        assert_eq!(
            detect_format(b"\xde\x00\x02\xd9\x07version"),
            Some(TraceFormat::SimkubeV2)
        );
    }

    #[test]
    fn refuses_everything_else() {
        for prefix in [
            &b""[..],
            b"\x28\xb5\x2f",     // part of the zstd magic only
            b"{\"version\":2}",  // JSON
            b"\x80",             // empty map
            b"\x81",             // map without its key
            b"\x81\x01\x02",     // map keyed by an integer
            b"\x92\x01\x02",     // array
            b"apiVersion: v1\n", // YAML
        ] {
            assert_eq!(detect_format(prefix), None, "{prefix:?}");
        }
    }
}
