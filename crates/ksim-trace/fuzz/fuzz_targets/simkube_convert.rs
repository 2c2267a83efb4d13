//! Any bytes given to the SimKube converter must yield a valid ksim trace or an error, never a
//! panic.
#![no_main]

use ksim_trace::{read_trace, simkube};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((file, conversion)) = simkube::convert(data, Vec::new(), "fuzz") {
        // What the converter writes, the reader must accept, with the counts it reported.
        let trace = match read_trace(&file) {
            Ok(trace) => trace,
            Err(error) => panic!("converted trace does not read back: {error}"),
        };
        assert_eq!(trace.events.len() as u64, conversion.events);
        assert_eq!(trace.lifecycles.len() as u64, conversion.lifecycles);
    }
});
