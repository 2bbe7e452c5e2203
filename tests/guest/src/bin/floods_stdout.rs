//! Answers `{"lines": N}` and, in the same write, N short stray lines on its result
//! channel: one write, so that the guest gives the host no chance to take the answer
//! before the stray lines are all there, however loaded the machine.
use std::io::{BufRead, Write};

fn main() {
    let mut out = wasmloop_test_guest::result_channel();
    for line in std::io::stdin().lock().lines() {
        let request: wasmloop_test_guest::Value = serde_json::from_str(&line.unwrap()).unwrap();
        let lines = request["value"]["lines"].as_u64().unwrap_or(0);
        let mut written = format!("{{\"lines\":{lines}}}\n");
        written.push_str(&"x\n".repeat(lines as usize));
        out.write_all(written.as_bytes()).unwrap();
        out.flush().unwrap();
    }
}
