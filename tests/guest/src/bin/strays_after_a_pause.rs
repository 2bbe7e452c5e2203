//! Answers, keeps busy for 30 ms (past an epoch tick, where a wasm guest yields), then
//! writes a stray line before it reads the next request: the stray line must not pass for
//! the next activation's answer.
use std::io::BufRead;

use wasmloop_test_guest::{json, result_channel, write_raw, Value};

fn main() {
    let mut out = result_channel();
    for line in std::io::stdin().lock().lines() {
        let request: Value = serde_json::from_str(&line.unwrap()).unwrap();
        let value = &request["value"];
        write_raw(&mut *out, &value.to_string());
        let busy = std::time::Instant::now();
        while busy.elapsed() < std::time::Duration::from_millis(30) {
            std::hint::spin_loop();
        }
        write_raw(&mut *out, &json!({ "stray": value }).to_string());
    }
}
