//! Writes `{"mib": N}` mebibytes of log lines on each stream, then answers.
fn main() {
    wasmloop_test_guest::serve(|value| {
        let mib = value["mib"].as_u64().unwrap_or(1) as usize;
        let line = "x".repeat(1023);
        for _ in 0..mib * 1024 {
            wasmloop_test_guest::log_stdout(&line);
            wasmloop_test_guest::log_stderr(&line);
        }
        wasmloop_test_guest::log_stderr("last log line");
        value
    });
}
