//! Any bytes given to the trace reader must yield records or an error, never a panic, and
//! `inspect` must agree with the reader on whether the file is valid.
#![no_main]

use ksim_trace::{TraceReader, detect_format, inspect};
use libfuzzer_sys::fuzz_target;

fn read_all(file: &[u8]) {
    let read = TraceReader::new(file).and_then(|mut reader| {
        while reader.next_record()?.is_some() {}
        Ok(())
    });
    let inspected = inspect::inspect(file);
    assert_eq!(
        read.is_ok(),
        inspected.is_ok(),
        "reader and inspect disagree"
    );
    let _ = detect_format(file);
}

fuzz_target!(|data: &[u8]| {
    read_all(data);
    // Random bytes rarely form a zstd frame: read them as the decompressed record stream too.
    if let Ok(compressed) = zstd::stream::encode_all(data, 1) {
        read_all(&compressed);
    }
});
