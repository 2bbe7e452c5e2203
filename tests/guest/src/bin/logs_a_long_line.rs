//! Logs `{"mib": N}` MiB on stderr as one line with no newline (ASCII and two- and
//! three-byte characters: `LONG_LINE_UNIT` over and over), in 1 MiB writes, then answers.
use std::io::Write;

use wasmloop_test_guest::LONG_LINE_UNIT;

fn main() {
    wasmloop_test_guest::serve(|value| {
        let mib = value["mib"].as_u64().unwrap_or(1) as usize;
        let chunk = LONG_LINE_UNIT.repeat((1 << 20) / LONG_LINE_UNIT.len());
        let mut stderr = std::io::stderr();
        for _ in 0..mib {
            stderr.write_all(chunk.as_bytes()).unwrap();
        }
        value
    });
}
