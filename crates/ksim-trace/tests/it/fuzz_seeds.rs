//! Seed inputs for the fuzz targets in `fuzz/`: checked here, and written into the fuzz
//! corpus when `KSIM_FUZZ_SEEDS_DIR` is set (`deploy/fuzz.sh` does so).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ksim_trace::{read_trace, simkube};

/// (fuzz target, file name, bytes).
fn seeds() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let (file, _) = crate::common::valid_file();
    let stream = zstd::stream::decode_all(file.as_slice()).unwrap();
    let simkube = crate::common::simkube::encode(&crate::common::simkube::sample());
    vec![
        ("trace_reader", "valid.ksimtrace", file),
        // The target also compresses its input, so the bare record stream reaches the records.
        ("trace_reader", "valid.records", stream),
        ("simkube_convert", "sample.sktrace", simkube),
    ]
}

#[test]
fn seeds_are_valid_inputs() {
    let seeds = seeds();
    for (target, name, bytes) in &seeds {
        match *target {
            "trace_reader" if name.ends_with(".records") => {
                read_trace(&zstd::stream::encode_all(bytes.as_slice(), 1).unwrap()).unwrap();
            }
            "trace_reader" => {
                read_trace(bytes).unwrap();
            }
            _ => {
                let (_, conversion) = simkube::convert(bytes, Vec::new(), "seed").unwrap();
                assert!(conversion.events > 0);
            }
        }
    }
    if let Some(dir) = std::env::var_os("KSIM_FUZZ_SEEDS_DIR") {
        let dir = std::path::PathBuf::from(dir);
        for (target, name, bytes) in seeds {
            let target_dir = dir.join(target);
            std::fs::create_dir_all(&target_dir).unwrap();
            std::fs::write(target_dir.join(name), bytes).unwrap();
        }
    }
}
