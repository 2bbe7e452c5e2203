//! Logs one line on stderr in `{"pieces": N}` separate writes, then answers.
use std::io::Write;

fn main() {
    wasmloop_test_guest::serve(|value| {
        let pieces = value["pieces"].as_u64().unwrap_or(100);
        let tag = value["tag"].as_u64().unwrap_or(0);
        let mut stderr = std::io::stderr();
        write!(stderr, "pieces {tag}:").unwrap();
        for _ in 0..pieces {
            stderr.write_all(&[b'a' + (tag % 26) as u8]).unwrap();
        }
        stderr.write_all(b"\n").unwrap();
        value
    });
}
