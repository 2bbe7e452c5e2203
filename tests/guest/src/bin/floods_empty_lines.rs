//! Logs `{"mib": N}` MiB of empty lines on stderr (a newline, over and over) in 1 MiB
//! writes, then answers: in JSON logs, each is a record of its own.
use std::io::Write;

fn main() {
    wasmloop_test_guest::serve(|value| {
        let mib = value["mib"].as_u64().unwrap_or(1) as usize;
        let chunk = vec![b'\n'; 1 << 20];
        let mut stderr = std::io::stderr();
        for _ in 0..mib {
            stderr.write_all(&chunk).unwrap();
        }
        value
    });
}
