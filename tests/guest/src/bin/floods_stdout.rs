//! Answers `{"lines": N}`, then writes N short stray lines on its result channel before it
//! reads the next request.
use std::io::{BufRead, Write};

fn main() {
    let mut out = wasmloop_test_guest::result_channel();
    for line in std::io::stdin().lock().lines() {
        let request: wasmloop_test_guest::Value = serde_json::from_str(&line.unwrap()).unwrap();
        let lines = request["value"]["lines"].as_u64().unwrap_or(0);
        wasmloop_test_guest::write_raw(&mut *out, &format!("{{\"lines\":{lines}}}"));
        out.write_all("x\n".repeat(lines as usize).as_bytes())
            .unwrap();
        out.flush().unwrap();
    }
}
